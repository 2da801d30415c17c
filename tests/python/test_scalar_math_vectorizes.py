"""scalar_math.h's float32 functions keep the loops that call them vectorized, with the
compiler and flags mini compiles its C++ kernels with (mini/runtime/compiled_graph.cpp).

That is their point: a fused kernel's loop over exp, erf, sin or GELU runs 8 or 16 lanes at a
time or one. A select on a float (`zero ? 0.0f : x` in exp_f32, `|x| <= 1 ? small : large` in
erf_f32) once made GCC 12 give up on every loop calling them ("control flow in loop"): the
GPT's fused GELU backward ran scalar for a session without any test noticing.

    PYTHONPATH=build/python .venv/bin/python -m pytest tests/python/test_scalar_math_vectorizes.py
"""
import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest

SCALAR_MATH = Path(__file__).resolve().parents[2] / "mini" / "tensor" / "scalar_math.h"
CXX = os.environ.get("CXX") or "c++"

CALLS = {
    "exp_f32": "mini::exp_f32(a[i])",
    "erf_f32": "mini::erf_f32(a[i])",
    "sin_f32": "mini::sin_f32(a[i])",
    "cos_f32": "mini::cos_f32(a[i])",
    "sigmoid_f32": "mini::sigmoid_f32(a[i])",
    "gelu_of (erf)": "mini::gelu_of<float>(a[i], false)",
    "gelu_grad_of (erf)": "g[i] * mini::gelu_grad_of<float>(a[i], false)",
}


def compiler_is_gcc():
    if not shutil.which(CXX):
        return False
    out = subprocess.run([CXX, "--version"], capture_output=True, text=True).stdout
    return "Free Software Foundation" in out or "GCC" in out


@pytest.mark.skipif(not compiler_is_gcc(), reason=f"{CXX} is not GCC: -fopt-info-vec is GCC's report")
@pytest.mark.parametrize("name", sorted(CALLS))
def test_a_loop_over_it_vectorizes(name, tmp_path):
    src = tmp_path / "loop.cpp"
    src.write_text(f'#include "{SCALAR_MATH}"\n'
                   "void k(const float* __restrict__ a, const float* __restrict__ g, float* __restrict__ o, long n) {\n"
                   "#pragma omp simd\n"
                   f"  for (long i = 0; i < n; i++) o[i] = {CALLS[name]};\n"
                   "}\n")
    flags = ["-O3", "-march=native", "-mprefer-vector-width=512", "-fopenmp", "-std=c++17", "-fPIC"]
    r = subprocess.run([CXX, *flags, "-c", str(src), "-o", str(tmp_path / "loop.o"), "-fopt-info-vec-all"],
                       capture_output=True, text=True)
    assert r.returncode == 0, r.stderr[-2000:]
    loop = [line for line in r.stderr.splitlines() if re.match(rf"{re.escape(str(src))}:4:", line)]
    assert any("loop vectorized" in line for line in loop), (
        f"{name}: GCC did not vectorize the loop that calls it:\n" + "\n".join(loop[:6]))
