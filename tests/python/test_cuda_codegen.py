"""CUDA code generation (issue 13): the CUDA renderer over the same loop IR as the C++ one.

Without a GPU (the "null device", as CI runs it) every graph is rendered and compiled by NVRTC
to SASS for sm_90: golden .cu files of the Inductor anchors (tests/golden/*.cu, reviewed as
diffs), and the graphs of the differential fuzzer's first functions. With a GPU the same graphs
run, and their results are compared with eager mini on the CPU, element by element, with the
fuzzer's tolerances.

    MINI_UPDATE_GOLDEN=1 PYTHONPATH=build/python .venv/bin/python -m pytest tests/python/test_cuda_codegen.py
"""
import os
import re
import sys
from pathlib import Path

import numpy as np
import pytest

import mini
import mini.inductor as inductor
from conftest import CUDA_SKIP_REASON, HAS_CUDA, requires_no_cuda, to_np

REPO = Path(__file__).resolve().parents[2]
GOLDEN = REPO / "tests" / "golden"
sys.path.insert(0, str(REPO / "labs"))
sys.path.insert(0, str(Path(__file__).resolve().parent))
from programs import chain8, layernorm_decomp, softmax_decomp, transform  # noqa: E402
import test_inductor_fuzz as fuzz  # noqa: E402

pytestmark = [
    pytest.mark.usefixtures("own_cache_dir"),
    pytest.mark.skipif(inductor.nvrtc_version() is None,
                       reason="this build has no CUDA toolkit (NVRTC): " + mini._C._nvrtc_unavailable_reason()),
]


def graph_of(fn, *args, dynamic=None):
    graphs = []

    def backend(gm, example_inputs):
        graphs.append(gm)
        return gm.forward

    mini.reset()
    mini.compile(fn, backend=backend, fullgraph=True, dynamic=dynamic)(*args)
    assert len(graphs) == 1
    return graphs[0]


ANCHORS = {
    "transform": (transform, lambda: (mini.randn(64, 64), mini.randn(64))),
    "chain8": (chain8, lambda: (mini.randn(256, 256), mini.randn(256, 256))),
    "softmax_decomp": (softmax_decomp, lambda: (mini.randn(64, 1000),)),
    "layernorm_decomp": (layernorm_decomp, lambda: (mini.randn(64, 512), mini.randn(512), mini.randn(512))),
}


@pytest.mark.parametrize("name", list(ANCHORS))
def test_anchor_source_matches_its_golden_file_and_compiles(name):
    fn, make = ANCHORS[name]
    info = inductor.compile_graph_cuda(graph_of(fn, *make()), arch="sm_90")
    assert info["kernels"] and all(k.startswith("cuda_") for k in info["kernels"]), info["kernels"]
    assert info["cubin_bytes"] > 0 and info["arch"] == "sm_90"
    source = info["source"]  # the prelude left out: it is the same text in every source
    begin = source.index("// ---- prelude:")
    end = source.index("// ---- end of prelude ----") + len("// ---- end of prelude ----")
    got = re.sub(r"File: \S*?/labs/", "File: <repo>/labs/", source[:begin] + "// (prelude)" + source[end:])
    path = GOLDEN / f"{name}.cu"
    if os.environ.get("MINI_UPDATE_GOLDEN"):
        path.write_text(got)
    assert path.exists(), f"no golden file {path}: run with MINI_UPDATE_GOLDEN=1 and review it"
    assert got == path.read_text(), (f"the generated CUDA source of {name} changed; if that is intended, "
                                     "rerun with MINI_UPDATE_GOLDEN=1 and review `git diff tests/golden`")


def test_kernels_are_named_by_the_renderer():
    gm = graph_of(transform, mini.randn(64, 64), mini.randn(64))
    cuda = inductor.compile_graph_cuda(gm, arch="sm_90")
    cpp = mini._C._inductor_compile(gm)
    assert cuda["kernels"] == ["cuda_poi_fused_add_mul_relu_0"]
    assert cpp["kernels"] == ["cpp_poi_fused_add_mul_relu_0"]  # the same group, the other target
    assert 'extern "C" __global__ void __launch_bounds__(256) cuda_poi_fused_add_mul_relu_0(' in cuda["source"]


# The fuzzer's first functions: random programs over every op the generator knows (pointwise,
# reductions over any dims, views, casts, matmul as an extern call), some with symbolic sizes.
FUZZ_FUNCTIONS = int(os.environ.get("MINI_CUDA_FUZZ_FUNCTIONS", "12"))


def fuzz_case(index):
    seed = 7_000_003 + index
    dynamic = True if index % 4 == 3 else None
    inputs, exprs = fuzz.generate(seed, 6, dynamic=bool(dynamic))
    prog = fuzz.Program(inputs, exprs, f"cuda_fuzz_{index}")
    return prog, dynamic


@pytest.mark.parametrize("index", range(FUZZ_FUNCTIONS))
def test_fuzzer_graphs_compile_with_nvrtc(index):
    prog, dynamic = fuzz_case(index)
    gm = graph_of(prog.function(), *prog.args(), dynamic=dynamic)
    info = inductor.compile_graph_cuda(gm, arch="sm_90")
    assert info["cubin_bytes"] > 0 or not info["kernels"]


@pytest.mark.cuda
@pytest.mark.skipif(not HAS_CUDA, reason=CUDA_SKIP_REASON)
@pytest.mark.parametrize("name", list(ANCHORS))
def test_anchor_runs_on_the_gpu_as_eager(name):
    fn, make = ANCHORS[name]
    args = make()
    info = inductor.compile_graph_cuda(graph_of(fn, *args))
    got = info["run"](*[a.cuda() for a in args])
    want = fn(*args)
    want = want if isinstance(want, tuple) else (want,)
    for g, w in zip(got, want):
        assert g.is_cuda
        np.testing.assert_allclose(to_np(g.cpu()), to_np(w), rtol=1e-5, atol=1e-5)


@pytest.mark.cuda
@pytest.mark.skipif(not HAS_CUDA, reason=CUDA_SKIP_REASON)
@pytest.mark.parametrize("index", range(FUZZ_FUNCTIONS))
def test_fuzzer_graphs_run_on_the_gpu_as_eager(index):
    prog, dynamic = fuzz_case(index)
    args = prog.args()
    fn = prog.function()
    want = fn(*args)
    info = inductor.compile_graph_cuda(graph_of(fn, *args, dynamic=dynamic))
    got = info["run"](*[a.cuda() if isinstance(a, mini.Tensor) else a for a in args])
    problems = [(i, p) for i, (e, g, w) in enumerate(zip(prog.exprs, got, want))
                if (p := fuzz.check_output(e, g.cpu(), w))]
    assert not problems, f"{problems[:3]}\n{prog.source()}"


@requires_no_cuda
def test_running_without_a_gpu_says_why():
    args = (mini.randn(8, 8), mini.randn(8))
    info = inductor.compile_graph_cuda(graph_of(transform, *args))
    with pytest.raises(RuntimeError, match="CUDA"):
        info["run"](*args)
