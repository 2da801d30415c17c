// test_cuda_reduce_nn.cpp — reduce.cu, nn.cu and matmul.cu against CPU references: each case
// builds a CPU tensor, runs mini's CPU op on it (in float32 for bfloat16 inputs, whose values
// are chosen exact in bfloat16), runs the CUDA kernel on a device copy with the same
// geometry, and compares. Layouts cover every kernel shape: rows (warp, block, split over
// blocks), columns, strided views, misaligned rows, 1-element rows, empty reductions.
// Without a GPU every case returns early with a warning saying why.
#include <cstring>
#include <limits>
#include <random>

#include "../cpp/helpers.h"
#include "tensor/cuda/cuda.h"
#include "tensor/cuda/kernels.h"

using namespace mini_test;
using mini::Device;
using mini::TensorImpl;
using mini::bfloat16;

namespace {

const double kNaN = std::numeric_limits<double>::quiet_NaN();
const double kInf = std::numeric_limits<double>::infinity();

#define SKIP_WITHOUT_GPU()                                                         \
  if (!mini::cuda::is_available()) {                                               \
    WARN("skipped: no CUDA device (" << mini::cuda::unavailable_reason() << ")"); \
    return;                                                                        \
  }

// A contiguous CPU tensor holding `v` (bfloat16 rounds to nearest even).
Tensor host_tensor(const std::vector<double>& v, const Shape& shape, DType dtype) {
  Tensor t = TensorImpl::empty(shape, dtype);
  REQUIRE((int64_t)v.size() == t->numel());
  if (dtype == DType::BFloat16) {
    auto* p = static_cast<bfloat16*>(t->raw());
    for (size_t i = 0; i < v.size(); i++) p[i] = bfloat16(float(v[i]));
  } else {
    MINI_DISPATCH(dtype, T, [&] {
      T* p = t->data<T>();
      for (size_t i = 0; i < v.size(); i++) p[i] = static_cast<T>(v[i]);
    });
  }
  return t;
}

// The elements of a contiguous tensor on either device, as doubles.
std::vector<double> host_values(const Tensor& t) {
  Tensor h = t;
  if (t->is_cuda()) {
    h = TensorImpl::empty(t->sizes, t->dtype);
    if (t->nbytes())
      mini::cuda::copy_bytes(h->raw(), Device::cpu(), t->device_raw(), t->device(), t->nbytes());
  }
  if (h->dtype != DType::BFloat16) return values(h);
  std::vector<double> out(h->numel());
  auto* p = static_cast<const bfloat16*>(h->raw());
  for (size_t i = 0; i < out.size(); i++) out[i] = float(p[i]);
  return out;
}

Tensor to_device(const Tensor& cpu) {
  Tensor d = TensorImpl::empty(cpu->sizes, cpu->dtype, Device::cuda());
  if (cpu->nbytes())
    mini::cuda::copy_bytes(d->device_raw(), d->device(), cpu->raw(), Device::cpu(), cpu->nbytes());
  return d;
}

Tensor empty_cuda(const Shape& shape, DType dtype) {
  return TensorImpl::empty(shape, dtype, Device::cuda());
}

// Random values exact in every dtype: k/8 for |k| <= 16 (floats; sums of up to 2^20 of them
// are exact in float32), -5..5 (int64), 0/1 (bool); about a quarter are zero.
std::vector<double> random_values(int64_t n, DType dtype, unsigned seed) {
  std::mt19937 gen(seed);
  std::uniform_int_distribution<int> pick(-16, 16), zero(0, 3);
  std::vector<double> v(n);
  for (double& x : v) {
    int k = zero(gen) == 0 ? 0 : pick(gen);
    x = dtype == DType::Bool ? double(k != 0) : dtype == DType::Int64 ? double(k % 6) : k / 8.0;
  }
  return v;
}

// One test input: a base tensor and a view of it (sizes, strides, offset) on both devices.
// For bfloat16 the CPU side holds the same values in float32.
struct Input {
  Tensor cpu, cuda;
};

Input make_input(const Shape& base_shape, DType dtype, unsigned seed, const Shape& sizes = {},
                 const Strides& strides = {}, int64_t offset = 0,
                 const std::vector<std::pair<int64_t, double>>& specials = {}) {
  std::vector<double> v = random_values(mini::numel_of(base_shape), dtype, seed);
  for (auto [i, x] : specials) v[i] = x;
  DType host_dtype = dtype == DType::BFloat16 ? DType::Float32 : dtype;
  Tensor cpu = host_tensor(v, base_shape, host_dtype);
  Tensor cuda = to_device(host_tensor(v, base_shape, dtype));
  if (sizes.empty() && strides.empty()) return {cpu, cuda};
  return {TensorImpl::view_of(cpu, sizes, strides, offset),
          TensorImpl::view_of(cuda, sizes, strides, offset)};
}

// bfloat16 results are rounded to 8 significant bits.
double rel_tol_of(DType d) { return d == DType::BFloat16 ? 8e-3 : d == DType::Float32 ? 1e-5 : 1e-12; }

void check_reduce(OpKind k, const Input& in, const std::vector<int64_t>& dims, DType dtype) {
  INFO(mini::op_name(k) << " of " << mini::dtype_name(dtype) << " " << mini::shape_str(in.cuda->sizes)
                        << " strides " << mini::shape_str(in.cuda->strides) << " over "
                        << mini::shape_str(dims));
  Tensor want = mini::reduce(k, in.cpu, dims, false);
  DType out_dtype = (k == OpKind::Sum && !mini::is_floating(dtype)) ? DType::Int64 : dtype;
  Tensor got = empty_cuda(want->sizes, out_dtype);
  mini::cuda::reduce(k, got, in.cuda, dims);
  check_close(host_values(got), host_values(want), rel_tol_of(dtype), 1e-6);
}

void check_all_reductions(const Input& in, const std::vector<int64_t>& dims, DType dtype) {
  check_reduce(OpKind::Sum, in, dims, dtype);
  if (mini::is_floating(dtype)) check_reduce(OpKind::Mean, in, dims, dtype);
  if (in.cpu->numel()) {
    check_reduce(OpKind::Amax, in, dims, dtype);
    check_reduce(OpKind::Amin, in, dims, dtype);
  }
}

const DType kAllDTypes[] = {DType::Float32, DType::Float64, DType::BFloat16, DType::Int64, DType::Bool};
const DType kFloatDTypes[] = {DType::Float32, DType::Float64, DType::BFloat16};

}  // namespace

TEST_CASE("cuda reduce: rows, split rows, full reductions", "[cuda][reduce]") {
  SKIP_WITHOUT_GPU();
  for (DType d : kAllDTypes) {
    unsigned seed = 1;
    // warp rows (odd length: not a multiple of any vector width), block rows, split rows
    for (Shape s : {Shape{37, 1000}, Shape{5, 5001}, Shape{3, 70001}, Shape{64, 1}, Shape{1000, 7}})
      check_all_reductions(make_input(s, d, seed++), {1}, d);
    // full reductions: one split row, and a 3-d tensor whose dims merge into one run
    check_all_reductions(make_input({300001}, d, seed++), {0}, d);
    check_all_reductions(make_input({7, 9, 1031}, d, seed++), {0, 1, 2}, d);
    // rows that start misaligned: columns 1..1000 of [10, 1001]
    check_all_reductions(make_input({10, 1001}, d, seed++, {10, 1000}, {1001, 1}, 1), {1}, d);
    check_all_reductions(make_input({4, 40001}, d, seed++, {4, 40000}, {40001, 1}, 1), {1}, d);
    // block rows sized to four vectors a thread (64 to 256 threads), with a tail of one
    // vector at a time (4095 + 1: not a multiple of four vectors per thread), and misaligned
    for (Shape s : {Shape{65, 4096}, Shape{9, 2048}, Shape{5, 8192}, Shape{3, 16376}, Shape{6, 4095},
                    Shape{4, 2056}})
      check_all_reductions(make_input(s, d, seed++), {1}, d);
    check_all_reductions(make_input({4, 4097}, d, seed++, {4, 4096}, {4097, 1}, 1), {1}, d);
  }
}

TEST_CASE("cuda reduce: columns, strided views, several dims, empty", "[cuda][reduce]") {
  SKIP_WITHOUT_GPU();
  for (DType d : kAllDTypes) {
    unsigned seed = 100;
    check_all_reductions(make_input({1000, 33}, d, seed++), {0}, d);      // columns, few outputs
    check_all_reductions(make_input({300, 5000}, d, seed++), {0}, d);     // columns, many outputs
    check_all_reductions(make_input({1000, 4096}, d, seed++), {0}, d);    // long split columns
    check_all_reductions(make_input({8192, 768}, d, seed++), {0}, d);     // a bias gradient: split columns
    check_all_reductions(make_input({8, 512, 40}, d, seed++), {0, 1}, d); // ... over two dims
    check_all_reductions(make_input({4096, 3}, d, seed++), {0}, d);       // long strided rows
    check_all_reductions(make_input({20, 30, 40}, d, seed++), {0, 2}, d); // general
    check_all_reductions(make_input({20, 30, 40}, d, seed++), {1}, d);
    // a transposed view: reducing its contiguous dim, then its strided dim
    Input t = make_input({40, 50}, d, seed++, {50, 40}, {1, 50}, 0);
    check_all_reductions(t, {0}, d);
    check_all_reductions(t, {1}, d);
    // every other column of every third row
    check_all_reductions(make_input({30, 64}, d, seed++, {10, 32}, {192, 2}, 1), {0, 1}, d);
    // empty: sum 0, mean NaN
    check_all_reductions(make_input({0, 5}, d, seed++), {0}, d);
    check_all_reductions(make_input({5, 0}, d, seed++), {1}, d);
  }
}

TEST_CASE("cuda reduce: NaN propagates through sum, mean, amax and amin", "[cuda][reduce]") {
  SKIP_WITHOUT_GPU();
  for (DType d : kFloatDTypes) {
    std::vector<std::pair<int64_t, double>> specials{{5, kNaN}, {3000, kNaN}, {4999, kInf}, {7000, -kInf}};
    check_all_reductions(make_input({4, 5000}, d, 7, {}, {}, 0, specials), {1}, d);
    check_all_reductions(make_input({4, 5000}, d, 7, {}, {}, 0, specials), {0}, d);
    check_all_reductions(make_input({200001}, d, 8, {}, {}, 0, {{199999, kNaN}}), {0}, d);
    // rows of 4096 (a block of 128 or 256 threads each): a NaN, +inf and -inf, a row of -inf
    std::vector<std::pair<int64_t, double>> rows{{5, kNaN}, {4096 + 4000, kNaN}, {2 * 4096 + 7, kInf},
                                                 {2 * 4096 + 9, -kInf}};
    for (int64_t j = 0; j < 4096; j++) rows.push_back({3 * 4096 + j, -kInf});
    check_all_reductions(make_input({4, 4096}, d, 9, {}, {}, 0, rows), {1}, d);
  }
}

TEST_CASE("cuda max/min along a dim: values and the first index", "[cuda][reduce]") {
  SKIP_WITHOUT_GPU();
  for (DType d : kAllDTypes) {
    for (bool is_max : {true, false}) {
      std::vector<std::pair<int64_t, double>> specials;
      if (mini::is_floating(d)) specials = {{10, kNaN}, {12, kNaN}, {700, kNaN}};
      Input in = make_input({50, 300}, d, 11, {}, {}, 0, specials);
      for (int64_t dim : {0, 1}) {
        INFO((is_max ? "max" : "min") << " of " << mini::dtype_name(d) << " along " << dim);
        auto [want_v, want_i] = mini::max_min_dim(in.cpu, dim, false, is_max);
        Tensor v = empty_cuda(want_v->sizes, d), i = empty_cuda(want_i->sizes, DType::Int64);
        mini::cuda::max_min_dim(v, i, in.cuda, dim, is_max);
        check_close(host_values(v), host_values(want_v), 0, 0);
        check_close(host_values(i), host_values(want_i), 0, 0);
      }
    }
  }
}

TEST_CASE("cuda max/min of a 0-d tensor: itself, index 0", "[cuda][reduce]") {
  SKIP_WITHOUT_GPU();
  Input in = make_input({}, DType::Float32, 12, {}, {}, 0, {{0, 2.5}});
  Tensor v = empty_cuda({}, DType::Float32), i = empty_cuda({}, DType::Int64);
  mini::cuda::max_min_dim(v, i, in.cuda, 0, true);
  check_close(host_values(v), {2.5}, 0, 0);
  check_close(host_values(i), {0}, 0, 0);
}

TEST_CASE("cuda nonzero_flat: ascending flat indices", "[cuda][reduce]") {
  SKIP_WITHOUT_GPU();
  for (DType d : kAllDTypes) {
    for (int64_t n : {0, 1, 1000, 100003}) {
      INFO(mini::dtype_name(d) << " of " << n);
      Input in = make_input({n}, d, 21);
      Tensor want = mini::nonzero(in.cpu);  // [count, 1]
      Tensor got = mini::cuda::nonzero_flat(in.cuda);
      REQUIRE(got->sizes == Shape{want->sizes[0]});
      check_close(host_values(got), host_values(want), 0, 0);
    }
  }
}

TEST_CASE("cuda softmax and log_softmax: short, medium, long rows and inner > 1", "[cuda][nn]") {
  SKIP_WITHOUT_GPU();
  struct Case {
    int64_t outer, n, inner;
  };
  for (DType d : kFloatDTypes) {
    for (Case c : {Case{13, 7, 1}, Case{9, 1000, 1}, Case{5, 33, 1}, Case{4, 5000, 1},
                   Case{2, 20000, 1}, Case{3, 100, 5}, Case{2, 7, 1000}}) {
      // a -inf (a masked position) in the first row
      Input in = make_input({c.outer, c.n, c.inner}, d, 31, {}, {}, 0, {{1, -kInf}});
      for (bool log : {false, true}) {
        INFO((log ? "log_softmax " : "softmax ") << mini::dtype_name(d) << " [" << c.outer << ", "
                                                << c.n << ", " << c.inner << "]");
        Tensor want = mini::softmax(in.cpu, 1, log);
        Tensor got = empty_cuda(want->sizes, d);
        mini::cuda::softmax(got, in.cuda, c.outer, c.n, c.inner, log);
        double tol = d == DType::BFloat16 ? 1e-2 : d == DType::Float32 ? 1e-5 : 1e-12;
        check_close(host_values(got), host_values(want), tol, tol * 1e-2);
      }
    }
  }
}

TEST_CASE("cuda softmax and log_softmax: long rows held in registers, NaN and -inf rows",
          "[cuda][nn]") {
  SKIP_WITHOUT_GPU();
  for (DType d : kFloatDTypes) {
    // rows a block holds in registers (32 to 1024 threads, some with fewer than four vectors),
    // and rows that take the two-pass block kernel: not a whole number of vectors, too long
    for (int64_t n : {1032, 2048, 4096, 4104, 8192, 16384, 32768, 4095, 1025, 40000}) {
      int64_t outer = n >= 16384 ? 2 : 4;
      // row 0: a -inf (masked); row 1: a NaN; row 2: +inf; row 3 (when there): all -inf
      std::vector<std::pair<int64_t, double>> specials{{1, -kInf}, {n + 3, kNaN}};
      if (outer == 4) {
        specials.push_back({2 * n + n / 2, kInf});
        for (int64_t j = 0; j < n; j++) specials.push_back({3 * n + j, -kInf});
      }
      Input in = make_input({outer, n, 1}, d, 32, {}, {}, 0, specials);
      // the same rows starting one element past 16-byte alignment
      Input shifted = make_input({outer * n + 1}, d, 33, {outer, n, 1}, {n, 1, 1}, 1);
      for (bool log : {false, true}) {
        for (const Input* x : {&in, &shifted}) {
          INFO((log ? "log_softmax " : "softmax ") << mini::dtype_name(d) << " [" << outer << ", "
                                                  << n << ", 1]" << (x == &in ? "" : " misaligned"));
          Tensor want = mini::softmax(x->cpu, 1, log);
          Tensor got = empty_cuda(want->sizes, d);
          mini::cuda::softmax(got, x->cuda, outer, n, 1, log);
          double tol = d == DType::BFloat16 ? 1e-2 : d == DType::Float32 ? 1e-5 : 1e-12;
          check_close(host_values(got), host_values(want), tol, tol * 1e-2);
        }
      }
    }
  }
}

TEST_CASE("cuda layer_norm with and without weight and bias", "[cuda][nn]") {
  SKIP_WITHOUT_GPU();
  struct Case {
    int64_t rows, cols;
  };
  for (DType d : kFloatDTypes) {
    for (Case c : {Case{7, 64}, Case{33, 1000}, Case{5, 4099}, Case{3, 1}}) {
      Input x = make_input({c.rows, c.cols}, d, 41);
      Input w = make_input({c.cols}, d, 42), b = make_input({c.cols}, d, 43);
      for (int affine = 0; affine < 4; affine++) {
        bool use_w = affine & 1, use_b = affine & 2;
        INFO("layer_norm " << mini::dtype_name(d) << " [" << c.rows << ", " << c.cols << "] weight "
                           << use_w << " bias " << use_b);
        Tensor want = mini::layer_norm(x.cpu, {c.cols}, use_w ? w.cpu : nullptr,
                                       use_b ? b.cpu : nullptr, 1e-5);
        Tensor got = empty_cuda(want->sizes, d);
        mini::cuda::layer_norm(got, x.cuda, use_w ? w.cuda : nullptr, use_b ? b.cuda : nullptr,
                               c.rows, c.cols, 1e-5);
        double tol = d == DType::BFloat16 ? 2e-2 : d == DType::Float32 ? 1e-4 : 1e-10;
        check_close(host_values(got), host_values(want), tol, tol);
      }
    }
  }
}

TEST_CASE("cuda matmul: row-major, transposed, broadcast batch, copied operands, k == 0",
          "[cuda][matmul]") {
  SKIP_WITHOUT_GPU();
  const int64_t B = 3, N = 37, K = 65, M = 29;
  for (DType d : kFloatDTypes) {
    unsigned seed = 51;
    auto run = [&](const char* what, const Input& a, const Input& b) {
      INFO("matmul " << what << " " << mini::dtype_name(d));
      Tensor want = mini::matmul(a.cpu, b.cpu);
      Tensor got = empty_cuda({a.cuda->sizes[0] > b.cuda->sizes[0] ? a.cuda->sizes[0] : b.cuda->sizes[0],
                               a.cuda->sizes[1], b.cuda->sizes[2]}, d);
      mini::cuda::matmul(got, a.cuda, b.cuda);
      double tol = d == DType::BFloat16 ? 1e-2 : d == DType::Float32 ? 1e-5 : 1e-12;
      check_close(host_values(got), host_values(want), tol, tol);
    };
    Input a = make_input({B, N, K}, d, seed++), b = make_input({B, K, M}, d, seed++);
    run("contiguous", a, b);
    run("a transposed", make_input({B, K, N}, d, seed++, {B, N, K}, {K * N, 1, N}, 0), b);
    run("b transposed", a, make_input({B, M, K}, d, seed++, {B, K, M}, {M * K, 1, K}, 0));
    run("a broadcast over the batch", make_input({1, N, K}, d, seed++, {B, N, K}, {0, K, 1}, 0), b);
    run("b broadcast and transposed", a, make_input({M, K}, d, seed++, {B, K, M}, {0, 1, K}, 0));
    // every other column: cuBLAS cannot read it, so it is copied first
    run("a strided", make_input({B, N, 2 * K}, d, seed++, {B, N, K}, {2 * N * K, 2 * K, 2}, 0), b);
    run("one batch", make_input({1, N, K}, d, seed++), make_input({1, K, M}, d, seed++));
    run("vector", make_input({1, 1, K}, d, seed++), make_input({1, K, 1}, d, seed++));

    Tensor zeros = empty_cuda({B, N, M}, d);
    mini::cuda::matmul(zeros, empty_cuda({B, N, 0}, d), empty_cuda({B, 0, M}, d));
    check_close(host_values(zeros), std::vector<double>(B * N * M, 0.0), 0, 0);
  }
}
