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
// linear() is x @ w^T + bias through cuBLASLt, the bias added in the GEMM's epilogue; it shares
// the workspace.
#include <cublasLt.h>
#include <cublas_v2.h>

#include <climits>
#include <map>
#include <mutex>
#include <tuple>

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

// The 32 MiB workspace cuBLAS and cuBLASLt share: both run on mini's one stream, so their
// calls never overlap. Allocated on first use, never freed (as the handles).
void* workspace() {
  static void* w = allocate(kWorkspaceBytes);
  return w;
}

// The process's cuBLAS handle. It is never destroyed: cuBLAS's teardown at process exit can
// run after the CUDA context is gone (torch leaks its handles for the same reason).
cublasHandle_t handle() {
  static std::mutex mutex;
  static cublasHandle_t h = nullptr;
  std::lock_guard<std::mutex> lock(mutex);
  if (!h) {
    cublasHandle_t created;
    MINI_CUBLAS_CHECK(cublasCreate(&created));
    try {
      MINI_CUBLAS_CHECK(cublasSetStream(created, 0));
      MINI_CUBLAS_CHECK(cublasSetWorkspace(created, workspace(), kWorkspaceBytes));
    } catch (...) {
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


// ---- Linear with its bias in the epilogue (cuBLASLt) -------------------------------------
// out = x @ w^T + bias as one GEMM: cuBLASLt's BIAS epilogue adds bias[j] to column j while
// the tile is still in registers (in float32, rounded once), as torch's eager addmm does. A
// separate broadcast add would read and write the whole output again.

[[noreturn]] void fail_lt(cublasStatus_t status, const char* call) {
  fail("linear: ", call, " failed: ", cublasGetStatusName(status), " (", cublasGetStatusString(status), ")");
}
#define MINI_LT_CHECK(call)                                                      \
  do {                                                                           \
    cublasStatus_t mini_status_ = (call);                                        \
    if (mini_status_ != CUBLAS_STATUS_SUCCESS) fail_lt(mini_status_, #call);     \
  } while (0)

cublasLtHandle_t lt_handle() {  // never destroyed, as handle()
  static cublasLtHandle_t h = [] {
    cublasLtHandle_t created;
    MINI_LT_CHECK(cublasLtCreate(&created));
    return created;
  }();
  return h;
}

// How cuBLASLt stores an operand: op, rows and columns as stored (column-major), leading dim.
struct LtOperand {
  cublasOperation_t op = CUBLAS_OP_N;
  int64_t rows = 0, cols = 0, ld = 0;
};

// A row-major [r, c] view read column-major is its transpose: with unit column stride it is a
// stored (c x r) matrix that `want_t` reads transposed; with unit row stride it is (r x c) as is.
bool lt_operand(const Tensor& t, bool want_t, LtOperand* o) {
  int64_t r = t->sizes[0], c = t->sizes[1], rs = t->strides[0], cs = t->strides[1];
  if (cs == 1 && rs >= std::max<int64_t>(c, 1)) {
    *o = {want_t ? CUBLAS_OP_T : CUBLAS_OP_N, c, r, rs};
    return true;
  }
  if (rs == 1 && cs >= std::max<int64_t>(r, 1)) {
    *o = {want_t ? CUBLAS_OP_N : CUBLAS_OP_T, r, c, cs};
    return true;
  }
  return false;
}

// The largest power of two (at most 256) that divides a pointer: cuBLASLt's heuristic must be
// told, or it may pick a kernel that assumes 256-byte alignment.
uint32_t alignment(const void* p) {
  uint32_t a = 1;
  auto v = reinterpret_cast<uintptr_t>(p);
  while (a < 256 && v % (2 * a) == 0) a *= 2;
  return a;
}

// A GEMM's descriptors and the algorithm the heuristic chose, made once per shape, layout,
// dtype and alignment (the heuristic query costs tens of microseconds of host time).
struct LtPlan {
  cublasLtMatmulDesc_t desc = nullptr;
  cublasLtMatrixLayout_t a = nullptr, b = nullptr, d = nullptr;
  cublasLtMatmulAlgo_t algo{};
  bool usable = false;
};
using LtKey = std::tuple<int, bool, int, int, int64_t, int64_t, int64_t, int64_t, int64_t, uint32_t, uint32_t, uint32_t>;

const LtPlan& lt_plan(const LtKey& key, cudaDataType_t type, cublasComputeType_t compute, const LtOperand& oa,
                      const LtOperand& ob, int64_t m, int64_t n, uint32_t align_a, uint32_t align_b,
                      uint32_t align_d) {
  static std::mutex mutex;
  static std::map<LtKey, LtPlan> plans;  // kept for the process, as the handle
  std::lock_guard<std::mutex> lock(mutex);
  auto found = plans.find(key);
  if (found != plans.end()) return found->second;
  LtPlan plan;
  MINI_LT_CHECK(cublasLtMatmulDescCreate(&plan.desc, compute, CUDA_R_32F));
  MINI_LT_CHECK(cublasLtMatmulDescSetAttribute(plan.desc, CUBLASLT_MATMUL_DESC_TRANSA, &oa.op, sizeof(oa.op)));
  MINI_LT_CHECK(cublasLtMatmulDescSetAttribute(plan.desc, CUBLASLT_MATMUL_DESC_TRANSB, &ob.op, sizeof(ob.op)));
  cublasLtEpilogue_t epilogue = CUBLASLT_EPILOGUE_BIAS;
  MINI_LT_CHECK(cublasLtMatmulDescSetAttribute(plan.desc, CUBLASLT_MATMUL_DESC_EPILOGUE, &epilogue, sizeof(epilogue)));
  MINI_LT_CHECK(cublasLtMatrixLayoutCreate(&plan.a, type, oa.rows, oa.cols, oa.ld));
  MINI_LT_CHECK(cublasLtMatrixLayoutCreate(&plan.b, type, ob.rows, ob.cols, ob.ld));
  MINI_LT_CHECK(cublasLtMatrixLayoutCreate(&plan.d, type, m, n, m));
  cublasLtMatmulPreference_t pref;
  MINI_LT_CHECK(cublasLtMatmulPreferenceCreate(&pref));
  uint64_t bytes = kWorkspaceBytes;
  MINI_LT_CHECK(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &bytes, sizeof(bytes)));
  const std::pair<cublasLtMatmulPreferenceAttributes_t, uint32_t> aligns[] = {
      {CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, align_a}, {CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, align_b},
      {CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, align_d}, {CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, align_d}};
  for (const auto& [attr, value] : aligns)
    MINI_LT_CHECK(cublasLtMatmulPreferenceSetAttribute(pref, attr, &value, sizeof(value)));
  cublasLtMatmulHeuristicResult_t result{};
  int found_algos = 0;
  cublasStatus_t status = cublasLtMatmulAlgoGetHeuristic(lt_handle(), plan.desc, plan.a, plan.b, plan.d, plan.d, pref,
                                                         1, &result, &found_algos);
  cublasLtMatmulPreferenceDestroy(pref);
  plan.usable = status == CUBLAS_STATUS_SUCCESS && found_algos > 0;
  if (plan.usable) plan.algo = result.algo;
  return plans.emplace(key, plan).first->second;
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


bool linear(const Tensor& out, const Tensor& x, const Tensor& w, const Tensor& bias) {
  const int64_t n = x->sizes[0], k = x->sizes[1], m = w->sizes[0];
  if (n == 0 || k == 0 || m == 0) return false;
  if (n > INT_MAX || k > INT_MAX || m > INT_MAX) return false;
  if (bias->strides[0] != 1 && m > 1) return false;
  // The epilogue reads the bias in vectors: one not 16-byte aligned (a bias sliced at an odd
  // offset) goes the caller's way, as torch's addmm does.
  if (alignment(bias->device_raw()) < 16) return false;
  if (out->dtype != DType::Float32 && out->dtype != DType::BFloat16) return false;
  LtOperand oa, ob;  // D (m x n) = op(w') (m x k) op(x') (k x n): w read transposed, x as is
  if (!lt_operand(w, true, &oa) || !lt_operand(x, false, &ob)) return false;
  const bool f32 = out->dtype == DType::Float32;
  const cudaDataType_t type = f32 ? CUDA_R_32F : CUDA_R_16BF;
  const cublasComputeType_t compute = f32 && allow_tf32() ? CUBLAS_COMPUTE_32F_FAST_TF32 : CUBLAS_COMPUTE_32F;
  const uint32_t align_a = alignment(w->device_raw()), align_b = alignment(x->device_raw()),
                 align_d = alignment(out->device_raw());
  LtKey key{int(out->dtype), compute == CUBLAS_COMPUTE_32F_FAST_TF32, int(oa.op), int(ob.op), m, n, k, oa.ld, ob.ld,
            align_a, align_b, align_d};
  const LtPlan& plan = lt_plan(key, type, compute, oa, ob, m, n, align_a, align_b, align_d);
  if (!plan.usable) return false;
  const void* bias_ptr = bias->device_raw();
  MINI_LT_CHECK(cublasLtMatmulDescSetAttribute(plan.desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bias_ptr,
                                               sizeof(bias_ptr)));
  const float alpha = 1.0f, beta = 0.0f;
  MINI_LT_CHECK(cublasLtMatmul(lt_handle(), plan.desc, &alpha, w->device_raw(), plan.a, x->device_raw(), plan.b,
                               &beta, out->device_raw(), plan.d, out->device_raw(), plan.d, &plan.algo, workspace(),
                               kWorkspaceBytes, current_stream()));
  check_launch("linear");
  return true;
}

}  // namespace mini::cuda
