// autograd.h — eager reverse-mode autodiff: the tape (GradNodes linked to their inputs'
// producers), grad mode, and the backward engine.
//
// Each differentiable op calls record() after computing its output. The node stores the
// op kind, attributes, its inputs (and a storage-sharing alias of its output) as
// SavedTensors, and one Edge per input. backward() walks the nodes in reverse topological
// order and applies each op's rule from derivatives.h — the same rule the joint
// forward/backward graph applies symbolically.
//
// Ownership: a tensor owns its grad_fn; a node owns its inputs' producers (edges) and its
// saved tensors. A saved *output* is an alias without grad_fn, so there is no cycle.
#pragma once
#include <functional>
#include <memory>
#include <utility>
#include <vector>

#include "op.h"
#include "tensor.h"

namespace mini {

// A tensor saved for backward, remembering its storage version so that an in-place write
// after saving is caught instead of silently giving a wrong gradient.
struct SavedTensor {
  Tensor value;
  uint64_t version = 0;
  void save(const Tensor& t);
  const Tensor& unpack(const char* op) const;
};

struct Edge {
  std::shared_ptr<GradNode> node;  // null: this input needs no gradient
  int output_nr = 0;               // which output of `node` the input is
};

// The backward of a node that is not one op: a compiled graph's backward graph
// (mini/autograd). Given one gradient per output of the node (null: that output got no
// gradient), returns one gradient (or null) per entry of the node's `next`.
struct CustomBackward {
  virtual ~CustomBackward() = default;
  virtual const char* name() const = 0;
  virtual std::vector<Tensor> apply(const std::vector<Tensor>& grad_outputs) = 0;
  virtual void release() = 0;  // frees saved tensors (backward without retain_graph)
};

struct GradNode {
  OpKind kind = OpKind::Add;
  Attrs attrs;
  std::vector<SavedTensor> inputs;
  SavedTensor output;
  std::vector<Edge> next;  // one per input
  bool released = false;   // saved tensors freed after a backward without retain_graph
  // A node with several outputs (a compiled graph's): its backward is `custom`, and each
  // output tensor names its position with TensorImpl::output_nr.
  std::shared_ptr<CustomBackward> custom;
  int num_outputs = 1;

  // A leaf's accumulator: adds incoming gradients into leaf->grad.
  std::weak_ptr<TensorImpl> leaf;
  bool is_accumulator() const { return !leaf.expired() || accumulator_; }
  bool accumulator_ = false;

  const char* name() const;
};

// ---- grad mode ------------------------------------------------------------------------
bool grad_enabled();
void set_grad_enabled(bool on);
struct NoGradGuard {
  bool prev;
  NoGradGuard() : prev(grad_enabled()) { set_grad_enabled(false); }
  ~NoGradGuard() { set_grad_enabled(prev); }
};

// ---- autocast ---------------------------------------------------------------------------
// torch.autocast's state for each device type (mini.autocast): off, or the lower precision
// (bfloat16: mini has no float16) that matmuls compute in. Thread-local, as grad mode. The
// policy, applied alike by the eager ops and by capture (which records the casts in the graph):
// a matmul's float32 inputs are cast to the lower precision; softmax, log_softmax, layer_norm
// and mse_loss take their bfloat16 inputs in float32 (the part of torch's float32 list that
// mini's ops have, less exp, log, pow, rsqrt and sum: those keep their input's dtype). float64
// inputs are never cast. Backward runs with autocast off, as torch's does.
struct AutocastState {
  bool enabled[2] = {false, false};  // indexed by Device::Type: CPU, CUDA
  DType dtype[2] = {DType::BFloat16, DType::BFloat16};
  bool on(Device d) const { return enabled[int(d.type)]; }
  bool operator==(const AutocastState& o) const {
    return enabled[0] == o.enabled[0] && enabled[1] == o.enabled[1] && dtype[0] == o.dtype[0] &&
           dtype[1] == o.dtype[1];
  }
  std::string str() const;  // "off", "cuda:bfloat16", "cpu:bfloat16,cuda:bfloat16"
};
const AutocastState& autocast_state();
void set_autocast_state(const AutocastState& s);
struct AutocastOffGuard {
  AutocastState prev;
  AutocastOffGuard() : prev(autocast_state()) { set_autocast_state(AutocastState{}); }
  ~AutocastOffGuard() { set_autocast_state(prev); }
};
// The dtype op `k` computes in on `device` under the current autocast state, if autocast
// casts its inputs (false otherwise).
bool autocast_target(OpKind k, Device device, DType* to);
// Whether autocast casts an input of dtype `from` to `to`.
inline bool autocast_casts(DType from, DType to) {
  return is_floating(from) && from != DType::Float64 && from != to;
}
// `inputs` as op `k` takes them under autocast now (null and 0-d Python numbers untouched).
std::vector<Tensor> autocast_inputs(OpKind k, std::vector<Tensor> inputs);

// True when an op on these inputs must be recorded.
bool should_record(const std::vector<Tensor>& inputs);

// Attaches a GradNode for (kind, attrs, inputs) to `output`. No-op unless should_record.
void record(OpKind kind, const std::vector<Tensor>& inputs, const Tensor& output,
            const Attrs& attrs = {});

// What an op's derivative rule reads: its inputs' values, its output's value. Inputs whose
// values are not read are saved as shape-only placeholders, so that writing to them in
// place later is not mistaken for corrupting backward (torch saves only what it needs too).
struct SavedNeeds {
  bool input_values;
  bool output_value;
};
SavedNeeds saved_needs(OpKind kind);

// A tensor with t's sizes, strides and dtype but no data: for rules that read only shapes.
Tensor shape_only(const Tensor& t);

// Runs backward from `root` with incoming gradient `grad` (ones for a scalar when null).
void backward(const Tensor& root, Tensor grad, bool retain_graph);

// ---- hooks -------------------------------------------------------------------------------
// What DDP builds on (torch's Tensor.register_post_accumulate_grad_hook and
// Variable._execution_engine.queue_callback). A post-accumulate-grad hook runs with the leaf
// right after a backward accumulated the leaf's .grad: the moment that gradient is final for
// this backward. Leaves' gradients are accumulated in one place, the accumulator node, whether
// they come from eager ops' rules or from a compiled graph's backward (a CustomBackward node
// delivers its input gradients to the same accumulators), so the hooks fire for both. The
// engine runs an accumulator as soon as the last node feeding it ran (backward()), so a
// hook of an early layer's weight fires while later layers' backward still waits.
// An exception a hook throws stops the backward and reaches the caller of backward().
using PostAccumulateGradHook = std::function<void(const Tensor& leaf)>;
struct LeafHooks {
  std::vector<std::pair<int, PostAccumulateGradHook>> post_accumulate;  // (handle id, hook)
  int next_id = 0;
};
// Adds a hook to leaf `t` (that requires grad); returns the handle id remove_... takes.
int add_post_accumulate_grad_hook(const Tensor& t, PostAccumulateGradHook hook);
void remove_post_accumulate_grad_hook(const Tensor& t, int id);  // a removed id: no-op

// Queues `fn` to run once the backward now running has accumulated every gradient (before
// backward() returns; callbacks queued by callbacks run too). Outside a backward: mini::Error.
void queue_callback(std::function<void()> fn);

// Gradient edge of an input: its grad_fn, or its leaf accumulator, or none.
Edge edge_of(const Tensor& t);

// Makes `out` the one output of a node whose backward is `bw`, with one edge per input (the
// gradients bw->apply returns, in that order). Callers check should_record first.
void attach_custom_backward(const Tensor& out, std::shared_ptr<CustomBackward> bw, const std::vector<Tensor>& inputs);

}  // namespace mini
