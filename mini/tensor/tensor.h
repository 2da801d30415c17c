// tensor.h — TensorImpl: a strided view of a Storage, with autograd state.
//
// A Tensor is std::shared_ptr<TensorImpl> (Python's mini.Tensor wraps exactly this pointer,
// so one C++ tensor is one Python object). Views share `storage` and differ in
// sizes/strides/offset. Autograd state: `requires_grad` (leaves), `grad`, and `grad_fn`
// (the node that produced a non-leaf). Ops live in ops.h; this file only holds data.
#pragma once
#include <memory>
#include <vector>

#include "dtype.h"
#include "errors.h"
#include "shape.h"
#include "storage.h"

namespace mini {

struct GradNode;
struct LeafHooks;
struct TensorImpl;
using Tensor = std::shared_ptr<TensorImpl>;

struct TensorImpl : std::enable_shared_from_this<TensorImpl> {
  std::shared_ptr<Storage> storage;
  Shape sizes;
  Strides strides;
  int64_t offset = 0;  // in elements
  DType dtype = DType::Float32;

  // A 0-d tensor made from a Python number: it takes part in type promotion with the
  // lowest priority (torch's "wrapped number").
  bool wrapped_number = false;

  bool requires_grad = false;         // set on leaves by the user
  Tensor grad;                        // accumulated gradient of a leaf
  std::shared_ptr<GradNode> grad_fn;  // producer of a non-leaf
  int output_nr = 0;                  // which of grad_fn's outputs this is (compiled graphs have several)
  std::weak_ptr<GradNode> grad_accumulator;  // a leaf's accumulator, shared by its uses
  std::shared_ptr<LeafHooks> hooks;          // a leaf's post-accumulate-grad hooks (autograd.h)
  // A view of a leaf that requires grad: writing to it in place would change the leaf
  // behind autograd's back, so in-place ops refuse it (as torch does).
  bool view_of_grad_leaf = false;
  bool is_view = false;  // made by a view op: shares its base's storage

  // -- construction --------------------------------------------------------------------
  static Tensor empty(const Shape& sizes, DType dtype, Device device = {});  // contiguous, uninitialized
  static Tensor view_of(const Tensor& base, const Shape& sizes,   // shares base's storage
                        const Strides& strides, int64_t offset);

  // -- geometry ------------------------------------------------------------------------
  int64_t dim() const { return static_cast<int64_t>(sizes.size()); }
  int64_t numel() const { return numel_of(sizes); }
  int64_t nbytes() const { return numel() * static_cast<int64_t>(itemsize(dtype)); }
  bool is_contiguous() const;
  bool is_leaf() const { return grad_fn == nullptr; }
  bool needs_grad() const { return requires_grad || grad_fn != nullptr; }

  Device device() const { return storage->device; }
  bool is_cuda() const { return storage->device.is_cuda(); }

  // CPU pointers. They refuse a CUDA tensor (an error, never a wild read): a CPU kernel
  // reached with device memory is a missing dispatch, and says so.
  template <class T> T* data() const {
    if (is_cuda()) fail_device_access();
    return static_cast<T*>(storage->data) + offset;
  }
  void* raw() const {
    if (is_cuda()) fail_device_access();
    return device_raw();
  }
  // The address of the first element wherever it lives: what CUDA kernels and copies take.
  void* device_raw() const {
    return static_cast<char*>(storage->data) + offset * static_cast<int64_t>(itemsize(dtype));
  }

  // The value of a one-element tensor, as a double (used by item() and scalar attrs).
  double scalar_value() const;

 private:
  [[noreturn]] void fail_device_access() const;
};

}  // namespace mini
