// compiled_cuda_graph.cpp — see compiled_cuda_graph.h.
#include "runtime/compiled_cuda_graph.h"

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
#include "runtime/code_cache.h"
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

}  // namespace

Tensor same_layout(const Tensor& t, bool copy) {
  int64_t span = t->numel() == 0 ? 0 : 1;  // the elements t's layout reaches, from offset 0
  for (size_t d = 0; d < t->sizes.size(); d++)
    if (t->numel()) span += (t->sizes[d] - 1) * t->strides[d];
  Tensor own = TensorImpl::view_of(TensorImpl::empty({span}, t->dtype, Device::cuda(0)), t->sizes, t->strides, 0);
  own->wrapped_number = t->wrapped_number;
  if (copy) copy_(own, t);
  return own;
}

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
  for (const CudaKernel& k : compiled.kernels) {
    k.program->load({k.function});
    kernels_.push_back(k.program->kernels.at(k.function));
  }
  int64_t slots = 0, counters = 0;
  resident_.assign(split.size(), 0);
  for (size_t i = 0; i < split.size(); i++) {
    partials_at_.push_back(slots);
    arrived_at_.push_back(counters);
    if (split[i]) {
      slots += split[i] * codegen::cuda_split_max_grid(cuda::sm_count());
      counters += 1;
    } else if (column_split[i]) {  // static sizes: a slot per reduction per y block per column
      auto [cols, rnumel] = column_extents(schedule.groups[i]);
      resident_[i] = cuda::resident_blocks(kernels_[i], codegen::cuda_block(schedule.groups[i], layouts[i]));
      slots += column_split[i] * codegen::cuda_column_split_grid(cols, rnumel, resident_[i], column_vector[i]) * cols;
      counters += (cols + 31) / 32;
    }
  }
  if (slots) {
    partials_ = TensorImpl::empty({slots}, DType::Int64, Device::cuda(0));  // 8-byte slots
    arrived_ = zeros({counters}, DType::Float32, Device::cuda(0));  // 32-bit zeros
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

// One call's state: every node's value, the size symbols, the mini::Sizes the kernels take, the
// launch arguments, aligned copies of inputs at odd offsets, and each timed launch's events.
struct CompiledCudaGraph::Run {
  struct Timed {
    int group;
    uintptr_t start, stop;
  };
  std::vector<Tensor> values;
  std::vector<int64_t> symbols;
  Sizes sizes{};
  int sms = 0;
  std::vector<void*> pointers, args;
  std::deque<Tensor> misaligned;  // stable addresses: kept until the launches reading them are done
  std::vector<Timed> events;      // kernel_ms: each launch's start and stop
  ~Run() {
    for (auto& t : events) cuda::event_destroy(t.start), cuda::event_destroy(t.stop);
  }
};

// Node `id`'s value in this call: what a step made, or its captured constant's device copy.
const Tensor& CompiledCudaGraph::value(const Run& run, int id) const {
  return run.values[id] ? run.values[id] : device_constants_[id];
}

// The inputs with each 0-d CPU tensor moved to the GPU (a Python number's, or the seed 1.0 that
// loss.backward() hands the compiled backward: torch lets one meet CUDA tensors as a scalar), or
// empty where none is; raises for any other input not on the GPU, and for a wrong count.
std::vector<Tensor> CompiledCudaGraph::inputs_on_device(const std::vector<Tensor>& inputs) const {
  const graph::Graph& g = schedule.graph;
  std::vector<Tensor> moved;
  for (size_t i = 0; i < inputs.size() && i < g.inputs.size(); i++)
    if (inputs[i] && !inputs[i]->is_cuda() && (g.nodes[g.inputs[i]].wrapped_number || inputs[i]->sizes.empty())) {
      if (moved.empty()) moved = inputs;
      moved[i] = to_device(inputs[i], Device::cuda(0));
      moved[i]->wrapped_number = g.nodes[g.inputs[i]].wrapped_number || inputs[i]->wrapped_number;
    }
  const std::vector<Tensor>& now = moved.empty() ? inputs : moved;
  for (size_t i = 0; i < now.size() && i < g.inputs.size(); i++)
    if (now[i] && !now[i]->is_cuda())
      fail("a graph compiled for CUDA takes CUDA tensors: input ", i, " is on ", now[i]->device().str(),
           " (move it with .cuda())");
  if (inputs.size() != g.inputs.size()) fail("compiled graph expects ", g.inputs.size(), " inputs, got ", inputs.size());
  return moved;
}

// Launches kernel `group` on this call's values: a pointer per load (an aligned copy of an input
// at an odd offset, where the kernel assumes alignment) and per new output, the loads' strides,
// the block and grid of cuda_launch.h, a split kernel's partials and counters; between two
// events where `timed`.
void CompiledCudaGraph::launch(int group, Run& run, bool timed) const {
  const graph::Graph& g = schedule.graph;
  const fusion::FusionGroup& k = schedule.groups[group];
  const codegen::CudaLayout& layout = layouts[group];
  run.pointers.clear();
  int64_t bytes = 0;
  for (size_t b = 0; b < k.loads.size(); b++) {
    const Tensor* read = &value(run, k.loads[b]);
    if (aligned[group] && reinterpret_cast<uintptr_t>((*read)->device_raw()) % codegen::kCudaAlignment) {
      // a view at an odd offset: the kernel reads an aligned copy (kept until the launch is
      // done: the allocator reuses its memory only for work queued after it)
      run.misaligned.push_back(same_layout(*read, true));
      read = &run.misaligned.back();
    }
    const Tensor& t = *read;
    run.pointers.push_back(t->device_raw());
    for (size_t d = 0; d < t->strides.size() && d < (size_t)codegen::kCudaMaxRank; d++)
      run.sizes.strides[b][d] = t->strides[d];
    bytes += t->wrapped_number ? 0 : t->nbytes();
  }
  for (int id : k.stores) {
    run.values[id] = TensorImpl::empty(resolve_shape(g.nodes[id].meta.sizes, run.symbols), g.nodes[id].meta.dtype,
                                       Device::cuda(0));
    run.pointers.push_back(run.values[id]->device_raw());
    bytes += run.values[id]->nbytes();
  }
  run.args.clear();
  for (void*& p : run.pointers) run.args.push_back(&p);
  run.args.push_back(&run.sizes);
  unsigned block[3] = {(unsigned)codegen::cuda_block(k, layout), 1, 1};
  unsigned grid[3] = {(unsigned)codegen::cuda_grid(schedule, k, layout, run.symbols, run.sms, column_vector[group]), 1, 1};
  void* partials = nullptr;
  void* arrived = nullptr;
  if (split[group]) {
    int64_t rnumel = 1;
    for (int64_t d : k.reduced) rnumel *= resolve_shape({k.space[d]}, run.symbols)[0];
    grid[0] = (unsigned)codegen::cuda_split_grid(rnumel, (int)block[0], run.sms);
  } else if (column_split[group]) {
    auto [cols, rnumel] = column_extents(k);
    grid[1] = (unsigned)codegen::cuda_column_split_grid(cols, rnumel, resident_[group], column_vector[group]);
  }
  if (split[group] || column_split[group]) {  // a zeroed 32-bit counter (a split row), or one per x block
    partials = static_cast<int64_t*>(partials_->device_raw()) + partials_at_[group];
    arrived = static_cast<float*>(arrived_->device_raw()) + arrived_at_[group];
    run.args.push_back(&partials);
    run.args.push_back(&arrived);
  }
  if (timed) {
    run.events.push_back({group, cuda::event_create(true), 0});
    run.events.back().stop = cuda::event_create(true);
    cuda::event_record(run.events.back().start);
  }
  cuda::launch_kernel(kernels_[group], grid, block, run.args.data(), 0, k.name.c_str());
  if (timed) cuda::event_record(run.events.back().stop);
  count_kernel(bytes);
}

std::vector<Tensor> CompiledCudaGraph::run_timed(const std::vector<Tensor>& inputs, std::vector<Tensor>* kept,
                                                 std::vector<double>* kernel_ms) const {
  std::vector<Tensor> moved = inputs_on_device(inputs);
  if (!moved.empty()) return run_timed(moved, kept, kernel_ms);
  std::call_once(loaded_, [this] { load(); });
  const graph::Graph& g = schedule.graph;
  Run run;
  run.values.resize(g.nodes.size());
  for (size_t i = 0; i < inputs.size(); i++) run.values[g.inputs[i]] = inputs[i];
  run.symbols = g.symbol_values(inputs);
  for (size_t i = 0; i < run.symbols.size(); i++) run.sizes.symbols[i] = run.symbols[i];
  run.sms = cuda::sm_count();
  for (size_t si = 0; si < schedule.steps.size(); si++) {
    const fusion::Step& st = schedule.steps[si];
    if (st.kind == fusion::StepKind::Kernel) {
      launch(st.group, run, kernel_ms != nullptr);
    } else {
      std::vector<Tensor> call_args;
      for (int i : g.nodes[st.node].inputs) call_args.push_back(i < 0 ? nullptr : value(run, i));
      run_extern(g, st, call_args, run.symbols, run.values);
    }
    for (int id : frees[si]) {
      if (kept && run.values[id]) kept->push_back(run.values[id]);
      run.values[id].reset();
    }
  }
  if (kept) kept->insert(kept->end(), run.misaligned.begin(), run.misaligned.end());
  if (kernel_ms) {
    kernel_ms->assign(schedule.groups.size(), 0.0);
    for (auto& t : run.events) {
      cuda::event_synchronize(t.stop);
      (*kernel_ms)[t.group] += cuda::event_elapsed_ms(t.start, t.stop);
    }
  }
  std::vector<Tensor> out;
  for (int o : g.outputs) out.push_back(value(run, o));
  return out;
}

}  // namespace mini::runtime
