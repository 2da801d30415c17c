// cpp_plan.h — the C++ planner: a LoopKernel's loops, OpenMP kinds, accumulators, folds and
// stages, decided as statements (stmt.h) before cpp_kernel.cpp spells them.
//
// In:  a LoopKernel (loop_ir.h): the kernel's space, values, reductions and their phases.
// Out: a Plan: the statements of the kernel's body (after its buffers are named). Each kernel
//      form is one named planner below; plan_cpp picks one. The planners decide from the
//      kernel's data (dims, extents, which values are full, row or reductions, their ops and
//      dtypes), never from spelled text; what they hold as text is a variable's name or index
//      arithmetic over the kernel's space (size_expr, product, linear_index of c_style.h).
// Guarantees: spelled by cpp_kernel.cpp, a plan is the C++ the renderer always wrote for that
//      kernel, byte for byte (scripts/cpp_corpus.py shows it); tests/cpp/test_plan.cpp checks
//      plans, not text.
#pragma once
#include <map>
#include <string>
#include <vector>

#include "codegen/stmt.h"

namespace mini::codegen {

// The plan of one kernel: pointwise (flat, staged or a nest), a row reduction or an outer one.
Plan plan_cpp(const LoopKernel& kernel);

// Pointwise, every load contiguous over the space (or a scalar): one flat loop over threads and
// vector lanes at once.
Plan plan_pointwise_flat(const LoopKernel& kernel);
// Pointwise, a flat loop whose chain holds several transcendental ops: tiles of kStageTile
// elements over threads, each tile one vectorized loop per stage (cut_stages).
Plan plan_pointwise_staged(const LoopKernel& kernel, const std::vector<std::vector<int>>& stages);
// Pointwise, a load neither contiguous nor a scalar: a loop nest, the outer dims over threads,
// the innermost one in vector lanes, so that no element divides to find its index.
Plan plan_pointwise_nest(const LoopKernel& kernel);
// A reduction along each row: a loop over rows (threads), one pass over the row per phase.
Plan plan_row_reduction(const LoopKernel& kernel);
// A reduction of leading dims: blocks of outputs, the reduced dims outer, the block inner.
Plan plan_outer_reduction(const LoopKernel& kernel);

// Whether the C++ source of `schedule` calls the out-of-line vector versions of float sin, cos,
// exp and sigmoid (more than kInlineTranscendentals of them in the source) instead of inlining
// each: cpp_kernel.cpp then spells those ops through cpp_outlined_math's table.
bool cpp_outlines_math(const fusion::Schedule& schedule);
// The ops that have an out-of-line vector version, and its name ("mini::sin_v").
const std::map<OpKind, std::string>& cpp_outlined_math();

}  // namespace mini::codegen
