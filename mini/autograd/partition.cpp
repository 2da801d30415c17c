// partition.cpp — step 2 of the training graphs, the partition: for each forward value the
// backward reads, save it or recompute it in the backward.
//
// In:  the joint graph (trace_joint) and the partitioner asked for.
// Out: a PartitionWalk whose fate_of gives each forward value the backward reaches its Fate:
//      a constant made again, an op recomputed (copied into the backward, its inputs reached in
//      turn) or a value saved (a forward output).
// The partitioners: save-all (every value saved, "aot_eager"); the recompute partitioner, a
// greedy rule per value (recompute_in_backward, assignment A2, "inductor"'s default); the
// min-cut, a max-flow over the forward whose cut saves the fewest bytes (MaxFlow and
// min_cut_saved, assignment A8). Both of the last two recompute a widened softmax
// (recompute_widened) and save a residual stream read far apart (used_far_apart) and the end of
// a long recomputed chain (kMaxRecomputeChain).
#include <algorithm>

#include "autograd/training_steps.h"
#include "tensor/errors.h"

namespace mini::autograd {

int64_t meta_bytes(const TensorMeta& m) {
  return numel_of(m.sizes) * (int64_t)itemsize(m.dtype);
}

namespace {

// Ops the recompute partitioner would rather save than run twice. An arange or a full is made
// again where the backward needs it (a kernel computes an arange's elements from their index,
// codegen's Iota); a random draw never runs twice.
[[maybe_unused]] bool expensive(OpKind op) {  // (unused in a student tree where A2 is the stub)
  switch (op_class(op)) {
    case OpClass::Pointwise: break;
    case OpClass::View: return false;
    case OpClass::Factory: return is_random(op);
    default: return true;  // reductions, matmul, composites
  }
  return is_transcendental(op);
}

// The recompute partitioner's decision for a forward value the backward reads: true to copy
// its op into the backward graph (its inputs are then needed there instead), false to save
// it. Constants are always copied and inputs always saved, before this is asked.
bool recompute_in_backward(const Node& n) {
  // A2 BEGIN: the recompute partitioner
  MINI_KIT_STUB(A2);
  return n.kind == NodeKind::Op && !expensive(n.op) && !n.symbolic_attrs;
  // A2 END
}

// Whether the backward can rebuild value `id` (of `numel` elements) from one full-size value
// that is in memory anyway, no wider than it: a cast's narrow operand (autocast's bfloat16
// logits under their float32 copy), with `extern_root` also an extern call's output (a matmul's:
// the logits themselves) or a graph input, through views of it and up to `depth` pointwise ops that combine it
// with smaller values (x - its row's max).
bool rebuilt_from_memory(const Graph& g, int id, int64_t numel, int depth, bool extern_root) {
  const Node& n = g.nodes[id];
  if (n.kind == NodeKind::Input) return extern_root;  // the graph's input: saved for nothing
  if (n.kind != NodeKind::Op || n.symbolic_attrs || n.inputs.empty() || n.inputs[0] < 0) return false;
  if (n.op == OpKind::Cast) return itemsize(g.nodes[n.inputs[0]].meta.dtype) < itemsize(n.meta.dtype);
  if (op_class(n.op) == OpClass::View) return rebuilt_from_memory(g, n.inputs[0], numel, depth, extern_root);
  if (op_class(n.op) == OpClass::Extern) return extern_root;
  if (depth == 0 || op_class(n.op) != OpClass::Pointwise || is_random(n.op)) return false;
  int full = -1;
  for (int i : n.inputs)
    if (i >= 0 && numel_of(g.nodes[i].meta.sizes) == numel) {
      if (full >= 0) return false;  // two full-size operands: not one value's rebuild
      full = i;
    }
  return full >= 0 && rebuilt_from_memory(g, full, numel, depth - 1, extern_root);
}

// A softmax or log_softmax of a widened value (autocast's float32 of bfloat16 logits or
// scores), or an exp of logits less their row's max (cross-entropy's logsumexp), runs again in
// the backward rather than saving its float32 output: at a 50k vocabulary that output is the
// largest tensor of a GPT's step (8192 x 50304 floats, 1.6 GB). The narrow logits are half its
// bytes, and the logits a matmul wrote are in memory already: saving them instead spares the
// forward a pass that writes the output, and the backward pays one pass over each row (one
// more for a softmax, which needs its row's sum again). torch.compile's partitioner makes the
// same trade for the loss. Both recompute and min-cut ask this first.
bool recompute_widened(const Graph& g, const Node& n) {
  if (n.kind != NodeKind::Op || n.symbolic_attrs || n.inputs.empty() || n.inputs[0] < 0) return false;
  const int64_t numel = numel_of(n.meta.sizes);
  if (n.op == OpKind::Softmax || n.op == OpKind::LogSoftmax) return rebuilt_from_memory(g, n.inputs[0], numel, 0, false);
  return op_class(n.op) == OpClass::Pointwise && n.op == OpKind::Exp && n.inputs.size() == 1 &&
         rebuilt_from_memory(g, n.inputs[0], numel, 2, true);
}

// Maximum flow by Dinic's algorithm (BFS levels, then blocking flows along them), for the
// min-cut partitioner: a few thousand vertices at most (two per forward node).
//
// The residual graph: every edge is stored next to its reverse, so that edge e's reverse is
// e ^ 1 (add_edge appends the pair); first_[v] is v's most recent edge and Edge::next the one
// before it (a linked list per vertex). An edge's `capacity` is what it can still carry: pushing
// f along e takes f from e and gives f to e ^ 1, which lets a later path undo the push.
class MaxFlow {
 public:
  static constexpr int64_t kInf = int64_t(1) << 60;
  explicit MaxFlow(int n) : first_(n, -1), level_(n), next_(n) {}

  // A8: adds the edge from -> to with `capacity` (kInf: never cut) and its reverse, from <- to,
  // with capacity 0, at indices e and e ^ 1. Vertices are 0 .. n - 1.
  void add_edge(int from, int to, int64_t capacity) {
    // A8 BEGIN: the min-cut partitioner
    MINI_KIT_STUB(A8);
    edges_.push_back({to, first_[from], capacity});
    first_[from] = (int)edges_.size() - 1;
    edges_.push_back({from, first_[to], 0});
    first_[to] = (int)edges_.size() - 1;
    // A8 END
  }

  // A8: the maximum flow from s to t, pushed into the residual graph (each edge's capacity is
  // left at what it can still carry). Dinic: while levels() finds t, push blocking flows
  // along level-increasing edges only, each vertex resuming at next_[v] (the edges it has not
  // found saturated yet). Finite when some s -> t cut has finite capacity.
  int64_t run(int s, int t) {
    // A8 BEGIN: the min-cut partitioner
    MINI_KIT_STUB(A8);
    int64_t flow = 0;
    while (levels(s, t)) {
      next_ = first_;
      while (int64_t f = push(s, t, kInf)) flow += f;
    }
    return flow;
    // A8 END
  }
  // A8: after run(): whether v is reachable from s through edges with capacity left (the source
  // side of a minimum cut). One entry per vertex; s is always on it, t never.
  std::vector<bool> source_side(int s) {
    // A8 BEGIN: the min-cut partitioner
    MINI_KIT_STUB(A8);
    levels(s, -1);
    std::vector<bool> side(level_.size());
    for (size_t v = 0; v < level_.size(); v++) side[v] = level_[v] >= 0;
    return side;
    // A8 END
  }

 private:
  struct Edge {
    int to, next;
    int64_t capacity;
  };
  // A8: BFS from s over edges with capacity left: level_[v] is v's distance from s, -1 where s
  // does not reach v. True when t is reached (t = -1: levels only).
  bool levels(int s, int t) {
    // A8 BEGIN: the min-cut partitioner
    MINI_KIT_STUB(A8);
    std::fill(level_.begin(), level_.end(), -1);
    std::vector<int> queue{s};
    level_[s] = 0;
    for (size_t q = 0; q < queue.size(); q++)
      for (int e = first_[queue[q]]; e >= 0; e = edges_[e].next)
        if (edges_[e].capacity > 0 && level_[edges_[e].to] < 0) {
          level_[edges_[e].to] = level_[queue[q]] + 1;
          queue.push_back(edges_[e].to);
        }
    return t >= 0 && level_[t] >= 0;
    // A8 END
  }
  // A8: one augmenting path from v to t along edges one level up, carrying at most `limit`:
  // the flow pushed (0 when none is left at this level), taken from each edge on the path and
  // given to its reverse. Advances next_[v] past edges that can carry no more.
  int64_t push(int v, int t, int64_t limit) {
    // A8 BEGIN: the min-cut partitioner
    MINI_KIT_STUB(A8);
    if (v == t) return limit;
    for (int& e = next_[v]; e >= 0; e = edges_[e].next) {
      Edge& edge = edges_[e];
      if (edge.capacity <= 0 || level_[edge.to] != level_[v] + 1) continue;
      if (int64_t f = push(edge.to, t, std::min(limit, edge.capacity))) {
        edge.capacity -= f;
        edges_[e ^ 1].capacity += f;
        return f;
      }
    }
    return 0;
    // A8 END
  }
  std::vector<Edge> edges_;
  std::vector<int> first_, level_, next_;
};

// Whether the min-cut partitioner may run forward op `n` again in the backward.
bool recomputable(const Node& n) {
  OpClass c = op_class(n.op);
  return n.kind == NodeKind::Op && (c == OpClass::Pointwise || c == OpClass::View) && !n.symbolic_attrs;
}

// The forward values the min-cut partitioner saves (true at their ids) for a backward that
// reads `needed`. Each forward node v is two vertices, v_in -> v_out, whose edge costs v's
// bytes (0 for an input: it is alive anyway); a node that may not be recomputed hangs from the
// source (it runs in the forward), every value the backward reads drains into the sink, and
// each use is an edge of infinite capacity. A minimum cut then separates what the forward
// computes from what the backward recomputes, and the nodes whose own edge it cuts are the
// cheapest set of values to save.
//
// A8, the contract.
// In:  the joint graph J, whose nodes 0 .. n_fwd - 1 are the forward (inputs, constants, ops,
//      in topological order: a node's inputs come before it; an input id of -1 is "none");
//      needed[v]: the backward reads forward value v.
// Out: n_fwd flags, saved[v] true for each value the forward returns for the backward.
// Guarantees:
//  - a valid cut: every needed value is saved, or recomputable (recomputable()) with each of
//    its inputs saved or recomputable in turn, down to saved values: the backward can be
//    built from what is saved, and no input of the forward is ever recomputed;
//  - ops that may not be recomputed (!recomputable: matmuls, reductions, composites, random
//    numbers, symbolic attributes) are never recomputed: each runs in the forward, and where
//    the backward needs it, it is saved, or values computed from it are (a matmul's mask);
//  - minimal: the saved bytes (meta_bytes of each saved op; inputs cost nothing, constants are
//    copied into the backward and never saved) are no more than those of any other valid
//    cut, save-all's (every needed value) and the recompute rule's among them.
// How the flags are read (make_training_graphs): only a recomputable op's flag decides (true:
// saved; false: copied into the backward, its inputs needed there in turn); inputs and ops
// that may not be recomputed are saved whenever the backward reaches them, whatever their flag.
std::vector<bool> min_cut_saved(const Graph& J, int n_fwd, const std::vector<bool>& needed) {
  // A8 BEGIN: the min-cut partitioner
  MINI_KIT_STUB(A8);
  const int source = 2 * n_fwd, sink = 2 * n_fwd + 1;
  MaxFlow flow(2 * n_fwd + 2);
  for (int v = 0; v < n_fwd; v++) {
    const Node& n = J.nodes[v];
    if (n.kind == NodeKind::Constant) continue;  // copied into the backward, never saved
    bool input = n.kind == NodeKind::Input;
    if (input || !recomputable(n)) flow.add_edge(source, 2 * v, MaxFlow::kInf);
    flow.add_edge(2 * v, 2 * v + 1, input ? 0 : std::max<int64_t>(1, meta_bytes(n.meta)));
    if (needed[v]) flow.add_edge(2 * v + 1, sink, MaxFlow::kInf);
    for (int i : n.inputs)
      if (i >= 0 && J.nodes[i].kind != NodeKind::Constant) flow.add_edge(2 * i + 1, 2 * v, MaxFlow::kInf);
  }
  flow.run(source, sink);
  std::vector<bool> side = flow.source_side(source), saved(n_fwd, false);
  for (int v = 0; v < n_fwd; v++) saved[v] = side[2 * v] && !side[2 * v + 1];
  return saved;
  // A8 END
}

// Forward values (ids below n_fwd) two forward ops read more than kFarApart nodes apart in the
// forward's order: a skip connection, the residual stream of a transformer (x_k is read by the
// block's layer norm and again by the add after the block). The partitioners save these rather
// than recompute them: recomputing x_k needs x_(k-1), and so on down to the first layer, so the
// backward would rebuild the whole stream before its first layer's gradient, every value of it
// held until its own layer is reached (a GPT-2 step: 43 full-size float32 values at once).
constexpr int kFarApart = 4;
// The longest chain of ops the backward recomputes one after another for one value; the value
// at the end of a longer chain is saved. Without a limit a stack of small residual blocks
// (x + relu(x @ w + b), ops adjacent enough not to be far apart) is rebuilt from its first
// layer for its last, as above (torch's partitioner bans long fusible chains too).
constexpr int kMaxRecomputeChain = 8;

std::vector<bool> used_far_apart(const Graph& J, int n_fwd) {
  std::vector<int> first(n_fwd, -1), last(n_fwd, -1);
  for (int id = 0; id < n_fwd; id++)
    for (int i : J.nodes[id].inputs)
      if (i >= 0) {
        if (first[i] < 0) first[i] = id;
        last[i] = id;
      }
  std::vector<bool> far(n_fwd, false);
  for (int id = 0; id < n_fwd; id++) far[id] = first[id] >= 0 && last[id] - first[id] > kFarApart;
  return far;
}

// Forward values (ids below n_fwd) that an extern call (a matmul, attention) reads in the
// forward and only extern calls read in the backward, directly or through views: autocast's
// bfloat16 copy of a weight, a layer norm's output cast for the projection. The forward has them
// in memory anyway (an extern call reads memory), and recomputed in the backward each would be
// a kernel of its own that reads its inputs again for a reader no kernel can fuse into; saved,
// they cost only memory (a GPT-2 step: 96 kernels fewer, their passes over the weights and the
// layer norms' inputs). The recompute partitioner saves these.
std::vector<bool> read_by_externs_only(const Graph& J, int n_fwd) {
  std::vector<std::vector<int>> readers(J.nodes.size());
  for (int id = 0; id < (int)J.nodes.size(); id++)
    for (int i : J.nodes[id].inputs)
      if (i >= 0) readers[i].push_back(id);
  auto is_view = [&](int id) { return J.nodes[id].kind == NodeKind::Op && op_class(J.nodes[id].op) == OpClass::View; };
  auto is_extern = [&](int id) { return J.nodes[id].kind == NodeKind::Op && op_class(J.nodes[id].op) == OpClass::Extern; };
  std::vector<bool> only(n_fwd, false);
  for (int id = 0; id < n_fwd; id++) {
    if (J.nodes[id].kind != NodeKind::Op || is_view(id)) continue;
    bool extern_in_forward = false, extern_in_backward = false, other_in_backward = false;
    std::vector<int> todo = readers[id];  // its readers, and the readers of its views
    while (!todo.empty()) {
      int r = todo.back();
      todo.pop_back();
      if (is_view(r)) {
        todo.insert(todo.end(), readers[r].begin(), readers[r].end());
        continue;
      }
      bool backward = r >= n_fwd;
      if (is_extern(r)) (backward ? extern_in_backward : extern_in_forward) = true;
      else if (backward) other_in_backward = true;
    }
    only[id] = extern_in_forward && extern_in_backward && !other_in_backward;
  }
  return only;
}

// The min-cut partitioner's flags (true: save), or {} with tg's partitioner set back to
// Recompute where the min-cut is a student tree's stub (A8 not written yet): the greedy rule
// stands in, so that min-cut training still runs and gives eager's gradients; the caller tells
// the user (a warning once per process, and MINI_LOGS=aot_graphs per graph). In A8's own tests
// is_assignment_stub is false and the stub's error goes on.
std::vector<bool> min_cut_flags(const Graph& J, int first_backward, TrainingGraphs& tg) {
  std::vector<bool> needed(first_backward, false);
  for (int id = first_backward; id < (int)J.nodes.size(); id++)
    if (J.nodes[id].kind == NodeKind::Op)
      for (int i : J.nodes[id].inputs)
        if (i >= 0 && i < first_backward) needed[i] = true;
  for (int out : J.outputs)  // a gradient that is a forward value itself
    if (out < first_backward) needed[out] = true;
  try {
    std::vector<bool> saved = min_cut_saved(J, first_backward, needed);
    MINI_CHECK(saved.size() == needed.size(), "min_cut_saved returned ", saved.size(), " flags for ", needed.size(),
               " forward nodes");
    return saved;
  } catch (const Error& e) {
    if (!is_assignment_stub(e)) throw;
    tg.partitioner = Partitioner::Recompute;
    tg.warnings.push_back(cat("mini.config.partitioner is 'min-cut', but the min-cut is not ",
                              "written yet (", e.what(), "); the recompute partitioner (the ",
                              "greedy rule) partitions the training graphs instead"));
    return {};
  }
}

}  // namespace

// What the partitioner would do with op node n (id) on its own: recompute it (true) or save it.
bool PartitionWalk::partitioner_recomputes(int id) const {
  const Node& n = J.nodes[id];
  return (partitioner != Partitioner::SaveAll && recompute_widened(J, n)) ||
         (partitioner == Partitioner::Recompute && !for_externs[id] && recompute_in_backward(n)) ||
         (partitioner == Partitioner::MinCut && recomputable(n) && !cut_saved[id]);
}

// Decides fate[id], and the fates of what a recomputed value is computed from.
// In:  a forward node the backward reads (directly, or through a recomputed value).
// Out: fate[id] (and its inputs' where it is recomputed); chain[id] for a recomputed value.
// Guarantees: a constant is Constant, an input Saved; an op is Recompute only where
//   partitioner_recomputes says so and far[id] is false (a value two forward ops read far
//   apart, a residual stream x + f(x), is saved whatever the partitioner says: recomputed,
//   it would be rebuilt in the backward from the first layer's values, the whole stream at
//   once; torch bans these too); a recomputed value waits on at most kMaxRecomputeChain
//   recomputed ops, itself included, counted along the longest path of recomputed values that
//   ends at it (chain[id]: 1 more than the largest chain of its recomputed inputs), else it is
//   saved (its inputs keep the fates decided for them) and a value that reads it starts a
//   chain of its own.
void PartitionWalk::decide(int id) {
  // A2 BEGIN: the recompute partitioner
  MINI_KIT_STUB(A2);
  if (fate[id] != Fate::Unseen) return;
  const Node& n = J.nodes[id];
  bool recompute = n.kind == NodeKind::Op && !far[id] && partitioner_recomputes(id);
  fate[id] = n.kind == NodeKind::Constant ? Fate::Constant : recompute ? Fate::Recompute : Fate::Saved;
  if (!recompute) return;
  for (int i : n.inputs)
    if (i >= 0) {
      decide(i);
      if (fate[i] == Fate::Recompute) chain[id] = std::max(chain[id], chain[i]);
    }
  if (++chain[id] > kMaxRecomputeChain) fate[id] = Fate::Saved;
  // A2 END
}

// fate[id] decided: save-all needs no walk (a constant is made again, everything else saved),
// so its graphs are built where the walk is still a student's stub.
Fate PartitionWalk::fate_of(int id) {
  if (partitioner != Partitioner::SaveAll) decide(id);
  else if (fate[id] == Fate::Unseen) fate[id] = J.nodes[id].kind == NodeKind::Constant ? Fate::Constant : Fate::Saved;
  return fate[id];
}

// The walk of tg.partitioner, with the min-cut's flags where it is asked for.
PartitionWalk partition_walk(const Graph& J, int first_backward, TrainingGraphs& tg) {
  std::vector<bool> cut_saved;
  if (tg.partitioner == Partitioner::MinCut) cut_saved = min_cut_flags(J, first_backward, tg);
  return PartitionWalk{J, first_backward, tg.partitioner,  // Recompute where the min-cut is a stub
                       std::move(cut_saved), used_far_apart(J, first_backward),
                       read_by_externs_only(J, first_backward)};
}

}  // namespace mini::autograd
