"""F.scaled_dot_product_attention inside mini.compile as one Attention node: an extern call to
the fused kernel (FlashAttention-2 on CUDA bfloat16), its backward one AttentionBackward call
that rebuilds the softmax from the saved log-sum-exp, as Inductor calls aten's flash attention.
mini.config.fused_attention says where ("auto": CUDA bfloat16 with head dim 64 or 128; "always":
wherever the fused kernel runs, which lets the CPU test the mechanism; "never": the matmuls and
softmax). What is checked: the graphs (one node a call, the lse saved, no [L, S] tensor saved),
gradients against a float64 reference and against the decomposition, the copies of transposed
heads as one generated kernel on CUDA, and the fallbacks (mask, dropout, dynamic sizes).

    PYTHONPATH=build/python .venv/bin/python -m pytest tests/python/test_attention_node.py
"""
import re

import numpy as np
import pytest

import mini
import mini.inductor as inductor
import mini.nn.functional as F
from capture_helpers import fresh_mini  # noqa: F401  (autouse: mini.reset() around each test)
from conftest import CUDA_SKIP_REASON, HAS_CUDA, to_np


def data(*shape, seed=0):
    return np.random.default_rng(seed).standard_normal(shape)


def reference(q, k, v, causal, scale, g):
    """float64 attention and its three gradients for the incoming gradient g."""
    s = q @ np.swapaxes(k, -1, -2) * scale
    if causal:
        s = np.where(np.triu(np.ones(s.shape[-2:], bool), 1), -np.inf, s)
    p = np.exp(s - s.max(-1, keepdims=True))
    p /= p.sum(-1, keepdims=True)
    dv = np.swapaxes(p, -1, -2) @ g
    dp = g @ np.swapaxes(v, -1, -2)
    ds = p * (dp - (dp * p).sum(-1, keepdims=True))
    return p @ v, (ds @ k * scale, np.swapaxes(ds, -1, -2) @ q * scale, dv)


def heads(x):
    """[B, T, H, D] -> [B, H, T, D], a transposed view, as a GPT passes its heads."""
    return x.transpose(1, 2)


def attend(q, k, v):
    return F.scaled_dot_product_attention(heads(q), heads(k), heads(v), is_causal=True)


def graph_text(fn, *args):
    return str(mini.explain(fn)(*args))


def aot_log(fn, args, capsys, backend="inductor"):
    """Runs fn compiled, forward and backward, with aot_graphs and fusion logged; the log."""
    mini.set_logs("aot_graphs,fusion")
    try:
        out = mini.compile(fn, backend=backend)(*args)
        out.sum().backward()
    finally:
        mini.set_logs()
    return capsys.readouterr().err


def leaves(shape, seeds, dtype=mini.float64, device="cpu"):
    return [mini.tensor(data(*shape, seed=s), dtype=dtype, device=device).requires_grad_() for s in seeds]


# ---- the policy --------------------------------------------------------------------------------

def test_auto_decomposes_on_the_cpu_and_always_makes_one_node():
    args = [mini.ones(2, 5, 3, 4) for _ in range(3)]
    auto = graph_text(attend, *args)
    assert "mini.attention(" not in auto and "softmax" in auto and "matmul" in auto
    mini.reset()
    with mini.config.patch(fused_attention="always"):
        always = graph_text(attend, *args)
    assert always.count("mini.attention(") == 1 and "softmax" not in always and "matmul" not in always
    assert "is_causal=True" in always and "scale=0.5" in always


def test_never_keeps_the_decomposition_and_a_bad_value_is_refused():
    with mini.config.patch(fused_attention="never"):
        assert "mini.attention(" not in graph_text(attend, *[mini.ones(2, 5, 3, 4) for _ in range(3)])
    with pytest.raises(ValueError, match="fused_attention must be one of 'auto', 'always', 'never'"):
        mini.config.fused_attention = "flash"
    assert mini.config.fused_attention == "auto"


@pytest.mark.parametrize("kind", ["mask", "dropout"])
def test_a_mask_or_dropout_is_written_as_its_ops_even_under_always(kind):
    def masked(q, k, v):
        mask = mini.ones(5, 5, dtype=mini.bool).tril()
        return F.scaled_dot_product_attention(q, k, v, attn_mask=mask)

    def dropped(q, k, v):
        return F.scaled_dot_product_attention(q, k, v, dropout_p=0.5)
    with mini.config.patch(fused_attention="always"):
        text = graph_text(masked if kind == "mask" else dropped, *[mini.ones(2, 5, 4) for _ in range(3)])
    assert "mini.attention(" not in text and "softmax" in text


# ---- the training graphs ---------------------------------------------------------------------

@pytest.mark.parametrize("partitioner", ["recompute", "min-cut"])
def test_forward_saves_output_and_lse_and_backward_is_one_call(partitioner, capsys):
    args = leaves((2, 7, 3, 4), (1, 2, 3))
    with mini.config.patch(fused_attention="always", partitioner=partitioner):
        log = aot_log(attend, args, capsys)
    forward = log[log.index("Forward graph"):log.index("Backward graph")]
    backward = log[log.index("Backward graph"):log.index("fusion decisions")]
    # the forward: one node for each output of the call, both returned for the backward
    assert re.search(r"attention: .* = mini\.attention\(.*output=0\)", forward), forward
    assert re.search(r"attention_1: \"f64\[2, 3, 7\].* = mini\.attention\(.*output=1\)", forward), forward
    # the backward: dq, dk, dv, one node each, from q, k, v, the output, the lse and the gradient
    assert backward.count("mini.attention_backward(") == 3, backward
    assert "mini.attention(" not in backward  # the lse is saved, not computed again
    # what is saved is no [7, 7] score matrix: the output and the lse (the rest are inputs)
    saved = int(re.search(r"values saved for backward \((\d+) bytes of intermediates", log).group(1))
    assert saved == (2 * 3 * 7 * 4 + 2 * 3 * 7) * 8, log
    # and each call runs once: the other outputs are filled by it
    assert "attention_1: computed by the call of attention (one attention call, 2 outputs)" in log
    assert log.count("computed by the call of attention_backward (one attention_backward call, 3 outputs)") == 2


# aot_eager traces A1's rules (Attention's among them) into the joint graph and runs them as they
# are: A1's; inductor also needs the partitioner and the code generator, so it is no one's
@pytest.mark.parametrize("backend", [pytest.param("aot_eager", marks=pytest.mark.a1), "inductor"])
@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
def test_compiled_attention_matches_float64_and_the_decomposition(backend, causal):
    def loss(q, k, v):
        return (F.scaled_dot_product_attention(heads(q), heads(k), heads(v), is_causal=causal) * w).sum()
    w = mini.tensor(data(2, 3, 9, 5, seed=4))
    results = {}
    for policy in ("always", "never"):
        mini.reset()
        q, k, v = leaves((2, 9, 3, 5), (1, 2, 3))
        with mini.config.patch(fused_attention=policy):
            out = mini.compile(loss, backend=backend)(q, k, v)
        out.backward()
        results[policy] = [to_np(out.detach())] + [to_np(t.grad) for t in (q, k, v)]
    qn, kn, vn = (np.swapaxes(data(2, 9, 3, 5, seed=s), 1, 2) for s in (1, 2, 3))
    ref_out, ref_grads = reference(qn, kn, vn, causal, 5 ** -0.5, to_np(w))
    want = [(ref_out * to_np(w)).sum()] + [np.swapaxes(g, 1, 2) for g in ref_grads]
    for policy, got in results.items():
        for name, a, b in zip(["loss", "dq", "dk", "dv"], got, want):
            np.testing.assert_allclose(a, b, rtol=1e-9, atol=1e-11, err_msg=f"{policy} {name}")


def test_under_autocast_the_node_computes_in_bfloat16_and_backward_returns_float32(capsys):
    q, k, v = leaves((2, 6, 2, 8), (5, 6, 7), dtype=mini.float32)
    with mini.config.patch(fused_attention="always"), mini.autocast("cpu", dtype=mini.bfloat16):
        log = aot_log(attend, (q, k, v), capsys, backend="aot_eager")
    assert re.search(r"attention: \"bf16\[2, 2, 6, 8\].* = mini\.attention\(", log), log
    assert all(t.grad is not None and t.grad.dtype == mini.float32 for t in (q, k, v))


def test_dynamic_sizes_fall_back_to_the_decomposition():
    def fn(q, k, v):
        return F.scaled_dot_product_attention(q, k, v, is_causal=True)
    graphs = []

    def record(gm, example_inputs):
        graphs.append(str(gm.code) if hasattr(gm, "code") else gm.print_readable(print_output=False))
        return gm.forward
    compiled = mini.compile(fn, backend=record)
    with mini.config.patch(fused_attention="always"):
        for L in (5, 7):  # the second call makes L a symbol (automatic dynamic)
            q, k, v = (mini.tensor(data(2, L, 4, seed=s), dtype=mini.float64) for s in (1, 2, 3))
            got = compiled(q, k, v)
            want, _ = reference(*(to_np(t) for t in (q, k, v)), True, 0.5, np.zeros((2, L, 4)))
            np.testing.assert_allclose(to_np(got), want, rtol=1e-10)
    assert len(graphs) == 2 and "attention(" in graphs[0] and "attention(" not in graphs[1], graphs


# ---- CUDA: FlashAttention as the extern call --------------------------------------------------

needs_nvrtc = pytest.mark.skipif(inductor.nvrtc_version() is None, reason="this build has no CUDA toolkit (NVRTC)")


def gpt_attention(x, w_qkv):
    """A GPT block's attention: one projection, split into heads (transposed views)."""
    B, T, C = x.shape
    q, k, v = (x @ w_qkv).split(C, dim=2)
    q = q.view(B, T, 4, C // 4).transpose(1, 2)
    k = k.view(B, T, 4, C // 4).transpose(1, 2)
    v = v.view(B, T, 4, C // 4).transpose(1, 2)
    y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
    return y.transpose(1, 2).contiguous().view(B, T, C).float().pow(2).mean()


@needs_nvrtc
def test_on_cuda_flash_reads_the_heads_in_place_and_attention_is_one_call():
    graphs = []

    def backend(gm, example_inputs):
        graphs.append(gm)
        return gm.forward
    x = mini.randn(2, 8, 256, dtype=mini.bfloat16)
    w = mini.randn(256, 768, dtype=mini.bfloat16, requires_grad=True)
    with mini.config.patch(fused_attention="always"):
        mini.compile(gpt_attention, backend=backend, fullgraph=True)(x, w)
    info = mini._C._inductor_compile_training_cuda(graphs[0], "sm_90")
    fwd, bwd = info["forward_decisions"], info["backward_decisions"]
    assert any("computed by the call of attention (one attention call, 2 outputs)" in d for d in fwd), fwd
    assert sum("computed by the call of attention_backward" in d for d in bwd) == 2, bwd
    # q, k and v are transposed views of one projection, which the flash kernels read in place;
    # the output is written as [B, T, H, D], so the model's transpose(1, 2).contiguous() copies
    # nothing: no copy kernel in either graph (the forward's one kernel is the loss)
    kernels = info["forward_kernels"] + info["backward_kernels"]
    assert not [k for k in kernels if "clone" in k], kernels
    assert info["forward_kernels"] == ["cuda_red_fused_mean_pow_to_0"], info["forward_kernels"]
    # the split's backward: the three gradients placed into the projection's gradient by one
    # generated kernel (padded loads), no extern slice_backward
    assert not [d for d in bwd if "slice_backward (slice_backward) is an extern call" in d], bwd
    assert [k for k in info["backward_kernels"] if "slice_backward" in k], info["backward_kernels"]
    # each piece is 256 columns wide: every 16-byte vector lies wholly in one piece, read as one
    assert "? *reinterpret_cast<const mini::Vec<mini::bf16, V>*>(&in" in info["backward_source"], info["backward_source"]


def test_attention_writes_its_output_in_the_layout_of_the_heads():
    x = mini.randn(2, 8, 3 * 4 * 16)
    q, k, v = x.split(64, dim=2)
    q, k, v = (t.view(2, 8, 4, 16).transpose(1, 2) for t in (q, k, v))
    with mini.config.patch(fused_attention="always"):
        graph = graph_text(lambda q, k, v: F.scaled_dot_product_attention(q, k, v, is_causal=True), q, k, v)
    # [2, 4, 8, 16] at strides of a [2, 8, 4, 16] buffer: the heads inside the rows, as q's are
    assert re.search(r'attention: "f32\[2, 4, 8, 16\]\[512, 16, 64, 1\]cpu" = mini\.attention\(', graph), graph
    out = F.scaled_dot_product_attention(q, k, v, is_causal=True)
    assert out.stride() == (512, 16, 64, 1) and out.transpose(1, 2).is_contiguous()


@pytest.mark.cuda
@pytest.mark.skipif(not HAS_CUDA, reason=CUDA_SKIP_REASON)
def test_a_compiled_gpt_attention_on_cuda_runs_flash_with_eager_gradients():
    def run(compiled):
        mini.manual_seed(0)
        x = mini.randn(2, 128, 256, device="cuda")
        w = (mini.randn(256, 768, device="cuda") * 0.05).requires_grad_()
        fn = mini.compile(gpt_attention, backend="inductor") if compiled else gpt_attention
        with mini.autocast("cuda", dtype=mini.bfloat16):
            loss = fn(x, w)
        loss.backward()
        return to_np(loss.detach()), to_np(w.grad)
    text = graph_text(gpt_attention, mini.randn(2, 128, 256, device="cuda"), mini.randn(256, 768, device="cuda"))
    assert text.count("mini.attention(") == 1, text  # float32, head dim 64: flash (3xTF32)
    with mini.autocast("cuda", dtype=mini.bfloat16):
        text = graph_text(gpt_attention, mini.randn(2, 128, 256, device="cuda"), mini.randn(256, 768, device="cuda"))
    assert text.count("mini.attention(") == 1, text  # bfloat16, head dim 64: flash
    x = mini.randn(2, 128, 100, device="cuda")
    text = graph_text(gpt_attention, x, mini.randn(100, 300, device="cuda"))
    assert "mini.attention(" not in text, text  # head dim 25: no flash kernel, decomposed under "auto"
    (l_c, g_c), (l_e, g_e) = run(True), run(False)
    np.testing.assert_allclose(l_c, l_e, rtol=2e-2)
    assert np.linalg.norm(g_c - g_e) / np.linalg.norm(g_e) < 2e-2


def gpt_attention_bias(x, w_qkv, b_qkv):
    """gpt_attention with the projection's bias: the split's backward feeds the bias gradient,
    a column sum, so its padded loads run in a column kernel."""
    B, T, C = x.shape
    q, k, v = (x @ w_qkv + b_qkv).split(C, dim=2)
    q, k, v = (t.view(B, T, 4, C // 4).transpose(1, 2) for t in (q, k, v))
    y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
    return y.transpose(1, 2).contiguous().view(B, T, C).float().pow(2).mean()


@pytest.mark.cuda
@pytest.mark.skipif(not HAS_CUDA, reason=CUDA_SKIP_REASON)
@pytest.mark.parametrize("C,autocast", [(256, True), (100, False)], ids=["bf16_flash", "f32_decomposed"])
def test_a_split_projections_bias_gradient_on_cuda_is_eagers(C, autocast):
    def run(compiled):
        mini.manual_seed(0)
        x = mini.randn(2, 128, C, device="cuda")
        w = (mini.randn(C, 3 * C, device="cuda") * 0.05).requires_grad_()
        b = (mini.randn(3 * C, device="cuda") * 0.05).requires_grad_()
        fn = mini.compile(gpt_attention_bias, backend="inductor") if compiled else gpt_attention_bias
        with mini.autocast("cuda", dtype=mini.bfloat16, enabled=autocast):
            loss = fn(x, w, b)
        loss.backward()
        return to_np(w.grad), to_np(b.grad)
    (w_c, b_c), (w_e, b_e) = run(True), run(False)
    assert np.linalg.norm(w_c - w_e) / np.linalg.norm(w_e) < 2e-2
    assert np.linalg.norm(b_c - b_e) / np.linalg.norm(b_e) < 2e-2
