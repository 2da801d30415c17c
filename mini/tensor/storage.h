// storage.h — a block of bytes that tensors view. Several tensors (views) share one Storage.
// `device` says where the bytes are: CPU memory, or CUDA device memory from the caching
// allocator (cuda/cuda.h), which CPU code must never dereference.
// Storage owns its bytes unless it was made over foreign memory (a numpy array), in which
// case `owner` keeps that memory alive. `version` counts in-place writes: autograd uses it
// to detect a saved tensor modified after it was saved.
#pragma once
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>

#include "device.h"

namespace mini {

struct Storage {
  void* data = nullptr;
  size_t nbytes = 0;
  uint64_t version = 0;
  Device device;
  std::function<void(void*)> release;  // frees `data` (or drops a foreign owner)

  static std::shared_ptr<Storage> allocate(size_t nbytes, Device device = {});
  static std::shared_ptr<Storage> wrap(void* data, size_t nbytes, std::function<void(void*)> release);

  Storage() = default;
  Storage(const Storage&) = delete;
  Storage& operator=(const Storage&) = delete;
  ~Storage() {
    if (release) release(data);
  }
};

}  // namespace mini
