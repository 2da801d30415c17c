// test_matmul_nn.cpp — matmul.cpp (2-D, batched, broadcast, transposed operands, 1-D,
// int64), nn_kernels.cpp (softmax, log_softmax, layer_norm, mse_loss) and attention.cpp.
#include <limits>
#include <numeric>

#include "helpers.h"

using namespace mini_test;
using mini::Error;

namespace {
// Reference matmul of two contiguous operands of rank >= 2 with broadcast batch dims.
std::vector<double> ref_matmul(const Tensor& a, const Tensor& b, Shape* out_shape) {
  std::vector<double> av = values(a), bv = values(b);
  int64_t ra = a->dim(), rb = b->dim();
  int64_t n = a->sizes[ra - 2], k = a->sizes[ra - 1], m = b->sizes[rb - 1];
  Shape ba(a->sizes.begin(), a->sizes.end() - 2), bb(b->sizes.begin(), b->sizes.end() - 2);
  Shape batch = mini::broadcast_shapes(ba, bb);
  Strides sa = mini::broadcast_strides(ba, mini::contiguous_strides(ba), batch);
  Strides sb = mini::broadcast_strides(bb, mini::contiguous_strides(bb), batch);
  Strides bc = mini::contiguous_strides(batch);
  std::vector<double> out;
  for (int64_t bi = 0; bi < mini::numel_of(batch); bi++) {
    int64_t oa = 0, ob = 0, rem = bi;
    for (size_t d = 0; d < batch.size(); d++) {
      oa += rem / bc[d] * sa[d];
      ob += rem / bc[d] * sb[d];
      rem %= bc[d];
    }
    for (int64_t i = 0; i < n; i++)
      for (int64_t j = 0; j < m; j++) {
        double acc = 0;
        for (int64_t p = 0; p < k; p++)
          acc += av[oa * n * k + i * k + p] * bv[ob * k * m + p * m + j];
        out.push_back(acc);
      }
  }
  *out_shape = batch;
  out_shape->push_back(n);
  out_shape->push_back(m);
  return out;
}

Tensor iota(const Shape& shape, DType d, double start = 0, double scale = 1) {
  std::vector<double> v(mini::numel_of(shape));
  for (size_t i = 0; i < v.size(); i++) v[i] = start + scale * i;
  return make(v, shape, d);
}

void expect_reference_matmul(const Tensor& a, const Tensor& b) {
  Shape want_shape;
  std::vector<double> want = ref_matmul(mini::contiguous(a), mini::contiguous(b), &want_shape);
  Tensor got = mini::matmul(a, b);
  CHECK(got->sizes == want_shape);
  CHECK(got->dtype == a->dtype);
  check_values(got, want, 1e-6, 1e-5);
}
}  // namespace

TEST_CASE("matmul of matrices, hand-computed", "[tensor][matmul]") {
  Tensor a = make({1, 2, 3, 4, 5, 6}, {2, 3});
  Tensor b = make({7, 8, 9, 10, 11, 12}, {3, 2});
  Tensor c = mini::matmul(a, b);
  CHECK(c->sizes == Shape{2, 2});
  check_values(c, {58, 64, 139, 154});
  Tensor ai = make({1, 2, 3, 4, 5, 6}, {2, 3}, DType::Int64);
  Tensor bi = make({7, 8, 9, 10, 11, 12}, {3, 2}, DType::Int64);
  Tensor ci = mini::matmul(ai, bi);
  CHECK(ci->dtype == DType::Int64);
  check_values(ci, {58, 64, 139, 154});
}

TEST_CASE("matmul of batched and broadcast operands", "[tensor][matmul]") {
  for (DType d : {DType::Float32, DType::Float64, DType::Int64}) {
    INFO(mini::dtype_name(d));
    expect_reference_matmul(iota({2, 2, 3}, d), iota({2, 3, 4}, d, -5));
    expect_reference_matmul(iota({2, 1, 2, 3}, d), iota({3, 3, 2}, d, 1));  // batch [2,1] x [3]
    expect_reference_matmul(iota({4, 2, 3}, d), iota({3, 2}, d, -2));       // a 2-D right operand
    expect_reference_matmul(iota({2, 3}, d), iota({4, 3, 2}, d));           // a 2-D left operand
  }
}

TEST_CASE("matmul of transposed and strided operands", "[tensor][matmul]") {
  for (DType d : {DType::Float32, DType::Float64, DType::Int64}) {
    INFO(mini::dtype_name(d));
    Tensor at = mini::transpose(iota({3, 2}, d, 1), 0, 1);   // [2, 3], column-major
    Tensor bt = mini::transpose(iota({4, 3}, d, -3), 0, 1);  // [3, 4], column-major
    Tensor a = iota({2, 3}, d, 2);
    Tensor b = iota({3, 4}, d);
    expect_reference_matmul(at, b);
    expect_reference_matmul(a, bt);
    expect_reference_matmul(at, bt);
    // batched, last two dims swapped
    expect_reference_matmul(mini::transpose(iota({2, 4, 3}, d), 1, 2), iota({2, 4, 2}, d, 1));
    // every other column: neither row- nor column-major, copied first
    Tensor skip = mini::slice(iota({2, 6}, d), 1, 0, 6, 2);  // [2, 3]
    expect_reference_matmul(skip, b);
    expect_reference_matmul(a, mini::slice(iota({6, 4}, d), 0, 0, 6, 2));
    // an expanded (stride-0) operand
    expect_reference_matmul(mini::expand(iota({1, 3}, d, 1), {2, 3}), b);
    // a row slice with an offset
    expect_reference_matmul(mini::slice(iota({4, 3}, d), 0, 1, 3, 1), bt);
  }
}

TEST_CASE("matmul with 1-D operands", "[tensor][matmul]") {
  Tensor v = make({1, 2, 3}, {3});
  Tensor w = make({4, 5, 6}, {3});
  Tensor dot = mini::matmul(v, w);
  CHECK(dot->sizes == Shape{});
  CHECK(item(dot) == 32);
  Tensor m = make({1, 2, 3, 4, 5, 6}, {3, 2});
  Tensor vm = mini::matmul(v, m);
  CHECK(vm->sizes == Shape{2});
  check_values(vm, {22, 28});
  Tensor mt = make({1, 2, 3, 4, 5, 6}, {2, 3});
  Tensor mv = mini::matmul(mt, v);
  CHECK(mv->sizes == Shape{2});
  check_values(mv, {14, 32});
  Tensor batched = iota({2, 3, 2}, DType::Float32);
  Tensor vb = mini::matmul(v, batched);
  CHECK(vb->sizes == Shape{2, 2});
  check_values(vb, {16, 22, 52, 58});
  Tensor bv = mini::matmul(iota({2, 2, 3}, DType::Float32), v);
  CHECK(bv->sizes == Shape{2, 2});
  check_values(bv, {8, 26, 44, 62});
  Tensor di = mini::matmul(make({1, 2}, {2}, DType::Int64), make({3, 4}, {2}, DType::Int64));
  CHECK(di->dtype == DType::Int64);
  CHECK(item(di) == 11);
}

TEST_CASE("matmul with empty dims and bad operands", "[tensor][matmul]") {
  Tensor z = mini::matmul(mini::empty({2, 0}), mini::empty({0, 3}));
  CHECK(z->sizes == Shape{2, 3});
  check_values(z, {0, 0, 0, 0, 0, 0});
  CHECK(mini::matmul(mini::ones({0, 3}), mini::ones({3, 2}))->sizes == Shape{0, 2});
  CHECK(mini::matmul(mini::ones({2, 3}), mini::ones({3, 0}))->sizes == Shape{2, 0});
  Tensor a = mini::ones({2, 3});
  CHECK_MINI_ERROR(mini::matmul(a, mini::ones({2, 3})), Error::Kind::Runtime, "2x3 and 2x3");
  CHECK_MINI_ERROR(mini::matmul(a, mini::scalar_tensor(1, DType::Float32)), Error::Kind::Runtime,
                   "at least 1D");
  CHECK_MINI_ERROR(mini::matmul(a, mini::ones({3, 2}, DType::Float64)), Error::Kind::Runtime,
                   "same dtype");
  CHECK_MINI_ERROR(mini::matmul(mini::ones({2}), mini::ones({3})), Error::Kind::Runtime,
                   "inconsistent tensor size");
  CHECK_MINI_ERROR(mini::matmul(mini::ones({2, 2}, DType::Bool), mini::ones({2, 2}, DType::Bool)),
                   Error::Kind::Runtime, "bool");
}

TEST_CASE("softmax and log_softmax, hand-computed", "[tensor][nn]") {
  Tensor x = make({1, 2, 3, 1, 1, 1}, {2, 3});
  check_values(mini::softmax(x, 1, false),
               {0.09003057, 0.24472847, 0.66524096, 1.0 / 3, 1.0 / 3, 1.0 / 3}, 1e-6);
  check_values(mini::softmax(x, 0, false),
               {0.5, 0.73105858, 0.88079708, 0.5, 0.26894142, 0.11920292}, 1e-6);
  check_values(mini::softmax(x, 1, true),
               {std::log(0.09003057), std::log(0.24472847), std::log(0.66524096),
                -std::log(3.0), -std::log(3.0), -std::log(3.0)}, 1e-6);
  // large inputs do not overflow
  check_values(mini::softmax(make({1000, 1000}, {2}), 0, false), {0.5, 0.5});
  check_values(mini::softmax(make({-1000, 0}, {2}, DType::Float64), 0, true), {-1000, 0});
  // -inf entries (a mask) get probability 0 and log-probability -inf
  const double inf = std::numeric_limits<double>::infinity();
  double e = std::exp(1.0);
  for (DType d : {DType::Float32, DType::Float64}) {
    Tensor masked = make({-inf, 0, 1}, {3}, d);
    check_values(mini::softmax(masked, 0, false), {0, 1 / (1 + e), e / (1 + e)}, 1e-6);
    check_values(mini::softmax(masked, 0, true),
                 {-inf, -std::log(1 + e), 1 - std::log(1 + e)}, 1e-6);
  }
  CHECK_MINI_ERROR(mini::softmax(make({1, 2}, {2}, DType::Int64), 0, false), Error::Kind::Runtime,
                   "float");
  CHECK_MINI_ERROR(mini::softmax(x, 2, false), Error::Kind::Index, "got 2");
}

TEST_CASE("softmax sums to 1 along each dim; log_softmax is its log", "[tensor][nn]") {
  mini::manual_seed(7);
  for (DType d : {DType::Float32, DType::Float64}) {
    Tensor x = mini::randn({3, 4, 5}, d);
    Tensor xt = mini::transpose(x, 0, 2);  // non-contiguous [5, 4, 3]
    for (const Tensor& in : {x, xt}) {
      for (int64_t dim : {0, 1, 2, -1}) {
        INFO(mini::dtype_name(d) << " dim " << dim << " contiguous " << in->is_contiguous());
        Tensor s = mini::softmax(in, dim, false);
        CHECK(s->sizes == in->sizes);
        Tensor sums = mini::reduce(OpKind::Sum, s, {dim}, false);
        check_values(sums, std::vector<double>(sums->numel(), 1.0), 1e-6, 1e-6);
        Tensor ls = mini::softmax(in, dim, true);
        std::vector<double> want = values(s);
        for (double& v : want) v = std::log(v);
        check_values(ls, want, 1e-5, 1e-6);
      }
    }
  }
}

TEST_CASE("layer_norm over trailing dims, with and without weight and bias", "[tensor][nn]") {
  std::vector<double> xv = {1, 2, 3, 2, 4, 6};
  double eps = 1e-5;
  auto normalized = [&](int row, int j) {
    double mean = row == 0 ? 2 : 4, var = row == 0 ? 2.0 / 3 : 8.0 / 3;
    return (xv[row * 3 + j] - mean) / std::sqrt(var + eps);
  };
  std::vector<double> plain;
  for (int r = 0; r < 2; r++)
    for (int j = 0; j < 3; j++) plain.push_back(normalized(r, j));
  for (DType d : {DType::Float32, DType::Float64}) {
    INFO(mini::dtype_name(d));
    Tensor x = make(xv, {2, 3}, d);
    check_values(mini::layer_norm(x, {3}, nullptr, nullptr, eps), plain, 1e-5, 1e-6);
    Tensor w = make({1, 2, 3}, {3}, d), b = make({0, 1, -1}, {3}, d);
    std::vector<double> affine, weight_only, bias_only;
    for (int i = 0; i < 6; i++) {
      double wv = values(w)[i % 3], bv = values(b)[i % 3];
      affine.push_back(plain[i] * wv + bv);
      weight_only.push_back(plain[i] * wv);
      bias_only.push_back(plain[i] + bv);
    }
    check_values(mini::layer_norm(x, {3}, w, b, eps), affine, 1e-5, 1e-6);
    check_values(mini::layer_norm(x, {3}, w, nullptr, eps), weight_only, 1e-5, 1e-6);
    check_values(mini::layer_norm(x, {3}, nullptr, b, eps), bias_only, 1e-5, 1e-6);
    // a transposed input is normalized along its logical last dim
    Tensor xt = mini::transpose(make({1, 2, 2, 4, 3, 6}, {3, 2}, d), 0, 1);
    check_values(mini::layer_norm(xt, {3}, nullptr, nullptr, eps), plain, 1e-5, 1e-6);
  }
  // normalized over the last two dims: each [2, 3] block has mean 3.5, variance 35/12
  Tensor x3 = make({1, 2, 3, 4, 5, 6, 1, 2, 3, 4, 5, 6}, {2, 2, 3}, DType::Float64);
  std::vector<double> want;
  for (int i = 0; i < 12; i++) want.push_back((i % 6 + 1 - 3.5) / std::sqrt(35.0 / 12 + eps));
  check_values(mini::layer_norm(x3, {2, 3}, nullptr, nullptr, eps), want, 1e-10);
  Tensor x = make(xv, {2, 3});
  CHECK_MINI_ERROR(mini::layer_norm(x, {2}, nullptr, nullptr, eps), Error::Kind::Runtime, "[2]");
  CHECK_MINI_ERROR(mini::layer_norm(x, {3}, make({1, 1}, {2}), nullptr, eps), Error::Kind::Runtime,
                   "weight");
  CHECK_MINI_ERROR(mini::layer_norm(x, {3}, nullptr, make({1, 1, 1}, {3}, DType::Float64), eps),
                   Error::Kind::Runtime, "dtype");
}

TEST_CASE("mse_loss with each reduction", "[tensor][nn]") {
  Tensor a = make({1, 2, 3}, {3});
  Tensor b = make({2, 2, 5}, {3});
  Tensor mean = mini::mse_loss(a, b, "mean");
  CHECK(mean->sizes == Shape{});
  CHECK(item(mean) == Approx(5.0 / 3));
  CHECK(item(mini::mse_loss(a, b, "sum")) == 5);
  Tensor none = mini::mse_loss(a, b, "none");
  CHECK(none->sizes == Shape{3});
  check_values(none, {1, 0, 4});
  // broadcast target and a float64 operand
  Tensor rows = make({1, 2, 3, 4, 5, 6}, {2, 3}, DType::Float64);
  Tensor bl = mini::mse_loss(rows, a, "sum");
  CHECK(bl->dtype == DType::Float64);
  CHECK(item(bl) == 0 + 0 + 0 + 9 + 9 + 9);
  CHECK_MINI_ERROR(mini::mse_loss(a, b, "avg"), Error::Kind::Value, "avg");
  CHECK_MINI_ERROR(
      mini::mse_loss(make({1}, {1}, DType::Int64), make({1}, {1}, DType::Int64), "sum"),
      Error::Kind::Runtime, "floating");
}

TEST_CASE("fused attention equals its ops, forward and gradients; it refuses what it cannot take",
          "[tensor][nn][attention]") {
  mini::manual_seed(11);
  for (bool causal : {false, true}) {
    INFO("causal " << causal);
    // L != S, a non-contiguous query (a transposed view), float64
    Tensor q = mini::transpose(mini::randn({2, 5, 3, 4}, DType::Float64), 1, 2);  // [2, 3, 5, 4]
    Tensor k = mini::randn({2, 3, 7, 4}, DType::Float64), v = mini::randn({2, 3, 7, 6}, DType::Float64);
    for (Tensor* t : {&q, &k, &v}) (*t)->requires_grad = true;
    const double scale = 0.4;
    Tensor fused = mini::scaled_dot_product_attention(q, k, v, causal, scale);
    CHECK(fused->sizes == Shape{2, 3, 5, 6});
    // the same through matmul, masked_fill and softmax
    Tensor s = mini::binary(OpKind::Mul, mini::matmul(q, mini::transpose(k, 2, 3)), number(scale, DType::Float64));
    if (causal) {
      Tensor i = mini::unsqueeze(mini::arange(0, 5, 1, DType::Int64), 1);
      Tensor j = mini::unsqueeze(mini::arange(0, 7, 1, DType::Int64), 0);
      s = mini::masked_fill(s, mini::binary(OpKind::Gt, j, i),
                            number(-std::numeric_limits<double>::infinity(), DType::Float64));
    }
    Tensor ops = mini::matmul(mini::softmax(s, -1, false), v);
    check_values(fused, values(ops), 1e-12, 1e-12);
    Tensor g = mini::randn({2, 3, 5, 6}, DType::Float64);
    std::vector<std::vector<double>> want;
    for (const Tensor& t : {ops, fused}) {
      for (Tensor* p : {&q, &k, &v}) (*p)->grad = nullptr;
      mini::backward(t, g, false);
      if (want.empty()) for (Tensor* p : {&q, &k, &v}) want.push_back(values((*p)->grad));
      else for (int n = 0; n < 3; n++) check_values(n == 0 ? q->grad : n == 1 ? k->grad : v->grad, want[n], 1e-10, 1e-12);
    }
  }
  std::string why;
  CHECK_FALSE(mini::fused_attention_supports(mini::ones({2, 3, 4}), mini::ones({1, 3, 4}), mini::ones({2, 3, 4}), &why));
  CHECK(why.find("broadcast") != std::string::npos);
  CHECK_FALSE(mini::fused_attention_supports(mini::ones({3, 4}), mini::ones({3, 5}), mini::ones({3, 4}), &why));
  CHECK_MINI_ERROR(mini::scaled_dot_product_attention(mini::ones({3, 4}), mini::ones({3, 4}, DType::Float64),
                                                      mini::ones({3, 4}), false, 1.0),
                   Error::Kind::Runtime, "different dtypes");
  CHECK_MINI_ERROR(mini::scaled_dot_product_attention(mini::ones({3, 4}), mini::ones({0, 4}), mini::ones({0, 4}), false, 1.0),
                   Error::Kind::Runtime, "no keys");
}
