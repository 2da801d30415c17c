// inplace.cpp — writes into existing storage: copy_, add_/sub_/mul_/div_, fill_.
// Each bumps the storage version (see SavedTensor) and refuses leaves that require grad
// while grad mode is on, as torch does.
#include "autograd.h"
#include "loops.h"
#include "metrics.h"
#include "ops.h"

namespace mini {

namespace {

void check_writable(const Tensor& self, const char* op) {
  if (!grad_enabled()) return;
  if (self->requires_grad && self->is_leaf())
    fail("a leaf Variable that requires grad is being used in an in-place operation (", op,
         "). Wrap the update in `with mini.no_grad():` or use an out-of-place op.");
  if (self->view_of_grad_leaf)
    fail("a view of a leaf Variable that requires grad is being used in an in-place "
         "operation (", op, "). Wrap the update in `with mini.no_grad():`.");
}

// dst[...] = src broadcast to dst's shape, converting dtype. No kernel is counted here.
void copy_into(const Tensor& dst, const Tensor& src) {
  Shape b = broadcast_shapes(dst->sizes, src->sizes);
  if (b != dst->sizes)
    fail("output with shape ", shape_str(dst->sizes), " doesn't match the broadcast shape ",
         shape_str(b));
  Strides ss = broadcast_strides(src->sizes, src->strides, dst->sizes);
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

}  // namespace

void copy_(const Tensor& dst, const Tensor& src) {
  if (!src) fail_type("copy_(): argument 'src' must be a Tensor, not None");
  check_writable(dst, "copy_");
  if (should_record({dst, src}))
    fail("copy_ into a tensor that is part of an autograd graph is not supported by mini's "
         "eager autograd; build a new tensor instead, or wrap the copy in mini.no_grad()");
  copy_into(dst, src);
  count_kernel(src->nbytes() + dst->nbytes());
}

void fill_(const Tensor& self, double value) {
  check_writable(self, "fill_");
  if (should_record({self}))
    fail("fill_ on a tensor that is part of an autograd graph is not supported by mini's eager "
         "autograd; use mini.full_like-style construction or wrap it in mini.no_grad()");
  Tensor v = scalar_tensor(value, self->dtype);
  copy_into(self, v);
  count_kernel(self->nbytes());
}

void inplace_binary(OpKind kind, const Tensor& self, const Tensor& other) {
  if (!other) fail_type(op_name(kind), "_(): argument 'other' must be a Tensor or a number, not None");
  check_writable(self, op_name(kind));
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
  if (rec && self->is_view && self->needs_grad())
    fail("an in-place ", op_name(kind), "_ on a view of a tensor that is part of an autograd graph is "
         "not supported by mini's eager autograd (torch rebases the view's base; mini does not); "
         "use an out-of-place op");
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
