// test_derivatives.cpp — every derivative rule of derivatives.h, run by the eager engine
// through call_op, against central finite differences in float64.
//
// gradcheck(case): makes each float64 input a leaf, computes out = call_op(kind, inputs,
// attrs), runs backward with a fixed non-uniform upstream gradient v, and compares each
// leaf's .grad with (f(x + eps e_j) - f(x - eps e_j)) / 2 eps, where f(x) = sum(out * v).
#include <algorithm>
#include <set>

#include "helpers.h"

using namespace mini_test;
using mini::Attrs;

namespace {

struct GradcheckCase {
  std::string label;
  OpKind kind;
  std::vector<Tensor> inputs;  // float64 inputs are differentiated; others (bool) are not
  Attrs attrs;
  double eps = 1e-6;
  double rel_tol = 1e-5;
  double abs_tol = 1e-7;
};

// The upstream gradient: fixed, non-uniform, so that a rule that drops or swaps elements
// cannot pass by symmetry.
std::vector<double> upstream(int64_t n) {
  std::vector<double> v(n);
  for (int64_t i = 0; i < n; i++) v[i] = 0.3 + 0.7 * ((i * 5 + 3) % 7) / 7.0 - 0.2 * (i % 2);
  return v;
}

double weighted_output(const GradcheckCase& c, const std::vector<Tensor>& in,
                       const std::vector<double>& v) {
  mini::NoGradGuard no_grad;
  std::vector<double> out = values(mini::call_op(c.kind, in, c.attrs));
  double s = 0;
  for (size_t i = 0; i < out.size(); i++) s += out[i] * v[i];
  return s;
}

Tensor plain_copy(const Tensor& t) {
  mini::NoGradGuard no_grad;
  return t ? mini::clone(t) : nullptr;
}

void gradcheck(const GradcheckCase& c) {
  INFO("gradcheck " << c.label << " (" << mini::op_name(c.kind) << ")");
  std::vector<Tensor> leaves;
  for (const Tensor& t : c.inputs) {
    Tensor l = plain_copy(t);
    if (l && l->dtype == DType::Float64) l->requires_grad = true;
    leaves.push_back(l);
  }
  Tensor out = mini::call_op(c.kind, leaves, c.attrs);
  REQUIRE(out);
  REQUIRE(out->grad_fn != nullptr);
  std::vector<double> v = upstream(out->numel());
  try {
    mini::backward(out, make(v, out->sizes, out->dtype), false);
  } catch (const mini::Error& e) {
    FAIL("backward threw: " << e.what());
  }
  for (size_t i = 0; i < leaves.size(); i++) {
    if (!leaves[i] || !leaves[i]->requires_grad) continue;
    INFO("input " << i << " of shape " << mini::shape_str(leaves[i]->sizes));
    REQUIRE(leaves[i]->grad);
    CHECK(leaves[i]->grad->sizes == leaves[i]->sizes);
    CHECK(leaves[i]->grad->dtype == DType::Float64);
    std::vector<double> analytic = values(leaves[i]->grad), numeric;
    for (int64_t j = 0; j < leaves[i]->numel(); j++) {
      std::vector<Tensor> plus, minus;
      for (const Tensor& t : c.inputs) {
        plus.push_back(plain_copy(t));
        minus.push_back(plain_copy(t));
      }
      plus[i]->data<double>()[j] += c.eps;
      minus[i]->data<double>()[j] -= c.eps;
      numeric.push_back((weighted_output(c, plus, v) - weighted_output(c, minus, v)) / (2 * c.eps));
    }
    check_close(analytic, numeric, c.rel_tol, c.abs_tol);
  }
}

Tensor f64(const std::vector<double>& v, const Shape& s) { return make(v, s, DType::Float64); }

// Distinct values in [-2.1, 2.2] with no two closer than 0.1 and none within 0.1 of 0.
Tensor spread(const Shape& s, double shift = 0) {
  std::vector<double> v(mini::numel_of(s));
  for (size_t i = 0; i < v.size(); i++) {
    double x = -2.05 + 0.17 * ((i * 11) % 25) + shift;
    v[i] = std::abs(x) < 0.1 ? x + 0.15 : x;
  }
  return f64(v, s);
}
Tensor positive(const Shape& s) {
  std::vector<double> v(mini::numel_of(s));
  for (size_t i = 0; i < v.size(); i++) v[i] = 0.5 + 0.23 * ((i * 7) % 11);
  return f64(v, s);
}

Attrs with_dims(std::vector<int64_t> dims, bool keepdim) {
  Attrs a;
  a.dims = std::move(dims);
  a.keepdim = keepdim;
  return a;
}
Attrs with_dim(int64_t dim, int64_t dim2 = 0) {
  Attrs a;
  a.dim = dim;
  a.dim2 = dim2;
  return a;
}
Attrs with_shape(Shape s) {
  Attrs a;
  a.shape = std::move(s);
  return a;
}
Attrs with_mode(std::string mode) {
  Attrs a;
  a.mode = std::move(mode);
  return a;
}

std::vector<GradcheckCase> differentiable_cases() {
  std::vector<GradcheckCase> cs;
  Shape m{2, 3};
  // ---- binary pointwise, each with a broadcast operand
  cs.push_back({"add", OpKind::Add, {spread(m), spread({3}, 0.03)}, {}});
  cs.push_back({"add [2,1]+[1,3]", OpKind::Add, {spread({2, 1}), spread({1, 3})}, {}});
  cs.push_back({"sub", OpKind::Sub, {spread({3}), spread(m, 0.05)}, {}});
  cs.push_back({"mul", OpKind::Mul, {spread(m), spread({2, 1}, 0.02)}, {}});
  cs.push_back({"div", OpKind::Div, {spread(m), spread({3}, 0.04)}, {}});
  cs.push_back({"pow", OpKind::Pow, {positive(m), spread({3})}, {}});
  cs.push_back({"maximum", OpKind::Maximum, {spread(m), spread({3}, 0.05)}, {}});
  cs.push_back({"minimum", OpKind::Minimum, {spread({2, 1}, 0.05), spread(m)}, {}});
  // ---- unary pointwise
  for (OpKind k : {OpKind::Neg, OpKind::Abs, OpKind::Exp, OpKind::Sin, OpKind::Cos, OpKind::Tanh,
                   OpKind::Sigmoid, OpKind::Relu, OpKind::Gelu, OpKind::Clone})
    cs.push_back({mini::op_name(k), k, {spread(m)}, {}});
  for (OpKind k : {OpKind::Log, OpKind::Sqrt, OpKind::Rsqrt})
    cs.push_back({mini::op_name(k), k, {positive(m)}, {}});
  cs.push_back({"gelu tanh", OpKind::Gelu, {spread(m)}, with_mode("tanh")});
  // sign: flat away from 0 (spread() keeps every value 0.1 away from it), so a zero gradient
  cs.push_back({"sign", OpKind::Sign, {spread(m)}, {}});
  Attrs to32;
  to32.dtype = DType::Float32;
  // float64 -> float32: the finite difference sees float32 rounding, hence the looser tolerance
  cs.push_back({"cast to float32", OpKind::Cast, {spread(m)}, to32, 1e-2, 1e-3, 1e-4});
  // ---- where: the bool condition is not differentiated
  Tensor cond = make({1, 0, 0, 1, 1, 0}, m, DType::Bool);
  cs.push_back({"where", OpKind::Where, {cond, spread(m), spread({3})}, {}});
  // ---- reductions
  Shape c{2, 3, 4};
  for (OpKind k : {OpKind::Sum, OpKind::Mean, OpKind::Amax, OpKind::Amin}) {
    std::string n = mini::op_name(k);
    cs.push_back({n + " all", k, {spread(c)}, {}});
    cs.push_back({n + " dim 1", k, {spread(c)}, with_dims({1}, false)});
    cs.push_back({n + " dims 0,2 keepdim", k, {spread(c)}, with_dims({0, 2}, true)});
    cs.push_back({n + " dim -1", k, {spread(c)}, with_dims({-1}, false)});
  }
  // ---- views
  cs.push_back({"reshape", OpKind::Reshape, {spread(c)}, with_shape({4, 6})});
  cs.push_back({"transpose", OpKind::Transpose, {spread(c)}, with_dim(0, -1)});
  cs.push_back({"permute", OpKind::Permute, {spread(c)}, with_dims({2, 0, 1}, false)});
  cs.push_back({"permute negative", OpKind::Permute, {spread(c)}, with_dims({-2, -1, 0}, false)});
  cs.push_back({"unsqueeze", OpKind::Unsqueeze, {spread(m)}, with_dim(1)});
  cs.push_back({"squeeze", OpKind::Squeeze, {spread({2, 1, 3})}, {}});
  cs.push_back({"squeeze dim", OpKind::Squeeze, {spread({1, 3, 1})}, with_dims({-1}, false)});
  cs.push_back({"expand", OpKind::Expand, {spread({3, 1})}, with_shape({2, 3, 4})});
  Attrs sl;
  sl.dim = 2;
  sl.start = 1;
  sl.end = 4;
  sl.step = 2;
  cs.push_back({"slice step 2", OpKind::Slice, {spread(c)}, sl});
  Attrs sl0;
  sl0.dim = -3;
  sl0.start = -1;
  sl0.end = 10;
  cs.push_back({"slice negative", OpKind::Slice, {spread(c)}, sl0});
  Attrs se;
  se.dim = 1;
  se.index = -1;
  cs.push_back({"select", OpKind::Select, {spread(c)}, se});
  // slice_backward (scatter g into zeros): its gradient is the slice of the incoming one
  Attrs sb;
  sb.shape = {2, 5};
  sb.dim = 1;
  sb.start = 1;
  sb.end = 5;
  sb.step = 2;
  cs.push_back({"slice_backward", OpKind::SliceBackward, {spread({2, 2})}, sb});
  // slice_scatter (base with a slice overwritten by src): base outside the slice, src
  // inside it; a src that broadcasts sums its gradient
  cs.push_back({"slice_scatter", OpKind::SliceScatter, {spread(c), spread({2, 3, 2}, 0.05)}, sl});
  cs.push_back({"slice_scatter broadcast src", OpKind::SliceScatter, {spread(c), spread({2}, 0.05)}, sl});
  // ---- matmul: 2-D, batched with broadcast, 1-D on either side, dot
  cs.push_back({"matmul 2-D", OpKind::Matmul, {spread({2, 3}), spread({3, 4})}, {}});
  cs.push_back({"matmul batched", OpKind::Matmul, {spread({2, 2, 3}), spread({3, 2})}, {}});
  cs.push_back({"matmul broadcast", OpKind::Matmul, {spread({2, 1, 2, 3}), spread({3, 3, 2})}, {}});
  cs.push_back({"matmul vector-matrix", OpKind::Matmul, {spread({3}), spread({2, 3, 2})}, {}});
  cs.push_back({"matmul matrix-vector", OpKind::Matmul, {spread({2, 3}), spread({3})}, {}});
  cs.push_back({"matmul dot", OpKind::Matmul, {spread({4}), spread({4}, 0.1)}, {}});
  // ---- composite kernels
  for (OpKind k : {OpKind::Softmax, OpKind::LogSoftmax})
    for (int64_t d : {0, 1, -1})
      cs.push_back({std::string(mini::op_name(k)) + " dim " + std::to_string(d), k, {spread(c)},
                    with_dim(d)});
  Attrs ln1;
  ln1.dim = 1;
  ln1.eps = 1e-5;
  cs.push_back({"layer_norm", OpKind::LayerNorm, {spread(c)}, ln1});
  cs.push_back({"layer_norm weight", OpKind::LayerNorm, {spread(c), spread({4}, 0.3)}, ln1});
  cs.push_back({"layer_norm weight bias", OpKind::LayerNorm,
                {spread(c), spread({4}, 0.3), spread({4})}, ln1});
  cs.push_back({"layer_norm bias only", OpKind::LayerNorm, {spread(c), nullptr, spread({4})}, ln1});
  Attrs ln2 = ln1;
  ln2.dim = 2;
  cs.push_back({"layer_norm 2 dims", OpKind::LayerNorm,
                {spread(c), spread({3, 4}, 0.1), spread({3, 4})}, ln2});
  for (const char* r : {"mean", "sum", "none"}) {
    cs.push_back({std::string("mse_loss ") + r, OpKind::MseLoss, {spread(m), spread(m, 0.07)},
                  with_mode(r)});
    cs.push_back({std::string("mse_loss broadcast ") + r, OpKind::MseLoss,
                  {spread(m), spread({3}, 0.07)}, with_mode(r)});
  }
  // ---- embedding: the weight's rows by index (indices repeat: their gradients add up), and
  // its backward (a scatter-add, whose gradient is the gather again)
  Tensor idx = make({0, 2, 2, 1, 0, 2}, {2, 3}, DType::Int64);
  cs.push_back({"embedding", OpKind::Embedding, {spread({3, 4}), idx}, {}});
  Attrs eb;
  eb.shape = {3, 4};
  cs.push_back({"embedding_backward", OpKind::EmbeddingBackward, {spread({2, 3, 4}), idx}, eb});
  // ---- attention (the fused op a compiled graph holds): q [2, 3, 4] against 5 keys, causal,
  // and its output's gradient for all three operands
  Attrs at;
  at.mode = "causal";
  at.value = 0.4;
  at.index = 0;
  cs.push_back({"attention causal", OpKind::Attention, {spread({2, 3, 4}), spread({2, 5, 4}), spread({2, 5, 2})}, at});
  at.mode = "";
  cs.push_back({"attention", OpKind::Attention, {spread({4, 4}), spread({4, 4}), spread({4, 3})}, at});
  return cs;
}

// Ops with no gradient: boolean or index results, gelu_backward (no double backward) and
// detach (which exists to stop gradients).
const std::set<OpKind> kNotDifferentiable = {OpKind::Eq, OpKind::Ne, OpKind::Lt, OpKind::Le,
                                             OpKind::Gt, OpKind::Ge, OpKind::Nonzero,
                                             OpKind::GeluBackward, OpKind::Detach};
// Ops that only a derivative rule makes, whose own derivative is not written (no double
// backward): attention's backward.
const std::set<OpKind> kBackwardOnly = {OpKind::AttentionBackward};
// Factories have no inputs: nothing to send a gradient to.
const std::set<OpKind> kFactories = {OpKind::Full, OpKind::Empty, OpKind::Arange, OpKind::Rand,
                                     OpKind::Randn};

}  // namespace

// Eager attention runs a backward of its own (a custom node), not Rules::apply: its cases are
// checked apart, so that every case of A1's test goes through the student's rules. Attention's
// rule (A1's, for the joint graph) is graded through a compiled graph
// (tests/python/test_attention_node.py, its aot_eager cases).
TEST_CASE("every derivative rule matches finite differences in float64", "[autograd][gradcheck][A1]") {
  for (const GradcheckCase& c : differentiable_cases()) {
    if (c.kind != OpKind::Attention) DYNAMIC_SECTION(c.label) { gradcheck(c); }
  }
}

TEST_CASE("attention's derivative matches finite differences in float64", "[autograd][gradcheck]") {
  for (const GradcheckCase& c : differentiable_cases()) {
    if (c.kind == OpKind::Attention) DYNAMIC_SECTION(c.label) { gradcheck(c); }
  }
}

TEST_CASE("the gradcheck catalog covers every OpKind", "[autograd][gradcheck]") {
  std::set<OpKind> covered;
  for (const GradcheckCase& c : differentiable_cases()) covered.insert(c.kind);
  std::vector<OpKind> all = {
#define MINI_OP_KIND(name, str, cls) OpKind::name,
      MINI_OP_LIST(MINI_OP_KIND)
#undef MINI_OP_KIND
  };
  for (OpKind k : all) {
    INFO(mini::op_name(k));
    int places = covered.count(k) + kNotDifferentiable.count(k) + kFactories.count(k) + kBackwardOnly.count(k);
    CHECK(places == 1);
  }
}

TEST_CASE("non-differentiable ops record no graph", "[autograd][gradcheck]") {
  Tensor x = leaf({1, -2, 0.5}, {3});
  Tensor y = leaf({1, 2, 3}, {3});
  for (OpKind k : kNotDifferentiable) {
    INFO(mini::op_name(k));
    std::vector<Tensor> in = {x};
    if (k != OpKind::Nonzero && k != OpKind::Detach) in.push_back(y);
    Tensor out = mini::call_op(k, in);
    CHECK(out->grad_fn == nullptr);
    CHECK_FALSE(out->needs_grad());
  }
}

// Sign's rule is a zero gradient (torch); SliceBackward's is the slice of the incoming
// gradient. Both are in the catalog above; here their exact values.
TEST_CASE("sign and slice_backward derivative rules", "[autograd][gradcheck][A1]") {
  Tensor x = leaf({-1.5, 2, 0.5}, {3});
  mini::backward(mini::call_op(OpKind::Sign, {x}), make({1, 2, 3}, {3}, DType::Float64), false);
  check_values(x->grad, {0, 0, 0});
  Attrs a;
  a.shape = {2, 5};
  a.dim = 1;
  a.start = 1;
  a.end = 5;
  a.step = 2;
  Tensor g = leaf({1, 2, 3, 4}, {2, 2});
  Tensor out = mini::call_op(OpKind::SliceBackward, {g}, a);
  check_values(out, {0, 1, 0, 2, 0, 0, 3, 0, 4, 0});
  mini::backward(out, make({0, 1, 2, 3, 4, 5, 6, 7, 8, 9}, {2, 5}, DType::Float64), false);
  check_values(g->grad, {1, 3, 6, 8});
  // slice_scatter: base outside the slice, src inside it; each gets its part of the gradient
  Tensor base = leaf({1, 2, 3, 4, 5, 6, 7, 8, 9, 10}, {2, 5});
  Tensor src = leaf({-1, -2, -3, -4}, {2, 2});
  Tensor scattered = mini::call_op(OpKind::SliceScatter, {base, src}, a);
  check_values(scattered, {1, -1, 3, -2, 5, 6, -3, 8, -4, 10});
  mini::backward(scattered, make({0, 1, 2, 3, 4, 5, 6, 7, 8, 9}, {2, 5}, DType::Float64), false);
  check_values(base->grad, {0, 0, 2, 0, 4, 5, 0, 7, 0, 9});
  check_values(src->grad, {1, 3, 6, 8});
}

// Reducing a 0-d tensor over an explicit dim (sum(x, dims={0}), allowed as in torch)
// records dims={0}; Rules::unreduce and Mean's reduced_count must handle the empty shape.
TEST_CASE("backward of a 0-d reduction over dim 0", "[autograd][A1]") {
  gradcheck({"sum 0-d dim 0", OpKind::Sum, {f64({1.5}, {})}, with_dims({0}, false)});
  gradcheck({"mean 0-d dim -1", OpKind::Mean, {f64({1.5}, {})}, with_dims({-1}, false)});
}
