"""labs/bench/bench_compile.py runs (--quick) and its JSON has the table it prints.

The bench runs as its own process, with this interpreter, mini on PYTHONPATH and a fresh
MINI_CACHE_DIR, writing into tmp_path. Assertions are about its structure (rows, stages,
kernels, figures), never about timings.
"""
import json
import os
import subprocess
import sys
from pathlib import Path

import mini

BENCH = Path(__file__).resolve().parents[2] / "labs" / "bench" / "bench_compile.py"
MINI_DIR = Path(mini.__file__).resolve().parents[1]  # the folder holding the mini package
KINDS = ("pointwise", "broadcast", "reduction", "diamond")
STAGES = ("capture_s", "fusion_s", "codegen_s", "cxx_s", "cxx_cpu_s", "total_s")


def test_bench_compile_quick(tmp_path):
    env = dict(os.environ, PYTHONPATH=str(MINI_DIR), MINI_CACHE_DIR=str(tmp_path / "cache"), MPLBACKEND="Agg")
    env.pop("MINI_LOGS", None)
    out = tmp_path / "figures"
    done = subprocess.run([sys.executable, str(BENCH), "--quick", "--out", str(out)], env=env,
                          capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, f"bench_compile failed:\n{done.stdout}\n{done.stderr}"
    for suffix in (".png", ".svg", ".json"):
        path = out / ("bench_compile" + suffix)
        assert path.exists() and path.stat().st_size > 0, f"no {path.name}"
    rows = json.loads((out / "bench_compile.json").read_text())["rows"]
    assert [r["kind"] for r in rows] == [k for k in KINDS for _ in range(3)]
    for kind in KINDS:
        mine = [r for r in rows if r["kind"] == kind]
        ops = [r["ops"] for r in mine]
        assert ops == sorted(ops) and 8 <= ops[0] <= 10 and 99 <= ops[-1] <= 100, ops
        assert all(r["graphs"] == 1 for r in mine)
        assert all(all(r[s] >= 0 for s in STAGES) for r in mine)
        assert mine[-1]["kernels"] >= 2  # 100 ops are more than one kernel holds
        assert mine[-1]["source_bytes"] > mine[0]["source_bytes"]
    assert "cold compile time by stage" in done.stdout and "capture" in done.stdout


TRAINING = BENCH.parent / "bench_training.py"


def test_bench_training_thread_sweep_quick(tmp_path):
    """--threads times the selected workloads (eager and inductor, gradients checked first) at
    each thread count; --only selects by name and refuses a pattern that matches nothing."""
    env = dict(os.environ, PYTHONPATH=str(MINI_DIR), MINI_CACHE_DIR=str(tmp_path / "cache"))
    env.pop("MINI_LOGS", None)
    out = tmp_path / "threads.json"
    done = subprocess.run([sys.executable, str(TRAINING), "--quick", "--only", "MSE", "--threads", "1,2",
                           "--json", str(out)], env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, f"bench_training failed:\n{done.stdout}\n{done.stderr}"
    sweep = json.loads(out.read_text())["thread_sweep"]
    assert [(r["workload"], r["threads"]) for r in sweep] == [("mlp 2 layers, MSE", 1), ("mlp 2 layers, MSE", 2)]
    assert all(r["eager_ms"] > 0 and r["inductor_ms"] > 0 for r in sweep)
    bad = subprocess.run([sys.executable, str(TRAINING), "--quick", "--only", "no such workload"], env=env,
                         capture_output=True, text=True, timeout=600)
    assert bad.returncode != 0 and "matches no workload" in bad.stderr


def test_bench_training_times_backends_in_rotating_rounds(tmp_path):
    """The training bench samples each backend once per round, the order rotating, so that a
    machine that changes speed mid-run weighs on every backend alike; its JSON keeps the spread."""
    sys.path.insert(0, str(TRAINING.parent))
    try:
        import bench_training
    finally:
        sys.path.remove(str(TRAINING.parent))
    calls = []
    steps = {name: (lambda name=name: calls.append(name)) for name in ("eager", "aot_eager", "inductor")}
    timed = bench_training.interleaved_ms(steps, rounds=3, warmup=1)
    assert calls[:3] == ["eager", "aot_eager", "inductor"]  # the warm-up, one each
    assert calls[3:] == ["eager", "aot_eager", "inductor", "aot_eager", "inductor", "eager",
                         "inductor", "eager", "aot_eager"]
    assert set(timed) == set(steps) and all(p25 <= med <= p75 for med, p25, p75 in timed.values())

    env = dict(os.environ, PYTHONPATH=str(MINI_DIR), MINI_CACHE_DIR=str(tmp_path / "cache"))
    env.pop("MINI_LOGS", None)
    out = tmp_path / "training.json"
    done = subprocess.run([sys.executable, str(TRAINING), "--quick", "--only", "relu", "--json", str(out)],
                          env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, f"bench_training failed:\n{done.stdout}\n{done.stderr}"
    assert "IQR" in done.stdout and "rounds" in done.stdout
    (row,) = json.loads(out.read_text())["rows"]
    eager = row["backends"]["eager"]["ms"]
    for entry in row["backends"].values():
        assert entry["ms_p25"] <= entry["ms"] <= entry["ms_p75"]
        assert abs(entry["speedup"] - eager / entry["ms"]) < 1e-9
