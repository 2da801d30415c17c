// factories.cpp — tensors made from nothing: full/zeros/ones, arange, random numbers, and
// the 0-d tensors that stand for Python numbers. A fill is one kernel; empty() is none.
#include <cmath>
#include <random>

#include "cuda/cuda.h"
#include "cuda/kernels.h"
#include "loops.h"
#include "metrics.h"
#include "ops.h"

namespace mini {

namespace {
std::mt19937_64& generator() {
  static std::mt19937_64 gen(0x5eed);
  return gen;
}

// The CUDA generator's state, as torch's: a Philox seed and the offset of the next unused
// counter. Each launch takes (seed, offset) and advances the offset past what it drew.
struct CudaGenerator {
  uint64_t seed = 0x5eed;
  uint64_t offset = 0;
};
CudaGenerator& cuda_generator() {
  static CudaGenerator gen;
  return gen;
}

// A fresh tensor on `device`, which must be usable (a clear Error otherwise).
Tensor new_tensor(const Shape& shape, DType dtype, Device device, const char* what) {
  if (device.is_cuda()) cuda::require(what, device);
  return TensorImpl::empty(shape, dtype, device);
}

template <class T>
void fill_raw(const Tensor& t, T v) {
  T* p = t->data<T>();
  parallel_chunks(t->numel(), [&](int64_t s, int64_t e) {
    for (int64_t i = s; i < e; i++) p[i] = v;
  });
}
}  // namespace

void manual_seed(uint64_t seed) {
  generator().seed(seed);
  cuda_generator() = {seed, 0};
}

Tensor empty(const Shape& shape, DType dtype, Device device) {
  return new_tensor(shape, dtype, device, "empty(device='cuda')");
}

Tensor full(const Shape& shape, double value, DType dtype, Device device) {
  Tensor t = new_tensor(shape, dtype, device, "full(device='cuda')");
  if (device.is_cuda()) cuda::fill(t, value);
  else MINI_DISPATCH(dtype, T, [&] { fill_raw<T>(t, static_cast<T>(value)); });
  count_kernel(t->nbytes());
  return t;
}

Tensor zeros(const Shape& shape, DType dtype, Device device) { return full(shape, 0.0, dtype, device); }
Tensor ones(const Shape& shape, DType dtype, Device device) { return full(shape, 1.0, dtype, device); }

Tensor scalar_tensor(double value, DType dtype, bool wrapped_number) {
  Tensor t = TensorImpl::empty({}, dtype);
  MINI_DISPATCH(dtype, T, [&] { *t->data<T>() = static_cast<T>(value); });
  t->wrapped_number = wrapped_number;
  return t;
}

Tensor int_scalar_tensor(int64_t value, bool wrapped_number) {
  Tensor t = TensorImpl::empty({}, DType::Int64);
  *t->data<int64_t>() = value;
  t->wrapped_number = wrapped_number;
  return t;
}

Tensor arange(double start, double end, double step, DType dtype, Device device) {
  if (step == 0) fail("arange: step must be nonzero");
  if ((step > 0 && start > end) || (step < 0 && start < end))
    fail("arange: upper bound and larger bound inconsistent with step sign (start ", start,
         ", end ", end, ", step ", step, ")");
  double count = std::ceil((end - start) / step);
  if (!(count < 0x1p63))  // a double past int64 would convert to garbage
    fail("arange: the element count (start ", start, ", end ", end, ", step ", step,
         ") overflows int64");
  int64_t n = static_cast<int64_t>(count);
  Tensor t = new_tensor({n}, dtype, device, "arange(device='cuda')");
  if (device.is_cuda()) {
    cuda::arange(t, start, step);
    count_kernel(t->nbytes());
    return t;
  }
  MINI_DISPATCH(dtype, T, [&] {
    T* p = t->data<T>();
    for (int64_t i = 0; i < n; i++) p[i] = static_cast<T>(start + i * step);
  });
  count_kernel(t->nbytes());
  return t;
}

namespace {
// One Philox launch: the values depend on (seed, offset, element index) only.
Tensor cuda_random(const Shape& shape, DType dtype, Device device, bool normal) {
  Tensor t = new_tensor(shape, dtype, device, normal ? "randn(device='cuda')" : "rand(device='cuda')");
  CudaGenerator& gen = cuda_generator();
  cuda::random(t, normal, gen.seed, gen.offset);
  gen.offset += cuda::random_offset_increment(t->numel());
  count_kernel(t->nbytes());
  return t;
}
}  // namespace

// Random numbers on the CPU are drawn sequentially from one generator, so a seed reproduces
// them exactly regardless of thread count.
Tensor rand(const Shape& shape, DType dtype, Device device) {
  if (!is_floating(dtype)) fail("rand is only defined for floating point dtypes, got ", dtype_name(dtype));
  if (device.is_cuda()) return cuda_random(shape, dtype, device, false);
  Tensor t = TensorImpl::empty(shape, dtype);
  auto& gen = generator();
  MINI_DISPATCH(dtype, T, [&] {
    T* p = t->data<T>();
    for (int64_t i = 0; i < t->numel(); i++) {
      if constexpr (std::is_same_v<T, bfloat16>) {  // 8 random bits: bfloat16's precision, as torch
        p[i] = static_cast<float>((gen() >> 56) * 0x1.0p-8);
        continue;
      }
      double draw = (gen() >> 11) * 0x1.0p-53;  // named first: a product cast to bool warns
      T u = static_cast<T>(draw);
      p[i] = u < T(1) ? u : T(0);  // rounding to float can reach 1.0: keep [0, 1)
    }
  });
  count_kernel(t->nbytes());
  return t;
}

Tensor randn(const Shape& shape, DType dtype, Device device) {
  if (!is_floating(dtype)) fail("randn is only defined for floating point dtypes, got ", dtype_name(dtype));
  if (device.is_cuda()) return cuda_random(shape, dtype, device, true);
  Tensor t = TensorImpl::empty(shape, dtype);
  auto& gen = generator();
  MINI_DISPATCH(dtype, T, [&] {
    T* p = t->data<T>();
    int64_t n = t->numel();
    for (int64_t i = 0; i < n; i += 2) {  // Box-Muller: two normals from two uniforms
      double u1 = ((gen() >> 11) + 1) * 0x1.0p-53, u2 = (gen() >> 11) * 0x1.0p-53;
      double r = std::sqrt(-2.0 * std::log(u1)), th = 2.0 * M_PI * u2;
      double z0 = r * std::cos(th), z1 = r * std::sin(th);  // named first: a product cast to bool warns
      p[i] = static_cast<T>(z0);
      if (i + 1 < n) p[i + 1] = static_cast<T>(z1);
    }
  });
  count_kernel(t->nbytes());
  return t;
}

}  // namespace mini
