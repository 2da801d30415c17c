// lower.cpp — a FusionGroup lowered to a LoopKernel (loop_ir.h): the kernel's structure and its
// expressions as data, shared by the C++ and CUDA renderers.
#include <algorithm>
#include <functional>
#include <tuple>

#include "codegen/loop_ir.h"
#include "tensor/errors.h"

namespace mini::codegen {

using graph::Node;
using graph::NodeKind;

namespace {

ExprPtr make(Expr e) { return std::make_shared<const Expr>(std::move(e)); }

}  // namespace

bool is_constant(const ExprPtr& e, double v) {
  const Expr* c = e.get();
  if (c->kind == Expr::Kind::Cast) c = c->args[0].get();
  return c->kind == Expr::Kind::Constant && c->dtype != DType::Bool && c->value == v;
}

bool LoadKey::operator<(const LoadKey& o) const {
  auto term = [](const IndexTerm& t) { return std::make_tuple(t.dim, t.stride, t.axis); };
  auto terms = [&](const Index& i) {
    std::vector<std::tuple<int64_t, int64_t, int>> all;
    for (const IndexTerm& t : i.terms) all.push_back(term(t));
    return all;
  };
  auto pad = [](const Index& i) {  // the pad fields mean something only on a padded load
    return i.pad_dim < 0 ? std::make_tuple(int64_t(-1), int64_t(0), int64_t(0))
                         : std::make_tuple(i.pad_dim, i.pad_lo, i.pad_len);
  };
  return std::make_tuple(buffer, index.flat, terms(index), pad(index)) <
         std::make_tuple(o.buffer, o.index.flat, terms(o.index), pad(o.index));
}

LoadKey load_key(const Expr& load) { return {load.buffer, load.index}; }

void for_each_load(const ExprPtr& e, const std::function<void(const Expr&)>& fn) {
  if (e->kind == Expr::Kind::Load) fn(*e);
  for (const ExprPtr& arg : e->args) for_each_load(arg, fn);
}

ExprPtr substitute(const ExprPtr& e, const std::function<ExprPtr(const Expr&)>& fn) {
  if (ExprPtr replaced = fn(*e)) return replaced;
  std::vector<ExprPtr> args;
  bool changed = false;
  for (const ExprPtr& arg : e->args) {
    args.push_back(substitute(arg, fn));
    changed = changed || args.back() != arg;
  }
  if (!changed) return e;
  Expr copy = *e;
  copy.args = std::move(args);
  return make(std::move(copy));
}

ExprPtr temp(int node, DType dtype, bool row) {
  Expr e;
  e.kind = Expr::Kind::Temp;
  e.dtype = dtype;
  e.node = node;
  e.row = row;
  return make(std::move(e));
}

ExprPtr local(std::string name, DType dtype) {
  Expr e;
  e.kind = Expr::Kind::Local;
  e.dtype = dtype;
  e.name = std::move(name);
  return make(std::move(e));
}

DType compute_type(const graph::Graph& g, const Node& n) {
  std::vector<Tensor> metas;
  for (int i : n.inputs) {
    if (i < 0) continue;
    auto t = std::make_shared<TensorImpl>();
    t->sizes = g.nodes[i].meta.sizes;
    t->dtype = g.nodes[i].meta.dtype;
    t->wrapped_number = g.nodes[i].kind == NodeKind::Constant || g.nodes[i].wrapped_number;
    metas.push_back(t);
  }
  switch (n.op) {
    case OpKind::Eq: case OpKind::Ne: case OpKind::Lt: case OpKind::Le: case OpKind::Gt: case OpKind::Ge:
      return result_type(metas);
    case OpKind::Where: return n.meta.dtype;
    case OpKind::Cast: return g.nodes[n.inputs[0]].meta.dtype;
    default: return n.meta.dtype;
  }
}

LoopKernel::LoopKernel(const fusion::Schedule& s, const fusion::FusionGroup& k, bool online_softmax)
    : g_(s.graph), k_(k) {
  for (int id : k.nodes) in_kernel_.insert(id);
  for (size_t i = 0; i < k.loads.size(); i++) load_index_[k.loads[i]] = (int)i;
  for (size_t i = 0; i < k.stores.size(); i++) store_index_[k.stores[i]] = (int)(k.loads.size() + i);
  rank_ = (int)k.space.size();
  for (int64_t d = 0; d < rank_; d++) all_dims_.push_back(d);
  for (int64_t d = 0; d < rank_; d++)
    (std::count(k.reduced.begin(), k.reduced.end(), d) ? red_dims_ : kept_dims_).push_back(d);
  // the phase of each reduction: after the reductions it reads
  for (int id : k.nodes) {
    const Node& n = g_.nodes[id];
    std::set<int>& below = below_[id];  // inputs come first in program order: already filled
    for (int i : n.inputs) {
      if (i < 0 || !in_kernel_.count(i)) continue;
      if (op_class(g_.nodes[i].op) == OpClass::Reduction) below.insert(i);
      else below.insert(below_[i].begin(), below_[i].end());
    }
    int p = 0;
    for (int dep : below) p = std::max(p, phase_[dep] + 1);
    if (op_class(n.op) == OpClass::Reduction) {
      int m = online_softmax ? find_online_max(id) : -1;
      if (m >= 0) {  // folds in its max's pass: every other reduction below it is below the max
        online_[id] = m;
        p = phase_[m];
      }
      phase_[id] = p;
      phases_ = std::max(phases_, p + 1);
    }
  }
  // a flat pointwise loop splits i into x0, x1, ... when one of its loads is neither contiguous
  // over the space nor a scalar
  if (k.reduced.empty()) {
    std::set<int> targets(k.stores.begin(), k.stores.end());
    for (int id : full_values_for(targets))
      for (int i : g_.nodes[id].inputs) {
        if (g_.nodes[id].op == OpKind::SliceBackward) flat_uses_index_ = true;  // its mask reads x
        if (i < 0 || in_kernel_.count(i) || g_.nodes[i].kind == NodeKind::Constant) continue;
        const graph::TensorMeta& m = g_.nodes[i].meta;
        bool scalar = std::all_of(m.sizes.begin(), m.sizes.end(), [](int64_t v) { return v == 1; });
        if (!load(i, true, false)->index.flat && !scalar) flat_uses_index_ = true;
      }
  }
}

int LoopKernel::find_online_max(int sum) const {
  auto node_in_kernel = [&](int id, OpKind op) { return id >= 0 && in_kernel_.count(id) && g_.nodes[id].op == op; };
  const Node& s = g_.nodes[sum];
  if (s.op != OpKind::Sum && s.op != OpKind::Mean) return -1;
  const int e = s.inputs[0];
  if (!node_in_kernel(e, OpKind::Exp) || !is_full(e) || !is_floating(g_.nodes[e].meta.dtype)) return -1;
  const int d = g_.nodes[e].inputs[0];
  if (!node_in_kernel(d, OpKind::Sub) || !is_full(d)) return -1;
  const int m = g_.nodes[d].inputs[1];
  // the same x on both sides keeps every exp(x - running max) <= 1: no overflow on the way
  if (!node_in_kernel(m, OpKind::Amax) || g_.nodes[m].inputs[0] != g_.nodes[d].inputs[0]) return -1;
  if (g_.nodes[m].meta.sizes.size() != k_.space.size()) return -1;  // keepdim: broadcast along the row
  return m;
}

int LoopKernel::online_max(int sum) const {
  auto it = online_.find(sum);
  return it == online_.end() ? -1 : it->second;
}

bool LoopKernel::reads_running_max(int id, int p) const {
  for (auto& [sum, m] : online_)
    if (phase_.at(m) == p && below_.at(id).count(m)) return true;
  return false;
}

bool LoopKernel::is_reduction(int id) const { return op_class(g_.nodes[id].op) == OpClass::Reduction; }

bool LoopKernel::is_full(int id) const { return g_.nodes[id].meta.sizes == k_.space && !is_reduction(id); }

int LoopKernel::store_phase(int id) const {
  int p = 0;
  for (int dep : reductions_below(id)) p = std::max(p, phase_.at(dep) + 1);
  return p;
}

std::set<int> LoopKernel::phase_targets(int p, std::vector<int>* reds, std::vector<int>* stores) const {
  for (int id : k_.nodes) {
    if (is_reduction(id) && phase_.at(id) == p) reds->push_back(id);
    if (is_full(id) && is_store(id) && store_phase(id) == p) stores->push_back(id);
  }
  std::set<int> targets(reds->begin(), reds->end());
  targets.insert(stores->begin(), stores->end());
  return targets;
}

int64_t LoopKernel::static_extent(const std::vector<int64_t>& dims) const {
  int64_t n = 1;
  for (int64_t d : dims) n = k_.space[d] < 0 || n < 0 ? -1 : n * k_.space[d];
  return n;
}

// ---- expressions --------------------------------------------------------------------------

ExprPtr LoopKernel::value(int id, bool flat_ok, bool row_context) const {
  const Node& n = g_.nodes[id];
  if (n.kind == NodeKind::Constant) {
    Expr e;
    e.kind = Expr::Kind::Constant;
    e.dtype = n.meta.dtype;
    e.value = n.value;
    return make(std::move(e));
  }
  if (in_kernel_.count(id)) {
    Expr e;
    e.kind = Expr::Kind::Temp;
    e.dtype = n.meta.dtype;
    e.node = id;
    e.row = !is_full(id);
    return make(std::move(e));
  }
  return load(id, flat_ok, row_context);
}

ExprPtr LoopKernel::load(int id, bool flat_ok, bool row_context) const {
  const graph::TensorMeta& m = g_.nodes[id].meta;
  Expr e;
  e.kind = Expr::Kind::Load;
  // An int64 arange (cross-entropy's classes) is its index: computed where it is read, not
  // loaded, 8 bytes an element that also narrowed a row kernel's vectors to 16 bytes of int64.
  const Node& src = g_.nodes[id];
  if (src.kind == NodeKind::Op && src.op == OpKind::Arange && !src.symbolic_attrs && m.dtype == DType::Int64 &&
      m.sizes.size() == 1) {
    e.kind = Expr::Kind::Iota;
    e.start = src.attrs.start;
    e.step = src.attrs.step;
  }
  e.dtype = m.dtype;
  e.node = id;
  e.buffer = load_index_.at(id);
  bool static_strides = std::all_of(m.strides.begin(), m.strides.end(), [](int64_t v) { return v >= 0; }) &&
                        std::all_of(m.sizes.begin(), m.sizes.end(), [](int64_t v) { return v >= 0; });
  // (an iota is spelled by its x<d>, never by a flat loop's i: vector lanes read i + lane)
  if (e.kind == Expr::Kind::Load && flat_ok && m.sizes == k_.space && static_strides &&
      m.strides == contiguous_strides(m.sizes)) {
    e.index.flat = true;
    return make(std::move(e));
  }
  // The load's dims align right with the dims of the value being computed: the kernel's
  // space, or for a row value without its reduced dims (keepdim=False), the kept dims.
  const std::vector<int64_t>& dims = row_context ? kept_dims_ : all_dims_;
  size_t off = dims.size() - m.sizes.size();
  for (size_t d = 0; d < m.sizes.size(); d++) {
    if (m.sizes[d] == 1) continue;  // broadcast
    if (static_strides && m.strides[d] == 0) continue;
    IndexTerm t;
    t.dim = dims[d + off];
    if (static_strides) t.stride = m.strides[d];
    else t.axis = (int)d;
    e.index.terms.push_back(t);
  }
  return make(std::move(e));
}

ExprPtr LoopKernel::expr(int id, bool flat_ok) const {
  const Node& n = g_.nodes[id];
  // a row value whose shape dropped the reduced dims indexes its inputs by the kept dims
  bool row_context = !k_.reduced.empty() && n.meta.sizes.size() == kept_dims_.size() &&
                     n.meta.sizes.size() != k_.space.size();
  if (n.op == OpKind::SliceBackward) return padded_load(n, row_context);
  Expr e;
  e.kind = Expr::Kind::Op;
  e.node = id;
  e.op = n.op;
  e.dtype = n.meta.dtype;
  e.compute = compute_type(g_, n);
  e.attrs = &n.attrs;
  for (size_t k = 0; k < n.inputs.size(); k++) {
    ExprPtr v = value(n.inputs[k], flat_ok, row_context);
    if (n.op == OpKind::Where && k == 0) {  // the condition stays a bool
      e.args.push_back(v);
      continue;
    }
    Expr c;
    c.kind = Expr::Kind::Cast;
    c.dtype = e.compute;
    c.args = {v};
    e.args.push_back(make(std::move(c)));
  }
  return make(std::move(e));
}

// slice_backward(g): g read at x - start along the sliced dim, 0 outside [start, start + len).
// Its input is always a load (decompose puts a view between it and whatever computes g, and
// a kernel reads a view from memory), never a value computed at this element.
ExprPtr LoopKernel::padded_load(const Node& n, bool row_context) const {
  const int in = n.inputs[0];
  if (in < 0 || in_kernel_.count(in) || !load_index_.count(in))
    fail("codegen: slice_backward ", n.name, " reads a value computed in its own kernel (decompose puts a view first)");
  Expr e = *load(in, false, row_context);
  const graph::TensorMeta& m = g_.nodes[in].meta;
  const std::vector<int64_t>& dims = row_context ? kept_dims_ : all_dims_;
  const int64_t rank = (int64_t)m.sizes.size(), d = n.attrs.dim < 0 ? n.attrs.dim + rank : n.attrs.dim;
  e.index.pad_dim = dims[d + (int64_t)dims.size() - rank];
  e.index.pad_lo = n.attrs.start;
  e.index.pad_len = m.sizes[d];
  bool has_term = false;  // a slice of length 1 has no term over the dim; its mask still reads x
  for (const IndexTerm& t : e.index.terms) has_term = has_term || t.dim == e.index.pad_dim;
  if (!has_term) e.index.terms.push_back({e.index.pad_dim, 0, -1});
  return make(std::move(e));
}

ExprPtr LoopKernel::reduction_input(int id) const {
  return value(g_.nodes[id].inputs[0], false, false);  // over the kernel's full space
}

// ---- structure ----------------------------------------------------------------------------

bool LoopKernel::is_outer_reduction() const {
  if (red_dims_.empty() || kept_dims_.empty()) return false;
  for (size_t i = 0; i < red_dims_.size(); i++)
    if (red_dims_[i] != (int64_t)i) return false;  // the reduced dims lead
  for (int id : k_.nodes) {
    if (is_reduction(id) && phase_.at(id) != 0) return false;
    if (is_full(id) && is_store(id) && store_phase(id) != 0) return false;
    bool row_value = !is_full(id) && !is_reduction(id);
    if (row_value && reductions_below(id).empty()) return false;  // needed inside the loop
  }
  return true;
}

std::vector<int> LoopKernel::full_values_for(const std::set<int>& targets) const {
  std::set<int> need;
  std::function<void(int)> walk = [&](int v) {
    if (!in_kernel_.count(v) || !is_full(v) || need.count(v)) return;
    need.insert(v);
    for (int i : g_.nodes[v].inputs)
      if (i >= 0) walk(i);
  };
  for (int t : targets) {
    if (is_full(t)) walk(t);
    else for (int i : g_.nodes[t].inputs) if (i >= 0) walk(i);
  }
  std::vector<int> order;
  for (int id : k_.nodes)
    if (need.count(id)) order.push_back(id);
  return order;
}

std::vector<std::vector<int>> LoopKernel::cut_stages(const std::vector<int>& order, int max_stages) const {
  int heavy = 0, seen = 0;
  for (int id : order) heavy += is_transcendental(g_.nodes[id].op);
  const int per_stage = std::max(1, (heavy + max_stages - 1) / max_stages);
  std::vector<std::vector<int>> stages(1);
  for (int id : order) {
    stages.back().push_back(id);
    if (is_transcendental(g_.nodes[id].op) && ++seen < heavy && seen % per_stage == 0) stages.emplace_back();
  }
  return stages;
}

RowPlan LoopKernel::plan_rows(int64_t scratch_budget) const {
  RowPlan plan;
  plan.compute.resize(phases_ + 1);
  plan.read.resize(phases_ + 1);
  int64_t rnumel = static_extent(red_dims_);
  int64_t scratch_bytes = 0;
  for (int p = 0; p <= phases_; p++) {
    std::vector<int> reds, stores;
    std::set<int> seen;
    std::function<void(int)> walk = [&](int v) {
      if (!in_kernel_.count(v) || !is_full(v) || seen.count(v)) return;
      seen.insert(v);
      auto prior = plan.computed_in.find(v);
      int64_t bytes = rnumel * (int64_t)itemsize(g_.nodes[v].meta.dtype);
      bool keep = prior != plan.computed_in.end() && prior->second < p && is_transcendental(g_.nodes[v].op) &&
                  !reads_running_max(v, prior->second) &&
                  rnumel > 0 && (plan.scratch.count(v) || scratch_bytes + bytes <= scratch_budget);
      if (keep) {
        if (plan.scratch.insert(v).second) scratch_bytes += bytes;
        plan.read[p].insert(v);
        return;
      }
      plan.compute[p].insert(v);
      for (int i : g_.nodes[v].inputs)
        if (i >= 0) walk(i);
    };
    for (int t : phase_targets(p, &reds, &stores)) {
      if (is_full(t)) walk(t);
      else for (int i : g_.nodes[t].inputs) if (i >= 0) walk(i);
    }
    for (int v : plan.compute[p]) plan.computed_in.emplace(v, p);
  }
  return plan;
}

}  // namespace mini::codegen
