// nn_kernels.cpp — the composite kernels torch also runs as one kernel each: softmax and
// log_softmax along a dim, layer_norm over trailing dims, mse_loss.
#include <algorithm>
#include <cstring>
#include <vector>
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

void check_softmax(const Tensor& a, int64_t dim, bool log) {
  require_floating(a, log ? "log_softmax" : "softmax");
  wrap_dim(dim, a->dim());
}

Tensor softmax(const Tensor& a_in, int64_t dim_in, bool log) {
  if (!a_in) fail_type("softmax(): argument 'input' must be a Tensor, not None");
  if (autocast_state().on(a_in->device()))  // bfloat16 in, float32 out (autograd.h)
    if (Tensor a = autocast_inputs(log ? OpKind::LogSoftmax : OpKind::Softmax, {a_in})[0]; a != a_in)
      return softmax(a, dim_in, log);
  check_softmax(a_in, dim_in, log);
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

void check_layer_norm(const Tensor& x, const Shape& normalized_shape, const Tensor& weight, const Tensor& bias) {
  require_floating(x, "layer_norm");
  auto same = [](int64_t a, int64_t b) { return a < 0 || b < 0 || a == b; };  // symbols: unknown
  int64_t k = normalized_shape.size(), r = x->dim();
  bool ok = k <= r && k > 0;
  for (int64_t i = 0; ok && i < k; i++) ok = same(x->sizes[r - k + i], normalized_shape[i]);
  if (!ok)
    fail("Given normalized_shape=", shape_str(normalized_shape), ", expected input with shape [*",
         [&] { std::string s; for (auto v : normalized_shape) s += ", " + std::to_string(v); return s; }(),
         "], but got input of size", shape_str(x->sizes));
  for (const Tensor* p : {&weight, &bias}) {
    if (*p && !std::equal((*p)->sizes.begin(), (*p)->sizes.end(), normalized_shape.begin(), normalized_shape.end(), same))
      fail("layer_norm: ", p == &weight ? "weight" : "bias", " of shape ", shape_str((*p)->sizes),
           " does not match normalized_shape ", shape_str(normalized_shape));
    if (*p && (*p)->dtype != x->dtype)
      fail("layer_norm: expected ", p == &weight ? "weight" : "bias", " to have dtype ",
           dtype_name(x->dtype), " but got ", dtype_name((*p)->dtype));
  }
}

Tensor layer_norm(const Tensor& x_in, const Shape& normalized_shape, const Tensor& weight,
                  const Tensor& bias, double eps) {
  if (!x_in) fail_type("layer_norm(): argument 'input' must be a Tensor, not None");
  if (autocast_state().on(x_in->device())) {  // in float32 (autograd.h)
    std::vector<Tensor> in = autocast_inputs(OpKind::LayerNorm, {x_in, weight, bias});
    if (in[0] != x_in || in[1] != weight || in[2] != bias)
      return layer_norm(in[0], normalized_shape, in[1], in[2], eps);
  }
  check_layer_norm(x_in, normalized_shape, weight, bias);
  int64_t k = normalized_shape.size();
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

std::vector<Tensor> layer_norm_backward(const Tensor& g_in, const std::vector<Tensor>& in, const Attrs& a,
                                        const std::vector<bool>& need) {
  const Tensor& x_in = in[0];
  const Tensor w = in.size() > 1 ? in[1] : nullptr, b = in.size() > 2 ? in[2] : nullptr;
  if (!x_in->is_cuda()) return {};  // the CPU: derivatives.h's rule, as eager ops
  Tensor x = contiguous(x_in), g = contiguous(cast(g_in, x_in->dtype));
  const int64_t cols = numel_of(Shape(x->sizes.end() - a.dim, x->sizes.end())), rows = cols ? x->numel() / cols : 0;
  std::vector<Tensor> grads(in.size());
  if (need[0]) grads[0] = TensorImpl::empty(x->sizes, x->dtype, x->device());
  if (w && need.size() > 1 && need[1]) grads[1] = TensorImpl::empty(w->sizes, x->dtype, x->device());
  if (b && need.size() > 2 && need[2]) grads[2] = TensorImpl::empty(b->sizes, x->dtype, x->device());
  cuda::layer_norm_backward(grads[0], grads.size() > 1 ? grads[1] : nullptr, grads.size() > 2 ? grads[2] : nullptr, g,
                            x, w ? contiguous(cast(w, x->dtype)) : nullptr, rows, cols, a.eps);
  count_kernel(3 * x->nbytes() + 2 * g->nbytes() + (grads[0] ? grads[0]->nbytes() : 0));
  return grads;
}

void check_mse_loss(const Tensor& a, const Tensor& b, const std::string& reduction) {
  if (reduction != "mean" && reduction != "sum" && reduction != "none")
    fail_value(reduction, " is not a valid value for reduction: use 'mean', 'sum' or 'none'");
  DType dt = result_type({a, b});
  if (!is_floating(dt)) fail("mse_loss(): expected floating point inputs, got ", dtype_name(dt));
  broadcast_shapes(a->sizes, b->sizes);
}

Tensor mse_loss(const Tensor& a, const Tensor& b, const std::string& reduction) {
  if (!a || !b) fail_type("mse_loss(): arguments must be Tensors, not None");
  if (autocast_state().on(a->device())) {  // in float32 (autograd.h)
    std::vector<Tensor> in = autocast_inputs(OpKind::MseLoss, {a, b});
    if (in[0] != a || in[1] != b) return mse_loss(in[0], in[1], reduction);
  }
  check_mse_loss(a, b, reduction);
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

// ---- cross_entropy: log_softmax and the target's pick in one pass --------------------------
// Eager F.cross_entropy's kernel (inside mini.compile the loss is log_softmax and a one-hot
// select, which fusion sees). A row's log-sum-exp and nll = lse - x[target] in one read of the
// logits; the backward, dx = g (exp(x - lse) - [j == target]), in one more read and one write.
// At GPT-2's [8192, 50304] the ops it replaces wrote four float32 copies of the logits.

namespace {

template <class T>
void cross_entropy_rows(const T* x, const int64_t* target, opmath_t<T>* nll, opmath_t<T>* lse, int64_t rows,
                        int64_t n, int64_t ignore_index) {
  using A = opmath_t<T>;
#pragma omp parallel for if (rows * n >= kParallelGrain)
  for (int64_t r = 0; r < rows; r++) {
    const T* row = x + r * n;
    A mx = -INFINITY;
    for (int64_t j = 0; j < n; j++) mx = A(row[j]) > mx ? A(row[j]) : mx;
    A sum = 0;
    for (int64_t j = 0; j < n; j++) sum += exp_of<A>(A(row[j]) - mx);
    const A l = mx + std::log(sum);
    const int64_t t = target[r];
    lse[r] = l;
    nll[r] = t == ignore_index ? A(0) : (t >= 0 && t < n) ? l - A(row[t]) : A(NAN);
  }
}

template <class T>
void cross_entropy_backward_rows(const T* x, const int64_t* target, const opmath_t<T>* g, const opmath_t<T>* lse,
                                 T* dx, int64_t rows, int64_t n, int64_t ignore_index) {
  using A = opmath_t<T>;
#pragma omp parallel for if (rows * n >= kParallelGrain)
  for (int64_t r = 0; r < rows; r++) {
    const int64_t t = target[r];
    const T* row = x + r * n;
    T* out = dx + r * n;
    if (t == ignore_index || t < 0 || t >= n) {  // no loss, or a NaN one: no gradient
      for (int64_t j = 0; j < n; j++) out[j] = T(0);
      continue;
    }
    const A gr = g[r], l = lse[r];
    for (int64_t j = 0; j < n; j++) out[j] = T(gr * (exp_of<A>(A(row[j]) - l) - A(j == t)));
  }
}

void cross_entropy_launch(const Tensor& nll, const Tensor& lse, const Tensor& x, const Tensor& target,
                          int64_t ignore_index) {
  const int64_t rows = x->sizes[0], n = x->sizes[1];
  if (x->is_cuda()) return cuda::cross_entropy(nll, lse, x, target, rows, n, ignore_index);
  MINI_DISPATCH(x->dtype, T, [&] {
    if constexpr (is_floating_v<T>)
      cross_entropy_rows<T>(x->data<T>(), target->data<int64_t>(), nll->data<opmath_t<T>>(),
                            lse->data<opmath_t<T>>(), rows, n, ignore_index);
  });
}

struct CrossEntropyBackward : CustomBackward {
  SavedTensor logits, target, lse;
  int64_t ignore_index = -100;

  const char* name() const override { return "NllLoss"; }  // torch's name: NllLossBackward0

  std::vector<Tensor> apply(const std::vector<Tensor>& grad_outputs) override {
    const char* op = name();
    Tensor x = logits.unpack(op), t = target.unpack(op), l = lse.unpack(op);
    Tensor g = contiguous(cast(grad_outputs.at(0), l->dtype));
    Tensor dx = TensorImpl::empty(x->sizes, x->dtype, x->device());
    const int64_t rows = x->sizes[0], n = x->sizes[1];
    if (x->is_cuda()) {
      cuda::cross_entropy_backward(dx, g, x, t, l, rows, n, ignore_index);
    } else {
      MINI_DISPATCH(x->dtype, T, [&] {
        if constexpr (is_floating_v<T>)
          cross_entropy_backward_rows<T>(x->data<T>(), t->data<int64_t>(), g->data<opmath_t<T>>(),
                                         l->data<opmath_t<T>>(), dx->data<T>(), rows, n, ignore_index);
      });
    }
    count_kernel(2 * x->nbytes() + t->nbytes() + g->nbytes() + l->nbytes());
    return {dx};
  }

  void release() override { logits = target = lse = SavedTensor{}; }
};

}  // namespace

Tensor cross_entropy_nll(const Tensor& logits, const Tensor& target, int64_t ignore_index) {
  if (!logits || !target) fail_type("cross_entropy(): arguments must be Tensors, not None");
  require_floating(logits, "cross_entropy");
  if (target->dtype != DType::Int64)
    fail_type("cross_entropy(): target must hold int64 class indices, got ", dtype_name(target->dtype),
              " (use target.long())");
  if (logits->dim() != 2 || target->dim() != 1 || target->sizes[0] != logits->sizes[0])
    fail("cross_entropy(): expected logits [N, C] and target [N], got ", shape_str(logits->sizes), " and ",
         shape_str(target->sizes));
  common_device("cross_entropy", {logits, target});
  // the nll's dtype: log_softmax's under autocast (float32 for bfloat16 logits), else the
  // logits'; the kernel reads bfloat16 logits as they are (widening them is exact)
  DType out_dtype = logits->dtype, to;
  if (autocast_state().on(logits->device()) && autocast_target(OpKind::LogSoftmax, logits->device(), &to) &&
      autocast_casts(logits->dtype, to))
    out_dtype = to;
  const DType acc = logits->dtype == DType::Float64 ? DType::Float64 : DType::Float32;
  Tensor x = contiguous(detach(logits)), t = contiguous(target);
  Tensor nll = TensorImpl::empty({x->sizes[0]}, acc, x->device());
  Tensor lse = TensorImpl::empty({x->sizes[0]}, acc, x->device());
  if (x->sizes[0] > 0) cross_entropy_launch(nll, lse, x, t, ignore_index);
  count_kernel(x->nbytes() + t->nbytes() + nll->nbytes() + lse->nbytes());
  if (should_record({logits})) {
    auto bw = std::make_shared<CrossEntropyBackward>();
    bw->logits.save(x);
    bw->target.save(t);
    bw->lse.save(lse);
    bw->ignore_index = ignore_index;
    attach_custom_backward(nll, bw, {logits});
  }
  return nll->dtype == out_dtype ? nll : cast(nll, out_dtype);
}

// ---- embedding: rows picked by index ------------------------------------------------------

static void check_embedding(const Tensor& weight, const Tensor& indices, const char* what) {
  if (!weight || !indices) fail_type(what, "(): arguments must be Tensors");
  if (indices->dtype != DType::Int64)
    fail_type(what, "(): indices must be int64 (a LongTensor), got ", dtype_name(indices->dtype), "; use .long()");
  if (weight->device() != indices->device())
    fail(what, "(): the weight is on ", weight->device().str(), " and the indices on ", indices->device().str(),
         ": move both to one device (.to(device))");
}

// The indices on the host (a copy where they live on the GPU: each one is checked before any
// is used, as the CPU path does; the backward sorts them on the device instead).
static Tensor host_indices(const Tensor& idx) { return idx->is_cuda() ? to_device(idx, Device::cpu()) : idx; }

// Each index checked against [0, rows): an IndexError naming it, as torch's "index out of range".
static const int64_t* checked_indices(const Tensor& idx, int64_t rows) {
  const int64_t* ix = idx->data<const int64_t>();
  for (int64_t i = 0; i < idx->numel(); i++)
    if (ix[i] < 0 || ix[i] >= rows)
      fail_index("embedding: index ", ix[i], " is out of range for ", rows, " rows (indices must be in [0, ", rows, "))");
  return ix;
}

Tensor embedding(const Tensor& weight_in, const Tensor& indices_in) {
  check_embedding(weight_in, indices_in, "embedding");
  if (weight_in->sizes.size() != 2) fail("embedding(): weight must be 2-D [num_embeddings, dim], got ",
                                         shape_str(weight_in->sizes));
  Tensor weight = contiguous(detach(weight_in)), idx = contiguous(detach(indices_in));
  const int64_t rows = weight->sizes[0], d = weight->sizes[1];
  Shape out_shape = idx->sizes;
  out_shape.push_back(d);
  Tensor out = TensorImpl::empty(out_shape, weight->dtype, weight->device());
  const Tensor host = host_indices(idx);  // keeps the checked values alive while `ix` reads them
  const int64_t* ix = checked_indices(host, rows);
  if (weight->is_cuda()) {
    cuda::embedding(out, weight, idx);
  } else {
    const size_t row_bytes = size_t(d) * itemsize(weight->dtype);
    const char* w = static_cast<const char*>(weight->raw());
    char* o = static_cast<char*>(out->raw());
    for (int64_t i = 0; i < idx->numel(); i++) std::memcpy(o + i * row_bytes, w + ix[i] * row_bytes, row_bytes);
  }
  count_kernel(idx->nbytes() + 2 * out->nbytes());
  record(OpKind::Embedding, {weight_in, indices_in}, out, Attrs{});
  return out;
}

Tensor embedding_backward(const Tensor& grad_in, const Tensor& indices_in, const Shape& weight_shape) {
  check_embedding(grad_in, indices_in, "embedding_backward");
  if (weight_shape.size() != 2) fail("embedding_backward(): the weight's shape must be 2-D, got ", shape_str(weight_shape));
  Tensor grad = contiguous(detach(grad_in)), idx = contiguous(detach(indices_in));
  const int64_t rows = weight_shape[0], d = weight_shape[1];
  if (grad->numel() != idx->numel() * d)
    fail("embedding_backward(): grad ", shape_str(grad->sizes), " does not match indices ", shape_str(idx->sizes),
         " and rows of ", d);
  Tensor out = zeros(weight_shape, grad->dtype, grad->device());
  if (grad->is_cuda()) {
    // sorted by row on the device, never waiting for the host (the forward checked these
    // indices; one outside [0, rows) is skipped there, never written)
    NoGradGuard no_grad;
    cuda::embedding_backward(out, grad, idx, arange(0, double(idx->numel()), 1, DType::Int64, grad->device()));
  } else {
    MINI_DISPATCH(grad->dtype, T, [&] {
      if constexpr (is_floating_v<T>) {
        const int64_t* ix = checked_indices(idx, rows);
        const T* g = grad->data<const T>();
        T* o = out->data<T>();
        for (int64_t i = 0; i < idx->numel(); i++)  // in index order: a row's sum is deterministic
          for (int64_t j = 0; j < d; j++) {
            T& acc = o[ix[i] * d + j];  // added in double, rounded once to T
            acc = static_cast<T>(static_cast<double>(acc) + static_cast<double>(g[i * d + j]));
          }
      } else {
        fail("embedding_backward(): expected a floating point gradient, got ", dtype_name(grad->dtype));
      }
    });
  }
  count_kernel(grad->nbytes() + idx->nbytes() + out->nbytes());
  Attrs at;
  at.shape = weight_shape;
  record(OpKind::EmbeddingBackward, {grad_in, indices_in}, out, at);
  return out;
}

}  // namespace mini
