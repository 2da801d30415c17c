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
    # the grader sees which stages are stubs (to say which needed ones are not written yet)
    assert grade.stubs_in(out) == set(kit.ASSIGNMENTS)
    assert "A5" not in grade.stubs_in(REPO) or "A5" in os.environ.get("MINI_KIT_STUBS", "")
    assert not (out / "build").exists() and not (out / ".venv").exists()


def test_a_student_tree_leaves_out_the_notes_that_give_its_design_away(tmp_path):
    # A6 asks for a design: notes/guards.md's passage on the reference's policy (and its
    # numbers) is not in a tree where A6 is stubbed, and the region's own comment goes with it
    import make_assignment
    passages = [r for r in make_assignment.find_doc_regions(make_assignment.tracked_files()) if r.id == "A6"]
    assert passages and all(r.path == "notes/guards.md" for r in passages)
    out = tmp_path / "student"
    run_script(out, "--only", "A6")
    ref, stu = (REPO / "notes/guards.md").read_text(), (out / "notes/guards.md").read_text()
    assert "evicts the least recently used entry" in ref and "yours (reference)" in ref
    assert "evicts the least recently used entry" not in stu and "yours (reference)" not in stu
    assert stu.count("Left out of this student tree") == len(passages)
    assert "2 * limit lookups" not in (out / "mini/guards/cache.cpp").read_text()
    assert "<!-- A6" not in stu and "`\"oldest\"`: entries stay in the order" in stu  # the rest is kept
    other = tmp_path / "other"
    run_script(other, "--only", "A5")
    assert (other / "notes/guards.md").read_text() == ref  # another assignment's tree keeps it


def test_stubbed_files_compile(tmp_path):
    cxx = os.environ.get("CXX") or shutil.which("c++")
    assert cxx, "no C++ compiler: scripts/setup.sh installs g++"
    out = tmp_path / "student"
    run_script(out)
    python_include = sysconfig.get_paths()["include"]
    import make_assignment
    files = sorted({r.path for r in make_assignment.find_regions(make_assignment.tracked_files())})
    # every file with a region; a header through a source that includes it
    units = [rel if rel.endswith(".cpp") else
             next(str(c.relative_to(out)) for c in sorted((out / "mini").rglob("*.cpp"))
                  if f'"{Path(rel).name}"' in c.read_text() or f'/{Path(rel).name}"' in c.read_text())
             for rel in files]
    assert len(units) >= 9, units
    for rel in units:
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


def handout_points(assignment_id):
    """The handout's points table: {part: points}."""
    text = (REPO / "notes" / "assignments" / f"{assignment_id}.md").read_text()
    table = text.split("## Points", 1)[1].split("\n\n", 2)[1]
    rows = [[cell.strip() for cell in line.strip("|").split("|")] for line in table.splitlines()[2:]]
    return {row[0]: int(row[-1]) for row in rows}


def test_the_grader_scores_the_handouts_points_table():
    # scripts/kit.py's parts are the handouts' tables (written questions apart), out of 100
    for a in kit.ASSIGNMENTS.values():
        table = handout_points(a.id)
        parts = {p.name: p.points for p in a.parts}
        assert table == {**parts, "written questions": a.question_points}, a.id
        assert sum(table.values()) == 100, a.id


def test_a_weeks_tree_stubs_that_week_and_the_later_ones_but_what_it_needs():
    assert sorted(kit.SCHEDULE) == sorted(kit.ASSIGNMENTS)
    assert kit.week_stubs(kit.SCHEDULE[0]) == list(kit.SCHEDULE)  # the first week: every stage but none
    assert kit.week_stubs("A2") == ["A2", "A8", "A3", "A4", "A10"]  # A1, an earlier week, stays written
    assert kit.week_stubs("A3") == ["A3", "A10"]  # A4 comes later but A3's tests need it
    assert kit.needed_by("A8") == {"A1", "A2"} and kit.needed_by("A10") == {"A3", "A4"}
    for a in kit.SCHEDULE:  # a week's tree never stubs what that week's tests need
        assert not set(kit.week_stubs(a)) & kit.needed_by(a), a


def test_a_part_takes_tests_by_file_section_name_or_catch2_case():
    part = kit.Part("p", 10, ("test_a.py § tensor match", "test_b.py::test_one*", "test_capture_*.py", "C++ rule *"))
    assert part.takes("test_a.py", "tensor match (sizes)", "test_x")
    assert not part.takes("test_a.py", "type match", "test_x")
    assert part.takes("test_b.py", "", "test_one[3]") and not part.takes("test_b.py", "", "test_two")
    assert part.takes("test_capture_features.py", "", "test_y") and not part.takes("test_guards.py", "", "test_y")
    assert part.takes("C++", "", "rule same_space: ...") and not part.takes("C++", "", "check fits_size")
    assert not part.takes("test_c.py", "", "rule same_space")  # a C++ selector takes no Python test
    a = kit.ASSIGNMENTS["A8"]  # the first part that takes a test is its part
    assert a.part_of("test_min_cut.py", "never worse than save-all or the greedy rule",
                     "test_min_cut_partitioner_trains_a_gpt_with_eagers_gradients").name == "a real model"
    assert a.part_of("test_min_cut.py", "never worse than save-all or the greedy rule", "test_x").name == \
        "never worse than the alternatives"
    assert grade.section_of(REPO, "tests/python/test_guards.py", "test_nothing_here") == ""


def test_every_tagged_test_counts_in_one_part_and_every_part_has_tests():
    # what a student's grade adds up: no test of an assignment outside its points table, no part
    # without a test (Catch2 cases listed by the test binary, pytest's by collection)
    for a in kit.ASSIGNMENTS.values():
        done = subprocess.run([sys.executable, "-m", "pytest", "--collect-only", "-q", "-p", "no:cacheprovider",
                               "-m", a.marker, "tests/python"], cwd=REPO, capture_output=True, text=True,
                              timeout=300, env=dict(os.environ, PYTHONPATH=str(BUILD)))
        tests = [line for line in done.stdout.splitlines() if "::" in line]
        assert tests, f"{a.id}: pytest collected nothing for -m {a.marker}:\n{done.stdout[-1500:]}"
        keys = []
        for node in tests:
            path, name = node.split("::", 1)
            keys.append((Path(path).name, grade.section_of(REPO, path, name.split("[")[0]), name))
        if a.catch2:
            listed = subprocess.run([str(BUILD.parent / "mini_tests"), "--list-test-names-only", a.catch2],
                                    capture_output=True, text=True, timeout=60).stdout
            cases = [line.strip() for line in listed.splitlines() if line.strip()]
            assert cases, f"{a.id}: mini_tests lists no case tagged {a.catch2}"
            keys += [("C++", "", case) for case in cases]
        outside = [k for k in keys if a.part_of(*k) is None]
        assert not outside, f"{a.id}: tests in no part of its points table: {outside[:5]}"
        for part in a.parts:
            assert any(a.part_of(*k) is part for k in keys), f"{a.id}: part '{part.name}' has no test"


def test_the_kit_switch_throws_the_student_stubs_words_and_names_kit_py(tmp_path):
    # MINI_KIT_STUBS=A3 makes the reference's region throw what the student tree's stub throws
    # (mini/tensor/errors.h): the kit check's one build stands for every student tree
    import make_assignment
    region = next(r for r in make_assignment.find_regions(make_assignment.tracked_files()) if r.id == "A3")
    stub = make_assignment.stub_line(region, "")
    words = stub[stub.index('"') + 1:stub.rindex('"')]
    script = ("import mini\n"
              "f = mini.compile(lambda x: (x * 2).relu() + 1)\n"
              "try:\n    f(mini.randn(4, 4))\nexcept RuntimeError as e:\n    print(e)\n")
    env = dict(os.environ, MINI_KIT_STUBS="A1,A3", MINI_ASSIGNMENT_STRICT="A3",
               PYTHONPATH=str(BUILD))
    done = subprocess.run([sys.executable, "-c", script], cwd=tmp_path, env=env, capture_output=True, text=True,
                          timeout=120)
    assert done.stdout.splitlines()[0] == words, done.stdout + done.stderr  # then the graph it was compiling
    # errors.h names each assignment as scripts/kit.py does
    header = (REPO / "mini" / "tensor" / "errors.h").read_text()
    for a in kit.ASSIGNMENTS.values():
        assert f'{{"{a.id}", "{a.name}"}}' in header, f"errors.h's name of {a.id} is not kit.py's {a.name!r}"


def test_a_test_belongs_to_one_assignment_at_most(tmp_path):
    folder = REPO / "tests" / "python" / f"_kit_{os.getpid()}"
    folder.mkdir()
    try:
        (folder / "test_shared.py").write_text("import pytest\n\n@pytest.mark.a5\n@pytest.mark.a6\n"
                                               "def test_both():\n    pass\n")
        done = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "--collect-only",
                               str(folder)], cwd=REPO, capture_output=True, text=True, timeout=120,
                              env=dict(os.environ, PYTHONPATH=str(BUILD)))
    finally:
        shutil.rmtree(folder)
    assert done.returncode != 0
    assert "belongs to one assignment at most" in done.stdout + done.stderr and "test_both (a5, a6)" in done.stdout + done.stderr


def test_the_grader_turns_a_stub_or_an_assertion_into_a_sentence():
    stub = ('RuntimeError: not implemented: A3 fusion legality (mini/fusion/schedule.cpp; '
            'notes/assignments/A3.md says what to write)')
    assert grade.advice(stub) == "still the stub: write A3 fusion legality in mini/fusion/schedule.cpp"
    failure = "def test_x():\n>       assert kernels == 1\nE       assert 3 == 1\n"
    assert grade.advice("AssertionError: assert 3 == 1", failure) == "assert 3 == 1"
    assert grade.advice("") == "failed without a message"
    # every line of the explanation, not the first cut at 200 characters
    long = "".join(f"E         {i}\n" for i in range(30))
    assert grade.advice("AssertionError", "E   assert [...] == [...]\n" + long).count("\n") == 30
    # a stub's words in a test's captured output are not the test's failure
    said = "E   assert 'mismatch' in 'warning: not implemented: A7 automatic dynamic shapes (mini/x.cpp; ...)'"
    assert not grade.advice("AssertionError: assert 'mismatch' in ...", said).startswith("still the stub")


def test_a_test_that_crashes_the_interpreter_is_found_in_the_verbose_output():
    # verbose pytest prints a test's id as it starts and its verdict as it ends: a crash leaves
    # the id alone on the last line, and the grader reruns without it (grade.run_pytest)
    out = ("tests/python/test_g.py::test_a PASSED                 [ 50%]\n"
           "tests/python/test_g.py::test_b[x-1] \n")
    assert grade.crashed_test(out) == "tests/python/test_g.py::test_b[x-1]"
    assert grade.crashed_test("tests/python/test_g.py::test_a PASSED [100%]\n") is None  # died after it
    assert grade.crashed_test("ImportError: no module\n") is None


def test_a_catch2_failure_says_its_check_and_its_expansion_or_the_stub():
    # Catch2's junit report: a failed CHECK has the expression as its message and "FAILED:", the
    # check, its expansion and its place as text; an exception has no message
    failed = "\nFAILED:\n  CHECK( cuda_reduction_threads(100, l) == 32 )\nwith expansion:\n  64 == 32\nat t.cpp:66\n"
    assert grade.catch2_advice("cuda_reduction_threads(100, l) == 32", failed) == (
        "CHECK( cuda_reduction_threads(100, l) == 32 )\nwith expansion:\n64 == 32\nat t.cpp:66")
    stub = "\nFAILED:\nnot implemented: A10 a CUDA reduction's layout (mini/codegen/cuda_launch.cpp; see A10.md)\nat t.cpp:5\n"
    assert grade.catch2_advice("", stub) == ("still the stub: write A10 a CUDA reduction's layout in "
                                             "mini/codegen/cuda_launch.cpp")


def test_the_grader_says_what_a_test_checks_and_warns_of_a_stale_build(tmp_path):
    test = tmp_path / "tests" / "test_x.py"
    test.parent.mkdir()
    test.write_text('def test_doc():\n    """Its docstring."""\n\n\n'
                    '# its comment,\n# two lines\n@decorated\ndef test_comment():\n    pass\n\n\n'
                    'def test_a_hit_moves_to_the_front():\n    pass\n')
    assert grade.what_it_checks(tmp_path, "tests/test_x.py", "test_doc") == "Its docstring."
    assert grade.what_it_checks(tmp_path, "tests/test_x.py", "test_comment") == "its comment, two lines"
    assert grade.what_it_checks(tmp_path, "tests/test_x.py", "test_a_hit_moves_to_the_front") == "a hit moves to the front"
    built = tmp_path / "build" / "python" / "mini" / "_C.cpython-311.so"
    built.parent.mkdir(parents=True)
    built.write_text("")
    source = tmp_path / "mini" / "guards" / "cache.cpp"
    source.parent.mkdir(parents=True)
    source.write_text("")
    os.utime(built, (1000, 1000))
    assert grade.stale_sources(tmp_path) == ["mini/guards/cache.cpp"]
    os.utime(source, (900, 900))
    assert grade.stale_sources(tmp_path) == []


def test_the_grader_reports_a_failure_with_its_comment_its_diff_and_a_rerun_command(tmp_path):
    # A6 graded with its stub (the kit switch), and a hidden test of the instructor's that fails
    hidden = tmp_path / "hidden"
    hidden.mkdir()
    (hidden / "test_held_back.py").write_text(
        "import pytest\n\n\n@pytest.mark.a6\ndef test_long_lists_differ():\n"
        "    \"\"\"Sixty numbers in order.\"\"\"\n"
        "    assert list(range(60)) == list(range(59)) + [99]\n")
    env = dict(os.environ, MINI_KIT_STUBS="A6", PYTHONPATH="")
    done = subprocess.run([sys.executable, str(REPO / "scripts" / "grade.py"), "A6", "--no-lab", "--one-python",
                           "--hidden", str(hidden)], cwd=REPO, env=env, capture_output=True, text=True, timeout=600)
    out = done.stdout
    assert done.returncode == 1, out + done.stderr
    assert "still the stub: write A6 a guard cache policy in mini/guards/cache.cpp" in out
    assert "it checks: Sixty numbers in order." in out  # the test's docstring
    assert "rerun it: PYTHONPATH=build/python " in out and "-m pytest -q tests/python/test_cache_policy.py::" in out
    assert "hidden: test_held_back.py" in out and "0 / 1" in out.split("hidden: test_held_back.py")[1].splitlines()[0]
    assert "59 != 99" in out or "99" in out.split("test_long_lists_differ")[1]  # the diff, whole
    assert not (REPO / "tests" / "python" / "hidden").exists()  # the hidden tests are taken out again





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
    assert all(r.passed for r in results), [r for r in results if not r.passed]
    assert any("finite differences" in r.name for r in results), [r.name for r in results]
    assert grade.run_catch2(REPO, "[no such tag]") == []  # no case: neither a point won nor lost
