"""The two ways a CUDA kernel fails, as the user sees them (issue 12): a launch that CUDA refuses
raises at once with CUDA's error string and the op, and the process carries on; an error inside
a running kernel surfaces at the next synchronizing call, naming CUDA's error and the last op
launched (the context is then unusable, as CUDA's rule is, so that case runs in a child)."""
import os
import subprocess
import sys

import pytest

import mini
from conftest import CUDA_SKIP_REASON, HAS_CUDA

pytestmark = [pytest.mark.cuda, pytest.mark.skipif(not HAS_CUDA, reason=CUDA_SKIP_REASON)]


def test_failed_launch_names_the_error_and_the_op_and_the_process_goes_on():
    # CUDA's own words vary by version ("invalid configuration argument", 13.0: "invalid
    # argument"); mini's: "CUDA error: <CUDA's> (launching the <op> kernel)"
    with pytest.raises(RuntimeError,
                       match=r"CUDA error: invalid [a-z ]*argument \(launching the test_bad_launch kernel\)"):
        mini._C._cuda._test_fault(0)
    x = mini.ones(4, device="cuda")
    assert (x + 1).sum().item() == 8.0  # the context is still good


CHILD = """
import mini
x = mini.ones(4, device="cuda")
mini._C._cuda._test_fault(1)          # returns at once: the kernel has not run yet
try:
    mini.cuda.synchronize()
except RuntimeError as e:
    print("RAISED", e)
"""


def test_asynchronous_error_surfaces_at_the_next_synchronizing_call():
    env = dict(os.environ, PYTHONPATH=mini.__path__[0].rsplit(os.sep, 1)[0])
    env.pop("CUDA_LAUNCH_BLOCKING", None)
    done = subprocess.run([sys.executable, "-c", CHILD], env=env, capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 0, done.stderr
    assert "RAISED CUDA error: an illegal memory access" in done.stdout, done.stdout
    assert "test_illegal_address" in done.stdout
    assert "CUDA_LAUNCH_BLOCKING=1" in done.stdout  # how to find the op


def test_launch_blocking_reports_the_faulting_op_at_its_launch():
    env = dict(os.environ, PYTHONPATH=mini.__path__[0].rsplit(os.sep, 1)[0], CUDA_LAUNCH_BLOCKING="1")
    child = "import mini\ntry:\n    mini._C._cuda._test_fault(1)\nexcept RuntimeError as e:\n    print('RAISED', e)\n"
    done = subprocess.run([sys.executable, "-c", child], env=env, capture_output=True, text=True,
                          timeout=120)
    assert "RAISED CUDA error: an illegal memory access" in done.stdout, done.stdout + done.stderr
    assert "test_illegal_address" in done.stdout

