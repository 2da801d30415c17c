// cuda/sm90/wgmma.cuh — Hopper's warpgroup matrix multiply (wgmma, sm_90a only) for bfloat16
// operands and float32 accumulators, as the FlashAttention kernels of flash_sm90.cuh use it.
//
// A warpgroup is 4 consecutive warps (128 threads) starting at a warp index divisible by 4. One
// wgmma.mma_async computes D (64 x N, float) (+)= A (64 x 16) B (16 x N):
// - D lives in registers, in the m16n8 accumulator layout of mma.sync, warp w of the group holding
//   rows 16 w .. 16 w + 15: d[j][0..1] is row g, columns 8 j + 2 t, + 1 and d[j][2..3] row g + 8
//   (lane = 4 g + t); that is why flash_common.cuh's softmax runs on it unchanged;
// - A comes from shared memory (a descriptor) or from registers (the m16n8k16 A fragment of the
//   warp's 16 rows: an accumulator converts to it in place, acc_to_a);
// - B always comes from shared memory.
// The instruction runs asynchronously: issue a batch, commit it as a group, and wait for the group
// before the accumulators (or an A fragment's registers) are read or written again; fence() orders
// the registers' earlier accesses before a batch.
//
// Shared-memory operands are tiles of 8 x 8 core matrices (128 contiguous bytes, 8 rows of 16
// bytes) with no swizzle (the descriptor's "interleave" layout): blk<W>(r, c) below. A descriptor
// names the operand's first core matrix and two strides: LBO between core matrices along the
// operand's K dimension and SBO along M or N. Which of a tile's two directions is K depends on
// the operand: K-major (K runs along the tile's columns, as for Q and K in Q K^T) or MN-major
// (K runs down the rows, as for V in P V; the instruction's transpose bit). PTX ISA, "Matrix
// Descriptor Format" and "Shared Memory Matrix Layout" of wgmma.
#pragma once
#include <cuda_bf16.h>

#include <cstdint>

#include "../flash_common.cuh"

#if defined(__CUDA_ARCH__) && !defined(__CUDA_ARCH_FEAT_SM90_ALL)
#error "wgmma needs the sm_90a target: -gencode=arch=compute_90a,code=sm_90a"
#endif

namespace mini::cuda::flash::sm90 {

using bf16 = __nv_bfloat16;

// Element offset of (r, c) in a tile W elements wide stored as 8 x 8 core matrices: blocks of
// 8 rows one after another, within a block the 8-column core matrices one after another.
template <int W>
__device__ __forceinline__ int blk(int r, int c) {
  return (r >> 3) * (8 * W) + (c >> 3) * 64 + (r & 7) * 8 + (c & 7);
}

__device__ __forceinline__ uint64_t descriptor(const bf16* p, uint32_t lbo_bytes, uint32_t sbo_bytes) {
  return uint64_t((smem_u32(p) & 0x3FFFF) >> 4) | (uint64_t(lbo_bytes >> 4) << 16) | (uint64_t(sbo_bytes >> 4) << 32);
}
// The operand at (r0, c0) of a tile W wide whose K index runs along the columns (K-major): the
// next 8 columns are one core matrix on (128 bytes), the next 8 rows 16 W bytes.
template <int W>
__device__ __forceinline__ uint64_t k_along_cols(const bf16* tile, int r0, int c0) {
  return descriptor(tile + blk<W>(r0, c0), 128, 16 * W);
}
// ... whose K index runs down the rows (MN-major, transpose bit 1).
template <int W>
__device__ __forceinline__ uint64_t k_along_rows(const bf16* tile, int r0, int c0) {
  return descriptor(tile + blk<W>(r0, c0), 16 * W, 128);
}

// Rows row0 .. row0 + ROWS - 1 of a [n, D] matrix (rows `stride` elements apart) into a blk<D>
// tile, 16 bytes a cp.async; 8 consecutive threads take 8 rows of one column block, so that each
// quarter-warp writes one whole core matrix (no bank conflict). Rows >= n are zeros.
template <int ROWS, int D, int THREADS>
__device__ __forceinline__ void load_blk(bf16* tile, const bf16* g, int64_t stride, int row0, int n) {
  constexpr int C = D / 8;
  for (int i = threadIdx.x; i < ROWS * C; i += THREADS) {
    const int r = (i & 7) + 8 * (i / (8 * C)), c = ((i >> 3) % C) * 8;
    const bool valid = row0 + r < n;
    cp_async16(tile + blk<D>(r, c), g + int64_t(valid ? row0 + r : 0) * stride + c, valid);
  }
}

// The A fragment (m16n8k16) of rows r0 .. r0 + 15, columns c0 .. c0 + 15 of a blk<W> tile.
template <int W>
__device__ __forceinline__ void ldsm_a(uint32_t (&r)[4], const bf16* tile, int r0, int c0, int lane) {
  const bf16* p = tile + blk<W>(r0 + lane % 16, c0 + (lane / 16) * 8);
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(smem_u32(p)));
}

__device__ __forceinline__ void fence() { asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory"); }
__device__ __forceinline__ void commit() { asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory"); }
template <int N>
__device__ __forceinline__ void wait() {
  asm volatile("wgmma.wait_group.sync.aligned %0;\n" ::"n"(N) : "memory");
}
// Shared memory written by the threads (st.shared, cp.async) is read next by the tensor cores
// (the async proxy): each writing thread fences before the barrier.
__device__ __forceinline__ void fence_smem_for_async() { asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory"); }
// Keeps the compiler from moving accesses of accumulator registers across a wait (it does not
// know that the asynchronous instruction writes them).
template <int N>
__device__ __forceinline__ void pin(float (&d)[N][4]) {
#pragma unroll
  for (int n = 0; n < N; n++)
#pragma unroll
    for (int e = 0; e < 4; e++) asm volatile("" : "+f"(d[n][e])::"memory");
}

// m64nNk16, f32 += bf16 x bf16; `accumulate` 0 overwrites D. Operand lists written out per N.
template <int N>
struct Wgmma;

template <>
struct Wgmma<32> {
  // A and B from shared memory (descriptors); TA, TB: 1 where the operand is MN-major
  template <int TA, int TB>
  static __device__ __forceinline__ void ss(float (&d)[4][4], uint64_t a, uint64_t b, int accumulate) {
    asm volatile(
        "{\n.reg .pred p;\nsetp.ne.b32 p, %18, 0;\n"
        "wgmma.mma_async.sync.aligned.m64n32k16.f32.bf16.bf16 {"
        "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15}, %16, %17, p, 1, 1, %19, %20;\n}\n"
        : "+f"(d[0][0]), "+f"(d[0][1]), "+f"(d[0][2]), "+f"(d[0][3]), "+f"(d[1][0]), "+f"(d[1][1]),
        "+f"(d[1][2]), "+f"(d[1][3]), "+f"(d[2][0]), "+f"(d[2][1]), "+f"(d[2][2]), "+f"(d[2][3]),
        "+f"(d[3][0]), "+f"(d[3][1]), "+f"(d[3][2]), "+f"(d[3][3])
        : "l"(a), "l"(b), "r"(accumulate), "n"(TA), "n"(TB));
  }
  // A from registers (the m16n8k16 A fragment of the warp's 16 rows), B from shared memory
  template <int TB>
  static __device__ __forceinline__ void rs(float (&d)[4][4], const uint32_t (&a)[4], uint64_t b, int accumulate) {
    asm volatile(
        "{\n.reg .pred p;\nsetp.ne.b32 p, %21, 0;\n"
        "wgmma.mma_async.sync.aligned.m64n32k16.f32.bf16.bf16 {"
        "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15}, {%16, %17, %18, %19}, %20, p, 1, 1, %22;\n}\n"
        : "+f"(d[0][0]), "+f"(d[0][1]), "+f"(d[0][2]), "+f"(d[0][3]), "+f"(d[1][0]), "+f"(d[1][1]),
        "+f"(d[1][2]), "+f"(d[1][3]), "+f"(d[2][0]), "+f"(d[2][1]), "+f"(d[2][2]), "+f"(d[2][3]),
        "+f"(d[3][0]), "+f"(d[3][1]), "+f"(d[3][2]), "+f"(d[3][3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(b), "r"(accumulate), "n"(TB));
  }
};

template <>
struct Wgmma<64> {
  // A and B from shared memory (descriptors); TA, TB: 1 where the operand is MN-major
  template <int TA, int TB>
  static __device__ __forceinline__ void ss(float (&d)[8][4], uint64_t a, uint64_t b, int accumulate) {
    asm volatile(
        "{\n.reg .pred p;\nsetp.ne.b32 p, %34, 0;\n"
        "wgmma.mma_async.sync.aligned.m64n64k16.f32.bf16.bf16 {"
        "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, "
        "%18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31}, %32, %33, p, 1, 1, %35, %36;\n}\n"
        : "+f"(d[0][0]), "+f"(d[0][1]), "+f"(d[0][2]), "+f"(d[0][3]), "+f"(d[1][0]), "+f"(d[1][1]),
        "+f"(d[1][2]), "+f"(d[1][3]), "+f"(d[2][0]), "+f"(d[2][1]), "+f"(d[2][2]), "+f"(d[2][3]),
        "+f"(d[3][0]), "+f"(d[3][1]), "+f"(d[3][2]), "+f"(d[3][3]), "+f"(d[4][0]), "+f"(d[4][1]),
        "+f"(d[4][2]), "+f"(d[4][3]), "+f"(d[5][0]), "+f"(d[5][1]), "+f"(d[5][2]), "+f"(d[5][3]),
        "+f"(d[6][0]), "+f"(d[6][1]), "+f"(d[6][2]), "+f"(d[6][3]), "+f"(d[7][0]), "+f"(d[7][1]),
        "+f"(d[7][2]), "+f"(d[7][3])
        : "l"(a), "l"(b), "r"(accumulate), "n"(TA), "n"(TB));
  }
  // A from registers (the m16n8k16 A fragment of the warp's 16 rows), B from shared memory
  template <int TB>
  static __device__ __forceinline__ void rs(float (&d)[8][4], const uint32_t (&a)[4], uint64_t b, int accumulate) {
    asm volatile(
        "{\n.reg .pred p;\nsetp.ne.b32 p, %37, 0;\n"
        "wgmma.mma_async.sync.aligned.m64n64k16.f32.bf16.bf16 {"
        "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, "
        "%18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31}, {%32, %33, %34, %35}, %36, p, 1, 1, %38;\n}\n"
        : "+f"(d[0][0]), "+f"(d[0][1]), "+f"(d[0][2]), "+f"(d[0][3]), "+f"(d[1][0]), "+f"(d[1][1]),
        "+f"(d[1][2]), "+f"(d[1][3]), "+f"(d[2][0]), "+f"(d[2][1]), "+f"(d[2][2]), "+f"(d[2][3]),
        "+f"(d[3][0]), "+f"(d[3][1]), "+f"(d[3][2]), "+f"(d[3][3]), "+f"(d[4][0]), "+f"(d[4][1]),
        "+f"(d[4][2]), "+f"(d[4][3]), "+f"(d[5][0]), "+f"(d[5][1]), "+f"(d[5][2]), "+f"(d[5][3]),
        "+f"(d[6][0]), "+f"(d[6][1]), "+f"(d[6][2]), "+f"(d[6][3]), "+f"(d[7][0]), "+f"(d[7][1]),
        "+f"(d[7][2]), "+f"(d[7][3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(b), "r"(accumulate), "n"(TB));
  }
};

template <>
struct Wgmma<128> {
  // A and B from shared memory (descriptors); TA, TB: 1 where the operand is MN-major
  template <int TA, int TB>
  static __device__ __forceinline__ void ss(float (&d)[16][4], uint64_t a, uint64_t b, int accumulate) {
    asm volatile(
        "{\n.reg .pred p;\nsetp.ne.b32 p, %66, 0;\n"
        "wgmma.mma_async.sync.aligned.m64n128k16.f32.bf16.bf16 {"
        "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, "
        "%18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, %32, %33, "
        "%34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, %48, %49, "
        "%50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63}, %64, %65, p, 1, 1, %67, %68;\n}\n"
        : "+f"(d[0][0]), "+f"(d[0][1]), "+f"(d[0][2]), "+f"(d[0][3]), "+f"(d[1][0]), "+f"(d[1][1]),
        "+f"(d[1][2]), "+f"(d[1][3]), "+f"(d[2][0]), "+f"(d[2][1]), "+f"(d[2][2]), "+f"(d[2][3]),
        "+f"(d[3][0]), "+f"(d[3][1]), "+f"(d[3][2]), "+f"(d[3][3]), "+f"(d[4][0]), "+f"(d[4][1]),
        "+f"(d[4][2]), "+f"(d[4][3]), "+f"(d[5][0]), "+f"(d[5][1]), "+f"(d[5][2]), "+f"(d[5][3]),
        "+f"(d[6][0]), "+f"(d[6][1]), "+f"(d[6][2]), "+f"(d[6][3]), "+f"(d[7][0]), "+f"(d[7][1]),
        "+f"(d[7][2]), "+f"(d[7][3]), "+f"(d[8][0]), "+f"(d[8][1]), "+f"(d[8][2]), "+f"(d[8][3]),
        "+f"(d[9][0]), "+f"(d[9][1]), "+f"(d[9][2]), "+f"(d[9][3]), "+f"(d[10][0]), "+f"(d[10][1]),
        "+f"(d[10][2]), "+f"(d[10][3]), "+f"(d[11][0]), "+f"(d[11][1]), "+f"(d[11][2]), "+f"(d[11][3]),
        "+f"(d[12][0]), "+f"(d[12][1]), "+f"(d[12][2]), "+f"(d[12][3]), "+f"(d[13][0]), "+f"(d[13][1]),
        "+f"(d[13][2]), "+f"(d[13][3]), "+f"(d[14][0]), "+f"(d[14][1]), "+f"(d[14][2]), "+f"(d[14][3]),
        "+f"(d[15][0]), "+f"(d[15][1]), "+f"(d[15][2]), "+f"(d[15][3])
        : "l"(a), "l"(b), "r"(accumulate), "n"(TA), "n"(TB));
  }
  // A from registers (the m16n8k16 A fragment of the warp's 16 rows), B from shared memory
  template <int TB>
  static __device__ __forceinline__ void rs(float (&d)[16][4], const uint32_t (&a)[4], uint64_t b, int accumulate) {
    asm volatile(
        "{\n.reg .pred p;\nsetp.ne.b32 p, %69, 0;\n"
        "wgmma.mma_async.sync.aligned.m64n128k16.f32.bf16.bf16 {"
        "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, "
        "%18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, %32, %33, "
        "%34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, %48, %49, "
        "%50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63}, {%64, %65, %66, %67}, %68, p, 1, 1, %70;\n}\n"
        : "+f"(d[0][0]), "+f"(d[0][1]), "+f"(d[0][2]), "+f"(d[0][3]), "+f"(d[1][0]), "+f"(d[1][1]),
        "+f"(d[1][2]), "+f"(d[1][3]), "+f"(d[2][0]), "+f"(d[2][1]), "+f"(d[2][2]), "+f"(d[2][3]),
        "+f"(d[3][0]), "+f"(d[3][1]), "+f"(d[3][2]), "+f"(d[3][3]), "+f"(d[4][0]), "+f"(d[4][1]),
        "+f"(d[4][2]), "+f"(d[4][3]), "+f"(d[5][0]), "+f"(d[5][1]), "+f"(d[5][2]), "+f"(d[5][3]),
        "+f"(d[6][0]), "+f"(d[6][1]), "+f"(d[6][2]), "+f"(d[6][3]), "+f"(d[7][0]), "+f"(d[7][1]),
        "+f"(d[7][2]), "+f"(d[7][3]), "+f"(d[8][0]), "+f"(d[8][1]), "+f"(d[8][2]), "+f"(d[8][3]),
        "+f"(d[9][0]), "+f"(d[9][1]), "+f"(d[9][2]), "+f"(d[9][3]), "+f"(d[10][0]), "+f"(d[10][1]),
        "+f"(d[10][2]), "+f"(d[10][3]), "+f"(d[11][0]), "+f"(d[11][1]), "+f"(d[11][2]), "+f"(d[11][3]),
        "+f"(d[12][0]), "+f"(d[12][1]), "+f"(d[12][2]), "+f"(d[12][3]), "+f"(d[13][0]), "+f"(d[13][1]),
        "+f"(d[13][2]), "+f"(d[13][3]), "+f"(d[14][0]), "+f"(d[14][1]), "+f"(d[14][2]), "+f"(d[14][3]),
        "+f"(d[15][0]), "+f"(d[15][1]), "+f"(d[15][2]), "+f"(d[15][3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(b), "r"(accumulate), "n"(TB));
  }
};
}  // namespace mini::cuda::flash::sm90
