// test_pointwise.cpp — pointwise.cpp's kernels on small hand-computed inputs: every binary
// op, every unary op, where, cast, clone, contiguous; broadcasting and the strided path.
#include <limits>

#include "helpers.h"
#include "tensor/scalar_math.h"

using namespace mini_test;
using mini::Error;

namespace {
const double kNaN = std::numeric_limits<double>::quiet_NaN();
const double kInf = std::numeric_limits<double>::infinity();

double gelu_exact(double x) { return 0.5 * x * (1 + std::erf(x / std::sqrt(2.0))); }
double gelu_tanh(double x) {
  return 0.5 * x * (1 + std::tanh(std::sqrt(2 / M_PI) * (x + 0.044715 * x * x * x)));
}
double gelu_exact_grad(double x) {
  return 0.5 * (1 + std::erf(x / std::sqrt(2.0))) +
         x * std::exp(-0.5 * x * x) / std::sqrt(2 * M_PI);
}
}  // namespace

TEST_CASE("binary arithmetic ops", "[tensor][pointwise]") {
  for (DType d : {DType::Float32, DType::Float64}) {
    INFO(mini::dtype_name(d));
    Tensor a = make({1, -2, 3, 0.5}, {4}, d);
    Tensor b = make({2, 4, -1, 0.5}, {4}, d);
    check_values(mini::binary(OpKind::Add, a, b), {3, 2, 2, 1});
    check_values(mini::binary(OpKind::Sub, a, b), {-1, -6, 4, 0});
    check_values(mini::binary(OpKind::Mul, a, b), {2, -8, -3, 0.25});
    check_values(mini::binary(OpKind::Div, a, b), {0.5, -0.5, -3, 1});
    check_values(mini::binary(OpKind::Maximum, a, b), {2, 4, 3, 0.5});
    check_values(mini::binary(OpKind::Minimum, a, b), {1, -2, -1, 0.5});
    Tensor base = make({1, 2, 3, 0.5}, {4}, d);
    check_values(mini::binary(OpKind::Pow, base, b), {1, 16, 1.0 / 3, std::sqrt(0.5)});
    CHECK(mini::binary(OpKind::Add, a, b)->dtype == d);
  }
}

TEST_CASE("binary comparison ops", "[tensor][pointwise]") {
  Tensor a = make({1, -2, 3, 0.5}, {4});
  Tensor b = make({2, -2, -1, 0.5}, {4});
  check_values(mini::binary(OpKind::Eq, a, b), {0, 1, 0, 1});
  check_values(mini::binary(OpKind::Ne, a, b), {1, 0, 1, 0});
  check_values(mini::binary(OpKind::Lt, a, b), {1, 0, 0, 0});
  check_values(mini::binary(OpKind::Le, a, b), {1, 1, 0, 1});
  check_values(mini::binary(OpKind::Gt, a, b), {0, 0, 1, 0});
  check_values(mini::binary(OpKind::Ge, a, b), {0, 1, 1, 1});
  // NaN compares unequal to everything, itself included.
  Tensor n = make({kNaN}, {1});
  check_values(mini::binary(OpKind::Eq, n, n), {0});
  check_values(mini::binary(OpKind::Ne, n, n), {1});
}

TEST_CASE("gelu_backward runs grad * gelu'(x) through call_op", "[tensor][pointwise]") {
  Tensor g = make({1, 2, -1, 0.5}, {4}, DType::Float64);
  Tensor x = make({0, 1, -1, 2}, {4}, DType::Float64);
  mini::Attrs none;
  std::vector<double> want;
  for (int i = 0; i < 4; i++) want.push_back(values(g)[i] * gelu_exact_grad(values(x)[i]));
  check_values(mini::call_op(OpKind::GeluBackward, {g, x}, none), want, 1e-12, 1e-12);
  // tanh mode: compare with a central difference of the tanh formula
  mini::Attrs tanh_mode;
  tanh_mode.mode = "tanh";
  want.clear();
  for (int i = 0; i < 4; i++) {
    double xi = values(x)[i], h = 1e-6;
    want.push_back(values(g)[i] * (gelu_tanh(xi + h) - gelu_tanh(xi - h)) / (2 * h));
  }
  check_values(mini::call_op(OpKind::GeluBackward, {g, x}, tanh_mode), want, 1e-7, 1e-8);
}

TEST_CASE("integer and bool binary ops", "[tensor][pointwise]") {
  Tensor a = make({7, -3, 4}, {3}, DType::Int64);
  Tensor b = make({2, 5, 4}, {3}, DType::Int64);
  Tensor s = mini::binary(OpKind::Add, a, b);
  CHECK(s->dtype == DType::Int64);
  check_values(s, {9, 2, 8});
  check_values(mini::binary(OpKind::Sub, a, b), {5, -8, 0});
  check_values(mini::binary(OpKind::Mul, a, b), {14, -15, 16});
  check_values(mini::binary(OpKind::Maximum, a, b), {7, 5, 4});
  check_values(mini::binary(OpKind::Minimum, a, b), {2, -3, 4});
  check_values(mini::binary(OpKind::Pow, a, b), {49, -243, 256});
  check_values(mini::binary(OpKind::Lt, a, b), {0, 1, 0});

  Tensor p = make({1, 1, 0, 0}, {4}, DType::Bool);
  Tensor q = make({1, 0, 1, 0}, {4}, DType::Bool);
  Tensor sum = mini::binary(OpKind::Add, p, q);
  CHECK(sum->dtype == DType::Bool);
  check_values(sum, {1, 1, 1, 0});  // logical or
  check_values(mini::binary(OpKind::Mul, p, q), {1, 0, 0, 0});  // logical and
  check_values(mini::binary(OpKind::Maximum, p, q), {1, 1, 1, 0});
  check_values(mini::binary(OpKind::Minimum, p, q), {1, 0, 0, 0});
  check_values(mini::binary(OpKind::Eq, p, q), {1, 0, 0, 1});
  CHECK_MINI_ERROR(mini::binary(OpKind::Sub, p, q), Error::Kind::Runtime, "logical_xor");
}

TEST_CASE("binary ops broadcast, and run the strided path on non-contiguous operands",
          "[tensor][pointwise]") {
  Tensor m = make({1, 2, 3, 4, 5, 6}, {2, 3});
  Tensor row = make({10, 20, 30}, {3});
  Tensor col = make({100, 200}, {2, 1});
  check_values(mini::binary(OpKind::Add, m, row), {11, 22, 33, 14, 25, 36});
  check_values(mini::binary(OpKind::Add, m, col), {101, 102, 103, 204, 205, 206});
  Tensor outer = mini::binary(OpKind::Mul, col, make({1, 2, 3}, {1, 3}));
  CHECK(outer->sizes == Shape{2, 3});
  check_values(outer, {100, 200, 300, 200, 400, 600});
  // scalar on either side
  check_values(mini::binary(OpKind::Sub, m, number(1, DType::Int64)), {0, 1, 2, 3, 4, 5});
  check_values(mini::binary(OpKind::Sub, number(1, DType::Int64), m), {0, -1, -2, -3, -4, -5});
  check_values(mini::binary(OpKind::Div, mini::scalar_tensor(6, DType::Float32),
                            mini::scalar_tensor(4, DType::Float32)), {1.5});
  // transposed operand: [3, 2] view of m
  Tensor mt = mini::transpose(m, 0, 1);
  REQUIRE_FALSE(mt->is_contiguous());
  Tensor other = make({1, 1, 1, 1, 1, 1}, {3, 2});
  check_values(mini::binary(OpKind::Add, mt, other), {2, 5, 3, 6, 4, 7});
  check_values(mini::binary(OpKind::Mul, mt, mt), {1, 16, 4, 25, 9, 36});
  // sliced operand with an offset
  Tensor tail = mini::slice(m, 1, 1, 3, 1);  // [[2, 3], [5, 6]]
  check_values(mini::binary(OpKind::Sub, tail, make({1, 1}, {2})), {1, 2, 4, 5});
  CHECK_MINI_ERROR(mini::binary(OpKind::Add, m, make({1, 2}, {2})), Error::Kind::Runtime,
                   "[2, 3] and [2]");
  CHECK_MINI_ERROR(mini::binary(OpKind::Add, m, nullptr), Error::Kind::Type, "other");
}

TEST_CASE("maximum and minimum propagate NaN", "[tensor][pointwise]") {
  Tensor a = make({kNaN, 1, kNaN, -kInf}, {4});
  Tensor b = make({1, kNaN, kNaN, 2}, {4});
  check_values(mini::binary(OpKind::Maximum, a, b), {kNaN, kNaN, kNaN, 2});
  check_values(mini::binary(OpKind::Minimum, a, b), {kNaN, kNaN, kNaN, -kInf});
  check_values(mini::unary(OpKind::Relu, make({kNaN, -1, 2}, {3})), {kNaN, 0, 2});
}

TEST_CASE("unary float ops", "[tensor][pointwise]") {
  std::vector<double> xs = {-1.5, -0.5, 0, 0.5, 2};
  std::vector<double> pos = {0.25, 0.5, 1, 2, 9};
  struct Case {
    OpKind kind;
    double (*fn)(double);
    bool positive_only;
  };
  std::vector<Case> cases = {
      {OpKind::Neg, [](double x) { return -x; }, false},
      {OpKind::Abs, [](double x) { return std::abs(x); }, false},
      {OpKind::Exp, [](double x) { return std::exp(x); }, false},
      {OpKind::Log, [](double x) { return std::log(x); }, true},
      {OpKind::Sin, [](double x) { return std::sin(x); }, false},
      {OpKind::Cos, [](double x) { return std::cos(x); }, false},
      {OpKind::Tanh, [](double x) { return std::tanh(x); }, false},
      {OpKind::Sigmoid, [](double x) { return 1 / (1 + std::exp(-x)); }, false},
      {OpKind::Relu, [](double x) { return x > 0 ? x : 0.0; }, false},
      {OpKind::Sqrt, [](double x) { return std::sqrt(x); }, true},
      {OpKind::Rsqrt, [](double x) { return 1 / std::sqrt(x); }, true},
      {OpKind::Sign, [](double x) { return double((x > 0) - (x < 0)); }, false},
      {OpKind::Gelu, gelu_exact, false},
  };
  for (DType d : {DType::Float32, DType::Float64}) {
    for (const Case& c : cases) {
      INFO(mini::op_name(c.kind) << " " << mini::dtype_name(d));
      const std::vector<double>& in = c.positive_only ? pos : xs;
      std::vector<double> want;
      for (double x : in) want.push_back(c.fn(x));
      Tensor out = mini::unary(c.kind, make(in, {5}, d));
      CHECK(out->dtype == d);
      check_values(out, want, d == DType::Float32 ? 1e-6 : 1e-12, 1e-7);
    }
  }
  mini::Attrs tanh_mode;
  tanh_mode.mode = "tanh";
  std::vector<double> want;
  for (double x : xs) want.push_back(gelu_tanh(x));
  check_values(mini::unary(OpKind::Gelu, make(xs, {5}, DType::Float64), tanh_mode), want, 1e-12);
  // Special values
  check_values(mini::unary(OpKind::Log, make({0, -1}, {2})), {-kInf, kNaN});
  check_values(mini::unary(OpKind::Sqrt, make({-1}, {1})), {kNaN});
  check_values(mini::unary(OpKind::Sigmoid, make({-200, 200}, {2})), {0, 1});
}

TEST_CASE("unary ops on int64 and bool", "[tensor][pointwise]") {
  Tensor i = make({-3, 0, 5}, {3}, DType::Int64);
  check_values(mini::unary(OpKind::Neg, i), {3, 0, -5});
  check_values(mini::unary(OpKind::Abs, i), {3, 0, 5});
  check_values(mini::unary(OpKind::Relu, i), {0, 0, 5});
  check_values(mini::unary(OpKind::Sign, i), {-1, 0, 1});
  Tensor b = make({1, 0}, {2}, DType::Bool);
  CHECK(mini::unary(OpKind::Abs, b)->dtype == DType::Bool);
  check_values(mini::unary(OpKind::Abs, b), {1, 0});
  CHECK_MINI_ERROR(mini::unary(OpKind::Neg, b), Error::Kind::Runtime, "logical_not");
  // unary on a non-contiguous input
  Tensor m = make({1, -2, 3, -4, 5, -6}, {2, 3});
  check_values(mini::unary(OpKind::Abs, mini::transpose(m, 0, 1)), {1, 4, 2, 5, 3, 6});
}

TEST_CASE("float32 exp is within 1e-6 relative of std::exp over [-80, 80]",
          "[tensor][pointwise]") {
  // 160001 points: large enough for the parallel, vectorized path.
  const int64_t n = 160001;
  Tensor x = mini::empty({n}, DType::Float32);
  float* px = x->data<float>();
  for (int64_t i = 0; i < n; i++) px[i] = static_cast<float>(-80.0 + i * 0.001);
  Tensor y = mini::unary(OpKind::Exp, x);
  const float* py = y->data<float>();
  double worst = 0;
  int64_t worst_at = 0;
  for (int64_t i = 0; i < n; i++) {
    double want = std::exp(static_cast<double>(px[i]));
    double rel = std::abs(py[i] - want) / want;
    if (rel > worst) {
      worst = rel;
      worst_at = i;
    }
  }
  INFO("worst relative error " << worst << " at x = " << px[worst_at]);
  CHECK(worst <= 1e-6);
  check_values(mini::unary(OpKind::Exp, make({-kInf, kInf, 0, -100, 88}, {5})),
               {0, kInf, 1, std::exp(-100.0), std::exp(88.0)}, 1e-6, 1e-45);
  check_values(mini::unary(OpKind::Exp, make({-kInf, kInf, kNaN}, {3}, DType::Float64)),
               {0, kInf, kNaN});
}

// exp_f32(NaN) must not convert NaN to int32 or shift a negative value (both undefined
// behaviour), which UBSan in mini_tests_san would report and abort on.
TEST_CASE("float32 exp of NaN is NaN without undefined behaviour", "[tensor][pointwise]") {
  check_values(mini::unary(OpKind::Exp, make({kNaN}, {1})), {kNaN});
}

// Below ln(2^-150) exp_f32 selects 0 without computing a denormal product (a microcode assist
// on x86: a masked softmax's -inf entries); just above, the denormal results are still right.
TEST_CASE("float32 exp is 0 below -103.98 and denormal just above", "[tensor][pointwise]") {
  for (float x : {-104.0f, -103.99f, -1000.0f, -std::numeric_limits<float>::infinity()}) CHECK(mini::exp_f32(x) == 0.0f);
  for (float x : {-103.9f, -100.0f, -90.0f}) {
    INFO("x = " << x);
    CHECK(mini::exp_f32(x) > 0.0f);
    CHECK(std::abs(double(mini::exp_f32(x)) - std::exp(double(x))) <= 2e-45);
  }
}

TEST_CASE("float32 sigmoid is within 1e-6 relative of libm over [-87, 20]", "[tensor][pointwise]") {
  const int64_t n = 214001;
  Tensor x = mini::empty({n}, DType::Float32);
  float* px = x->data<float>();
  for (int64_t i = 0; i < n; i++) px[i] = static_cast<float>(-87.0 + i * 0.0005);
  Tensor y = mini::unary(OpKind::Sigmoid, x);
  const float* py = y->data<float>();
  double worst = 0, worst_x = 0;
  for (int64_t i = 0; i < n; i++) {
    double want = 1 / (1 + std::exp(-double(px[i])));
    double rel = std::abs(py[i] - want) / want;
    if (rel > worst) worst = rel, worst_x = px[i];
  }
  INFO("worst relative error " << worst << " at x = " << worst_x);
  CHECK(worst <= 1e-6);
  // saturation at both ends, and NaN through
  check_values(mini::unary(OpKind::Sigmoid, make({-kInf, -100, 100, kInf, kNaN}, {5})), {0, 0, 1, 1, kNaN});
}

// mini's float32 sin and cos are its own polynomials (scalar_math.h), so they are checked
// against double-precision libm here: absolute error within 2e-7 for |x| up to 1e5 (the
// reduction by pi/2 in float parts stays exact that far), and NaN for NaN and +-inf.
TEST_CASE("float32 sin and cos are within 2e-7 of libm for |x| <= 1e5", "[tensor][pointwise]") {
  for (double range : {4.0, 100.0, 1e5}) {
    const int64_t n = 200001;  // above the parallel grain, so the vectorized loop runs
    Tensor x = mini::empty({n}, DType::Float32);
    float* px = x->data<float>();
    for (int64_t i = 0; i < n; i++) px[i] = static_cast<float>(-range + 2 * range * double(i) / double(n - 1));
    for (OpKind op : {OpKind::Sin, OpKind::Cos}) {
      Tensor y = mini::unary(op, x);
      const float* py = y->data<float>();
      double worst = 0, worst_x = 0;
      for (int64_t i = 0; i < n; i++) {
        double want = op == OpKind::Sin ? std::sin(double(px[i])) : std::cos(double(px[i]));
        double err = std::abs(double(py[i]) - want);
        if (err > worst) worst = err, worst_x = px[i];
      }
      INFO(op_name(op) << " over [-" << range << ", " << range << "]: worst absolute error " << worst
                       << " at x = " << worst_x);
      CHECK(worst <= 2e-7);
    }
  }
  Tensor special = make({kNaN, kInf, -kInf, 0, -0.0}, {5});
  check_values(mini::unary(OpKind::Sin, special), {kNaN, kNaN, kNaN, 0, 0});
  check_values(mini::unary(OpKind::Cos, special), {kNaN, kNaN, kNaN, 1, 1});
  CHECK(std::signbit(mini::unary(OpKind::Sin, make({-0.0}, {1}))->data<float>()[0]));
}

// GELU's float32 erf is mini's own (scalar_math.h erf_f32, vectorizable): within 2e-7 of
// double-precision libm everywhere, and within 1e-6 relative near 0, where erf(x) ~ 1.13 x;
// odd, saturating, NaN through. Then GELU and its derivative through the op, against libm.
TEST_CASE("float32 erf is within 2e-7 of libm, relatively exact near 0", "[tensor][pointwise]") {
  double worst = 0, worst_x = 0, worst_rel = 0;
  for (int64_t i = 0; i <= 240000; i++) {
    float x = static_cast<float>(-6.0 + i * 0.00005);
    double want = std::erf(double(x)), got = mini::erf_f32(x);
    if (std::abs(got - want) > worst) worst = std::abs(got - want), worst_x = x;
    if (std::abs(x) < 1e-3 && x != 0) worst_rel = std::max(worst_rel, std::abs(got - want) / std::abs(want));
  }
  INFO("worst absolute error " << worst << " at x = " << worst_x << ", relative near 0 " << worst_rel);
  CHECK(worst <= 2e-7);
  CHECK(worst_rel <= 1e-6);
  CHECK(mini::erf_f32(1e-30f) == Approx(1.1283791e-30).epsilon(1e-6));
  CHECK(mini::erf_f32(-0.0f) == 0.0f);
  CHECK(std::signbit(mini::erf_f32(-0.0f)));
  CHECK(mini::erf_f32(float(kInf)) == 1.0f);
  CHECK(mini::erf_f32(float(-kInf)) == -1.0f);
  CHECK(mini::erf_f32(-30.0f) == -1.0f);
  CHECK(std::isnan(mini::erf_f32(float(kNaN))));
  const int64_t n = 200001;  // above the parallel grain: the vectorized loop
  Tensor x = mini::empty({n}, DType::Float32);
  float* px = x->data<float>();
  for (int64_t i = 0; i < n; i++) px[i] = static_cast<float>(-8.0 + 16.0 * double(i) / double(n - 1));
  const float* gelu = mini::unary(OpKind::Gelu, x)->data<float>();
  double gelu_worst = 0;
  for (int64_t i = 0; i < n; i++)
    gelu_worst = std::max(gelu_worst, std::abs(gelu[i] - gelu_exact(px[i])) / std::max(1.0, std::abs(gelu_exact(px[i]))));
  INFO("gelu's worst error " << gelu_worst);
  CHECK(gelu_worst <= 1e-6);
}

TEST_CASE("where selects, broadcasts and promotes", "[tensor][pointwise]") {
  Tensor cond = make({1, 0, 1}, {3}, DType::Bool);
  Tensor a = make({1, 2, 3}, {3});
  Tensor b = make({10, 20, 30}, {3});
  check_values(mini::where(cond, a, b), {1, 20, 3});
  Tensor col = make({1, 0}, {2, 1}, DType::Bool);
  Tensor w = mini::where(col, number(-1, DType::Int64), b);
  CHECK(w->sizes == Shape{2, 3});
  CHECK(w->dtype == DType::Float32);
  check_values(w, {-1, -1, -1, 10, 20, 30});
  Tensor mixed = mini::where(cond, make({1, 2, 3}, {3}, DType::Int64),
                             make({0.5, 0.5, 0.5}, {3}, DType::Float64));
  CHECK(mixed->dtype == DType::Float64);
  check_values(mixed, {1, 0.5, 3});
  // a transposed condition
  Tensor c2 = mini::transpose(make({1, 0, 0, 1, 1, 0}, {2, 3}, DType::Bool), 0, 1);
  check_values(mini::where(c2, make({1, 1, 1, 1, 1, 1}, {3, 2}), number(0, DType::Int64)),
               {1, 1, 0, 1, 0, 0});
  CHECK_MINI_ERROR(mini::where(a, a, b), Error::Kind::Type, "boolean");
}

TEST_CASE("cast converts, truncates toward zero, and is free when the dtype matches",
          "[tensor][pointwise]") {
  Tensor f = make({1.7, -1.7, 0, 0.5}, {4});
  Tensor i = mini::cast(f, DType::Int64);
  CHECK(i->dtype == DType::Int64);
  check_values(i, {1, -1, 0, 0});
  check_values(mini::cast(f, DType::Bool), {1, 1, 0, 1});
  check_values(mini::cast(make({kNaN}, {1}), DType::Bool), {1});
  Tensor d = mini::cast(make({3, -2}, {2}, DType::Int64), DType::Float64);
  CHECK(d->dtype == DType::Float64);
  check_values(d, {3, -2});
  check_values(mini::cast(make({1, 0}, {2}, DType::Bool), DType::Float32), {1, 0});
  CHECK(mini::cast(f, DType::Float32) == f);
  // non-contiguous source
  Tensor t = mini::transpose(make({1.5, 2.5, 3.5, 4.5}, {2, 2}), 0, 1);
  check_values(mini::cast(t, DType::Int64), {1, 3, 2, 4});
}

TEST_CASE("clone copies into fresh contiguous storage", "[tensor][pointwise]") {
  Tensor m = make({1, 2, 3, 4, 5, 6}, {2, 3}, DType::Int64);
  Tensor c = mini::clone(m);
  CHECK(c->storage != m->storage);
  CHECK(c->dtype == DType::Int64);
  check_values(c, {1, 2, 3, 4, 5, 6});
  Tensor ct = mini::clone(mini::transpose(m, 0, 1));
  CHECK(ct->is_contiguous());
  CHECK(ct->sizes == Shape{3, 2});
  CHECK(ct->strides == Strides{2, 1});
  check_values(ct, {1, 4, 2, 5, 3, 6});
}

TEST_CASE("contiguous returns the tensor itself or a contiguous copy", "[tensor][pointwise]") {
  Tensor m = make({1, 2, 3, 4, 5, 6}, {2, 3});
  CHECK(mini::contiguous(m) == m);
  Tensor t = mini::transpose(m, 0, 1);
  Tensor c = mini::contiguous(t);
  CHECK(c != t);
  CHECK(c->is_contiguous());
  CHECK(c->storage != m->storage);
  check_values(c, {1, 4, 2, 5, 3, 6});
  Tensor every_other = mini::slice(make({0, 1, 2, 3, 4, 5}, {6}), 0, 0, 6, 2);
  check_values(mini::contiguous(every_other), {0, 2, 4});
}

TEST_CASE("large non-contiguous pointwise ops take the parallel strided path",
          "[tensor][pointwise]") {
  const int64_t rows = 600, cols = 300;  // 180000 elements: above the parallel grain
  std::vector<double> v(rows * cols), b(rows);
  for (size_t i = 0; i < v.size(); i++) v[i] = double(i % 13) - 6;
  for (int64_t i = 0; i < rows; i++) b[i] = double(i % 5);
  Tensor x = make(v, {rows, cols}, DType::Float64);
  Tensor xt = mini::transpose(x, 0, 1);  // [300, 600]: xt[j, i] = x[i, j]
  std::vector<double> got_sum =
      values(mini::binary(OpKind::Add, xt, make(b, {rows}, DType::Float64)));
  std::vector<double> got_abs = values(mini::unary(OpKind::Abs, xt));
  std::vector<double> got_where = values(mini::where(
      mini::binary(OpKind::Gt, xt, number(0, DType::Int64)), xt, number(0, DType::Int64)));
  int64_t sum_bad = 0, abs_bad = 0, where_bad = 0;
  for (int64_t j = 0; j < cols; j++)
    for (int64_t i = 0; i < rows; i++) {
      double x_ij = v[i * cols + j];
      sum_bad += got_sum[j * rows + i] != x_ij + b[i];
      abs_bad += got_abs[j * rows + i] != std::abs(x_ij);
      where_bad += got_where[j * rows + i] != std::max(x_ij, 0.0);
    }
  CHECK(sum_bad == 0);
  CHECK(abs_bad == 0);
  CHECK(where_bad == 0);
}
