// scalar_math.h — the per-element math of the pointwise kernels, shared by eager mini and
// the generated kernels (codegen embeds this file), written so that loops over it vectorize:
// float32 exp, sigmoid, sin and cos are mini's own polynomials, the rest is libm.
// The same text compiles as CUDA (the CUDA renderer's prelude embeds it too, for NVRTC, which
// has no standard headers): functions are __host__ __device__ there, the bit casts, rounding
// and fused multiply-adds the device's intrinsics, libm the device library's overloads.
#pragma once
#if defined(__CUDACC__)
#define MINI_MATH_FN __host__ __device__ inline
#define MINI_LIBM(f) ::f
#else
#define MINI_MATH_FN inline
#define MINI_LIBM(f) std::f
#endif
#if !defined(__CUDACC_RTC__)
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#endif

namespace mini {

// A float's bits and back, round to nearest even, a*b + c rounded once: one instruction each.
MINI_MATH_FN uint32_t bits_of(float x) {
#if defined(__CUDA_ARCH__)
  return __float_as_uint(x);
#else
  return __builtin_bit_cast(uint32_t, x);
#endif
}
MINI_MATH_FN float float_of(uint32_t b) {
#if defined(__CUDA_ARCH__)
  return __uint_as_float(b);
#else
  return __builtin_bit_cast(float, b);
#endif
}
MINI_MATH_FN float round_even(float x) {
#if defined(__CUDA_ARCH__)
  return rintf(x);
#else
  return __builtin_rintf(x);
#endif
}
MINI_MATH_FN float fused_mul_add(float a, float b, float c) {
#if defined(__CUDA_ARCH__)
  return fmaf(a, b, c);
#else
  return __builtin_fmaf(a, b, c);
#endif
}

// The float32 transcendental functions below are written for loops that vectorize: no calls
// into libm, no branches, no float-to-int conversions (an integer is read from a float's
// bits, which also avoids the undefined behaviour of converting NaN). They are short, because
// a fused kernel chains several of them and its speed is then their total instruction count
// (chain8's kernel is compute-bound: see notes/perf.md).

// |x| limited to lim_pos (x >= 0) or lim_neg (x < 0), computed on the float's bits: an
// unsigned min is one instruction where a float compare-and-select is several (GCC also
// duplicates the code after a select for the clamped lanes). A NaN would be clamped too, so
// *nan is set to all ones for a NaN input, for the caller to OR into its result.
MINI_MATH_FN float clamp_magnitude(float x, uint32_t lim_pos, uint32_t lim_neg, uint32_t* nan) {
  uint32_t bits = bits_of(x);
  uint32_t sign = bits & 0x80000000u, mag = bits & 0x7FFFFFFFu;
  *nan = mag > 0x7F800000u ? 0xFFFFFFFFu : 0u;
  uint32_t lim = sign ? lim_neg : lim_pos;
  return float_of((mag < lim ? mag : lim) | sign);
}
MINI_MATH_FN float or_bits(float v, uint32_t bits) {
  return float_of(bits_of(v) | bits);
}

// e^r for |r| <= ln2/2: Cephes' degree-7 polynomial, ~1 ulp.
MINI_MATH_FN float exp_poly(float r) {
  float p = 1.9875691500e-4f;
  p = p * r + 1.3981999507e-3f;
  p = p * r + 8.3334519073e-3f;
  p = p * r + 4.1665795894e-2f;
  p = p * r + 1.6666665459e-1f;
  p = p * r + 5.0000001201e-1f;
  return p * (r * r) + r + 1.0f;
}

// exp(x) = 2^n * e^r with n = round(x / ln2), r = x - n*ln2. 2^n is applied as two factors
// 2^(n/2), so results down to the denormals are right, and limiting x to [-104, 89] gives 0
// and +inf at the ends (2^-150 underflows, 2^128 overflows) with no select.
// Below -103.98 the result is 0: those lanes compute exp(0) instead and mask it to 0, because
// reaching 2^-150 through a denormal product costs a microcode assist of a hundred cycles or
// more on x86 (a masked softmax's -inf entries, half of every causal row, ran 13x slower).
MINI_MATH_FN float exp_f32(float x) {
  uint32_t nan;
  // all ones, or 0 where exp(x) < 2^-150 rounds to 0 (never for NaN): a mask, not a select,
  // because `zero ? 0.0f : x` made GCC 12 give up vectorizing every loop that calls exp_f32
  // (tests/python/test_scalar_math_vectorizes.py)
  const uint32_t keep = 0u - static_cast<uint32_t>(!(x < -103.98f));
  float xc = clamp_magnitude(float_of(bits_of(x) & keep), 0x42B20000u /* 89 */, 0x42D00000u /* 104 */, &nan);
  // adding 1.5 * 2^23 rounds to an integer held in the float's low mantissa bits
  float t = xc * 1.44269504088896341f + 12582912.0f;
  float n = t - 12582912.0f;
  int32_t ni = static_cast<int32_t>(bits_of(t) - 0x4B400000u);
  float r = (xc - n * 0.693359375f) + n * 2.12194440e-4f;  // ln2 in two parts
  int32_t half = ni >> 1;
  // 2^k for k in [-126, 127], in unsigned arithmetic (no signed-overflow UB for NaN)
  float s1 = float_of((static_cast<uint32_t>(half) + 127u) << 23);
  float s2 = float_of((static_cast<uint32_t>(ni - half) + 127u) << 23);
  return float_of(bits_of(or_bits(exp_poly(r) * s1 * s2, nan)) & keep);
}

// sigmoid(x) = 1 / (1 + e), e = exp(-x), with one factor 2^n: x is limited to [-89, 87],
// where below -89 e overflows to inf (result 0) and above 87 e is under 2^-126 and 1 + e
// rounds to 1. Results under 2^-126 (x < -87.3) flush to zero, as 1 / (1 + exp(-x)) does
// with any float32 exp.
MINI_MATH_FN float sigmoid_f32(float x) {
  uint32_t nan;
  float xc = clamp_magnitude(x, 0x42AE0000u /* 87 */, 0x42B20000u /* 89 */, &nan);
  float t = xc * -1.44269504088896341f + 12582912.0f;
  float n = t - 12582912.0f;
  uint32_t ni = bits_of(t) - 0x4B400000u;
  float r = (-xc - n * 0.693359375f) + n * 2.12194440e-4f;
  float e = exp_poly(r) * float_of((ni + 127u) << 23);  // n = 128 gives inf
  return or_bits(1.0f / (1.0f + e), nan);
}

// sin(d) for |d| <= pi/2: one odd polynomial of degree 9, fitted (scripts/fit_sin_poly.py)
// for relative error 6e-9.
MINI_MATH_FN float sin_poly(float d) {
  float s = d * d;
  float u = 2.605780537123792e-06f;
  u = u * s + -1.9809602235909551e-04f;
  u = u * s + 8.33306647837162e-03f;
  u = u * s + -1.6666659712791443e-01f;
  return s * (u * d) + d;
}
// (-1)^q as a sign bit, from the low bit of q + 1.5 * 2^23 (exact for |q| < 2^22)
MINI_MATH_FN uint32_t parity_sign(float q) { return bits_of(q + 12582912.0f) << 31; }

// sin for float32: |x| = q*pi + d with |d| <= pi/2, sin|x| = (-1)^q sin(d), and the sign of
// x put back (sin is odd, which also keeps sin(-0) = -0). pi is subtracted in three float
// parts with fused multiply-adds: as exact as a reduction in double for |x| up to ~1e6 (abs
// error ~1.2e-7 there, 1.7 ulp for |x| <= 1e3; two parts would give 25 ulp near the zeros); beyond ~1e7 the error grows (libm is exact
// everywhere, and slow). NaN and +-inf give NaN through the arithmetic (inf - inf).
MINI_MATH_FN float sin_f32(float x) {
  uint32_t bits = bits_of(x);
  float ax = float_of(bits & 0x7FFFFFFFu);
  float q = round_even(ax * 0.318309873342514038f);
  float d = fused_mul_add(-q, 3.1415927410125732f, ax);
  d = fused_mul_add(-q, -8.742277657347586e-08f, d);
  d = fused_mul_add(-q, -3.552713678800501e-15f, d);
  uint32_t sign = parity_sign(q) ^ (bits & 0x80000000u);
  return float_of(bits_of(sin_poly(d)) ^ sign);
}

// cos for float32: x = (2q + 1)*pi/2 + d with |d| <= pi/2, cos(x) = (-1)^(q+1) sin(d).
MINI_MATH_FN float cos_f32(float x) {
  float q = round_even(x * 0.318309873342514038f - 0.5f);
  float k = q + q + 1.0f;
  float d = fused_mul_add(-k, 1.5707963705062866f, x);
  d = fused_mul_add(-k, -4.371138828673793e-08f, d);
  d = fused_mul_add(-k, -1.7763568394002505e-15f, d);
  uint32_t sign = parity_sign(q) ^ 0x80000000u;
  return float_of(bits_of(sin_poly(d)) ^ sign);
}

// erf for float32, branch-free: for |x| <= 1 its odd Taylor series to x^21 (11 terms; the
// first one left out is 1.3e-9 at |x| = 1); above, Abramowitz and Stegun 7.1.26, 1 - t*P(t)*exp(-x^2) with
// t = 1 / (1 + 0.3275911|x|), absolute error under 1.5e-7 (where erf is above 0.84: under 2
// ulp); both are computed and one selected, so a loop over it vectorizes. Saturates to +-1 for
// large |x|; NaN gives NaN.
MINI_MATH_FN float erf_f32(float x) {
  uint32_t bits = bits_of(x), sign = bits & 0x80000000u;
  float ax = float_of(bits & 0x7FFFFFFFu), s = x * x;
  float p = 1.48071928e-08f;  // c_n = (-1)^n 2/sqrt(pi) / (n! (2n+1)), n = 10 down to 0
  p = fused_mul_add(p, s, -1.63658447e-07f);
  p = fused_mul_add(p, s, 1.64621144e-06f);
  p = fused_mul_add(p, s, -1.49256504e-05f);
  p = fused_mul_add(p, s, 1.20553330e-04f);
  p = fused_mul_add(p, s, -8.54832702e-04f);
  p = fused_mul_add(p, s, 5.22397763e-03f);
  p = fused_mul_add(p, s, -2.68661706e-02f);
  p = fused_mul_add(p, s, 1.12837917e-01f);
  p = fused_mul_add(p, s, -3.76126389e-01f);
  p = fused_mul_add(p, s, 1.12837917e+00f);
  float small = p * ax;
  float t = 1.0f / fused_mul_add(0.3275911f, ax, 1.0f);
  float q = 1.061405429f;
  q = fused_mul_add(q, t, -1.453152027f);
  q = fused_mul_add(q, t, 1.421413741f);
  q = fused_mul_add(q, t, -0.284496736f);
  q = fused_mul_add(q, t, 0.254829592f);
  float large = 1.0f - q * t * exp_f32(-s);
  // small where |x| <= 1, else large (NaN: large, NaN through exp), as a bit mask (vectorizes)
  const uint32_t use_small = 0u - static_cast<uint32_t>(ax <= 1.0f);
  float r = float_of((bits_of(small) & use_small) | (bits_of(large) & ~use_small));
  return float_of(bits_of(r) | sign);
}

template <class T> MINI_MATH_FN T sin_of(T x) { return MINI_LIBM(sin)(x); }
template <> MINI_MATH_FN float sin_of<float>(float x) { return sin_f32(x); }
template <class T> MINI_MATH_FN T cos_of(T x) { return MINI_LIBM(cos)(x); }
template <> MINI_MATH_FN float cos_of<float>(float x) { return cos_f32(x); }

template <class T> MINI_MATH_FN T exp_of(T x) { return MINI_LIBM(exp)(x); }
template <> MINI_MATH_FN float exp_of<float>(float x) { return exp_f32(x); }

template <class T> MINI_MATH_FN T erf_of(T x) { return MINI_LIBM(erf)(x); }
// On the GPU the device library's erff (2 ulp, one branch a warp mostly agrees on) is about
// half the instructions of erf_f32's both-branches form, which is written for CPU vector
// loops: gelu and its backward over GPT-2's [8192, 3072] activations are instruction-bound.
template <> MINI_MATH_FN float erf_of<float>(float x) {
#if defined(__CUDA_ARCH__)
  return erff(x);
#else
  return erf_f32(x);
#endif
}

template <class T> MINI_MATH_FN T sigmoid_of(T x) { return T(1) / (T(1) + exp_of<T>(-x)); }
template <> MINI_MATH_FN float sigmoid_of<float>(float x) { return sigmoid_f32(x); }

// where(c, a, b) with both operands evaluated before the choice (codegen's spelling of where,
// c_style.cpp, where both are safe to evaluate). Spelled `c ? a : b` with a load in a branch,
// the load is a masked load once GCC vectorizes the loop, and GCC 12 (-O3 -march=native, AVX2)
// got one wrong: a masked softmax plus `where(mask, x, 2.0)` read x at the wrong lanes in 6% of
// its elements once the loop before it vectorized (tests/python/test_inductor.py).
template <class T> MINI_MATH_FN T select(bool c, T a, T b) { return c ? a : b; }

constexpr double kSqrt1_2 = 0.70710678118654752440;
constexpr double kSqrt2OverPi = 0.79788456080286535588;
constexpr double kInvSqrt2Pi = 0.39894228040143267794;

template <class T> MINI_MATH_FN T gelu_of(T x, bool tanh_approx) {
  if (tanh_approx) {
    T inner = T(kSqrt2OverPi) * (x + T(0.044715) * x * x * x);
    return T(0.5) * x * (T(1) + MINI_LIBM(tanh)(inner));
  }
  return T(0.5) * x * (T(1) + erf_of<T>(x * T(kSqrt1_2)));
}

template <class T> MINI_MATH_FN T gelu_grad_of(T x, bool tanh_approx) {
  if (tanh_approx) {
    T x3 = x * x * x;
    T inner = T(kSqrt2OverPi) * (x + T(0.044715) * x3);
    T th = MINI_LIBM(tanh)(inner);
    T dinner = T(kSqrt2OverPi) * (T(1) + T(3 * 0.044715) * x * x);
    return T(0.5) * (T(1) + th) + T(0.5) * x * (T(1) - th * th) * dinner;
  }
  T cdf = T(0.5) * (T(1) + erf_of<T>(x * T(kSqrt1_2)));
  T pdf = T(kInvSqrt2Pi) * exp_of<T>(T(-0.5) * x * x);
  return cdf + x * pdf;
}

}  // namespace mini
