// cuda_graph.cpp — see cuda_graph.h.
#include "runtime/cuda_graph.h"

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <deque>
#include <fstream>
#include <numeric>
#include <set>
#include <sstream>

#include "codegen/c_style.h"
#include "codegen/cuda_kernel.h"
#include "runtime/cache_entry.h"
#include "tensor/cuda/cuda.h"
#include "tensor/metrics.h"
#include "tensor/ops.h"

namespace mini::runtime {

namespace {

// The host image of the prelude's mini::Sizes, passed by value to every kernel.
struct Sizes {
  int64_t symbols[codegen::kCudaMaxSymbols];
  int64_t strides[codegen::kCudaMaxLoads][codegen::kCudaMaxRank];
};
static_assert(sizeof(Sizes) == 8 * (64 + 16 * 8), "mini::Sizes of the CUDA prelude");

// A fresh CUDA tensor of t's sizes and strides from offset 0 of its own allocation (which
// mini's allocator aligns), holding what t holds where `copy` is set.
Tensor same_layout(const Tensor& t, bool copy) {
  int64_t span = t->numel() == 0 ? 0 : 1;  // the elements t's layout reaches, from offset 0
  for (size_t d = 0; d < t->sizes.size(); d++)
    if (t->numel()) span += (t->sizes[d] - 1) * t->strides[d];
  Tensor own = TensorImpl::view_of(TensorImpl::empty({span}, t->dtype, Device::cuda(0)), t->sizes, t->strides, 0);
  own->wrapped_number = t->wrapped_number;
  if (copy) copy_(own, t);
  return own;
}

}  // namespace

std::vector<std::vector<int>> plan_frees(const fusion::Schedule& s) {
  const graph::Graph& planned = s.graph;
  std::set<int> outputs(planned.outputs.begin(), planned.outputs.end());
  std::vector<std::vector<int>> frees(s.steps.size());
  for (size_t id = 0; id < planned.nodes.size(); id++) {
    int last = s.last_use[id];
    if (last >= 0 && !outputs.count((int)id) && planned.nodes[id].kind != graph::NodeKind::Input)
      frees[last].push_back((int)id);
  }
  return frees;
}

void check_inputs(const graph::Graph& g, const std::vector<Tensor>& inputs) {
  if (inputs.size() != g.inputs.size()) fail("compiled graph expects ", g.inputs.size(), " inputs, got ", inputs.size());
  auto list = [](const std::vector<int64_t>& v, bool strides = false) {
    std::string s = "(";
    for (size_t i = 0; i < v.size(); i++)
      s += (i ? ", " : "") + (strides && v[i] < 0 ? std::string("?") : graph::size_str(v[i]));
    return s + (v.size() == 1 ? ",)" : ")");
  };
  for (size_t i = 0; i < inputs.size(); i++) {
    const Tensor& t = inputs[i];
    const graph::Node& n = g.nodes[g.inputs[i]];
    const graph::TensorMeta& m = n.meta;
    if (!t) fail("input ", i, " (", n.name, ") of the compiled graph is missing");
    bool same = t->dtype == m.dtype && t->sizes.size() == m.sizes.size();
    bool empty = t->numel() == 0;  // no element is read: any strides
    for (size_t d = 0; same && d < m.sizes.size(); d++) {
      int64_t size = t->sizes[d];
      if (!graph::is_symbol(m.sizes[d]) && size != m.sizes[d]) same = false;
      else if (!empty && d < m.strides.size() && m.strides[d] >= 0 && size > 1 && t->strides[d] != m.strides[d]) same = false;
    }
    if (!same)
      fail("input ", i, " (", n.name, ") of the compiled graph is ", dtype_name(t->dtype), list(t->sizes),
           " with strides ", list(t->strides, true), ", but the graph was compiled for ", dtype_name(m.dtype),
           list(m.sizes), " with strides ", list(m.strides, true),
           " (s0, s1, ...: any size; ?: any stride). Generated kernels index each input by the sizes and "
           "strides they were compiled for: pass a tensor like the example input, or compile the graph again "
           "for this one (mini.compile's guards do that)");
  }
}

Shape resolve_shape(Shape shape, const std::vector<int64_t>& symbols) {
  for (auto& v : shape)
    if (graph::is_symbol(v)) v = symbols[graph::symbol_index(v)];
  return shape;
}

void run_extern(const graph::Graph& g, const fusion::Step& st, const std::vector<Tensor>& args,
                const std::vector<int64_t>& symbols, std::vector<Tensor>& values) {
  const graph::Node& n = g.nodes[st.node];
  Attrs a = n.attrs;
  a.shape = resolve_shape(a.shape, symbols);
  if (graph::is_symbol(a.start)) a.start = symbols[graph::symbol_index(a.start)];
  if (graph::is_symbol(a.end)) a.end = symbols[graph::symbol_index(a.end)];
  if (op_outputs(n.op) == 1) {
    values[st.node] = call_op(n.op, args, a);  // a view (no kernel) or an extern call
    return;
  }
  std::vector<Tensor> outs = call_op_outputs(n.op, args, a);  // one call, every node of it
  values[st.node] = outs.at(n.attrs.index);
  for (int id : st.also) values[id] = outs.at(g.nodes[id].attrs.index);
}

void require_known_sizes(const graph::Graph& g) {
  for (const auto& n : g.nodes)
    for (int64_t s : n.meta.sizes)
      if (s == graph::kUnbacked) {
        std::string shape;
        for (int64_t d : n.meta.sizes) shape += (shape.empty() ? "" : ", ") + graph::size_str(d);
        fail("cannot generate code for this graph: ", n.name, " has a size known only at run time ([", shape,
             "], u: a nonzero's length, or a size computed from one), and generated "
             "kernels need every size as a number or a size symbol. Run it with eager kernels (mini.compile does), "
             "or capture it with static sizes");
      }
}

std::shared_ptr<CompiledCudaGraph> compile_cuda_graph(const graph::Graph& g, const std::string& arch,
                                                      const std::string& cache_dir, const codegen::CudaLayout* layout,
                                                      const std::vector<int>* per_kernel, bool nvrtc) {
  require_known_sizes(g);
  auto start = std::chrono::steady_clock::now();
  auto since = [&] { return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count(); };
  auto cg = std::make_shared<CompiledCudaGraph>();
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
    cg->compiled = compile_cuda_kernels(codegen::cuda_prelude(), names, kernels, arch, cache_dir);
  }
  cg->frees = plan_frees(cg->schedule);
  for (size_t i = 0; i < cg->schedule.groups.size(); i++) {
    cg->split.push_back(codegen::cuda_split_reductions(cg->schedule, cg->schedule.groups[i], cg->layouts[i]));
    cg->column_split.push_back(codegen::cuda_column_splits(cg->schedule, cg->schedule.groups[i], cg->layouts[i]));
    cg->column_vector.push_back(codegen::cuda_column_vector(cg->schedule, cg->schedule.groups[i], cg->layouts[i]));
    cg->aligned.push_back(codegen::cuda_assumes_aligned(cg->schedule, cg->schedule.groups[i], cg->layouts[i]));
  }
  return cg;
}

std::string CompiledCudaGraph::functions() const {
  if (compiled.kernels.empty()) return "";
  std::string o = "\n// Compiled once per distinct body (compile_cuda_kernels): kernel -> the function it runs\n";
  for (size_t i = 0; i < compiled.kernels.size(); i++)
    o += "//   " + schedule.groups[i].name + " -> " + compiled.kernels[i].function + "\n";
  return o;
}

// A column kernel's kept and reduced element counts (its sizes are static).
static std::pair<int64_t, int64_t> column_extents(const fusion::FusionGroup& k) {
  int64_t cols = 1, rnumel = 1;
  for (int64_t d = 0; d < (int64_t)k.space.size(); d++)
    (std::count(k.reduced.begin(), k.reduced.end(), d) ? rnumel : cols) *= k.space[d];
  return {cols, rnumel};
}

void CompiledCudaGraph::load() const {
  const graph::Graph& g = schedule.graph;
  device_constants_.resize(g.nodes.size());
  for (size_t id = 0; id < g.nodes.size(); id++) {
    const Tensor& c = g.nodes[id].constant;
    if (c) device_constants_[id] = c->is_cuda() ? c : to_device(c, Device::cuda(0));
  }
  int64_t slots = 0, counters = 0;
  for (size_t i = 0; i < split.size(); i++) {
    partials_at_.push_back(slots);
    arrived_at_.push_back(counters);
    if (split[i]) {
      slots += split[i] * codegen::cuda_split_max_grid(cuda::sm_count());
      counters += 1;
    } else if (column_split[i]) {  // static sizes: a slot per reduction per y block per column
      auto [cols, rnumel] = column_extents(schedule.groups[i]);
      slots += column_split[i] * codegen::cuda_column_split_grid(cols, rnumel, cuda::sm_count(), column_vector[i]) * cols;
      counters += (cols + 31) / 32;
    }
  }
  if (slots) {
    partials_ = TensorImpl::empty({slots}, DType::Int64, Device::cuda(0));  // 8-byte slots
    arrived_ = zeros({counters}, DType::Float32, Device::cuda(0));  // 32-bit zeros
  }
  for (const CudaKernel& k : compiled.kernels) {
    k.program->load({k.function});
    kernels_.push_back(k.program->kernels.at(k.function));
  }
}

std::vector<Tensor> CompiledCudaGraph::run(const std::vector<Tensor>& inputs) const { return run_keeping(inputs, nullptr); }

std::vector<Tensor> CompiledCudaGraph::run_keeping(const std::vector<Tensor>& inputs, std::vector<Tensor>* kept) const {
  return run_timed(inputs, kept, nullptr);
}

std::vector<int> CompiledCudaGraph::layout_numbers() const {
  std::vector<int> n;
  for (const auto& l : layouts) n.push_back(l.number);
  return n;
}

std::vector<double> CompiledCudaGraph::kernel_ms(const std::vector<Tensor>& inputs) const {
  std::vector<double> ms;
  run_timed(inputs, nullptr, &ms);
  return ms;
}

std::vector<Tensor> CompiledCudaGraph::run_timed(const std::vector<Tensor>& inputs, std::vector<Tensor>* kept,
                                                 std::vector<double>* kernel_ms) const {
  const graph::Graph& g = schedule.graph;
  // a Python number's 0-d input (made on the CPU), and any 0-d CPU tensor (torch lets one meet
  // CUDA tensors as a scalar: the seed 1.0 that loss.backward() hands the compiled backward),
  // goes to the GPU
  std::vector<Tensor> moved;
  for (size_t i = 0; i < inputs.size() && i < g.inputs.size(); i++)
    if (inputs[i] && !inputs[i]->is_cuda() && (g.nodes[g.inputs[i]].wrapped_number || inputs[i]->sizes.empty())) {
      if (moved.empty()) moved = inputs;
      moved[i] = to_device(inputs[i], Device::cuda(0));
      moved[i]->wrapped_number = g.nodes[g.inputs[i]].wrapped_number || inputs[i]->wrapped_number;
    }
  if (!moved.empty()) return run_timed(moved, kept, kernel_ms);
  for (size_t i = 0; i < inputs.size() && i < g.inputs.size(); i++)
    if (inputs[i] && !inputs[i]->is_cuda())
      fail("a graph compiled for CUDA takes CUDA tensors: input ", i, " is on ", inputs[i]->device().str(),
           " (move it with .cuda())");
  if (inputs.size() != g.inputs.size()) fail("compiled graph expects ", g.inputs.size(), " inputs, got ", inputs.size());
  std::call_once(loaded_, [this] { load(); });
  std::vector<Tensor> values(g.nodes.size());
  for (size_t i = 0; i < inputs.size(); i++) values[g.inputs[i]] = inputs[i];
  std::vector<int64_t> symbols = g.symbol_values(inputs);
  auto value = [&](int id) -> const Tensor& { return values[id] ? values[id] : device_constants_[id]; };
  Sizes sizes{};
  for (size_t i = 0; i < symbols.size(); i++) sizes.symbols[i] = symbols[i];
  int sms = cuda::sm_count();
  std::vector<void*> pointers;
  std::vector<void*> args;
  std::deque<Tensor> misaligned;  // aligned copies of inputs at odd offsets (stable addresses)
  struct Timed {
    int group;
    uintptr_t start, stop;
  };
  std::vector<Timed> events;  // kernel_ms: each launch's start and stop
  struct Events {             // destroyed however the run ends
    std::vector<Timed>& e;
    ~Events() {
      for (auto& t : e) cuda::event_destroy(t.start), cuda::event_destroy(t.stop);
    }
  } destroy_events{events};
  for (size_t si = 0; si < schedule.steps.size(); si++) {
    const fusion::Step& st = schedule.steps[si];
    if (st.kind == fusion::StepKind::Kernel) {
      const fusion::FusionGroup& k = schedule.groups[st.group];
      pointers.clear();
      int64_t bytes = 0;
      const codegen::CudaLayout& layout = layouts[st.group];
      const bool aligned = this->aligned[st.group];
      for (size_t b = 0; b < k.loads.size(); b++) {
        const Tensor* read = &value(k.loads[b]);
        if (aligned && reinterpret_cast<uintptr_t>((*read)->device_raw()) % codegen::kCudaAlignment) {
          // a view at an odd offset: the kernel reads an aligned copy (kept until the launch is
          // done: the allocator reuses its memory only for work queued after it)
          misaligned.push_back(same_layout(*read, true));
          read = &misaligned.back();
        }
        const Tensor& t = *read;
        pointers.push_back(t->device_raw());
        for (size_t d = 0; d < t->strides.size() && d < (size_t)codegen::kCudaMaxRank; d++)
          sizes.strides[b][d] = t->strides[d];
        bytes += t->wrapped_number ? 0 : t->nbytes();
      }
      for (int id : k.stores) {
        values[id] = TensorImpl::empty(resolve_shape(g.nodes[id].meta.sizes, symbols), g.nodes[id].meta.dtype,
                                       Device::cuda(0));
        pointers.push_back(values[id]->device_raw());
        bytes += values[id]->nbytes();
      }
      args.clear();
      for (void*& p : pointers) args.push_back(&p);
      args.push_back(&sizes);
      unsigned block[3] = {(unsigned)codegen::cuda_block(k, layout), 1, 1};
      unsigned grid[3] = {(unsigned)codegen::cuda_grid(schedule, k, layout, symbols, sms, column_vector[st.group]), 1, 1};
      void* partials = nullptr;
      void* arrived = nullptr;
      if (split[st.group]) {
        int64_t rnumel = 1;
        for (int64_t d : k.reduced) rnumel *= resolve_shape({k.space[d]}, symbols)[0];
        grid[0] = (unsigned)codegen::cuda_split_grid(rnumel, (int)block[0], sms);
        partials = static_cast<int64_t*>(partials_->device_raw()) + partials_at_[st.group];
        arrived = static_cast<float*>(arrived_->device_raw()) + arrived_at_[st.group];  // a zeroed 32-bit counter
        args.push_back(&partials);
        args.push_back(&arrived);
      } else if (column_split[st.group]) {
        auto [cols, rnumel] = column_extents(k);
        grid[1] = (unsigned)codegen::cuda_column_split_grid(cols, rnumel, sms, column_vector[st.group]);
        partials = static_cast<int64_t*>(partials_->device_raw()) + partials_at_[st.group];
        arrived = static_cast<float*>(arrived_->device_raw()) + arrived_at_[st.group];  // a counter per x block
        args.push_back(&partials);
        args.push_back(&arrived);
      }
      if (kernel_ms) {
        events.push_back({st.group, cuda::event_create(true), 0});
        events.back().stop = cuda::event_create(true);
        cuda::event_record(events.back().start);
      }
      cuda::launch_kernel(kernels_[st.group], grid, block, args.data(), 0, k.name.c_str());
      if (kernel_ms) cuda::event_record(events.back().stop);
      count_kernel(bytes);
    } else {
      const graph::Node& n = g.nodes[st.node];
      std::vector<Tensor> call_args;
      for (int i : n.inputs) call_args.push_back(i < 0 ? nullptr : value(i));
      run_extern(g, st, call_args, symbols, values);
    }
    for (int id : frees[si]) {
      if (kept && values[id]) kept->push_back(values[id]);
      values[id].reset();
    }
  }
  if (kept) kept->insert(kept->end(), misaligned.begin(), misaligned.end());
  if (kernel_ms) {
    kernel_ms->assign(schedule.groups.size(), 0.0);
    for (auto& t : events) {
      cuda::event_synchronize(t.stop);
      (*kernel_ms)[t.group] += cuda::event_elapsed_ms(t.start, t.stop);
    }
  }
  std::vector<Tensor> out;
  for (int o : g.outputs) out.push_back(value(o));
  return out;
}

// ---- mode="reduce-overhead" -------------------------------------------------------------------

std::string CudaGraphReplay::why_not(const CompiledCudaGraph& cg) {
  for (const auto& n : cg.schedule.graph.nodes)
    if (n.kind == graph::NodeKind::Op && (n.op == OpKind::Rand || n.op == OpKind::Randn))
      return n.name + " draws random numbers, and a CUDA graph's replay would draw the same ones";
  return "";
}

CudaGraphReplay::~CudaGraphReplay() {
  for (auto& [key, r] : recordings_) {
    cuda::destroy_graph(r.exec);
    for (void* p : r.freed) cuda::release(p);
  }
}

int CudaGraphReplay::recordings() const {
  std::lock_guard<std::mutex> lock(mutex_);
  int n = 0;
  for (auto& [key, r] : recordings_) n += r.exec != 0;
  return n;
}

std::vector<Tensor> CudaGraphReplay::run(const std::vector<Tensor>& inputs) {
  if (inputs.size() != cg_->schedule.graph.inputs.size())
    fail("compiled graph expects ", cg_->schedule.graph.inputs.size(), " inputs, got ", inputs.size());
  // the key: each input's dtype, sizes and strides; and where a parameter lives
  std::string key;
  for (const Tensor& t : inputs) {
    key += std::to_string((int)t->dtype) + (t->is_cuda() ? "c" : "h") + "[";
    for (int64_t s : t->sizes) key += std::to_string(s) + ",";
    key += "][";
    for (int64_t s : t->strides) key += std::to_string(s) + ",";
    key += "]";
    if (t->requires_grad) key += "@" + std::to_string(reinterpret_cast<uintptr_t>(t->device_raw()));
    key += ";";
  }
  std::lock_guard<std::mutex> lock(mutex_);
  Recording& r = recordings_[key];
  if (!r.warmed || !r.why_not.empty()) {  // the warm-up call, or a graph that cannot be recorded
    r.warmed = true;
    return cg_->run(inputs);
  }
  if (!r.exec) {
    for (const Tensor& t : inputs) {
      if (t->requires_grad && t->is_cuda()) {
        r.inputs.push_back(t);  // read where it is
        continue;
      }
      r.inputs.push_back(same_layout(t, false));
    }
    for (size_t i = 0; i < inputs.size(); i++)
      if (r.inputs[i] != inputs[i]) copy_(r.inputs[i], inputs[i]);
    try {
      r.exec = cuda::capture_graph([&] { r.outputs = cg_->run_keeping(r.inputs, &r.values); }, &r.freed);
    } catch (const Error& e) {
      // work a graph cannot replay (a copy from the host): these inputs run in default mode from
      // now on, as the error says; the recording's buffers go back
      for (void* p : r.freed) cuda::release(p);
      r.freed.clear();
      r.inputs.clear();
      r.outputs.clear();
      r.values.clear();
      r.why_not = e.what();
      return cg_->run(inputs);
    } catch (...) {
      for (void* p : r.freed) cuda::release(p);
      recordings_.erase(key);
      throw;
    }
  } else {
    for (size_t i = 0; i < inputs.size(); i++)
      if (r.inputs[i] != inputs[i]) copy_(r.inputs[i], inputs[i]);
  }
  cuda::replay_graph(r.exec);
  count_kernel(0);
  std::vector<Tensor> out;
  for (const Tensor& o : r.outputs) out.push_back(clone(o));
  return out;
}

// ---- mode="max-autotune" ------------------------------------------------------------------------

CudaAutotune::CudaAutotune(const graph::Graph& g, const std::string& arch, const std::string& cache_dir)
    : graph_(g), arch_(arch), cache_dir_(cache_dir) {
  codegen::CudaLayout dflt = codegen::cuda_layout(codegen::kCudaDefaultLayout);
  best_ = compile_cuda_graph(graph_, arch_, cache_dir_, &dflt);
  std::vector<std::string> ignored;
  path_ = usable_cache_dir(cache_dir_, &ignored) + "/" + hex_hash(best_->source + "|" + arch_) + ".autotune";
  // "layouts N N ...\n", a number per kernel, written by an earlier tuning
  std::istringstream saved(read_file(path_));
  std::string word;
  std::vector<int> chosen;
  if (saved >> word && word == "layouts")
    for (int n; saved >> n;) chosen.push_back(n);
  bool valid = chosen.size() == best_->schedule.groups.size();
  for (int n : chosen) valid = valid && n >= 1 && n <= codegen::kCudaLayouts;
  if (valid) {
    tuned_ = true;
    if (chosen != best_->layout_numbers()) best_ = compile_cuda_graph(graph_, arch_, cache_dir_, &dflt, &chosen);
  }
}

std::vector<int> CudaAutotune::layouts() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return best_->layout_numbers();
}

std::vector<double> CudaAutotune::times_ms() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return times_;
}

std::vector<std::vector<double>> CudaAutotune::kernel_times_ms() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return kernel_times_;
}

std::vector<Tensor> CudaAutotune::run(const std::vector<Tensor>& inputs) {
  std::lock_guard<std::mutex> lock(mutex_);
  if (!tuned_) tune(inputs);
  return best_->run(inputs);
}

void CudaAutotune::tune(const std::vector<Tensor>& inputs) {
  tuned_ = true;  // once, even if timing fails below: the default layout then stays
  const size_t kernels = best_->schedule.groups.size();
  std::vector<std::shared_ptr<CompiledCudaGraph>> compiled;
  for (int n = 1; n <= codegen::kCudaLayouts; n++) {
    codegen::CudaLayout l = codegen::cuda_layout(n);
    auto cg = n == best_->layout.number ? best_ : compile_cuda_graph(graph_, arch_, cache_dir_, &l);
    if (cg->schedule.groups.size() != kernels) fail("max-autotune: layout ", n, " fused the graph differently");
    cg->run(inputs);  // loads it, warms the caches
    std::vector<std::vector<double>> reps;
    for (int rep = 0; rep < 5; rep++) reps.push_back(cg->kernel_ms(inputs));
    std::vector<double> medians;
    for (size_t k = 0; k < kernels; k++) {
      std::vector<double> ms;
      for (const auto& r : reps) ms.push_back(r[k]);
      std::sort(ms.begin(), ms.end());
      medians.push_back(ms[ms.size() / 2]);
    }
    kernel_times_.push_back(medians);
    times_.push_back(std::accumulate(medians.begin(), medians.end(), 0.0));
    compiled.push_back(cg);
  }
  std::vector<int> chosen;  // per kernel, its fastest layout (the lowest number on a tie)
  for (size_t k = 0; k < kernels; k++) {
    int best = 0;
    for (int n = 1; n < codegen::kCudaLayouts; n++)
      if (kernel_times_[n][k] < kernel_times_[best][k]) best = n;
    chosen.push_back(best + 1);
  }
  bool uniform = std::all_of(chosen.begin(), chosen.end(), [&](int n) { return n == chosen.front(); });
  if (kernels == 0) {
    best_ = compiled[best_->layout.number - 1];
  } else if (uniform) {
    best_ = compiled[chosen.front() - 1];
  } else {
    codegen::CudaLayout dflt = codegen::cuda_layout(codegen::kCudaDefaultLayout);
    best_ = compile_cuda_graph(graph_, arch_, cache_dir_, &dflt, &chosen);
  }
  std::string tmp = cat(path_, ".", getpid(), ".tmp");
  {
    std::ofstream out(tmp);
    out << "layouts";
    for (int n : best_->layout_numbers()) out << " " << n;
    out << "\n";
  }
  std::rename(tmp.c_str(), path_.c_str());  // a reader sees the old file or the new one, whole
}

}  // namespace mini::runtime
