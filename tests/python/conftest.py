"""Shared setup and helpers for mini's Python tests.

The importable package is built by CMake into <repo>/build/python (mini/_C*.so plus the Python
sources); put it first on sys.path so `import mini` works from the repo root, from ctest, or
from anywhere else. MINI_PYTHON_DIR overrides the location (e.g. a second build folder).

Expected values in these tests always come from numpy or from hand computation, never from
mini itself. Conversions back to numpy go through `tolist()` so that a bug in `numpy()` /
`__array__` cannot hide a bug in an op (those paths have their own tests).
"""
import math
import os
import re
import sys
from pathlib import Path

import numpy as np
import pytest

REPO = Path(__file__).resolve().parents[2]
_PY_DIR = os.environ.get("MINI_PYTHON_DIR", str(REPO / "build" / "python"))
if _PY_DIR not in sys.path:
    sys.path.insert(0, _PY_DIR)

import mini  # noqa: E402  (after the sys.path tweak on purpose)

# ---------------------------------------------------------------------------------------------
# dtypes

DTYPES = [mini.float32, mini.float64, mini.int64, mini.bool]
BFLOAT16 = getattr(mini, "bfloat16", None)  # None until bfloat16 lands (issue 12)
FLOAT_DTYPES = [mini.float32, mini.float64]
NUMERIC_DTYPES = [mini.float32, mini.float64, mini.int64]
_NP_OF = [(mini.float32, np.float32), (mini.float64, np.float64),
          (mini.int64, np.int64), (mini.bool, np.bool_)]


def np_dtype(dt):
    """The numpy dtype matching a mini dtype."""
    for m, n in _NP_OF:
        if dt == m:
            return np.dtype(n)
    raise AssertionError(f"unknown mini dtype {dt!r}")


def mini_dtype(npdt):
    """The mini dtype matching a numpy dtype."""
    npdt = np.dtype(npdt)
    for m, n in _NP_OF:
        if npdt == np.dtype(n):
            return m
    raise AssertionError(f"no mini dtype for {npdt}")


def dtype_id(dt):
    return str(dt).split(".")[-1]


# ---------------------------------------------------------------------------------------------
# conversions and comparisons


def to_np(t):
    """A fresh numpy copy of a mini tensor, built from tolist() (independent of numpy()).
    bfloat16 values come back as float32 (numpy has no bfloat16; every bfloat16 is exact in
    float32)."""
    assert isinstance(t, mini.Tensor), f"expected a mini.Tensor, got {type(t).__name__}"
    shape = tuple(t.shape)
    npdt = np.float32 if BFLOAT16 is not None and t.dtype == BFLOAT16 else np_dtype(t.dtype)
    return np.array(t.tolist(), dtype=npdt).reshape(shape)


def bf16_round(a):
    """float32 values rounded to the nearest bfloat16 (ties to even), as float32: what a
    bfloat16 store of a float32 result holds (NaN stays NaN)."""
    a = np.asarray(a, dtype=np.float32)
    bits = a.view(np.uint32).astype(np.uint64)
    bits = (bits + 0x7FFF + ((bits >> 16) & 1)) & 0xFFFF0000
    out = bits.astype(np.uint32).view(np.float32)
    return np.where(np.isnan(a), a, out)


# The device mk() puts new tensors on: "cpu", or "cuda" while a test runs with the `device`
# fixture's cuda param. The op catalog builds every input with mk(), so the fixture alone moves
# a whole test to the GPU.
_MK_DEVICE = ["cpu"]


def mk(arr, requires_grad=False, dtype=None, device=None):
    """A mini tensor holding a copy of a numpy array (or anything np.asarray accepts), on
    `device` (default: the `device` fixture's, else the CPU)."""
    arr = np.asarray(arr)
    if dtype is None:
        dtype = mini_dtype(arr.dtype)
    device = device or _MK_DEVICE[0]
    on = {} if device == "cpu" else {"device": device}
    return mini.tensor(arr.tolist() if arr.ndim else arr.item(), dtype=dtype,
                       requires_grad=requires_grad, **on)


def cuda_like(x):
    """x on the GPU with x's own strides and storage offset 0: x.cuda() makes a strided tensor
    contiguous, and a compiled graph takes only the layout it was compiled for."""
    if x.is_contiguous():
        return x.cuda()
    span = 1 + sum((size - 1) * stride for size, stride in zip(x.shape, x.stride()))
    y = mini.empty(span, dtype=x.dtype, device="cuda").as_strided(tuple(x.shape), x.stride(), 0)
    # an expanded x (a stride-0 dim) shares memory along that dim: write its first index, which
    # every index reads (a write through all of them is refused, as torch refuses it)
    first = tuple(slice(0, 1) if stride == 0 else slice(None) for stride in x.stride())
    y[first].copy_(x[first].cuda())
    return y


def tol_for(dt):
    """(rtol, atol) suitable for comparing a result of dtype `dt` with a float64 reference."""
    if dt == mini.float32:
        return 1e-5, 1e-6
    if dt == mini.float64:
        return 1e-10, 1e-12
    if BFLOAT16 is not None and dt == BFLOAT16:
        return 8e-3, 1e-2  # 8 bits of mantissa: one rounding is a relative 2^-8
    return 0, 0


def assert_close(t, expected, rtol=None, atol=None, dtype=None):
    """t (mini tensor) equals `expected` (numpy-like) in shape, dtype (if given) and values."""
    expected = np.asarray(expected)
    assert isinstance(t, mini.Tensor), f"expected a mini.Tensor, got {type(t).__name__}"
    assert tuple(t.shape) == expected.shape, f"shape {tuple(t.shape)} != {expected.shape}"
    if dtype is not None:
        assert t.dtype == dtype, f"dtype {t.dtype} != {dtype}"
    got = to_np(t)
    if rtol is None or atol is None:
        r, a = tol_for(t.dtype)
        rtol = r if rtol is None else rtol
        atol = a if atol is None else atol
    if got.dtype == np.bool_ or expected.dtype == np.bool_:
        np.testing.assert_array_equal(got, expected)
    else:
        np.testing.assert_allclose(got.astype(np.float64), expected.astype(np.float64),
                                   rtol=rtol, atol=atol)


# ---------------------------------------------------------------------------------------------
# reference implementations


def np_sigmoid(x):
    return 1.0 / (1.0 + np.exp(-x))


_erf = np.vectorize(math.erf, otypes=[np.float64])


def np_gelu(x, approximate="none"):
    x = np.asarray(x, dtype=np.float64)
    if approximate == "tanh":
        return 0.5 * x * (1.0 + np.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * x ** 3)))
    return 0.5 * x * (1.0 + _erf(x / math.sqrt(2.0)))


def np_softmax(x, dim):
    e = np.exp(x - x.max(axis=dim, keepdims=True))
    return e / e.sum(axis=dim, keepdims=True)


def np_log_softmax(x, dim):
    m = x.max(axis=dim, keepdims=True)
    return x - m - np.log(np.exp(x - m).sum(axis=dim, keepdims=True))


def np_layer_norm(x, normalized_shape, weight=None, bias=None, eps=1e-5):
    axes = tuple(range(x.ndim - len(normalized_shape), x.ndim))
    mu = x.mean(axis=axes, keepdims=True)
    var = ((x - mu) ** 2).mean(axis=axes, keepdims=True)  # biased, like torch
    y = (x - mu) / np.sqrt(var + eps)
    if weight is not None:
        y = y * weight
    if bias is not None:
        y = y + bias
    return y


# ---------------------------------------------------------------------------------------------
# gradient checking


def gradcheck(fn, *arrays, eps=1e-6, rtol=1e-4, atol=1e-6, seed=0):
    """Checks mini's backward() for `fn` against central finite differences in float64.

    fn takes mini tensors (one per array) and returns a mini tensor. The scalar checked is
    L = sum(fn(*xs) * R) for a fixed random R of the output's shape (R = 1 for 0-d outputs, so
    plain backward() is used there), which exercises non-trivial upstream gradients.
    """
    arrays = [np.array(a, dtype=np.float64) for a in arrays]
    leaves = [mk(a, requires_grad=True) for a in arrays]
    out = fn(*leaves)
    assert isinstance(out, mini.Tensor)
    assert out.requires_grad, "output of a differentiable op does not require grad"
    rng = np.random.default_rng(seed)
    R = rng.uniform(-1.0, 1.0, size=tuple(out.shape)) if out.dim() else np.array(1.0)
    if out.dim():
        out.backward(mk(R))
    else:
        out.backward()

    def loss(arrs):
        with mini.no_grad():
            o = fn(*[mk(a) for a in arrs])
        return float((to_np(o).astype(np.float64) * R).sum())

    for i, (a, leaf) in enumerate(zip(arrays, leaves)):
        assert leaf.grad is not None, f"input {i}: .grad is None after backward()"
        g = leaf.grad
        assert tuple(g.shape) == a.shape, f"input {i}: grad shape {tuple(g.shape)} != {a.shape}"
        assert g.dtype == mini.float64, f"input {i}: grad dtype {g.dtype}"
        num = np.zeros_like(a)
        flat = num.reshape(-1)
        for j in range(a.size):
            plus = [x.copy() for x in arrays]
            minus = [x.copy() for x in arrays]
            plus[i].reshape(-1)[j] += eps
            minus[i].reshape(-1)[j] -= eps
            flat[j] = (loss(plus) - loss(minus)) / (2 * eps)
        np.testing.assert_allclose(to_np(g), num, rtol=rtol, atol=atol,
                                   err_msg=f"gradient of input {i} differs from finite differences")


# ---------------------------------------------------------------------------------------------
# error messages


def shape_regex(shape):
    """Matches a shape written as [3, 4], (3, 4), 3x4 or 3 x 4 (with word boundaries)."""
    return r"(?<![\d.])" + r"\s*(?:,|x|×|\*)\s*".join(str(s) for s in shape) + r"(?![\d.])"


def assert_mentions_shape(msg, shape):
    assert re.search(shape_regex(shape), msg), f"message does not name shape {list(shape)}: {msg!r}"


def assert_mentions_numbers(msg, *numbers):
    for n in numbers:
        assert re.search(r"(?<![\d.])" + re.escape(str(n)) + r"(?![\d.])", msg), \
            f"message does not mention {n}: {msg!r}"


# ---------------------------------------------------------------------------------------------
# devices


# why the CUDA tests cannot run here ("" when they can): labs/measure.py says it for the labs too
sys.path.insert(0, str(REPO / "labs"))
from measure import cuda_unavailable_reason  # noqa: E402

CUDA_SKIP_REASON = cuda_unavailable_reason()
HAS_CUDA = not CUDA_SKIP_REASON
# for a test or a module that needs a GPU: marked `cuda` (pytest -m cuda) and skipped without one
requires_cuda = [pytest.mark.cuda, pytest.mark.skipif(not HAS_CUDA, reason=CUDA_SKIP_REASON)]
# the tests of what a machine without a usable GPU says when asked for CUDA
requires_no_cuda = pytest.mark.skipif(
    HAS_CUDA, reason="this machine has a usable GPU; the test checks the error given without one")
DEVICES = ["cpu", pytest.param("cuda", marks=pytest.mark.cuda)]


# ---------------------------------------------------------------------------------------------
# fixtures


@pytest.fixture(params=DEVICES)
def device(request):
    """"cpu" or "cuda" (skipped, saying why, without a GPU); mk() builds on it meanwhile.
    A module runs its whole catalog on both with `pytestmark = pytest.mark.usefixtures("device")`."""
    if request.param == "cuda" and not HAS_CUDA:
        pytest.skip(CUDA_SKIP_REASON)
    _MK_DEVICE[0] = request.param
    yield request.param
    _MK_DEVICE[0] = "cpu"


@pytest.fixture
def rng():
    return np.random.default_rng(1234)


@pytest.fixture
def metrics():
    """mini.metrics, reset before the test body."""
    mini.metrics.reset()
    return mini.metrics


@pytest.fixture(scope="module")
def own_cache_dir(tmp_path_factory):
    """A fresh mini.config.cache_dir for one test module, so that its compiles neither reuse
    nor leave kernels in the user's cache; the previous directory is restored afterwards.
    Use it with `pytestmark = pytest.mark.usefixtures("own_cache_dir")`."""
    saved = mini.config.cache_dir
    mini.config.cache_dir = str(tmp_path_factory.mktemp("mini_cache"))
    yield mini.config.cache_dir
    mini.config.cache_dir = saved


# Assignments (scripts/make_assignment.py, notes/assignments.md): `pytest -m a3` runs the tests
# of assignment A3, which fail in a student tree until its regions are written.
ASSIGNMENTS = {
    "a1": "A1 derivative rules (mini/tensor/derivatives.h)",
    "a2": "A2 the recompute partitioner (mini/autograd/partition.cpp)",
    "a3": "A3 fusion legality and the greedy scheduler (mini/fusion/schedule.cpp)",
    "a4": "A4 how each op is spelled in C++ (mini/codegen/c_style.cpp)",
    "a5": "A5 the tensor guard (mini/guards/guards.cpp)",
    "a6": "A6 a guard cache policy (mini/guards/cache.cpp)",
    "a7": "A7 automatic dynamic shapes (mini/capture/automatic_dynamic.cpp)",
    "a8": "A8 the min-cut partitioner (mini/autograd/partition.cpp)",
    "a9": "A9 resume units (mini/capture/resume.cpp, mini/capture/tracer.cpp)",
    "a10": "A10 a CUDA reduction's layout (mini/codegen/cuda_launch.cpp)",
}


@pytest.hookimpl(tryfirst=True)  # before pytest's -m selection reads the markers
def pytest_collection_modifyitems(items):
    """A test belongs to one assignment at most, so that it passes once that assignment is
    written whatever else is a stub (scripts/check_kit.py). A module's KIT_ASSIGNMENT ("a2")
    tags each of its tests that names no assignment itself, unless it is marked no_assignment
    (it passes through the assignment's stub: it tests nothing of it)."""
    shared = []
    for item in items:
        own = [marker for marker in ASSIGNMENTS if item.get_closest_marker(marker)]
        default = getattr(getattr(item, "module", None), "KIT_ASSIGNMENT", None)
        if not own and default and not item.get_closest_marker("no_assignment"):
            item.add_marker(default)
        if len(own) > 1 or (own and item.get_closest_marker("no_assignment")):
            shared.append(f"{item.nodeid} ({', '.join(own + (['no_assignment'] if len(own) == 1 else []))})")
    if shared:
        raise pytest.UsageError("a test belongs to one assignment at most; these carry several:\n  "
                                + "\n  ".join(shared))


@pytest.fixture(autouse=True)
def _assignment_stubs_raise_in_their_own_tests(request, monkeypatch):
    """In a student tree a stub falls back (eager kernels, a recompile) so that the rest of mini
    runs; in the tests of its own assignment it raises, so that they fail until it is written
    (mini/tensor/errors.h, is_assignment_stub)."""
    own = [marker.upper() for marker in ASSIGNMENTS if request.node.get_closest_marker(marker)]
    if own:
        monkeypatch.setenv("MINI_ASSIGNMENT_STRICT", ",".join(own))
    yield


def pytest_configure(config):
    # rss: asserts on the process's resident memory. The sanitized run (python-san in
    # tests/python_versions/run.sh) leaves these out: ASan's quarantine holds freed memory.
    config.addinivalue_line("markers", "rss: asserts that resident memory stays flat")
    # cuda: needs a CUDA device (skipped without one); scripts/gpu_cuda.sh runs `pytest -m cuda`
    config.addinivalue_line("markers", "cuda: runs on a CUDA device (skipped without one)")
    config.addinivalue_line("markers", "no_assignment: not its module's KIT_ASSIGNMENT (it passes through the stub)")
    for marker, what in ASSIGNMENTS.items():
        config.addinivalue_line("markers", f"{marker}: the tests of assignment {what}")
