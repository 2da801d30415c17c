"""labs/bench/cuda_kernel_variants.py: every named edit applies to today's generated kernels
(the renderer has not moved out from under it) and what it makes still compiles with NVRTC.
Timing them needs a GPU (scripts/gpu_cuda.sh, stage "kernel variants")."""

import sys
from pathlib import Path

import pytest

import mini
import mini.inductor as inductor

LABS = Path(__file__).resolve().parents[2] / "labs"
sys.path[:0] = [str(LABS), str(LABS / "bench")]
import cuda_kernel_variants as variants  # noqa: E402
import programs  # noqa: E402

pytestmark = [
    pytest.mark.usefixtures("own_cache_dir"),
    pytest.mark.skipif(inductor.nvrtc_version() is None,
                       reason="this build has no CUDA toolkit (NVRTC): " + mini._C._nvrtc_unavailable_reason()),
]

# edits that do nothing to a program, by design (softmax's last pass already unrolls by 2)
UNCHANGED = {("softmax_decomp", "u2last")}


@pytest.fixture(scope="module", params=sorted(variants.SHAPES))
def kernel(request, tmp_path_factory):
    prog = request.param
    gm, _ = variants.capture(getattr(programs, prog), [mini.randn(*s) for s in variants.SHAPES[prog]])
    saved, mini.config.cache_dir = mini.config.cache_dir, str(tmp_path_factory.mktemp("kernel_cache"))
    try:
        source = variants.strip_sizes(inductor.compile_graph_cuda(gm, arch="sm_90")["source"])
    finally:
        mini.config.cache_dir = saved
    return prog, source


@pytest.mark.parametrize("name", list(variants.VARIANTS))
def test_each_variant_edits_the_kernel_and_compiles(kernel, name):
    prog, base = kernel
    assert "sizes" not in base.split("__global__")[1]  # launchable with the tensors alone
    edited, threads = variants.VARIANTS[name][1](base, 512)
    if name == "base" or (prog, name) in UNCHANGED:
        assert edited == base
    else:
        assert edited != base, f"{name} no longer changes {prog}'s kernel: the renderer moved"
    assert threads in (256, 512, 1024)
    inductor.compile_cuda(edited, arch="sm_90")  # raises with NVRTC's log if the edit broke it
