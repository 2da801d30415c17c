// loops.h — the loop engines every eager kernel is built from.
//
// contiguous kernels run a flat loop (split over OpenMP threads, an inner loop the compiler
// vectorizes); everything else runs strided_loop, which walks the output's index space
// with one stride vector per operand (0 on broadcast dims).
#pragma once
#include <omp.h>

#include <array>
#include <cstdint>
#include <cstring>

#include "shape.h"

namespace mini {

// Work below this many elements runs on one thread: forking costs more than it saves.
// (2^17 elements: below it a single core finishes in tens of microseconds, while waking a
// second thread that the OS has descheduled can cost a scheduler tick.)
constexpr int64_t kParallelGrain = 1 << 17;

// Calls body(begin, end) on disjoint chunks covering [0, n), in parallel when large.
template <class Body>
void parallel_chunks(int64_t n, Body body) {
  if (n < kParallelGrain || omp_get_max_threads() == 1) {
    if (n > 0) body(int64_t{0}, n);
    return;
  }
#pragma omp parallel
  {
    int64_t threads = omp_get_num_threads(), id = omp_get_thread_num();
    int64_t chunk = (n + threads - 1) / threads;
    chunk = (chunk + 15) / 16 * 16;  // keep chunk starts on vector boundaries
    int64_t begin = id * chunk, end = begin + chunk < n ? begin + chunk : n;
    if (begin < end) body(begin, end);
  }
}

// Walks every index of `shape`; operand k (k < N) lives at base[k] with element strides
// strides[k] and item size size[k]. body(ptrs) gets one char* per operand.
template <size_t N, class Body>
void strided_loop(const Shape& shape, std::array<char*, N> base,
                  const std::array<Strides, N>& strides, const std::array<int64_t, N>& size,
                  Body body, bool allow_parallel = true) {
  int64_t rank = static_cast<int64_t>(shape.size());
  int64_t total = numel_of(shape);
  if (total == 0) return;
  int64_t inner = rank ? shape[rank - 1] : 1;
  int64_t outer = total / inner;
  std::array<int64_t, N> inner_step{};
  for (size_t k = 0; k < N; k++) inner_step[k] = rank ? strides[k][rank - 1] * size[k] : 0;
  auto run_rows = [&](int64_t row_begin, int64_t row_end) {
    for (int64_t row = row_begin; row < row_end; row++) {
      std::array<char*, N> p = base;
      int64_t rem = row;
      for (int64_t d = rank - 2; d >= 0; d--) {
        int64_t idx = rem % shape[d];
        rem /= shape[d];
        for (size_t k = 0; k < N; k++) p[k] += idx * strides[k][d] * size[k];
      }
      for (int64_t i = 0; i < inner; i++) {
        body(p);
        for (size_t k = 0; k < N; k++) p[k] += inner_step[k];
      }
    }
  };
  if (allow_parallel && total >= kParallelGrain && outer > 1) {
#pragma omp parallel for schedule(static)
    for (int64_t r = 0; r < outer; r++) run_rows(r, r + 1);
  } else {
    run_rows(0, outer);
  }
}

// A copy between two layouts of `sizes` whose last dim is contiguous on both sides (a
// slice's gradient, a transpose of heads back into rows of features): one memcpy a row, not
// an element loop with run-time strides. False, copying nothing, where rows are not
// contiguous or are too short to gain.
inline bool copy_rows(char* dst, const Shape& sizes, const Strides& dst_strides, const char* src,
                      const Strides& src_strides, int64_t item) {
  const int64_t rank = (int64_t)sizes.size();
  if (rank < 1 || sizes.back() < 8 || dst_strides.back() != 1 || src_strides.back() != 1) return false;
  const int64_t inner = sizes.back(), total = numel_of(sizes), rows = total / inner;
#pragma omp parallel for if (rows > 1 && total >= kParallelGrain)
  for (int64_t r = 0; r < rows; r++) {
    int64_t rem = r, d_off = 0, s_off = 0;
    for (int64_t d = rank - 2; d >= 0; d--) {
      int64_t idx = rem % sizes[d];
      rem /= sizes[d];
      d_off += idx * dst_strides[d];
      s_off += idx * src_strides[d];
    }
    std::memcpy(dst + d_off * item, src + s_off * item, (size_t)(inner * item));
  }
  return true;
}

}  // namespace mini
