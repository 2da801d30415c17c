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
    for rel in ("mini/fusion/schedule.cpp", "mini/tensor/derivatives.h", "mini/autograd/partition.cpp",
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
    for rel in ("mini/tensor/autograd.cpp", "mini/autograd/partition.cpp", "mini/fusion/schedule.cpp",
                "mini/codegen/c_style.cpp", "mini/guards/guards.cpp"):
        r = subprocess.run([cxx, "-std=c++17", "-fopenmp", "-fsyntax-only", f"-I{out / 'mini'}",
                            f"-I{GENERATED}", f"-I{python_include}", str(out / rel)],
                           capture_output=True, text=True, timeout=120)
        assert r.returncode == 0, f"{rel}:\n{r.stderr[-3000:]}"


# ---- the kit's table, the grader ---------------------------------------------------------------
# (Building a student tree per assignment and grading it is scripts/check_kit.py, ctest's
# assignment_kit: too long for a unit test.)

sys.path.insert(0, str(REPO / "scripts"))
import grade  # noqa: E402
import kit  # noqa: E402


def test_the_kit_table_names_every_region_marker_handout_and_lab():
    found = regions()
    assert sorted(kit.ASSIGNMENTS) == sorted(found), "scripts/kit.py and the marked regions disagree"
    for a in kit.ASSIGNMENTS.values():
        assert a.marker in ASSIGNMENTS, f"{a.id}: marker {a.marker} is not registered in conftest.py"
        assert all(line.startswith(a.name + " ") for line in found[a.id]), (a.id, a.name, found[a.id])
        handout = REPO / "notes" / "assignments" / f"{a.id}.md"
        assert handout.exists(), f"{a.id} has no handout {handout.relative_to(REPO)}"
        text = handout.read_text()
        for section in ("contract", "test", "lab"):
            assert section in text.lower(), f"{handout.name} says nothing about its {section}"
        assert (REPO / a.lab[0]).exists(), f"{a.id}'s lab {a.lab[0]} does not exist"
        assert "--quick" in a.lab
        assert all(r in kit.ASSIGNMENTS and r != a.id for r in a.requires), (a.id, a.requires)


def test_independent_assignments_leave_out_the_stubbed_one_and_those_built_on_it():
    ids = [a.id for a in kit.independent_of("A1")]
    assert "A1" not in ids and "A2" not in ids and "A3" in ids
    assert "A2" in [a.id for a in kit.independent_of("A3")]


def test_the_grader_turns_a_stub_or_an_assertion_into_a_sentence():
    stub = ('RuntimeError: not implemented: A3 fusion legality (mini/fusion/schedule.cpp; '
            'notes/assignments/A3.md says what to write)')
    assert grade.advice(stub) == "still the stub: write A3 fusion legality in mini/fusion/schedule.cpp"
    failure = "def test_x():\n>       assert kernels == 1\nE       assert 3 == 1\n"
    assert grade.advice(failure) == "assert 3 == 1"
    assert grade.advice("") == "failed without a message"


def test_the_grader_lists_the_assignments_and_refuses_an_unbuilt_tree(tmp_path):
    listed = subprocess.run([sys.executable, str(REPO / "scripts" / "grade.py"), "--list"], capture_output=True,
                            text=True, timeout=60)
    assert listed.returncode == 0
    assert [line.split()[0] for line in listed.stdout.splitlines()] == list(kit.ASSIGNMENTS)
    unbuilt = subprocess.run([sys.executable, str(REPO / "scripts" / "grade.py"), "A3", str(tmp_path)],
                             capture_output=True, text=True, timeout=60)
    assert unbuilt.returncode == 2 and "is not built" in unbuilt.stdout, unbuilt.stdout
    unknown = subprocess.run([sys.executable, str(REPO / "scripts" / "grade.py"), "A99"], capture_output=True,
                             text=True, timeout=60)
    assert unknown.returncode == 2 and "no assignment A99" in unknown.stderr


def test_the_grader_reads_the_catch2_report_of_a_tag():
    # the reference's C++ tests of A1, through the spelling of --reporter this Catch2 accepts
    if not (REPO / "build" / "mini_tests").exists():
        pytest.skip("no build/mini_tests: configured with MINI_CPP_TESTS=OFF")
    results = grade.run_catch2(REPO, "[A1]")
    assert results, "no test case read from the report"
    assert all(ok for _, ok, _ in results), [r for r in results if not r[1]]
    assert any("finite differences" in name for name, _, _ in results), [name for name, _, _ in results]
    assert grade.run_catch2(REPO, "[no such tag]") == []  # no case: neither a point won nor lost
