// cuda/pointwise.cu — binary and unary eager kernels (kernels.h), one launch each.
//
// The math is mini's CPU math (pointwise.cpp, scalar_math.h) in CUDA's libdevice: float32 and
// bfloat16 compute in float (expf, erff, ...), float64 in double. Each (op, dtype) pair has a
// flat kernel of its own (the op is a template argument, so the loop holds nothing but the
// loads, the math and the stores); the strided path has one arithmetic and one comparison
// kernel per dtype that switch on the op at run time (the same branch for every thread, and
// that loop is dominated by its index arithmetic anyway): fewer kernels, less nvcc time.
#include "loops.cuh"

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
__device__ __forceinline__ float m_erf(float x) { return erff(x); }
__device__ __forceinline__ double m_erf(double x) { return erf(x); }
__device__ __forceinline__ float m_pow(float x, float y) { return powf(x, y); }
__device__ __forceinline__ double m_pow(double x, double y) { return pow(x, y); }

constexpr double kSqrt1_2 = 0.70710678118654752440;
constexpr double kSqrt2OverPi = 0.79788456080286535588;
constexpr double kInvSqrt2Pi = 0.39894228040143267794;

template <class C>
__device__ __forceinline__ C gelu(C x, bool tanh_approx) {
  if (tanh_approx) {
    C inner = C(kSqrt2OverPi) * (x + C(0.044715) * x * x * x);
    return C(0.5) * x * (C(1) + m_tanh(inner));
  }
  return C(0.5) * x * (C(1) + m_erf(x * C(kSqrt1_2)));
}

template <class C>
__device__ __forceinline__ C gelu_grad(C x, bool tanh_approx) {
  if (tanh_approx) {
    C inner = C(kSqrt2OverPi) * (x + C(0.044715) * x * x * x);
    C th = m_tanh(inner);
    C dinner = C(kSqrt2OverPi) * (C(1) + C(3 * 0.044715) * x * x);
    return C(0.5) * (C(1) + th) + C(0.5) * x * (C(1) - th * th) * dinner;
  }
  C cdf = C(0.5) * (C(1) + m_erf(x * C(kSqrt1_2)));
  C pdf = C(kInvSqrt2Pi) * m_exp(C(-0.5) * x * x);
  return cdf + x * pdf;
}

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
template <class C>
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
        else return y == C(2) ? x * x : m_pow(x, y);  // x ** 2 is a square, as the CPU's
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

template <class C>
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
template <OpKind K, class C>
struct BinaryOpOf {
  bool tanh_approx = false;
  __device__ __forceinline__ auto operator()(C x, C y) const {
    if constexpr (is_comparison(K)) return compare(K, x, y);
    else return binary_math(K, x, y, tanh_approx);
  }
};
template <class C>
struct ArithmeticOp {
  OpKind k = OpKind::Add;
  bool tanh_approx = false;
  __device__ __forceinline__ C operator()(C x, C y) const { return binary_math(k, x, y, tanh_approx); }
};
template <class C>
struct CompareOp {
  OpKind k = OpKind::Eq;
  __device__ __forceinline__ bool operator()(C x, C y) const { return compare(k, x, y); }
};
template <class C>
struct UnaryOp {
  OpKind k = OpKind::Neg;
  bool tanh_approx = false;
  __device__ __forceinline__ C operator()(C x) const { return unary_math(k, x, tanh_approx); }
};
template <OpKind K, class C>
struct UnaryOpOf {
  bool tanh_approx = false;
  __device__ __forceinline__ C operator()(C x) const { return unary_math(K, x, tanh_approx); }
};

#define MINI_BINARY_OPS(X) \
  X(Add) X(Sub) X(Mul) X(Div) X(Pow) X(Maximum) X(Minimum) X(Eq) X(Ne) X(Lt) X(Le) X(Gt) X(Ge) \
  X(GeluBackward)
#define MINI_UNARY_OPS(X)                                                                   \
  X(Neg) X(Abs) X(Exp) X(Log) X(Sin) X(Cos) X(Tanh) X(Sigmoid) X(Relu) X(Sqrt) X(Rsqrt) \
  X(Sign) X(Gelu)

// The flat kernel of op K on T, if it is defined and the operands allow it (kUnroll,
// kFullTiles: see try_flat).
template <OpKind K, class T, int kUnroll = 0, bool kFullTiles = false>
bool binary_flat(const Tensor& out, const Tensor& a, const Tensor& b, bool tanh_approx) {
  if constexpr (binary_defined<opmath_t<T>>(K)) {
    using O = std::conditional_t<is_comparison(K), bool, T>;
    return try_flat<O, 2, T, T, T, true, kUnroll, kFullTiles>(
        op_name(K), out, {a, b}, BinaryOpOf<K, opmath_t<T>>{tanh_approx});
  }
  return false;
}

template <OpKind K, class T, int kUnroll = 0, bool kFullTiles = false>
bool unary_flat(const Tensor& out, const Tensor& a, bool tanh_approx) {
  if constexpr (unary_defined<opmath_t<T>>(K))
    return try_flat<T, 1, T, T, T, false, kUnroll, kFullTiles>(
        op_name(K), out, {a}, UnaryOpOf<K, opmath_t<T>>{tanh_approx});
  return false;
}

// The sweep's flat kernels: the ops that miss their bar, with kUnroll loads per operand.
template <class T, int kUnroll, bool kFullTiles>
bool sweep_flat_of(OpKind k, const Tensor& out, const Tensor& a, const Tensor& b) {
  switch (k) {
    case OpKind::Pow: return binary_flat<OpKind::Pow, T, kUnroll, kFullTiles>(out, a, b, false);
    case OpKind::Mul: return binary_flat<OpKind::Mul, T, kUnroll, kFullTiles>(out, a, b, false);
    case OpKind::Sigmoid: return unary_flat<OpKind::Sigmoid, T, kUnroll, kFullTiles>(out, a, false);
    case OpKind::Sqrt: return unary_flat<OpKind::Sqrt, T, kUnroll, kFullTiles>(out, a, false);
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
      run_strided<T, 2, T, T, T, true>(op_name(k), out, {a, b}, ArithmeticOp<C>{k, tanh_approx});
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
    run_strided<T, 1, T>(op_name(k), out, {a}, UnaryOp<opmath_t<T>>{k, tanh_approx});
  });
}

}  // namespace mini::cuda
