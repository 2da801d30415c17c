// cuda/random.cu — random numbers on the device: Philox-4x32-10, uniform and normal.
//
// Philox (Salmon et al., "Parallel Random Numbers: As Easy as 1, 2, 3", SC 2011) is a
// counter-based generator: a 128-bit counter and a 64-bit key go through ten rounds of
// multiplications and xors, and out come four 32-bit random words. Nothing is carried
// from one number to the next, so every element can be computed on its own thread, in any
// order, and a launch is reproducible from (seed, offset) alone, as torch's CUDA generator.
//
// mini's layout: key = seed; element i of a launch uses the counter
//   (offset + i / 4  as the low 64 bits,  sub-draw  as word 2,  0  as word 3)
// so each group of 4 consecutive elements shares one 64-bit counter value, and a launch of
// n elements uses the values offset .. offset + ceil(n / 4) - 1. float32 and bfloat16 take
// one word each (the sub-draw is 0); float64 needs two words per value, so the group's
// elements 0-1 come from sub-draw 0 and 2-3 from sub-draw 1. The caller advances its offset
// by random_offset_increment(n) after each launch, and launches never share a counter.
#include "loops.cuh"

namespace mini::cuda {

namespace {

struct Words {
  uint32_t w[4];
};

// Philox-4x32-10: ten rounds of two 32x32 -> 64-bit multiplications, with the key bumped
// by the Weyl constants between rounds (the constants of the paper and of cuRAND).
__device__ __forceinline__ Words philox(uint64_t counter, uint32_t sub, uint64_t seed) {
  constexpr uint32_t kMul0 = 0xD2511F53u, kMul1 = 0xCD9E8D57u;
  constexpr uint32_t kWeyl0 = 0x9E3779B9u, kWeyl1 = 0xBB67AE85u;
  uint32_t c0 = static_cast<uint32_t>(counter), c1 = static_cast<uint32_t>(counter >> 32);
  uint32_t c2 = sub, c3 = 0;
  uint32_t k0 = static_cast<uint32_t>(seed), k1 = static_cast<uint32_t>(seed >> 32);
#pragma unroll
  for (int round = 0; round < 10; round++) {
    uint32_t hi0 = __umulhi(kMul0, c0), lo0 = kMul0 * c0;
    uint32_t hi1 = __umulhi(kMul1, c2), lo1 = kMul1 * c2;
    uint32_t n0 = hi1 ^ c1 ^ k0, n2 = hi0 ^ c3 ^ k1;
    c0 = n0;
    c1 = lo1;
    c2 = n2;
    c3 = lo0;
    k0 += kWeyl0;
    k1 += kWeyl1;
  }
  return {{c0, c1, c2, c3}};
}

// [0, 1) from the top 24 bits of a word (every float32 of the form k / 2^24).
__device__ __forceinline__ float uniform_float(uint32_t w) { return (w >> 8) * 0x1.0p-24f; }
// [0, 1) from 53 bits of two words.
__device__ __forceinline__ double uniform_double(uint32_t hi, uint32_t lo) {
  uint64_t bits = (static_cast<uint64_t>(hi) << 32 | lo) >> 11;
  return static_cast<double>(bits) * 0x1.0p-53;
}

// Box-Muller: two uniforms to two independent standard normals. 1 - u1 is in (0, 1], so
// the log is finite.
__device__ __forceinline__ void box_muller(float u1, float u2, float* z0, float* z1) {
  float r = sqrtf(-2.0f * logf(1.0f - u1));
  float s, c;
  sincospif(2.0f * u2, &s, &c);
  *z0 = r * c;
  *z1 = r * s;
}
__device__ __forceinline__ void box_muller(double u1, double u2, double* z0, double* z1) {
  double r = sqrt(-2.0 * log(1.0 - u1));
  double s, c;
  sincospi(2.0 * u2, &s, &c);
  *z0 = r * c;
  *z1 = r * s;
}

// Values rounded to T: a uniform that rounds up to 1 becomes 0, keeping [0, 1) (as the
// CPU's rand and torch's uniform_ do).
template <class T>
__device__ __forceinline__ T to_uniform(opmath_t<T> u) {
  T v = convert<T>(u);
  return opmath_t<T>(v) < opmath_t<T>(1) ? v : T(0);
}

// The 4 elements of group g (fewer at the end): 4 values from one Philox call, or for
// float64, two values from each of two.
template <class T, bool kNormal>
__global__ void __launch_bounds__(kThreads) random_kernel(T* out, int64_t n, uint64_t seed,
                                                          uint64_t offset) {
  int64_t groups = (n + 3) / 4;
  int64_t step = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t g = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; g < groups;
       g += step) {
    T v[4];
    if constexpr (std::is_same_v<T, double>) {
#pragma unroll
      for (uint32_t sub = 0; sub < 2; sub++) {
        Words r = philox(offset + g, sub, seed);
        double u1 = uniform_double(r.w[0], r.w[1]), u2 = uniform_double(r.w[2], r.w[3]);
        if (kNormal) {
          box_muller(u1, u2, &v[2 * sub], &v[2 * sub + 1]);
        } else {
          v[2 * sub] = u1;
          v[2 * sub + 1] = u2;
        }
      }
    } else {
      Words r = philox(offset + g, 0, seed);
      float u[4];
#pragma unroll
      for (int j = 0; j < 4; j++) u[j] = uniform_float(r.w[j]);
      if (kNormal) {
        float z[4];
        box_muller(u[0], u[1], &z[0], &z[1]);
        box_muller(u[2], u[3], &z[2], &z[3]);
#pragma unroll
        for (int j = 0; j < 4; j++) v[j] = convert<T>(z[j]);
      } else {
#pragma unroll
        for (int j = 0; j < 4; j++) v[j] = to_uniform<T>(u[j]);
      }
    }
    int64_t i = g * 4;
#pragma unroll
    for (int j = 0; j < 4; j++)
      if (i + j < n) out[i + j] = v[j];
  }
}

}  // namespace

void random(const Tensor& out, bool normal, uint64_t seed, uint64_t offset) {
  MINI_CHECK(out->is_cuda() && out->is_contiguous() && is_floating(out->dtype),
             "internal error: the CUDA random kernel needs a contiguous floating output on the GPU");
  int64_t n = out->numel();
  if (n == 0) return;
  const char* op = normal ? "randn" : "rand";
  int64_t blocks = grid_for((n + 3) / 4);
  auto launch = [&](auto* p) {
    using T = std::remove_pointer_t<decltype(p)>;
    if (normal) random_kernel<T, true><<<blocks, kThreads, 0, ::mini::cuda::current_stream()>>>(p, n, seed, offset);
    else random_kernel<T, false><<<blocks, kThreads, 0, ::mini::cuda::current_stream()>>>(p, n, seed, offset);
    check_launch(op);
  };
  switch (out->dtype) {
    case DType::Float32: return launch(static_cast<float*>(out->device_raw()));
    case DType::Float64: return launch(static_cast<double*>(out->device_raw()));
    case DType::BFloat16: return launch(static_cast<bfloat16*>(out->device_raw()));
    default: fail("internal error: random numbers of dtype ", dtype_name(out->dtype));
  }
}

// Counter values used by a launch of numel elements (one per group of 4), rounded up to a
// multiple of 4 as torch rounds its Philox offset increments.
uint64_t random_offset_increment(int64_t numel) {
  uint64_t groups = numel <= 0 ? 0 : (static_cast<uint64_t>(numel) + 3) / 4;
  return (groups + 3) / 4 * 4;
}

}  // namespace mini::cuda
