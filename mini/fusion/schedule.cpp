// schedule.cpp — greedy fusion and buffer planning (Inductor's scheduler, simplified).
//
// Nodes are visited in program order. The open kernel either takes the node (the reason is
// recorded) or is closed and a new one opened (the reason not to fuse is recorded). The
// legality rules are named functions below: same_space, is_row_epilogue,
// reduction_absorbs_producers, same_rows. After the walk, rematerialize.cpp recomputes in later
// kernels what a kernel stored only for them; then schedule() names the kernels and plans the
// buffers.
#include <algorithm>
#include <map>
#include <set>
#include <sstream>

#include "fusion/schedule_internal.h"

namespace mini::fusion {

using graph::Node;
using graph::NodeKind;

int64_t meta_bytes(const graph::Graph& g, const graph::TensorMeta& m) {
  int64_t n = (int64_t)itemsize(m.dtype);
  for (int64_t s : m.sizes) {
    int64_t v = s >= 0 ? s : graph::is_symbol(s) ? g.symbols[graph::symbol_index(s)].hint : 1;
    if (__builtin_mul_overflow(n, v, &n)) return INT64_MAX;  // an estimate: saturate
  }
  return n;
}

namespace {

std::string space_str(const Shape& s) {
  std::string out = "[";
  for (size_t i = 0; i < s.size(); i++) out += (i ? ", " : "") + graph::size_str(s[i]);
  return out + "]";
}


// The dims a reduction node reduces, wrapped and sorted (all dims when none are given).
std::vector<int64_t> dims_of(const graph::Graph& g, const Node& n) {
  int64_t rank = (int64_t)g.nodes[n.inputs[0]].meta.sizes.size();
  std::vector<int64_t> d = wrap_dims(n.attrs.dims, rank);
  if (n.attrs.dims.empty())
    for (int64_t i = 0; i < rank; i++) d.push_back(i);
  return d;
}

// The shape of a kernel's per-row values: its space with the reduced dims set to 1.
Shape row_shape(const FusionGroup& k) {
  Shape s = k.space;
  for (int64_t d : k.reduced) s[d] = 1;
  return s;
}
Shape row_shape_squeezed(const FusionGroup& k) {
  Shape s;
  for (int64_t d = 0; d < (int64_t)k.space.size(); d++)
    if (!std::count(k.reduced.begin(), k.reduced.end(), d)) s.push_back(k.space[d]);
  return s;
}

}  // namespace

// -- legality, one rule each ---------------------------------------------------------------

// A pointwise node over exactly the kernel's space (rematerialize asks it too).
bool same_space(const FusionGroup& k, const Shape& shape) {
  // A3 BEGIN: fusion legality and the greedy scheduler
  MINI_KIT_STUB(A3);
  return shape == k.space;
  // A3 END
}

namespace rules {  // declared in schedule_internal.h, for the C++ tests of each rule ([A3])

// A pointwise node over the rows of a reduction kernel (keepdim or not): computed once the
// reductions it reads are done, per row.
bool is_row_epilogue(const FusionGroup& k, const Shape& shape) {
  // A3 BEGIN: fusion legality and the greedy scheduler
  MINI_KIT_STUB(A3);
  return !k.reduced.empty() && (shape == row_shape(k) || shape == row_shape_squeezed(k));
  // A3 END
}

// A reduction whose input is the kernel's iteration space and whose kernel has no
// reduction yet: the pointwise nodes before it become its prologue.
bool reduction_absorbs_producers(const FusionGroup& k, const Shape& input_shape) {
  // A3 BEGIN: fusion legality and the greedy scheduler
  MINI_KIT_STUB(A3);
  return k.reduced.empty() && input_shape == k.space;
  // A3 END
}

// Another reduction over the same space and dims: one more pass over the same rows.
bool same_rows(const FusionGroup& k, const Shape& input_shape, const std::vector<int64_t>& dims) {
  // A3 BEGIN: fusion legality and the greedy scheduler
  MINI_KIT_STUB(A3);
  return !k.reduced.empty() && input_shape == k.space && dims == k.reduced;
  // A3 END
}

}  // namespace rules

namespace {

// (kMaxFusionSize, the most nodes a kernel holds, is in schedule_internal.h: rematerialize
// respects it too.)
// A reduction kernel makes one pass over each row per reduction that waits for another, and
// each pass recomputes what it reads from the kernel's loads: a chain of p such reductions in
// one kernel is O(p^2) code and work. Softmax and layer norm need two passes.
constexpr int kMaxReductionPasses = 4;

// Ops fusion has no loop lowering for: they run as extern calls (matmul through BLAS; the
// factories as the eager kernel, so random numbers come from the eager generator, in order).
// slice_backward is the one composite op a kernel computes: a padded load of its input, which
// decompose makes a view (so never a value of the same kernel).
bool is_extern(OpKind op) {
  OpClass c = op_class(op);
  if (op == OpKind::SliceBackward) return false;
  return c == OpClass::Extern || c == OpClass::Composite || c == OpClass::Factory;
}

}  // namespace

// -- the checks: may a node join the open kernel? -------------------------------------------
// (Verdict and Candidate are in schedule_internal.h.)

namespace rules {

Verdict refuse(std::string why) { return {false, std::move(why)}; }

Verdict fits_size(const FusionGroup& k) {
  // A3 BEGIN: fusion legality and the greedy scheduler
  MINI_KIT_STUB(A3);
  if (k.nodes.size() >= kMaxFusionSize)
    return refuse("the kernel holds " + std::to_string(kMaxFusionSize) + " nodes (max_fusion_size)");
  return {};
  // A3 END
}

Verdict fits_passes(const Candidate& c) {
  // A3 BEGIN: fusion legality and the greedy scheduler
  MINI_KIT_STUB(A3);
  if (c.reduction && c.waits >= kMaxReductionPasses)
    return refuse("it would be pass " + std::to_string(c.waits + 1) +
                  " over the kernel's rows, each recomputing the passes before (at most " +
                  std::to_string(kMaxReductionPasses) + ")");
  return {};
  // A3 END
}

// max_loads 0: no limit.
Verdict fits_loads(const Candidate& c, const std::set<int>& open_loads, int max_loads) {
  // A3 BEGIN: fusion legality and the greedy scheduler
  MINI_KIT_STUB(A3);
  if (max_loads <= 0) return {};
  std::set<int> all = open_loads;
  all.insert(c.loads.begin(), c.loads.end());
  if ((int)all.size() > max_loads)
    return refuse("the kernel would read " + std::to_string(all.size()) + " tensors (the target passes at most " +
                  std::to_string(max_loads) + ")");
  return {};
  // A3 END
}

// The four legality rules above, the first that applies naming itself.
Verdict fits_shape(const FusionGroup& k, const Candidate& c) {
  // A3 BEGIN: fusion legality and the greedy scheduler
  MINI_KIT_STUB(A3);
  if (!c.reduction && same_space(k, c.shape)) return {true, "same iteration space " + space_str(c.shape)};
  if (!c.reduction && is_row_epilogue(k, c.shape))
    return {true, "per-row epilogue of the kernel's reduction over rows of " + space_str(k.space)};
  if (c.reduction && reduction_absorbs_producers(k, c.in_shape))
    return {true, "reduction over " + space_str(c.in_shape) + " absorbs its pointwise producers"};
  if (c.reduction && same_rows(k, c.in_shape, c.dims)) return {true, "another reduction over the same rows"};
  if (c.reduction)
    return refuse("it reduces " + space_str(c.in_shape) + " over other dims than the kernel's space " +
                  space_str(k.space));
  return refuse("its iteration space " + space_str(c.shape) + " differs from the kernel's " + space_str(k.space));
  // A3 END
}

}  // namespace rules

namespace {

using namespace rules;

// The checks in the order the walk asks them: the first refusal decides; if none refuses, the
// shape rule that applies is the reason to fuse.
Verdict judge(const FusionGroup& k, const Candidate& c, const std::set<int>& open_loads, int max_loads) {
  for (const Verdict& v : {fits_size(k), fits_passes(c), fits_loads(c, open_loads, max_loads)})
    if (!v.fuse) return v;
  return fits_shape(k, c);
}

// -- the walk ------------------------------------------------------------------------------

// The greedy scheduler (Inductor's scheduler, one pass): walks the decomposed graph in program
// order with one kernel open, and puts each node in it or starts a new one.
//
// In:  s.graph (decomposed); s.realized[i] true for the graph's inputs only; max_loads as
//      schedule()'s.
// Out: s.groups (each node of a kernel in program order, its space and reduced dims; its
//      loads, stores and final name are filled in after this, from group_of), s.steps (every
//      op node's step in an order that runs: a kernel, an extern call or a view, each after
//      what it reads), s.realized (every value read from memory by another step: stored),
//      group_of[node] (its kernel, or -1), and s.decisions: one sentence for every node that
//      joins a kernel ("fuse X into K: <rule>"), is refused ("cannot fuse X into K: <why>"),
//      or ends one ("close K: X is an extern call ..."), the kernel named by its temporary
//      name "kernel<i>"; first_decision[k] the index of kernel k's first decision.
// Guarantees: a node joins the open kernel only where judge() allows it: no kernel holds more
//      than kMaxFusionSize nodes, waits for more than kMaxReductionPasses reductions in
//      sequence, or reads more than max_loads tensors (0: no limit); a view of a value the open
//      kernel computes stores that value and runs after the kernel, and a node that reads such a
//      view starts a new kernel; extern calls (is_extern) end the open kernel.
struct GreedyWalk {
  Schedule& s;
  int max_loads;
  std::vector<int>& group_of;
  std::vector<size_t>& first_decision;
  graph::Graph& g = s.graph;
  std::vector<int> passes = std::vector<int>(g.nodes.size(), 0);  // node -> reductions of its kernel it waits for
  int open = -1;
  std::set<int> open_loads;  // what the open kernel reads from memory so far
  std::set<int> pending;     // views of values the open kernel computes: read after it runs

  void log(const std::string& t) { s.decisions.push_back({t}); }
  static std::string what(const Node& node) { return node.name + " (" + op_name(node.op) + ")"; }

  // node's inputs made outside kernel `group` (all of them for -1)
  std::set<int> reads(const Node& node, int group) const {
    std::set<int> r;
    for (int i : node.inputs)
      if (i >= 0 && (group < 0 || group_of[i] != group) && g.nodes[i].kind != NodeKind::Constant) r.insert(i);
    return r;
  }

  void run() {
    // A3 BEGIN: fusion legality and the greedy scheduler
    MINI_KIT_STUB(A3);
    for (size_t id = 0; id < g.nodes.size(); id++) {
      const Node& node = g.nodes[id];
      if (node.kind == NodeKind::Input) s.realized[id] = true;
      if (node.kind != NodeKind::Op) continue;
      if (op_class(node.op) == OpClass::View) {
        place_view((int)id);
        continue;
      }
      if (is_extern(node.op)) {
        place_extern((int)id);
        continue;
      }
      for (int i : node.inputs)
        if (open >= 0 && i >= 0 && pending.count(i)) {
          log("close " + s.groups[open].name + ": " + what(node) + " reads " + g.nodes[i].name +
              ", a view of a value the kernel computes; it waits for the kernel to store it");
          open = -1;
          break;
        }
      Candidate c = candidate(node);
      bool fused = false;
      if (open >= 0) {
        Verdict v = judge(s.groups[open], c, open_loads, max_loads);
        log(std::string(v.fuse ? "fuse " : "cannot fuse ") + c.what + " into " + s.groups[open].name + ": " + v.why);
        if (v.fuse) join((int)id, c);
        else open = -1;
        fused = v.fuse;
      }
      if (!fused) start_kernel((int)id, c);
      for (int i : node.inputs)  // a value made by an earlier kernel is read from memory
        if (i >= 0 && group_of[i] >= 0 && group_of[i] != group_of[id]) s.realized[i] = true;
    }
    // A3 END
  }

  // What judge() needs to know of node against the open kernel (waits 0, loads all of its
  // inputs where no kernel is open).
  Candidate candidate(const Node& node) const {
    Candidate c;
    c.what = what(node);
    c.reduction = op_class(node.op) == OpClass::Reduction;
    c.shape = node.meta.sizes;
    c.in_shape = c.reduction ? g.nodes[node.inputs[0]].meta.sizes : c.shape;
    if (c.reduction) c.dims = dims_of(g, node);
    for (int i : node.inputs)
      if (i >= 0 && group_of[i] == open)
        c.waits = std::max(c.waits, passes[i] + (op_class(g.nodes[i].op) == OpClass::Reduction));
    c.loads = reads(node, open);
    return c;
  }

  void join(int id, const Candidate& c) {
    FusionGroup& k = s.groups[open];
    if (c.reduction && k.reduced.empty()) k.reduced = c.dims;  // the first reduction names the rows
    k.nodes.push_back(id);
    group_of[id] = open;
    passes[id] = c.waits;
    open_loads.insert(c.loads.begin(), c.loads.end());
  }

  void start_kernel(int id, const Candidate& c) {
    const Node& node = g.nodes[id];
    FusionGroup k;
    k.space = c.in_shape;
    k.reduced = c.dims;
    k.nodes.push_back(id);
    k.name = "kernel" + std::to_string(s.groups.size());
    s.groups.push_back(k);
    first_decision.push_back(s.decisions.size());
    open = (int)s.groups.size() - 1;
    open_loads = reads(node, -1);
    pending.clear();
    group_of[id] = open;
    s.steps.push_back({StepKind::Kernel, -1, open});
  }

  void place_view(int id) {
    const Node& node = g.nodes[id];
    int src = node.inputs[0];
    if (group_of[src] >= 0) s.realized[src] = true;
    s.realized[id] = true;
    if (open >= 0 && (group_of[src] == open || pending.count(src))) {
      // a view of a value the open kernel computes: the value is stored and the view reads
      // its buffer once the kernel has run (an index rewrite, no copy), so the view's step
      // goes after the kernel's; the kernel stays open for what does not read the view
      if (group_of[src] == open)
        log("store " + g.nodes[src].name + " of " + s.groups[open].name + ": " + what(node) +
            " views it; the kernel goes on with what does not read the view");
      pending.insert(id);
      s.steps.push_back({StepKind::View, id, -1});
      return;
    }
    // A view of a buffer made before the open kernel runs before that kernel: the kernel
    // may read it (it is metadata only, so moving it earlier changes nothing else).
    auto at = s.steps.end();
    if (open >= 0)
      for (auto it = s.steps.begin(); it != s.steps.end(); ++it)
        if (it->kind == StepKind::Kernel && it->group == open) at = it;
    s.steps.insert(at, {StepKind::View, id, -1});
  }

  void place_extern(int id) {
    const Node& node = g.nodes[id];
    if (open >= 0)
      log("close " + s.groups[open].name + ": " + what(node) + " is an extern call (" + std::string(op_name(node.op)) +
          " runs as a library kernel, not generated code)");
    open = -1;
    for (int i : node.inputs)
      if (i >= 0 && group_of[i] >= 0) s.realized[i] = true;
    s.steps.push_back({StepKind::Extern, id, -1});
    s.realized[id] = true;
  }
};

}  // namespace

static void group_greedily(Schedule& s, int max_loads, std::vector<int>& group_of, std::vector<size_t>& first_decision) {
  GreedyWalk{s, max_loads, group_of, first_decision}.run();
}

// g with its nodes in `order` (a topological order: order[i] is the old id of new node i).
graph::Graph reordered(const graph::Graph& g, const std::vector<int>& order) {
  const int n = (int)g.nodes.size();
  graph::Graph out = g;
  std::vector<int> new_id(n);
  for (int i = 0; i < n; i++) new_id[order[i]] = i;
  for (int i = 0; i < n; i++) {
    out.nodes[i] = g.nodes[order[i]];
    for (int& in : out.nodes[i].inputs)
      if (in >= 0) in = new_id[in];
  }
  for (int& i : out.inputs) i = new_id[i];
  for (int& o : out.outputs) o = new_id[o];
  return out;
}

// The graph with each pointwise node moved down to just before its first reader, where that
// reader is a pointwise op or a reduction over the same space and no extern call lies between
// (so that the greedy pass puts the node in the reader's
// kernel instead of closing a kernel of its own that stores it): a mask that cross-entropy's
// backward computes early, over [rows, vocabulary], and uses late. Nodes read by an extern call
// or a view, and random ones, stay. A topological order still: a node only moves later, and
// before every reader.
graph::Graph sink_pointwise(const graph::Graph& g) {
  const int n = (int)g.nodes.size();
  std::vector<std::vector<int>> readers(n);
  for (int id = 0; id < n; id++)
    for (int i : g.nodes[id].inputs)
      if (i >= 0) readers[i].push_back(id);
  std::vector<int> order(n);
  for (int i = 0; i < n; i++) order[i] = i;
  bool moved = false;
  for (int id = n - 1; id >= 0; id--) {
    const graph::Node& node = g.nodes[id];
    if (node.kind != NodeKind::Op || op_class(node.op) != OpClass::Pointwise || is_random(node.op) ||
        readers[id].empty())
      continue;
    auto at = std::find(order.begin(), order.end(), id);
    auto first = order.end();
    for (int r : readers[id]) first = std::min(first, std::find(order.begin(), order.end(), r));
    OpClass c = op_class(g.nodes[*first].op);
    if (c != OpClass::Pointwise && c != OpClass::Reduction) continue;
    if (first == at + 1 || g.nodes[*first].meta.sizes != node.meta.sizes) continue;  // there, or another space
    // only past other ops (past constants alone the kernels are the same: the order is kept), and
    // never past one that ends a kernel anyway (an extern call, a factory): the node would leave
    // the kernel it shares with its neighbours for nothing
    auto is_op = [&](int o) { return g.nodes[o].kind == NodeKind::Op; };
    auto ends_kernel = [&](int o) { return is_op(o) && is_extern(g.nodes[o].op); };
    if (std::none_of(at + 1, first, is_op) || std::any_of(at + 1, first, ends_kernel)) continue;
    std::rotate(at, at + 1, first);  // id now sits just before its first reader
    moved = true;
  }
  return moved ? reordered(g, order) : g;
}

// The graph with each factory that reads no op's value (an arange, a full) moved up to just
// before the first op. Where the program made it, it would end the kernel open there (a factory
// is a call of its own): cross-entropy's arange of the classes split log_softmax's kernel from
// the select that reads it, storing [rows, vocabulary] floats between the two. Random factories
// keep their place (their order is the random stream's), and so does a factory that reads an
// input or constant that comes after the first op.
graph::Graph hoist_factories(const graph::Graph& g) {
  const int n = (int)g.nodes.size();
  int first_op = 0;
  while (first_op < n && g.nodes[first_op].kind != NodeKind::Op) first_op++;
  auto hoisted = [&](int id) {
    const graph::Node& node = g.nodes[id];
    if (id <= first_op || node.kind != NodeKind::Op || op_class(node.op) != OpClass::Factory || is_random(node.op))
      return false;
    return std::all_of(node.inputs.begin(), node.inputs.end(), [&](int i) { return i < first_op; });
  };
  std::vector<int> order(g.nodes.size());
  for (int i = 0; i < n; i++) order[i] = i;
  auto moved = std::stable_partition(order.begin() + first_op, order.end(), hoisted);
  return moved == order.begin() + first_op ? g : reordered(g, order);
}

namespace {

// The nodes of one multi-output call (attention's output and log-sum-exp; dq, dk and dv) are
// one step, the first of them in step order: the call runs once.
void merge_multi_output_calls(Schedule& s) {
  const graph::Graph& g = s.graph;
  std::vector<Step> steps;
  for (Step& st : s.steps) {
    if (st.kind == StepKind::Extern && op_outputs(g.nodes[st.node].op) > 1) {
      auto first = std::find_if(steps.begin(), steps.end(), [&](const Step& o) {
        return o.kind == StepKind::Extern && graph::same_call(g.nodes[o.node], g.nodes[st.node]);
      });
      if (first != steps.end()) {
        first->also.push_back(st.node);
        s.decisions.push_back({cat(g.nodes[st.node].name, ": computed by the call of ", g.nodes[first->node].name,
                                   " (one ", op_name(g.nodes[st.node].op), " call, ",
                                   op_outputs(g.nodes[st.node].op), " outputs)")});
        continue;
      }
    }
    steps.push_back(std::move(st));
  }
  s.steps = std::move(steps);
}

// A kernel's final name: its category (poi, per: a reduction held per row, red: looped), then
// its ops and its index; a renderer prefixes its target (codegen::name_kernels).
std::string kernel_name(const FusionGroup& k, const std::set<std::string>& ops, size_t index) {
  int64_t rnumel = 1;
  for (int64_t d : k.reduced) rnumel *= k.space[d] >= 0 ? k.space[d] : 1 << 20;
  std::string category = k.reduced.empty() ? "poi" : rnumel <= 1024 ? "per" : "red";
  std::string name = category + "_fused";
  for (const auto& o : ops) name += "_" + o;
  return name + "_" + std::to_string(index);
}

// The decision that sums kernel k up: its ops, its space, and the bytes its intermediates
// held in registers save.
std::string kernel_summary(const Schedule& s, const FusionGroup& k) {
  int64_t saved = 0;
  for (int id : k.nodes)
    if (!s.realized[id]) saved += 2 * meta_bytes(s.graph, s.graph.nodes[id].meta);
  auto count = [](size_t n, const char* one, const char* many) {
    return std::to_string(n) + " " + (n == 1 ? one : many);
  };
  size_t kept = k.nodes.size() - k.stores.size();
  return k.name + ": " + count(k.nodes.size(), "op", "ops") + " over " + space_str(k.space) +
         (k.reduced.empty() ? "" : " reducing dims " + space_str(k.reduced)) + "; " +
         (kept == 0 ? std::string("no intermediate stays in registers")
                    : count(kept, "intermediate stays", "intermediates stay") + " in registers, saving " +
                          std::to_string(saved) + " bytes of memory traffic");
}

// Kernel gi's loads, stores and name, the decisions logged while it was open renamed with it
// (first_decision: kernel -> its first decision, one more entry at the end), and its summary.
void finish_kernel(Schedule& s, size_t gi, const std::vector<int>& group_of,
                   const std::vector<size_t>& first_decision) {
  const graph::Graph& g = s.graph;
  FusionGroup& k = s.groups[gi];
  std::set<std::string> ops;
  std::set<int> loads;
  for (int id : k.nodes) {
    ops.insert(op_name(g.nodes[id].op));
    for (int i : g.nodes[id].inputs)
      if (i >= 0 && group_of[i] != (int)gi && g.nodes[i].kind != NodeKind::Constant) loads.insert(i);
    if (s.realized[id]) k.stores.push_back(id);
  }
  k.loads.assign(loads.begin(), loads.end());
  std::string old = k.name;
  k.name = kernel_name(k, ops, gi);
  // the decisions naming this kernel were logged while it was open, before the next one
  // opened: renaming only those keeps this linear in the program
  for (size_t di = first_decision[gi]; di < first_decision[gi + 1]; di++) {
    auto& d = s.decisions[di];
    size_t p;
    while ((p = d.text.find(old + ":")) != std::string::npos || (p = d.text.find(old + " ")) != std::string::npos)
      d.text.replace(p, old.size(), k.name);
  }
  s.decisions.push_back({kernel_summary(s, k)});
}

// s.last_use: the index of the last step that reads each buffer. A view shares its base's
// memory: the base lives as long as any view of it is read.
void find_last_uses(Schedule& s) {
  const graph::Graph& g = s.graph;
  s.last_use.assign(g.nodes.size(), -1);
  for (size_t si = 0; si < s.steps.size(); si++) {
    const Step& st = s.steps[si];
    std::vector<int> reads;
    if (st.kind == StepKind::Kernel) reads = s.groups[st.group].loads;
    else for (int i : g.nodes[st.node].inputs) if (i >= 0) reads.push_back(i);
    for (int r : reads) s.last_use[r] = std::max(s.last_use[r], (int)si);
  }
  for (size_t si = 0; si < s.steps.size(); si++)  // an output of a call that nothing reads: freed at once
    for (int id : s.steps[si].also) s.last_use[id] = std::max(s.last_use[id], (int)si);
  for (size_t si = s.steps.size(); si-- > 0;) {
    const Step& st = s.steps[si];
    if (st.kind != StepKind::View) continue;
    int base = g.nodes[st.node].inputs[0];
    s.last_use[base] = std::max(s.last_use[base], s.last_use[st.node]);
  }
}

// Buffer plan: when each buffer is last read; a dead buffer's memory is reused by the next one
// of the same size (graph outputs are never reused: the caller keeps them). Fills s.buffers,
// s.reused, s.peak_bytes and s.unplanned_bytes, and logs them.
void plan_buffers(Schedule& s) {
  const graph::Graph& g = s.graph;
  find_last_uses(s);
  std::set<int> outputs(g.outputs.begin(), g.outputs.end());
  std::multimap<int64_t, int> free_slots;
  int64_t alive = 0;
  std::vector<std::pair<int, int64_t>> live;  // node, bytes
  for (size_t si = 0; si < s.steps.size(); si++) {
    const Step& st = s.steps[si];
    std::vector<int> made = st.kind == StepKind::Kernel ? s.groups[st.group].stores : std::vector<int>{st.node};
    made.insert(made.end(), st.also.begin(), st.also.end());
    for (int m : made) {
      if (st.kind == StepKind::View) continue;  // a view owns no memory
      int64_t b = meta_bytes(g, g.nodes[m].meta);
      s.buffers++;
      s.unplanned_bytes += b;
      auto slot = free_slots.find(b);
      if (slot != free_slots.end() && !outputs.count(m)) {
        free_slots.erase(slot);
        s.reused++;
      } else {
        alive += b;
      }
      live.push_back({m, b});
    }
    s.peak_bytes = std::max(s.peak_bytes, alive);
    for (auto it = live.begin(); it != live.end();) {
      if (!outputs.count(it->first) && s.last_use[it->first] <= (int)si) {
        free_slots.insert({it->second, it->first});
        it = live.erase(it);
      } else {
        ++it;
      }
    }
  }
  std::ostringstream plan;
  plan << "buffer plan: " << s.buffers << " buffers, " << s.reused << " reuse a freed one; peak "
       << s.peak_bytes << " bytes (" << s.unplanned_bytes << " if none were reused)";
  s.decisions.push_back({plan.str()});
}

}  // namespace

Schedule schedule(const graph::Graph& input, int max_loads, bool one_batch_stride) {
  Schedule s;
  s.graph = sink_pointwise(hoist_factories(decompose(input, one_batch_stride)));
  s.realized.assign(s.graph.nodes.size(), false);
  std::vector<int> group_of(s.graph.nodes.size(), -1);  // kernel computing a node, or -1
  std::vector<size_t> first_decision;  // kernel -> its first decision (the ones naming it follow)
  group_greedily(s, max_loads, group_of, first_decision);
  rematerialize(s, group_of, max_loads, first_decision);
  for (int o : s.graph.outputs) s.realized[o] = true;
  merge_multi_output_calls(s);
  first_decision.push_back(s.decisions.size());
  for (size_t gi = 0; gi < s.groups.size(); gi++) finish_kernel(s, gi, group_of, first_decision);
  plan_buffers(s);
  return s;
}

}  // namespace mini::fusion
