// meta.cpp — meta inference: the sizes, strides and dtype of an op's output, computed without
// running it (infer_meta), symbolic sizes included.
//
// In:  an op, its inputs' metas (which are Python numbers: `wrapped`) and its attrs; the graph
//      whose symbols' hints decide relations between sizes.
// Out: the output's TensorMeta, as the eager op would give it; the eager op's error, in its
//      words, where the op would raise. Views run the real view functions on data-less tensors
//      (they only compute sizes and strides); everything else computes its output shape by its
//      rule, one per family of ops (pointwise, reduction, view) or per op. Kernel outputs are
//      contiguous.
// Guarantees: a relation between sizes that a symbol takes part in is decided with the hints
//      and recorded as a fact of the graph (Graph::assume), for a shape guard.
#include <algorithm>

#include "graph.h"
#include "tensor/autograd.h"

namespace mini::graph {

Tensor meta_tensor(const TensorMeta& m, bool wrapped) {
  auto t = std::make_shared<TensorImpl>();
  t->storage = std::make_shared<Storage>();
  t->sizes = m.sizes;
  t->strides = m.strides.size() == m.sizes.size() ? m.strides : contiguous_strides(m.sizes);
  t->dtype = m.dtype;
  t->wrapped_number = wrapped;
  return t;
}

static TensorMeta contiguous_meta(const Shape& sizes, DType dtype) {
  Strides st(sizes.size(), -1);
  int64_t acc = 1;
  for (size_t i = sizes.size(); i-- > 0;) {  // strides right of every symbol are known
    if (acc < 0) break;
    st[i] = acc;
    // unsigned: a zero-size shape's strides may pass int64 (never used to address memory)
    acc = sizes[i] < 0 ? -1 : (int64_t)((uint64_t)acc * (uint64_t)std::max<int64_t>(sizes[i], 1));
  }
  return {sizes, st, dtype, false};
}

static Shape reduced_shape(const Shape& in, const Attrs& a) {
  std::vector<int64_t> dims = wrap_dims(a.dims, (int64_t)in.size());
  Shape out;
  for (int64_t d = 0; d < (int64_t)in.size(); d++) {
    bool red = dims.empty() || std::find(dims.begin(), dims.end(), d) != dims.end();
    if (!red) out.push_back(in[d]);
    else if (a.keepdim) out.push_back(1);
  }
  return out;
}

// ---- size relations with symbols -----------------------------------------------------------
// Where a symbol meets another size, the relation is decided with the hints (Graph::assume,
// which records it as a fact for a shape guard), and a relation that fails raises the eager
// op's error for the sizes seen. An unbacked size has no hint: a graph holding one runs with
// eager kernels, which check it when they run.

// The size a and b broadcast to (a's code where they are equal); false where they do not.
static bool broadcast_dim(Graph& g, int64_t a, int64_t b, int64_t* out) {
  if (a == b || b == 1) *out = a;
  else if (a == 1) *out = b;
  else if (a == kUnbacked || b == kUnbacked) *out = a == kUnbacked ? b : a;
  else if (g.assume(a, '=', b)) *out = a;
  else if (g.assume(a, '=', 1)) *out = b;
  else if (g.assume(b, '=', 1)) *out = a;
  else return false;
  return true;
}

static Shape broadcast_meta(Graph& g, const Shape& a, const Shape& b) {
  size_t n = std::max(a.size(), b.size());
  Shape out(n);
  for (size_t i = 0; i < n; i++) {
    int64_t sa = i < n - a.size() ? 1 : a[i - (n - a.size())];
    int64_t sb = i < n - b.size() ? 1 : b[i - (n - b.size())];
    if (!broadcast_dim(g, sa, sb, &out[i])) {
      broadcast_shapes(g.hints(a), g.hints(b));  // eager's error, for the sizes seen
      fail("shapes ", shape_str(g.hints(a)), " and ", shape_str(g.hints(b)), " cannot be broadcast together");
    }
  }
  return out;
}

static bool same_size(Graph& g, int64_t a, int64_t b) {
  return a == kUnbacked || b == kUnbacked || g.assume(a, '=', b);
}

// The element count of `sizes` as a size code: the symbols in code order, then the
// constant part (so [s0, 3] and [3, s0] give one code).
static int64_t numel_code(Graph& g, const Shape& sizes) {
  int64_t known = 1, code = 1;
  std::vector<int64_t> symbols;
  for (int64_t v : sizes) {
    if (v < 0) symbols.push_back(v);
    else if (__builtin_mul_overflow(known, v, &known)) fail("the element count of shape ", shape_str(sizes), " overflows int64");
  }
  std::sort(symbols.begin(), symbols.end());
  for (int64_t v : symbols) code = g.derive('*', code, v);
  return g.derive('*', code, known);
}

// The length of the slice start:end:step of a dim of size n, where a symbol takes part, as
// eager clamps the bounds (end to n, start to end), each clamp decided with the hints; bounds
// are ints >= 0 or symbols here (capture specializes a dim that a negative bound counts from).
static int64_t slice_length(Graph& g, int64_t n, int64_t start, int64_t end, int64_t step) {
  for (int64_t v : {n, start, end})
    if (v == kUnbacked || (v < 0 && !is_symbol(v))) return kUnbacked;
  if (step < 1) return kUnbacked;
  if (end >= (int64_t(1) << 62) || !g.assume(end, '<', n)) end = n;  // x[1:] ends at a huge int
  if (!g.assume(start, '<', end)) start = end;
  int64_t span = g.derive('-', end, start);
  return step == 1 ? span : g.derive('/', g.derive('+', span, step - 1), step);  // ceil(span / step)
}

// The sizes of a reshape of a tensor with symbolic sizes: numel as (concrete product, symbols);
// a -1 entry is what is left when they cancel, else a derived symbol (the element count over
// the rest, the division exact).
static Shape symbolic_reshape_sizes(Graph& g, const TensorMeta& in, const Attrs& a) {
  int64_t known_in = 1, known_out = 1;
  std::vector<int64_t> sym_in, sym_out;
  bool overflow = false;
  for (int64_t v : in.sizes) {
    if (v < 0) sym_in.push_back(v);
    else overflow |= __builtin_mul_overflow(known_in, v, &known_in);
  }
  int infer_at = -1;
  for (size_t i = 0; i < a.shape.size(); i++) {
    int64_t v = a.shape[i];
    if (v == -1) infer_at = (int)i;
    else if (v < 0) sym_out.push_back(v);
    else overflow |= __builtin_mul_overflow(known_out, v, &known_out);
  }
  if (overflow) fail("the element count of shape ", shape_str(a.shape), " overflows int64");
  Shape s = a.shape;
  bool unbacked = std::count(in.sizes.begin(), in.sizes.end(), kUnbacked) > 0;
  if (infer_at < 0 && !unbacked && !g.assume(numel_code(g, in.sizes), '=', numel_code(g, a.shape)))
    infer_reshape(g.hints(a.shape), numel_of(g.hints(in.sizes)));  // eager's error
  if (infer_at >= 0) {
    std::sort(sym_in.begin(), sym_in.end());
    std::sort(sym_out.begin(), sym_out.end());
    bool cancels = sym_in == sym_out && known_out && known_in % known_out == 0;
    s[infer_at] = cancels ? known_in / known_out : kUnbacked;
    Shape rest = a.shape;
    rest.erase(rest.begin() + infer_at);
    if (!cancels && !unbacked && g.assume(numel_code(g, rest), '!', 0)) {
      // the -1 is the element count over the rest: a derived symbol, and the division exact
      int64_t total = numel_code(g, in.sizes), others = numel_code(g, rest);
      int64_t q = g.derive('/', total, others);
      if (!g.assume(g.derive('*', q, others), '=', total))
        infer_reshape(g.hints(a.shape), numel_of(g.hints(in.sizes)));  // eager's error
      s[infer_at] = q;
    }
  }
  return s;
}

// The sizes of an expand of a tensor with symbolic sizes: each size kept (-1) or broadcast
// from 1, an equality with a symbol decided with the hints.
static Shape symbolic_expand_sizes(Graph& g, const TensorMeta& in, const Attrs& a) {
  bool ok = a.shape.size() >= in.sizes.size();
  size_t off = ok ? a.shape.size() - in.sizes.size() : 0;
  Shape s(a.shape.size(), 0);
  for (size_t i = 0; ok && i < a.shape.size(); i++) {
    int64_t t = a.shape[i], v = i >= off ? in.sizes[i - off] : 1;
    s[i] = t == -1 && i >= off ? v : t;
    ok = t == -1 ? i >= off : v == t || v == 1 || v == kUnbacked || g.assume(v, '=', t) || g.assume(v, '=', 1);
  }
  if (!ok) {  // eager's error, for the sizes seen
    TensorMeta seen{g.hints(in.sizes), {}, in.dtype, false};
    expand(meta_tensor(seen, false), g.hints(a.shape));
    fail("cannot expand ", shape_str(seen.sizes), " to ", shape_str(g.hints(a.shape)));
  }
  return s;
}

// The sizes of a squeeze: the listed dims (all where none are) of size 1 dropped.
static Shape squeezed_sizes(const Shape& s, const Attrs& a) {
  const int64_t r = (int64_t)s.size();
  Shape out;
  std::vector<int64_t> dims = wrap_dims(a.dims, r);
  for (int64_t d = 0; d < r; d++) {
    bool listed = a.dims.empty() || std::find(dims.begin(), dims.end(), d) != dims.end();
    if (!(listed && s[d] == 1)) out.push_back(s[d]);
  }
  return out;
}

// Views of tensors with symbolic sizes: sizes follow the op's rule, strides that would
// depend on a symbol are unknown (-1).
static TensorMeta symbolic_view_meta(Graph& g, OpKind op, const TensorMeta& in, const Attrs& a) {
  Shape s = in.sizes;
  int64_t r = (int64_t)s.size();
  switch (op) {
    case OpKind::Reshape: s = symbolic_reshape_sizes(g, in, a); break;
    case OpKind::Expand: s = symbolic_expand_sizes(g, in, a); break;
    case OpKind::Transpose: std::swap(s[wrap_dim(a.dim, r)], s[wrap_dim(a.dim2, r)]); break;
    case OpKind::Permute: {
      Shape p;
      for (int64_t d : a.dims) p.push_back(s[wrap_dim(d, r)]);
      s = p;
      break;
    }
    case OpKind::Unsqueeze: s.insert(s.begin() + wrap_dim(a.dim, r + 1), 1); break;
    case OpKind::Squeeze: s = squeezed_sizes(s, a); break;
    case OpKind::Select: {  // the index inside a dynamic dim: index + 1 <= s, a fact
      int64_t d = wrap_dim(a.dim, r);
      if (is_symbol(s[d]) && a.index >= 0 && !g.assume(a.index + 1, '<', s[d]))
        fail_index("index ", a.index, " is out of bounds for dimension ", d, " with size ", g.hint(s[d]));
      s.erase(s.begin() + d);
      break;
    }
    case OpKind::Slice: {
      int64_t d = wrap_dim(a.dim, r);
      if (s[d] >= 0 && !is_symbol(a.start) && !is_symbol(a.end)) {
        int64_t n = s[d], st = std::min(std::max<int64_t>(a.start, 0), n), en = std::min(std::max(a.end, st), n);
        s[d] = (en - st + a.step - 1) / a.step;
      } else {
        s[d] = slice_length(g, s[d], a.start, a.end, a.step);
      }
      break;
    }
    default: fail("no symbolic meta rule for ", op_name(op));
  }
  // strides of a view of a tensor with symbolic sizes depend on those symbols (an expand's
  // zeros, a slice's steps): unknown here; the kernel reads them at run time
  return {s, Strides(s.size(), -1), in.dtype, false};
}

// ---- one rule per family of ops --------------------------------------------------------------
// Each takes the inputs' metas `in`, and `t`, data-less tensors of them (meta_tensor) for the
// eager op's argument checks, so that an error reads as eager's.

// A pointwise op: its operands broadcast together, its dtype promoted (a comparison's is bool,
// a transcendental's floating, a cast's its target).
static TensorMeta pointwise_meta(Graph& g, OpKind op, const std::vector<TensorMeta>& in,
                                 const std::vector<bool>& wrapped, const std::vector<Tensor>& t, const Attrs& a) {
  if (op == OpKind::Where) check_where(t[0]);
  else if (t.size() == 2) check_binary(op, t[0], t[1]);
  else if (t.size() == 1) check_unary(op, t[0]);
  Shape shape;  // in eager's order (where: the values, then the condition), for its message
  if (op == OpKind::Where) shape = broadcast_meta(g, in[0].sizes, broadcast_meta(g, in[1].sizes, in[2].sizes));
  else for (auto& m : in) shape = broadcast_meta(g, shape, m.sizes);
  std::vector<Tensor> operands = t;
  if (op == OpKind::Where) operands.erase(operands.begin());  // the condition does not promote
  DType dt = result_type(operands);
  switch (op) {
    case OpKind::Eq: case OpKind::Ne: case OpKind::Lt: case OpKind::Le:
    case OpKind::Gt: case OpKind::Ge:
      dt = DType::Bool;
      break;
    case OpKind::Div: case OpKind::Exp: case OpKind::Log: case OpKind::Sin: case OpKind::Cos:
    case OpKind::Tanh: case OpKind::Sigmoid: case OpKind::Sqrt: case OpKind::Rsqrt:
    case OpKind::Gelu: case OpKind::GeluBackward:
      if (is_floating(dt)) break;  // true division of two numbers: a Python float
      dt = op == OpKind::Div && wrapped[0] && wrapped[1] ? DType::Float64 : DType::Float32;
      break;
    case OpKind::Cast: dt = a.dtype; break;
    default: break;
  }
  return contiguous_meta(shape, dt);
}

// A reduction: its reduced shape; a sum of integers is int64.
static TensorMeta reduction_meta(OpKind op, const std::vector<TensorMeta>& in, const std::vector<Tensor>& t,
                                 const Attrs& a) {
  check_reduce(op, t[0], a.dims);
  DType dt = in[0].dtype;
  if (op == OpKind::Sum && !is_floating(dt)) dt = DType::Int64;
  return contiguous_meta(reduced_shape(in[0].sizes, a), dt);
}

// A view: the real view function run on a data-less tensor, or the symbolic rule where a
// symbol takes part.
static TensorMeta view_meta(Graph& g, OpKind op, const std::vector<TensorMeta>& in, const std::vector<Tensor>& t,
                            const Attrs& a) {
  if (op == OpKind::Detach) return {in[0].sizes, in[0].strides, in[0].dtype, false};
  bool symbolic = false;
  for (int64_t s : in[0].sizes) symbolic |= s < 0;
  for (int64_t s : a.shape) symbolic |= s < -1 || (op == OpKind::Expand && s < -1);
  if (op == OpKind::Slice) symbolic |= is_symbol(a.start) || is_symbol(a.end);  // bounds of a dynamic size
  if (symbolic) return symbolic_view_meta(g, op, in[0], a);
  if (op == OpKind::Reshape) {
    Shape target = infer_reshape(a.shape, numel_of(in[0].sizes));
    Strides st;
    if (!view_strides(t[0]->sizes, t[0]->strides, target, &st)) st = contiguous_strides(target);
    return {target, st, in[0].dtype, false};
  }
  Tensor v = call_op(op, t, a);  // sizes/strides only: views never touch data
  return {v->sizes, v->strides, v->dtype, false};
}

// matmul: eager's checks and words on this call's sizes (a symbol's value seen); the inner
// sizes are then equal, a fact of the graph where a symbol takes part.
static TensorMeta matmul_meta(Graph& g, const std::vector<TensorMeta>& in, const std::vector<bool>& wrapped) {
  Tensor lhs = meta_tensor(in[0], wrapped[0]), rhs = meta_tensor(in[1], wrapped[1]);
  lhs->sizes = g.hints(lhs->sizes), rhs->sizes = g.hints(rhs->sizes);
  check_matmul(lhs, rhs);
  const Shape &x = in[0].sizes, &y = in[1].sizes;
  Shape xs = x.size() == 1 ? Shape{1, x[0]} : x, ys = y.size() == 1 ? Shape{y[0], 1} : y;
  same_size(g, xs.back(), ys[ys.size() - 2]);
  Shape batch = broadcast_meta(g, Shape(xs.begin(), xs.end() - 2), Shape(ys.begin(), ys.end() - 2));
  if (x.size() > 1) batch.push_back(xs[xs.size() - 2]);
  if (y.size() > 1) batch.push_back(ys.back());
  return contiguous_meta(batch, in[0].dtype);
}

// The fused attention: its checks, eager's words; output 0 in the kernel's layout, output 1
// each query row's log-sum-exp.
static TensorMeta attention_meta(const std::vector<TensorMeta>& in, const std::vector<Tensor>& t, const Attrs& a) {
  std::string why;
  if (!fused_attention_supports(t[0], t[1], t[2], &why)) fail("scaled_dot_product_attention (fused): ", why);
  const Shape& q = in[0].sizes;
  if (a.index == 1)  // each query row's log-sum-exp, in the softmax's precision
    return contiguous_meta(Shape(q.begin(), q.end() - 1),
                           in[0].dtype == DType::Float64 ? DType::Float64 : DType::Float32);
  Shape s = q;
  s.back() = in[2].sizes.back();
  return {s, attention_out_strides(s, q, in[0].strides), in[0].dtype, false};  // the kernel's layout
}

// layer_norm: a weight and a bias (an absent one has no sizes) are shaped as the normalized dims.
static TensorMeta layer_norm_meta(Graph& g, const std::vector<TensorMeta>& in, const Attrs& a) {
  const Shape& x = in[0].sizes;
  for (size_t i = 1; i < in.size(); i++) {
    const Shape& w = in[i].sizes;
    bool ok = w.empty() || (w.size() == (size_t)a.dim && x.size() >= w.size());
    for (size_t d = 0; ok && d < w.size(); d++) ok = same_size(g, w[d], x[x.size() - w.size() + d]);
    if (!ok)
      fail("layer_norm: ", i == 1 ? "weight" : "bias", " of shape ", shape_str(g.hints(w)),
           " does not match normalized_shape ",
           shape_str(g.hints(Shape(x.end() - std::min<size_t>(a.dim, x.size()), x.end()))));
  }
  return contiguous_meta(x, in[0].dtype);
}

// slice_scatter: src must broadcast to the slice it is written into (the slice's length from
// the symbols where one takes part).
static TensorMeta slice_scatter_meta(Graph& g, const std::vector<TensorMeta>& in, const std::vector<Tensor>& t,
                                     const Attrs& a) {
  bool symbolic = is_symbol(a.start) || is_symbol(a.end);
  for (int64_t s : in[0].sizes) symbolic |= s < 0;
  for (int64_t s : in[1].sizes) symbolic |= s < 0;
  if (symbolic) {  // the slice's length from the symbols; src must broadcast to the slice
    const Shape& src = in[1].sizes;
    Shape part = in[0].sizes;
    int64_t d = wrap_dim(a.dim, (int64_t)part.size());
    part[d] = slice_length(g, part[d], a.start, a.end, a.step);
    bool ok = src.size() <= part.size();
    for (size_t i = 0; ok && i < src.size(); i++) {
      int64_t t = part[part.size() - src.size() + i], b = 0;
      ok = broadcast_dim(g, t, src[i], &b) && (b == t || t == kUnbacked || b == kUnbacked || g.hint(b) == g.hint(t));
    }
    if (!ok)
      fail("slice_scatter: src of shape ", shape_str(g.hints(src)), " does not broadcast to the ",
           "slice of shape ", shape_str(g.hints(part)));
  } else {  // src must broadcast to the slice it is written into
    Tensor part = slice(t[0], a.dim, a.start, a.end, a.step);
    Shape b = broadcast_shapes(part->sizes, in[1].sizes);
    if (b != part->sizes)
      fail("slice_scatter: src of shape ", shape_str(in[1].sizes), " does not broadcast to the ",
           "slice of shape ", shape_str(part->sizes));
  }
  return contiguous_meta(in[0].sizes, in[0].dtype);
}

// full, empty, rand and randn: no negative size (a size computed from symbols, zeros(n - 3),
// may be one); random numbers only of a floating dtype.
static TensorMeta factory_meta(Graph& g, OpKind op, const Attrs& a) {
  for (int64_t s : a.shape)  // a size computed from symbols (zeros(n - 3)) may be negative
    if ((s < 0 && !is_symbol(s)) || (is_symbol(s) && !g.assume(0, '<', s)))
      fail("Trying to create tensor with negative dimension ", g.hint(s), ": ", shape_str(g.hints(a.shape)));
  if ((op == OpKind::Rand || op == OpKind::Randn) && !is_floating(a.dtype))
    fail(op_name(op), " is only defined for floating point dtypes, got ", dtype_name(a.dtype));
  return contiguous_meta(a.shape, a.dtype);
}

// arange: its length, ceil((end - start) / step); arange(s0) the only symbolic form.
static TensorMeta arange_meta(const Attrs& a) {
  if (a.step == 0) fail("arange: step must be nonzero");
  if (is_symbol(a.end)) {  // arange(s0): the only symbolic form capture makes
    if (a.start != 0 || a.step != 1) fail("arange with a symbolic end needs start 0 and step 1");
    return contiguous_meta({a.end}, a.dtype);
  }
  if ((a.step > 0 && a.start > a.end) || (a.step < 0 && a.start < a.end))
    fail("arange: upper bound and larger bound inconsistent with step sign (start ", a.start,
         ", end ", a.end, ", step ", a.step, ")");
  int64_t n = (a.end - a.start + a.step + (a.step > 0 ? -1 : 1)) / a.step;  // ceil
  return contiguous_meta({n}, a.dtype);
}

// The ops of no family (extern calls, composites, factories, the backward ops): one rule each.
static TensorMeta op_meta(Graph& g, OpKind op, const std::vector<TensorMeta>& in, const std::vector<bool>& wrapped,
                          const std::vector<Tensor>& t, const Attrs& a) {
  switch (op) {
    case OpKind::Matmul: return matmul_meta(g, in, wrapped);
    case OpKind::Attention: return attention_meta(in, t, a);
    case OpKind::AttentionBackward: {  // inputs q, k, v, out, lse, grad_out: the gradient of input `index`
      if (in.size() != 6 || a.index < 0 || a.index > 2) fail("attention_backward: 6 inputs and an output 0-2");
      const TensorMeta& like = in[a.index];
      return {like.sizes, attention_out_strides(like.sizes, like.sizes, like.strides), in[0].dtype, false};
    }
    case OpKind::Softmax: case OpKind::LogSoftmax:
      check_softmax(t[0], a.dim, op == OpKind::LogSoftmax);
      return contiguous_meta(in[0].sizes, in[0].dtype);
    case OpKind::LayerNorm: return layer_norm_meta(g, in, a);
    case OpKind::MseLoss: {
      check_mse_loss(t[0], t[1], a.mode);
      Shape s = broadcast_meta(g, in[0].sizes, in[1].sizes);
      return contiguous_meta(a.mode == "none" ? s : Shape{}, result_type(t));
    }
    case OpKind::SliceBackward: return contiguous_meta(a.shape, in[0].dtype);
    case OpKind::SliceScatter: return slice_scatter_meta(g, in, t, a);
    case OpKind::Embedding: {
      if (in[1].dtype != DType::Int64) fail("embedding(): indices must be int64, got ", dtype_name(in[1].dtype));
      if (in[0].sizes.size() != 2) fail("embedding(): weight must be 2-D, got ", shape_str(in[0].sizes));
      Shape s = in[1].sizes;
      s.push_back(in[0].sizes[1]);
      return contiguous_meta(s, in[0].dtype);
    }
    case OpKind::EmbeddingBackward: return contiguous_meta(a.shape, in[0].dtype);
    case OpKind::Nonzero:  // data-dependent length: -1 marks a size only known at run time
      return contiguous_meta({-1, (int64_t)in[0].sizes.size()}, DType::Int64);
    case OpKind::Full: case OpKind::Empty: case OpKind::Rand: case OpKind::Randn: return factory_meta(g, op, a);
    case OpKind::Arange: return arange_meta(a);
    default: break;
  }
  fail("no meta rule for ", op_name(op));
}

TensorMeta infer_meta(OpKind op, const std::vector<TensorMeta>& in, const std::vector<bool>& wrapped,
                      const Attrs& a, Graph* graph) {
  NoGradGuard no_grad;
  Graph scratch;  // static sizes: no symbol to decide on
  Graph& g = graph ? *graph : scratch;
  std::vector<Tensor> t;
  for (size_t i = 0; i < in.size(); i++) t.push_back(meta_tensor(in[i], wrapped[i]));
  switch (op_class(op)) {
    case OpClass::Pointwise: return pointwise_meta(g, op, in, wrapped, t, a);
    case OpClass::Reduction: return reduction_meta(op, in, t, a);
    case OpClass::View: return view_meta(g, op, in, t, a);
    default: return op_meta(g, op, in, wrapped, t, a);
  }
}

}  // namespace mini::graph
