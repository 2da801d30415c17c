// autograd.cpp — the eager tape: recording a GradNode per differentiable op, saved tensors,
// and the backward engine (topological order, gradient accumulation into leaves).
#include "autograd.h"

#include <unordered_map>
#include <unordered_set>

#include "derivatives.h"
#include "ops.h"

namespace mini {

namespace {
thread_local bool g_grad_enabled = true;

// The eager builder for derivatives.h: runs each op immediately, without recording.
struct EagerBuilder {
  using Value = Tensor;
  Value call(OpKind k, std::vector<Value> in, const Attrs& a) { return call_op(k, in, a); }
  Shape shape(const Value& v) { return v->sizes; }
  DType dtype(const Value& v) { return v->dtype; }
  Value scalar(double x, DType d) { return scalar_tensor(x, d, /*wrapped_number=*/true); }
  // A column-major matrix (a Linear's W^T): its gradient computed transposed leaves the
  // transpose's own gradient, W's, contiguous (torch's mm_mat2_backward).
  bool prefers_transposed_grad(const Value& w) {
    return w->dim() == 2 && w->sizes[0] > 1 && w->sizes[1] > 1 && w->strides[0] == 1 && w->strides[1] == w->sizes[0];
  }
};
}  // namespace

bool grad_enabled() { return g_grad_enabled; }
void set_grad_enabled(bool on) { g_grad_enabled = on; }

namespace {
thread_local AutocastState g_autocast;
}  // namespace

const AutocastState& autocast_state() { return g_autocast; }
void set_autocast_state(const AutocastState& s) { g_autocast = s; }

std::string AutocastState::str() const {
  std::string out;
  for (int t = 0; t < 2; t++)
    if (enabled[t]) out += cat(out.empty() ? "" : ",", t ? "cuda:" : "cpu:", dtype_name(dtype[t]));
  return out.empty() ? "off" : out;
}

bool autocast_target(OpKind k, Device device, DType* to) {
  if (!g_autocast.on(device)) return false;
  switch (k) {
    case OpKind::Matmul: case OpKind::Attention: *to = g_autocast.dtype[int(device.type)]; return true;
    case OpKind::Softmax: case OpKind::LogSoftmax: case OpKind::LayerNorm: case OpKind::MseLoss:
      *to = DType::Float32;
      return true;
    default: return false;
  }
}

// Autocast's cast keeps its operand's layout (torch's preserve_format): a transposed matrix (a
// Linear's W.t()) is cast as the matrix it views and transposed back, not copied into a new
// layout, which reads every element strided (GPT-2's tied lm_head: 0.28 ms a step).
Tensor cast_keeping_layout(const Tensor& t, DType to) {
  int64_t r = (int64_t)t->sizes.size();
  if (r >= 2 && !t->is_contiguous()) {
    Tensor back = transpose(t, r - 2, r - 1);
    if (back->is_contiguous()) return transpose(cast(back, to), r - 2, r - 1);
  }
  return cast(t, to);
}

std::vector<Tensor> autocast_inputs(OpKind k, std::vector<Tensor> inputs) {
  Device device;
  bool found = false;
  for (const Tensor& t : inputs)
    if (t && !t->wrapped_number) { device = t->device(); found = true; break; }
  DType to;
  if (!found || !autocast_target(k, device, &to)) return inputs;
  for (Tensor& t : inputs)
    if (t && !t->wrapped_number && autocast_casts(t->dtype, to)) t = cast_keeping_layout(t, to);
  return inputs;
}

void SavedTensor::save(const Tensor& t) {
  value = t;
  version = t ? t->storage->version : 0;
}

const Tensor& SavedTensor::unpack(const char* op) const {
  if (value && value->storage->version != version)
    fail("one of the variables needed for gradient computation has been modified by an "
         "inplace operation: the input or output of ", op, " was written after it was saved "
         "(version ", version, ", now ", value->storage->version, "). Use an out-of-place "
         "op (e.g. x = x + y instead of x.add_(y)) before backward.");
  return value;
}

const char* GradNode::name() const {
  return is_accumulator() ? "AccumulateGrad" : custom ? custom->name() : op_name(kind);
}

Edge edge_of(const Tensor& t) {
  if (!t) return {};
  if (t->grad_fn) return {t->grad_fn, t->output_nr};
  if (!t->requires_grad) return {};
  auto acc = t->grad_accumulator.lock();
  if (!acc) {
    acc = std::make_shared<GradNode>();
    acc->leaf = t;
    acc->accumulator_ = true;
    t->grad_accumulator = acc;
  }
  return {acc};
}

void attach_custom_backward(const Tensor& out, std::shared_ptr<CustomBackward> bw, const std::vector<Tensor>& inputs) {
  auto node = std::make_shared<GradNode>();
  node->custom = std::move(bw);
  for (const Tensor& t : inputs) node->next.push_back(edge_of(t));
  out->grad_fn = node;
  out->output_nr = 0;
}

bool should_record(const std::vector<Tensor>& inputs) {
  if (!g_grad_enabled) return false;
  for (const auto& t : inputs)
    if (t && t->needs_grad()) return true;
  return false;
}

void record(OpKind kind, const std::vector<Tensor>& inputs, const Tensor& output,
            const Attrs& attrs) {
  if (!should_record(inputs)) return;
  auto node = std::make_shared<GradNode>();
  node->kind = kind;
  node->attrs = attrs;
  node->inputs.resize(inputs.size());
  SavedNeeds needs = saved_needs(kind);
  for (size_t i = 0; i < inputs.size(); i++) {
    node->inputs[i].save(needs.input_values || !inputs[i] ? inputs[i] : shape_only(inputs[i]));
    node->next.push_back(edge_of(inputs[i]));
  }
  // The output is saved as an alias without grad_fn: no reference cycle.
  node->output.save(needs.output_value ? detach(output) : shape_only(output));
  output->grad_fn = node;
  output->output_nr = 0;
}

SavedNeeds saved_needs(OpKind kind) {
  switch (kind) {
    case OpKind::Add: case OpKind::Sub: case OpKind::Neg: case OpKind::Cast:
    case OpKind::Clone: case OpKind::Sum: case OpKind::Mean: case OpKind::Reshape:
    case OpKind::Transpose: case OpKind::Permute: case OpKind::Unsqueeze:
    case OpKind::Squeeze: case OpKind::Expand: case OpKind::Slice: case OpKind::Select:
    case OpKind::SliceBackward: case OpKind::SliceScatter:
      return {false, false};
    case OpKind::Exp: case OpKind::Tanh: case OpKind::Sigmoid: case OpKind::Relu:
    case OpKind::Sqrt: case OpKind::Rsqrt: case OpKind::Softmax: case OpKind::LogSoftmax:
      return {false, true};
    case OpKind::Amax: case OpKind::Amin: case OpKind::Pow:
      return {true, true};
    default:
      return {true, false};
  }
}

Tensor shape_only(const Tensor& t) {
  auto p = std::make_shared<TensorImpl>();
  p->storage = std::make_shared<Storage>();
  p->sizes = t->sizes;
  p->strides = t->strides;
  p->dtype = t->dtype;
  return p;
}

namespace {

// Nodes reachable from `root`, ordered so that every node comes before the nodes it
// feeds gradients into (reverse post-order of a depth-first walk). The walk visits a node's
// leaf accumulators after its other inputs' producers, so that in the reverse order each
// accumulator comes right after the last node that feeds it, not after the whole rest of the
// backward: a leaf's gradient is final, and its hooks fire, as early as it can be (torch's
// engine gives AccumulateGrad the highest priority for the same reason: DDP's all-reduce of
// a bucket starts from those hooks while the backward of earlier layers still runs).
std::vector<GradNode*> topological_order(GradNode* root) {
  std::vector<GradNode*> post;
  std::unordered_set<GradNode*> seen{root};
  std::vector<std::pair<GradNode*, size_t>> stack{{root, 0}};
  while (!stack.empty()) {
    auto& [node, i] = stack.back();
    size_t n = node->next.size();
    if (i < 2 * n) {  // i < n: producers; n <= i < 2n: accumulators
      bool accumulators = i >= n;
      GradNode* child = node->next[i++ % n].node.get();
      if (child && child->is_accumulator() == accumulators && seen.insert(child).second)
        stack.push_back({child, 0});
    } else {
      post.push_back(node);
      stack.pop_back();
    }
  }
  return {post.rbegin(), post.rend()};
}

// Whether the leaf may take gradient g as its .grad without a copy (torch's AccumulateGrad
// steals it too): nothing else holds g or its memory (the backward made it for this leaf),
// and it is laid out as the leaf is, a whole dense buffer. A compiled backward's weight
// gradients are such tensors: copying them cost a GPT-2 step 48 copies.
static bool can_steal(const Tensor& g, const Tensor& leaf) {
  return g.use_count() == 1 && g->storage.use_count() == 1 && !g->grad_fn && !g->wrapped_number &&
         !g->requires_grad && g->dtype == leaf->dtype && g->device() == leaf->device() && g->offset == 0 &&
         g->is_contiguous() && leaf->is_contiguous() && g->storage->nbytes == (size_t)g->nbytes();
}

// The hooks of `leaf`, run on a copy of the list: a hook may remove itself or add another.
void run_post_accumulate_grad_hooks(const Tensor& leaf) {
  if (!leaf->hooks || leaf->hooks->post_accumulate.empty()) return;
  auto hooks = leaf->hooks->post_accumulate;
  for (auto& [id, hook] : hooks) hook(leaf);
}

void accumulate_into_leaf(GradNode* acc, Tensor g) {
  Tensor leaf = acc->leaf.lock();
  if (!leaf) return;
  NoGradGuard no_grad;
  if (g->sizes != leaf->sizes)
    fail("gradient of shape ", shape_str(g->sizes), " does not match the leaf's shape ",
         shape_str(leaf->sizes));
  if (!leaf->grad) {
    // the leaf owns its own buffer, never an alias of another grad or of a value in use
    leaf->grad = can_steal(g, leaf) ? std::move(g) : clone(g);
  } else {
    leaf->grad = binary(OpKind::Add, leaf->grad, g);
  }
  run_post_accumulate_grad_hooks(leaf);
}

// The callbacks queue_callback adds during the backward now running (null: none runs). A
// backward started from a hook or a callback has its own list (FinalCallbacks saves the outer).
thread_local std::vector<std::function<void()>>* g_final_callbacks = nullptr;

struct FinalCallbacks {
  std::vector<std::function<void()>> queued;
  std::vector<std::function<void()>>* outer;
  FinalCallbacks() : outer(g_final_callbacks) { g_final_callbacks = &queued; }
  ~FinalCallbacks() { g_final_callbacks = outer; }
  // Runs them in order, with those they queue (torch's engine does the same).
  void run() {
    for (size_t i = 0; i < queued.size(); i++) {
      std::function<void()> fn = std::move(queued[i]);
      fn();
    }
    queued.clear();
  }
};

}  // namespace

int add_post_accumulate_grad_hook(const Tensor& t, PostAccumulateGradHook hook) {
  if (t->grad_fn)
    fail("post accumulate grad hooks cannot be registered on non-leaf tensors");
  if (!t->requires_grad)
    fail("cannot register a hook on a tensor that doesn't require gradient");
  if (!t->hooks) t->hooks = std::make_shared<LeafHooks>();
  int id = t->hooks->next_id++;
  t->hooks->post_accumulate.emplace_back(id, std::move(hook));
  return id;
}

void remove_post_accumulate_grad_hook(const Tensor& t, int id) {
  if (!t->hooks) return;
  auto& hooks = t->hooks->post_accumulate;
  for (size_t i = 0; i < hooks.size(); i++)
    if (hooks[i].first == id) {
      hooks.erase(hooks.begin() + i);
      return;
    }
}

void queue_callback(std::function<void()> fn) {
  if (!g_final_callbacks) fail("Final callbacks can only be installed during backward pass.");
  g_final_callbacks->push_back(std::move(fn));
}

void backward(const Tensor& root, Tensor grad, bool retain_graph) {
  AutocastOffGuard autocast_off;  // backward ops take their dtypes from the forward's
  if (!root->needs_grad())
    fail("element 0 of tensors does not require grad and does not have a grad_fn");
  if (!grad) {
    if (root->numel() != 1)
      fail("grad can be implicitly created only for scalar outputs (the tensor has shape ",
           shape_str(root->sizes), "); pass a gradient: t.backward(gradient)");
    grad = full(root->sizes, 1.0, root->dtype, root->device());
  } else if (grad->sizes != root->sizes) {
    fail("gradient has shape ", shape_str(grad->sizes), " but the tensor has shape ",
         shape_str(root->sizes));
  }
  FinalCallbacks callbacks;  // what queue_callback adds from hooks, run once all is accumulated
  Edge root_edge = edge_of(root);
  std::vector<GradNode*> order = topological_order(root_edge.node.get());
  // the gradients flowing into each node, one slot per output of the node
  std::unordered_map<GradNode*, std::vector<Tensor>> pending;
  auto deliver = [&](GradNode* node, int output_nr, const Tensor& g) {
    auto& slots = pending[node];
    if (slots.empty()) slots.resize(node->num_outputs);
    Tensor& slot = slots.at(output_nr);
    slot = slot ? binary(OpKind::Add, slot, g) : g;
  };
  NoGradGuard no_grad;
  deliver(root_edge.node.get(), root->grad_fn ? root->output_nr : 0, grad);

  EagerBuilder builder;
  Rules<EagerBuilder> rules{builder};
  for (GradNode* node : order) {
    auto it = pending.find(node);
    if (it == pending.end()) continue;
    std::vector<Tensor> slots = std::move(it->second);
    pending.erase(it);
    if (node->is_accumulator()) {
      accumulate_into_leaf(node, std::move(slots[0]));
      continue;
    }
    if (node->released)
      fail("Trying to backward through the graph a second time (or directly access saved "
           "tensors after they have already been freed). Specify retain_graph=True on the "
           "first backward() call if you need to backward through the graph again.");
    if (node->custom) {
      std::vector<Tensor> grads = node->custom->apply(slots);
      for (size_t i = 0; i < grads.size() && i < node->next.size(); i++)
        if (node->next[i].node && grads[i]) deliver(node->next[i].node.get(), node->next[i].output_nr, grads[i]);
      if (!retain_graph) {
        node->released = true;
        node->custom->release();
      }
      continue;
    }
    Tensor g = std::move(slots[0]);
    std::vector<Tensor> in(node->inputs.size());
    std::vector<bool> need(node->inputs.size());
    for (size_t i = 0; i < in.size(); i++) {
      in[i] = node->inputs[i].unpack(node->name());
      need[i] = node->next[i].node != nullptr;
    }
    Tensor out = node->output.unpack(node->name());
    std::vector<Tensor> grads;
    if (node->kind == OpKind::LayerNorm) grads = layer_norm_backward(g, in, node->attrs, need);  // CUDA: fused
    if (grads.empty()) grads = rules.apply(node->kind, node->attrs, g, in, out, need);
    for (size_t i = 0; i < grads.size(); i++) {
      GradNode* child = node->next[i].node.get();
      if (!child || !grads[i]) continue;
      Tensor gi = grads[i];
      if (in[i] && gi->dtype != in[i]->dtype) gi = cast(gi, in[i]->dtype);
      deliver(child, node->next[i].output_nr, gi);
    }
    if (!retain_graph) {
      node->released = true;
      for (auto& s : node->inputs) s.value.reset();
      node->output.value.reset();
    }
  }
  callbacks.run();
}

}  // namespace mini
