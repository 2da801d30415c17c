"""The capture labs with --device cuda (labs/graph_breaks.py, shape_thrash.py, scalar_guards.py,
cache_storm.py, regional_compile.py), each run with --quick in a subprocess with this
interpreter, into a temporary folder.

Without a usable GPU each lab prints one line saying why (labs/measure.py
skip_without_cuda, the reason from cuda_unavailable_reason) and exits 0, writing nothing.
With one (tests marked `cuda`, run on the GPU machine by `pytest -m cuda`), each lab runs on
the GPU, its JSON says device "cuda", and its facts -- graphs, breaks, reasons, compiles after
every call or step, results equal to eager -- are those of the CPU run of the same lab, made
in the same test: capture and its guards do not depend on the device. Timings are not checked.
"""
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import CUDA_SKIP_REASON, requires_cuda, requires_no_cuda

REPO = Path(__file__).resolve().parents[2]
LABS_DIR = REPO / "labs"
PYTHON_DIR = os.environ.get("MINI_PYTHON_DIR", str(REPO / "build" / "python"))
LABS = ["graph_breaks", "shape_thrash", "scalar_guards", "cache_storm", "regional_compile"]
WITH_BACKEND = ["graph_breaks", "shape_thrash", "scalar_guards", "regional_compile"]


def gpu(test):
    """Marks a test `cuda` and skips it without a GPU."""
    for mark in requires_cuda:
        test = mark(test)
    return test


def run_lab(name, out_dir, cache_dir, *extra):
    env = dict(os.environ, PYTHONPATH=PYTHON_DIR, MPLBACKEND="Agg",
               MINI_CACHE_DIR=str(cache_dir))
    env.pop("MINI_LOGS", None)
    return subprocess.run(
        [sys.executable, str(LABS_DIR / f"{name}.py"), "--quick", "--out", str(out_dir), *extra],
        cwd=REPO, env=env, capture_output=True, text=True, timeout=600)


def results_of(name, out_dir, cache_dir, *extra):
    done = run_lab(name, out_dir, cache_dir, *extra)
    assert done.returncode == 0, (
        f"{name}.py --quick {' '.join(extra)} failed (exit {done.returncode})\n"
        f"stdout:\n{done.stdout[-3000:]}\nstderr:\n{done.stderr[-3000:]}")
    return json.loads((out_dir / f"{name}.json").read_text())


# ---- the facts of each lab: what must not depend on the device ------------------------------


def graph_breaks_facts(results):
    programs = {}
    for p in results["programs"]:
        programs[p["name"]] = {
            "graphs": p["graph_count"],
            "breaks": p["graph_break_count"],
            "compiles": p["compiles_after_first_call"],
            "reasons": [(reason["line"], reason["code"]) for reason in p["break_reasons"]],
            "regions": [(region["kind"], region.get("ops")) for region in p["regions"]],
            "fullgraph": p["fullgraph"].split(": ")[:2],  # "ok", or "error", "Unsupported"
        }
    chains = [[(point["breaks"], point["graph_count"], point["graph_break_count"],
                point["break_reason_count"]) for point in size["points"]]
              for size in results["chains"]["sizes"]]
    return {"programs": programs, "chains": chains}


def shape_thrash_facts(results):
    streams = {}
    for stream in results["streams"]:
        streams[stream["name"]] = {
            "rows": stream["rows"],
            **{name: (s["summary"]["compiles_after_each_call"],
                      s["summary"]["cache_limit_warnings"], s["summary"]["all_match_eager"])
               for name, s in stream["strategies"].items()},
        }
    conformance = {name: (c["mini"], c["mini_mlp"]) for name, c in results["conformance"].items()}
    return {"streams": streams, "conformance": conformance}


def scalar_guards_facts(results):
    variants = {name: (v["summary"]["compiles_after_each_step"],
                       v["summary"]["cache_limit_warnings"], v["summary"]["matches_eager"])
                for name, v in results["variants"].items()}
    conformance = {name: (c["mini"], c["mini_update"])
                   for name, c in results["conformance"].items()}
    return {"steps": results["steps"], "variants": variants, "conformance": conformance}


def cache_storm_facts(results):
    return {
        "compiles_after_each_call": results["compiles_after_each_call"],
        "warning_calls": results["warning_calls"],
        "recompile_reasons": results["recompile_reasons"],
        "inductor_storms": {label: [call["compiles"] for call in storm["calls"]]
                            for label, storm in results["inductor_storms"].items()},
    }


def regional_compile_facts(results):
    strategies = {name: [(p["layers"], p["compiles"], p["graph_ops"], p["matches_eager"])
                         for p in points]
                  for name, points in results["strategies"].items()}
    return {"strategies": strategies, "three_linears": results["three_linears"]}


FACTS = {"graph_breaks": graph_breaks_facts, "shape_thrash": shape_thrash_facts,
         "scalar_guards": scalar_guards_facts, "cache_storm": cache_storm_facts,
         "regional_compile": regional_compile_facts}


@pytest.fixture(scope="module")
def cpu_facts(tmp_path_factory):
    """cpu_facts(name): the facts of that lab's --quick run on the CPU (made once)."""
    made = {}

    def get(name):
        if name not in made:
            folder = tmp_path_factory.mktemp(f"{name}_cpu")
            results = results_of(name, folder / "figures", folder / "cache", "--device", "cpu")
            assert results["device"] == "cpu"
            made[name] = FACTS[name](results)
        return made[name]
    return get


# ---- without a GPU: one line, exit 0 ----------------------------------------------------------


@requires_no_cuda
@pytest.mark.parametrize("name", LABS)
def test_device_cuda_without_a_gpu_says_why_in_one_line_and_exits_0(name, tmp_path):
    done = run_lab(name, tmp_path / "figures", tmp_path / "cache", "--device", "cuda")
    assert done.returncode == 0, done.stderr
    [line] = done.stdout.splitlines()
    assert line.startswith(f"{name}: --device cuda: skipped: no CUDA device (")
    assert CUDA_SKIP_REASON in line
    assert not (tmp_path / "figures").exists(), "a skipped lab should write nothing"


# ---- on a GPU: the same facts as on the CPU -------------------------------------------------


@gpu
@pytest.mark.parametrize("name", LABS)
def test_lab_on_cuda_has_the_cpu_runs_facts(name, tmp_path, cpu_facts):
    out_dir = tmp_path / "figures"
    results = results_of(name, out_dir, tmp_path / "cache", "--device", "cuda")
    assert results["device"] == "cuda" and results["device_name"]
    assert any(path.suffix == ".png" for path in out_dir.iterdir())
    assert FACTS[name](results) == cpu_facts(name)


@gpu
@pytest.mark.parametrize("name", WITH_BACKEND)
def test_lab_on_cuda_under_inductor_has_the_cpu_runs_facts(name, tmp_path, cpu_facts):
    """--quick runs the eager backend; the full-size runs compile every graph to CUDA kernels
    (measure.CountingBackend on the GPU, backend="inductor"): the same facts."""
    results = results_of(name, tmp_path / "figures", tmp_path / "cache", "--device", "cuda",
                         "--backend", "inductor")
    assert results["device"] == "cuda" and results["backend"] == "inductor"
    assert FACTS[name](results) == cpu_facts(name)
