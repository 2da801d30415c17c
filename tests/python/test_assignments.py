"""Assignments (scripts/make_assignment.py, notes/assignments.md): the marked regions, the
student tree the script makes, and that a stubbed stage fails with its own message while the
rest of mini keeps working (one student tree is built and run: A3 stubbed)."""
import os
import shutil
import subprocess
import sys
import sysconfig
import textwrap
from pathlib import Path

import pytest

import mini
from conftest import ASSIGNMENTS

REPO = Path(__file__).resolve().parents[2]
SCRIPT = REPO / "scripts" / "make_assignment.py"
BUILD = Path(os.path.dirname(os.path.dirname(os.path.abspath(mini.__file__))))  # build*/python -> build*
GENERATED = BUILD.parent / "generated"


def run_script(*args):
    r = subprocess.run([sys.executable, str(SCRIPT), *map(str, args)], cwd=REPO, capture_output=True,
                       text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    return r.stdout


def regions():
    out = {}
    for line in run_script("--list").splitlines():
        rid, rest = line.split(maxsplit=1)
        out.setdefault(rid, []).append(rest)
    return out


def test_every_assignment_has_regions_tests_and_a_notes_entry():
    found = regions()
    assert sorted(found) == sorted(m.upper() for m in ASSIGNMENTS)
    notes = (REPO / "notes" / "assignments.md").read_text()
    for rid in found:
        assert f"## {rid}:" in notes, f"notes/assignments.md has no section for {rid}"


def test_the_student_tree_differs_only_inside_the_regions(tmp_path):
    out = tmp_path / "student"
    run_script(out)
    for rel in ("mini/fusion/schedule.cpp", "mini/tensor/derivatives.h", "mini/autograd/training.cpp",
                "mini/codegen/c_style.cpp"):
        ref = (REPO / rel).read_text().splitlines()
        stu = (out / rel).read_text().splitlines()
        i = 0
        kept = []
        while i < len(ref):  # the reference with each region's body replaced by one marker
            kept.append(ref[i])
            if " BEGIN: " in ref[i] and ref[i].strip().startswith("// A"):
                while "END" not in ref[i + 1] or not ref[i + 1].strip().startswith("// A"):
                    i += 1
                kept.append("STUB")
            i += 1
        stubs = [line for line in stu if "::mini::fail(\"not implemented: A" in line]
        assert stubs, rel
        assert [("STUB" if line in stubs else line) for line in stu] == kept, rel
    # files without regions are copied unchanged
    assert (out / "mini/tensor/ops.h").read_text() == (REPO / "mini/tensor/ops.h").read_text()
    assert not (out / "build").exists() and not (out / ".venv").exists()


def test_stubbed_files_compile(tmp_path):
    cxx = os.environ.get("CXX") or shutil.which("c++")
    assert cxx, "no C++ compiler: scripts/setup.sh installs g++"
    out = tmp_path / "student"
    run_script(out)
    python_include = sysconfig.get_paths()["include"]
    for rel in ("mini/tensor/autograd.cpp", "mini/autograd/training.cpp", "mini/fusion/schedule.cpp",
                "mini/codegen/c_style.cpp", "mini/guards/guards.cpp"):
        r = subprocess.run([cxx, "-std=c++17", "-fopenmp", "-fsyntax-only", f"-I{out / 'mini'}",
                            f"-I{GENERATED}", f"-I{python_include}", str(out / rel)],
                           capture_output=True, text=True, timeout=120)
        assert r.returncode == 0, f"{rel}:\n{r.stderr[-3000:]}"


def test_a_student_tree_with_a3_and_a5_stubbed_builds_and_fails_only_where_it_should(tmp_path):
    """Builds the Python package of a tree with fusion legality (A3) and the tensor guard (A5)
    stubbed, then: eager mini and a first compiled call work; backend="inductor" raises A3's
    message; the second call of a compiled function (a cache lookup) raises A5's."""
    cmake = shutil.which("cmake")
    assert cmake, "no cmake: scripts/setup.sh installs it"
    out = tmp_path / "student"
    run_script(out, "--only", "A3", "A5")
    build = out / "build"
    configure = [cmake, "-S", str(out), "-B", str(build), "-DCMAKE_BUILD_TYPE=Release",
                 f"-DPython_EXECUTABLE={sys.executable}", "-DMINI_CPP_TESTS=OFF", "-DMINI_SANITIZED_TESTS=OFF"]
    if shutil.which("ninja"):
        configure += ["-G", "Ninja"]
    for cmd in (configure, [cmake, "--build", str(build), "-j", str(os.cpu_count() or 2),
                            "--target", "_C", "mini_python_files"]):
        r = subprocess.run(cmd, capture_output=True, text=True, timeout=900)
        assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    check = textwrap.dedent("""
        import mini
        x = mini.randn(8, 8)
        f = lambda x: (x + 1).relu() * 2
        g = mini.compile(f, backend="eager")
        assert mini.allclose(g(x), f(x))  # the first call compiles: no guard is checked yet
        for call in (lambda: mini.compile(f, backend="inductor")(x), lambda: g(x)):
            try:
                call()
            except RuntimeError as e:
                print("raised:", e)
            else:
                print("no error")
    """)
    env = dict(os.environ, PYTHONPATH=str(build / "python"), MINI_CACHE_DIR=str(tmp_path / "cache"))
    env.pop("MINI_PYTHON_DIR", None)
    r = subprocess.run([sys.executable, "-c", check], env=env, capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    assert "raised: not implemented: A3 fusion legality (mini/fusion/schedule.cpp" in r.stdout, r.stdout
    assert "raised: not implemented: A5 the tensor guard (TENSOR_MATCH) (mini/guards/guards.cpp" in r.stdout, r.stdout
