"""The functional ops (torch/functional.py and torch's function forms): mini.add(x, y) & co.
for the methods of _FUNCTIONS, where, layer_norm, mse_loss, embedding, slice_scatter and the
joins cat and stack (composed from slice_scatter), allclose, and attention_node, the hook
F.scaled_dot_product_attention calls while compiling. mini/__init__.py registers most of them
with capture, which records them as graph nodes."""
import builtins

import numpy as np

from . import _C
from ._C import Tensor
from ._factories import zeros
from ._tensor_str import _values
from ._types import _dim_index


def _as_tensor(x, name="input"):
    if isinstance(x, Tensor):
        return x
    if isinstance(x, (builtins.int, builtins.float)):
        return _C.operand(x)
    raise TypeError(f"{name} must be a Tensor, not {type(x).__name__}")


def _method_function(name):
    def fn(input, *args, **kwargs):
        return getattr(_as_tensor(input), name)(*args, **kwargs)
    fn.__name__ = name
    fn.__doc__ = f"mini.{name}(input, ...) is input.{name}(...)"
    return fn


_FUNCTIONS = ["add", "sub", "mul", "div", "pow", "neg", "abs", "exp", "log", "sin", "cos",
              "tanh", "sigmoid", "relu", "sqrt", "rsqrt", "maximum", "minimum", "eq", "ne",
              "lt", "le", "gt", "ge", "sum", "mean", "amax", "amin", "max", "min", "nonzero",
              "reshape", "transpose", "permute", "unsqueeze", "squeeze", "matmul", "mm", "bmm",
              "softmax", "log_softmax", "gelu", "clone", "t", "sign", "flatten", "clamp",
              "masked_fill"]
functions = {name: _method_function(name) for name in _FUNCTIONS}


def slice_scatter(input, src, dim=0, start=None, end=None, step=1):
    """A copy of input with src written into input[start:end:step] along dim (torch's)."""
    d = _dim_index(input, dim)
    n = input.shape[d]
    start = 0 if start is None else start + n if start < 0 else start
    end = n if end is None else end + n if end < 0 else min(end, n)
    return _C.slice_scatter(input, src, d, start, end, step)


def cat(tensors, dim=0):
    """The tensors joined along dim (each of the same shape but along dim, and one dtype): each
    written into its slice of a zero tensor by slice_scatter, so that autograd and capture see
    ops they know (the gradient of each input is its slice of the output's)."""
    if isinstance(tensors, Tensor) or len(tensors) == 0:
        raise TypeError("cat() expects a non-empty list or tuple of tensors")
    first = tensors[0]
    d = _dim_index(first, dim)
    total = 0
    for k, t in enumerate(tensors):
        if t.dim() != first.dim() or t.dtype != first.dtype:
            raise RuntimeError(f"cat(): tensors must have the same number of dimensions and dtype, got "
                               f"{first.dtype}{list(first.shape)} and {t.dtype}{list(t.shape)} (cast with .to() first)")
        # torch's check (a size of 1 does not broadcast here); compiled, a shape guard keeps it.
        # The message is concatenated: capture runs the raise, and has no f-strings.
        for i in range(first.dim()):
            if i != d and t.shape[i] != first.shape[i]:
                raise RuntimeError("Sizes of tensors must match except in dimension " + str(d) + ". Expected size " +
                                   str(first.shape[i]) + " but got size " + str(t.shape[i]) + " for tensor number " +
                                   str(k) + " in the list.")
        total = total + t.shape[d]
    out = zeros(first.shape[:d] + (total,) + first.shape[d + 1:], dtype=first.dtype, device=first.device)
    start = 0
    for t in tensors:
        out = slice_scatter(out, t, d, start, start + t.shape[d])
        start = start + t.shape[d]
    return out


concat = cat


def stack(tensors, dim=0):
    """The tensors (all of one shape) joined along a new dim."""
    if isinstance(tensors, Tensor) or len(tensors) == 0:
        raise TypeError("stack() expects a non-empty list or tuple of tensors")
    d = dim if dim >= 0 else dim + tensors[0].dim() + 1
    pieces = []
    for t in tensors:
        if t.shape != tensors[0].shape:
            raise RuntimeError(f"stack expects each tensor to be equal size, but got {list(tensors[0].shape)} "
                               f"and {list(t.shape)}")
        pieces.append(t.unsqueeze(d))
    return cat(pieces, d)


def where(condition, input, other):
    return _C.where(condition, input, other)


def layer_norm(input, normalized_shape, weight=None, bias=None, eps=1e-5):
    if isinstance(normalized_shape, int):
        normalized_shape = (normalized_shape,)
    return _C.layer_norm(input, list(normalized_shape), weight, bias, eps)


def attention_node(query, key, value, is_causal, scale):
    """Inside mini.compile, F.scaled_dot_product_attention's one fused node (capture records an
    Attention node where mini.config.fused_attention takes the operands, else returns None).
    Outside a compile there is no graph: None."""
    return None


def embedding(input, weight):
    """weight[input]: the rows of weight [num_embeddings, dim] picked by the int64 indices in
    input, shaped [*input.shape, dim]; the weight's gradient adds each picked row's gradient
    back (rows picked twice get both). An index outside [0, num_embeddings) raises IndexError."""
    return _C.embedding(weight, input)


def mse_loss(input, target, reduction="mean"):
    return _C.mse_loss(input, target, reduction)


def allclose(a, b, rtol=1e-05, atol=1e-08, equal_nan=False):
    """True when a and b (tensors, arrays or numbers) are elementwise close, like torch."""
    def arr(x):
        if isinstance(x, Tensor):
            return _values(x)  # on the host, bfloat16 widened
        return np.asarray(x)
    x, y = arr(a), arr(b)
    if x.shape != y.shape:
        try:
            np.broadcast_shapes(x.shape, y.shape)
        except ValueError:
            raise RuntimeError(f"allclose: shapes {list(x.shape)} and {list(y.shape)} cannot be "
                               "broadcast together") from None
    return builtins.bool(np.allclose(x, y, rtol=rtol, atol=atol, equal_nan=equal_nan))
