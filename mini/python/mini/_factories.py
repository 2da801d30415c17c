"""The tensor factories (torch's creation ops): zeros, ones, empty, full and their _like forms,
rand and randn (uniform and normal values from mini's generators), arange, and the tensors
made from host data, from_numpy and tensor. Each parses its arguments and calls one _C
factory; mini.compile records the ones capture knows as graph nodes (mini/__init__.py)."""
import builtins

import numpy as np

from . import _C
from ._C import Tensor
from ._types import bool, bfloat16, float32, int64, _device_arg, _dtype_arg, _shape_args  # noqa: A004


def _finish(t, requires_grad):
    if requires_grad:
        t.requires_grad_(True)
    return t


def zeros(*size, dtype=None, requires_grad=False, device=None):
    return _finish(_C.full(_shape_args(size), 0.0, _dtype_arg(dtype).code, _device_arg(device)), requires_grad)


def ones(*size, dtype=None, requires_grad=False, device=None):
    return _finish(_C.full(_shape_args(size), 1.0, _dtype_arg(dtype).code, _device_arg(device)), requires_grad)


def empty(*size, dtype=None, requires_grad=False, device=None):
    return _finish(_C.empty(_shape_args(size), _dtype_arg(dtype).code, _device_arg(device)), requires_grad)


def full(size, fill_value, dtype=None, requires_grad=False, device=None):
    if dtype is None:
        dtype = bool if isinstance(fill_value, builtins.bool) else int64 if isinstance(fill_value, builtins.int) else float32
    return _finish(_C.full(_shape_args((size,)), fill_value, _dtype_arg(dtype).code,
                           _device_arg(device)), requires_grad)


def zeros_like(t, dtype=None, requires_grad=False, device=None):
    return zeros(t.shape, dtype=dtype or t.dtype, requires_grad=requires_grad, device=device or t._device)


def ones_like(t, dtype=None, requires_grad=False, device=None):
    return ones(t.shape, dtype=dtype or t.dtype, requires_grad=requires_grad, device=device or t._device)


def full_like(t, fill_value, dtype=None, requires_grad=False, device=None):
    return full(t.shape, fill_value, dtype=dtype or t.dtype, requires_grad=requires_grad,
                device=device or t._device)


def empty_like(t, dtype=None, requires_grad=False, device=None):
    return empty(t.shape, dtype=dtype or t.dtype, requires_grad=requires_grad, device=device or t._device)


def randn(*size, dtype=None, requires_grad=False, device=None):
    return _finish(_C.randn(_shape_args(size), _dtype_arg(dtype).code, _device_arg(device)), requires_grad)


def rand(*size, dtype=None, requires_grad=False, device=None):
    return _finish(_C.rand(_shape_args(size), _dtype_arg(dtype).code, _device_arg(device)), requires_grad)


def randn_like(t, dtype=None, device=None, requires_grad=False):
    return randn(t.shape, dtype=dtype or t.dtype, requires_grad=requires_grad, device=device or t._device)


def rand_like(t, dtype=None, device=None, requires_grad=False):
    return rand(t.shape, dtype=dtype or t.dtype, requires_grad=requires_grad, device=device or t._device)


def arange(start, end=None, step=1, dtype=None, requires_grad=False, device=None):
    if end is None:
        start, end = 0, start
    if dtype is None:
        is_int = all(isinstance(v, builtins.int) for v in (start, end, step))
        dtype = int64 if is_int else float32
    return _finish(_C.arange(start, end, step, _dtype_arg(dtype).code, _device_arg(device)),
                   requires_grad)


def from_numpy(array):
    """A tensor sharing `array`'s memory (like torch.from_numpy)."""
    if not isinstance(array, np.ndarray):
        raise TypeError(f"expected np.ndarray (got {type(array).__name__})")
    return _C.from_numpy(array)


def tensor(data, dtype=None, requires_grad=False, device=None):
    """A new tensor holding a copy of `data` (a number, nested lists, an ndarray or a Tensor)."""
    if device is not None and _device_arg(device) != "cpu":
        t = tensor(data, dtype=dtype)
        return _finish(t._to_device(_device_arg(device)), requires_grad)
    if isinstance(data, Tensor):
        t = data.detach().clone()
        return _finish(t.to(dtype) if dtype is not None else t, requires_grad)
    if isinstance(data, np.ndarray):
        arr = data
        if arr.dtype.kind in "iu":
            arr = arr.astype(np.int64)
        elif arr.dtype.kind == "f" and arr.dtype.itemsize < 4:
            arr = arr.astype(np.float32)
    else:
        arr = np.array(data)
        if arr.dtype.kind not in "biuf":
            raise TypeError(f"mini.tensor: could not make a tensor from {type(data).__name__} "
                            f"data of numpy type {arr.dtype} (use numbers, bools or nested "
                            "lists of them)")
        if arr.dtype.kind == "f" and dtype is None:
            arr = arr.astype(np.float32)  # Python floats become the default dtype
        elif arr.dtype.kind in "iu":
            arr = arr.astype(np.int64)
    if dtype is not None and _dtype_arg(dtype) is bfloat16:  # through float32, as numpy has none
        t = _C.from_numpy(np.array(arr, dtype=np.float32, order="C"))._to_dtype(bfloat16.code)
        return _finish(t, requires_grad)
    if dtype is not None:
        arr = arr.astype(_dtype_arg(dtype).numpy_type)
    return _finish(_C.from_numpy(np.array(arr, copy=True, order="C")), requires_grad)
