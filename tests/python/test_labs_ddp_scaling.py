"""labs/bench/bench_ddp_gpt2.py --device cpu --quick: the tiny GPT on 1 and 2 Gloo ranks, in a
subprocess with this interpreter, into a temporary folder. The test checks the report: both
world sizes there, tokens/s the world's tokens over the measured step, the efficiency computed
from the measured tokens/s, mini's exposed communication measured (and torch's said to be not),
torch's rows skipped saying why where torch does not import, the text, JSON and figure written;
and the bar's verdict on made-up GPU rows. Speeds are reported, never checked."""
import json
import math
import os
import statistics
import subprocess
import sys
from pathlib import Path

import pytest

import mini.distributed as dist
from conftest import requires_no_cuda

REPO = Path(__file__).resolve().parents[2]
BENCH = REPO / "labs" / "bench" / "bench_ddp_gpt2.py"
PYTHON_DIR = os.environ.get("MINI_PYTHON_DIR", str(REPO / "build" / "python"))
ENV = dict(os.environ, PYTHONPATH=PYTHON_DIR, MINI_PYTHON_DIR=PYTHON_DIR, MPLBACKEND="Agg")
ENV.pop("MINI_LOGS", None)
requires_gloo = pytest.mark.skipif(not dist.is_gloo_available(),
                                   reason="this build of mini has no Gloo (libgloo-dev)")


def run(*args):
    return subprocess.run([sys.executable, str(BENCH), *args], cwd=REPO, env=ENV,
                          capture_output=True, text=True, timeout=120)


@pytest.fixture(scope="module")
def report(tmp_path_factory):
    out = tmp_path_factory.mktemp("ddp_scaling")
    done = run("--device", "cpu", "--quick", "--out", str(out))
    assert done.returncode == 0, f"stdout:\n{done.stdout[-3000:]}\nstderr:\n{done.stderr[-3000:]}"
    return out, done.stdout, json.loads((out / "ddp_scaling.json").read_text())


@requires_gloo
def test_quick_run_reports_both_world_sizes_with_consistent_numbers(report):
    _, _, r = report
    size = r["size"]
    tokens_a_rank = size["batch"] * size["config"]["block_size"]
    rows = {(row["mode"], row["world_size"]): row for row in r["results"]}
    assert {world for _, world in rows} == {1, 2}
    one = rows[("mini-compiled", 1)]
    for world in (1, 2):
        row = rows[("mini-compiled", world)]
        assert "error" not in row, row
        timed = row["step_ms"][size["warmup"]:]
        assert row["ms"] > 0 and row["ms"] == pytest.approx(statistics.median(timed))
        assert row["tokens_per_s"] == pytest.approx(world * tokens_a_rank / (row["ms"] / 1e3))
        expected = row["tokens_per_s"] / (world * one["tokens_per_s"])
        assert row["efficiency"] == pytest.approx(expected)
        assert row["added_ms"] == pytest.approx(row["ms"] - one["ms"])
        assert row["exposed_ms"] >= 0 and len(row["exposed_ms_steps"]) == size["steps"]
        assert row["exposed_clock"] == "wall clock"
        assert row["compute_kernels_after_last_launch"] == 0  # the last launch ends the compute
        assert row["buckets"] == 1  # the tiny GPT fits the first bucket
        # a fresh model guesses among the vocabulary: its loss starts near ln(V)
        assert all(math.isfinite(x) for x in row["losses"])
        assert abs(row["losses"][0] - math.log(size["config"]["vocab_size"])) < 0.5
    assert one["efficiency"] == 1.0
    for world in (1, 2):
        torch_row = rows[("torch-compile", world)]
        skipped = torch_row.get("error") == "skipped: torch is not importable here"
        assert "error" not in torch_row or skipped, torch_row
        if "error" not in torch_row:
            assert torch_row["exposed_ms"] is None and torch_row["exposed_not_measured"]
    assert r["bar"]["measured"] is False and "not judged on CPU ranks" in r["bar"]["said"]
    assert any("torch's exposed communication" in line for line in r["not_measured"])


@requires_gloo
def test_quick_run_writes_table_and_figure(report):
    out, stdout, _ = report
    text = (out / "ddp_scaling.txt").read_text()
    assert "efficiency" in text and "mini-compiled" in text and "not measured:" in text
    assert "efficiency" in stdout and "wrote" in stdout
    assert (out / "ddp_scaling.png").stat().st_size > 0 and (out / "ddp_scaling.svg").exists()


def test_bar_judges_mini_at_four_gpus_against_90_percent_and_torch():
    sys.path.insert(0, str(BENCH.parent))
    from bench_ddp_gpt2 import add_scaling, the_bar

    def rows(mini_4, torch_4):  # tokens/s at 1 GPU: 100 each; at 4: as given
        return [dict(mode=m, world_size=n, ms=1.0, tokens_per_s=t)
                for m, t4 in (("mini-compiled", mini_4), ("torch-compile", torch_4))
                for n, t in ((1, 100.0), (4, t4))]
    for mini_4, torch_4, met in ((380, 370, True), (380, 390, False), (350, 300, False)):
        results = rows(mini_4, torch_4)
        add_scaling(results)
        bar = the_bar(results, "cuda")
        assert bar["met"] is met and bar["mini"] == pytest.approx(mini_4 / 400)
    assert the_bar(rows(380, 370)[:1], "cuda")["measured"] is False  # no 4-GPU row


def test_unknown_mode_is_refused():
    done = run("--device", "cpu", "--quick", "--modes", "mini-fast")
    assert done.returncode == 2 and "unknown 'mini-fast'" in done.stderr


@requires_no_cuda
def test_cuda_without_a_gpu_says_why_and_exits_0(tmp_path):
    done = run("--device", "cuda", "--out", str(tmp_path))
    assert done.returncode == 0 and "skipped: no CUDA device" in done.stdout
    assert len(done.stdout.strip().splitlines()) == 1 and not list(tmp_path.iterdir())
