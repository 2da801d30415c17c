// helpers.h — what every C++ test file shares: building tensors from std::vector<double>,
// reading them back in logical (row-major) order whatever their strides, and comparing
// values with a tolerance that treats NaN as equal to NaN.
//
// Tags: "[shape]" "[promotion]" "[tensor]" "[metrics]" "[autograd]" name the stage under
// test; a test that documents a library bug carries "[!mayfail]" and a `// BUG:` comment.
#pragma once
#include <catch2/catch.hpp>

#include <cmath>
#include <string>
#include <vector>

#include "tensor/autograd.h"
#include "tensor/metrics.h"
#include "tensor/ops.h"

namespace mini_test {

using mini::DType;
using mini::OpKind;
using mini::Shape;
using mini::Strides;
using mini::Tensor;

// A contiguous tensor of `shape` holding `values` (row-major), converted to `dtype`.
inline Tensor make(const std::vector<double>& values, const Shape& shape,
                   DType dtype = DType::Float32) {
  Tensor t = mini::empty(shape, dtype);
  REQUIRE(static_cast<int64_t>(values.size()) == t->numel());
  MINI_DISPATCH(dtype, T, [&] {
    T* p = t->data<T>();
    for (size_t i = 0; i < values.size(); i++) p[i] = static_cast<T>(values[i]);
  });
  return t;
}

// A float64 leaf that requires grad: the usual input of an autograd test.
inline Tensor leaf(const std::vector<double>& values, const Shape& shape,
                   DType dtype = DType::Float64) {
  Tensor t = make(values, shape, dtype);
  t->requires_grad = true;
  return t;
}

// A 0-d tensor standing for a Python number (lowest promotion priority).
inline Tensor number(double value, DType dtype) {
  return mini::scalar_tensor(value, dtype, /*wrapped_number=*/true);
}

// The elements of `t` in logical row-major order, following sizes/strides/offset.
inline std::vector<double> values(const Tensor& t) {
  std::vector<double> out;
  int64_t n = t->numel();
  out.reserve(static_cast<size_t>(n));
  std::vector<int64_t> index(t->sizes.size(), 0);
  for (int64_t i = 0; i < n; i++) {
    int64_t off = 0;
    for (size_t d = 0; d < index.size(); d++) off += index[d] * t->strides[d];
    MINI_DISPATCH(t->dtype, T, [&] { out.push_back(static_cast<double>(t->data<T>()[off])); });
    for (size_t d = index.size(); d-- > 0;) {
      if (++index[d] < t->sizes[d]) break;
      index[d] = 0;
    }
  }
  return out;
}

inline double item(const Tensor& t) { return t->scalar_value(); }

// Element-wise comparison: |got - want| <= abs_tol + rel_tol * |want|; NaN matches NaN.
inline void check_close(const std::vector<double>& got, const std::vector<double>& want,
                        double rel_tol = 1e-6, double abs_tol = 1e-6) {
  REQUIRE(got.size() == want.size());
  for (size_t i = 0; i < got.size(); i++) {
    INFO("element " << i << ": got " << got[i] << ", want " << want[i]);
    if (std::isnan(want[i])) {
      CHECK(std::isnan(got[i]));
    } else if (std::isinf(want[i])) {
      CHECK(got[i] == want[i]);
    } else {
      CHECK(std::abs(got[i] - want[i]) <= abs_tol + rel_tol * std::abs(want[i]));
    }
  }
}

inline void check_values(const Tensor& t, const std::vector<double>& want,
                         double rel_tol = 1e-6, double abs_tol = 1e-6) {
  REQUIRE(t);
  check_close(values(t), want, rel_tol, abs_tol);
}

// Asserts that `expr` throws mini::Error of `kind` whose message contains `text`.
#define CHECK_MINI_ERROR(expr, kind, text)                                           \
  do {                                                                               \
    bool thrown_ = false;                                                            \
    try {                                                                            \
      (void)(expr);                                                                  \
    } catch (const mini::Error& e_) {                                                \
      thrown_ = true;                                                                \
      INFO("message: " << e_.what());                                                \
      CHECK(e_.kind == (kind));                                                      \
      CHECK_THAT(std::string(e_.what()), Catch::Matchers::Contains(text));           \
    }                                                                                \
    if (!thrown_) FAIL_CHECK("expected mini::Error from: " #expr);                   \
  } while (0)

// Counts the kernels and bytes of one block of code.
struct MetricsDelta {
  int64_t launches0, bytes0;
  MetricsDelta()
      : launches0(mini::metrics().kernel_launches), bytes0(mini::metrics().bytes_moved) {}
  int64_t launches() const { return mini::metrics().kernel_launches - launches0; }
  int64_t bytes() const { return mini::metrics().bytes_moved - bytes0; }
};

// Restores grad mode on exit, so that one failing test cannot leak a disabled grad mode.
struct GradModeRestorer {
  bool prev = mini::grad_enabled();
  ~GradModeRestorer() { mini::set_grad_enabled(prev); }
};

}  // namespace mini_test
