// The CUDA launch plan (codegen/cuda_launch.h): what each kernel becomes under a layout — its
// shape, the threads a row takes, the rows a block takes, the block, the grid and which
// reductions are split over blocks — decided from the kernel's iteration space and the layout,
// never from generated text. The fusion groups are built by hand (not by the scheduler), so
// these need no other assignment. Tagged [A10], the reduction layout's assignment; the pointwise
// and column cases call none of A10's functions and carry no tag.
#include <catch2/catch.hpp>

#include "codegen/cuda_launch.h"

using namespace mini;
using namespace mini::codegen;

namespace {

// A schedule of one kernel over x (an input of `space`): sum over `reduced` when it is not
// empty, else x * 2. Enough for the plan: the graph, the group's space, loads and stores.
fusion::Schedule one_kernel(const Shape& space, const std::vector<int64_t>& reduced) {
  fusion::Schedule s;
  graph::Graph& g = s.graph;
  graph::TensorMeta in;
  in.sizes = space;
  in.strides = contiguous_strides(space);
  int x = g.add_input(in, "x");
  Attrs a;
  a.dims = reduced;
  a.keepdim = true;
  int y = reduced.empty() ? g.add_op(OpKind::Mul, {x, g.add_constant(2.0, DType::Float32)}, Attrs())
                          : g.add_op(OpKind::Sum, {x}, a);
  g.outputs = {y};
  fusion::FusionGroup k;
  k.nodes = {y};
  k.space = space;
  k.reduced = reduced;
  k.loads = {x};
  k.stores = {y};
  k.name = "k";
  s.groups = {k};
  return s;
}

}  // namespace

TEST_CASE("layout 9 reads a row of 8192 as a looped row of 512 threads, 16 elements each, a block per row", "[A10]") {
  auto s = one_kernel({64, 8192}, {1});
  const CudaLayout l = cuda_layout(9);
  const auto& k = s.groups[0];
  CHECK(cuda_reduction_threads(8192, l) == 512);  // 4 elements a thread would need 2048: 512 at most
  CHECK(cuda_kernel_shape(k, l) == "red");       // layouts 7 on hold no row in registers
  CHECK(cuda_rows_per_block(8192, l) == 1);
  CHECK(cuda_block(k, l) == 512);
  CHECK(cuda_grid(s, k, l, {}, 132, 1) == 64);  // a block per row, 64 rows
  CHECK(cuda_split_reductions(s, k, l) == 0);    // 64 rows: no row is split
}

TEST_CASE("a row of 1024 under layout 3 is held in registers, 16 elements a thread", "[A10]") {
  auto s = one_kernel({256, 1024}, {1});
  const CudaLayout l = cuda_layout(3);
  CHECK(cuda_reduction_threads(1024, l) == 64);  // 64 x 16 = 1024
  CHECK(cuda_kernel_shape(s.groups[0], l) == "per");
  CHECK(cuda_block(s.groups[0], l) == 64);
}

TEST_CASE("short rows share a block: 8 warps' worth of rows, several rows a warp", "[A10]") {
  const CudaLayout l = cuda_layout(9);
  CHECK(cuda_reduction_threads(100, l) == 32);  // 4 elements a thread at most: 25 lanes, rounded up
  CHECK(cuda_rows_per_block(100, l) == 8);      // a warp a row, 8 warps
  CHECK(cuda_reduction_threads(64, l) == 16);
  CHECK(cuda_rows_per_block(64, l) == 16);      // two rows a warp
  auto s = one_kernel({1000, 64}, {1});
  CHECK(cuda_block(s.groups[0], l) == 256);
  CHECK(cuda_grid(s, s.groups[0], l, {}, 132, 1) == (1000 + 15) / 16);
  // layout 1 keeps a block per row, whole warps, a looped row of 256 threads
  CHECK(cuda_rows_per_block(64, cuda_layout(1)) == 1);
  CHECK(cuda_reduction_threads(64, cuda_layout(1)) == 256);
}

TEST_CASE("a layout of a block per row gives a short held row a whole warp", "[A10]") {
  // block_reduce combines whole warps: where rows never share a block (warp_rows == 1) a row
  // takes 32 threads at least, even one whose elements fit in fewer at row_registers a thread
  CudaLayout held = cuda_layout(3);  // rows held in registers, 16 elements a thread
  held.warp_rows = 1;
  CHECK(cuda_reduction_threads(100, held) == 32);   // 7 threads would hold it; a warp it is
  CHECK(cuda_reduction_threads(1024, held) == 64);  // past a warp, as before
  CHECK(cuda_rows_per_block(100, held) == 1);
  CHECK(cuda_reduction_threads(100, cuda_layout(3)) == 8);  // rows that share a block: 8 threads
}

TEST_CASE("lean rows ask for as many blocks an SM as the registers allow", "[A10]") {
  CHECK(cuda_min_blocks_per_sm(512, cuda_layout(9)) == 4);   // 65536 / 32 registers / 512 threads
  CHECK(cuda_min_blocks_per_sm(128, cuda_layout(5)) == 8);   // 65536 / 64 / 128 = 8, under 2048 / 128
  CHECK(cuda_min_blocks_per_sm(32, cuda_layout(9)) == 32);   // the SM's 32 blocks at most
}

TEST_CASE("one long row alone is split over blocks, the partials folded by the last", "[A10]") {
  auto s = one_kernel({1, 1 << 20}, {1});
  CHECK(cuda_split_reductions(s, s.groups[0], cuda_layout(9)) == 1);
  CHECK(cuda_split_reductions(s, s.groups[0], cuda_layout(1)) == 0);  // layout 1: a block per row
  CHECK(cuda_split_grid(1 << 20, 256, 132) == 256);   // 16 elements a thread
  CHECK(cuda_split_grid(1 << 30, 256, 132) == 264);   // at most two blocks an SM
  CHECK(cuda_split_grid(100, 256, 132) == 1);
}

TEST_CASE("a pointwise kernel is a grid-stride loop, or a thread a vector under layout 11") {
  auto s = one_kernel({1024, 1024}, {});
  const auto& k = s.groups[0];
  CHECK(cuda_kernel_shape(k, cuda_layout(9)) == "poi");
  CHECK(cuda_block(k, cuda_layout(9)) == kCudaThreads);
  CHECK(cuda_grid(s, k, cuda_layout(9), {}, 132, 1) == 4096);       // 2^20 / 256, under 64 blocks an SM
  CHECK(cuda_grid(s, k, cuda_layout(9), {}, 32, 1) == 32 * 64);     // a smaller GPU: 64 blocks an SM
  CHECK(cuda_grid(s, k, cuda_layout(11), {}, 132, 1) == 1024);      // 4 floats a thread: 2^20 / 1024
}

TEST_CASE("a sum over all but the innermost dim is a column kernel of 1024 threads") {
  auto s = one_kernel({8, 1024, 768}, {0, 1});
  const auto& k = s.groups[0];
  CHECK(cuda_column_reduction(k, cuda_layout(9)));
  CHECK_FALSE(cuda_column_reduction(k, cuda_layout(1)));
  CHECK(cuda_kernel_shape(k, cuda_layout(9)) == "col");
  CHECK(cuda_block(k, cuda_layout(9)) == 1024);
  CHECK(cuda_grid(s, k, cuda_layout(9), {}, 132, 1) == 768 / 32);  // 32 kept elements a block
  CHECK(cuda_column_splits(s, k, cuda_layout(9)) == 1);             // one pass: shared among blocks in y
  CHECK(cuda_column_split_grid(768, 8 * 1024, 264, 1) == 11);       // two blocks an SM of 132 over 24 strips
  CHECK(cuda_column_split_grid(768, 8 * 1024, 132, 1) == 6);        // one block an SM: one wave still
  CHECK(cuda_column_split_grid(768, 64, 264, 1) == 1);              // too few rows to share
}
