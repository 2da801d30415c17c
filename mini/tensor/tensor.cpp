#include "tensor.h"

#include <sys/mman.h>

#include <cstdlib>
#include <cstring>

#include "metrics.h"

namespace mini {

Metrics& metrics() {
  static Metrics m;
  return m;
}

std::shared_ptr<Storage> Storage::allocate(size_t nbytes) {
  auto s = std::make_shared<Storage>();
  // 64-byte alignment: whole cache lines, and aligned vector loads in the kernels. Large
  // buffers are aligned to 2 MiB and advised onto transparent huge pages, as numpy does:
  // first-touch page faults on 4 KiB pages otherwise cost more than the kernel itself.
  constexpr size_t kHuge = size_t(2) << 20;
  size_t align = nbytes >= 2 * kHuge ? kHuge : 64;
  size_t rounded = ((nbytes + align - 1) / align) * align;
  s->data = rounded ? std::aligned_alloc(align, rounded) : nullptr;
  if (s->data && align == kHuge) madvise(s->data, rounded, MADV_HUGEPAGE);
  if (rounded && !s->data) fail("out of memory allocating ", nbytes, " bytes");
  s->nbytes = nbytes;
  s->release = [](void* p) { std::free(p); };
  return s;
}

std::shared_ptr<Storage> Storage::wrap(void* data, size_t nbytes, std::function<void(void*)> release) {
  auto s = std::make_shared<Storage>();
  s->data = data;
  s->nbytes = nbytes;
  s->release = std::move(release);
  return s;
}

Tensor TensorImpl::empty(const Shape& sizes, DType dtype) {
  for (int64_t s : sizes)
    if (s < 0) fail("negative dimension ", s, " in shape ", shape_str(sizes));
  auto t = std::make_shared<TensorImpl>();
  t->sizes = sizes;
  t->strides = contiguous_strides(sizes);
  t->dtype = dtype;
  t->storage = Storage::allocate(static_cast<size_t>(numel_of(sizes)) * itemsize(dtype));
  return t;
}

Tensor TensorImpl::view_of(const Tensor& base, const Shape& sizes, const Strides& strides,
                           int64_t offset) {
  auto t = std::make_shared<TensorImpl>();
  t->storage = base->storage;
  t->sizes = sizes;
  t->strides = strides;
  t->offset = offset;
  t->dtype = base->dtype;
  return t;
}

bool TensorImpl::is_contiguous() const {
  int64_t expected = 1;
  for (size_t i = sizes.size(); i-- > 0;) {
    if (sizes[i] == 1) continue;
    if (strides[i] != expected) return false;
    expected *= sizes[i];
  }
  return true;
}

double TensorImpl::scalar_value() const {
  if (numel() != 1)
    fail("a Tensor with ", numel(), " elements cannot be converted to Scalar");
  return MINI_DISPATCH(dtype, T, [&] { return static_cast<double>(*data<T>()); });
}

}  // namespace mini
