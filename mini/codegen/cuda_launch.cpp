// cuda_launch.cpp — see cuda_launch.h: the layouts, and each kernel's threads, block and grid.
#include "codegen/cuda_launch.h"

#include <algorithm>
#include <cstdlib>

#include "codegen/loop_ir.h"

namespace mini::codegen {

using fusion::FusionGroup;
using fusion::Schedule;

int64_t cuda_row_length(const FusionGroup& k) {
  int64_t R = 1;
  for (int64_t d : k.reduced) R = graph::is_symbol(k.space[d]) || R < 0 ? -1 : R * k.space[d];
  return R;
}

CudaLayout cuda_layout(int number) {
  if (number < 1 || number > kCudaLayouts)
    fail("MINI_CODEGEN_LAYOUT=", number, ": the CUDA kernel layouts are 1 (naive) to ", kCudaLayouts,
         " (mini/codegen/cuda_launch.h lists them)");
  CudaLayout l;
  l.number = number;
  l.vector_pointwise = number >= 2;
  l.row_registers = number == 1 ? 0 : number == 2 || number == 6 ? 8 : number == 4 ? 32 : 16;
  l.vector_rows = number >= 3;
  l.lean_rows = number >= 5;
  l.row_max_registers = number >= 6 ? 32 : 64;
  l.vector_loop_rows = number >= 7;
  if (number >= 7) l.row_registers = 0;
  l.online_softmax = number >= 8;
  l.unroll_rows = number >= 9 ? (number == 10 ? 2 : 0) : -1;
  l.pointwise_one_pass = number == 11;
  l.warp_rows = number == 1 ? 1 : 8;
  return l;
}

CudaLayout cuda_layout_from_env() {
  const char* v = std::getenv("MINI_CODEGEN_LAYOUT");
  if (!v || !*v) return cuda_layout(kCudaDefaultLayout);
  char* end = nullptr;
  long n = std::strtol(v, &end, 10);
  if (*end) fail("MINI_CODEGEN_LAYOUT='", v, "': give a layout number, 1 to ", kCudaLayouts);
  return cuda_layout((int)n);
}

// ---- a reduction kernel's layout (A10) ----------------------------------------------------------
// How a reduction kernel's threads meet its rows. A block per row: a row of up to 32 x (the
// elements a thread holds) gets one warp, whose combine is five shuffles (block_reduce stops
// there); a longer row, more warps, up to 1024 threads, whose combine adds a round through
// shared memory. A row held in registers ("per") is read from memory once; a looped row
// ("red") is read again by each pass. One long row alone (a full reduction) is split over many
// blocks, each folding a share, the last one to arrive folding the partials.

int cuda_reduction_threads(int64_t rnumel, const CudaLayout& layout) {
  // Contract: the threads that reduce one row of `rnumel` elements (-1: a size known only at
  // run time), under `layout`. A power of two, at most 1024; at least 32 where the layout puts
  // one row in a block (layout.warp_rows == 1: block_reduce needs whole warps), else at least 1
  // (rows of 32 threads or fewer share a block: cuda_rows_per_block).
  //  - layout.vector_loop_rows (looped rows read in vectors, layouts 7 and up) and a known
  //    length: the fewest threads that give each thread at most 4 elements, but never more
  //    than 512;
  //  - a symbolic length, or a layout that holds no row in registers (row_registers == 0): a
  //    looped row of kCudaThreads;
  //  - else the row is to be held in registers, about row_registers elements a thread: the
  //    fewest threads with threads x row_registers >= rnumel, 1024 at most.
  // A10 BEGIN: a CUDA reduction's layout
  MINI_KIT_STUB(A10);
  const int fewest = layout.warp_rows > 1 ? 1 : 32;
  if (layout.vector_loop_rows && rnumel > 0) {  // looped rows: up to 512, 4 elements a thread at least
    int threads = fewest;
    while (threads < 512 && int64_t(threads) * 4 < rnumel) threads *= 2;
    return threads;
  }
  if (rnumel < 0 || layout.row_registers == 0) return kCudaThreads;  // a looped row
  int threads = fewest;  // about row_registers elements a thread, 1024 at most
  while (threads < 1024 && int64_t(threads) * layout.row_registers < rnumel) threads *= 2;
  return threads;
  // A10 END
}

bool cuda_column_reduction(const FusionGroup& k, const CudaLayout& layout) {
  if (k.reduced.empty() || layout.number == 1) return false;
  const int64_t last = (int64_t)k.space.size() - 1;
  if (std::count(k.reduced.begin(), k.reduced.end(), last)) return false;  // the innermost dim is reduced: rows
  int64_t cols = 1, rnumel = 1;
  for (int64_t d = 0; d <= last; d++) {
    if (k.space[d] < 0) return false;  // a symbolic size: the row layouts take any
    (std::count(k.reduced.begin(), k.reduced.end(), d) ? rnumel : cols) *= k.space[d];
  }
  return cols >= 32 && rnumel >= 32;
}

int cuda_column_splits(const Schedule& s, const FusionGroup& k, const CudaLayout& layout) {
  if (!cuda_column_reduction(k, layout)) return 0;
  LoopKernel L(s, k);
  if (L.phases() != 1) return 0;  // one pass: no reduction of a reduction's result
  std::vector<int> reds, stores, later_reds, later_stores;
  L.phase_targets(0, &reds, &stores);
  L.phase_targets(1, &later_reds, &later_stores);
  return later_stores.empty() ? (int)reds.size() : 0;  // a full value stored after the column sums needs all of them
}

int64_t cuda_column_split_grid(int64_t cols, int64_t rnumel, int64_t resident, int vector) {
  const int64_t strips = (cols / vector + 31) / 32;
  // as many blocks as the GPU holds at once (one wave: a second wave of blocks pays each block's
  // folds and partials again for the same rows), each lane folding 8 rows at least (4 rows of
  // `vector` elements in vector columns: layer norm's 768 float32 columns are 6 strips, which 8
  // rows a lane left at 192 blocks)
  const int64_t rows_a_lane = vector > 1 ? 4 : 8;
  const int64_t want = (resident + strips - 1) / strips, most = std::max<int64_t>(1, rnumel / (32 * rows_a_lane));
  return std::max<int64_t>(1, std::min({want, most, cuda_column_max_splits()}));
}

std::string cuda_kernel_shape(const FusionGroup& k, const CudaLayout& layout) {
  if (k.reduced.empty()) return "poi";
  if (cuda_column_reduction(k, layout)) return "col";
  // Contract: "per" where each row is held in registers — its length R is known, the layout
  // holds rows (row_registers > 0) and the threads cuda_reduction_threads gives such a row hold
  // all of it at row_registers elements a thread — else "red" (the row looped over, any length).
  // A10 BEGIN: a CUDA reduction's layout
  MINI_KIT_STUB(A10);
  const int64_t R = cuda_row_length(k);  // -1 where a size is symbolic
  bool held = R > 0 && layout.row_registers && R <= int64_t(cuda_reduction_threads(R, layout)) * layout.row_registers;
  return held ? "per" : "red";
  // A10 END
}

int cuda_rows_per_block(int64_t rnumel, const CudaLayout& layout) {
  // Contract: the rows one block reduces at once. Where a row's threads
  // (cuda_reduction_threads) are a warp or fewer, the rows of layout.warp_rows warps: a warp
  // per row, or 32 / threads rows a warp (a thread per row at the least), each row's lanes
  // combining it with shuffles alone (warp_reduce); else 1, a block per row (block_reduce:
  // shuffles, then the warps' values through shared memory).
  // A10 BEGIN: a CUDA reduction's layout
  MINI_KIT_STUB(A10);
  const int threads = cuda_reduction_threads(rnumel, layout);
  return threads <= 32 ? layout.warp_rows * (32 / threads) : 1;
  // A10 END
}

int cuda_block(const FusionGroup& k, const CudaLayout& layout) {
  if (k.reduced.empty()) return kCudaThreads;
  if (cuda_column_reduction(k, layout)) return 1024;  // 32 kept elements x 32 lanes
  const int64_t R = cuda_row_length(k);
  return cuda_reduction_threads(R, layout) * cuda_rows_per_block(R, layout);
}

int cuda_min_blocks_per_sm(int threads, const CudaLayout& layout) {
  // Contract: the blocks of `threads` threads that must fit on one SM at once (the second
  // number of __launch_bounds__, which caps each thread's registers for it): as many as the
  // SM's 65536 registers allow at layout.row_max_registers a thread, and its limits of 2048
  // threads and 32 blocks; at least 1.
  // A10 BEGIN: a CUDA reduction's layout
  MINI_KIT_STUB(A10);
  return std::max(1, std::min({65536 / layout.row_max_registers / threads, 2048 / threads, 32}));
  // A10 END
}

int cuda_split_reductions(const Schedule& s, const FusionGroup& k, const CudaLayout& layout) {
  if (k.reduced.empty() || layout.number == 1) return 0;
  // Contract: where kernel k is one row (every kept dim is 1) reduced in one pass (one phase:
  // no reduction of a reduction's result) and stores no full-size value (every store is a
  // reduction's result), the reductions of that pass (the partials each block writes); else 0
  // (a block per row). LoopKernel(s, k) knows the phases (phases(), phase_targets) and which
  // stores are full (is_full).
  // A10 BEGIN: a CUDA reduction's layout
  MINI_KIT_STUB(A10);
  for (int64_t d = 0; d < (int64_t)k.space.size(); d++)  // one row: every kept dim is 1
    if (!std::count(k.reduced.begin(), k.reduced.end(), d) && k.space[d] != 1) return 0;
  LoopKernel L(s, k);
  if (L.phases() != 1) return 0;  // one pass: no reduction of a reduction's result
  std::vector<int> reds, stores;
  L.phase_targets(0, &reds, &stores);
  for (int id : k.stores)
    if (L.is_full(id)) return 0;
  return (int)reds.size();
  // A10 END
}

int64_t cuda_grid(const Schedule& s, const FusionGroup& k, const CudaLayout& layout, const std::vector<int64_t>& symbols,
                  int sms, int column_vector) {
  auto extent = [&](const std::vector<int64_t>& dims) {
    int64_t n = 1;
    for (int64_t d : dims) n *= graph::is_symbol(k.space[d]) ? symbols[graph::symbol_index(k.space[d])] : k.space[d];
    return n;
  };
  std::vector<int64_t> kept;
  for (int64_t d = 0; d < (int64_t)k.space.size(); d++)
    if (!std::count(k.reduced.begin(), k.reduced.end(), d)) kept.push_back(d);
  if (cuda_column_reduction(k, layout))  // 32 x column_vector kept elements a block
    return std::max<int64_t>(1, (extent(kept) / column_vector + 31) / 32);
  const int rows_a_block = k.reduced.empty() ? 1 : cuda_rows_per_block(cuda_row_length(k), layout);
  int64_t work = k.reduced.empty() ? (extent(kept) + kCudaThreads - 1) / kCudaThreads
                                   : (extent(kept) + rows_a_block - 1) / rows_a_block;
  if (k.reduced.empty() && layout.pointwise_one_pass && layout.vector_pointwise) {
    // a thread a vector: V from the widest of every load and store (the writer's V counts only
    // contiguous loads, so it is at least this one: never fewer threads than vectors)
    size_t widest = 1;
    for (int id : k.loads) widest = std::max(widest, itemsize(s.graph.nodes[id].meta.dtype));
    for (int id : k.stores) widest = std::max(widest, itemsize(s.graph.nodes[id].meta.dtype));
    int64_t threads = kCudaThreads * int64_t(16 / widest);
    return std::max<int64_t>(1, std::min<int64_t>((extent(kept) + threads - 1) / threads, 0x7fffffff));
  }
  // enough blocks to fill the GPU many times over; grid-stride loops take the rest
  return std::max<int64_t>(1, std::min<int64_t>(work, int64_t(sms) * 64));
}

int64_t cuda_split_grid(int64_t rnumel, int threads, int sms) {
  // Contract: the blocks a split row of `rnumel` elements is shared among, in blocks of
  // `threads`: the fewest blocks in which no thread folds more than 16 elements,
  // ceil(rnumel / (threads * 16)) (no more blocks than that for a short row: each block's
  // partial and the last block's fold cost more than they save), at least 1 and at most
  // cuda_split_max_grid(sms) (the partials hold that many a reduction).
  // A10 BEGIN: a CUDA reduction's layout
  MINI_KIT_STUB(A10);
  int64_t want = (rnumel + int64_t(threads) * 16 - 1) / (int64_t(threads) * 16);  // 16 elements a thread at least
  return std::max<int64_t>(1, std::min<int64_t>(want, cuda_split_max_grid(sms)));
  // A10 END
}

int64_t cuda_split_max_grid(int sms) { return int64_t(sms) * 2; }

}  // namespace mini::codegen
