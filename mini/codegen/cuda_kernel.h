// cuda_kernel.h — the CUDA renderer: a Schedule's fused kernels as one CUDA C++ source for NVRTC.
//
// In:  a Schedule whose kernels are named for CUDA (codegen::name_kernels(s, kCudaTarget)).
// Out: one source: a prelude (types, the math the device library lacks, block reductions) and
//      one `extern "C" __global__` function per kernel, written from the same LoopKernel
//      (loop_ir.h) and op table (c_style.h) as the C++ renderer's.
// Loops (launched with the block and grid of cuda_launch.h):
//   pointwise  a grid-stride loop over the flat index i, in 16-byte vectors: planned as
//              statements (plan_cuda, stmt.h), then spelled (cuda_statements.cpp);
//   reduction  a block per row (rows grid-strided; or a warp, or a few lanes): each phase is one
//              pass of the row's threads over the row, then a block reduction (warp shuffles,
//              then one value per warp in shared memory); row values computed by every thread,
//              stored by the row's first: planned as statements (plan_row_reduction; looped in
//              vectors, the online softmax: plan_vector_rows), then spelled;
//   split row  one row shared among the blocks, the last block to arrive folding their partials:
//              planned as statements (plan_split_reduction), then spelled;
//   columns    a block per 32 kept elements, 32 lanes each over the reduced ones (split: shared
//              in chunks among blocks in y too): planned as statements (plan_column_reduction;
//              plan_vector_columns, CV columns a thread), then spelled.
// Calling convention of every kernel:
//   NAME(<one pointer per load, then per store, typed>, mini::Sizes sizes)
//   sizes.symbols[k]: size symbol k for this call; sizes.strides[b][d]: buffer b's stride along
//   dim d, where the graph's strides are not compile-time constants.
#pragma once
#include <string>
#include <vector>

#include "codegen/cuda_launch.h"
#include "codegen/stmt.h"
#include "fusion/schedule.h"

namespace mini::codegen {

std::string render_cuda(const fusion::Schedule& schedule, const CudaLayout& layout = cuda_layout_from_env());
// Each kernel in its own layout (layouts[i] for schedule.groups[i]: max-autotune's choice).
std::string render_cuda(const fusion::Schedule& schedule, const std::vector<CudaLayout>& layouts);
// The parts render_cuda joins: the prelude every kernel needs, and each kernel's text (its
// comment naming the graph nodes it serves, then its function), kernels[i] for groups[i].
std::string cuda_prelude();
std::vector<std::string> render_cuda_kernels(const fusion::Schedule& schedule, const std::vector<CudaLayout>& layouts);
// render_cuda's source from those parts.
std::string join_cuda(const std::vector<std::string>& kernels, const std::vector<CudaLayout>& layouts);

// The statements kernel `k` of `s` becomes under `layout` (stmt.h), as its shape's planner
// decides them, every shape planned: a pointwise kernel's (plan_pointwise, cuda_pointwise.cpp),
// one row split over the blocks (plan_split_reduction, cuda_columns.cpp), columns (one a
// thread, split among blocks in y or not: plan_column_reduction; CV a thread:
// plan_vector_columns; cuda_columns.cpp), or rows (held in registers or looped over:
// plan_row_reduction; looped over in vectors: plan_vector_rows; cuda_rows.cpp).
Plan plan_cuda(const fusion::Schedule& s, const fusion::FusionGroup& k, const CudaLayout& layout);

// The kept elements each thread of column kernel `k` takes (1, or a Vec of 2 to 16 in vector
// columns: split columns whose innermost dim divides into 16-byte loads; layouts 2 and up).
int cuda_column_vector(const fusion::Schedule& s, const fusion::FusionGroup& k, const CudaLayout& layout);
// Whether kernel `k` of `s` under `layout` takes every pointer aligned to kCudaAlignment bytes
// (its Vec loads and stores, without a run-time check or an element-by-element path for another
// address): the pointwise kernels in vectors and the reductions in looped vector rows. The
// runtime copies a tensor such a kernel would read from elsewhere (a view at an odd offset)
// before the launch, as Inductor's copy_misaligned_inputs does; what the kernels store is mini's
// own allocation, always aligned.
constexpr int kCudaAlignment = 16;
bool cuda_assumes_aligned(const fusion::Schedule& s, const fusion::FusionGroup& k, const CudaLayout& layout);

}  // namespace mini::codegen
