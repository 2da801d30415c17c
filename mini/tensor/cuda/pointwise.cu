// cuda/pointwise.cu — binary and unary eager kernels (kernels.h), one launch each.
//
// The math is mini's CPU math (pointwise.cpp, scalar_math.h) in CUDA's libdevice: float32 and
// bfloat16 compute in float (expf, erff, ...), float64 in double. Each (op, dtype) pair has a
// flat kernel of its own (the op is a template argument, so the loop holds nothing but the
// loads, the math and the stores); the strided path has one arithmetic and one comparison
// kernel per dtype that switch on the op at run time (the same branch for every thread, and
// that loop is dominated by its index arithmetic anyway): fewer kernels, less nvcc time.
#include "loops.cuh"
#include "../scalar_math.h"

namespace mini::cuda {

namespace {

// ---- the math, per element ----------------------------------------------------------------
__device__ __forceinline__ float m_exp(float x) { return expf(x); }
__device__ __forceinline__ double m_exp(double x) { return exp(x); }
__device__ __forceinline__ float m_log(float x) { return logf(x); }
__device__ __forceinline__ double m_log(double x) { return log(x); }
__device__ __forceinline__ float m_sin(float x) { return sinf(x); }
__device__ __forceinline__ double m_sin(double x) { return sin(x); }
__device__ __forceinline__ float m_cos(float x) { return cosf(x); }
__device__ __forceinline__ double m_cos(double x) { return cos(x); }
__device__ __forceinline__ float m_tanh(float x) { return tanhf(x); }
__device__ __forceinline__ double m_tanh(double x) { return tanh(x); }
__device__ __forceinline__ float m_sqrt(float x) { return sqrtf(x); }
__device__ __forceinline__ double m_sqrt(double x) { return sqrt(x); }
// the hardware's reciprocal square root (2 ulp, as torch's rsqrt): 1 / sqrtf is an IEEE
// division after an IEEE square root, and made rsqrt compute-bound
__device__ __forceinline__ float m_rsqrt(float x) { return rsqrtf(x); }
__device__ __forceinline__ double m_rsqrt(double x) { return rsqrt(x); }
__device__ __forceinline__ float m_pow(float x, float y) { return powf(x, y); }
__device__ __forceinline__ double m_pow(double x, double y) { return pow(x, y); }

// ---- bfloat16's math ------------------------------------------------------------------------
// A bfloat16 result keeps 8 significant bits, rounded from the float computed here. libdevice's
// logf, sinf, cosf, powf and erff are accurate to a float ulp or two (2^-23) at 20 to 60
// instructions an element, which makes those ops compute-bound at bfloat16's 4 bytes an element
// (torch 2.11 on the H200: 45-85% of the copy ceiling). The hardware's approximations (MUFU:
// lg2, ex2, sin, cos, rsqrt) err by about 2^-22, thousands of times less than bfloat16's half
// ulp (2^-9). Each lp_ function below is used only for bfloat16 tensors, takes a bfloat16 value
// widened to float, keeps a relative error under 2^-14 (the bound is in each comment), and
// leaves to libdevice every input it cannot bound (zero, negative, subnormal, inf, NaN, huge
// arguments, results near zero). Its bfloat16 result can differ from torch's by one ulp, where
// the exact value lies within that error of a rounding midpoint: about 1 element in 2^6 at the
// bound, far fewer typically.
constexpr float kLn2 = 0.693147180559945309f;
// libdevice's long paths as calls: inlined, they made the flat loop's code many times larger
__device__ __noinline__ float slow_sin(float x) { return sinf(x); }
__device__ __noinline__ float slow_cos(float x) { return cosf(x); }
__device__ __noinline__ float slow_pow(float x, float y) { return powf(x, y); }
constexpr float kFloatMin = 1.17549435e-38f;  // the smallest normal float
constexpr float kFloatMax = 3.40282347e+38f;

// log x = log2 x * ln 2, log2 by MUFU.LG2: absolute error 2^-22 on [0.5, 2], where a bfloat16
// x != 1 has |log2 x| >= 2^-7.5 (relative error <= 2^-14.5); 2 ulp elsewhere.
__device__ __forceinline__ float lp_log(float x) {
  if (x == 1.f) return 0.f;
  if (x >= kFloatMin && x <= kFloatMax) return __log2f(x) * kLn2;
  return logf(x);  // 0, negative, subnormal, inf, NaN
}

// sin and cos by MUFU after reducing x to [-pi, pi] with a two-part 2 pi (fmaf: error ~2^-23
// absolute for |x| <= 8192). MUFU's absolute error on [-pi, pi] is 2^-21.4, so a result of at
// least 2^-6 is within 2^-15 relative; smaller results (x near a zero of the function) and
// larger |x| go to libdevice. |x| < 0.5: sin x by its Taylor series to x^7 (relative 2^-26).
constexpr float kInv2Pi = 0.159154943091895336f;
constexpr float k2PiHi = 6.28318548202514648f;  // float(2 pi)
constexpr float k2PiLo = -1.74845553e-07f;      // 2 pi - k2PiHi
constexpr float kNearZero = 0.015625f;          // 2^-6

__device__ __forceinline__ float reduce_2pi(float x) {
  float k = rintf(x * kInv2Pi);
  return fmaf(-k, k2PiLo, fmaf(-k, k2PiHi, x));
}

__device__ __forceinline__ float lp_sin(float x) {
  float ax = fabsf(x);
  if (ax < 0.5f) {
    float x2 = x * x;
    return x * fmaf(x2, fmaf(x2, fmaf(x2, -1.f / 5040.f, 1.f / 120.f), -1.f / 6.f), 1.f);
  }
  if (ax <= 8192.f) {
    float s = __sinf(reduce_2pi(x));
    if (fabsf(s) >= kNearZero) return s;
  }
  return slow_sin(x);
}

__device__ __forceinline__ float lp_cos(float x) {
  if (fabsf(x) <= 8192.f) {
    float c = __cosf(reduce_2pi(x));
    if (fabsf(c) >= kNearZero) return c;
  }
  return slow_cos(x);
}

// x ** y = 2 ** (y log2 x) for a normal positive x and |y| <= 256: log2 x has absolute error
// 2^-22 on [0.5, 2], relative 2^-22 elsewhere, so y log2 x is off by at most 2^-14 where the
// result is neither inf nor 0 (|y log2 x| < 150), and exp2f (2 ulp) makes that a relative
// error of 2^-14.5. Everything else (x <= 0, subnormal, inf, NaN; |y| > 256, NaN) is powf.
__device__ __forceinline__ float lp_pow(float x, float y) {
  if (x >= kFloatMin && x <= kFloatMax && fabsf(y) <= 256.f) return exp2f(y * __log2f(x));
  return slow_pow(x, y);
}

// sqrt x = x * rsqrt(x) for a normal finite x > 0 (MUFU.RSQ: 2 ulp, so 2^-21 relative); 0,
// negative, subnormal, inf and NaN go to sqrtf.
__device__ __forceinline__ float lp_sqrt(float x) {
  if (x >= kFloatMin && x <= kFloatMax) return x * rsqrtf(x);
  return sqrtf(x);
}

// 1 / (1 + e^-x): __expf errs by 2 + 1.17 |x| ulp (2^-16 relative at the |x| = 88 where e^-x
// stops being finite), the reciprocal is IEEE's (__frcp_rn: inf gives 0).
__device__ __forceinline__ float lp_sigmoid(float x) { return __frcp_rn(1.f + __expf(-x)); }

// gelu(x) = x Phi(x), Phi(x) = erfc(-x / sqrt 2) / 2, erfc(z) for z >= 0 in the form of
// Numerical Recipes' erfcc, t exp(-z^2 + P(t)) with t = 1 / (1 + z / 2), but P of degree 5
// (NR: 9), fitted here for bfloat16 (iterated weighted least squares against log(erfc(z) / t)
// + z^2 on [0, 10]; notes/cuda.md): relative error 2^-17. The exponent's float rounding
// (z^2 < 90 before erfc underflows) adds 2^-17, __expf 2^-16. x >= 0 uses Phi = 1 - erfc(z) / 2
// (absolute error 2^-16 on a Phi >= 1/2); x < 0, erfc(|z|) / 2, whose relative accuracy is what
// the left tail needs (gelu(-5) = -1.4e-6, where 1 + erf(x / sqrt 2), torch's and the float32
// kernel's sum, cancels to 2% off).
__device__ __forceinline__ float lp_erfc_nonneg(float z) {
  float t = __fdividef(1.f, fmaf(0.5f, z, 1.f));  // MUFU.RCP: 1 + z / 2 is in [1, 8]
  float p = fmaf(t, 0.228786443f, -0.709179683f);
  p = fmaf(t, p, 0.47448089f);
  p = fmaf(t, p, 0.254449573f);
  p = fmaf(t, p, 1.018012f);
  return t * __expf(fmaf(t, p, fmaf(-z, z, -1.26654162f)));
}

__device__ __forceinline__ float lp_gelu(float x) {
  float e = 0.5f * lp_erfc_nonneg(fabsf(x) * 0.707106781186547524f);
  return x * (x >= 0.f ? 1.f - e : e);
}

// gelu and its derivative: scalar_math.h's, the CPU's and the generated kernels' (float32 with
// mini's erf_f32 and exp_f32, float64 with the device library's erf and exp), so that eager
// CUDA, eager CPU and compiled training compute the same GELU to the bit where the polynomials
// decide it (libdevice's erff differs from erf_f32 by an ulp here and there: while only the
// generated kernels used erf_f32, labs/train_gpt.py's compiled CUDA losses drifted from eager's
// by 9.5e-4 over 200 steps, against 6.4e-6 the run before)
template <class C>
__device__ __forceinline__ C gelu(C x, bool tanh_approx) { return mini::gelu_of<C>(x, tanh_approx); }

template <class C>
__device__ __forceinline__ C gelu_grad(C x, bool tanh_approx) { return mini::gelu_grad_of<C>(x, tanh_approx); }

// base ** exp for int64, exactly (by squaring, wrapping as torch does on overflow). A
// negative exponent truncates 1 / base ** -exp towards zero, as the CPU's pow does.
__device__ __forceinline__ int64_t int_pow(int64_t base, int64_t exp) {
  if (exp < 0) return base == 1 ? 1 : base == -1 ? ((exp & 1) ? -1 : 1) : 0;
  uint64_t result = 1, b = static_cast<uint64_t>(base);
  for (uint64_t e = static_cast<uint64_t>(exp); e; e >>= 1) {
    if (e & 1) result *= b;
    b *= b;
  }
  return static_cast<int64_t>(result);
}

constexpr bool is_comparison(OpKind k) {
  return k == OpKind::Eq || k == OpKind::Ne || k == OpKind::Lt || k == OpKind::Le ||
         k == OpKind::Gt || k == OpKind::Ge;
}

// Which (op, compute type) pairs exist: the caller promotes bool and int64 division (and
// pow of bools) before it gets here, and refuses bool subtraction.
template <class C>
constexpr bool binary_defined(OpKind k) {
  if (k == OpKind::Div || k == OpKind::GeluBackward) return std::is_floating_point_v<C>;
  if (k == OpKind::Sub || k == OpKind::Pow) return !std::is_same_v<C, bool>;
  return true;
}

template <class C>
__device__ __forceinline__ bool compare(OpKind k, C x, C y) {
  switch (k) {
    case OpKind::Eq: return x == y;
    case OpKind::Ne: return x != y;
    case OpKind::Lt: return x < y;
    case OpKind::Le: return x <= y;
    case OpKind::Gt: return x > y;
    default: return x >= y;  // Ge
  }
}

// C is the compute type (float for bfloat16). Bool arithmetic is logic: + and max are or,
// * and min are and. Integer + - * wrap around (unsigned arithmetic: no undefined overflow).
template <class C, bool kLowp>
__device__ __forceinline__ C binary_math(OpKind k, C x, C y, bool tanh_approx) {
  if constexpr (std::is_same_v<C, bool>) {
    return (k == OpKind::Add || k == OpKind::Maximum) ? (x || y) : (x && y);
  } else {
    switch (k) {
      case OpKind::Add:
        if constexpr (std::is_integral_v<C>) return C(uint64_t(x) + uint64_t(y));
        else return x + y;
      case OpKind::Sub:
        if constexpr (std::is_integral_v<C>) return C(uint64_t(x) - uint64_t(y));
        else return x - y;
      case OpKind::Mul:
        if constexpr (std::is_integral_v<C>) return C(uint64_t(x) * uint64_t(y));
        else return x * y;
      case OpKind::Maximum: return (x > y || x != x) ? x : y;  // NaN propagates
      case OpKind::Minimum: return (x < y || x != x) ? x : y;
      case OpKind::Pow:
        if constexpr (std::is_integral_v<C>) return int_pow(x, y);
        else if (y == C(2)) return x * x;  // a square, as the CPU's
        else if constexpr (kLowp) return lp_pow(x, y);
        else return m_pow(x, y);
      default: break;
    }
    if constexpr (std::is_floating_point_v<C>) {
      if (k == OpKind::Div) return x / y;
      return x * gelu_grad(y, tanh_approx);  // GeluBackward: (grad, x)
    }
    return x;
  }
}

template <class C>
constexpr bool unary_defined(OpKind k) {
  if (std::is_floating_point_v<C>) return true;
  if (std::is_same_v<C, bool>) return false;  // the caller copies for abs and relu
  return k == OpKind::Neg || k == OpKind::Abs || k == OpKind::Relu || k == OpKind::Sign;
}

// kLowp: the tensor is bfloat16 (C is float), whose transcendental ops take the lp_ paths.
template <class C, bool kLowp>
__device__ __forceinline__ C unary_math(OpKind k, C x, bool tanh_approx) {
  if constexpr (std::is_same_v<C, bool>) {
    return x;  // never launched: unary_defined
  } else {
    switch (k) {
      case OpKind::Neg: return -x;
      case OpKind::Abs: return x < C(0) ? C(-x) : x;
      case OpKind::Relu: return x < C(0) ? C(0) : x;  // NaN passes through
      case OpKind::Sign: return C((x > C(0)) - (x < C(0)));
      default: break;
    }
    if constexpr (kLowp) {
      switch (k) {
        case OpKind::Log: return lp_log(x);
        case OpKind::Sin: return lp_sin(x);
        case OpKind::Cos: return lp_cos(x);
        case OpKind::Sigmoid: return lp_sigmoid(x);
        case OpKind::Sqrt: return lp_sqrt(x);
        case OpKind::Gelu:
          if (!tanh_approx) return lp_gelu(x);
          break;
        default: break;
      }
    }
    if constexpr (std::is_floating_point_v<C>) {
      switch (k) {
        case OpKind::Exp: return m_exp(x);
        case OpKind::Log: return m_log(x);
        case OpKind::Sin: return m_sin(x);
        case OpKind::Cos: return m_cos(x);
        case OpKind::Tanh: return m_tanh(x);
        case OpKind::Sigmoid: return C(1) / (C(1) + m_exp(-x));
        case OpKind::Sqrt: return m_sqrt(x);
        case OpKind::Rsqrt: return m_rsqrt(x);
        default: return gelu(x, tanh_approx);  // Gelu
      }
    }
    return x;
  }
}

// ---- the ops as functors (the op fixed at compile time for the flat kernels, chosen at
// run time in the strided ones) ------------------------------------------------------------
template <OpKind K, class C, bool kLowp>
struct BinaryOpOf {
  bool tanh_approx = false;
  __device__ __forceinline__ auto operator()(C x, C y) const {
    if constexpr (is_comparison(K)) return compare(K, x, y);
    else return binary_math<C, kLowp>(K, x, y, tanh_approx);
  }
};
template <class C, bool kLowp>
struct ArithmeticOp {
  OpKind k = OpKind::Add;
  bool tanh_approx = false;
  __device__ __forceinline__ C operator()(C x, C y) const {
    return binary_math<C, kLowp>(k, x, y, tanh_approx);
  }
};
template <class C>
struct CompareOp {
  OpKind k = OpKind::Eq;
  __device__ __forceinline__ bool operator()(C x, C y) const { return compare(k, x, y); }
};
template <class C, bool kLowp>
struct UnaryOp {
  OpKind k = OpKind::Neg;
  bool tanh_approx = false;
  __device__ __forceinline__ C operator()(C x) const {
    return unary_math<C, kLowp>(k, x, tanh_approx);
  }
};
template <OpKind K, class C, bool kLowp>
struct UnaryOpOf {
  bool tanh_approx = false;
  __device__ __forceinline__ C operator()(C x) const {
    return unary_math<C, kLowp>(K, x, tanh_approx);
  }
};

template <class T>
constexpr bool kLowpOf = std::is_same_v<T, bfloat16>;

#define MINI_BINARY_OPS(X) \
  X(Add) X(Sub) X(Mul) X(Div) X(Pow) X(Maximum) X(Minimum) X(Eq) X(Ne) X(Lt) X(Le) X(Gt) X(Ge) \
  X(GeluBackward)
#define MINI_SWEEP_BINARY_OPS(X) X(Pow) X(Mul) X(Add) X(Div)
#define MINI_SWEEP_UNARY_OPS(X) X(Sigmoid) X(Sqrt) X(Log) X(Sin) X(Cos) X(Gelu)
#define MINI_UNARY_OPS(X)                                                                   \
  X(Neg) X(Abs) X(Exp) X(Log) X(Sin) X(Cos) X(Tanh) X(Sigmoid) X(Relu) X(Sqrt) X(Rsqrt) \
  X(Sign) X(Gelu)

// The flat loop's plan for op K on T where the loop's defaults (loops.cuh: 4 loads in flight
// per operand) lose. Measured by the kernel sweep on the H200 (notes/perf.md):
// - bfloat16 ops with long math (IEEE division, pow, sigmoid, sin, cos: a few dozen
//   instructions an element, with branches) are compute-bound at 2 bytes an element, and run
//   fastest with one 16-byte vector (8 elements) a thread a step: sigmoid 0.278 ms against
//   0.343 at 4 (torch 0.273), sin 0.303 against 0.350. gelu's math has no branch, and keeps
//   the default (0.331 ms against 0.347 at 1).
// - float32 pow (powf, ~100 instructions) wants its 4 loads issued with no bounds checks between
//   them: 0.863 ms against 1.145 (torch 0.804).
// unroll 0 and full_tiles -1 take the loop's defaults.
constexpr bool long_math(OpKind k) {
  return k == OpKind::Div || k == OpKind::Pow || k == OpKind::GeluBackward ||
         k == OpKind::Sigmoid || k == OpKind::Sin || k == OpKind::Cos;
}
template <OpKind K, class T>
struct FlatPlan {
  static constexpr int unroll = kLowpOf<T> && long_math(K) ? 1 : 0;
  static constexpr int full_tiles = std::is_same_v<T, float> && K == OpKind::Pow ? 1 : -1;
};

// The flat kernel of op K on T, if it is defined and the operands allow it. kUnroll 0: the
// op's FlatPlan; others, the sweep's variants (kFullTiles 0 or 1).
template <OpKind K, class T, int kUnroll = 0, int kFullTiles = -1>
bool binary_flat(const Tensor& out, const Tensor& a, const Tensor& b, bool tanh_approx) {
  if constexpr (binary_defined<opmath_t<T>>(K)) {
    using O = std::conditional_t<is_comparison(K), bool, T>;
    using Plan = FlatPlan<K, T>;
    return try_flat<O, 2, T, T, T, true, kUnroll ? kUnroll : Plan::unroll,
                    kUnroll ? kFullTiles : Plan::full_tiles>(
        op_name(K), out, {a, b}, BinaryOpOf<K, opmath_t<T>, kLowpOf<T>>{tanh_approx});
  }
  return false;
}

template <OpKind K, class T, int kUnroll = 0, int kFullTiles = -1>
bool unary_flat(const Tensor& out, const Tensor& a, bool tanh_approx) {
  if constexpr (unary_defined<opmath_t<T>>(K)) {
    using Plan = FlatPlan<K, T>;
    return try_flat<T, 1, T, T, T, false, kUnroll ? kUnroll : Plan::unroll,
                    kUnroll ? kFullTiles : Plan::full_tiles>(
        op_name(K), out, {a}, UnaryOpOf<K, opmath_t<T>, kLowpOf<T>>{tanh_approx});
  }
  return false;
}

// The sweep's flat kernels: the ops whose bar was missed at some point, with kUnroll loads per
// operand in flight.
template <class T, int kUnroll, bool kFullTiles>
bool sweep_flat_of(OpKind k, const Tensor& out, const Tensor& a, const Tensor& b) {
  switch (k) {
#define MINI_CASE(name) \
  case OpKind::name: return binary_flat<OpKind::name, T, kUnroll, kFullTiles>(out, a, b, false);
    MINI_SWEEP_BINARY_OPS(MINI_CASE)
#undef MINI_CASE
#define MINI_CASE(name) \
  case OpKind::name: return unary_flat<OpKind::name, T, kUnroll, kFullTiles>(out, a, false);
    MINI_SWEEP_UNARY_OPS(MINI_CASE)
#undef MINI_CASE
    default: return false;
  }
}

template <class T>
bool binary_flat_any(OpKind k, const Tensor& out, const Tensor& a, const Tensor& b, bool tanh_approx) {
  switch (k) {
#define MINI_CASE(name) \
  case OpKind::name: return binary_flat<OpKind::name, T>(out, a, b, tanh_approx);
    MINI_BINARY_OPS(MINI_CASE)
#undef MINI_CASE
    default: return false;
  }
}

template <class T>
bool unary_flat_any(OpKind k, const Tensor& out, const Tensor& a, bool tanh_approx) {
  switch (k) {
#define MINI_CASE(name) \
  case OpKind::name: return unary_flat<OpKind::name, T>(out, a, tanh_approx);
    MINI_UNARY_OPS(MINI_CASE)
#undef MINI_CASE
    default: return false;
  }
}

bool binary_is_defined(OpKind k, DType compute) {
  switch (k) {
#define MINI_CASE(name) case OpKind::name:
    MINI_BINARY_OPS(MINI_CASE)
#undef MINI_CASE
    return MINI_DISPATCH(compute, T, [&] { return binary_defined<opmath_t<T>>(k); });
    default: return false;
  }
}

bool unary_is_defined(OpKind k, DType d) {
  switch (k) {
#define MINI_CASE(name) case OpKind::name:
    MINI_UNARY_OPS(MINI_CASE)
#undef MINI_CASE
    return MINI_DISPATCH(d, T, [&] { return unary_defined<opmath_t<T>>(k); });
    default: return false;
  }
}

}  // namespace

bool sweep_flat(OpKind k, const Tensor& out, const Tensor& a, const Tensor& b, int unroll,
                bool full_tiles) {
  auto run = [&](auto zero) {
    using T = decltype(zero);
    switch (unroll * 2 + full_tiles) {
      case 2: return sweep_flat_of<T, 1, false>(k, out, a, b);
      case 4: return sweep_flat_of<T, 2, false>(k, out, a, b);
      case 5: return sweep_flat_of<T, 2, true>(k, out, a, b);
      case 8: return sweep_flat_of<T, 4, false>(k, out, a, b);
      case 9: return sweep_flat_of<T, 4, true>(k, out, a, b);
      default: return false;  // unroll 1 has no check between loads to drop
    }
  };
  if (out->dtype == DType::Float32) return run(float());
  if (out->dtype == DType::BFloat16) return run(bfloat16());
  return false;
}

void binary(OpKind k, const Tensor& out, const Tensor& a, const Tensor& b, DType compute,
            const std::string& mode) {
  check_operand(a, op_name(k));
  check_operand(b, op_name(k));
  DType out_dtype = is_comparison(k) ? DType::Bool : compute;
  MINI_CHECK(out->is_cuda() && out->dtype == out_dtype, "internal error: the CUDA ", op_name(k),
             " kernel needs a ", dtype_name(out_dtype), " output on the GPU, got ",
             dtype_name(out->dtype), " on ", out->device().str());
  if (!binary_is_defined(k, compute))
    fail(op_name(k), " is not supported for ", dtype_name(compute), " tensors on CUDA");
  int64_t n = out->numel();
  if (n == 0) return;
  bool tanh_approx = mode == "tanh";
  MINI_DISPATCH(compute, T, [&] {
    if (binary_flat_any<T>(k, out, a, b, tanh_approx)) return;
    using C = opmath_t<T>;
    if (is_comparison(k))
      run_strided<bool, 2, T, T, T, true>(op_name(k), out, {a, b}, CompareOp<C>{k});
    else
      run_strided<T, 2, T, T, T, true>(op_name(k), out, {a, b},
                                        ArithmeticOp<C, kLowpOf<T>>{k, tanh_approx});
  });
}

void unary(OpKind k, const Tensor& out, const Tensor& a, const Attrs& attrs) {
  check_operand(a, op_name(k));
  MINI_CHECK(out->is_cuda(), "internal error: the CUDA ", op_name(k), " kernel needs an output on the GPU");
  if (out->dtype == DType::Bool && (k == OpKind::Abs || k == OpKind::Relu)) {
    copy(out, a);  // identities on bools, as on the CPU
    return;
  }
  if (!unary_is_defined(k, out->dtype))
    fail(op_name(k), " is not supported for ", dtype_name(out->dtype), " tensors on CUDA");
  int64_t n = out->numel();
  if (n == 0) return;
  bool tanh_approx = attrs.mode == "tanh";
  MINI_DISPATCH(out->dtype, T, [&] {
    if (unary_flat_any<T>(k, out, a, tanh_approx)) return;
    run_strided<T, 1, T>(op_name(k), out, {a}, UnaryOp<opmath_t<T>, kLowpOf<T>>{k, tanh_approx});
  });
}

}  // namespace mini::cuda
