"""mini.Tensor and the methods it has in Python (torch/_tensor.py): the class is C++'s
(mini._C.Tensor, bind_tensor.cpp); this module adds shape, dtype and device, size, to, max and
min, repr, iteration, numpy's __array__, the varargs forms of reshape & co., and the methods
composed from ops capture knows (split, chunk, tril, triu, argmax, argmin, flatten, ~, & and |),
with their function forms (mini.split, ...). The other Python methods come from _indexing.py
(indexing, gather, topk) and _random.py (normal_, uniform_, multinomial)."""
import builtins
import collections

from . import _C
from ._factories import arange, full_like
from ._functional import _as_tensor, where
from ._tensor_str import _repr, _values
from ._types import (Size, bool, bfloat16, device, dtype, float32, float64, int64,  # noqa: A004,F401
                     _BY_CODE, _device_arg, _device_of, _dim_index, _dtype_arg, _shape_args)

Tensor = _C.Tensor


return_types_max = collections.namedtuple("max", ["values", "indices"])
return_types_min = collections.namedtuple("min", ["values", "indices"])


def _max(self, dim=None, keepdim=False):
    if isinstance(dim, Tensor):
        return self.maximum(dim)
    if dim is None:
        return self.amax()
    return return_types_max(*self._max_min_dim(dim, keepdim, True))


def _min(self, dim=None, keepdim=False):
    if isinstance(dim, Tensor):
        return self.minimum(dim)
    if dim is None:
        return self.amin()
    return return_types_min(*self._max_min_dim(dim, keepdim, False))


def _size(self, dim=None):
    s = self._sizes
    if dim is None:
        return Size(s)
    if not -max(len(s), 1) <= dim < max(len(s), 1):
        raise IndexError(f"Dimension out of range (expected to be in range of "
                         f"[{-len(s)}, {len(s) - 1}], but got {dim})")
    return s[dim]


def _to(self, *args, dtype=None, device=None, copy=False, non_blocking=False):
    """torch's Tensor.to: a dtype, a device, both, or another tensor's (dtype and device)."""
    for a in args:
        if isinstance(a, globals()["dtype"]):
            dtype = a
        elif isinstance(a, (str, globals()["device"])):
            device = a
        elif isinstance(a, Tensor):
            dtype, device = a.dtype, a._device
        elif isinstance(a, builtins.bool):
            non_blocking = a
    out = self
    if device is not None:
        out = out._to_device(_device_arg(device))
    if dtype is not None:
        out = out._to_dtype(_dtype_arg(dtype).code)
    return out.clone() if copy and out is self else out


def _cuda(self, device=None, non_blocking=False):
    return self._to_device(_device_arg("cuda" if device is None else device))


def _iter(self):
    if self.dim() == 0:
        raise TypeError("iteration over a 0-d tensor")
    for i in range(len(self)):
        yield self[i]


def _array(self, dtype=None, copy=None):
    arr = self.detach().numpy()  # a CUDA tensor raises torch's TypeError (use .cpu() first)
    return arr.astype(dtype) if dtype is not None else arr


def _install_methods():
    Tensor.shape = property(lambda self: Size(self._sizes))
    Tensor.dtype = property(lambda self: _BY_CODE[self._dtype_code])
    Tensor.device = property(_device_of)
    Tensor.is_cuda = property(lambda self: self._device != "cpu")
    Tensor.size = _size
    Tensor.max = _max
    Tensor.min = _min
    Tensor.to = _to
    Tensor.__repr__ = _repr
    Tensor.__str__ = _repr
    Tensor.__iter__ = _iter
    Tensor.__array__ = _array
    Tensor.__array_priority__ = 1000  # numpy defers to Tensor's reflected operators
    Tensor.reshape = lambda self, *s: self._reshape(_shape_args(s))
    Tensor.view = lambda self, *s: self._view(_shape_args(s))
    Tensor.expand = lambda self, *s: self._expand(_shape_args(s))
    Tensor.permute = lambda self, *d: self._permute(_shape_args(d))
    Tensor.tolist = lambda self: _values(self).tolist()
    Tensor.float = lambda self: self._to_dtype(float32.code)
    Tensor.double = lambda self: self._to_dtype(float64.code)
    Tensor.long = lambda self: self._to_dtype(int64.code)
    Tensor.bool = lambda self: self._to_dtype(bool.code)
    Tensor.bfloat16 = lambda self: self._to_dtype(bfloat16.code)
    Tensor.cpu = lambda self: self._to_device("cpu")
    Tensor.cuda = _cuda
    Tensor.type_as = lambda self, other: self.to(other.dtype)
    Tensor.is_floating_point = lambda self: self.dtype.is_floating_point

    Tensor.__rmatmul__ = lambda self, other: NotImplemented


_install_methods()


def _flatten(self, start_dim=0, end_dim=-1):
    if self.dim() == 0:
        return self.reshape(1)
    r = self.dim()
    s, e = start_dim % r, end_dim % r
    shape = list(self.shape[:s]) + [-1] + list(self.shape[e + 1:])
    return self.reshape(shape)


def _split(self, split_size_or_sections, dim=0):
    """Views of self along dim: pieces of split_size_or_sections elements (the last may be
    shorter), or of the sizes in a list (which must add up to the dim's length)."""
    d = _dim_index(self, dim)
    n = self.shape[d]
    if isinstance(split_size_or_sections, builtins.int):
        if split_size_or_sections <= 0:
            raise ValueError(f"split expects split_size be positive, but got split_size={split_size_or_sections}")
        sizes = [min(split_size_or_sections, n - start) for start in range(0, n, split_size_or_sections)] or [0]
    else:
        sizes = [builtins.int(k) for k in split_size_or_sections]
        if builtins.sum(sizes) != n:
            raise ValueError(f"split_with_sizes expects split_sizes to sum exactly to {n} (input tensor's size at "
                             f"dimension {dim}), but got split_sizes={sizes}")
    pieces, start = [], 0
    for k in sizes:
        pieces.append(self[(slice(None),) * d + (slice(start, start + k),)])
        start += k
    return tuple(pieces)


def _chunk(self, chunks, dim=0):
    """At most `chunks` views of self along dim, of ceil(length / chunks) elements each."""
    if chunks <= 0:
        raise ValueError(f"chunk expects `chunks` to be greater than 0, got: {chunks}")
    n = self.shape[_dim_index(self, dim)]
    return _split(self, max(1, -(-n // chunks)), dim)


def _triangle(self, diagonal, lower):
    if self.dim() < 2:
        raise ValueError(f"{'tril' if lower else 'triu'}: input tensor must have at least 2 dimensions, got {self.dim()}")
    rows, cols = self.shape[-2], self.shape[-1]
    i = arange(rows, device=self.device).unsqueeze(1)
    j = arange(cols, device=self.device).unsqueeze(0)
    # tril keeps j <= i + diagonal, triu keeps j >= i + diagonal: the rest become 0
    drop = j > i + diagonal if lower else j < i + diagonal
    return self.masked_fill(drop, 0)


def _tril(self, diagonal=0):
    """The lower triangle of the last two dims (j <= i + diagonal), the rest 0."""
    return _triangle(self, diagonal, True)


def _triu(self, diagonal=0):
    """The upper triangle of the last two dims (j >= i + diagonal), the rest 0."""
    return _triangle(self, diagonal, False)


def _invert(self):
    """~t: logical not of a bool tensor, bitwise not (-t - 1) of an integer one."""
    if self.dtype.is_floating_point:
        raise TypeError(f"~ (bitwise not) is only for bool and integer tensors, not {self.dtype}")
    if self.dtype == bool:
        return self == False  # noqa: E712
    return -self - 1


def _logical_operands(self, other, symbol):
    """The two bool tensors of a & b or a | b (a Python bool becomes a tensor like self)."""
    if isinstance(other, builtins.bool):
        other = full_like(self, other)
    if self.dtype != bool or other.dtype != bool:
        raise TypeError(f"{symbol} is only for bool tensors in mini, got {self.dtype} and {other.dtype}; "
                        f"for a mask write (a > 0) {symbol} (b > 0)")
    return other


def _and(self, other):
    """a & b of bool tensors: their elementwise minimum (an op capture and fusion know).
    Integer bitwise and is not in mini."""
    if not isinstance(other, Tensor) and not isinstance(other, builtins.bool):
        return NotImplemented
    return self.minimum(_logical_operands(self, other, "&"))


def _or(self, other):
    """a | b of bool tensors: their elementwise maximum. Integer bitwise or is not in mini."""
    if not isinstance(other, Tensor) and not isinstance(other, builtins.bool):
        return NotImplemented
    return self.maximum(_logical_operands(self, other, "|"))


def _argmax_argmin(self, dim, keepdim, largest):
    """The first index of the max (min) along dim (a NaN counts as the max, as torch's): the
    reduction, then the smallest index where the input equals it, so that capture records
    ops fusion knows."""
    if dim is None:
        return _argmax_argmin(self.reshape(-1), 0, False, largest)
    d = _dim_index(self, dim)
    best = self.amax(d, keepdim=True) if largest else self.amin(d, keepdim=True)
    index = arange(self.shape[d], device=self.device)
    for _ in range(self.dim() - d - 1):  # along dim d, broadcast over the dims after it
        index = index.unsqueeze(-1)
    hit = where(self != self, True, self == best)
    return where(hit, index, self.shape[d]).amin(d, keepdim=keepdim)


Tensor.flatten = _flatten
Tensor.__invert__ = _invert
Tensor.__and__ = Tensor.__rand__ = _and
Tensor.__or__ = Tensor.__ror__ = _or
Tensor.argmax = lambda self, dim=None, keepdim=False: _argmax_argmin(self, dim, keepdim, True)
Tensor.argmin = lambda self, dim=None, keepdim=False: _argmax_argmin(self, dim, keepdim, False)
Tensor.split = _split
Tensor.chunk = _chunk
Tensor.tril = _tril
Tensor.triu = _triu


def split(tensor, split_size_or_sections, dim=0):
    return _split(_as_tensor(tensor), split_size_or_sections, dim)


def chunk(input, chunks, dim=0):
    return _chunk(_as_tensor(input), chunks, dim)


def tril(input, diagonal=0):
    return _tril(_as_tensor(input), diagonal)


def triu(input, diagonal=0):
    return _triu(_as_tensor(input), diagonal)


def argmax(input, dim=None, keepdim=False):
    return _argmax_argmin(_as_tensor(input), dim, keepdim, True)


def argmin(input, dim=None, keepdim=False):
    return _argmax_argmin(_as_tensor(input), dim, keepdim, False)
