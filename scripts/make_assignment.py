"""Makes a student tree: a copy of this repository with assignment regions replaced by stubs.

    python3 scripts/make_assignment.py --list
    python3 scripts/make_assignment.py OUT              # every assignment stubbed
    python3 scripts/make_assignment.py OUT --only A3    # one assignment stubbed, the rest kept
    python3 scripts/make_assignment.py OUT --week A2    # A2 and the weeks after it stubbed

The reference code marks each assignment region with a BEGIN and an END comment line:

    // A3 BEGIN: fusion legality
    MINI_KIT_STUB(A3);
    ...the reference implementation...
    // A3 END

A region is the body of a function (one assignment may have several regions). Its first line,
MINI_KIT_STUB(A3), is the kit check's switch (mini/tensor/errors.h): with MINI_KIT_STUBS=A3 in
the environment the reference's region throws what its stub throws here. In the student
tree the lines between the two markers become one statement that compiles and throws
mini::Error("not implemented: A3 fusion legality ..."), which reaches Python as a
RuntimeError. Everything else builds and runs, and the tests of other stages keep passing;
the assignment's own tests (pytest -m a3, Catch2 "[A3]") fail with that message until the
region is written. notes/assignments.md is the course page, notes/assignments/A3.md the
handout the stub's message names.

The notes say how the reference works, which for an assignment that asks for a design gives it
away. A Markdown passage between two comment lines

    <!-- A6 BEGIN: the reference's design -->
    ...
    <!-- A6 END -->

is left out of a tree where A6 is stubbed: one line says what was taken out and where the
handout is.

Only files git tracks are copied (no build folders, no virtual environments).
"""

import argparse
import re
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
BEGIN = re.compile(r"^(?P<indent>\s*)// (?P<id>A\d+) BEGIN: (?P<name>.+?)\s*$")
END = re.compile(r"^\s*// (?P<id>A\d+) END\s*$")
SWITCH = re.compile(r"^\s*MINI_KIT_STUB\((?P<id>A\d+)\);\s*$")
SOURCE_SUFFIXES = {".cpp", ".h", ".hpp", ".cc"}
DOC_BEGIN = re.compile(r"^<!-- (?P<id>A\d+) BEGIN: (?P<name>.+?) -->\s*$")
DOC_END = re.compile(r"^<!-- (?P<id>A\d+) END -->\s*$")


@dataclass
class Region:
    id: str
    name: str
    path: str   # relative to the repository
    begin: int  # line number of the BEGIN marker (1-based)
    end: int    # line number of the END marker


def tracked_files():
    out = subprocess.run(["git", "ls-files", "-z"], cwd=REPO, capture_output=True, check=True)
    return [p for p in out.stdout.decode().split("\0") if p]


def find_marked(files, suffixes, begin, end, switch=False):
    """Every region between a `begin` and an `end` marker line in the files with these suffixes,
    in file order; a malformed marker pair is an error naming it. With `switch`, a region's first
    line must be its MINI_KIT_STUB."""
    regions = []
    for rel in files:
        if Path(rel).suffix not in suffixes:
            continue
        lines = (REPO / rel).read_text().splitlines()
        open_region = None
        for number, line in enumerate(lines, 1):
            b, e = begin.match(line), end.match(line)
            if b:
                if open_region:
                    raise SystemExit(f"{rel}:{number}: {b['id']} BEGIN inside {open_region.id}, "
                                     f"which began at line {open_region.begin}")
                open_region = Region(b["id"], b["name"], rel, number, -1)
                first = SWITCH.match(lines[number]) if number < len(lines) else None
                if switch and (not first or first["id"] != b["id"]):
                    raise SystemExit(f"{rel}:{number + 1}: {b['id']}'s region must open with "
                                     f"MINI_KIT_STUB({b['id']}); (the kit check's switch, mini/tensor/errors.h)")
            elif e:
                if not open_region or open_region.id != e["id"]:
                    raise SystemExit(f"{rel}:{number}: {e['id']} END without its BEGIN")
                open_region.end = number
                regions.append(open_region)
                open_region = None
        if open_region:
            raise SystemExit(f"{rel}:{open_region.begin}: {open_region.id} BEGIN without its END")
    return regions


def find_regions(files):
    """Every marked region of the sources (a function body a stub replaces)."""
    return find_marked(files, SOURCE_SUFFIXES, BEGIN, END, switch=True)


def find_doc_regions(files):
    """Every marked passage of the Markdown notes (Region.name: what it holds)."""
    return find_marked(files, {".md"}, DOC_BEGIN, DOC_END)


def left_out_line(region):
    return (f"*(Left out of this student tree: {region.name}, which is assignment {region.id}'s to "
            f"find; notes/assignments/{region.id}.md.)*")


def without_passages(rel, regions):
    """The Markdown file's text with the given passages replaced by one line each."""
    lines = (REPO / rel).read_text().splitlines(keepends=True)
    for region in sorted(regions, key=lambda r: r.begin, reverse=True):
        lines[region.begin - 1:region.end] = [left_out_line(region) + "\n"]
    return "".join(lines)


def stub_line(region, indent):
    message = (f"not implemented: {region.id} {region.name} ({region.path}; "
               f"notes/assignments/{region.id}.md says what to write)")
    return f'{indent}::mini::fail("{message}");'


def stubbed_text(rel, regions):
    """The file's text with the given regions' bodies replaced by their stubs."""
    lines = (REPO / rel).read_text().splitlines(keepends=True)
    for region in sorted(regions, key=lambda r: r.begin, reverse=True):
        indent = BEGIN.match(lines[region.begin - 1])["indent"]
        lines[region.begin:region.end - 1] = [stub_line(region, indent) + "\n"]
    return "".join(lines)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out", nargs="?", type=Path, help="the student tree to create (must not exist)")
    parser.add_argument("--only", nargs="+", metavar="ID", help="stub these assignments only (e.g. A3)")
    parser.add_argument("--week", metavar="ID", help="the tree of ID's week: ID and every later assignment of "
                        "the schedule stubbed (scripts/kit.py, SCHEDULE), but those ID's tests need")
    parser.add_argument("--list", action="store_true", help="print the assignment regions and exit")
    args = parser.parse_args(argv)
    files = tracked_files()
    regions = find_regions(files)
    passages = find_doc_regions(files)
    if args.list:
        for r in regions:
            print(f"{r.id:4s} {r.name:40s} {r.path}:{r.begin}-{r.end}")
        return 0
    if args.out is None:
        parser.error("give OUT (the folder to create) or --list")
    ids = {r.id for r in regions}
    if args.week and args.only:
        parser.error("give --only or --week, not both")
    if args.week:
        sys.path.insert(0, str(REPO / "scripts"))
        import kit
        if args.week.upper() not in kit.SCHEDULE:
            parser.error(f"no assignment {args.week} in the schedule ({', '.join(kit.SCHEDULE)})")
        args.only = kit.week_stubs(args.week.upper())
        kept = sorted(kit.needed_by(args.week.upper()) & set(kit.SCHEDULE[kit.SCHEDULE.index(args.week.upper()):]))
        if kept:
            print(f"{args.week.upper()}'s week keeps {', '.join(kept)} written (its tests need "
                  f"{'it' if len(kept) == 1 else 'them'}), though {'it comes' if len(kept) == 1 else 'they come'} later")
    chosen = set(args.only or ids)
    unknown = chosen - ids
    if unknown:
        parser.error(f"no such assignment: {', '.join(sorted(unknown))} (there are {', '.join(sorted(ids))})")
    if args.out.exists():
        parser.error(f"{args.out} exists; give a new folder")
    by_file = {}
    for r in regions:
        if r.id in chosen:
            by_file.setdefault(r.path, []).append(r)
    docs_by_file = {}
    for r in passages:
        if r.id in chosen:
            docs_by_file.setdefault(r.path, []).append(r)
    for rel in files:
        target = args.out / rel
        target.parent.mkdir(parents=True, exist_ok=True)
        if rel in by_file:
            target.write_text(stubbed_text(rel, by_file[rel]))
        elif rel in docs_by_file:
            target.write_text(without_passages(rel, docs_by_file[rel]))
        else:
            shutil.copy2(REPO / rel, target)
    stubbed = sorted({r.id for r in regions if r.id in chosen})
    print(f"wrote {args.out}: {len(files)} files, {sum(len(v) for v in by_file.values())} regions of "
          f"{', '.join(stubbed)} stubbed, {sum(len(v) for v in docs_by_file.values())} passages of the notes "
          "left out")
    return 0


if __name__ == "__main__":
    sys.exit(main())
