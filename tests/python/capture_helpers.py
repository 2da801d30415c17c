"""Helpers shared by the capture tests (test_capture*.py, test_guards.py).

Expected values always come from running the same function eagerly on the same inputs,
before the compiled call; nothing is copied from mini's compiled output."""
import numpy as np
import pytest

import mini
from conftest import to_np

# Backends stay alive for the whole test: mini keys cache entries by the backend's address, so
# a new backend born where a dead one lived would share its entries (an xfail in
# test_capture_cache.py shows it). The fixture drops them after mini.reset().
ALIVE = []


@pytest.fixture(autouse=True)
def fresh_mini():
    """mini.reset() and no log channels, before and after each test."""
    mini.reset()
    mini.set_logs()
    yield
    mini.reset()
    mini.set_logs()
    ALIVE.clear()


class CountingConfig:
    """`scale` is a property: every guard check of `cfg.scale` reads it once (`reads` counts
    the entries whose guards a lookup checked, in a function that reads cfg.scale first)."""

    def __init__(self):
        self.reads = 0

    @property
    def scale(self):
        self.reads += 1
        return 3


def scale_times(cfg, x):
    # reads cfg.scale before x: each entry checks cfg.scale (counted), then x's guards
    return cfg.scale * x


def T(*shape, seed=0, lo=0.5, hi=2.0, dtype=mini.float32, requires_grad=False):
    """A tensor of uniform values in [lo, hi) from a fixed seed."""
    rng = np.random.default_rng(seed)
    return mini.tensor(rng.uniform(lo, hi, size=shape).tolist(), dtype=dtype, requires_grad=requires_grad)


def same(got, expected, path="result"):
    """Same structure and types; tensors: shape, dtype, requires_grad and values."""
    if isinstance(expected, mini.Tensor):
        assert isinstance(got, mini.Tensor), f"{path}: expected a Tensor, got {type(got).__name__}"
        assert tuple(got.shape) == tuple(expected.shape), f"{path}: shape {tuple(got.shape)} != {tuple(expected.shape)}"
        assert got.dtype == expected.dtype, f"{path}: dtype {got.dtype} != {expected.dtype}"
        assert got.requires_grad == expected.requires_grad, f"{path}: requires_grad differs"
        np.testing.assert_allclose(to_np(got).astype(np.float64), to_np(expected).astype(np.float64),
                                   rtol=1e-5, atol=1e-6, err_msg=path)
    elif isinstance(expected, dict):
        assert type(got) is dict, f"{path}: {type(got).__name__} != dict"
        assert list(got) == list(expected), f"{path}: keys {list(got)} != {list(expected)}"
        for k in expected:
            same(got[k], expected[k], f"{path}[{k!r}]")
    elif isinstance(expected, (tuple, list)):
        assert type(got) is type(expected), f"{path}: {type(got).__name__} != {type(expected).__name__}"
        assert len(got) == len(expected), f"{path}: length {len(got)} != {len(expected)}"
        for i, (g, e) in enumerate(zip(got, expected)):
            same(g, e, f"{path}[{i}]")
    else:
        assert type(got) is type(expected) and got == expected, f"{path}: {got!r} != {expected!r}"


def chain(steps):
    """A function of `steps` pointwise steps (x * 1.0001 + 0.001 + i * 1e-7).sin(), the trip
    count a closure cell: one code object for every length. Each step's constant is its own,
    so the kernels fusion cuts the chain into are distinct bodies: the source, and the compile,
    grow with the chain (kernels of one body are compiled once: codegen::kernel_body)."""
    def f(x):
        for i in range(steps):
            x = (x * 1.0001 + (0.001 + i * 1e-7)).sin()
        return x
    return f


def run_both(fn, *args, frames=1, ops=None, **kwargs):
    """Runs fn eagerly, then compiled with a CompileCounter; checks result, frames and ops."""
    expected = fn(*args, **kwargs)
    cnt = mini.CompileCounter()
    ALIVE.append(cnt)
    got = mini.compile(fn, backend=cnt)(*args, **kwargs)
    same(got, expected)
    assert cnt.frame_count == frames, f"frame_count {cnt.frame_count} != {frames}"
    if ops is not None:
        assert cnt.op_count == ops, f"op_count {cnt.op_count} != {ops}"
    return cnt


class Checked:
    """A compiled fn with its own CompileCounter; each call is checked against the eager fn."""

    def __init__(self, fn, **kw):
        self.fn, self.cnt = fn, mini.CompileCounter()
        ALIVE.append(self)
        self.cf = mini.compile(fn, backend=self.cnt, **kw)

    def __call__(self, *args, **kwargs):
        expected = self.fn(*args, **kwargs)
        got = self.cf(*args, **kwargs)
        same(got, expected)
        return got

    @property
    def frames(self):
        return self.cnt.frame_count


def calls(fn, *arg_lists, frames):
    """Calls a Checked fn once per argument tuple, then checks how many frames compiled."""
    c = Checked(fn)
    for args in arg_lists:
        c(*args)
    assert c.frames == frames, f"frame_count {c.frames} != {frames}"
    return c


def counted(fn, **kw):
    """fn compiled with a fresh CompileCounter backend (kept alive for the test): (cf, cnt)."""
    cnt = mini.CompileCounter()
    ALIVE.append(cnt)
    return mini.compile(fn, backend=cnt, **kw), cnt


def frames_over(fn, arg_lists, **kw):
    """Calls fn compiled once per argument tuple (checking each result against eager);
    returns the frame count after each call."""
    cf, cnt = counted(fn, **kw)
    out = []
    for args in arg_lists:
        expected = fn(*args)
        same(cf(*args), expected)
        out.append(cnt.frame_count)
    return out
