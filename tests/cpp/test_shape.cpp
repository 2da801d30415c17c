// test_shape.cpp — shape.h: the pure arithmetic on sizes and strides.
#include "helpers.h"

using namespace mini_test;
using mini::Error;

TEST_CASE("contiguous_strides are row-major, with size-0 and size-1 dims", "[tensor][shape]") {
  CHECK(mini::contiguous_strides({2, 3, 4}) == Strides{12, 4, 1});
  CHECK(mini::contiguous_strides({5}) == Strides{1});
  CHECK(mini::contiguous_strides({}) == Strides{});
  CHECK(mini::contiguous_strides({4, 1, 3}) == Strides{3, 3, 1});
  // A size-0 dim counts as 1 for the strides outside it, as torch does.
  CHECK(mini::contiguous_strides({3, 0, 2}) == Strides{2, 2, 1});
}

TEST_CASE("numel_of and shape_str", "[tensor][shape]") {
  CHECK(mini::numel_of({2, 3, 4}) == 24);
  CHECK(mini::numel_of({}) == 1);
  CHECK(mini::numel_of({3, 0}) == 0);
  CHECK(mini::shape_str({3, 4}) == "[3, 4]");
  CHECK(mini::shape_str({}) == "[]");
}

TEST_CASE("an element count past int64 is an error, not a wrapped count", "[tensor][shape]") {
  int64_t big = int64_t(1) << 62;
  CHECK_MINI_ERROR(mini::numel_of({big, 4}), Error::Kind::Runtime,
                   "[4611686018427387904, 4] overflows int64");
  CHECK(mini::numel_of({big, 4, 0}) == 0);  // nothing to index: no storage needed
  CHECK(mini::numel_of({big, 1}) == big);
  CHECK_MINI_ERROR(mini::infer_reshape({big, 4}, 0), Error::Kind::Runtime, "overflows int64");
  CHECK_MINI_ERROR(mini::empty({int64_t(1) << 61, 2}), Error::Kind::Runtime, "more bytes than int64");
}

TEST_CASE("broadcast_shapes aligns right and stretches size 1", "[tensor][shape]") {
  CHECK(mini::broadcast_shapes({3, 1}, {1, 4}) == Shape{3, 4});
  CHECK(mini::broadcast_shapes({2, 3}, {3}) == Shape{2, 3});
  CHECK(mini::broadcast_shapes({3}, {2, 3}) == Shape{2, 3});
  CHECK(mini::broadcast_shapes({}, {2, 5}) == Shape{2, 5});
  CHECK(mini::broadcast_shapes({5, 1, 4}, {3, 1}) == Shape{5, 3, 4});
  CHECK(mini::broadcast_shapes({0}, {1}) == Shape{0});
  CHECK(mini::broadcast_shapes({}, {}) == Shape{});
}

TEST_CASE("broadcast_shapes error names both shapes", "[tensor][shape]") {
  CHECK_MINI_ERROR(mini::broadcast_shapes({2, 3}, {4}), Error::Kind::Runtime, "[2, 3]");
  CHECK_MINI_ERROR(mini::broadcast_shapes({2, 3}, {4}), Error::Kind::Runtime, "[4]");
  CHECK_MINI_ERROR(mini::broadcast_shapes({2, 1, 3}, {5, 2}), Error::Kind::Runtime,
                   "[2, 1, 3] and [5, 2]");
}

TEST_CASE("wrap_dim accepts [-rank, rank) and throws an IndexError otherwise",
          "[tensor][shape]") {
  CHECK(mini::wrap_dim(0, 3) == 0);
  CHECK(mini::wrap_dim(2, 3) == 2);
  CHECK(mini::wrap_dim(-1, 3) == 2);
  CHECK(mini::wrap_dim(-3, 3) == 0);
  // A 0-d tensor accepts dim 0 and -1, as torch.
  CHECK(mini::wrap_dim(0, 0) == 0);
  CHECK(mini::wrap_dim(-1, 0) == 0);

  CHECK_MINI_ERROR(mini::wrap_dim(3, 3), Error::Kind::Index, "got 3");
  CHECK_MINI_ERROR(mini::wrap_dim(-4, 3), Error::Kind::Index, "got -4");
  CHECK_MINI_ERROR(mini::wrap_dim(3, 3), Error::Kind::Index, "rank 3");
  CHECK_MINI_ERROR(mini::wrap_dim(1, 0), Error::Kind::Index, "[-1, 0]");
  // The exception is a mini::Error (a std::runtime_error), never another type.
  CHECK_THROWS_AS(mini::wrap_dim(7, 2), mini::Error);
}

TEST_CASE("wrap_dims sorts, wraps and rejects duplicates", "[tensor][shape]") {
  CHECK(mini::wrap_dims({-1, 0}, 3) == std::vector<int64_t>{0, 2});
  CHECK(mini::wrap_dims({}, 3).empty());
  CHECK(mini::wrap_dims({0}, 0).empty());  // a 0-d tensor has no dims to reduce
  CHECK_MINI_ERROR(mini::wrap_dims({1, -2}, 3), Error::Kind::Runtime, "multiple times");
  CHECK_MINI_ERROR(mini::wrap_dims({0, 5}, 3), Error::Kind::Index, "got 5");
}

TEST_CASE("wrap_dims duplicate error names the repeated dim", "[tensor][shape]") {
  CHECK_MINI_ERROR(mini::wrap_dims({0, 2, -1}, 3), Error::Kind::Runtime, "dim 2 appears");
}

TEST_CASE("broadcast_strides puts 0 on stretched and new leading dims", "[tensor][shape]") {
  CHECK(mini::broadcast_strides({3}, {1}, {2, 3}) == Strides{0, 1});
  CHECK(mini::broadcast_strides({3, 1}, {1, 1}, {3, 4}) == Strides{1, 0});
  CHECK(mini::broadcast_strides({2, 3}, {3, 1}, {2, 3}) == Strides{3, 1});
  CHECK(mini::broadcast_strides({}, {}, {2, 2}) == Strides{0, 0});
}

TEST_CASE("infer_reshape fills in one -1", "[tensor][shape]") {
  CHECK(mini::infer_reshape({-1, 4}, 12) == Shape{3, 4});
  CHECK(mini::infer_reshape({2, -1, 2}, 12) == Shape{2, 3, 2});
  CHECK(mini::infer_reshape({-1}, 7) == Shape{7});
  CHECK(mini::infer_reshape({3, 4}, 12) == Shape{3, 4});
  CHECK(mini::infer_reshape({}, 1) == Shape{});
  CHECK(mini::infer_reshape({-1}, 0) == Shape{0});
}

TEST_CASE("infer_reshape errors name the shape and the element count", "[tensor][shape]") {
  CHECK_MINI_ERROR(mini::infer_reshape({5, -1}, 12), Error::Kind::Runtime, "[5, -1]");
  CHECK_MINI_ERROR(mini::infer_reshape({5, -1}, 12), Error::Kind::Runtime, "size 12");
  CHECK_MINI_ERROR(mini::infer_reshape({3, 5}, 12), Error::Kind::Runtime, "[3, 5]");
  CHECK_MINI_ERROR(mini::infer_reshape({-1, -1}, 12), Error::Kind::Runtime, "only one");
  CHECK_MINI_ERROR(mini::infer_reshape({-2, 6}, 12), Error::Kind::Runtime, "-2");
  // 0 elements: the -1 could be anything, so it is refused (as torch)
  CHECK_MINI_ERROR(mini::infer_reshape({2, 0, -1}, 0), Error::Kind::Runtime, "[2, 0, -1]");
}

TEST_CASE("view_strides of contiguous tensors", "[tensor][shape]") {
  Strides out;
  REQUIRE(mini::view_strides({2, 3, 4}, {12, 4, 1}, {6, 4}, &out));
  CHECK(out == Strides{4, 1});
  REQUIRE(mini::view_strides({2, 3, 4}, {12, 4, 1}, {24}, &out));
  CHECK(out == Strides{1});
  REQUIRE(mini::view_strides({2, 3}, {3, 1}, {1, 6}, &out));
  CHECK(out == Strides{6, 1});
  REQUIRE(mini::view_strides({2, 3}, {3, 1}, {3, 1, 2}, &out));
  CHECK(out[0] == 2);
  CHECK(out[2] == 1);
  // One element (or none): any target is a view with contiguous strides.
  REQUIRE(mini::view_strides({1, 1}, {5, 7}, {}, &out));
  CHECK(out.empty());
}

TEST_CASE("view_strides of a transposed tensor", "[tensor][shape]") {
  // [2, 3] contiguous, transposed: sizes [3, 2], strides [1, 3].
  Strides out;
  CHECK_FALSE(mini::view_strides({3, 2}, {1, 3}, {6}, &out));
  CHECK_FALSE(mini::view_strides({3, 2}, {1, 3}, {2, 3}, &out));
  REQUIRE(mini::view_strides({3, 2}, {1, 3}, {3, 2}, &out));
  CHECK(out == Strides{1, 3});
  REQUIRE(mini::view_strides({3, 2}, {1, 3}, {3, 1, 2}, &out));
  CHECK(out[0] == 1);
  CHECK(out[2] == 3);
  // [2, 3, 4] with the last two dims swapped: [2, 4, 3] strides [12, 1, 4]; merging the
  // batch dim away is fine, merging the swapped pair is not.
  REQUIRE(mini::view_strides({2, 4, 3}, {12, 1, 4}, {2, 4, 3}, &out));
  CHECK_FALSE(mini::view_strides({2, 4, 3}, {12, 1, 4}, {2, 12}, &out));
}

TEST_CASE("view_strides of a sliced and of an expanded tensor", "[tensor][shape]") {
  // [4, 6] sliced to columns 0:3: sizes [4, 3], strides [6, 1].
  Strides out;
  CHECK_FALSE(mini::view_strides({4, 3}, {6, 1}, {12}, &out));
  REQUIRE(mini::view_strides({4, 3}, {6, 1}, {2, 2, 3}, &out));
  CHECK(out == Strides{12, 6, 1});
  REQUIRE(mini::view_strides({4, 3}, {6, 1}, {4, 3, 1}, &out));
  CHECK(out[0] == 6);
  CHECK(out[1] == 1);
  // Every other row of [4, 3]: sizes [2, 3], strides [6, 1]; rows cannot merge.
  CHECK_FALSE(mini::view_strides({2, 3}, {6, 1}, {6}, &out));
  // [4] expanded to [3, 4]: strides [0, 1]; the last dim may split, the dims not merge.
  CHECK_FALSE(mini::view_strides({3, 4}, {0, 1}, {12}, &out));
  REQUIRE(mini::view_strides({3, 4}, {0, 1}, {3, 2, 2}, &out));
  CHECK(out == Strides{0, 2, 1});
}
