// cuda_helpers.h — what the CUDA tests share: a guard that skips a test without a GPU,
// tensors moved between host and device, element access for every dtype (bfloat16 too),
// and the C++ tests' value comparison (tests/cpp/helpers.h).
#pragma once
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <functional>
#include <string>
#include <vector>

#include "tensor/cuda/cuda.h"
#include "tensor/cuda/kernels.h"
#include "tensor/tensor.h"
#include "../cpp/helpers.h"

namespace mini_cuda_test {

using mini::Device;
using mini::DType;
using mini::OpKind;
using mini::Shape;
using mini::Strides;
using mini::Tensor;
using mini::TensorImpl;

// Catch2 v2 has no SKIP: a test that needs a GPU says why it does nothing and returns.
#define MINI_REQUIRE_GPU()                                                             \
  do {                                                                                 \
    if (!mini::cuda::is_available()) {                                                 \
      WARN("no CUDA device: " << mini::cuda::unavailable_reason());                   \
      return;                                                                          \
    }                                                                                  \
  } while (0)

inline double get(const Tensor& t, int64_t i) {  // element i of a contiguous CPU tensor
  const char* p = static_cast<const char*>(t->raw());
  switch (t->dtype) {
    case DType::Bool: return reinterpret_cast<const bool*>(p)[i];
    case DType::Int64: return double(reinterpret_cast<const int64_t*>(p)[i]);
    case DType::Float32: return reinterpret_cast<const float*>(p)[i];
    case DType::Float64: return reinterpret_cast<const double*>(p)[i];
    case DType::BFloat16: return float(reinterpret_cast<const mini::bfloat16*>(p)[i]);
  }
  return 0;
}

inline void set(const Tensor& t, int64_t i, double v) {
  char* p = static_cast<char*>(t->raw());
  switch (t->dtype) {
    case DType::Bool: reinterpret_cast<bool*>(p)[i] = v != 0; break;
    case DType::Int64: reinterpret_cast<int64_t*>(p)[i] = int64_t(v); break;
    case DType::Float32: reinterpret_cast<float*>(p)[i] = float(v); break;
    case DType::Float64: reinterpret_cast<double*>(p)[i] = v; break;
    case DType::BFloat16: reinterpret_cast<mini::bfloat16*>(p)[i] = mini::bfloat16(float(v)); break;
  }
}

// A contiguous CPU tensor holding `values` converted to dtype.
inline Tensor host(const std::vector<double>& values, const Shape& shape, DType dtype) {
  Tensor t = TensorImpl::empty(shape, dtype);
  REQUIRE(int64_t(values.size()) == t->numel());
  for (size_t i = 0; i < values.size(); i++) set(t, int64_t(i), values[i]);
  return t;
}

// A 0-d CPU tensor made from a Python number (what an op passes as a scalar).
inline Tensor number(double v, DType dtype = DType::Float32) {
  Tensor t = host({v}, {}, dtype);
  t->wrapped_number = true;
  return t;
}

inline Tensor to_device(const Tensor& h) {
  Tensor d = TensorImpl::empty(h->sizes, h->dtype, Device::cuda(0));
  mini::cuda::copy_bytes(d->device_raw(), d->device(), h->raw(), Device::cpu(), size_t(h->nbytes()));
  return d;
}

inline Tensor device(const std::vector<double>& values, const Shape& shape,
                     DType dtype = DType::Float32) {
  return to_device(host(values, shape, dtype));
}

// The values of a contiguous device tensor, in order.
inline std::vector<double> values(const Tensor& d) {
  REQUIRE(d->is_contiguous());
  Tensor h = TensorImpl::empty(d->sizes, d->dtype);
  mini::cuda::copy_bytes(h->raw(), Device::cpu(), d->device_raw(), d->device(), size_t(d->nbytes()));
  std::vector<double> v(static_cast<size_t>(h->numel()));
  for (size_t i = 0; i < v.size(); i++) v[i] = get(h, int64_t(i));
  return v;
}

inline Tensor empty_device(const Shape& shape, DType dtype) {
  return TensorImpl::empty(shape, dtype, Device::cuda(0));
}

using mini_test::check_close;  // |got - want| <= atol + rtol * |want|; NaN matches NaN

// x rounded to bfloat16 (nearest even), as a double.
inline double bf16(double x) { return float(mini::bfloat16(float(x))); }

// The benchmarks' time of launch(): one warm-up, then the median of 10 runs timed by CUDA
// events, in ms.
inline double median_ms(const std::function<void()>& launch) {
  uintptr_t start = mini::cuda::event_create(true), end = mini::cuda::event_create(true);
  launch();
  mini::cuda::synchronize();
  std::vector<double> times;
  for (int r = 0; r < 10; r++) {
    mini::cuda::event_record(start);
    launch();
    mini::cuda::event_record(end);
    times.push_back(mini::cuda::event_elapsed_ms(start, end));
  }
  mini::cuda::event_destroy(start);
  mini::cuda::event_destroy(end);
  std::sort(times.begin(), times.end());
  return times[5];
}

}  // namespace mini_cuda_test
