// cuda/attention.cu — eager scaled dot-product attention in one kernel (attention.cpp is the
// op and its CPU twin). bfloat16 and float32 with head dim 64 or 128 go to the tensor-core
// kernels of flash_attention.cu and flash_attention_f32.cu instead; this one takes the rest
// (float64, other head dims).
//
// A warp per query row i, four rows a block. The row's q is staged in shared memory (every
// lane reads all of it). The keys it may see go by in chunks of 32, lane l taking key
// c * 32 + l: each lane computes its score q . k * scale, then the warp keeps a running max m
// and sum of exp l as a single row of scores would ("online softmax": on a larger max the sum
// and the accumulator are rescaled by exp(m_old - m_new)); then each of the chunk's 32 keys in
// turn multiplies its weight (shuffled from the lane that computed it) into the output row,
// which the warp holds in registers, lane l owning elements l, l + 32, ... (R of them, so the
// value dims Ev <= 32 * R; reads of a value row are contiguous across the warp). The [L, S]
// scores never reach memory: each step reads K and V once per query row, from L2 for all but the
// first row of a head. Math in float (double for float64); out rounds once, on store.
#include <cuda_bf16.h>

#include <type_traits>

#include "block_reduce.cuh"
#include "common.cuh"
#include "kernels.h"

namespace mini::cuda {

namespace {

constexpr int kRowsPerBlock = 4;
constexpr int kMaxHeadDim = 256;  // E and Ev: 8 registers of the output a lane for Ev = 256

__device__ __forceinline__ float exp_of(float x) { return expf(x); }
__device__ __forceinline__ double exp_of(double x) { return ::exp(x); }
__device__ __forceinline__ float log_of(float x) { return logf(x); }
__device__ __forceinline__ double log_of(double x) { return ::log(x); }

// float for float32 and bfloat16, double for float64 (and float for the integer dtypes, which
// the dispatch names but never launches)
template <class T> using AttnMath = std::conditional_t<std::is_same_v<T, double>, double, float>;

template <class T, int R>
__global__ void attention_kernel(const T* __restrict__ q, const T* __restrict__ k, const T* __restrict__ v,
                                 T* __restrict__ out, AttnMath<T>* __restrict__ lse, int64_t rows, int L, int S, int E,
                                 int Ev, bool causal, double scale_in) {
  using A = AttnMath<T>;
  extern __shared__ unsigned char smem_raw[];
  A* q_shared = reinterpret_cast<A*>(smem_raw) + (threadIdx.x / kWarp) * E;
  const int lane = threadIdx.x % kWarp;
  const int64_t row = int64_t(blockIdx.x) * kRowsPerBlock + threadIdx.x / kWarp;
  if (row >= rows) return;  // a whole warp leaves: no barrier below spans warps
  const int64_t head = row / L;
  const int i = int(row % L);
  const A scale = A(scale_in);
  for (int e = lane; e < E; e += kWarp) q_shared[e] = A(q[row * E + e]);
  __syncwarp();
  const T* kh = k + head * S * E;
  const T* vh = v + head * S * Ev;
  const int seen = causal ? min(S, i + 1) : S;  // keys j < seen

  A acc[R];
#pragma unroll
  for (int r = 0; r < R; r++) acc[r] = A(0);
  A m = A(-INFINITY), l = A(0);
  for (int c = 0; c < seen; c += kWarp) {
    const int j = c + lane;
    A s = A(-INFINITY);
    if (j < seen) {
      const T* kj = kh + int64_t(j) * E;
      A dot = A(0);
      for (int e = 0; e < E; e++) dot += q_shared[e] * A(kj[e]);
      s = dot * scale;
    }
    const A m_new = MaxOp::apply(m, warp_reduce<MaxOp>(s));  // finite: the chunk has a key
    const A alpha = exp_of(m - m_new);                       // 0 on the first chunk
    const A p = j < seen ? exp_of(s - m_new) : A(0);
    l = l * alpha + warp_reduce<SumOp>(p);
#pragma unroll
    for (int r = 0; r < R; r++) acc[r] *= alpha;
    const int n = min(kWarp, seen - c);
    for (int jj = 0; jj < n; jj++) {
      const A pj = __shfl_sync(0xffffffffu, p, jj);
      const T* vj = vh + int64_t(c + jj) * Ev;
#pragma unroll
      for (int r = 0; r < R; r++) {
        const int e = lane + r * kWarp;
        if (e < Ev) acc[r] += pj * A(vj[e]);
      }
    }
    m = m_new;
  }
  T* o = out + row * Ev;
#pragma unroll
  for (int r = 0; r < R; r++) {
    const int e = lane + r * kWarp;
    if (e < Ev) o[e] = T(acc[r] / l);
  }
  if (lane == 0) lse[row] = m + log_of(l);
}

template <class T, int R>
void launch(const Tensor& out, const Tensor& lse, const Tensor& q, const Tensor& k, const Tensor& v, int64_t rows,
            int L, int S, int E, int Ev, bool causal, double scale) {
  using A = AttnMath<T>;
  const int64_t blocks = (rows + kRowsPerBlock - 1) / kRowsPerBlock;
  if (blocks > INT32_MAX) fail("scaled_dot_product_attention(): too many rows for one CUDA launch: ", rows);
  const size_t smem = size_t(kRowsPerBlock) * E * sizeof(A);
  attention_kernel<T, R><<<(unsigned)blocks, kRowsPerBlock * kWarp, smem, current_stream()>>>(
      static_cast<const T*>(q->device_raw()), static_cast<const T*>(k->device_raw()),
      static_cast<const T*>(v->device_raw()), static_cast<T*>(out->device_raw()),
      static_cast<A*>(lse->device_raw()), rows, L, S, E, Ev, causal, scale);
}

}  // namespace

bool attention_supports(int64_t E, int64_t Ev) { return E <= kMaxHeadDim && Ev <= kMaxHeadDim; }

void attention(const Tensor& out, const Tensor& lse, const Tensor& q, const Tensor& k, const Tensor& v, bool causal,
               double scale) {
  const int64_t r = q->dim();
  const int64_t L = q->sizes[r - 2], S = k->sizes[r - 2], E = q->sizes[r - 1], Ev = v->sizes[r - 1];
  if (out->numel() == 0) return;
  if (!attention_supports(E, Ev) || L > INT32_MAX || S > INT32_MAX)
    fail("scaled_dot_product_attention(): head dims ", E, " and ", Ev, " exceed the fused kernel's ", kMaxHeadDim);
  if (flash_attention_supports(q->dtype, E, Ev)) return flash_attention(out, lse, q, k, v, causal, scale);
  const int64_t rows = q->numel() / E;
  MINI_DISPATCH(q->dtype, T, [&] {
    if constexpr (is_floating_v<T>) {
      auto go = [&](auto r_const) {
        launch<T, decltype(r_const)::value>(out, lse, q, k, v, rows, int(L), int(S), int(E), int(Ev), causal, scale);
      };
      if (Ev <= 32) go(std::integral_constant<int, 1>{});
      else if (Ev <= 64) go(std::integral_constant<int, 2>{});
      else if (Ev <= 128) go(std::integral_constant<int, 4>{});
      else go(std::integral_constant<int, 8>{});
    } else {
      fail("scaled_dot_product_attention(): expected floating point tensors, got ", dtype_name(q->dtype));
    }
  });
  check_launch("scaled_dot_product_attention");
}

}  // namespace mini::cuda
