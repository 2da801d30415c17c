// bfloat16.h — the 16-bit "brain" float: float32's sign and 8-bit exponent, 7 mantissa bits.
//
// Storage only: arithmetic converts to float (every bfloat16 op computes in float32, as torch
// does) and a result is rounded back to nearest, ties to even. NaN stays NaN (quiet).
// Usable from host and device code (CUDA kernels keep the same bits as __nv_bfloat16).
#pragma once
#include <cstdint>
#include <cstring>

#if defined(__CUDACC__)
#define MINI_HD __host__ __device__ __forceinline__
#else
#define MINI_HD inline
#endif

namespace mini {

struct bfloat16 {
  uint16_t bits = 0;

  bfloat16() = default;
  MINI_HD bfloat16(float f) : bits(round_bits(f)) {}  // NOLINT: implicit, as a float is
  MINI_HD operator float() const { return to_float(bits); }

  MINI_HD static bfloat16 from_bits(uint16_t b) {
    bfloat16 r;
    r.bits = b;
    return r;
  }
  // float -> bfloat16 bits, rounding to nearest even; NaN becomes a quiet NaN.
  MINI_HD static uint16_t round_bits(float f) {
    uint32_t u;
#if defined(__CUDA_ARCH__)
    u = __float_as_uint(f);
#else
    std::memcpy(&u, &f, 4);
#endif
    if ((u & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((u >> 16) | 0x0040u);
    u += 0x7fffu + ((u >> 16) & 1u);
    return static_cast<uint16_t>(u >> 16);
  }
  MINI_HD static float to_float(uint16_t b) {
    uint32_t u = static_cast<uint32_t>(b) << 16;
#if defined(__CUDA_ARCH__)
    return __uint_as_float(u);
#else
    float f;
    std::memcpy(&f, &u, 4);
    return f;
#endif
  }
};

}  // namespace mini
