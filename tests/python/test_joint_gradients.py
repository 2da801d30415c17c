"""Gradients of compiled training graphs, op by op (an OpInfo-style sweep of the joint graph).

For every op of mini's op list (mini._C._op_list(), the OpKinds of mini/tensor/op.h) that
has a derivative rule, CASES holds programs over rank combinations: 0-d where legal, 1-D,
2-D, batched 3-D and 4-D, broadcast batch dims, size-1 dims, transposed (non-contiguous)
inputs, and inputs of which only some require grad. Each program runs eagerly and under
"aot_eager" and "inductor"; a scalar loss sum(out * w) with fixed random weights w makes
every output element matter. The compiled gradients must equal eager's (and be None exactly
where eager's are), and eager's must equal central finite differences in float64, so that a
rule wrong in both worlds is caught too.

A new op fails test_every_op_with_a_derivative_has_cases until it gets cases here (or is
listed as having no gradient, with the reason).
"""
import re

import numpy as np
import pytest

import mini
import mini.nn.functional as F
from capture_helpers import fresh_mini  # noqa: F401  (autouse: mini.reset() around each test)
from conftest import to_np

BACKENDS = ["aot_eager", "inductor"]

# Ops without a gradient, and why (tests/cpp/test_derivatives.cpp checks eager records none).
NO_GRADIENT = {
    **{op: "a comparison: a bool result" for op in ("eq", "ne", "lt", "le", "gt", "ge")},
    "nonzero": "integer positions",
    "detach": "stops the gradient by design",
}
# Ops that only a derivative rule makes: they are never in a captured (forward) graph, and the
# joint graph does no double backward. Their rules: tests/cpp/test_derivatives.cpp.
BACKWARD_ONLY = {
    "gelu_backward": "gelu's derivative",
    "slice_backward": "slice's and select's derivative",
    "embedding_backward": "embedding's derivative",
    "attention_backward": "the fused attention's derivative",
}


@pytest.fixture(autouse=True)
def attention_as_one_node():
    # F.scaled_dot_product_attention as one Attention node on the CPU too ("auto" takes it on
    # CUDA bfloat16 only), so that the sweep reaches its rule
    with mini.config.patch(fused_attention="always"):
        yield


# ---- inputs -------------------------------------------------------------------------------------

class Arg:
    """One input of a case: its shape, its values ("spread": distinct, none within a small
    margin of 0 or of each other, so kinks and ties are far from every finite difference;
    "positive"; "index:n": int64 in [0, n); "bool"), whether it requires grad, and whether it
    is passed transposed (its last two dims swapped: a non-contiguous view)."""

    def __init__(self, shape, grad=True, kind="spread", transposed=False):
        self.shape, self.grad, self.kind, self.transposed = tuple(shape), grad, kind, transposed

    def __repr__(self):
        text = "x".join(map(str, self.shape)) if self.shape else "0d"
        return text + ("T" if self.transposed else "") + ("" if self.grad or self.kind != "spread" else "c")

    def values(self, seed):
        rng = np.random.default_rng(seed)
        n = int(np.prod(self.shape, dtype=np.int64))
        if self.kind.startswith("index:"):
            return rng.integers(0, int(self.kind[6:]), self.shape).astype(np.int64)
        if self.kind == "bool":
            return rng.random(self.shape) < 0.5
        step = 3.0 / max(n, 4)
        spread = (rng.permutation(n) - (n - 1) / 2 + 0.3 + 0.17 * (seed % 3)) * step
        if self.kind == "positive":
            spread = 0.6 + np.abs(spread) + 0.05 * rng.random(n)
        return spread.reshape(self.shape)

    def tensor(self, seed, dtype):
        return self.tensor_of(self.values(seed), dtype)

    def tensor_of(self, a, dtype):
        if self.transposed:  # stored with its last two dims swapped, seen through a transpose
            t = mini.tensor(np.ascontiguousarray(np.swapaxes(a, -1, -2)).tolist(), dtype=self.dtype(dtype))
            t = t.transpose(-1, -2).detach()
            assert not t.is_contiguous()
        else:
            t = mini.tensor(a.tolist(), dtype=self.dtype(dtype))
        return t.requires_grad_() if self.grad and self.kind in ("spread", "positive") else t

    def dtype(self, float_dtype):
        return {"bool": mini.bool}.get(self.kind, mini.int64 if self.kind.startswith("index:") else float_dtype)


def A(*shape, grad=True, kind="spread", t=False):
    return Arg(shape, grad, kind, t)


class Case:
    """A program and its inputs. finite_differences=False for an output rounded to float32,
    whose finite differences in float64 see that rounding."""

    def __init__(self, label, fn, *args, finite_differences=True):
        self.label, self.fn, self.args, self.finite_differences = label, fn, args, finite_differences

    def __repr__(self):
        return f"{self.label}({', '.join(map(repr, self.args))})"


# ---- the catalog --------------------------------------------------------------------------------

UNARY = [A(), A(5), A(3, 4), A(2, 3, 4), A(2, 1, 3, 1), A(3, 4, t=True), A(2, 3, 4, t=True)]
# broadcasting pairs; which side requires grad rotates (both, the first, the second)
BINARY = [(A(), A(3, 4)), (A(5), A(5, grad=False)), (A(3, 4, grad=False), A(4)), (A(3, 1), A(1, 4)),
          (A(1, 4, 5), A(3, 1, 5, grad=False)), (A(2, 3, 4, t=True), A(2, 3, 4)),
          (A(2, 1, 3, 4, grad=False), A(5, 3, 4, t=True)), (A(3, 4), A())]
MATMUL = [(A(4), A(4)), (A(4), A(4, 5)), (A(3, 4), A(4)), (A(4), A(3, 4, 5)), (A(3, 4, 5), A(5)),
          (A(3, 4), A(4, 5)), (A(3, 4, t=True), A(4, 5, t=True)), (A(2, 3, 4), A(2, 4, 5)),
          (A(3, 4), A(2, 4, 5)), (A(2, 3, 4), A(4, 5)), (A(2, 3, 4, t=True), A(4, 5)),
          (A(2, 1, 3, 4), A(5, 4, 6)), (A(1, 4, 5), A(3, 5, 6)), (A(4, grad=False), A(3, 4, 5)),
          (A(3, 4, 5), A(5, grad=False)), (A(2, 3, 4, grad=False), A(4, 5)), (A(3, 4), A(2, 4, 5, grad=False))]


def unary(name, fn, kind="spread", args=UNARY):
    return [Case(name, fn, Arg(a.shape, a.grad, kind, a.transposed)) for a in args]


def binary(name, fn, second="spread"):
    return [Case(name, fn, a, Arg(b.shape, b.grad, second, b.transposed)) for a, b in BINARY]


def reductions(name):
    r = lambda x, *a, **k: getattr(x, name)(*a, **k)  # noqa: E731
    return [Case(f"{name}()", lambda x: r(x), a) for a in UNARY] + [
        Case(f"{name}(0)", lambda x: r(x, 0), A()),
        Case(f"{name}(0)", lambda x: r(x, 0), A(5)),
        Case(f"{name}(0)", lambda x: r(x, 0), A(3, 4, t=True)),
        Case(f"{name}(-1, keepdim)", lambda x: r(x, -1, keepdim=True), A(3, 4)),
        Case(f"{name}((0, 2), keepdim)", lambda x: r(x, (0, 2), keepdim=True), A(2, 3, 4)),
        Case(f"{name}((0, 2))", lambda x: r(x, (0, 2)), A(2, 3, 4, t=True)),
        Case(f"{name}(1)", lambda x: r(x, 1), A(2, 1, 3, 2)),
        Case(f"{name}(-1)", lambda x: r(x, -1), A(2, 3, 1)),
    ]


def softmaxes(name, fn):
    return [Case(f"{name}(-1)", lambda x: fn(x, -1), A(5)), Case(f"{name}(0)", lambda x: fn(x, 0), A(3, 4)),
            Case(f"{name}(1)", lambda x: fn(x, 1), A(2, 3, 4)), Case(f"{name}(-1)", lambda x: fn(x, -1), A(3, 4, t=True)),
            Case(f"{name}(1)", lambda x: fn(x, 1), A(2, 1, 3)), Case(f"{name}(0)", lambda x: fn(x, 0), A(2, 3, 4, t=True))]


CASES = {
    "add": binary("add", lambda x, y: x + y) + [Case("x + 2", lambda x: x + 2, A(3, 4))],
    "sub": binary("sub", lambda x, y: x - y) + [Case("2 - x", lambda x: 2 - x, A(3, 4))],
    "mul": binary("mul", lambda x, y: x * y) + [Case("x * x", lambda x: x * x, A(2, 3, t=True))],
    "div": binary("div", lambda x, y: x / y, second="positive") + [Case("1 / x", lambda x: 1 / x, A(3, 4, kind="positive"))],
    "pow": [Case("pow", lambda x, y: x ** y, Arg(a.shape, a.grad, "positive", a.transposed), b) for a, b in BINARY]
    + [Case("x ** 2", lambda x: x ** 2, A(3, 4)), Case("x ** 0.5", lambda x: x ** 0.5, A(3, 4, kind="positive")),
       Case("2 ** x", lambda x: 2 ** x, A(3, 4))],
    "maximum": binary("maximum", lambda x, y: mini.maximum(x, y)),
    "minimum": binary("minimum", lambda x, y: mini.minimum(x, y)),
    "neg": unary("neg", lambda x: -x),
    "abs": unary("abs", lambda x: x.abs()),
    "exp": unary("exp", lambda x: x.exp()),
    "log": unary("log", lambda x: x.log(), "positive"),
    "sin": unary("sin", lambda x: x.sin()),
    "cos": unary("cos", lambda x: x.cos()),
    "tanh": unary("tanh", lambda x: x.tanh()),
    "sigmoid": unary("sigmoid", lambda x: x.sigmoid()),
    "relu": unary("relu", lambda x: x.relu()),
    "sqrt": unary("sqrt", lambda x: x.sqrt(), "positive"),
    "rsqrt": unary("rsqrt", lambda x: x.rsqrt(), "positive"),
    "sign": unary("sign", lambda x: x.sign() * x),
    "gelu": unary("gelu", F.gelu) + unary("gelu tanh", lambda x: F.gelu(x, approximate="tanh"), args=UNARY[2:4]),
    "to": unary("to(float64)", lambda x: x.to(mini.float64) * 3, args=UNARY[:4])
    + [Case("to(float32)", lambda x: (x.double() * x.double()).float(), A(2, 3, t=True), finite_differences=False)],
    "clone": unary("clone", lambda x: x.clone()),
    "where": [Case("where", lambda c, x, y: mini.where(c, x, y), A(3, 4, kind="bool"), A(3, 4), A(4)),
              Case("where", lambda c, x, y: mini.where(c, x, y), A(3, 1, kind="bool"), A(1, 4, grad=False), A()),
              Case("where", lambda c, x, y: mini.where(c, x, y), A(2, 3, 4, kind="bool"), A(3, 4, t=True), A(2, 1, 1)),
              Case("where(x > 0, x, 0)", lambda x: mini.where(x > 0, x, 0.0), A(2, 3, 4))],
    "sum": reductions("sum"),
    "mean": reductions("mean"),
    "amax": reductions("amax"),
    "amin": reductions("amin"),
    "reshape": [Case("reshape(6, 2)", lambda x: x.reshape(6, 2), A(3, 4)),
                Case("reshape(1, 1)", lambda x: x.reshape(1, 1), A()),
                Case("reshape(-1)", lambda x: x.reshape(-1), A(2, 3, 4, t=True)),
                Case("reshape(3, 2, 2)", lambda x: x.reshape(3, 2, 2), A(3, 4, t=True)),
                Case("view(2, 12)", lambda x: x.view(2, 12), A(2, 3, 4)),
                Case("reshape(())", lambda x: x.reshape(()), A(1, 1))],
    "transpose": [Case("transpose(0, 1)", lambda x: x.transpose(0, 1) * 2, A(3, 4)),
                  Case("transpose(-1, -3)", lambda x: x.transpose(-1, -3) * 2, A(2, 3, 4)),
                  Case("t()", lambda x: x.t() * 2, A(3, 4, t=True)),
                  Case("mT", lambda x: x.mT * 2, A(2, 1, 3, 4))],
    "permute": [Case("permute(2, 0, 1)", lambda x: x.permute(2, 0, 1) * 2, A(2, 3, 4)),
                Case("permute(1, 0)", lambda x: x.permute(1, 0) * 2, A(3, 4, t=True)),
                Case("permute(3, 1, 0, 2)", lambda x: x.permute(3, 1, 0, 2) * 2, A(2, 1, 3, 4)),
                Case("T", lambda x: x.T * 2, A(2, 3, 4))],
    "unsqueeze": [Case("unsqueeze(0)", lambda x: x.unsqueeze(0) * 2, A()),
                  Case("unsqueeze(-1)", lambda x: x.unsqueeze(-1) * 2, A(3, 4)),
                  Case("x[None]", lambda x: x[None] * 2, A(3, 4, t=True)),
                  Case("unsqueeze(1)", lambda x: x.unsqueeze(1) * 2, A(2, 3, 4))],
    "squeeze": [Case("squeeze()", lambda x: x.squeeze() * 2, A(2, 1, 3, 1)),
                Case("squeeze(1)", lambda x: x.squeeze(1) * 2, A(2, 1, 3)),
                Case("squeeze()", lambda x: x.squeeze() * 2, A(1)),
                Case("squeeze(1)", lambda x: x.squeeze(1) * 2, A(2, 1, 3, 4, t=True))],
    "expand": [Case("expand(2, 3, 4)", lambda x: x.expand(2, 3, 4) * 2, A(3, 1)),
               Case("expand(3)", lambda x: x.expand(3) * 2, A()),
               Case("expand(3, 4)", lambda x: x.expand(3, 4) * 2, A(1, 4)),
               Case("expand(2, -1, -1)", lambda x: x.expand(2, -1, -1) * 2, A(1, 3, 4, t=True)),
               Case("expand(2, 3, 4) * y", lambda x, y: x.expand(2, 3, 4) * y, A(3, 1), A(2, 3, 4))],
    "slice": [Case("x[1:3]", lambda x: x[1:3] * 2, A(5)),
              Case("x[:, ::2]", lambda x: x[:, ::2] * 2, A(3, 5)),
              Case("x[..., 1:]", lambda x: x[..., 1:] * 2, A(2, 3, 4, t=True)),
              Case("x[:, 1:2]", lambda x: x[:, 1:2] * 2, A(2, 3, 4)),
              Case("x[1:3, 1:]", lambda x: x[1:3, 1:] * 2, A(3, 4, t=True))],
    "select": [Case("x[1]", lambda x: x[1] * 2, A(3, 4)),
               Case("x[:, -1]", lambda x: x[:, -1] * 2, A(2, 3, 4, t=True)),
               Case("x[..., 0]", lambda x: x[..., 0] * 2, A(2, 3, 4)),
               Case("x[2]", lambda x: x[2] * 2, A(5)),
               Case("x[1, 0]", lambda x: x[1, 0] * 2, A(2, 1, 3, 4))],
    "matmul": [Case("x @ w", lambda x, w: x @ w, a, b) for a, b in MATMUL]
    + [Case("mm", lambda x, w: x.mm(w), A(3, 4), A(4, 5, t=True)),
       Case("matmul", lambda x, w: mini.matmul(x, w), A(4), A(2, 4, 3))],
    "softmax": softmaxes("softmax", lambda x, d: x.softmax(d)) + [Case("F.softmax", lambda x: F.softmax(x, -1), A(2, 3, 4))],
    "log_softmax": softmaxes("log_softmax", lambda x, d: x.log_softmax(d)),
    "layer_norm": [Case("layer_norm", lambda x: F.layer_norm(x, (4,)), A(3, 4)),
                   Case("layer_norm", lambda x: F.layer_norm(x, (4,)), A(4)),
                   Case("layer_norm w b", lambda x, w, b: F.layer_norm(x, (4,), w, b), A(2, 3, 4), A(4), A(4)),
                   Case("layer_norm w b", lambda x, w, b: F.layer_norm(x, (3, 4), w, b), A(2, 3, 4, t=True), A(3, 4), A(3, 4)),
                   Case("layer_norm w", lambda x, w: F.layer_norm(x, (4,), w), A(3, 4, grad=False), A(4)),
                   Case("layer_norm b", lambda x, b: F.layer_norm(x, (4,), None, b), A(2, 1, 4), A(4)),
                   Case("layer_norm w b", lambda x, w, b: F.layer_norm(x, (4,), w, b), A(3, 4, t=True), A(4), A(4, grad=False))],
    "mse_loss": [Case(f"mse_loss {r}", lambda x, y, r=r: F.mse_loss(x, y, reduction=r), a, b)
                 for r in ("mean", "sum", "none")
                 for a, b in [(A(3, 4), A(3, 4)), (A(3, 4, t=True), A(3, 4, grad=False)), (A(5), A(5)), (A(), A())]],
    "slice_scatter": [Case("slice_scatter dim 0", lambda x, s: mini.slice_scatter(x, s, 0, 1, 3), A(4, 5), A(2, 5)),
                      Case("slice_scatter step 2", lambda x, s: mini.slice_scatter(x, s, 1, 0, 5, 2), A(3, 5), A(3, 3)),
                      Case("slice_scatter 3-D", lambda x, s: mini.slice_scatter(x, s, -1, 1, 3), A(2, 3, 4, t=True), A(2, 3, 2)),
                      Case("slice_scatter src only", lambda x, s: mini.slice_scatter(x, s, 0, 0, 1), A(2, 3, grad=False), A(1, 3))],
    "embedding": [Case("embedding", lambda i, w: F.embedding(i, w), A(5, kind="index:6"), A(6, 4)),
                  Case("embedding", lambda i, w: F.embedding(i, w), A(2, 3, kind="index:4"), A(4, 3)),
                  Case("embedding", lambda i, w: F.embedding(i, w), A(kind="index:4"), A(4, 3)),
                  Case("embedding", lambda i, w: F.embedding(i, w), A(3, 2, kind="index:5"), A(5, 3, t=True))],
    "attention": [Case("attention", lambda q, k, v: F.scaled_dot_product_attention(q, k, v), A(2, 5, 4), A(2, 5, 4), A(2, 5, 4)),
                  Case("attention causal", lambda q, k, v: F.scaled_dot_product_attention(q, k, v, is_causal=True),
                       A(2, 3, 5, 4), A(2, 3, 5, 4, t=True), A(2, 3, 5, 3)),
                  Case("attention L != S", lambda q, k, v: F.scaled_dot_product_attention(q, k, v, is_causal=True, scale=0.3),
                       A(3, 4), A(6, 4), A(6, 2, grad=False)),
                  Case("attention k, v only", lambda q, k, v: F.scaled_dot_product_attention(q, k, v),
                       A(2, 4, 3, grad=False), A(2, 5, 3), A(2, 5, 3))],
    # composites: Python functions built from the ops above. gather, index_select and a list or
    # tensor index check the indices' range on the host (a graph break): the values around
    # them are compiled, and their gradients cross the break
    "gather": [Case("gather", lambda x, i: (x * 2).gather(1, i).sin(), A(3, 4), A(3, 2, kind="index:4")),
               Case("gather", lambda x, i: (x * 2).gather(0, i).sin(), A(3, 4, t=True), A(2, 4, kind="index:3"))],
    "index_select": [Case("index_select", lambda x, i: x.exp().index_select(0, i) * 2, A(4, 3), A(5, kind="index:4")),
                     Case("index_select", lambda x, i: x.exp().index_select(-1, i) * 2, A(2, 3, 4), A(2, kind="index:4"))],
    "advanced indexing": [Case("x[i]", lambda x, i: (x * 2)[i].sin(), A(4, 3), A(5, kind="index:4")),
                          Case("x[:, [0, 2, 2]]", lambda x: (x * 2)[:, [0, 2, 2]].sin(), A(2, 3, 4, t=True))],
    "cat": [Case("cat", lambda x, y: mini.cat([x, y], 0), A(2, 3), A(1, 3)),
            Case("stack", lambda x, y: mini.stack([x, y], -1), A(2, 3, t=True), A(2, 3))],
    "masked_fill": [Case("masked_fill", lambda x, m: x.masked_fill(m, 0.5), A(3, 4), A(3, 4, kind="bool")),
                    Case("tril", lambda x: x.tril(), A(2, 3, 3))],
    "linear": [Case("F.linear", lambda x, w, b: F.linear(x, w, b), A(2, 3, 4), A(5, 4), A(5)),
               Case("F.linear 1-D", lambda x, w: F.linear(x, w), A(4), A(5, 4))],
    "cross_entropy": [Case("cross_entropy", lambda x, t: F.cross_entropy(x, t), A(3, 5), A(3, kind="index:5"))],
}


# ---- running a group of cases -------------------------------------------------------------------

def program(cases):
    """One function running every case of a group on its own inputs: one compile per group."""
    fns = [c.fn for c in cases]
    counts = [len(c.args) for c in cases]

    def run(*inputs):
        outs, k = [], 0
        for fn, n in zip(fns, counts):
            outs.append(fn(*inputs[k:k + n]))
            k += n
        return tuple(outs)
    return run


def inputs_of(cases, dtype):
    return [a.tensor(1000 * c + i, dtype) for c, case in enumerate(cases) for i, a in enumerate(case.args)]


def weights_for(outputs):
    """Fixed random weights per output, so that the loss sum(out * w) depends on every element."""
    return [np.random.default_rng(7 + k).standard_normal(tuple(o.shape)) for k, o in enumerate(outputs)]


def loss_of(outputs, weights):
    total = 0
    for o, w in zip(outputs, weights):
        if o.dtype.is_floating_point:
            total = total + (o * mini.tensor(w.tolist(), dtype=o.dtype)).sum()
    return total


def gradients(fn, cases, dtype):
    """The .grad of every input after backward of the weighted loss (None where not reached)."""
    inputs = inputs_of(cases, dtype)
    outputs = fn(*inputs)
    loss_of(outputs, weights_for(outputs)).backward()
    return [None if not x.requires_grad or x.grad is None else x.grad for x in inputs]


def input_names(cases):
    return [f"{c!r} input {i}" for c in cases for i in range(len(c.args))]


# ---- the tests ----------------------------------------------------------------------------------

def test_every_op_with_a_derivative_has_cases():
    ops = dict(mini._C._op_list())
    for name in list(NO_GRADIENT) + list(BACKWARD_ONLY):
        assert name in ops, f"{name} is listed here but is not an op any more"
    missing = [name for name, kind in ops.items()
               if kind != "Factory" and name not in NO_GRADIENT and name not in BACKWARD_ONLY and not CASES.get(name)]
    assert not missing, f"ops with a derivative rule but no case in CASES: {missing}"


@pytest.mark.parametrize("group", [g for g in CASES if g in dict(mini._C._op_list())])
def test_each_case_captures_its_op(group):
    # what the sweep claims to test is there: the op is a node of each case's captured graph
    for case in CASES[group]:
        mini.reset()  # cases share a lambda: each is captured afresh, not recompiled up to the limit
        seen = set()

        def record(gm, example_inputs):
            seen.update(n.target for n in gm.graph.nodes if n.op == "call_function")
            return gm
        mini.compile(case.fn, backend=record)(*[a.tensor(3, mini.float32) for a in case.args])
        assert f"mini.{group}" in seen, f"{case!r}: the captured graphs hold {sorted(seen)}"


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("group", list(CASES))
def test_compiled_gradients_match_eager(group, backend, capsys):
    cases = CASES[group]
    want = gradients(program(cases), cases, mini.float32)
    mini.set_logs("aot_graphs")
    got = gradients(mini.compile(program(cases), backend=backend), cases, mini.float32)
    mini.set_logs()
    err = capsys.readouterr().err
    # a rule that fails makes the graph run with eager kernels: right, and not what is tested
    assert "Backward graph" in err and "runs with eager kernels" not in err, err
    for name, g, w in zip(input_names(cases), got, want):
        assert (g is None) == (w is None), f"{name}: compiled .grad {g!r}, eager {w!r}"
        if w is None:
            continue
        assert tuple(g.shape) == tuple(w.shape) and g.dtype == w.dtype, name
        w_np = to_np(w)
        scale = max(1.0, float(np.abs(w_np).max(initial=0)))
        np.testing.assert_allclose(to_np(g), w_np, rtol=1e-4, atol=1e-5 * scale, err_msg=name)


@pytest.mark.parametrize("group", list(CASES))
def test_eager_gradients_match_finite_differences(group):
    eps = 1e-6
    for case in [c for c in CASES[group] if c.finite_differences]:
        run = program([case])
        grads = gradients(run, [case], mini.float64)
        base = inputs_of([case], mini.float64)
        weights = weights_for(run(*base))
        for i, (arg, g) in enumerate(zip(case.args, grads)):
            if g is None:
                continue
            x = arg.values(i).astype(np.float64)  # inputs_of's seed for case 0
            numeric = np.zeros(x.size)
            for j in range(x.size):
                loss = []
                for sign in (1, -1):
                    xj = x.copy().reshape(-1)
                    xj[j] += sign * eps
                    inputs = list(base)
                    inputs[i] = arg.tensor_of(xj.reshape(x.shape), mini.float64)
                    with mini.no_grad():
                        loss.append(float(loss_of(run(*inputs), weights)))
                numeric[j] = (loss[0] - loss[1]) / (2 * eps)
            np.testing.assert_allclose(to_np(g).reshape(-1), numeric, rtol=1e-5, atol=1e-6,
                                       err_msg=f"{case!r} input {i}")


# ---- which inputs get a .grad -------------------------------------------------------------------
# Eager autograd leaves .grad None on a leaf that backward never reaches. A compiled call is one
# autograd node for all its outputs: when the loss reads only some of them, the others' tangents
# are zero-filled for the backward graph, and the inputs reached only through those must still
# get no gradient (they got zeros). A leaf that is reached, with a gradient of zeros, gets zeros.

def _no_grad_scale(x, y):
    with mini.no_grad():
        z = y * 2
    return x * z


def _across_a_gather(x, y, i):
    a, b = x * 2, y * 3  # both outputs of the graph before the break
    return a.gather(1, i), b + 1


def _across_an_index_select(x, y, i):
    a, b = x.exp(), y.sin()
    return a.index_select(0, i) * 2, b * 2


def _across_an_index(x, y, i):
    a, b = x * 2, y * 3
    return a[i], b.sum()


def _float(*shape):
    return lambda: A(*shape).tensor(len(shape) * 7 + shape[-1], mini.float32)


def _index(n, *shape):
    return lambda: A(*shape, kind=f"index:{n}").tensor(5, mini.float32)


# name: (fn, inputs, the outputs the loss reads, the inputs that get a .grad)
REACH = {
    "an output not in the loss": (lambda x, y: (x * 2, y * 3), [_float(3, 4), _float(4)], [0], [0]),
    "a value across gather's graph break, not in the loss":
        (_across_a_gather, [_float(3, 4), _float(3), _index(4, 3, 2)], [0], [0]),
    "a value across index_select's graph break, not in the loss":
        (_across_an_index_select, [_float(4, 3), _float(2, 3), _index(4, 5)], [0], [0]),
    "a value across a tensor index's graph break, not in the loss":
        (_across_an_index, [_float(4, 3), _float(5), _index(4, 5)], [0], [0]),
    "a leaf only in an index computation":
        (lambda x, y: x.index_select(0, (y > 0).long()) * 2, [_float(3, 4), _float(5)], [0], [0]),
    "a leaf only in a tensor index": (lambda x, y: (x * 2)[(y * 0).long()], [_float(3, 4), _float(5)], [0], [0]),
    "a leaf only in a where condition": (lambda x, y: mini.where(y > 0, x * 2, 0.0), [_float(3, 4), _float(3, 4)], [0], [0]),
    "a leaf only under no_grad": (_no_grad_scale, [_float(3, 4), _float(3, 4)], [0], [0]),
    "a leaf only through detach": (lambda x, y: x * y.detach(), [_float(3, 4), _float(4)], [0], [0]),
    "a leaf only through argmax": (lambda x, y: x[:, 0] * y.argmax(), [_float(3, 4), _float(5)], [0], [0]),
    # reached: zeros
    "a leaf reached with a zero gradient": (lambda x, y: x * 0 + y.sign(), [_float(3, 4), _float(3, 4)], [0], [0, 1]),
    "one leaf reached with zeros, the other not":
        (lambda x, y: (x * y, y * 0), [_float(3, 4), _float(3, 4)], [1], [1]),
    # one output computed from another: each one's gradient reaches what it reads
    "the first of two chained outputs": (lambda x, y: (lambda a: (a, a * y))(x * 2), [_float(3, 4), _float(4)], [0], [0]),
    "the second of two chained outputs": (lambda x, y: (lambda a: (a, a * y))(x * 2), [_float(3, 4), _float(4)], [1], [0, 1]),
    "both outputs in the loss": (lambda x, y: (x * 2, y * 3), [_float(3, 4), _float(4)], [0, 1], [0, 1]),
}


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("name", list(REACH))
def test_compiled_backward_reaches_the_inputs_eager_reaches(name, backend, capsys):
    fn, makers, used, reached = REACH[name]
    mini.set_logs("aot_graphs")
    results = []
    for run in (fn, mini.compile(fn, backend=backend)):
        inputs = [make() for make in makers]
        outputs = run(*inputs)
        outputs = outputs if isinstance(outputs, tuple) else (outputs,)
        loss_of([outputs[k] for k in used], weights_for([outputs[k] for k in used])).backward()
        results.append([x.grad if x.requires_grad else None for x in inputs])
    mini.set_logs()
    assert "Backward graph" in capsys.readouterr().err  # the compiled run had a compiled backward
    for k, (w, g) in enumerate(zip(*results)):
        assert (w is not None) == (k in reached), f"input {k}: eager .grad {w!r}"
        assert (g is None) == (w is None), f"input {k}: compiled .grad {g!r}, eager {w!r}"
        if w is not None:
            np.testing.assert_allclose(to_np(g), to_np(w), rtol=1e-5, atol=1e-6, err_msg=f"input {k}")


# ---- where a rule's formula is 0 * inf ------------------------------------------------------------

@pytest.mark.parametrize("backend", ["eager"] + BACKENDS)
def test_pow_gradients_where_the_formula_is_nan_are_torchs(backend):
    # d(x ** y)/dx = y * x ** (y - 1) is 0 * inf at x = 0, y = 0: torch gives 0 (x ** 0 is 1
    # everywhere); d/dy = x ** y * log(x) is 0 * -inf at x = 0, y >= 0: torch gives 0 (0 ** y is
    # 0 for y > 0). Finite differences cannot see these points, so the values are written out.
    run = (lambda f: f) if backend == "eager" else (lambda f: mini.compile(f, backend=backend))
    x = mini.tensor([0.0, 0.0, 4.0, 0.0], requires_grad=True)
    y = mini.tensor([0.0, 2.0, 0.5, -1.0], requires_grad=True)
    run(lambda x, y: (x ** y).sum())(x, y).backward()
    np.testing.assert_allclose(to_np(x.grad), [0.0, 0.0, 0.25, -np.inf])  # -1 * 0 ** -2
    np.testing.assert_allclose(to_np(y.grad), [0.0, 0.0, 2 * np.log(4.0), -np.inf])  # inf * -inf
    z = mini.tensor([0.0, 3.0], requires_grad=True)
    run(lambda z: (z ** 0).sum() + (z ** 2).sum())(z).backward()
    np.testing.assert_allclose(to_np(z.grad), [0.0, 6.0])
