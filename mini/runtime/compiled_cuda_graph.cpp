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

}  // namespace mini::runtime
