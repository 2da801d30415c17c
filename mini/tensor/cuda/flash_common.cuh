// cuda/flash_common.cuh — what the two FlashAttention files share: flash_attention.cu (bfloat16,
// m16n8k16 on the tensor cores) and flash_attention_f32.cu (float32, three TF32 products a
// product). Asynchronous copies into shared memory, the row addressing of an operand in place
// (a GPT's heads are transposed views), and the host checks of a launch.
#pragma once
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <utility>
#include <vector>

#include "common.cuh"

namespace mini::cuda::flash {

constexpr float kLog2e = 1.4426950408889634f;

// Two adjacent elements in float, and back (bfloat16 rounds to nearest even).
__device__ __forceinline__ float2 load2(const float* p) { return *reinterpret_cast<const float2*>(p); }
__device__ __forceinline__ float2 load2(const __nv_bfloat16* p) {
  return __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162*>(p));
}
__device__ __forceinline__ void store2(float* p, float a, float b) {
  *reinterpret_cast<float2*>(p) = make_float2(a, b);
}
__device__ __forceinline__ void store2(__nv_bfloat16* p, float a, float b) {
  *reinterpret_cast<__nv_bfloat162*>(p) = __floats2bfloat162_rn(a, b);
}

// ---- PTX wrappers ---------------------------------------------------------------------------
__device__ __forceinline__ uint32_t smem_u32(const void* p) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}

// 16 bytes global -> shared without a register round trip; `valid` false writes 16 zero bytes
// (src must still be a mapped address).
__device__ __forceinline__ void cp_async16(void* dst, const void* src, bool valid) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(smem_u32(dst)), "l"(src),
               "r"(valid ? 16 : 0));
}
__device__ __forceinline__ void cp_async4(void* dst, const void* src, bool valid) {
  asm volatile("cp.async.ca.shared.global [%0], [%1], 4, %2;\n" ::"r"(smem_u32(dst)), "l"(src),
               "r"(valid ? 4 : 0));
}
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::); }
template <int N>
__device__ __forceinline__ void cp_async_wait() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(N));
}

// Where row `row` of batch-and-head `bh` of an operand starts, in elements: bh = b * heads + h,
// b, h and the rows each at their own stride (D is dense).
struct Rows {
  int64_t batch = 0, head = 0, row = 0;
  int64_t heads = 1;
  __device__ __forceinline__ int64_t at(int64_t bh, int64_t r) const {
    return (bh / heads) * batch + (bh % heads) * head + r * row;
  }
};

// Rows row0 .. row0 + ROWS - 1 of a [n, D] matrix of T whose rows are `stride` elements apart
// into a tile of row stride P elements, 16 bytes a copy; rows >= n are zeros.
template <class T, int ROWS, int D, int P, int THREADS>
__device__ __forceinline__ void load_rows(T* tile, const T* g, int64_t stride, int row0, int n) {
  constexpr int kVec = 16 / sizeof(T), kChunks = D / kVec;
  for (int c = threadIdx.x; c < ROWS * kChunks; c += THREADS) {
    const int r = c / kChunks, col = (c % kChunks) * kVec;
    const bool valid = row0 + r < n;
    cp_async16(tile + r * P + col, g + int64_t(valid ? row0 + r : 0) * stride + col, valid);
  }
}

// ---- the softmax both kernels share --------------------------------------------------------
// An accumulator tile (mma's m16n8 C, lane = 4 g + t) holds c[0], c[1] of row g, columns 2t and
// 2t + 1, and c[2], c[3] of row g + 8; s[nt] is the 8 columns from 8 nt. A row's values are
// spread over the 4 lanes of a quad.

// Accumulator tiles to 0.
template <int N>
__device__ __forceinline__ void zero(float (&c)[N][4]) {
#pragma unroll
  for (int n = 0; n < N; n++)
#pragma unroll
    for (int e = 0; e < 4; e++) c[n][e] = 0.f;
}

// Scores of keys past S, or (causal) after their row, to -inf: s[nt] covers keys key0 + 8 nt ..
// and rows row0 + g, row0 + g + 8.
template <int NT>
__device__ __forceinline__ void mask_scores(float (&s)[NT][4], int key0, int row0, int S, bool causal, int g, int t) {
#pragma unroll
  for (int nt = 0; nt < NT; nt++)
#pragma unroll
    for (int e = 0; e < 4; e++) {
      const int key = key0 + nt * 8 + 2 * t + (e & 1), row = row0 + g + (e / 2) * 8;
      if (key >= S || (causal && key > row)) s[nt][e] = -INFINITY;
    }
}

// One key tile of the online softmax for 16 rows: m is each row's running max (unscaled), l this
// lane's part of its running sum; a larger max rescales l and the output accumulator by
// exp(m_old - m_new). The scores become P = exp(scale (s - m)), exp2 of log2(e)-scaled values.
template <int NT, int DT>
__device__ __forceinline__ void online_softmax(float (&s)[NT][4], float (&acc)[DT][4], float (&m)[2], float (&l)[2],
                                               float scale_log2) {
#pragma unroll
  for (int h = 0; h < 2; h++) {
    float mx = m[h];
#pragma unroll
    for (int nt = 0; nt < NT; nt++) mx = fmaxf(mx, fmaxf(s[nt][2 * h], s[nt][2 * h + 1]));
    mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));
    mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 2));
    const float ms = mx == -INFINITY ? 0.f : mx * scale_log2;  // a row with no key yet
    const float alpha = exp2f(m[h] * scale_log2 - ms);       // 0 on the row's first keys
    float sum = 0.f;
#pragma unroll
    for (int nt = 0; nt < NT; nt++)
#pragma unroll
      for (int e = 2 * h; e < 2 * h + 2; e++) {
        const float p = exp2f(fmaf(s[nt][e], scale_log2, -ms));
        s[nt][e] = p;
        sum += p;
      }
    l[h] = l[h] * alpha + sum;  // this lane's part; the quad adds them at the end
#pragma unroll
    for (int dt = 0; dt < DT; dt++) {
      acc[dt][2 * h] *= alpha;
      acc[dt][2 * h + 1] *= alpha;
    }
    m[h] = mx;
  }
}

// The end of 16 rows (row0 ..): out = acc / l in o's layout, lse = m scale + log l.
template <class T, int DT>
__device__ __forceinline__ void finish_rows(const float (&acc)[DT][4], const float (&m)[2], const float (&l)[2], T* o,
                                            const Rows& orows, float* lse, int64_t bh, int row0, int L, float scale,
                                            int g, int t) {
#pragma unroll
  for (int h = 0; h < 2; h++) {
    float sum = l[h];
    sum += __shfl_xor_sync(0xffffffffu, sum, 1);
    sum += __shfl_xor_sync(0xffffffffu, sum, 2);
    const int row = row0 + g + h * 8;
    if (row >= L) continue;
    const float inv = 1.f / sum;
    T* orow = o + orows.at(bh, row);
#pragma unroll
    for (int dt = 0; dt < DT; dt++) store2(orow + dt * 8 + 2 * t, acc[dt][2 * h] * inv, acc[dt][2 * h + 1] * inv);
    if (t == 0) lse[bh * L + row] = m[h] * scale + logf(sum);
  }
}

// The backward's step for 16 keys (key0 ..) against query tile q0 ..: sT = S^T becomes P^T from
// the saved lse (log2 units; 0 where masked), dpT = dP^T becomes dS^T = P^T (dP^T - delta).
template <int NT>
__device__ __forceinline__ void probs_and_score_grads(float (&sT)[NT][4], float (&dpT)[NT][4], const float* lse2,
                                                      const float* delta, int key0, int q0, int S, bool causal,
                                                      float scale_log2, int g, int t) {
#pragma unroll
  for (int nt = 0; nt < NT; nt++)
#pragma unroll
    for (int e = 0; e < 4; e++) {
      const int ql = nt * 8 + 2 * t + (e & 1), key = key0 + g + (e / 2) * 8;
      float p = exp2f(fmaf(sT[nt][e], scale_log2, -lse2[ql]));
      if (key >= S || (causal && key > q0 + ql)) p = 0.f;
      sT[nt][e] = p;
      dpT[nt][e] = p * (dpT[nt][e] - delta[ql]);
    }
}

// The backward's end: rows key0 + g (+8) of dk (dkacc scaled) and dv.
template <class T, int DT>
__device__ __forceinline__ void finish_keys(const float (&dkacc)[DT][4], const float (&dvacc)[DT][4], T* dk,
                                            const Rows& dkr, T* dv, const Rows& dvr, int64_t bh, int key0, int S,
                                            float scale, int g, int t) {
#pragma unroll
  for (int h = 0; h < 2; h++) {
    const int key = key0 + g + h * 8;
    if (key >= S) continue;
    T* dkrow = dk + dkr.at(bh, key);
    T* dvrow = dv + dvr.at(bh, key);
#pragma unroll
    for (int dt = 0; dt < DT; dt++) {
      store2(dkrow + dt * 8 + 2 * t, dkacc[dt][2 * h] * scale, dkacc[dt][2 * h + 1] * scale);
      store2(dvrow + dt * 8 + 2 * t, dvacc[dt][2 * h], dvacc[dt][2 * h + 1]);
    }
  }
}

// One query tile's lse2 and delta rows (row0 ..) into shared memory; rows >= L read 0.
template <int BR, int THREADS>
__device__ __forceinline__ void load_row_stats(float* s_lse, float* s_delta, const float* lse2, const float* delta,
                                               int row0, int L) {
  for (int r = threadIdx.x; r < BR; r += THREADS) {
    const int row = row0 + r;
    cp_async4(s_lse + r, lse2 + (row < L ? row : 0), row < L);
    cp_async4(s_delta + r, delta + (row < L ? row : 0), row < L);
  }
}

// ---- the backward's first and last kernels -----------------------------------------------------
// delta[row] = sum_d dout[row, d] * out[row, d] in float, a warp a row; it also writes the row's
// lse in log2 units (lse2) and zeroes its row of dq_acc, which the main kernel's atomics add into.
template <class T>
__global__ void bwd_delta_kernel(const T* __restrict__ dout, const T* __restrict__ out, const float* __restrict__ lse,
                                 float* __restrict__ delta, float* __restrict__ lse2, float* __restrict__ dq_acc,
                                 Rows dor, Rows outr, int64_t rows, int L, int D) {
  const int64_t row = int64_t(blockIdx.x) * (blockDim.x / 32) + threadIdx.x / 32;
  if (row >= rows) return;
  const int lane = threadIdx.x % 32;
  const T* dorow = dout + dor.at(row / L, row % L);
  const T* outrow = out + outr.at(row / L, row % L);
  float sum = 0.f;
  for (int d = lane * 2; d < D; d += 64) {
    const float2 a = load2(dorow + d), b = load2(outrow + d);
    sum += a.x * b.x + a.y * b.y;
    store2(dq_acc + row * D + d, 0.f, 0.f);
  }
#pragma unroll
  for (int off = 16; off > 0; off /= 2) sum += __shfl_xor_sync(0xffffffffu, sum, off);
  if (lane == 0) {
    delta[row] = sum;
    lse2[row] = lse[row] * kLog2e;
  }
}

// dq = T(dq_acc * scale), two elements a thread, written in dq's layout
template <class T>
__global__ void bwd_dq_kernel(const float* __restrict__ acc, T* __restrict__ dq, Rows dqr, int64_t n, int L, int D,
                              float scale) {
  for (int64_t i = 2 * (int64_t(blockIdx.x) * blockDim.x + threadIdx.x); i < n; i += 2 * int64_t(gridDim.x) * blockDim.x) {
    const int64_t row = i / D;
    const float2 a = load2(acc + i);
    store2(dq + dqr.at(row / L, row % L) + i % D, a.x * scale, a.y * scale);
  }
}

// ---- host side ------------------------------------------------------------------------------
template <class Kernel>
void allow_smem(Kernel kernel, size_t bytes) {
  MINI_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(bytes)),
                  "scaled_dot_product_attention");
}

struct Dims {
  int64_t bh;
  int L, S, D;
};

inline Dims dims_of(const Tensor& q, const Tensor& k) {
  const int64_t r = q->dim();
  const int64_t L = q->sizes[r - 2], S = k->sizes[r - 2], D = q->sizes[r - 1];
  // grid.y counts 64-row tiles (at most 65535), grid.x the batch x heads (at most 2^31 - 1)
  if (L > 65535 * 64 || S > 65535 * 64 || q->numel() / (L * D) > INT32_MAX)
    fail("scaled_dot_product_attention(): too long a sequence or too many heads for the flash kernel");
  return {q->numel() / (L * D), int(L), int(S), int(D)};
}

// The Rows of `t` ([..., rows, D], D dense), or false where the kernels cannot read it in place:
// batch dims that do not fold into (batch, head), strides that are not multiples of 16 bytes
// (cp.async's unit), or (with `check_pointer`) a start that is not 16-byte aligned.
inline bool rows_of(const Tensor& t, Rows* out, bool check_pointer = true) {
  const int64_t r = t->dim();
  if (r < 2 || (t->sizes[r - 1] > 1 && t->strides[r - 1] != 1)) return false;
  std::vector<std::pair<int64_t, int64_t>> batch;  // (size, stride) of the batch dims of size > 1, outer first
  for (int64_t d = 0; d < r - 2; d++) {
    if (t->sizes[d] == 1) continue;
    if (!batch.empty() && batch.back().second == t->strides[d] * t->sizes[d])
      batch.back() = {batch.back().first * t->sizes[d], t->strides[d]};  // one run at one stride
    else
      batch.push_back({t->sizes[d], t->strides[d]});
  }
  if (batch.size() > 2) return false;
  Rows rows;
  if (!batch.empty()) rows.heads = batch.back().first, rows.head = batch.back().second;
  if (batch.size() == 2) rows.batch = batch.front().second;
  rows.row = t->sizes[r - 2] > 1 ? t->strides[r - 2] : 0;
  const int64_t per16 = 16 / int64_t(itemsize(t->dtype));  // elements in 16 bytes
  for (int64_t stride : {rows.batch, rows.head, rows.row})
    if (stride % per16 != 0) return false;
  if (check_pointer && reinterpret_cast<uintptr_t>(t->device_raw()) % 16 != 0) return false;
  *out = rows;
  return true;
}

inline Rows rows_or_fail(const Tensor& t, const char* what) {
  Rows rows;
  if (!rows_of(t, &rows))
    fail("scaled_dot_product_attention (flash): ", what, " is not in a layout the kernel reads (the caller copies "
         "such operands first: flash_attention_reads)");
  return rows;
}

// The backward around its main kernel, for operands of T: delta and lse2 (bwd_delta_kernel), then
// main(dq_acc, lse2, delta) (float32 tensors: [rows * D], [rows], [rows]), which adds dS K into
// dq_acc and writes dk and dv, then dq from dq_acc (bwd_dq_kernel).
template <class T, class Main>
void run_backward(const Tensor& dq, const Tensor& out, const Tensor& dout, const Tensor& lse, const Dims& s,
                  double scale, Main main) {
  const int64_t rows = s.bh * s.L;
  Tensor delta = TensorImpl::empty({rows}, DType::Float32, dq->device());
  Tensor lse2 = TensorImpl::empty({rows}, DType::Float32, dq->device());
  Tensor dq_acc = TensorImpl::empty({rows * s.D}, DType::Float32, dq->device());
  constexpr int kRowsABlock = 8;
  bwd_delta_kernel<T><<<unsigned((rows + kRowsABlock - 1) / kRowsABlock), kRowsABlock * 32, 0, current_stream()>>>(
      static_cast<const T*>(dout->device_raw()), static_cast<const T*>(out->device_raw()),
      static_cast<const float*>(lse->device_raw()), static_cast<float*>(delta->device_raw()),
      static_cast<float*>(lse2->device_raw()), static_cast<float*>(dq_acc->device_raw()),
      rows_or_fail(dout, "the output's gradient"), rows_or_fail(out, "the output"), rows, s.L, s.D);
  check_launch("scaled_dot_product_attention backward");
  main(dq_acc, lse2, delta);
  check_launch("scaled_dot_product_attention backward");
  const int64_t n = rows * s.D;
  bwd_dq_kernel<T><<<unsigned(std::min<int64_t>((n / 2 + 255) / 256, int64_t(sm_count()) * 8)), 256, 0,
                     current_stream()>>>(static_cast<const float*>(dq_acc->device_raw()),
                                         static_cast<T*>(dq->device_raw()), rows_or_fail(dq, "dq"), n, s.L, s.D,
                                         float(scale));
  check_launch("scaled_dot_product_attention backward");
}

// float32 (flash_attention_f32.cu): the same contract as flash_attention and
// flash_attention_backward, every operand float32 but for lse (float32 too).
void flash_attention_f32(const Tensor& out, const Tensor& lse, const Tensor& q, const Tensor& k, const Tensor& v,
                         bool causal, double scale);
void flash_attention_backward_f32(const Tensor& dq, const Tensor& dk, const Tensor& dv, const Tensor& q,
                                  const Tensor& k, const Tensor& v, const Tensor& out, const Tensor& dout,
                                  const Tensor& lse, bool causal, double scale);

}  // namespace mini::cuda::flash
