"""Generated CUDA kernels keyed by their body (issue 32, item 4): a graph of N identical layers
renders N kernels but NVRTC compiles each distinct body once, as one program shared by every
copy, in memory (across graphs) and on disk (across processes); the distinct programs compile
in parallel threads with the serial CUBINs; what decides a compile (the layout, the
architecture, NVRTC's options) is in the key. No GPU needed: the counts come from
mini._C._cuda_kernel_cache_stats()."""
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

import mini
import mini.inductor as inductor
import mini.nn.functional as F

pytestmark = [
    pytest.mark.usefixtures("own_cache_dir"),
    pytest.mark.skipif(inductor.nvrtc_version() is None,
                       reason="this build has no CUDA toolkit (NVRTC): " + mini._C._nvrtc_unavailable_reason()),
]

PKG_DIR = os.path.dirname(os.path.dirname(mini.__file__))

# N pre-norm residual layers (layer norm, a matmul, gelu, the residual add), then a sum: every
# layer past the first fuses into a kernel of one body, numbered by its own nodes. `scales`: a
# constant per layer (a layer of another constant is another body).
STACK = """
import mini
import mini.nn.functional as F

def stack_graph(layers, width=64, scales=None):
    scales = scales or [1.0] * layers
    def stack(x, *ws):
        for i in range(layers):
            x = x + F.gelu(F.layer_norm(x, (width,)) @ ws[i]) * scales[i]
        return x.sum()
    graphs = []
    def backend(gm, example_inputs):
        graphs.append(gm)
        return gm.forward
    mini.reset()
    mini.compile(stack, backend=backend, fullgraph=True)(mini.randn(8, width), *[mini.randn(width, width) for _ in range(layers)])
    return graphs[0]
"""
exec(STACK)


def compiled(gm, **kw):
    """compile_graph_cuda's info, with what the kernel caches did meanwhile."""
    before = mini._C._cuda_kernel_cache_stats()
    info = inductor.compile_graph_cuda(gm, **kw)
    after = mini._C._cuda_kernel_cache_stats()
    return info, {k: after[k] - before[k] for k in after}


def functions(info):
    return [f for f, key, cubin in info["programs"]]


def test_identical_layers_compile_each_distinct_body_once():
    two, two_counts = compiled(stack_graph(2), arch="sm_90")
    six, six_counts = compiled(stack_graph(6), arch="sm_90")
    assert len(six["kernels"]) > len(two["kernels"])  # a kernel use per layer
    # the six-layer graph has no body the two-layer one lacks: one program per body
    assert six["distinct_programs"] == two["distinct_programs"] == len(set(functions(six)))
    assert six["distinct_programs"] < len(six["kernels"])
    assert two_counts["nvrtc_compiles"] == two["distinct_programs"] == two["nvrtc_runs"]
    assert six_counts["nvrtc_compiles"] == 0 and six["nvrtc_runs"] == 0  # shared across graphs, in memory
    # kernels keep their readable names (one per graph node group); copies of a body share a function
    assert len(set(six["kernels"])) == len(six["kernels"])
    shared = [f for f in set(functions(six)) if functions(six).count(f) > 1]
    assert len(shared) == 1 and functions(six).count(shared[0]) == 5


def test_layers_that_differ_in_a_constant_are_different_bodies():
    same, _ = compiled(stack_graph(4), arch="sm_90")
    other, _ = compiled(stack_graph(4, scales=[1.0, 0.5, 0.25, 0.125]), arch="sm_90")
    assert same["distinct_programs"] < len(same["kernels"])
    # a kernel per layer's constant: no two share a program
    assert other["distinct_programs"] == len(set(functions(other))) == len(other["kernels"])


def test_a_kernel_keeps_its_name_and_runs_a_function_named_for_its_body():
    info, _ = compiled(stack_graph(3), arch="sm_90")
    for name, (function, key, cubin) in zip(info["kernels"], info["programs"]):
        stem = name.rsplit("_", 1)[0]  # cuda_red_fused_add_gelu_sum_3 -> what it computes
        assert function == stem + "_" + key[:8]


SECOND_PROCESS = STACK + """
import json, sys
import mini.inductor as inductor
before = mini._C._cuda_kernel_cache_stats()
info = inductor.compile_graph_cuda(stack_graph(int(sys.argv[1])), arch="sm_90")
after = mini._C._cuda_kernel_cache_stats()
print(json.dumps(dict({k: after[k] - before[k] for k in after}, distinct=info["distinct_programs"],
                      functions=[f for f, key, cubin in info["programs"]])))
"""


def in_a_process(layers, cache_dir, **env):
    r = subprocess.run([sys.executable, "-c", SECOND_PROCESS, str(layers)], capture_output=True, text=True,
                       env=dict(os.environ, PYTHONPATH=PKG_DIR, MINI_CACHE_DIR=str(cache_dir), **env))
    assert r.returncode == 0, r.stderr
    return json.loads(r.stdout.strip().splitlines()[-1])


def test_a_second_process_reads_every_body_from_the_disk_cache(tmp_path):
    first = in_a_process(2, tmp_path)
    assert first["nvrtc_compiles"] == first["distinct"] and first["disk_hits"] == 0
    # another layer count: other kernel names and positions, the same bodies
    second = in_a_process(5, tmp_path)
    assert second["nvrtc_compiles"] == 0 and second["disk_hits"] == second["distinct"] == first["distinct"]
    assert set(second["functions"]) == set(first["functions"])
    assert len(list(tmp_path.glob("*.cubin"))) == first["distinct"]


def test_parallel_compiles_give_the_serial_cubins(tmp_path, monkeypatch):
    gm = stack_graph(3, scales=[1.0, 2.0, 3.0])  # several bodies to compile at once
    cubins = {}
    for threads in ("1", "4"):
        monkeypatch.setenv("MINI_COMPILE_THREADS", threads)
        mini.config.cache_dir = str(tmp_path / threads)  # a cold cache each: NVRTC runs
        info, counts = compiled(gm, arch="sm_90")
        assert counts["nvrtc_compiles"] == info["distinct_programs"] > 2
        cubins[threads] = info["programs"]
    assert cubins["1"] == cubins["4"]


@pytest.mark.parametrize("change", ["arch", "layout", "options"])
def test_what_decides_a_compile_is_in_the_key(change, monkeypatch):
    gm = stack_graph(2)
    base, _ = compiled(gm, arch="sm_90")
    if change == "layout":
        monkeypatch.setenv("MINI_CODEGEN_LAYOUT", "5")
    if change == "options":
        monkeypatch.setenv("MINI_NVRTC_OPTIONS", "-lineinfo -DMINI_TEST_OPTION")
    other, counts = compiled(gm, arch="sm_80" if change == "arch" else "sm_90")
    keys = lambda info: {key for f, key, cubin in info["programs"]}  # noqa: E731
    # every body compiled again: another key, no hit in memory or on disk
    assert not keys(base) & keys(other)
    assert counts["nvrtc_compiles"] == other["distinct_programs"] and counts["disk_hits"] == 0
