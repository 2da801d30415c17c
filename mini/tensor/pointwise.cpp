// pointwise.cpp — elementwise kernels: binary ops with broadcasting, unary ops, where, cast.
// One kernel per op: operands whose dtype differs from the computation type are converted
// inside the op (not counted as another kernel), as torch's TensorIterator does.
#include <cmath>

#include "autograd.h"
#include "cuda/kernels.h"
#include "loops.h"
#include "metrics.h"
#include "ops.h"
#include "scalar_math.h"

namespace mini {

// ---- type promotion (torch's result_type, three priority tiers) --------------------------
namespace {
struct Tier {
  bool set = false;
  DType d = DType::Bool;
  void add(DType x) { d = set ? promote(d, x) : x; set = true; }
};

// torch's combine_categories: a higher tier wins unless a lower tier is of a higher
// category (a float scalar with an int tensor gives a float result).
Tier combine(Tier higher, Tier lower) {
  if (!higher.set) return lower;
  if (!lower.set || is_floating(higher.d)) return higher;
  if (higher.d == DType::Bool || is_floating(lower.d)) return {true, promote(higher.d, lower.d)};
  return higher;
}
}  // namespace

DType result_type(const std::vector<Tensor>& operands) {
  Tier dim_tier, zero_tier, wrapped_tier;
  for (const auto& t : operands) {
    if (!t) continue;
    if (t->wrapped_number)
      wrapped_tier.add(t->dtype == DType::Float64 ? DType::Float32 : t->dtype);
    else if (t->dim() == 0)
      zero_tier.add(t->dtype);
    else
      dim_tier.add(t->dtype);
  }
  if (!dim_tier.set && !zero_tier.set && wrapped_tier.set) {
    // Python numbers only (a graph's dynamic numbers meeting): Python's own precision
    Tier exact;
    for (const auto& t : operands)
      if (t) exact.add(t->dtype);
    return exact.d;
  }
  return combine(dim_tier, combine(zero_tier, wrapped_tier)).d;
}

namespace {

bool is_comparison(OpKind k) {
  return k == OpKind::Eq || k == OpKind::Ne || k == OpKind::Lt || k == OpKind::Le ||
         k == OpKind::Gt || k == OpKind::Ge;
}

// Converts `t` to dtype d inside an op (no separate kernel is counted).
Tensor convert_operand(const Tensor& t, DType d) {
  if (t->dtype == d) return t;
  Tensor out = TensorImpl::empty(t->sizes, d);
  MINI_DISPATCH(t->dtype, S, [&] {
    MINI_DISPATCH(d, D, [&] {
      std::array<char*, 2> base{(char*)out->raw(), (char*)t->raw()};
      std::array<Strides, 2> st{out->strides, t->strides};
      strided_loop<2>(t->sizes, base, st, {(int64_t)sizeof(D), (int64_t)sizeof(S)},
                      [](std::array<char*, 2> p) { *(D*)p[0] = static_cast<D>(*(S*)p[1]); });
    });
  });
  return out;
}

// Runs out[i] = fn(a[i], b[i]) over the broadcast shape. a and b are already of type T.
template <class T, class O, class Fn>
void binary_loop(const Tensor& out, const Tensor& a, const Tensor& b, Fn fn) {
  int64_t n = out->numel();
  O* o = out->data<O>();
  bool a_flat = a->sizes == out->sizes && a->is_contiguous();
  bool b_flat = b->sizes == out->sizes && b->is_contiguous();
  bool a_one = a->numel() == 1, b_one = b->numel() == 1;
  if ((a_flat || a_one) && (b_flat || b_one)) {
    const T* pa = a->data<T>();
    const T* pb = b->data<T>();
    if (a_flat && b_flat) {
      parallel_chunks(n, [&](int64_t s, int64_t e) {
#pragma omp simd
        for (int64_t i = s; i < e; i++) o[i] = fn(pa[i], pb[i]);
      });
    } else if (a_flat) {
      T sb = *pb;
      parallel_chunks(n, [&](int64_t s, int64_t e) {
#pragma omp simd
        for (int64_t i = s; i < e; i++) o[i] = fn(pa[i], sb);
      });
    } else if (b_flat) {
      T sa = *pa;
      parallel_chunks(n, [&](int64_t s, int64_t e) {
#pragma omp simd
        for (int64_t i = s; i < e; i++) o[i] = fn(sa, pb[i]);
      });
    } else {
      O v = fn(*pa, *pb);
      for (int64_t i = 0; i < n; i++) o[i] = v;
    }
    return;
  }
  std::array<char*, 3> base{(char*)out->raw(), (char*)a->raw(), (char*)b->raw()};
  std::array<Strides, 3> st{out->strides, broadcast_strides(a->sizes, a->strides, out->sizes),
                            broadcast_strides(b->sizes, b->strides, out->sizes)};
  strided_loop<3>(out->sizes, base, st, {(int64_t)sizeof(O), (int64_t)sizeof(T), (int64_t)sizeof(T)},
                  [&](std::array<char*, 3> p) { *(O*)p[0] = fn(*(T*)p[1], *(T*)p[2]); });
}

// Arithmetic on bfloat16 elements converts them to float (bfloat16's operator float), and
// T(...) of the float result is the one rounding on store.
template <class T>
void run_binary(OpKind k, const Tensor& out, const Tensor& a, const Tensor& b, const std::string& mode) {
  using A = opmath_t<T>;
  switch (k) {
    case OpKind::Add: return binary_loop<T, T>(out, a, b, [](T x, T y) { return T(x + y); });
    case OpKind::Sub: return binary_loop<T, T>(out, a, b, [](T x, T y) { return T(x - y); });
    case OpKind::Mul: return binary_loop<T, T>(out, a, b, [](T x, T y) { return T(x * y); });
    case OpKind::Div: return binary_loop<T, T>(out, a, b, [](T x, T y) { return T(x / y); });
    case OpKind::Pow:
      if (b->numel() == 1 && *b->data<T>() == T(2))  // x ** 2: a square, not a pow call
        return binary_loop<T, T>(out, a, b, [](T x, T) { return T(x * x); });
      return binary_loop<T, T>(out, a, b, [](A x, A y) { return T(std::pow(x, y)); });
    case OpKind::Maximum:  // NaN propagates, as torch
      return binary_loop<T, T>(out, a, b, [](T x, T y) { return (x > y || x != x) ? x : y; });
    case OpKind::Minimum:
      return binary_loop<T, T>(out, a, b, [](T x, T y) { return (x < y || x != x) ? x : y; });
    case OpKind::Eq: return binary_loop<T, bool>(out, a, b, [](T x, T y) { return x == y; });
    case OpKind::Ne: return binary_loop<T, bool>(out, a, b, [](T x, T y) { return x != y; });
    case OpKind::Lt: return binary_loop<T, bool>(out, a, b, [](T x, T y) { return x < y; });
    case OpKind::Le: return binary_loop<T, bool>(out, a, b, [](T x, T y) { return x <= y; });
    case OpKind::Gt: return binary_loop<T, bool>(out, a, b, [](T x, T y) { return x > y; });
    case OpKind::Ge: return binary_loop<T, bool>(out, a, b, [](T x, T y) { return x >= y; });
    case OpKind::GeluBackward:  // (grad, x) -> grad * gelu'(x)
      if constexpr (is_floating_v<T>) {
        if (mode == "tanh") return binary_loop<T, T>(out, a, b, [](A g, A x) { return T(g * gelu_grad_of(x, true)); });
        return binary_loop<T, T>(out, a, b, [](A g, A x) { return T(g * gelu_grad_of(x, false)); });
      }
      break;
    default: fail(op_name(k), " is not a binary pointwise op");
  }
}

void check_tensor(const Tensor& t, const char* op, const char* what) {
  if (!t) fail_type(op, "(): argument '", what, "' must be a Tensor, not None");
}

}  // namespace

void check_binary(OpKind k, const Tensor& a, const Tensor& b) {
  if (k != OpKind::Sub) return;
  if (a->dtype == DType::Bool && b->dtype == DType::Bool)
    fail("Subtraction, the `-` operator, with two bool tensors is not supported. "
         "Use the `^` or `logical_xor()` operator instead.");
  if (a->dtype == DType::Bool || b->dtype == DType::Bool)  // a mask minus a number too, as torch
    fail("Subtraction, the `-` operator, with a bool tensor is not supported. "
         "If you are trying to invert a mask, use the `~` or `logical_not()` operator instead.");
}

void check_unary(OpKind k, const Tensor& a) {
  if (a->dtype == DType::Bool && (k == OpKind::Neg || k == OpKind::Sign))
    fail("Negation, the `-` operator, on a bool tensor is not supported. "
         "If you are trying to invert a mask, use the `~` or `logical_not()` operator instead.");
}

void check_where(const Tensor& cond) {
  if (cond->dtype != DType::Bool)
    fail_type("where expected condition to be a boolean tensor, but got a tensor with dtype ",
              dtype_name(cond->dtype), "; compare first, e.g. where(x > 0, a, b)");
}

void binary_out(OpKind k, const Tensor& out, const Tensor& a, const Tensor& b, DType compute) {
  if (out->is_cuda()) return cuda::binary(k, out, a, b, compute, "");
  bool by_scalar = (k == OpKind::Mul || k == OpKind::Div) && b->numel() == 1;
  if (compute == DType::BFloat16 && (by_scalar || (k == OpKind::Mul && a->wrapped_number))) {
    // torch's mul and div of a bfloat16 tensor by one value read the value in float from its
    // own dtype (original_scalar_value): x * 0.3 multiplies by 0.3f, not by bfloat16(0.3).
    // A number on the left (0.3 * x) is torch's x.__rmul__(0.3), the same kernel.
    const Tensor& sc = by_scalar ? b : a;
    Tensor x = convert_operand(by_scalar ? a : b, compute);
    float s = MINI_DISPATCH(sc->dtype, S, [&] { return static_cast<float>(*sc->data<S>()); });
    std::array<char*, 2> base{(char*)out->raw(), (char*)x->raw()};
    std::array<Strides, 2> st{out->strides, broadcast_strides(x->sizes, x->strides, out->sizes)};
    auto run = [&](auto fn) {
      strided_loop<2>(out->sizes, base, st, {2, 2}, [fn](std::array<char*, 2> p) {
        *(bfloat16*)p[0] = fn(float(*(bfloat16*)p[1]));
      });
    };
    if (k == OpKind::Mul) run([s](float v) { return v * s; });
    else run([s](float v) { return v / s; });
    return;
  }
  Tensor ca = convert_operand(a, compute), cb = convert_operand(b, compute);
  MINI_DISPATCH(compute, T, [&] {
    if constexpr (std::is_same_v<T, bool>) {
      // bool arithmetic is logic: + and max are or, * and min are and (torch semantics).
      switch (k) {
        case OpKind::Add:
        case OpKind::Maximum:
          return binary_loop<bool, bool>(out, ca, cb, [](bool x, bool y) { return x || y; });
        case OpKind::Mul:
        case OpKind::Minimum:
          return binary_loop<bool, bool>(out, ca, cb, [](bool x, bool y) { return x && y; });
        default: return run_binary<bool>(k, out, ca, cb, "");
      }
    } else {
      return run_binary<T>(k, out, ca, cb, "");
    }
  });
}

Tensor binary(OpKind k, const Tensor& a, const Tensor& b) {
  check_tensor(a, op_name(k), "input");
  check_tensor(b, op_name(k), "other");
  check_binary(k, a, b);
  DType compute = result_type({a, b});
  if ((k == OpKind::Div || k == OpKind::Pow) && compute == DType::Bool) compute = DType::Int64;
  if (k == OpKind::Div && !is_floating(compute))  // true division: of two numbers, a Python float
    compute = a->wrapped_number && b->wrapped_number ? DType::Float64 : DType::Float32;
  if (k == OpKind::GeluBackward && !is_floating(compute)) compute = DType::Float32;
  DType out_dtype = is_comparison(k) ? DType::Bool : compute;
  Shape shape = broadcast_shapes(a->sizes, b->sizes);
  Device device = common_device(op_name(k), {a, b});
  Tensor out = TensorImpl::empty(shape, out_dtype, device);
  out->wrapped_number = a->wrapped_number && b->wrapped_number;  // number op number: a number
  binary_out(k, out, a, b, compute);
  Attrs attrs;
  count_kernel(MINI_OPERAND_BYTES(a) + MINI_OPERAND_BYTES(b) + out->nbytes());
  if (is_floating(out_dtype)) record(k, {a, b}, out, attrs);
  return out;
}

Tensor gelu_backward(const Tensor& g, const Tensor& x, const std::string& mode) {
  DType compute = result_type({g, x});
  Shape shape = broadcast_shapes(g->sizes, x->sizes);
  Device device = common_device("gelu_backward", {g, x});
  Tensor out = TensorImpl::empty(shape, compute, device);
  if (!is_floating(compute)) fail("gelu_backward needs floating point tensors");
  if (device.is_cuda()) {
    cuda::binary(OpKind::GeluBackward, out, g, x, compute, mode);
  } else {
    Tensor cg = convert_operand(g, compute), cx = convert_operand(x, compute);
    MINI_DISPATCH(compute, T, [&] {
      if constexpr (is_floating_v<T>) run_binary<T>(OpKind::GeluBackward, out, cg, cx, mode);
      else fail("gelu_backward needs floating point tensors");
    });
  }
  count_kernel(MINI_OPERAND_BYTES(g) + MINI_OPERAND_BYTES(x) + out->nbytes());
  return out;
}

// ---- unary ---------------------------------------------------------------------------
namespace {

template <class T, class O, class Fn>
void unary_loop(const Tensor& out, const Tensor& a, Fn fn) {
  O* o = out->data<O>();
  if (a->is_contiguous()) {
    const T* p = a->data<T>();
    parallel_chunks(out->numel(), [&](int64_t s, int64_t e) {
#pragma omp simd
      for (int64_t i = s; i < e; i++) o[i] = fn(p[i]);
    });
    return;
  }
  std::array<char*, 2> base{(char*)out->raw(), (char*)a->raw()};
  std::array<Strides, 2> st{out->strides, a->strides};
  strided_loop<2>(out->sizes, base, st, {(int64_t)sizeof(O), (int64_t)sizeof(T)},
                  [&](std::array<char*, 2> p) { *(O*)p[0] = fn(*(T*)p[1]); });
}

// Ops whose result is floating even for integer input (torch: exp of an int tensor is float).
bool floating_result(OpKind k) {
  switch (k) {
    case OpKind::Exp: case OpKind::Log: case OpKind::Sin: case OpKind::Cos:
    case OpKind::Tanh: case OpKind::Sigmoid: case OpKind::Sqrt: case OpKind::Rsqrt:
    case OpKind::Gelu:
      return true;
    default:
      return false;
  }
}

template <class T>
void run_unary(OpKind k, const Tensor& out, const Tensor& a, const Attrs& at) {
  if constexpr (is_floating_v<T>) {
    using A = opmath_t<T>;  // bfloat16 computes in float; the store rounds
    switch (k) {
      case OpKind::Exp: return unary_loop<T, T>(out, a, [](A x) { return exp_of<A>(x); });
      case OpKind::Log: return unary_loop<T, T>(out, a, [](A x) { return A(std::log(x)); });
      case OpKind::Sin: return unary_loop<T, T>(out, a, [](A x) { return sin_of<A>(x); });
      case OpKind::Cos: return unary_loop<T, T>(out, a, [](A x) { return cos_of<A>(x); });
      case OpKind::Tanh: return unary_loop<T, T>(out, a, [](A x) { return A(std::tanh(x)); });
      case OpKind::Sigmoid: return unary_loop<T, T>(out, a, [](A x) { return sigmoid_of<A>(x); });
      case OpKind::Sqrt: return unary_loop<T, T>(out, a, [](A x) { return A(std::sqrt(x)); });
      case OpKind::Rsqrt: return unary_loop<T, T>(out, a, [](A x) { return A(1) / A(std::sqrt(x)); });
      case OpKind::Gelu:  // the mode a constant in each loop: the exact one then vectorizes
        if (at.mode == "tanh") return unary_loop<T, T>(out, a, [](A x) { return gelu_of<A>(x, true); });
        return unary_loop<T, T>(out, a, [](A x) { return gelu_of<A>(x, false); });
      default: break;
    }
  }
  if constexpr (!std::is_same_v<T, bool>) {
    switch (k) {
      case OpKind::Neg: return unary_loop<T, T>(out, a, [](T x) { return T(-x); });
      case OpKind::Abs: return unary_loop<T, T>(out, a, [](T x) { return x < 0 ? T(-x) : x; });
      case OpKind::Relu:
        return unary_loop<T, T>(out, a, [](T x) { return x < 0 ? T(0) : x; });  // NaN passes through
      case OpKind::Sign:
        return unary_loop<T, T>(out, a, [](T x) { return T((x > 0) - (x < 0)); });
      default: break;
    }
  }
  if (k == OpKind::Clone) return unary_loop<T, T>(out, a, [](T x) { return x; });
  fail(op_name(k), " is not supported for ", dtype_name(dtype_of<T>()), " tensors");
}

}  // namespace

Tensor unary(OpKind k, const Tensor& a, const Attrs& attrs) {
  check_tensor(a, op_name(k), "input");
  check_unary(k, a);
  DType compute = a->dtype;
  if (floating_result(k) && !is_floating(compute)) compute = DType::Float32;
  Tensor out = TensorImpl::empty(a->sizes, compute, a->device());
  if (out->is_cuda()) {
    cuda::unary(k, out, a, attrs);
    count_kernel(MINI_OPERAND_BYTES(a) + out->nbytes());
    if (is_floating(compute)) record(k, {a}, out, attrs);
    return out;
  }
  Tensor ca = convert_operand(a, compute);
  if (compute == DType::Bool && (k == OpKind::Abs || k == OpKind::Relu)) {
    unary_loop<bool, bool>(out, ca, [](bool x) { return x; });
  } else {
    MINI_DISPATCH(compute, T, [&] { run_unary<T>(k, out, ca, attrs); });
  }
  count_kernel(MINI_OPERAND_BYTES(a) + out->nbytes());
  if (is_floating(compute)) record(k, {a}, out, attrs);
  return out;
}

Tensor clone(const Tensor& a) {
  check_tensor(a, "clone", "input");
  Tensor out = TensorImpl::empty(a->sizes, a->dtype, a->device());
  if (out->is_cuda()) cuda::copy(out, a);
  else if (a->is_contiguous() || !copy_rows((char*)out->raw(), a->sizes, out->strides, (const char*)a->raw(), a->strides,
                                            (int64_t)itemsize(a->dtype)))
    MINI_DISPATCH(a->dtype, T, [&] { unary_loop<T, T>(out, a, [](T x) { return x; }); });
  count_kernel(MINI_OPERAND_BYTES(a) + out->nbytes());
  record(OpKind::Clone, {a}, out);
  return out;
}

Tensor contiguous(const Tensor& a) { return a->is_contiguous() ? a : clone(a); }

Tensor cast(const Tensor& a, DType dtype) {
  check_tensor(a, "to", "input");
  if (a->dtype == dtype) return a;
  Tensor out = TensorImpl::empty(a->sizes, dtype, a->device());
  if (out->is_cuda()) cuda::copy(out, a);
  else MINI_DISPATCH(a->dtype, S, [&] {
    MINI_DISPATCH(dtype, D, [&] {
      unary_loop<S, D>(out, a, [](S x) {
        if constexpr (std::is_same_v<D, bool>) return x != S(0);
        else return static_cast<D>(x);
      });
    });
  });
  count_kernel(MINI_OPERAND_BYTES(a) + out->nbytes());
  Attrs at;
  at.dtype = dtype;
  if (is_floating(dtype) && is_floating(a->dtype)) record(OpKind::Cast, {a}, out, at);
  return out;
}

Tensor where(const Tensor& cond, const Tensor& a, const Tensor& b) {
  check_tensor(cond, "where", "condition");
  check_tensor(a, "where", "input");
  check_tensor(b, "where", "other");
  check_where(cond);
  DType compute = result_type({a, b});
  Shape shape = broadcast_shapes(cond->sizes, broadcast_shapes(a->sizes, b->sizes));
  Device device = common_device("where", {cond, a, b});
  Tensor out = TensorImpl::empty(shape, compute, device);
  Tensor ca = device.is_cuda() ? a : convert_operand(a, compute);
  Tensor cb = device.is_cuda() ? b : convert_operand(b, compute);
  if (device.is_cuda()) cuda::where(out, cond, a, b);
  else MINI_DISPATCH(compute, T, [&] {
    std::array<char*, 4> base{(char*)out->raw(), (char*)cond->raw(), (char*)ca->raw(), (char*)cb->raw()};
    std::array<Strides, 4> st{out->strides, broadcast_strides(cond->sizes, cond->strides, shape),
                              broadcast_strides(ca->sizes, ca->strides, shape),
                              broadcast_strides(cb->sizes, cb->strides, shape)};
    int64_t s = sizeof(T);
    strided_loop<4>(shape, base, st, {s, 1, s, s}, [](std::array<char*, 4> p) {
      *(T*)p[0] = *(bool*)p[1] ? *(T*)p[2] : *(T*)p[3];
    });
  });
  count_kernel(MINI_OPERAND_BYTES(cond) + MINI_OPERAND_BYTES(a) + MINI_OPERAND_BYTES(b) + out->nbytes());
  if (is_floating(compute)) record(OpKind::Where, {cond, a, b}, out);
  return out;
}

// Compositions of where: each runs its comparisons and wheres as kernels of their own, and
// autograd differentiates those.

// torch.clamp's values (NaN stays NaN; min > max gives max) and gradient (1 where
// min <= x <= max, 0 elsewhere).
Tensor clamp(const Tensor& a, const Tensor& min, const Tensor& max) {
  check_tensor(a, "clamp", "input");
  if (!min && !max) fail("torch.clamp: At least one of 'min' or 'max' must not be None");
  Tensor r = a;
  if (min) r = where(binary(OpKind::Lt, r, min), min, r);
  if (max) r = where(binary(OpKind::Gt, r, max), max, r);
  return r;
}

Tensor masked_fill(const Tensor& a, const Tensor& mask, const Tensor& value) {
  check_tensor(a, "masked_fill", "input");
  check_tensor(mask, "masked_fill", "mask");
  check_tensor(value, "masked_fill", "value");
  if (mask->dtype != DType::Bool)
    fail("masked_fill_ only supports boolean masks, but got mask with dtype ", dtype_name(mask->dtype));
  if (value->dim() != 0)
    fail("masked_fill_ only supports a 0-dimensional value tensor, but got tensor with ",
         value->dim(), " dimension(s).");
  return cast(where(mask, value, a), a->dtype);
}

}  // namespace mini
