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


def run_article_figures(names, out_dir):
    env = dict(os.environ, PYTHONPATH=PYTHON_DIR, MPLBACKEND="Agg")
    env.pop("MINI_LOGS", None)
    env.pop("MINI_COMPILE_DEBUG", None)
    done = subprocess.run([sys.executable, str(DRIVER), "--quick", "--only", ",".join(names),
                           "--out", str(out_dir)], cwd=REPO, env=env, capture_output=True,
                          text=True, timeout=600)
    assert done.returncode == 0, (f"article_figures.py --quick failed\nstdout:\n"
                                  f"{done.stdout[-3000:]}\nstderr:\n{done.stderr[-3000:]}")
    return {name: json.loads((out_dir / f"article_{name}.json").read_text()) for name in names}
