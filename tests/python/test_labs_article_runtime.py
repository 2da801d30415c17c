"""labs/article_figures.py --quick --only compile_pipeline,frame_hook,guard_runtime, run in a
subprocess with this interpreter into a temporary folder. The tests check the facts each figure
draws from its JSON -- which stages ran on each path, that the frame hook's counts add up and
name the reasons the program provokes, that the cache's order is the most-recently-hit order
computed here from the sizes alone -- never its timings (they move on a busy machine), and that
the PNG, SVG and JSON of each were written."""

import pytest

from article_runner import run_article_figures

FIGURES = ["compile_pipeline", "frame_hook", "guard_runtime"]
COMPILE_STAGES = ["capture", "joint graph", "fusion", "codegen", "compile"]


@pytest.fixture(scope="module")
def figures(tmp_path_factory):
    out_dir = tmp_path_factory.mktemp("article_runtime")
    return out_dir, run_article_figures(FIGURES, out_dir)


# ---- compile_pipeline -----------------------------------------------------------------------


def test_the_cold_path_runs_every_compile_stage_for_the_forward_and_the_backward(figures):
    _, data = figures
    cold = data["compile_pipeline"]["paths"]["cold"]["stages"]
    for name in COMPILE_STAGES:
        assert cold[name]["count"] >= 1, (name, cold[name])
    assert cold["joint graph"]["count"] == 1  # one training graph, split in two
    for name in ("fusion", "codegen", "compile"):  # once for the forward, once for the backward
        assert cold[name]["count"] == 2, (name, cold[name])
    assert cold["disk cache"]["count"] == 0  # the kernel cache was empty
    assert cold["first run"]["count"] >= 1


def test_the_disk_cache_path_reads_the_kernels_instead_of_compiling(figures):
    _, data = figures
    paths = data["compile_pipeline"]["paths"]
    warm = paths["disk_cache"]["stages"]
    assert warm["compile"]["count"] == 0
    assert warm["disk cache"]["count"] == paths["cold"]["stages"]["compile"]["count"]
    for name in ("capture", "joint graph", "fusion", "codegen"):  # they run again: mini.reset()
        assert warm[name]["count"] == paths["cold"]["stages"][name]["count"], name


def test_the_cache_hit_path_hits_and_every_stage_has_a_folder(figures):
    _, data = figures
    d = data["compile_pipeline"]
    hit = d["paths"]["hit"]
    assert hit["hits_counted"] > 0 and hit["guards_checked"] > 0
    table = {row[0]: row for row in d["stage_table"]}
    assert set(table) == set(d["paths"]["cold"]["stages"])  # a box for every stage stats() has
    assert all(row[2].startswith("mini/") for row in table.values())
    assert table["joint graph"][2] == "mini/autograd/" and table["fusion"][2] == "mini/fusion/"


# ---- frame_hook -----------------------------------------------------------------------------


def test_the_frame_counts_add_up(figures):
    _, data = figures
    f = data["frame_hook"]["frames"]
    assert f["seen"] == f["captured"] + f["skipped"]
    assert f["skipped"] == sum(f["skipped_by_reason"].values())
    for step in data["frame_hook"]["steps"]:
        assert step["frames_seen"] == step["captured"] + sum(step["skipped"].values()), step


def test_the_unit_counts_add_up_to_the_units_run(figures):
    _, data = figures
    d = data["frame_hook"]
    u = d["units"]
    assert d["calls"] == len(d["rows_per_step"]) == len(d["steps"])
    assert u["cache_hits"] + u["compiles"] + u["run_natively"] == u["run"]
    assert u["run_natively"] == sum(u["run_natively_by_reason"].values())
    assert sum(s["units_run"] for s in d["steps"]) == u["run"]
    assert sum(s["cache_hits"] for s in d["steps"]) == u["cache_hits"]
    assert sum(s["compiles"] for s in d["steps"]) == u["compiles"]
    # once `step` is a graph input (it changes every call), every step runs the same units: a
    # step that compiles runs as many as a step that only hits
    later = {s["units_run"] for s in d["steps"][1:]}
    assert len(later) == 1, d["steps"]
    assert all(d["checks"].values()), d["checks"]


# the frame hook's figure trains (A1) across graph breaks (A9): no one assignment's
def test_the_skip_and_native_reasons_are_the_ones_the_program_provokes(figures):
    _, data = figures
    d = data["frame_hook"]
    skipped = d["frames"]["skipped_by_reason"]
    assert skipped.get("no tensor among its arguments", 0) >= 1  # warmup(step)
    # ScaledLinear.forward's zero-argument super() is inlined into the caller's graph: its own
    # frame is never reached by the hook
    assert skipped.get("it calls zero-argument super()", 0) == 0
    assert skipped.get("mini's own code", 0) >= d["calls"]  # the optimizer's step and zero_grad
    native = d["units"]["run_natively_by_reason"]
    assert any("branch on a tensor" in why and "loop" in why for why in native), native
    caches = {row["function"]: row["units"] for row in d["functions"]}
    assert caches["ScaledLinear.forward"] == [] and caches["warmup"] == []  # never captured
    assert [u["entries"] for u in caches["shrink"]] == [0]  # given up: runs natively
    assert len(caches["train_step"]) >= 2  # the print splits it into units


def test_a_new_batch_size_recompiles_once_then_hits(figures):
    _, data = figures
    steps = data["frame_hook"]["steps"]
    seen, first_new = {steps[0]["rows"]}, None
    for s in steps:
        if s["rows"] not in seen and first_new is None:
            first_new = s
        seen.add(s["rows"])
    assert first_new is not None and first_new["recompiles"] > 0
    # automatic dynamic shapes: after the first new size, no size recompiles
    after = [s for s in steps if s["step"] > first_new["step"]]
    assert after and all(s["compiles"] == 0 for s in after), after


# ---- guard_runtime --------------------------------------------------------------------------


def most_recently_hit(sizes):
    """This test's own statement of the rule: a new size gets the next compile id and goes in
    front; a size seen before moves its entry to the front."""
    ids, order, orders = {}, [], []
    for n in sizes:
        if n in ids:
            order = [i for i in order if i != ids[n]]
        else:
            ids[n] = len(ids)
        order = [ids[n]] + order
        orders.append(order)
    return orders, ids


def test_the_cache_order_is_most_recently_hit_first(figures):
    _, data = figures
    seq = data["guard_runtime"]["sequence"]
    orders, ids = most_recently_hit(seq["sizes"])
    assert [c["order"] for c in seq["calls"]] == orders
    size_of = {i: n for n, i in ids.items()}
    for call in seq["calls"]:
        assert call["guarded_sizes"] == [[size_of[i]] for i in call["order"]], call
    assert seq["matches_rule"] is True


def test_each_call_of_the_sequence_is_a_compile_or_a_hit_at_its_depth(figures):
    _, data = figures
    seq = data["guard_runtime"]["sequence"]
    orders, ids = most_recently_hit(seq["sizes"])
    previous, seen = [], set()
    for call, order in zip(seq["calls"], orders):
        n = call["size"]
        if n in seen:
            assert call["outcome"] == "hit" and call["found_at_depth"] == previous.index(ids[n])
        else:
            assert call["outcome"] == "compile" and call["failed_entries"] == len(previous)
        seen.add(n)
        previous = order


def test_the_depth_sweep_hits_at_the_depth_it_claims(figures):
    _, data = figures
    depths = data["guard_runtime"]["depths"]
    assert [d["sizes"] for d in depths] == list(range(1, len(depths) + 1))
    assert len(depths) >= 4
    for d in depths:
        assert d["depth"] == d["sizes"] - 1
        assert d["depth_checked"] is True, d  # no compile while timing; the first size at the back
        assert d["order_after"] == [8 * k for k in range(d["sizes"], 0, -1)], d
        assert d["hits_counted"] > 0
    recompile = data["guard_runtime"]["recompile"]
    assert set(recompile) == {"eager"}  # --quick: no C++ compile here
    assert recompile["eager"]["recompile_stages_ms"]["compile"] == 0


def test_every_figure_is_written(figures):
    out_dir, data = figures
    for name in FIGURES:
        for ext in ("png", "svg", "json"):
            path = out_dir / f"article_{name}.{ext}"
            assert path.exists() and path.stat().st_size > 0, path
        assert data[name]["title"] and data[name]["caption"]
        assert data[name]["measured"]["device"] == "cpu"
