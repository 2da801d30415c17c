// derivatives.h — every differentiable op's derivative rule, once.
//
// A rule maps the gradient of an op's output to gradients of its inputs, using only other
// ops. It is written against a "builder" F so that the same rule runs in two worlds:
//   * eager autograd (autograd.cpp): F::Value is a Tensor and F::call runs the op now;
//   * the joint forward/backward graph (mini/autograd): F::Value is a graph value and
//     F::call appends a node.
// F must provide:
//   Value call(OpKind, std::vector<Value>, Attrs)    apply an op
//   Shape shape(const Value&);  DType dtype(const Value&)
//   Value scalar(double, DType)                      a 0-d constant
//   bool prefers_transposed_grad(const Value& w)     w is a transposed matrix (matmul's rule
//                                                    then gives its gradient transposed)
// A default-constructed Value means "no gradient" (and must test false).
#pragma once
#include <algorithm>
#include <numeric>
#include <vector>

#include "errors.h"
#include "op.h"

namespace mini {

template <class F>
struct Rules {
  using V = typename F::Value;
  F& f;

  // ---- small vocabulary on top of F::call --------------------------------------------
  V op(OpKind k, std::vector<V> in, Attrs a = {}) { return f.call(k, std::move(in), a); }
  V add(V a, V b) { return op(OpKind::Add, {a, b}); }
  V sub(V a, V b) { return op(OpKind::Sub, {a, b}); }
  V mul(V a, V b) { return op(OpKind::Mul, {a, b}); }
  V div(V a, V b) { return op(OpKind::Div, {a, b}); }
  V neg(V a) { return op(OpKind::Neg, {a}); }
  V num(double x, const V& like) { return f.scalar(x, f.dtype(like)); }
  V cast(V a, DType d) {
    if (f.dtype(a) == d) return a;
    Attrs at; at.dtype = d;
    return op(OpKind::Cast, {a}, at);
  }
  V reshape(V a, const Shape& s) {
    if (f.shape(a) == s) return a;
    Attrs at; at.shape = s;
    return op(OpKind::Reshape, {a}, at);
  }
  V expand(V a, const Shape& s) {
    if (f.shape(a) == s) return a;
    Attrs at; at.shape = s;
    return op(OpKind::Expand, {a}, at);
  }
  V sum(V a, std::vector<int64_t> dims, bool keepdim) {
    Attrs at; at.dims = std::move(dims); at.keepdim = keepdim;
    return op(OpKind::Sum, {a}, at);
  }
  V transpose_last(V a) {
    Attrs at; at.dim = -1; at.dim2 = -2;
    return op(OpKind::Transpose, {a}, at);
  }

  // Sums a broadcast gradient back to `shape` (the input's shape before broadcasting).
  V sum_to(V g, const Shape& shape) {
    Shape gs = f.shape(g);
    if (gs == shape) return g;
    size_t lead = gs.size() - shape.size();
    std::vector<int64_t> dims;
    bool only_lead = true;  // only leading dims summed: the sum without keepdim has the shape
    for (size_t i = 0; i < gs.size(); i++)
      if (i < lead || (shape[i - lead] == 1 && gs[i] != 1)) {
        dims.push_back((int64_t)i);
        only_lead = only_lead && i < lead;
      }
    // A bias's gradient, [B, T, C] summed to [C], is the sum itself, not a view of a kept-dims
    // sum: a cast of it (autocast's float32 of a bfloat16 bias) then fuses into the sum's kernel.
    if (only_lead && !dims.empty()) return sum(g, dims, false);
    if (!dims.empty()) g = sum(g, dims, true);
    return reshape(g, shape);
  }

  // Re-inserts reduced dims (kept as size 1) so that a reduction's gradient broadcasts.
  V unreduce(V g, const Shape& in_shape, const Attrs& a) {
    if (a.keepdim || in_shape.empty()) return reshape(g, in_shape.empty() ? Shape{} : f.shape(g));
    std::vector<int64_t> dims = a.dims;
    int64_t rank = (int64_t)in_shape.size();
    if (dims.empty()) {
      dims.resize(rank);
      std::iota(dims.begin(), dims.end(), 0);
    }
    for (auto& d : dims) d = d < 0 ? d + rank : d;
    Shape kept = in_shape;
    for (int64_t d : dims) kept[d] = 1;
    return reshape(g, kept);
  }

  int64_t reduced_count(const Shape& in_shape, const Attrs& a) {
    if (a.dims.empty()) {
      int64_t n = 1;
      for (auto s : in_shape) n *= s;
      return n;
    }
    int64_t n = 1, rank = (int64_t)in_shape.size();
    if (rank == 0) return 1;
    for (int64_t d : a.dims) n *= in_shape[d < 0 ? d + rank : d];
    return n;
  }

  // ---- the rules ---------------------------------------------------------------------
  // g: gradient of the output; in: the op's inputs; out: its output; need[i]: whether
  // input i wants a gradient. Returns one gradient (or none) per input.
  std::vector<V> apply(OpKind k, const Attrs& a, V g, const std::vector<V>& in, const V& out,
                       const std::vector<bool>& need) {
    // A1 BEGIN: derivative rules
    MINI_KIT_STUB(A1);
    std::vector<V> gi(in.size());
    auto shp = [&](size_t i) { return f.shape(in[i]); };
    switch (k) {
      case OpKind::Add:
        if (need[0]) gi[0] = sum_to(g, shp(0));
        if (need[1]) gi[1] = sum_to(g, shp(1));
        break;
      case OpKind::Sub:
        if (need[0]) gi[0] = sum_to(g, shp(0));
        if (need[1]) gi[1] = sum_to(neg(g), shp(1));
        break;
      case OpKind::Mul:
        if (need[0]) gi[0] = sum_to(mul(g, in[1]), shp(0));
        if (need[1]) gi[1] = sum_to(mul(g, in[0]), shp(1));
        break;
      case OpKind::Div:
        if (need[0]) gi[0] = sum_to(div(g, in[1]), shp(0));
        if (need[1]) gi[1] = sum_to(neg(div(mul(g, in[0]), mul(in[1], in[1]))), shp(1));
        break;
      case OpKind::Pow: {  // out = x ** y; torch's values where the formulas give 0 * inf:
        // d/dx is 0 where y == 0 (x ** 0 is 1 everywhere, 0 * 0 ** -1 is nan), d/dy is 0 where
        // x == 0 and y >= 0 (0 ** y is 0 there, 0 * log(0) is nan)
        V zero = num(0.0, g);
        if (need[0]) {
          V y_minus_1 = sub(in[1], num(1.0, in[1]));
          V dx = mul(in[1], op(OpKind::Pow, {in[0], y_minus_1}));
          dx = op(OpKind::Where, {op(OpKind::Eq, {in[1], num(0.0, in[1])}), zero, dx});
          gi[0] = sum_to(mul(g, dx), shp(0));
        }
        if (need[1]) {
          V dy = mul(out, op(OpKind::Log, {in[0]}));
          V flat = op(OpKind::Where, {op(OpKind::Ge, {in[1], num(0.0, in[1])}), zero, dy});
          dy = op(OpKind::Where, {op(OpKind::Eq, {in[0], num(0.0, in[0])}), flat, dy});
          gi[1] = sum_to(mul(g, dy), shp(1));
        }
        break;
      }
      case OpKind::Maximum:
      case OpKind::Minimum: {  // ties split the gradient evenly, as torch
        OpKind wins = k == OpKind::Maximum ? OpKind::Gt : OpKind::Lt;
        V tie = mul(cast(op(OpKind::Eq, {in[0], in[1]}), f.dtype(g)), num(0.5, g));
        if (need[0]) {
          V m = add(cast(op(wins, {in[0], in[1]}), f.dtype(g)), tie);
          gi[0] = sum_to(mul(g, m), shp(0));
        }
        if (need[1]) {
          V m = add(cast(op(wins, {in[1], in[0]}), f.dtype(g)), tie);
          gi[1] = sum_to(mul(g, m), shp(1));
        }
        break;
      }
      case OpKind::Where: {  // where(c, a, b)
        V zero = num(0.0, g);
        if (need[1]) gi[1] = sum_to(op(OpKind::Where, {in[0], g, zero}), shp(1));
        if (need[2]) gi[2] = sum_to(op(OpKind::Where, {in[0], zero, g}), shp(2));
        break;
      }
      case OpKind::Neg: gi[0] = neg(g); break;
      case OpKind::Abs: gi[0] = mul(g, op(OpKind::Sign, {in[0]})); break;
      case OpKind::Sign: gi[0] = mul(g, num(0.0, g)); break;  // flat almost everywhere
      case OpKind::SliceBackward: {  // the gradient of "scatter g into zeros" is g's slice
        Attrs at; at.dim = a.dim; at.start = a.start; at.end = a.end; at.step = a.step;
        gi[0] = op(OpKind::Slice, {g}, at);
        break;
      }
      case OpKind::SliceScatter: {  // base's gradient outside the slice, src's inside it
        Attrs at; at.dim = a.dim; at.start = a.start; at.end = a.end; at.step = a.step;
        if (need[0]) gi[0] = op(OpKind::SliceScatter, {g, num(0.0, g)}, at);
        if (need[1]) gi[1] = sum_to(op(OpKind::Slice, {g}, at), shp(1));
        break;
      }
      case OpKind::Exp: gi[0] = mul(g, out); break;
      case OpKind::Log: gi[0] = div(g, in[0]); break;
      case OpKind::Sin: gi[0] = mul(g, op(OpKind::Cos, {in[0]})); break;
      case OpKind::Cos: gi[0] = neg(mul(g, op(OpKind::Sin, {in[0]}))); break;
      case OpKind::Tanh: gi[0] = mul(g, sub(num(1.0, out), mul(out, out))); break;
      case OpKind::Sigmoid: gi[0] = mul(g, mul(out, sub(num(1.0, out), out))); break;
      case OpKind::Relu:
        gi[0] = op(OpKind::Where, {op(OpKind::Gt, {out, num(0.0, out)}), g, num(0.0, g)});
        break;
      case OpKind::Sqrt: gi[0] = div(g, mul(out, num(2.0, out))); break;
      case OpKind::Rsqrt: gi[0] = mul(g, mul(mul(out, mul(out, out)), num(-0.5, out))); break;
      case OpKind::Gelu: {
        Attrs at; at.mode = a.mode;
        gi[0] = op(OpKind::GeluBackward, {g, in[0]}, at);
        break;
      }
      case OpKind::Cast: gi[0] = cast(g, f.dtype(in[0])); break;
      case OpKind::Clone: gi[0] = g; break;
      case OpKind::Sum: gi[0] = expand(unreduce(g, shp(0), a), shp(0)); break;
      case OpKind::Mean: {
        V scaled = div(g, num((double)reduced_count(shp(0), a), g));
        gi[0] = expand(unreduce(scaled, shp(0), a), shp(0));
        break;
      }
      case OpKind::Amax:
      case OpKind::Amin: {  // the gradient goes to the extremal elements, split on ties
        Attrs keep = a; keep.keepdim = true;
        V hit = cast(op(OpKind::Eq, {in[0], unreduce(out, shp(0), a)}), f.dtype(g));
        V count = op(OpKind::Sum, {hit}, keep);
        gi[0] = mul(div(unreduce(g, shp(0), a), count), hit);
        break;
      }
      case OpKind::Reshape: gi[0] = reshape(g, shp(0)); break;
      case OpKind::Transpose: {
        Attrs at; at.dim = a.dim; at.dim2 = a.dim2;
        gi[0] = op(OpKind::Transpose, {g}, at);
        break;
      }
      case OpKind::Permute: {
        Attrs at; at.dims.resize(a.dims.size());
        int64_t r = (int64_t)a.dims.size();
        for (int64_t i = 0; i < r; i++) at.dims[(a.dims[i] + r) % r] = i;
        gi[0] = op(OpKind::Permute, {g}, at);
        break;
      }
      case OpKind::Unsqueeze:
      case OpKind::Squeeze: gi[0] = reshape(g, shp(0)); break;
      case OpKind::Expand: gi[0] = sum_to(g, shp(0)); break;
      case OpKind::Slice: {
        Shape in_s = shp(0);
        int64_t d = a.dim < 0 ? a.dim + (int64_t)in_s.size() : a.dim;
        if (a.start == 0 && a.step == 1 && a.end >= in_s[d] && in_s[d] >= 0) {
          gi[0] = g;  // the whole dim (x[:, :, a:b] slices dims 0 and 1 whole): no zeros to fill
          break;
        }
        Attrs at = a; at.shape = in_s;
        gi[0] = op(OpKind::SliceBackward, {g}, at);
        break;
      }
      case OpKind::Select: {
        Shape in_s = shp(0);
        int64_t d = a.dim < 0 ? a.dim + (int64_t)in_s.size() : a.dim;
        Shape kept = in_s; kept[d] = 1;
        Attrs at; at.shape = in_s; at.dim = d;
        at.start = a.index; at.end = a.index + 1; at.step = 1;
        gi[0] = op(OpKind::SliceBackward, {reshape(g, kept)}, at);
        break;
      }
      case OpKind::Matmul: gi = matmul(g, in, need); break;
      case OpKind::Softmax: {
        Attrs at; at.dims = {a.dim}; at.keepdim = true;
        V gy = mul(g, out);
        gi[0] = sub(gy, mul(out, op(OpKind::Sum, {gy}, at)));
        break;
      }
      case OpKind::LogSoftmax: {
        Attrs at; at.dims = {a.dim}; at.keepdim = true;
        gi[0] = sub(g, mul(op(OpKind::Exp, {out}), op(OpKind::Sum, {g}, at)));
        break;
      }
      case OpKind::LayerNorm: gi = layer_norm(a, g, in, need); break;
      case OpKind::Attention: {  // from the saved inputs, output and log-sum-exp (FlashAttention's)
        if (a.index != 0) fail("derivative for attention's log-sum-exp is not implemented");
        Attrs lse_of = a;
        lse_of.index = 1;  // the same call's other output (the joint graph finds it, not a second call)
        V lse = op(OpKind::Attention, in, lse_of);
        for (int64_t i = 0; i < 3; i++) {
          if (!need[i]) continue;
          Attrs at = a;
          at.index = i;
          gi[i] = op(OpKind::AttentionBackward, {in[0], in[1], in[2], out, lse, g}, at);
        }
        break;
      }
      case OpKind::MseLoss: {  // out = reduce((a - b)^2)
        V diff = sub(in[0], in[1]);
        V scale = num(a.mode == "mean" ? 2.0 / (double)reduced_count(f.shape(diff), Attrs{}) : 2.0, g);
        V ga = mul(mul(g, scale), diff);
        if (need[0]) gi[0] = sum_to(ga, shp(0));
        if (need[1]) gi[1] = sum_to(neg(ga), shp(1));
        break;
      }
      case OpKind::Embedding: {  // out = weight[indices]: each picked row's gradient added back
        Attrs at; at.shape = shp(0);
        if (need[0]) gi[0] = op(OpKind::EmbeddingBackward, {g, in[1]}, at);
        break;
      }
      case OpKind::EmbeddingBackward:  // a scatter-add by index: its adjoint is the gather
        if (need[0]) gi[0] = op(OpKind::Embedding, {g, in[1]});
        break;
      default:
        fail("derivative for ", op_name(k), " is not implemented");
    }
    return gi;
    // A1 END
  }

  // out = x @ w with torch.matmul's ranks. Eager autograd records only the batched core (ops.cpp
  // wraps a 1-D operand in unsqueeze/squeeze); a captured graph has one matmul node for every
  // rank, so a 1-D operand is read here as torch does: x [K] as the row [1, K], w [K] as the
  // column [K, 1], and the gradient gets back the dim the output lost. Without that, g [B, N]
  // of v [K] @ W [B, K, N] met W^T [B, N, K] as a matrix broadcast over the batch: [B, B, K],
  // summed to [K] over both dims, B times the gradient of an all-ones g.
  std::vector<V> matmul(V g, const std::vector<V>& in, const std::vector<bool>& need) {
    std::vector<V> gi(in.size());
    const Shape xs = f.shape(in[0]), ws = f.shape(in[1]);
    Shape x = xs, w = ws, gs = f.shape(g);
    if (xs.size() == 1) x = {1, xs[0]};
    if (ws.size() == 1) {
      w = {ws[0], 1};
      gs.push_back(1);
    }
    if (xs.size() == 1) gs.insert(gs.end() - 1, 1);
    V xm = reshape(in[0], x), wm = reshape(in[1], w);
    g = reshape(g, gs);
    if (need[0]) gi[0] = reshape(sum_to(op(OpKind::Matmul, {g, transpose_last(wm)}), x), xs);
    if (need[1]) {
      bool fold = w.size() == 2 && x.size() > 2;  // a weight shared by every batch entry
      for (int64_t d : x) fold = fold && d >= 0;  // static sizes (a symbol's product is unknown here)
      if (fold) {  // one matmul over every row of every batch (K x rows @ rows x N), not a batch
                   // of them and a sum over the batch: that made (batch, K, N) first
        int64_t rows = 1;
        for (size_t d = 0; d + 1 < x.size(); d++) rows *= x[d];
        V x2 = reshape(xm, {rows, x.back()}), g2 = reshape(g, {rows, w.back()});
        gi[1] = reshape(weight_grad(x2, g2, in[1]), ws);
      } else if (w.size() == 2 && x.size() == 2) {
        gi[1] = reshape(weight_grad(xm, g, in[1]), ws);
      } else {
        gi[1] = reshape(sum_to(op(OpKind::Matmul, {transpose_last(xm), g}), w), ws);
      }
    }
    return gi;
  }

  // The gradient x^T @ g of a matrix w in x @ w. Where w is a transpose (a Linear's W^T), as
  // (g^T @ x)^T: W's gradient, the transpose of this one, is then g^T @ x itself, contiguous
  // (torch's mm_mat2_backward makes the same choice from w's strides).
  V weight_grad(V x, V g, V w) {
    if (f.prefers_transposed_grad(w)) return transpose_last(op(OpKind::Matmul, {transpose_last(g), x}));
    return op(OpKind::Matmul, {transpose_last(x), g});
  }

  // layer_norm over the last a.dim dims: y = (x - mean) * rstd * w + b.
  std::vector<V> layer_norm(const Attrs& a, V g, const std::vector<V>& in,
                            const std::vector<bool>& need) {
    std::vector<V> gi(in.size());
    Shape xs = f.shape(in[0]);
    Attrs red; red.keepdim = true;
    for (int64_t i = (int64_t)xs.size() - a.dim; i < (int64_t)xs.size(); i++) red.dims.push_back(i);
    V mu = op(OpKind::Mean, {in[0]}, red);
    V xc = sub(in[0], mu);
    V var = op(OpKind::Mean, {mul(xc, xc)}, red);
    V rstd = op(OpKind::Rsqrt, {add(var, num(a.eps, var))});
    V xhat = mul(xc, rstd);
    bool has_w = in.size() > 1 && in[1];
    V gxhat = has_w ? mul(g, in[1]) : g;
    if (need[0]) {
      V m1 = op(OpKind::Mean, {gxhat}, red);
      V m2 = op(OpKind::Mean, {mul(gxhat, xhat)}, red);
      gi[0] = mul(rstd, sub(sub(gxhat, m1), mul(xhat, m2)));
    }
    if (has_w && need[1]) gi[1] = sum_to(mul(g, xhat), f.shape(in[1]));
    if (in.size() > 2 && in[2] && need[2]) gi[2] = sum_to(g, f.shape(in[2]));
    return gi;
  }
};

}  // namespace mini
