"""labs/ddp_overlap.py run with --quick (2 Gloo ranks, aot_eager), in a subprocess with this
interpreter, into a temporary folder. The test checks what the lab reports in its JSON -- the
graphs compiled whole and split, how many all-reduces each mode launched while backward compute
still ran, each step's timeline -- and that it wrote its figure. Timings are reported, never
checked."""
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

import mini.distributed as dist

REPO = Path(__file__).resolve().parents[2]
LAB = REPO / "labs" / "ddp_overlap.py"
PYTHON_DIR = os.environ.get("MINI_PYTHON_DIR", str(REPO / "build" / "python"))


@pytest.mark.skipif(not dist.is_gloo_available(), reason="this build of mini has no Gloo (libgloo-dev)")
def test_ddp_overlap_quick(tmp_path):
    env = dict(os.environ, PYTHONPATH=PYTHON_DIR, MINI_PYTHON_DIR=PYTHON_DIR, MPLBACKEND="Agg")
    env.pop("MINI_LOGS", None)
    done = subprocess.run([sys.executable, str(LAB), "--quick", "--no-torch", "--out", str(tmp_path)],
                          cwd=REPO, env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-3000:]
    result = json.loads((tmp_path / "ddp_overlap.json").read_text())
    modes = result["modes"]
    assert list(modes) == ["eager", "compiled, whole", "compiled, split"]
    buckets = modes["eager"]["buckets"]
    assert buckets == 3  # 6 layers, two a bucket
    assert modes["compiled, whole"]["graphs"] == 1
    assert modes["compiled, split"]["graphs"] == buckets
    # whole: every all-reduce starts after the backward's compute; split and eager: all but the last before
    assert modes["compiled, whole"]["early"] == 0
    assert modes["compiled, split"]["early"] == buckets - 1
    assert modes["eager"]["early"] == buckets - 1
    for rank in result["ranks"]:
        for mode in modes:
            steps = rank["mini"][mode]["steps"]
            assert len(steps) == 4 and all(len(s["timeline"]["launch"]) == buckets for s in steps)
    assert (tmp_path / "ddp_overlap.png").stat().st_size > 0
    assert "exposed ms" in done.stdout
