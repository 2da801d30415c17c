"""The cache-storm and fusion labs run (--quick) and their JSON states the facts they teach.

Each lab runs as its own process, with this interpreter, mini on PYTHONPATH and a fresh
MINI_CACHE_DIR, writing into tmp_path. The assertions are about counts (compiles, warnings,
kernels, bytes), never about timings.
"""
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

import mini
from conftest import CUDA_SKIP_REASON, HAS_CUDA

REPO = Path(__file__).resolve().parents[2]
LABS = REPO / "labs"
MINI_DIR = Path(mini.__file__).resolve().parents[1]  # the folder holding the mini package


def run_lab(script, out_dir, cache_dir, *extra):
    env = dict(os.environ)
    paths = [str(MINI_DIR)] + ([env["PYTHONPATH"]] if env.get("PYTHONPATH") else [])
    env["PYTHONPATH"] = os.pathsep.join(paths)
    env["MINI_CACHE_DIR"] = str(cache_dir)
    env.pop("MINI_LOGS", None)
    env["MPLBACKEND"] = "Agg"
    return subprocess.run([sys.executable, str(LABS / script), "--out", str(out_dir), *extra],
                          env=env, capture_output=True, text=True, timeout=600)


def run_quick(script, tmp_path, *extra):
    out_dir = tmp_path / "figures"
    done = run_lab(script, out_dir, tmp_path / "cache", "--quick", *extra)
    assert done.returncode == 0, f"{script} failed:\n{done.stdout}\n{done.stderr}"
    stem = Path(script).stem
    for suffix in (".png", ".svg", ".json"):
        path = out_dir / (stem + suffix)
        assert path.exists() and path.stat().st_size > 0, f"{script} did not write {path.name}"
    return json.loads((out_dir / f"{stem}.json").read_text()), done.stdout


@pytest.mark.skipif(HAS_CUDA, reason="a CUDA device is present")
def test_eager_anatomy_device_cuda_without_a_gpu_says_why(tmp_path):
    done = run_lab("eager_anatomy.py", tmp_path / "figures", tmp_path / "cache", "--quick",
                   "--device", "cuda")
    assert done.returncode == 1
    assert "--device cuda: no CUDA device (" in done.stderr
    assert not (tmp_path / "figures").exists()


@pytest.mark.skipif(HAS_CUDA, reason="a CUDA device is present")
def test_fusion_wins_device_cuda_without_a_gpu_skips_in_one_line(tmp_path):
    done = run_lab("fusion_wins.py", tmp_path / "figures", tmp_path / "cache", "--device", "cuda")
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == [done.stdout.strip()]  # one line
    assert done.stdout.startswith("fusion_wins: --device cuda: skipped: no CUDA device (")
    assert not (tmp_path / "figures").exists()


CUDA_FIGURES = ["fusion_wins_cuda_traffic", "fusion_wins_cuda_bandwidth",
                "fusion_wins_cuda_speedup"]


@pytest.mark.cuda
@pytest.mark.skipif(not HAS_CUDA, reason=CUDA_SKIP_REASON)
def test_fusion_wins_on_cuda(tmp_path):
    out_dir = tmp_path / "figures"
    done = run_lab("fusion_wins.py", out_dir, tmp_path / "cache", "--quick", "--device", "cuda",
                   "--no-torch")
    assert done.returncode == 0, f"{done.stdout}\n{done.stderr}"
    for name in [stem + suffix for stem in CUDA_FIGURES for suffix in (".png", ".svg")]:
        assert (out_dir / name).stat().st_size > 0, name
    result = json.loads((out_dir / "fusion_wins.json").read_text())
    assert result["device"] == "cuda" and result["copy_bandwidth"]["GBps"] > 0
    assert result["device_name"] and result["torch"] is None
    for program in result["programs"]:  # eager: one kernel per op, on the GPU as on the CPU
        name, compiled = program["name"], program["compiled"]
        assert program["eager"]["kernel_launches"] == program["ops"], name
        assert program["eager"]["bytes_moved"] >= program["minimum_bytes"], name
        assert compiled is not None, program.get("compile_error")
        assert compiled["matches_eager"], name
        assert compiled["kernel_launches"] == (2 if name == "ffn" else 1), name
        assert compiled["bytes_moved"] <= program["eager"]["bytes_moved"], name
        if program["kind"] == "chain":  # one fused pass: exactly the minimum
            assert compiled["bytes_moved"] == program["minimum_bytes"], name


@pytest.mark.cuda
@pytest.mark.skipif(not HAS_CUDA, reason=CUDA_SKIP_REASON)
def test_eager_anatomy_on_cuda(tmp_path):
    result, _ = run_quick("eager_anatomy.py", tmp_path, "--device", "cuda")
    n, bytes_per = result["n"], 4
    assert result["device"] == "cuda" and result["copy_ceiling"]["GBps"] > 0
    assert [s["kernel_launches"] for s in result["steps"]] == [1, 1, 1]
    # add reads x and bias and writes t1; mul and relu read one tensor and write one
    assert [s["bytes_moved"] for s in result["steps"]] == [3 * n * bytes_per, 2 * n * bytes_per,
                                                           2 * n * bytes_per]


# ---- cache storm ----------------------------------------------------------------------------


@pytest.fixture(scope="module")
def storm(tmp_path_factory):
    return run_quick("cache_storm.py", tmp_path_factory.mktemp("cache_storm"))


# The storm's counting part (mini.CompileCounter) checks torch's cache policy; its policies part
# the course kit's A6 ("yours" beside "recent" and "oldest").


def test_storm_compiles_stop_at_the_limit(storm):
    data, _ = storm
    limit = data["cache_size_limit"]
    compiles = data["compiles_after_each_call"]
    assert limit == 8
    assert len(compiles) > limit
    assert compiles == [min(call, limit) for call in range(1, len(compiles) + 1)]


def test_storm_recompile_reasons_name_the_size(storm):
    data, _ = storm
    reasons = data["recompile_reasons"]
    assert len(reasons) == data["cache_size_limit"] - 1  # one per recompile
    for k, reason in enumerate(reasons):
        assert reason.startswith(f"0/{k}:")
        assert "size mismatch at index 0" in reason


def test_storm_warning_once_at_the_first_call_past_the_limit(storm):
    data, _ = storm
    limit = data["cache_size_limit"]
    assert data["warning_calls"] == [limit + 1]
    warned = data["counting_storm"]["calls"][limit]
    (message,) = warned["limit_warnings"]
    assert f"mini hit config.cache_size_limit ({limit})" in message
    assert "last reason" in message and "size mismatch" in message


def test_storm_calls_past_the_limit_run_eagerly(storm):
    data, _ = storm
    limit = data["cache_size_limit"]
    for storm_run in data["inductor_storms"].values():
        calls = storm_run["calls"]
        assert [c["compiles"] for c in calls] == data["compiles_after_each_call"]  # as counted
        assert all(c["kernel_launches"] == 1 for c in calls[:limit])  # x * 2 + 1 fused
        assert all(c["kernel_launches"] == 2 for c in calls[limit:])  # eager mul, eager add
    for regimes in data["regimes"].values():
        assert regimes["cached compiled"]["kernel_launches"] == 1
        assert regimes["past the limit (eager)"]["kernel_launches"] == 2
        assert regimes["plain eager"]["kernel_launches"] == 2
        assert (regimes["past the limit (eager)"]["bytes_moved"]
                == regimes["plain eager"]["bytes_moved"])


def test_storm_matches_torch_record_when_present(storm):
    data, _ = storm
    if data["torch_2_11"] is None:
        pytest.skip("tests/conformance/expected_torch_2.11.jsonl is missing")
    assert data["compiles_after_each_call"] == data["torch_2_11"]["compiles_after_each_call"]


# The policies table: the course kit's A6 ("yours") beside torch's "recent" and "oldest".


@pytest.mark.a6
def test_storm_policies_table_has_your_policy_within_its_contract(storm):
    data, stdout = storm
    limit = data["cache_size_limit"]
    for name, stream in data["policies"].items():
        yours = stream["policies"]["yours"]
        assert "error" not in yours, f"stream {name}: {yours.get('error')}"
        assert yours["compiles"] <= 2 * limit, f"stream {name}: {yours['compiles']} compiles"
        assert yours["compiled_calls"] + yours["eager_calls"] == stream["calls"]
    assert "stream  policy   compiles evicted compiled eager checked" in stdout


def test_storm_policies_recent_and_oldest_as_documented(storm):
    # torch's policy and the compile-order one on the four streams: counts, the same on any machine
    data, _ = storm
    p = {name: s["policies"] for name, s in data["policies"].items()}
    for name in p:
        for policy in ("recent", "oldest"):
            assert p[name][policy]["compiles"] == min(data["policies"][name]["distinct_sizes"], 8)
    assert p["storm"]["recent"]["checked_per_call"] > p["storm"]["oldest"]["checked_per_call"]
    assert p["hot"]["oldest"]["checked_per_call"] < p["hot"]["recent"]["checked_per_call"]
    assert p["phases"]["recent"]["eager_calls"] == 40  # the third phase: 10 rounds of 4 sizes


def test_storm_stream_option_adds_a_stream_and_refuses_what_is_not_sizes(tmp_path):
    # --stream: the student's own workload in the policies table (A6's question 4)
    sys.path.insert(0, str(LABS))
    try:
        import cache_storm
    finally:
        sys.path.remove(str(LABS))
    assert cache_storm.parse_stream("2-4,9x3,5") == [2, 3, 4, 9, 9, 9, 5]
    for bad in ("2;rm -rf /", "0", "3-", "x2", ""):
        with pytest.raises(Exception, match="is not a size"):
            cache_storm.parse_stream(bad)
    done = run_lab("cache_storm.py", tmp_path / "figures", tmp_path / "cache", "--quick", "--stream", "2-4,2x5")
    assert done.returncode == 0, done.stderr
    extra = json.loads((tmp_path / "figures" / "cache_storm.json").read_text())["policies"]["extra"]
    assert extra["calls"] == 8 and extra["distinct_sizes"] == 3
    assert extra["policies"]["recent"]["compiles"] == 3 and extra["policies"]["oldest"]["eager_calls"] == 0


# ---- fusion ---------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def fusion(tmp_path_factory):
    data, stdout = run_quick("fusion_wins.py", tmp_path_factory.mktemp("fusion_wins"))
    return {p["name"]: p for p in data["programs"]}, data, stdout


def test_fusion_has_every_program(fusion):
    programs, _, _ = fusion
    for name in ("transform", "chain8", "softmax", "layernorm", "ffn"):
        assert name in programs
    lengths = sorted(p["ops"] for p in programs.values() if p["kind"] == "chain")
    assert lengths[0] == 1 and lengths[-1] == 12 and len(lengths) >= 3


def test_fusion_one_kernel_per_fusable_program(fusion):
    programs, _, _ = fusion
    for program in programs.values():
        if program["name"] == "ffn":
            continue
        compiled = program["compiled"]
        assert compiled["kernel_launches"] == 1, program["name"]
        assert compiled["generated_kernels"] == 1, program["name"]
        assert compiled["extern_kernels"] == 0, program["name"]


def test_fusion_ffn_is_one_generated_and_one_extern(fusion):
    programs, _, _ = fusion
    compiled = programs["ffn"]["compiled"]
    assert compiled["generated_kernels"] == 1
    assert compiled["extern_kernels"] == 1
    assert compiled["kernel_launches"] == 2


def test_fusion_eager_is_one_kernel_per_op(fusion):
    programs, _, _ = fusion
    expected_ops = {"transform": 3, "chain8": 8, "softmax": 5, "layernorm": 10, "ffn": 3}
    for name, program in programs.items():
        ops = expected_ops.get(name, program["ops"])
        if program["kind"] == "chain":
            assert name == f"pointwise{ops}"
        assert program["ops"] == ops
        assert program["graph_ops"] == ops, name
        assert program["eager"]["kernel_launches"] == ops, name


def test_fusion_compiled_moves_no_more_than_eager(fusion):
    programs, _, _ = fusion
    for name, program in programs.items():
        eager, compiled = program["eager"]["bytes_moved"], program["compiled"]["bytes_moved"]
        assert program["minimum_bytes"] <= compiled <= eager, name
        if program["ops"] > 1 and name != "ffn":
            assert compiled < eager, name  # intermediates no longer written and read back
    for program in programs.values():  # one fused pass: exactly the minimum
        if program["name"] in ("transform", "softmax", "layernorm") or program["kind"] == "chain":
            assert program["compiled"]["bytes_moved"] == program["minimum_bytes"]


def test_fusion_eager_bytes_grow_with_chain_length(fusion):
    programs, _, _ = fusion
    chains = sorted((p for p in programs.values() if p["kind"] == "chain"),
                    key=lambda p: p["ops"])
    eager_bytes = [p["eager"]["bytes_moved"] for p in chains]
    assert eager_bytes == sorted(eager_bytes) and eager_bytes[0] < eager_bytes[-1]
    assert len({p["compiled"]["bytes_moved"] for p in chains}) == 1  # flat when fused


def test_fusion_reports_copy_bandwidth_and_torch(fusion):
    _, data, stdout = fusion
    copy = data["copy_bandwidth"]
    assert copy["bytes_moved_metric"] == copy["bytes"]  # a clone reads and writes each byte once
    assert copy["GBps"] > 0
    if data["torch_2_11_h200"] is None:
        assert "missing" in stdout
    else:
        torch_programs = data["torch_2_11_h200"]["programs"]
        assert set(torch_programs) == {"transform", "chain8", "softmax", "layernorm", "ffn"}
        assert torch_programs["layernorm"]["eager_kernels"] == 10
        assert "torch speedup" in stdout


# ---- fusion on CUDA: the table and the figures, from made-up rows ---------------------------
# labs/fusion_wins_cuda.py draws and prints whatever rows it is given, so its reporting is
# checked here without a GPU; the numbers are made up, each different, so that a cell showing
# another row's value (or none) fails.


def made_up_side(kernels, bytes_moved, minimum, time_ms):
    return {"kernel_launches": kernels, "bytes_moved": bytes_moved, "time_ms": time_ms,
            "minimum_GBps": minimum / (time_ms * 1e-3) / 1e9,
            "moved_GBps": bytes_moved / (time_ms * 1e-3) / 1e9}


def made_up_cuda_row(name, kind, ops, index, with_torch, compiles=True):
    minimum = 3 * 8192 * 8192 * 4
    eager = made_up_side(ops, (2 * ops + 1) * 8192 * 8192 * 4, minimum, 0.411 * ops + index / 1000)
    row = {"name": name, "kind": kind, "shapes": [[8192, 8192], [8192, 8192]], "ops": ops,
           "minimum_bytes": minimum, "eager": eager}
    if compiles:
        compiled = made_up_side(1, minimum, minimum, 0.377 + index / 100)
        compiled.update(generated_kernels=1, extern_kernels=0, compile_seconds=0.1 * index,
                        matches_eager=True)
        row.update(compiled=compiled, speedup=eager["time_ms"] / compiled["time_ms"])
    else:
        row.update(compiled=None, compile_error=f"made-up refusal of {name}", speedup=None)
    if with_torch:
        torch_eager = made_up_side(ops, eager["bytes_moved"], minimum, 0.433 * ops + index / 1000)
        torch_compiled = made_up_side(1, minimum, minimum, 0.389 + index / 100)
        torch_compiled["compile_seconds"] = 2.0 + index
        row.update(torch_eager=torch_eager, torch_compiled=torch_compiled,
                   torch_speedup=torch_eager["time_ms"] / torch_compiled["time_ms"])
    return row


@pytest.mark.parametrize("with_torch", [True, False], ids=["with-torch", "mini-alone"])
def test_fusion_cuda_report_from_made_up_rows(with_torch, tmp_path):
    if str(LABS) not in sys.path:
        sys.path.insert(0, str(LABS))
    import fusion_wins_cuda

    rows = [made_up_cuda_row("transform", "named", 3, 0, with_torch)]
    rows += [made_up_cuda_row(f"pointwise{ops}", "chain", ops, index + 1, with_torch)
             for index, ops in enumerate([1, 2, 4, 8])]
    rows.append(made_up_cuda_row("pointwise12", "chain", 12, 5, with_torch, compiles=False))
    copy = {"numel": 2**28, "bytes": 2 * 2**28 * 4, "time_ms": 0.5, "GBps": 4294.97}
    about = {"device_name": "Made-up GPU 141GB", "date": "2026-12-01T12:00:00",
             "command": "python labs/fusion_wins.py --device cuda --out DIR"}

    table = fusion_wins_cuda.cuda_table(rows, copy)
    lines = table.splitlines()
    for row in rows:
        (line,) = [line for line in lines if line.startswith(row["name"] + " ")][:1]
        assert f"{row['eager']['time_ms']:.3f}" in line, line
        assert f" {row['eager']['kernel_launches']} " in line, line
        if row["compiled"]:
            assert f"{row['compiled']['time_ms']:.3f}" in line, line
            assert f"{row['speedup']:.2f}x" in line, line
            assert f"{row['compiled']['minimum_GBps']:.0f}" in line, line
        else:
            assert f"{row['name']}: not compiled: {row['compile_error']}" in table
    assert "4295 GB/s" in table  # the copy ceiling
    torch_lines = [line for line in lines if line.startswith("torch eager vs torch.compile")]
    assert bool(torch_lines) == with_torch
    if with_torch:
        torch_part = table[table.index(torch_lines[0]):]
        for row in rows:
            assert f"{row['torch_eager']['time_ms']:.3f}" in torch_part, row["name"]
            assert f"{row['torch_compiled']['time_ms']:.3f}" in torch_part, row["name"]
            assert f"{row['torch_speedup']:.2f}x" in torch_part, row["name"]

    out_dir = tmp_path / "figures"
    out_dir.mkdir()
    import matplotlib
    with matplotlib.rc_context({"svg.fonttype": "none"}):  # SVG text as text, to be read back
        paths = fusion_wins_cuda.plot_cuda(rows, copy, about, out_dir)
    expected = {out_dir / (stem + suffix) for stem in CUDA_FIGURES for suffix in (".png", ".svg")}
    assert set(paths) == expected
    for path in expected:
        assert path.stat().st_size > 0, path.name
    for stem in CUDA_FIGURES:  # every figure names the device, the date and the command
        svg = (out_dir / f"{stem}.svg").read_text()
        for fact in about.values():
            assert fact in svg, (stem, fact)
