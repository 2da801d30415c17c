"""The torch-shaped tensor surface over mini._C: dtypes, Size, device, factories, and the
Tensor methods whose argument parsing is easier in Python (varargs sizes, dtype objects,
repr). Everything that computes runs in C++."""
import builtins
import collections
import functools
import os
import warnings

import numpy as np

from . import _C

Tensor = _C.Tensor


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


def _finish(t, requires_grad):
    if requires_grad:
        t.requires_grad_(True)
    return t


# ---- factories ----------------------------------------------------------------------------
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


# ---- integer and in-place random numbers, composed from rand's uniforms ----------------------
# randint, randperm and the in-place fills draw from the same generators as rand/randn (one a
# device: mini.manual_seed repeats them), so a training script's batches are reproducible.
def _no_generator(name, generator):
    if generator is not None:
        raise NotImplementedError(f"{name}(generator=...) is not supported by mini: use mini.manual_seed")


def _int_bound(value, name):
    if isinstance(value, Tensor):
        value = value.item()
    if isinstance(value, builtins.bool) or not isinstance(value, (builtins.int, builtins.float)):
        raise TypeError(f"randint(): argument '{name}' must be int, not {type(value).__name__}")
    return builtins.int(value)


def _random_ints(shape, low, high, dtype, device, requires_grad):
    """Integers uniform over [low, high): a float64 uniform u in [0, 1) scaled by the span and
    truncated (u * span < span for every span below 2**52), then shifted by low."""
    dtype = _dtype_arg(dtype, int64)
    if low >= high:
        raise RuntimeError(f"random_ expects 'from' to be less than 'to', but got from={low} >= to={high}")
    if high - low > 2 ** 52:
        raise RuntimeError(f"randint: the range [{low}, {high}) is wider than mini draws (2**52 values)")
    if dtype is bool and (low < 0 or high > 2):
        raise RuntimeError(f"random_ expects 'from' and 'to' - 1 in [0, 1] for a bool tensor, got "
                           f"from={low}, to={high}")
    if requires_grad and dtype in (int64, bool):
        raise RuntimeError("Only Tensors of floating point and complex dtype can require gradients")
    u = rand(_shape_args((shape,)), dtype=float64, device=device)
    with no_grad():
        out = (u * builtins.float(high - low)).to(int64) + low
    return _finish(out if dtype is int64 else out.to(dtype), requires_grad)


def randint(*args, size=None, generator=None, dtype=None, device=None, requires_grad=False):
    """randint(high, size) or randint(low, high, size): integers uniform over [low, high),
    int64 unless dtype says otherwise (torch.randint)."""
    _no_generator("randint", generator)
    if size is None:
        if not args or not isinstance(args[-1], (tuple, list, Size)):
            raise TypeError("randint() missing its size: call randint(high, size) or randint(low, high, size) "
                            "with size a tuple of ints, e.g. randint(10, (2, 3))")
        args, size = args[:-1], args[-1]
    if len(args) not in (1, 2):
        raise TypeError(f"randint() takes (high, size) or (low, high, size), got {len(args) + 1} arguments")
    low, high = (0, args[0]) if len(args) == 1 else args
    return _random_ints(size, _int_bound(low, "low"), _int_bound(high, "high"), dtype, device, requires_grad)


def randint_like(t, low=0, high=None, dtype=None, device=None, requires_grad=False, generator=None):
    """randint_like(t, high) or randint_like(t, low, high): t's shape, dtype and device."""
    _no_generator("randint_like", generator)
    if high is None:
        low, high = 0, low
    return _random_ints(t.shape, _int_bound(low, "low"), _int_bound(high, "high"), dtype or t.dtype,
                        device or t._device, requires_grad)


def randperm(n, generator=None, dtype=None, device=None, requires_grad=False):
    """A random permutation of 0 .. n-1 (int64 unless dtype says otherwise): the order that
    sorts n uniforms, drawn from mini's generator and sorted on the host."""
    _no_generator("randperm", generator)
    n = _int_bound(n, "n")
    if n < 0:
        raise RuntimeError(f"n must be non-negative, got{n}")
    dtype = _dtype_arg(dtype, int64)
    if requires_grad and dtype in (int64, bool):
        raise RuntimeError("Only Tensors of floating point and complex dtype can require gradients")
    order = np.argsort(_values(rand(n, dtype=float64, device=device)), kind="stable").astype(np.int64)
    out = from_numpy(order).to(device=_device_arg(device))
    return _finish(out if dtype is int64 else out.to(dtype), requires_grad)


def _fill_random(self, values, name):
    if not self.dtype.is_floating_point:
        raise RuntimeError(f"{name} expects a floating point tensor, got {self.dtype}")
    return self.copy_(values)


def _normal_(self, mean=0.0, std=1.0, generator=None):
    """Fills self with values drawn from N(mean, std**2), in place (Tensor.normal_)."""
    _no_generator("normal_", generator)
    if std < 0:
        raise RuntimeError(f"normal expects std >= 0.0, but found std {std}")
    with no_grad():
        values = randn(self.shape, dtype=self.dtype, device=self._device) * std + mean
    return _fill_random(self, values, "normal_")


def _uniform_(self, a=0.0, b=1.0, generator=None, **kwargs):
    """Fills self with values drawn uniformly from [a, b), in place (Tensor.uniform_; torch
    names the bounds from= and to=)."""
    _no_generator("uniform_", generator)
    a, b = kwargs.pop("from", a), kwargs.pop("to", b)
    if kwargs:
        raise TypeError(f"uniform_() got an unexpected keyword argument '{next(iter(kwargs))}'")
    if a > b:
        raise RuntimeError(f"uniform_ expects to return a [from, to) range, but found from={a} > to={b}")
    with no_grad():
        values = rand(self.shape, dtype=self.dtype, device=self._device) * (b - a) + a
    return _fill_random(self, values, "uniform_")


Tensor.normal_ = _normal_
Tensor.uniform_ = _uniform_


def arange(start, end=None, step=1, dtype=None, requires_grad=False, device=None):
    if end is None:
        start, end = 0, start
    if dtype is None:
        is_int = all(isinstance(v, builtins.int) for v in (start, end, step))
        dtype = int64 if is_int else float32
    return _finish(_C.arange(start, end, step, _dtype_arg(dtype).code, _device_arg(device)),
                   requires_grad)


def manual_seed(seed):
    _C.manual_seed(int(seed) & 0xFFFFFFFFFFFFFFFF)


def set_num_threads(n):
    """The threads the CPU's parallel work uses, as torch.set_num_threads: mini's kernels, the
    generated kernels and the matmuls (OpenBLAS on OpenMP) share one pool (OMP_NUM_THREADS
    sets the starting value). At most 4 a core, and at least 64 are allowed: more only share the
    same cores, and libgomp failing to create tens of thousands of threads ends the process (or
    crashes it) at the next parallel op, where torch accepts any positive number."""
    if isinstance(n, builtins.bool) or not isinstance(n, builtins.int) or n < 1:
        raise ValueError(f"set_num_threads expects a positive int, got {n!r}")
    if n > _max_threads():
        raise ValueError(f"set_num_threads takes at most {_max_threads_said()} on this machine, got {n}")
    _C.set_num_threads(n)


def _max_threads():
    """The most threads mini runs its parallel work on (set_num_threads' limit)."""
    return max(64, 4 * (os.cpu_count() or 1))


def _max_threads_said():
    return f"{_max_threads()} threads (4 for each of its {os.cpu_count()} cores, at least 64)"


if _C.get_num_threads() > _max_threads():  # OMP_NUM_THREADS=100000: the same crash, at the first parallel op
    warnings.warn(f"OMP_NUM_THREADS={os.environ.get('OMP_NUM_THREADS')} asks for more threads than mini runs on "
                  f"this machine; it uses {_max_threads_said()}")
    _C.set_num_threads(_max_threads())


def get_num_threads():
    """The threads the CPU's next parallel kernel will use (torch.get_num_threads)."""
    return _C.get_num_threads()


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


# ---- grad mode ----------------------------------------------------------------------------
class _GradMode:
    """What no_grad(), enable_grad() and set_grad_enabled() return. A with block sets
    gradient recording to `enabled` (unless set_grad_enabled() already did) and restores
    the previous mode `prev` at its end; used as a decorator, it runs the function in such a
    block. Capture makes these objects too, so their state is plain attributes."""

    def __init__(self, enabled):
        self.enabled = enabled
        self.set_on_enter = True
        self.prev = None

    def __enter__(self):
        if self.set_on_enter:
            self.prev = _C.is_grad_enabled()
            _C.set_grad_enabled(self.enabled)

    def __exit__(self, *exc):
        _C.set_grad_enabled(self.prev)
        return False

    def __call__(self, fn):
        enabled = self.enabled

        @functools.wraps(fn)
        def grad_mode_wrapper(*args, **kwargs):
            with _GradMode(enabled):
                return fn(*args, **kwargs)
        grad_mode_wrapper._mini_grad_mode = enabled  # capture inlines fn in this mode
        return grad_mode_wrapper


def no_grad(fn=None):
    """Context manager (and decorator) that turns gradient recording off."""
    if callable(fn):
        return _GradMode(False)(fn)
    return _GradMode(False)


def enable_grad(fn=None):
    if callable(fn):
        return _GradMode(True)(fn)
    return _GradMode(True)


def set_grad_enabled(mode):
    """Turns gradient recording on or off at once; as a with block, its end restores the
    previous mode (torch.set_grad_enabled)."""
    ctx = _GradMode(builtins.bool(mode))
    ctx.__enter__()
    ctx.set_on_enter = False
    return ctx


class autocast:
    """torch.autocast: inside the block (or the decorated function), ops on `device_type`
    tensors run in mixed precision. Matmuls (and so F.linear and attention's products) cast
    their float32 operands to `dtype` and return it; softmax, log_softmax, layer_norm and
    mse_loss (so cross_entropy too) take bfloat16 inputs in float32; every other op runs in the
    dtype of its inputs, with float32 winning where they mix. float64 tensors are never cast.
    Gradients flow through the casts, and backward runs with autocast off (as torch's does).

    mini.compile captures the casts into the graph and guards on the autocast state: a compiled
    function called inside and outside a block compiles once for each. mini has no float16, so
    `dtype` is mini.bfloat16 (also the default, where torch's for "cuda" is float16). Ops not
    on either list are not cast: torch's float32 list also has exp, log, pow, rsqrt and sum."""

    def __init__(self, device_type, dtype=None, enabled=True, cache_enabled=None):
        if device_type not in ("cuda", "cpu"):
            raise ValueError(f"autocast: device_type must be 'cuda' or 'cpu', got {device_type!r}")
        dtype = bfloat16 if dtype is None else dtype
        if dtype is not bfloat16:
            raise ValueError(f"autocast: mini runs mixed precision in bfloat16 only (it has no float16), "
                             f"got dtype={dtype}; use dtype=mini.bfloat16")
        self.device_type, self.dtype, self.enabled = device_type, dtype, builtins.bool(enabled)
        self._saved = []

    def __enter__(self):
        self._saved.append(_C._autocast_get(self.device_type))
        _C._autocast_set(self.device_type, self.enabled, self.dtype.code)
        return self

    def __exit__(self, *exc):
        enabled, code = self._saved.pop()
        _C._autocast_set(self.device_type, enabled, code)
        return False

    def __call__(self, fn):
        @functools.wraps(fn)
        def autocast_wrapper(*args, **kwargs):
            with autocast(self.device_type, self.dtype, self.enabled):
                return fn(*args, **kwargs)
        return autocast_wrapper


def is_autocast_enabled(device_type="cuda"):
    """Whether ops on `device_type` tensors run under autocast now."""
    return _C._autocast_get(device_type)[0]


def get_autocast_dtype(device_type):
    """The lower precision autocast uses on `device_type` (mini.bfloat16)."""
    return _BY_CODE[_C._autocast_get(device_type)[1]]


def is_grad_enabled():
    return _C.is_grad_enabled()


# ---- Tensor methods defined in Python -----------------------------------------------------
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


def _values(self):
    """The values as a numpy array; bfloat16 ones widened to float32 (exact)."""
    t = self.detach().cpu()
    return (t.float() if t.dtype is bfloat16 else t).numpy()


def _repr(self):
    arr = _values(self)
    if self.dtype.is_floating_point and arr.size and np.all(np.isfinite(arr)) and \
            np.all(arr == np.round(arr)) and np.abs(arr).max() < 1e8:
        body = np.array2string(arr, separator=", ", prefix="tensor(",
                               formatter={"float_kind": lambda v: f"{v:.0f}."})
    else:
        body = np.array2string(arr, separator=", ", prefix="tensor(", precision=4)
    extras = []
    if self.dtype not in (float32, int64, bool) or (self.dtype is bool and False):
        extras.append(f"dtype={self.dtype!r}")
    if arr.size == 0:
        extras.append(f"size={tuple(self.shape)}")
    if self._device != "cpu":
        extras.insert(0, f"device='{self._device}'")
    if self.grad_fn is not None:
        extras.append(f"grad_fn={self.grad_fn!r}")
    elif self.requires_grad:
        extras.append("requires_grad=True")
    return "tensor(" + body + "".join(", " + e for e in extras) + ")"


def _iter(self):
    if self.dim() == 0:
        raise TypeError("iteration over a 0-d tensor")
    for i in range(len(self)):
        yield self[i]


def _array(self, dtype=None, copy=None):
    arr = self.detach().numpy()  # a CUDA tensor raises torch's TypeError (use .cpu() first)
    return arr.astype(dtype) if dtype is not None else arr


def _reshape(self, *shape):
    return self._reshape(_shape_args(shape))


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


# ---- functions ------------------------------------------------------------------------------
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


def _flatten(self, start_dim=0, end_dim=-1):
    if self.dim() == 0:
        return self.reshape(1)
    r = self.dim()
    s, e = start_dim % r, end_dim % r
    shape = list(self.shape[:s]) + [-1] + list(self.shape[e + 1:])
    return self.reshape(shape)


Tensor.flatten = _flatten


def _dim_index(self, dim):
    r = self.dim()
    if not -r <= dim < r:
        raise IndexError(f"Dimension out of range (expected to be in range of [{-r}, {r - 1}], but got {dim})")
    return dim % r


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


return_types_topk = collections.namedtuple("topk", ["values", "indices"])


def _check_index_range(index, low, n, what, d):
    """IndexError naming the first index outside [low, n), as torch raises: a one-hot select
    would read such an index as 0. The values are read on the host (inside a compiled function
    this is a graph break, and the op runs eagerly)."""
    if ((index < low).long() + (index >= n).long()).sum().item() > 0:
        host = _values(index)
        bad = host[(host < low) | (host >= n)].flat[0]
        raise IndexError(f"{what}(): index {bad} is out of range for dim {d} of size {n}")


def _one_hot_gather(self, d, index):
    """gather along dim d of indices known to be in [0, size): a one-hot select and a sum, so
    that it has a gradient and runs on every device and in a graph (memory of index.numel() x
    self.size(d) booleans: for the small selections models make)."""
    source = self
    for e in range(self.dim()):  # torch reads only the first index.size(e) entries of other dims
        if e != d and index.shape[e] < self.shape[e]:
            source = source.narrow(e, 0, index.shape[e])
    classes = arange(self.shape[d], device=self.device)
    for _ in range(self.dim() - d - 1):
        classes = classes.unsqueeze(-1)
    hit = index.unsqueeze(d + 1) == classes  # [..., k, n, ...]
    return where(hit, source.unsqueeze(d), 0).sum(d + 1)


def _gather(self, dim, index):
    """out[..., j, ...] = self[..., index[..., j, ...], ...] along dim (torch.gather)."""
    d = _dim_index(self, dim)
    if index.dtype != int64 or index.dim() != self.dim():
        raise RuntimeError(f"gather(): index must be an int64 tensor with as many dims as input, got "
                           f"{index.dtype}{list(index.shape)} for input {list(self.shape)}")
    _check_index_range(index, 0, self.shape[d], "gather", d)
    return _one_hot_gather(self, d, index)


def _index_select(self, dim, index):
    """The slices of self along dim at the int64 indices of the 1-d `index` (negative ones
    count from the end), in their order: gather of index laid along dim."""
    d = _dim_index(self, dim)
    if index.dim() != 1:
        raise IndexError(f"index_select(): index must be 1-d, got {list(index.shape)}")
    n = self.shape[d]
    _check_index_range(index, -n, n, "index_select", d)
    index = where(index < 0, index + n, index)
    shape = list(self.shape)
    shape[d] = index.shape[0]
    view = [1] * self.dim()
    view[d] = index.shape[0]
    return _one_hot_gather(self, d, index.reshape(view).expand(shape))


def _topk(self, k, dim=-1, largest=True, sorted=True):
    """(values, indices) of the k largest (smallest) entries along dim, largest first; ties by
    position. The order is found on the host (numpy's stable argsort of a copy), the values
    are gathered on the tensor's device, so they carry a gradient."""
    d = _dim_index(self, dim)
    if not 0 <= k <= self.shape[d]:
        raise RuntimeError(f"topk(): k ({k}) must be between 0 and the size of dim {dim} ({self.shape[d]})")
    host = _values(self.detach())
    order = np.argsort(-host if largest else host, axis=d, kind="stable")
    order = np.take(order, np.arange(k), axis=d)
    indices = from_numpy(np.ascontiguousarray(order.astype(np.int64))).to(self.device)
    return return_types_topk(_one_hot_gather(self, d, indices), indices)  # in range by construction


def _narrow(self, dim, start, length):
    d = _dim_index(self, dim)
    return self[(slice(None),) * d + (slice(start, start + length),)]


def _advanced_position(idx):
    """Where a list or an int64 tensor sits in a basic index tuple (one of them at most), with
    the tuple; None where the index is basic (C++ handles it)."""
    items = idx if isinstance(idx, tuple) else (idx,)
    found = None
    for p, i in enumerate(items):
        if isinstance(i, list) or (isinstance(i, Tensor) and i.dtype in (int64, bool)):
            if found is not None:
                raise IndexError("mini supports one list or tensor index per indexing, with slices around it")
            found = p
    return None if found is None else (found, items)


def _getitem(self, idx):
    adv = _advanced_position(idx) if isinstance(idx, (tuple, list, Tensor)) else None
    if adv is None:
        return _basic_getitem(self, idx)
    p, items = adv
    sel = items[p]
    if isinstance(sel, Tensor) and sel.dtype == bool:
        raise IndexError("indexing with a boolean mask gives a shape known only from the mask's values; "
                         "mini supports it in assignment (x[mask] = v) and mini.where(mask, x, other)")
    if any(i is Ellipsis or i is None or isinstance(i, builtins.int) for i in items[:p]):
        raise IndexError("mini supports a list or tensor index after slices only (x[:, [1, 2]], not after "
                         "an int, None or ...)")
    if isinstance(sel, list):
        if any(isinstance(i, builtins.bool) for i in sel):  # torch reads a list of bools as a mask
            raise IndexError("indexing with a list of bools is a boolean mask, whose shape is known only from its "
                             "values; use mini.where(mask, x, other), or a list of int positions")
        sel = tensor(sel, dtype=int64, device=self.device)
    rest = _basic_getitem(self, items[:p] + (slice(None),) + items[p + 1:]) if len(items) > 1 else self
    if sel.dim() != 1:
        raise IndexError(f"mini supports a 1-d list or tensor index, got {list(sel.shape)}")
    return _index_select(rest, p, sel)


def _setitem(self, idx, value):
    if isinstance(idx, Tensor) and idx.dtype == bool:  # x[mask] = v: masked_fill_, in place
        return self.masked_fill_(idx, value)
    if _advanced_position(idx) is not None if isinstance(idx, (tuple, list, Tensor)) else False:
        raise IndexError("mini supports assignment through a boolean mask (x[mask] = v) and basic indices, "
                         "not through a list or an int64 tensor")
    return _basic_setitem(self, idx, value)


def _multinomial(self, num_samples, replacement=False, generator=None):
    """num_samples class indices a row, each drawn with probability proportional to its weight
    in the row (torch.multinomial); without replacement a class is drawn at most once. The
    draws are uniforms from mini's generator (mini.manual_seed repeats them), turned into
    classes on the host."""
    if generator is not None:
        raise NotImplementedError("multinomial(generator=...) is not supported by mini: use mini.manual_seed")
    if self.dim() not in (1, 2):
        raise RuntimeError(f"multinomial(): prob_dist must be 1 or 2 dim, got {self.dim()}")
    p = _values(self.detach()).astype(np.float64).reshape(-1, self.shape[-1])
    if (p < 0).any() or not np.isfinite(p).all():
        raise RuntimeError("multinomial(): probability tensor contains either inf, nan or element < 0")
    if (p.sum(-1) <= 0).any():
        raise RuntimeError("multinomial(): invalid multinomial distribution (sum of probabilities <= 0)")
    if not replacement and num_samples > p.shape[-1]:
        raise RuntimeError("multinomial(): cannot sample n_sample > prob_dist.size(-1) samples without replacement")
    u = _values(rand(p.shape[0], num_samples, dtype=float64))
    out = np.empty((p.shape[0], num_samples), dtype=np.int64)
    for r in range(p.shape[0]):
        w = p[r].copy()
        for s in range(num_samples):
            c = np.cumsum(w)
            out[r, s] = min(int(np.searchsorted(c, u[r, s] * c[-1], side="right")), len(w) - 1)
            while w[out[r, s]] == 0:  # a zero-weight class is never drawn
                out[r, s] -= 1
            if not replacement:
                w[out[r, s]] = 0.0
    out = out.reshape(tuple(self.shape[:-1]) + (num_samples,))
    return from_numpy(out).to(self.device)


_basic_getitem = Tensor.__getitem__
_basic_setitem = Tensor.__setitem__
Tensor.__getitem__ = _getitem
Tensor.__setitem__ = _setitem
Tensor.gather = _gather
Tensor.index_select = _index_select
Tensor.topk = _topk
Tensor.narrow = _narrow
Tensor.multinomial = _multinomial
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


def gather(input, dim, index):
    return _gather(_as_tensor(input), dim, index)


def index_select(input, dim, index):
    return _index_select(_as_tensor(input), dim, index)


def topk(input, k, dim=-1, largest=True, sorted=True):
    return _topk(_as_tensor(input), k, dim, largest, sorted)


def multinomial(input, num_samples, replacement=False, generator=None):
    return _multinomial(_as_tensor(input), num_samples, replacement, generator)


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


class _Metrics:
    """Counters of the kernels mini ran: kernel_launches, bytes_moved (bytes read and
    written by those kernels), generated_kernel_count (kernels emitted by codegen) and matmuls
    (matrix products by dtype); and the
    CPU tensors' memory: memory_allocated (bytes of storage alive now) and
    max_memory_allocated (the most alive at once since reset_peak_memory(); CUDA tensors:
    mini.cuda.max_memory_allocated)."""

    @property
    def memory_allocated(self):
        return _C.cpu_memory()[0]

    @property
    def max_memory_allocated(self):
        return _C.cpu_memory()[1]

    def reset_peak_memory(self):
        _C.reset_cpu_memory_peak()

    @property
    def kernel_launches(self):
        return _C.metrics_get()[0]

    @property
    def bytes_moved(self):
        return _C.metrics_get()[1]

    @property
    def generated_kernel_count(self):
        return _C.metrics_get()[2]

    @property
    def matmuls(self):
        """{dtype name: matrix products run with operands of that dtype} since the last reset()
        (eager matmuls and compiled graphs' alike): under autocast every one is "bfloat16"."""
        return dict(_C.metrics_matmuls())

    def reset(self):
        _C.metrics_reset()

    def snapshot(self):
        k, b, g = _C.metrics_get()
        return dict(kernel_launches=k, bytes_moved=b, generated_kernel_count=g)

    def __repr__(self):
        return "mini.metrics(" + ", ".join(f"{k}={v}" for k, v in self.snapshot().items()) + ")"


metrics = _Metrics()
