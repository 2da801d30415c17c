// test_metrics.cpp — metrics.h: each compute op counts exactly one kernel launch moving its
// operands' bytes plus its output's bytes; views and no-op conversions count nothing.
#include "helpers.h"

using namespace mini_test;

namespace {
// Runs `op` and checks that it counted one launch moving `bytes` bytes.
template <class Op>
void expect_one_kernel(const char* what, int64_t bytes, Op op) {
  INFO(what);
  MetricsDelta delta;
  op();
  CHECK(delta.launches() == 1);
  CHECK(delta.bytes() == bytes);
}

template <class Op>
void expect_no_kernel(const char* what, Op op) {
  INFO(what);
  MetricsDelta delta;
  op();
  CHECK(delta.launches() == 0);
  CHECK(delta.bytes() == 0);
}
}  // namespace

TEST_CASE("metrics().reset clears the counters", "[tensor][metrics]") {
  mini::ones({4});
  CHECK(mini::metrics().kernel_launches > 0);
  mini::metrics().reset();
  CHECK(mini::metrics().kernel_launches == 0);
  CHECK(mini::metrics().bytes_moved == 0);
}

TEST_CASE("pointwise ops count one kernel: operands + output bytes", "[tensor][metrics]") {
  Tensor a = mini::ones({2, 3});                     // 24 bytes
  Tensor row = mini::ones({3}, DType::Float64);      // 24 bytes
  Tensor i = mini::ones({2, 3}, DType::Int64);       // 48 bytes
  Tensor s = number(2, DType::Int64);                // a kernel argument: 0 bytes
  expect_one_kernel("add", 24 + 24 + 48, [&] { mini::binary(OpKind::Add, a, row); });
  expect_one_kernel("mul int by float", 48 + 24 + 24, [&] { mini::binary(OpKind::Mul, i, a); });
  expect_one_kernel("sub number", 24 + 0 + 24, [&] { mini::binary(OpKind::Sub, a, s); });
  Tensor s0 = mini::scalar_tensor(2, DType::Float32);  // a 0-d tensor is read: 4 bytes
  expect_one_kernel("sub 0-d tensor", 24 + 4 + 24, [&] { mini::binary(OpKind::Sub, a, s0); });
  expect_one_kernel("lt", 24 + 24 + 6, [&] { mini::binary(OpKind::Lt, a, a); });
  expect_one_kernel("div int", 48 + 48 + 24, [&] { mini::binary(OpKind::Div, i, i); });
  Tensor a32 = mini::ones({3, 2});
  expect_one_kernel("add transposed", 24 + 24 + 24,
                    [&] { mini::binary(OpKind::Add, mini::transpose(a, 0, 1), a32); });
  expect_one_kernel("exp", 24 + 24, [&] { mini::unary(OpKind::Exp, a); });
  expect_one_kernel("exp int", 48 + 24, [&] { mini::unary(OpKind::Exp, i); });
  expect_one_kernel("neg", 48 + 48, [&] { mini::unary(OpKind::Neg, i); });
  Tensor cond = mini::ones({2, 3}, DType::Bool);     // 6 bytes
  expect_one_kernel("where", 6 + 24 + 24 + 24, [&] { mini::where(cond, a, a); });
  expect_one_kernel("where number", 6 + 24 + 0 + 24, [&] { mini::where(cond, a, s); });
  expect_one_kernel("cast", 24 + 48, [&] { mini::cast(a, DType::Float64); });
  expect_one_kernel("clone", 24 + 24, [&] { mini::clone(a); });
  expect_one_kernel("gelu_backward", 24 + 24 + 24,
                    [&] { mini::call_op(OpKind::GeluBackward, {a, a}); });
  expect_one_kernel("contiguous of transposed", 24 + 24,
                    [&] { mini::contiguous(mini::transpose(a, 0, 1)); });
}

TEST_CASE("no-op conversions and views count no kernel", "[tensor][metrics]") {
  Tensor a = mini::ones({2, 3, 4});
  expect_no_kernel("contiguous of contiguous", [&] { mini::contiguous(a); });
  expect_no_kernel("cast to same dtype", [&] { mini::cast(a, DType::Float32); });
  expect_no_kernel("reshape (view)", [&] { mini::reshape(a, {6, 4}); });
  expect_no_kernel("view", [&] { mini::view(a, {24}); });
  expect_no_kernel("transpose", [&] { mini::transpose(a, 0, 2); });
  expect_no_kernel("permute", [&] { mini::permute(a, {2, 0, 1}); });
  expect_no_kernel("unsqueeze", [&] { mini::unsqueeze(a, 1); });
  expect_no_kernel("squeeze", [&] { mini::squeeze(mini::unsqueeze(a, 0), {}); });
  Tensor row = mini::ones({1, 4});
  expect_no_kernel("expand", [&] { mini::expand(row, {3, 4}); });
  expect_no_kernel("slice", [&] { mini::slice(a, 1, 0, 2, 1); });
  expect_no_kernel("select", [&] { mini::select(a, 0, 1); });
  expect_no_kernel("detach", [&] { mini::detach(a); });
  expect_no_kernel("empty", [&] { mini::empty({5}); });
  expect_no_kernel("scalar_tensor", [&] { mini::scalar_tensor(1, DType::Float32); });
  expect_no_kernel("sum_to same shape", [&] { mini::sum_to(a, {2, 3, 4}); });
  expect_no_kernel("call_op(Reshape)", [&] {
    mini::Attrs at;
    at.shape = {4, 6};
    mini::call_op(OpKind::Reshape, {a}, at);
  });
  // reshape that must copy: exactly the one clone kernel
  expect_one_kernel("reshape (copy)", 96 + 96,
                    [&] { mini::reshape(mini::transpose(a, 0, 2), {24}); });
}

TEST_CASE("reductions count one kernel", "[tensor][metrics]") {
  Tensor a = mini::ones({4, 5});                     // 80 bytes
  expect_one_kernel("sum all", 80 + 4, [&] { mini::reduce(OpKind::Sum, a, {}, false); });
  expect_one_kernel("mean dim", 80 + 16, [&] { mini::reduce(OpKind::Mean, a, {1}, true); });
  expect_one_kernel("amax strided", 80 + 20,
                    [&] { mini::reduce(OpKind::Amax, mini::transpose(a, 0, 1), {1}, false); });
  Tensor i = mini::ones({4, 5}, DType::Int64);       // 160 bytes
  expect_one_kernel("sum int", 160 + 8, [&] { mini::reduce(OpKind::Sum, i, {}, false); });
  expect_one_kernel("max_min_dim", 80 + 16 + 32, [&] { mini::max_min_dim(a, 1, false, true); });
  Tensor z = mini::zeros({4, 5});
  expect_one_kernel("nonzero (none)", 80 + 0, [&] { mini::nonzero(z); });
  expect_one_kernel("nonzero (all)", 80 + 20 * 2 * 8, [&] { mini::nonzero(a); });
  expect_one_kernel("sum_to", 80 + 20, [&] { mini::sum_to(a, {1, 5}); });
}

TEST_CASE("matmul, nn kernels, factories and in-place ops count one kernel", "[tensor][metrics]") {
  Tensor a = mini::ones({2, 3}), b = mini::ones({3, 4});  // 24, 48 bytes
  expect_one_kernel("matmul", 24 + 48 + 32, [&] { mini::matmul(a, b); });
  expect_one_kernel("matmul transposed", 48 + 24 + 32,
                    [&] { mini::matmul(mini::transpose(b, 0, 1), mini::transpose(a, 0, 1)); });
  Tensor v = mini::ones({3});
  expect_one_kernel("matmul 1-D", 12 + 48 + 16, [&] { mini::matmul(v, b); });
  expect_one_kernel("dot", 12 + 12 + 4, [&] { mini::matmul(v, v); });
  expect_one_kernel("softmax", 24 + 24, [&] { mini::softmax(a, 1, false); });
  expect_one_kernel("log_softmax", 24 + 24, [&] { mini::softmax(a, 0, true); });
  Tensor w = mini::ones({3});
  expect_one_kernel("layer_norm", 24 + 24,
                    [&] { mini::layer_norm(a, {3}, nullptr, nullptr, 1e-5); });
  expect_one_kernel("layer_norm affine", 24 + 12 + 12 + 24,
                    [&] { mini::layer_norm(a, {3}, w, w, 1e-5); });
  expect_one_kernel("mse_loss mean", 24 + 24 + 4, [&] { mini::mse_loss(a, a, "mean"); });
  expect_one_kernel("mse_loss none", 24 + 12 + 24, [&] { mini::mse_loss(a, w, "none"); });
  expect_one_kernel("full", 24, [&] { mini::full({2, 3}, 1.0); });
  expect_one_kernel("zeros f64", 48, [&] { mini::zeros({2, 3}, DType::Float64); });
  expect_one_kernel("arange", 40, [&] { mini::arange(0, 5, 1, DType::Int64); });
  expect_one_kernel("rand", 24, [&] { mini::rand({2, 3}); });
  expect_one_kernel("randn", 24, [&] { mini::randn({2, 3}); });
  Tensor x = mini::zeros({2, 3});
  expect_one_kernel("copy_", 24 + 24, [&] { mini::copy_(x, a); });
  expect_one_kernel("copy_ broadcast", 12 + 24, [&] { mini::copy_(x, w); });
  expect_one_kernel("fill_", 24, [&] { mini::fill_(x, 3); });
  expect_one_kernel("add_", 24 + 12 + 24, [&] { mini::inplace_binary(OpKind::Add, x, w); });
  Tensor w64 = mini::ones({3}, DType::Float64);  // promoted: computed out of place, then stored
  MetricsDelta promoted;
  mini::inplace_binary(OpKind::Add, x, w64);
  CHECK(promoted.launches() == 1);
}

// As in binary() (MINI_OPERAND_BYTES), a wrapped Python number moves no bytes.
TEST_CASE("in-place op with a Python number counts it as 0 bytes", "[tensor][metrics]") {
  Tensor x = mini::zeros({2, 3});
  Tensor two = number(2, DType::Int64);
  expect_one_kernel("add_ number", 24 + 0 + 24, [&] { mini::inplace_binary(OpKind::Add, x, two); });
}

// As ops.h documents: softmax, layer_norm and matmul first copy a non-contiguous (or
// non-BLAS-viewable) operand, and that copy counts as a kernel of its own (as in torch):
// two launches, the copy's bytes (read + write) plus the op's own.
TEST_CASE("composite ops on non-contiguous operands count the copy as a kernel",
          "[tensor][metrics]") {
  auto expect_copy_then_kernel = [](const char* what, int64_t copy_bytes, int64_t op_bytes,
                                    auto op) {
    INFO(what);
    MetricsDelta delta;
    op();
    CHECK(delta.launches() == 2);
    CHECK(delta.bytes() == copy_bytes + op_bytes);
  };
  Tensor a = mini::ones({3, 2});
  Tensor at = mini::transpose(a, 0, 1);  // [2, 3], not contiguous
  expect_copy_then_kernel("softmax transposed", 24 + 24, 24 + 24,
                          [&] { mini::softmax(at, 1, false); });
  expect_copy_then_kernel("layer_norm transposed", 24 + 24, 24 + 24,
                          [&] { mini::layer_norm(at, {3}, nullptr, nullptr, 1e-5); });
  Tensor every_other = mini::slice(mini::ones({2, 6}), 1, 0, 6, 2);  // [2, 3], stride 2
  Tensor b = mini::ones({3, 4});
  expect_copy_then_kernel("matmul strided", 24 + 24, 24 + 48 + 32,
                          [&] { mini::matmul(every_other, b); });
  // a transposed operand BLAS reads as is needs no copy
  expect_one_kernel("matmul transposed", 24 + 48 + 32,
                    [&] { mini::matmul(at, b); });
}

// max_min_dim of a 0-d tensor runs one kernel, the clone of the value (input bytes + value
// bytes); its int64 index (always 0) is written without a kernel.
TEST_CASE("max_min_dim of a 0-d tensor counts one kernel", "[tensor][metrics]") {
  Tensor s = mini::scalar_tensor(1, DType::Float32);
  expect_one_kernel("max 0-d", 4 + 4, [&] { mini::max_min_dim(s, 0, false, true); });
  auto [v, i] = mini::max_min_dim(s, 0, false, false);
  CHECK(v->sizes == Shape{});
  CHECK(i->sizes == Shape{});
  CHECK(i->dtype == DType::Int64);
  CHECK(item(v) == 1);
  CHECK(item(i) == 0);
}

// slice_backward counts g's bytes plus the whole output it writes (zeros everywhere, g in
// the slice), as one kernel: a [4] output from a [2] slice counts 8 + 16.
TEST_CASE("slice_backward counts its whole output", "[tensor][metrics]") {
  Tensor g = mini::ones({2});
  mini::Attrs at;
  at.shape = {4};
  at.dim = 0;
  at.start = 1;
  at.end = 3;
  at.step = 1;
  expect_one_kernel("slice_backward", 8 + 16,
                    [&] { mini::call_op(OpKind::SliceBackward, {g}, at); });
}
