// test_autograd.cpp — autograd.cpp's engine: backward through composite expressions
// against hand-derived gradients, accumulation into leaves, retain_graph, the saved-tensor
// version check, and grad mode. The per-op derivative rules are checked numerically in
// test_derivatives.cpp.
#include <cmath>

#include "helpers.h"

using namespace mini_test;
using mini::Error;

namespace {
Tensor add(const Tensor& a, const Tensor& b) { return mini::binary(OpKind::Add, a, b); }
Tensor sub(const Tensor& a, const Tensor& b) { return mini::binary(OpKind::Sub, a, b); }
Tensor mul(const Tensor& a, const Tensor& b) { return mini::binary(OpKind::Mul, a, b); }
Tensor sum(const Tensor& a) { return mini::reduce(OpKind::Sum, a, {}, false); }
Tensor num(double v) { return number(v, DType::Float64); }
void backward(const Tensor& root, bool retain = false) { mini::backward(root, nullptr, retain); }
}  // namespace

TEST_CASE("backward of sum(x * w + x * x)", "[autograd]") {
  Tensor x = leaf({1, 2, 3}, {3});
  Tensor w = leaf({0.5, -1, 2}, {3});
  Tensor loss = sum(add(mul(x, w), mul(x, x)));
  CHECK(item(loss) == 0.5 - 2 + 6 + 1 + 4 + 9);
  REQUIRE(loss->grad_fn);
  CHECK_FALSE(loss->is_leaf());
  backward(loss);
  check_values(x->grad, {2.5, 3, 8});  // w + 2x
  check_values(w->grad, {1, 2, 3});    // x
  CHECK(x->grad->dtype == DType::Float64);
  CHECK(x->grad->sizes == Shape{3});
}

TEST_CASE("backward of mean(exp(x) * sin(w))", "[autograd]") {
  Tensor x = leaf({0, 0.5, -1}, {3});
  Tensor w = leaf({1, 2, 3}, {3});
  Tensor loss = mini::reduce(
      OpKind::Mean, mul(mini::unary(OpKind::Exp, x), mini::unary(OpKind::Sin, w)), {}, false);
  backward(loss);
  std::vector<double> xv = values(x), wv = values(w), dx, dw;
  for (int i = 0; i < 3; i++) {
    dx.push_back(std::exp(xv[i]) * std::sin(wv[i]) / 3);
    dw.push_back(std::exp(xv[i]) * std::cos(wv[i]) / 3);
  }
  check_values(x->grad, dx, 1e-12);
  check_values(w->grad, dw, 1e-12);
}

TEST_CASE("backward through broadcasting sums the gradient back", "[autograd]") {
  Tensor a = leaf({1, 2, 3, 4, 5, 6}, {2, 3});
  Tensor b = leaf({1, 1, 2}, {3});
  Tensor d = sub(a, b);
  backward(sum(mul(d, d)));
  check_values(a->grad, {0, 2, 2, 6, 8, 8});    // 2 (a - b)
  check_values(b->grad, {-6, -10, -10});        // -2 sum over rows of (a - b)
  // a 0-d scalar tensor that requires grad, broadcast against a matrix
  Tensor s = leaf({2}, {});
  backward(sum(mul(a, s)));
  CHECK(item(s->grad) == 21);
  CHECK(s->grad->sizes == Shape{});
}

TEST_CASE("backward of sum(A @ B) and of a linear layer", "[autograd]") {
  Tensor A = leaf({1, 2, 3, 4, 5, 6}, {2, 3});
  Tensor B = leaf({1, -1, 2, 0, 0.5, 3}, {3, 2});
  backward(sum(mini::matmul(A, B)));
  check_values(A->grad, {0, 2, 3.5, 0, 2, 3.5});  // dA[i, k] = sum_j B[k, j]
  check_values(B->grad, {5, 5, 7, 7, 9, 9});      // dB[k, j] = sum_i A[i, k]
  // y = x @ W^T + b, loss = mean(y^2)
  Tensor x = leaf({1, 2}, {1, 2});
  Tensor W = leaf({1, 0, 0, 2, 1, 1}, {3, 2});
  Tensor bias = leaf({0, 1, -3}, {3});
  Tensor y = add(mini::matmul(x, mini::transpose(W, 0, 1)), bias);  // [1, 3] = [1, 5, 0]
  check_values(y, {1, 5, 0});
  backward(mini::reduce(OpKind::Mean, mul(y, y), {}, false));
  // dy = 2y/3 = [2/3, 10/3, 0]; dW[j, :] = dy[j] * x; dx = dy @ W; dbias = dy
  check_values(bias->grad, {2.0 / 3, 10.0 / 3, 0}, 1e-12);
  check_values(W->grad, {2.0 / 3, 4.0 / 3, 10.0 / 3, 20.0 / 3, 0, 0}, 1e-12);
  check_values(x->grad, {2.0 / 3, 20.0 / 3}, 1e-12);
}

TEST_CASE("a tensor used on several paths gets the sum of their gradients", "[autograd]") {
  Tensor x = leaf({1, 2}, {2});
  Tensor y = mul(x, num(2));
  Tensor z = add(y, x);                                   // 3x
  Tensor loss = add(sum(mul(z, y)), sum(mini::unary(OpKind::Tanh, x)));  // 6x^2 + tanh
  backward(loss);
  std::vector<double> want;
  for (double v : {1.0, 2.0}) want.push_back(12 * v + 1 - std::tanh(v) * std::tanh(v));
  check_values(x->grad, want, 1e-12);
}

TEST_CASE("gradients flow through views of a leaf", "[autograd]") {
  Tensor x = leaf({1, 2, 3, 4, 5, 6}, {2, 3});
  Tensor col = mini::select(mini::transpose(x, 0, 1), 0, 2);     // x[:, 2] = [3, 6]
  Tensor part = mini::slice(mini::reshape(x, {6}), 0, 0, 6, 2);  // [1, 3, 5]
  Tensor loss = add(sum(mul(col, col)), sum(mul(part, num(10))));
  backward(loss);
  check_values(x->grad, {10, 0, 16, 0, 10, 12});
}

TEST_CASE("gradients accumulate across backward calls", "[autograd]") {
  Tensor x = leaf({1, 2}, {2});
  backward(sum(mul(x, x)));
  check_values(x->grad, {2, 4});
  backward(sum(mul(x, num(3))));
  check_values(x->grad, {5, 7});
  // The leaf owns its grad: it is not a view of the incoming gradient.
  Tensor y = leaf({1, 2, 3}, {3});
  backward(sum(y));
  REQUIRE(y->grad);
  CHECK(y->grad->is_contiguous());
  CHECK(y->grad->strides == Strides{1});
  check_values(y->grad, {1, 1, 1});
}

TEST_CASE("retain_graph keeps saved tensors; a second backward without it fails",
          "[autograd]") {
  Tensor x = leaf({1, 2}, {2});
  Tensor loss = sum(mul(x, x));
  backward(loss, /*retain=*/true);
  CHECK_FALSE(loss->grad_fn->released);
  backward(loss, /*retain=*/false);
  check_values(x->grad, {4, 8});
  CHECK(loss->grad_fn->released);
  CHECK_MINI_ERROR(backward(loss), Error::Kind::Runtime,
                   "backward through the graph a second time");
  CHECK_MINI_ERROR(backward(loss), Error::Kind::Runtime, "retain_graph");
  check_values(x->grad, {4, 8});
}

TEST_CASE("backward with an explicit gradient, and its errors", "[autograd]") {
  Tensor x = leaf({1, 2, 3}, {3});
  Tensor y = mul(x, x);
  CHECK_MINI_ERROR(backward(y), Error::Kind::Runtime, "only for scalar outputs");
  CHECK_MINI_ERROR(mini::backward(y, make({1, 1}, {2}, DType::Float64), false),
                   Error::Kind::Runtime, "gradient has shape [2]");
  mini::backward(y, make({1, 0, -1}, {3}, DType::Float64), false);
  check_values(x->grad, {2, 0, -6});
  Tensor plain = make({1, 2}, {2}, DType::Float64);
  CHECK_MINI_ERROR(backward(sum(plain)), Error::Kind::Runtime, "does not require grad");
}

TEST_CASE("modifying a saved tensor in place is caught at backward", "[autograd]") {
  SECTION("a saved input") {
    Tensor x = leaf({1, 2}, {2});
    Tensor a = mul(x, num(1));  // non-leaf: in-place allowed
    Tensor b = mul(a, a);       // saves a
    mini::inplace_binary(OpKind::Add, a, num(1));
    CHECK_MINI_ERROR(backward(sum(b)), Error::Kind::Runtime, "modified by an inplace operation");
  }
  SECTION("a saved output") {
    Tensor x = leaf({0, 1}, {2});
    Tensor e = mini::unary(OpKind::Exp, x);  // saves its output
    Tensor loss = sum(e);
    mini::inplace_binary(OpKind::Mul, e, num(2));
    CHECK_MINI_ERROR(backward(loss), Error::Kind::Runtime, "inplace");
  }
  SECTION("a leaf modified under no_grad after being saved") {
    Tensor x = leaf({1, 2}, {2});
    Tensor w = leaf({3, 4}, {2});
    Tensor loss = sum(mul(x, w));
    {
      mini::NoGradGuard no_grad;
      mini::fill_(w, 0);
    }
    CHECK_MINI_ERROR(backward(loss), Error::Kind::Runtime, "version");
  }
  SECTION("an input saved only by shape may change") {
    Tensor x = leaf({1, 2}, {2});
    Tensor a = mul(x, num(1));
    Tensor b = add(a, num(5));  // add reads no values in backward
    mini::inplace_binary(OpKind::Add, a, num(1));
    backward(sum(b));
    check_values(x->grad, {1, 1});
  }
}

TEST_CASE("in-place ops on non-leaves are differentiated", "[autograd]") {
  Tensor x = leaf({1, 2, 3}, {3});
  Tensor a = mul(x, num(2));
  mini::inplace_binary(OpKind::Mul, a, x);  // a = 2 x^2
  mini::inplace_binary(OpKind::Add, a, x);  // a = 2 x^2 + x
  check_values(a, {3, 10, 21});
  backward(sum(a));
  check_values(x->grad, {5, 9, 13});  // 4x + 1
  // an in-place op whose other operand requires grad turns a plain tensor into a non-leaf
  Tensor w = leaf({2, 3}, {2});
  Tensor p = make({1, 1}, {2}, DType::Float64);
  mini::inplace_binary(OpKind::Mul, p, w);
  CHECK(p->grad_fn != nullptr);
  backward(sum(p));
  check_values(w->grad, {1, 1});
}

// An in-place op on a view of a non-leaf (y[0] *= 3 where y = 2x) is refused with grad
// mode on: torch rebases the view's base, mini does not, so it throws before writing
// rather than silently dropping the write from the graph.
TEST_CASE("in-place op through a view of a non-leaf", "[autograd]") {
  Tensor x = leaf({1, 2, 3}, {3});
  Tensor y = mul(x, num(2));
  Tensor v = mini::select(y, 0, 0);
  CHECK_MINI_ERROR(mini::inplace_binary(OpKind::Mul, v, num(3)), Error::Kind::Runtime,
                   "on a view, where autograd is involved");
  check_values(y, {2, 4, 6});  // nothing was written
  backward(sum(y));
  check_values(x->grad, {2, 2, 2});
  // with grad mode off the same write is allowed
  {
    mini::NoGradGuard no_grad;
    mini::inplace_binary(OpKind::Mul, v, num(3));
  }
  check_values(y, {6, 4, 6});
}

// A view without history written with a value that has one would give only the view a
// grad_fn, and its base's gradient would be lost: refused too, for every in-place op.
TEST_CASE("in-place op with a value that requires grad into a view", "[autograd]") {
  Tensor base = make({0, 0, 0}, {3}, DType::Float64);
  Tensor w = leaf({1, 2}, {2});
  Tensor v = mini::slice(base, 0, 0, 2, 1);
  CHECK_MINI_ERROR(mini::inplace_binary(OpKind::Add, v, w), Error::Kind::Runtime,
                   "on a view, where autograd is involved");
  CHECK_MINI_ERROR(mini::copy_(v, w), Error::Kind::Runtime, "on a view, where autograd is involved");
  check_values(base, {0, 0, 0});
}

TEST_CASE("no_grad records nothing; grad mode is restored", "[autograd]") {
  GradModeRestorer restore;
  Tensor x = leaf({1, 2}, {2});
  {
    mini::NoGradGuard no_grad;
    Tensor y = mul(x, x);
    CHECK(y->grad_fn == nullptr);
    CHECK_FALSE(y->needs_grad());
    CHECK(mini::transpose(mini::unsqueeze(x, 0), 0, 1)->grad_fn == nullptr);
    CHECK_FALSE(mini::should_record({x}));
    {
      mini::NoGradGuard nested;
      CHECK_FALSE(mini::grad_enabled());
    }
    CHECK_FALSE(mini::grad_enabled());
  }
  CHECK(mini::grad_enabled());
  mini::set_grad_enabled(false);
  CHECK(mul(x, x)->grad_fn == nullptr);
  mini::set_grad_enabled(true);
  CHECK(mul(x, x)->grad_fn != nullptr);
  CHECK(mini::should_record({make({1}, {1}), x}));
  CHECK_FALSE(mini::should_record({make({1}, {1}), nullptr}));
}

TEST_CASE("what is not recorded: detached, integer, bool and constant results", "[autograd]") {
  Tensor x = leaf({1, -2}, {2});
  CHECK(mul(mini::detach(x), num(2))->grad_fn == nullptr);
  CHECK(mini::binary(OpKind::Gt, x, num(0))->grad_fn == nullptr);
  CHECK(mini::cast(x, DType::Int64)->grad_fn == nullptr);
  CHECK(mini::nonzero(x)->grad_fn == nullptr);
  CHECK(mini::call_op(OpKind::GeluBackward, {x, x})->grad_fn == nullptr);
  Tensor c = make({3, 4}, {2}, DType::Float64);
  backward(sum(mul(x, c)));
  CHECK(c->grad == nullptr);
  check_values(x->grad, {3, 4});
  // gradient edges: a leaf's accumulator is shared by all its uses
  mini::Edge e1 = mini::edge_of(x), e2 = mini::edge_of(x);
  REQUIRE(e1.node);
  CHECK(e1.node == e2.node);
  CHECK(e1.node->is_accumulator());
  CHECK(std::string(e1.node->name()) == "AccumulateGrad");
  CHECK(mini::edge_of(c).node == nullptr);
  CHECK(std::string(mul(x, x)->grad_fn->name()) == "mul");
}

TEST_CASE("ties split the gradient of maximum, minimum, amax, amin", "[autograd]") {
  Tensor a = leaf({1, 5, 3}, {3});
  Tensor b = leaf({1, 2, 4}, {3});
  backward(sum(mini::binary(OpKind::Maximum, a, b)));
  check_values(a->grad, {0.5, 1, 0});
  check_values(b->grad, {0.5, 0, 1});
  Tensor c = leaf({1, 2, 3}, {3});
  Tensor d = leaf({1, 2, 4}, {3});
  backward(sum(mini::binary(OpKind::Minimum, c, d)));
  check_values(c->grad, {0.5, 0.5, 1});
  check_values(d->grad, {0.5, 0.5, 0});
  Tensor x = leaf({3, 1, 3, 2}, {4});
  backward(mini::reduce(OpKind::Amax, x, {}, false));
  check_values(x->grad, {0.5, 0, 0.5, 0});
  Tensor y = leaf({1, 1, 2, 0}, {2, 2});
  backward(sum(mini::reduce(OpKind::Amin, y, {1}, false)));
  check_values(y->grad, {0.5, 0.5, 0, 1});
  // max_min_dim records amax/amin along its dim: the values' gradient reaches the input
  Tensor z = leaf({1, 7, 7, 2}, {2, 2});
  auto [values_out, indices] = mini::max_min_dim(z, 0, false, true);
  backward(sum(values_out));
  check_values(z->grad, {0, 1, 1, 0});
}

TEST_CASE("the gradient of a cast has the input's dtype", "[autograd]") {
  Tensor x = leaf({1, 2}, {2}, DType::Float32);
  Tensor y = mini::cast(x, DType::Float64);
  backward(sum(mul(y, y)));
  REQUIRE(x->grad);
  CHECK(x->grad->dtype == DType::Float32);
  check_values(x->grad, {2, 4});
  // a float32 leaf mixed with float64 math
  Tensor f = leaf({1, 2}, {2}, DType::Float32);
  backward(sum(mul(f, make({0.5, 0.25}, {2}, DType::Float64))));
  CHECK(f->grad->dtype == DType::Float32);
  check_values(f->grad, {0.5, 0.25});
}

// a.mul_(a) on a non-leaf records Mul(old, old): d/dx of a.mul_(a) with a = x is 2a.
TEST_CASE("in-place op with self as both operands", "[autograd]") {
  Tensor x = leaf({2, 3}, {2});
  Tensor a = mul(x, num(1));
  mini::inplace_binary(OpKind::Mul, a, a);
  check_values(a, {4, 9});
  backward(sum(a));
  check_values(x->grad, {4, 6});
}

// The Mul node of a.mul_(a) must not save `self` (self->grad_fn owns the node: that would
// be a reference cycle, which LeakSanitizer reports at exit in mini_tests_san).
TEST_CASE("in-place op with self as both operands does not leak", "[autograd]") {
  Tensor x = leaf({2, 3}, {2});
  Tensor a = mul(x, num(1));
  mini::inplace_binary(OpKind::Mul, a, a);
  CHECK(a.use_count() == 1);  // only this variable holds it; the node should not
}

// a.mul_(a.T): `other` aliases self's memory, so backward must see its value from before
// the write (x.grad = 2 x^T), not after.
TEST_CASE("in-place mul with an alias of self as the other operand", "[autograd]") {
  SECTION("partial overlap: a.mul_(a.T)") {
    Tensor x = leaf({1, 2, 3, 4}, {2, 2});
    Tensor a = mul(x, num(1));
    mini::inplace_binary(OpKind::Mul, a, mini::transpose(a, 0, 1));
    check_values(a, {1, 6, 6, 16});
    backward(sum(a));
    check_values(x->grad, {2, 6, 4, 8});
  }
  SECTION("same geometry, another view: a.mul_(a.reshape)") {
    Tensor x = leaf({2, 3}, {2});
    Tensor a = mul(x, num(1));
    mini::inplace_binary(OpKind::Mul, a, mini::reshape(a, {2}));
    check_values(a, {4, 9});
    backward(sum(a));
    check_values(x->grad, {4, 6});
  }
}

// A node with two outputs and a custom backward, as mini/autograd attaches to a compiled
// graph's outputs: out0 = 2x, out1 = 3x, backward: dx = 2*g0 + 3*g1 (a missing g is zero).
namespace {
struct TwoOutputs : mini::CustomBackward {
  int calls = 0;
  bool released = false;
  const char* name() const override { return "TwoOutputs"; }
  std::vector<Tensor> apply(const std::vector<Tensor>& g) override {
    calls++;
    REQUIRE(g.size() == 2);
    Tensor dx = mini::zeros({3}, DType::Float32);
    if (g[0]) dx = add(dx, mul(g[0], num(2)));
    if (g[1]) dx = add(dx, mul(g[1], num(3)));
    return {dx};
  }
  void release() override { released = true; }
};

std::pair<Tensor, Tensor> two_outputs(const Tensor& x, std::shared_ptr<TwoOutputs>& custom) {
  mini::NoGradGuard no_grad;
  Tensor a = mul(x, num(2)), b = mul(x, num(3));
  auto node = std::make_shared<mini::GradNode>();
  custom = std::make_shared<TwoOutputs>();
  node->custom = custom;
  node->num_outputs = 2;
  node->next.push_back(mini::edge_of(x));
  a->grad_fn = node;
  a->output_nr = 0;
  b->grad_fn = node;
  b->output_nr = 1;
  return {a, b};
}
}  // namespace

TEST_CASE("a node with several outputs gets each output's gradient in its slot", "[autograd]") {
  Tensor x = leaf({1, 2, 3}, {3});
  std::shared_ptr<TwoOutputs> custom;
  auto [a, b] = two_outputs(x, custom);
  // loss = sum(a * a) + sum(b): d/da = 2a = 4x, d/db = 1 -> dx = 2 * 4x + 3 * 1
  Tensor loss = add(sum(mul(a, a)), sum(b));
  backward(loss);
  CHECK(custom->calls == 1);  // both outputs' gradients arrive in one call
  CHECK(custom->released);
  check_values(x->grad, {11, 19, 27});
}

TEST_CASE("an output of a multi-output node that gets no gradient passes none", "[autograd]") {
  Tensor x = leaf({1, 2, 3}, {3});
  std::shared_ptr<TwoOutputs> custom;
  auto [a, b] = two_outputs(x, custom);
  (void)a;
  backward(sum(b), /*retain=*/true);
  check_values(x->grad, {3, 3, 3});
  CHECK_FALSE(custom->released);
  backward(sum(b));
  check_values(x->grad, {6, 6, 6});
  CHECK_MINI_ERROR(backward(sum(b)), Error::Kind::Runtime, "second time");
}
