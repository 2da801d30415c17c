"""Compile time that scales with the program (issue 11, part 3), asserted through its structure.

No timings (the project has no timed tests): what keeps a long program's compile linear is that
its kernels are bounded (at most 64 nodes, max_fusion_size; at most 8 loops over a tile; at
most 4 dependent passes over a reduction's rows), that the source grows in proportion to the
program, that many transcendental ops call one out-of-line vector version each instead of
inlining a copy each, and that codegen's walks visit each value once.
"""
import os
import re
import subprocess
import sys
import textwrap

import numpy as np
import pytest

import mini

from capture_helpers import chain
from conftest import to_np

pytestmark = pytest.mark.usefixtures("own_cache_dir")

PKG_DIR = os.path.dirname(os.path.dirname(os.path.abspath(mini.__file__)))
KERNEL_SIZE = re.compile(r"^(cpp_\w+): (\d+) ops? over")


def compile_info(fn, *args):
    """_inductor_compile of fn's one graph, after checking the compiled result against eager."""
    graphs = []

    def backend(gm, example_inputs):
        graphs.append((gm, example_inputs))
        return gm.forward

    mini.compile(fn, backend=backend, fullgraph=True)(*args)
    assert len(graphs) == 1
    gm, inputs = graphs[0]
    info = mini._C._inductor_compile(gm)
    got, expected = info["run"](*inputs)[0], fn(*args)
    assert tuple(got.shape) == tuple(expected.shape) and got.dtype == expected.dtype
    np.testing.assert_allclose(to_np(got), to_np(expected), rtol=1e-4, atol=1e-5)
    return info


def kernel_sizes(info):
    return [int(m.group(2)) for d in info["decisions"] if (m := KERNEL_SIZE.match(d))]


def kernel_sources(info):
    """The text of each generated kernel (from its comment line to the next kernel's)."""
    return re.split(r"\n(?=// cpp_\w+: graph nodes)", info["source"])[1:]


def body_bytes(info):
    return sum(len(k) for k in kernel_sources(info))


def test_a_long_chain_is_kernels_of_at_most_64_nodes():
    x = mini.rand(4, 64)
    info = compile_info(chain(100), x)  # 300 ops
    sizes = kernel_sizes(info)
    assert sum(sizes) == 300
    assert len(sizes) == 5 and max(sizes) == 64  # inductor's max_fusion_size
    assert any("(max_fusion_size)" in d for d in info["decisions"])


def test_source_grows_linearly_with_the_chain():
    x = mini.rand(4, 64)
    small, large = compile_info(chain(100), x), compile_info(chain(200), x)
    assert len(large["kernels"]) <= 2.2 * len(small["kernels"])
    assert body_bytes(large) <= 2.2 * body_bytes(small)


def test_a_kernel_runs_at_most_8_stage_loops():
    # 16 sins in one kernel: one loop per sin would be 16 loops; the C++ compiler's time grows
    # faster than the number of loops in a function
    info = compile_info(chain(16), mini.rand(4, 64))
    [kernel] = kernel_sources(info)
    assert "8 stages per tile" in kernel
    assert kernel.count("#pragma omp simd") == 8


def test_a_short_chain_keeps_one_stage_per_transcendental():
    info = compile_info(chain(4), mini.rand(4, 64))
    [kernel] = kernel_sources(info)
    assert kernel.count("#pragma omp simd") == 4
    assert "mini::sin_of<float>" in kernel and "sin_v" not in info["source"]


def test_many_transcendentals_call_one_vector_version():
    info = compile_info(chain(100), mini.rand(4, 64))  # 100 sins
    assert "#pragma omp declare simd notinbranch" in info["source"]
    bodies = "".join(kernel_sources(info))
    assert bodies.count("mini::sin_v(") == 100 and "sin_of<" not in bodies


def test_float64_transcendentals_are_not_outlined():
    info = compile_info(chain(70), mini.rand(4, 64, dtype=mini.float64))
    assert "sin_v(" not in "".join(kernel_sources(info))


def test_dependent_reductions_split_after_4_passes():
    def f(x):
        for _ in range(8):
            x = x - x.mean(-1, keepdim=True) * 0.5
        return x

    info = compile_info(f, mini.rand(8, 64))
    assert len(info["kernels"]) == 2
    first, second = kernel_sources(info)
    assert first.count("acc") > 0 and second.count("acc") > 0
    assert any("it would be pass 5 over the kernel's rows" in d for d in info["decisions"])
    # the second kernel computes the first's last x (four subtractions of row values from the
    # input) instead of loading it: the first stores only its four row means
    assert any(d.startswith("recompute sub_3 (sub) in 1 later kernel") for d in info["decisions"]), info["decisions"]
    assert "out5" not in first and "out4" in first


def test_softmax_and_layer_norm_stay_one_kernel():
    x = mini.rand(8, 64)
    assert len(compile_info(lambda t: mini.softmax(t, -1), x)["kernels"]) == 1
    w, b = mini.rand(64), mini.rand(64)
    assert len(compile_info(lambda t: mini.layer_norm(t, (64,), w, b), x)["kernels"]) == 1


def test_shared_inputs_chain_compiles():
    # x = x + x.sin(): every value is read twice, so codegen's walk for the reductions below
    # a node, without memory, took 2^n steps (22 ops: 0.34 s, 40 ops: hours); in a fresh
    # process, so that a regression fails by the timeout instead of hanging the suite
    script = """
        import mini
        def f(x):
            for _ in range(40):
                x = x + x.sin()
            return x
        x = mini.rand(4, 8)
        assert mini.allclose(mini.compile(f)(x), f(x), rtol=1e-4, atol=1e-5)
        print("ok")
    """
    env = dict(os.environ, PYTHONPATH=PKG_DIR)
    env.pop("MINI_LOGS", None)
    done = subprocess.run([sys.executable, "-c", textwrap.dedent(script)], env=env,
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0 and done.stdout.strip() == "ok", done.stderr


def test_stage_timings_are_recorded():
    info = compile_info(chain(2), mini.rand(4, 8))
    stages = [info[k] for k in ("schedule_seconds", "codegen_seconds", "cxx_seconds")]
    assert all(s >= 0 for s in stages)
    assert sum(stages) == pytest.approx(info["compile_seconds"])


def test_a_row_too_short_to_split_has_no_split_copy():
    # a row shorter than 32768 elements is never split over threads: the split copy of each
    # pass was dead code that cost the C++ compiler as much as the pass
    short = compile_info(lambda t: (t.sin() - t.amax(-1, keepdim=True)).sum(-1), mini.rand(8, 64))
    assert "if (split)" not in short["source"]
    long = compile_info(lambda t: t.sin().sum(-1), mini.rand(2, 40000))
    assert "if (split)" in long["source"]


# ---- a large source compiles as several translation units side by side ----------------------

@pytest.mark.parametrize("threads", ["1", "3"])
def test_a_large_source_compiles_as_units_side_by_side(threads, monkeypatch):
    # ~300 steps: ~100 KB of kernels, past 24 KB a unit; MINI_COMPILE_THREADS caps the units.
    # compile_info checks the linked library's result against eager. The step count differs
    # per case so that neither finds the other's library in the disk cache.
    monkeypatch.setenv("MINI_COMPILE_THREADS", threads)
    mini.reset()  # chain's code object is compiled by every test here: not its 9th entry
    info = compile_info(chain(300 + int(threads)), mini.rand(4, 8))
    assert info["compile_units"] == int(threads)
    assert len(info["kernels"]) > 3


def test_units_compile_every_kernel_once(monkeypatch):
    # the units hold every kernel exactly once: a kernel left out would fail dlsym, one
    # repeated would fail the link (duplicate symbol); the cache's .cpp stays the whole source
    monkeypatch.setenv("MINI_COMPILE_THREADS", "4")
    mini.reset()
    info = compile_info(chain(400), mini.rand(4, 8))
    assert info["compile_units"] == 4
    with open(info["library"][:-3] + ".cpp") as f:
        assert f.read() == info["source"]


def test_a_codegen_error_in_a_unit_is_reported_against_the_whole_source(monkeypatch):
    monkeypatch.setenv("MINI_COMPILE_THREADS", "2")
    mini.reset()
    mini._C._inject_codegen_error()
    with pytest.raises(RuntimeError, match=r"(?s)does not compile, in kernel cpp_\w+_0 .*mini_injected_error"):
        compile_info(chain(300), mini.rand(4, 8))
