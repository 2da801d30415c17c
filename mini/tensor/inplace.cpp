// inplace.cpp — writes into existing storage: copy_, add_/sub_/mul_/div_, fill_, relu_,
// clamp_, masked_fill_. Each bumps the storage version (see SavedTensor), refuses leaves
// that require grad while grad mode is on, and refuses a tensor whose elements share memory
// (an expanded one; fill_ excepted, which writes one value wherever it writes), as torch does.
#include <cstring>
#include <functional>

#include "autograd.h"
#include "cuda/kernels.h"
#include "loops.h"
#include "metrics.h"
#include "ops.h"

namespace mini {

namespace {

void check_writable(const Tensor& self, const char* op, bool overlap_ok = false) {
  if (grad_enabled()) {
    if (self->requires_grad && self->is_leaf()) fail_inplace_on_leaf(op, false);
    if (self->view_of_grad_leaf) fail_inplace_on_leaf(op, true);
  }
  if (!overlap_ok) check_no_internal_overlap(self->sizes, self->strides);
}

// dst[...] = src broadcast to dst's shape, converting dtype. No kernel is counted here.
void copy_into(const Tensor& dst, const Tensor& src) {
  Shape b = broadcast_shapes(dst->sizes, src->sizes);
  if (b != dst->sizes)
    fail("output with shape ", shape_str(dst->sizes), " doesn't match the broadcast shape ",
         shape_str(b));
  if (dst->is_cuda() || src->is_cuda()) {
    Tensor from = src;
    if (src->device() != dst->device() && !(dst->is_cuda() && src->dim() == 0)) {
      Metrics before = metrics();  // the move is part of this copy's one kernel
      from = to_device(detach(src), dst->device());
      metrics() = before;
    }
    if (dst->is_cuda()) {
      cuda::copy(dst, from);
      dst->storage->version++;
      return;
    }
    return copy_into(dst, from);  // now both on the CPU
  }
  Strides ss = broadcast_strides(src->sizes, src->strides, dst->sizes);
  if (src->dtype == dst->dtype &&
      copy_rows((char*)dst->raw(), dst->sizes, dst->strides, (const char*)src->raw(), ss, (int64_t)itemsize(dst->dtype))) {
    dst->storage->version++;
    return;
  }
  MINI_DISPATCH(src->dtype, S, [&] {
    MINI_DISPATCH(dst->dtype, D, [&] {
      std::array<char*, 2> base{(char*)dst->raw(), (char*)src->raw()};
      std::array<Strides, 2> st{dst->strides, ss};
      strided_loop<2>(dst->sizes, base, st, {(int64_t)sizeof(D), (int64_t)sizeof(S)},
                      [](std::array<char*, 2> p) {
                        if constexpr (std::is_same_v<D, bool>) *(D*)p[0] = *(S*)p[1] != S(0);
                        else *(D*)p[0] = static_cast<D>(*(S*)p[1]);
                      });
    });
  });
  dst->storage->version++;
}

// self = compute(old), written into self's memory, where `old` is self's value before the
// write. Autograd sees compute applied to `old`, a copy that takes over self's history, and
// self takes over the result's (torch rebases self the same way). `cast_allowed`: the
// result may be of a higher dtype category than self (fill_, copy_, masked_fill_ convert).
void write_in_place(const Tensor& self, const char* op, const std::vector<Tensor>& others,
                    const std::function<Tensor(const Tensor&)>& compute, bool cast_allowed,
                    bool overlap_ok = false) {
  check_writable(self, op, overlap_ok);
  std::vector<Tensor> operands = others;
  operands.push_back(self);
  bool rec = should_record(operands);
  if (rec && self->is_view)
    fail("an in-place ", op, " on a view, where autograd is involved, is not supported by "
         "mini's eager autograd (torch rebases the view's base; mini does not); use an "
         "out-of-place op");
  Tensor old = self;
  if (rec) {
    NoGradGuard no_grad;
    old = clone(self);
    old->grad_fn = self->grad_fn;
    old->output_nr = self->output_nr;
  }
  Tensor result = compute(old);
  if (result->sizes != self->sizes)
    fail("output with shape ", shape_str(self->sizes), " doesn't match the broadcast shape ",
         shape_str(result->sizes), " (in-place ", op, ")");
  if (!cast_allowed && category(result->dtype) > category(self->dtype))
    fail("result type ", dtype_name(result->dtype), " can't be cast to the desired output type ",
         dtype_name(self->dtype), " (in-place ", op, ")");
  if (rec) result = cast(result, self->dtype);  // self's history must produce self's dtype
  copy_into(self, result);
  if (rec) {
    self->grad_fn = result->grad_fn;
    self->output_nr = result->output_nr;
  }
}

// where(True, value, old): the value everywhere, in a form autograd can differentiate (old
// gets a zero gradient, value its sum over the broadcast).
Tensor overwrite(const Tensor& old, const Tensor& value) {
  return where(scalar_tensor(1, DType::Bool, true), value, old);
}

}  // namespace

void fail_inplace_on_leaf(const char* op, bool view) {
  if (view)
    fail("a view of a leaf Variable that requires grad is being used in an in-place "
         "operation (", op, "). Wrap the update in `with mini.no_grad():`.");
  fail("a leaf Variable that requires grad is being used in an in-place operation (", op,
       "). Wrap the update in `with mini.no_grad():` or use an out-of-place op.");
}

void copy_(const Tensor& dst, const Tensor& src) {
  if (!src) fail_type("copy_(): argument 'src' must be a Tensor, not None");
  check_writable(dst, "copy_");
  if (should_record({dst, src})) {
    write_in_place(dst, "copy_", {src}, [&](const Tensor& old) { return overwrite(old, src); }, true);
    return;
  }
  copy_into(dst, src);
  count_kernel(src->nbytes() + dst->nbytes());
}

void fill_(const Tensor& self, double value) {
  check_writable(self, "fill_", /*overlap_ok=*/true);
  Tensor v = scalar_tensor(value, self->dtype);
  if (should_record({self})) {
    write_in_place(self, "fill_", {}, [&](const Tensor& old) { return overwrite(old, v); }, true, true);
    return;
  }
  copy_into(self, v);
  count_kernel(self->nbytes());
}

void relu_(const Tensor& self) {
  write_in_place(self, "relu_", {}, [](const Tensor& old) { return unary(OpKind::Relu, old); }, false);
}

void clamp_(const Tensor& self, const Tensor& min, const Tensor& max) {
  if (!min && !max) fail("clamp_: At least one of 'min' or 'max' must not be None");
  write_in_place(self, "clamp_", {min, max}, [&](const Tensor& old) { return clamp(old, min, max); }, false);
}

void masked_fill_(const Tensor& self, const Tensor& mask, const Tensor& value) {
  write_in_place(self, "masked_fill_", {mask, value},
                 [&](const Tensor& old) { return masked_fill(old, mask, value); }, true);
}

void inplace_binary(OpKind kind, const Tensor& self, const Tensor& other) {
  if (!other) fail_type(op_name(kind), "_(): argument 'other' must be a Tensor or a number, not None");
  check_writable(self, (std::string(op_name(kind)) + "_").c_str());
  if (common_device(op_name(kind), {self, other}) != self->device())
    fail("Expected all tensors to be on the same device, but found at least two devices, ",
         other->device().str(), " and ", self->device().str(), "! (in-place ", op_name(kind),
         "_ writes into a tensor on ", self->device().str(), ")");
  DType rt = result_type({self, other});
  if (kind == OpKind::Div && !is_floating(rt)) rt = DType::Float32;
  if (category(rt) > category(self->dtype))
    fail("result type ", dtype_name(rt), " can't be cast to the desired output type ",
         dtype_name(self->dtype), " (in-place ", op_name(kind), "_)");
  Shape b = broadcast_shapes(self->sizes, other->sizes);
  if (b != self->sizes)
    fail("output with shape ", shape_str(self->sizes), " doesn't match the broadcast shape ",
         shape_str(b), " (in-place ", op_name(kind), "_)");
  bool rec = should_record({self, other});
  // A view without history written with a value that has one would give only the view a
  // grad_fn: its base's gradient would be lost, so that is refused too.
  if (rec && self->is_view)
    fail("an in-place ", op_name(kind), "_ on a view, where autograd is involved, is not supported by "
         "mini's eager autograd (torch rebases the view's base; mini does not); use an "
         "out-of-place op");
  Tensor old;
  if (rec) {
    // Autograd sees the old value of self as the op's input: mul_/div_ read it in backward,
    // so it is copied; add_/sub_ read only its shape.
    NoGradGuard no_grad;
    old = (kind == OpKind::Mul || kind == OpKind::Div) ? clone(self) : shape_only(self);
    old->grad_fn = self->grad_fn;
    old->output_nr = self->output_nr;
  }
  // If `other` shares self's memory, backward must see its value from before the write.
  Tensor rhs = other;
  if (rec && other == self) {
    rhs = old;  // x.mul_(x)
  } else if (rec && other->storage == self->storage) {
    NoGradGuard no_grad;
    rhs = clone(other);
    rhs->grad_fn = other->grad_fn;
    rhs->output_nr = other->output_nr;
  }
  // Writing in place is safe when `other` does not share memory with self, or is exactly
  // self (each element is read before it is written); any other overlap (x += x.T) goes
  // through a temporary.
  bool overlap = other->storage == self->storage &&
                 !(other->sizes == self->sizes && other->strides == self->strides && other->offset == self->offset);
  if (rt == self->dtype && !overlap) {
    binary_out(kind, self, self, other, rt);
    self->storage->version++;
    count_kernel(self->nbytes() + MINI_OPERAND_BYTES(other) + self->nbytes());
  } else {  // e.g. float32 += int64 tensor: compute in the promoted type, then store
    Tensor result;
    {
      NoGradGuard no_grad;
      result = binary(kind, self, other);  // counts the kernel
    }
    copy_into(self, result);
  }
  if (rec) record(kind, {old, rhs}, self);
}

}  // namespace mini
