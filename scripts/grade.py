"""Grades one assignment of the course kit on a student tree.

    python3 scripts/grade.py A3 [TREE]        # TREE: a student tree, built (default: this one)
    python3 scripts/grade.py --list

Runs the assignment's tagged tests (pytest -m a3, and its Catch2 tag where it has one) on the
tree's build and its lab with --quick, then prints a score per test group (a test file, or the
C++ tests) and, for each failure, what the test checks and what went wrong, in words a student
can act on: "still the stub", the first line of the assertion, or the error. Exits 0 when every
test passes and the lab runs, 1 otherwise, 2 when the tree is not built.

The tree is one scripts/make_assignment.py wrote, built as its README says
(`bash scripts/setup.sh`, or `cmake --build build --target _C mini_python_files` after an edit);
the grader builds nothing itself, so that what it grades is what the student built.
"""
import argparse
import os
import re
import subprocess
import sys
import tempfile
import xml.etree.ElementTree as ET
from collections import OrderedDict
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from kit import ASSIGNMENTS  # noqa: E402

REPO = Path(__file__).resolve().parents[1]
STUB = re.compile(r"not implemented: (A\d+) ([^(\n]+?) \(([^;)]+)")


def interpreter(tree):
    venv = tree / ".venv" / "bin" / "python"
    return str(venv) if venv.exists() else sys.executable


def advice(message):
    """One line a student can act on, from a failure's message."""
    stub = STUB.search(message)
    if stub:
        return f"still the stub: write {stub.group(1)} {stub.group(2).strip()} in {stub.group(3)}"
    lines = [line.strip() for line in message.strip().splitlines() if line.strip()]
    for line in lines:  # pytest's "E   assert ..." lines carry the assertion and its values
        if line.startswith("E "):
            return line[1:].strip()[:200]
    return (lines[0] if lines else "failed without a message")[:200]


def run_pytest(tree, assignment, xml_path):
    env = dict(os.environ, PYTHONPATH=str(tree / "build" / "python"), MPLBACKEND="Agg",
               MINI_PYTHON_DIR=str(tree / "build" / "python"))
    env.pop("MINI_LOGS", None)
    cmd = [interpreter(tree), "-m", "pytest", "-q", "-p", "no:cacheprovider", "-m", assignment.marker,
           "tests/python", f"--junitxml={xml_path}", "-W", "ignore::UserWarning"]
    done = subprocess.run(cmd, cwd=tree, env=env, capture_output=True, text=True, timeout=3600)
    if not Path(xml_path).exists():
        raise SystemExit(f"pytest did not run on {tree}:\n{done.stdout[-2000:]}\n{done.stderr[-2000:]}")
    return ET.parse(xml_path).getroot()


def pytest_groups(root):
    """{group: [(test, passed, why)]}: a group is a test file."""
    groups = OrderedDict()
    for case in root.iter("testcase"):
        group = case.get("classname", "").split(".")[-1] or "tests"
        failure = case.find("failure")
        if failure is None:
            failure = case.find("error")
        if case.find("skipped") is not None:
            continue  # a test this machine cannot run (no GPU): neither a point won nor lost
        doc = ""
        why = ""
        if failure is not None:
            why = advice((failure.get("message") or "") + "\n" + (failure.text or ""))
        groups.setdefault(group, []).append((case.get("name"), failure is None, why or doc))
    return groups


def run_catch2(tree, tag):
    """[(test, passed, why)] of the C++ tests with this tag, or None without a test binary."""
    binary = tree / "build" / "mini_tests"
    if not binary.exists():
        return None
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "catch2.xml"
        # --reporter junit --out FILE: the spelling both Catch2 2.x (Debian 12's) and 3.x accept
        done = subprocess.run([str(binary), tag, "--reporter", "junit", "--out", str(out)], cwd=tree,
                              capture_output=True, text=True, timeout=1800)
        if not out.exists() or not out.read_text().strip():
            said = (done.stderr or done.stdout).strip().splitlines()[-3:]
            return [("mini_tests " + tag, False, f"the C++ test binary wrote no report (exit {done.returncode}"
                     + (f"; it said: {' / '.join(said)}" if said else "; crashed?") + ")")]
        results = []
        for case in ET.parse(out).getroot().iter("testcase"):
            failure = case.find("failure")
            if failure is None:
                failure = case.find("error")
            why = advice((failure.get("message") or "") + "\n" + (failure.text or "")) if failure is not None else ""
            results.append((case.get("name"), failure is None, why))
        return results


def run_lab(tree, assignment):
    with tempfile.TemporaryDirectory() as tmp:
        cmd = [interpreter(tree), *assignment.lab] + (["--out", tmp] if assignment.lab_out else [])
        env = dict(os.environ, PYTHONPATH=str(tree / "build" / "python"), MPLBACKEND="Agg")
        env.pop("MINI_LOGS", None)
        done = subprocess.run(cmd, cwd=tree, env=env, capture_output=True, text=True, timeout=1800)
    return done.returncode == 0, done.stdout, done.stderr


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("assignment", nargs="?", help="A1 ... A8")
    parser.add_argument("tree", nargs="?", type=Path, default=REPO, help="the student tree (default: this one)")
    parser.add_argument("--list", action="store_true", help="the assignments, their tests and labs")
    parser.add_argument("--no-lab", action="store_true", help="the tests only")
    args = parser.parse_args(argv)
    if args.list or not args.assignment:
        for a in ASSIGNMENTS.values():
            needs = f"; after {', '.join(a.requires)}" if a.requires else ""
            print(f"{a.id}  {a.name:34s} pytest -m {a.marker}{'  Catch2 ' + a.catch2 if a.catch2 else ''}; "
                  f"lab {' '.join(a.lab)}{needs}")
        return 0 if args.list else 2
    key = args.assignment.upper()
    if key not in ASSIGNMENTS:
        parser.error(f"no assignment {args.assignment} (there are {', '.join(ASSIGNMENTS)})")
    a = ASSIGNMENTS[key]
    tree = args.tree.resolve()
    if not (tree / "build" / "python" / "mini").exists():
        print(f"{tree} is not built: run `bash scripts/setup.sh` there (or, after an edit, "
              f"`cmake --build build --target _C mini_python_files`), then grade again.")
        return 2
    print(f"grading {a.id} {a.name} on {tree}")
    if a.requires:
        print(f"(its tests use {', '.join(a.requires)}: those must be written first)")
    groups = OrderedDict()
    with tempfile.TemporaryDirectory() as tmp:
        groups.update(pytest_groups(run_pytest(tree, a, Path(tmp) / "pytest.xml")))
    if a.catch2:
        cpp = run_catch2(tree, a.catch2)
        if cpp is not None:
            groups[f"C++ tests {a.catch2}"] = cpp
    total = passed = 0
    print()
    for group, tests in groups.items():
        ok = sum(1 for _, p, _ in tests if p)
        total += len(tests)
        passed += ok
        print(f"  {group:44s} {ok:3d} / {len(tests):<3d} {'ok' if ok == len(tests) else ''}")
        for name, p, why in tests:
            if not p:
                print(f"      FAIL {name}: {why}")
    if total == 0:
        print(f"  no tests carry the marker {a.marker} in this tree")
    lab_ok = True
    if not args.no_lab:
        lab_ok, out, err = run_lab(tree, a)
        print(f"\n  lab: {' '.join(a.lab)}: {'runs' if lab_ok else 'FAILS'}")
        tail = (out if lab_ok else (err or out)).strip().splitlines()[-12:]
        for line in tail:
            print(f"      {line}")
    score = 100 * passed / total if total else 0
    print(f"\n{a.id} {a.name}: {passed} of {total} tests pass ({score:.0f}%)"
          f"{'' if args.no_lab else ', the lab ' + ('runs' if lab_ok else 'fails')}")
    if passed < total:
        print("Next: the first FAIL above; notes/assignments/" + a.id + ".md has the contract and hints.")
    return 0 if passed == total and total and lab_ok else 1


if __name__ == "__main__":
    sys.exit(main())
