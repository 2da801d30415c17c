"""labs/regional_compile.py run with --quick, in a subprocess with this interpreter, into a
temporary folder. The tests check the facts the lab reports in its JSON -- compiles per
strategy and per number of blocks, the ops the compiled graphs hold, results equal to eager,
issue 10's three-Linear program -- and that its figure and JSON were written. Timings are not
checked (they move on a busy machine; the graph sizes, which are what a compile works
through, do not).

Expected counts come from the structure of the model the JSON describes: a whole-model graph
holds N blocks' ops, a regional graph one block's, and torch 2.11 compiles f(m, x) = m(x) once
for three Linear(8, 8) instances."""
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
LAB = REPO / "labs" / "regional_compile.py"
PYTHON_DIR = os.environ.get("MINI_PYTHON_DIR", str(REPO / "build" / "python"))
OUTPUTS = ["regional_compile.png", "regional_compile.svg", "regional_compile.json"]


def run_lab(out_dir, *extra):
    env = dict(os.environ, PYTHONPATH=PYTHON_DIR, MPLBACKEND="Agg")
    env.pop("MINI_LOGS", None)
    return subprocess.run([sys.executable, str(LAB), "--out", str(out_dir), *extra], cwd=REPO,
                          env=env, capture_output=True, text=True, timeout=300)


@pytest.fixture(scope="module")
def lab(tmp_path_factory):
    out_dir = tmp_path_factory.mktemp("regional_compile")
    completed = run_lab(out_dir, "--quick")
    assert completed.returncode == 0, (
        f"regional_compile.py --quick failed (exit {completed.returncode})\n"
        f"stdout:\n{completed.stdout[-3000:]}\nstderr:\n{completed.stderr[-3000:]}")
    results = json.loads((out_dir / "regional_compile.json").read_text())
    return out_dir, completed.stdout, results


def test_writes_its_figure_and_json(lab):
    out_dir, stdout, results = lab
    for filename in OUTPUTS:
        path = out_dir / filename
        assert path.exists() and path.stat().st_size > 0, f"did not write {filename}"
    assert results["quick"] is True
    assert results["backend"] == "eager", "--quick must default to the eager backend"
    assert "wrote " in stdout


def test_every_strategy_compiles_once_for_every_n(lab):
    _, _, results = lab
    layers = results["layers"]
    assert layers[0] == 1 and len(layers) >= 3
    for name in ("whole model", "block.compile()", "one compiled fn"):
        points = results["strategies"][name]
        assert [p["layers"] for p in points] == layers
        assert [p["compiles"] for p in points] == [1] * len(layers), name
        assert all(p["matches_eager"] for p in points), name


def test_whole_model_graph_grows_with_n_regional_graph_does_not(lab):
    _, _, results = lab
    whole = results["strategies"]["whole model"]
    one_block = whole[0]["graph_ops"]  # N = 1: the graph of one block
    assert one_block > 0
    assert [p["graph_ops"] for p in whole] == [n * one_block for n in results["layers"]]
    for name in ("block.compile()", "one compiled fn"):
        assert {p["graph_ops"] for p in results["strategies"][name]} == {one_block}, name


def test_three_linears_compile_once_as_in_torch(lab):
    _, stdout, results = lab
    assert results["three_linears"] == [1, 1, 1]
    assert results["torch_2_11"]["three_linears"] == [1, 1, 1]
    assert "beside torch 2.11" in stdout

