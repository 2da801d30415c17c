"""mini/_cpu.py: `import mini` names OpenBLAS's kernels from the CPU's flags before OpenBLAS
loads (an OpenBLAS that does not know the CPU falls back to SSE3 kernels, five times slower:
the GPU host's, 2026-12-03), and leaves a user's OPENBLAS_CORETYPE alone."""
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

import mini
from mini import _cpu

MINI_DIR = Path(mini.__file__).resolve().parents[1]

AVX512 = {"fma", "avx2", "avx512f", "avx512cd", "avx512bw", "avx512dq", "avx512vl"}


def test_the_best_core_the_flags_can_run():
    assert _cpu.openblas_core_for(AVX512) == "SkylakeX"
    assert _cpu.openblas_core_for(AVX512 - {"avx512bw"}) == "Haswell"  # AVX-512 without BW: not SkylakeX's
    assert _cpu.openblas_core_for({"sse3", "avx", "avx2", "fma"}) == "Haswell"
    assert _cpu.openblas_core_for({"sse3", "avx"}) is None  # OpenBLAS decides


def test_cpu_flags_reads_the_first_processor(tmp_path):
    info = tmp_path / "cpuinfo"
    info.write_text("processor\t: 0\nmodel name\t: Intel(R) Xeon(R) Processor\n"
                    "flags\t\t: fpu sse3 avx2 fma\n\nprocessor\t: 1\nflags\t\t: fpu\n")
    assert _cpu.cpu_flags(str(info)) == {"fpu", "sse3", "avx2", "fma"}
    assert _cpu.cpu_flags(str(tmp_path / "missing")) == set()


def test_a_users_choice_wins(tmp_path):
    info = tmp_path / "cpuinfo"
    info.write_text("flags\t: " + " ".join(sorted(AVX512)) + "\n")
    env = {}
    assert _cpu.choose_openblas_core(env, str(info)) == "SkylakeX" and env["OPENBLAS_CORETYPE"] == "SkylakeX"
    env = {"OPENBLAS_CORETYPE": "Haswell"}
    assert _cpu.choose_openblas_core(env, str(info)) is None and env == {"OPENBLAS_CORETYPE": "Haswell"}
    env = {"MINI_BLAS_CORE": "openblas"}
    assert _cpu.choose_openblas_core(env, str(info)) is None and "OPENBLAS_CORETYPE" not in env


def loaded_core(**env_changes):
    env = dict(os.environ, PYTHONPATH=str(MINI_DIR))
    env.pop("OPENBLAS_CORETYPE", None)
    env.update(env_changes)
    code = "import json, mini; from mini._cpu import openblas; print(json.dumps(openblas()))"
    done = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


def test_import_mini_loads_openblas_with_the_core_it_chose():
    chosen = _cpu.openblas_core_for(_cpu.cpu_flags())
    blas = loaded_core()
    if blas is None:
        pytest.skip("mini links a BLAS other than OpenBLAS here")
    if chosen is None:
        pytest.skip("this CPU has neither AVX2 nor AVX-512: OpenBLAS chooses")
    assert blas["core"].lower() == chosen.lower(), blas
    assert loaded_core(OPENBLAS_CORETYPE="Prescott")["core"].lower() == "prescott"  # the user's wins
