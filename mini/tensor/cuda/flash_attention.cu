// cuda/flash_attention.cu — FlashAttention-2 for bfloat16 attention with head dim 64 or 128 on
// the tensor cores (mma.sync m16n8k16), forward and backward; attention.cu runs every other case
// and calls in here when flash_attention_supports() says yes. notes/attention.md explains the
// scheme; in short:
//
// Forward: a block of 4 warps owns kBR query rows (32 a warp) of one (batch, head) and walks the
// keys in tiles of BC (128 for D = 64, 32 for D = 128), K and V tiles double-buffered in shared
// memory through cp.async. A warp computes its rows' scores S = Q K^T for the tile on the tensor
// cores (Q's fragments re-read from shared memory, or kept in registers where QR), keeps a running max m and sum l a row ("online softmax": a larger max rescales
// l and the output accumulator by exp(m_old - m_new)), rounds P = exp(S - m) to bfloat16 in
// registers (the score accumulator's layout is the next product's A operand) and adds P V into
// its output accumulator. The [L, S] scores never reach memory; out = acc / l and the row's
// log-sum-exp lse = m + log l are written once.
//
// Backward: a block of 8 warps owns 128 keys (16 a warp), keeps their dK and dV accumulators in registers
// and walks the query tiles that see them. For each tile it recomputes S^T = K Q^T, rebuilds
// P^T = exp(S^T - lse) from the saved log-sum-exp, then dV += P^T dO, dP^T = V dO^T,
// dS^T = P^T * (dP^T - D) with D = rowsum(dO * O) (a preprocessing kernel), dK += dS^T Q; dS goes
// through shared memory so that each warp adds dQ = dS K for 16 query rows and half the
// columns into a float32 buffer with atomics (float2 reductions) (keys of other blocks add to the same rows), which a last kernel scales
// and rounds. Scale factors: scores are scaled by `scale`, exponentials are exp2 of
// log2(e)-scaled values (one FFMA each).
//
// Layout: q, k, v, out, dout, dq, dk, dv are [B, H, L or S, D] bfloat16 at any strides of B, H
// and the rows (multiples of 8 elements, D dense: Rows, flash_attention_reads), so that a GPT's
// heads, transposed views of one projection, are read where they are, and the outputs are written
// in the layout attention_out_strides picks (a [B, L, H, D] buffer for such heads, which the
// model's transpose back makes contiguous for free); lse float32 [BH, L]. Rows past L or S are
// loaded as zeros (cp.async's zero fill) and masked out of the softmax.
#include <cuda_bf16.h>

#include <cmath>
#include <utility>
#include <vector>

#include "common.cuh"
#include "flash_common.cuh"
#include "kernels.h"

namespace mini::cuda {

using namespace flash;

namespace {

using bf16 = __nv_bfloat16;
constexpr int kFlashWarps = 4;  // the forward's block
constexpr int kFlashThreads = kFlashWarps * 32;
constexpr int kBwdWarps = 8;  // the backward's block: 128 keys
constexpr int kBwdThreads = kBwdWarps * 32;

// Four 8x8 b16 matrices; lane l gives the row address of matrix l / 8 and receives, of each,
// row l / 4, columns 2 (l % 4) and +1 (transposed: column l / 4, rows 2 (l % 4) and +1).
__device__ __forceinline__ void ldsm_x4(uint32_t (&r)[4], const bf16* p) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(smem_u32(p)));
}
__device__ __forceinline__ void ldsm_x4_t(uint32_t (&r)[4], const bf16* p) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(smem_u32(p)));
}

// c (16x8 float) += a (16x16 bf16, row major) * b (16x8 bf16, column major).
__device__ __forceinline__ void mma(float (&c)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
      "{%0,%1,%2,%3};\n"
      : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

// Fragment addresses into a row-major tile of row stride `P` elements, for lane `lane`:
// a_addr: the A operand (16 rows r0.., 16 columns c0..);
// bn_addr: B operands of two 8-wide n tiles (rows n0..n0+15 of the tile are the n index, columns
//          c0.. the k index: the tile holds B transposed, as K does for Q K^T), regs {0,1}, {2,3};
// bt_addr: (with ldsm_x4_t) B operands where the tile's rows are k (k0..k0+15) and its columns
//          n (two 8-wide n tiles from c0), as V is for P V.
template <int P>
__device__ __forceinline__ const bf16* a_addr(const bf16* t, int r0, int c0, int lane) {
  return t + (r0 + lane % 16) * P + c0 + (lane / 16) * 8;
}
template <int P>
__device__ __forceinline__ const bf16* bn_addr(const bf16* t, int n0, int c0, int lane) {
  return t + (n0 + lane % 8 + (lane / 16) * 8) * P + c0 + ((lane / 8) % 2) * 8;
}
template <int P>
__device__ __forceinline__ const bf16* bt_addr(const bf16* t, int k0, int c0, int lane) {
  return t + (k0 + lane % 8 + ((lane / 8) % 2) * 8) * P + c0 + (lane / 16) * 8;
}

// Rows row0 .. row0 + ROWS - 1 of a [n, D] matrix into a tile of row stride D + 8 (the pad keeps
// ldmatrix's 8 row reads in distinct banks); rows >= n are zeros.
template <int ROWS, int D, int THREADS = kFlashThreads>
__device__ __forceinline__ void load_tile(bf16* tile, const bf16* g, int64_t stride, int row0, int n) {
  load_rows<bf16, ROWS, D, D + 8, THREADS>(tile, g, stride, row0, n);
}

// ---- forward --------------------------------------------------------------------------------
template <int D, int MT, int BC>
struct FwdShape {
  static constexpr int kP = D + 8;                     // tile row stride, elements
  static constexpr int kBR = kFlashWarps * MT * 16;    // query rows a block
  static constexpr size_t kSmem = size_t(kBR + 4 * BC) * kP * sizeof(bf16);  // Q, 2 x (K, V)
};

// S = Q K^T: the warp's MT tiles of 16 query rows against the stage's BC keys, Q's fragments
// from registers where QR holds them there, else from shared memory.
template <int D, int MT, int BC, bool QR, int P>
__device__ __forceinline__ void fwd_scores(float (&s)[MT][BC / 8][4], const uint32_t (&qf)[QR ? MT : 1][QR ? D / 16 : 1][4],
                                           const bf16* sQ, const bf16* cK, int warp, int lane) {
#pragma unroll
  for (int mt = 0; mt < MT; mt++) zero(s[mt]);
#pragma unroll
  for (int ks = 0; ks < D / 16; ks++) {
    uint32_t qa[MT][4];
#pragma unroll
    for (int mt = 0; mt < MT; mt++) {
      if constexpr (QR) {
#pragma unroll
        for (int e = 0; e < 4; e++) qa[mt][e] = qf[mt][ks][e];
      } else {
        ldsm_x4(qa[mt], a_addr<P>(sQ, warp * MT * 16 + mt * 16, ks * 16, lane));
      }
    }
#pragma unroll
    for (int n2 = 0; n2 < BC / 16; n2++) {
      uint32_t b[4];
      ldsm_x4(b, bn_addr<P>(cK, n2 * 16, ks * 16, lane));
#pragma unroll
      for (int mt = 0; mt < MT; mt++) {
        mma(s[mt][2 * n2], qa[mt], b[0], b[1]);
        mma(s[mt][2 * n2 + 1], qa[mt], b[2], b[3]);
      }
    }
  }
}

// acc += P V: the probabilities (s, as bfloat16 A fragments) times the stage's BC rows of V.
template <int D, int MT, int BC, int P>
__device__ __forceinline__ void fwd_add_pv(float (&acc)[MT][D / 8][4], const float (&s)[MT][BC / 8][4], const bf16* cV,
                                           int lane) {
#pragma unroll
  for (int kk = 0; kk < BC / 16; kk++) {
    uint32_t a[MT][4];
#pragma unroll
    for (int mt = 0; mt < MT; mt++) acc_to_a(a[mt], s[mt], kk);
#pragma unroll
    for (int d2 = 0; d2 < D / 16; d2++) {
      uint32_t b[4];
      ldsm_x4_t(b, bt_addr<P>(cV, kk * 16, d2 * 16, lane));
#pragma unroll
      for (int mt = 0; mt < MT; mt++) {
        mma(acc[mt][2 * d2], a[mt], b[0], b[1]);
        mma(acc[mt][2 * d2 + 1], a[mt], b[2], b[3]);
      }
    }
  }
}

template <int D, int MT, int BC, bool QR>
__global__ void __launch_bounds__(kFlashThreads) flash_fwd_kernel(const bf16* __restrict__ q,
                                                                   const bf16* __restrict__ k,
                                                                   const bf16* __restrict__ v, bf16* __restrict__ o,
                                                                   float* __restrict__ lse, Rows qr, Rows kr, Rows vr,
                                                                   Rows orows, int L, int S, bool causal, float scale) {
  using Sh = FwdShape<D, MT, BC>;
  constexpr int P = Sh::kP, BR = Sh::kBR, KD = D / 16;
  extern __shared__ __align__(16) unsigned char flash_smem[];
  bf16* sQ = reinterpret_cast<bf16*>(flash_smem);
  bf16* sK = sQ + BR * P;  // two stages
  bf16* sV = sK + 2 * BC * P;

  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane / 4, t = lane % 4;
  const int m0 = (gridDim.y - 1 - blockIdx.y) * BR;  // the longest causal rows first
  const int64_t bh = blockIdx.x;
  const bf16* qh = q + qr.at(bh, 0);
  const bf16* kh = k + kr.at(bh, 0);
  const bf16* vh = v + vr.at(bh, 0);
  const int kv_end = causal ? min(S, m0 + BR) : S;  // keys j <= i for the block's last row
  const int tiles = (kv_end + BC - 1) / BC;
  const int wrow = m0 + warp * MT * 16;  // the warp's first row
  const float scale_log2 = scale * kLog2e;

  load_tile<BR, D>(sQ, qh, qr.row, m0, L);
  load_tile<BC, D>(sK, kh, kr.row, 0, S);
  load_tile<BC, D>(sV, vh, vr.row, 0, S);
  cp_async_commit();

  uint32_t qf[QR ? MT : 1][QR ? KD : 1][4];  // Q's fragments, where they stay in registers
  float acc[MT][D / 8][4];
  float m[MT][2], l[MT][2];
#pragma unroll
  for (int mt = 0; mt < MT; mt++) {
    zero(acc[mt]);
    m[mt][0] = m[mt][1] = -INFINITY;
    l[mt][0] = l[mt][1] = 0.f;
  }

  for (int j = 0; j < tiles; j++) {
    if (j + 1 < tiles) {  // the next tile into the other stage, while this one is used
      load_tile<BC, D>(sK + ((j + 1) & 1) * BC * P, kh, kr.row, (j + 1) * BC, S);
      load_tile<BC, D>(sV + ((j + 1) & 1) * BC * P, vh, vr.row, (j + 1) * BC, S);
    }
    cp_async_commit();
    cp_async_wait<1>();
    __syncthreads();
    if constexpr (QR) {
      if (j == 0) {
#pragma unroll
        for (int mt = 0; mt < MT; mt++)
#pragma unroll
          for (int ks = 0; ks < KD; ks++)
            ldsm_x4(qf[mt][ks], a_addr<P>(sQ, warp * MT * 16 + mt * 16, ks * 16, lane));
      }
    }
    const bf16* cK = sK + (j & 1) * BC * P;
    const bf16* cV = sV + (j & 1) * BC * P;

    float s[MT][BC / 8][4];
    fwd_scores<D, MT, BC, QR, P>(s, qf, sQ, cK, warp, lane);

    const int key0 = j * BC;
    if (key0 + BC > S || (causal && key0 + BC - 1 > wrow)) {  // some key past S or after a row
#pragma unroll
      for (int mt = 0; mt < MT; mt++) mask_scores(s[mt], key0, wrow + mt * 16, S, causal, g, t);
    }
#pragma unroll
    for (int mt = 0; mt < MT; mt++) online_softmax(s[mt], acc[mt], m[mt], l[mt], scale_log2);

    fwd_add_pv<D, MT, BC, P>(acc, s, cV, lane);
    __syncthreads();  // the stage is refilled next iteration
  }

#pragma unroll
  for (int mt = 0; mt < MT; mt++) finish_rows(acc[mt], m[mt], l[mt], o, orows, lse, bh, wrow + mt * 16, L, scale, g, t);
}

// ---- backward -------------------------------------------------------------------------------
template <int D>
struct BwdShape {
  static constexpr int kP = D + 8;
  static constexpr int kBC = kBwdWarps * 16;  // keys a block, 16 a warp
  static constexpr int kBR = 64;  // query rows a step; for dQ, 16 rows x D / 2 columns a warp
  static constexpr int kPS = kBR + 8;           // dS^T's row stride
  // K, V, 2 x (Q, dO), dS^T, then 2 x (lse, delta) floats
  static constexpr size_t kSmem =
      size_t(2 * kBC + 4 * kBR) * kP * sizeof(bf16) + size_t(kBC) * kPS * sizeof(bf16) + 4 * kBR * sizeof(float);
  // the warp's K and V fragments stay in registers for D = 64 (for 128 they are re-read)
  static constexpr bool kKVInRegs = D <= 64;
};

// S^T = K_w Q^T and dP^T = V_w dO^T: the warp's 16 keys against the tile's BR queries, K's and
// V's fragments from registers where KV holds them there, else from shared memory.
template <int D, int P, int BR, bool KV>
__device__ __forceinline__ void bwd_scores(float (&sT)[BR / 8][4], float (&dpT)[BR / 8][4],
                                           const uint32_t (&kf)[KV ? D / 16 : 1][4],
                                           const uint32_t (&vf)[KV ? D / 16 : 1][4], const bf16* sK, const bf16* sV,
                                           const bf16* cQ, const bf16* cdO, int warp, int lane) {
  zero(sT);
  zero(dpT);
#pragma unroll
  for (int ks = 0; ks < D / 16; ks++) {
    uint32_t ka[4], va[4];
    if constexpr (KV) {
#pragma unroll
      for (int e = 0; e < 4; e++) ka[e] = kf[ks][e], va[e] = vf[ks][e];
    } else {
      ldsm_x4(ka, a_addr<P>(sK, warp * 16, ks * 16, lane));
      ldsm_x4(va, a_addr<P>(sV, warp * 16, ks * 16, lane));
    }
#pragma unroll
    for (int n2 = 0; n2 < BR / 16; n2++) {
      uint32_t b[4];
      ldsm_x4(b, bn_addr<P>(cQ, n2 * 16, ks * 16, lane));
      mma(sT[2 * n2], ka, b[0], b[1]);
      mma(sT[2 * n2 + 1], ka, b[2], b[3]);
      ldsm_x4(b, bn_addr<P>(cdO, n2 * 16, ks * 16, lane));
      mma(dpT[2 * n2], va, b[0], b[1]);
      mma(dpT[2 * n2 + 1], va, b[2], b[3]);
    }
  }
}

// dV += P^T dO and dK += dS^T Q (k = the BR queries): sT holds P^T, dpT dS^T by now.
template <int D, int P, int BR>
__device__ __forceinline__ void bwd_add_dkdv(float (&dkacc)[D / 8][4], float (&dvacc)[D / 8][4],
                                             const float (&sT)[BR / 8][4], const float (&dpT)[BR / 8][4],
                                             const bf16* cQ, const bf16* cdO, int lane) {
#pragma unroll
  for (int kk = 0; kk < BR / 16; kk++) {
    uint32_t pa[4], da[4];
    acc_to_a(pa, sT, kk);
    acc_to_a(da, dpT, kk);
#pragma unroll
    for (int d2 = 0; d2 < D / 16; d2++) {
      uint32_t b[4];
      ldsm_x4_t(b, bt_addr<P>(cdO, kk * 16, d2 * 16, lane));
      mma(dvacc[2 * d2], pa, b[0], b[1]);
      mma(dvacc[2 * d2 + 1], pa, b[2], b[3]);
      ldsm_x4_t(b, bt_addr<P>(cQ, kk * 16, d2 * 16, lane));
      mma(dkacc[2 * d2], da, b[0], b[1]);
      mma(dkacc[2 * d2 + 1], da, b[2], b[3]);
    }
  }
}

// The warp's K and V fragments (its 16 keys), into registers once, where they stay there.
template <int D, int P>
__device__ __forceinline__ void load_kv_fragments(uint32_t (&kf)[D / 16][4], uint32_t (&vf)[D / 16][4], const bf16* sK,
                                                  const bf16* sV, int warp, int lane) {
#pragma unroll
  for (int ks = 0; ks < D / 16; ks++) {
    ldsm_x4(kf[ks], a_addr<P>(sK, warp * 16, ks * 16, lane));
    ldsm_x4(vf[ks], a_addr<P>(sV, warp * 16, ks * 16, lane));
  }
}

// dS^T (bfloat16) to shared memory, rows the block's keys, columns the tile's queries.
template <int BR, int PS>
__device__ __forceinline__ void bwd_store_ds(bf16* sdS, const float (&dpT)[BR / 8][4], int warp, int lane) {
  const int g = lane / 4, t = lane % 4;
#pragma unroll
  for (int nt = 0; nt < BR / 8; nt++)
#pragma unroll
    for (int h = 0; h < 2; h++)
      *reinterpret_cast<uint32_t*>(sdS + (warp * 16 + g + h * 8) * PS + nt * 8 + 2 * t) =
          pack(dpT[nt][2 * h], dpT[nt][2 * h + 1]);
}

// dQ += dS K over the block's BC keys, a warp 16 rows (q0 + 16 (warp % 4) ..) and half the
// columns (D / 2 (warp / 4) ..): A is dS^T (in shared memory) read transposed; added into
// dq_acc by 8-byte atomics, rows past L left out.
template <int D, int P, int BC, int PS>
__device__ __forceinline__ void bwd_add_dq(float* dq_acc, const bf16* sdS, const bf16* sK, int64_t bh, int L, int q0,
                                           int warp, int lane) {
  constexpr int DH = D / 2;
  const int g = lane / 4, t = lane % 4;
  const int qr = (warp % 4) * 16, c0 = (warp / 4) * DH;
  float dqacc[DH / 8][4];
  zero(dqacc);
#pragma unroll
  for (int kk = 0; kk < BC / 16; kk++) {
    uint32_t a[4];
    ldsm_x4_t(a, sdS + (kk * 16 + lane % 8 + (lane / 16) * 8) * PS + qr + ((lane / 8) % 2) * 8);
#pragma unroll
    for (int d2 = 0; d2 < DH / 16; d2++) {
      uint32_t b[4];
      ldsm_x4_t(b, bt_addr<P>(sK, kk * 16, c0 + d2 * 16, lane));
      mma(dqacc[2 * d2], a, b[0], b[1]);
      mma(dqacc[2 * d2 + 1], a, b[2], b[3]);
    }
  }
#pragma unroll
  for (int h = 0; h < 2; h++) {
    const int row = q0 + qr + g + h * 8;
    if (row >= L) continue;
    float* dst = dq_acc + (bh * L + row) * D + c0 + 2 * t;
#pragma unroll
    for (int dt = 0; dt < DH / 8; dt++)  // one 8-byte reduction a pair (sm_90)
      atomicAdd(reinterpret_cast<float2*>(dst + dt * 8), make_float2(dqacc[dt][2 * h], dqacc[dt][2 * h + 1]));
  }
}

template <int D>
__global__ void __launch_bounds__(kBwdThreads) flash_bwd_kernel(
    const bf16* __restrict__ q, const bf16* __restrict__ k, const bf16* __restrict__ v,
    const bf16* __restrict__ dout, const float* __restrict__ lse, const float* __restrict__ delta,
    float* __restrict__ dq_acc, bf16* __restrict__ dk, bf16* __restrict__ dv, Rows qr, Rows kr, Rows vr, Rows dor,
    Rows dkr, Rows dvr, int L, int S, bool causal, float scale) {
  using Sh = BwdShape<D>;
  constexpr int P = Sh::kP, BC = Sh::kBC, BR = Sh::kBR, PS = Sh::kPS, KD = D / 16;
  static_assert(kBwdWarps == 8 && BR == 64, "dQ's split: 4 x 16 rows by 2 column halves");
  extern __shared__ __align__(16) unsigned char flash_smem[];
  bf16* sK = reinterpret_cast<bf16*>(flash_smem);
  bf16* sV = sK + BC * P;
  bf16* sQ = sV + BC * P;     // two stages
  bf16* sdO = sQ + 2 * BR * P;  // two stages
  bf16* sdS = sdO + 2 * BR * P;
  float* sLse = reinterpret_cast<float*>(sdS + BC * PS);  // two stages, log2(e)-scaled
  float* sDelta = sLse + 2 * BR;                           // two stages

  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane / 4, t = lane % 4;
  const int n0 = blockIdx.y * BC;
  const int64_t bh = blockIdx.x;
  const bf16* qh = q + qr.at(bh, 0);
  const bf16* doh = dout + dor.at(bh, 0);
  const float* lseh = lse + bh * L;
  const float* deltah = delta + bh * L;
  const int wkey = n0 + warp * 16;  // the warp's first key
  const float scale_log2 = scale * kLog2e;
  const int first = causal ? n0 / BR : 0;  // query tiles before it see none of these keys
  const int tiles = (L + BR - 1) / BR;

  auto load_q_tile = [&](int i, int st) {
    load_tile<BR, D, kBwdThreads>(sQ + st * BR * P, qh, qr.row, i * BR, L);
    load_tile<BR, D, kBwdThreads>(sdO + st * BR * P, doh, dor.row, i * BR, L);
    // rows past L read 0 for both: their Q and dO rows are 0 too, so P = 1 there but
    // dP = 0, dS = 0 and P^T dO = 0 (their dQ is not stored)
    load_row_stats<BR, kBwdThreads>(sLse + st * BR, sDelta + st * BR, lseh, deltah, i * BR, L);
  };
  load_tile<BC, D, kBwdThreads>(sK, k + kr.at(bh, 0), kr.row, n0, S);
  load_tile<BC, D, kBwdThreads>(sV, v + vr.at(bh, 0), vr.row, n0, S);
  if (first < tiles) load_q_tile(first, 0);
  cp_async_commit();

  uint32_t kf[Sh::kKVInRegs ? KD : 1][4], vf[Sh::kKVInRegs ? KD : 1][4];
  float dkacc[D / 8][4], dvacc[D / 8][4];
  zero(dkacc);
  zero(dvacc);

  for (int i = first; i < tiles; i++) {
    const int st = (i - first) & 1;
    if (i + 1 < tiles) load_q_tile(i + 1, st ^ 1);
    cp_async_commit();
    cp_async_wait<1>();
    __syncthreads();
    if constexpr (Sh::kKVInRegs)
      if (i == first) load_kv_fragments<D, P>(kf, vf, sK, sV, warp, lane);
    const bf16* cQ = sQ + st * BR * P;
    const bf16* cdO = sdO + st * BR * P;
    const float* cLse = sLse + st * BR;
    const float* cDelta = sDelta + st * BR;
    const int q0 = i * BR;

    // S^T = K_w Q^T and dP^T = V_w dO^T, 16 keys x BR queries each
    float sT[BR / 8][4], dpT[BR / 8][4];
    bwd_scores<D, P, BR, Sh::kKVInRegs>(sT, dpT, kf, vf, sK, sV, cQ, cdO, warp, lane);

    probs_and_score_grads(sT, dpT, cLse, cDelta, wkey, q0, S, causal, scale_log2, g, t);

    bwd_add_dkdv<D, P, BR>(dkacc, dvacc, sT, dpT, cQ, cdO, lane);

    bwd_store_ds<BR, PS>(sdS, dpT, warp, lane);
    __syncthreads();

    bwd_add_dq<D, P, BC, PS>(dq_acc, sdS, sK, bh, L, q0, warp, lane);
  }
  cp_async_wait<0>();  // where no query tile sees these keys, the first loads are still in flight
  finish_keys(dkacc, dvacc, dk, dkr, dv, dvr, bh, wkey, S, scale, g, t);
}

// ---- host side ------------------------------------------------------------------------------
template <int D, int MT, int BC, bool QR>
void launch_fwd(const Tensor& out, const Tensor& lse, const Tensor& q, const Tensor& k, const Tensor& v,
                const Dims& s, bool causal, double scale) {
  using Sh = FwdShape<D, MT, BC>;
  launch_forward<bf16>(flash_fwd_kernel<D, MT, BC, QR>, kFlashThreads, Sh::kSmem, Sh::kBR, out, lse, q, k, v, s,
                       causal, scale);
}

template <int D>
void launch_bwd(const Tensor& dq_acc, const Tensor& dk, const Tensor& dv, const Tensor& q, const Tensor& k,
                const Tensor& v, const Tensor& dout, const Tensor& lse2, const Tensor& delta, const Dims& s,
                bool causal, double scale) {
  using Sh = BwdShape<D>;
  launch_backward<bf16>(flash_bwd_kernel<D>, kBwdThreads, Sh::kSmem, Sh::kBC, dq_acc, dk, dv, q, k, v, dout, lse2,
                        delta, s, causal, scale);
}

}  // namespace

bool flash_attention_supports(DType dtype, int64_t E, int64_t Ev) {
  return (dtype == DType::BFloat16 || dtype == DType::Float32) && E == Ev && (E == 64 || E == 128);
}

bool flash_attention_reads(const Tensor& t) {
  Rows rows;
  return rows_of(t, &rows, t->storage->data != nullptr);  // a meta tensor (no data): its strides only
}

void flash_attention(const Tensor& out, const Tensor& lse, const Tensor& q, const Tensor& k, const Tensor& v,
                     bool causal, double scale) {
  if (q->dtype == DType::Float32) return flash_attention_f32(out, lse, q, k, v, causal, scale);
#ifdef MINI_WITH_SM90A
  if (flash_sm90_runs() && flash_attention_sm90(out, lse, q, k, v, causal, scale)) return;
#endif
  const Dims s = dims_of(q, k);
  // tiles measured on the H200 (notes/attention.md): 128 keys beat 64 at D = 64; at D = 128,
  // 2 x 16 rows a warp with 32-key tiles beat 16 rows with 64
  if (s.D == 64) launch_fwd<64, 2, 128, false>(out, lse, q, k, v, s, causal, scale);
  else launch_fwd<128, 2, 32, false>(out, lse, q, k, v, s, causal, scale);
  check_launch("scaled_dot_product_attention");
}

void flash_attention_backward(const Tensor& dq, const Tensor& dk, const Tensor& dv, const Tensor& q,
                              const Tensor& k, const Tensor& v, const Tensor& out, const Tensor& dout,
                              const Tensor& lse, bool causal, double scale) {
  if (q->dtype == DType::Float32) return flash_attention_backward_f32(dq, dk, dv, q, k, v, out, dout, lse, causal, scale);
#ifdef MINI_WITH_SM90A
  if (flash_sm90_runs()) return flash_attention_backward_sm90(dq, dk, dv, q, k, v, out, dout, lse, causal, scale);
#endif
  const Dims s = dims_of(q, k);
  run_backward<bf16>(dq, out, dout, lse, s, scale, [&](const Tensor& dq_acc, const Tensor& lse2, const Tensor& delta) {
    if (s.D == 64) launch_bwd<64>(dq_acc, dk, dv, q, k, v, dout, lse2, delta, s, causal, scale);
    else launch_bwd<128>(dq_acc, dk, dv, q, k, v, dout, lse2, delta, s, causal, scale);
  });
}

}  // namespace mini::cuda
