"""Random numbers beyond rand and randn (torch/random.py's manual_seed, with torch's randint,
randperm, multinomial and the in-place fills normal_ and uniform_), composed from rand's and
randn's values. Everything draws from the generators of rand and randn, one a device, so
mini.manual_seed repeats them: a training script's batches are reproducible. Importing this
module installs Tensor.normal_, uniform_ and multinomial."""
import builtins

import numpy as np

from . import _C
from ._C import Tensor
from ._factories import _finish, from_numpy, rand, randn
from ._functional import _as_tensor
from ._grad_mode import no_grad
from ._tensor_str import _values
from ._types import Size, bool, float64, int64, _device_arg, _dtype_arg, _shape_args  # noqa: A004


def manual_seed(seed):
    _C.manual_seed(int(seed) & 0xFFFFFFFFFFFFFFFF)


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


def multinomial(input, num_samples, replacement=False, generator=None):
    return _multinomial(_as_tensor(input), num_samples, replacement, generator)


Tensor.normal_ = _normal_
Tensor.uniform_ = _uniform_
Tensor.multinomial = _multinomial
