// cuda_prelude.cuh — what every generated CUDA source holds before its kernels: bfloat16,
// 16-byte vectors, the kernels' size arguments, the reductions' combines and identities, the
// online softmax's rescale, and the block and warp reductions.
//
// NVRTC compiles it without the C++ library, after a few typedefs and mini/tensor/scalar_math.h
// (cuda_kernel.cpp: cuda_prelude). The renderer embeds this file from its `namespace mini` on:
// CMake copies that text into generated/codegen/cuda_prelude_source.h at configure time, as it
// copies scalar_math.h, so each generated source is self-contained.
namespace mini {

// bfloat16 storage: widened to float when read, rounded to nearest even (the hardware's
// cvt.rn.bf16.f32) when made from a float; arithmetic on two of them is float arithmetic, so
// each op's result is rounded once, when it is stored in its temporary, as eager rounds it.
struct bf16 {
  unsigned short bits;
  bf16() = default;
  __device__ __forceinline__ bf16(float f) { asm("cvt.rn.bf16.f32 %0, %1;" : "=h"(bits) : "f"(f)); }
  __device__ __forceinline__ operator float() const { return __uint_as_float(unsigned(bits) << 16); }
};

// N consecutive elements moved by one load or store instruction (16 bytes at most): a
// pointwise kernel's contiguous loads and its stores, where each pointer is aligned to it.
template <class T, int N> struct alignas(sizeof(T) * N) Vec { T v[N]; };
template <class T, int N> __device__ __forceinline__ bool aligned(const T* p) {
  return (reinterpret_cast<unsigned long long>(p) % sizeof(Vec<T, N>)) == 0;
}

struct Sizes {  // passed by value to every kernel (cuda_launch.h: kCudaMax*)
  int64_t symbols[64];
  int64_t strides[16][8];
};

// Reductions: the identity and the combine of sum, max and min (NaN propagates, as eager).
template <class T> __device__ __forceinline__ T sum_of(T a, T b) { return a + b; }
template <class T> __device__ __forceinline__ T max_of(T a, T b) { return (a != a || a > b) ? a : b; }
template <class T> __device__ __forceinline__ T min_of(T a, T b) { return (a != a || a < b) ? a : b; }
template <class T> __device__ __forceinline__ T highest() { return T(__longlong_as_double(0x7ff0000000000000LL)); }
template <> __device__ __forceinline__ int64_t highest<int64_t>() { return 0x7fffffffffffffffLL; }
template <> __device__ __forceinline__ int highest<int>() { return 0x7fffffff; }
template <class T> __device__ __forceinline__ T lowest() { return -highest<T>(); }
template <> __device__ __forceinline__ int64_t lowest<int64_t>() { return -0x7fffffffffffffffLL - 1; }
template <> __device__ __forceinline__ int lowest<int>() { return -0x7fffffff - 1; }
// The online softmax's rescale: a running sum of exp(x - m) becomes one of exp(x - m2) when the
// running max rises from m to m2 (1 where it did not, also where both are -inf; 0 from -inf).
template <class T> __device__ __forceinline__ T online_scale(T m, T m2) { return m == m2 ? T(1) : T(::exp(m - m2)); }
// The running max as the pair's exp reads it: 0 while it is -inf (every element so far -inf,
// whose exp(-inf - 0) is the 0 it is after any finite max); the row's sum where its max is
// -inf is NaN, as eager's exp(-inf - -inf).
template <class T> __device__ __forceinline__ T online_shift(T m) { return m == -highest<T>() ? T(0) : m; }
template <class T> __device__ __forceinline__ T online_finish(T sum, T m) { return m == -highest<T>() ? T(m - m) : sum; }

// v combined over the block's threads (every thread gets the result): shuffles within each
// warp, then the warps' values through `smem` (one per warp), which each warp reads back one a
// lane and combines with shuffles again (a loop over the warps' values in every thread read
// shared memory four times as often as the kernel read global memory: Nsight Compute, H200,
// 2026-12-02). Every thread must call it. The block's warps a power of two (every block mini
// launches): each aligned group of that many lanes holds every warp's value once.
template <class T, T (*Op)(T, T)> __device__ __forceinline__ T block_reduce(T v, T* smem) {
  for (int offset = 16; offset > 0; offset >>= 1) v = Op(v, __shfl_xor_sync(0xffffffffu, v, offset));
  const int warps = int(blockDim.x >> 5), lane = int(threadIdx.x & 31);
  if (warps <= 1) return v;
  __syncthreads();  // the previous call's readers are done with smem
  if (lane == 0) smem[threadIdx.x >> 5] = v;
  __syncthreads();
  if (warps & (warps - 1)) {  // not a power of two: one warp's value after another
    T r = smem[0];
    for (int w = 1; w < warps; w++) r = Op(r, smem[w]);
    return r;
  }
  T r = smem[lane & (warps - 1)];
  for (int offset = warps >> 1; offset > 0; offset >>= 1) r = Op(r, __shfl_xor_sync(0xffffffffu, r, offset));
  return r;
}

// v combined over each aligned group of Lanes lanes of this warp (every lane gets its group's
// result): a row a warp, or Lanes lanes a row (codegen::cuda_rows_per_block > 1), each group
// reducing its own row, never waiting for the others. Every lane of the warp must call it.
template <class T, T (*Op)(T, T), int Lanes = 32> __device__ __forceinline__ T warp_reduce(T v) {
  for (int offset = Lanes / 2; offset > 0; offset >>= 1) v = Op(v, __shfl_xor_sync(0xffffffffu, v, offset));
  return v;
}

}  // namespace mini
