// joint.cpp — step 1 of the training graphs, the trace (AOTAutograd's joint graph).
//
// In:  the captured forward graph (its inputs carry requires_grad in their meta).
// Out: the joint graph: the forward's nodes, one tangent input per distinct differentiable
//      output, then the backward's nodes, traced by running derivatives.h's rules with a
//      builder whose values are graph nodes (GraphBuilder) — the same rules eager autograd runs
//      on tensors. Its outputs are the gradients of the forward inputs that carry one.
// Guarantees: the builder folds what the rules would otherwise leave as ops (arithmetic on
// constants, a where of a constant condition, a transpose of a transpose).
#include <algorithm>
#include <map>
#include <set>

#include "autograd/training_steps.h"
#include "tensor/derivatives.h"

namespace mini::autograd {

namespace {

// A value of the joint graph as derivatives.h sees it: a node id, or none (-1).
struct GraphValue {
  int id = -1;
  explicit operator bool() const { return id >= 0; }
};

// The builder derivatives.h's rules run against while tracing backward: each call appends a
// node to the joint graph.
struct GraphBuilder {
  using Value = GraphValue;
  Graph& g;
  int first_backward = 0;  // the first node the backward's rules append
  Value call(OpKind k, std::vector<Value> in, const Attrs& a) {
    std::vector<int> ids;
    for (const Value& v : in) ids.push_back(v.id);
    if (Value folded = fold(k, ids, a)) return folded;
    if (k == OpKind::Transpose && ids.size() == 1 && ids[0] >= 0)
      if (Value back = fold_transpose(ids[0], a)) return back;
    if (op_outputs(k) > 1) {  // an output of a call already in the graph (add_other_outputs)
      Node want;
      want.op = k, want.inputs = ids, want.attrs = a;
      for (size_t id = 0; id < g.nodes.size(); id++)
        if (graph::same_call(want, g.nodes[id]) && g.nodes[id].attrs.index == a.index) return {(int)id};
    }
    return {g.add_op(k, ids, a)};
  }
  // Arithmetic on two constants is a constant (pow's rule computes y - 1 for y = 2): left as
  // an op, it would turn pow(x, 2 - 1) into a pow with a run-time exponent. So is a comparison
  // of two, and a where of a constant condition is the value it picks, when that has the
  // where's shape (pow's rule asks whether y == 0: for x ** 2 it is the plain formula).
  Value fold(OpKind k, const std::vector<int>& ids, const Attrs& a) {
    if (k == OpKind::Where) return fold_where(ids, a);
    if (ids.size() != 2 || ids[0] < 0 || ids[1] < 0) return {};
    const Node& x = g.nodes[ids[0]];
    const Node& y = g.nodes[ids[1]];
    if (x.kind != NodeKind::Constant || y.kind != NodeKind::Constant) return {};
    double r;
    switch (k) {
      case OpKind::Add: r = x.value + y.value; break;
      case OpKind::Sub: r = x.value - y.value; break;
      case OpKind::Mul: r = x.value * y.value; break;
      case OpKind::Div: r = x.value / y.value; break;
      case OpKind::Eq: r = x.value == y.value; break;
      case OpKind::Ne: r = x.value != y.value; break;
      case OpKind::Lt: r = x.value < y.value; break;
      case OpKind::Le: r = x.value <= y.value; break;
      case OpKind::Gt: r = x.value > y.value; break;
      case OpKind::Ge: r = x.value >= y.value; break;
      default: return {};
    }
    DType d = graph::infer_meta(k, {x.meta, y.meta}, {true, true}, a).dtype;
    return {g.add_constant(r, d)};
  }
  Value fold_where(const std::vector<int>& ids, const Attrs& a) {
    if (ids.size() != 3 || ids[0] < 0 || ids[1] < 0 || ids[2] < 0) return {};
    const Node& cond = g.nodes[ids[0]];
    if (cond.kind != NodeKind::Constant) return {};
    const Node& picked = g.nodes[cond.value != 0 ? ids[1] : ids[2]];
    std::vector<TensorMeta> in;
    std::vector<bool> wrapped;
    for (int i : ids) {
      in.push_back(g.nodes[i].meta);
      wrapped.push_back(g.nodes[i].kind == NodeKind::Constant || g.nodes[i].wrapped_number);
    }
    bool all_wrapped = std::all_of(wrapped.begin(), wrapped.end(), [](bool w) { return w; });
    TensorMeta out = graph::infer_meta(OpKind::Where, in, wrapped, a);
    // the picked value stands for the where's result: same shape and dtype, and a Python
    // number only where the where would be one (a number promotes with the lowest priority)
    bool picked_wrapped = picked.kind == NodeKind::Constant || picked.wrapped_number;
    if (picked.meta.sizes != out.sizes || picked.meta.dtype != out.dtype || picked_wrapped != all_wrapped)
      return {};
    return {cond.value != 0 ? ids[1] : ids[2]};
  }
  // A transpose of a transpose of the same two dims is the value itself, also through a cast
  // between them (a cast is elementwise: transpose(cast(transpose(w))) = cast(w)). A Linear's
  // weight gradient comes out so: the weight is used as W^T (through autocast's cast), matmul's
  // rule gives the gradient of W^T transposed (prefers_transposed_grad), and W's gradient is
  // then contiguous, not a transposed view the optimizer's .grad copies. Only a cast the
  // backward makes folds: the forward's cast of W^T is in memory already (its matmul read it),
  // and the input gradient's matmul reads its transpose as it is, where cast(w) would be a new
  // kernel a step and a second copy of the weight.
  Value fold_transpose(int x_id, const Attrs& a) {
    const Node& x = g.nodes[x_id];
    auto pair = [](const Node& n, const Attrs& at) {  // the transposed dims, normalized
      int64_t r = (int64_t)n.meta.sizes.size(), d0 = at.dim < 0 ? at.dim + r : at.dim,
              d1 = at.dim2 < 0 ? at.dim2 + r : at.dim2;
      return std::make_pair(std::min(d0, d1), std::max(d0, d1));
    };
    auto transposes_back = [&](const Node& n) {
      return n.kind == NodeKind::Op && n.op == OpKind::Transpose && pair(g.nodes[n.inputs[0]], n.attrs) == pair(x, a);
    };
    if (x.kind != NodeKind::Op) return {};
    if (transposes_back(x)) return {x.inputs[0]};
    if (x.op == OpKind::Cast && x_id >= first_backward && x.inputs[0] >= 0 && transposes_back(g.nodes[x.inputs[0]])) {
      const Attrs cast = x.attrs;
      return call(OpKind::Cast, {Value{g.nodes[x.inputs[0]].inputs[0]}}, cast);
    }
    return {};
  }
  // Whether w (a matmul's right operand) is a transpose of a matrix, through casts: its
  // gradient is better computed transposed (fold_transpose).
  bool prefers_transposed_grad(const Value& w) {
    int id = w.id;
    while (id >= 0 && g.nodes[id].kind == NodeKind::Op && g.nodes[id].op == OpKind::Cast) id = g.nodes[id].inputs[0];
    return id >= 0 && g.nodes[id].kind == NodeKind::Op && g.nodes[id].op == OpKind::Transpose &&
           g.nodes[id].meta.sizes.size() == 2;
  }
  Shape shape(const Value& v) { return g.nodes[v.id].meta.sizes; }
  DType dtype(const Value& v) { return g.nodes[v.id].meta.dtype; }
  Value scalar(double x, DType d) { return {g.add_constant(x, d)}; }
};

TensorMeta contiguous_meta(const TensorMeta& m) {
  return {m.sizes, contiguous_strides(m.sizes), m.dtype, false};
}

// Per output of the joint graph J, the tangents (by index; tangent_inputs[t] is tangent t's
// input node) it is computed from: the eager engine reaches an input only through outputs
// that got a gradient, and the compiled node must know which of its gradients those are.
// Forward nodes (ids below first_backward) read no tangent.
std::vector<std::vector<int>> tangents_of_outputs(const Graph& J, int first_backward,
                                                  const std::vector<int>& tangent_inputs) {
  std::vector<std::set<int>> reads(J.nodes.size());
  for (size_t t = 0; t < tangent_inputs.size(); t++) reads[tangent_inputs[t]].insert((int)t);
  for (int id = first_backward; id < (int)J.nodes.size(); id++)
    for (int i : J.nodes[id].inputs)
      if (i >= first_backward) reads[id].insert(reads[i].begin(), reads[i].end());
  std::vector<std::vector<int>> per_output;
  for (int out : J.outputs) per_output.emplace_back(reads[out].begin(), reads[out].end());
  return per_output;
}

}  // namespace

// Appends to `g` a node for every output of a multi-output call that has none (attention's
// log-sum-exp beside its output): forward values the backward's rules read, which the forward
// computes in the same call (graph::same_call) and the partition saves.
void add_other_outputs(Graph& g) {
  const size_t n = g.nodes.size();
  for (size_t id = 0; id < n; id++) {
    const Node& node = g.nodes[id];
    if (node.kind != NodeKind::Op || op_outputs(node.op) < 2) continue;
    std::vector<bool> present(op_outputs(node.op), false);
    for (size_t other = 0; other < g.nodes.size(); other++)
      if (other == id || graph::same_call(node, g.nodes[other])) present[g.nodes[other].attrs.index] = true;
    for (int index = 0; index < (int)present.size(); index++)
      if (!present[index]) {
        Node copy = g.nodes[id];
        copy.attrs.index = index;
        g.add_op(copy.op, copy.inputs, copy.attrs, copy.code);
      }
  }
}

// Step 1, trace: the joint graph J (the forward's nodes [0, first_backward), then one tangent
// input per distinct differentiable output, then the backward's nodes), traced from
// derivatives.h's rules, each forward op in reverse order handing its gradient to its inputs.
// J's outputs are the gradients of the forward inputs that carry one. Fills tg's tangents,
// tangent_of_output, num_user_outputs, grad_inputs and tangents_of_grad.
int trace_joint(const Graph& fwd, Graph& J, TrainingGraphs& tg) {
  const int n_fwd = (int)J.nodes.size();
  // Which forward values carry a gradient: inputs that require it, and floating outputs of
  // ops reading one (comparisons, casts to integers, integer math and detach carry none; nor
  // do ops traced with grad off, inside `with mini.no_grad()`).
  std::vector<bool> carries(n_fwd, false);
  for (int id = 0; id < n_fwd; id++) {
    const Node& n = J.nodes[id];
    if (!is_floating(n.meta.dtype)) continue;
    if (n.kind == NodeKind::Input) carries[id] = n.meta.requires_grad;
    if (n.kind != NodeKind::Op || n.op == OpKind::Detach || n.grad_mode == graph::GradMode::Off) continue;
    for (int i : n.inputs) carries[id] = carries[id] || (i >= 0 && carries[i]);
  }

  // One tangent (incoming gradient) per distinct differentiable output.
  std::vector<GraphValue> grad(n_fwd);
  std::map<int, int> tangent_of_node;
  std::vector<int> tangent_inputs;  // the joint graph's input node of each tangent
  tg.num_user_outputs = (int)fwd.outputs.size();
  for (int out : fwd.outputs) {
    int t = -1;
    if (carries[out]) {
      auto it = tangent_of_node.find(out);
      if (it == tangent_of_node.end()) {
        t = (int)tg.tangents.size();
        TensorMeta m = contiguous_meta(J.nodes[out].meta);
        tg.tangents.push_back(m);
        grad[out] = {J.add_input(m, "tangents_" + std::to_string(t + 1))};
        tangent_inputs.push_back(grad[out].id);
        tangent_of_node[out] = t;
      } else {
        t = it->second;
      }
    }
    tg.tangent_of_output.push_back(t);
  }
  J.outputs.clear();
  const int first_backward = n_fwd;

  GraphBuilder builder{J, first_backward};
  Rules<GraphBuilder> rules{builder};
  for (int id = n_fwd - 1; id >= 0; id--) {
    if (!grad[id] || J.nodes[id].kind != NodeKind::Op) continue;
    Node n = J.nodes[id];  // a copy: the rules append to J.nodes
    std::vector<GraphValue> in;
    std::vector<bool> need;
    for (int i : n.inputs) {
      in.push_back({i});
      need.push_back(i >= 0 && carries[i]);
    }
    std::vector<GraphValue> gi = rules.apply(n.op, n.attrs, grad[id], in, {id}, need);
    for (size_t k = 0; k < gi.size(); k++) {
      int target = n.inputs[k];
      if (!gi[k] || target < 0 || !need[k]) continue;
      GraphValue g = gi[k];
      if (J.nodes[g.id].meta.dtype != J.nodes[target].meta.dtype) {
        Attrs a;
        a.dtype = J.nodes[target].meta.dtype;
        g = {J.add_op(OpKind::Cast, {g.id}, a)};
      }
      grad[target] = grad[target] ? GraphValue{J.add_op(OpKind::Add, {grad[target].id, g.id}, {})} : g;
    }
  }
  for (size_t p = 0; p < fwd.inputs.size(); p++) {
    int id = fwd.inputs[p];
    if (carries[id] && grad[id]) {
      J.outputs.push_back(grad[id].id);
      tg.grad_inputs.push_back((int)p);
    }
  }
  tg.tangents_of_grad = tangents_of_outputs(J, first_backward, tangent_inputs);
  return first_backward;
}

}  // namespace mini::autograd
