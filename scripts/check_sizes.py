"""The size limits a reader can hold in their head, checked (issue 34's bar).

    python3 scripts/check_sizes.py          # the table of what is over, and whether it holds

Limits, for the product's code (mini/, labs/, scripts/; tests are not counted):
  - a source file: at most 800 lines; in mini/capture/ and mini/codegen/ at most 600;
  - a function: at most 80 lines, outside the tables of bindings (the bind_* functions of
    mini/python/, one .def per line).
What was over when the limits came is listed in KNOWN with its size then: an entry may shrink
(and goes when it is under the limit), never grow, and nothing new may pass a limit. The
function lengths of C++ are found by layout (a definition starts at column 0 and ends at the
next "}" there), which is how every file of mini is written.
"""
import ast
import re
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
ROOTS = ("mini", "labs", "scripts")
SUFFIXES = {".cpp", ".h", ".cu", ".cuh", ".py"}
FILE_LIMIT, STAGE_FILE_LIMIT, FUNCTION_LIMIT = 800, 600, 80
STAGE_FOLDERS = ("mini/capture/", "mini/codegen/")

# What was over the limits, and its size then: "path" for a file, "path:function" for a function.
KNOWN = {
}

CPP_DEFINITION = re.compile(r"^[A-Za-z_]")
CPP_NOT_A_FUNCTION = re.compile(r"^(struct|class|namespace|enum|union|typedef|using|return|template|#|extern \"C\" \{)")


def cpp_functions(lines):
    """(name, first line, length) of each function defined at column 0."""
    out, i = [], 0
    while i < len(lines):
        line = lines[i]
        if CPP_DEFINITION.match(line) and "(" in line and not CPP_NOT_A_FUNCTION.match(line) \
                and not line.rstrip().endswith(";"):
            k = i  # the signature may span lines up to its "{"
            while k < min(i + 6, len(lines)) and not lines[k].rstrip().endswith("{"):
                if lines[k].rstrip().endswith(";") or lines[k].rstrip().endswith("}"):
                    k = len(lines)
                    break
                k += 1
            if k < min(i + 6, len(lines)):
                j = k + 1
                while j < len(lines) and not lines[j].startswith("}"):
                    j += 1
                name = re.findall(r"([A-Za-z_]\w*)\s*\(", " ".join(lines[i:k + 1]))
                name = [n for n in name if n not in ("__launch_bounds__", "__global__", "decltype")]
                out.append((name[0] if name else "?", i + 1, j - i + 1))
                i = j
        i += 1
    return out


def python_functions(text):
    out = []
    for node in ast.walk(ast.parse(text)):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            out.append((node.name, node.lineno, node.end_lineno - node.lineno + 1))
    return out


def measure():
    """{key: (size, limit)} for everything over a limit."""
    over = {}
    for root in ROOTS:
        for path in sorted((REPO / root).rglob("*")):
            if path.suffix not in SUFFIXES or not path.is_file() or "__pycache__" in path.parts:
                continue
            rel = path.relative_to(REPO).as_posix()
            text = path.read_text()
            lines = text.splitlines()
            limit = STAGE_FILE_LIMIT if rel.startswith(STAGE_FOLDERS) else FILE_LIMIT
            if len(lines) > limit:
                over[rel] = (len(lines), limit)
            functions = python_functions(text) if path.suffix == ".py" else cpp_functions(lines)
            for name, _, length in functions:
                if rel.startswith("mini/python/") and name.startswith("bind_"):
                    continue  # a table of bindings
                if length > FUNCTION_LIMIT:
                    key = f"{rel}:{name}"
                    over[key] = (max(length, over.get(key, (0,))[0]), FUNCTION_LIMIT)
    return over


def problems(over):
    """What breaks the rule: new excess, growth, and KNOWN entries that are gone."""
    out = []
    for key, (size, limit) in sorted(over.items()):
        if key not in KNOWN:
            out.append(f"{key}: {size} lines, over the limit of {limit} (split it)")
        elif size > KNOWN[key]:
            out.append(f"{key}: {size} lines, grown from {KNOWN[key]} (it may only shrink)")
    for key in sorted(set(KNOWN) - set(over)):
        out.append(f"{key}: now within its limit: remove it from KNOWN in scripts/check_sizes.py")
    return out


def main():
    over = measure()
    print(f"{'over a limit':<64} {'lines':>6} {'limit':>6}")
    for key, (size, limit) in sorted(over.items(), key=lambda kv: -kv[1][0] / kv[1][1]):
        print(f"{key:<64} {size:>6} {limit:>6}")
    found = problems(over)
    for p in found:
        print("FAIL", p)
    print(f"{len(over)} over a limit, all known and none grown" if not found else f"{len(found)} problems")
    return 1 if found else 0


if __name__ == "__main__":
    sys.exit(main())
