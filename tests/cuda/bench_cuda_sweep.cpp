// bench_cuda_sweep.cpp — one run that times the alternatives to the eager kernels that miss
// the 1.1x-of-torch bar on an H200 (notes/perf.md): the flat pointwise loop's loads per
// operand in flight per thread (cuda::sweep_flat) and the row reduction's block size and
// accumulators (cuda::sweep_reduce_rows). Hidden from the default run:
//   build/mini_cuda_tests "[.sweep]"
// 2^28 elements per case, the inputs of labs/bench/bench_cuda_eager.py (x, y standard normal;
// pow, sqrt and log on positive = |x| + 0.5: pow(positive, y), sqrt(positive), log(positive),
// x * 2.5, x + y, x / y, sigmoid(x), sin(x), cos(x), gelu(x));
// the row reductions are x as [65536, 4096] over the last dim. Each row is
// the median of 10 launches after a warm-up (CUDA events); GB/s counts the bytes the kernel
// must move (reads + writes). "op" rows time the production entry point (cuda::binary,
// cuda::unary, cuda::reduce: the flat loop's defaults in loops.cuh, or the op's plan in
// pointwise.cu's FlatPlan), '*' marks the reduction variant that runs today, and the copy
// rows are the ceiling measured in the same run. A variant's reduction results must match
// the op's (different summation order: a tolerance).
#include <cmath>
#include <cstdio>
#include <functional>

#include "cuda_helpers.h"

using namespace mini_cuda_test;
namespace cuda = mini::cuda;

namespace {

void row(const std::string& name, const std::string& variant, double bytes,
         const std::function<void()>& launch) {
  double ms = median_ms(launch);
  std::printf("%-28s %-22s %8.3f ms %7.0f GB/s\n", name.c_str(), variant.c_str(), ms,
              bytes / ms / 1e6);
  std::fflush(stdout);
}

// Elements of `got` farther from `want` than the tolerance.
int64_t mismatches(const Tensor& got, const Tensor& want, double rel_tol, double abs_tol) {
  std::vector<double> g = values(got), w = values(want);
  int64_t bad = 0;
  for (size_t i = 0; i < g.size(); i++)
    bad += !(std::abs(g[i] - w[i]) <= abs_tol + rel_tol * std::abs(w[i]));
  return bad;
}

}  // namespace

TEST_CASE("eager kernel variants", "[.sweep]") {
  MINI_REQUIRE_GPU();
  const int64_t n = int64_t(1) << 28, rows = 65536, cols = n / rows;
  std::printf("%-28s %-22s %11s %12s\n", "case", "variant", "time", "bandwidth");
  for (DType d : {DType::Float32, DType::BFloat16}) {
    double size = double(mini::itemsize(d));
    std::string dt = mini::dtype_name(d);
    Tensor a = empty_device({n}, d), b = empty_device({n}, d), out = empty_device({n}, d);
    Tensor positive = empty_device({n}, d);
    cuda::random(a, true, 1, 0);
    cuda::random(b, true, 2, 0);
    cuda::unary(OpKind::Abs, positive, a, {});
    cuda::binary(OpKind::Add, positive, positive, number(0.5), d, "");
    row("copy (ceiling) " + dt, "clone", 2 * n * size, [&] { cuda::copy(out, a); });

    // The flat loop: unroll = 16-byte loads per operand per thread and step; "full tiles": no
    // bounds check between them (bfloat16's widening otherwise waits for each load before the
    // next is issued).
    struct Flat {
      OpKind k;
      bool scalar;  // b is the Python scalar 2.5
    };
    std::vector<Flat> flats = d == DType::Float32
                                  ? std::vector<Flat>{{OpKind::Pow, false},
                                                      {OpKind::Mul, true},
                                                      {OpKind::Add, false}}
                                  : std::vector<Flat>{{OpKind::Sigmoid, false},
                                                      {OpKind::Sqrt, false},
                                                      {OpKind::Mul, true},
                                                      {OpKind::Add, false},
                                                      {OpKind::Div, false},
                                                      {OpKind::Pow, false},
                                                      {OpKind::Log, false},
                                                      {OpKind::Sin, false},
                                                      {OpKind::Cos, false},
                                                      {OpKind::Gelu, false}};
    for (const Flat& f : flats) {
      bool unary = f.k != OpKind::Pow && f.k != OpKind::Mul && f.k != OpKind::Add &&
                   f.k != OpKind::Div;
      const Tensor& lhs =
          f.k == OpKind::Pow || f.k == OpKind::Sqrt || f.k == OpKind::Log ? positive : a;
      Tensor rhs = f.scalar ? number(2.5) : b;
      std::string name = std::string(mini::op_name(f.k)) + (f.scalar ? " scalar " : " ") + dt;
      double bytes = (unary || f.scalar ? 2 : 3) * n * size;
      row(name, "op", bytes, [&] {
        if (unary) cuda::unary(f.k, out, lhs, {});
        else cuda::binary(f.k, out, lhs, rhs, d, "");
      });
      for (int unroll : {1, 2, 4}) {
        for (bool full : {false, true}) {
          if (unroll == 1 && full) continue;
          bool launched = true;
          std::string variant = "unroll " + std::to_string(unroll) + (full ? ", full tiles" : "");
          row(name, variant, bytes,
              [&] { launched = launched && cuda::sweep_flat(f.k, out, lhs, rhs, unroll, full); });
          CHECK(launched);
        }
      }
    }

    // Row reductions: threads per block (one row a block) x accumulators per thread x launch
    // bounds ("lb": ptxas then issues the four loads of a step before the first add).
    Tensor x = TensorImpl::view_of(a, {rows, cols}, {cols, 1}, 0);
    Tensor want = empty_device({rows}, d), got = empty_device({rows}, d);
    const int prod_threads = 64;  // reduce.cu's block-size rule, with launch bounds
    for (OpKind k : {OpKind::Sum, OpKind::Amax}) {
      std::string name = std::string(mini::op_name(k)) + " rows " + dt;
      double bytes = (n + rows) * size;
      row(name, "op", bytes, [&] { cuda::reduce(k, want, x, {1}); });
      for (bool bounded : {false, true}) {
        for (int threads : {64, 128, 256, 512}) {
          for (int accs : {1, 4}) {
            std::string variant = std::to_string(threads) + " thr, " + std::to_string(accs) +
                                  (accs == 1 ? " acc" : " accs") + (bounded ? ", lb" : "") +
                                  (threads == prod_threads && accs == 4 && bounded ? " *" : "");
            row(name, variant, bytes,
                [&] { cuda::sweep_reduce_rows(k, got, x, threads, accs, bounded); });
            double rel = d == DType::Float32 ? 1e-4 : 1e-2;
            INFO(name << " " << variant);
            CHECK(mismatches(got, want, k == OpKind::Sum ? rel : 0, k == OpKind::Sum ? 1e-3 : 0) ==
                  0);
          }
        }
      }
    }
  }
}
