"""labs/anatomy.py run with --quick, in a subprocess with this interpreter, into a temporary
folder. The tests check what its reports, its JSON and its MINI_COMPILE_DEBUG folder hold --
every stage's section, the captured graph of relu(x @ w + b), its guards, the training step's
joint, forward and backward graphs, the fusion decisions and their reasons, the generated C++
and CUDA -- never its timings (they move on a busy machine)."""
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
LAB = REPO / "labs" / "anatomy.py"
PYTHON_DIR = os.environ.get("MINI_PYTHON_DIR", str(REPO / "build" / "python"))
sys.path.insert(0, str(REPO / "labs"))
import anatomy  # noqa: E402  (its SECTIONS and SIZES: the names and sizes the reports use)

QUICK = anatomy.SIZES["quick"]


def run_lab(out_dir, *flags):
    env = dict(os.environ, PYTHONPATH=PYTHON_DIR, MPLBACKEND="Agg")
    env.pop("MINI_LOGS", None)
    env.pop("MINI_COMPILE_DEBUG", None)
    command = [sys.executable, str(LAB), "--quick", "--out", str(out_dir), *flags]
    done = subprocess.run(command, cwd=REPO, env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, (f"anatomy.py failed\nstdout:\n{done.stdout[-3000:]}\n"
                                  f"stderr:\n{done.stderr[-3000:]}")
    return done


@pytest.fixture(scope="module")
def lab(tmp_path_factory):
    out_dir = tmp_path_factory.mktemp("anatomy")
    done = run_lab(out_dir)
    reports = {name: (out_dir / file).read_text() for name, file in anatomy.REPORTS.items()}
    return out_dir, done.stdout, reports, json.loads((out_dir / "anatomy.json").read_text())


def test_every_report_has_a_section_per_stage_in_order(lab):
    _, stdout, reports, results = lab
    assert results["sections"] == [name for name, _ in anatomy.SECTIONS]
    for program, report in reports.items():
        positions = [report.find(f"== {n}. {name}: ") for n, (name, _) in enumerate(anatomy.SECTIONS, 1)]
        assert -1 not in positions and positions == sorted(positions), (program, positions)
        assert report in stdout  # printed as well as written
    assert set(results["programs"]) == {"inference", "training"}


def test_the_bytecode_and_the_captured_graph_of_relu_linear(lab):
    _, _, reports, results = lab
    report = reports["inference"]
    # the bytecode (3.13 reads x and w with one LOAD_FAST_LOAD_FAST)
    assert re.search(r"BINARY_OP +@", report) and re.search(r"LOAD_FAST\w* +x\b", report)
    facts = results["programs"]["inference"]
    assert facts["graph_ops"] == {"matmul": 1, "add": 1, "relu": 1}
    assert facts["graph_count"] == 1 and facts["graph_break_count"] == 0 and facts["break_reasons"] == []
    assert "mini.matmul(l_x_, l_w_)" in report and "mini.relu(add)" in report
    assert facts["max_abs_diff_vs_eager"] < 1e-5


def test_the_guards_check_the_sizes_and_dtypes_of_x_and_w(lab):
    _, _, reports, results = lab
    report = reports["inference"]
    for name, size in (("x", [QUICK["rows"], QUICK["inner"]]), ("w", [QUICK["inner"], QUICK["cols"]])):
        assert (f"TENSOR_MATCH: check_tensor(L['{name}'], mini._C.Tensor, mini.float32, device=cpu, "
                f"requires_grad=False, size={size}") in report, name
    facts = results["programs"]["inference"]
    assert facts["guard_kinds"]["TENSOR_MATCH"] == 3 and facts["guard_count"] >= 3
    # the training step guards its parameters, which require grad
    assert "Parameter, mini.float32, device=cpu, requires_grad=True" in reports["training"]


def test_the_training_step_has_a_joint_graph_partitioned_into_forward_and_backward(lab):
    out_dir, _, reports, results = lab
    facts = results["programs"]["training"]
    assert set(facts["aot"]) >= {"joint", "forward", "backward", "saved_for_backward"}
    assert facts["aot"]["joint"]["matmul"] == 2 + 3  # two forward matmuls, three in the backward
    assert facts["aot"]["backward"]["matmul"] == 3 and facts["aot"]["forward"]["matmul"] == 2
    assert facts["aot"]["saved_for_backward"]
    for part in ("joint", "forward", "backward"):
        assert f"-- aot_{part}_graph.txt" in reports["training"], part
    folder = out_dir / "anatomy_debug" / "training" / "__compiled_fn_1"
    assert "tangents_1" in (folder / "aot_backward_graph.txt").read_text()
    assert "tangents_1" in (folder / "aot_joint_graph.txt").read_text()
    # loss.backward() is a graph break, as in torch.compile, and the bytecode shows where
    assert facts["break_reasons"] == ["Tensor.backward() is not supported by mini's capture"]
    assert len(facts["breaks"]) == 1 and "Tensor.backward()" in facts["breaks"][0]
    assert facts["graph_break_count"] == 0  # explain counts graphs - 1, as torch; no graph follows
    assert "<-- graph break: Tensor.backward()" in reports["training"]
    assert "none: no input of this graph requires grad" in reports["inference"]
    assert facts["max_abs_diff_vs_eager"] < 1e-5


def test_fusion_groups_and_the_reason_for_each_decision(lab):
    _, _, reports, results = lab
    inference = results["programs"]["inference"]["fusion"]["graph"]
    assert list(inference["kernels"]) == ["cpp_poi_fused_add_relu_0"]
    assert inference["kernels"]["cpp_poi_fused_add_relu_0"] == ["add", "relu"]
    assert any(d.startswith("fuse relu (relu) into cpp_poi_fused_add_relu_0: same iteration space")
               for d in inference["decisions"])
    assert "matmul: extern calls" in reports["inference"]
    training = results["programs"]["training"]["fusion"]
    assert set(training) == {"forward", "backward"}
    decisions = training["forward"]["decisions"] + training["backward"]["decisions"]
    refusals = [d for d in decisions if d.startswith(("cannot fuse", "close "))]
    assert refusals and all(": " in d for d in refusals)  # each refusal says why
    assert training["backward"]["not_fused"] == len([d for d in training["backward"]["decisions"]
                                                     if d.startswith(("cannot fuse", "close "))])


def test_the_generated_cpp_and_cuda_hold_the_kernel(lab):
    out_dir, _, reports, results = lab
    folder = out_dir / "anatomy_debug" / "inference" / "__compiled_fn_1"
    cpp = (folder / "output_code.cpp").read_text()
    assert 'extern "C" void cpp_poi_fused_add_relu_0(' in cpp
    assert 'extern "C" void cpp_poi_fused_add_relu_0(' in reports["inference"]
    # the file holds the whole source; the report leaves the prelude out
    assert "float exp_f32(float x)" in cpp and "float exp_f32(float x)" not in reports["inference"]
    code = results["programs"]["inference"]["generated_code"]
    assert code["cpp"]["output_code.cpp"]["lines"] > code["cpp"]["output_code.cpp"]["prelude_lines"] > 0
    cuda = results["programs"]["inference"]["cuda"]
    if not cuda["rendered"]:  # a build without NVRTC: the report says why instead
        assert "-- CUDA: not rendered here: " + cuda["reason"] in reports["inference"]
        return
    source = (folder / "output_code.cu").read_text()
    # on the GPU the bias add goes into the GEMM's epilogue (cuBLASLt's): the kernel is relu alone
    assert 'extern "C" __global__' in source and "cuda_poi_fused_relu_0(" in source
    assert "cuda_poi_fused_relu_0(" in reports["inference"]
    assert cuda["kernels"] == {"graph": ["cuda_poi_fused_relu_0"]}
    training = out_dir / "anatomy_debug" / "training" / "__compiled_fn_1"
    for half in ("forward", "backward"):
        assert 'extern "C" __global__' in (training / f"output_code_{half}.cu").read_text(), half


def test_the_debug_folder_holds_every_artifact(lab):
    out_dir, _, _, results = lab
    debug = out_dir / "anatomy_debug"
    inference = {"graph_code.txt", "guards.txt", "fusion.txt", "output_code.cpp"}
    assert inference <= {p.name for p in (debug / "inference" / "__compiled_fn_1").iterdir()}
    training = {"graph_code.txt", "guards.txt", "aot_joint_graph.txt", "aot_forward_graph.txt",
                "aot_backward_graph.txt", "fusion_forward.txt", "fusion_backward.txt",
                "output_code_forward.cpp", "output_code_backward.cpp"}
    assert training <= {p.name for p in (debug / "training" / "__compiled_fn_1").iterdir()}
    assert (debug / "training" / "graph_breaks" / "break_1.txt").exists()
    for name in ("anatomy.json", "anatomy.png", "anatomy.svg"):
        assert (out_dir / name).stat().st_size > 0, name
    times = results["programs"]["training"]["times"]  # reported, not checked
    assert set(times) >= {"first_call_ms", "first_call_disk_cache_ms", "cached_call_us", "eager_call_us"}


def test_device_cuda_without_a_gpu_says_why_and_still_writes_the_report(tmp_path):
    done = run_lab(tmp_path, "--device", "cuda")
    results = json.loads((tmp_path / "anatomy.json").read_text())
    if results["ran_on"] == "cuda":  # a GPU: relu(x @ w + b)'s CUDA kernels ran on it
        gpu = results["programs"]["inference"]["cuda"]["gpu"]
        assert "error" not in gpu and gpu["max_abs_diff_vs_cpu"] < 1e-4, gpu
        return
    (line,) = [line for line in done.stdout.splitlines() if line.startswith("anatomy: --device cuda:")]
    assert "no CUDA device" in line
    assert all((tmp_path / file).exists() for file in anatomy.REPORTS.values())
