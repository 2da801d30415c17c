"""mini.compiler.stats(): what the frame hook did with the frames it saw, and where compile
time went stage by stage (capture/compile_stats.h). Counts checked against calls whose outcome
is known from the code; times only checked to be counted where the stage ran.

    PYTHONPATH=build/python .venv/bin/python -m pytest tests/python/test_compile_stats.py
"""
import warnings

import pytest

import mini


@pytest.fixture(autouse=True)
def fresh():
    mini.reset()
    yield
    mini.reset()


def helper_without_tensors(n):
    return n * 2


def test_frames_seen_captured_and_skipped_with_their_reasons():
    def f(x):
        return x * helper_without_tensors(3)

    compiled = mini.compile(f, backend="eager")
    for _ in range(4):
        compiled(mini.ones(3))
    s = mini.compiler.stats()
    # each call: f (captured) and helper_without_tensors (no tensor: skipped; capture inlines
    # the call, so the hook meets it only if CPython runs it: it must not be counted as captured)
    assert s["frames"]["captured"] == 4
    assert s["frames"]["seen"] == s["frames"]["captured"] + sum(s["frames"]["skipped"].values())
    assert s["units"]["compiles"] == 1 and s["units"]["cache_hits"] == 3 and s["units"]["recompiles"] == 0
    mini.compiler.reset_stats()
    assert mini.compiler.stats()["frames"]["seen"] == 0


def test_a_frame_without_tensors_is_skipped_with_that_reason():
    def outer(x):
        return x + 1

    def no_tensors(n):
        return n + 1

    compiled = mini.compile(no_tensors, backend="eager")
    assert compiled(2) == 3
    skipped = mini.compiler.stats()["frames"]["skipped"]
    assert skipped.get("no tensor among its arguments") == 1, skipped


def test_recompiles_and_the_cache_limit_are_counted():
    def f(x):
        return x.sum()

    compiled = mini.compile(f, backend="eager", dynamic=False)
    with mini.config.patch(cache_size_limit=2), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for n in (2, 3, 4, 4):  # two compiles, then the limit: 4 runs natively twice
            compiled(mini.ones(n))
    u = mini.compiler.stats()["units"]
    assert u["compiles"] == 2 and u["recompiles"] == 1 and u["cache_hits"] == 0
    assert u["run_natively"] == {"the cache size limit was reached": 2}


@pytest.mark.a9  # a graph break's resume units: assignment A9
def test_a_graph_break_makes_two_units_and_each_compiles_once():
    def f(x):
        y = x.sin()
        print("", end="")
        return y.cos()

    compiled = mini.compile(f, backend="eager")
    compiled(mini.ones(2))
    compiled(mini.ones(2))
    u = mini.compiler.stats()["units"]
    assert u["compiles"] == 2 and u["cache_hits"] == 2


def test_inductor_stages_are_timed_and_a_warm_disk_cache_replaces_the_compiler(tmp_path):
    def f(x, w):
        return (x @ w).relu() * 2.0

    x, w = mini.randn(4, 8), mini.randn(8, 3)
    with mini.config.patch(cache_dir=str(tmp_path)):
        mini.compile(f)(x, w)
        cold = mini.compiler.stats()["stages"]
        mini.reset()  # the in-memory cache is gone; the disk cache is not
        mini.compile(f)(x, w)
        warm = mini.compiler.stats()["stages"]
    assert list(cold) == ["capture", "joint graph", "fusion", "codegen", "compile", "disk cache", "first run"]
    for name in ("capture", "fusion", "codegen", "compile", "first run"):
        assert cold[name]["count"] == 1 and cold[name]["seconds"] > 0, (name, cold[name])
    assert cold["disk cache"]["count"] == 0 and cold["joint graph"]["count"] == 0  # no gradients
    assert warm["compile"]["count"] == 0 and warm["disk cache"]["count"] == 1
    assert warm["disk cache"]["seconds"] < cold["compile"]["seconds"]  # reading an entry vs a C++ compile


def test_a_training_graph_adds_the_joint_graph_and_two_compiles(tmp_path):
    w = mini.randn(8, 3).requires_grad_()

    def f(x):
        return (x @ w).relu().sum()

    with mini.config.patch(cache_dir=str(tmp_path)):
        mini.compile(f)(mini.randn(4, 8)).backward()
    stages = mini.compiler.stats()["stages"]
    assert stages["joint graph"]["count"] == 1
    assert stages["compile"]["count"] + stages["disk cache"]["count"] == 2  # the forward and the backward
    assert stages["first run"]["count"] == 2  # the forward's first call, then the backward's


def test_the_printed_table_names_every_count():
    mini.compile(lambda x: x + 1, backend="eager")(mini.ones(1))
    text = mini.compiler.format_stats()
    assert text.startswith("frames: 1 seen, 1 captured, 0 skipped")
    assert "units: 0 cache hits, 1 compiles (0 recompiles), 0 run natively" in text
    assert "capture" in text and "first run" in text


def test_cache_entries_are_listed_most_recently_hit_first():
    def f(x):
        return x * 2

    compiled = mini.compile(f, backend="eager", dynamic=False)
    sizes = [2, 3, 4, 2, 3, 3, 4]
    order, ids = [], {}  # the rule: a new compile goes in front, a hit moves to the front
    for n in sizes:
        compiled(mini.ones(n))
        if n not in ids:
            ids[n] = len(ids)
        else:
            order.remove(ids[n])
        order.insert(0, ids[n])
    (unit,) = mini.compiler.cache_entries(compiled)
    assert unit["offset"] == 0
    assert [e["compile_id"] for e in unit["entries"]] == order
    assert f"size=[{sizes[-1]}]" in unit["entries"][0]["guards"]
    assert mini.compiler.cache_entries(f) == mini.compiler.cache_entries(compiled)
    module = mini.nn.Linear(3, 2)
    mini.compile(module, backend="eager")(mini.ones(1, 3))
    assert len(mini.compiler.cache_entries(module)) == 1
    with pytest.raises(TypeError, match="takes a function"):
        mini.compiler.cache_entries(3)
