// device.h — where a tensor's bytes live: the CPU, or a CUDA device (mini uses device 0).
//
// A Device is a value (type + index) carried by every Storage; TensorImpl::device() reads it.
// Printing follows torch: "cpu", "cuda:0".
#pragma once
#include <cstdint>
#include <string>

namespace mini {

struct Device {
  enum class Type : uint8_t { CPU = 0, CUDA = 1 };
  Type type = Type::CPU;
  int index = -1;  // -1 on the CPU; the CUDA ordinal otherwise

  static Device cpu() { return {}; }
  static Device cuda(int index = 0) { return {Type::CUDA, index}; }
  bool is_cuda() const { return type == Type::CUDA; }
  bool is_cpu() const { return type == Type::CPU; }
  std::string str() const { return is_cpu() ? "cpu" : "cuda:" + std::to_string(index); }
  bool operator==(const Device& o) const { return type == o.type && index == o.index; }
  bool operator!=(const Device& o) const { return !(*this == o); }
};

}  // namespace mini
