"""The types a tensor's arguments name: dtype (mini.float32, ...), Size and device, and the
parsing of the size, dtype, device and dim arguments every factory and op takes (torch keeps
these in torch/_C; its Python names are torch.dtype, torch.Size and torch.device)."""
import builtins

import numpy as np

from . import _C
from ._C import Tensor


class dtype:
    """A tensor element type: mini.float32, mini.float64, mini.int64, mini.bool,
    mini.bfloat16."""

    def __init__(self, name, code, numpy_type, is_floating_point, itemsize=None):
        self.name, self.code = name, code
        self.numpy_type = numpy_type  # None for bfloat16: numpy has no such type
        self.is_floating_point = is_floating_point
        self.itemsize = itemsize or np.dtype(numpy_type).itemsize

    def __repr__(self):
        return "mini." + self.name

    def __reduce__(self):
        return self.name


float32 = dtype("float32", 2, np.float32, True)
float64 = dtype("float64", 3, np.float64, True)
int64 = dtype("int64", 1, np.int64, False)
bool = dtype("bool", 0, np.bool_, False)  # noqa: A001 - torch's name
bfloat16 = dtype("bfloat16", 4, None, True, itemsize=2)
float, double, long = float32, float64, int64  # noqa: A001
_BY_CODE = {d.code: d for d in (float32, float64, int64, bool, bfloat16)}
_BY_NUMPY = {np.dtype(d.numpy_type): d for d in (float32, float64, int64, bool)}


class Size(tuple):
    """The shape of a tensor: a tuple of ints, printed like torch.Size."""

    def __repr__(self):
        return "mini.Size([" + ", ".join(str(s) for s in self) + "])"

    def numel(self):
        n = 1
        for s in self:
            n *= s
        return n


class device:
    """Where a tensor lives: device('cpu'), device('cuda'), device('cuda:0'), device('cuda', 0).
    Making one never needs a GPU (as torch); putting a tensor there does."""

    def __init__(self, type="cpu", index=None):  # noqa: A002 - torch's name
        if isinstance(type, device):
            type, index = type.type, type.index
        elif isinstance(type, builtins.int) and not isinstance(type, builtins.bool):
            type, index = "cuda", type  # torch: an int is a CUDA ordinal
        text = str(type) if index is None else f"{type}:{index}"
        canonical = _C._parse_device(text)  # RuntimeError naming the string if it is not one
        self.type, _, ordinal = canonical.partition(":")
        self.index = builtins.int(ordinal) if ordinal and (index is not None or ":" in text) else None

    def __repr__(self):
        return f"device(type='{self.type}'" + ("" if self.index is None else f", index={self.index}") + ")"

    def __str__(self):
        return self.type if self.index is None else f"{self.type}:{self.index}"

    def __eq__(self, other):
        if isinstance(other, str):
            other = device(other)
        return isinstance(other, device) and (self.type, self.index) == (other.type, other.index)

    def __hash__(self):
        return hash((self.type, self.index))


_CPU = device("cpu")
_DEVICES = {"cpu": _CPU}


def _device_of(t):
    """The device object of a tensor (one object per device, as the tensor's property)."""
    name = t._device
    d = _DEVICES.get(name)
    if d is None:
        d = _DEVICES[name] = device(name)
    return d


def _device_arg(dev):
    """A factory's device= argument as the string _C takes ('cpu', 'cuda:0')."""
    if dev is None:
        return "cpu"
    d = dev if isinstance(dev, device) else device(dev)
    return "cpu" if d.type == "cpu" else f"cuda:{d.index or 0}"


def _shape_args(size):
    """Accepts f(2, 3), f((2, 3)), f([2, 3]) and f(mini.Size(...))."""
    if len(size) == 1 and isinstance(size[0], (tuple, list)):
        size = size[0]
    out = []
    for s in size:
        if isinstance(s, Tensor):
            s = int(s)
        if not isinstance(s, builtins.int) or isinstance(s, builtins.bool):
            raise TypeError(f"size must be a sequence of ints, got an element of type {type(s).__name__}")
        out.append(s)
    return out


def _dtype_arg(d, default=None):
    d = default if d is None else d
    if isinstance(d, dtype):
        return d
    if d is None:
        return float32
    if isinstance(d, type) and issubclass(d, np.generic):
        return _BY_NUMPY.get(np.dtype(d)) or _bad_dtype(d)
    return _bad_dtype(d)


def _bad_dtype(d):
    raise TypeError(f"dtype must be a mini.dtype (mini.float32, mini.float64, mini.int64, "
                    f"mini.bool or mini.bfloat16), not {d!r}")


def _dim_index(self, dim):
    r = self.dim()
    if not -r <= dim < r:
        raise IndexError(f"Dimension out of range (expected to be in range of [{-r}, {r - 1}], but got {dim})")
    return dim % r
