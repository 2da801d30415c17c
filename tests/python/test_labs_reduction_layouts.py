"""labs/reduction_layouts.py run with --quick, in a subprocess with this interpreter, into a
temporary folder: its JSON's decisions against the contracts of assignment A10 (a warp for a
short row, a block up to 1024 for a long one, held rows only where the block holds them, one long
row split over more blocks as it grows), its figure, and the GPU panels drawn from made-up
timings (the GPU run itself is the `cuda` test, on the GPU machine). Timings are never checked."""
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import CUDA_SKIP_REASON, HAS_CUDA

REPO = Path(__file__).resolve().parents[2]
LAB = REPO / "labs" / "reduction_layouts.py"
PYTHON_DIR = os.environ.get("MINI_PYTHON_DIR", str(REPO / "build" / "python"))

KIT_ASSIGNMENT = "a10"  # every test here is A10's unless it says otherwise (conftest.py)


def results_of(out_dir, *extra):
    env = dict(os.environ, PYTHONPATH=PYTHON_DIR, MPLBACKEND="Agg")
    env.pop("MINI_LOGS", None)
    done = subprocess.run([sys.executable, str(LAB), "--quick", "--out", str(out_dir), *extra],
                          cwd=REPO, env=env, capture_output=True, text=True, timeout=900)
    assert done.returncode == 0, f"reduction_layouts.py --quick {' '.join(extra)} failed\n{done.stdout[-2000:]}\n{done.stderr[-3000:]}"
    for suffix in ("png", "svg", "json"):
        assert (out_dir / f"reduction_layouts.{suffix}").stat().st_size > 0
    return json.loads((out_dir / "reduction_layouts.json").read_text()), done.stdout


@pytest.fixture(scope="module")
def quick(tmp_path_factory):
    return results_of(tmp_path_factory.mktemp("reduction_layouts"))


def test_every_decision_keeps_the_layout_contract(quick):
    result, _ = quick
    assert [row["rnumel"] for row in result["decisions"]] == [4 ** p for p in range(11)]
    for row in result["decisions"]:
        r = row["rnumel"]
        for number, layout in result["layouts"].items():
            d = row[number]
            assert d["row_threads"] in [1 << p for p in range(11)], (r, number, d)
            regs = layout["row_registers"]
            assert d["shape"] == ("per" if regs and r <= d["row_threads"] * regs else "red"), (r, number, d)
            assert d["name"].startswith(f"cuda_{d['shape']}_")
            assert d["block"] == d["row_threads"] * d["rows_per_block"] <= 1024
            if d["row_threads"] <= 32:  # rows of a warp or fewer lanes share a block of warp_rows warps
                assert d["rows_per_block"] * d["row_threads"] == 32 * layout["warp_rows"], (r, number, d)
            else:
                assert d["rows_per_block"] == 1, (r, number, d)
            if r == 1:
                assert d["row_threads"] == 1, f"a row of 1 gets a thread, not {d['row_threads']}"


def test_a_longer_row_is_shared_among_more_blocks(quick):
    result, _ = quick
    for number in result["layouts"]:
        blocks = [row[number]["full_sum_blocks"] for row in result["decisions"]]
        assert blocks == sorted(blocks) and blocks[0] == 1, (number, blocks)
        assert blocks[-1] > 1, f"layout {number}: a full sum of {result['decisions'][-1]['rnumel']} is one block"
        assert max(blocks) <= 2 * result["sms"]


def test_the_table_names_every_length_and_layout(quick):
    result, out = quick
    assert "layout 3" in out and "layout 9" in out and "a thread per row" in out and "a block per row" in out
    for row in result["decisions"]:
        assert f"\n{row['rnumel']:>11d} " in out


@pytest.mark.no_assignment  # drawn from made-up timings: it passes through A10's stub
def test_the_gpu_panels_draw_from_timings(tmp_path):
    sys.path.insert(0, str(REPO / "labs"))
    try:
        import reduction_layouts as lab
    finally:
        sys.path.remove(str(REPO / "labs"))
    rows = [{"rnumel": r, **{str(n): {"row_threads": 32, "shape": "red"} for n in lab.LAYOUTS}} for r in (1, 4, 16)]
    series = {**{str(n): [100.0, 200.0, 300.0] for n in lab.LAYOUTS}, "eager": [50.0, 60.0, 70.0], "torch": [1.0, 2.0, 3.0]}
    result = {"decisions": rows, "gb_per_s": {"row_sum": series, "softmax": series, "copy": 400.0}, "numel": 48,
              "device_name": "a made-up GPU", "date": "today", "command": "a test"}
    paths = lab.plot(result, tmp_path)
    assert all(p.stat().st_size > 0 for p in paths)


@pytest.mark.cuda
@pytest.mark.skipif(not HAS_CUDA, reason=CUDA_SKIP_REASON)
def test_on_the_gpu_every_layout_is_timed_beside_eager(tmp_path):
    result, out = results_of(tmp_path, "--device", "cuda", "--no-torch")
    assert result["device"] == "cuda" and result["numel"] == 2 ** 20
    assert result["gb_per_s"]["copy"] > 0
    for name in ("row_sum", "softmax"):
        series = result["gb_per_s"][name]
        assert set(series) == {*result["layouts"], "eager"}
        assert all(len(v) == len(result["decisions"]) and all(x > 0 for x in v) for v in series.values())
