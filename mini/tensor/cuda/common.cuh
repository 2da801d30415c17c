// cuda/common.cuh — what every eager CUDA kernel file shares: error checks, element types on
// the device, strided indexing, and launch sizes. Device code only sees plain values: shapes,
// strides and pointers are packed on the host into the small structs below (passed by value).
#pragma once
#include <cuda_runtime.h>

#include <cstdint>

#include "cuda.h"
#include "tensor/bfloat16.h"
#include "tensor/dtype.h"
#include "tensor/tensor.h"

namespace mini::cuda {

// The stream every launch, cuBLAS call and device-to-device copy goes to: the legacy default
// stream, except while capture_graph records a CUDA graph on its own stream (runtime.cu).
cudaStream_t current_stream();

// Throws an Error naming the CUDA call, its error string and the op, for runtime API calls
// made on the host (cudaMemcpy, cudaMalloc, ...). Kernel launches use check_launch(op).
[[noreturn]] void fail_cuda(cudaError_t err, const char* call, const char* op);
#define MINI_CUDA_CHECK(call, op)                                        \
  do {                                                                   \
    cudaError_t mini_err_ = (call);                                      \
    if (mini_err_ != cudaSuccess) ::mini::cuda::fail_cuda(mini_err_, #call, op); \
  } while (0)

// ---- element types ------------------------------------------------------------------------
// On the device a bfloat16 is mini::bfloat16 (same bits as __nv_bfloat16); math happens in
// opmath_t<T> (float for bfloat16), rounding to nearest even on store.
template <class T> __device__ __forceinline__ opmath_t<T> load_op(const T* p) { return opmath_t<T>(*p); }

// Reads element `p` stored as `d` and converts it to T (T an opmath type or bool/int64).
template <class T>
__device__ __forceinline__ T load_as(const char* p, DType d) {
  switch (d) {
    case DType::Bool: return T(*reinterpret_cast<const bool*>(p));
    case DType::Int64: return T(*reinterpret_cast<const int64_t*>(p));
    case DType::Float32: return T(*reinterpret_cast<const float*>(p));
    case DType::Float64: return T(*reinterpret_cast<const double*>(p));
    case DType::BFloat16: return T(float(*reinterpret_cast<const bfloat16*>(p)));
  }
  return T(0);
}

// Host code dispatches on a dtype with MINI_DISPATCH (dtype.h): its bfloat16 is
// mini::bfloat16, the same bits as __nv_bfloat16, so kernels instantiate on it directly.

// ---- strided indexing -----------------------------------------------------------------------
// Up to kMaxDims dims (more: the caller coalesces or refuses with an Error).
constexpr int kMaxDims = 10;

// Maps a linear index of the output's shape to an element offset in one operand (strides in
// elements, 0 on broadcast dims). Dims are stored innermost first.
struct StridedIndex {
  int rank = 0;
  int64_t sizes[kMaxDims];
  int64_t strides[kMaxDims];
  __device__ __forceinline__ int64_t offset(int64_t linear) const {
    int64_t off = 0;
#pragma unroll
    for (int d = 0; d < kMaxDims; d++) {
      if (d == rank) break;
      int64_t idx = linear % sizes[d];
      linear /= sizes[d];
      off += idx * strides[d];
    }
    return off;
  }
};

// The StridedIndex of `t` broadcast to `shape` (t's strides, 0 on stretched or new dims).
StridedIndex strided_index(const Tensor& t, const Shape& shape);
StridedIndex strided_index(const Shape& shape, const Strides& strides);

// ---- launch sizes -------------------------------------------------------------------------------
constexpr int kThreads = 256;
int sm_count();  // multiprocessors of device 0, read once
// Blocks for a grid-stride loop over n items with `per_thread` items per thread: enough to
// fill the device several times over, never more than the work needs.
int64_t grid_for(int64_t n, int per_thread = 1, int threads = kThreads);

// A CPU tensor with one element (a Python number or a 0-d CPU tensor) read as a double/int64
// on the host, for passing to a kernel by value.
bool is_host_scalar(const Tensor& t);
double host_scalar(const Tensor& t);

}  // namespace mini::cuda
