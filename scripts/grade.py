"""Grades one assignment of the course kit on a student tree.

    python3 scripts/grade.py A3 [TREE]            # TREE: a student tree, built (default: this one)
    python3 scripts/grade.py --hidden DIR A3      # also the instructor's tests in DIR
    python3 scripts/grade.py --list

Runs the assignment's tagged tests (pytest -m a3, and its Catch2 tag where it has one) on the
tree's build, on every Python the tree has a build for where the assignment differs by version
(A9's bytecode), and its lab with --quick. Prints a score per test group (a test file, or the
C++ tests), the handout's points table filled in (scripts/kit.py's parts: a part earns its points
in proportion to its tests that pass) and, for each failure, what the test checks (its docstring or the comment above
it), what went wrong in full (the assertion and its values, or "still the stub"), and the
command that reruns that one test. Exits 0 when every test passes and the lab runs, 1
otherwise, 2 when the tree is not built.

The tree is one scripts/make_assignment.py wrote, built as its README says
(`bash scripts/setup.sh --student`, or `cmake --build build --target _C mini_python_files
mini_tests` after an edit); the grader builds nothing itself, so that what it grades is what the
student built, and it says so when a source is newer than that build.

Hidden tests (--hidden DIR): an instructor's test_*.py files, tagged with the assignment's
marker as the visible ones are; they run from tests/python/hidden/ (copied in for the run and
removed after, so that the tree's conftest.py and its fixtures apply) and count like the rest. A
hidden file named as a visible one, with the same section comments, counts in the same parts;
the report lists a test that counts in no part.
"""
import argparse
import ast
import functools
import os
import re
import shlex
import shutil
import signal
import subprocess
import sys
import tempfile
import xml.etree.ElementTree as ET
from collections import Counter, OrderedDict
from dataclasses import dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from kit import ASSIGNMENTS  # noqa: E402

REPO = Path(__file__).resolve().parents[1]
STUB = re.compile(r"not implemented: (A\d+) ([^(\n]+?) \(([^;)]+)")
HIDDEN = Path("tests/python/hidden")
MAX_DETAIL = 40  # lines of one failure's explanation; the rerun command shows the rest
# Tests this machine cannot run (no GPU, no NVRTC), by the reason pytest gave: the report says
# how many, since they count neither way (run_pytest fills it)
SKIPPED = Counter()


@dataclass
class Result:
    name: str          # the test, as its report names it
    passed: bool
    why: str = ""      # what went wrong, lines a student can act on
    checks: str = ""   # what the test checks: its docstring, or the comment above it
    rerun: str = ""    # the command that runs this one test
    file: str = "C++"  # its file's name ("C++" for a Catch2 case)
    section: str = ""  # the title of the section comment it is under ("# ---- title ----")


@dataclass
class Build:
    """One interpreter and the package built for it."""
    label: str         # "Python 3.11"
    python: str
    package: Path      # the folder PYTHONPATH names (build/python)


def builds(tree, every_version):
    """The tree's builds: its own (.venv and build/), and with every_version also .venv-3.1X
    with build-py31X/ where scripts/setup.sh --all-pythons made them."""
    venv = tree / ".venv" / "bin" / "python"
    own = Build("", str(venv) if venv.exists() else sys.executable, tree / "build" / "python")
    found = [own]
    if every_version:
        for version in ("3.12", "3.13"):
            python = tree / f".venv-{version}" / "bin" / "python"
            package = tree / f"build-py{version.replace('.', '')}" / "python"
            if python.exists() and (package / "mini").exists():
                found.append(Build(f"Python {version}", str(python), package))
    if len(found) > 1:
        done = subprocess.run([own.python, "-c", "import sys; print('%d.%d' % sys.version_info[:2])"],
                              capture_output=True, text=True)
        own.label = f"Python {done.stdout.strip()}"
    return found


def stale_sources(tree):
    """Sources newer than what the build made of them: the student edited and did not build. A
    C++ source against the extension module, a Python file against its copy in build/python."""
    built = sorted((tree / "build" / "python" / "mini").glob("_C*.so"))
    if not built:
        return []
    when = built[0].stat().st_mtime
    package = tree / "mini" / "python" / "mini"
    newer = []
    for path in (tree / "mini").rglob("*"):
        if path.suffix in (".cpp", ".h", ".cu"):
            stale = path.stat().st_mtime > when + 1
        elif path.suffix == ".py" and package in path.parents:
            copy = tree / "build" / "python" / "mini" / path.relative_to(package)
            stale = not copy.exists() or path.stat().st_mtime > copy.stat().st_mtime + 1
        else:
            continue
        if stale:
            newer.append(str(path.relative_to(tree)))
    return sorted(newer)


def stubs_in(tree):
    """The assignments still stubs in this tree: their stub lines (scripts/make_assignment.py),
    and those the kit switch stubs (MINI_KIT_STUBS, scripts/check_kit.py)."""
    found = {i for i in os.environ.get("MINI_KIT_STUBS", "").split(",") if i}
    for path in (tree / "mini").rglob("*"):
        if path.suffix in (".cpp", ".h"):
            found.update(re.findall(r'::mini::fail\("not implemented: (A\d+) ', path.read_text(errors="replace")))
    return found


def advice(message, text=""):
    """What went wrong: "still the stub: ..." where the failure's message (the exception, one
    line) is a stub's, else every line of the assertion's explanation in `text` (pytest's "E"
    lines, untruncated), else a message of several lines whole (pytest.fail's), else the
    message's first line."""
    stub = STUB.search(message.split("\n", 1)[0] if text else message)
    said = [line.rstrip() for line in message.strip().splitlines() if line.strip()]  # the message alone
    message = message + "\n" + text
    if stub:
        return f"still the stub: write {stub.group(1)} {stub.group(2).strip()} in {stub.group(3)}"
    lines = [line.rstrip() for line in message.strip().splitlines() if line.strip()]
    explained = [line[1:].strip() if line.startswith("E ") else None for line in lines]
    explained = [line for line in explained if line is not None]
    if not explained and len(said) > 1:  # a message of several lines (pytest.fail's): all of it
        explained = [line.strip() for line in said]
    if explained:
        if len(explained) > MAX_DETAIL:
            explained = explained[:MAX_DETAIL] + [f"... {len(explained) - MAX_DETAIL} more lines: rerun the test"]
        return "\n".join(explained)
    return lines[0].strip() if lines else "failed without a message"


def catch2_advice(message, text):
    """What went wrong in a Catch2 failure (its junit report): "still the stub: ..." where the
    stub's error is anywhere in it, else the check with its expansion and where it is, without
    Catch2's "FAILED:" header."""
    stub = STUB.search(message + "\n" + text)
    if stub:
        return f"still the stub: write {stub.group(1)} {stub.group(2).strip()} in {stub.group(3)}"
    lines = [line.strip() for line in text.strip().splitlines() if line.strip() and line.strip() != "FAILED:"]
    if len(lines) > MAX_DETAIL:
        lines = lines[:MAX_DETAIL] + [f"... {len(lines) - MAX_DETAIL} more lines: rerun the test"]
    return "\n".join(lines) or message or "failed without a message"


def what_it_checks(tree, file, function):
    """The test's docstring, else the comment block right above its def (or its decorators),
    else its name, which in this project is a sentence ("test_hit_moves_to_front")."""
    path = tree / file
    if not path.exists():
        return ""
    source = path.read_text()
    try:
        module = ast.parse(source)
    except SyntaxError:
        return ""
    for node in ast.walk(module):
        if isinstance(node, ast.FunctionDef) and node.name == function:
            doc = ast.get_docstring(node)
            if doc:
                return " ".join(doc.split())
            lines = source.splitlines()
            first = min([node.lineno] + [d.lineno for d in node.decorator_list]) - 2
            comment = []
            while first >= 0 and lines[first].strip().startswith("#"):
                comment.insert(0, lines[first].strip().lstrip("#").strip())
                first -= 1
            return " ".join(comment) or function.removeprefix("test_").replace("_", " ")
    return ""


SECTION = re.compile(r"^# ---- (.+?) -*$")


@functools.lru_cache(maxsize=None)
def section_titles(path):
    """{test function: the title of the last section comment ("# ---- title ----") above it}."""
    titles, title = {}, ""
    for line in (path.read_text().splitlines() if path.exists() else []):
        m = SECTION.match(line)
        if m:
            title = m[1].strip()
        d = re.match(r"^\s*(?:async )?def (\w+)\(", line)  # a method of a test class too
        if d:
            titles[d[1]] = title
    return titles


def section_of(tree, file, function):
    """The title of the section the test is under, or ""."""
    return section_titles(Path(tree) / file).get(function, "")


def environment(package):
    # unbuffered: a test that crashes the interpreter leaves its id in the output (crashed_test)
    env = dict(os.environ, PYTHONPATH=str(package), MPLBACKEND="Agg", MINI_PYTHON_DIR=str(package),
               PYTHONUNBUFFERED="1")
    env.pop("MINI_LOGS", None)
    return env


def crashed_test(stdout):
    """The test a crashed pytest run was in: verbose pytest prints a test's id as it starts it
    and its verdict when it ends, so the last id printed without a verdict; or None."""
    for line in reversed([line for line in stdout.splitlines() if line.strip()]):
        m = re.match(r"^(\S+\.py::\S+)\s*$", line)
        if m:
            return m[1]
        if "::" in line:
            return None  # the last test ended: the run died elsewhere
    return None


def run_pytest(tree, assignment, build, paths):
    """[(group, Result)] of `pytest -m MARKER PATHS` with this build. A test that crashes the
    interpreter (a segfault in the student's C++) fails alone: the run goes on without it."""
    crashes = []
    with tempfile.TemporaryDirectory() as tmp:
        xml_path = Path(tmp) / "pytest.xml"
        while True:
            cmd = [build.python, "-m", "pytest", "-q", "-vv", "-p", "no:cacheprovider", "-m", assignment.marker,
                   *paths, f"--junitxml={xml_path}", "-W", "ignore::UserWarning",
                   *[f"--deselect={c}" for c, _ in crashes]]
            done = subprocess.run(cmd, cwd=tree, env=environment(build.package), capture_output=True, text=True,
                                  timeout=3600)
            if xml_path.exists():
                break
            crashed = crashed_test(done.stdout)
            if crashed is None or len(crashes) >= 10:
                raise SystemExit(f"pytest did not run on {tree}:\n{done.stdout[-2000:]}\n{done.stderr[-2000:]}")
            signal_name = (signal.Signals(-done.returncode).name if done.returncode < 0
                           else f"exit status {done.returncode}")
            crashes.append((crashed, signal_name))
        root = ET.parse(xml_path).getroot()
    found = []
    for crashed, how in crashes:
        file, _, name = crashed.partition("::")
        found.append(pytest_result(tree, build, file, name, f"the test process crashed ({how}) in this test: the "
                                   "C++ it runs read or wrote memory it must not (run the rerun command; gdb --args "
                                   "or the sanitized build says where)"))
    for case in root.iter("testcase"):
        skipped = case.find("skipped")
        if skipped is not None:  # a test this machine cannot run (no GPU): neither a point won nor lost
            SKIPPED[(skipped.get("message") or "skipped").removeprefix("Skipped: ").strip()] += 1
            continue
        module = case.get("classname", "")
        file = module.replace(".", "/") + ".py"
        name = case.get("name")
        failure = case.find("failure")
        if failure is None:
            failure = case.find("error")
        found.append(pytest_result(tree, build, file, name, None if failure is None else
                                   advice(failure.get("message") or "", failure.text or "")))
    return found


def pytest_result(tree, build, file, name, why):
    """(group, Result) of test `name` of `file` run with this build, failed where `why` says what
    went wrong (None: passed): then also what it checks and the command that reruns it alone."""
    group = Path(file).name + (f" ({build.label})" if build.label else "")
    if file.startswith(str(HIDDEN)):
        group = "hidden: " + group
    function = name.split("[")[0]
    result = Result(name, why is None, why or "", file=Path(file).name, section=section_of(tree, file, function))
    if why is not None:
        result.checks = what_it_checks(tree, file, function)
        python = os.path.relpath(build.python, tree) if build.python.startswith(str(tree)) else build.python
        result.rerun = (f"PYTHONPATH={os.path.relpath(build.package, tree)} {python} -m pytest -q "
                        + shlex.quote(f"{file}::{name}"))
    return group, result


def run_catch2(tree, tag):
    """[Result] of the C++ tests with this tag, or None without a test binary."""
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
            return [Result("mini_tests " + tag, False, f"the C++ test binary wrote no report (exit {done.returncode}"
                           + (f"; it said: {' / '.join(said)}" if said else "; crashed?") + ")",
                           rerun=f"build/mini_tests {shlex.quote(tag)}")]
        results = []
        for case in ET.parse(out).getroot().iter("testcase"):
            failure = case.find("failure")
            if failure is None:
                failure = case.find("error")
            name = case.get("name")
            result = Result(name, failure is None)
            if failure is not None:
                result.why = catch2_advice(failure.get("message") or "", failure.text or "")
                result.rerun = f"build/mini_tests {shlex.quote(name)}"
            results.append(result)
        # a case with sections is reported once whole and once per section ("case/section"):
        # the sections carry the failures, so the whole counts neither way; Catch2 runs one
        # section of a case with -c
        names = [r.name for r in results]
        for r in results:
            case, _, section = r.name.partition("/")
            if section and r.rerun and case in names:
                r.rerun = f"build/mini_tests {shlex.quote(case)} -c {shlex.quote(section)}"
        return [r for r in results if not any(n.startswith(r.name + "/") for n in names)]


def run_lab(tree, assignment):
    with tempfile.TemporaryDirectory() as tmp:
        python = builds(tree, False)[0].python
        cmd = [python, *assignment.lab] + (["--out", tmp] if assignment.lab_out else [])
        done = subprocess.run(cmd, cwd=tree, env=environment(tree / "build" / "python"), capture_output=True,
                              text=True, timeout=1800)
    return done.returncode == 0, done.stdout, done.stderr


def lab_lines(text, limit=60):
    """The lab's output as a student reads it: all of it, or its head (the title and the
    table's header) and its last lines when it is long."""
    lines = text.rstrip().splitlines()
    if len(lines) <= limit:
        return lines
    return lines[:12] + [f"... ({len(lines) - limit} lines) ..."] + lines[-(limit - 12):]


def grade(assignment, tree, lab=True, hidden=None, every_version=True):
    """The groups' results and whether the lab ran (None: not run), the lab's lines."""
    paths = ["tests/python"]
    copied = None
    if hidden:
        copied = tree / HIDDEN
        if copied.exists():
            shutil.rmtree(copied)
        copied.mkdir(parents=True)
        for test in sorted(Path(hidden).glob("*.py")):
            shutil.copy(test, copied / test.name)
    try:
        groups = OrderedDict()
        for i, build in enumerate(builds(tree, every_version and assignment.versions)):
            # the other Pythons' venvs hold what the tests need, not the labs' matplotlib: the labs'
            # tests run on the tree's own Python
            extra = ["--ignore-glob=*/test_labs_*"] if i else []
            for group, result in run_pytest(tree, assignment, build, paths + extra):
                groups.setdefault(group, []).append(result)
    finally:
        if copied:
            shutil.rmtree(copied)
    if assignment.catch2:
        cpp = run_catch2(tree, assignment.catch2)
        if cpp is not None:
            groups[f"C++ tests {assignment.catch2}"] = cpp
    lab_ok, lines = None, []
    if lab:
        lab_ok, out, err = run_lab(tree, assignment)
        lines = lab_lines(out if lab_ok else (err or out))
    return groups, lab_ok, lines


def report(assignment, tree, groups, lab_ok, lab_output):
    """Prints the grade; returns (passed, total)."""
    total = passed = 0
    print()
    for group, tests in groups.items():
        ok = sum(1 for t in tests if t.passed)
        total += len(tests)
        passed += ok
        print(f"  {group:52s} {ok:3d} / {len(tests):<3d} {'ok' if ok == len(tests) else ''}")
        for t in tests:
            if t.passed:
                continue
            print(f"      FAIL {t.name}")
            if t.checks:
                print(f"           it checks: {t.checks}")
            for i, line in enumerate(t.why.splitlines()):
                print(f"           {'what went wrong: ' if i == 0 else '                 '}{line}")
            if t.rerun:
                print(f"           rerun it: {t.rerun}")
    if total == 0:
        print(f"  no tests carry the marker {assignment.marker} in this tree")
    if SKIPPED:
        print(f"\n  skipped here, counted neither way: {sum(SKIPPED.values())} tests")
        for why, n in SKIPPED.most_common():
            print(f"      {n:3d}  {why}")
    if lab_ok is not None:
        print(f"\n  lab: {' '.join(assignment.lab)}: {'runs' if lab_ok else 'FAILS'}")
        for line in lab_output:
            print(f"      {line}")
    earned = points(assignment, groups)
    score = 100 * passed / total if total else 0
    print(f"\n{assignment.id} {assignment.name}: {passed} of {total} tests pass ({score:.0f}%), "
          f"{earned:.1f} of {100 - assignment.question_points} points"
          f"{'' if lab_ok is None else ', the lab ' + ('runs' if lab_ok else 'fails')}")
    if passed < total:
        print(f"Next: the first FAIL above; notes/assignments/{assignment.id}.md has the contract and hints.")
    return passed, total


def points(assignment, groups):
    """Prints the handout's points table as these results fill it; returns the points earned.
    A part earns its points in proportion to its tests that pass."""
    counts = OrderedDict((part.name, [0, 0]) for part in assignment.parts)
    outside = []
    for tests in groups.values():
        for t in tests:
            part = assignment.part_of(t.file, t.section, t.name)
            if part is None:
                outside.append(t)
                continue
            counts[part.name][0] += t.passed
            counts[part.name][1] += 1
    print(f"\n  points (notes/assignments/{assignment.id}.md):")
    earned = 0.0
    for part in assignment.parts:
        ok, n = counts[part.name]
        got = part.points * ok / n if n else 0.0
        earned += got
        print(f"    {part.name:52s} {ok:3d} / {n:<3d} {got:5.1f} of {part.points}")
    print(f"    {'written questions':52s}           graded by the instructor, of {assignment.question_points}")
    if outside:
        print(f"    ({len(outside)} test(s) in no part of the table: "
              f"{', '.join(t.file + '::' + t.name for t in outside[:3])}{', ...' if len(outside) > 3 else ''})")
    return earned


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("assignment", nargs="?", help="A1 ... A10")
    parser.add_argument("tree", nargs="?", type=Path, default=REPO, help="the student tree (default: this one)")
    parser.add_argument("--list", action="store_true", help="the assignments, their tests and labs")
    parser.add_argument("--no-lab", action="store_true", help="the tests only")
    parser.add_argument("--hidden", type=Path, metavar="DIR", help="also the test_*.py files in DIR")
    parser.add_argument("--one-python", action="store_true", help="only the tree's own Python (.venv)")
    args = parser.parse_args(argv)
    if args.list or not args.assignment:
        for a in ASSIGNMENTS.values():
            print(f"{a.id}  {a.name:34s} pytest -m {a.marker}{'  Catch2 ' + a.catch2 if a.catch2 else ''}; "
                  f"lab {' '.join(a.lab)}{'; every Python' if a.versions else ''}")
        return 0 if args.list else 2
    key = args.assignment.upper()
    if key not in ASSIGNMENTS:
        parser.error(f"no assignment {args.assignment} (there are {', '.join(ASSIGNMENTS)})")
    if args.hidden and not args.hidden.is_dir():
        parser.error(f"--hidden {args.hidden}: no such folder")
    a = ASSIGNMENTS[key]
    tree = args.tree.resolve()
    if not (tree / "build" / "python" / "mini").exists():
        print(f"{tree} is not built: run `bash scripts/setup.sh --student` there (or, after an edit, "
              f"`cmake --build build --target _C mini_python_files mini_tests`), then grade again.")
        return 2
    print(f"grading {a.id} {a.name} on {tree}")
    stale = stale_sources(tree)
    if stale:
        print(f"WARNING: {', '.join(stale[:5])}{' and more' if len(stale) > 5 else ''} changed after the last build:"
              f" this grades the old build. Run `cmake --build build --target _C mini_python_files mini_tests`"
              f" and grade again.")
    missing = sorted(set(a.requires) & stubs_in(tree), key=lambda i: int(i[1:]))
    if missing:
        print(f"NOTE: {a.id}'s tests go through {', '.join(missing)}, still the stub in this tree: those of its "
              f"tests fail until {'it is' if len(missing) == 1 else 'they are'} written (notes/assignments.md draws "
              f"what needs what)")
    found = builds(tree, not args.one_python and a.versions)
    if a.versions and len(found) > 1:
        print(f"{a.id} differs by Python version: graded on {', '.join(b.label for b in found)}")
    elif a.versions:
        print(f"{a.id} differs by Python version: graded on this tree's Python only "
              + ("(--one-python)" if args.one_python else
                 "(build the others with `bash scripts/setup.sh --student --all-pythons`)"))
    groups, lab_ok, lab_output = grade(a, tree, lab=not args.no_lab, hidden=args.hidden,
                                       every_version=not args.one_python)
    passed, total = report(a, tree, groups, lab_ok, lab_output)
    return 0 if passed == total and total and lab_ok is not False else 1


if __name__ == "__main__":
    sys.exit(main())
