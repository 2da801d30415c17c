// scalar_math.h — the per-element math of the pointwise kernels, written so that loops
// over them vectorize: no calls into libm in the hot float32 paths (exp is a Cephes-style
// polynomial), NaN handled with compares rather than branches.
#pragma once
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>

namespace mini {

// exp for float32 with ~1 ulp error: x = n*ln2 + r, exp(x) = 2^n * P(r). 2^n is applied
// as two factors 2^(n/2) so that results down to the denormal range stay exact; there is
// no branch and no libm call, so loops over it vectorize.
inline float pow2i_f32(int32_t n) {  // 2^n for n in [-126, 127]
  return __builtin_bit_cast(float, (n + 127) << 23);  // a register move, vectorizable
}

inline float exp_f32(float x) {
  float xc = x < -103.9f ? -103.9f : (x > 88.7228394f ? 88.7228394f : x);
  xc = x != x ? 0.0f : xc;  // NaN: compute anything finite, the NaN is returned below
  // n = round(x / ln2): adding 1.5 * 2^23 rounds to an integer in the float's mantissa
  // (floorf would not vectorize without -ffast-math).
  float n = (xc * 1.44269504088896341f + 12582912.0f) - 12582912.0f;
  float r = xc - n * 0.693359375f + n * 2.12194440e-4f;
  float p = 1.9875691500e-4f;
  p = p * r + 1.3981999507e-3f;
  p = p * r + 8.3334519073e-3f;
  p = p * r + 4.1665795894e-2f;
  p = p * r + 1.6666665459e-1f;
  p = p * r + 5.0000001201e-1f;
  p = p * r * r + r + 1.0f;
  int32_t ni = static_cast<int32_t>(n);
  int32_t half = ni >> 1;
  float y = p * pow2i_f32(half) * pow2i_f32(ni - half);
  y = x > 88.72283935546875f ? std::numeric_limits<float>::infinity() : y;
  y = x < -103.97f ? 0.0f : y;
  return x != x ? x : y;
}

// sin and cos for float32 without libm calls, so loops over them vectorize: reduce by pi/2
// in double (exact enough for |x| < 2^24, where floats are still finer than 1), then Cephes'
// minimax polynomials on [-pi/4, pi/4]; the quadrant picks sin or cos and the sign.
inline float sincos_f32(float x, int shift) {
  double xd = x;
  double j = (xd * 0.63661977236758134308 + 6755399441055744.0) - 6755399441055744.0;
  float r = static_cast<float>(xd - j * 1.57079632679489661923);
  int64_t q = static_cast<int64_t>(j) + shift;
  float r2 = r * r;
  float s = r + r * r2 * (-1.6666654611e-1f + r2 * (8.3321608736e-3f + r2 * -1.9515295891e-4f));
  float c = 1.0f - 0.5f * r2 +
            r2 * r2 * (4.166664568298827e-2f + r2 * (-1.388731625493765e-3f + r2 * 2.443315711809948e-5f));
  float v = (q & 1) ? c : s;
  v = (q & 2) ? -v : v;
  return x != x || x - x != 0.0f ? x - x : v;  // NaN for NaN and +-inf, as libm
}

template <class T> inline T sin_of(T x) { return std::sin(x); }
template <> inline float sin_of<float>(float x) { return sincos_f32(x, 0); }
template <class T> inline T cos_of(T x) { return std::cos(x); }
template <> inline float cos_of<float>(float x) { return sincos_f32(x, 1); }

template <class T> inline T exp_of(T x) { return std::exp(x); }
template <> inline float exp_of<float>(float x) { return exp_f32(x); }

template <class T> inline T sigmoid_of(T x) { return T(1) / (T(1) + exp_of<T>(-x)); }

constexpr double kSqrt1_2 = 0.70710678118654752440;
constexpr double kSqrt2OverPi = 0.79788456080286535588;
constexpr double kInvSqrt2Pi = 0.39894228040143267794;

template <class T> inline T gelu_of(T x, bool tanh_approx) {
  if (tanh_approx) {
    T inner = T(kSqrt2OverPi) * (x + T(0.044715) * x * x * x);
    return T(0.5) * x * (T(1) + std::tanh(inner));
  }
  return T(0.5) * x * (T(1) + std::erf(x * T(kSqrt1_2)));
}

template <class T> inline T gelu_grad_of(T x, bool tanh_approx) {
  if (tanh_approx) {
    T x3 = x * x * x;
    T inner = T(kSqrt2OverPi) * (x + T(0.044715) * x3);
    T th = std::tanh(inner);
    T dinner = T(kSqrt2OverPi) * (T(1) + T(3 * 0.044715) * x * x);
    return T(0.5) * (T(1) + th) + T(0.5) * x * (T(1) - th * th) * dinner;
  }
  T cdf = T(0.5) * (T(1) + std::erf(x * T(kSqrt1_2)));
  T pdf = T(kInvSqrt2Pi) * std::exp(T(-0.5) * x * x);
  return cdf + x * pdf;
}

}  // namespace mini
