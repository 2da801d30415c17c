// shape.h — sizes, strides and the arithmetic on them: contiguous strides, broadcasting,
// dim wrapping, printing. Pure functions on std::vector<int64_t>; no tensors here.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

namespace mini {

using Shape = std::vector<int64_t>;    // sizes, outermost first
using Strides = std::vector<int64_t>;  // in elements, not bytes

// The product of the sizes (0 if one is 0). Throws RuntimeError naming the shape when it
// overflows int64.
int64_t numel_of(const Shape& shape);
Strides contiguous_strides(const Shape& shape);
std::string shape_str(const Shape& shape);  // "[3, 4]"

// Broadcast two shapes torch's way (align right; 1 stretches). Throws RuntimeError naming
// both shapes when a pair of sizes is neither equal nor 1.
Shape broadcast_shapes(const Shape& a, const Shape& b);

// Wraps a possibly negative dim into [0, rank). Throws IndexError naming the dim and rank.
int64_t wrap_dim(int64_t dim, int64_t rank);

// Sorted, unique, wrapped dims; an empty list means "all dims".
std::vector<int64_t> wrap_dims(const std::vector<int64_t>& dims, int64_t rank);

// Strides of `shape` viewing a tensor of `from_shape`/`from_strides` broadcast to it:
// 0 on stretched or new leading dims.
Strides broadcast_strides(const Shape& from_shape, const Strides& from_strides, const Shape& shape);

// Infers a reshape target (one -1 allowed) for `numel` elements. Throws RuntimeError naming
// the shape and the element count when impossible.
Shape infer_reshape(const Shape& target, int64_t numel);

// Strides for viewing (shape, strides) as `target` without copying, if possible.
bool view_strides(const Shape& shape, const Strides& strides, const Shape& target, Strides* out);

// An in-place op may not write a tensor whose elements share memory (a dim of stride 0 and
// size > 1: an expanded tensor): the result would depend on how many times each location is
// written. Throws torch's RuntimeError, which names the fix (clone() first). Unknown sizes or
// strides (negative: graph meta's symbols) are not taken as shared.
bool has_internal_overlap(const Shape& shape, const Strides& strides);
void check_no_internal_overlap(const Shape& shape, const Strides& strides);

}  // namespace mini
