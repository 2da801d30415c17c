// nn_kernels.cpp — the composite kernels torch also runs as one kernel each: softmax and
// log_softmax along a dim, layer_norm over trailing dims, mse_loss.
#include <cmath>

#include "autograd.h"
#include "cuda/kernels.h"
#include "loops.h"
#include "metrics.h"
#include "ops.h"
#include "scalar_math.h"

namespace mini {

namespace {
void require_floating(const Tensor& t, const char* op) {
  if (!is_floating(t->dtype))
    fail(op, "(): expected a floating point tensor, got ", dtype_name(t->dtype),
         "; convert first, e.g. x.float()");
}
// bfloat16 rows compute in float (A) and round once on store: they take the second loop
// shape, which keeps nothing in the output between passes.
template <class T>
void softmax_kernel(const Tensor& a, const Tensor& out, int64_t outer, int64_t inner, int64_t n,
                    bool log) {
  using A = opmath_t<T>;
  const T* src = a->data<T>();
  T* dst = out->data<T>();
#pragma omp parallel for if (outer * inner * n >= kParallelGrain)
  for (int64_t row = 0; row < outer * inner; row++) {
    int64_t o = row / inner, i = row % inner;
    const T* x = src + o * n * inner + i;
    T* y = dst + o * n * inner + i;
    A mx = -INFINITY;
    for (int64_t j = 0; j < n; j++) mx = A(x[j * inner]) > mx ? A(x[j * inner]) : mx;
    if (inner == 1 && std::is_same_v<T, A>) {
      A sum = 0;
#pragma omp simd reduction(+ : sum)
      for (int64_t j = 0; j < n; j++) {
        A e = exp_of<A>(x[j] - mx);
        y[j] = e;
        sum += e;
      }
      if (log) {
        A lse = std::log(sum);
#pragma omp simd
        for (int64_t j = 0; j < n; j++) y[j] = x[j] - mx - lse;
      } else {
        A inv = A(1) / sum;
#pragma omp simd
        for (int64_t j = 0; j < n; j++) y[j] = y[j] * inv;
      }
    } else {
      A sum = 0;
      for (int64_t j = 0; j < n; j++) sum += exp_of<A>(x[j * inner] - mx);
      A lse = std::log(sum);
      for (int64_t j = 0; j < n; j++) {
        A z = x[j * inner] - mx;
        y[j * inner] = log ? z - lse : exp_of<A>(z) / sum;
      }
    }
  }
}

template <class T>
void layer_norm_kernel(const Tensor& x, const Tensor& w, const Tensor& b, const Tensor& out,
                       int64_t rows, int64_t m, double eps) {
  using A = opmath_t<T>;
  const T* src = x->data<T>();
  T* dst = out->data<T>();
  const T* pw = w ? w->data<T>() : nullptr;
  const T* pb = b ? b->data<T>() : nullptr;
#pragma omp parallel for if (rows * m >= kParallelGrain)
  for (int64_t row = 0; row < rows; row++) {
    const T* xr = src + row * m;
    T* yr = dst + row * m;
    double sum = 0, sq = 0;
#pragma omp simd reduction(+ : sum)
    for (int64_t j = 0; j < m; j++) sum += xr[j];
    double mean = sum / m;
#pragma omp simd reduction(+ : sq)
    for (int64_t j = 0; j < m; j++) sq += (xr[j] - mean) * (xr[j] - mean);
    double rstd = 1.0 / std::sqrt(sq / m + eps);
    // x - mean in double: a float32 mean of a row with mean 100 and std 0.01 is off by up to
    // half an ulp of 100 (4e-6), 4e-4 of a standard deviation in every output
    for (int64_t j = 0; j < m; j++) {
      A v = A((xr[j] - mean) * rstd);  // bfloat16 rounds once, on store
      if (pw) v *= pw[j];
      if (pb) v += pb[j];
      yr[j] = v;
    }
  }
}

}  // namespace

Tensor softmax(const Tensor& a_in, int64_t dim_in, bool log) {
  if (!a_in) fail_type("softmax(): argument 'input' must be a Tensor, not None");
  const char* name = log ? "log_softmax" : "softmax";
  require_floating(a_in, name);
  int64_t dim = wrap_dim(dim_in, a_in->dim());
  Tensor a = a_in->is_contiguous() ? a_in : contiguous(detach(a_in));
  Tensor out = TensorImpl::empty(a->sizes, a->dtype, a->device());
  int64_t n = a->dim() ? a->sizes[dim] : 1, inner = 1, outer = 1;
  for (int64_t d = 0; d < a->dim(); d++) {
    if (d < dim) outer *= a->sizes[d];
    if (d > dim) inner *= a->sizes[d];
  }
  if (out->is_cuda()) cuda::softmax(out, a, outer, n, inner, log);
  else MINI_DISPATCH(a->dtype, T, [&] {
    if constexpr (is_floating_v<T>) softmax_kernel<T>(a, out, outer, inner, n, log);
  });
  count_kernel(a_in->nbytes() + out->nbytes());
  Attrs at;
  at.dim = dim_in;
  record(log ? OpKind::LogSoftmax : OpKind::Softmax, {a_in}, out, at);
  return out;
}

Tensor layer_norm(const Tensor& x_in, const Shape& normalized_shape, const Tensor& weight,
                  const Tensor& bias, double eps) {
  if (!x_in) fail_type("layer_norm(): argument 'input' must be a Tensor, not None");
  require_floating(x_in, "layer_norm");
  int64_t k = normalized_shape.size(), r = x_in->dim();
  bool ok = k <= r && k > 0;
  for (int64_t i = 0; ok && i < k; i++) ok = x_in->sizes[r - k + i] == normalized_shape[i];
  if (!ok)
    fail("Given normalized_shape=", shape_str(normalized_shape), ", expected input with shape [*",
         [&] { std::string s; for (auto v : normalized_shape) s += ", " + std::to_string(v); return s; }(),
         "], but got input of size", shape_str(x_in->sizes));
  for (const Tensor* p : {&weight, &bias}) {
    if (*p && (*p)->sizes != normalized_shape)
      fail("layer_norm: ", p == &weight ? "weight" : "bias", " of shape ", shape_str((*p)->sizes),
           " does not match normalized_shape ", shape_str(normalized_shape));
    if (*p && (*p)->dtype != x_in->dtype)
      fail("layer_norm: expected ", p == &weight ? "weight" : "bias", " to have dtype ",
           dtype_name(x_in->dtype), " but got ", dtype_name((*p)->dtype));
  }
  common_device("layer_norm", {x_in, weight, bias});
  Tensor x = x_in->is_contiguous() ? x_in : contiguous(detach(x_in));
  Tensor w = weight ? contiguous(detach(weight)) : nullptr;
  Tensor b = bias ? contiguous(detach(bias)) : nullptr;
  Tensor out = TensorImpl::empty(x->sizes, x->dtype, x->device());
  int64_t m = numel_of(normalized_shape), rows = m ? x->numel() / m : 0;
  if (out->is_cuda()) cuda::layer_norm(out, x, w, b, rows, m, eps);
  else MINI_DISPATCH(x->dtype, T, [&] {
    if constexpr (is_floating_v<T>) layer_norm_kernel<T>(x, w, b, out, rows, m, eps);
  });
  count_kernel(x_in->nbytes() + (weight ? weight->nbytes() : 0) + (bias ? bias->nbytes() : 0) +
               out->nbytes());
  Attrs at;
  at.dim = k;
  at.eps = eps;
  record(OpKind::LayerNorm, {x_in, weight, bias}, out, at);
  return out;
}

Tensor mse_loss(const Tensor& a, const Tensor& b, const std::string& reduction) {
  if (!a || !b) fail_type("mse_loss(): arguments must be Tensors, not None");
  if (reduction != "mean" && reduction != "sum" && reduction != "none")
    fail_value(reduction, " is not a valid value for reduction: use 'mean', 'sum' or 'none'");
  DType dt = result_type({a, b});
  if (!is_floating(dt)) fail("mse_loss(): expected floating point inputs, got ", dtype_name(dt));
  Tensor diff2;
  {
    NoGradGuard no_grad;  // one fused kernel: the pieces below are not counted separately
    Metrics saved = metrics();
    Tensor d = binary(OpKind::Sub, a, b);
    diff2 = binary(OpKind::Mul, d, d);
    if (reduction != "none") diff2 = reduce(reduction == "mean" ? OpKind::Mean : OpKind::Sum, diff2, {}, false);
    metrics() = saved;
  }
  count_kernel(a->nbytes() + b->nbytes() + diff2->nbytes());
  Attrs at;
  at.mode = reduction;
  record(OpKind::MseLoss, {a, b}, diff2, at);
  return diff2;
}

}  // namespace mini
