// bind_inductor.cpp — the inductor's pieces for Python (mini.inductor, mini._C._inductor_*):
// compiling a GraphModule's graph directly for the CPU or CUDA, the NVRTC and CUDA graph
// probes, the step profiler. The backend mini.compile uses is mini/inductor/compile_fx.cpp,
// registered here at import.
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <algorithm>
#include <cstring>
#include <functional>
#include <set>

#include "autograd/training.h"
#include "capture/convert_frame.h"
#include "codegen/cpp_kernel.h"
#include "codegen/cuda_kernel.h"
#include "inductor/autotune.h"
#include "inductor/compile_fx.h"
#include "runtime/compiled_graph.h"
#include "runtime/cuda_graph_replay.h"
#include "runtime/cuda_program.h"
#include "runtime/nvrtc.h"
#include "tensor/cuda/cuda.h"

namespace py = pybind11;
namespace cap = mini::capture;

namespace {

// What compile_cpp_graph has to tell the user once (an unusable cache folder), as Python warnings.
void warn(const mini::runtime::CompiledGraph& cg) {
  for (const auto& w : cg.warnings)
    if (PyErr_WarnEx(PyExc_UserWarning, w.c_str(), 1) < 0) throw py::error_already_set();
}

// A Python function of tensors (*args) -> tuple of tensors, over the runner of graph `g`
// compiled, called directly (tests, labs): the inputs are checked against the graph's sizes and
// strides first (check_inputs), as mini.compile's guards check them before a cached graph runs.
py::cpp_function tensor_function(std::shared_ptr<mini::graph::Graph> g,
                                 std::function<std::vector<mini::Tensor>(const std::vector<mini::Tensor>&)> run) {
  return py::cpp_function([g, run](py::args args) {
    std::vector<mini::Tensor> inputs;
    for (auto a : args) inputs.push_back(a.cast<mini::Tensor>());
    mini::runtime::check_inputs(*g, inputs);
    auto out = run(inputs);
    py::tuple t(out.size());
    for (size_t i = 0; i < out.size(); i++) t[i] = py::cast(out[i]);
    return t;
  });
}

}  // namespace

void bind_inductor(py::module_& m) {
  // Ctrl-C while the C++ compiler runs: Python's handler runs (KeyboardInterrupt pending) and
  // the compile stops its compilers. Handlers run on the main thread with the GIL held, which
  // a CPU compile holds; elsewhere nothing is asked.
  mini::runtime::set_interrupt_check([] { return PyGILState_Check() && PyErr_CheckSignals() != 0; });
  mini::inductor::register_backends();  // "aot_eager" and "inductor", beside "eager"
  // Compile a GraphModule's graph directly (tests, labs and benchmarks look inside).
  m.def("_inductor_compile", [](py::object gm) {
    auto g = gm.attr("_graph_ptr")().cast<std::shared_ptr<mini::graph::Graph>>();
    auto cg = mini::inductor::compile_cpp_graph(*g, cap::compile_config().cache_dir);
    warn(*cg);
    py::dict info;
    info["source"] = cg->source;
    info["kernels"] = [&] { py::list l; for (auto& k : cg->schedule.groups) l.append(k.name); return l; }();
    info["decisions"] = [&] { py::list l; for (auto& d : cg->schedule.decisions) l.append(d.text); return l; }();
    info["peak_bytes"] = cg->schedule.peak_bytes;
    info["unplanned_bytes"] = cg->schedule.unplanned_bytes;
    info["compile_seconds"] = cg->compile_seconds;
    info["schedule_seconds"] = cg->schedule_seconds;
    info["codegen_seconds"] = cg->codegen_seconds;
    info["cxx_seconds"] = cg->cxx_seconds;
    info["compile_units"] = cg->compile_units;
    info["from_disk_cache"] = cg->from_disk_cache;
    info["rejected"] = cg->rejected;
    info["library"] = cg->library_path;
    info["run"] = tensor_function(g, [cg](const std::vector<mini::Tensor>& in) { return cg->run(in); });
    return info;
  });
  m.def("_inject_codegen_error", &mini::runtime::inject_codegen_error);
  // mini.profiler's C++ side (runtime/compiled_graph.h)
  m.def("_profiler_set", &mini::runtime::set_profiling);
  m.def("_profiler_reset", &mini::runtime::reset_profile);
  m.def("_profiler_entries", [] {
    py::list out;
    for (const auto& p : mini::runtime::profile_entries())
      out.append(py::make_tuple(p.name, p.graph, p.calls, p.seconds, p.bytes));
    return out;
  });
  // The same graph compiled for CUDA (mini.inductor.compile_graph_cuda): rendering and NVRTC
  // need no GPU; run() does.
  m.def("_inductor_compile_cuda", [](py::object gm, const std::string& arch, std::vector<int> layouts, int layout) {
    auto g = gm.attr("_graph_ptr")().cast<std::shared_ptr<mini::graph::Graph>>();
    std::shared_ptr<mini::runtime::CompiledCudaGraph> cg;
    {
      py::gil_scoped_release release;
      const auto every = layout ? mini::codegen::cuda_layout(layout) : mini::codegen::CudaLayout{};
      cg = mini::inductor::compile_cuda_graph(*g, arch, cap::compile_config().cache_dir, layout ? &every : nullptr,
                                             layouts.empty() ? nullptr : &layouts);
    }
    py::dict info;
    info["source"] = cg->source;
    info["kernels"] = [&] { py::list l; for (auto& k : cg->schedule.groups) l.append(k.name); return l; }();
    info["decisions"] = [&] { py::list l; for (auto& d : cg->schedule.decisions) l.append(d.text); return l; }();
    const mini::runtime::CudaKernels& compiled = cg->compiled;
    info["arch"] = compiled.arch;
    size_t cubin_bytes = 0;
    py::list programs;  // per kernel: (its function, its program's key, the CUBIN)
    std::set<const mini::runtime::CudaProgram*> counted;
    for (const auto& k : compiled.kernels) {
      if (counted.insert(k.program.get()).second) cubin_bytes += k.program->cubin.size();
      programs.append(py::make_tuple(k.function, k.program->key, py::bytes(k.program->cubin)));
    }
    info["cubin_bytes"] = cubin_bytes;
    info["programs"] = programs;
    info["distinct_programs"] = compiled.programs;
    info["nvrtc_runs"] = compiled.nvrtc_runs;
    info["from_disk_cache"] = !compiled.kernels.empty() && compiled.nvrtc_runs == 0;  // from disk, or memory
    info["nvrtc_seconds"] = compiled.seconds;
    info["codegen_seconds"] = cg->codegen_seconds;
    info["run"] = tensor_function(g, [cg](const std::vector<mini::Tensor>& in) { return cg->run(in); });
    info["layouts"] = cg->layout_numbers();
    return info;
  }, py::arg("gm"), py::arg("arch") = "", py::arg("layouts") = std::vector<int>{}, py::arg("layout") = 0);
  // The same graph rendered for CUDA and not compiled (mini.inductor.render_graph_cuda): no CUDA
  // toolkit needed; each kernel's layout as the runtime launches it.
  m.def("_inductor_render_cuda", [](py::object gm, std::vector<int> layouts, int layout) {
    auto g = gm.attr("_graph_ptr")().cast<std::shared_ptr<mini::graph::Graph>>();
    const auto every = layout ? mini::codegen::cuda_layout(layout) : mini::codegen::CudaLayout{};
    auto cg = mini::inductor::compile_cuda_graph(*g, "", cap::compile_config().cache_dir, layout ? &every : nullptr,
                                                layouts.empty() ? nullptr : &layouts, /*nvrtc=*/false);
    py::dict info;
    info["source"] = cg->source;
    py::list kernels;
    for (size_t i = 0; i < cg->schedule.groups.size(); i++) {
      const auto& k = cg->schedule.groups[i];
      py::dict d;
      d["name"] = k.name;
      d["shape"] = mini::codegen::cuda_kernel_shape(k, cg->layouts[i]);
      d["block"] = mini::codegen::cuda_block(k, cg->layouts[i]);
      const int64_t R = mini::codegen::cuda_row_length(k);
      d["row_threads"] = k.reduced.empty() ? 0 : mini::codegen::cuda_reduction_threads(R, cg->layouts[i]);
      d["rows_per_block"] = k.reduced.empty() ? 0 : mini::codegen::cuda_rows_per_block(R, cg->layouts[i]);
      d["split"] = cg->split[i];
      d["column_split"] = cg->column_split[i];
      d["column_vector"] = cg->column_vector[i];
      d["layout"] = cg->layouts[i].number;
      kernels.append(d);
    }
    info["kernels"] = kernels;
    info["decisions"] = [&] { py::list l; for (auto& d : cg->schedule.decisions) l.append(d.text); return l; }();
    return info;
  }, py::arg("gm"), py::arg("layouts") = std::vector<int>{}, py::arg("layout") = 0);
  // A10's decisions one at a time (mini/codegen/cuda_launch.h), for tests and the lab
  m.def("_cuda_reduction_threads", [](int64_t rnumel, int layout) {
    return mini::codegen::cuda_reduction_threads(rnumel, mini::codegen::cuda_layout(layout));
  });
  m.def("_cuda_rows_per_block", [](int64_t rnumel, int layout) {
    return mini::codegen::cuda_rows_per_block(rnumel, mini::codegen::cuda_layout(layout));
  });
  m.def("_cuda_min_blocks_per_sm", [](int threads, int layout) {
    return mini::codegen::cuda_min_blocks_per_sm(threads, mini::codegen::cuda_layout(layout));
  });
  m.def("_cuda_split_grid", &mini::codegen::cuda_split_grid);
  m.def("_cuda_column_split_grid", &mini::codegen::cuda_column_split_grid, py::arg("cols"), py::arg("rnumel"),
        py::arg("resident"), py::arg("vector") = 1);
  m.def("_cuda_column_max_splits", [] { return mini::codegen::cuda_column_max_splits(); });
  m.def("_cuda_layout", [](int number) {
    const auto l = mini::codegen::cuda_layout(number);
    py::dict d;
    d["number"] = l.number;
    d["vector_pointwise"] = l.vector_pointwise;
    d["row_registers"] = l.row_registers;
    d["vector_rows"] = l.vector_rows;
    d["lean_rows"] = l.lean_rows;
    d["vector_loop_rows"] = l.vector_loop_rows;
    d["online_softmax"] = l.online_softmax;
    d["unroll_rows"] = l.unroll_rows;
    d["row_max_registers"] = l.row_max_registers;
    d["pointwise_one_pass"] = l.pointwise_one_pass;
    d["warp_rows"] = l.warp_rows;
    d["block_threads"] = mini::codegen::kCudaThreads;
    return d;
  });
  // mode="max-autotune" on a captured graph, directly: run() tunes at its first call; layouts()
  // (a kernel's each), times_ms() (per layout) and kernel_times_ms() (per layout, per kernel)
  // say what it chose and why (the times are empty when the choice came from the cache).
  m.def("_inductor_autotune_cuda", [](py::object gm) {
    auto g = gm.attr("_graph_ptr")().cast<std::shared_ptr<mini::graph::Graph>>();
    auto tuner = std::make_shared<mini::inductor::CudaAutotune>(*g, "", cap::compile_config().cache_dir);
    py::dict info;
    info["run"] = tensor_function(g, [tuner](const std::vector<mini::Tensor>& in) { return tuner->run(in); });
    info["layouts"] = py::cpp_function([tuner] { return tuner->layouts(); });
    info["times_ms"] = py::cpp_function([tuner] { return tuner->times_ms(); });
    info["kernel_times_ms"] = py::cpp_function([tuner] { return tuner->kernel_times_ms(); });
    info["path"] = tuner->path();
    return info;
  });
  // A training graph (inputs requiring grad) compiled for CUDA: the joint graph partitioned as
  // the inductor backend does (mini.config.partitioner), each half rendered and compiled by NVRTC; a training
  // runner over the two CUDA programs (run() needs a GPU).
  m.def("_inductor_compile_training_cuda", [](py::object gm, const std::string& arch) {
    namespace ag = mini::autograd;
    auto g = gm.attr("_graph_ptr")().cast<std::shared_ptr<mini::graph::Graph>>();
    if (!ag::needs_training_graphs(*g))
      throw py::value_error("no input of this graph requires grad: compile it with _inductor_compile_cuda");
    const ag::Partitioner p =
        cap::compile_config().partitioner == "min-cut" ? ag::Partitioner::MinCut : ag::Partitioner::Recompute;
    auto tg = std::make_shared<ag::TrainingGraphs>(ag::make_training_graphs(*g, p));
    std::shared_ptr<mini::runtime::CompiledCudaGraph> fwd, bwd;
    {
      py::gil_scoped_release release;
      fwd = mini::inductor::compile_cuda_graph(*tg->forward, arch, cap::compile_config().cache_dir);
      bwd = mini::inductor::compile_cuda_graph(*tg->backward, arch, cap::compile_config().cache_dir);
    }
    auto kernels = [](const mini::runtime::CompiledCudaGraph& cg) {
      py::list l;
      for (auto& k : cg.schedule.groups) l.append(k.name);
      return l;
    };
    py::dict info;
    info["forward_source"] = fwd->source;
    info["backward_source"] = bwd->source;
    info["forward_kernels"] = kernels(*fwd);
    info["backward_kernels"] = kernels(*bwd);
    auto decisions = [](const mini::runtime::CompiledCudaGraph& cg) {
      py::list l;
      for (auto& d : cg.schedule.decisions) l.append(d.text);
      return l;
    };
    info["forward_decisions"] = decisions(*fwd);
    info["backward_decisions"] = decisions(*bwd);
    auto runner = ag::make_training_runner(
        tg, [fwd](const std::vector<mini::Tensor>& in) { return fwd->run(in); },
        [bwd](const std::vector<mini::Tensor>& in) { return bwd->run(in); },
        [arch](std::shared_ptr<mini::graph::Graph> variant, const std::string&) -> ag::Runner {
          auto cg = mini::inductor::compile_cuda_graph(*variant, arch, cap::compile_config().cache_dir);
          return [cg](const std::vector<mini::Tensor>& in) { return cg->run(in); };
        });
    info["run"] = tensor_function(g, runner);
    return info;
  }, py::arg("gm"), py::arg("arch") = "");

  // CUDA programs (mini.inductor.compile_cuda): NVRTC to a CUBIN through the disk cache, without
  // a GPU; load and launch where there is one.
  m.def("_nvrtc_version", []() -> py::object {
    if (!mini::runtime::nvrtc::available()) return py::none();
    return py::cast(mini::runtime::nvrtc::version());
  });
  m.def("_nvrtc_unavailable_reason", &mini::runtime::nvrtc::unavailable_reason);
  // the kernel caches' counts in this process (cuda_program.h): what a test of deduplication reads
  m.def("_cuda_kernel_cache_stats", []() {
    auto s = mini::runtime::cuda_kernel_cache_stats();
    py::dict d;
    d["nvrtc_compiles"] = s.nvrtc_compiles;
    d["disk_hits"] = s.disk_hits;
    d["memory_hits"] = s.memory_hits;
    d["programs"] = s.programs;
    return d;
  });
  m.def("_default_cuda_arch", &mini::runtime::default_cuda_arch);
  m.def("_cuda_layouts", []() { return mini::codegen::kCudaLayouts; });
  m.def("_cuda_default_layout", []() { return mini::codegen::kCudaDefaultLayout; });
  m.def("_compile_cuda", [](const std::string& source, const std::string& arch) {
    std::shared_ptr<mini::runtime::CudaProgram> p;
    {
      py::gil_scoped_release release;  // NVRTC takes a while; other Python threads go on
      p = mini::runtime::compile_cuda(source, arch, cap::compile_config().cache_dir);
    }
    for (const auto& w : p->warnings)
      if (PyErr_WarnEx(PyExc_UserWarning, w.c_str(), 1) < 0) throw py::error_already_set();
    py::dict info;
    info["arch"] = p->arch;
    info["key"] = p->key;
    info["path"] = p->path;
    info["cubin"] = py::bytes(p->cubin);
    info["log"] = p->log;
    info["from_disk_cache"] = p->from_disk_cache;
    info["rejected"] = p->rejected;
    info["compile_seconds"] = p->compile_seconds;
    // launch(name, grid, block, args, shared_bytes): args are CUDA tensors (their data pointers),
    // floats (passed as float) and ints (as int64), in the kernel's parameter order
    info["launch"] = py::cpp_function([p](const std::string& name, std::vector<unsigned> grid,
                                          std::vector<unsigned> block, py::list args,
                                          size_t shared_bytes) {
      if (grid.size() != 3 || block.size() != 3)
        throw py::value_error("grid and block are three numbers each, (x, y, z)");
      p->load({name});
      std::vector<uint64_t> slots(args.size());
      std::vector<void*> pointers(args.size());
      for (size_t i = 0; i < args.size(); i++) {
        py::handle a = args[i];
        if (py::isinstance<py::bool_>(a) || py::isinstance<py::int_>(a)) {
          int64_t v = a.cast<int64_t>();
          std::memcpy(&slots[i], &v, sizeof v);
        } else if (py::isinstance<py::float_>(a)) {
          float v = a.cast<float>();
          std::memcpy(&slots[i], &v, sizeof v);
        } else {
          mini::Tensor t;
          try {
            t = a.cast<mini::Tensor>();  // a mini.Tensor (the Python class wraps the C++ one)
          } catch (const py::cast_error&) {
            throw py::type_error(mini::cat("argument ", i, " of kernel ", name, " is a ",
                                           std::string(py::str(py::type::handle_of(a).attr("__name__"))),
                                           "; pass CUDA tensors, floats or ints"));
          }
          if (!t || !t->is_cuda())
            throw py::value_error(mini::cat("argument ", i, " of kernel ", name, " is a tensor on ",
                                            t ? t->device().str() : std::string("no device"),
                                            "; a kernel reads CUDA tensors (.cuda())"));
          void* ptr = t->device_raw();
          std::memcpy(&slots[i], &ptr, sizeof ptr);
        }
        pointers[i] = &slots[i];
      }
      mini::cuda::launch_kernel(p->kernels.at(name), grid.data(), block.data(), pointers.data(),
                                shared_bytes, name.c_str());
    });
    return info;
  }, py::arg("source"), py::arg("arch") = "");
}
