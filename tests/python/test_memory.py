"""Memory stays flat: long loops of eager ops and of forward+backward passes do not grow the
process (RSS, which sees C++ allocations that tracemalloc cannot), intermediate tensors die
once nothing refers to them, and the Python object count does not creep up."""
import ctypes
import gc
import os
import sys
import weakref

import numpy as np
import pytest

import mini

MB = 1024 * 1024
PAGE = os.sysconf("SC_PAGE_SIZE")


@pytest.fixture(scope="module", autouse=True)
def fixed_mmap_threshold():
    """glibc raises its mmap threshold after large frees, then keeps freed 16 MB buffers in the
    heap: RSS then wanders by ~100 MB with no leak. A fixed 1 MB threshold (M_MMAP_THRESHOLD)
    makes every large buffer its own mapping, returned at free, so RSS tracks live memory."""
    try:
        ctypes.CDLL("libc.so.6").mallopt(-3, 1 << 20)
    except OSError:  # not glibc: the generous bounds below still hold
        pass
    yield


def rss():
    """Resident set size in bytes, from /proc/self/statm (field 2, in pages)."""
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * PAGE


def _growth(fn, warmup, iters):
    fn(warmup)
    gc.collect()
    before = rss()
    fn(iters)
    gc.collect()
    return rss() - before


def _pointwise_loop(n):
    x = mini.randn(16)
    for _ in range(n):
        y = x * 2 + 1
    return y


def _mlp_setup():
    mini.manual_seed(0)
    w1 = mini.randn(8, 16, requires_grad=True)
    b1 = mini.zeros(16, requires_grad=True)
    w2 = mini.randn(16, 4, requires_grad=True)
    x = mini.randn(32, 8)
    target = mini.randn(32, 4)
    return w1, b1, w2, x, target


def _mlp_step(params, x, target):
    w1, b1, w2 = params
    h = mini.gelu(x @ w1 + b1)
    out = (h @ w2).softmax(-1)
    loss = mini.mse_loss(out, target) + (h * h).mean()
    loss.backward()
    return loss


def _mlp_loop(n):
    w1, b1, w2, x, target = _mlp_setup()
    for _ in range(n):
        _mlp_step((w1, b1, w2), x, target)
        with mini.no_grad():
            for p in (w1, b1, w2):
                p.sub_(p.grad * 0.01)
                p.grad.zero_()


@pytest.mark.rss
def test_rss_flat_over_many_small_eager_ops():
    growth = _growth(_pointwise_loop, 10_000, 100_000)
    assert growth < 20 * MB, f"RSS grew by {growth / MB:.1f} MB over 2*10^5 eager ops"


@pytest.mark.rss
def test_rss_flat_over_many_backward_passes():
    growth = _growth(_mlp_loop, 100, 1_000)
    assert growth < 20 * MB, f"RSS grew by {growth / MB:.1f} MB over 10^3 backward passes"


def test_large_intermediates_are_freed():
    # 4M float32 = 16 MB per tensor; 20 rounds would leak >= 320 MB if anything were retained
    x = mini.randn(4 * 1024 * 1024, requires_grad=True)

    def rounds(n):
        for _ in range(n):
            y = x.exp()        # exp saves its output: a naive tape makes y -> node -> y cycle
            z = (y * x).tanh()
            z.sum().backward()
            del y, z

    growth = _growth(rounds, 2, 20)
    assert growth < 40 * MB, f"RSS grew by {growth / MB:.1f} MB: large intermediates leak"


def test_graph_without_backward_is_freed():
    x = mini.randn(4 * 1024 * 1024, requires_grad=True)

    def rounds(n):
        for _ in range(n):
            y = x.exp().sigmoid()  # graph built, never backpropagated, then dropped
            del y

    growth = _growth(rounds, 2, 20)
    assert growth < 40 * MB, f"RSS grew by {growth / MB:.1f} MB: unused graphs leak"


def test_numpy_views_do_not_leak():
    def rounds(n):
        for _ in range(n):
            t = mini.zeros(1024 * 1024)
            a = t.numpy()
            b = mini.from_numpy(np.ones(1024 * 1024, dtype=np.float32))
            del t, a, b

    growth = _growth(rounds, 5, 50)
    assert growth < 40 * MB, f"RSS grew by {growth / MB:.1f} MB over numpy round trips"


def test_intermediates_die_after_backward():
    w1, b1, w2, x, target = _mlp_setup()
    h = mini.gelu(x @ w1 + b1)
    out = (h @ w2).softmax(-1)
    loss = mini.mse_loss(out, target)
    refs = [weakref.ref(t) for t in (h, out, loss)]
    loss.backward()
    del h, out, loss
    gc.collect()
    alive = [i for i, r in enumerate(refs) if r() is not None]
    assert not alive, f"intermediates {alive} still alive after backward and del"
    assert w1.grad is not None


def test_intermediates_die_without_backward():
    x = mini.randn(5, requires_grad=True)
    y = x.exp()
    z = y * 2
    refs = [weakref.ref(y), weakref.ref(z)]
    del y, z
    gc.collect()
    assert all(r() is None for r in refs)


def test_grad_tensor_dies_with_leaf():
    x = mini.randn(5, requires_grad=True)
    (x * 2).sum().backward()
    gref = weakref.ref(x.grad)
    xref = weakref.ref(x)
    del x
    gc.collect()
    assert xref() is None and gref() is None


@pytest.mark.parametrize("body", ["pointwise", "backward"])
def test_python_object_count_flat(body):
    x = mini.randn(16, requires_grad=(body == "backward"))

    def run(n):
        for _ in range(n):
            y = (x * 2 + 1).relu()
            if body == "backward":
                y.sum().backward()

    run(1_000)
    gc.collect()
    before = len(gc.get_objects())
    refcount = sys.getrefcount(x)
    run(10_000)
    gc.collect()
    after = len(gc.get_objects())
    assert after - before < 100, f"{after - before} Python objects accumulated"
    assert sys.getrefcount(x) == refcount, "the input's refcount changed: references leak"


def test_cpu_memory_counts_live_storage_and_its_peak():
    # mini.metrics.memory_allocated: the bytes of CPU tensor storage alive; its peak since
    # reset_peak_memory(). A view shares its base's storage (no bytes of its own)
    gc.collect()
    base = mini.metrics.memory_allocated
    mini.metrics.reset_peak_memory()
    a = mini.zeros(256, 1024)  # 1 MiB
    b = a[:, :512]
    assert mini.metrics.memory_allocated - base == MB
    c = a * 2 + 1  # a temporary (a * 2) and c alive at once: 3 MiB at the peak
    scalars = 64   # the Python numbers 2 and 1, as 0-d tensors
    assert mini.metrics.memory_allocated - base == 2 * MB
    assert 3 * MB <= mini.metrics.max_memory_allocated - base <= 3 * MB + scalars
    del a, b, c
    gc.collect()
    assert mini.metrics.memory_allocated == base
    assert 3 * MB <= mini.metrics.max_memory_allocated - base <= 3 * MB + scalars
    mini.metrics.reset_peak_memory()
    assert mini.metrics.max_memory_allocated == base


def test_a_compiled_training_step_peaks_below_eagers_where_it_fuses():
    # layer norm written as ops: eager keeps four full-size results for the backward (x - m,
    # its square's base, the normalized x, the scaled one); the compiled step (recompute
    # partitioner) keeps two per-row values, and its backward makes x's gradient in one kernel
    def layer_norm(x, w, b):
        m = x.mean(-1, keepdim=True)
        v = ((x - m) ** 2).mean(-1, keepdim=True)
        return ((x - m) / (v + 1e-5).sqrt() * w + b).sum()

    x = mini.randn(512, 512, requires_grad=True)
    w, b = mini.randn(512, requires_grad=True), mini.randn(512, requires_grad=True)
    peaks = {}
    for mode, fn in (("eager", layer_norm), ("compiled", mini.compile(layer_norm))):
        fn(x, w, b).backward()  # compiles
        gc.collect()
        mini.metrics.reset_peak_memory()
        before = mini.metrics.memory_allocated
        fn(x, w, b).backward()
        peaks[mode] = mini.metrics.max_memory_allocated - before
    assert peaks["compiled"] < 0.75 * peaks["eager"], peaks
