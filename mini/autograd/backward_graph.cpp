// backward_graph.cpp — step 3 of the training graphs, the build: the backward graph.
//
// In:  the joint graph (trace_joint) and the fate of each forward value the backward reads
//      (PartitionWalk).
// Out: the backward graph (inputs: the saved values, then the tangents; outputs: the
//      gradients) and the forward values the forward graph must return (build_backward); and
//      the backward graph of a call in which some tangents do not arrive (backward_for_given),
//      the zeros they stand for carried through the graph without being made.
// Guarantees: a recomputed op runs in the stretch of the backward that first reads it, not all
// at the start (nothing recomputed waits in memory past an extern call).
#include <map>

#include "autograd/training_steps.h"
#include "tensor/errors.h"

namespace mini::autograd {

namespace {

// Ops that run as calls of their own in a compiled backward (a matmul, attention, a slice's or
// an embedding's backward): no generated kernel spans one. Softmax, log_softmax, layer norm and
// mse_loss are written as fusible ops by fusion, and factories are hoisted.
bool ends_stretch(OpKind op) {
  switch (op) {
    case OpKind::Softmax: case OpKind::LogSoftmax: case OpKind::LayerNorm: case OpKind::MseLoss: return false;
    default: return op_class(op) == OpClass::Extern || op_class(op) == OpClass::Composite;
  }
}

// Step 3's state: where each joint value is in the backward graph, and where each recomputed op
// is emitted (a stretch being the ops of the backward between two extern calls).
struct BackwardBuild {
  const Graph& J;
  const int first_backward;
  PartitionWalk& walk;
  Graph& bwd;
  TrainingGraphs& tg;
  std::vector<Fate>& fate = walk.fate;
  const int n_joint = (int)J.nodes.size();
  std::map<int, int> to_bwd{};  // joint id -> backward id (-1: recomputed, not emitted yet)
  std::vector<int> saved{};   // the forward values saved, in the order the backward reaches them
  std::vector<int> stretch = std::vector<int>(n_joint, 0);  // per backward node: its stretch
  int stretches = 0;
  // per recomputed value: the stretch and the backward op that first read it
  std::vector<int> first_stretch = std::vector<int>(first_backward, INT32_MAX);
  std::vector<int> first_reader = std::vector<int>(first_backward, -1);
  std::vector<bool> late = std::vector<bool>(first_backward, false);  // emitted just before first_reader
  std::vector<std::vector<int>> recompute_at{};      // at a stretch's start
  std::map<int, std::vector<int>> recompute_before{};  // just before a backward op
  int opened = -1;                                   // the last stretch opened

  // The fate of forward value id, and of what it is recomputed from; a saved value becomes an
  // input of the backward.
  void collect(int id) {
    walk.fate_of(id);
    if (to_bwd.count(id) || fate[id] == Fate::Constant) return;
    const Node& n = J.nodes[id];
    if (fate[id] == Fate::Recompute) {
      to_bwd[id] = -1;  // reached; its op is emitted before its first reader
      for (int i : n.inputs)
        if (i >= 0) collect(i);
      return;
    }
    saved.push_back(id);
    TensorMeta m = n.meta;
    m.requires_grad = false;
    to_bwd[id] = bwd.add_input(m, n.name);
    if (n.kind == NodeKind::Op) tg.saved_bytes += meta_bytes(m);  // inputs are alive anyway
  }

  // Every forward value the backward reads, in the order it reads them.
  void collect_all() {
    for (int id = first_backward; id < n_joint; id++)
      if (J.nodes[id].kind == NodeKind::Op)
        for (int i : J.nodes[id].inputs)
          if (i >= 0 && i < first_backward) collect(i);
    for (int out : J.outputs)  // a gradient that is a forward value itself
      if (out < first_backward) collect(out);
  }

  // Recomputed value id is first read in stretch `at` by backward op `reader` (directly or
  // through other recomputed ops); what a late op reads is late too.
  void reach(int id, int at, int reader, bool for_late) {
    if (fate[id] != Fate::Recompute || first_stretch[id] != INT32_MAX) return;
    OpClass c = op_class(J.nodes[id].op);
    first_stretch[id] = at;
    first_reader[id] = reader;
    late[id] = for_late || (c != OpClass::Pointwise && c != OpClass::View);
    for (int i : J.nodes[id].inputs)
      if (i >= 0) reach(i, at, reader, late[id]);
  }

  // Where each recomputed op goes: a pointwise op or a view at the start of the stretch that
  // first reads it, anything else (and what it reads) just before its first reader.
  void place_recomputed() {
    for (int id = first_backward; id < n_joint; id++) {
      const Node& n = J.nodes[id];
      stretch[id] = stretches;
      if (n.kind != NodeKind::Op) continue;
      for (int i : n.inputs)
        if (i >= 0 && i < first_backward) reach(i, stretches, id, false);
      if (ends_stretch(n.op)) stretches++;  // the next op starts a new stretch
    }
    for (int out : J.outputs)
      if (out < first_backward) reach(out, stretches, n_joint, false);
    recompute_at.resize(stretches + 1);
    for (int id = 0; id < first_backward; id++) {  // in forward order: a topological order
      if (fate[id] != Fate::Recompute || first_stretch[id] == INT32_MAX) continue;
      if (late[id]) recompute_before[first_reader[id]].push_back(id);
      else recompute_at[first_stretch[id]].push_back(id);
    }
  }

  // The backward's id of joint value i.
  int value(int i) {
    return i < first_backward && fate[i] == Fate::Constant ? bwd.add_constant(J.nodes[i].value, J.nodes[i].meta.dtype)
                                                           : to_bwd.at(i);
  }

  // Copies op id (a backward op, or a recomputed forward op) into the backward graph.
  void emit_op(int id) {
    const Node& n = J.nodes[id];
    if (id < first_backward && to_bwd.at(id) >= 0) return;  // a recomputed op emitted early (below)
    for (int i : n.inputs)  // a late recomputed input (an arange read by a pointwise op): now
      if (i >= 0 && i < first_backward && fate[i] == Fate::Recompute && to_bwd.at(i) < 0) emit_op(i);
    std::vector<int> ins;
    for (int i : n.inputs) ins.push_back(i < 0 ? -1 : value(i));
    to_bwd[id] = bwd.add_op(n.op, ins, n.attrs, n.code);
  }

  // The recomputed ops at the start of each stretch up to s.
  void open_stretch(int s) {
    while (opened < s)
      for (int id : recompute_at[++opened]) emit_op(id);
  }

  // The recomputed ops that go just before backward op `reader`.
  void emit_late(int reader) {
    auto found = recompute_before.find(reader);
    if (found != recompute_before.end())
      for (int r : found->second) emit_op(r);
  }

  // The backward's nodes in J's order, each recomputed op before its readers; then its outputs.
  void emit_all() {
    for (int id = first_backward; id < n_joint; id++) {
      const Node& n = J.nodes[id];
      if (n.kind == NodeKind::Input) {
        to_bwd[id] = bwd.add_input(n.meta, n.source);
      } else if (n.kind == NodeKind::Constant) {
        to_bwd[id] = bwd.add_constant(n.value, n.meta.dtype);
      } else {
        open_stretch(stretch[id]);
        emit_late(id);
        emit_op(id);
      }
    }
    open_stretch(stretches);
    emit_late(n_joint);
    for (int out : J.outputs) bwd.outputs.push_back(value(out));
  }
};

}  // namespace

// Step 3, build: the backward graph of J's backward nodes, its inputs the saved values (in the
// order the backward first reaches them) then the tangents. A recomputed op is emitted where it
// is needed: a pointwise op or a view at the start of the stretch of the backward where it is
// first read (directly or through other recomputed ops), a stretch being the ops between two
// extern calls; a recomputed reduction (a widened log_softmax), and what it reads, just before
// its first reader. Not all at the start of the backward: nothing recomputed then waits in
// memory past an extern call for a reader far down the backward. Within a stretch, fusion sinks
// pointwise ops into their readers' kernels where they fit, and a row value (a layer norm's
// rstd) computed first does not split the kernel of the sums around its reader; a reduction
// next to its reader becomes that kernel's first pass (cross-entropy's backward, one pass over
// the logits fewer). Returns the forward ids the forward graph must also return (saved).
std::vector<int> build_backward(const Graph& J, int first_backward, PartitionWalk& walk, Graph& bwd,
                                TrainingGraphs& tg) {
  BackwardBuild build{J, first_backward, walk, bwd, tg};
  build.collect_all();
  build.place_recomputed();
  build.emit_all();
  bwd.eliminate_dead_code();
  return build.saved;
}

namespace {

// How a zero in the inputs of `n` flows (backward_for_given): Through, the result is zero
// whenever input `k` is (a product, a view, a matmul, a backward op linear in its gradient);
// Sum, a sum or difference (the result is the other operand); Stops, the zero is made.
enum class ZeroFlow { Through, Sum, Stops };

ZeroFlow zero_flow(const Node& n, int k) {
  switch (n.op) {
    case OpKind::Add: case OpKind::Sub: return ZeroFlow::Sum;
    case OpKind::Mul: case OpKind::Matmul: return ZeroFlow::Through;
    case OpKind::Div: return k == 0 ? ZeroFlow::Through : ZeroFlow::Stops;
    case OpKind::Neg: case OpKind::Cast: case OpKind::Clone: case OpKind::Sum: case OpKind::Mean:
    case OpKind::SliceBackward:
      return ZeroFlow::Through;
    case OpKind::GeluBackward: case OpKind::EmbeddingBackward: return k == 0 ? ZeroFlow::Through : ZeroFlow::Stops;
    case OpKind::AttentionBackward: return k == 5 ? ZeroFlow::Through : ZeroFlow::Stops;  // grad_out
    default: return op_class(n.op) == OpClass::View && k == 0 ? ZeroFlow::Through : ZeroFlow::Stops;
  }
}

bool same_meta(const TensorMeta& a, const TensorMeta& b) { return a.sizes == b.sizes && a.dtype == b.dtype; }

}  // namespace

std::shared_ptr<Graph> backward_for_given(const TrainingGraphs& tg, const std::vector<bool>& given) {
  const Graph& bwd = *tg.backward;
  const size_t n_tangents = tg.tangents.size(), n_saved = bwd.inputs.size() - n_tangents;
  MINI_CHECK(given.size() == n_tangents && bwd.inputs.size() >= n_tangents, "backward_for_given: ", given.size(),
             " flags for ", n_tangents, " tangents");
  auto out = std::make_shared<Graph>();
  out->device = bwd.device;
  std::vector<int> map(bwd.nodes.size(), -1);  // -1 where the value is zero
  std::vector<bool> zero(bwd.nodes.size(), false);
  std::vector<int> made(bwd.nodes.size(), -1);  // a zero made as a full()
  auto value = [&](int id) {
    if (!zero[id]) return map[id];
    if (made[id] < 0) {
      const TensorMeta& m = bwd.nodes[id].meta;
      Attrs a;
      a.shape = m.sizes;
      a.dtype = m.dtype;
      a.device = bwd.device;
      made[id] = out->add_op(OpKind::Full, {}, a, bwd.nodes[id].code);
    }
    return made[id];
  };
  std::vector<int> position(bwd.nodes.size(), -1);
  for (size_t i = 0; i < bwd.inputs.size(); i++) position[bwd.inputs[i]] = (int)i;
  for (size_t id = 0; id < bwd.nodes.size(); id++) {
    const Node& n = bwd.nodes[id];
    if (n.kind == NodeKind::Input) {
      int p = position[id];
      if (p >= (int)n_saved && !given[p - n_saved]) zero[id] = true;
      else map[id] = out->add_input(n.meta, n.source);
      continue;
    }
    if (n.kind == NodeKind::Constant) {
      map[id] = out->add_constant(n.value, n.meta.dtype);
      continue;
    }
    std::vector<int> zeros;
    for (size_t k = 0; k < n.inputs.size(); k++)
      if (n.inputs[k] >= 0 && zero[n.inputs[k]]) zeros.push_back((int)k);
    if (!zeros.empty()) {
      ZeroFlow how = zero_flow(n, zeros[0]);
      for (int k : zeros) how = zero_flow(n, k) == how ? how : ZeroFlow::Stops;
      if (how == ZeroFlow::Through) {
        zero[id] = true;
        continue;
      }
      if (how == ZeroFlow::Sum) {
        if (zeros.size() == 2) {  // 0 + 0
          zero[id] = true;
          continue;
        }
        int other = n.inputs[1 - zeros[0]];
        if (same_meta(bwd.nodes[other].meta, n.meta)) {  // a + 0 = a, a - 0 = a, 0 - a = -a
          map[id] = n.op == OpKind::Sub && zeros[0] == 0 ? out->add_op(OpKind::Neg, {map[other]}, {}, n.code) : map[other];
          continue;
        }
      }
    }
    std::vector<int> ins;
    for (int i : n.inputs) ins.push_back(i < 0 ? -1 : value(i));
    map[id] = out->add_op(n.op, ins, n.attrs, n.code);
  }
  for (int o : bwd.outputs) out->outputs.push_back(value(o));
  out->eliminate_dead_code();
  return out;
}

}  // namespace mini::autograd
