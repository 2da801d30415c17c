"""Mixed precision (torch/amp/autocast_mode.py): autocast, as a with block or a decorator, and
the state it sets, is_autocast_enabled() and get_autocast_dtype(). The state is C++'s
(mini._C): eager ops read it and compiled graphs guard on it. mini.amp re-exports autocast
under torch.amp's name."""
import builtins
import functools

from . import _C
from ._types import bfloat16, _BY_CODE


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
