// dtype.h — the five element types of mini's tensors and torch's type promotion.
//
// In:  nothing.  Out: DType, its size and name, and promote() — the promotion rule for
// pointwise ops (result_type() in pointwise.cpp adds torch's priority tiers).  Guarantees:
// promotion matches torch for bool < int64 < bfloat16 < float32 < float64, including its
// "dimensioned tensors win over 0-d tensors and Python numbers" rule.
// The enum's values are the codes Python's mini.dtype objects carry; they are not an order.
#pragma once
#include <cstdint>
#include <string>
#include <type_traits>

#include "bfloat16.h"
#include "errors.h"

namespace mini {

enum class DType : uint8_t { Bool = 0, Int64 = 1, Float32 = 2, Float64 = 3, BFloat16 = 4 };
constexpr int kNumDTypes = 5;

inline size_t itemsize(DType d) {
  switch (d) {
    case DType::Bool: return 1;
    case DType::Int64: return 8;
    case DType::Float32: return 4;
    case DType::Float64: return 8;
    case DType::BFloat16: return 2;
  }
  return 0;
}

inline const char* dtype_name(DType d) {
  switch (d) {
    case DType::Bool: return "bool";
    case DType::Int64: return "int64";
    case DType::Float32: return "float32";
    case DType::Float64: return "float64";
    case DType::BFloat16: return "bfloat16";
  }
  return "?";
}

inline bool is_floating(DType d) {
  return d == DType::Float32 || d == DType::Float64 || d == DType::BFloat16;
}

// Category used by promotion: bool < integer < floating.
inline int category(DType d) { return d == DType::Bool ? 0 : d == DType::Int64 ? 1 : 2; }

// The promotion lattice of mini's dtypes is a chain: bool < int64 < bfloat16 < float32 < float64.
inline int promotion_rank(DType d) {
  switch (d) {
    case DType::Bool: return 0;
    case DType::Int64: return 1;
    case DType::BFloat16: return 2;
    case DType::Float32: return 3;
    case DType::Float64: return 4;
  }
  return 0;
}

// Promotion of two dtypes of the same "priority" (both dimensioned tensors, say).
inline DType promote(DType a, DType b) { return promotion_rank(a) > promotion_rank(b) ? a : b; }

// Calls fn.template operator()<T>() with T the C++ type of `d`. A kernel given T = bfloat16
// computes in opmath_t<T> (float) and rounds once on store, as torch's kernels do.
#define MINI_DISPATCH(d, T, ...)                          \
  [&] {                                                  \
    switch (d) {                                         \
      case ::mini::DType::Bool: { using T = bool; return __VA_ARGS__(); }      \
      case ::mini::DType::Int64: { using T = int64_t; return __VA_ARGS__(); }  \
      case ::mini::DType::Float32: { using T = float; return __VA_ARGS__(); }  \
      case ::mini::DType::Float64: { using T = double; return __VA_ARGS__(); } \
      case ::mini::DType::BFloat16: { using T = ::mini::bfloat16; return __VA_ARGS__(); } \
    }                                                    \
    ::mini::fail("unknown dtype code ", static_cast<int>(d)); \
  }()

template <class T> constexpr DType dtype_of();
template <> constexpr DType dtype_of<bool>() { return DType::Bool; }
template <> constexpr DType dtype_of<int64_t>() { return DType::Int64; }
template <> constexpr DType dtype_of<float>() { return DType::Float32; }
template <> constexpr DType dtype_of<double>() { return DType::Float64; }
template <> constexpr DType dtype_of<bfloat16>() { return DType::BFloat16; }

// std::is_floating_point for mini's element types: true for bfloat16 as well.
template <class T>
constexpr bool is_floating_v = std::is_floating_point_v<T> || std::is_same_v<T, bfloat16>;
// The type a kernel computes in for elements of type T (float for bfloat16, as torch's
// opmath_type).
template <class T> struct opmath { using type = T; };
template <> struct opmath<bfloat16> { using type = float; };
template <class T> using opmath_t = typename opmath<T>::type;

}  // namespace mini
