// schedule_internal.h — what schedule.cpp and rematerialize.cpp share (internal to fusion/;
// schedule.h is the stage's interface): the rule and the limit a recomputed value must meet in
// the kernel that takes it, the reordering of a graph's nodes, and the pass itself.
#pragma once
#include <set>
#include <string>
#include <vector>

#include "fusion/schedule.h"

namespace mini::fusion {

// Inductor's config.max_fusion_size: a kernel holds at most this many nodes, so a long chain
// becomes several kernels with a buffer between them. The C++ compiler's time grows faster
// than the size of one function (a 1,000-op chain as one kernel took 8 s at -O3, notes/perf.md).
constexpr size_t kMaxFusionSize = 64;

// A pointwise node over exactly the kernel's space (schedule.cpp: the first legality rule).
bool same_space(const FusionGroup& k, const Shape& shape);

// The other rules and the checks the greedy walk asks (schedule.cpp says what each one
// decides), one function each, so that the C++ tests ([A3], tests/cpp/test_fusion_rules.cpp)
// grade them one at a time.
namespace rules {

// A verdict on one node and the open kernel (Inductor's WhyNoFuse): whether the node joins it,
// and why, in the words the fusion log prints ("fuse X into K: <why>", "cannot fuse X into K:
// <why>"), written where the check decides.
struct Verdict {
  bool fuse = true;
  std::string why;
};

// What the walk knows of the node it decides on.
struct Candidate {
  std::string what;            // "mul_1 (mul)"
  bool reduction = false;
  Shape shape, in_shape;       // its space; for a reduction, its input's
  std::vector<int64_t> dims;   // a reduction's dims (wrapped, sorted)
  int waits = 0;               // reductions of the open kernel it waits for, in sequence
  std::set<int> loads;         // the tensors it would add to the open kernel's loads
};

bool is_row_epilogue(const FusionGroup& k, const Shape& shape);
bool reduction_absorbs_producers(const FusionGroup& k, const Shape& input_shape);
bool same_rows(const FusionGroup& k, const Shape& input_shape, const std::vector<int64_t>& dims);
Verdict fits_size(const FusionGroup& k);
Verdict fits_passes(const Candidate& c);
Verdict fits_loads(const Candidate& c, const std::set<int>& open_loads, int max_loads);  // 0: no limit
Verdict fits_shape(const FusionGroup& k, const Candidate& c);

}  // namespace rules

// g with its nodes in `order` (a topological order: order[i] is the old id of new node i).
graph::Graph reordered(const graph::Graph& g, const std::vector<int>& order);

// After the greedy walk (rematerialize.cpp): values a kernel stores only for later kernels
// that can compute them from what they read anyway, recomputed there instead.
// In:  the schedule the greedy walk built (s.groups, s.steps, s.realized, s.graph), group_of
//      (node -> its kernel, or -1), max_loads as schedule()'s, first_decision (kernel -> the
//      index of its first decision).
// Out: the same, remapped onto the graph with the copies in program order; s.decisions says
//      what was recomputed and which kernels were dropped. Unchanged when nothing is taken.
void rematerialize(Schedule& s, std::vector<int>& group_of, int max_loads, std::vector<size_t>& first_decision);

}  // namespace mini::fusion
