"""Threads calling and compiling compiled functions at the same time (issue 11, part 4).

Each scenario runs in a child process under a timeout, so a deadlock fails the test instead of
hanging the run; the child compares every compiled result with the eager one and prints "ok".
A static initializer that imported a module (linecache, on a frame's first traced line) held
the C++ initialization guard across the import, which lets other threads run: the next thread
to trace waited on the guard holding the GIL, and the importing thread waited for the GIL."""
import os
import subprocess
import sys

import pytest

import mini

PRELUDE = """\
import faulthandler, threading, warnings
import mini
faulthandler.dump_traceback_later({timeout}, exit=True)  # a hang shows every thread's stack
warnings.simplefilter("ignore")  # the cache size limit may be reached: it warns, results hold
errors = []

def check(fn, x):
    try:
        got, expected = compiled[fn](x), fn(x)
        if got.shape != expected.shape or not mini.allclose(got, expected, rtol=1e-4, atol=1e-5):
            errors.append((fn.__name__, list(x.shape)))
    except BaseException as e:
        errors.append(repr(e))

def run_threads(targets):
    ts = [threading.Thread(target=t) for t in targets]
    [t.start() for t in ts]
    [t.join() for t in ts]
"""


def run_child(body, tmp_path, timeout=40):
    pkg = os.path.dirname(os.path.dirname(mini.__file__))
    env = dict(os.environ, PYTHONPATH=pkg, MINI_CACHE_DIR=str(tmp_path))
    script = PRELUDE.format(timeout=timeout) + body + "\nprint('ok' if not errors else errors[:5])\n"
    r = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True,
                       timeout=timeout + 30)
    assert r.returncode == 0, r.stderr[-3000:]
    assert r.stdout.strip().splitlines()[-1] == "ok", r.stdout[-2000:]


FIRST_CALLS = """
def f(x):
    return x.sin() * 2 + x.cos()
compiled = {{f: mini.compile(f, backend="{backend}")}}
start = threading.Barrier(8)  # all eight reach the first call together
run_threads([lambda k=k: (start.wait(), check(f, mini.randn(4, k + 2))) for k in range(8)])
"""


@pytest.mark.parametrize("attempt", range(2))  # fresh processes: the hang needs a first call
def test_eight_threads_making_the_first_call_at_once(tmp_path, attempt):
    run_child(FIRST_CALLS.format(backend="inductor"), tmp_path)


CHANGING_SHAPES = """
def f(x):
    return x.sin() * 2 + x.cos()
compiled = {{f: mini.compile(f, backend="{backend}")}}
def work(k):
    for i in range(200):
        check(f, mini.randn(3, (i + k) % 7 + 1))
run_threads([lambda k=k: work(k) for k in range(4)])
"""


@pytest.mark.parametrize("backend", ["eager", "aot_eager", "inductor"])
def test_four_threads_calling_with_changing_shapes(tmp_path, backend):
    run_child(CHANGING_SHAPES.format(backend=backend), tmp_path)


MANY_FUNCTIONS = """
def pointwise(x):
    return (x * 3).relu() - x.exp()
def with_break(x):
    y = x.tanh()
    print(end="")  # a graph break: two graphs and a resume in between
    return y * x.sum()
def reduction(x):
    return x.softmax(-1) + x.mean(0)
def inlined(x):
    return pointwise(x) + reduction(x)
fns = [pointwise, with_break, reduction, inlined]
compiled = {fn: mini.compile(fn, backend=b) for fn, b in zip(fns, ["inductor", "eager", "aot_eager", "inductor"])}
def work(k):
    for i in range(40):
        check(fns[(i + k) % 4], mini.randn(i % 3 + 2, k + 3))
run_threads([lambda k=k: work(k) for k in range(6)])
"""


def test_threads_compiling_different_functions_and_calling_them(tmp_path):
    run_child(MANY_FUNCTIONS, tmp_path)


RESET_WHILE_COMPILING = """
import time
def slow_backend(gm, example_inputs):
    time.sleep(0.001)  # lets the main thread run mini.reset() in the middle of this compile
    return gm.forward
def f(x):
    y = x.sin()
    print(end="")  # a graph break: a second unit, compiled after the first ran
    return y * 2 + x.cos()
compiled = {f: mini.compile(f, backend=slow_backend)}
stop = []
def work(k):
    i = 0
    while not stop:
        check(f, mini.randn(2, (i + k) % 5 + 1))
        i += 1
ts = [threading.Thread(target=work, args=(k,)) for k in range(3)]
[t.start() for t in ts]
for _ in range(300):
    mini.reset()
    time.sleep(0.0005)
stop.append(True)
[t.join() for t in ts]
"""


def test_reset_while_other_threads_compile(tmp_path):
    # a unit emptied by mini.reset() during its compile was written after it was freed
    run_child(RESET_WHILE_COMPILING, tmp_path)
