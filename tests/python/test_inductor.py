"""The "inductor" backend (issue 5): fusion, generated C++, the disk cache, symbolic sizes.

Kernel counts are read two ways: mini.metrics.generated_kernel_count deltas around a
mini.compile call, and the kernel names mini._C._inductor_compile(gm) reports for a captured
graph. Expected values always come from running the same function eagerly (mini's eager ops)
on the same inputs; byte counts come from hand computation. The Inductor anchors are the
functions of /work/shared/anchors/torch_gpu_anchor.py (transform, chain8, softmax_decomp,
layernorm_decomp, ffn_out), spelled with mini ops in labs/programs.py.
"""
import json
import os
import re
import subprocess
import sys
import textwrap

import numpy as np
import pytest

import mini
# fresh_mini (autouse): mini.reset() and no logs around each test; ALIVE keeps backends alive
from capture_helpers import ALIVE, fresh_mini  # noqa: F401
from conftest import to_np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "labs"))
from programs import chain8, ffn_out, layernorm_decomp, softmax_decomp, transform  # noqa: E402

F32 = 4
R, C = 64, 64
N_BYTES = R * C * F32  # one [64, 64] float32 buffer
KERNEL_NAME = re.compile(r"^cpp_(poi|per|red)_fused(_[a-z0-9]+)+_\d+$")
PKG_DIR = os.path.dirname(os.path.dirname(os.path.abspath(mini.__file__)))


# ---- fixtures and helpers ---------------------------------------------------------------------------

pytestmark = [pytest.mark.usefixtures("own_cache_dir")]
KIT_ASSIGNMENT = "a3"  # every test here is A3's unless it names another (conftest.py)



def T(*shape, seed=0, dtype=mini.float32):
    rng = np.random.default_rng(seed)
    return mini.tensor(rng.standard_normal(shape).tolist(), dtype=dtype)


def graph_of(fn, *args, dynamic=None):
    """The GraphModule mini captures for fn(*args) (one graph, no breaks)."""
    graphs = []

    def backend(gm, example_inputs):
        graphs.append(gm)
        return gm.forward

    ALIVE.append(backend)
    mini.compile(fn, backend=backend, dynamic=dynamic, fullgraph=True)(*args)
    assert len(graphs) == 1, f"expected one graph, got {len(graphs)}"
    return graphs[0]


def inductor(fn, *args, dynamic=None):
    """mini._C._inductor_compile of fn's graph: source, kernels, decisions, peak_bytes, run, ..."""
    return mini._C._inductor_compile(graph_of(fn, *args, dynamic=dynamic))


def as_tuple(x):
    return tuple(x) if isinstance(x, (tuple, list)) else (x,)


def check_same(got, expected, rtol=1e-5, atol=1e-6):
    got, expected = as_tuple(got), as_tuple(expected)
    assert len(got) == len(expected), f"{len(got)} outputs != {len(expected)}"
    for i, (g, e) in enumerate(zip(got, expected)):
        assert tuple(g.shape) == tuple(e.shape), f"output {i}: shape {tuple(g.shape)} != {tuple(e.shape)}"
        assert g.dtype == e.dtype, f"output {i}: dtype {g.dtype} != {e.dtype}"
        np.testing.assert_allclose(to_np(g).astype(np.float64), to_np(e).astype(np.float64),
                                   rtol=rtol, atol=atol, err_msg=f"output {i}")


def compiled_kernel_count(fn, *args, **kw):
    """generated_kernel_count added by compiling fn with backend="inductor" (checked vs eager)."""
    expected = fn(*args)
    before = mini.metrics.generated_kernel_count
    cf = mini.compile(fn, **kw)
    got = cf(*args)
    added = mini.metrics.generated_kernel_count - before
    check_same(got, expected)
    return added, cf


def run_script(script, **env):
    full_env = dict(os.environ, PYTHONPATH=PKG_DIR, **env)
    full_env.pop("MINI_LOGS", None)
    return subprocess.run([sys.executable, "-c", textwrap.dedent(script)], env=full_env,
                          capture_output=True, text=True, timeout=120)


# ---- the Inductor anchors (transform, chain8, softmax_decomp, layernorm_decomp, ffn_out: labs/programs.py)

def softmax_op(x):
    return mini.softmax(x, -1)


def layer_norm_op(x, w, b):
    return mini.layer_norm(x, (C,), w, b)


ANCHORS = {
    # name: (fn, args, the kernel names Inductor's naming scheme gives)
    "transform": (transform, lambda: (T(R, C, seed=1), T(C, seed=2)), ["cpp_poi_fused_add_mul_relu_0"]),
    "chain8": (chain8, lambda: (T(R, C, seed=3), T(R, C, seed=4)),
               ["cpp_poi_fused_add_cos_mul_sigmoid_sin_sub_0"]),
    "softmax_decomp": (softmax_decomp, lambda: (T(R, C, seed=5),), ["cpp_per_fused_amax_div_exp_sub_sum_0"]),
    "layernorm_decomp": (layernorm_decomp, lambda: (T(R, C, seed=6), T(C, seed=7), T(C, seed=8)),
                         ["cpp_per_fused_add_mean_mul_pow_rsqrt_sub_0"]),
    "ffn_out": (ffn_out, lambda: (T(8, C, seed=9), T(C, C, seed=10), T(C, seed=11)), ["cpp_poi_fused_add_relu_0"]),
    # the composite ops, decomposed by mini before fusion, give the same single kernel
    # (layer_norm's mean is taken in float64: its casts add "to")
    "softmax_op": (softmax_op, lambda: (T(R, C, seed=12),), ["cpp_per_fused_amax_div_exp_sub_sum_0"]),
    "layer_norm_op": (layer_norm_op, lambda: (T(R, C, seed=13), T(C, seed=14), T(C, seed=15)),
                      ["cpp_per_fused_add_mean_mul_rsqrt_sub_to_0"]),
}


# ---- kernel-count parity with Inductor --------------------------------------------------------------

@pytest.mark.parametrize("name", list(ANCHORS))
def test_anchor_is_one_generated_kernel(name):
    fn, make_args, _ = ANCHORS[name]
    args = make_args()
    added, cf = compiled_kernel_count(fn, *args)
    assert added == 1, f"{name}: {added} generated kernels, Inductor generates 1"
    check_same(cf(*args), fn(*args))


# A5's: the second call is a cache hit only where the tensor guard holds
@pytest.mark.a5
@pytest.mark.parametrize("name", ["chain8", "softmax_op"])
def test_a_cache_hit_generates_no_kernel(name):
    fn, make_args, _ = ANCHORS[name]
    args = make_args()
    _, cf = compiled_kernel_count(fn, *args)
    before = mini.metrics.generated_kernel_count
    check_same(cf(*args), fn(*args))  # a cache hit generates nothing
    assert mini.metrics.generated_kernel_count == before


@pytest.mark.parametrize("name", list(ANCHORS))
def test_anchor_kernel_names(name):
    fn, make_args, names = ANCHORS[name]
    args = make_args()
    info = inductor(fn, *args)
    assert info["kernels"] == names
    for k in info["kernels"]:
        assert KERNEL_NAME.match(k), k
        assert f'extern "C" void {k}(' in info["source"]
    check_same(info["run"](*args), fn(*args))


def test_ffn_out_is_one_extern_matmul_and_one_kernel():
    x, w, b = ANCHORS["ffn_out"][1]()
    info = inductor(ffn_out, x, w, b)
    assert info["kernels"] == ["cpp_poi_fused_add_relu_0"]  # the matmul is no generated kernel
    assert not any("matmul" in k or "_mm" in k for k in info["kernels"])
    cf = mini.compile(ffn_out)
    expected = ffn_out(x, w, b)
    check_same(cf(x, w, b), expected)
    mini.metrics.reset()
    check_same(cf(x, w, b), expected)
    # one launch for the extern matmul, one for the fused add+relu (eager: 3)
    assert mini.metrics.kernel_launches == 2


def test_pointwise_before_a_matmul_closes_the_kernel():
    def f(x, w):
        return (x * 2).relu() @ w
    x, w = T(8, C, seed=1), T(C, C, seed=2)
    info = inductor(f, x, w)
    assert info["kernels"] == ["cpp_poi_fused_mul_relu_0"]
    assert any("extern call" in d and "matmul" in d for d in info["decisions"]), info["decisions"]
    check_same(info["run"](x, w), f(x, w))


def test_reduction_absorbs_its_pointwise_producers():
    def f(x, y):
        return (x * y + 1).sum(-1)
    x, y = T(8, C, seed=1), T(8, C, seed=2)
    info = inductor(f, x, y)
    assert info["kernels"] == ["cpp_per_fused_add_mul_sum_0"]
    check_same(info["run"](x, y), f(x, y))


def test_large_reduction_is_named_red():
    def f(x):
        return x.exp().sum(-1)
    x = T(4, 4096, seed=1)
    info = inductor(f, x)
    assert info["kernels"] == ["cpp_red_fused_exp_sum_0"]
    check_same(info["run"](x), f(x))


# ---- generated source and the output_code log -------------------------------------------------------

def test_kernel_comment_names_the_graph_nodes():
    x, y = ANCHORS["chain8"][1]()
    gm = graph_of(chain8, x, y)
    nodes = [n.name for n in gm.nodes if n.op == "call_function"]
    assert len(nodes) == 8
    info = mini._C._inductor_compile(gm)
    (name,) = info["kernels"]
    assert f"// {name}: graph nodes {' '.join(nodes)}\n" in info["source"]


def residual_stack(x, *ws):
    """Pre-norm residual layers (layer norm, a matmul, gelu, the residual add): every layer past
    the first fuses into a kernel of one body, named and numbered by its own nodes."""
    for w in ws:
        x = x + mini.nn.functional.gelu(mini.nn.functional.layer_norm(x, (16,)) @ w)
    return x.sum()


def test_identical_layers_are_one_cpp_function_per_body():
    x = T(4, 16)
    defined = {}
    for layers in (2, 6):
        ws = [T(16, 16, seed=i + 1) * 0.25 for i in range(layers)]
        mini.reset()
        info = inductor(residual_stack, x, *ws)
        defined[layers] = re.findall(r'extern "C" void (\w+)\(', info["source"])
        for name in info["kernels"]:  # every kernel still named, with the graph nodes it serves
            assert f"// {name}: graph nodes " in info["source"]
        mini.reset()
        check_same(mini.compile(residual_stack, backend="inductor")(x, *ws), residual_stack(x, *ws), rtol=1e-4, atol=1e-4)
    assert len(defined[6]) == len(defined[2]) < 6  # more layers, no more functions


def test_output_code_log_prints_the_source(capsys):
    x, b = ANCHORS["transform"][1]()
    mini.set_logs("output_code")
    mini.compile(transform)(x, b)
    err = capsys.readouterr().err
    assert "Output code for" in err
    assert 'extern "C" void cpp_poi_fused_add_mul_relu_0(' in err
    # the 150-line math prelude is one line in the log (the compiled source has all of it)
    assert "mini/tensor/scalar_math.h: " in err and "lines, omitted here" in err
    assert "float exp_f32(float x)" not in err
    assert "// cpp_poi_fused_add_mul_relu_0: graph nodes add mul relu" in err
    assert "#pragma omp" in err


def test_no_log_without_the_channel(capsys):
    x, b = ANCHORS["transform"][1]()
    mini.compile(transform)(x, b)
    err = capsys.readouterr().err
    assert "Output code" not in err and "fusion decisions" not in err


# ---- the fusion log -----------------------------------------------------------------------------------

def _two_reductions(x):
    return x.sum(0), x.sum(1)


def _absorb(x, y):
    return (x * y + 1).sum(-1)


def _pre_mm(x, w):
    return (x * 2).relu() @ w


def _view_of_computed(x):
    return (x.sin().t() + 1).cos()


def _past_view(x):
    a = x.sin()
    return a.t(), (x * 2).exp()  # the view of a does not end the kernel: x * 2 joins it


FUSION_REASONS = [
    ("chain8", chain8, lambda: ANCHORS["chain8"][1](), r"fuse cos \(cos\) into cpp_poi_\w+: same iteration space \[64, 64\]"),
    ("layernorm", layernorm_decomp, lambda: ANCHORS["layernorm_decomp"][1](),
     r"fuse rsqrt \(rsqrt\) into cpp_per_\w+: per-row epilogue of the kernel's reduction"),
    ("softmax", softmax_decomp, lambda: ANCHORS["softmax_decomp"][1](),
     r"fuse sum \(sum\) into cpp_per_\w+: another reduction over the same rows"),
    ("absorb", _absorb, lambda: (T(8, C, seed=1), T(8, C, seed=2)),
     r"fuse sum \(sum\) into cpp_per_\w+: reduction over \[8, 64\] absorbs its pointwise producers"),
    ("extern", _pre_mm, lambda: (T(8, C, seed=1), T(C, C, seed=2)),
     r"close cpp_poi_fused_mul_relu_0: matmul \(matmul\) is an extern call"),
    ("other_dims", _two_reductions, lambda: (T(R, 32, seed=1),),
     r"cannot fuse sum_1 \(sum\) into cpp_per_fused_sum_0: .*other dims"),
    ("view", _view_of_computed, lambda: (T(R, C, seed=1),),
     r"store sin of cpp_poi_fused_sin_0: \w+ \(transpose\) views it"),
    ("reads_view", _view_of_computed, lambda: (T(R, C, seed=1),),
     r"close cpp_poi_fused_sin_0: add \(add\) reads \w+, a view of a value the kernel computes"),
    ("past_view", _past_view, lambda: (T(R, C, seed=1),),
     r"store sin of cpp_poi_fused_\w+: \w+ \(transpose\) views it(.|\n)*fuse mul \(mul\) into cpp_poi_fused_\w+"),
]


@pytest.mark.parametrize("case", FUSION_REASONS, ids=[c[0] for c in FUSION_REASONS])
def test_fusion_log_gives_the_reason(case, capsys):
    _, fn, make_args, pattern = case
    args = make_args()
    mini.set_logs("fusion")
    check_same(mini.compile(fn)(*args), fn(*args))
    err = capsys.readouterr().err
    assert "fusion decisions for" in err
    assert re.search(pattern, err), f"no match for {pattern!r} in:\n{err}"


def test_fusion_log_reports_bytes_saved(capsys):
    x, b = ANCHORS["transform"][1]()
    mini.set_logs("fusion")
    mini.compile(transform)(x, b)
    err = capsys.readouterr().err
    # add and mul stay in registers: each would have been written once and read once
    assert "cpp_poi_fused_add_mul_relu_0: 3 ops over [64, 64]; 2 intermediates stay in registers, " \
           f"saving {2 * 2 * N_BYTES} bytes" in err, err
    assert "buffer plan:" in err and f"peak {N_BYTES} bytes" in err


# ---- buffer planning ----------------------------------------------------------------------------------

def test_fused_intermediates_are_never_allocated():
    x, y = ANCHORS["chain8"][1]()
    info = inductor(chain8, x, y)
    assert info["peak_bytes"] == N_BYTES  # only the output: 7 intermediates live in registers
    assert info["unplanned_bytes"] == N_BYTES
    assert any(d.startswith("buffer plan: 1 buffers") and f"peak {N_BYTES} bytes" in d
               for d in info["decisions"]), info["decisions"]


def test_freed_buffers_are_reused():
    def f(x, w):
        a = x.sin()        # kernel 0 stores a          (N_BYTES)
        m = a @ w          # extern, a dies here        (N_BYTES)
        b = m.cos()        # kernel 1 reuses a's buffer
        m2 = b @ w         # extern reuses m's buffer
        return m2.exp().sum()  # kernel 2 stores 4 bytes
    x, w = T(R, C, seed=1), T(C, C, seed=2)
    info = inductor(f, x, w)
    assert len(info["kernels"]) == 3
    assert info["unplanned_bytes"] == 4 * N_BYTES + F32
    assert info["peak_bytes"] == 2 * N_BYTES + F32
    assert any("5 buffers, 2 reuse a freed one" in d for d in info["decisions"]), info["decisions"]
    check_same(info["run"](x, w), f(x, w), rtol=1e-5, atol=1e-3)


def test_buffer_read_through_a_view_stays_alive():
    def f(x):
        return x.sin().t().cos().t().exp().sum()
    x = T(R, C, seed=1)
    info = inductor(f, x)
    check_same(info["run"](x), f(x), atol=1e-3)
    # the cos kernel reads sin's buffer (through the transpose) while writing its own
    assert info["peak_bytes"] >= 2 * N_BYTES, info["decisions"][-1]


# ---- horizontal fusion and reductions over different dims -------------------------------------------

def test_horizontal_fusion_of_two_outputs_over_the_same_space():
    def f(x, y):
        return x.sin() + 1, y.cos() * 2
    x, y = T(R, C, seed=1), T(R, C, seed=2)
    added, _ = compiled_kernel_count(f, x, y)
    assert added == 1
    info = inductor(f, x, y)
    assert info["kernels"] == ["cpp_poi_fused_add_cos_mul_sin_0"]
    check_same(info["run"](x, y), f(x, y))


def test_reductions_over_dim0_and_dim1_are_separate_kernels():
    x = T(R, 32, seed=1)
    added, _ = compiled_kernel_count(_two_reductions, x)
    assert added == 2
    info = inductor(_two_reductions, x)
    assert info["kernels"] == ["cpp_per_fused_sum_0", "cpp_per_fused_sum_1"]
    assert any(d.startswith("cannot fuse sum_1") for d in info["decisions"]), info["decisions"]
    check_same(info["run"](x), _two_reductions(x))


# ---- symbolic sizes -----------------------------------------------------------------------------------

def _dyn(x, y):
    return (x * y + 1).relu().sum(-1, keepdim=True), x.exp() - y


@pytest.mark.no_assignment  # a dynamic graph's kernels (A3) and its guard (A5): no one assignment's
def test_dynamic_graph_compiles_once_for_five_sizes(capsys):
    mini.set_logs("output_code")
    cf = mini.compile(_dyn, dynamic=True)
    before = mini.metrics.generated_kernel_count
    for i, (n, m) in enumerate([(3, 7), (5, 7), (8, 11), (13, 2), (21, 30)]):
        x, y = T(n, m, seed=2 * i), T(n, m, seed=2 * i + 1)
        check_same(cf(x, y), _dyn(x, y))
        if i == 0:
            first = mini.metrics.generated_kernel_count - before
    assert first >= 1
    assert mini.metrics.generated_kernel_count - before == first, "recompiled for a new size"
    err = capsys.readouterr().err
    assert err.count("Output code for") == 1
    assert "symbols[" in err  # sizes are kernel arguments


def test_dynamic_graph_from_inductor_compile_runs_at_many_sizes():
    def f(x):
        return x.sin() * 2, x.sum(0), softmax_decomp(x)
    info = inductor(f, T(8, C, seed=1), dynamic=True)
    assert "symbols[" in info["source"]
    for n, m in [(1, 3), (3, 64), (9, 5), (17, 100), (100, 17)]:
        x = T(n, m, seed=n)
        check_same(info["run"](x), f(x))


# ---- the disk cache -----------------------------------------------------------------------------------

_CACHE_SCRIPT = """
import json, sys, time
import mini

def transform(x, bias):
    return mini.relu((x + bias) * 0.5)

graphs = []
def capture(gm, example_inputs):
    graphs.append(gm)
    return gm.forward

x, b = mini.ones(16, 16), mini.ones(16)
mini.compile(transform, backend=capture)(x, b)
info = mini._C._inductor_compile(graphs[0])
mini.set_logs("output_code")
before = mini.metrics.generated_kernel_count
out = mini.compile(transform)(x, b)
print(json.dumps(dict(from_disk_cache=info["from_disk_cache"], compile_seconds=info["compile_seconds"],
                      library=info["library"], kernels=info["kernels"], value=out.tolist()[0][0])))
"""


def test_disk_cache_is_reused_by_a_new_process(tmp_path):
    runs = []
    for _ in range(2):
        r = run_script(_CACHE_SCRIPT, MINI_CACHE_DIR=str(tmp_path))
        assert r.returncode == 0, r.stderr
        runs.append((json.loads(r.stdout.strip().splitlines()[-1]), r.stderr))
        files = sorted(os.listdir(tmp_path))
        if len(runs) == 1:
            files_after_first = files
    (first, err1), (second, err2) = runs
    assert first["from_disk_cache"] is False
    assert second["from_disk_cache"] is True
    assert first["library"] == second["library"] and first["library"].startswith(str(tmp_path))
    assert first["kernels"] == second["kernels"] == ["cpp_poi_fused_add_mul_relu_0"]
    assert second["compile_seconds"] < first["compile_seconds"]
    assert second["compile_seconds"] < 0.05  # no compiler run: load the .so (issue: warm <= 5 ms)
    assert first["value"] == second["value"] == 1.0
    assert files == files_after_first, "the second process wrote new files into the cache"
    # mini.compile in the same process finds the .so too, and says so
    assert "from the disk cache" in err1 and "from the disk cache" in err2


def test_missing_compiler_is_a_clear_error(tmp_path):
    script = """
    import json
    import mini
    try:
        mini.compile(lambda x: x.sin() + 1)(mini.ones(4))
        print(json.dumps(dict(raised=None)))
    except Exception as e:
        print(json.dumps(dict(raised=type(e).__name__, message=str(e))))
    """
    r = run_script(script, CXX="/nonexistent", MINI_CACHE_DIR=str(tmp_path / "fresh"))
    assert r.returncode == 0, r.stderr
    res = json.loads(r.stdout.strip().splitlines()[-1])
    assert res["raised"] == "RuntimeError", res
    msg = res["message"]
    assert "/nonexistent" in msg  # the compiler it tried
    assert "CXX" in msg  # the fix: point CXX at a compiler ...
    assert "backend='eager'" in msg  # ... or do without generated code


# ---- metrics ------------------------------------------------------------------------------------------

@pytest.mark.no_assignment  # kernels (A3) run from cache hits (A5): no one assignment's
def test_kernel_launches_count_one_per_generated_kernel_run():
    x = T(R, 32, seed=1)
    cf = mini.compile(_two_reductions)
    expected = _two_reductions(x)
    check_same(cf(x), expected)
    mini.metrics.reset()
    check_same(cf(x), expected)
    assert mini.metrics.kernel_launches == 2
    # each kernel reads x once and writes its row sums
    assert mini.metrics.bytes_moved == 2 * R * 32 * F32 + (R + 32) * F32
    for _ in range(3):
        cf(x)
    assert mini.metrics.kernel_launches == 8
    assert mini.metrics.generated_kernel_count == 0  # running compiles nothing


def test_fused_chain_moves_only_its_inputs_and_output():
    x, y = ANCHORS["chain8"][1]()
    cf = mini.compile(chain8)
    cf(x, y)
    mini.metrics.reset()
    chain8(x, y)
    eager_launches = mini.metrics.kernel_launches
    mini.metrics.reset()
    cf(x, y)
    # one kernel reading x and y and writing the result; eager runs 8 kernels
    assert (mini.metrics.kernel_launches, mini.metrics.bytes_moved) == (1, 3 * N_BYTES)
    assert eager_launches == 8


# ---- loop layouts: staged pointwise loops, row scratch, chunked sums -------------------------------

STAGED_N = 131072 + 37  # above the parallel threshold, and not a multiple of the 256-element tile


def test_chain_with_three_transcendentals_runs_in_three_stages():
    x, y = T(STAGED_N, seed=20), T(STAGED_N, seed=21)
    info = inductor(chain8, x, y)
    src = info["source"]
    assert "// 3 stages per tile of 256 elements" in src
    assert src.count("#pragma omp simd") == 3
    check_same(info["run"](x, y), chain8(x, y))


def test_one_transcendental_stays_one_flat_loop():
    x, b = T(STAGED_N, seed=22), T(STAGED_N, seed=23)
    info = inductor(lambda x, b: (x * 2 + b).exp() - b, x, b)
    assert "stages per tile" not in info["source"]
    assert "#pragma omp parallel for simd" in info["source"]


def test_staged_kernel_stores_an_intermediate_and_passes_bool_and_int_values():
    # a value stored mid-chain (first output), a bool and an int64 computed in one stage and
    # read in a later one
    def f(x, y, n):
        s = x.sin()
        pos = s > 0
        c = (s * y).cos()
        k = n * 3
        return s, mini.where(pos, c.exp(), -c) + k

    x, y = T(STAGED_N, seed=24), T(STAGED_N, seed=25)
    n = mini.tensor(np.arange(STAGED_N).tolist(), dtype=mini.int64)
    info = inductor(f, x, y, n)
    assert "stages per tile" in info["source"]
    check_same(info["run"](x, y, n), f(x, y, n))


def test_staged_kernel_at_a_size_smaller_than_one_tile():
    x, y = T(100, seed=26), T(100, seed=27)
    info = inductor(chain8, x, y)
    assert "stages per tile" in info["source"]
    check_same(info["run"](x, y), chain8(x, y))


def test_softmax_keeps_exp_in_a_row_scratch_and_computes_it_once():
    x = T(256, 4096, seed=28)
    info = inductor(softmax_decomp, x)
    src = info["source"]
    assert re.search(r"float s\d+\[4096LL\];  // exp of this row, computed once", src), src
    # each pass is written once (a row of 4096 is too short to split over threads); exp is in
    # the sum pass only, and the output pass reads it back
    assert src.count("mini::exp_of<float>") == 1
    assert re.search(r"const float t\d+ = s\d+\[j\];", src)
    check_same(info["run"](x), softmax_decomp(x))


def test_rows_too_long_for_the_stack_recompute_instead_of_keeping_a_scratch():
    x = T(4, 32768, seed=29)  # 128 KiB of float per row: over the 64 KiB scratch limit
    info = inductor(softmax_decomp, x)
    assert "computed once" not in info["source"]
    assert info["source"].count("mini::exp_of<float>") == 4  # two passes, each written twice
    check_same(info["run"](x), softmax_decomp(x))


def test_dynamic_row_length_has_no_scratch_and_runs_at_several_lengths():
    x = T(8, 300, seed=30)
    info = inductor(softmax_decomp, x, dynamic=True)
    assert "computed once" not in info["source"]
    for cols in (300, 1025, 5000):
        x = T(8, cols, seed=cols)
        check_same(info["run"](x), softmax_decomp(x))


def test_long_float32_sum_is_accurate_to_float64():
    # float32 partial sums per 1024-element chunk, chunk sums in double
    rng = np.random.default_rng(31)
    data = (rng.random((2, 1_000_003)) + 0.5).astype(np.float32)
    x = mini.from_numpy(data)
    info = inductor(lambda x: (x * 1.0).sum(-1), x)
    assert "part" in info["source"] and "j0 += 1024" in info["source"]
    (got,) = as_tuple(info["run"](x))
    want = data.astype(np.float64).sum(-1)
    np.testing.assert_allclose(to_np(got).astype(np.float64), want, rtol=2e-7)


def test_compiled_amax_propagates_nan_and_vectorizes_with_an_int_flag():
    data = np.random.default_rng(32).standard_normal((4, 5000)).astype(np.float32)
    data[1, 4321] = np.nan
    x = mini.from_numpy(data)
    info = inductor(lambda x: x.amax(-1) + 1, x)
    assert re.search(r"int nan\d+ = 0;", info["source"])
    (got,) = as_tuple(info["run"](x))
    got = to_np(got)
    assert np.isnan(got[1]) and not np.isnan(got[[0, 2, 3]]).any()
    np.testing.assert_allclose(got[[0, 2, 3]], data[[0, 2, 3]].max(-1) + 1, rtol=1e-6)


def test_sum_over_leading_dims_is_an_outer_reduction_with_contiguous_inner_loop():
    # a bias gradient's shape of reduction: over the batch dim of [batch, features]; one
    # kernel also stores a full-space value and computes a max and a mean over the same dims
    def f(x, y):
        t = x * y
        return t, t.sum(0), x.exp().amax(0, keepdim=True), (x + 1).mean(0)

    x, y = T(300, 70, seed=40), T(300, 70, seed=41)
    info = inductor(f, x, y)
    assert len(info["kernels"]) == 1
    assert "// an outer reduction" in info["source"]
    check_same(info["run"](x, y), f(x, y))


def test_outer_reduction_over_two_leading_dims_and_nan():
    data = np.random.default_rng(42).standard_normal((6, 50, 33)).astype(np.float32)
    data[2, 7, 5] = np.nan
    x = mini.from_numpy(data)
    f = lambda x: (x.amax((0, 1)), (x * 2).sum((0, 1)))  # noqa: E731
    info = inductor(f, x)
    assert "// an outer reduction" in info["source"]
    got_max, got_sum = (to_np(t) for t in info["run"](x))
    assert np.isnan(got_max[5]) and np.isnan(got_sum[5])
    keep = [i for i in range(33) if i != 5]
    np.testing.assert_allclose(got_max[keep], data.max((0, 1))[keep], rtol=1e-6)
    np.testing.assert_allclose(got_sum[keep], (2 * data.astype(np.float64)).sum((0, 1))[keep], rtol=1e-5, atol=1e-4)


@pytest.mark.parametrize("features", [128, 512, 700])
def test_an_outer_reduction_of_few_outputs_splits_the_reduced_dims_over_threads(features):
    # a bias gradient of a GPT's layer: gelu's backward fused with the sum over 1024 rows of
    # [1024, features]. 128 or 512 features are 1 or 2 blocks of 256 outputs: the 1024 rows
    # are cut into 8 chunks of 128, each (block, chunk) summed by one thread, the partials
    # added in order. Eager's values, the full-size store too, for every thread count (the
    # split is decided by the shape alone, so the results are the same bits)
    def f(g, x):
        t = g * mini.nn.functional.gelu(x)
        return t, t.sum(0), (t * 2).mean(0)

    g, x = T(1024, features, seed=50), T(1024, features, seed=51)
    info = inductor(f, g, x)
    assert len(info["kernels"]) == 1
    assert "(block, chunk of 128 reduced rows) pairs over the threads" in info["source"]
    got = info["run"](g, x)
    check_same(got, f(g, x), atol=1e-4)  # sums of 1024 terms of size ~1, added in another order
    full, total = to_np(got[0]).astype(np.float64), to_np(got[1])
    np.testing.assert_allclose(total, full.sum(0), rtol=1e-5, atol=1e-4)


def test_small_integer_powers_are_multiplications():
    x = T(8, 8, seed=43)
    info = inductor(lambda x: x ** 2 + x ** 3 + x ** 1, x)
    assert "std::pow" not in info["source"]
    check_same(info["run"](x), x ** 2 + x ** 3 + x ** 1)


@pytest.mark.no_assignment  # passes through the stub: not the assignment's
def test_graph_code_prints_reduction_dims_as_ints(capsys):
    mini.set_logs("graph_code")
    mini.compile(lambda x: x.sum(-1, keepdim=True), backend="eager")(T(3, 4))
    err = capsys.readouterr().err
    assert "dim=[-1], keepdim=True" in err


def test_a_full_reduction_splits_its_row_over_the_threads():
    # a loss: everything summed to one number is one row; with fewer rows than threads each
    # pass is divided into chunks over the threads (an OpenMP reduction), not run on one
    x = T(300, 700, seed=44)
    info = inductor(lambda x: (x.sin() * 2).sum() + x.amax(), x)
    src = info["source"]
    assert "const bool split = rows < omp_get_max_threads()" in src
    assert re.search(r"if \(split\) \{\n\s+#pragma omp parallel for reduction\(\+ : acc\d+\)", src), src
    check_same(info["run"](x), (x.sin() * 2).sum() + x.amax(), rtol=1e-5)


def test_a_reduction_over_a_chain_of_transcendentals_runs_its_pass_in_stages():
    x, y = T(64, 300, seed=45), T(64, 300, seed=46)
    f = lambda x, y: chain8(x, y).sum(-1)  # noqa: E731
    info = inductor(f, x, y)
    src = info["source"]
    # sin and cos results cross stages (the pass is written twice: split over threads, and not)
    assert len(set(re.findall(r"float c\d+\[1024\];", src))) == 2
    assert re.search(r"#pragma omp simd reduction\(\+ : part\d+\)", src)
    check_same(info["run"](x, y), f(x, y), rtol=1e-5, atol=1e-5)


def test_a_bool_buffer_is_read_as_bytes_and_selects_as_eager():
    # GCC vectorizes a byte compare where a bool load kept the loop slow (a causal mask's
    # softmax): the kernel reads the mask through unsigned char, `in[j] != 0`
    rng = np.random.default_rng(60)
    mask = mini.from_numpy(rng.random((64, 64)) < 0.5)
    x = T(8, 64, 64, seed=61)
    f = lambda x, m: x.masked_fill(m, float("-inf")).softmax(-1) + mini.where(m, x, 2.0)  # noqa: E731
    info = inductor(f, x, mask)
    assert re.search(r"const unsigned char\* in\d+ = \(const unsigned char\*\)buffers", info["source"])
    assert re.search(r"\(in\d+\[[^\]]*\] != 0\)", info["source"])
    check_same(info["run"](x, mask), f(x, mask))
