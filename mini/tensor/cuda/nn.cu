// cuda/nn.cu — the fused eager kernels torch also runs as one kernel each: softmax and
// log_softmax along a dim, layer_norm over the last dims. The CUDA twin of nn_kernels.cpp.
//
// softmax, a seen as [outer, n, inner]:
//   inner == 1, n <= 1024 — a warp per row, the row held in registers (one read, one write);
//   inner == 1, n > 1024, the row aligned and at most 4 16-byte vectors a thread (float32 up
//                           to 16384, bfloat16 up to 32768) — a block per row, the row held
//                           in registers: one read, one write (the bandwidth bound);
//   inner == 1, n > 1024, other rows — a block per row: one pass keeps a running max and a
//                           sum of exp rescaled as the max grows (the "online softmax"), a
//                           second pass re-reads the row and writes;
//   inner > 1             — a thread per (outer, inner) column, the same two passes; threads
//                           next to each other read neighbouring addresses.
// layer_norm: a block per row. Rows that fit in registers (up to 4 16-byte vectors a thread,
// aligned) are read once: mean, then the variance from the registers (exact two-pass), then
// (x - mean) * rstd * w + b written. Other rows: Welford's mean and variance per thread,
// merged across the block, then a second pass writes.
// Math in float for float32/bfloat16, in double for float64.
#include <cub/device/device_radix_sort.cuh>
#include <cuda_bf16.h>

#include <algorithm>
#include <vector>

#include "block_reduce.cuh"
#include "common.cuh"
#include "kernels.h"

namespace mini::cuda {

namespace {

__device__ __forceinline__ float exp_of(float x) { return expf(x); }
__device__ __forceinline__ double exp_of(double x) { return ::exp(x); }
__device__ __forceinline__ float log_of(float x) { return logf(x); }
__device__ __forceinline__ double log_of(double x) { return ::log(x); }

// Calls f(j, x) for the elements j of row x[0, n) that thread `tid` of `lanes` owns:
// 16-byte vectors when the row is aligned and a whole number of vectors, scalars otherwise.
template <class T, class F>
__device__ __forceinline__ void for_row(const T* x, int64_t n, int tid, int lanes, F f) {
  constexpr int N = Vec<T>::kSize;
  if (reinterpret_cast<uintptr_t>(x) % 16 == 0 && n % N == 0) {
    const Vec<T>* vx = reinterpret_cast<const Vec<T>*>(x);
    for (int64_t i = tid; i < n / N; i += lanes) {
      Vec<T> v = vx[i];
#pragma unroll
      for (int e = 0; e < N; e++) f(i * N + e, v.v[e]);
    }
  } else {
    for (int64_t j = tid; j < n; j += lanes) f(j, x[j]);
  }
}

// Writes y[j] = g(j, x[j]) over the row, vectorized as for_row (x and y have the same layout).
template <class T, class G>
__device__ __forceinline__ void map_row(const T* x, T* y, int64_t n, int tid, int lanes, G g) {
  constexpr int N = Vec<T>::kSize;
  if (reinterpret_cast<uintptr_t>(x) % 16 == 0 && reinterpret_cast<uintptr_t>(y) % 16 == 0 &&
      n % N == 0) {
    const Vec<T>* vx = reinterpret_cast<const Vec<T>*>(x);
    Vec<T>* vy = reinterpret_cast<Vec<T>*>(y);
    for (int64_t i = tid; i < n / N; i += lanes) {
      Vec<T> v = vx[i], r;
#pragma unroll
      for (int e = 0; e < N; e++) r.v[e] = T(g(i * N + e, v.v[e]));
      vy[i] = r;
    }
  } else {
    for (int64_t j = tid; j < n; j += lanes) y[j] = T(g(j, x[j]));
  }
}

// ---- softmax ----------------------------------------------------------------------------------

// A running (max, sum of exp(x - max)). A NaN input makes the sum NaN; -inf inputs add 0
// (a row of -inf ends with max -inf and sum 0: every output NaN, as torch). A +inf makes the
// sum NaN, as exp(x - max) = exp(inf - inf) does in torch's max-then-sum: the new max's own
// term is 1 + (x - x), 1 for a finite x and NaN for inf.
template <class A>
struct MaxSum {
  A max, sum;
  __device__ __forceinline__ void add(A x) {
    if (x > max) {
      sum = sum * exp_of(max - x) + (A(1) + (x - x));
      max = x;
    } else {
      sum += (x == max && max == A(-INFINITY)) ? A(0) : exp_of(x - max);
    }
  }
  __device__ __forceinline__ void merge(A other_max, A other_sum) {
    A m = other_max > max ? other_max : max;
    // a zero sum has nothing to rescale (and exp(-inf - -inf) would be NaN)
    A a = sum == A(0) ? A(0) : sum * exp_of(max - m);
    A b = other_sum == A(0) ? A(0) : other_sum * exp_of(other_max - m);
    max = m;
    sum = a + b;
  }
};

template <class A>
__device__ __forceinline__ A softmax_out(A x, A max, A sum, bool log) {
  return log ? x - max - log_of(sum) : exp_of(x - max) / sum;
}

// V elements of T loaded or stored as one instruction.
template <class T, int V>
struct alignas(sizeof(T) * V) Pack {
  T v[V];
};

// A warp per row of n <= 32 * K elements. Lane l holds K of them, V neighbours at a time:
// slot k is element (k / V) * 32 * V + l * V + k % V (for V = 1: l, l + 32, ...), so each
// load is V elements wide and a warp's loads are contiguous. V > 1 needs every row aligned
// (n a multiple of V, 16-byte aligned pointers): then a pack is all in the row or all out.
template <class T, int K, int V>
__global__ void softmax_warp_kernel(const T* in, T* out, int64_t rows, int n, bool log) {
  using A = opmath_t<T>;
  using P = Pack<T, V>;
  int lane = threadIdx.x % kWarp;
  int64_t per_block = blockDim.x / kWarp;
  for (int64_t row = blockIdx.x * per_block + threadIdx.x / kWarp; row < rows;
       row += int64_t(gridDim.x) * per_block) {
    const T* x = in + row * n;
    T* y = out + row * n;
    A v[K];
    A max = A(-INFINITY);
#pragma unroll
    for (int g = 0; g < K / V; g++) {
      int j = (g * kWarp + lane) * V;
      P p;
      if (j < n) p = *reinterpret_cast<const P*>(x + j);
#pragma unroll
      for (int e = 0; e < V; e++) {
        v[g * V + e] = j < n ? A(p.v[e]) : A(-INFINITY);
        max = MaxOp::apply(max, v[g * V + e]);
      }
    }
    max = warp_reduce<MaxOp>(max);
    A sum = A(0);
#pragma unroll
    for (int g = 0; g < K / V; g++)
#pragma unroll
      for (int e = 0; e < V; e++)
        if ((g * kWarp + lane) * V < n) sum += exp_of(v[g * V + e] - max);
    sum = warp_reduce<SumOp>(sum);
#pragma unroll
    for (int g = 0; g < K / V; g++) {
      int j = (g * kWarp + lane) * V;
      if (j >= n) continue;
      P p;
#pragma unroll
      for (int e = 0; e < V; e++) p.v[e] = T(softmax_out(v[g * V + e], max, sum, log));
      *reinterpret_cast<P*>(y + j) = p;
    }
  }
}

// The (max, sum) of the whole block, in every thread.
template <class A>
__device__ __forceinline__ MaxSum<A> block_max_sum(MaxSum<A> s, A* shared_max, A* shared_sum) {
#pragma unroll
  for (int offset = kWarp / 2; offset > 0; offset /= 2)
    s.merge(__shfl_xor_sync(0xffffffffu, s.max, offset), __shfl_xor_sync(0xffffffffu, s.sum, offset));
  int lane = threadIdx.x % kWarp, warp = threadIdx.x / kWarp;
  if (lane == 0) {
    shared_max[warp] = s.max;
    shared_sum[warp] = s.sum;
  }
  __syncthreads();
  MaxSum<A> r{shared_max[0], shared_sum[0]};
  for (int w = 1; w < int(blockDim.x / kWarp); w++) r.merge(shared_max[w], shared_sum[w]);
  return r;
}

// A block per row (n > 1024).
template <class T>
__global__ void softmax_block_kernel(const T* in, T* out, int64_t n, bool log) {
  using A = opmath_t<T>;
  __shared__ A shared_max[kWarp], shared_sum[kWarp];
  const T* x = in + int64_t(blockIdx.x) * n;
  T* y = out + int64_t(blockIdx.x) * n;
  MaxSum<A> s{A(-INFINITY), A(0)};
  for_row(x, n, threadIdx.x, blockDim.x, [&](int64_t, T v) { s.add(A(v)); });
  s = block_max_sum(s, shared_max, shared_sum);
  map_row(x, y, n, threadIdx.x, blockDim.x,
          [&](int64_t, T v) { return softmax_out(A(v), s.max, s.sum, log); });
}

// A block per row that fits in registers: thread t holds the 16-byte vectors t, t + blockDim.x,
// ... (kSoftmaxVectors of them, loaded together: a warp's loads are 512 contiguous bytes and
// a thread has 64 bytes in flight), then the block's max, the block's sum of exp, the write.
// The row is aligned and a whole number of vectors (the launch checks). At 4096 columns:
// float32 256 threads of 42 registers, 1280 resident an SM, 80 KB in flight; bfloat16 128
// threads of 64 registers, 1024 resident, 64 KB (HBM wants some 25-40 KB an SM).
constexpr int kSoftmaxVectors = 4;

// A float result stored as T: bfloat16 by the hardware's cvt.rn.bf16.f32 (one instruction where
// bfloat16.h's portable rounding takes five; both round to nearest even), as loops.cuh does.
template <class T, class A>
__device__ __forceinline__ T store_as(A x) {
  if constexpr (std::is_same_v<T, bfloat16>) {
    return bfloat16::from_bits(__bfloat16_as_ushort(__float2bfloat16_rn(x)));
  } else {
    return T(x);
  }
}

// The vectors stay in their storage type (16 registers a thread for every dtype) and convert
// on use, so that 1024-thread blocks fit in 64 registers (__launch_bounds__).
template <class T>
__global__ void __launch_bounds__(1024) softmax_block_registers_kernel(const T* in, T* out,
                                                                        int64_t n, bool log) {
  using A = opmath_t<T>;
  constexpr int N = Vec<T>::kSize, K = kSoftmaxVectors;
  __shared__ A shared[kWarp];
  const Vec<T>* x = reinterpret_cast<const Vec<T>*>(in + int64_t(blockIdx.x) * n);
  Vec<T>* y = reinterpret_cast<Vec<T>*>(out + int64_t(blockIdx.x) * n);
  int nvec = int(n / N), t = threadIdx.x, lanes = blockDim.x;
  Vec<T> v[K];
#pragma unroll
  for (int k = 0; k < K; k++)
    if (t + k * lanes < nvec) v[k] = x[t + k * lanes];
  A max = A(-INFINITY);
#pragma unroll
  for (int k = 0; k < K; k++)
    if (t + k * lanes < nvec)
#pragma unroll
      for (int e = 0; e < N; e++) max = MaxOp::apply(max, A(v[k].v[e]));
  max = block_reduce<MaxOp>(max, shared);
  A sum = A(0);
#pragma unroll
  for (int k = 0; k < K; k++)
    if (t + k * lanes < nvec)
#pragma unroll
      for (int e = 0; e < N; e++) sum += exp_of(A(v[k].v[e]) - max);
  sum = block_reduce<SumOp>(sum, shared);
#pragma unroll
  for (int k = 0; k < K; k++) {
    if (t + k * lanes >= nvec) continue;
    Vec<T> r;
#pragma unroll
    for (int e = 0; e < N; e++) r.v[e] = store_as<T>(softmax_out(A(v[k].v[e]), max, sum, log));
    y[t + k * lanes] = r;
  }
}

// A thread per (outer, inner) column of n elements `inner` apart.
template <class T>
__global__ void softmax_inner_kernel(const T* in, T* out, int64_t outer, int64_t n,
                                     int64_t inner, bool log) {
  using A = opmath_t<T>;
  for (int64_t col = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; col < outer * inner;
       col += int64_t(gridDim.x) * blockDim.x) {
    int64_t start = (col / inner) * n * inner + col % inner;
    const T* x = in + start;
    T* y = out + start;
    MaxSum<A> s{A(-INFINITY), A(0)};
    for (int64_t j = 0; j < n; j++) s.add(A(x[j * inner]));
    for (int64_t j = 0; j < n; j++) y[j * inner] = T(softmax_out(A(x[j * inner]), s.max, s.sum, log));
  }
}

template <class T, int K>
void launch_softmax_warp(const T* in, T* out, int64_t rows, int64_t n, bool log) {
  constexpr int rows_per_block = kThreads / kWarp;
  constexpr int N = Vec<T>::kSize;
  unsigned blocks = (unsigned)std::min<int64_t>((rows + rows_per_block - 1) / rows_per_block, INT32_MAX);
  bool aligned = n % N == 0 && reinterpret_cast<uintptr_t>(in) % 16 == 0 &&
                 reinterpret_cast<uintptr_t>(out) % 16 == 0;
  if constexpr (K % N == 0) {
    if (aligned) {
      softmax_warp_kernel<T, K, N><<<blocks, kThreads, 0, ::mini::cuda::current_stream()>>>(in, out, rows, int(n), log);
      return;
    }
  }
  softmax_warp_kernel<T, K, 1><<<blocks, kThreads, 0, ::mini::cuda::current_stream()>>>(in, out, rows, int(n), log);
}

// ---- layer norm -----------------------------------------------------------------------------

// Welford's running count, mean and sum of squared deviations; merge is Chan's formula.
template <class A>
struct Welford {
  A count, mean, m2;
  __device__ __forceinline__ void add(A x) {
    count += A(1);
    A delta = x - mean;
    mean += delta / count;
    m2 += delta * (x - mean);
  }
  __device__ __forceinline__ void merge(A n, A m, A q) {
    A total = count + n;
    if (total == A(0)) return;
    A delta = m - mean;
    A w = n / total;
    mean += delta * w;
    m2 += q + delta * delta * count * w;
    count = total;
  }
};

template <class T>
__global__ void layer_norm_kernel(const T* in, const T* w, const T* b, T* out, int64_t cols,
                                  double eps) {
  using A = opmath_t<T>;
  __shared__ A shared[3][kWarp];
  const T* x = in + int64_t(blockIdx.x) * cols;
  T* y = out + int64_t(blockIdx.x) * cols;
  Welford<A> s{A(0), A(0), A(0)};
  for_row(x, cols, threadIdx.x, blockDim.x, [&](int64_t, T v) { s.add(A(v)); });
#pragma unroll
  for (int offset = kWarp / 2; offset > 0; offset /= 2) {
    A n = __shfl_xor_sync(0xffffffffu, s.count, offset);
    A m = __shfl_xor_sync(0xffffffffu, s.mean, offset);
    A q = __shfl_xor_sync(0xffffffffu, s.m2, offset);
    s.merge(n, m, q);
  }
  int lane = threadIdx.x % kWarp, warp = threadIdx.x / kWarp;
  if (lane == 0) {
    shared[0][warp] = s.count;
    shared[1][warp] = s.mean;
    shared[2][warp] = s.m2;
  }
  __syncthreads();
  Welford<A> r{shared[0][0], shared[1][0], shared[2][0]};
  for (int v = 1; v < int(blockDim.x / kWarp); v++) r.merge(shared[0][v], shared[1][v], shared[2][v]);
  A mean = r.mean;
  A rstd = A(1) / sqrt(r.m2 / A(cols) + A(eps));
  map_row(x, y, cols, threadIdx.x, blockDim.x, [&](int64_t j, T v) {
    A o = (A(v) - mean) * rstd;
    if (w) o *= A(w[j]);
    if (b) o += A(b[j]);
    return o;
  });
}

// Rows that fit in registers (aligned, at most 4 vectors per thread): one read of the row,
// an exact two-pass mean and variance from the registers, then the write.
constexpr int kLayerNormVectors = 4;

template <class T>
__global__ void layer_norm_registers_kernel(const T* in, const T* w, const T* b, T* out,
                                            int64_t cols, double eps) {
  using A = opmath_t<T>;
  constexpr int N = Vec<T>::kSize, K = kLayerNormVectors;
  __shared__ A shared[kWarp];
  const Vec<T>* x = reinterpret_cast<const Vec<T>*>(in + int64_t(blockIdx.x) * cols);
  Vec<T>* y = reinterpret_cast<Vec<T>*>(out + int64_t(blockIdx.x) * cols);
  int64_t nvec = cols / N;
  A v[K][N];
  A sum = A(0);
#pragma unroll
  for (int k = 0; k < K; k++) {
    int64_t i = threadIdx.x + int64_t(k) * blockDim.x;
    Vec<T> p;
    if (i < nvec) p = x[i];
#pragma unroll
    for (int e = 0; e < N; e++) {
      v[k][e] = i < nvec ? A(p.v[e]) : A(0);
      sum += v[k][e];
    }
  }
  A mean = block_reduce<SumOp>(sum, shared) / A(cols);
  A squares = A(0);
#pragma unroll
  for (int k = 0; k < K; k++)
#pragma unroll
    for (int e = 0; e < N; e++)
      if (threadIdx.x + int64_t(k) * blockDim.x < nvec) squares += (v[k][e] - mean) * (v[k][e] - mean);
  A rstd = A(1) / sqrt(block_reduce<SumOp>(squares, shared) / A(cols) + A(eps));
#pragma unroll
  for (int k = 0; k < K; k++) {
    int64_t i = threadIdx.x + int64_t(k) * blockDim.x;
    if (i >= nvec) continue;
    Vec<T> pw, pb, r;
    if (w) pw = reinterpret_cast<const Vec<T>*>(w)[i];
    if (b) pb = reinterpret_cast<const Vec<T>*>(b)[i];
#pragma unroll
    for (int e = 0; e < N; e++) {
      A o = (v[k][e] - mean) * rstd;
      if (w) o *= A(pw.v[e]);
      if (b) o += A(pb.v[e]);
      r.v[e] = T(o);
    }
    y[i] = r;
  }
}

// One thread an element of the output: row index[i / d], column i % d.
template <class T>
__global__ void embedding_kernel(const T* w, const int64_t* index, T* out, int64_t n, int64_t d) {
  for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n * d; i += (int64_t)gridDim.x * blockDim.x)
    out[i] = w[index[i / d] * d + i % d];
}

// One block a position of the indices sorted by row (stably, so a row's positions keep their
// order): the block at the start of a row's run sums that run's gradient rows, in position
// order, in opmath (deterministic, no atomics), and writes the row once; the others return. An
// index outside [0, rows) (the forward refused it; a direct call may not) is skipped, never
// written.
template <class T>
__global__ void embedding_backward_kernel(const T* grad, const int64_t* sorted_rows, const int64_t* order, T* out,
                                          int64_t n, int64_t d, int64_t rows) {
  const int64_t k = blockIdx.x, row = sorted_rows[k];
  if ((k > 0 && sorted_rows[k - 1] == row) || row < 0 || row >= rows) return;
  int64_t end = k + 1;
  while (end < n && sorted_rows[end] == row) end++;
  for (int64_t j = threadIdx.x; j < d; j += blockDim.x) {
    opmath_t<T> acc = 0;
    for (int64_t p = k; p < end; p++) acc += load_op(&grad[order[p] * d + j]);
    out[row * d + j] = T(acc);
  }
}

// ---- layer norm's backward ----------------------------------------------------------------------
// A warp a row (8 rows a block): the row's mean and rstd again (two passes in opmath), then
// a = sum(g w) and b = sum(g w xhat), then dx = rstd (g w - a / n - xhat b / n); each row's mean
// and rstd go to `stats` for the weight's and bias's gradients.
template <class T>
__global__ void layer_norm_backward_rows_kernel(const T* x, const T* g, const T* w, T* dx, float* stats, int64_t rows,
                                                int64_t cols, double eps) {
  using A = opmath_t<T>;
  const int64_t row = int64_t(blockIdx.x) * 8 + threadIdx.x / kWarp;
  if (row >= rows) return;
  const int lane = threadIdx.x % kWarp;
  const T* xr = x + row * cols;
  const T* gr = g + row * cols;
  auto warp_sum = [](A v) {
#pragma unroll
    for (int offset = kWarp / 2; offset > 0; offset /= 2) v += __shfl_xor_sync(0xffffffffu, v, offset);
    return v;
  };
  A sum = 0;
  for (int64_t j = lane; j < cols; j += kWarp) sum += load_op(&xr[j]);
  const A mean = warp_sum(sum) / A(cols);
  A sq = 0;
  for (int64_t j = lane; j < cols; j += kWarp) {
    const A c = load_op(&xr[j]) - mean;
    sq += c * c;
  }
  const A rstd = A(1) / sqrt(warp_sum(sq) / A(cols) + A(eps));
  A a = 0, b = 0;
  for (int64_t j = lane; j < cols; j += kWarp) {
    const A gw = load_op(&gr[j]) * (w ? load_op(&w[j]) : A(1));
    a += gw;
    b += gw * (load_op(&xr[j]) - mean) * rstd;
  }
  a = warp_sum(a) / A(cols);
  b = warp_sum(b) / A(cols);
  if (dx)
    for (int64_t j = lane; j < cols; j += kWarp) {
      const A gw = load_op(&gr[j]) * (w ? load_op(&w[j]) : A(1));
      dx[row * cols + j] = T(rstd * (gw - a - (load_op(&xr[j]) - mean) * rstd * b));
    }
  if (lane == 0) {
    stats[2 * row] = float(mean);
    stats[2 * row + 1] = float(rstd);
  }
}

// The weight's and bias's gradients, columns: a block takes 32 columns (a warp's loads one line)
// and a chunk of the rows, 32 lanes over them; partials [chunk][2][cols] in float, which
// layer_norm_backward_columns_kernel adds in chunk order (deterministic).
template <class T>
__global__ void __launch_bounds__(1024) layer_norm_backward_partials_kernel(const T* x, const T* g, const float* stats,
                                                                            float* partials, int64_t rows, int64_t cols,
                                                                            int64_t rows_a_chunk) {
  __shared__ float fold[2][32][33];
  const int c = threadIdx.x % 32, lane = threadIdx.x / 32;
  const int64_t col = int64_t(blockIdx.x) * 32 + c;
  const int64_t first = int64_t(blockIdx.y) * rows_a_chunk, last = min(rows, first + rows_a_chunk);
  float dw = 0, db = 0;
  if (col < cols)
    for (int64_t r = first + lane; r < last; r += 32) {
      const float gv = float(load_op(&g[r * cols + col]));
      dw += gv * (float(load_op(&x[r * cols + col])) - stats[2 * r]) * stats[2 * r + 1];
      db += gv;
    }
  fold[0][lane][c] = dw;
  fold[1][lane][c] = db;
  __syncthreads();
  if (lane < 2 && col < cols) {
    float t = 0;
    for (int l = 0; l < 32; l++) t += fold[lane][l][c];
    partials[(int64_t(blockIdx.y) * 2 + lane) * cols + col] = t;
  }
}

template <class T>
__global__ void layer_norm_backward_columns_kernel(const float* partials, T* dw, T* db, int64_t chunks, int64_t cols) {
  for (int64_t col = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; col < cols; col += int64_t(gridDim.x) * blockDim.x) {
    float w = 0, b = 0;
    for (int64_t k = 0; k < chunks; k++) {
      w += partials[(2 * k) * cols + col];
      b += partials[(2 * k + 1) * cols + col];
    }
    if (dw) dw[col] = T(w);
    if (db) db[col] = T(b);
  }
}

[[noreturn]] void fail_dtype(const char* op, DType d) {
  fail(op, "(): expected a floating point tensor, got ", dtype_name(d));
}

}  // namespace

void softmax(const Tensor& out, const Tensor& a, int64_t outer, int64_t n, int64_t inner, bool log) {
  if (out->numel() == 0) return;
  const char* op = log ? "log_softmax" : "softmax";
  MINI_DISPATCH(a->dtype, T, [&] {
    if constexpr (is_floating_v<T>) {
      const T* in = static_cast<const T*>(a->device_raw());
      T* dst = static_cast<T*>(out->device_raw());
      if (inner > 1) {
        softmax_inner_kernel<T><<<(unsigned)grid_for(outer * inner), kThreads, 0, ::mini::cuda::current_stream()>>>(in, dst, outer, n,
                                                                                  inner, log);
      } else if (n <= 32) {
        launch_softmax_warp<T, 1>(in, dst, outer, n, log);
      } else if (n <= 128) {
        launch_softmax_warp<T, 4>(in, dst, outer, n, log);
      } else if (n <= 256) {
        launch_softmax_warp<T, 8>(in, dst, outer, n, log);
      } else if (n <= 512) {
        launch_softmax_warp<T, 16>(in, dst, outer, n, log);
      } else if (n <= 1024) {
        launch_softmax_warp<T, 32>(in, dst, outer, n, log);
      } else {
        if (outer > INT32_MAX) fail(op, "(): too many rows for one CUDA launch: ", outer);
        constexpr int N = Vec<T>::kSize;
        auto aligned = [](const void* p) { return reinterpret_cast<uintptr_t>(p) % 16 == 0; };
        int64_t nvec = n / N;
        if (n % N == 0 && aligned(in) && aligned(dst) && nvec <= 1024 * kSoftmaxVectors) {
          // the fewest threads (at least a warp) that hold the row in kSoftmaxVectors each
          int threads = kWarp;
          while (threads < 1024 && threads * kSoftmaxVectors < nvec) threads *= 2;
          softmax_block_registers_kernel<T><<<(unsigned)outer, threads, 0, ::mini::cuda::current_stream()>>>(in, dst, n, log);
        } else {
          int threads = n >= 8192 ? 1024 : 512;
          softmax_block_kernel<T><<<(unsigned)outer, threads, 0, ::mini::cuda::current_stream()>>>(in, dst, n, log);
        }
      }
    } else {
      fail_dtype(op, a->dtype);
    }
  });
  check_launch(op);
}

// ---- cross_entropy ------------------------------------------------------------------------------

namespace {

// A block a row: the row's (max, sum of exp) in one read, then thread 0 the loss.
template <class T>
__global__ void cross_entropy_kernel(const T* x, const int64_t* target, opmath_t<T>* nll, opmath_t<T>* lse,
                                     int64_t n, int64_t ignore_index) {
  using A = opmath_t<T>;
  __shared__ A shared_max[kWarp], shared_sum[kWarp];
  const T* row = x + int64_t(blockIdx.x) * n;
  MaxSum<A> s{A(-INFINITY), A(0)};
  for_row(row, n, threadIdx.x, blockDim.x, [&](int64_t, T v) { s.add(A(v)); });
  s = block_max_sum(s, shared_max, shared_sum);
  if (threadIdx.x == 0) {
    const A l = s.max + log_of(s.sum);
    const int64_t t = target[blockIdx.x];
    lse[blockIdx.x] = l;
    nll[blockIdx.x] = t == ignore_index ? A(0) : (t >= 0 && t < n) ? l - A(row[t]) : A(NAN);
  }
}

// A block a row: dx = g (exp(x - lse) - [j == t]), vectorized as softmax's rows.
template <class T>
__global__ void cross_entropy_backward_kernel(const T* x, const int64_t* target, const opmath_t<T>* g,
                                              const opmath_t<T>* lse, T* dx, int64_t n, int64_t ignore_index) {
  using A = opmath_t<T>;
  const int64_t r = blockIdx.x, t = target[r];
  const bool counted = t != ignore_index && t >= 0 && t < n;  // else no loss, or a NaN one: no gradient
  const A gr = counted ? g[r] : A(0), l = lse[r];
  map_row(x + r * n, dx + r * n, n, threadIdx.x, blockDim.x, [&](int64_t j, T v) {
    return counted ? gr * (exp_of(A(v) - l) - A(j == t)) : A(0);
  });
}

int cross_entropy_threads(int64_t n) {
  int threads = kWarp;
  while (threads < 1024 && threads * 32 < n) threads *= 2;  // about 32 elements a thread
  return threads;
}

}  // namespace

void cross_entropy(const Tensor& nll, const Tensor& lse, const Tensor& x, const Tensor& target, int64_t rows,
                   int64_t n, int64_t ignore_index) {
  if (rows == 0) return;
  if (rows > INT32_MAX) fail("cross_entropy(): too many rows for one CUDA launch: ", rows);
  MINI_DISPATCH(x->dtype, T, [&] {
    if constexpr (is_floating_v<T>) {
      using A = opmath_t<T>;
      cross_entropy_kernel<T><<<(unsigned)rows, cross_entropy_threads(n), 0, current_stream()>>>(
          static_cast<const T*>(x->device_raw()), static_cast<const int64_t*>(target->device_raw()),
          static_cast<A*>(nll->device_raw()), static_cast<A*>(lse->device_raw()), n, ignore_index);
    } else {
      fail_dtype("cross_entropy", x->dtype);
    }
  });
  check_launch("cross_entropy");
}

void cross_entropy_backward(const Tensor& dx, const Tensor& g, const Tensor& x, const Tensor& target,
                            const Tensor& lse, int64_t rows, int64_t n, int64_t ignore_index) {
  if (rows == 0 || n == 0) return;
  if (rows > INT32_MAX) fail("cross_entropy backward: too many rows for one CUDA launch: ", rows);
  MINI_DISPATCH(x->dtype, T, [&] {
    if constexpr (is_floating_v<T>) {
      using A = opmath_t<T>;
      cross_entropy_backward_kernel<T><<<(unsigned)rows, cross_entropy_threads(n), 0, current_stream()>>>(
          static_cast<const T*>(x->device_raw()), static_cast<const int64_t*>(target->device_raw()),
          static_cast<const A*>(g->device_raw()), static_cast<const A*>(lse->device_raw()),
          static_cast<T*>(dx->device_raw()), n, ignore_index);
    } else {
      fail_dtype("cross_entropy", x->dtype);
    }
  });
  check_launch("cross_entropy backward");
}

void layer_norm(const Tensor& out, const Tensor& x, const Tensor& w, const Tensor& b, int64_t rows,
                int64_t cols, double eps) {
  if (out->numel() == 0) return;
  if (rows > INT32_MAX) fail("layer_norm(): too many rows for one CUDA launch: ", rows);
  MINI_DISPATCH(x->dtype, T, [&] {
    if constexpr (is_floating_v<T>) {
      const T* in = static_cast<const T*>(x->device_raw());
      const T* pw = w ? static_cast<const T*>(w->device_raw()) : nullptr;
      const T* pb = b ? static_cast<const T*>(b->device_raw()) : nullptr;
      T* dst = static_cast<T*>(out->device_raw());
      constexpr int N = Vec<T>::kSize;
      auto aligned = [](const void* p) { return reinterpret_cast<uintptr_t>(p) % 16 == 0; };
      int64_t nvec = cols / N;
      if (cols % N == 0 && aligned(in) && aligned(dst) && aligned(pw) && aligned(pb) &&
          nvec <= 1024 * kLayerNormVectors) {
        int threads = kWarp;
        while (threads < 1024 && threads * kLayerNormVectors < nvec) threads *= 2;
        layer_norm_registers_kernel<T><<<(unsigned)rows, threads, 0, ::mini::cuda::current_stream()>>>(in, pw, pb, dst, cols, eps);
      } else {
        // about 8 elements (two 16-byte vectors of float32) per thread, 32 to 512 threads
        int threads = kWarp;
        while (threads < 512 && threads * 8 < cols) threads *= 2;
        layer_norm_kernel<T><<<(unsigned)rows, threads, 0, ::mini::cuda::current_stream()>>>(in, pw, pb, dst, cols, eps);
      }
    } else {
      fail_dtype("layer_norm", x->dtype);
    }
  });
  check_launch("layer_norm");
}

void embedding(const Tensor& out, const Tensor& weight, const Tensor& index) {
  const int64_t n = index->numel(), d = weight->sizes[1];
  if (n * d == 0) return;
  MINI_DISPATCH(weight->dtype, T, [&] {
    const int threads = 256;
    const int64_t blocks = std::min<int64_t>((n * d + threads - 1) / threads, 65535);
    embedding_kernel<T><<<(unsigned)blocks, threads, 0, ::mini::cuda::current_stream()>>>(
        static_cast<const T*>(weight->device_raw()), static_cast<const int64_t*>(index->device_raw()),
        static_cast<T*>(out->device_raw()), n, d);
  });
  check_launch("embedding");
}

void embedding_backward(const Tensor& grad_weight, const Tensor& grad, const Tensor& index, const Tensor& positions) {
  const int64_t n = index->numel(), d = grad_weight->sizes[1], rows = grad_weight->sizes[0];
  if (n == 0 || d == 0) return;
  if (n > INT32_MAX) fail("embedding_backward(): more than 2^31 indices for one CUDA launch: ", n);
  // The positions sorted by row on the device (CUB's radix sort is stable), so the step never
  // waits for the indices to reach the host: torch's embedding backward sorts on the GPU too.
  cudaStream_t stream = current_stream();
  struct Buffers {  // released in stream order after the kernels that read them are queued
    std::vector<void*> held;
    void* get(size_t bytes) { return held.emplace_back(allocate(std::max<size_t>(bytes, 1))); }
    ~Buffers() { for (void* p : held) release(p); }
  } buffers;
  auto* order = static_cast<int64_t*>(buffers.get(n * sizeof(int64_t)));
  auto* sorted_rows = static_cast<int64_t*>(buffers.get(n * sizeof(int64_t)));
  const auto* keys = static_cast<const int64_t*>(index->device_raw());
  const auto* values = static_cast<const int64_t*>(positions->device_raw());
  size_t temp_bytes = 0;
  MINI_CUDA_CHECK(cub::DeviceRadixSort::SortPairs(nullptr, temp_bytes, keys, sorted_rows, values, order, n, 0, 64,
                                                  stream), "embedding_backward");
  void* temp = buffers.get(temp_bytes);
  MINI_CUDA_CHECK(cub::DeviceRadixSort::SortPairs(temp, temp_bytes, keys, sorted_rows, values, order, n, 0, 64,
                                                  stream), "embedding_backward");
  MINI_DISPATCH(grad->dtype, T, [&] {
    if constexpr (is_floating_v<T>) {
      int threads = kWarp;
      while (threads < 256 && threads < d) threads *= 2;
      embedding_backward_kernel<T><<<(unsigned)n, threads, 0, stream>>>(
          static_cast<const T*>(grad->device_raw()), sorted_rows, order,
          static_cast<T*>(grad_weight->device_raw()), n, d, rows);
    } else {
      fail_dtype("embedding_backward", grad->dtype);
    }
  });
  check_launch("embedding_backward");
}

namespace {

// dx from the rows kernel, then dw and db from column partials over chunks of rows.
template <class T>
void launch_layer_norm_backward(const Tensor& dx, const Tensor& dw, const Tensor& db, const Tensor& g,
                                const Tensor& x, const Tensor& w, int64_t rows, int64_t cols, double eps) {
  Tensor stats = TensorImpl::empty({2 * rows}, DType::Float32, x->device());
  auto p = [](const Tensor& t) { return t ? static_cast<T*>(t->device_raw()) : nullptr; };
  layer_norm_backward_rows_kernel<T><<<unsigned((rows + 7) / 8), 8 * kWarp, 0, current_stream()>>>(
      p(x), p(g), p(w), p(dx), static_cast<float*>(stats->device_raw()), rows, cols, eps);
  check_launch("layer_norm backward");
  if (!dw && !db) return;
  // chunks of rows: enough blocks to fill the GPU (about 4 a SM), at least 64 rows each
  const int64_t col_blocks = (cols + 31) / 32;
  int64_t chunks = std::max<int64_t>(1, std::min<int64_t>((rows + 63) / 64, (4 * sm_count() + col_blocks - 1) / col_blocks));
  chunks = std::min<int64_t>(chunks, 65535);
  const int64_t rows_a_chunk = (rows + chunks - 1) / chunks;
  Tensor partials = TensorImpl::empty({chunks * 2 * cols}, DType::Float32, x->device());
  layer_norm_backward_partials_kernel<T><<<dim3(unsigned(col_blocks), unsigned(chunks)), 1024, 0, current_stream()>>>(
      p(x), p(g), static_cast<const float*>(stats->device_raw()), static_cast<float*>(partials->device_raw()), rows,
      cols, rows_a_chunk);
  check_launch("layer_norm backward");
  layer_norm_backward_columns_kernel<T><<<unsigned(std::min<int64_t>((cols + 255) / 256, 1024)), 256, 0, current_stream()>>>(
      static_cast<const float*>(partials->device_raw()), p(dw), p(db), chunks, cols);
  check_launch("layer_norm backward");
}

}  // namespace

void layer_norm_backward(const Tensor& dx, const Tensor& dw, const Tensor& db, const Tensor& g, const Tensor& x,
                         const Tensor& w, int64_t rows, int64_t cols, double eps) {
  if (rows == 0 || cols == 0) return;
  if (rows > INT32_MAX / 8 * 8) fail("layer_norm backward: too many rows for one CUDA launch: ", rows);
  MINI_DISPATCH(x->dtype, T, [&] {
    if constexpr (is_floating_v<T>) launch_layer_norm_backward<T>(dx, dw, db, g, x, w, rows, cols, eps);
    else fail_dtype("layer_norm backward", x->dtype);
  });
}

}  // namespace mini::cuda
