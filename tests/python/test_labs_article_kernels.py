"""labs/article_figures.py --quick --only graph_breaks,fusion_bandwidth,debug_order, run in a
subprocess with this interpreter into a temporary folder. The tests check the facts each figure
draws from its JSON -- regions against explain(), kernels and bytes against the shapes, what
each debug command printed and what each fix changed -- never its timings (they move on a busy
machine), and that the PNG, SVG and JSON of each were written."""
import contextlib
import io
import sys

import pytest

from article_runner import REPO, run_article_figures

FIGURES = ["graph_breaks", "fusion_bandwidth", "debug_order"]
FLOAT32_BYTES = 4


@pytest.fixture(scope="module")
def figures(tmp_path_factory):
    out_dir = tmp_path_factory.mktemp("article_kernels")
    return out_dir, run_article_figures(FIGURES, out_dir)


def numel(shape):
    n = 1
    for d in shape:
        n *= d
    return n


# ---- graph_breaks ---------------------------------------------------------------------------


@pytest.mark.a9  # a graph break's resume units: assignment A9
def test_graph_breaks_regions_are_explains_graphs(figures):
    _, data = figures
    g = data["graph_breaks"]
    graphs = [p for p in g["parts"] if p["kind"] == "graph"]
    assert len(graphs) == g["graph_count"] == 4
    assert [p["index"] for p in graphs] == list(range(g["graph_count"]))
    assert all(p["ops"] for p in graphs)
    assert graphs[0]["ops"][0] == "matmul" and graphs[-1]["ops"][-1] == "sum"
    # the timeline is entry, region, island, region, ..., region, return
    kinds = [p["kind"] for p in g["parts"]]
    assert kinds == ["entry"] + ["graph", "island"] * 3 + ["graph", "return"], kinds
    assert all(p["us"] > 0 for p in g["parts"])


@pytest.mark.a9  # a graph break's resume units: assignment A9
def test_graph_breaks_islands_carry_explains_break_reasons(figures):
    _, data = figures
    g = data["graph_breaks"]
    islands = [p for p in g["parts"] if p["kind"] == "island"]
    island_reasons = [b["reason"] for p in islands for b in p["breaks"]]
    assert island_reasons == [r["reason"] for r in g["break_reasons"]]
    assert [b["call"] for p in islands for b in p["breaks"]] == ["print", "Tensor.item",
                                                                "Logger.info"]
    codes = [b["code"] for p in islands for b in p["breaks"]]
    assert codes[0].startswith("print(") and ".item()" in codes[1] and "log.info" in codes[2]
    assert all(b["line"].isdigit() for p in islands for b in p["breaks"])


def test_graph_breaks_json_agrees_with_a_fresh_explain(figures):
    _, data = figures
    sys.path.insert(0, str(REPO / "labs"))
    import mini
    from article.graph_breaks import training_step
    g = data["graph_breaks"]
    x, w = mini.randn(*g["shapes"]["x"]), mini.randn(*g["shapes"]["w"]) * 0.05
    with contextlib.redirect_stdout(io.StringIO()):
        explanation = mini.explain(training_step)(x, w)
    assert explanation.graph_count == g["graph_count"]
    assert [r.reason for r in explanation.break_reasons] == [r["reason"] for r in
                                                            g["break_reasons"]]
    ops = [p["ops"] for p in g["parts"] if p["kind"] == "graph"]
    assert sum(len(o) for o in ops) == explanation.op_count


# ---- fusion_bandwidth -----------------------------------------------------------------------


def test_fusion_bandwidth_eager_launches_one_kernel_per_op(figures):
    _, data = figures
    f = data["fusion_bandwidth"]
    eager = f["eager"]
    assert [k["op"] for k in eager["kernels"]] == f["fused"]["graph_ops"] == ["add", "mul",
                                                                             "relu"]
    assert eager["kernel_launches"] == len(f["fused"]["graph_ops"])
    assert all(k["kernel_launches"] == 1 for k in eager["kernels"])
    # each op's measured bytes are its operands read and its result written
    for k in eager["kernels"]:
        assert k["bytes_moved"] == k["read_bytes"] + k["written_bytes"], k
    assert [k["output_is_intermediate"] for k in eager["kernels"]] == [True, True, False]


def test_fusion_bandwidth_one_fused_kernel_reads_inputs_once(figures):
    _, data = figures
    f = data["fusion_bandwidth"]
    fused = f["fused"]
    assert len(fused["kernels"]) == 1 and fused["kernel_launches"] == 1
    kernel = fused["kernels"][0]
    assert kernel["name"].startswith("cpp_poi_fused_"), kernel["name"]
    assert [load["tensor"] for load in kernel["loads"]] == ["x", "bias"]
    assert [store["tensor"] for store in kernel["stores"]] == ["y"]
    assert any("2 intermediates stay in registers" in d for d in fused["decisions"])
    x, bias, y = (numel(f["shapes"]["x"]), numel(f["shapes"]["bias"]),
                  numel(f["output_shape"]))
    once = (x + bias + y) * FLOAT32_BYTES
    assert fused["bytes_moved"] == once == f["minimum_bytes"]
    # eager: add reads x and bias and writes t1; mul and relu each read and write a full tensor
    assert f["eager"]["bytes_moved"] == (x + bias + y + 4 * y) * FLOAT32_BYTES
    assert fused["bytes_moved"] < f["eager"]["bytes_moved"]
    assert f["bytes_ratio"] == pytest.approx(f["eager"]["bytes_moved"] / fused["bytes_moved"])


# ---- debug_order ----------------------------------------------------------------------------


# debug_order's questions and fixes go through breaks (A9), recompiles (A5, A6) and kernels (A3):
# no one assignment's
def test_debug_order_each_command_printed_what_it_answers(figures):
    _, data = figures
    breaks, recompiles, launches, mode = data["debug_order"]["questions"]
    assert "Graph Count: 2" in breaks["printed"]
    assert "Unsupported Tensor.item() call" in breaks["printed"]
    assert "in slow_step" in breaks["break_reasons"][0]["location"]
    assert "Recompiling function step_without_break" in recompiles["printed"]
    assert "L['scale'] ==" in recompiles["printed"]
    assert any("cache_size_limit" in w for w in recompiles["warnings"])
    assert f"({recompiles['recompiles']} recompiles)" in recompiles["stats"]
    assert launches["kernel_launches"] > 0 and launches["ops"]["relu"] == 8
    options = [o["option"] for o in mode["options"]]
    for wanted in ("backend='aot_eager'", "backend='inductor'",
                   "backend='inductor', mode='reduce-overhead'"):
        assert wanted in options, options
    assert [o["option"] for o in mode["options"] if o["current"]] == ["backend='aot_eager'"]


# (no one assignment's, as the test above)
def test_debug_order_each_fix_reduces_what_it_targets(figures):
    _, data = figures
    slow, fix1, fix2, fix3, fix4 = data["debug_order"]["stages"]
    assert slow["graph_count"] == 2 and fix1["graph_count"] == 1
    assert fix1["recompiles"] > 0 and fix2["recompiles"] == 0 and fix2["run_natively"] == 0
    assert fix3["launches"] < fix2["launches"]
    assert (fix3["backend"], fix4["backend"]) == ("aot_eager", "inductor")
    assert fix4["launches"] < fix3["launches"]
    assert all(s["us"] > 0 for s in (slow, fix1, fix2, fix3, fix4))
    # the questions were asked of the program as the fixes before left it
    questions = data["debug_order"]["questions"]
    assert questions[2]["kernel_launches"] == fix2["launches"]
    assert questions[1]["recompiles"] == fix1["recompiles"]


def test_every_figure_is_written(figures):
    out_dir, data = figures
    for name in FIGURES:
        for ext in ("png", "svg", "json"):
            assert (out_dir / f"article_{name}.{ext}").stat().st_size > 0, (name, ext)
        assert data[name]["title"] and data[name]["caption"]
        assert data[name]["measured"]["device"] == "cpu"
