"""labs/reduce_overhead.py run with --quick, in a subprocess with this interpreter, into a
temporary folder. The tests check what the lab reports in its JSON -- launches per call per
mode, the input-copy case, each shape stream's compiles and (on a GPU) its recordings, all
against what the sizes fed and mini's documented rules say they must be -- and that it wrote
its figures. Timings are reported, never checked.

On the CPU mode="reduce-overhead" runs as default mode (no CUDA graph), so there the facts are
fusion's and the compiles'. The test marked `cuda` runs the lab with --device cuda (mini alone:
--no-torch, to keep it short) on the GPU machine and checks the CUDA graph facts: one replay and
its two copies a call, the copies paid with the same input buffer as with a new one, and a
warm-up, a recording and replays for every input layout, in the order the sizes came."""
import json
import os
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest

from conftest import requires_cuda, requires_no_cuda

REPO = Path(__file__).resolve().parents[2]
LAB = REPO / "labs" / "reduce_overhead.py"
PYTHON_DIR = os.environ.get("MINI_PYTHON_DIR", str(REPO / "build" / "python"))
MODES = ("eager", "default", "reduce-overhead")
STREAM_MODES = MODES + ("default dynamic=False", "reduce-overhead dynamic=False")
CACHE_SIZE_LIMIT = 8  # mini.config.cache_size_limit's default: past it a size runs eagerly


def run_lab(out_dir, *extra):
    env = dict(os.environ, PYTHONPATH=PYTHON_DIR, MPLBACKEND="Agg")
    env.pop("MINI_LOGS", None)
    return subprocess.run([sys.executable, str(LAB), "--quick", "--out", str(out_dir), *extra],
                          cwd=REPO, env=env, capture_output=True, text=True, timeout=600)


def results_of(out_dir, *extra):
    done = run_lab(out_dir, *extra)
    assert done.returncode == 0, (f"reduce_overhead.py --quick {' '.join(extra)} failed\n"
                                  f"stdout:\n{done.stdout[-3000:]}\nstderr:\n{done.stderr[-3000:]}")
    return done.stdout, json.loads((out_dir / "reduce_overhead.json").read_text())


@pytest.fixture(scope="module")
def cpu_lab(tmp_path_factory):
    out_dir = tmp_path_factory.mktemp("reduce_overhead")
    stdout, results = results_of(out_dir, "--device", "cpu")
    return out_dir, stdout, results


# ---- what the sizes fed say each stream must do --------------------------------------------


def expected_compiled_calls(sizes, mode):
    """Which calls compile. Eager: none. Automatic dynamic shapes (default, reduce-overhead):
    the first call, then the first call of another size, which compiles the batch dim as a
    symbol; every later size hits that graph. dynamic=False: the first call of each size, up to
    the cache size limit."""
    if mode == "eager":
        return [False] * len(sizes)
    if mode.endswith("dynamic=False"):
        seen = []
        compiled = []
        for size in sizes:
            new = size not in seen and len(seen) < CACHE_SIZE_LIMIT
            seen += [size] if new else []
            compiled.append(new)
        return compiled
    first_other = next((i for i, size in enumerate(sizes) if size != sizes[0]), None)
    return [i == 0 or i == first_other for i in range(len(sizes))]


def expected_cuda_kinds(sizes, mode):
    """What each reduce-overhead call is on a GPU (runtime/cuda_graph_replay.h, CudaGraphReplay): per
    compiled graph, a layout's first call warms up (default mode), its second records the CUDA
    graph (and replays it), later ones replay. Under automatic dynamic shapes the calls before
    the first size change run the static graph; from the change on, every call hits the
    symbolic graph (the most recently hit entry, which every size passes), whose recordings
    start anew -- the first size included. With dynamic=False each size is its own graph."""
    calls_of = Counter()
    kinds = []
    changed = False
    for size in sizes:
        changed = changed or size != sizes[0]
        graph = size if mode == "reduce-overhead dynamic=False" else changed
        calls_of[(graph, size)] += 1
        n = calls_of[(graph, size)]
        kinds.append("warm-up" if n == 1 else "recorded" if n == 2 else "replayed")
    return kinds


def test_the_expected_kinds_follow_the_rules_on_a_small_stream():
    # the rule written out once by hand, so that the helper above is itself checked
    assert expected_cuda_kinds([4, 8, 4, 8, 4], "reduce-overhead") == [
        "warm-up", "warm-up", "warm-up", "recorded", "recorded"]
    assert expected_cuda_kinds([2, 2, 3, 3, 3], "reduce-overhead") == [
        "warm-up", "recorded", "warm-up", "recorded", "replayed"]
    assert expected_cuda_kinds([4, 8, 4, 8, 4], "reduce-overhead dynamic=False") == [
        "warm-up", "warm-up", "recorded", "recorded", "replayed"]
    assert expected_compiled_calls([2, 2, 3, 3, 4], "default") == [True, False, True, False, False]
    assert expected_compiled_calls([2, 2, 3, 3, 4], "reduce-overhead dynamic=False") == [
        True, False, True, False, True]


# ---- the CPU run ---------------------------------------------------------------------------


def test_fusion_cuts_the_launches_and_reduce_overhead_is_default_mode_on_the_cpu(cpu_lab):
    _, _, results = cpu_lab
    assert results["device"] == "cpu" and results["cuda_graphs"] is False
    modes = results["mini"]["modes"]
    assert set(modes) == set(MODES)
    # eager: a LayerNorm, two Linears (matmul and bias), a GELU and an add a block, at least
    assert modes["eager"]["launches"] >= 5 * results["model"]["depth"]
    assert modes["default"]["launches"] < modes["eager"]["launches"]
    assert modes["reduce-overhead"]["launches"] == modes["default"]["launches"]
    for mode, r in modes.items():
        # the same buffer every call or a new one: nothing is copied on the CPU
        assert r["new_input"]["launches"] == r["launches"], mode
        assert r["max_abs_diff_to_mini_eager"] < 1e-4, (mode, r["max_abs_diff_to_mini_eager"])
        assert r["cpu_us"] > 0 and r["wall_us"] > 0 and "gpu_us" not in r, mode
    assert "torch" not in results


def test_the_sweep_is_one_fused_kernel_and_nothing_is_copied_on_the_cpu(cpu_lab):
    _, _, results = cpu_lab
    sweep, sizes = results["mini"]["sweep"], results["config"]["sweep"]
    assert sweep["eager"]["launches"] == [3] * len(sizes)  # x * 2, + 1, relu
    assert sweep["default"]["launches"] == [1] * len(sizes)
    assert sweep["reduce-overhead"]["launches"] == [1] * len(sizes)


@pytest.mark.parametrize("stream", ["alternating", "growing"])
def test_each_shape_stream_compiles_as_the_sizes_fed_say(cpu_lab, stream):
    _, _, results = cpu_lab
    sizes = results["config"][stream]
    assert len(set(sizes)) >= 2
    runs = results["mini"]["streams"][stream]["modes"]
    assert set(runs) == set(STREAM_MODES)
    for mode, run in runs.items():
        compiled = [call["compiled"] for call in run["calls"]]
        assert [call["size"] for call in run["calls"]] == sizes, mode
        assert compiled == expected_compiled_calls(sizes, mode), (mode, compiled)
        assert run["compiles"] == sum(compiled), mode
    # two compiles under automatic dynamic shapes, one a size under dynamic=False
    assert runs["default"]["compiles"] == runs["reduce-overhead"]["compiles"] == 2
    assert runs["reduce-overhead dynamic=False"]["compiles"] == runs["default dynamic=False"]["compiles"] \
        == len(set(sizes))


@pytest.mark.parametrize("stream", ["alternating", "growing"])
def test_on_the_cpu_no_call_records_a_cuda_graph(cpu_lab, stream):
    _, _, results = cpu_lab
    runs = results["mini"]["streams"][stream]["modes"]
    for mode in ("reduce-overhead", "reduce-overhead dynamic=False"):
        base = runs["default dynamic=False" if mode.endswith("dynamic=False") else "default"]
        assert [call["launches"] for call in runs[mode]["calls"]] == [c["launches"] for c in base["calls"]], mode
        assert runs[mode]["recordings"] == runs[mode]["replays"] == 0, mode
        assert {call["kind"] for call in runs[mode]["calls"]} == {"no CUDA graph (CPU)"}, mode
    steady = results["mini"]["streams"][stream]["steady_calls"]
    assert steady and all(not runs[m]["calls"][i]["compiled"] for m in runs for i in steady)


def test_it_says_cuda_graphs_need_a_gpu_and_writes_its_files(cpu_lab):
    out_dir, stdout, results = cpu_lab
    assert "CUDA graphs need a GPU" in stdout and "figures/cuda/reduce_overhead" in stdout
    for name in ("reduce_overhead.png", "reduce_overhead.svg", "reduce_overhead_loses.png",
                 "reduce_overhead_loses.svg", "reduce_overhead.json"):
        assert (out_dir / name).stat().st_size > 0, name
    measured = results["measured"]
    assert measured["date"] and measured["on"]
    assert measured["command"].startswith("python labs/reduce_overhead.py")
    assert "--quick" in measured["command"]


def test_run_all_runs_it():
    sys.path.insert(0, str(REPO / "labs"))
    import run_all
    assert "reduce_overhead.py" in run_all.LABS


@requires_no_cuda
def test_without_a_gpu_device_cuda_says_why_in_one_line_and_writes_nothing(tmp_path):
    done = run_lab(tmp_path, "--device", "cuda")
    assert done.returncode == 0, done.stderr[-2000:]
    lines = done.stdout.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("reduce_overhead: --device cuda: skipped"), lines
    assert not any(tmp_path.iterdir())


# ---- the GPU run ---------------------------------------------------------------------------


def gpu(test):
    for mark in requires_cuda:
        test = mark(test)
    return test


@pytest.fixture(scope="module")
def cuda_lab(tmp_path_factory):
    out_dir = tmp_path_factory.mktemp("reduce_overhead_cuda")
    return results_of(out_dir, "--device", "cuda", "--no-torch")[1]


@gpu
def test_on_a_gpu_a_replay_is_one_launch_and_its_copies(cuda_lab):
    results = cuda_lab
    assert results["device"] == "cuda" and results["cuda_graphs"] is True
    modes = results["mini"]["modes"]
    assert modes["default"]["launches"] < modes["eager"]["launches"]
    # the input copied into the recording's buffer, the replay, the output copied out
    assert modes["reduce-overhead"]["launches"] == 3 < modes["default"]["launches"]
    for mode, r in modes.items():
        # generated kernels sum a LayerNorm's row in another order than eager's: rounding
        assert r["max_abs_diff_to_mini_eager"] < 1e-3, (mode, r["max_abs_diff_to_mini_eager"])
        assert r["gpu_us"] > 0, mode
        # mini copies a non-parameter input in every replay: the same buffer saves nothing
        assert r["new_input"]["launches"] == r["launches"], mode


@gpu
def test_on_a_gpu_the_copies_come_with_every_replay_at_every_size(cuda_lab):
    sweep, sizes = cuda_lab["mini"]["sweep"], cuda_lab["config"]["sweep"]
    assert sweep["default"]["launches"] == [1] * len(sizes)
    assert sweep["reduce-overhead"]["launches"] == [3] * len(sizes)  # copy in, replay, copy out


@gpu
@pytest.mark.parametrize("stream", ["alternating", "growing"])
def test_on_a_gpu_each_layout_warms_up_records_and_replays(cuda_lab, stream):
    check_recordings(cuda_lab, stream)


def check_recordings(results, stream):
    """Each reduce-overhead call of a GPU run's stream warmed up, recorded or replayed as the
    rule says, and compiled where the sizes say."""
    sizes = results["config"][stream]
    runs = results["mini"]["streams"][stream]["modes"]
    for mode in ("reduce-overhead", "reduce-overhead dynamic=False"):
        kinds = [call["kind"] for call in runs[mode]["calls"]]
        assert kinds == expected_cuda_kinds(sizes, mode), (mode, kinds)
        assert runs[mode]["recordings"] == kinds.count("recorded"), mode
        compiled = [call["compiled"] for call in runs[mode]["calls"]]
        assert compiled == expected_compiled_calls(sizes, mode), (mode, compiled)
        replays = [call["launches"] for call in runs[mode]["calls"] if call["kind"] == "replayed"]
        assert set(replays) <= {3}, (mode, replays)


# ---- the committed GPU set, read on any machine --------------------------------------------

COMMITTED_GPU_RUN = REPO / "figures" / "cuda" / "reduce_overhead.json"


@pytest.mark.parametrize("stream", ["alternating", "growing"])
def test_the_committed_gpu_run_follows_the_warm_up_record_replay_rule(stream):
    # figures/cuda/ comes from an H200 run: its stream panels must read as the rule says (an
    # earlier run compared dynamic=False calls with the automatic-dynamic baseline, and counted
    # compiles as recordings)
    results = json.loads(COMMITTED_GPU_RUN.read_text())
    assert results["device"] == "cuda" and results["cuda_graphs"] is True
    assert results["mini"]["modes"]["reduce-overhead"]["launches"] == 3
    check_recordings(results, stream)


def test_redraw_draws_a_saved_run_again_without_measuring(tmp_path):
    env = dict(os.environ, PYTHONPATH=PYTHON_DIR, MPLBACKEND="Agg")
    done = subprocess.run([sys.executable, str(LAB), "--redraw", str(COMMITTED_GPU_RUN),
                           "--out", str(tmp_path)], cwd=REPO, env=env, capture_output=True,
                          text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    saved = json.loads(COMMITTED_GPU_RUN.read_text())
    assert json.loads((tmp_path / "reduce_overhead.json").read_text()) == saved
    for name in ("reduce_overhead.png", "reduce_overhead_loses.svg"):
        assert (tmp_path / name).stat().st_size > 0, name
    # the table printed is the saved run's: its reduce-overhead row with its launches
    row = next(line for line in done.stdout.splitlines() if line.startswith("mini reduce-overhead"))
    assert row.split()[2] == str(saved["mini"]["modes"]["reduce-overhead"]["launches"])
    assert "launches a call" not in done.stdout  # the measuring's progress lines: none ran
