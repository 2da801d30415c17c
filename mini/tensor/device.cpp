// device.cpp — which device an op runs on, and moving a tensor between devices.
#include "autograd.h"
#include "cuda/cuda.h"
#include "metrics.h"
#include "ops.h"

namespace mini {

namespace {
// torch lets a CPU tensor with no dims take part in an op on any device: it is read once on
// the host and passed to the kernel as a value (a Python number is such a tensor too).
bool is_cpu_scalar(const Tensor& t) { return t->device().is_cpu() && t->dim() == 0; }
}  // namespace

Device common_device(const char* op, const std::vector<Tensor>& operands) {
  const Tensor* first = nullptr;
  for (const Tensor& t : operands) {
    if (!t || is_cpu_scalar(t)) continue;
    if (!first) {
      first = &t;
    } else if (t->device() != (*first)->device()) {
      Device a = (*first)->device(), b = t->device();
      if (a.is_cpu()) std::swap(a, b);  // torch names the CUDA device first
      fail("Expected all tensors to be on the same device, but found at least two devices, ",
           a.str(), " and ", b.str(), "! (in ", op, "; move one with .to(", a.str(),
           ") or .cpu())");
    }
  }
  if (first) return (*first)->device();
  // CPU scalars only: a CUDA 0-d tensor among them would have been `first`
  return Device::cpu();
}

Tensor to_device(const Tensor& t, Device device) {
  if (t->device() == device) return t;
  if (device.is_cuda()) cuda::require("a copy to the GPU (.cuda(), .to('cuda'))", device);
  if (t->needs_grad() && grad_enabled())
    fail("moving a tensor that requires grad to ", device.str(), " inside autograd is not "
         "supported by mini (torch records the copy; mini's tape has no node for it): create "
         "the tensor on the device (device='", device.str(), "'), move the leaf before setting "
         "requires_grad, or move a module's parameters with module.to('", device.str(), "')");
  Tensor src = t->is_contiguous() ? t : contiguous(detach(t));  // one contiguous block moves
  Tensor out = TensorImpl::empty(t->sizes, t->dtype, device);
  cuda::copy_bytes(out->device_raw(), device, src->device_raw(), src->device(),
                   static_cast<size_t>(out->nbytes()));
  count_kernel(t->nbytes() + out->nbytes());
  return out;
}

}  // namespace mini
