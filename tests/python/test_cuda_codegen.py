"""CUDA code generation (issue 13): the CUDA renderer over the same loop IR as the C++ one.

Without a GPU (the "null device", as CI runs it) every graph is rendered and compiled by NVRTC
to SASS for sm_90: golden .cu files of the Inductor anchors (tests/golden/*.cu, reviewed as
diffs), and the graphs of the differential fuzzer's first functions. With a GPU the same graphs
run, and their results are compared with eager mini on the CPU, element by element, with the
fuzzer's tolerances.

    MINI_UPDATE_GOLDEN=1 PYTHONPATH=build/python .venv/bin/python -m pytest tests/python/test_cuda_codegen.py
"""
import os
import re
import sys
from pathlib import Path

import numpy as np
import pytest

import mini
import mini.inductor as inductor
import mini.nn.functional as F
from conftest import CUDA_SKIP_REASON, HAS_CUDA, cuda_like, requires_no_cuda, to_np

REPO = Path(__file__).resolve().parents[2]
GOLDEN = REPO / "tests" / "golden"
sys.path.insert(0, str(REPO / "labs"))
sys.path.insert(0, str(Path(__file__).resolve().parent))
from programs import chain8, ffn_out, layernorm_decomp, softmax_decomp, transform  # noqa: E402
import test_inductor_fuzz as fuzz  # noqa: E402

pytestmark = [
    pytest.mark.usefixtures("own_cache_dir"),
    pytest.mark.skipif(inductor.nvrtc_version() is None,
                       reason="this build has no CUDA toolkit (NVRTC): " + mini._C._nvrtc_unavailable_reason()),
]


def captured(fn, *args, dynamic=None):
    """The one graph mini.compile captures from fn(*args), and the inputs it was called with."""
    graphs = []

    def backend(gm, example_inputs):
        graphs.append((gm, list(example_inputs)))
        return gm.forward

    mini.reset()
    mini.compile(fn, backend=backend, fullgraph=True, dynamic=dynamic)(*args)
    assert len(graphs) == 1
    return graphs[0]


def graph_of(fn, *args, dynamic=None):
    return captured(fn, *args, dynamic=dynamic)[0]


def assert_same(got, want, what):
    """A CUDA result against the graph run eagerly on the CPU: floats within 1e-4 relative (plus
    1e-4 of the largest magnitude: sums add in another order), bfloat16 within 2 of its ulps
    (2^-7: each op rounds, and exp, sums and divisions may round the other way), everything
    else exactly."""
    assert got.is_cuda and got.dtype == want.dtype, what
    g, w = to_np(got.detach().cpu()), to_np(want.detach())
    assert g.shape == w.shape and g.dtype == w.dtype, f"{what}: {g.dtype}{g.shape} != {w.dtype}{w.shape}"
    if np.issubdtype(w.dtype, np.floating):
        tol = 2 ** -7 if want.dtype == mini.bfloat16 else 1e-4
        scale = float(np.nanmax(np.abs(w[np.isfinite(w)]))) if np.isfinite(w).any() else 1.0
        np.testing.assert_allclose(g, w, rtol=tol, atol=tol * max(scale, 1.0), err_msg=what)
    else:
        np.testing.assert_array_equal(g, w, err_msg=what)


ANCHORS = {
    "transform": (transform, lambda: (mini.randn(64, 64), mini.randn(64))),
    "chain8": (chain8, lambda: (mini.randn(256, 256), mini.randn(256, 256))),
    "softmax_decomp": (softmax_decomp, lambda: (mini.randn(64, 1000),)),
    "layernorm_decomp": (layernorm_decomp, lambda: (mini.randn(64, 512), mini.randn(512), mini.randn(512))),
}


def run_and_compare(fn, args, what):
    """fn's graph compiled for CUDA and run on the GPU, against the graph run eagerly on the CPU."""
    gm, inputs = captured(fn, *args)
    got = inductor.compile_graph_cuda(gm)["run"](*[cuda_like(x) for x in inputs])
    want = gm.forward(*inputs)
    want = want if isinstance(want, (tuple, list)) else (want,)
    assert len(got) == len(want)
    for i, (g, w) in enumerate(zip(got, want)):
        assert_same(g, w, f"{what} output {i}")


# bfloat16 (the article's dtype on the GPU): stored as 16 bits, each op computed in float and
# rounded when stored, as eager; accumulators in float
def bf16(*shape):
    return mini.randn(*shape).to(mini.bfloat16)


BF16 = {
    "transform": (transform, lambda: (bf16(64, 64), bf16(64))),
    "softmax_decomp": (softmax_decomp, lambda: (bf16(64, 1000),)),
    "layernorm_decomp": (layernorm_decomp, lambda: (bf16(64, 512), bf16(512), bf16(512))),
    "ffn_out": (ffn_out, lambda: (bf16(8, 256), bf16(256, 256), bf16(256))),  # matmul: cuBLAS
}


@pytest.mark.parametrize("name", list(BF16))
def test_bfloat16_graphs_compile_with_nvrtc(name):
    fn, make = BF16[name]
    info = inductor.compile_graph_cuda(graph_of(fn, *make()), arch="sm_90")
    assert info["cubin_bytes"] > 0 and "const mini::bf16* __restrict__ in0" in info["source"]


@pytest.mark.cuda
@pytest.mark.skipif(not HAS_CUDA, reason=CUDA_SKIP_REASON)
@pytest.mark.parametrize("name", list(BF16))
def test_bfloat16_graphs_run_on_the_gpu_as_eager(name):
    fn, make = BF16[name]
    run_and_compare(fn, make(), f"{name} (bfloat16)")


@pytest.mark.parametrize("name", list(ANCHORS))
def test_anchor_source_matches_its_golden_file_and_compiles(name):
    fn, make = ANCHORS[name]
    info = inductor.compile_graph_cuda(graph_of(fn, *make()), arch="sm_90")
    assert info["kernels"] and all(k.startswith("cuda_") for k in info["kernels"]), info["kernels"]
    assert info["cubin_bytes"] > 0 and info["arch"] == "sm_90"
    source = info["source"]  # the prelude left out: it is the same text in every source
    begin = source.index("// ---- prelude:")
    end = source.index("// ---- end of prelude ----") + len("// ---- end of prelude ----")
    got = re.sub(r"File: \S*?/labs/", "File: <repo>/labs/", source[:begin] + "// (prelude)" + source[end:])
    path = GOLDEN / f"{name}.cu"
    if os.environ.get("MINI_UPDATE_GOLDEN"):
        path.write_text(got)
    assert path.exists(), f"no golden file {path}: run with MINI_UPDATE_GOLDEN=1 and review it"
    assert got == path.read_text(), (f"the generated CUDA source of {name} changed; if that is intended, "
                                     "rerun with MINI_UPDATE_GOLDEN=1 and review `git diff tests/golden`")


def test_kernels_are_named_by_the_renderer():
    gm = graph_of(transform, mini.randn(64, 64), mini.randn(64))
    cuda = inductor.compile_graph_cuda(gm, arch="sm_90")
    cpp = mini._C._inductor_compile(gm)
    assert cuda["kernels"] == ["cuda_poi_fused_add_mul_relu_0"]
    assert cpp["kernels"] == ["cpp_poi_fused_add_mul_relu_0"]  # the same group, the other target
    assert 'extern "C" __global__ void __launch_bounds__(256) cuda_poi_fused_add_mul_relu_0(' in cuda["source"]


# 250 of the fuzzer's random programs (25 functions of 10), over every op the generator knows (pointwise,
# reductions over any dims, views, casts, matmul as an extern call), some with symbolic sizes.
FUZZ_FUNCTIONS = int(os.environ.get("MINI_CUDA_FUZZ_FUNCTIONS", "25"))


def fuzz_case(index, allow_dynamic=True):
    seed = 7_000_003 + index
    dynamic = True if allow_dynamic and index % 4 == 3 else None
    inputs, exprs = fuzz.generate(seed, 10, dynamic=bool(dynamic))
    prog = fuzz.Program(inputs, exprs, f"cuda_fuzz_{index}")
    return prog, dynamic


@pytest.mark.parametrize("index", range(FUZZ_FUNCTIONS))
def test_fuzzer_graphs_compile_with_nvrtc(index):
    prog, dynamic = fuzz_case(index)
    gm = graph_of(prog.function(), *prog.args(), dynamic=dynamic)
    try:
        info = inductor.compile_graph_cuda(gm, arch="sm_90")
    except RuntimeError as e:
        # a size known only at run time (a nonzero's length): mini.compile runs such a
        # graph eagerly; compiled directly it is refused, saying so
        assert "known only at run time" in str(e), e
        return
    assert info["cubin_bytes"] > 0 or not info["kernels"]


@pytest.mark.cuda
@pytest.mark.skipif(not HAS_CUDA, reason=CUDA_SKIP_REASON)
@pytest.mark.parametrize("name", list(ANCHORS))
def test_anchor_runs_on_the_gpu_as_eager(name):
    fn, make = ANCHORS[name]
    run_and_compare(fn, make(), name)


@pytest.mark.cuda
@pytest.mark.skipif(not HAS_CUDA, reason=CUDA_SKIP_REASON)
@pytest.mark.parametrize("index", range(FUZZ_FUNCTIONS))
def test_fuzzer_graphs_run_on_the_gpu_as_eager(index):
    # static sizes: with dynamic=True a graph may have a size known only at run
    # time, and such graphs are refused by code generation (mini.compile runs them eagerly)
    prog, dynamic = fuzz_case(index, allow_dynamic=False)
    gm, inputs = captured(prog.function(), *prog.args(), dynamic=dynamic)
    want = gm.forward(*inputs)  # the same graph, eagerly on the CPU
    info = inductor.compile_graph_cuda(gm)
    try:
        got = info["run"](*[cuda_like(x) for x in inputs])
    except RuntimeError as e:
        # an extern call eager CUDA refuses (int64 matmul: cuBLAS has none) is refused the same
        # way compiled; nothing to compare
        if "matmul on CUDA is implemented for" not in str(e):
            raise
        pytest.skip(f"the graph holds a call eager CUDA refuses: {e}")
    assert len(got) == len(want)
    for i, (g, w) in enumerate(zip(got, want)):
        assert_same(g, w, f"output {i} of\n{prog.source()}")


# ---- the numbered kernel layouts (MINI_CODEGEN_LAYOUT, codegen/cuda_launch.h) ----------------

LAYOUTS = range(1, inductor.cuda_layouts() + 1)
# short rows, rows that do not divide into vectors, a row longer than a persistent block keeps,
# a reduction over the outer dim, strided and broadcast loads
LAYOUT_CASES = {
    **ANCHORS,
    "odd_rows": (softmax_decomp, lambda: (mini.randn(7, 13),)),
    "long_rows": (layernorm_decomp, lambda: (mini.randn(4, 40000), mini.randn(40000), mini.randn(40000))),
    "column_sum": (lambda x: (x * 2).sum(0), lambda: (mini.randn(300, 70),)),
    # few columns, many rows: the rows shared among blocks in y (layer norm's weight and bias
    # gradients, with the full-size value the kernel stores too), and a column mean that a
    # later full value reads (not split: every block needs all of it)
    "column_split": (lambda g, x: ((g * x).sum((0, 1)), g.mean((0, 1)), (g + x) * 2, g.amax((0, 1))),
                     lambda: (mini.randn(8, 300, 96), mini.randn(8, 300, 96))),
    "column_split_bf16": (lambda g: (g.float().sum(0), g.sum(0)), lambda: (bf16(3000, 40),)),
    "columns_then_rows": (lambda x: x - x.mean(0, keepdim=True), lambda: (mini.randn(2000, 70),)),
    # vector columns (layouts 2 and up): gelu's backward with the MLP bias gradient in bfloat16
    # (8 columns a thread, a bias read per column, the full gradient stored as vectors); float32
    # layer norm weight gradients with a transposed load (per element) and a row value
    "vector_columns_bf16": (lambda g, h, b: (lambda t: (t, t.float().sum((0, 1))))(g * F.gelu(h + b)),
                            lambda: (bf16(4, 96, 512), bf16(4, 96, 512), bf16(512))),
    "vector_columns_f32": (lambda g, x, xt, m: ((g * (x - m)).sum(0), (g + xt.t()).amax(0), g.mean(0), g * x),
                           lambda: (mini.randn(600, 256), mini.randn(600, 256), mini.randn(256, 600),
                                    mini.randn(600, 1))),
    "strided": (lambda x, b: (x.t() + b).relu(), lambda: (mini.randn(33, 65), mini.randn(33))),
    "bf16_rows": (softmax_decomp, lambda: (bf16(16, 1000),)),
    # full reductions in two stages (layouts 2 and up): many blocks, the last one folds
    "full": (lambda x: ((x * 2).sum(), x.abs().amax(), x.mean(), (x > 0).sum(), x.long().sum()),
             lambda: (mini.randn(1024, 1030),)),
    "full_small": (lambda x: (x.sum(), x.amin()), lambda: (mini.randn(5, 3),)),
    # an exp three passes read (lean rows, layout 5: computed in the first, kept for two more)
    "three_passes": (lambda x: (x.exp() / x.exp().sum(-1, keepdim=True)) - (x.exp() * 2).amax(-1, keepdim=True),
                     lambda: (mini.randn(24, 700),)),
}


@pytest.fixture
def layout(request, monkeypatch):
    monkeypatch.setenv("MINI_CODEGEN_LAYOUT", str(request.param))
    return request.param


@pytest.mark.parametrize("layout", LAYOUTS, indirect=True)
def test_every_layout_compiles_with_nvrtc(layout):
    for name, (fn, make) in LAYOUT_CASES.items():
        info = inductor.compile_graph_cuda(graph_of(fn, *make()), arch="sm_90")
        assert info["cubin_bytes"] > 0, name
        assert ("Kernel layout %d" % layout in info["source"]) == (layout != inductor.default_cuda_layout()), name


@pytest.mark.cuda
@pytest.mark.skipif(not HAS_CUDA, reason=CUDA_SKIP_REASON)
@pytest.mark.parametrize("layout", LAYOUTS, indirect=True)
def test_every_layout_runs_as_eager(layout):
    for name, (fn, make) in LAYOUT_CASES.items():
        run_and_compare(fn, make(), f"layout {layout}: {name}")
    for index in range(0, FUZZ_FUNCTIONS, 3):
        prog, dynamic = fuzz_case(index, allow_dynamic=False)
        gm, inputs = captured(prog.function(), *prog.args(), dynamic=dynamic)
        want = gm.forward(*inputs)
        try:
            got = inductor.compile_graph_cuda(gm)["run"](*[cuda_like(x) for x in inputs])
        except RuntimeError as e:
            if "matmul on CUDA is implemented for" in str(e):
                continue
            raise
        for i, (g, w) in enumerate(zip(got, want)):
            assert_same(g, w, f"layout {layout}: output {i} of\n{prog.source()}")


def test_an_unknown_layout_is_refused_by_name(monkeypatch):
    monkeypatch.setenv("MINI_CODEGEN_LAYOUT", str(inductor.cuda_layouts() + 1))
    with pytest.raises(RuntimeError, match="layouts are 1 .naive. to %d" % inductor.cuda_layouts()):
        inductor.compile_graph_cuda(graph_of(transform, mini.randn(8, 8), mini.randn(8)), arch="sm_90")


def kernel_of(source):
    return source[source.index('extern "C"'):]


ELEMENT_LOOP = "i < numel;\n"  # the pointwise kernel's loop of one element a thread


def test_pointwise_kernels_loop_element_by_element_only_over_a_remainder():
    # every pointer is aligned (the runtime copies a misaligned input), so a kernel whose
    # element count is a static multiple of its vector has no element loop: no second copy of
    # the expressions for NVRTC to compile; 7 x 5 = 35 floats leave 3, and a dynamic size may
    def source(*shape, dynamic=None):
        gm = graph_of(chain8, mini.randn(*shape), mini.randn(*shape), dynamic=dynamic)
        return kernel_of(inductor.compile_graph_cuda(gm, arch="sm_90")["source"])

    whole = source(256, 256)
    assert "constexpr int V = 4;" in whole and ELEMENT_LOOP not in whole and "mini::aligned" not in whole
    assert whole.count("mini::sin_of<float>(") == 1  # the lanes' loop is the only copy of the expressions
    assert ELEMENT_LOOP in source(7, 5) and source(7, 5).count("mini::sin_of<float>(") == 2
    assert ELEMENT_LOOP in source(8, 64, dynamic=True)


@pytest.mark.cuda
@pytest.mark.skipif(not HAS_CUDA, reason=CUDA_SKIP_REASON)
@pytest.mark.parametrize("layout", LAYOUTS, indirect=True)
@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_pointwise_kernels_read_views_at_odd_offsets_as_eager(layout, dtype):
    # a view that starts 1, 2 or 3 elements into its storage is not 16-byte aligned: the
    # runtime hands the kernel an aligned copy, and the view itself is left as it was
    dt = getattr(mini, dtype)
    x, y = mini.randn(64, 96).to(dt), mini.randn(64, 96).to(dt)
    gm, inputs = captured(chain8, x, y)
    want = gm.forward(*inputs)[0]
    run = inductor.compile_graph_cuda(gm)["run"]
    for offset in (0, 1, 2, 3):
        views = []
        for t in (x, y):
            v = mini.empty(t.numel() + offset, dtype=dt, device="cuda").as_strided(tuple(t.shape), t.stride(), offset)
            v.copy_(t.cuda())
            views.append(v)
        got = run(*views)[0]
        assert_same(got, want, f"layout {layout}, {dtype}, offset {offset}")
        assert np.array_equal(to_np(views[0].cpu()), to_np(x)) and np.array_equal(to_np(views[1].cpu()), to_np(y))


def test_lean_rows_compute_exp_once_and_hold_only_what_two_passes_read(monkeypatch):
    # layouts 5 and 6 against layout 3 on the same graphs: softmax's exp is computed in one pass and
    # kept in registers (layout 3 computes it in two); layer norm's weight and bias, read by the
    # last pass only, are not held in registers across the block reductions; 32-bit indices
    sources = {}
    for number in (3, 5, 6):
        monkeypatch.setenv("MINI_CODEGEN_LAYOUT", str(number))
        soft = inductor.compile_graph_cuda(graph_of(softmax_decomp, mini.randn(64, 1024)), arch="sm_90")["source"]
        norm = inductor.compile_graph_cuda(
            graph_of(layernorm_decomp, mini.randn(64, 1024), mini.randn(1024), mini.randn(1024)), arch="sm_90")["source"]
        sources[number] = (kernel_of(soft), kernel_of(norm))
    (soft3, norm3), (soft5, norm5), (soft6, _) = sources[3], sources[5], sources[6]
    assert soft3.count("::exp(") == 2 and soft5.count("::exp(") == 1
    assert re.search(r"float s\d+\[\d+\];", soft5) and not re.search(r"float s\d+\[", soft3)
    assert len(re.findall(r"float k\d+\[", norm3)) == 3 and len(re.findall(r"float k\d+\[", norm5)) == 1
    assert "const int j" in soft5 and "const int64_t j" in soft3
    # 1024 elements: 64 threads of 16 (64 registers at most), or 128 of 8 (layout 6: 32)
    assert "__launch_bounds__(64, 16)" in soft5 and "__launch_bounds__(64)" in norm3
    assert "__launch_bounds__(128, 16)" in soft6 and soft6.count("::exp(") == 1


@requires_no_cuda
def test_running_without_a_gpu_says_why():
    args = (mini.randn(8, 8), mini.randn(8))
    info = inductor.compile_graph_cuda(graph_of(transform, *args))
    with pytest.raises(RuntimeError, match="CUDA"):
        info["run"](*args)


def test_the_benchmark_compiles_every_program_on_the_null_device(tmp_path):
    """labs/bench/bench_cuda_inductor.py --null-device: what the GPU run will time, compiled here."""
    import json
    import subprocess
    pkg = os.path.dirname(os.path.dirname(mini.__file__))
    r = subprocess.run([sys.executable, str(REPO / "labs" / "bench" / "bench_cuda_inductor.py"), "--null-device",
                        "--quick", "--out", str(tmp_path)], capture_output=True, text=True, timeout=300,
                       env=dict(os.environ, PYTHONPATH=pkg, MINI_CACHE_DIR=str(tmp_path / "cache")))
    assert r.returncode == 0, r.stdout + r.stderr
    report = json.loads((tmp_path / "bench_cuda_inductor.json").read_text())
    assert len(report["rows"]) == 6
    for row in report["rows"]:
        assert "compile_error" not in row, row
        assert row["kernels"] and all(k.startswith("cuda_") for k in row["kernels"]), row
        assert row["cubin_bytes"] > 0 and 0 < row["warm_s"] < row["cold_s"], row


# ---- training graphs: the joint graph's two halves (AOTAutograd's forward and backward) -------
def mlp_loss(x, w1, b1, w2):
    h = mini.relu(x @ w1 + b1)
    return (h @ w2).softmax(-1).sum()


def norm_loss(x, w, b):
    return (layernorm_decomp(x, w, b) * chain8(x, x)).mean()


TRAINING = {
    "mlp_softmax": (mlp_loss, lambda: (mini.randn(8, 16), mini.randn(16, 32, requires_grad=True),
                                       mini.randn(32, requires_grad=True), mini.randn(32, 10, requires_grad=True))),
    "layernorm_chain8": (norm_loss, lambda: (mini.randn(16, 64, requires_grad=True),
                                             mini.randn(64, requires_grad=True), mini.randn(64, requires_grad=True))),
}


@pytest.mark.parametrize("name", list(TRAINING))
def test_training_graphs_compile_forward_and_backward_with_nvrtc(name):
    fn, make = TRAINING[name]
    info = mini._C._inductor_compile_training_cuda(graph_of(fn, *make()), "sm_90")
    assert info["forward_kernels"] and info["backward_kernels"], info
    assert all(k.startswith("cuda_") for k in info["forward_kernels"] + info["backward_kernels"])


@pytest.mark.cuda
@pytest.mark.skipif(not HAS_CUDA, reason=CUDA_SKIP_REASON)
@pytest.mark.parametrize("name", list(TRAINING))
def test_training_graphs_run_on_the_gpu_with_eager_gradients(name):
    fn, make = TRAINING[name]
    args = make()
    gm, inputs = captured(fn, *args)
    info = mini._C._inductor_compile_training_cuda(gm, "")

    def leaf(x, device):
        y = x.detach().clone()
        y = y.cuda() if device == "cuda" else y
        return y.requires_grad_() if x.requires_grad else y

    cpu = [leaf(x, "cpu") for x in inputs]
    gpu = [leaf(x, "cuda") for x in inputs]
    want = gm.forward(*cpu)
    got = info["run"](*gpu)
    want = want if isinstance(want, (tuple, list)) else (want,)
    assert_same(got[0], want[0], f"{name} loss")
    got[0].backward()
    want[0].backward()
    for i, (g, c) in enumerate(zip(gpu, cpu)):
        if c.requires_grad:
            assert_same(g.grad, c.grad, f"{name} gradient of input {i}")


def test_layout_7_loops_over_rows_in_vectors_and_falls_back_where_they_do_not_fit(monkeypatch):
    # Inductor's looped shape: no row held in registers (no `k0[`), 16-byte vector loads and
    # stores along the row, and no element-by-element loop or alignment check (the runtime
    # copies a misaligned input: cuda_assumes_aligned); a row of 13 (not whole vectors) keeps
    # layout 7's scalar loop, with no vector path at all (4 lanes a row: 8 rows a warp)
    monkeypatch.setenv("MINI_CODEGEN_LAYOUT", "7")
    soft = kernel_of(inductor.compile_graph_cuda(graph_of(softmax_decomp, mini.randn(64, 1024)), arch="sm_90")["source"])
    assert "mini::aligned" not in soft and "j < rnumel; j += blockDim.x" not in soft
    assert soft.count("*reinterpret_cast<const mini::Vec<float, 4>*>(&in0[") == 3  # each pass reads the row
    assert soft.count("*reinterpret_cast<mini::Vec<float, 4>*>(&out1[") == 1
    assert "__launch_bounds__(256, 8)" in soft and not re.search(r"float k\d+\[", soft)
    odd = kernel_of(inductor.compile_graph_cuda(graph_of(softmax_decomp, mini.randn(7, 13)), arch="sm_90")["source"])
    assert "mini::Vec" not in odd and "for (int64_t j = lane; j < rnumel; j += 4)" in odd


def test_unrolled_passes_read_the_row_again_instead_of_keeping_it(monkeypatch):
    # layout 9 unrolls each pass of a row of 8192 floats (vectors of 4, a few a thread): the first pass
    # loads plainly; before each later pass an empty asm "changes" every pointer that an earlier
    # pass read, or the compiler keeps the first pass's values for it and spills (layer norm ran
    # 3x slower on the H200). The weights, first read in the last pass, are not hidden.
    monkeypatch.setenv("MINI_CODEGEN_LAYOUT", "9")
    gm = graph_of(layernorm_decomp, mini.randn(16, 8192), mini.randn(8192), mini.randn(8192))
    ln = kernel_of(inductor.compile_graph_cuda(gm, arch="sm_90")["source"])
    passes = re.split(r"for \(int it = 0; it < \d+; it\+\+\)", ln)
    assert len(passes) == 4, ln  # mean, variance, normalize
    assert "asm volatile" not in passes[0]
    for p in (2, 3):
        hidden = re.findall(r'asm volatile\(\"\" : \"\+l\"\((in\d+)\)\);', passes[p - 1])
        assert hidden == ["in0"], ln  # the row's input, just before the pass's loop
        assert "const int j0 = jv * 4;" in passes[p], ln  # the index as the first pass's


@pytest.mark.parametrize("program", ["layernorm_decomp", "softmax_decomp"])
@pytest.mark.parametrize("columns", [8192, 4096, 1024])
def test_row_reductions_do_not_spill_registers(monkeypatch, program, columns):
    # ptxas -v on the default layout's kernel: a spill is a trap this renderer fell into twice
    # (168 bytes a thread with the row kept between passes, 12 with a hidden zero in the index;
    # 0.42 and 0.144 ms against 0.136 for layer norm on the H200)
    fn = {"layernorm_decomp": layernorm_decomp, "softmax_decomp": softmax_decomp}[program]
    args = [mini.randn(64, columns)] + ([mini.randn(columns), mini.randn(columns)]
                                        if program == "layernorm_decomp" else [])
    source = inductor.compile_graph_cuda(graph_of(fn, *args), arch="sm_90")["source"]
    monkeypatch.setenv("MINI_NVRTC_OPTIONS", "-lineinfo -Xptxas -v")
    log = inductor.compile_cuda(source, arch="sm_90").log
    spills = [int(n) for n in re.findall(r"(\d+) bytes spill stores", log)]
    assert spills and max(spills) == 0, log


def test_a_kernels_name_says_what_its_layout_makes_of_the_row(monkeypatch):
    # fusion calls a 1000-column row reduction "per" (short enough to hold); the CUDA name is
    # the layout's: held in registers under layout 3, looped over under layout 7, in the kernel,
    # its source and the fusion decisions that name it
    names = {}
    for number in (3, 7):
        monkeypatch.setenv("MINI_CODEGEN_LAYOUT", str(number))
        info = inductor.compile_graph_cuda(graph_of(softmax_decomp, mini.randn(64, 1000)), arch="sm_90")
        (names[number],) = info["kernels"]
        assert "void __launch_bounds__" in info["source"] and f") {names[number]}(" in info["source"]
        assert any(names[number] in d for d in info["decisions"])
    assert names[3] == "cuda_per_fused_amax_div_exp_sub_sum_0"
    assert names[7] == "cuda_red_fused_amax_div_exp_sub_sum_0"


# ---- the online softmax (layout 8 on: LoopKernel::online_max) --------------------------------

def log_softmax_decomp(x):
    m = x.amax(-1, keepdim=True)
    return (x - m) - (x - m).exp().sum(-1, keepdim=True).log()


def logsumexp_decomp(x):
    m = x.amax(-1, keepdim=True)
    return (x - m).exp().sum(-1, keepdim=True).log() + m


def test_the_online_softmax_folds_the_max_and_the_sum_in_one_pass(monkeypatch):
    # layout 7 reads softmax's row three times (max, sum, store), layout 8 twice: the sum of
    # exp(x - running max) is rescaled by online_scale as the max rises, and each thread's sum
    # is rescaled to the block's max before the block reduction
    reads = {}
    for number in (7, 8):
        monkeypatch.setenv("MINI_CODEGEN_LAYOUT", str(number))
        src = kernel_of(inductor.compile_graph_cuda(graph_of(softmax_decomp, mini.randn(64, 1024)), arch="sm_90")["source"])
        reads[number] = src.count("*reinterpret_cast<const mini::Vec<float, 4>*>(&in0[")
        assert ("mini::online_scale" in src) == (number == 8)
    assert reads == {7: 3, 8: 2}
    # a sum of exp(x - m) where m is not the max of the same x stays in the pass after the max
    src = kernel_of(inductor.compile_graph_cuda(
        graph_of(lambda x, y: (x - y.amax(-1, keepdim=True)).exp().sum(-1), mini.randn(64, 1024), mini.randn(64, 1024)),
        arch="sm_90")["source"])
    assert "online_scale" not in src
    # where the row does not loop in vectors (13 columns), the kernel is layout 7's
    odd = inductor.compile_graph_cuda(graph_of(softmax_decomp, mini.randn(7, 13)), arch="sm_90")["source"]
    assert "online_scale" not in kernel_of(odd)


def softmax_edge_rows(columns):
    """Rows that test the rescaling: random, ascending (the max rises at every element), -inf
    entries, all -inf (NaN, as eager), a NaN, values near the float limit."""
    rng = np.random.default_rng(0)
    x = rng.standard_normal((8, columns)).astype(np.float32) * 4
    x[1] = np.linspace(-50, 50, columns)
    x[2, ::3] = -np.inf
    x[3] = -np.inf
    x[4, columns // 2] = np.nan
    x[5] = rng.uniform(-3e38, 3e38, columns)
    x[6, 0] = np.inf
    x[7, -1] = 80.0
    return mini.tensor(x)


@pytest.mark.cuda
@pytest.mark.skipif(not HAS_CUDA, reason=CUDA_SKIP_REASON)
@pytest.mark.parametrize("layout", LAYOUTS, indirect=True)
@pytest.mark.parametrize("fn", [softmax_decomp, log_softmax_decomp, logsumexp_decomp])
def test_softmax_edge_rows_run_as_eager_aligned_or_not(layout, fn):
    # offset 1: the row's pointer is not 16-byte aligned: the layouts in vectors read the
    # runtime's aligned copy, the others their element loop
    x = softmax_edge_rows(1024)
    gm, inputs = captured(fn, x)
    want = gm.forward(*inputs)
    want = want if isinstance(want, (tuple, list)) else (want,)
    run = inductor.compile_graph_cuda(gm)["run"]
    for offset in (0, 1):
        y = mini.empty(x.numel() + offset, device="cuda").as_strided(tuple(x.shape), x.stride(), offset)
        y.copy_(x.cuda())
        got = run(y)
        for g, w in zip(got, want):
            g, w = to_np(g.cpu()), to_np(w)
            assert np.array_equal(np.isnan(g), np.isnan(w)), f"layout {layout}, offset {offset}: NaN rows differ"
            np.testing.assert_allclose(g, w, rtol=1e-4, atol=1e-6, err_msg=f"layout {layout}, offset {offset}")


def test_a_kernel_reads_at_most_what_the_cuda_calling_convention_passes():
    # mini::Sizes carries strides for kCudaMaxLoads (16) tensors: fusion starts a new kernel
    # where one would read more (a GPT step's bias-and-residual adds read 18), says so in its
    # log, and the CPU schedule, which has no such table, keeps one kernel
    def many(*xs):
        t = xs[0]
        for x in xs[1:]:
            t = t * 0.5 + x
        return t

    xs = [mini.randn(8, 16) for _ in range(20)]
    gm = graph_of(many, *xs)
    info = inductor.compile_graph_cuda(gm, arch="sm_90")
    assert len(info["kernels"]) == 2, info["kernels"]
    assert any("would read 17 tensors (the target passes at most 16)" in d for d in info["decisions"]), info["decisions"]
    signatures = [line for line in info["source"].splitlines() if line.startswith('extern "C"')]
    assert [len(re.findall(r"const float\* __restrict__ in\d+", s)) for s in signatures] == [16, 5]
    mini.reset()
    before = mini.metrics.generated_kernel_count
    cpu = mini.compile(many, backend="inductor")
    np.testing.assert_allclose(to_np(cpu(*xs)), to_np(many(*xs)), rtol=1e-5)
    assert mini.metrics.generated_kernel_count - before == 1


def test_each_kernel_can_be_rendered_in_its_own_layout():
    # max-autotune's final graph: the softmax kernel in layout 9, the epilogue after the matmul
    # in layout 1 (one element a thread: no Vec); a count that does not match is refused
    def two_kernels(x, w):
        p = (x - x.amax(-1, keepdim=True)).exp()
        p = p / p.sum(-1, keepdim=True)
        return (p @ w).relu() * 2

    gm = graph_of(two_kernels, mini.randn(128, 512), mini.randn(512, 256))
    info = inductor.compile_graph_cuda(gm, arch="sm_90", layouts=[9, 1])
    assert info["layouts"] == [9, 1] and len(info["kernels"]) == 2
    assert "// Kernel layouts (max-autotune's choice, kernel by kernel): 9 1" in info["source"]
    softmax, epilogue = kernel_of(info["source"]).split('extern "C"')[1:]
    assert "mini::Vec<float, 4>" in softmax and "mini::Vec" not in epilogue
    uniform = inductor.compile_graph_cuda(gm, arch="sm_90", layouts=[9, 9])["source"]
    assert "kernel by kernel" not in uniform and "mini::Vec<float, V>" in kernel_of(uniform).split('extern "C"')[2]
    with pytest.raises(RuntimeError, match="3 layouts for 2 kernels"):
        inductor.compile_graph_cuda(gm, arch="sm_90", layouts=[9, 9, 9])


# ---- columns, and pointwise nodes sunk to their reader ------------------------------------------
def test_a_reduction_keeping_the_innermost_dim_runs_as_columns():
    def bias_grads(x, y):
        g = x * y
        return g.sum((0, 1)), g.sum(-1)  # a bias gradient (columns), and a row sum
    info = inductor.compile_graph_cuda(graph_of(bias_grads, mini.randn(4, 16, 96), mini.randn(4, 16, 96)), arch="sm_90")
    kernels = info["kernels"]
    assert any(k.startswith("cuda_col_") for k in kernels) and any(k.startswith("cuda_") and "_col_" not in k
                                                                   for k in kernels), kernels
    source = info["source"]
    col = source[source.index("void __launch_bounds__(1024) cuda_col_"):]
    assert re.search(r"fold\[\d\]\[32\]\[33\]", col) and "j += 32" in col  # 32 lanes over the reduced elements


def test_few_columns_over_many_rows_share_the_rows_among_blocks():
    # layer norm's weight and bias gradients over 8 x 1024 rows of 768: 24 strips of 32 columns
    # would be 24 blocks on a GPU of 132 SMs; the rows are shared among blocks in y instead
    def ln_grads(g, x):
        return (g * x).sum((0, 1)), g.sum((0, 1)), g + x
    info = inductor.render_graph_cuda(graph_of(ln_grads, mini.randn(8, 1024, 768), mini.randn(8, 1024, 768)))
    (col,) = [k for k in info["kernels"] if k["shape"] == "col"]
    assert col["column_split"] == 2, col  # both sums fold partials
    rows = inductor.cuda_column_split_grid(768, 8 * 1024, 132)
    assert 2 <= rows <= inductor.cuda_column_max_splits() and 24 * rows >= 132, rows
    source = info["source"][info["source"].index(f" {col['name']}("):]
    assert "j_begin + lane" in source and "atomicAdd(&arrived[blockIdx.x]" in source
    # the lanes' folds share barriers, four at a time: three barriers per four folds, for the
    # block's own sums and again for the last block's, and two around the count
    body = source[:source.index("\n}\n")]
    folds = col["column_vector"] * 2
    assert "double fold[4][32][33]" in body, body
    assert body.count("__syncthreads()") == 2 * 3 * -(-folds // 4) + 2, body
    # a mean that the stored full value reads needs every row: one block per strip
    info = inductor.render_graph_cuda(graph_of(lambda x: x - x.mean(0, keepdim=True), mini.randn(2000, 70)))
    (col,) = [k for k in info["kernels"] if k["shape"] == "col"]
    assert col["column_split"] == 0, col
    assert inductor.cuda_column_split_grid(768, 64, 132) == 1  # too few rows to share


def test_columns_of_bfloat16_are_read_in_16_byte_vectors():
    # GPT-2's MLP bias gradient beside gelu's backward over [8192, 3072] bfloat16: a warp reading
    # 32 columns of one row moves 64 bytes a load; 8 columns a thread make it 512
    def mlp_bias_grad(g, h):
        t = g * F.gelu(h)
        return t, t.float().sum((0, 1))
    info = inductor.render_graph_cuda(graph_of(mlp_bias_grad, bf16(8, 64, 3072), bf16(8, 64, 3072)))
    (col,) = [k for k in info["kernels"] if k["shape"] == "col"]
    assert col["column_vector"] == 8 and col["column_split"] == 1, col
    source = info["source"][info["source"].index(f" {col['name']}("):]
    assert "constexpr int CV = 8;" in source
    assert source.count("const mini::Vec<mini::bf16, CV> v") == 2  # g and h, one Vec load a row each
    assert "*reinterpret_cast<mini::Vec<mini::bf16, CV>*>(&out" in source  # the gradient stored as a Vec
    # the blocks: 3072 / 8 / 32 = 12 strips, each shared among rows in y
    assert inductor.cuda_column_split_grid(3072, 512, 132, 8) >= 2
    # float32 takes 4 a thread; a transposed input is read per element; too few columns for
    # vectors (96 / 4 = 24 threads) halve the vector
    def f32(g, xt):
        return (g + xt.t()).sum(0)
    (col,) = [k for k in inductor.render_graph_cuda(graph_of(f32, mini.randn(300, 256), mini.randn(256, 300)))["kernels"]
              if k["shape"] == "col"]
    assert col["column_vector"] == 4, col
    (col,) = [k for k in inductor.render_graph_cuda(graph_of(lambda g: g.sum(0), mini.randn(300, 96)))["kernels"]
              if k["shape"] == "col"]
    assert col["column_vector"] == 2, col
    # a full value stored after the sums needs every row: scalar columns, one block a strip
    (col,) = [k for k in inductor.render_graph_cuda(graph_of(lambda x: x - x.mean(0, keepdim=True),
                                                             mini.randn(2000, 512)))["kernels"] if k["shape"] == "col"]
    assert col["column_vector"] == 1 and col["column_split"] == 0, col


@pytest.mark.cuda
@pytest.mark.skipif(not HAS_CUDA, reason=CUDA_SKIP_REASON)
def test_split_columns_leave_their_counters_for_the_next_launch():
    def ln_grads(g, x):
        return (g * x).sum((0, 1)), g.sum((0, 1))
    gm = graph_of(ln_grads, mini.randn(4, 2048, 96), mini.randn(4, 2048, 96))
    run = inductor.compile_graph_cuda(gm)["run"]
    for _ in range(3):  # a counter not reset would make a middle block fold too early
        inputs = [mini.randn(4, 2048, 96), mini.randn(4, 2048, 96)]
        got = run(*[cuda_like(x) for x in inputs])
        for g, w in zip(got, gm.forward(*inputs)):
            assert_same(g, w, "split columns")


def test_cross_entropys_target_mask_is_computed_in_the_kernel_that_reads_it():
    import mini.nn.functional as F

    def loss(logits, target):
        return F.cross_entropy(logits, target)
    gm = graph_of(loss, mini.randn(64, 512, requires_grad=True), mini.randint(0, 512, (64,)))
    info = mini._C._inductor_compile_training_cuda(gm, "sm_90")
    # no kernel of the backward stores the [64, 512] comparison alone: it is sunk into the
    # reduction that reads it (it was a kernel of its own writing rows x vocabulary bools)
    assert not any(d.startswith("cuda_poi_fused_eq") and "[64, 512]" in d for d in info["backward_decisions"]), \
        info["backward_decisions"]
    assert len(info["backward_kernels"]) <= 3, info["backward_kernels"]
    # the forward: log_softmax and the select of the target's class in one kernel over the rows
    # (the arange of classes, a call of its own, is hoisted before it instead of splitting it)
    # (the mean's kernel over the rows may compute the per-row loss again from the row sums it
    # reads rather than load it: rematerialize)
    rows = [k for k in info["forward_kernels"] if "amax" in k]
    assert len(rows) == 1 and "where" in rows[0], info["forward_kernels"]
    assert len(info["forward_kernels"]) <= 2, info["forward_kernels"]


def test_cross_entropy_reads_the_logits_once_forward_and_once_backward():
    # -log_softmax(x)[t] = logsumexp(x) - x[t]: the row's max, its sum of exp and the pick of
    # x[t] are reductions of one pass; the backward rebuilds exp(x - max) from the logits and the
    # rows' max and sum, a pointwise pass. Through log_softmax the forward read each row twice (the
    # pick needed the logsumexp first) and the backward computed log_softmax again (two more).
    def loss(logits, target):
        return F.cross_entropy(logits, target)
    gm = graph_of(loss, mini.randn(64, 512, requires_grad=True), mini.randint(0, 512, (64,)))
    info = mini._C._inductor_compile_training_cuda(gm, "sm_90")
    src = info["forward_source"]
    (row,) = [k for k in info["forward_kernels"] if "amax" in k]
    body = src[src.index(row + "("):]
    body = body[:body.index("\n}\n")]
    assert "read the row again" not in body, body
    full = [d for d in info["backward_decisions"] if re.match(r"cuda_\w+: \d+ ops over \[64, 512\]", d)]
    assert len(full) == 1 and full[0].startswith("cuda_poi_") and "exp" in full[0].split(":")[0], full


def test_an_int64_arange_is_computed_from_the_index_where_it_is_read():
    # cross-entropy's classes, arange(C): a kernel computes class j as x<d>, where it loaded 8
    # bytes an element (and, in a row kernel, narrowed the bfloat16 logits' vectors to the int64
    # load's 2 elements); the backward makes the arange again rather than save it
    def loss(x, w, t):
        return F.cross_entropy(x @ w, t)
    with mini.autocast("cpu", dtype=mini.bfloat16):
        gm = graph_of(loss, mini.randn(64, 32), mini.randn(32, 512, requires_grad=True), mini.randint(0, 512, (64,)))
    info = mini._C._inductor_compile_training_cuda(gm, "sm_90")
    def body(side, kernel):
        src = info[side + "_source"]
        text = src[src.index(kernel + "("):]
        return text[:text.index("\n}\n")]
    (row,) = [k for k in info["forward_kernels"] if "amax" in k]
    (grad,) = [k for k in info["backward_kernels"] if "exp" in k]  # the logits' gradient, [64, 512]
    for side, kernel in (("forward", row), ("backward", grad)):
        text = body(side, kernel)
        assert "== int64_t((int64_t(x1 * 1)))" in text, text
        int64_buffers = re.findall(r"const int64_t\* __restrict__ (in\d+)", text.split("{")[0])
        assert not [b for b in int64_buffers if b + "[x1" in text], text  # no class index loaded
    assert "mini::Vec<mini::bf16, 8>" in body("forward", row)


def linear_heads(x, w, b, w2, b2):
    """A projection read only through views (the qkv split, as attention reads it) and one read by
    a pointwise op (the MLP's gelu)."""
    y = F.linear(x, w, b)
    return y.transpose(1, 2), F.gelu(F.linear(x, w2, b2))


def test_a_linears_bias_is_added_in_the_gemms_epilogue():
    # matmul(x, w) + bias is one GEMM with the bias in cuBLASLt's epilogue: the projection read
    # through views needs no kernel for its add, and gelu's kernel no longer loads the bias
    gm = graph_of(linear_heads, mini.randn(2, 8, 16), mini.randn(96, 16), mini.randn(96), mini.randn(32, 16),
                  mini.randn(32))
    info = inductor.render_graph_cuda(gm)
    assert len(info["kernels"]) == 1, info["decisions"]
    assert info["decisions"][0].startswith("cuda_poi_fused_gelu_0: 1 op over"), info["decisions"]


@pytest.mark.parametrize("case", ["matmul read twice", "bias of another dtype", "bias over rows"])
def test_a_bias_add_stays_a_kernel_where_the_gemm_cannot_take_it(case):
    # the epilogue adds a vector along the last dim of the one product that nobody else reads,
    # in the product's dtype; anything else keeps its add
    x, w = mini.randn(8, 16), mini.randn(16, 32)
    if case == "matmul read twice":
        def fn(x, w, b):
            y = x @ w
            return y + b, y * 2
        args = (x, w, mini.randn(32))
    elif case == "bias of another dtype":
        fn, args = (lambda x, w, b: x @ w + b), (x, w, mini.randn(32).to(mini.float64))
    else:
        fn, args = (lambda x, w, b: x @ w + b), (x, w, mini.randn(8, 1))
    info = inductor.render_graph_cuda(graph_of(fn, *args))
    assert any("add" in d.split(":")[0] for d in info["decisions"]), info["decisions"]


@pytest.mark.cuda
@pytest.mark.skipif(not HAS_CUDA, reason=CUDA_SKIP_REASON)
@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_a_bias_in_the_gemms_epilogue_runs_as_eager(dtype):
    t = getattr(mini, dtype)
    args = [mini.randn(*s).to(t) for s in ((2, 8, 16), (96, 16), (96,), (32, 16), (32,))]
    run_and_compare(linear_heads, args, f"linear_heads {dtype}")
