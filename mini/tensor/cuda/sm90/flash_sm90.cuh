// cuda/sm90/flash_sm90.cuh — FlashAttention for bfloat16 on Hopper's warpgroup MMA (wgmma,
// sm_90a), forward and backward: flash_attention.cu's scheme (notes/attention.md) with each
// warp's mma.sync products replaced by one warpgroup's wgmma, the operands read by the tensor
// cores straight from shared memory instead of through ldmatrix into every warp's registers.
// flash_attention.cu calls these kernels on a compute capability 9.0 device (sm90/flash_attention.cu,
// built for sm_90a alone); tests/cuda/flash_sm90_check.cu checks them on their own.
//
// Forward: a block of WGS warpgroups owns 64 WGS query rows (64 a warpgroup) of one (batch,
// head) and walks the keys in tiles of BC, K and V double-buffered in shared memory by cp.async.
// A warpgroup computes S = Q K^T for its 64 rows (A = Q and B = K from shared memory), runs the
// online softmax on S in registers (each warp on its 16 rows, flash_common.cuh), and adds P V
// (A = P from registers, rounded to bfloat16; B = V, MN-major) into its output accumulator.
//
// Backward: a block of 2 warpgroups owns 128 keys (64 a warpgroup) and keeps their dK and dV in
// registers; for each tile of 64 query rows that sees them it recomputes S^T = K Q^T and
// dP^T = V dO^T (A = the warpgroup's K and V rows, kept in registers where D = 64), rebuilds P^T
// and dS^T from the saved lse and delta, adds dV += P^T dO and dK += dS^T Q (B = dO and Q,
// MN-major), writes dS^T to shared memory, and each warpgroup adds dQ = dS K for the tile's 64
// rows and half the columns into a float32 buffer by atomics (run_backward does the rest).
// No product sits inside a branch, and no accumulator is read while a product of its group is in
// flight: ptxas serializes every wgmma of a kernel where it cannot prove that (warnings C7514 and
// C7515, which scripts/gpu_flash_sm90.sh prints).
//
// Operands, strides and outputs as in flash_attention.cu (Rows); tiles in shared memory are blk<D>.
#pragma once
#include "wgmma.cuh"

namespace mini::cuda::flash::sm90 {

// The shared-memory tiles of the last cp.async group, visible to every thread and to the tensor
// cores, and every warpgroup past its use of the stages about to be refilled.
__device__ __forceinline__ void tiles_landed() {
  cp_async_wait<0>();
  fence_smem_for_async();
  __syncthreads();
}

// S = Q K^T for the warpgroup's 64 rows against a K tile of BC keys, issued as one group (not
// waited for); A = Q from registers (qf) where QR, else from shared memory.
template <int D, int BC, bool QR>
__device__ __forceinline__ void issue_scores(float (&s)[BC / 8][4], const uint32_t (&qf)[QR ? D / 16 : 1][4],
                                             const bf16* sQ, const bf16* cK, int wg) {
#pragma unroll
  for (int ks = 0; ks < D / 16; ks++) {
    if constexpr (QR) Wgmma<BC>::template rs<0>(s, qf[ks], k_along_cols<D>(cK, 0, 16 * ks), ks);
    else Wgmma<BC>::template ss<0, 0>(s, k_along_cols<D>(sQ, 64 * wg, 16 * ks), k_along_cols<D>(cK, 0, 16 * ks), ks);
  }
  commit();
}

// P's bfloat16 A fragments from the probabilities (written before the fence that precedes the
// products reading them: wgmma reads them asynchronously).
template <int BC>
__device__ __forceinline__ void to_fragments(uint32_t (&pf)[BC / 16][4], const float (&s)[BC / 8][4]) {
#pragma unroll
  for (int kk = 0; kk < BC / 16; kk++) acc_to_a(pf[kk], s, kk);
}

// acc += P V for a V tile of BC keys (K = the keys, down its rows), not committed.
template <int D, int BC>
__device__ __forceinline__ void issue_pv(float (&acc)[D / 8][4], const uint32_t (&pf)[BC / 16][4], const bf16* cV) {
#pragma unroll
  for (int kk = 0; kk < BC / 16; kk++) Wgmma<D>::template rs<1>(acc, pf[kk], k_along_rows<D>(cV, 16 * kk, 0), 1);
}

// The scores of key tile key0 .. masked where needed, then the online softmax's step: s becomes
// P, alpha the rescale of the output.
template <int BC>
__device__ __forceinline__ void masked_softmax(float (&s)[BC / 8][4], float (&m)[2], float (&l)[2], float (&alpha)[2],
                                               int key0, int wrow, int S, bool causal, float scale_log2, int g, int t) {
  if (key0 + BC > S || (causal && key0 + BC - 1 > wrow)) mask_scores(s, key0, wrow, S, causal, g, t);
  softmax_step(s, m, l, scale_log2, alpha);
}

// ---- forward --------------------------------------------------------------------------------
template <int D, int BC, int WGS>
struct FwdShape {
  static constexpr int kThreads = 128 * WGS;
  static constexpr int kBR = 64 * WGS;                                            // query rows a block
  static constexpr size_t kSmem = size_t(kBR + 4 * BC) * D * sizeof(bf16);  // Q, 2 x (K, V)
};

// The products of consecutive key tiles overlap inside a warpgroup (FlashAttention-3's
// intra-warpgroup pipelining): S_j = Q K_j^T and O += P_{j-1} V_{j-1} are
// issued together, the softmax of S_j runs while the tensor cores still add P_{j-1} V_{j-1}, and
// the output is rescaled by S_j's alpha once that product is done. K and V have two stages each;
// tile j + 1's K and tile j's V are loaded during step j.
template <int D, int BC, int WGS, bool QR>
__global__ void __launch_bounds__(128 * WGS, BC * D <= 64 * 64 ? 2 : 1)  // two blocks an SM for the small tiles
    flash_fwd_kernel(const bf16* __restrict__ q, const bf16* __restrict__ k, const bf16* __restrict__ v,
                               bf16* __restrict__ o, float* __restrict__ lse, Rows qr, Rows kr, Rows vr, Rows orows,
                               int L, int S, bool causal, float scale) {
  using Sh = FwdShape<D, BC, WGS>;
  constexpr int BR = Sh::kBR, T = Sh::kThreads;
  extern __shared__ __align__(128) unsigned char flash_smem[];
  bf16* sQ = reinterpret_cast<bf16*>(flash_smem);
  bf16* sK = sQ + BR * D;  // two stages
  bf16* sV = sK + 2 * BC * D;

  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane / 4, t = lane % 4;
  const int wg = warp / 4;
  const int m0 = (gridDim.y - 1 - blockIdx.y) * BR;  // the longest causal rows first
  const int64_t bh = blockIdx.x;
  const bf16* kh = k + kr.at(bh, 0);
  const bf16* vh = v + vr.at(bh, 0);
  const int kv_end = causal ? min(S, m0 + BR) : S;
  const int tiles = (kv_end + BC - 1) / BC;  // >= 1
  const int wrow = m0 + 64 * wg + 16 * (warp % 4);  // the warp's first row
  const float scale_log2 = scale * kLog2e;

  uint32_t qf[QR ? D / 16 : 1][4], pf[BC / 16][4];
  float acc[D / 8][4], s[BC / 8][4];
  float m[2] = {-INFINITY, -INFINITY}, l[2] = {0.f, 0.f}, alpha[2];
  zero(acc);

  load_blk<BR, D, T>(sQ, q + qr.at(bh, 0), qr.row, m0, L);
  load_blk<BC, D, T>(sK, kh, kr.row, 0, S);
  cp_async_commit();
  tiles_landed();
  if (tiles > 1) load_blk<BC, D, T>(sK + BC * D, kh, kr.row, BC, S);
  load_blk<BC, D, T>(sV, vh, vr.row, 0, S);
  cp_async_commit();
  if constexpr (QR) {
#pragma unroll
    for (int ks = 0; ks < D / 16; ks++) ldsm_a<D>(qf[ks], sQ, 64 * wg + 16 * (warp % 4), 16 * ks, lane);
  }
  fence();
  issue_scores<D, BC, QR>(s, qf, sQ, sK, wg);
  wait<0>();
  pin(s);
  masked_softmax<BC>(s, m, l, alpha, 0, wrow, S, causal, scale_log2, g, t);  // acc is 0: no rescale

  for (int j = 1; j < tiles; j++) {
    tiles_landed();  // K_j and V_{j-1}; every warpgroup done with step j - 1's stages
    if (j + 1 < tiles) load_blk<BC, D, T>(sK + ((j + 1) & 1) * BC * D, kh, kr.row, (j + 1) * BC, S);
    load_blk<BC, D, T>(sV + (j & 1) * BC * D, vh, vr.row, j * BC, S);
    cp_async_commit();
    to_fragments<BC>(pf, s);  // P_{j-1}
    pin(acc);
    fence();
    issue_scores<D, BC, QR>(s, qf, sQ, sK + (j & 1) * BC * D, wg);
    issue_pv<D, BC>(acc, pf, sV + ((j - 1) & 1) * BC * D);
    commit();
    wait<1>();  // S_j
    pin(s);
    masked_softmax<BC>(s, m, l, alpha, j * BC, wrow, S, causal, scale_log2, g, t);
    wait<0>();  // P_{j-1} V_{j-1}
    pin(acc);
    rescale(acc, alpha);
  }
  tiles_landed();  // the last V
  to_fragments<BC>(pf, s);
  pin(acc);
  fence();
  issue_pv<D, BC>(acc, pf, sV + ((tiles - 1) & 1) * BC * D);
  commit();
  wait<0>();
  pin(acc);
  finish_rows(acc, m, l, o, orows, lse, bh, wrow, L, scale, g, t);
}

// ---- backward -------------------------------------------------------------------------------
template <int D>
struct BwdShape {
  static constexpr int kThreads = 256;
  static constexpr int kBC = 128;  // keys a block, 64 a warpgroup
  static constexpr int kBR = 64;   // query rows a step
  // K, V, 2 x (Q, dO), dS^T [kBC][kBR], then 2 x (lse, delta) floats
  static constexpr size_t kSmem =
      size_t(2 * kBC * D + 4 * kBR * D + kBC * kBR) * sizeof(bf16) + 4 * kBR * sizeof(float);
  static constexpr bool kKVInRegs = D <= 64;  // the warp's K and V fragments stay in registers
};

// The warp's 16 keys (rows r0 ..) of the K and V tiles as A fragments, into registers once.
template <int D>
__device__ __forceinline__ void bwd_kv_fragments(uint32_t (&kf)[D / 16][4], uint32_t (&vf)[D / 16][4], const bf16* sK,
                                                 const bf16* sV, int r0, int lane) {
#pragma unroll
  for (int ks = 0; ks < D / 16; ks++) {
    ldsm_a<D>(kf[ks], sK, r0, 16 * ks, lane);
    ldsm_a<D>(vf[ks], sV, r0, 16 * ks, lane);
  }
}

// S^T = K Q^T and dP^T = V dO^T for the warpgroup's 64 keys against BR queries (B = Q, dO: K = d
// along their columns), issued as one group; A = the K and V fragments where KV holds them in
// registers, else the warpgroup's rows of the K and V tiles.
template <int D, int BR, bool KV>
__device__ __forceinline__ void bwd_issue_scores(float (&sT)[BR / 8][4], float (&dpT)[BR / 8][4],
                                                 const uint32_t (&kf)[KV ? D / 16 : 1][4],
                                                 const uint32_t (&vf)[KV ? D / 16 : 1][4], const bf16* sK,
                                                 const bf16* sV, const bf16* cQ, const bf16* cdO, int wg) {
#pragma unroll
  for (int ks = 0; ks < D / 16; ks++) {
    if constexpr (KV) {
      Wgmma<BR>::template rs<0>(sT, kf[ks], k_along_cols<D>(cQ, 0, 16 * ks), ks);
      Wgmma<BR>::template rs<0>(dpT, vf[ks], k_along_cols<D>(cdO, 0, 16 * ks), ks);
    } else {
      Wgmma<BR>::template ss<0, 0>(sT, k_along_cols<D>(sK, 64 * wg, 16 * ks), k_along_cols<D>(cQ, 0, 16 * ks), ks);
      Wgmma<BR>::template ss<0, 0>(dpT, k_along_cols<D>(sV, 64 * wg, 16 * ks), k_along_cols<D>(cdO, 0, 16 * ks), ks);
    }
  }
  commit();
}

// dV += P^T dO and dK += dS^T Q (K = the queries, down the rows of dO and Q), waited for: sT holds
// P^T and dpT dS^T by now.
template <int D, int BR>
__device__ __forceinline__ void bwd_add_dkdv(float (&dkacc)[D / 8][4], float (&dvacc)[D / 8][4],
                                             const float (&sT)[BR / 8][4], const float (&dpT)[BR / 8][4],
                                             const bf16* cQ, const bf16* cdO) {
  uint32_t pa[BR / 16][4], da[BR / 16][4];
#pragma unroll
  for (int kk = 0; kk < BR / 16; kk++) {
    acc_to_a(pa[kk], sT, kk);
    acc_to_a(da[kk], dpT, kk);
  }
  pin(dkacc);
  pin(dvacc);
  fence();
#pragma unroll
  for (int kk = 0; kk < BR / 16; kk++) {
    Wgmma<D>::template rs<1>(dvacc, pa[kk], k_along_rows<D>(cdO, 16 * kk, 0), 1);
    Wgmma<D>::template rs<1>(dkacc, da[kk], k_along_rows<D>(cQ, 16 * kk, 0), 1);
  }
  commit();
  wait<0>();
  pin(dkacc);
  pin(dvacc);
}

// dS^T (bfloat16) into its blk<BR> tile: rows the block's keys (the warp's 16 from key row kr0),
// columns the queries.
template <int BR>
__device__ __forceinline__ void bwd_store_ds(bf16* sdS, const float (&dpT)[BR / 8][4], int kr0, int g, int t) {
#pragma unroll
  for (int nt = 0; nt < BR / 8; nt++)
#pragma unroll
    for (int h = 0; h < 2; h++)
      *reinterpret_cast<uint32_t*>(sdS + blk<BR>(kr0 + g + 8 * h, nt * 8 + 2 * t)) =
          pack(dpT[nt][2 * h], dpT[nt][2 * h + 1]);
}

// dQ = dS K for the tile's BR rows and the warpgroup's D / 2 columns (from c0), waited for: A = dS
// (dS^T in shared memory, M = the queries along its columns), B = K (K = the keys, down the rows).
template <int D, int BR, int BC>
__device__ __forceinline__ void bwd_dq(float (&dq)[D / 16][4], const bf16* sdS, const bf16* sK, int c0) {
  fence();
#pragma unroll
  for (int kk = 0; kk < BC / 16; kk++)
    Wgmma<D / 2>::template ss<1, 1>(dq, k_along_rows<BR>(sdS, 16 * kk, 0), k_along_rows<D>(sK, 16 * kk, c0), kk);
  commit();
  wait<0>();
  pin(dq);
}

// dq (rows q0 + 16 wq + g (+ 8), columns c0 ..) into dq_acc by 8-byte atomic reductions; rows >= L
// left out.
template <int D>
__device__ __forceinline__ void bwd_add_dq(float* dq_acc, const float (&dq)[D / 16][4], int64_t bh, int L, int q0,
                                           int c0, int wq, int g, int t) {
#pragma unroll
  for (int h = 0; h < 2; h++) {
    const int row = q0 + 16 * wq + g + 8 * h;
    if (row >= L) continue;
    float* dst = dq_acc + (bh * L + row) * D + c0 + 2 * t;
#pragma unroll
    for (int dt = 0; dt < D / 16; dt++)
      atomicAdd(reinterpret_cast<float2*>(dst + dt * 8), make_float2(dq[dt][2 * h], dq[dt][2 * h + 1]));
  }
}

template <int D>
__global__ void __launch_bounds__(256, 1)
    flash_bwd_kernel(const bf16* __restrict__ q, const bf16* __restrict__ k, const bf16* __restrict__ v,
                     const bf16* __restrict__ dout, const float* __restrict__ lse, const float* __restrict__ delta,
                     float* __restrict__ dq_acc, bf16* __restrict__ dk, bf16* __restrict__ dv, Rows qr, Rows kr,
                     Rows vr, Rows dor, Rows dkr, Rows dvr, int L, int S, bool causal, float scale) {
  using Sh = BwdShape<D>;
  constexpr int BC = Sh::kBC, BR = Sh::kBR, T = Sh::kThreads, KD = D / 16;
  constexpr bool KV = Sh::kKVInRegs;
  extern __shared__ __align__(128) unsigned char flash_smem[];
  bf16* sK = reinterpret_cast<bf16*>(flash_smem);
  bf16* sV = sK + BC * D;
  bf16* sQ = sV + BC * D;         // two stages
  bf16* sdO = sQ + 2 * BR * D;    // two stages
  bf16* sdS = sdO + 2 * BR * D;   // dS^T: blk<BR>, rows the block's keys
  float* sLse = reinterpret_cast<float*>(sdS + BC * BR);  // two stages, log2(e)-scaled
  float* sDelta = sLse + 2 * BR;                           // two stages

  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane / 4, t = lane % 4;
  const int wg = warp / 4, wq = warp % 4;
  const int n0 = blockIdx.y * BC;
  const int64_t bh = blockIdx.x;
  const bf16* qh = q + qr.at(bh, 0);
  const bf16* doh = dout + dor.at(bh, 0);
  const float* lseh = lse + bh * L;
  const float* deltah = delta + bh * L;
  const int gkey = n0 + 64 * wg;   // the warpgroup's first key
  const int wkey = gkey + 16 * wq;  // the warp's
  const float scale_log2 = scale * kLog2e;
  const int first = causal ? n0 / BR : 0;  // query tiles before it see none of these keys
  const int tiles = (L + BR - 1) / BR;

  auto load_q_tile = [&](int i, int st) {
    load_blk<BR, D, T>(sQ + st * BR * D, qh, qr.row, i * BR, L);
    load_blk<BR, D, T>(sdO + st * BR * D, doh, dor.row, i * BR, L);
    // rows past L read 0 (see flash_attention.cu: their dS is 0 and their dQ is not stored)
    load_row_stats<BR, T>(sLse + st * BR, sDelta + st * BR, lseh, deltah, i * BR, L);
  };
  load_blk<BC, D, T>(sK, k + kr.at(bh, 0), kr.row, n0, S);
  load_blk<BC, D, T>(sV, v + vr.at(bh, 0), vr.row, n0, S);
  if (first < tiles) load_q_tile(first, 0);
  cp_async_commit();

  uint32_t kf[KV ? KD : 1][4], vf[KV ? KD : 1][4];
  float dkacc[D / 8][4], dvacc[D / 8][4], dq[D / 16][4];
  zero(dkacc);
  zero(dvacc);

  for (int i = first; i < tiles; i++) {
    const int st = (i - first) & 1;
    if (i + 1 < tiles) load_q_tile(i + 1, st ^ 1);
    cp_async_commit();
    cp_async_wait<1>();
    fence_smem_for_async();
    __syncthreads();
    if constexpr (KV)
      if (i == first) bwd_kv_fragments<D>(kf, vf, sK, sV, 64 * wg + 16 * wq, lane);
    const bf16* cQ = sQ + st * BR * D;
    const bf16* cdO = sdO + st * BR * D;
    const int q0 = i * BR;
    // (A causal tile none of whose queries sees the warpgroup's keys is computed too and masked to
    // 0: a branch around the products makes ptxas serialize every wgmma of the kernel.)
    float sT[BR / 8][4], dpT[BR / 8][4];
    fence();
    bwd_issue_scores<D, BR, KV>(sT, dpT, kf, vf, sK, sV, cQ, cdO, wg);
    wait<0>();
    pin(sT);
    pin(dpT);
    probs_and_score_grads(sT, dpT, sLse + st * BR, sDelta + st * BR, wkey, q0, S, causal, scale_log2, g, t);
    bwd_add_dkdv<D, BR>(dkacc, dvacc, sT, dpT, cQ, cdO);
    bwd_store_ds<BR>(sdS, dpT, 64 * wg + 16 * wq, g, t);
    fence_smem_for_async();
    __syncthreads();
    bwd_dq<D, BR, BC>(dq, sdS, sK, wg * D / 2);
    bwd_add_dq<D>(dq_acc, dq, bh, L, q0, wg * D / 2, wq, g, t);
  }
  cp_async_wait<0>();  // where no query tile sees these keys, the first loads are still in flight
  finish_keys(dkacc, dvacc, dk, dkr, dv, dvr, bh, wkey, S, scale, g, t);
}

}  // namespace mini::cuda::flash::sm90
