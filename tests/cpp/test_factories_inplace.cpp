// test_factories_inplace.cpp — factories.cpp (full/zeros/ones/arange/scalar_tensor/rand/
// randn/manual_seed) and inplace.cpp (copy_, fill_, add_/sub_/mul_/div_): values, version
// bumps, and the autograd checks on leaves.
#include "helpers.h"

using namespace mini_test;
using mini::Error;

TEST_CASE("full, zeros, ones and empty", "[tensor][factories]") {
  Tensor f = mini::full({2, 3}, 2.5);
  CHECK(f->dtype == DType::Float32);
  CHECK(f->sizes == Shape{2, 3});
  CHECK(f->is_contiguous());
  check_values(f, std::vector<double>(6, 2.5));
  check_values(mini::full({2}, 3.9, DType::Int64), {3, 3});
  check_values(mini::full({2}, 0.5, DType::Bool), {1, 1});
  check_values(mini::zeros({3}, DType::Float64), {0, 0, 0});
  check_values(mini::ones({2, 2}, DType::Int64), {1, 1, 1, 1});
  CHECK(mini::zeros({})->sizes == Shape{});
  CHECK(mini::zeros({0, 4})->numel() == 0);
  Tensor e = mini::empty({4, 5}, DType::Float64);
  CHECK(e->sizes == Shape{4, 5});
  CHECK(e->strides == Strides{5, 1});
  CHECK(e->storage->nbytes == 4 * 5 * 8);
  CHECK_MINI_ERROR(mini::full({2, -1}, 0), Error::Kind::Runtime, "negative dimension");
}

TEST_CASE("arange counts up or down by step", "[tensor][factories]") {
  check_values(mini::arange(0, 5, 1, DType::Int64), {0, 1, 2, 3, 4});
  CHECK(mini::arange(0, 5, 1, DType::Int64)->dtype == DType::Int64);
  check_values(mini::arange(0, 1, 0.25, DType::Float32), {0, 0.25, 0.5, 0.75});
  check_values(mini::arange(5, 0, -2, DType::Float64), {5, 3, 1});
  check_values(mini::arange(1, 2.5, 0.5, DType::Float64), {1, 1.5, 2});
  CHECK(mini::arange(3, 3, 1, DType::Float32)->sizes == Shape{0});
  CHECK_MINI_ERROR(mini::arange(0, 5, 0, DType::Float32), Error::Kind::Runtime, "nonzero");
  CHECK_MINI_ERROR(mini::arange(0, 5, -1, DType::Float32), Error::Kind::Runtime, "step sign");
}

// The factory OpKinds a captured graph holds run the same kernels (run_graph, inductor's
// extern calls); random ones draw from the same generator.
TEST_CASE("factory OpKinds run the factories", "[tensor][factories]") {
  mini::Attrs a;
  a.shape = {2, 2};
  a.value = 3.5;
  a.dtype = DType::Float64;
  Tensor f = mini::call_op(OpKind::Full, {}, a);
  CHECK(f->dtype == DType::Float64);
  check_values(f, {3.5, 3.5, 3.5, 3.5});
  CHECK(mini::call_op(OpKind::Empty, {}, a)->sizes == Shape{2, 2});
  mini::Attrs r;
  r.start = 10;
  r.end = 0;
  r.step = -3;
  r.dtype = DType::Int64;
  check_values(mini::call_op(OpKind::Arange, {}, r), {10, 7, 4, 1});
  a.dtype = DType::Float32;
  mini::manual_seed(5);
  std::vector<double> want = values(mini::randn({2, 2}));
  mini::manual_seed(5);
  check_values(mini::call_op(OpKind::Randn, {}, a), want);
  CHECK(mini::is_random(OpKind::Rand));
  CHECK_FALSE(mini::is_random(OpKind::Full));
  CHECK_MINI_ERROR(mini::call_op(OpKind::Full, {f}, a), Error::Kind::Runtime, "input");
}

TEST_CASE("scalar_tensor is 0-d and marks wrapped numbers", "[tensor][factories]") {
  Tensor s = mini::scalar_tensor(4.5, DType::Float64);
  CHECK(s->dim() == 0);
  CHECK(s->numel() == 1);
  CHECK_FALSE(s->wrapped_number);
  CHECK(item(s) == 4.5);
  Tensor w = mini::scalar_tensor(3, DType::Int64, true);
  CHECK(w->wrapped_number);
  CHECK(item(w) == 3);
  CHECK_MINI_ERROR(item(mini::ones({2})), Error::Kind::Runtime, "2 elements");
}

TEST_CASE("rand is uniform in [0, 1) and reproducible after manual_seed", "[tensor][factories]") {
  for (DType d : {DType::Float32, DType::Float64}) {
    INFO(mini::dtype_name(d));
    mini::manual_seed(123);
    Tensor a = mini::rand({10000}, d);
    mini::manual_seed(123);
    Tensor b = mini::rand({10000}, d);
    Tensor c = mini::rand({10000}, d);
    std::vector<double> av = values(a);
    CHECK(av == values(b));
    CHECK(av != values(c));
    double lo = 1, hi = 0, sum = 0;
    for (double v : av) {
      lo = std::min(lo, v);
      hi = std::max(hi, v);
      sum += v;
    }
    CHECK(lo >= 0);
    CHECK(hi < 1);
    CHECK(lo < 0.01);
    CHECK(hi > 0.99);
    CHECK(sum / av.size() == Approx(0.5).margin(0.02));
  }
  CHECK_MINI_ERROR(mini::rand({2}, DType::Int64), Error::Kind::Runtime, "floating");
}

TEST_CASE("randn is standard normal and reproducible after manual_seed", "[tensor][factories]") {
  for (DType d : {DType::Float32, DType::Float64}) {
    INFO(mini::dtype_name(d));
    mini::manual_seed(99);
    Tensor a = mini::randn({10001}, d);  // odd: the last Box-Muller pair is half used
    mini::manual_seed(99);
    Tensor b = mini::randn({10001}, d);
    std::vector<double> av = values(a);
    CHECK(av == values(b));
    double sum = 0, sq = 0;
    for (double v : av) {
      sum += v;
      sq += v * v;
    }
    double mean = sum / av.size(), var = sq / av.size() - mean * mean;
    CHECK(mean == Approx(0).margin(0.05));
    CHECK(var == Approx(1).margin(0.05));
  }
  mini::manual_seed(5);
  Tensor shaped = mini::randn({2, 3});
  CHECK(shaped->sizes == Shape{2, 3});
  mini::manual_seed(5);
  CHECK(values(mini::randn({6})) == values(shaped));
  CHECK_MINI_ERROR(mini::randn({2}, DType::Bool), Error::Kind::Runtime, "floating");
}

TEST_CASE("copy_ writes, broadcasts, converts and bumps the version", "[tensor][inplace]") {
  Tensor dst = mini::zeros({2, 3});
  uint64_t v0 = dst->storage->version;
  mini::copy_(dst, make({1, 2, 3}, {3}, DType::Int64));
  CHECK(dst->storage->version == v0 + 1);
  check_values(dst, {1, 2, 3, 1, 2, 3});
  // into a transposed view: the base sees the write
  Tensor base = mini::zeros({2, 3});
  mini::copy_(mini::transpose(base, 0, 1), make({1, 2, 3, 4, 5, 6}, {3, 2}));
  check_values(base, {1, 3, 5, 2, 4, 6});
  Tensor flags = mini::zeros({3}, DType::Bool);
  mini::copy_(flags, make({0, 0.5, -2}, {3}));
  check_values(flags, {0, 1, 1});
  CHECK_MINI_ERROR(mini::copy_(mini::zeros({3}), mini::zeros({2, 3})), Error::Kind::Runtime,
                   "[3]");
  CHECK_MINI_ERROR(mini::copy_(dst, nullptr), Error::Kind::Type, "src");
}

TEST_CASE("fill_ writes a value into a (strided) tensor", "[tensor][inplace]") {
  Tensor x = mini::zeros({3, 3}, DType::Int64);
  uint64_t v0 = x->storage->version;
  mini::fill_(mini::select(x, 1, 1), 7);
  CHECK(x->storage->version == v0 + 1);
  check_values(x, {0, 7, 0, 0, 7, 0, 0, 7, 0});
}

TEST_CASE("in-place binary ops", "[tensor][inplace]") {
  Tensor x = make({1, 2, 3, 4}, {2, 2});
  uint64_t v0 = x->storage->version;
  mini::inplace_binary(OpKind::Add, x, make({10, 20}, {2}));
  check_values(x, {11, 22, 13, 24});
  mini::inplace_binary(OpKind::Sub, x, number(1, DType::Int64));
  check_values(x, {10, 21, 12, 23});
  mini::inplace_binary(OpKind::Mul, x, make({2}, {1}));
  check_values(x, {20, 42, 24, 46});
  mini::inplace_binary(OpKind::Div, x, number(4, DType::Float64));
  check_values(x, {5, 10.5, 6, 11.5});
  CHECK(x->storage->version == v0 + 4);
  CHECK(x->dtype == DType::Float32);
  // through a view, into its base
  Tensor row = mini::select(x, 0, 1);
  mini::inplace_binary(OpKind::Mul, row, number(2, DType::Int64));
  check_values(x, {5, 10.5, 12, 23});
  // int64 self: float results cannot be stored, and the shape cannot grow
  Tensor i = make({1, 2}, {2}, DType::Int64);
  mini::inplace_binary(OpKind::Add, i, number(3, DType::Int64));
  check_values(i, {4, 5});
  CHECK_MINI_ERROR(mini::inplace_binary(OpKind::Add, i, number(0.5, DType::Float64)),
                   Error::Kind::Runtime, "can't be cast");
  CHECK_MINI_ERROR(mini::inplace_binary(OpKind::Div, i, number(2, DType::Int64)),
                   Error::Kind::Runtime, "float32");
  CHECK_MINI_ERROR(mini::inplace_binary(OpKind::Add, make({1, 2}, {2}), mini::ones({2, 2})),
                   Error::Kind::Runtime, "broadcast shape");
}

TEST_CASE("in-place ops refuse a leaf that requires grad under grad mode",
          "[tensor][inplace][autograd]") {
  GradModeRestorer restore;
  mini::set_grad_enabled(true);
  Tensor w = leaf({1, 2}, {2});
  uint64_t v0 = w->storage->version;
  CHECK_MINI_ERROR(mini::inplace_binary(OpKind::Add, w, number(1, DType::Int64)),
                   Error::Kind::Runtime, "leaf Variable");
  CHECK_MINI_ERROR(mini::fill_(w, 0), Error::Kind::Runtime, "leaf Variable");
  CHECK_MINI_ERROR(mini::copy_(w, mini::zeros({2}, DType::Float64)), Error::Kind::Runtime,
                   "leaf Variable");
  CHECK_MINI_ERROR(
      mini::inplace_binary(OpKind::Mul, mini::select(w, 0, 0), number(2, DType::Int64)),
      Error::Kind::Runtime, "view of a leaf");
  CHECK(w->storage->version == v0);
  check_values(w, {1, 2});
  {
    mini::NoGradGuard no_grad;
    CHECK_FALSE(mini::grad_enabled());
    mini::inplace_binary(OpKind::Sub, w, make({0.5, 0.5}, {2}, DType::Float64));
    mini::inplace_binary(OpKind::Mul, mini::select(w, 0, 1), number(10, DType::Int64));
    mini::fill_(mini::select(w, 0, 0), 7);
  }
  CHECK(mini::grad_enabled());
  CHECK(w->storage->version == v0 + 3);
  check_values(w, {7, 15});
  CHECK(w->is_leaf());
  CHECK(w->grad_fn == nullptr);
}

TEST_CASE("in-place op with self as the other operand", "[tensor][inplace]") {
  Tensor x = make({1, 2, 3, 4}, {2, 2});
  mini::inplace_binary(OpKind::Add, x, x);
  check_values(x, {2, 4, 6, 8});
  mini::inplace_binary(OpKind::Mul, mini::transpose(x, 0, 1), mini::transpose(x, 0, 1));
  check_values(x, {4, 16, 36, 64});
}

// An `other` that shares self's memory in any way other than being exactly self goes
// through a temporary: the result is the out-of-place answer (torch refuses such partial
// overlap; mini computes it correctly).
TEST_CASE("in-place op whose other operand partially overlaps self", "[tensor][inplace]") {
  auto check_add = [](const char* what, const Tensor& self, const Tensor& other,
                      const Tensor& base, const std::vector<double>& want) {
    INFO(what);
    CHECK_NOTHROW(mini::inplace_binary(OpKind::Add, self, other));
    check_values(base, want);
  };
  Tensor x = make({1, 2, 3, 4}, {2, 2});
  check_add("x += x.T", x, mini::transpose(x, 0, 1), x, {2, 5, 5, 8});
  Tensor y = make({1, 2, 3, 4}, {2, 2});
  check_add("y += y[0]", y, mini::select(y, 0, 0), y, {2, 4, 4, 6});
  Tensor z = make({1, 2, 3, 4, 5, 6, 7, 8}, {8});
  check_add("z[1:] += z[:-1]", mini::slice(z, 0, 1, 8, 1), mini::slice(z, 0, 0, 7, 1), z,
            {1, 3, 5, 7, 9, 11, 13, 15});
}
