// views.cpp — views: new sizes/strides/offset over the same storage, no kernel.
// Also slice_backward (the gradient of a slice: zeros with the slice filled in),
// slice_scatter (a copy of a base with its slice overwritten: a functionalized write) and
// sum_to (reducing a broadcast gradient back to an input's shape).
#include <algorithm>
#include <numeric>

#include "autograd.h"
#include "metrics.h"
#include "ops.h"

namespace mini {

Tensor detach(const Tensor& a) {
  Tensor t = TensorImpl::view_of(a, a->sizes, a->strides, a->offset);
  return t;
}

namespace {
Tensor make_view(const Tensor& a, const Shape& sizes, const Strides& strides, int64_t offset,
                 OpKind k, const Attrs& at) {
  Tensor t = TensorImpl::view_of(a, sizes, strides, offset);
  t->view_of_grad_leaf = a->view_of_grad_leaf || (a->requires_grad && a->is_leaf());
  t->is_view = true;
  record(k, {a}, t, at);
  return t;
}
}  // namespace

void check_view(const Tensor& a, const Shape& shape) {
  Shape target = infer_reshape(shape, a->numel());
  Strides st;
  if (!view_strides(a->sizes, a->strides, target, &st))
    fail("view size is not compatible with input tensor's size and stride (at least one "
         "dimension spans across two contiguous subspaces): cannot view ", shape_str(a->sizes),
         " as ", shape_str(target), ". Use .reshape(...) instead.");
}

void check_index_count(int64_t indices, int64_t rank) {
  if (indices > rank) fail_index("too many indices for tensor of dimension ", rank, " (got ", indices, ")");
}

Tensor view(const Tensor& a, const Shape& shape) {
  check_view(a, shape);
  Shape target = infer_reshape(shape, a->numel());
  Strides st;
  view_strides(a->sizes, a->strides, target, &st);
  Attrs at;
  at.shape = target;
  return make_view(a, target, st, a->offset, OpKind::Reshape, at);
}

Tensor reshape(const Tensor& a, const Shape& shape) {
  Shape target = infer_reshape(shape, a->numel());
  Strides st;
  if (view_strides(a->sizes, a->strides, target, &st)) {
    Attrs at;
    at.shape = target;
    return make_view(a, target, st, a->offset, OpKind::Reshape, at);
  }
  return view(clone(a), target);  // not viewable: copy first (one kernel), as torch
}

Tensor transpose(const Tensor& a, int64_t d0, int64_t d1) {
  int64_t r = a->dim();
  int64_t x = wrap_dim(d0, r), y = wrap_dim(d1, r);
  Shape s = a->sizes;
  Strides st = a->strides;
  if (r > 0) {
    std::swap(s[x], s[y]);
    std::swap(st[x], st[y]);
  }
  Attrs at;
  at.dim = d0;
  at.dim2 = d1;
  return make_view(a, s, st, a->offset, OpKind::Transpose, at);
}

Tensor permute(const Tensor& a, const std::vector<int64_t>& perm) {
  int64_t r = a->dim();
  if ((int64_t)perm.size() != r)
    fail("permute(sparse_coo): number of dimensions in the tensor input does not match the "
         "length of the desired ordering of dimensions i.e. input.dim() = ", r,
         " is not equal to len(dims) = ", perm.size());
  std::vector<int64_t> p(r);
  std::vector<bool> used(r, false);
  Shape s(r);
  Strides st(r);
  for (int64_t i = 0; i < r; i++) {
    p[i] = wrap_dim(perm[i], r);
    if (used[p[i]]) fail("permute(): duplicate dims are not allowed (dim ", p[i], " repeats)");
    used[p[i]] = true;
    s[i] = a->sizes[p[i]];
    st[i] = a->strides[p[i]];
  }
  Attrs at;
  at.dims = p;
  return make_view(a, s, st, a->offset, OpKind::Permute, at);
}

Tensor unsqueeze(const Tensor& a, int64_t dim) {
  int64_t d = wrap_dim(dim, a->dim() + 1);
  Shape s = a->sizes;
  Strides st = a->strides;
  int64_t stride = d < a->dim() ? s[d] * st[d] : 1;
  s.insert(s.begin() + d, 1);
  st.insert(st.begin() + d, stride);
  Attrs at;
  at.dim = d;
  return make_view(a, s, st, a->offset, OpKind::Unsqueeze, at);
}

Tensor squeeze(const Tensor& a, const std::vector<int64_t>& dims) {
  std::vector<int64_t> wrapped = wrap_dims(dims, a->dim());
  Shape s;
  Strides st;
  for (int64_t d = 0; d < a->dim(); d++) {
    bool listed = dims.empty() || std::find(wrapped.begin(), wrapped.end(), d) != wrapped.end();
    if (listed && a->sizes[d] == 1) continue;
    s.push_back(a->sizes[d]);
    st.push_back(a->strides[d]);
  }
  Attrs at;
  at.dims = dims;
  return make_view(a, s, st, a->offset, OpKind::Squeeze, at);
}

Tensor expand(const Tensor& a, const Shape& shape_in) {
  if (shape_in.size() < a->sizes.size())
    fail("expand: the number of sizes provided (", shape_in.size(), ") must be greater or "
         "equal to the number of dimensions in the tensor (", a->dim(), ")");
  Shape shape = shape_in;
  size_t off = shape.size() - a->sizes.size();
  for (size_t i = 0; i < shape.size(); i++) {
    if (shape[i] == -1) {
      if (i < off) fail("expand: -1 is not allowed in a leading, non-existing dimension");
      shape[i] = a->sizes[i - off];
    }
    if (shape[i] < 0)
      fail("expand: invalid size ", shape[i], " at dim ", i, " in ", shape_str(shape_in),
           " (sizes must be >= 0, or -1 to keep a dim)");
    if (i >= off && a->sizes[i - off] != 1 && a->sizes[i - off] != shape[i])
      fail("The expanded size of the tensor (", shape[i], ") must match the existing size (",
           a->sizes[i - off], ") at non-singleton dimension ", i, ".  Target sizes: ",
           shape_str(shape_in), ".  Tensor sizes: ", shape_str(a->sizes));
  }
  numel_of(shape);  // fails if the element count overflows int64
  Attrs at;
  at.shape = shape;
  return make_view(a, shape, broadcast_strides(a->sizes, a->strides, shape), a->offset,
                   OpKind::Expand, at);
}

Tensor slice(const Tensor& a, int64_t dim, int64_t start, int64_t end, int64_t step) {
  int64_t d = wrap_dim(dim, a->dim());
  if (a->dim() == 0) fail_index("slicing is not possible on a 0-d tensor");
  if (step <= 0) fail_value("step must be greater than zero (got ", step, ")");
  int64_t n = a->sizes[d];
  auto clampi = [n](int64_t i) { i = i < 0 ? i + n : i; return std::min(std::max<int64_t>(i, 0), n); };
  int64_t s0 = clampi(start), e0 = std::max(clampi(end), clampi(start));
  int64_t len = (e0 - s0 + step - 1) / step;
  Shape s = a->sizes;
  Strides st = a->strides;
  s[d] = len;
  st[d] = a->strides[d] * step;
  Attrs at;
  at.dim = d;
  at.start = s0;
  at.end = e0;
  at.step = step;
  return make_view(a, s, st, a->offset + s0 * a->strides[d], OpKind::Slice, at);
}

Tensor select(const Tensor& a, int64_t dim, int64_t index) {
  if (a->dim() == 0) fail_index("invalid index of a 0-dim tensor. Use `tensor.item()` to get the number");
  int64_t d = wrap_dim(dim, a->dim());
  int64_t n = a->sizes[d];
  if (index < -n || index >= n)
    fail_index("index ", index, " is out of bounds for dimension ", d, " with size ", n);
  int64_t i = index < 0 ? index + n : index;
  Shape s = a->sizes;
  Strides st = a->strides;
  s.erase(s.begin() + d);
  st.erase(st.begin() + d);
  Attrs at;
  at.dim = d;
  at.index = i;
  return make_view(a, s, st, a->offset + i * a->strides[d], OpKind::Select, at);
}

Tensor slice_backward(const Tensor& g, const Attrs& a) {
  Metrics before = metrics();  // zero fill + copy count as one kernel: slice_backward
  Tensor out = zeros(a.shape, g->dtype, g->device());
  {
    NoGradGuard no_grad;
    copy_(slice(out, a.dim, a.start, a.end, a.step), g);
  }
  metrics() = before;
  count_kernel(g->nbytes() + out->nbytes());
  record(OpKind::SliceBackward, {g}, out, a);
  return out;
}

Tensor slice_scatter(const Tensor& base, const Tensor& src, int64_t dim, int64_t start, int64_t end,
                     int64_t step) {
  if (!base || !src) fail_type("slice_scatter(): arguments must be Tensors");
  Metrics before = metrics();  // the copy of base + the write of src count as one kernel
  Tensor out;
  {
    NoGradGuard no_grad;
    out = clone(base);
    copy_(slice(out, dim, start, end, step), src);
  }
  metrics() = before;
  count_kernel(base->nbytes() + src->nbytes() + out->nbytes());
  Attrs a;
  a.dim = dim;
  a.start = start;
  a.end = end;
  a.step = step;
  record(OpKind::SliceScatter, {base, src}, out, a);
  return out;
}

Tensor sum_to(const Tensor& a, const Shape& shape) {
  if (a->sizes == shape) return a;
  size_t lead = a->sizes.size() - shape.size();
  std::vector<int64_t> dims;
  for (size_t i = 0; i < a->sizes.size(); i++)
    if (i < lead || (shape[i - lead] == 1 && a->sizes[i] != 1)) dims.push_back((int64_t)i);
  Tensor r = dims.empty() ? a : reduce(OpKind::Sum, a, dims, true);
  return reshape(r, shape);
}

}  // namespace mini
