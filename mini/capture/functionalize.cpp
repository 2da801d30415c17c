// functionalize.cpp — in-place ops in a graph of out-of-place ops (torch's functionalization,
// done while tracing instead of in AOTAutograd).
//
// Every traced tensor lives in a TracedStorage: its own (an op's result), its base's (a view),
// or a real tensor's (a graph input). Writing x in place (x.add_(1), x += 1, x[0].zero_())
// computes the new value out of place, scatters it into the base when x is a view
// (slice_scatter), and then recomputes every tensor in that memory — x, its base, its other
// views, every name bound to them — by replaying their views on the new base. A written
// graph input's final value becomes a graph output that the driver copies into the real
// tensor after the graph ran (run_unit.cpp), as AOTAutograd's epilogue does.
//
// A write inside an instruction that then breaks the graph is undone (ctx.writes): the
// instruction runs again eagerly and must find the values from before it.
#include <algorithm>

#include "capture/trace_context.h"
#include "tensor/autograd.h"

namespace mini::capture {

namespace {

// A reshape whose result is a view of its input (false: a copy). Unknown for dynamic sizes.
bool reshape_is_view(const graph::Node& input, const graph::Node& n, bool* known) {
  auto dynamic = [](const std::vector<int64_t>& v) {
    return std::any_of(v.begin(), v.end(), [](int64_t s) { return s < 0; });
  };
  *known = !dynamic(input.meta.sizes) && !dynamic(input.meta.strides) && !dynamic(n.meta.sizes);
  if (!*known) return true;
  Strides st;
  return view_strides(input.meta.sizes, input.meta.strides, n.meta.sizes, &st);
}

TensorImpl* example_tensor(TraceContext& ctx, int input) {
  if (input < 0 || ctx.trace.scalar_inputs.at(input)) return nullptr;
  return guards::unwrap_tensor(ctx.trace.example_inputs.at(input));
}

// The mutated graph input whose real memory `t` shares, or -1.
int written_input_sharing(TraceContext& ctx, TensorImpl* t, int except) {
  for (const auto& s : ctx.input_storages) {
    TensorImpl* other = example_tensor(ctx, s->input);
    bool shared = other && t && other->storage == t->storage;
    if (s->mutated && s->input != except && shared) return s->input;
  }
  return -1;
}

// Eager's checks for an in-place write into a graph input (or a view of one).
void check_input_write(TraceContext& ctx, const TracedStorage& s, bool through_view,
                       const std::string& op) {
  TensorImpl* t = example_tensor(ctx, s.input);
  if (!t) unsupported("an in-place " + op + " on a Python number");
  if (ctx.grad_enabled && t->requires_grad && t->is_leaf())
    fail_inplace_on_leaf(op.c_str(), through_view);
  if (ctx.grad_enabled && t->view_of_grad_leaf) fail_inplace_on_leaf(op.c_str(), true);
  for (size_t j = 0; j < ctx.trace.example_inputs.size(); j++) {
    TensorImpl* other = example_tensor(ctx, (int)j);
    if ((int)j != s.input && other && other->storage == t->storage)
      unsupported("an in-place " + op + " on the input " + ctx.trace.input_sources[s.input]->str() +
                  ", which shares memory with the input " + ctx.trace.input_sources[j]->str() +
                  "; mini's capture does not model writes through aliased inputs");
  }
}

// The base `below` with `fresh` written where the view node `view` of it looks (the
// inverse of one view step).
int scatter(TraceContext& ctx, int view, int below, int fresh) {
  graph::Graph& g = ctx.graph();
  OpKind op = g.nodes[view].op;
  Attrs a = g.nodes[view].attrs;  // copies: add_tensor_op grows g.nodes
  Shape below_sizes = g.nodes[below].meta.sizes;
  int64_t rank = (int64_t)below_sizes.size();
  switch (op) {
    case OpKind::Select: {
      if (a.index < 0) unsupported("an in-place op through a negative index of a dynamic size");
      Attrs u;
      u.dim = wrap_dim(a.dim, rank);
      Attrs sc;
      sc.dim = u.dim;
      sc.start = a.index;
      sc.end = a.index + 1;
      int row = add_tensor_op(ctx, OpKind::Unsqueeze, {fresh}, u);
      return add_tensor_op(ctx, OpKind::SliceScatter, {below, row}, sc);
    }
    case OpKind::Slice: return add_tensor_op(ctx, OpKind::SliceScatter, {below, fresh}, a);
    case OpKind::Transpose: return add_tensor_op(ctx, OpKind::Transpose, {fresh}, a);
    case OpKind::Permute: {
      Attrs inverse;
      inverse.dims.resize(a.dims.size());
      for (int64_t i = 0; i < rank; i++) inverse.dims[wrap_dim(a.dims[i], rank)] = i;
      return add_tensor_op(ctx, OpKind::Permute, {fresh}, inverse);
    }
    case OpKind::Reshape: case OpKind::Unsqueeze: case OpKind::Squeeze: {
      if (std::count(below_sizes.begin(), below_sizes.end(), graph::kUnbacked))
        unsupported("an in-place op through a view of a tensor whose size is known only when "
                    "it runs");
      Attrs r;
      r.shape = below_sizes;
      return add_tensor_op(ctx, OpKind::Reshape, {fresh}, r);
    }
    case OpKind::Detach: return fresh;
    default:
      unsupported(std::string("an in-place op through a ") + op_name(op) + " view");
  }
}

}  // namespace

bool is_contiguous(const graph::TensorMeta& m) {
  int64_t expected = 1;
  for (size_t i = m.sizes.size(); i-- > 0;) {
    if (m.sizes[i] == 1) continue;
    if (m.sizes[i] < 0 || m.strides[i] != expected) return false;
    expected *= m.sizes[i];
  }
  return true;
}

int add_tensor_op(TraceContext& ctx, OpKind op, const std::vector<int>& inputs,
                  const Attrs& attrs) {
  graph::Graph& g = ctx.graph();
  int id = g.add_op(op, inputs, attrs, ctx.current_code);
  bool from_grad = false;
  for (int i : inputs) from_grad = from_grad || (i >= 0 && g.nodes[i].meta.requires_grad);
  graph::Node& n = g.nodes[id];
  n.meta.requires_grad = from_grad && ctx.grad_enabled && is_floating(n.meta.dtype) &&
                         op != OpKind::Detach;
  return id;
}

const Alias& alias_of(TraceContext& ctx, int id) {
  auto found = ctx.aliases.find(id);
  if (found != ctx.aliases.end()) return found->second;
  graph::Graph& g = ctx.graph();
  const graph::Node& n = g.nodes[id];
  bool view = n.kind == graph::NodeKind::Op && op_class(n.op) == OpClass::View && n.inputs[0] >= 0;
  bool known = true;
  if (view && n.op == OpKind::Reshape) view = reshape_is_view(g.nodes[n.inputs[0]], n, &known);
  Alias a;
  if (view) {
    a = alias_of(ctx, n.inputs[0]);
    a.views.push_back(id);
    a.exact = a.exact && known;
  } else {
    a.storage = std::make_shared<TracedStorage>();
    a.storage->base = id;
    if (n.kind == graph::NodeKind::Input) {
      int input = (int)(std::find(g.inputs.begin(), g.inputs.end(), id) - g.inputs.begin());
      int shared = written_input_sharing(ctx, example_tensor(ctx, input), input);
      if (shared >= 0)
        unsupported("reading " + ctx.trace.input_sources[input]->str() + ", which shares memory "
                    "with " + ctx.trace.input_sources[shared]->str() + ", already written in place");
      a.storage->input = input;
      ctx.input_storages.push_back(a.storage);
    }
  }
  return ctx.aliases[id] = std::move(a);
}

VarRef tensor_var(TraceContext& ctx, int node) {
  alias_of(ctx, node);
  VarRef v = make_tensor(node);
  ctx.tensor_vars.push_back(v);
  return v;
}

void check_writable(TraceContext& ctx, const VarRef& self, const std::string& op) {
  const graph::TensorMeta& m = ctx.graph().nodes[self->tensor().node].meta;
  if (!has_internal_overlap(m.sizes, m.strides)) return;
  if (op == "fill_" || op == "zero_")
    unsupported("an in-place " + op + " on an expanded tensor (several of its elements share one memory "
                "location), which mini's functionalization does not model");
  check_no_internal_overlap(m.sizes, m.strides);
}

void write_in_place(TraceContext& ctx, const VarRef& self, int value, const std::string& op) {
  graph::Graph& g = ctx.graph();
  const int self_node = self->tensor().node;
  if (g.nodes[self_node].wrapped_number) unsupported("an in-place " + op + " on a Python number");
  Alias alias = alias_of(ctx, self_node);  // a copy: ctx.aliases grows below
  TracedStorage& s = *alias.storage;
  if (!alias.exact)
    unsupported("an in-place " + op + " on a reshape of dynamic sizes, which may be a view or a "
                "copy (known only when it runs)");
  bool through_detach = false;
  for (int v : alias.views) {
    if (g.nodes[v].op == OpKind::Expand)
      unsupported("an in-place " + op + " on an expanded tensor: several of its elements share one "
                  "memory location; clone() it first");
    through_detach = through_detach || g.nodes[v].op == OpKind::Detach;
  }
  // A write through detach() changes the data under an autograd history it must not touch;
  // a new value in the graph would replace that history.
  int base_input = s.input >= 0 ? g.inputs[s.input] : -1;
  bool history = g.nodes[s.base].meta.requires_grad || g.nodes[value].meta.requires_grad ||
                 (base_input >= 0 && g.nodes[base_input].meta.requires_grad);
  if (through_detach && history)
    unsupported("an in-place " + op + " through detach() of a tensor that requires grad (a write "
                "hidden from autograd), which mini's functionalization does not model");
  if (s.input >= 0) check_input_write(ctx, s, !alias.views.empty(), op);

  // The new value of the base: scattered back through self's views, last view first.
  int fresh = value;
  for (size_t k = alias.views.size(); k-- > 0;)
    fresh = scatter(ctx, alias.views[k], k == 0 ? s.base : alias.views[k - 1], fresh);
  // An inverse transpose is a strided view of the new value: keep the base's own layout.
  if (is_contiguous(g.nodes[s.base].meta) && !is_contiguous(g.nodes[fresh].meta))
    fresh = add_tensor_op(ctx, OpKind::Clone, {fresh}, {});

  ctx.writes.push_back({alias.storage, s.base, s.mutated, {}});
  s.base = fresh;
  s.mutated = true;
  ctx.aliases[fresh] = {alias.storage, {}, true};
  // Every tensor in this memory, recomputed from the new base: its views replayed (a view
  // shared by several tensors is replayed once).
  std::unordered_map<int, int> replayed;
  auto& vars = ctx.tensor_vars;
  auto dead = [](const std::weak_ptr<Var>& w) { return w.expired(); };
  vars.erase(std::remove_if(vars.begin(), vars.end(), dead), vars.end());
  for (const auto& weak : vars) {
    VarRef v = weak.lock();
    Var::Tensor& t = v->tensor();
    const Alias& a = alias_of(ctx, t.node);
    if (a.storage != alias.storage || t.node == fresh) continue;
    if (!a.exact)
      unsupported("an in-place " + op + " on a tensor that a reshape of dynamic sizes may view (or "
                  "may have copied: known only when it runs)");
    std::vector<int> path = a.views;
    int node = fresh;
    for (int view : path) {
      auto it = replayed.find(view);
      if (it == replayed.end()) {
        Attrs attrs = g.nodes[view].attrs;
        it = replayed.emplace(view, add_tensor_op(ctx, g.nodes[view].op, {node}, attrs)).first;
        alias_of(ctx, it->second);
      }
      node = it->second;
    }
    ctx.writes.back().nodes.push_back({v, t.node});
    t.node = node;
  }
}

void undo_writes(TraceContext& ctx, size_t mark) {
  while (ctx.writes.size() > mark) {
    Write& w = ctx.writes.back();
    for (auto it = w.nodes.rbegin(); it != w.nodes.rend(); ++it) it->first->tensor().node = it->second;
    w.storage->base = w.base;
    w.storage->mutated = w.mutated;
    ctx.writes.pop_back();
  }
}

int input_itself(TraceContext& ctx, const VarRef& t) {
  const Alias& a = alias_of(ctx, t->tensor().node);
  return a.views.empty() ? a.storage->input : -1;
}

PyTypeObject* tensor_type_of(TraceContext& ctx, const VarRef& t) {
  int input = input_itself(ctx, t);
  if (input >= 0 && !ctx.trace.scalar_inputs.at(input)) return Py_TYPE(ctx.trace.example_inputs.at(input));
  return (PyTypeObject*)python_bridge().tensor_type;
}

bool tensor_requires_grad(TraceContext& ctx, const VarRef& t) {
  graph::Graph& g = ctx.graph();
  int input = input_itself(ctx, t);
  bool own = input >= 0 && g.nodes[g.inputs[input]].meta.requires_grad;  // a leaf's flag stays
  return own || g.nodes[t->tensor().node].meta.requires_grad;
}

void add_input_mutations(TraceContext& ctx) {
  auto& outs = ctx.graph().outputs;
  for (const auto& s : ctx.input_storages) {
    if (!s->mutated) continue;
    auto it = std::find(outs.begin(), outs.end(), s->base);
    if (it == outs.end()) it = outs.insert(outs.end(), s->base);
    ctx.trace.input_mutations.push_back({s->input, (int)(it - outs.begin())});
  }
}

}  // namespace mini::capture
