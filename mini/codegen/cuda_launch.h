// cuda_launch.h — how each CUDA kernel is laid out and launched: the numbered layouts, the
// threads that reduce a row, the rows a block takes, the block and the grid, which reductions
// are split over blocks. The renderer (cuda_kernel.cpp) compiles each kernel for these numbers
// and the runtime (runtime/compiled_cuda_graph.cpp) launches it with them, so both read them
// here.
#pragma once
#include <string>
#include <vector>

#include "fusion/schedule.h"

namespace mini::codegen {

constexpr int kCudaThreads = 256;  // a pointwise kernel's block; a looped row's

// How kernels are laid out: numbered variants (llm.c's habit), each checked against eager by
// the tests and timed by labs/bench/bench_cuda_inductor.py --layouts. MINI_CODEGEN_LAYOUT=N
// selects one (read when a graph is rendered); the default is the fastest measured on the H200.
//   1  naive: pointwise one element a thread; a row reduction's every pass reads the row again
//   2  16-byte vectors in pointwise kernels; a static row kept in registers, 8 elements a thread
//   3  as 2, 16 elements a thread, the row read and written in 16-byte vectors where contiguous
//      and aligned
//   4  as 3, 32 elements a thread
//   5  as 3, lean rows: a load the row's passes read once is read in that pass (not held in
//      registers across the block reductions), a transcendental value a later pass needs again
//      kept in registers (softmax's exp is computed once), 32-bit index arithmetic where every
//      offset fits; at most 64 registers a thread (two 512-thread blocks of rows an SM)
//   6  as 5, 8 elements a thread and at most 32 registers (a full SM of threads: while some
//      rows wait at a block reduction, others' loads are in flight), Inductor's occupancy
//   7  looped rows in vectors, Inductor's `triton_red_` shape: no row held in registers, each
//      pass reads the row again (from L2) in 16-byte vectors, up to 512 threads a row, at most
//      32 registers; rows that are not whole aligned vectors loop element by element
//   8  as 7, with the online softmax (Inductor's prepare_softmax_online): a sum of exp(x - m),
//      m = amax(x) of the row, folds in the max's pass (LoopKernel::online_max), one pass fewer
//   9  as 8, each pass a loop of constant trip count (the block the kernel is compiled for),
//      unrolled where the row's vectors divide among the threads: several loads in flight
//  10  as 9, unrolled by 2: half the code for NVRTC to compile, two loads in flight a thread
//  11  as 9, a pointwise kernel's grid covers it once (Triton's shape: a vector a thread, no
//      grid-stride iterations), not 64 blocks an SM
// Measured on the H200 (2026-12-02 06:01 UTC, commit 0b0fe3f, bench_cuda_inductor.py --layouts,
// the graph alone, 8192 x 8192 float32, ms): softmax / layer norm 1: 0.347 / 0.330,
// 2: 0.257 / 0.218, 3: 0.193 / 0.209, 4: 0.243 / 0.211, 5: 0.168 / 0.161, 6: 0.183 / 0.168,
// 7: 0.160 / 0.150, 8: 0.158 / 0.150, 9: 0.147 / 0.136, 10: 0.147 / 0.152 (torch.compile:
// 0.151 / 0.133); pointwise kernels the same from layout 2 on; layout 11 chain8 0.207 against
// 0.194 (09:27 UTC, commit 6d8d8c0; notes/perf.md has the tables).
struct CudaLayout {
  int number = 3;
  bool vector_pointwise = true;
  int row_registers = 16;  // 0: no persistent rows (every pass reads the row)
  bool vector_rows = true;
  bool lean_rows = false;
  bool vector_loop_rows = false;  // rows looped over in vectors, read again each pass (layout 7)
  bool online_softmax = false;    // looped rows: a softmax's max and sum in one pass (layout 8)
  int unroll_rows = -1;  // looped rows: a pass of constant trip count, unrolled by this (0: all
                         // of it, 4 at most past 8 trips; layouts 9, 10), -1: a plain loop
  int row_max_registers = 64;  // lean rows: registers a thread at most (__launch_bounds__: 2048
                               // threads, 32 blocks and 65536 registers an SM)
  bool pointwise_one_pass = false;  // a pointwise grid of a thread a vector (layout 11)
  int warp_rows = 8;  // warps a block where a row takes a warp or fewer lanes (a warp per
                      // row, or several rows a warp); 1: a block per row always (layout 1)
};
constexpr int kCudaLayouts = 11, kCudaDefaultLayout = 9;
CudaLayout cuda_layout(int number);
// MINI_CODEGEN_LAYOUT's layout (a value out of 1..kCudaLayouts raises, naming them), else the default.
CudaLayout cuda_layout_from_env();
constexpr int kCudaMaxSymbols = 64, kCudaMaxLoads = 16, kCudaMaxRank = 8;  // mini::Sizes

// The elements of one row of kernel `k` (its reduced dims), or -1 where a size is symbolic.
int64_t cuda_row_length(const fusion::FusionGroup& k);
// The threads that reduce one row of `rnumel` elements (-1: symbolic): a power of two up to
// 1024 (from 32 where a block takes one row), about row_registers elements a thread.
int cuda_reduction_threads(int64_t rnumel, const CudaLayout& layout);
// What kernel `k` becomes under `layout`: "poi" (pointwise), "per" (each row held in registers,
// read from memory once), "red" (each row looped over); for codegen::name_kernels.
std::string cuda_kernel_shape(const fusion::FusionGroup& k, const CudaLayout& layout);
// The rows a block reduces at once for rows of `rnumel` elements: layout.warp_rows warps'
// worth where a row takes a warp or fewer lanes (a warp per row, or 32 / threads rows a
// warp), else 1 (a block per row).
int cuda_rows_per_block(int64_t rnumel, const CudaLayout& layout);
// Whether reduction kernel `k` runs as columns under `layout` (every layout but 1): its innermost
// dim kept (a bias gradient: [B, T, C] summed over B and T), at least 32 kept elements and 32
// reduced ones, static sizes. A block takes 32 consecutive kept elements with 32 lanes each over
// the reduced ones (1024 threads, a block per 32 kept elements), so that a warp's loads are lines
// of memory; its name says "col".
bool cuda_column_reduction(const fusion::FusionGroup& k, const CudaLayout& layout);
// Reductions of column kernel `k` whose reduced elements are shared among blocks in y (one pass:
// no reduction of a reduction's result, no full value stored after the column sums), else 0.
// Such a kernel takes `partials` (a slot per reduction per y block per kept element) and
// `arrived` (a counter per x block, each starting at 0 and left at 0) after `sizes`.
int cuda_column_splits(const fusion::Schedule& s, const fusion::FusionGroup& k, const CudaLayout& layout);
// Its blocks in y for `cols` kept elements and `rnumel` reduced ones, `vector` kept elements a
// thread, where the GPU holds `resident` blocks of the kernel at once (its SMs times the blocks
// an SM holds, which the kernel's registers decide: cuda::resident_blocks): about one wave of
// blocks, at most cuda_column_max_splits(), each lane folding 8 rows at least.
int64_t cuda_column_split_grid(int64_t cols, int64_t rnumel, int64_t resident, int vector = 1);
constexpr int64_t cuda_column_max_splits() { return 64; }
// The block (threads in x) kernel `k` is compiled for and launched with under `layout`: a row's
// threads times the rows a block takes.
int cuda_block(const fusion::FusionGroup& k, const CudaLayout& layout);
// Blocks of `threads` that must fit on an SM at once (lean rows' __launch_bounds__ minimum).
int cuda_min_blocks_per_sm(int threads, const CudaLayout& layout);
// Reductions of kernel `k` when it is a full reduction in two stages (one row, one phase;
// layouts 2 and up), else 0. Such a kernel takes two more arguments after `sizes`:
// `unsigned long long* partials` (a slot per reduction per block) and `unsigned* arrived` (a
// counter that starts at 0, and that the kernel leaves at 0).
int cuda_split_reductions(const fusion::Schedule& s, const fusion::FusionGroup& k, const CudaLayout& layout);
// The grid of such a kernel over `rnumel` elements in blocks of `threads` (at most
// cuda_split_max_grid: the partials hold that many per reduction).
int64_t cuda_split_grid(int64_t rnumel, int threads, int sms);
int64_t cuda_split_max_grid(int sms);
// The grid of kernel `k` of `s` under `layout` for the sizes of this call (symbols resolved):
// blocks in x. column_vector: cuda_column_vector's, for a column kernel (decided once, by the caller).
int64_t cuda_grid(const fusion::Schedule& s, const fusion::FusionGroup& k, const CudaLayout& layout,
                  const std::vector<int64_t>& symbols, int sms, int column_vector = 1);

}  // namespace mini::codegen
