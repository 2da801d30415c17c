"""The size limits of issue 34 (scripts/check_sizes.py): no new file or function over its limit,
and the known excess only shrinks. Also that the checker sees what it claims to see."""
import importlib.util
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
_spec = importlib.util.spec_from_file_location("check_sizes", REPO / "scripts" / "check_sizes.py")
check_sizes = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(check_sizes)


def test_no_file_or_function_passes_its_limit_beyond_the_known_ones():
    found = check_sizes.problems(check_sizes.measure())
    assert not found, "\n".join(found)


def test_the_cpp_measure_finds_a_long_function_and_its_name():
    body = ["  x += 1;"] * 90
    lines = ["// a comment (x)", "static int long_one(int x,", "                    int y) {", *body, "  return x;", "}",
             "int short_one() { return 1; }", "void two(int a) {", "  a++;", "}"]
    found = {name: length for name, _, length in check_sizes.cpp_functions(lines)}
    assert found["long_one"] == 94  # from its signature to its closing brace
    assert found["two"] == 3
    assert "short_one" not in found  # a one-line definition has no body to measure


def test_the_python_measure_counts_methods_and_nested_functions():
    text = "class A:\n    def f(self):\n        def g():\n            return 1\n        return g\n"
    found = {name: length for name, _, length in check_sizes.python_functions(text)}
    assert found == {"f": 4, "g": 2}


def test_growth_new_excess_and_stale_entries_are_each_reported(monkeypatch):
    # a KNOWN list of the checker's own (the repository's may be empty)
    monkeypatch.setattr(check_sizes, "KNOWN", {"mini/a.cpp:grows": 90, "mini/b.cpp:fixed": 85,
                                               "mini/c.cpp:same": 100})
    over = {"mini/a.cpp:grows": (91, 80),  # grown
            "mini/new.cpp:f": (81, 80),    # new
            "mini/c.cpp:same": (100, 80)}  # unchanged; mini/b.cpp:fixed is gone: fixed, but still listed
    found = check_sizes.problems(over)
    assert any("mini/a.cpp:grows" in p and "grown" in p for p in found)
    assert any("mini/new.cpp:f" in p and "over the limit" in p for p in found)
    assert any("mini/b.cpp:fixed" in p and "remove it from KNOWN" in p for p in found)
    assert len(found) == 3
