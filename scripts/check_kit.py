"""Proves the course kit (CI runs it: ctest's `assignment_kit`): every assignment can be done
alone, or after the ones scripts/kit.py says it needs. For each one,
  - with every OTHER assignment stubbed (but those it needs), its tests all pass and its lab
    runs (the reference's code in its regions): a student who writes it reaches 100% whatever
    else is a stub; and where it is said to need another, it does (else the table is stale);
  - with ITS stub, each of its tests fails: a test that passes through the stub tests nothing
    of it.
With only A stubbed the other assignments' tests pass too: each of them passes with all but
itself stubbed, A included.

    .venv/bin/python scripts/check_kit.py [--only A3 A5] [--build build]

No student tree is built. Each region of the reference opens with MINI_KIT_STUB(A3), which
throws what the student tree's stub throws, word for word, where the environment's
MINI_KIT_STUBS names A3 (mini/tensor/errors.h); so this repository's one build stands for every
student tree, and tests/python/test_assignments.py proves that the stubs scripts/make_assignment.py writes compile.
The grader (scripts/grade.py) runs each assignment's tests and lab as a student's grade does.
Prints two lines per assignment and exits 1 if any claim does not hold.
"""
import argparse
import os
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import grade  # noqa: E402
from kit import ASSIGNMENTS  # noqa: E402

REPO = Path(__file__).resolve().parents[1]


def graded(assignment, stubbed, lab):
    """grade.grade() of the repository with these assignments' regions stubbed."""
    os.environ["MINI_KIT_STUBS"] = ",".join(stubbed)
    try:
        return grade.grade(assignment, REPO, lab=lab)
    finally:
        del os.environ["MINI_KIT_STUBS"]


def needed(aid):
    """The assignments `aid` is said to need written (kit.py's requires: its own tests go
    through them; not what those need in turn, which its tests do not reach)."""
    return sorted(ASSIGNMENTS[aid].requires, key=lambda i: int(i[1:]))


def failures(groups):
    return [f"{group}: {t.name}: {t.why.splitlines()[0] if t.why else ''}"
            for group, tests in groups.items() for t in tests if not t.passed]


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", nargs="+", metavar="ID", help="check these assignments only")
    args = parser.parse_args(argv)
    chosen = [ASSIGNMENTS[i.upper()] for i in args.only] if args.only else list(ASSIGNMENTS.values())
    if not (REPO / "build" / "python" / "mini").exists():
        raise SystemExit("build/ is not built: run `bash scripts/setup.sh` first")
    started = time.time()
    problems = []
    for a in chosen:
        t0 = time.time()
        needs = needed(a.id)
        others = [o for o in ASSIGNMENTS if o != a.id and o not in needs]
        groups, lab_ok, lab_output = graded(a, others, lab=True)
        tests = [t for ts in groups.values() for t in ts]
        passed = sum(t.passed for t in tests)
        print(f"  {a.id:3s} alone (every other assignment stubbed"
              + (f" but {', '.join(needs)}" if needs else "") + f"): {passed} of {len(tests)} tests pass, "
              f"the lab {'runs' if lab_ok else 'FAILS'} ({time.time() - t0:.0f} s)", flush=True)
        if needs and passed == len(tests) and lab_ok:
            alone, alone_lab, _ = graded(a, [o for o in ASSIGNMENTS if o != a.id], lab=True)
            if all(t.passed for ts in alone.values() for t in ts) and alone_lab:
                problems.append(f"{a.id} passes with {', '.join(needs)} stubbed too: drop them from its "
                                f"requires in scripts/kit.py (and notes/assignments.md's drawing)")
        if not tests:
            problems.append(f"{a.id} has no tests (pytest -m {a.marker}, Catch2 {a.catch2 or '-'})")
        if passed < len(tests):
            problems.append(f"{a.id} alone fails {len(tests) - passed} of its tests: they need another stage:\n    "
                            + "\n    ".join(failures(groups)[:15]))
        if not lab_ok:
            problems.append(f"{a.id} alone: its lab {' '.join(a.lab)} fails:\n    " + "\n    ".join(lab_output[-15:]))
        t0 = time.time()
        groups, _, _ = graded(a, [a.id], lab=False)
        tests = [(group, t) for group, ts in groups.items() for t in ts]
        through = [f"{group}: {t.name}" for group, t in tests if t.passed]
        print(f"  {a.id:3s} stubbed: {len(tests) - len(through)} of {len(tests)} tests fail "
              f"({time.time() - t0:.0f} s)", flush=True)
        if through:
            problems.append(f"with {a.id}'s stub, {len(through)} of its tests pass: they do not test it:\n    "
                            + "\n    ".join(through[:15]))
    print(f"check_kit: {len(chosen)} assignments in {time.time() - started:.0f} s: "
          + ("every claim holds" if not problems else f"{len(problems)} problems"))
    for p in problems:
        print("\n" + p)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
