// cuda_kernel.h — the CUDA renderer: a Schedule's fused kernels as one CUDA C++ source for NVRTC.
//
// In:  a Schedule whose kernels are named for CUDA (codegen::name_kernels(s, kCudaTarget)).
// Out: one source: a prelude (types, the math the device library lacks, block reductions) and
//      one `extern "C" __global__` function per kernel, written from the same LoopKernel
//      (loop_ir.h) and op table (c_style.h) as the C++ renderer's.
// Loops (launch: kCudaThreads threads a block, the grid from cuda_grid below):
//   pointwise  a grid-stride loop over the flat index i;
//   reduction  a block per row (rows grid-strided): each phase is one pass of the block's threads
//              over the row, then a block reduction (warp shuffles, then one value per warp in
//              shared memory); row values computed by every thread, stored by thread 0.
// Calling convention of every kernel:
//   NAME(<one pointer per load, then per store, typed>, mini::Sizes sizes)
//   sizes.symbols[k]: size symbol k for this call; sizes.strides[b][d]: buffer b's stride along
//   dim d, where the graph's strides are not compile-time constants.
#pragma once
#include <string>

#include "fusion/schedule.h"

namespace mini::codegen {

constexpr int kCudaThreads = 256;       // a pointwise kernel's block
constexpr int kCudaRowRegisters = 8;    // a persistent row: elements a thread keeps in registers
constexpr int kCudaMaxSymbols = 64, kCudaMaxLoads = 16, kCudaMaxRank = 8;  // mini::Sizes

std::string render_cuda(const fusion::Schedule& schedule);

// A reduction kernel's block for rows of `rnumel` elements (-1: symbolic): a power of two
// from 32 to 1024, about kCudaRowRegisters elements a thread.
int cuda_reduction_threads(int64_t rnumel);
// The block (threads in x) kernel `k` is compiled for and launched with.
int cuda_block(const fusion::FusionGroup& k);
// The grid of kernel `k` for the sizes of this call (symbols resolved): blocks in x.
int64_t cuda_grid(const fusion::FusionGroup& k, const std::vector<int64_t>& symbols, int sms);

}  // namespace mini::codegen
