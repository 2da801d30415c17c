// compile_fx.cpp — see compile_fx.h.
#include "inductor/compile_fx.h"

#include <chrono>

#include "backends/training.h"
#include "capture/compile_log.h"
#include "capture/compile_stats.h"
#include "codegen/c_style.h"
#include "codegen/cpp_kernel.h"
#include "codegen/cuda_kernel.h"
#include "fusion/schedule.h"
#include "inductor/autotune.h"
#include "runtime/cuda_graph_replay.h"
#include "tensor/metrics.h"

namespace mini::inductor {

namespace cap = mini::capture;
using backends::CompileOptions;
using backends::Runner;

std::shared_ptr<runtime::CompiledGraph> compile_cpp_graph(const graph::Graph& g, const std::string& cache_dir) {
  auto start = std::chrono::steady_clock::now();
  auto since = [&] { return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count(); };
  runtime::require_known_sizes(g);
  auto cg = std::make_shared<runtime::CompiledGraph>();
  cg->schedule = fusion::schedule(g);
  codegen::name_kernels(cg->schedule, codegen::kCppTarget);
  cg->schedule_seconds = since();
  cg->source = codegen::render_cpp(cg->schedule, &cg->functions);
  cg->codegen_seconds = since() - cg->schedule_seconds;
  metrics().generated_kernel_count += (int64_t)cg->schedule.groups.size();
  runtime::build_library(cg.get(), cache_dir);
  cg->compile_seconds = cg->schedule_seconds + cg->codegen_seconds + cg->cxx_seconds;
  return cg;
}

std::shared_ptr<runtime::CompiledCudaGraph> compile_cuda_graph(const graph::Graph& g, const std::string& arch,
                                                               const std::string& cache_dir,
                                                               const codegen::CudaLayout* layout,
                                                               const std::vector<int>* per_kernel, bool nvrtc) {
  runtime::require_known_sizes(g);
  auto start = std::chrono::steady_clock::now();
  auto since = [&] { return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count(); };
  auto cg = std::make_shared<runtime::CompiledCudaGraph>();
  cg->schedule = fusion::schedule(g, codegen::kCudaMaxLoads, /*one_batch_stride=*/true);
  // a graph compiled for CUDA makes its tensors there: a factory of a graph traced on the CPU
  // (compiled for the GPU, as the tests do) creates on the GPU too, as its kernels' buffers do
  for (auto& n : cg->schedule.graph.nodes)
    if (op_class(n.op) == OpClass::Factory) n.attrs.device = Device::cuda(0);
  cg->layout = layout ? *layout : codegen::cuda_layout_from_env();
  cg->layouts.assign(cg->schedule.groups.size(), cg->layout);
  if (per_kernel) {
    if (per_kernel->size() != cg->layouts.size())
      fail("compile_cuda_graph: ", per_kernel->size(), " layouts for ", cg->layouts.size(), " kernels");
    for (size_t i = 0; i < cg->layouts.size(); i++) cg->layouts[i] = codegen::cuda_layout((*per_kernel)[i]);
    if (!cg->layouts.empty()) cg->layout = cg->layouts[0];
  }
  const fusion::FusionGroup* first = cg->schedule.groups.data();
  codegen::name_kernels(cg->schedule, codegen::kCudaTarget, [&](const fusion::FusionGroup& k) {
    return codegen::cuda_kernel_shape(k, cg->layouts[&k - first]);
  });
  if ((int)g.symbols.size() > codegen::kCudaMaxSymbols)
    fail("this graph has ", g.symbols.size(), " size symbols; CUDA code generation passes at most ",
         codegen::kCudaMaxSymbols, " (mark fewer dims dynamic)");
  for (const auto& k : cg->schedule.groups)
    if ((int)k.loads.size() > codegen::kCudaMaxLoads || (int)k.space.size() > codegen::kCudaMaxRank)
      fail("kernel ", k.name, " reads ", k.loads.size(), " tensors over ", k.space.size(),
           " dims; CUDA code generation handles at most ", codegen::kCudaMaxLoads, " and ", codegen::kCudaMaxRank);
  cg->schedule_seconds = since();
  std::vector<std::string> kernels = codegen::render_cuda_kernels(cg->schedule, cg->layouts);
  cg->source = codegen::join_cuda(kernels, cg->layouts);
  cg->codegen_seconds = since() - cg->schedule_seconds;
  metrics().generated_kernel_count += (int64_t)cg->schedule.groups.size();
  if (nvrtc && !cg->schedule.groups.empty()) {
    std::vector<std::string> names;
    for (const auto& k : cg->schedule.groups) names.push_back(k.name);
    cg->compiled = runtime::compile_cuda_kernels(codegen::cuda_prelude(), names, kernels, arch, cache_dir);
  }
  cg->frees = runtime::plan_frees(cg->schedule);
  for (size_t i = 0; i < cg->schedule.groups.size(); i++) {
    cg->split.push_back(codegen::cuda_split_reductions(cg->schedule, cg->schedule.groups[i], cg->layouts[i]));
    cg->column_split.push_back(codegen::cuda_column_splits(cg->schedule, cg->schedule.groups[i], cg->layouts[i]));
    cg->column_vector.push_back(codegen::cuda_column_vector(cg->schedule, cg->schedule.groups[i], cg->layouts[i]));
    cg->aligned.push_back(codegen::cuda_assumes_aligned(cg->schedule, cg->schedule.groups[i], cg->layouts[i]));
  }
  return cg;
}

namespace {

// What either renderer tells about a compiled graph: the fusion decisions (MINI_LOGS=fusion),
// the generated source (MINI_LOGS=output_code, where it was compiled or read from) and both as
// MINI_COMPILE_DEBUG files ("output_code<suffix>.<ext>", the suffix "" or "_forward", ...).
void report(const CompileOptions& o, const fusion::Schedule& schedule, const std::string& source,
            const std::string& ext, const std::string& where) {
  std::string text = "fusion decisions for " + o.title + ":\n";
  for (const auto& d : schedule.decisions) text += "  " + d.text + "\n";
  if (cap::log_channels().fusion) cap::log_write(text);
  std::string suffix = o.title.size() > o.debug_dir.size() ? o.title.substr(o.debug_dir.size()) : "";
  cap::debug_write(o.debug_dir, "fusion" + suffix + ".txt", text);
  cap::debug_write(o.debug_dir, "output_code" + suffix + "." + ext, source);
  if (cap::log_channels().output_code)
    cap::log_write("Output code for " + o.title + " (" + where + "):\n" + codegen::without_prelude(source));
}

// A compile's stages into mini.compiler.stats() (capture/compile_stats.h): fusion, codegen, then
// the compiler or a disk-cache hit (the C++ compile includes its dlopen).
void count_stages(double schedule, double codegen, double compile, bool from_disk_cache) {
  auto& stats = cap::compile_stats();
  stats.add(cap::Stage::Fusion, schedule);
  stats.add(cap::Stage::Codegen, codegen);
  stats.add(from_disk_cache ? cap::Stage::DiskCache : cap::Stage::Compile, compile);
}

// mode="max-autotune": every kernel layout timed at the first call, the fastest kept; the
// choice told once (MINI_LOGS=fusion).
Runner autotuned(const graph::Graph& g, const CompileOptions& o) {
  auto tuner = std::make_shared<CudaAutotune>(g, "", o.cache_dir);
  auto logged = std::make_shared<bool>(false);
  std::string title = o.title;
  return [tuner, title, logged](const std::vector<Tensor>& inputs) {
    auto out = tuner->run(inputs);
    if (!*logged && cap::log_channels().fusion) {
      *logged = true;
      std::string chosen, times;
      for (int n : tuner->layouts()) chosen += cat(chosen.empty() ? "" : " ", n);
      auto ms = tuner->kernel_times_ms();
      for (size_t i = 0; i < ms.size(); i++) {
        times += cat("\n  layout ", i + 1, ":");
        for (double t : ms[i]) times += cat(" ", t, " ms");
      }
      cap::log_write(cat(title, ": mode='max-autotune' chose kernel layouts ", chosen, ", a kernel's each (",
                         times.empty() ? "read from " + tuner->path() + ")" : "each kernel's time:" + times + "\n)", "\n"));
    }
    return out;
  };
}

// A graph of CUDA tensors: rendered by codegen/cuda_kernel.cpp, compiled by NVRTC; under
// mode="reduce-overhead" replayed as a CUDA graph where it can be.
Runner compile_fx_cuda(const graph::Graph& g, const CompileOptions& o) {
  if (o.mode == "max-autotune") return autotuned(g, o);
  auto cg = compile_cuda_graph(g, "", o.cache_dir);
  const runtime::CudaKernels& compiled = cg->compiled;
  if (!compiled.kernels.empty())
    count_stages(cg->schedule_seconds, cg->codegen_seconds, compiled.seconds, compiled.nvrtc_runs == 0);
  report(o, cg->schedule, cg->source + cg->functions(), "cu",
         compiled.kernels.empty() ? std::string("no generated kernel")
                                  : cat(compiled.kernels.size(), " kernels of ", compiled.programs, " distinct bodies, ",
                                        compiled.nvrtc_runs, " compiled by NVRTC, the others from memory or ",
                                        compiled.cache_dir));
  if (o.mode == "reduce-overhead") {
    std::string why = runtime::CudaGraphReplay::why_not(*cg);
    if (why.empty()) {
      if (cap::log_channels().fusion) cap::log_write(o.title + ": mode='reduce-overhead': replayed as a CUDA graph\n");
      auto replay = std::make_shared<runtime::CudaGraphReplay>(cg);
      return [replay](const std::vector<Tensor>& inputs) { return replay->run(inputs); };
    }
    if (cap::log_channels().fusion)
      cap::log_write(o.title + ": mode='reduce-overhead' runs it without a CUDA graph: " + why + "\n");
  }
  return [cg](const std::vector<Tensor>& inputs) { return cg->run(inputs); };
}

}  // namespace

Runner compile_fx(const graph::Graph& g, const CompileOptions& o) {
  if (g.device.is_cuda()) return compile_fx_cuda(g, o);
  for (const auto& n : g.nodes)
    if (n.meta.dtype == DType::BFloat16) {  // eager kernels: math in float, rounding on store
      if (cap::log_channels().fusion)
        cap::log_write(o.title + " runs with eager kernels: bfloat16 code generation for the CPU is not implemented\n");
      return backends::interpret(std::make_shared<graph::Graph>(g));
    }
  auto cg = compile_cpp_graph(g, o.cache_dir);
  if (!cg->schedule.groups.empty())
    count_stages(cg->schedule_seconds, cg->codegen_seconds, cg->cxx_seconds, cg->from_disk_cache);
  for (const auto& w : cg->warnings) cap::warn_user(w);  // an unusable cache folder, once
  report(o, cg->schedule, cg->source, "cpp", cg->library_path + (cg->from_disk_cache ? ", from the disk cache" : ""));
  return [cg](const std::vector<Tensor>& inputs) { return cg->run(inputs); };
}

namespace {

// backend="inductor": a trained graph's halves (the recompute or min-cut partition) and every
// other graph compiled by compile_fx.
class Inductor : public backends::Backend {
 public:
  Runner compile(const graph::Graph& g, const CompileOptions& o) override {
    if (!o.training) return compile_fx(g, o);
    auto p = o.partitioner == "min-cut" ? autograd::Partitioner::MinCut : autograd::Partitioner::Recompute;
    return backends::compile_training(g, o, p, [](std::shared_ptr<graph::Graph> half, const CompileOptions& ho) {
      return compile_fx(*half, ho);
    });
  }
};

}  // namespace

void register_backends() {
  backends::register_backend("aot_eager", std::make_unique<backends::AotEager>());
  backends::register_backend("inductor", std::make_unique<Inductor>());
}

}  // namespace mini::inductor
