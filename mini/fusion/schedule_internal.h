// schedule_internal.h — what schedule.cpp and rematerialize.cpp share (internal to fusion/;
// schedule.h is the stage's interface): the rule and the limit a recomputed value must meet in
// the kernel that takes it, the reordering of a graph's nodes, and the pass itself.
#pragma once
#include <vector>

#include "fusion/schedule.h"

namespace mini::fusion {

// Inductor's config.max_fusion_size: a kernel holds at most this many nodes, so a long chain
// becomes several kernels with a buffer between them. The C++ compiler's time grows faster
// than the size of one function (a 1,000-op chain as one kernel took 8 s at -O3, notes/perf.md).
constexpr size_t kMaxFusionSize = 64;

// A pointwise node over exactly the kernel's space (schedule.cpp: the first legality rule).
bool same_space(const FusionGroup& k, const Shape& shape);

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
