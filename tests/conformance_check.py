"""Runs the conformance runner (tests/conformance/run_mini.py) on `mini` with this interpreter,
prints its output, and fails if any case named in conformance_required.txt has a DIFF line,
has no torch record or is missing, or if the runner itself failed (non-zero exit, mini not
importable, no summary line).

run_mini.py runs the cases of cases.py (scored against expected_torch_2.11.jsonl) and of
cases_mini.py (scored against expected_torch_2.11_mini.jsonl once that file exists; until
then shown, not scored). In conformance_required.txt a case of cases.py is named as it is, a
case of cases_mini.py as 'mini:NAME'.

usage: PYTHONPATH=build/python .venv/bin/python tests/conformance_check.py [--dir DIR]
The conformance folder defaults to tests/conformance (MINI_CONFORMANCE_DIR overrides it).
Cases not listed in the file are shown but do not fail the check."""
import argparse
import os
import re
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
MINI_PREFIX = "mini:"


def required_cases(path):
    names = []
    with open(path) as f:
        for line in f:
            line = line.split("#", 1)[0].strip()
            if line:
                names.append(line)
    return names


def suites_of(conf_dir):
    """{case name: 'shared' or 'mini'} from the folder's runner; None for a folder whose runner
    predates cases_mini.py."""
    sys.path.insert(0, conf_dir)
    try:
        from runner import load_cases
        return {name: suite for suite, name, _ in load_cases()}
    except ImportError:
        return None
    finally:
        sys.path.pop(0)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--dir", default=os.environ.get(
        "MINI_CONFORMANCE_DIR", os.path.join(HERE, "conformance")))
    ap.add_argument("--required", default=os.path.join(HERE, "conformance_required.txt"))
    a = ap.parse_args()
    conf_dir = os.path.abspath(a.dir)
    runner = os.path.join(conf_dir, "run_mini.py")
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
        m = re.match(r"^(ok  |DIFF|----) (\S+)", line)
        if m:
            status[m.group(2)] = m.group(1).strip()
    suites = suites_of(conf_dir)
    for entry in required:
        mini_case = entry.startswith(MINI_PREFIX)
        name = entry[len(MINI_PREFIX):] if mini_case else entry
        if suites is not None and name in suites and (suites[name] == "mini") != mini_case:
            right, where = ((MINI_PREFIX + name, "cases_mini.py") if suites[name] == "mini"
                            else (name, "cases.py"))
            problems.append(f"required case {entry}: list it as {right} (a case of {where})")
        elif name not in status:
            problems.append(f"required case {entry}: no result line (unknown case, or the runner stopped)")
        elif status[name] == "----":
            problems.append(f"required case {entry}: no torch record to score it against "
                            "(notes/gpu_conformance.md: how to record one)")
        elif status[name] != "ok":
            problems.append(f"required case {entry}: DIFF")

    passed = len(required) - sum(p.startswith("required case ") for p in problems)
    print(f"conformance_check: {passed}/{len(required)} required cases match "
          f"(Python {sys.version.split()[0]})")
    for p in problems:
        print("FAIL:", p)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
