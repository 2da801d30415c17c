// test_promotion.cpp — dtype.h / result_type(): torch's three-tier type promotion, and the
// result dtypes the pointwise ops derive from it.
#include "helpers.h"

using namespace mini_test;

namespace {
Tensor tensor_1d(DType d) { return make({1, 2}, {2}, d); }
Tensor tensor_0d(DType d) { return mini::scalar_tensor(1, d); }
}  // namespace

TEST_CASE("promote and category order bool < int64 < float32 < float64", "[tensor][promotion]") {
  CHECK(mini::promote(DType::Int64, DType::Float32) == DType::Float32);
  CHECK(mini::promote(DType::Float64, DType::Float32) == DType::Float64);
  CHECK(mini::promote(DType::Bool, DType::Int64) == DType::Int64);
  CHECK(mini::category(DType::Bool) < mini::category(DType::Int64));
  CHECK(mini::category(DType::Int64) < mini::category(DType::Float32));
  CHECK(mini::category(DType::Float32) == mini::category(DType::Float64));
  CHECK(mini::itemsize(DType::Bool) == 1);
  CHECK(mini::itemsize(DType::Int64) == 8);
  CHECK(mini::itemsize(DType::Float32) == 4);
  CHECK(std::string(mini::dtype_name(DType::Float64)) == "float64");
}

TEST_CASE("result_type of dimensioned tensors", "[tensor][promotion]") {
  CHECK(mini::result_type({tensor_1d(DType::Int64), tensor_1d(DType::Float32)}) == DType::Float32);
  CHECK(mini::result_type({tensor_1d(DType::Float32), tensor_1d(DType::Float64)}) ==
        DType::Float64);
  CHECK(mini::result_type({tensor_1d(DType::Bool), tensor_1d(DType::Int64)}) == DType::Int64);
  CHECK(mini::result_type({tensor_1d(DType::Bool), tensor_1d(DType::Bool)}) == DType::Bool);
}

TEST_CASE("a 0-d tensor does not widen a dimensioned one of its category", "[tensor][promotion]") {
  // 0-d float64 with 1-d float32 -> float32
  CHECK(mini::result_type({tensor_0d(DType::Float64), tensor_1d(DType::Float32)}) ==
        DType::Float32);
  CHECK(mini::result_type({tensor_1d(DType::Float32), tensor_0d(DType::Float64)}) ==
        DType::Float32);
  // ...but a higher category in the 0-d tensor wins: 0-d float64 with 1-d int64 -> float64
  CHECK(mini::result_type({tensor_1d(DType::Int64), tensor_0d(DType::Float64)}) == DType::Float64);
  // two 0-d tensors promote normally
  CHECK(mini::result_type({tensor_0d(DType::Float32), tensor_0d(DType::Float64)}) ==
        DType::Float64);
}

TEST_CASE("a wrapped Python number has the lowest priority", "[tensor][promotion]") {
  // wrapped float with int64 -> the default float dtype, float32
  CHECK(mini::result_type({tensor_1d(DType::Int64), number(2.5, DType::Float64)}) ==
        DType::Float32);
  CHECK(mini::result_type({tensor_0d(DType::Int64), number(2.5, DType::Float64)}) ==
        DType::Float32);
  // bool tensor with a wrapped int -> int64
  CHECK(mini::result_type({tensor_1d(DType::Bool), number(3, DType::Int64)}) == DType::Int64);
  // wrapped numbers never widen a tensor of their category
  CHECK(mini::result_type({tensor_1d(DType::Float32), number(2.5, DType::Float64)}) ==
        DType::Float32);
  CHECK(mini::result_type({tensor_1d(DType::Int64), number(3, DType::Int64)}) == DType::Int64);
  // a 0-d tensor beats a wrapped number
  CHECK(mini::result_type({tensor_0d(DType::Float64), number(2.5, DType::Float64)}) ==
        DType::Float64);
}

TEST_CASE("a 1-d float64 wins over everything", "[tensor][promotion]") {
  CHECK(mini::result_type({tensor_1d(DType::Float64), tensor_0d(DType::Float32)}) ==
        DType::Float64);
  CHECK(mini::result_type({tensor_1d(DType::Float64), tensor_1d(DType::Int64),
                           number(1.5, DType::Float64)}) == DType::Float64);
  CHECK(mini::result_type({number(1.5, DType::Float64), tensor_1d(DType::Float64)}) ==
        DType::Float64);
}

TEST_CASE("pointwise ops produce the promoted dtype", "[tensor][promotion]") {
  Tensor i = make({1, 2}, {2}, DType::Int64);
  Tensor f = make({1, 2}, {2}, DType::Float32);
  Tensor d0 = mini::scalar_tensor(0.5, DType::Float64);
  CHECK(mini::binary(OpKind::Add, i, f)->dtype == DType::Float32);
  CHECK(mini::binary(OpKind::Mul, f, d0)->dtype == DType::Float32);
  CHECK(mini::binary(OpKind::Add, i, number(0.5, DType::Float64))->dtype == DType::Float32);
  check_values(mini::binary(OpKind::Add, i, number(0.5, DType::Float64)), {1.5, 2.5});
  Tensor b = make({1, 0}, {2}, DType::Bool);
  Tensor bi = mini::binary(OpKind::Add, b, number(2, DType::Int64));
  CHECK(bi->dtype == DType::Int64);
  check_values(bi, {3, 2});
}

TEST_CASE("comparisons give bool whatever the operand dtypes", "[tensor][promotion]") {
  Tensor i = make({1, 2}, {2}, DType::Int64);
  Tensor f = make({1.5, 2}, {2}, DType::Float64);
  for (OpKind k : {OpKind::Eq, OpKind::Ne, OpKind::Lt, OpKind::Le, OpKind::Gt, OpKind::Ge}) {
    INFO(mini::op_name(k));
    CHECK(mini::binary(k, i, f)->dtype == DType::Bool);
    CHECK(mini::binary(k, f, number(1, DType::Int64))->dtype == DType::Bool);
  }
}

TEST_CASE("int / int is true division into float32", "[tensor][promotion]") {
  Tensor a = make({7, -7, 1}, {3}, DType::Int64);
  Tensor b = make({2, 2, 4}, {3}, DType::Int64);
  Tensor q = mini::binary(OpKind::Div, a, b);
  CHECK(q->dtype == DType::Float32);
  check_values(q, {3.5, -3.5, 0.25});
  Tensor bools = make({1, 0}, {2}, DType::Bool);
  CHECK(mini::binary(OpKind::Div, bools, make({1, 1}, {2}, DType::Bool))->dtype == DType::Float32);
  // float64 stays float64
  CHECK(mini::binary(OpKind::Div, a, make({2, 2, 4}, {3}, DType::Float64))->dtype ==
        DType::Float64);
  // two Python numbers (a graph's numbers: item(), dynamic ints) divide as Python does
  Tensor third = mini::binary(OpKind::Div, number(1, DType::Int64), number(3, DType::Int64));
  CHECK(third->dtype == DType::Float64);
  CHECK(third->wrapped_number);
  CHECK(item(third) == 1.0 / 3.0);
}

TEST_CASE("unary float ops of int input produce float32", "[tensor][promotion]") {
  Tensor i = make({0, 1}, {2}, DType::Int64);
  CHECK(mini::unary(OpKind::Exp, i)->dtype == DType::Float32);
  CHECK(mini::unary(OpKind::Sqrt, i)->dtype == DType::Float32);
  CHECK(mini::unary(OpKind::Neg, i)->dtype == DType::Int64);
  CHECK(mini::unary(OpKind::Abs, i)->dtype == DType::Int64);
  check_values(mini::unary(OpKind::Exp, i), {1.0, std::exp(1.0)});
}
