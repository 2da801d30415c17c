// cuda/block_reduce.cuh — combining one value per thread into one per warp or per block:
// what reduce.cu, nn.cu share. A combiner is a struct with `static A apply(A, A)`.
#pragma once
#include <cuda_runtime.h>

#include <cstdint>
#include <type_traits>

namespace mini::cuda {

constexpr int kWarp = 32;

struct SumOp {
  template <class A> __device__ __forceinline__ static A apply(A a, A b) { return a + b; }
};
// NaN propagates: a NaN on either side wins (x != x only for NaN; false for integers). float
// on sm_80 and later: one max.NaN / min.NaN instruction (a NaN operand gives the canonical
// NaN) instead of two compares and a select.
template <bool kMax>
struct MinMaxOp {
  template <class A> __device__ __forceinline__ static A apply(A a, A b) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
    if constexpr (std::is_same_v<A, float>) {
      float r;
      if constexpr (kMax) asm("max.NaN.f32 %0, %1, %2;" : "=f"(r) : "f"(a), "f"(b));
      else asm("min.NaN.f32 %0, %1, %2;" : "=f"(r) : "f"(a), "f"(b));
      return r;
    } else
#endif
    return (a != a || (kMax ? a >= b : a <= b)) ? a : b;
  }
};
using MaxOp = MinMaxOp<true>;
using MinOp = MinMaxOp<false>;

// Every lane ends with the combination of the 32 lanes' values.
template <class Op, class A>
__device__ __forceinline__ A warp_reduce(A v) {
#pragma unroll
  for (int offset = kWarp / 2; offset > 0; offset /= 2)
    v = Op::apply(v, __shfl_xor_sync(0xffffffffu, v, offset));
  return v;
}

// Every thread of the block ends with the combination of the block's values. blockDim.x is
// a multiple of 32 (at most 1024). `shared` holds 32 A's; the block may call this again
// right after (the second barrier protects `shared`).
template <class Op, class A>
__device__ __forceinline__ A block_reduce(A v, A* shared) {
  int lane = threadIdx.x % kWarp, warp = threadIdx.x / kWarp, warps = blockDim.x / kWarp;
  v = warp_reduce<Op>(v);
  if (lane == 0) shared[warp] = v;
  __syncthreads();
  A r = shared[0];
  for (int w = 1; w < warps; w++) r = Op::apply(r, shared[w]);
  __syncthreads();
  return r;
}

// 16 bytes of T, loaded or stored as one vector instruction when the address is aligned.
template <class T>
struct alignas(16) Vec {
  static constexpr int kSize = 16 / sizeof(T);
  T v[kSize];
};

}  // namespace mini::cuda
