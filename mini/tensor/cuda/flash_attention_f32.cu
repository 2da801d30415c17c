// cuda/flash_attention_f32.cu — FlashAttention-2 for float32 attention with head dim 64 or 128,
// forward and backward, on the tensor cores at float32's accuracy. The scheme is
// flash_attention.cu's (bfloat16; notes/attention.md): the forward walks key tiles with an
// online softmax, the backward owns a block of keys and walks the query tiles, rebuilding P from
// the saved log-sum-exp. What differs is the arithmetic:
//
// Three TF32 products a product ("3xTF32", CUTLASS's OpMultiplyAddFastF32, which torch's
// float32 memory-efficient attention runs on sm_80 and later). A TF32 number keeps 10 of float's
// 23 mantissa bits. Each float32 operand x splits into big = x with its low 13 bits cleared and
// small = x - big (exact), rounded to TF32; then a b = big_a big_b + big_a small_b + small_a big_b
// + small_a small_b, and the last term (2^-22 of the product) is dropped. Three m16n8k8 TF32
// tensor-core products give a float32-accurate product at a third of TF32's rate, which is still
// several times float32's FFMA rate.
//
// Fragments (m16n8k8, lane = 4 g + t): A a 16 x 8 row-major tile, a[0] = (g, t), a[1] = (g + 8, t),
// a[2] = (g, t + 4), a[3] = (g + 8, t + 4); B 8 x 8, b[0] = (k t, n g), b[1] = (k t + 4, n g); C
// 16 x 8, c[0..1] = (g, 2t and 2t + 1), c[2..3] = (g + 8, ...). An accumulator is not an A
// fragment (it holds columns 2t, 2t + 1; A wants t, t + 4), but a product sums over k in any
// order: where an accumulator feeds the next product (P V, dS K, ...), its k index is permuted,
// logical column t being column 2t and t + 4 being 2t + 1, and the B operand reads its rows in
// the same order (load_bk). Tiles are float32 in shared memory at a row stride of D + 4 floats, so
// the 8 rows a fragment reads start 4 banks apart and its 32 reads hit 32 banks.
#include <cmath>

#include "common.cuh"
#include "flash_common.cuh"
#include "kernels.h"

namespace mini::cuda::flash {

namespace {

// ---- 3xTF32 ---------------------------------------------------------------------------------
struct Split {
  uint32_t big, small;
};

// x = big + small, both valid TF32: big truncated (x's top 19 bits), small the exact rest,
// rounded to nearest.
__device__ __forceinline__ Split split(float x) {
  const uint32_t big = __float_as_uint(x) & 0xffffe000u;
  const float rest = x - __uint_as_float(big);
  return {big, (__float_as_uint(rest) + 0x1000u) & 0xffffe000u};
}

__device__ __forceinline__ void mma_tf32(float (&c)[4], uint32_t a0, uint32_t a1, uint32_t a2, uint32_t a3,
                                         uint32_t b0, uint32_t b1) {
  asm volatile(
      "mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
      "{%0,%1,%2,%3};\n"
      : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
      : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
}

// c (16 x 8) += a (16 x 8) b (8 x 8) at float32 accuracy: the small terms first.
__device__ __forceinline__ void mma3(float (&c)[4], const Split (&a)[4], const Split (&b)[2]) {
  mma_tf32(c, a[0].small, a[1].small, a[2].small, a[3].small, b[0].big, b[1].big);
  mma_tf32(c, a[0].big, a[1].big, a[2].big, a[3].big, b[0].small, b[1].small);
  mma_tf32(c, a[0].big, a[1].big, a[2].big, a[3].big, b[0].big, b[1].big);
}

// ---- fragments from a shared tile of row stride P (lane = 4 g + t) ---------------------------
// A: rows r0 .. r0 + 15, columns c0 .. c0 + 7
template <int P>
__device__ __forceinline__ void load_a(Split (&a)[4], const float* s, int r0, int c0, int g, int t) {
  a[0] = split(s[(r0 + g) * P + c0 + t]);
  a[1] = split(s[(r0 + g + 8) * P + c0 + t]);
  a[2] = split(s[(r0 + g) * P + c0 + t + 4]);
  a[3] = split(s[(r0 + g + 8) * P + c0 + t + 4]);
}
// B where the tile holds it transposed (rows n0 .., columns k0 ..): K for Q K^T
template <int P>
__device__ __forceinline__ void load_bn(Split (&b)[2], const float* s, int n0, int k0, int g, int t) {
  b[0] = split(s[(n0 + g) * P + k0 + t]);
  b[1] = split(s[(n0 + g) * P + k0 + t + 4]);
}
// B where the tile's rows are k (k0 ..) in the permuted order and its columns n (n0 ..): V for P V
template <int P>
__device__ __forceinline__ void load_bk(Split (&b)[2], const float* s, int k0, int n0, int g, int t) {
  b[0] = split(s[(k0 + 2 * t) * P + n0 + g]);
  b[1] = split(s[(k0 + 2 * t + 1) * P + n0 + g]);
}
// an accumulator tile (16 x 8) as an A fragment, its k permuted as load_bk reads B
__device__ __forceinline__ void acc_to_a(Split (&a)[4], const float (&c)[4]) {
  a[0] = split(c[0]);
  a[1] = split(c[2]);
  a[2] = split(c[1]);
  a[3] = split(c[3]);
}

constexpr int kFwdWarps = 4, kFwdThreads = kFwdWarps * 32, kFwdRows = kFwdWarps * 16;

// ---- forward: a block 64 query rows (16 a warp), key tiles of BC double-buffered --------------
template <int D, int BC>
struct Fwd {
  static constexpr int kP = D + 4;
  static constexpr size_t kSmem = size_t(kFwdRows + 4 * BC) * kP * sizeof(float);  // Q, 2 x (K, V)
};

template <int D, int BC>
__global__ void __launch_bounds__(kFwdThreads)
    fwd_kernel(const float* __restrict__ q, const float* __restrict__ k, const float* __restrict__ v,
               float* __restrict__ o, float* __restrict__ lse, Rows qr, Rows kr, Rows vr, Rows orows, int L, int S,
               bool causal, float scale) {
  constexpr int P = Fwd<D, BC>::kP, BR = kFwdRows;
  extern __shared__ __align__(16) unsigned char flash_smem[];
  float* sQ = reinterpret_cast<float*>(flash_smem);
  float* sK = sQ + BR * P;  // two stages
  float* sV = sK + 2 * BC * P;

  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane / 4, t = lane % 4;
  const int m0 = (gridDim.y - 1 - blockIdx.y) * BR;  // the longest causal rows first
  const int64_t bh = blockIdx.x;
  const float* kh = k + kr.at(bh, 0);
  const float* vh = v + vr.at(bh, 0);
  const int kv_end = causal ? min(S, m0 + BR) : S;
  const int tiles = (kv_end + BC - 1) / BC;
  const int wrow = m0 + warp * 16;
  const float scale_log2 = scale * kLog2e;

  load_rows<float, BR, D, P, kFwdThreads>(sQ, q + qr.at(bh, 0), qr.row, m0, L);
  load_rows<float, BC, D, P, kFwdThreads>(sK, kh, kr.row, 0, S);
  load_rows<float, BC, D, P, kFwdThreads>(sV, vh, vr.row, 0, S);
  cp_async_commit();

  float acc[D / 8][4];
  zero(acc);
  float m[2] = {-INFINITY, -INFINITY}, l[2] = {0.f, 0.f};

  for (int j = 0; j < tiles; j++) {
    if (j + 1 < tiles) {
      load_rows<float, BC, D, P, kFwdThreads>(sK + ((j + 1) & 1) * BC * P, kh, kr.row, (j + 1) * BC, S);
      load_rows<float, BC, D, P, kFwdThreads>(sV + ((j + 1) & 1) * BC * P, vh, vr.row, (j + 1) * BC, S);
    }
    cp_async_commit();
    cp_async_wait<1>();
    __syncthreads();
    const float* cK = sK + (j & 1) * BC * P;
    const float* cV = sV + (j & 1) * BC * P;

    float s[BC / 8][4];
    zero(s);
#pragma unroll
    for (int ks = 0; ks < D / 8; ks++) {
      Split a[4];
      load_a<P>(a, sQ, warp * 16, ks * 8, g, t);
#pragma unroll
      for (int nt = 0; nt < BC / 8; nt++) {
        Split b[2];
        load_bn<P>(b, cK, nt * 8, ks * 8, g, t);
        mma3(s[nt], a, b);
      }
    }

    const int key0 = j * BC;
    if (key0 + BC > S || (causal && key0 + BC - 1 > wrow)) mask_scores(s, key0, wrow, S, causal, g, t);
    online_softmax(s, acc, m, l, scale_log2);

    // acc += P V, P's keys in the permuted order
#pragma unroll
    for (int kk = 0; kk < BC / 8; kk++) {
      Split a[4];
      acc_to_a(a, s[kk]);
#pragma unroll
      for (int dt = 0; dt < D / 8; dt++) {
        Split b[2];
        load_bk<P>(b, cV, kk * 8, dt * 8, g, t);
        mma3(acc[dt], a, b);
      }
    }
    __syncthreads();  // the stage is refilled next iteration
  }

  finish_rows(acc, m, l, o, orows, lse, bh, wrow, L, scale, g, t);
}

// ---- backward: a block W x 16 keys, query tiles of 64 double-buffered -------------------------
template <int D, int W>
struct Bwd {
  static constexpr int kP = D + 4;
  static constexpr int kBC = W * 16;  // keys a block
  static constexpr int kBR = 64;      // query rows a step
  static constexpr int kPS = kBR + 4;  // dS^T's row stride
  // K, V, 2 x (Q, dO), dS^T, 2 x (lse, delta)
  static constexpr size_t kSmem = size_t(2 * kBC + 4 * kBR) * kP * sizeof(float) +
                                  size_t(kBC) * kPS * sizeof(float) + 4 * kBR * sizeof(float);
};

// S^T = K_w Q^T and dP^T = V_w dO^T: the warp's 16 keys against the tile's BR queries.
template <int D, int P, int BR>
__device__ __forceinline__ void bwd_scores(float (&sT)[BR / 8][4], float (&dpT)[BR / 8][4], const float* sK,
                                           const float* sV, const float* cQ, const float* cdO, int warp, int g, int t) {
  zero(sT);
  zero(dpT);
#pragma unroll
  for (int ks = 0; ks < D / 8; ks++) {
    Split ka[4], va[4];
    load_a<P>(ka, sK, warp * 16, ks * 8, g, t);
    load_a<P>(va, sV, warp * 16, ks * 8, g, t);
#pragma unroll
    for (int nt = 0; nt < BR / 8; nt++) {
      Split b[2];
      load_bn<P>(b, cQ, nt * 8, ks * 8, g, t);
      mma3(sT[nt], ka, b);
      load_bn<P>(b, cdO, nt * 8, ks * 8, g, t);
      mma3(dpT[nt], va, b);
    }
  }
}

// dV += P^T dO and dK += dS^T Q (k = the BR queries, permuted): sT holds P^T, dpT dS^T by now.
template <int D, int P, int BR>
__device__ __forceinline__ void bwd_add_dkdv(float (&dkacc)[D / 8][4], float (&dvacc)[D / 8][4],
                                             const float (&sT)[BR / 8][4], const float (&dpT)[BR / 8][4],
                                             const float* cQ, const float* cdO, int g, int t) {
#pragma unroll
  for (int kk = 0; kk < BR / 8; kk++) {
    Split pa[4], da[4];
    acc_to_a(pa, sT[kk]);
    acc_to_a(da, dpT[kk]);
#pragma unroll
    for (int dt = 0; dt < D / 8; dt++) {
      Split b[2];
      load_bk<P>(b, cdO, kk * 8, dt * 8, g, t);
      mma3(dvacc[dt], pa, b);
      load_bk<P>(b, cQ, kk * 8, dt * 8, g, t);
      mma3(dkacc[dt], da, b);
    }
  }
}

// dQ += dS K over the block's BC keys: a warp 16 query rows and DH columns; A[query][key] is
// dS^T (in shared memory) read transposed, the keys in the permuted order on both sides; added
// into dq_acc by 8-byte atomics, rows past L left out.
template <int D, int P, int BC, int PS, int DH>
__device__ __forceinline__ void bwd_add_dq(float* dq_acc, const float* sdS, const float* sK, int64_t bh, int L, int q0,
                                           int warp, int g, int t) {
  const int qrow = (warp % 4) * 16, c0 = (warp / 4) * DH;
  float dqacc[DH / 8][4];
  zero(dqacc);
#pragma unroll
  for (int kk = 0; kk < BC / 8; kk++) {
    const float* r0 = sdS + (kk * 8 + 2 * t) * PS + qrow + g;
    Split a[4] = {split(r0[0]), split(r0[8]), split(r0[PS]), split(r0[PS + 8])};
#pragma unroll
    for (int dt = 0; dt < DH / 8; dt++) {
      Split b[2];
      load_bk<P>(b, sK, kk * 8, c0 + dt * 8, g, t);
      mma3(dqacc[dt], a, b);
    }
  }
#pragma unroll
  for (int h = 0; h < 2; h++) {
    const int row = q0 + qrow + g + h * 8;
    if (row >= L) continue;
    float* dst = dq_acc + (bh * L + row) * D + c0 + 2 * t;
#pragma unroll
    for (int dt = 0; dt < DH / 8; dt++)
      atomicAdd(reinterpret_cast<float2*>(dst + dt * 8), make_float2(dqacc[dt][2 * h], dqacc[dt][2 * h + 1]));
  }
}

template <int D, int W>
__global__ void __launch_bounds__(W * 32)
    bwd_kernel(const float* __restrict__ q, const float* __restrict__ k, const float* __restrict__ v,
               const float* __restrict__ dout, const float* __restrict__ lse, const float* __restrict__ delta,
               float* __restrict__ dq_acc, float* __restrict__ dk, float* __restrict__ dv, Rows qr, Rows kr, Rows vr,
               Rows dor, Rows dkr, Rows dvr, int L, int S, bool causal, float scale) {
  using Sh = Bwd<D, W>;
  constexpr int P = Sh::kP, BC = Sh::kBC, BR = Sh::kBR, PS = Sh::kPS, THREADS = W * 32;
  // dQ's split: 4 groups of 16 query rows, each over W / 4 column parts of DH columns
  constexpr int DH = D / (W / 4);
  static_assert(W % 4 == 0 && BR == 64, "dQ's split: 4 x 16 rows");
  extern __shared__ __align__(16) unsigned char flash_smem[];
  float* sK = reinterpret_cast<float*>(flash_smem);
  float* sV = sK + BC * P;
  float* sQ = sV + BC * P;      // two stages
  float* sdO = sQ + 2 * BR * P;  // two stages
  float* sdS = sdO + 2 * BR * P;
  float* sLse = sdS + BC * PS;   // two stages, log2(e)-scaled
  float* sDelta = sLse + 2 * BR;  // two stages

  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane / 4, t = lane % 4;
  const int n0 = blockIdx.y * BC;
  const int64_t bh = blockIdx.x;
  const float* qh = q + qr.at(bh, 0);
  const float* doh = dout + dor.at(bh, 0);
  const float* lseh = lse + bh * L;
  const float* deltah = delta + bh * L;
  const int wkey = n0 + warp * 16;
  const float scale_log2 = scale * kLog2e;
  const int first = causal ? n0 / BR : 0;
  const int tiles = (L + BR - 1) / BR;

  auto load_q_tile = [&](int i, int st) {
    load_rows<float, BR, D, P, THREADS>(sQ + st * BR * P, qh, qr.row, i * BR, L);
    load_rows<float, BR, D, P, THREADS>(sdO + st * BR * P, doh, dor.row, i * BR, L);
    load_row_stats<BR, THREADS>(sLse + st * BR, sDelta + st * BR, lseh, deltah, i * BR, L);  // rows past L: dS = 0
  };
  load_rows<float, BC, D, P, THREADS>(sK, k + kr.at(bh, 0), kr.row, n0, S);
  load_rows<float, BC, D, P, THREADS>(sV, v + vr.at(bh, 0), vr.row, n0, S);
  if (first < tiles) load_q_tile(first, 0);
  cp_async_commit();

  float dkacc[D / 8][4], dvacc[D / 8][4];
  zero(dkacc);
  zero(dvacc);

  for (int i = first; i < tiles; i++) {
    const int st = (i - first) & 1;
    if (i + 1 < tiles) load_q_tile(i + 1, st ^ 1);
    cp_async_commit();
    cp_async_wait<1>();
    __syncthreads();
    const float* cQ = sQ + st * BR * P;
    const float* cdO = sdO + st * BR * P;
    const float* cLse = sLse + st * BR;
    const float* cDelta = sDelta + st * BR;
    const int q0 = i * BR;

    // S^T = K_w Q^T and dP^T = V_w dO^T, 16 keys x BR queries each
    float sT[BR / 8][4], dpT[BR / 8][4];
    bwd_scores<D, P, BR>(sT, dpT, sK, sV, cQ, cdO, warp, g, t);

    probs_and_score_grads(sT, dpT, cLse, cDelta, wkey, q0, S, causal, scale_log2, g, t);

    bwd_add_dkdv<D, P, BR>(dkacc, dvacc, sT, dpT, cQ, cdO, g, t);

    // dS^T to shared memory, rows the block's keys, columns the tile's queries
#pragma unroll
    for (int nt = 0; nt < BR / 8; nt++)
#pragma unroll
      for (int h = 0; h < 2; h++)
        store2(sdS + (warp * 16 + g + h * 8) * PS + nt * 8 + 2 * t, dpT[nt][2 * h], dpT[nt][2 * h + 1]);
    __syncthreads();

    bwd_add_dq<D, P, BC, PS, DH>(dq_acc, sdS, sK, bh, L, q0, warp, g, t);
  }
  cp_async_wait<0>();
  finish_keys(dkacc, dvacc, dk, dkr, dv, dvr, bh, wkey, S, scale, g, t);
}

// ---- host side ------------------------------------------------------------------------------

template <int D, int BC>
void launch_fwd(const Tensor& out, const Tensor& lse, const Tensor& q, const Tensor& k, const Tensor& v,
                const Dims& s, bool causal, double scale) {
  launch_forward<float>(fwd_kernel<D, BC>, kFwdThreads, Fwd<D, BC>::kSmem, kFwdRows, out, lse, q, k, v, s, causal,
                        scale);
}

template <int D, int W>
void launch_bwd(const Tensor& dq_acc, const Tensor& dk, const Tensor& dv, const Tensor& q, const Tensor& k,
                const Tensor& v, const Tensor& dout, const Tensor& lse2, const Tensor& delta, const Dims& s,
                bool causal, double scale) {
  using Sh = Bwd<D, W>;
  launch_backward<float>(bwd_kernel<D, W>, W * 32, Sh::kSmem, Sh::kBC, dq_acc, dk, dv, q, k, v, dout, lse2, delta, s,
                         causal, scale);
}

}  // namespace

void flash_attention_f32(const Tensor& out, const Tensor& lse, const Tensor& q, const Tensor& k, const Tensor& v,
                         bool causal, double scale) {
  const Dims s = dims_of(q, k);
  if (s.D == 64) launch_fwd<64, 64>(out, lse, q, k, v, s, causal, scale);
  else launch_fwd<128, 32>(out, lse, q, k, v, s, causal, scale);
  check_launch("scaled_dot_product_attention");
}

void flash_attention_backward_f32(const Tensor& dq, const Tensor& dk, const Tensor& dv, const Tensor& q,
                                  const Tensor& k, const Tensor& v, const Tensor& out, const Tensor& dout,
                                  const Tensor& lse, bool causal, double scale) {
  const Dims s = dims_of(q, k);
  // 8 warps (128 keys) at D = 64; at D = 128 the double-buffered tiles leave room for 4 (64 keys)
  run_backward<float>(dq, out, dout, lse, s, scale, [&](const Tensor& dq_acc, const Tensor& lse2, const Tensor& delta) {
    if (s.D == 64) launch_bwd<64, 8>(dq_acc, dk, dv, q, k, v, dout, lse2, delta, s, causal, scale);
    else launch_bwd<128, 4>(dq_acc, dk, dv, q, k, v, dout, lse2, delta, s, causal, scale);
  });
}

}  // namespace mini::cuda::flash
