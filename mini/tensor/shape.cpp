// shape.cpp — arithmetic on sizes and strides: numel, contiguous strides, broadcasting, dim
// wrapping, reshape inference and view strides.
#include "shape.h"

#include <algorithm>

#include "errors.h"

namespace mini {

int64_t numel_of(const Shape& shape) {
  int64_t n = 1;
  bool overflow = false;
  for (int64_t s : shape) {
    if (s == 0) return 0;
    overflow |= __builtin_mul_overflow(n, s, &n);
  }
  // a wrapped count would make a storage too small for the sizes: indexing it would crash
  if (overflow) fail("the element count of shape ", shape_str(shape), " overflows int64");
  return n;
}

Strides contiguous_strides(const Shape& shape) {
  Strides st(shape.size());
  // Unsigned: a zero-size shape may have strides past int64 ([0, 2^62, 4]); they are never
  // used to address memory, and signed overflow would be undefined behaviour.
  uint64_t acc = 1;
  for (size_t i = shape.size(); i-- > 0;) {
    st[i] = (int64_t)acc;
    acc *= (uint64_t)std::max<int64_t>(shape[i], 1);
  }
  return st;
}

std::string shape_str(const Shape& shape) {
  std::string s = "[";
  for (size_t i = 0; i < shape.size(); i++) s += (i ? ", " : "") + std::to_string(shape[i]);
  return s + "]";
}

Shape broadcast_shapes(const Shape& a, const Shape& b) {
  size_t n = std::max(a.size(), b.size());
  Shape out(n);
  for (size_t i = 0; i < n; i++) {
    int64_t sa = i < n - a.size() ? 1 : a[i - (n - a.size())];
    int64_t sb = i < n - b.size() ? 1 : b[i - (n - b.size())];
    if (sa < 0 || sb < 0) {  // a symbolic size (graph meta only): checked when the kernel runs
      out[i] = sa == 1 ? sb : (sb == 1 ? sa : (sa < 0 && sb >= 0 ? sb : sa));
      continue;
    }
    if (sa != sb && sa != 1 && sb != 1)
      fail("shapes ", shape_str(a), " and ", shape_str(b), " cannot be broadcast together: ",
           "size ", sa, " vs ", sb, " at dim ", i, " (sizes must match or be 1)");
    out[i] = sa == 1 ? sb : sa;
  }
  return out;
}

int64_t wrap_dim(int64_t dim, int64_t rank) {
  int64_t r = std::max<int64_t>(rank, 1);  // a 0-d tensor accepts dim 0 and -1, as torch
  if (dim < -r || dim >= r)
    fail_index("Dimension out of range (expected to be in range of [", -r, ", ", r - 1,
               "], but got ", dim, ") for a tensor of rank ", rank);
  return dim < 0 ? dim + r : dim;
}

std::vector<int64_t> wrap_dims(const std::vector<int64_t>& dims, int64_t rank) {
  std::vector<int64_t> out;
  for (int64_t d : dims) out.push_back(wrap_dim(d, rank));
  std::sort(out.begin(), out.end());
  auto dup = std::adjacent_find(out.begin(), out.end());
  if (dup != out.end()) fail("dim ", *dup, " appears multiple times in the list of dims");
  if (rank == 0) out.clear();
  return out;
}

Strides broadcast_strides(const Shape& from_shape, const Strides& from_strides, const Shape& shape) {
  Strides st(shape.size(), 0);
  size_t off = shape.size() - from_shape.size();
  for (size_t i = 0; i < from_shape.size(); i++)
    st[off + i] = (from_shape[i] == 1 && shape[off + i] != 1) ? 0 : from_strides[i];
  return st;
}

Shape infer_reshape(const Shape& target, int64_t numel) {
  Shape out = target;
  int64_t known = 1, infer_at = -1;
  for (size_t i = 0; i < out.size(); i++) {
    if (out[i] == -1) {
      if (infer_at >= 0) fail("only one dimension can be inferred in shape ", shape_str(target));
      infer_at = static_cast<int64_t>(i);
    } else if (out[i] < 0) {
      fail("invalid shape dimension ", out[i], " in ", shape_str(target));
    } else if (__builtin_mul_overflow(known, out[i], &known)) {
      fail("the element count of shape ", shape_str(target), " overflows int64");
    }
  }
  if (infer_at >= 0) {
    if (known == 0 || numel % known != 0)
      fail("shape '", shape_str(target), "' is invalid for input of size ", numel);
    out[infer_at] = numel / known;
  } else if (known != numel) {
    fail("shape '", shape_str(target), "' is invalid for input of size ", numel);
  }
  return out;
}

// Walks the old dims in groups that are contiguous among themselves and matches them to
// groups of new dims with the same element count (torch's computeStride).
bool view_strides(const Shape& shape, const Strides& strides, const Shape& target, Strides* out) {
  out->assign(target.size(), 0);
  if (numel_of(shape) <= 1) {
    *out = contiguous_strides(target);
    return true;
  }
  int64_t view_d = static_cast<int64_t>(target.size()) - 1;
  int64_t chunk_base_stride = strides.empty() ? 1 : strides.back();
  int64_t tensor_numel = 1, view_numel = 1;
  for (int64_t d = static_cast<int64_t>(shape.size()) - 1; d >= 0; d--) {
    tensor_numel *= shape[d];
    if (d == 0 || (shape[d - 1] != 1 && strides[d - 1] != tensor_numel * chunk_base_stride)) {
      while (view_d >= 0 && (view_numel < tensor_numel || target[view_d] == 1)) {
        (*out)[view_d] = view_numel * chunk_base_stride;
        view_numel *= target[view_d];
        view_d--;
      }
      if (view_numel != tensor_numel) return false;
      if (d > 0) {
        chunk_base_stride = strides[d - 1];
        tensor_numel = 1;
        view_numel = 1;
      }
    }
  }
  return view_d == -1;
}

bool has_internal_overlap(const Shape& shape, const Strides& strides) {
  for (int64_t size : shape)
    if (size == 0) return false;  // no element at all, so no two that share a location
  for (size_t d = 0; d < shape.size() && d < strides.size(); d++)
    if (shape[d] > 1 && strides[d] == 0) return true;
  return false;
}

void check_no_internal_overlap(const Shape& shape, const Strides& strides) {
  if (has_internal_overlap(shape, strides))
    fail("unsupported operation: more than one element of the written-to tensor refers to a single "
           "memory location. Please clone() the tensor before performing the operation.");
}

}  // namespace mini
