// dtype.h — the four element types of mini's CPU tensors and torch's type promotion.
//
// In:  nothing.  Out: DType, its size and name, and result_type() — the promotion rule
// for pointwise ops.  Guarantees: promotion matches torch for float32/float64/int64/bool,
// including its "dimensioned tensors win over 0-d tensors and Python numbers" rule.
#pragma once
#include <cstdint>
#include <string>

namespace mini {

enum class DType : uint8_t { Bool = 0, Int64 = 1, Float32 = 2, Float64 = 3 };

inline size_t itemsize(DType d) {
  switch (d) {
    case DType::Bool: return 1;
    case DType::Int64: return 8;
    case DType::Float32: return 4;
    case DType::Float64: return 8;
  }
  return 0;
}

inline const char* dtype_name(DType d) {
  switch (d) {
    case DType::Bool: return "bool";
    case DType::Int64: return "int64";
    case DType::Float32: return "float32";
    case DType::Float64: return "float64";
  }
  return "?";
}

inline bool is_floating(DType d) { return d == DType::Float32 || d == DType::Float64; }

// Category used by promotion: bool < integer < floating.
inline int category(DType d) { return d == DType::Bool ? 0 : d == DType::Int64 ? 1 : 2; }

// Promotion of two dtypes of the same "priority" (both dimensioned tensors, say).
inline DType promote(DType a, DType b) { return static_cast<uint8_t>(a) > static_cast<uint8_t>(b) ? a : b; }

// Calls fn.template operator()<T>() with T the C++ type of `d`.
#define MINI_DISPATCH(d, T, ...)                          \
  [&] {                                                  \
    switch (d) {                                         \
      case ::mini::DType::Bool: { using T = bool; return __VA_ARGS__(); }      \
      case ::mini::DType::Int64: { using T = int64_t; return __VA_ARGS__(); }  \
      case ::mini::DType::Float32: { using T = float; return __VA_ARGS__(); }  \
      case ::mini::DType::Float64: { using T = double; return __VA_ARGS__(); } \
    }                                                    \
    throw std::logic_error("bad dtype");                 \
  }()

template <class T> constexpr DType dtype_of();
template <> constexpr DType dtype_of<bool>() { return DType::Bool; }
template <> constexpr DType dtype_of<int64_t>() { return DType::Int64; }
template <> constexpr DType dtype_of<float>() { return DType::Float32; }
template <> constexpr DType dtype_of<double>() { return DType::Float64; }

}  // namespace mini
