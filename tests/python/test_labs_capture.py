"""The capture labs (labs/graph_breaks.py, shape_thrash.py, scalar_guards.py) run with --quick,
each in a subprocess with this interpreter, into a temporary folder. The tests check the
facts each lab reports in its JSON -- graphs, breaks, reasons and source lines, compiles per
strategy and per step -- and that its figures and JSON were written. Timings are not checked.

Expected counts come from the behaviour torch.compile 2.11 was measured to have
(tests/conformance/expected_torch_2.11.jsonl) and from the sizes and values each lab feeds,
recomputed here from the JSON's own inputs, never from mini's counts."""
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
LABS = REPO / "labs"
PYTHON_DIR = os.environ.get("MINI_PYTHON_DIR", str(REPO / "build" / "python"))
TORCH_EXPECTATIONS = REPO / "tests" / "conformance" / "expected_torch_2.11.jsonl"

OUTPUTS = {
    "graph_breaks": ["graph_breaks_regions.png", "graph_breaks_regions.svg",
                     "graph_breaks_cost.png", "graph_breaks_cost.svg", "graph_breaks.json"],
    "shape_thrash": ["shape_thrash_compiles.png", "shape_thrash_compiles.svg",
                     "shape_thrash_time.png", "shape_thrash_time.svg", "shape_thrash.json"],
    "scalar_guards": ["scalar_guards.png", "scalar_guards.svg", "scalar_guards.json"],
}


def run_lab(name, out_dir, *extra):
    env = dict(os.environ, PYTHONPATH=PYTHON_DIR, MPLBACKEND="Agg")
    env.pop("MINI_LOGS", None)
    completed = subprocess.run(
        [sys.executable, str(LABS / f"{name}.py"), "--quick", "--out", str(out_dir), *extra],
        cwd=REPO, env=env, capture_output=True, text=True, timeout=300)
    assert completed.returncode == 0, (
        f"{name}.py --quick failed (exit {completed.returncode})\n"
        f"stdout:\n{completed.stdout[-3000:]}\nstderr:\n{completed.stderr[-3000:]}")
    return completed


class LabRun:
    def __init__(self, name, out_dir, completed):
        self.name, self.out_dir, self.stdout = name, out_dir, completed.stdout
        self.results = json.loads((out_dir / f"{name}.json").read_text())


@pytest.fixture(scope="module")
def labs(tmp_path_factory):
    """labs(name): that lab's quick run (made once per test module, on first use)."""
    runs = {}

    def get(name):
        if name not in runs:
            out_dir = tmp_path_factory.mktemp(name)
            runs[name] = LabRun(name, out_dir, run_lab(name, out_dir))
        return runs[name]
    return get


def line_of(path, text, after):
    """The 1-based number of the first line of `path` containing `text` below the first line
    containing `after` (a def, so that the module docstring is not matched)."""
    lines = path.read_text().splitlines()
    start = next(i for i, line in enumerate(lines) if after in line)
    for number, line in enumerate(lines[start:], start + 1):
        if text in line:
            return number
    raise AssertionError(f"{text!r} not in {path} after {after!r}")


# ---- every lab ------------------------------------------------------------------------------


@pytest.mark.parametrize("name", list(OUTPUTS))
def test_lab_writes_its_figures_and_json(labs, name):
    run = labs(name)
    for filename in OUTPUTS[name]:
        path = run.out_dir / filename
        assert path.exists() and path.stat().st_size > 0, f"{name} did not write {filename}"
    assert run.results["quick"] is True
    assert run.results["backend"] == "eager", "--quick must default to the eager backend"
    assert "wrote " in run.stdout


@pytest.mark.parametrize("name", list(OUTPUTS))
def test_lab_prints_torch_numbers_beside_minis(labs, name):
    if not TORCH_EXPECTATIONS.exists():
        pytest.skip("tests/conformance/expected_torch_2.11.jsonl is missing")
    run = labs(name)
    assert "beside torch 2.11" in run.stdout
    assert run.results["torch_2_11"], f"{name} recorded no torch 2.11 case"


# ---- graph_breaks ---------------------------------------------------------------------------


def program(results, name):
    return next(p for p in results["programs"] if p["name"] == name)


def kinds(p):
    return [region["kind"] for region in p["regions"]]


@pytest.mark.a9  # a graph break's resume units: assignment A9
def test_graph_breaks_data_dependent_if_breaks_once(labs):
    results = labs("graph_breaks").results
    p = program(results, "dd_if_item")
    assert (p["graph_count"], p["graph_break_count"]) == (2, 1)
    assert p["compiles_after_first_call"] == 2
    [reason] = p["break_reasons"]
    assert "item()" in reason["reason"]
    assert int(reason["line"]) == line_of(LABS / "graph_breaks.py", "if x.sum().item() > 0:",
                                         after="def dd_if_item(")
    assert reason["code"] == "if x.sum().item() > 0:"
    assert kinds(p) == ["graph", "eager", "graph"]
    assert p["fullgraph"].startswith("error: Unsupported")


def test_graph_breaks_where_stays_one_graph(labs):
    results = labs("graph_breaks").results
    p = program(results, "where_no_break")
    assert (p["graph_count"], p["graph_break_count"]) == (1, 0)
    assert p["break_reasons"] == []
    assert p["compiles_after_first_call"] == 1
    assert kinds(p) == ["graph"]
    assert p["fullgraph"] == "ok"


@pytest.mark.a9  # a graph break's resume units: assignment A9
def test_graph_breaks_print_in_the_middle(labs):
    results = labs("graph_breaks").results
    p = program(results, "print_mid")
    assert (p["graph_count"], p["graph_break_count"]) == (2, 1)
    [reason] = p["break_reasons"]
    assert "print" in reason["reason"]
    assert reason["code"] == 'print("step")'
    assert int(reason["line"]) == line_of(LABS / "graph_breaks.py", 'print("step")',
                                         after="def print_mid(")
    assert kinds(p) == ["graph", "eager", "graph"]
    assert p["regions"][0]["ops"] == ["mul"] and p["regions"][2]["ops"] == ["relu"]
    assert p["fullgraph"].startswith("error: Unsupported")


@pytest.mark.a9  # a graph break's resume units: assignment A9
def test_graph_breaks_several_breaks_in_order(labs):
    results = labs("graph_breaks").results
    p = program(results, "several_breaks")
    # log.info comes before any tensor op: a break without a graph before it
    assert p["graph_count"] == 3 and p["graph_break_count"] == 2
    codes = [reason["code"] for reason in p["break_reasons"]]
    assert codes == ['log.info("step start")', 'print("hidden layer done")',
                     "if loss.item() > 1e6:"]
    assert kinds(p) == ["eager", "graph", "eager", "graph", "eager", "graph"]
    lines = [int(reason["line"]) for reason in p["break_reasons"]]
    assert lines == sorted(lines)
    assert p["fullgraph"].startswith("error: Unsupported")


@pytest.mark.a9  # a graph break's resume units: assignment A9
def test_graph_breaks_chain_has_one_more_graph_per_print(labs):
    results = labs("graph_breaks").results
    chains = results["chains"]
    assert chains["sizes"], "no chain measured"
    for size in chains["sizes"]:
        assert [p["breaks"] for p in size["points"]] == list(range(chains["segments"]))
        for point in size["points"]:
            assert point["graph_count"] == point["breaks"] + 1
            assert point["graph_break_count"] == point["breaks"]
            assert point["break_reason_count"] == point["breaks"]


# ---- shape_thrash ---------------------------------------------------------------------------


def next_power_of_two(n, smallest=16):
    return max(smallest, 1 << (n - 1).bit_length())


def stream(results, starts_with):
    return next(s for s in results["streams"] if s["name"].startswith(starts_with))


def compiles(s, strategy):
    return s["strategies"][strategy]["summary"]["compiles_after_each_call"]


def test_shape_thrash_32_64_128(labs):
    results = labs("shape_thrash").results
    s = stream(results, "32 -> 64 -> 128")
    assert s["rows"] == [32, 64, 128]
    assert compiles(s, "static") == [1, 2, 3]
    assert compiles(s, "dynamic=False") == [1, 2, 3]
    assert compiles(s, "dynamic=True") == [1, 1, 1]
    assert compiles(s, "mark_dynamic") == [1, 1, 1]
    assert compiles(s, "pad to 2^k") == [1, 2, 3]  # 32, 64, 128 are their own buckets
    conformance = results["conformance"]
    assert conformance["static"]["mini"] == [1, 2, 3]
    assert conformance["dynamic=True"]["mini"] == [1, 1, 1]


@pytest.mark.a7
def test_shape_thrash_32_64_128_default_recompiles_once(labs):
    # automatic dynamic (assignment A7): 64 makes the batch dim symbolic, 128 is a hit
    results = labs("shape_thrash").results
    assert compiles(stream(results, "32 -> 64 -> 128"), "default") == [1, 2, 2]
    assert results["conformance"]["default"]["mini"] == [1, 2, 2]


def test_shape_thrash_data_loader_last_batch(labs):
    results = labs("shape_thrash").results
    s = stream(results, "data loader")
    assert len(set(s["rows"])) == 2  # full batches and one shorter last batch
    first_short = next(i for i, rows in enumerate(s["rows"]) if rows != s["rows"][0])
    for strategy in ("static", "dynamic=False", "default"):
        after = compiles(s, strategy)
        assert after == [1] * first_short + [2] * (len(after) - first_short), strategy
    for strategy in ("dynamic=True", "mark_dynamic", "pad to 2^k"):
        assert set(compiles(s, strategy)) == {1}, strategy


def test_shape_thrash_variable_lengths(labs):
    results = labs("shape_thrash").results
    limit = results["cache_size_limit"]
    s = stream(results, "variable sequence lengths")
    assert len(s["rows"]) >= 20
    assert set(compiles(s, "dynamic=True")) == {1}
    assert set(compiles(s, "mark_dynamic")) == {1}
    buckets_so_far = [len({next_power_of_two(n) for n in s["rows"][:i + 1]})
                      for i in range(len(s["rows"]))]
    assert compiles(s, "pad to 2^k") == [min(limit, n) for n in buckets_so_far]
    pad_calls = s["strategies"]["pad to 2^k"]["calls"]
    assert all(call["rows_fed"] == next_power_of_two(call["rows"]) for call in pad_calls)


def test_shape_thrash_variable_lengths_stop_compiling_at_the_cache_limit(labs):
    # the cache size limit: static shapes compile each new length up to the
    # limit, warn, and run eagerly from then on
    results = labs("shape_thrash").results
    limit = results["cache_size_limit"]
    s = stream(results, "variable sequence lengths")
    distinct_so_far = [len(set(s["rows"][:i + 1])) for i in range(len(s["rows"]))]
    assert distinct_so_far[-1] > limit, "the stream should outrun the cache limit"
    for strategy in ("static", "dynamic=False"):
        assert compiles(s, strategy) == [min(limit, n) for n in distinct_so_far], strategy
        assert s["strategies"][strategy]["summary"]["cache_limit_warnings"] > 0


@pytest.mark.a7
def test_shape_thrash_variable_lengths_default_compiles_twice(labs):
    # automatic dynamic (assignment A7): the second length makes the dim symbolic
    s = stream(labs("shape_thrash").results, "variable sequence lengths")
    assert compiles(s, "default")[-1] == 2


def test_shape_thrash_results_match_eager(labs):
    results = labs("shape_thrash").results
    for s in results["streams"]:
        for name, strategy in s["strategies"].items():
            assert strategy["summary"]["all_match_eager"], f"{s['name']}: {name}"


# ---- scalar_guards --------------------------------------------------------------------------


def steps_of(results, variant):
    return results["variants"][variant]["summary"]["compiles_after_each_step"]


def test_scalar_guards_float_lr_recompiles_once(labs):
    results = labs("scalar_guards").results
    steps = results["steps"]
    assert steps_of(results, "float lr") == [1] + [2] * (steps - 1)
    assert results["conformance"]["float lr"]["mini"] == [1, 2, 2, 2]


def test_scalar_guards_tensor_lr_never_recompiles(labs):
    results = labs("scalar_guards").results
    steps = results["steps"]
    assert steps_of(results, "tensor lr") == [1] * steps
    assert steps_of(results, "tensor lr, auto off") == [1] * steps
    assert results["conformance"]["tensor lr"]["mini"] == [1, 1, 1, 1]


def test_scalar_guards_float_lr_without_automatic_dynamic_thrashes(labs):
    results = labs("scalar_guards").results
    limit = results["cache_size_limit"]
    records = results["variants"]["float lr, auto off"]["steps"]
    lrs = [record["lr"] for record in records]
    distinct_so_far = [len(set(lrs[:i + 1])) for i in range(len(lrs))]
    assert distinct_so_far[-1] > limit
    assert steps_of(results, "float lr, auto off") == [min(limit, n) for n in distinct_so_far]
    assert results["variants"]["float lr, auto off"]["summary"]["cache_limit_warnings"] > 0


def test_scalar_guards_every_variant_trains_like_eager(labs):
    results = labs("scalar_guards").results
    reference = results["eager_reference_losses"]
    assert reference[-1] < reference[0], "the eager reference should learn"
    for name, variant in results["variants"].items():
        assert variant["summary"]["matches_eager"], name


def test_missing_conformance_data_is_said_and_skipped(tmp_path, monkeypatch, capsys):
    monkeypatch.syspath_prepend(str(LABS))
    import measure
    monkeypatch.setattr(measure, "TORCH_EXPECTATIONS", tmp_path / "missing.jsonl")
    assert measure.load_torch_expectations() == {}
    assert "missing" in capsys.readouterr().out
