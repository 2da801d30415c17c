// attention.cpp — scaled dot-product attention as one kernel: what
// F.scaled_dot_product_attention runs eagerly (torch's eager runs a fused kernel too), and what
// a compiled graph's Attention and AttentionBackward nodes call (attention_forward,
// attention_backward: extern calls, as Inductor calls aten's flash attention). Where the tiled
// kernel does not run (mini.config.fused_attention, attention_node_fits), a compiled graph
// holds the matmuls and softmax instead, which fusion sees.
//
// Forward, for each row i of query (per batch and head): the scores s_j = scale * q_i . k_j over
// the keys it may see (all, or j <= i under is_causal: torch's top-left triangle), then
// out_i = sum_j softmax(s)_j v_j. The [L, S] matrix of scores is never written to memory: a CPU
// thread keeps one row of it, a CUDA warp a running max and sum ("online softmax",
// cuda/attention.cu). It also writes each row's log-sum-exp, lse_i = log sum_j exp(s_j) (float32,
// float64 for float64 operands), which is all the backward needs to rebuild the softmax.
//
// Backward (a custom autograd node, run as eager ops on either device):
//   P  = exp(scale * Q K^T - lse)       the softmax, rebuilt (masked entries 0)
//   dV = P^T dO          dP = dO V^T     D = rowsum(dO * O)
//   dS = P * (dP - D)    dQ = scale * dS K      dK = scale * dS^T Q
// For bfloat16 inputs the matmuls run in bfloat16 (float32 accumulation) and the softmax's
// algebra in float32. On CUDA, bfloat16 with head dim 64 or 128 runs FlashAttention-2's
// backward instead (cuda/flash_attention.cu), the same formulas tile by tile.
#include <cmath>
#include <vector>

#include "autograd.h"
#include "cuda/kernels.h"
#include "loops.h"
#include "metrics.h"
#include "ops.h"
#include "shape.h"

namespace mini {

namespace {

// One query row against its keys, in A (float for float32 and bfloat16, double for float64).
// `scores` is the calling thread's scratch of S entries.
template <class T>
void attention_kernel(const T* q, const T* k, const T* v, T* out, opmath_t<T>* lse, int64_t heads, int64_t L,
                      int64_t S, int64_t E, int64_t Ev, bool causal, double scale) {
  using A = opmath_t<T>;
#pragma omp parallel if (heads * L * S * (E + Ev) >= kParallelGrain)
  {
    std::vector<A> scores(S), acc(Ev);
#pragma omp for
    for (int64_t row = 0; row < heads * L; row++) {
      const int64_t h = row / L, i = row % L;
      const T* qi = q + row * E;
      const T* kh = k + h * S * E;
      const T* vh = v + h * S * Ev;
      const int64_t seen = causal ? std::min(S, i + 1) : S;  // keys j < seen
      A max = -INFINITY;
      for (int64_t j = 0; j < seen; j++) {
        const T* kj = kh + j * E;
        A dot = 0;
        for (int64_t e = 0; e < E; e++) dot += A(qi[e]) * A(kj[e]);
        scores[j] = dot * A(scale);
        max = scores[j] > max ? scores[j] : max;
      }
      std::fill(acc.begin(), acc.end(), A(0));
      A sum = 0;
      for (int64_t j = 0; j < seen; j++) {
        A p = std::exp(scores[j] - max);
        sum += p;
        const T* vj = vh + j * Ev;
        for (int64_t e = 0; e < Ev; e++) acc[e] += p * A(vj[e]);
      }
      T* o = out + row * Ev;
      for (int64_t e = 0; e < Ev; e++) o[e] = T(acc[e] / sum);
      lse[row] = max + std::log(sum);
    }
  }
}

// The backward of one fused attention call, from its saved inputs, output and lse.
struct AttentionBackward : CustomBackward {
  SavedTensor q, k, v, out, lse;
  bool causal = false;
  double scale = 1;

  const char* name() const override { return "ScaledDotProductAttention"; }

  std::vector<Tensor> apply(const std::vector<Tensor>& grad_outputs) override {
    const char* op = name();
    Tensor g = grad_outputs.empty() ? nullptr : grad_outputs[0];
    return attention_backward(q.unpack(op), k.unpack(op), v.unpack(op), out.unpack(op), lse.unpack(op), g, causal,
                              scale);
  }

  void release() override { q = k = v = out = lse = SavedTensor{}; }
};

// The five matmuls run in the inputs' dtype (for bfloat16 the GEMMs accumulate in float32
// and round their result once, as FlashAttention's backward does); the softmax in between
// (P, D, dS) is float32.
std::vector<Tensor> backward_by_ops(const Tensor& Q, const Tensor& K, const Tensor& V, const Tensor& O,
                                    const Tensor& lse, const Tensor& dO, bool causal, double scale) {
  const DType dtype = Q->dtype;
  const DType compute = dtype == DType::BFloat16 ? DType::Float32 : dtype;
  const int64_t r = Q->dim();
  auto scalar = [&](double x) { return scalar_tensor(x, compute, true); };
  auto T = [&](const Tensor& t) { return transpose(t, r - 2, r - 1); };
  Tensor s = binary(OpKind::Mul, cast(matmul(Q, T(K)), compute), scalar(scale));
  if (causal) {  // entries j > i: -inf, so that P is 0 there
    const int64_t L = Q->sizes[r - 2], S = K->sizes[r - 2];
    Tensor i = unsqueeze(arange(0, double(L), 1, DType::Int64, Q->device()), 1);
    Tensor j = unsqueeze(arange(0, double(S), 1, DType::Int64, Q->device()), 0);
    s = masked_fill(s, binary(OpKind::Gt, j, i), scalar_tensor(-INFINITY, compute));
  }
  Tensor P = unary(OpKind::Exp, binary(OpKind::Sub, s, unsqueeze(cast(lse, compute), r - 1)));
  Tensor dV = matmul(T(cast(P, dtype)), dO);
  Tensor dP = cast(matmul(dO, T(V)), compute);
  Tensor D = reduce(OpKind::Sum, binary(OpKind::Mul, cast(dO, compute), cast(O, compute)), {r - 1}, true);
  Tensor dS = cast(binary(OpKind::Mul, binary(OpKind::Mul, P, binary(OpKind::Sub, dP, D)), scalar(scale)), dtype);
  return {matmul(dS, K), matmul(T(dS), Q), dV};
}

}  // namespace

bool fused_attention_supports(const Tensor& q, const Tensor& k, const Tensor& v, std::string* why) {
  auto no = [&](std::string reason) {
    if (why) *why = std::move(reason);
    return false;
  };
  if (!q || !k || !v) return no("query, key and value must be tensors");
  const int64_t r = q->dim();
  if (r < 2 || k->dim() != r || v->dim() != r) return no("query, key and value must have the same number of dims (at least 2)");
  for (int64_t d = 0; d < r - 2; d++)
    if (k->sizes[d] != q->sizes[d] || v->sizes[d] != q->sizes[d])
      return no("the batch dims of query, key and value differ (broadcast)");
  if (k->sizes[r - 1] != q->sizes[r - 1]) return no("query and key have different last dims");
  if (v->sizes[r - 2] != k->sizes[r - 2]) return no("key and value have different lengths");
  if (k->sizes[r - 2] == 0 || q->sizes[r - 1] == 0) return no("no keys, or empty vectors");
  if (k->dtype != q->dtype || v->dtype != q->dtype) return no("query, key and value have different dtypes");
  if (!is_floating(q->dtype)) return no("query is not floating point");
  if (k->device() != q->device() || v->device() != q->device()) return no("the tensors are on different devices");
  if (q->is_cuda() && !cuda::attention_supports(q->sizes[r - 1], v->sizes[r - 1]))
    return no("the head dim is larger than the CUDA kernel holds");
  return true;
}

Strides attention_out_strides(const Shape& sizes, const Shape& like_sizes, const Strides& like_strides) {
  const size_t r = sizes.size();
  Strides st = contiguous_strides(sizes);
  if (r < 3 || like_sizes.size() != r || like_strides.size() != r || like_sizes[r - 3] < 2 || like_sizes[r - 2] < 2 ||
      like_strides[r - 3] >= like_strides[r - 2])
    return st;
  st[r - 3] = sizes[r - 1];  // [..., T, H, D] in memory
  st[r - 2] = sizes[r - 1] * sizes[r - 3];
  for (size_t d = r - 3; d-- > 0;) st[d] = d + 1 == r - 3 ? st[r - 2] * sizes[r - 2] : st[d + 1] * sizes[d + 1];
  return st;
}

namespace {

// An uninitialized tensor of these sizes at these strides (a dense permutation).
Tensor empty_strided(const Shape& sizes, const Strides& strides, DType dtype, Device device) {
  Tensor t = TensorImpl::empty({numel_of(sizes)}, dtype, device);
  t->sizes = sizes;
  t->strides = strides;
  return t;
}

// `t` in the layout attention writes a result after `like` in (a copy where it differs).
Tensor in_layout_of(const Tensor& t, const Tensor& like) {
  Strides want = attention_out_strides(t->sizes, like->sizes, like->strides);
  if (t->strides == want) return t;
  Tensor out = empty_strided(t->sizes, want, t->dtype, t->device());
  copy_(out, t);
  return out;
}

// On CUDA, for the flash kernels: `t` where they read it in place, else a contiguous copy.
Tensor flash_operand(const Tensor& t) { return cuda::flash_attention_reads(t) ? t : contiguous(t); }

}  // namespace

std::vector<Tensor> attention_forward(const Tensor& q_in, const Tensor& k_in, const Tensor& v_in, bool causal,
                                      double scale) {
  std::string why;
  if (!fused_attention_supports(q_in, k_in, v_in, &why)) fail("scaled_dot_product_attention (fused): ", why);
  const int64_t r = q_in->dim(), L = q_in->sizes[r - 2], S = k_in->sizes[r - 2], E = q_in->sizes[r - 1],
                Ev = v_in->sizes[r - 1];
  const int64_t heads = L ? q_in->numel() / (L * E) : 0;
  const bool flash = q_in->is_cuda() && cuda::flash_attention_supports(q_in->dtype, E, Ev);
  // flash reads its operands where they are (a GPT's transposed heads); the other kernels read rows
  auto operand = [&](const Tensor& t) { return flash ? flash_operand(detach(t)) : contiguous(detach(t)); };
  Tensor q = operand(q_in), k = operand(k_in), v = operand(v_in);
  Shape out_shape = q->sizes;
  out_shape[r - 1] = Ev;
  Tensor out = empty_strided(out_shape, attention_out_strides(out_shape, q_in->sizes, q_in->strides), q->dtype,
                             q->device());
  Tensor dst = flash || out->is_contiguous() ? out : TensorImpl::empty(out_shape, q->dtype, q->device());
  // float64 for float64 operands (the backward rebuilds the softmax from it), float32 otherwise
  const DType lse_dtype = q->dtype == DType::Float64 ? DType::Float64 : DType::Float32;
  Tensor lse = TensorImpl::empty(Shape(q->sizes.begin(), q->sizes.end() - 1), lse_dtype, q->device());
  if (out->is_cuda()) {
    cuda::attention(dst, lse, q, k, v, causal, scale);
  } else {
    MINI_DISPATCH(q->dtype, T, [&] {
      if constexpr (is_floating_v<T>)
        attention_kernel<T>(q->data<T>(), k->data<T>(), v->data<T>(), dst->data<T>(), lse->data<opmath_t<T>>(), heads,
                            L, S, E, Ev, causal, scale);
    });
  }
  if (dst != out) copy_(out, dst);
  count_kernel(q->nbytes() + k->nbytes() + v->nbytes() + out->nbytes() + lse->nbytes());
  return {out, lse};
}

std::vector<Tensor> attention_backward(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& out,
                                       const Tensor& lse, const Tensor& grad_out, bool causal, double scale) {
  const DType dtype = q->dtype;
  const int64_t r = q->dim();
  if (q->numel() == 0)  // no query (or no batch): no score reaches k or v, and the kernels have no rows
    return {zeros(q->sizes, dtype, q->device()), zeros(k->sizes, dtype, q->device()), zeros(v->sizes, dtype, q->device())};
  Tensor dO = grad_out ? cast(grad_out, dtype) : zeros(out->sizes, dtype, q->device());
  if (q->is_cuda() && cuda::flash_attention_supports(dtype, q->sizes[r - 1], v->sizes[r - 1])) {
    // the tensor-core backward (cuda/flash_attention.cu): the scores recomputed tile by tile
    // from the saved lse, never the [L, S] matrix; operands read where they are
    Tensor Q = flash_operand(q), K = flash_operand(k), V = flash_operand(v), O = flash_operand(out);
    dO = flash_operand(dO);
    auto grad_like = [&](const Tensor& t) {
      return empty_strided(t->sizes, attention_out_strides(t->sizes, t->sizes, t->strides), dtype, t->device());
    };
    Tensor dQ = grad_like(q), dK = grad_like(k), dV = grad_like(v);
    cuda::flash_attention_backward(dQ, dK, dV, Q, K, V, O, dO, contiguous(lse), causal, scale);
    count_kernel(3 * (Q->nbytes() + K->nbytes() + V->nbytes()) + dO->nbytes() + O->nbytes());
    return {dQ, dK, dV};
  }
  std::vector<Tensor> g = backward_by_ops(q, k, v, out, lse, dO, causal, scale);
  return {in_layout_of(g[0], q), in_layout_of(g[1], k), in_layout_of(g[2], v)};
}

bool attention_node_fits(const Tensor& q, const Tensor& k, const Tensor& v, const std::string& policy) {
  if (policy == "never") return false;
  if (policy != "auto" && policy != "always")
    fail("mini.config.fused_attention must be 'auto', 'always' or 'never', got '", policy, "'");
  for (const Tensor* t : {&q, &k, &v})
    if (!*t) return false;
    else
      for (int64_t s : (*t)->sizes)
        if (s < 0) return false;  // a dynamic size: the decomposition handles every value
  if (!fused_attention_supports(q, k, v, nullptr)) return false;
  const int64_t r = q->dim();
  return policy == "always" ||
         (q->is_cuda() && cuda::flash_attention_supports(q->dtype, q->sizes[r - 1], v->sizes[r - 1]));
}

std::vector<Tensor> attention_with_grad(const Tensor& q, const Tensor& k, const Tensor& v, bool causal, double scale) {
  std::vector<Tensor> fwd = attention_forward(q, k, v, causal, scale);
  const Tensor &out = fwd[0], &lse = fwd[1];
  if (should_record({q, k, v})) {  // the output's gradient; the lse carries none
    auto bw = std::make_shared<AttentionBackward>();
    bw->q.save(detach(q));
    bw->k.save(detach(k));
    bw->v.save(detach(v));
    bw->out.save(detach(out));
    bw->lse.save(lse);
    bw->causal = causal;
    bw->scale = scale;
    attach_custom_backward(out, bw, {q, k, v});
  }
  return fwd;
}

Tensor scaled_dot_product_attention(const Tensor& q_in, const Tensor& k_in, const Tensor& v_in, bool causal,
                                    double scale, Tensor* lse_out) {
  Tensor q = q_in, k = k_in, v = v_in;
  if (autocast_state().on(q->device())) {  // torch's lower-precision list has attention
    DType to;
    if (autocast_target(OpKind::Attention, q->device(), &to))
      for (Tensor* t : {&q, &k, &v})
        if (autocast_casts((*t)->dtype, to)) *t = cast(*t, to);
  }
  std::vector<Tensor> fwd = attention_with_grad(q, k, v, causal, scale);
  if (lse_out) *lse_out = fwd[1];
  return fwd[0];
}

}  // namespace mini
