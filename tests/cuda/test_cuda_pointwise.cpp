// test_cuda_pointwise.cpp — pointwise.cu and copy.cu against references computed here in
// double: contiguous operands (the flat 16-byte loop, with a tail), broadcasting, transposed
// and misaligned views (the strided loop), host scalars, one-element device tensors, mixed
// dtypes, bool and int64 semantics, and bfloat16 (math in float, rounded on store).
#include <functional>
#include <limits>

#include "cuda_helpers.h"

using namespace mini_cuda_test;
namespace cuda = mini::cuda;

namespace {

const double kNaN = std::numeric_limits<double>::quiet_NaN();
const double kInf = std::numeric_limits<double>::infinity();

// n values in about [-4, 4], none exactly 0, a few special ones at the front.
std::vector<double> sample(int n, int seed) {
  std::vector<double> v(static_cast<size_t>(n));
  for (int i = 0; i < n; i++) v[size_t(i)] = std::sin(i * 1.37 + seed) * 4 + 0.01;
  return v;
}

Tensor run_binary(OpKind k, const Tensor& a, const Tensor& b, DType compute, const Shape& shape,
                  const std::string& mode = "") {
  bool cmp = k == OpKind::Eq || k == OpKind::Ne || k == OpKind::Lt || k == OpKind::Le ||
             k == OpKind::Gt || k == OpKind::Ge;
  Tensor out = empty_device(shape, cmp ? DType::Bool : compute);
  cuda::binary(k, out, a, b, compute, mode);
  return out;
}

double gelu_grad(double x) {
  return 0.5 * (1 + std::erf(x / std::sqrt(2.0))) + x * std::exp(-0.5 * x * x) / std::sqrt(2 * M_PI);
}

double ref_binary(OpKind k, double x, double y) {
  switch (k) {
    case OpKind::Add: return x + y;
    case OpKind::Sub: return x - y;
    case OpKind::Mul: return x * y;
    case OpKind::Div: return x / y;
    case OpKind::Pow: return std::pow(x, y);
    case OpKind::Maximum: return (x > y || x != x) ? x : y;
    case OpKind::Minimum: return (x < y || x != x) ? x : y;
    case OpKind::Eq: return x == y;
    case OpKind::Ne: return x != y;
    case OpKind::Lt: return x < y;
    case OpKind::Le: return x <= y;
    case OpKind::Gt: return x > y;
    case OpKind::Ge: return x >= y;
    case OpKind::GeluBackward: return x * gelu_grad(y);
    default: return 0;
  }
}

const OpKind kBinaryOps[] = {OpKind::Add, OpKind::Sub, OpKind::Mul, OpKind::Div,
                             OpKind::Pow, OpKind::Maximum, OpKind::Minimum, OpKind::Eq,
                             OpKind::Ne, OpKind::Lt, OpKind::Le, OpKind::Gt, OpKind::Ge,
                             OpKind::GeluBackward};

}  // namespace

TEST_CASE("binary ops on contiguous float32 and float64, with a tail", "[cuda][pointwise]") {
  MINI_REQUIRE_GPU();
  const int n = 4099;  // not a multiple of any vector width
  std::vector<double> x = sample(n, 1), y = sample(n, 2);
  x[0] = kNaN;  // NaN propagates through maximum / minimum
  y[1] = kNaN;
  y[2] = x[2];  // equal pair for the comparisons
  for (DType d : {DType::Float32, DType::Float64}) {
    Tensor a = device(x, {n}, d), b = device(y, {n}, d);
    std::vector<double> xr = values(a), yr = values(b);  // inputs as stored
    for (OpKind k : kBinaryOps) {
      INFO(mini::op_name(k) << " " << mini::dtype_name(d));
      std::vector<double> want(static_cast<size_t>(n));
      for (int i = 0; i < n; i++) {
        double xi = xr[size_t(i)], yi = yr[size_t(i)];
        if (k == OpKind::Pow) xi = std::fabs(xi);  // a real power
        want[size_t(i)] = ref_binary(k, xi, yi);
      }
      Tensor aa = a;
      if (k == OpKind::Pow) aa = to_device(host([&] {
        std::vector<double> v = xr;
        for (double& e : v) e = std::fabs(e);
        return v;
      }(), {n}, d));
      double tol = d == DType::Float32 ? 2e-6 : 1e-13;
      check_close(values(run_binary(k, aa, b, d, {n})), want, tol, tol);
    }
  }
}

TEST_CASE("binary ops broadcast, on transposed views, and misaligned views", "[cuda][pointwise]") {
  MINI_REQUIRE_GPU();
  // [3, 1, 5] + [4, 5] -> [3, 4, 5]
  std::vector<double> x = sample(15, 3), y = sample(20, 4);
  Tensor a = device(x, {3, 1, 5}), b = device(y, {4, 5});
  std::vector<double> want;
  for (int i = 0; i < 3; i++)
    for (int j = 0; j < 4; j++)
      for (int k = 0; k < 5; k++) want.push_back(double(float(x[size_t(i * 5 + k)])) + float(y[size_t(j * 5 + k)]));
  check_close(values(run_binary(OpKind::Add, a, b, DType::Float32, {3, 4, 5})), want);

  // a [7, 6] seen transposed as [6, 7], times a contiguous [6, 7]
  std::vector<double> base = sample(42, 5), other = sample(42, 6);
  Tensor t = device(base, {7, 6});
  Tensor tt = TensorImpl::view_of(t, {6, 7}, {1, 6}, 0);
  Tensor c = device(other, {6, 7});
  want.clear();
  for (int i = 0; i < 6; i++)
    for (int j = 0; j < 7; j++)
      want.push_back(double(float(base[size_t(j * 6 + i)])) * float(other[size_t(i * 7 + j)]));
  check_close(values(run_binary(OpKind::Mul, tt, c, DType::Float32, {6, 7})), want);

  // views one element into a buffer: contiguous but not 16-byte aligned
  std::vector<double> longer = sample(1001, 7);
  Tensor buf = device(longer, {1001});
  Tensor v1 = TensorImpl::view_of(buf, {1000}, {1}, 1);
  Tensor v0 = TensorImpl::view_of(buf, {1000}, {1}, 0);
  want.clear();
  for (int i = 0; i < 1000; i++) want.push_back(double(float(longer[size_t(i + 1)])) - float(longer[size_t(i)]));
  check_close(values(run_binary(OpKind::Sub, v1, v0, DType::Float32, {1000})), want);

  // writing into a strided output: the transposed view of a fresh [7, 6] buffer
  Tensor out_base = empty_device({7, 6}, DType::Float32);
  Tensor out_view = TensorImpl::view_of(out_base, {6, 7}, {1, 6}, 0);
  cuda::binary(OpKind::Add, out_view, c, c, DType::Float32, "");
  std::vector<double> got = values(out_base);
  want.assign(42, 0);
  for (int i = 0; i < 6; i++)
    for (int j = 0; j < 7; j++) want[size_t(j * 6 + i)] = 2.0 * float(other[size_t(i * 7 + j)]);
  check_close(got, want);
}

TEST_CASE("binary ops with host scalars, one-element device tensors and mixed dtypes", "[cuda][pointwise]") {
  MINI_REQUIRE_GPU();
  std::vector<double> x = sample(1000, 8);
  Tensor a = device(x, {1000});
  std::vector<double> xr = values(a), want;
  for (double v : xr) want.push_back(v * 2.5);
  check_close(values(run_binary(OpKind::Mul, a, number(2.5), DType::Float32, {1000})), want);
  want.clear();
  for (double v : xr) want.push_back(float(3.0 - v));
  check_close(values(run_binary(OpKind::Sub, number(3.0), a, DType::Float32, {1000})), want);
  Tensor one = device({0.5}, {1});
  want.clear();
  for (double v : xr) want.push_back(float(v / 0.5));
  check_close(values(run_binary(OpKind::Div, a, one, DType::Float32, {1000})), want);
  // two host scalars into a device 0-d output
  check_close(values(run_binary(OpKind::Add, number(1.5), number(2.0), DType::Float32, {})), {3.5});

  // int64 tensor + float32 tensor, computed in float32
  std::vector<double> ints;
  for (int i = 0; i < 1000; i++) ints.push_back(i - 500);
  Tensor ai = device(ints, {1000}, DType::Int64);
  want.clear();
  for (int i = 0; i < 1000; i++) want.push_back(double(float(float(ints[size_t(i)]) + float(xr[size_t(i)]))));
  check_close(values(run_binary(OpKind::Add, ai, a, DType::Float32, {1000})), want);
  // int64 compute with an int64 host scalar past 2^53 stays exact
  Tensor big = TensorImpl::empty({}, DType::Int64);
  *big->data<int64_t>() = (int64_t(1) << 60) + 1;
  Tensor small = device({1, 2}, {2}, DType::Int64);
  Tensor sum = run_binary(OpKind::Add, small, big, DType::Int64, {2});
  Tensor back = TensorImpl::empty({2}, DType::Int64);
  cuda::copy_bytes(back->raw(), Device::cpu(), sum->device_raw(), sum->device(), 16);
  CHECK(back->data<int64_t>()[0] == (int64_t(1) << 60) + 2);
  CHECK(back->data<int64_t>()[1] == (int64_t(1) << 60) + 3);
}

TEST_CASE("int64 and bool semantics", "[cuda][pointwise]") {
  MINI_REQUIRE_GPU();
  Tensor a = device({2, -3, 5, 0, 7, -1}, {6}, DType::Int64);
  Tensor b = device({10, 3, 0, 4, 2, 3}, {6}, DType::Int64);
  check_close(values(run_binary(OpKind::Pow, a, b, DType::Int64, {6})), {1024, -27, 1, 0, 49, -1});
  check_close(values(run_binary(OpKind::Maximum, a, b, DType::Int64, {6})), {10, 3, 5, 4, 7, 3});
  check_close(values(run_binary(OpKind::Mul, a, b, DType::Int64, {6})), {20, -9, 0, 0, 14, -3});
  Tensor p = device({1, 1, 0, 0}, {4}, DType::Bool), q = device({1, 0, 1, 0}, {4}, DType::Bool);
  check_close(values(run_binary(OpKind::Add, p, q, DType::Bool, {4})), {1, 1, 1, 0});
  check_close(values(run_binary(OpKind::Mul, p, q, DType::Bool, {4})), {1, 0, 0, 0});
  check_close(values(run_binary(OpKind::Minimum, p, q, DType::Bool, {4})), {1, 0, 0, 0});
  check_close(values(run_binary(OpKind::Lt, p, q, DType::Bool, {4})), {0, 0, 1, 0});
  CHECK_THROWS_WITH(run_binary(OpKind::Sub, p, q, DType::Bool, {4}), Catch::Contains("not supported"));
  CHECK_THROWS_WITH(run_binary(OpKind::Div, a, b, DType::Int64, {6}), Catch::Contains("not supported"));
  Tensor u = empty_device({6}, DType::Int64);
  cuda::unary(OpKind::Abs, u, a, {});
  check_close(values(u), {2, 3, 5, 0, 7, 1});
  cuda::unary(OpKind::Sign, u, a, {});
  check_close(values(u), {1, -1, 1, 0, 1, -1});
  Tensor ub = empty_device({4}, DType::Bool);
  cuda::unary(OpKind::Relu, ub, p, {});
  check_close(values(ub), {1, 1, 0, 0});
}

TEST_CASE("unary ops against double references", "[cuda][pointwise]") {
  MINI_REQUIRE_GPU();
  const int n = 2051;
  std::vector<double> x = sample(n, 9);
  x[0] = kNaN;
  x[1] = kInf;
  x[2] = -kInf;
  struct Case {
    OpKind k;
    std::string mode;
    std::function<double(double)> f;
    bool positive;  // defined on x > 0 only
  };
  std::vector<Case> cases = {
      {OpKind::Neg, "", [](double v) { return -v; }, false},
      {OpKind::Abs, "", [](double v) { return std::fabs(v); }, false},
      {OpKind::Exp, "", [](double v) { return std::exp(v); }, false},
      {OpKind::Log, "", [](double v) { return std::log(v); }, true},
      {OpKind::Sin, "", [](double v) { return std::sin(v); }, false},
      {OpKind::Cos, "", [](double v) { return std::cos(v); }, false},
      {OpKind::Tanh, "", [](double v) { return std::tanh(v); }, false},
      {OpKind::Sigmoid, "", [](double v) { return 1 / (1 + std::exp(-v)); }, false},
      {OpKind::Relu, "", [](double v) { return v < 0 ? 0 : v; }, false},
      {OpKind::Sqrt, "", [](double v) { return std::sqrt(v); }, true},
      {OpKind::Rsqrt, "", [](double v) { return 1 / std::sqrt(v); }, true},
      {OpKind::Sign, "", [](double v) { return double((v > 0) - (v < 0)); }, false},
      {OpKind::Gelu, "", [](double v) { return 0.5 * v * (1 + std::erf(v / std::sqrt(2.0))); }, false},
      {OpKind::Gelu, "tanh",
       [](double v) {
         return 0.5 * v * (1 + std::tanh(std::sqrt(2 / M_PI) * (v + 0.044715 * v * v * v)));
       },
       false},
  };
  for (DType d : {DType::Float32, DType::Float64, DType::BFloat16}) {
    for (const Case& c : cases) {
      INFO(mini::op_name(c.k) << " " << c.mode << " " << mini::dtype_name(d));
      std::vector<double> in = x;
      if (c.positive)
        for (double& v : in) v = std::isnan(v) ? v : std::fabs(v) + 0.01;
      Tensor a = device(in, {n}, d);
      std::vector<double> stored = values(a), want;
      for (double v : stored) want.push_back(c.f(v));
      if (d == DType::BFloat16)
        for (double& v : want) v = std::isfinite(v) ? bf16(v) : v;
      Tensor out = empty_device({n}, d);
      mini::Attrs attrs;
      attrs.mode = c.mode;
      cuda::unary(c.k, out, a, attrs);
      double tol = d == DType::Float64 ? 1e-13 : d == DType::Float32 ? 4e-6 : 8e-3;
      check_close(values(out), want, tol, tol);
    }
  }
  // integer input, floating result: converted as it is loaded
  Tensor ints = device({0, 1, 2}, {3}, DType::Int64);
  Tensor out = empty_device({3}, DType::Float32);
  cuda::unary(OpKind::Exp, out, ints, {});
  check_close(values(out), {1, std::exp(1.0), std::exp(2.0)}, 1e-6);
}

TEST_CASE("bfloat16 binary ops compute in float and round on store", "[cuda][pointwise][bfloat16]") {
  MINI_REQUIRE_GPU();
  const int n = 1031;
  std::vector<double> x = sample(n, 10), y = sample(n, 11);
  Tensor a = device(x, {n}, DType::BFloat16), b = device(y, {n}, DType::BFloat16);
  std::vector<double> xr = values(a), yr = values(b);
  for (OpKind k : {OpKind::Add, OpKind::Mul, OpKind::Div, OpKind::Maximum, OpKind::Lt}) {
    INFO(mini::op_name(k));
    std::vector<double> want;
    for (int i = 0; i < n; i++) {
      double r = double(float(ref_binary(k, float(xr[size_t(i)]), float(yr[size_t(i)]))));
      want.push_back(k == OpKind::Lt ? r : bf16(r));
    }
    check_close(values(run_binary(k, a, b, DType::BFloat16, {n})), want, 0, 0);
  }
  // a host scalar takes part in float (torch's opmath scalar), not rounded to bfloat16 first
  std::vector<double> want;
  for (double v : xr) want.push_back(bf16(float(v) * float(0.1)));
  check_close(values(run_binary(OpKind::Mul, a, number(0.1), DType::BFloat16, {n})), want, 0, 0);
  // mixed: bfloat16 with float32 promoted to float32 by the caller
  Tensor f = device(y, {n}, DType::Float32);
  std::vector<double> fr = values(f);
  want.clear();
  for (int i = 0; i < n; i++) want.push_back(float(float(xr[size_t(i)]) + float(fr[size_t(i)])));
  check_close(values(run_binary(OpKind::Add, a, f, DType::Float32, {n})), want, 0, 0);
}

TEST_CASE("copy converts, broadcasts and writes strided", "[cuda][pointwise][copy]") {
  MINI_REQUIRE_GPU();
  // float32 -> bfloat16: round to nearest even
  std::vector<double> x = sample(1000, 12);
  x[0] = 1.00390625;   // halfway between bf16 1.0 and 1.0078125: rounds to even (1.0)
  x[1] = 1.01171875;   // halfway between 1.0078125 and 1.015625: rounds to even (1.015625)
  x[2] = kNaN;
  Tensor f = device(x, {1000});
  Tensor h = empty_device({1000}, DType::BFloat16);
  cuda::copy(h, f);
  std::vector<double> fr = values(f), want;
  for (double v : fr) want.push_back(std::isnan(v) ? v : bf16(v));
  check_close(values(h), want, 0, 0);
  CHECK(values(h)[0] == 1.0);
  CHECK(values(h)[1] == 1.015625);
  // to bool: != 0, NaN is true
  Tensor bl = empty_device({3}, DType::Bool);
  cuda::copy(bl, device({0, kNaN, -2}, {3}));
  check_close(values(bl), {0, 1, 1});
  // same dtype contiguous (bytes), strided (transpose), broadcast, and a host scalar
  Tensor m = device(sample(12, 13), {3, 4}, DType::Float64);
  Tensor same = empty_device({3, 4}, DType::Float64);
  cuda::copy(same, m);
  check_close(values(same), values(m), 0, 0);
  Tensor mt = TensorImpl::view_of(m, {4, 3}, {1, 4}, 0);
  Tensor tcont = empty_device({4, 3}, DType::Float64);
  cuda::copy(tcont, mt);
  std::vector<double> mv = values(m);
  want.clear();
  for (int i = 0; i < 4; i++)
    for (int j = 0; j < 3; j++) want.push_back(mv[size_t(j * 4 + i)]);
  check_close(values(tcont), want, 0, 0);
  Tensor row = device({1, 2, 3}, {3}, DType::Int64);
  Tensor rows = empty_device({2, 3}, DType::Float32);
  cuda::copy(rows, row);
  check_close(values(rows), {1, 2, 3, 1, 2, 3}, 0, 0);
  cuda::copy(rows, number(7.0, DType::Float64));
  check_close(values(rows), {7, 7, 7, 7, 7, 7}, 0, 0);
  // misaligned same-dtype copy (offset 1): the strided loop
  Tensor buf = device(sample(33, 14), {33});
  Tensor dst = empty_device({32}, DType::Float32);
  cuda::copy(dst, TensorImpl::view_of(buf, {32}, {1}, 1));
  std::vector<double> bv = values(buf);
  check_close(values(dst), std::vector<double>(bv.begin() + 1, bv.end()), 0, 0);
}

TEST_CASE("where, fill and arange", "[cuda][pointwise]") {
  MINI_REQUIRE_GPU();
  const int n = 1003;
  std::vector<double> c, x = sample(n, 15);
  for (int i = 0; i < n; i++) c.push_back(i % 3 == 0);
  Tensor cond = device(c, {n}, DType::Bool), a = device(x, {n});
  Tensor out = empty_device({n}, DType::Float32);
  cuda::where(out, cond, a, number(-1.0));
  std::vector<double> xr = values(a), want;
  for (int i = 0; i < n; i++) want.push_back(c[size_t(i)] ? xr[size_t(i)] : -1.0);
  check_close(values(out), want, 0, 0);
  // broadcast condition [2, 1] against [2, 3], float64 operands into float32 output
  Tensor cond2 = device({1, 0}, {2, 1}, DType::Bool);
  Tensor p = device({1, 2, 3}, {3}, DType::Float64), q = device({9}, {1}, DType::Float64);
  Tensor o2 = empty_device({2, 3}, DType::Float32);
  cuda::where(o2, cond2, p, q);
  check_close(values(o2), {1, 2, 3, 9, 9, 9}, 0, 0);

  for (DType d : {DType::Float32, DType::BFloat16, DType::Int64, DType::Bool, DType::Float64}) {
    Tensor t = empty_device({37}, d);
    cuda::fill(t, 3.0);
    check_close(values(t), std::vector<double>(37, d == DType::Bool ? 1.0 : 3.0), 0, 0);
  }
  Tensor r = empty_device({101}, DType::Float32);
  cuda::arange(r, -5.0, 0.25);
  want.clear();
  for (int i = 0; i < 101; i++) want.push_back(float(-5.0 + i * 0.25));
  check_close(values(r), want, 0, 0);
  Tensor ri = empty_device({10}, DType::Int64);
  cuda::arange(ri, 3, 2);
  check_close(values(ri), {3, 5, 7, 9, 11, 13, 15, 17, 19, 21}, 0, 0);
}
