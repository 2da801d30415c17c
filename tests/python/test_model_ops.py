"""Ops real model files use, written as compositions of mini's ops (issue 15, section 1):
split and chunk (views), tril and triu (a mask from two aranges), F.cross_entropy (log_softmax
and a one-hot select). Each against a numpy reference, with gradients, eager and compiled in
one graph.

    PYTHONPATH=build/python .venv/bin/python -m pytest tests/python/test_model_ops.py
"""
import numpy as np
import pytest

import mini
import mini.nn.functional as F
from conftest import CUDA_SKIP_REASON, HAS_CUDA, to_np


def data(*shape, seed=0):
    return np.random.default_rng(seed).standard_normal(shape).astype(np.float32)


def test_split_and_chunk_are_views_of_the_right_pieces():
    a = data(5, 7)
    x = mini.from_numpy(a.copy())
    pieces = x.split(3, dim=1)
    assert [tuple(p.shape) for p in pieces] == [(5, 3), (5, 3), (5, 1)]
    np.testing.assert_array_equal(to_np(pieces[2]), a[:, 6:7])
    sized = mini.split(x, [1, 4], dim=0)
    np.testing.assert_array_equal(to_np(sized[1]), a[1:5])
    chunks = x.chunk(3, dim=-1)  # ceil(7 / 3) = 3 columns each: 3, 3, 1 (as torch)
    assert [tuple(c.shape) for c in chunks] == [(5, 3), (5, 3), (5, 1)]
    assert len(mini.chunk(mini.ones(10), 4)) == 4 and len(mini.ones(2).chunk(5)) == 2
    pieces[0].fill_(0.0)  # a view: writing it writes x
    assert np.all(to_np(x)[:, :3] == 0)
    with pytest.raises(ValueError, match="sum exactly to 5"):
        x.split([2, 2], dim=0)
    with pytest.raises(IndexError, match="Dimension out of range"):
        x.split(2, dim=2)


def test_split_gradients_reach_each_piece():
    x = mini.from_numpy(data(4, 6)).requires_grad_()
    q, k, v = x.split(2, dim=1)  # the attention habit: one projection split three ways
    (q * 1.0 + k * 2.0 + v * 3.0).sum().backward()
    np.testing.assert_array_equal(to_np(x.grad), np.repeat([[1, 1, 2, 2, 3, 3]], 4, axis=0).astype(np.float32))


@pytest.mark.parametrize("diagonal", [-1, 0, 2])
def test_tril_and_triu_match_numpy_on_batched_input(diagonal):
    a = data(2, 4, 5, seed=1)
    x = mini.from_numpy(a).requires_grad_()
    np.testing.assert_array_equal(to_np(x.tril(diagonal).detach()), np.tril(a, diagonal))
    np.testing.assert_array_equal(to_np(mini.triu(x, diagonal).detach()), np.triu(a, diagonal))
    x.tril(diagonal).sum().backward()
    np.testing.assert_array_equal(to_np(x.grad), np.tril(np.ones_like(a), diagonal))
    with pytest.raises(ValueError, match="at least 2 dimensions"):
        mini.ones(3).tril()


def reference_cross_entropy(logits, target, ignore_index, reduction):
    z = logits.astype(np.float64)
    logp = z - z.max(-1, keepdims=True)
    logp = logp - np.log(np.exp(logp).sum(-1, keepdims=True))
    keep = target != ignore_index
    nll = np.where(keep, -logp[np.arange(len(target)), np.where(keep, target, 0)], 0.0)
    return {"none": nll, "sum": nll.sum(), "mean": nll.sum() / keep.sum()}[reduction]


@pytest.mark.parametrize("reduction", ["mean", "sum", "none"])
def test_cross_entropy_matches_the_reference_with_ignored_rows(reduction):
    logits = data(6, 5, seed=2) * 3
    target = np.array([0, 4, -1, 2, 2, -1])
    x = mini.from_numpy(logits).requires_grad_()
    loss = F.cross_entropy(x, mini.tensor(target.tolist()), ignore_index=-1, reduction=reduction)
    want = reference_cross_entropy(logits, target, -1, reduction)
    np.testing.assert_allclose(to_np(loss.detach()), want, rtol=1e-5, atol=1e-6)
    (loss if reduction != "none" else loss.sum()).backward()
    # d loss / d logits = (softmax - onehot) per counted row, / rows counted for the mean
    p = np.exp(logits - logits.max(-1, keepdims=True))
    p /= p.sum(-1, keepdims=True)
    keep = target != -1
    onehot = np.eye(5)[np.where(keep, target, 0)]
    g = (p - onehot) * keep[:, None]
    if reduction == "mean":
        g /= keep.sum()
    np.testing.assert_allclose(to_np(x.grad), g, rtol=1e-4, atol=1e-6)


def test_cross_entropy_refuses_what_it_cannot_do_by_name():
    x = mini.randn(3, 4)
    assert np.isnan(to_np(F.cross_entropy(x, mini.tensor([0, 7, 1]), reduction="none"))[1])  # 7 >= 4 classes
    nll = to_np(F.cross_entropy(x, mini.tensor([-5, 3, -100]), reduction="none"))  # -5: out of range
    assert np.isnan(nll[0]) and np.isfinite(nll[1]) and nll[2] == 0.0          # -100: ignored
    compiled = mini.compile(lambda x, t: F.cross_entropy(x, t, reduction="none"), backend="inductor")
    nll = to_np(compiled(x, mini.tensor([4, -1, 0])))
    assert np.isnan(nll[0]) and np.isnan(nll[1]) and np.isfinite(nll[2])
    with pytest.raises(TypeError, match="int64 class indices"):
        F.cross_entropy(x, mini.tensor([0.0, 1.0, 2.0]))
    with pytest.raises(ValueError, match=r"logits.view\(-1, logits.size\(-1\)\)"):
        F.cross_entropy(mini.randn(2, 3, 4), mini.tensor([[0, 1, 2], [0, 1, 2]]))
    with pytest.raises(ValueError, match="not a valid value for reduction"):
        F.cross_entropy(x, mini.tensor([0, 1, 2]), reduction="avg")


def gpt_style_loss(x, wq, targets):
    # causal attention scores masked with tril, softmax, a projection, cross-entropy of the
    # flattened logits: the pieces a GPT's forward puts together
    q, k, v = (x @ wq).split(x.shape[-1], dim=-1)
    t = x.shape[1]
    scores = (q @ k.transpose(-2, -1)) * (1.0 / x.shape[-1] ** 0.5)
    mask = mini.ones(t, t).tril() == 0
    att = scores.masked_fill(mask, float("-inf")).softmax(-1)
    logits = att @ v
    return F.cross_entropy(logits.view(-1, logits.size(-1)), targets.view(-1), ignore_index=-1)


def test_a_gpt_style_loss_compiles_in_one_graph_and_matches_eager_with_gradients():
    b, t, c = 2, 5, 8
    x = mini.from_numpy(data(b, t, c, seed=3))
    wq = mini.from_numpy(data(c, 3 * c, seed=4) * 0.3).requires_grad_()
    targets = mini.tensor(np.random.default_rng(5).integers(0, c, size=(b, t)).tolist())
    targets[0, 0] = -1
    eager = gpt_style_loss(x, wq, targets)
    eager.backward()
    want_grad = to_np(wq.grad)
    wq.grad = None
    mini.reset()
    compiled = mini.compile(gpt_style_loss, fullgraph=True)
    got = compiled(x, wq, targets)
    np.testing.assert_allclose(to_np(got.detach()), to_np(eager.detach()), rtol=1e-5)
    got.backward()
    np.testing.assert_allclose(to_np(wq.grad), want_grad, rtol=1e-4, atol=1e-6)


def test_split_chunk_tril_triu_capture_as_the_same_ops_eager_runs():
    def f(x):
        a, b = x.chunk(2, dim=-1)
        c, d, e = x.split([1, 2, 3], dim=-1)
        return a.triu(1) + b.tril(-1), c + d.sum(-1, keepdim=True) + e.mean(-1, keepdim=True)

    x = mini.from_numpy(data(3, 4, 6, seed=6))
    want = f(x)
    graphs = []

    def backend(gm, example_inputs):
        graphs.append(gm)
        return gm.forward

    mini.reset()
    got = mini.compile(f, backend=backend, fullgraph=True)(x)
    assert len(graphs) == 1
    for g, w in zip(got, want):
        np.testing.assert_array_equal(to_np(g), to_np(w))
    mini.reset()
    got = mini.compile(f, backend="inductor", fullgraph=True)(x)  # and through generated code
    for g, w in zip(got, want):
        np.testing.assert_allclose(to_np(g), to_np(w), rtol=1e-6)
    with pytest.raises(Exception, match="sum exactly to 6"):
        mini.reset()
        mini.compile(lambda x: x.split([1, 2], dim=-1), fullgraph=True)(x)


def test_embedding_picks_rows_and_adds_gradients_back_for_repeated_indices():
    w0 = data(6, 4, seed=7)
    idx = np.array([[0, 5, 5], [2, 0, 5]])
    w = mini.from_numpy(w0.copy()).requires_grad_()
    y = F.embedding(mini.tensor(idx.tolist()), w)
    np.testing.assert_array_equal(to_np(y.detach()), w0[idx])
    g = data(2, 3, 4, seed=8)
    y.backward(mini.from_numpy(g))
    want = np.zeros_like(w0)
    np.add.at(want, idx.ravel(), g.reshape(-1, 4))
    np.testing.assert_allclose(to_np(w.grad), want, rtol=1e-6)
    layer = mini.nn.Embedding(10, 3)
    assert tuple(layer(mini.tensor([1, 2])).shape) == (2, 3) and repr(layer) == "Embedding(10, 3)"


def test_embedding_refuses_bad_indices_by_name():
    w = mini.randn(4, 2)
    with pytest.raises(IndexError, match="index 4 is out of range for 4 rows"):
        F.embedding(mini.tensor([0, 4]), w)
    with pytest.raises(IndexError, match="index -1 is out of range"):
        F.embedding(mini.tensor([-1]), w)
    with pytest.raises(TypeError, match="indices must be int64"):
        F.embedding(mini.tensor([0.0, 1.0]), w)
    with pytest.raises(NotImplementedError, match="padding_idx"):
        F.embedding(mini.tensor([0]), w, padding_idx=0)


class TinyGPTLoss(mini.nn.Module):
    """Token and position embeddings, one causal attention head, a tied output head,
    cross-entropy of the next token: what a GPT's training step computes, at toy width."""

    def __init__(self, vocab=11, width=8, block=6):
        super().__init__()
        self.wte, self.wpe = mini.nn.Embedding(vocab, width), mini.nn.Embedding(block, width)
        self.qkv = mini.nn.Linear(width, 3 * width)
        self.ln = mini.nn.LayerNorm(width)
        self.register_buffer("mask", mini.ones(block, block).tril() == 0)

    def forward(self, idx, targets):
        b, t = idx.shape
        x = self.wte(idx) + self.wpe(mini.arange(t))
        q, k, v = self.qkv(self.ln(x)).split(x.shape[-1], dim=-1)
        att = (q @ k.transpose(-2, -1)) * (1.0 / x.shape[-1] ** 0.5)
        att = att.masked_fill(self.mask[:t, :t], float("-inf")).softmax(-1)
        logits = (x + att @ v) @ self.wte.weight.t()
        return F.cross_entropy(logits.view(-1, logits.size(-1)), targets.view(-1), ignore_index=-1)


def test_a_tiny_gpt_step_compiles_in_one_graph_with_eager_gradients():
    mini.manual_seed(3)
    model = TinyGPTLoss()
    rng = np.random.default_rng(9)
    idx = mini.tensor(rng.integers(0, 11, size=(2, 6)).tolist())
    targets = mini.tensor(rng.integers(0, 11, size=(2, 6)).tolist())
    losses, grads = [], []
    for fn in (model, mini.compile(model, fullgraph=True)):
        model.zero_grad()
        loss = fn(idx, targets)
        loss.backward()
        losses.append(float(loss.item()))
        grads.append({n: to_np(p.grad) for n, p in model.named_parameters()})
    np.testing.assert_allclose(losses[1], losses[0], rtol=1e-5)
    assert np.isfinite(losses[0]) and losses[0] > 0
    for n in grads[0]:
        np.testing.assert_allclose(grads[1][n], grads[0][n], rtol=1e-4, atol=1e-6, err_msg=n)


# ---- ~, argmax / argmin, cat / stack, slice_scatter, scaled_dot_product_attention ---------------

def test_invert_is_logical_not_for_bool_and_bitwise_not_for_integers():
    m = mini.tensor([[True, False], [False, True]])
    np.testing.assert_array_equal(to_np(~m), [[False, True], [True, False]])
    np.testing.assert_array_equal(to_np(~mini.tensor([0, 5, -3])), ~np.array([0, 5, -3]))
    with pytest.raises(TypeError, match="only for bool and integer"):
        ~mini.ones(2)
    f = mini.compile(lambda m, i: ((~m).long().sum(), ~i), fullgraph=True)
    got = f(m, mini.tensor([1, -2]))
    assert got[0].item() == 2 and to_np(got[1]).tolist() == [-2, 1]


def test_and_or_of_bool_masks_match_numpy_eagerly_and_compiled():
    a_np = np.array([[True, False], [False, True], [True, True]])
    b_np = np.array([[True, True], [False, False], [False, True]])
    a, b = mini.from_numpy(a_np.copy()), mini.from_numpy(b_np.copy())
    np.testing.assert_array_equal(to_np(a & b), a_np & b_np)
    np.testing.assert_array_equal(to_np(a | b), a_np | b_np)
    np.testing.assert_array_equal(to_np(True & a), a_np)       # a Python bool on either side
    np.testing.assert_array_equal(to_np(a | False), a_np)
    np.testing.assert_array_equal(to_np(a & mini.from_numpy(b_np[:1].copy())), a_np & b_np[:1])  # broadcast
    f = mini.compile(lambda a, b: ((a & b) | ~b, False | a), fullgraph=True)
    got = f(a, b)
    np.testing.assert_array_equal(to_np(got[0]), (a_np & b_np) | ~b_np)
    np.testing.assert_array_equal(to_np(got[1]), a_np)
    with pytest.raises(TypeError, match=r"only for bool tensors in mini.*\(a > 0\) & \(b > 0\)"):
        mini.tensor([1, 2]) & mini.tensor([3, 4])
    with pytest.raises(TypeError, match="only for bool tensors"):
        mini.compile(lambda x: x | x)(mini.ones(2))


def test_argmax_and_argmin_pick_the_first_extreme_and_a_nan_as_numpy():
    a = np.array([[1, 3, 3, 0], [np.nan, 1, 2, np.nan], [-1, -5, -5, 2]], dtype=np.float32)
    x = mini.from_numpy(a.copy())
    np.testing.assert_array_equal(to_np(x.argmax(1)), np.argmax(a, 1))  # ties: the first; NaN wins
    np.testing.assert_array_equal(to_np(x.argmin(-1)), np.argmin(a, -1))
    np.testing.assert_array_equal(to_np(mini.argmax(x, 0, keepdim=True)), np.argmax(a, 0)[None])
    assert x.argmax().item() == np.argmax(a) and mini.argmin(x).item() == np.argmin(a)
    b = data(3, 4, 5, seed=4)
    np.testing.assert_array_equal(to_np(mini.from_numpy(b).argmax(1)), np.argmax(b, 1))
    # compiled: the reductions and a where, in one graph, as eager
    f = mini.compile(lambda x: (x.argmax(-1), x.argmin(0), x.argmax()), fullgraph=True)
    for g, w in zip(f(x), (np.argmax(a, -1), np.argmin(a, 0), np.argmax(a))):
        np.testing.assert_array_equal(to_np(g), w)


def test_cat_and_stack_match_numpy_and_send_each_input_its_slice_of_the_gradient():
    a, b, c = data(2, 3, seed=1), data(2, 1, seed=2), data(2, 2, seed=3)
    xs = [mini.from_numpy(v.copy()).requires_grad_() for v in (a, b, c)]
    out = mini.cat(xs, dim=1)
    np.testing.assert_array_equal(to_np(out.detach()), np.concatenate([a, b, c], 1))
    weight = mini.from_numpy(data(2, 6, seed=5))
    (out * weight).sum().backward()
    w = to_np(weight)
    for x, (lo, hi) in zip(xs, ((0, 3), (3, 4), (4, 6))):
        np.testing.assert_array_equal(to_np(x.grad), w[:, lo:hi])
    s = mini.stack([xs[0], xs[0] * 2], dim=-1)
    np.testing.assert_array_equal(to_np(s.detach()), np.stack([a, a * 2], -1))
    assert tuple(mini.stack((xs[1], xs[1]), 0).shape) == (2, 2, 1) and mini.concat is mini.cat
    with pytest.raises(TypeError, match="non-empty list"):
        mini.cat([])
    with pytest.raises(RuntimeError, match="same number of dimensions and dtype"):
        mini.cat([xs[0], mini.ones(2, 3, dtype=mini.int64)], 1)
    with pytest.raises(RuntimeError, match="equal size"):
        mini.stack([xs[0], xs[1]])


def test_cat_and_stack_compile_in_one_graph_with_eager_gradients():
    def f(a, b):
        return (mini.cat((a.relu(), b * 2), dim=-1).sum(0) + mini.stack([a, a], 0).mean()).sum()

    def run(fn):
        a = mini.from_numpy(data(3, 4, seed=6)).requires_grad_()
        b = mini.from_numpy(data(3, 2, seed=7)).requires_grad_()
        loss = fn(a, b)
        loss.backward()
        return to_np(loss.detach()), to_np(a.grad), to_np(b.grad)

    for g, w in zip(run(mini.compile(f, fullgraph=True)), run(f)):
        np.testing.assert_allclose(g, w, rtol=1e-6, atol=1e-6)


def test_slice_scatter_writes_src_into_a_copy():
    base, src = data(4, 6, seed=8), data(4, 2, seed=9)
    got = mini.slice_scatter(mini.from_numpy(base.copy()), mini.from_numpy(src), dim=1, start=-4, end=-2)
    want = base.copy()
    want[:, 2:4] = src
    np.testing.assert_array_equal(to_np(got), want)


def sdpa_reference(q, k, v, mask=None, causal=False, scale=None):
    scale = q.shape[-1] ** -0.5 if scale is None else scale
    s = q @ np.swapaxes(k, -1, -2) * scale
    if causal:
        s = np.where(np.triu(np.ones((q.shape[-2], k.shape[-2]), bool), 1), -np.inf, s)
    elif mask is not None:
        s = np.where(mask, s, -np.inf) if mask.dtype == bool else s + mask
    e = np.exp(s - s.max(-1, keepdims=True))
    return (e / e.sum(-1, keepdims=True)) @ v


@pytest.mark.parametrize("case", ["plain", "causal", "causal_L_ne_S", "bool_mask", "float_mask", "scale"])
def test_scaled_dot_product_attention_matches_the_reference(case):
    L, S = (3, 5) if case == "causal_L_ne_S" else (4, 4)
    q, k, v = data(2, 2, L, 8, seed=10), data(2, 2, S, 8, seed=11), data(2, 2, S, 6, seed=12)
    kwargs, ref = {}, {}
    if case.startswith("causal"):
        kwargs, ref = {"is_causal": True}, {"causal": True}
    if case == "bool_mask":
        m = np.random.default_rng(13).random((L, S)) > 0.3
        m[:, 0] = True  # every query attends somewhere
        kwargs, ref = {"attn_mask": mini.from_numpy(m)}, {"mask": m}
    if case == "float_mask":
        m = data(L, S, seed=14)
        kwargs, ref = {"attn_mask": mini.from_numpy(m)}, {"mask": m}
    if case == "scale":
        kwargs, ref = {"scale": 0.3}, {"scale": 0.3}
    got = F.scaled_dot_product_attention(mini.from_numpy(q), mini.from_numpy(k), mini.from_numpy(v), **kwargs)
    np.testing.assert_allclose(to_np(got), sdpa_reference(q, k, v, **ref), rtol=1e-5, atol=1e-5)


def test_scaled_dot_product_attention_compiles_in_one_graph_with_eager_gradients():
    def attend(q, k, v):
        return F.scaled_dot_product_attention(q, k, v, is_causal=True).pow(2).sum()

    def run(fn):
        qkv = [mini.from_numpy(data(2, 3, 5, 4, seed=s)).requires_grad_() for s in (15, 16, 17)]
        loss = fn(*qkv)
        loss.backward()
        return [to_np(loss.detach())] + [to_np(t.grad) for t in qkv]

    counter = mini.CompileCounter()
    compiled = mini.compile(attend, backend=counter, fullgraph=True)
    for g, w in zip(run(compiled), run(attend)):
        np.testing.assert_allclose(g, w, rtol=1e-5, atol=1e-5)
    assert counter.frame_count == 1
    with pytest.raises(RuntimeError, match="must not be set when is_causal"):
        F.scaled_dot_product_attention(mini.ones(1, 2, 2), mini.ones(1, 2, 2), mini.ones(1, 2, 2),
                                       attn_mask=mini.ones(2, 2, dtype=mini.bool), is_causal=True)


def test_gather_index_select_and_list_indices_match_numpy_with_gradients():
    a = data(3, 4, 5, seed=20)
    x = mini.from_numpy(a.copy()).requires_grad_()
    idx = np.random.default_rng(21).integers(0, 4, size=(3, 2, 5))
    got = x.gather(1, mini.from_numpy(idx))
    np.testing.assert_array_equal(to_np(got.detach()), np.take_along_axis(a, idx, 1))
    got.sum().backward()
    want = np.zeros_like(a)
    np.add.at(want, (np.arange(3)[:, None, None], idx, np.arange(5)[None, None, :]), 1.0)
    np.testing.assert_array_equal(to_np(x.grad), want)  # a row picked twice gets both gradients
    sel = mini.index_select(x, 2, mini.tensor([4, 0, -1]))
    np.testing.assert_array_equal(to_np(sel.detach()), np.take(a, [4, 0, -1], axis=2))
    np.testing.assert_array_equal(to_np(x[:, [-1], :].detach()), a[:, [-1], :])  # nanoGPT's last position
    np.testing.assert_array_equal(to_np(x[:, 1:, mini.tensor([3, 1])].detach()), a[:, 1:, [3, 1]])
    with pytest.raises(IndexError, match="boolean mask gives a shape"):
        x[x > 0]
    with pytest.raises(IndexError, match="index 4 is out of range for dim 1 of size 4"):
        x.gather(1, mini.tensor([[[4]]] * 3))  # never a silent 0
    with pytest.raises(IndexError, match=r"index_select\(\): index -6 is out of range for dim 2 of size 5"):
        mini.index_select(x, 2, mini.tensor([-6]))
    with pytest.raises(IndexError, match="one list or tensor index"):
        x[[0], [1]]
    with pytest.raises(IndexError, match="list of bools is a boolean mask"):
        x[:, [True, False, True, False]]  # not rows 1, 0, 1, 0


def test_boolean_mask_assignment_fills_in_place():
    a = data(2, 6, seed=22)
    x = mini.from_numpy(a.copy())
    v = x.topk(3).values[:, [-1]]
    x[x < v] = -float("inf")  # nanoGPT's top-k sampling filter
    want = a.copy()
    want[a < np.sort(a, -1)[:, -3:-2]] = -np.inf
    np.testing.assert_array_equal(to_np(x), want)
    with pytest.raises(IndexError, match="boolean mask"):
        x[[0, 1]] = 0.0


def test_topk_matches_numpy_and_carries_a_gradient():
    a = data(3, 7, seed=23)
    a[0, 2] = a[0, 5]  # a tie: the earlier position first, as a stable sort
    x = mini.from_numpy(a.copy()).requires_grad_()
    values, indices = mini.topk(x, 3, dim=1)
    order = np.argsort(-a, axis=1, kind="stable")[:, :3]
    np.testing.assert_array_equal(to_np(indices), order)
    np.testing.assert_array_equal(to_np(values.detach()), np.take_along_axis(a, order, 1))
    values.sum().backward()
    want = np.zeros_like(a)
    np.put_along_axis(want, order, 1.0, 1)
    np.testing.assert_array_equal(to_np(x.grad), want)
    low = x.topk(2, dim=0, largest=False).indices
    np.testing.assert_array_equal(to_np(low), np.argsort(a, axis=0, kind="stable")[:2])
    with pytest.raises(RuntimeError, match="must be between 0"):
        x.topk(8)


def test_multinomial_draws_by_weight_repeatably_and_refuses_bad_weights():
    p = mini.tensor([[0.0, 1.0, 3.0, 0.0], [5.0, 0.0, 0.0, 5.0]])
    mini.manual_seed(3)
    draws = to_np(mini.multinomial(p, 4000, replacement=True))
    mini.manual_seed(3)
    np.testing.assert_array_equal(to_np(p.multinomial(4000, replacement=True)), draws)  # the same seed
    counts = np.stack([np.bincount(r, minlength=4) for r in draws])
    assert counts[0, 0] == counts[0, 3] == counts[1, 1] == counts[1, 2] == 0  # weight 0: never drawn
    assert abs(counts[0, 2] / 4000 - 0.75) < 0.03 and abs(counts[1, 0] / 4000 - 0.5) < 0.03
    once = to_np(mini.multinomial(mini.ones(5, 6), 6))  # without replacement: each class once a row
    assert all(sorted(r) == list(range(6)) for r in once)
    assert tuple(mini.multinomial(mini.ones(6), 2).shape) == (2,)
    with pytest.raises(RuntimeError, match="element < 0"):
        mini.multinomial(mini.tensor([1.0, -1.0]), 1)
    with pytest.raises(RuntimeError, match="without replacement"):
        mini.multinomial(mini.ones(3), 4)


# ---- on the GPU: the embedding kernels, and the compositions above ---------------------------

@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
@pytest.mark.cuda
@pytest.mark.skipif(not HAS_CUDA, reason=CUDA_SKIP_REASON)
def test_embedding_on_cuda_matches_the_cpu_with_repeated_indices(dtype):
    w_cpu = mini.from_numpy(data(7, 5, seed=30)).to(getattr(mini, dtype))
    idx_cpu = mini.tensor([[3, 0, 3], [6, 3, 1]])
    grads = []
    for device in ("cpu", "cuda"):
        w = w_cpu.to(device).detach().requires_grad_()  # a leaf of its own on each device
        out = F.embedding(idx_cpu.to(device), w)
        assert out.device.type == device and out.dtype == w.dtype
        (out.float() * mini.arange(5, device=device).float()).sum().backward()
        grads.append((to_np(out.detach().cpu().float()), to_np(w.grad.cpu().float())))
    np.testing.assert_array_equal(grads[1][0], grads[0][0])  # rows copied exactly
    np.testing.assert_allclose(grads[1][1], grads[0][1], rtol=1e-2 if dtype == "bfloat16" else 1e-6)
    with pytest.raises(IndexError, match="index 7 is out of range for 7 rows"):
        F.embedding(mini.tensor([7], device="cuda"), w_cpu.cuda())
    with pytest.raises(RuntimeError, match="move both to one device"):
        F.embedding(mini.tensor([0]), w_cpu.cuda())


@pytest.mark.cuda
@pytest.mark.skipif(not HAS_CUDA, reason=CUDA_SKIP_REASON)
def test_embedding_backward_on_cuda_sorts_on_the_device_and_adds_in_position_order():
    # 5000 positions over 300 rows (about 17 a row, some rows never picked): the GPU sorts the
    # positions by row and adds each row's gradients in position order, so float32 sums equal
    # the CPU's loop bit for bit, and two runs agree bit for bit
    rng = np.random.default_rng(33)
    idx_np = rng.integers(0, 300, size=(5, 1000))
    idx_np[0, :50] = 299  # a long run of one row
    g_np = rng.standard_normal((5, 1000, 48)).astype(np.float32)
    grads = {}
    for device in ("cpu", "cuda", "cuda again"):
        dev = device.split()[0]
        w = mini.zeros(300, 48, device=dev).requires_grad_()
        F.embedding(mini.tensor(idx_np, device=dev), w).backward(mini.tensor(g_np, device=dev))
        grads[device] = to_np(w.grad.cpu())
    np.testing.assert_array_equal(grads["cuda"], grads["cpu"])
    np.testing.assert_array_equal(grads["cuda again"], grads["cuda"])
    assert not grads["cpu"][np.setdiff1d(np.arange(300), idx_np)].any()


@pytest.mark.cuda
@pytest.mark.skipif(not HAS_CUDA, reason=CUDA_SKIP_REASON)
def test_the_model_ops_run_on_cuda_as_on_the_cpu():
    a = data(3, 6, seed=31)
    results = []
    for device in ("cpu", "cuda"):
        x = mini.from_numpy(a.copy()).to(device).requires_grad_()
        parts = (mini.cat([x, x * 2], 1), mini.stack([x, x], 0), x.argmax(1), x.topk(2).values,
                 x.gather(1, mini.tensor([[0], [5], [2]], device=device)), x[:, [-1]],
                 F.scaled_dot_product_attention(x[None], x[None], x[None], is_causal=True))
        sum(p.float().sum() for p in parts if p.dtype != mini.int64).backward()
        results.append([to_np(p.detach().cpu()) for p in parts] + [to_np(x.grad.cpu())])
    for g, w in zip(results[1], results[0]):
        np.testing.assert_allclose(g, w, rtol=1e-5, atol=1e-5)


def test_the_function_forms_of_split_chunk_tril_and_triu_compile_without_a_break():
    def f(x):
        a, b = mini.split(x, 2, dim=0)
        c, d = mini.chunk(x, 2, dim=1)
        return a + b, c * d, mini.tril(x, -1) + mini.triu(x, 1)

    x = mini.from_numpy(data(4, 4, seed=21))
    explained = mini.explain(f)(x)
    assert explained.graph_count == 1 and not explained.break_reasons, explained.break_reasons
    for got, want in zip(mini.compile(f, fullgraph=True)(x), f(x)):
        np.testing.assert_array_equal(to_np(got), to_np(want))
