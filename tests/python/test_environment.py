"""What importing mini sets in the process environment: GOMP_SPINCOUNT (OpenMP's idle
threads must not keep the cores from OpenBLAS's threads), unless the user set it."""
import os
import subprocess
import sys

import mini

PKG_DIR = os.path.dirname(os.path.dirname(os.path.abspath(mini.__file__)))
SCRIPT = "import os, mini; print(os.environ['GOMP_SPINCOUNT'])"


def spincount_after_import(**env):
    full = dict(os.environ, PYTHONPATH=PKG_DIR, **env)
    if "GOMP_SPINCOUNT" not in env:
        full.pop("GOMP_SPINCOUNT", None)
    r = subprocess.run([sys.executable, "-c", SCRIPT], env=full, capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    return r.stdout.strip()


def test_import_limits_openmp_spinning():
    assert spincount_after_import() == "10000"


def test_the_users_setting_wins():
    assert spincount_after_import(GOMP_SPINCOUNT="123") == "123"
