// test_views.cpp — views.cpp: reshape/view/transpose/permute/unsqueeze/squeeze/expand/
// slice/select/detach share the base's storage and get the right sizes, strides, offset.
#include <numeric>

#include "helpers.h"

using namespace mini_test;
using mini::Error;

namespace {
Tensor iota(const Shape& shape, DType d = DType::Float32) {
  std::vector<double> v(mini::numel_of(shape));
  std::iota(v.begin(), v.end(), 0.0);
  return make(v, shape, d);
}

void check_view(const Tensor& v, const Tensor& base, const Shape& sizes, const Strides& strides,
                int64_t offset) {
  CHECK(v->storage == base->storage);
  CHECK(v->sizes == sizes);
  CHECK(v->strides == strides);
  CHECK(v->offset == offset);
  CHECK(v->dtype == base->dtype);
}
}  // namespace

TEST_CASE("reshape is a view when strides allow and a copy otherwise", "[tensor][views]") {
  Tensor x = iota({2, 3, 4});
  check_view(mini::reshape(x, {6, 4}), x, {6, 4}, {4, 1}, 0);
  check_view(mini::reshape(x, {-1}), x, {24}, {1}, 0);
  check_view(mini::reshape(x, {2, -1, 2}), x, {2, 6, 2}, {12, 2, 1}, 0);
  Tensor t = mini::transpose(x, 1, 2);  // [2, 4, 3]
  Tensor flat = mini::reshape(t, {24});
  CHECK(flat->storage != x->storage);
  CHECK(flat->sizes == Shape{24});
  std::vector<double> v = values(flat);
  CHECK(v[0] == 0);
  CHECK(v[1] == 4);
  CHECK(v[2] == 8);
  CHECK(v[3] == 1);
  CHECK_MINI_ERROR(mini::reshape(x, {5, -1}), Error::Kind::Runtime, "size 24");
}

TEST_CASE("view refuses what reshape would copy", "[tensor][views]") {
  Tensor x = iota({2, 3});
  check_view(mini::view(x, {3, 2}), x, {3, 2}, {2, 1}, 0);
  Tensor t = mini::transpose(x, 0, 1);
  CHECK_MINI_ERROR(mini::view(t, {6}), Error::Kind::Runtime, "reshape");
  CHECK_MINI_ERROR(mini::view(t, {6}), Error::Kind::Runtime, "[3, 2]");
  check_view(mini::view(t, {3, 1, 2}), x, {3, 1, 2}, {1, 6, 3}, 0);
  CHECK_MINI_ERROR(mini::view(x, {4}), Error::Kind::Runtime, "[4]");
}

TEST_CASE("transpose and permute swap sizes and strides", "[tensor][views]") {
  Tensor x = iota({2, 3, 4});
  Tensor t = mini::transpose(x, 0, 2);
  check_view(t, x, {4, 3, 2}, {1, 4, 12}, 0);
  check_view(mini::transpose(x, -1, -2), x, {2, 4, 3}, {12, 1, 4}, 0);
  check_view(mini::transpose(x, 1, 1), x, {2, 3, 4}, {12, 4, 1}, 0);
  check_values(mini::transpose(iota({2, 2}), 0, 1), {0, 2, 1, 3});
  Tensor p = mini::permute(x, {2, 0, 1});
  check_view(p, x, {4, 2, 3}, {1, 12, 4}, 0);
  check_view(mini::permute(x, {-1, -3, -2}), x, {4, 2, 3}, {1, 12, 4}, 0);
  std::vector<double> pv = values(p);
  CHECK(pv[1] == 4);   // p[0, 0, 1] = x[0, 1, 0]
  CHECK(pv[3] == 12);  // p[0, 1, 0] = x[1, 0, 0]
  CHECK_MINI_ERROR(mini::permute(x, {0, 1}), Error::Kind::Runtime, "len(dims) = 2");
  CHECK_MINI_ERROR(mini::permute(x, {0, 1, 1}), Error::Kind::Runtime, "duplicate");
  CHECK_MINI_ERROR(mini::transpose(x, 0, 3), Error::Kind::Index, "got 3");
}

TEST_CASE("unsqueeze and squeeze insert and drop size-1 dims", "[tensor][views]") {
  Tensor x = iota({2, 3});
  check_view(mini::unsqueeze(x, 0), x, {1, 2, 3}, {6, 3, 1}, 0);
  check_view(mini::unsqueeze(x, 1), x, {2, 1, 3}, {3, 3, 1}, 0);
  check_view(mini::unsqueeze(x, -1), x, {2, 3, 1}, {3, 1, 1}, 0);
  Tensor s = mini::scalar_tensor(1, DType::Float32);
  check_view(mini::unsqueeze(s, 0), s, {1}, {1}, 0);
  CHECK_MINI_ERROR(mini::unsqueeze(x, 3), Error::Kind::Index, "got 3");

  Tensor y = iota({1, 3, 1, 2});
  check_view(mini::squeeze(y, {}), y, {3, 2}, {2, 1}, 0);
  check_view(mini::squeeze(y, {2}), y, {1, 3, 2}, {6, 2, 1}, 0);
  check_view(mini::squeeze(y, {0, -2}), y, {3, 2}, {2, 1}, 0);
  check_view(mini::squeeze(y, {1}), y, {1, 3, 1, 2}, {6, 2, 2, 1}, 0);  // size 3: kept
  CHECK_MINI_ERROR(mini::squeeze(y, {4}), Error::Kind::Index, "got 4");
}

TEST_CASE("expand stretches size-1 dims with stride 0", "[tensor][views]") {
  Tensor x = make({1, 2, 3}, {3, 1});
  Tensor e = mini::expand(x, {2, 3, 4});
  check_view(e, x, {2, 3, 4}, {0, 1, 0}, 0);
  check_values(e, {1, 1, 1, 1, 2, 2, 2, 2, 3, 3, 3, 3, 1, 1, 1, 1, 2, 2, 2, 2, 3, 3, 3, 3});
  check_view(mini::expand(x, {-1, 5}), x, {3, 5}, {1, 0}, 0);
  CHECK_MINI_ERROR(mini::expand(x, {3, 2, 4}), Error::Kind::Runtime, "non-singleton");
  CHECK_MINI_ERROR(mini::expand(x, {4}), Error::Kind::Runtime, "number of sizes");
  CHECK_MINI_ERROR(mini::expand(x, {-1, 3, 1}), Error::Kind::Runtime, "-1");
}

TEST_CASE("expand rejects negative sizes", "[tensor][views]") {
  Tensor x = make({1}, {1});
  CHECK_THROWS_AS(mini::expand(x, {-2}), mini::Error);
  CHECK_MINI_ERROR(mini::expand(x, {-2}), Error::Kind::Runtime, "-2");
  CHECK_MINI_ERROR(mini::expand(x, {3, -5}), Error::Kind::Runtime, "-5");
}

TEST_CASE("slice moves the offset and multiplies the stride", "[tensor][views]") {
  Tensor x = iota({4, 6});
  check_view(mini::slice(x, 1, 1, 3, 1), x, {4, 2}, {6, 1}, 1);
  check_view(mini::slice(x, 0, 1, 4, 2), x, {2, 6}, {12, 1}, 6);
  check_view(mini::slice(x, 1, 0, 6, 4), x, {4, 2}, {6, 4}, 0);
  check_values(mini::slice(x, 1, 0, 6, 4), {0, 4, 6, 10, 12, 16, 18, 22});
  // negative and out-of-range bounds clamp, as Python slicing
  check_view(mini::slice(x, -1, -2, 100, 1), x, {4, 2}, {6, 1}, 4);
  check_view(mini::slice(x, 0, 3, 1, 1), x, {0, 6}, {6, 1}, 18);
  check_view(mini::slice(x, 0, -100, 1, 1), x, {1, 6}, {6, 1}, 0);
  // slice of a slice composes offsets
  Tensor s = mini::slice(mini::slice(x, 1, 2, 6, 1), 0, 1, 3, 1);
  check_view(s, x, {2, 4}, {6, 1}, 8);
  check_values(s, {8, 9, 10, 11, 14, 15, 16, 17});
  CHECK_MINI_ERROR(mini::slice(x, 0, 0, 2, 0), Error::Kind::Value, "step");
  CHECK_MINI_ERROR(mini::slice(mini::scalar_tensor(1, DType::Float32), 0, 0, 1, 1),
                   Error::Kind::Index, "0-d");
}

TEST_CASE("select drops a dim at an offset", "[tensor][views]") {
  Tensor x = iota({3, 4});
  check_view(mini::select(x, 0, 1), x, {4}, {1}, 4);
  check_view(mini::select(x, 1, 2), x, {3}, {4}, 2);
  check_view(mini::select(x, 1, -1), x, {3}, {4}, 3);
  check_values(mini::select(x, 1, -1), {3, 7, 11});
  Tensor row = mini::select(mini::transpose(x, 0, 1), 0, 2);  // column 2 of x
  check_view(row, x, {3}, {4}, 2);
  CHECK(item(mini::select(mini::select(x, 0, 2), 0, 3)) == 11);
  CHECK_MINI_ERROR(mini::select(x, 0, 3), Error::Kind::Index, "out of bounds");
  CHECK_MINI_ERROR(mini::select(x, 0, -4), Error::Kind::Index, "size 3");
  CHECK_MINI_ERROR(mini::select(mini::scalar_tensor(1, DType::Float32), 0, 0),
                   Error::Kind::Index, "0-dim");
}

TEST_CASE("views see writes to their base, and detach shares storage",
          "[tensor][views]") {
  Tensor x = iota({2, 3});
  Tensor col = mini::select(x, 1, 1);
  Tensor t = mini::transpose(x, 0, 1);
  mini::fill_(mini::select(x, 0, 1), 9);  // row 1 := 9
  check_values(col, {1, 9});
  check_values(t, {0, 9, 1, 9, 2, 9});
  Tensor leaf_x = leaf({1, 2}, {2});
  Tensor d = mini::detach(leaf_x);
  CHECK(d->storage == leaf_x->storage);
  CHECK_FALSE(d->requires_grad);
  CHECK(d->grad_fn == nullptr);
  CHECK_FALSE(d->view_of_grad_leaf);
  Tensor v = mini::transpose(mini::unsqueeze(leaf_x, 0), 0, 1);
  CHECK(v->view_of_grad_leaf);
  CHECK(v->grad_fn != nullptr);
}

TEST_CASE("sum_to reduces broadcast dims back to a shape", "[tensor][views]") {
  Tensor g = iota({2, 3, 4}, DType::Float64);
  check_values(mini::sum_to(g, {3, 4}), {12, 14, 16, 18, 20, 22, 24, 26, 28, 30, 32, 34});
  check_values(mini::sum_to(g, {3, 1}), {60, 92, 124});
  CHECK(mini::sum_to(g, {2, 1, 4})->sizes == Shape{2, 1, 4});
  CHECK(item(mini::sum_to(g, {})) == 276);
  CHECK(mini::sum_to(g, {2, 3, 4}) == g);
}
