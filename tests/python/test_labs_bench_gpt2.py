"""labs/bench/bench_gpt2.py --quick on the CPU, in a subprocess with this interpreter, into a
temporary folder: every mini configuration gives its numbers (step time, tokens/s consistent
with it, MFU, peak memory, first step, launches, the losses of a fresh model), the parameter
count is GPT's own (the tied lm_head counted once), torch's configurations say why they are
missing where torch does not import, and the text, JSON and figure are written. Speeds are
reported, not checked."""
import json
import math
import os
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import requires_no_cuda

REPO = Path(__file__).resolve().parents[2]
LAB = REPO / "labs" / "bench" / "bench_gpt2.py"
PYTHON_DIR = os.environ.get("MINI_PYTHON_DIR", str(REPO / "build" / "python"))
ENV = dict(os.environ, PYTHONPATH=PYTHON_DIR, MPLBACKEND="Agg")


def run(*args):
    return subprocess.run([sys.executable, str(LAB), *args], cwd=REPO, env=ENV, capture_output=True,
                          text=True, timeout=600)


@pytest.fixture(scope="module")
def bench(tmp_path_factory):
    out = tmp_path_factory.mktemp("bench_gpt2")
    done = run("--quick", "--device", "cpu", "--out", str(out))
    assert done.returncode == 0, f"stdout:\n{done.stdout[-3000:]}\nstderr:\n{done.stderr[-3000:]}"
    return out, json.loads((out / "gpt2_step.json").read_text())


def test_every_mini_configuration_reports_sane_numbers(bench):
    _, report = bench
    size = report["size"]
    c = size["config"]
    C, L, T, V = c["n_embd"], c["n_layer"], c["block_size"], c["vocab_size"]
    # embeddings + per layer (attention 4C^2 + 4C, MLP 8C^2 + 5C, two layer norms 4C) + ln_f
    parameters = V * C + T * C + L * (12 * C * C + 13 * C) + 2 * C
    results = {(r["mode"], r["dtype"]): r for r in report["results"]}
    assert set(results) == {(m, d) for m in ("mini-eager", "mini-compiled", "mini-max-autotune", "mini-min-cut",
                                             "torch-eager", "torch-compile")
                            for d in ("float32", "bfloat16")}
    assert report["peak_tflops"] == 989.0
    for (mode, dtype), r in results.items():
        if mode.startswith("torch") and "error" in r:
            assert r["error"].startswith("skipped: torch"), r
            continue
        assert "error" not in r, r
        assert r["parameters"] == parameters
        assert r["flops_per_token"] == 6 * parameters + 12 * L * T * C
        assert r["ms"] > 0 and r["first_step_s"] > 0
        assert r["tokens_per_s"] == pytest.approx(size["batch"] * T / (r["ms"] / 1e3))
        assert r["mfu"] == pytest.approx(r["flops_per_token"] * r["tokens_per_s"] / 989e12)
        # torch's launches are counted on CUDA only (torch on the CPU, where torch imports: none)
        assert r["launches_per_step"] > 0 or (mode.startswith("torch") and r["launches_per_step"] is None), r
        if mode.startswith("mini"):
            assert r["peak_memory_bytes"] >= 4 * parameters  # at least the float32 weights
        # a fresh model guesses among V tokens: its loss starts near ln(V)
        assert len(r["losses"]) == size["warmup"] + size["steps"]
        assert all(math.isfinite(x) for x in r["losses"]) and abs(r["losses"][0] - math.log(V)) < 0.5


def test_writes_table_and_figure(bench):
    out, report = bench
    text = (out / "gpt2_step.txt").read_text()
    assert "989 TFLOP/s" in text and "mini-compiled" in text and "ms/step" in text
    assert (out / "gpt2_step.png").stat().st_size > 0


def test_bad_mode_is_refused():
    done = run("--quick", "--device", "cpu", "--modes", "mini-fast")
    assert done.returncode == 2 and "unknown 'mini-fast'" in done.stderr


@requires_no_cuda
def test_cuda_without_a_gpu_says_why_and_exits_0(tmp_path):
    done = run("--device", "cuda", "--out", str(tmp_path))
    assert done.returncode == 0 and "skipped: no CUDA device" in done.stdout
    assert len(done.stdout.strip().splitlines()) == 1 and not list(tmp_path.iterdir())


def test_kernel_classes_name_mini_and_torch_kernels():
    sys.path.insert(0, str(LAB.parent))
    from bench_gpt2 import kernel_class
    cases = {"nvjet_tst_128x256_64x4_1x2_h_bz_coopA_NTT": "GEMM",  # cuBLAS bfloat16 on Hopper
             "sm80_xmma_gemm_f32f32_f32f32_f32_nn_n_tilesize128x128x8": "GEMM",
             "pytorch_flash::flash_bwd_dq_dk_dv_loop_seqk_parallel_kernel": "attention",
             "attention_kernel": "attention",  # mini's fused eager attention
             "cuda_red_fused_gelu_backward_sum_183": "generated", "triton_poi_fused_add_0": "generated",
             "triton_poi_fused__to_copy_1": "generated", "triton_tem_fused_mm_0": "GEMM",
             "adam_kernel": "optimizer", "multi_tensor_apply_kernel": "optimizer",
             "Memcpy DtoD (Device -> Device)": "copies", "strided_copy_kernel": "copies",
             "void at::native::vectorized_elementwise_kernel": "other"}
    assert {name: kernel_class(name) for name in cases} == cases


def test_idle_gaps_sum_the_time_between_kernels_and_name_the_longest():
    sys.path.insert(0, str(LAB.parent))
    from bench_gpt2 import idle_gaps
    # b overlaps c (another stream): no gap between them; 5 us after a, 70 us after c
    spans = [(100, 110, "d"), (0, 10, "a"), (15, 20, "b"), (18, 30, "c")]
    got = idle_gaps(spans)
    assert got["gaps"] == 2 and got["gaps_over_20us"] == 1
    assert got["idle_ms"] == pytest.approx(0.075)
    assert got["longest"][0] == (0.07, "c", "d") and got["longest"][1] == (0.005, "a", "b")
