"""Runs the conformance runner (../shared/conformance/run_mini.py) on `mini` with this
interpreter, prints its output, and fails if any case named in conformance_required.txt has a
DIFF line or is missing, or if the runner itself failed (non-zero exit, mini not importable,
no summary line).

usage: PYTHONPATH=build/python .venv/bin/python tests/conformance_check.py [--dir DIR]
The conformance folder defaults to <repo>/../shared/conformance (MINI_CONFORMANCE_DIR
overrides it). Cases not listed in the file are shown but do not fail the check."""
import argparse
import os
import re
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)


def required_cases(path):
    names = []
    with open(path) as f:
        for line in f:
            line = line.split("#", 1)[0].strip()
            if line:
                names.append(line)
    return names


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--dir", default=os.environ.get(
        "MINI_CONFORMANCE_DIR", os.path.join(ROOT, "..", "shared", "conformance")))
    ap.add_argument("--required", default=os.path.join(HERE, "conformance_required.txt"))
    a = ap.parse_args()
    runner = os.path.join(os.path.abspath(a.dir), "run_mini.py")
    if not os.path.isfile(runner):
        print(f"FAIL: conformance runner not found at {runner}")
        return 1
    required = required_cases(a.required)

    proc = subprocess.run([sys.executable, runner], stdout=subprocess.PIPE,
                          stderr=subprocess.STDOUT, text=True)
    print(proc.stdout, end="")
    problems = []
    if proc.returncode != 0:
        problems.append(f"run_mini.py exited with status {proc.returncode}")
    lines = proc.stdout.splitlines()
    summary = [l for l in lines if l.startswith("conformance:")]
    if not summary:
        problems.append("run_mini.py printed no 'conformance:' summary line")
    elif "cannot import mini" in summary[-1]:
        problems.append("run_mini.py could not import mini")

    status = {}
    for line in lines:
        m = re.match(r"^(ok  |DIFF) (\S+)", line)
        if m:
            status[m.group(2)] = m.group(1).strip()
    for name in required:
        if name not in status:
            problems.append(f"required case {name}: no result line (unknown case, or the runner stopped)")
        elif status[name] != "ok":
            problems.append(f"required case {name}: DIFF")

    passed = sum(status.get(n) == "ok" for n in required)
    print(f"conformance_check: {passed}/{len(required)} required cases match "
          f"(Python {sys.version.split()[0]})")
    for p in problems:
        print("FAIL:", p)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
