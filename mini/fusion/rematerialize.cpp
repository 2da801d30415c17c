// rematerialize.cpp — after the greedy walk, values a kernel stores only for later kernels that
// could compute them from what those can read anyway, recomputed there instead (Inductor's
// scheduler likewise computes a pointwise node inside each kernel that reads it, unless
// something forces it into memory). A layer norm's backward: its row kernel computed
// x_hat = (x - mean) * rstd, g * w and g * x_hat and stored them, four full-size float32
// tensors, for the kernel of the weight and bias gradients, which sums columns and so cannot
// join the rows' kernel; that kernel now reads g, x, w and the row values mean and rstd, and
// computes them itself.
//
// In:  the schedule the greedy walk built (schedule_internal.h says what of it).
// Out: the graph with a copy of each recomputed value's cone in every kernel that reads it, in
//      program order, and the schedule remapped onto it; a kernel left storing nothing dropped.
// A candidate is a pointwise value V of kernel A that only other kernels read (no extern call,
// view or graph output), each iterating V's whole space; its cone (V and the pointwise nodes
// of A of V's size it is computed from, at most kMaxRecomputedOps, none transcendental or
// random) reads only values made before A, constants, and A's smaller values (row values, a
// reduction's or computed from one: stored instead, small).
// Each reader kernel B gets one copy of the cone's nodes, placed before B's first node that
// reads one. Taken where the full-size tensors the readers must newly load cost fewer bytes
// than V's store and loads, the readers' load limits and sizes respected.
#include <map>
#include <set>

#include "fusion/schedule_internal.h"

namespace mini::fusion {

using graph::Node;
using graph::NodeKind;

namespace {

// The most ops one value's recomputation copies into a later kernel (rematerialize).
constexpr size_t kMaxRecomputedOps = 8;

// A value V the pass may recompute, and what that would cost.
struct Candidate {
  std::set<int> into;                      // the kernels that read V
  std::set<int> cone, leaves;              // what recomputes V; what those nodes read from memory
  int64_t cost = 0;                        // the bytes the readers newly load
  std::map<int, std::set<int>> new_loads;  // reader kernel -> its loads, the cone computed there
};

std::vector<std::vector<int>> readers_of(const graph::Graph& g) {
  std::vector<std::vector<int>> readers(g.nodes.size());
  for (int id = 0; id < (int)g.nodes.size(); id++)
    for (int i : g.nodes[id].inputs)
      if (i >= 0) readers[i].push_back(id);
  return readers;
}

// The pass's state: the schedule, and the values taken so far.
struct Rematerialize {
  Schedule& s;
  std::vector<int>& group_of;
  const int max_loads;
  std::vector<size_t>& first_decision;
  graph::Graph& g = s.graph;
  const int n = (int)g.nodes.size();  // the nodes before any copy
  const std::vector<std::vector<int>> readers = readers_of(g);
  const std::set<int> outputs = std::set<int>(g.outputs.begin(), g.outputs.end());
  std::map<int, std::set<int>> loads_of{};      // reader kernel -> what it will load
  std::map<int, std::map<int, int>> copy_of{};  // reader kernel -> original node -> its copy (-1: planned)
  std::vector<std::pair<int, std::vector<int>>> taken{};  // V, the cone's nodes in program order
  std::map<int, std::vector<int>> copies{};     // reader kernel -> its copies, in order

  // What kernel b reads from memory now.
  std::set<int> group_loads(int b) const {
    std::set<int> loads;
    for (int id : s.groups[b].nodes)
      for (int i : g.nodes[id].inputs)
        if (i >= 0 && group_of[i] != b && g.nodes[i].kind != NodeKind::Constant) loads.insert(i);
    return loads;
  }

  // The kernels other than a that read v (into); false where something else reads it too.
  bool read_by_kernels_only(int v, int a, std::set<int>& into) const {
    bool kernels_only = true;
    for (int r : readers[v]) {
      if (group_of[r] == a) continue;
      if (group_of[r] < 0) kernels_only = false;
      else into.insert(group_of[r]);
    }
    return kernels_only;
  }

  // The cone of v in kernel a, from v back to what a reads and a's reductions; false where it
  // holds a view or another kind of node of a, or grows past kMaxRecomputedOps.
  bool cone_of(int v, int a, Candidate& c) const {
    const Node& node = g.nodes[v];
    std::vector<int> stack{v};
    bool ok = true;
    while (!stack.empty() && ok) {
      int id = stack.back();
      stack.pop_back();
      if (c.cone.count(id)) continue;
      c.cone.insert(id);
      for (int i : g.nodes[id].inputs) {
        if (i < 0 || g.nodes[i].kind == NodeKind::Constant) continue;
        const Node& in = g.nodes[i];
        if (group_of[i] != a || op_class(in.op) == OpClass::Reduction || in.meta.sizes != node.meta.sizes) {
          c.leaves.insert(i);  // read from memory: made before A, or a row value of A (small)
        } else if (op_class(in.op) == OpClass::Pointwise && !is_random(in.op) && !is_transcendental(in.op)) {
          stack.push_back(i);
        } else {
          ok = false;  // a view or another kind of node inside A
        }
      }
      ok = ok && c.cone.size() <= kMaxRecomputedOps;
    }
    return ok;
  }

  // Each reader kernel's loads with the cone computed there, and what they newly load (c.cost);
  // false where a reader iterates another space, or would grow past its size or load limit.
  bool fits_readers(const Node& node, Candidate& c) {
    bool ok = true;
    for (int b : c.into) {
      if (!same_space(s.groups[b], node.meta.sizes) || s.groups[b].nodes.size() + c.cone.size() > kMaxFusionSize)
        return false;
      if (!loads_of.count(b)) loads_of[b] = group_loads(b);
      std::set<int> after = loads_of[b];
      for (int k : c.cone) after.erase(k);  // what B read of the cone it now computes
      for (int l : c.leaves)
        if (after.insert(l).second) c.cost += meta_bytes(g, g.nodes[l].meta);
      if (max_loads > 0 && (int)after.size() > max_loads) ok = false;
      c.new_loads[b] = after;
    }
    return ok;
  }

  // Takes v where recomputing it in the kernels that read it moves fewer bytes than storing it.
  void consider(int v) {
    const Node& node = g.nodes[v];
    const int a = group_of[v];
    if (a < 0 || node.kind != NodeKind::Op || op_class(node.op) != OpClass::Pointwise || is_random(node.op) ||
        is_transcendental(node.op) || outputs.count(v))
      return;
    Candidate c;
    if (!read_by_kernels_only(v, a, c.into) || c.into.empty() || !cone_of(v, a, c)) return;
    const int64_t bytes = meta_bytes(g, node.meta);
    if (!fits_readers(node, c) || c.cost >= bytes * (1 + (int64_t)c.into.size())) return;
    for (auto& [b, l] : c.new_loads) {
      loads_of[b] = l;
      for (int k : c.cone) copy_of[b].emplace(k, -1);
    }
    taken.push_back({v, std::vector<int>(c.cone.begin(), c.cone.end())});
    const size_t kernels = c.into.size(), ops = c.cone.size();
    s.decisions.push_back({cat("recompute ", node.name, " (", op_name(node.op), ") in ", kernels,
                               kernels == 1 ? " later kernel" : " later kernels", " instead of storing it: ",
                               ops, ops == 1 ? " op" : " ops", " over what ",
                               kernels == 1 ? "that kernel reads" : "they read", " (saves ",
                               bytes * (1 + (int64_t)kernels) - c.cost, " bytes of memory traffic)")});
  }

  // The copies, each reader kernel's in program order; then B's nodes read them.
  void make_copies() {
    for (auto& [b, of] : copy_of) {
      for (auto& [orig, copy] : of) {  // ascending original ids: a topological order
        const Node& o = g.nodes[orig];
        std::vector<int> ins;
        for (int i : o.inputs) ins.push_back(i >= 0 && of.count(i) ? of.at(i) : i);
        Node clone_src = o;  // add_op may grow g.nodes
        copy = g.add_op(clone_src.op, ins, clone_src.attrs, clone_src.code);
        copies[b].push_back(copy);
      }
      for (int id : s.groups[b].nodes)
        for (int& i : g.nodes[id].inputs)
          if (i >= 0 && of.count(i)) i = of.at(i);
    }
  }

  // What no other kernel reads now stays in registers; a row value a copy reads is stored.
  void update_realized() {
    const int m = (int)g.nodes.size();
    group_of.resize(m, -1);
    s.realized.resize(m, false);
    for (auto& [b, list] : copies)
      for (int c : list) {
        group_of[c] = b;
        for (int i : g.nodes[c].inputs)
          if (i >= 0 && group_of[i] >= 0 && group_of[i] != b) s.realized[i] = true;
      }
    for (auto& [v, cone] : taken)
      for (int c : cone) {
        bool outside = outputs.count(c) > 0;
        for (int id = 0; id < m && !outside; id++)
          if (group_of[id] != group_of[c])
            for (int i : g.nodes[id].inputs) outside = outside || i == c;
        if (!outside) s.realized[c] = false;
      }
  }

  // Program order: each kernel's copies just before its first node that reads one, in the
  // kernel and in the graph (the order returned: old ids, as reordered() takes them).
  std::vector<int> place_copies() {
    std::map<int, int> insert_before;  // first reader -> reader kernel
    for (auto& [b, list] : copies) {
      std::set<int> mine(list.begin(), list.end());
      for (int id : s.groups[b].nodes) {
        if (mine.count(id)) continue;
        bool reads = false;
        for (int i : g.nodes[id].inputs) reads = reads || mine.count(i);
        if (reads) {
          insert_before[id] = b;
          break;
        }
      }
      std::vector<int> nodes;
      for (int id : s.groups[b].nodes) {
        if (insert_before.count(id) && insert_before[id] == b) nodes.insert(nodes.end(), list.begin(), list.end());
        nodes.push_back(id);
      }
      s.groups[b].nodes = nodes;
    }
    std::vector<int> order;
    for (int id = 0; id < n; id++) {
      auto it = insert_before.find(id);
      if (it != insert_before.end()) order.insert(order.end(), copies[it->second].begin(), copies[it->second].end());
      order.push_back(id);
    }
    return order;
  }

  // The graph in `order`, and every node id of the schedule with it.
  void renumber_nodes(const std::vector<int>& order) {
    const int m = (int)g.nodes.size();
    std::vector<int> new_id(m);
    for (int i = 0; i < m; i++) new_id[order[i]] = i;
    g = reordered(g, order);
    std::vector<int> group_of2(m);
    std::vector<bool> realized2(m);
    for (int i = 0; i < m; i++) {
      group_of2[new_id[i]] = group_of[i];
      realized2[new_id[i]] = s.realized[i];
    }
    group_of = group_of2;
    s.realized = realized2;
    for (auto& k : s.groups)
      for (int& id : k.nodes) id = new_id[id];
    for (auto& st : s.steps) {
      if (st.node >= 0) st.node = new_id[st.node];
      for (int& id : st.also) id = new_id[id];
    }
  }

  // A kernel whose every value its readers now compute themselves stores nothing: it goes.
  void drop_empty_kernels() {
    std::set<int> outs(g.outputs.begin(), g.outputs.end());
    std::vector<int> renumber(s.groups.size(), -1);
    std::vector<FusionGroup> kept;
    std::vector<size_t> kept_first;  // first_decision of the kernels kept (a dropped one's go to the kernel before)
    for (size_t k = 0; k < s.groups.size(); k++) {
      bool stores = false;
      for (int id : s.groups[k].nodes) stores = stores || s.realized[id] || outs.count(id);
      if (!stores) {
        s.decisions.push_back({cat("drop ", s.groups[k].name, ": later kernels compute everything it made")});
        for (int id : s.groups[k].nodes) group_of[id] = -1;
        continue;
      }
      renumber[k] = (int)kept.size();
      kept.push_back(s.groups[k]);
      kept_first.push_back(first_decision[k]);
    }
    if (kept.size() == s.groups.size()) return;
    if (!kept_first.empty()) kept_first[0] = 0;
    s.groups = std::move(kept);
    first_decision = std::move(kept_first);
    std::vector<Step> steps;
    for (Step& st : s.steps) {
      if (st.kind == StepKind::Kernel) {
        if (renumber[st.group] < 0) continue;
        st.group = renumber[st.group];
      }
      steps.push_back(std::move(st));
    }
    s.steps = std::move(steps);
    for (int& gid : group_of)
      if (gid >= 0) gid = renumber[gid];
  }
};

}  // namespace

void rematerialize(Schedule& s, std::vector<int>& group_of, int max_loads, std::vector<size_t>& first_decision) {
  Rematerialize pass{s, group_of, max_loads, first_decision};
  for (int v = 0; v < pass.n; v++) pass.consider(v);
  if (pass.taken.empty()) return;
  pass.make_copies();
  pass.update_realized();
  pass.renumber_nodes(pass.place_copies());
  pass.drop_empty_kernels();
}

}  // namespace mini::fusion
