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

__device__ __forceinline__ uint32_t pack(float lo, float hi) {
  __nv_bfloat162 v = __floats2bfloat162_rn(lo, hi);  // .x, the lower column, in the low half
  return *reinterpret_cast<uint32_t*>(&v);
}

// The A fragment (16 x 16) of columns 16 kk .. 16 kk + 15 of a product's accumulator tiles
// (16 x 8 each, `c[2 kk]` and `c[2 kk + 1]`): an accumulator's layout is an A operand's.
template <int N>
__device__ __forceinline__ void acc_to_a(uint32_t (&a)[4], const float (&c)[N][4], int kk) {
  a[0] = pack(c[2 * kk][0], c[2 * kk][1]);
  a[1] = pack(c[2 * kk][2], c[2 * kk][3]);
  a[2] = pack(c[2 * kk + 1][0], c[2 * kk + 1][1]);
  a[3] = pack(c[2 * kk + 1][2], c[2 * kk + 1][3]);
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
// lane's part of its running sum; a larger max rescales l by alpha = exp(m_old - m_new), which
// the caller also applies to the output accumulator (rescale). The scores become
// P = exp(scale (s - m)), exp2 of log2(e)-scaled values.
template <int NT>
__device__ __forceinline__ void softmax_step(float (&s)[NT][4], float (&m)[2], float (&l)[2], float scale_log2,
                                             float (&alpha)[2]) {
#pragma unroll
  for (int h = 0; h < 2; h++) {
    float mx = m[h];
#pragma unroll
    for (int nt = 0; nt < NT; nt++) mx = fmaxf(mx, fmaxf(s[nt][2 * h], s[nt][2 * h + 1]));
    mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));
    mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 2));
    const float ms = mx == -INFINITY ? 0.f : mx * scale_log2;  // a row with no key yet
    alpha[h] = exp2f(m[h] * scale_log2 - ms);                 // 0 on the row's first keys
    float sum = 0.f;
#pragma unroll
    for (int nt = 0; nt < NT; nt++)
#pragma unroll
      for (int e = 2 * h; e < 2 * h + 2; e++) {
        const float p = exp2f(fmaf(s[nt][e], scale_log2, -ms));
        s[nt][e] = p;
        sum += p;
      }
    l[h] = l[h] * alpha[h] + sum;  // this lane's part; the quad adds them at the end
    m[h] = mx;
  }
}

// acc's rows g and g + 8 times alpha[0] and alpha[1].
template <int DT>
__device__ __forceinline__ void rescale(float (&acc)[DT][4], const float (&alpha)[2]) {
#pragma unroll
  for (int dt = 0; dt < DT; dt++) {
    acc[dt][0] *= alpha[0];
    acc[dt][1] *= alpha[0];
    acc[dt][2] *= alpha[1];
    acc[dt][3] *= alpha[1];
  }
}

template <int NT, int DT>
__device__ __forceinline__ void online_softmax(float (&s)[NT][4], float (&acc)[DT][4], float (&m)[2], float (&l)[2],
                                               float scale_log2) {
  float alpha[2];
  softmax_step(s, m, l, scale_log2, alpha);
  rescale(acc, alpha);
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
// 16 bytes of T as floats (8 bfloat16 or 4 float), and 8 floats back to T.
__device__ __forceinline__ void load16(float* x, const __nv_bfloat16* p) {
  const uint4 u = *reinterpret_cast<const uint4*>(p);
  const __nv_bfloat162* h = reinterpret_cast<const __nv_bfloat162*>(&u);
#pragma unroll
  for (int i = 0; i < 4; i++) {
    const float2 f = __bfloat1622float2(h[i]);
    x[2 * i] = f.x, x[2 * i + 1] = f.y;
  }
}
__device__ __forceinline__ void load16(float* x, const float* p) {
  const float4 u = *reinterpret_cast<const float4*>(p);
  x[0] = u.x, x[1] = u.y, x[2] = u.z, x[3] = u.w;
}
__device__ __forceinline__ void store8(__nv_bfloat16* p, const float* x) {
  uint4 u;
  uint32_t* w = reinterpret_cast<uint32_t*>(&u);
#pragma unroll
  for (int i = 0; i < 4; i++) w[i] = pack(x[2 * i], x[2 * i + 1]);
  *reinterpret_cast<uint4*>(p) = u;
}
__device__ __forceinline__ void store8(float* p, const float* x) {
  reinterpret_cast<float4*>(p)[0] = make_float4(x[0], x[1], x[2], x[3]);
  reinterpret_cast<float4*>(p)[1] = make_float4(x[4], x[5], x[6], x[7]);
}

// delta[row] = sum_d dout[row, d] * out[row, d] in float, LPR = D / (16 bytes of T) lanes a row,
// 16 bytes of each operand a lane; it also writes the row's lse in log2 units (lse2) and zeroes
// its row of dq_acc, which the main kernel's atomics add into.
template <class T>
__global__ void bwd_delta_kernel(const T* __restrict__ dout, const T* __restrict__ out, const float* __restrict__ lse,
                                 float* __restrict__ delta, float* __restrict__ lse2, float* __restrict__ dq_acc,
                                 Rows dor, Rows outr, int64_t rows, int L, int D) {
  constexpr int kVec = 16 / sizeof(T);
  const int lpr = D / kVec;  // a power of 2 up to 32 (D is 64 or 128)
  const int64_t row = (int64_t(blockIdx.x) * blockDim.x + threadIdx.x) / lpr;
  const int col = (threadIdx.x % lpr) * kVec;
  float sum = 0.f;
  if (row < rows) {
    float a[kVec], b[kVec];
    load16(a, dout + dor.at(row / L, row % L) + col);
    load16(b, out + outr.at(row / L, row % L) + col);
#pragma unroll
    for (int i = 0; i < kVec; i++) sum += a[i] * b[i];
    float4* z = reinterpret_cast<float4*>(dq_acc + row * D + col);
#pragma unroll
    for (int i = 0; i < kVec / 4; i++) z[i] = make_float4(0.f, 0.f, 0.f, 0.f);
  }
  for (int off = lpr / 2; off > 0; off /= 2) sum += __shfl_xor_sync(0xffffffffu, sum, off);
  if (row < rows && col == 0) {
    delta[row] = sum;
    lse2[row] = lse[row] * kLog2e;
  }
}

// dq = T(dq_acc * scale), 8 elements a thread, written in dq's layout
template <class T>
__global__ void bwd_dq_kernel(const float* __restrict__ acc, T* __restrict__ dq, Rows dqr, int64_t n, int L, int D,
                              float scale) {
  const int64_t i = 8 * (int64_t(blockIdx.x) * blockDim.x + threadIdx.x);
  if (i >= n) return;
  const int64_t row = i / D;
  float x[8];
  load16(x, acc + i);
  load16(x + 4, acc + i + 4);
#pragma unroll
  for (int e = 0; e < 8; e++) x[e] *= scale;
  store8(dq + dqr.at(row / L, row % L) + i % D, x);
}

// The two launches (D a multiple of 8; every row 16-byte aligned: rows_of's rule).
template <class T>
void launch_bwd_delta(const T* dout, const T* out, const float* lse, float* delta, float* lse2, float* dq_acc, Rows dor,
                      Rows outr, int64_t rows, int L, int D, cudaStream_t stream) {
  const int64_t threads = rows * (D / (16 / int64_t(sizeof(T))));
  bwd_delta_kernel<T><<<unsigned((threads + 255) / 256), 256, 0, stream>>>(dout, out, lse, delta, lse2, dq_acc, dor,
                                                                           outr, rows, L, D);
}
template <class T>
void launch_bwd_dq(const float* acc, T* dq, Rows dqr, int64_t rows, int L, int D, float scale, cudaStream_t stream) {
  const int64_t n = rows * D;
  bwd_dq_kernel<T><<<unsigned((n / 8 + 255) / 256), 256, 0, stream>>>(acc, dq, dqr, n, L, D, scale);
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

// One launch of a flash forward kernel (every generation's has this signature: q, k, v, out, lse,
// their Rows, L, S, causal, scale), a block per (batch x head, `rows_a_block` query rows).
template <class T, class Kernel>
void launch_forward(Kernel kernel, int threads, size_t smem, int rows_a_block, const Tensor& out, const Tensor& lse,
                    const Tensor& q, const Tensor& k, const Tensor& v, const Dims& s, bool causal, double scale) {
  allow_smem(kernel, smem);
  const dim3 grid(unsigned(s.bh), unsigned((s.L + rows_a_block - 1) / rows_a_block));
  kernel<<<grid, threads, smem, current_stream()>>>(
      static_cast<const T*>(q->device_raw()), static_cast<const T*>(k->device_raw()),
      static_cast<const T*>(v->device_raw()), static_cast<T*>(out->device_raw()),
      static_cast<float*>(lse->device_raw()), rows_or_fail(q, "query"), rows_or_fail(k, "key"),
      rows_or_fail(v, "value"), rows_or_fail(out, "the output"), s.L, s.S, causal, float(scale));
}

// One launch of a flash backward's main kernel (q, k, v, dout, lse2, delta, dq_acc, dk, dv, their
// Rows, L, S, causal, scale), a block per (batch x head, `keys_a_block` keys).
template <class T, class Kernel>
void launch_backward(Kernel kernel, int threads, size_t smem, int keys_a_block, const Tensor& dq_acc, const Tensor& dk,
                     const Tensor& dv, const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& dout,
                     const Tensor& lse2, const Tensor& delta, const Dims& s, bool causal, double scale) {
  allow_smem(kernel, smem);
  const dim3 grid(unsigned(s.bh), unsigned((s.S + keys_a_block - 1) / keys_a_block));
  kernel<<<grid, threads, smem, current_stream()>>>(
      static_cast<const T*>(q->device_raw()), static_cast<const T*>(k->device_raw()),
      static_cast<const T*>(v->device_raw()), static_cast<const T*>(dout->device_raw()),
      static_cast<const float*>(lse2->device_raw()), static_cast<const float*>(delta->device_raw()),
      static_cast<float*>(dq_acc->device_raw()), static_cast<T*>(dk->device_raw()), static_cast<T*>(dv->device_raw()),
      rows_or_fail(q, "query"), rows_or_fail(k, "key"), rows_or_fail(v, "value"),
      rows_or_fail(dout, "the output's gradient"), rows_or_fail(dk, "dk"), rows_or_fail(dv, "dv"), s.L, s.S, causal,
      float(scale));
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
  launch_bwd_delta<T>(static_cast<const T*>(dout->device_raw()), static_cast<const T*>(out->device_raw()),
                      static_cast<const float*>(lse->device_raw()), static_cast<float*>(delta->device_raw()),
                      static_cast<float*>(lse2->device_raw()), static_cast<float*>(dq_acc->device_raw()),
                      rows_or_fail(dout, "the output's gradient"), rows_or_fail(out, "the output"), rows, s.L, s.D,
                      current_stream());
  check_launch("scaled_dot_product_attention backward");
  main(dq_acc, lse2, delta);
  check_launch("scaled_dot_product_attention backward");
  launch_bwd_dq<T>(static_cast<const float*>(dq_acc->device_raw()), static_cast<T*>(dq->device_raw()),
                   rows_or_fail(dq, "dq"), rows, s.L, s.D, float(scale), current_stream());
  check_launch("scaled_dot_product_attention backward");
}

// Hopper's wgmma backward for bfloat16 (sm90/flash_attention.cu, built for sm_90a): the same
// contract as flash_attention_backward; call it only where flash_sm90_runs() (compute capability
// 9.0 and MINI_FLASH_SM90=1: off by default until it beats the mma.sync kernels, notes/attention.md).
// A build without it (MINI_WITH_SM90A unset) never calls it.
bool flash_sm90_runs();
// The forward, where a wgmma kernel serves the head dim (false: the caller runs its own).
bool flash_attention_sm90(const Tensor& out, const Tensor& lse, const Tensor& q, const Tensor& k, const Tensor& v,
                          bool causal, double scale);
void flash_attention_backward_sm90(const Tensor& dq, const Tensor& dk, const Tensor& dv, const Tensor& q,
                                   const Tensor& k, const Tensor& v, const Tensor& out, const Tensor& dout,
                                   const Tensor& lse, bool causal, double scale);

// float32 (flash_attention_f32.cu): the same contract as flash_attention and
// flash_attention_backward, every operand float32 but for lse (float32 too).
void flash_attention_f32(const Tensor& out, const Tensor& lse, const Tensor& q, const Tensor& k, const Tensor& v,
                         bool causal, double scale);
void flash_attention_backward_f32(const Tensor& dq, const Tensor& dk, const Tensor& dv, const Tensor& q,
                                  const Tensor& k, const Tensor& v, const Tensor& out, const Tensor& dout,
                                  const Tensor& lse, bool causal, double scale);

}  // namespace mini::cuda::flash
