// test_reduce.cpp — reduce.cpp: sum/mean/amax/amin over all, one and several dims, with and
// without keepdim, on each of the three loop shapes (contiguous tail, contiguous head,
// strided); max/min along a dim with indices; nonzero.
#include <limits>
#include <numeric>

#include "helpers.h"

using namespace mini_test;
using mini::Error;

namespace {
const double kNaN = std::numeric_limits<double>::quiet_NaN();

// x[i, j, k] = 12 i + 4 j + k, shape [2, 3, 4].
Tensor iota234(DType d = DType::Float32) {
  std::vector<double> v(24);
  std::iota(v.begin(), v.end(), 0.0);
  return make(v, {2, 3, 4}, d);
}

Tensor red(OpKind k, const Tensor& a, std::vector<int64_t> dims, bool keepdim = false) {
  return mini::reduce(k, a, dims, keepdim);
}
}  // namespace

TEST_CASE("sum and mean over all dims", "[tensor][reduce]") {
  for (DType d : {DType::Float32, DType::Float64}) {
    Tensor x = iota234(d);
    Tensor s = red(OpKind::Sum, x, {});
    CHECK(s->sizes == Shape{});
    CHECK(s->dtype == d);
    CHECK(item(s) == 276);
    CHECK(item(red(OpKind::Mean, x, {})) == 11.5);
    CHECK(item(red(OpKind::Amax, x, {})) == 23);
    CHECK(item(red(OpKind::Amin, x, {})) == 0);
    Tensor kept = red(OpKind::Sum, x, {}, true);
    CHECK(kept->sizes == Shape{1, 1, 1});
    CHECK(item(kept) == 276);
    CHECK(item(red(OpKind::Sum, x, {0, 1, 2})) == 276);
  }
}

TEST_CASE("reductions over one dim: tail, middle and head", "[tensor][reduce]") {
  Tensor x = iota234();
  Tensor tail = red(OpKind::Sum, x, {2});
  CHECK(tail->sizes == Shape{2, 3});
  check_values(tail, {6, 22, 38, 54, 70, 86});
  check_values(red(OpKind::Sum, x, {-1}), {6, 22, 38, 54, 70, 86});
  Tensor mid = red(OpKind::Sum, x, {1}, true);
  CHECK(mid->sizes == Shape{2, 1, 4});
  check_values(mid, {12, 15, 18, 21, 48, 51, 54, 57});
  Tensor head = red(OpKind::Sum, x, {0});
  CHECK(head->sizes == Shape{3, 4});
  check_values(head, {12, 14, 16, 18, 20, 22, 24, 26, 28, 30, 32, 34});
  check_values(red(OpKind::Mean, x, {1}), {4, 5, 6, 7, 16, 17, 18, 19});
  check_values(red(OpKind::Amax, x, {1}), {8, 9, 10, 11, 20, 21, 22, 23});
  check_values(red(OpKind::Amin, x, {1}), {0, 1, 2, 3, 12, 13, 14, 15});
  check_values(red(OpKind::Amax, x, {2}), {3, 7, 11, 15, 19, 23});
  check_values(red(OpKind::Amin, x, {0}, true), {0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11});
}

TEST_CASE("reductions over several dims", "[tensor][reduce]") {
  Tensor x = iota234(DType::Float64);
  Tensor a = red(OpKind::Sum, x, {0, 2});  // not a contiguous head or tail: strided
  CHECK(a->sizes == Shape{3});
  check_values(a, {60, 92, 124});
  Tensor b = red(OpKind::Sum, x, {2, 0}, true);
  CHECK(b->sizes == Shape{1, 3, 1});
  check_values(b, {60, 92, 124});
  check_values(red(OpKind::Mean, x, {0, 2}), {7.5, 11.5, 15.5});
  check_values(red(OpKind::Amax, x, {0, 2}), {15, 19, 23});
  check_values(red(OpKind::Amin, x, {-1, -3}), {0, 4, 8});
  // the leading dims: the "outer" loop (rows accumulate)
  Tensor lead = red(OpKind::Sum, x, {0, 1});
  CHECK(lead->sizes == Shape{4});
  check_values(lead, {60, 66, 72, 78});
  check_values(red(OpKind::Mean, x, {0, 1}), {10, 11, 12, 13});
  check_values(red(OpKind::Amax, x, {0, 1}, true), {20, 21, 22, 23});
  check_values(red(OpKind::Amin, x, {1, 0}), {0, 1, 2, 3});
  // the trailing dims
  check_values(red(OpKind::Sum, x, {1, 2}), {66, 210});
  check_values(red(OpKind::Amax, x, {-2, -1}), {11, 23});
}

TEST_CASE("reductions of a transposed (non-contiguous) input", "[tensor][reduce]") {
  Tensor xt = mini::transpose(iota234(), 0, 2);  // [4, 3, 2]: xt[k, j, i] = x[i, j, k]
  REQUIRE_FALSE(xt->is_contiguous());
  CHECK(item(red(OpKind::Sum, xt, {})) == 276);
  CHECK(item(red(OpKind::Amax, xt, {})) == 23);
  Tensor s0 = red(OpKind::Sum, xt, {0});
  CHECK(s0->sizes == Shape{3, 2});
  check_values(s0, {6, 54, 22, 70, 38, 86});
  check_values(red(OpKind::Sum, xt, {1, 2}), {60, 66, 72, 78});
  check_values(red(OpKind::Amax, xt, {2}), {12, 16, 20, 13, 17, 21, 14, 18, 22, 15, 19, 23});
  check_values(red(OpKind::Mean, xt, {0, 1}, true), {5.5, 17.5});
  // a sliced input with an offset: columns 1..2 of every row
  Tensor part = mini::slice(iota234(), 2, 1, 3, 1);  // [2, 3, 2]
  check_values(red(OpKind::Sum, part, {2}), {3, 11, 19, 27, 35, 43});
  check_values(red(OpKind::Amin, part, {0, 1}), {1, 2});
}

TEST_CASE("integer and bool reductions", "[tensor][reduce]") {
  Tensor i = make({3, -1, 4, 1, -5, 9}, {2, 3}, DType::Int64);
  CHECK(red(OpKind::Sum, i, {})->dtype == DType::Int64);
  check_values(red(OpKind::Sum, i, {1}), {6, 5});
  check_values(red(OpKind::Amax, i, {0}), {3, -1, 9});
  check_values(red(OpKind::Amin, i, {}), {-5});
  Tensor b = make({1, 0, 1, 1}, {4}, DType::Bool);
  Tensor count = red(OpKind::Sum, b, {});
  CHECK(count->dtype == DType::Int64);
  CHECK(item(count) == 3);
  CHECK_MINI_ERROR(red(OpKind::Mean, i, {}), Error::Kind::Runtime, "int64");
}

TEST_CASE("reductions of 0-d, empty and large tensors", "[tensor][reduce]") {
  Tensor s = mini::scalar_tensor(2.5, DType::Float32);
  CHECK(item(red(OpKind::Sum, s, {})) == 2.5);
  CHECK(item(red(OpKind::Mean, s, {0})) == 2.5);
  Tensor e = mini::empty({0, 3}, DType::Float32);
  check_values(red(OpKind::Sum, e, {0}), {0, 0, 0});
  CHECK(std::isnan(item(red(OpKind::Mean, e, {}))));
  // torch's rules: a full amax of an empty tensor needs a dim; over an empty dim it raises,
  // over a non-empty one it returns an empty tensor
  CHECK_MINI_ERROR(red(OpKind::Amax, e, {}), Error::Kind::Runtime,
                   "amax(): Expected reduction dim to be specified for input.numel() == 0.");
  CHECK_MINI_ERROR(red(OpKind::Amin, e, {0}), Error::Kind::Index,
                   "amin(): Expected reduction dim 0 to have non-zero size.");
  CHECK(red(OpKind::Amax, e, {1})->sizes == mini::Shape{0});
  // large enough for the parallel paths
  Tensor big = mini::ones({1 << 17}, DType::Float32);
  CHECK(item(red(OpKind::Sum, big, {})) == (1 << 17));
  Tensor rows = mini::ones({256, 512}, DType::Float32);
  check_values(red(OpKind::Sum, red(OpKind::Sum, rows, {1}), {}), {256 * 512});
  check_values(red(OpKind::Amax, red(OpKind::Sum, rows, {0}), {}), {256});
  CHECK_MINI_ERROR(red(OpKind::Sum, big, {1}), Error::Kind::Index, "got 1");
}

TEST_CASE("amax and amin propagate NaN on every loop shape", "[tensor][reduce]") {
  Tensor x = make({1, kNaN, 3, 4, 5, 6}, {2, 3});
  check_values(red(OpKind::Amax, x, {}), {kNaN});
  check_values(red(OpKind::Amin, x, {}), {kNaN});
  check_values(red(OpKind::Amax, x, {1}), {kNaN, 6});                  // tail
  check_values(red(OpKind::Amin, x, {0}), {1, kNaN, 3});               // head
  check_values(red(OpKind::Amax, mini::transpose(x, 0, 1), {0}), {kNaN, 6});  // strided
  check_values(red(OpKind::Amin, mini::transpose(x, 0, 1), {1}), {1, kNaN, 3});
  check_values(red(OpKind::Sum, x, {1}), {kNaN, 15});
  Tensor nan_first = make({kNaN, 1, 2}, {3}, DType::Float64);
  check_values(red(OpKind::Amax, nan_first, {0}), {kNaN});
}

TEST_CASE("max_min_dim gives values and first indices", "[tensor][reduce]") {
  Tensor x = make({1, 5, 3, 7, 2, 7}, {2, 3});
  auto [mx, mi] = mini::max_min_dim(x, 1, false, true);
  CHECK(mx->sizes == Shape{2});
  CHECK(mi->dtype == DType::Int64);
  check_values(mx, {5, 7});
  check_values(mi, {1, 0});
  auto [nv, ni] = mini::max_min_dim(x, -1, false, false);
  check_values(nv, {1, 2});
  check_values(ni, {0, 1});
  auto [cv, ci] = mini::max_min_dim(x, 0, true, true);
  CHECK(cv->sizes == Shape{1, 3});
  CHECK(ci->sizes == Shape{1, 3});
  check_values(cv, {7, 5, 7});
  check_values(ci, {1, 0, 1});
  // transposed input: [3, 2]
  auto [tv, ti] = mini::max_min_dim(mini::transpose(x, 0, 1), 0, false, false);
  check_values(tv, {1, 2});
  check_values(ti, {0, 1});
  // NaN wins, at its own index
  auto [nanv, nani] = mini::max_min_dim(make({1, kNaN, 9, 4}, {4}), 0, false, true);
  check_values(nanv, {kNaN});
  check_values(nani, {1});
  // int64
  auto [iv, ii] = mini::max_min_dim(make({4, -2, 8, 8}, {2, 2}, DType::Int64), 1, false, true);
  check_values(iv, {4, 8});
  check_values(ii, {0, 0});
  // 0-d reduces to itself, index 0
  auto [sv, si] = mini::max_min_dim(mini::scalar_tensor(3, DType::Float32), 0, false, true);
  CHECK(item(sv) == 3);
  CHECK(item(si) == 0);
  CHECK_MINI_ERROR(mini::max_min_dim(mini::empty({2, 0}), 1, false, true), Error::Kind::Index,
                   "max(): Expected reduction dim 1 to have non-zero size.");
  CHECK_MINI_ERROR(mini::max_min_dim(x, 2, false, true), Error::Kind::Index, "got 2");
}

TEST_CASE("nonzero lists the coordinates of nonzero elements", "[tensor][reduce]") {
  Tensor x = make({0, 1, 2, 0, 0, 3}, {2, 3});
  Tensor nz = mini::nonzero(x);
  CHECK(nz->dtype == DType::Int64);
  CHECK(nz->sizes == Shape{3, 2});
  check_values(nz, {0, 1, 0, 2, 1, 2});
  // in the logical order of a transposed view
  Tensor nzt = mini::nonzero(mini::transpose(x, 0, 1));
  check_values(nzt, {1, 0, 2, 0, 2, 1});
  check_values(mini::nonzero(make({1, 0, 1}, {3}, DType::Bool)), {0, 2});
  CHECK(mini::nonzero(mini::zeros({4, 2}))->sizes == Shape{0, 2});
  CHECK(mini::nonzero(mini::scalar_tensor(5, DType::Int64))->sizes == Shape{1, 0});
}

TEST_CASE("large reductions take the parallel paths and stay exact", "[tensor][reduce]") {
  // float32 sums go through float blocks into a double: 2^24 + 1000 ones sum exactly
  // (a float accumulator would stop at 2^24).
  const int64_t n = (int64_t(1) << 24) + 1000;
  Tensor ones = mini::ones({n});
  CHECK(item(red(OpKind::Sum, ones, {})) == n);
  CHECK(item(red(OpKind::Mean, ones, {})) == 1);
  // [600, 300] with x[i, j] = (i + 2 j) % 7: every loop shape above the parallel grain
  const int64_t rows = 600, cols = 300;
  std::vector<double> v(rows * cols);
  std::vector<double> row_sum(rows, 0), col_sum(cols, 0);
  for (int64_t i = 0; i < rows; i++)
    for (int64_t j = 0; j < cols; j++) {
      double x = (i + 2 * j) % 7;
      v[i * cols + j] = x;
      row_sum[i] += x;
      col_sum[j] += x;
    }
  v[17 * cols + 5] += 10;  // a planted maximum in column 5, at row 17
  row_sum[17] += 10;
  col_sum[5] += 10;
  Tensor x = make(v, {rows, cols}, DType::Float64);
  check_values(red(OpKind::Sum, x, {1}), row_sum);                           // tail
  check_values(red(OpKind::Sum, x, {0}), col_sum);                           // head
  check_values(red(OpKind::Sum, mini::transpose(x, 0, 1), {1}), col_sum);    // strided
  check_values(red(OpKind::Sum, mini::transpose(x, 0, 1), {0}), row_sum);    // strided
  auto [mv, mi] = mini::max_min_dim(x, 0, false, true);
  CHECK(values(mv)[5] == 16);
  CHECK(values(mi)[5] == 17);
  CHECK(values(mv)[0] == 6);
  CHECK(item(red(OpKind::Amax, mini::transpose(x, 0, 1), {})) == 16);
}

TEST_CASE("reductions of an expanded (stride-0) input", "[tensor][reduce]") {
  Tensor e = mini::expand(make({1, 2, 3}, {1, 3}), {4, 3});
  check_values(red(OpKind::Sum, e, {0}), {4, 8, 12});
  check_values(red(OpKind::Sum, e, {1}), {6, 6, 6, 6});
  check_values(red(OpKind::Amax, e, {}), {3});
}
