"""Gradient recording switched off and on (torch/autograd/grad_mode.py): no_grad(),
enable_grad() and set_grad_enabled(), as with blocks and decorators, and is_grad_enabled().
The mode itself is C++'s (mini._C); capture traces these blocks (mini/capture/grad_mode.cpp),
which makes _GradMode objects of its own (mini/__init__.py registers the class)."""
import builtins
import functools

from . import _C


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


def is_grad_enabled():
    return _C.is_grad_enabled()
