"""The guard cache (issue 3): entries per backend, most recently hit first, bounded by
config.cache_size_limit (then eager, with one warning); recompile reasons, guards and graphs
in the logs; entries keep no user tensor or module alive; memory stays flat over 10^5 cached
calls. These are torch's policy (mini.config.cache_policy "recent", the default); the course
kit's own policy, A6, is tested in test_cache_policy.py.

Expected values come from running the same function eagerly on the same inputs."""
import ctypes
import gc
import os
import subprocess
import sys
import warnings
import weakref

import pytest

import mini
from capture_helpers import Checked, CountingConfig, T, fresh_mini, same, scale_times  # noqa: F401  (fresh_mini: autouse)

MB = 1024 * 1024


def _affine(x):
    return x * 2 + 1


def _scaled(x, n):
    return x * n, n * 3


class _Neg(mini.nn.Module):
    def forward(self, x):
        return -x


# ---- backends share a code object's cache -----------------------------------------------------

def test_each_backend_gets_its_own_entry():
    fn = lambda x: x + 1  # noqa: E731
    a, b = Checked(fn), Checked(fn)
    a(T(3))
    b(T(3))
    a(T(3))
    assert (a.frames, b.frames) == (1, 1)


def test_new_backend_at_a_reused_address_compiles():
    fn = lambda x: x + 1  # noqa: E731
    counts = []
    for _ in range(6):
        cnt = mini.CompileCounter()
        mini.compile(fn, backend=cnt)(T(3))
        counts.append(cnt.frame_count)
        del cnt
    assert counts == [1] * 6


# ---- most recently hit first ------------------------------------------------------------------

def test_two_entries_alternating_never_recompile():
    c = Checked(_affine)
    a, b = T(4), T(4, dtype=mini.float64)
    for _ in range(10):
        c(a)
        c(b)
    assert c.frames == 2


def _entries_checked(cf, cfg, x):
    """Calls cf(cfg, x) (checking the result); how many entries' guards it read cfg.scale in."""
    before = cfg.reads
    same(cf(cfg, x), scale_times(CountingConfig(), x))
    return cfg.reads - before


def test_hit_moves_to_front():
    cfg = CountingConfig()
    cf = mini.compile(scale_times, backend="eager")
    a, b = T(3), T(3, dtype=mini.float64)
    cf(cfg, a)  # entry A
    cf(cfg, b)  # entry B, now at the front
    cf(cfg, a)  # B fails, A hits: A moves to the front
    assert _entries_checked(cf, cfg, a) == 1  # A is first
    assert _entries_checked(cf, cfg, b) == 2  # A fails, B hits and moves to the front
    assert _entries_checked(cf, cfg, b) == 1


def test_a_new_compile_goes_in_at_the_front():
    cfg = CountingConfig()
    cf = mini.compile(scale_times, backend="eager")
    a, b, c = T(3), T(3, dtype=mini.float64), T(3, dtype=mini.int64)
    for x in (a, b, c):  # three compiles: C, then B, then A behind it
        cf(cfg, x)
    assert _entries_checked(cf, cfg, c) == 1  # the newest is checked first
    assert _entries_checked(cf, cfg, b) == 2
    assert _entries_checked(cf, cfg, a) == 3  # the oldest, after both others failed


def test_a_miss_leaves_the_order_as_it_was():
    cfg = CountingConfig()
    cf = mini.compile(scale_times, backend="eager")
    cf(cfg, T(3))
    cf(cfg, T(3, dtype=mini.float64))  # order: the float64 entry, then the float32 one
    with mini.config.patch(cache_size_limit=2), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        _entries_checked(cf, cfg, T(3, dtype=mini.int64))  # misses both: runs eagerly
    assert _entries_checked(cf, cfg, T(3, dtype=mini.float64)) == 1  # still first


# ---- cache size limit -------------------------------------------------------------------------

def test_cache_size_limit_warns_once_and_runs_eagerly():
    compiled_calls = []

    def backend(gm, example_inputs):
        compiled_calls.append(0)
        return lambda *args: (compiled_calls.append(1), gm(*args))[1]

    fn = lambda x: x * 2 + 1  # noqa: E731
    cf = mini.compile(fn, backend=backend)
    xs = [T(3, dtype=d) for d in (mini.float32, mini.float64, mini.int64)]
    with mini.config.patch(cache_size_limit=2), warnings.catch_warnings(record=True) as w:
        warnings.simplefilter("always")
        for x in xs[:2]:
            same(cf(x), fn(x))
        assert w == []
        same(cf(xs[2]), fn(xs[2]))
        same(cf(T(5)), fn(T(5)))  # another miss: eager, no second warning
        msgs = [str(m.message) for m in w if issubclass(m.category, UserWarning)]
        assert len(msgs) == 1, msgs
        assert "mini hit config.cache_size_limit (2)" in msgs[0]
        assert compiled_calls.count(0) == 2  # two compiles, never a third
        n = compiled_calls.count(1)
        same(cf(xs[0]), fn(xs[0]))  # the entries it has still run
        assert compiled_calls.count(1) == n + 1


def test_default_cache_size_limit_is_8():
    cnt = mini.CompileCounter()
    cf = mini.compile(lambda x: x + 1, backend=cnt)
    with mini.config.patch(automatic_dynamic_shapes=False), warnings.catch_warnings(record=True) as w:
        warnings.simplefilter("always")
        for n in range(1, 11):
            same(cf(T(n)), T(n) + 1)
    assert cnt.frame_count == 8
    assert [str(m.message) for m in w if "cache_size_limit" in str(m.message)][0].startswith(
        "mini hit config.cache_size_limit (8)")


def test_cache_size_limit_with_fullgraph_raises():
    cf = mini.compile(lambda x: x + 1, backend="eager", fullgraph=True)
    with mini.config.patch(cache_size_limit=1):
        cf(T(3))
        with pytest.raises(mini.Unsupported, match="cache_size_limit"):
            cf(T(3, dtype=mini.float64))


def test_cache_size_limit_0_never_compiles():
    cnt = mini.CompileCounter()
    cf = mini.compile(lambda x: x + 1, backend=cnt)
    with mini.config.patch(cache_size_limit=0), warnings.catch_warnings(record=True) as w:
        warnings.simplefilter("always")
        for _ in range(3):
            same(cf(T(3)), T(3) + 1)
    assert cnt.frame_count == 0
    assert len([m for m in w if "mini hit config.cache_size_limit (0)" in str(m.message)]) == 1


# ---- logs ---------------------------------------------------------------------------------------

def test_recompile_reason_is_logged(capsys):
    mini.set_logs("recompiles")
    cf = mini.compile(lambda x: x + 1, backend="eager")
    with mini.config.patch(automatic_dynamic_shapes=False):
        cf(T(32))
        assert "Recompiling" not in capsys.readouterr().err
        cf(T(64))
    err = capsys.readouterr().err
    assert "Recompiling function" in err
    assert "tensor 'x' size mismatch at index 0. expected 32, actual 64" in err


def test_recompile_reason_names_the_most_recent_entry(capsys):
    mini.set_logs("recompiles")
    cf = mini.compile(lambda x: x + 1, backend="eager")

    def reasons(*sizes):
        for n in sizes:
            cf(T(n))
        err = capsys.readouterr().err
        return [line.strip()[2:] for line in err.splitlines() if line.strip().startswith("- ")]

    with mini.config.patch(automatic_dynamic_shapes=False):
        assert reasons(2, 3) == ["0/0: tensor 'x' size mismatch at index 0. expected 2, actual 3"]
        # the frame's compiles are numbered 0/0, 0/1, ...; the reason is the front entry's
        assert reasons(4) == ["0/1: tensor 'x' size mismatch at index 0. expected 3, actual 4"]
        assert reasons(2, 5) == ["0/0: tensor 'x' size mismatch at index 0. expected 2, actual 5"]


def test_recompile_reason_names_constant_and_dtype(capsys):
    mini.set_logs("recompiles")
    cf = mini.compile(_scaled, backend="eager")
    cf(T(3), 2)
    cf(T(3), 3)
    assert "L['n'] == 2" in capsys.readouterr().err
    cf(T(3, dtype=mini.float64), 3)
    assert "tensor 'x' dtype mismatch" in capsys.readouterr().err


def test_no_log_when_channel_off(capsys):
    cf = mini.compile(lambda x: x + 1, backend="eager")
    cf(T(3))
    cf(T(3, dtype=mini.float64))
    assert capsys.readouterr().err == ""


def test_guards_log(capsys):
    mini.set_logs("guards")
    mini.compile(lambda x, n: x * n, backend="eager")(T(2, 3), 4)
    err = capsys.readouterr().err
    assert "TENSOR_MATCH" in err and "check_tensor(L['x']" in err and "size=[2, 3]" in err
    assert "GLOBAL_STATE" in err and "L['n'] == 4" in err


def test_graph_code_log(capsys):
    mini.set_logs("graph_code")
    mini.compile(lambda x: x.sin() + 1, backend="eager")(T(2))
    err = capsys.readouterr().err
    assert "TRACED GRAPH" in err and "def forward" in err and "sin" in err and "add" in err


def test_unknown_log_channel():
    with pytest.raises(ValueError, match="bogus"):
        mini.set_logs("bogus")


def test_mini_logs_environment_variable():
    script = ("import mini\n"
              "f = mini.compile(lambda x: x * 2, backend='eager')\n"
              "f(mini.randn(32)); f(mini.randn(32, dtype=mini.float64))\n")
    pkg = os.path.dirname(os.path.dirname(mini.__file__))
    env = dict(os.environ, MINI_LOGS="guards,recompiles,graph_code", PYTHONPATH=pkg)
    r = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    assert "TENSOR_MATCH" in r.stderr and "TRACED GRAPH" in r.stderr
    assert "tensor 'x' dtype mismatch" in r.stderr


# ---- nothing kept alive ---------------------------------------------------------------------------

def test_cache_keeps_no_tensor_alive():
    cnt = mini.CompileCounter()
    cf = mini.compile(lambda x, y: x * y, backend=cnt)
    x, y = T(3), T(3, seed=1)
    out = cf(x, y)
    refs = [weakref.ref(t) for t in (x, y, out)]
    del x, y, out
    gc.collect()
    assert [r() for r in refs] == [None] * 3
    cf(T(3, seed=2), T(3, seed=3))  # the entry is still there: a hit
    assert cnt.frame_count == 1


def test_cache_keeps_no_module_or_parameter_alive(capsys):
    cnt = mini.CompileCounter()
    cf = mini.compile(lambda m, x: m(x).relu(), backend=cnt)
    m = mini.nn.Sequential(mini.nn.Linear(3, 4), _Neg())
    x = T(2, 3)
    out = cf(m, x)
    refs = [weakref.ref(o) for o in (m, m[0], m[0].weight, x, out)]
    del m, x, out
    gc.collect()
    assert [r() for r in refs] == [None] * 5
    # the entry is still there: a module of the same structure hits it (modules are guarded
    # by structure, not identity), one with another layout logs a recompile reason against it
    m2 = mini.nn.Sequential(mini.nn.Linear(3, 4), _Neg())
    x2 = T(2, 3, seed=1)
    same(cf(m2, x2), m2(x2).relu())
    assert cnt.frame_count == 1
    mini.set_logs("recompiles")
    m3 = mini.nn.Sequential(mini.nn.Linear(3, 4))
    same(cf(m3, x2), m3(x2).relu())
    assert "Recompiling function" in capsys.readouterr().err


def test_module_compile_keeps_no_input_alive():
    m = mini.nn.Linear(3, 2)
    m.compile(backend="eager")
    x = T(4, 3)
    m(x)
    r = weakref.ref(x)
    del x
    gc.collect()
    assert r() is None


def test_returned_module_is_not_kept_alive():
    cf = mini.compile(lambda m, x: (m(x), m), backend="eager")
    m = _Neg()
    out = cf(m, T(3))
    assert out[1] is m
    r = weakref.ref(m)
    del m, out
    gc.collect()
    assert r() is None


# ---- memory flat over 10^5 cached calls -----------------------------------------------------------

def _rss():
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


class _Cfg:
    scale = 2


@pytest.mark.rss
@pytest.mark.parametrize("backend", ["eager", "counter"])
def test_memory_flat_over_1e5_cached_calls(backend):
    try:
        ctypes.CDLL("libc.so.6").mallopt(-3, 1 << 20)  # see test_memory.py
    except OSError:
        pass
    cnt = mini.CompileCounter()
    m = mini.nn.Linear(4, 4)
    cfg = _Cfg()

    def fn(x, mod, n, cfg, xs):
        return mod(x) * n + xs[0] * cfg.scale

    cf = mini.compile(fn, backend=cnt if backend == "counter" else backend)
    x, xs = T(2, 4), (T(2, 4, seed=1),)

    def loop(k):
        for _ in range(k):
            out = cf(x, m, 3, cfg, xs)
        return out

    loop(2000)
    gc.collect()
    rss0, objs0 = _rss(), len(gc.get_objects())
    out = loop(100_000)
    del out
    gc.collect()
    growth, obj_growth = _rss() - rss0, len(gc.get_objects()) - objs0
    assert growth < 10 * MB, f"RSS grew {growth / MB:.1f} MB over 10^5 cached calls"
    assert obj_growth < 50, f"{obj_growth} more Python objects after 10^5 cached calls"
    if backend == "counter":
        assert cnt.frame_count == 1
