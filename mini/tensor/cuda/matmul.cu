// cuda/matmul.cu — out [batch, n, m] = a [batch, n, k] @ b [batch, k, m] through cuBLAS.
//
// cuBLAS is column-major; mini's out is row-major. A row-major matrix read as column-major is
// its transpose, so out^T (m x n, column-major) = b^T a^T is computed: b goes first. An
// operand that is row-major (a contiguous matrix) is read as is ("N"), one that is
// column-major (a transposed view) with "T"; anything else is copied to a contiguous
// temporary first. A broadcast batch dim (stride 0) is a batch stride of 0.
// One handle, created on first use, on the default stream, with a 32 MiB workspace as torch
// gives cuBLAS on Hopper. Math: float32 in float32 (TF32 only when allow_tf32()), float64 in
// float64, bfloat16 in and out with float32 accumulation.
#include <cublas_v2.h>

#include <climits>
#include <mutex>

#include "common.cuh"
#include "kernels.h"

namespace mini::cuda {

namespace {

constexpr size_t kWorkspaceBytes = 32u << 20;

[[noreturn]] void fail_cublas(cublasStatus_t status, const char* call) {
  fail("matmul: ", call, " failed: ", cublasGetStatusName(status), " (",
       cublasGetStatusString(status), ")");
}
#define MINI_CUBLAS_CHECK(call)                                                       \
  do {                                                                                \
    cublasStatus_t mini_status_ = (call);                                             \
    if (mini_status_ != CUBLAS_STATUS_SUCCESS) fail_cublas(mini_status_, #call);      \
  } while (0)

// The process's cuBLAS handle. It is never destroyed: cuBLAS's teardown at process exit can
// run after the CUDA context is gone (torch leaks its handles for the same reason).
cublasHandle_t handle() {
  static std::mutex mutex;
  static cublasHandle_t h = nullptr;
  std::lock_guard<std::mutex> lock(mutex);
  if (!h) {
    cublasHandle_t created;
    MINI_CUBLAS_CHECK(cublasCreate(&created));
    void* workspace = nullptr;
    try {
      MINI_CUBLAS_CHECK(cublasSetStream(created, 0));
      workspace = allocate(kWorkspaceBytes);
      MINI_CUBLAS_CHECK(cublasSetWorkspace(created, workspace, kWorkspaceBytes));
    } catch (...) {
      if (workspace) release(workspace);
      cublasDestroy(created);
      throw;
    }
    h = created;
  }
  return h;
}

// How cuBLAS reads one operand: its pointer, transpose flag, leading dimension and batch stride.
struct Operand {
  const void* ptr = nullptr;
  cublasOperation_t op = CUBLAS_OP_N;
  int64_t ld = 0;
  int64_t batch_stride = 0;
};

// A row-major matrix (rows x cols) is what cuBLAS calls its transpose with "N"; a column-major
// one needs "T". Size-1 dims leave their stride free.
bool blas_view(const Tensor& t, Operand* o) {
  int64_t rows = t->sizes[1], cols = t->sizes[2], rs = t->strides[1], cs = t->strides[2];
  o->ptr = t->device_raw();
  o->batch_stride = t->sizes[0] > 1 ? t->strides[0] : 0;
  if ((cs == 1 || cols == 1) && (rows == 1 || rs >= std::max<int64_t>(cols, 1))) {
    o->op = CUBLAS_OP_N;
    o->ld = rows == 1 ? std::max<int64_t>(cols, 1) : rs;
    return true;
  }
  if ((rs == 1 || rows == 1) && (cols == 1 || cs >= std::max<int64_t>(rows, 1))) {
    o->op = CUBLAS_OP_T;
    o->ld = cols == 1 ? std::max<int64_t>(rows, 1) : cs;
    return true;
  }
  return false;
}

template <class T>
__global__ void strided_copy_kernel(const T* in, T* out, StridedIndex index, int64_t n) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n;
       i += int64_t(gridDim.x) * blockDim.x)
    out[i] = in[index.offset(i)];
}

// A contiguous copy of an operand cuBLAS cannot read as it is (one matrix when the batch is
// broadcast). The caller keeps `storage` alive until the GEMM is launched; the allocator
// reuses it in stream order after that.
struct Temporary {
  void* storage = nullptr;
  ~Temporary() {
    if (storage) release(storage);
  }
};

template <class T>
Operand contiguous_operand(const Tensor& t, Temporary* tmp) {
  bool broadcast = t->sizes[0] > 1 && t->strides[0] == 0;
  Shape shape{broadcast ? 1 : t->sizes[0], t->sizes[1], t->sizes[2]};
  int64_t n = shape[0] * shape[1] * shape[2];
  tmp->storage = allocate(sizeof(T) * n);
  StridedIndex index = strided_index(shape, t->strides);
  strided_copy_kernel<T><<<(unsigned)grid_for(n), kThreads, 0, ::mini::cuda::current_stream()>>>(static_cast<const T*>(t->device_raw()),
                                                                static_cast<T*>(tmp->storage), index, n);
  check_launch("matmul");
  Operand o;
  o.ptr = tmp->storage;
  o.op = CUBLAS_OP_N;
  o.ld = std::max<int64_t>(shape[2], 1);
  o.batch_stride = broadcast || shape[0] == 1 ? 0 : shape[1] * shape[2];
  return o;
}

int as_int(int64_t v, const char* what) {
  if (v > INT_MAX) fail("matmul: ", what, " = ", v, " is larger than cuBLAS's int limit");
  return static_cast<int>(v);
}

template <class T>
void gemm(const Tensor& out, const Tensor& a, const Tensor& b) {
  int64_t batch = out->sizes[0], n = out->sizes[1], m = out->sizes[2], k = a->sizes[2];
  Temporary tmp_a, tmp_b;
  Operand oa, ob;
  if (!blas_view(a, &oa)) oa = contiguous_operand<T>(a, &tmp_a);
  if (!blas_view(b, &ob)) ob = contiguous_operand<T>(b, &tmp_b);

  cudaDataType_t type;
  cublasComputeType_t compute;
  float alpha_f = 1.0f, beta_f = 0.0f;
  double alpha_d = 1.0, beta_d = 0.0;
  const void* alpha = &alpha_f;
  const void* beta = &beta_f;
  if constexpr (std::is_same_v<T, double>) {
    type = CUDA_R_64F;
    compute = CUBLAS_COMPUTE_64F;
    alpha = &alpha_d;
    beta = &beta_d;
  } else if constexpr (std::is_same_v<T, float>) {
    type = CUDA_R_32F;
    compute = allow_tf32() ? CUBLAS_COMPUTE_32F_FAST_TF32 : CUBLAS_COMPUTE_32F;
  } else {
    type = CUDA_R_16BF;
    compute = CUBLAS_COMPUTE_32F;
  }
  int im = as_int(m, "m"), in = as_int(n, "n"), ik = as_int(k, "k");
  int lda = as_int(oa.ld, "lda"), ldb = as_int(ob.ld, "ldb");
  cublasHandle_t h = handle();
  MINI_CUBLAS_CHECK(cublasSetStream(h, current_stream()));  // a CUDA graph's capture stream, or the default
  // out^T (m x n) = op(b) (m x k) * op(a) (k x n), column-major
  if (batch == 1) {
    MINI_CUBLAS_CHECK(cublasGemmEx(h, ob.op, oa.op, im, in, ik, alpha, ob.ptr, type, ldb, oa.ptr,
                                   type, lda, beta, out->device_raw(), type, im, compute,
                                   CUBLAS_GEMM_DEFAULT));
  } else {
    MINI_CUBLAS_CHECK(cublasGemmStridedBatchedEx(
        h, ob.op, oa.op, im, in, ik, alpha, ob.ptr, type, ldb, ob.batch_stride, oa.ptr, type, lda,
        oa.batch_stride, beta, out->device_raw(), type, im, n * m, as_int(batch, "batch"),
        compute, CUBLAS_GEMM_DEFAULT));
  }
  check_launch("matmul");
}

}  // namespace

void matmul(const Tensor& out, const Tensor& a, const Tensor& b) {
  if (out->numel() == 0) return;
  if (a->sizes[2] == 0) {  // an empty sum: zeros (all-zero bits are 0.0 in every float type)
    MINI_CUDA_CHECK(cudaMemsetAsync(out->device_raw(), 0, out->nbytes(), current_stream()), "matmul");
    return;
  }
  switch (out->dtype) {
    case DType::Float32: return gemm<float>(out, a, b);
    case DType::Float64: return gemm<double>(out, a, b);
    case DType::BFloat16: return gemm<bfloat16>(out, a, b);
    default: fail("matmul: CUDA matmul supports float32, float64 and bfloat16, got ",
                  dtype_name(out->dtype), "; convert first, e.g. a.float() @ b.float()");
  }
}

}  // namespace mini::cuda
