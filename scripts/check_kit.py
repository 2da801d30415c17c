"""Proves the course kit (CI runs it: ctest's `assignment_kit`): for every assignment, a student
tree with only that assignment stubbed fails that assignment's tests and passes the tests of
every assignment that does not build on it, and the reference passes them all.

    .venv/bin/python scripts/check_kit.py [--work DIR] [--only A3 A5]

One tree (a copy of the tracked files, as scripts/make_assignment.py writes it) is built once
under DIR (default build/kit); then each assignment's regions are stubbed in place, the tree is
rebuilt incrementally (the stubbed files' objects and the link), graded (scripts/grade.py), the
other assignments' tests run, and the files are put back. Prints one line per assignment and
exits 1 if any claim does not hold.
"""
import argparse
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import make_assignment  # noqa: E402
from kit import ASSIGNMENTS, dependents_of, independent_of  # noqa: E402

REPO = Path(__file__).resolve().parents[1]


def sh(cmd, cwd, env=None, timeout=3600):
    return subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout)


def build(tree, targets):
    done = sh(["cmake", "--build", str(tree / "build"), "-j", str(os.cpu_count() or 2), "--target", *targets], tree)
    if done.returncode != 0:
        raise SystemExit(f"the kit tree does not build:\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}")


def pytest_counts(tree, expression):
    """(passed, failed) of `pytest -m EXPRESSION` on the tree, and the failures' names."""
    env = dict(os.environ, PYTHONPATH=str(tree / "build" / "python"), MPLBACKEND="Agg",
               MINI_PYTHON_DIR=str(tree / "build" / "python"))
    env.pop("MINI_LOGS", None)
    done = sh([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-m", expression, "tests/python",
               "-W", "ignore::UserWarning", "-rf"], tree, env)
    failed = [line.split(" ", 1)[1].split(" - ")[0] for line in done.stdout.splitlines() if line.startswith("FAILED ")]
    summary = done.stdout.strip().splitlines()[-1] if done.stdout.strip() else done.stderr[-300:]
    passed = int(next((w.split()[0] for w in summary.split(",") if w.strip().endswith("passed")), "0 passed").split()[0])
    return passed, len(failed), failed, summary


def grade(tree, assignment, lab):
    done = sh([sys.executable, str(tree / "scripts" / "grade.py"), assignment.id, str(tree)]
              + ([] if lab else ["--no-lab"]), tree)
    last = [line for line in done.stdout.splitlines() if line.startswith(assignment.id + " ")]
    return done.returncode, (last[-1] if last else done.stdout[-500:] + done.stderr[-500:]), done.stdout


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--work", type=Path, default=REPO / "build" / "kit")
    parser.add_argument("--only", nargs="+", metavar="ID", help="check these assignments only")
    args = parser.parse_args(argv)
    chosen = [ASSIGNMENTS[i.upper()] for i in args.only] if args.only else list(ASSIGNMENTS.values())
    files = make_assignment.tracked_files()
    regions = make_assignment.find_regions(files)
    tree = args.work / "tree"
    started = time.time()
    if tree.exists():  # the sources anew (stale stubs of an interrupted run go), the build kept
        for rel in files:
            target = tree / rel
            if not target.exists() or target.read_bytes() != (REPO / rel).read_bytes():
                target.parent.mkdir(parents=True, exist_ok=True)
                shutil.copy(REPO / rel, target)
    else:
        for rel in files:
            (tree / rel).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy(REPO / rel, tree / rel)
    configure = ["cmake", "-S", str(tree), "-B", str(tree / "build"), "-DCMAKE_BUILD_TYPE=Release",
                 f"-DPython_EXECUTABLE={sys.executable}", "-DMINI_SANITIZED_TESTS=OFF", "-DMINI_CUDA=OFF"]
    if shutil.which("ninja"):
        configure += ["-G", "Ninja"]
    if not (tree / "build" / "CMakeCache.txt").exists():
        done = sh(configure, tree)
        if done.returncode != 0:
            raise SystemExit(f"cannot configure the kit tree:\n{done.stdout[-2000:]}\n{done.stderr[-2000:]}")
    targets = ["_C", "mini_python_files"] + (["mini_tests"] if any(a.catch2 for a in chosen) else [])
    build(tree, targets)
    print(f"check_kit: the reference tree built in {time.time() - started:.0f} s ({tree})", flush=True)
    problems = []
    for a in chosen:  # the reference: every test of the assignment passes and its lab runs
        rc, line, out = grade(tree, a, lab=True)
        print(f"  reference {a.id}: {line}", flush=True)
        if rc != 0:
            problems.append(f"the reference fails {a.id}:\n{out[-3000:]}")
    for a in chosen:
        t0 = time.time()
        mine = [r for r in regions if r.id == a.id]
        paths = sorted({r.path for r in mine})
        for rel in paths:  # written now: newer than its object, which ninja then rebuilds
            (tree / rel).write_text(make_assignment.stubbed_text(rel, [r for r in mine if r.path == rel]))
        try:
            build(tree, targets)
            rc, line, out = grade(tree, a, lab=False)
            others = [o for o in independent_of(a.id)]
            # a test tagged by a stage that builds on this one goes through the stub: left out
            expression = (f"({' or '.join(o.marker for o in others)}) and not "
                          f"({' or '.join(d.marker for d in dependents_of(a.id))})")
            passed, failed, names, summary = pytest_counts(tree, expression)
        finally:
            for rel in paths:  # shutil.copy, not copy2: the file's time must be now, for ninja
                shutil.copy(REPO / rel, tree / rel)
        stub_fails = rc == 1
        print(f"  {a.id} stubbed ({len(mine)} regions in {', '.join(paths)}): its tests: {line.split(': ', 1)[-1]}; "
              f"the tests of {', '.join(o.id for o in others)}: {passed} passed, {failed} failed "
              f"({time.time() - t0:.0f} s)", flush=True)
        if not stub_fails:
            problems.append(f"{a.id}'s tests pass with its stub: they do not test the stage\n{out[-2000:]}")
        if failed:
            problems.append(f"with {a.id} stubbed, tests of other assignments fail: {', '.join(names[:10])}")
    build(tree, targets)  # the reference again, for the next run
    print(f"check_kit: {len(chosen)} assignments in {time.time() - started:.0f} s: "
          + ("every claim holds" if not problems else f"{len(problems)} problems"))
    for p in problems:
        print("\n" + p)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
