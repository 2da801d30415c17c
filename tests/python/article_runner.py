"""Runs labs/article_figures.py --quick --only NAMES in a subprocess with this interpreter
into a folder, for the tests of the article's figures; returns each figure's JSON by name."""
import json
import os
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
DRIVER = REPO / "labs" / "article_figures.py"
PYTHON_DIR = os.environ.get("MINI_PYTHON_DIR", str(REPO / "build" / "python"))


class Figures(dict):
    """Each figure's JSON by name; asking for one the driver could not draw fails the test that
    asks, with the driver's output, and no other (a course kit's stub stops one figure only)."""

    def __init__(self, made, failure):
        super().__init__(made)
        self.failure = failure

    def __missing__(self, name):
        raise AssertionError(f"article_figures.py --quick did not draw {name}\n{self.failure}")


def run_article_figures(names, out_dir):
    env = dict(os.environ, PYTHONPATH=PYTHON_DIR, MPLBACKEND="Agg")
    env.pop("MINI_LOGS", None)
    env.pop("MINI_COMPILE_DEBUG", None)
    done = subprocess.run([sys.executable, str(DRIVER), "--quick", "--only", ",".join(names),
                           "--out", str(out_dir)], cwd=REPO, env=env, capture_output=True,
                          text=True, timeout=600)
    failure = f"stdout:\n{done.stdout[-3000:]}\nstderr:\n{done.stderr[-3000:]}"
    made = {name: json.loads((out_dir / f"article_{name}.json").read_text()) for name in names
            if (out_dir / f"article_{name}.json").exists()}
    assert made or done.returncode == 0, f"article_figures.py --quick failed\n{failure}"
    return Figures(made, failure if done.returncode else "")
