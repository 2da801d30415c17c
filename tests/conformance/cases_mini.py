"""The project's own conformance cases: Python that torch.compile 2.11 captures (issue 10,
section 3), in the format of cases.py (make(T) -> dict; runner.py says what the dict may
hold), written against the tensor namespace T so the same code runs on torch and on mini.

Torch's numbers for these are measured by run_torch.py on torch 2.11 (scripts/gpu_compare.sh
writes them; notes/gpu_conformance.md says how) into expected_torch_2.11_mini.jsonl; a case
without a record there is run but not scored. Above each case, a PREDICTION of torch's
numbers (from the issue and ../shared/reference/dynamo.md, not measured): explain graphs
g/breaks b, compiles after each call, fullgraph. A measured record replaces it, never the
other way round.
"""

CASES = {}


def case(name, public=True):
    def deco(f):
        f.public = public
        CASES[name] = f
        return f
    return deco


def rnd(T, *shape):
    return T.randn(*shape)


# ------------------------------------------------------------------ in-place ops
# PREDICTION (not measured): g1 b0 [1] ok
@case("inplace_on_clone")
def _(T):
    def fn(x):
        y = x.clone()
        y.add_(1)
        y.mul_(2)
        return y.relu()
    return dict(fn=fn, calls=[((rnd(T, 8),), {})], explain=True)


# The mutation of the argument must be visible after the call: each call gets its own clone
# of x and the runner compares x after the call (mutates_args); fn also returns it.
# PREDICTION (not measured): g1 b0 [1, 1] ok
@case("inplace_on_input")
def _(T):
    def fn(x):
        x.add_(1)
        return x * 2, x
    x = rnd(T, 8)
    return dict(fn=fn, calls=[((x,), {}), ((x,), {})], explain=True, mutates_args=True)


# PREDICTION (not measured): g1 b0 [1] ok
@case("iadd_on_clone")
def _(T):
    def fn(x):
        y = x.clone()
        y += 1
        return y * 2
    return dict(fn=fn, calls=[((rnd(T, 8),), {})], explain=True)


# ------------------------------------------------------------ grad-mode blocks
# PREDICTION (not measured): g1 b0 [1] ok
@case("no_grad_block")
def _(T):
    def fn(x):
        with T.no_grad():
            y = x * 2
        z = y + x
        return z, y.requires_grad, z.requires_grad
    return dict(fn=fn, calls=[((T.randn(8, requires_grad=True),), {})], explain=True)


# PREDICTION (not measured): g1 b0 [1] ok
@case("enable_grad_in_no_grad")
def _(T):
    def fn(x):
        with T.no_grad():
            a = x * 2
            with T.enable_grad():
                b = x * 3
        return a + b, a.requires_grad, b.requires_grad
    return dict(fn=fn, calls=[((T.randn(8, requires_grad=True),), {})], explain=True)


# PREDICTION (not measured): g1 b0 [1, 2] ok (requires_grad is part of the tensor guard)
@case("requires_grad_intermediate")
def _(T):
    def fn(x):
        y = x * 2
        return y + 1, y.requires_grad
    return dict(fn=fn, calls=[((T.randn(8, requires_grad=True),), {}), ((rnd(T, 8),), {})],
                explain=True)


# ------------------------------------------------- functions defined and called inside
# PREDICTION (not measured): g1 b0 [1] ok
@case("inner_function")
def _(T):
    def fn(x):
        def g(t):
            return t * 2 + 1
        return g(x).relu()
    return dict(fn=fn, calls=[((rnd(T, 8),), {})], explain=True)


# PREDICTION (not measured): g1 b0 [1] ok
@case("inner_closure")
def _(T):
    def fn(x):
        scale = x.sum()

        def g(t):
            return t * scale
        return g(x) + 1
    return dict(fn=fn, calls=[((rnd(T, 8),), {})], explain=True)


# PREDICTION (not measured): g1 b0 [1] ok
@case("lambda_call")
def _(T):
    def fn(x):
        f = lambda t: t * 3  # noqa: E731 - the lambda is what is tested
        return f(x) - 1
    return dict(fn=fn, calls=[((rnd(T, 8),), {})], explain=True)


# A **kwargs call (CALL_FUNCTION_EX) of a function taking **kw.
# PREDICTION (not measured): g1 b0 [1] ok
@case("kwargs_call")
def _(T):
    def g(t, **kw):
        return t * kw["scale"] + kw["shift"]

    def fn(x):
        opts = {"scale": 2.0, "shift": 1.0}
        return g(x, **opts)
    return dict(fn=fn, calls=[((rnd(T, 8),), {})], explain=True)


# PREDICTION (not measured): g1 b0 [1] ok
@case("bound_method_of_object")
def _(T):
    class Scaler:
        def __init__(self, s):
            self.s = s

        def apply(self, t):
            return t * self.s

    obj = Scaler(3.0)

    def fn(x):
        return obj.apply(x) + 1
    return dict(fn=fn, calls=[((rnd(T, 8),), {})], explain=True)


# A counter in an enclosing scope, written by the compiled function. before_each sets it to 0
# before the compiled and before the eager call, so both start alike; state reads it after.
# PREDICTION (not measured): g1 b0 [1, 1, 1] ok
@case("nonlocal_counter")
def _(T):
    count = 0

    def fn(x):
        nonlocal count
        count += 1
        return x + count, count

    def reset():
        nonlocal count
        count = 0
    x = rnd(T, 8)
    return dict(fn=fn, calls=[((x,), {})] * 3, explain=True, before_each=reset,
                state=lambda: count)


# -------------------------------------------------------------- Python containers
# PREDICTION (not measured): g1 b0 [1] ok
@case("list_comprehension")
def _(T):
    def fn(x):
        ys = [x * i for i in range(3)]
        return ys[0] + ys[1] + ys[2]
    return dict(fn=fn, calls=[((rnd(T, 8),), {})], explain=True)


# PREDICTION (not measured): g1 b0 [1] ok
@case("dict_build_and_read")
def _(T):
    def fn(x):
        d = {"a": x * 2, "b": x + 1}
        d["c"] = d["a"] * d["b"]
        return d["c"] - d["a"]
    return dict(fn=fn, calls=[((rnd(T, 8),), {})], explain=True)


# Returns the dict itself.
# PREDICTION (not measured): g1 b0 [1] ok
@case("dict_comprehension")
def _(T):
    def fn(x):
        return {k: x * k for k in (1, 2, 3)}
    return dict(fn=fn, calls=[((rnd(T, 8),), {})], explain=True)


# *args, called with 2, 3 and 4 tensors: the length of args is guarded.
# PREDICTION (not measured): g1 b0 [1, 2, 3] ok
@case("varargs_counts")
def _(T):
    def fn(*args):
        out = args[0]
        for a in args[1:]:
            out = out + a
        return out
    xs = [rnd(T, 8) for _ in range(4)]
    return dict(fn=fn, calls=[(tuple(xs[:n]), {}) for n in (2, 3, 4)], explain=True)


# ---------------------------------------------------------------- factories inside
# PREDICTION (not measured): g1 b0 [1] ok
@case("factory_zeros_of_shape")
def _(T):
    def fn(x):
        return x + T.zeros(x.shape)
    return dict(fn=fn, calls=[((rnd(T, 4, 8),), {})], explain=True)


# PREDICTION (not measured): g1 b0 [1] ok
@case("factory_ones_like")
def _(T):
    def fn(x):
        return x * T.ones_like(x) + 1
    return dict(fn=fn, calls=[((rnd(T, 8),), {})], explain=True)


# PREDICTION (not measured): g1 b0 [1] ok
@case("factory_arange")
def _(T):
    def fn(x):
        return x + T.arange(8)
    return dict(fn=fn, calls=[((rnd(T, 8),), {})], explain=True)


# PREDICTION (not measured): g1 b0 [1] ok
@case("factory_full")
def _(T):
    def fn(x):
        return x * T.full((4,), 2.0)
    return dict(fn=fn, calls=[((rnd(T, 4),), {})], explain=True)


# ------------------------------------------------------------ sizes and scalars
# No tensor op at all: no graph reaches the backend (explain's graph_break_count is
# graph_count - 1, so -1), yet each new size is a new guarded cache entry.
# PREDICTION (not measured): g0 b-1 [0, 0, 0] ok
@case("return_shape")
def _(T):
    def fn(x):
        return x.shape
    return dict(fn=fn, calls=[((rnd(T, n),), {}) for n in (4, 8, 16)], explain=True)


# The size changes: the second compile is dynamic and returns a symbolic torch.Size.
# PREDICTION (not measured): g1 b0 [1, 2, 2] ok
@case("return_tensor_and_shape")
def _(T):
    def fn(x):
        y = x * 2
        return y, y.shape
    return dict(fn=fn, calls=[((rnd(T, n),), {}) for n in (4, 8, 16)], explain=True)


# PREDICTION (not measured): g1 b0 [1, 2, 2] ok
@case("len_with_changing_sizes")
def _(T):
    def fn(x):
        return x * 2, len(x)
    return dict(fn=fn, calls=[((rnd(T, n),), {}) for n in (4, 8, 16)], explain=True)


# 8 -> static; 32 -> dynamic with the guard numel > 16; 8 hits the static entry, 64 the
# dynamic one.
# PREDICTION (not measured): g1 b0 [1, 2, 2, 2] ok
@case("numel_branch")
def _(T):
    def fn(x):
        if x.numel() > 16:
            return x * 2
        return x + 1
    return dict(fn=fn, calls=[((rnd(T, n),), {}) for n in (8, 32, 8, 64)], explain=True)


# range(n) unrolls, so n stays specialized even after automatic dynamic marks it: every new
# n recompiles.
# PREDICTION (not measured): g1 b0 [1, 2, 3, 4] ok
@case("range_of_changing_n")
def _(T):
    def fn(x, n):
        for i in range(n):
            x = x + i
        return x
    x = rnd(T, 8)
    return dict(fn=fn, calls=[((x, n), {}) for n in (2, 3, 4, 5)], explain=True)


# Without capture_scalar_outputs, .item() is a break (sum | item | x * s), but fullgraph=True
# captures it (as an unbacked scalar) instead of failing.
# PREDICTION (not measured): g2 b1 [2] ok
@case("item_scalar")
def _(T):
    def fn(x):
        s = x.sum().item()
        return x * s
    return dict(fn=fn, calls=[((rnd(T, 8),), {})], explain=True)


# A data-dependent jump inside a loop: the whole frame is skipped (runs eagerly), no graph.
# PREDICTION (not measured): g0 b-1 [0] error (Unsupported)
@case("while_tensor_condition")
def _(T):
    def fn(x):
        while x.sum() < 100:
            x = x * 2
        return x
    return dict(fn=fn, calls=[((T.rand(8) + 0.5,), {})], explain=True)


# ----------------------------------------------------------------------- modules
# Three Linear(8, 8) through one compiled function: the module is an argument, its parameters
# graph inputs (inlined built-in nn modules), so one compile serves all three.
# PREDICTION (not measured): g1 b0 [1, 1, 1] ok
@case("three_linears_one_function")
def _(T):
    mods = [T.nn.Linear(8, 8) for _ in range(3)]

    def fn(m, x):
        return m(x).relu()
    x = rnd(T, 4, 8)
    return dict(fn=fn, calls=[((m, x), {}) for m in mods], explain=True)


# ======================================================= issue 33: the Python people write
# Sections 1-5 of issue 33. Each PREDICTION below is torch 2.11's expected behaviour from the
# issue and ../shared/reference/dynamo.md, until run_torch.py measures it.
import contextlib  # noqa: E402
import dataclasses  # noqa: E402
import functools  # noqa: E402
import operator  # noqa: E402
from collections import namedtuple  # noqa: E402


# ------------------------------------------------- 1. symbolic sizes through arithmetic
# PREDICTION (not measured): g1 b0 [1, 2, 2, 2] ok
@case("sym_max_of_sizes")
def _(T):
    def fn(x, y):
        n = max(x.shape[0], y.shape[0])
        return x.sum() * n + y.sum()
    return dict(fn=fn, calls=[((rnd(T, n), rnd(T, n + 1)), {}) for n in (4, 5, 6, 7)], explain=True)


# PREDICTION (not measured): g1 b0 [1, 2, 2, 2] ok
@case("sym_min_of_sizes")
def _(T):
    def fn(x, y):
        n = min(x.shape[0], y.shape[0])
        return x[:n] + y[:n]
    return dict(fn=fn, calls=[((rnd(T, n), rnd(T, n + 2)), {}) for n in (4, 5, 6, 7)], explain=True)


# PREDICTION (not measured): g1 b0 [1, 2, 2] ok
@case("sym_product_of_two_dims")
def _(T):
    def fn(x):
        return x.reshape(x.shape[0] * x.shape[1]) * 2
    return dict(fn=fn, calls=[((rnd(T, a, b),), {}) for a, b in ((2, 3), (3, 4), (4, 5))], explain=True)


# PREDICTION (not measured): g1 b0 [1, 2, 2] ok
@case("sym_mean_by_size")
def _(T):
    def fn(x):
        return x.sum(0) / x.shape[0]
    return dict(fn=fn, calls=[((rnd(T, n, 3),), {}) for n in (4, 5, 6)], explain=True)


# PREDICTION (not measured): g1 b0 [1, 2, 2, 2] ok
@case("sym_floordiv_slice")
def _(T):
    def fn(x):
        return x[: x.shape[0] // 2] * 2
    return dict(fn=fn, calls=[((rnd(T, n),), {}) for n in (4, 6, 8, 10)], explain=True)


# A GPT loss's reshape with a varying sequence length T.
# PREDICTION (not measured): g1 b0 [1, 2, 2] ok
@case("sym_gpt_loss_view")
def _(T):
    def fn(logits):
        B, L, C = logits.shape
        return logits.view(B * L, C).sum(-1)
    return dict(fn=fn, calls=[((rnd(T, 2, t, 5),), {}) for t in (3, 4, 6)], explain=True)


# PREDICTION (not measured): g1 b0 [1, 2, 2] ok
@case("sym_size_to_factory")
def _(T):
    def fn(x):
        return x + T.ones(x.shape[0])
    return dict(fn=fn, calls=[((rnd(T, n),), {}) for n in (4, 5, 6)], explain=True)


# PREDICTION (not measured): g1 b0 [1, 2, 2] ok
@case("sym_size_in_tensor_math")
def _(T):
    def fn(x):
        return x * x.shape[0] + x.shape[0] ** 2
    return dict(fn=fn, calls=[((rnd(T, n),), {}) for n in (4, 5, 6)], explain=True)


# The parity of a dynamic size: a guard on it, not a recompile per size.
# PREDICTION (not measured): g1 b0 [1, 2, 2, 3] ok
@case("sym_mod_branch")
def _(T):
    def fn(x):
        if x.shape[0] % 2 == 0:
            return x * 2
        return x * 3
    return dict(fn=fn, calls=[((rnd(T, n),), {}) for n in (4, 6, 8, 5)], explain=True)


# ------------------------------------------------------ 2. Python numbers as symbols
# PREDICTION (not measured): g1 b0 [1, 2, 2] ok
@case("int_arg_to_factory")
def _(T):
    def fn(x, n):
        return x.sum() + T.ones(n).sum()
    x = rnd(T, 4)
    return dict(fn=fn, calls=[((x, n), {}) for n in (2, 3, 4)], explain=True)


# PREDICTION (not measured): g1 b0 [1, 2, 2] ok
@case("int_arg_in_math")
def _(T):
    def fn(x, n):
        return x * n + n
    x = rnd(T, 4)
    return dict(fn=fn, calls=[((x, n), {}) for n in (2, 3, 4)], explain=True)


# A float argument in a branch (the issue measured torch at [1, 2, 2, 3, 3]).
# PREDICTION (not measured): g1 b0 [1, 2, 2, 3, 3] ok
@case("float_arg_branch")
def _(T):
    def fn(x, a):
        if a > 0.5:
            return x * a
        return x - a
    x = rnd(T, 4)
    return dict(fn=fn, calls=[((x, a), {}) for a in (0.1, 0.2, 0.7, 0.8, 0.3)], explain=True)


SCALE = 2


# An int read from a global: specialized, one compile per value.
# PREDICTION (not measured): g1 b0 [1, 2, 3] ok
@case("global_int_specialized")
def _(T):
    def fn(x):
        return x * SCALE

    def setglobal(v):
        globals()["SCALE"] = v
    x = rnd(T, 4)
    return dict(fn=fn, setglobal=setglobal,
                calls=[((x,), {}), ("setglobal", 3), ((x,), {}), ("setglobal", 4), ((x,), {})], explain=True)


# An int attribute of a module: specialized, one compile per value.
# PREDICTION (not measured): g1 b0 [1, 2, 3] ok
@case("module_int_attribute")
def _(T):
    class Scaled(T.nn.Module):
        def __init__(self):
            super().__init__()
            self.k = 2

        def forward(self, x):
            return x * self.k
    m = Scaled()

    def fn(x):
        return m(x)

    def setglobal(v):
        m.k = v
    x = rnd(T, 4)
    return dict(fn=fn, setglobal=setglobal,
                calls=[((x,), {}), ("setglobal", 3), ((x,), {}), ("setglobal", 4), ((x,), {})], explain=True)


# ------------------------------------------------- 3. functions by their code
def _scale_by(k):
    return lambda t: t * k


# A new lambda of the same code each call (its cell holds the same int).
# PREDICTION (not measured): g1 b0 [1, 1, 1] ok
@case("new_lambda_each_call")
def _(T):
    def fn(x, f):
        return f(x) + 1
    x = rnd(T, 4)
    return dict(fn=fn, calls=[((x, _scale_by(2)), {}) for _ in range(3)], explain=True)


def _mul_add(t, k, b=0.0):
    return t * k + b


# PREDICTION (not measured): g1 b0 [1, 1, 1] ok
@case("new_partial_each_call")
def _(T):
    def fn(x, f):
        return f(x).relu()
    x = rnd(T, 4)
    return dict(fn=fn, calls=[((x, functools.partial(_mul_add, k=2, b=1.0)), {}) for _ in range(3)], explain=True)


class _Affine:
    def __init__(self, k):
        self.k = k

    def __call__(self, t):
        return t * self.k + 1


# A callable object passed in, a new one of the same class each call.
# PREDICTION (not measured): g1 b0 [1, 1, 1] ok
@case("callable_object_argument")
def _(T):
    def fn(x, f):
        return f(x).sum()
    x = rnd(T, 4)
    return dict(fn=fn, calls=[((x, _Affine(2)), {}) for _ in range(3)], explain=True)


# PREDICTION (not measured): g1 b0 [1] ok
@case("call_through_partial")
def _(T):
    def fn(x):
        g = functools.partial(_mul_add, k=3)
        return g(x, b=2.0)
    return dict(fn=fn, calls=[((rnd(T, 4),), {})], explain=True)


# PREDICTION (not measured): g1 b0 [1] ok
@case("call_object_dunder_call")
def _(T):
    aff = _Affine(3)

    def fn(x):
        return aff(x) * 2
    return dict(fn=fn, calls=[((rnd(T, 4),), {})], explain=True)


# ------------------------------------------------------------- 4. everyday Python
Point = namedtuple("Point", ["a", "b"])


# PREDICTION (not measured): g1 b0 [1] ok
@case("namedtuple_build_read_return")
def _(T):
    def fn(x):
        p = Point(x * 2, x + 1)
        q = Point(a=p.a.sum(), b=p[1])
        return q
    return dict(fn=fn, calls=[((rnd(T, 4),), {})], explain=True)


@dataclasses.dataclass
class _Pair:
    left: object
    right: object


# PREDICTION (not measured): g1 b0 [1] ok
@case("dataclass_build_and_read")
def _(T):
    def fn(x):
        p = _Pair(x * 2, x - 1)
        return p.left + p.right
    return dict(fn=fn, calls=[((rnd(T, 4),), {})], explain=True)


# The tensors only inside a user object: the frame is captured all the same.
# PREDICTION (not measured): g1 b0 [1, 1] ok
@case("dataclass_batch_argument")
def _(T):
    def fn(batch):
        return (batch.left * batch.right).sum()
    return dict(fn=fn, calls=[((_Pair(rnd(T, 4), rnd(T, 4)),), {}) for _ in range(2)], explain=True)


# PREDICTION (not measured): g1 b0 [1] ok
@case("super_forward")
def _(T):
    class Scaled(T.nn.Linear):
        def forward(self, x):
            return super().forward(x) * 2
    m = Scaled(4, 3)

    def fn(x):
        return m(x).relu()
    return dict(fn=fn, calls=[((rnd(T, 2, 4),), {})], explain=True)


# PREDICTION (not measured): g1 b0 [1] ok
@case("nullcontext_block")
def _(T):
    def fn(x):
        with contextlib.nullcontext():
            y = x * 2
        return y + 1
    return dict(fn=fn, calls=[((rnd(T, 4),), {})], explain=True)


# PREDICTION (not measured): g1 b0 [1] ok
@case("generator_expression_sum")
def _(T):
    def fn(xs):
        return sum(t * 2 for t in xs)
    return dict(fn=fn, calls=[(([rnd(T, 4) for _ in range(3)],), {})], explain=True)


# PREDICTION (not measured): g1 b0 [1] ok
@case("functools_reduce")
def _(T):
    def fn(xs):
        return functools.reduce(operator.mul, xs)
    return dict(fn=fn, calls=[(([rnd(T, 4) for _ in range(3)],), {})], explain=True)


# PREDICTION (not measured): g1 b0 [1] ok
@case("sorted_dict_keys")
def _(T):
    def fn(d):
        out = 0
        for k in sorted(d):
            out = out * 2 + d[k]
        return out
    return dict(fn=fn, calls=[(({"b": rnd(T, 3), "a": rnd(T, 3), "c": rnd(T, 3)},), {})], explain=True)


# PREDICTION (not measured): g1 b0 [1] ok
@case("isinstance_tuple_of_types")
def _(T):
    def fn(x, n):
        if isinstance(n, (int, float)):
            x = x * n
        if isinstance(x, (list, tuple)):
            x = x[0]
        return x
    return dict(fn=fn, calls=[((rnd(T, 4), 3), {})], explain=True)


# PREDICTION (not measured): g1 b0 [1] ok
@case("fstring_of_constants")
def _(T):
    def fn(x, name):
        key = f"{name}_{x.shape[0]}:{x.dim()!r}"
        return x * len(key)
    return dict(fn=fn, calls=[((rnd(T, 4), "layer"), {})], explain=True)


# PREDICTION (not measured): g1 b0 [1] ok
@case("module_getattr_hasattr_len")
def _(T):
    blocks = T.nn.ModuleList([T.nn.Linear(4, 4) for _ in range(3)])

    def fn(x):
        for i in range(len(blocks)):
            x = getattr(blocks, str(i))(x)
        if hasattr(blocks, "missing"):
            x = x * 0
        return x
    return dict(fn=fn, calls=[((rnd(T, 2, 4),), {})], explain=True)


# PREDICTION (not measured): g1 b0 [1] ok
@case("moduledict_items_and_negative_index")
def _(T):
    heads = T.nn.ModuleDict({"a": T.nn.Linear(4, 4), "b": T.nn.Linear(4, 4)})
    layers = T.nn.ModuleList([T.nn.Linear(4, 4) for _ in range(3)])

    def fn(x):
        out = layers[-1](x)
        for name, m in heads.items():
            out = out + m(x)
        return out
    return dict(fn=fn, calls=[((rnd(T, 2, 4),), {})], explain=True)


LOG = {}


# A store into a dict that lives outside the frame: a side effect replayed after the graph.
# PREDICTION (not measured): g1 b0 [1] ok
@case("store_into_outside_dict")
def _(T):
    def fn(x):
        y = x * 2
        LOG["last"] = y
        LOG["count"] = LOG.get("count", 0) + 1
        return y + 1
    return dict(fn=fn, calls=[((rnd(T, 4),), {})], explain=True,
                before_each=LOG.clear, state=lambda: dict(LOG))


HISTORY = []


# PREDICTION (not measured): g1 b0 [1] ok
@case("append_to_outside_list")
def _(T):
    def fn(x):
        y = x.relu()
        HISTORY.append(y)
        return y * 2
    return dict(fn=fn, calls=[((rnd(T, 4),), {})], explain=True,
                before_each=HISTORY.clear, state=lambda: list(HISTORY))


# A dtype compared with a different dtype: both branches are Python, the graph one; a new
# dtype recompiles.
# PREDICTION (not measured): g1 b0 [1, 2] ok
@case("dtype_compared_with_another")
def _(T):
    def fn(x):
        if x.dtype == T.float64:
            return x * 2
        return x + 1
    return dict(fn=fn, calls=[((rnd(T, 4),), {}), ((rnd(T, 4).double(),), {})], explain=True)


# ------------------------------------------------------ 5. where torch gives up on a frame
# A break (.item()) inside a for loop: the frame is skipped, not a graph per iteration.
# PREDICTION (not measured): g0 b0 [0] ok
@case("break_inside_for_loop")
def _(T):
    def fn(x):
        total = 0.0
        for i in range(3):
            x = x * 2
            total += x.sum().item()
        return x, total
    return dict(fn=fn, calls=[((rnd(T, 4),), {})], explain=True)


# PREDICTION (not measured): g0 b0 [0] ok
@case("break_inside_while_loop")
def _(T):
    def fn(x):
        i = 0
        while i < 3:
            x = x + 1
            print_free = x.tolist()
            i += 1
        return x, print_free
    return dict(fn=fn, calls=[((rnd(T, 4),), {})], explain=True)


# A break inside a try block: the frame runs eagerly.
# PREDICTION (not measured): g0 b0 [0] ok
@case("break_inside_try")
def _(T):
    def fn(x):
        y = x * 2
        try:
            s = y.sum().item()
        except RuntimeError:
            s = 0.0
        return y * s
    return dict(fn=fn, calls=[((rnd(T, 4),), {})], explain=True)


# A break after a loop (no jump back past it): the usual two graphs.
# PREDICTION (not measured): g2 b1 [2] ok
@case("break_after_loop")
def _(T):
    def fn(x):
        for i in range(3):
            x = x * 2
        s = x.sum().item()
        return x + s
    return dict(fn=fn, calls=[((rnd(T, 4),), {})], explain=True)


# A break in a helper called inside a loop: the loop's frame is skipped, the helper's own frame
# is compiled (its graph before the break).
# PREDICTION (not measured): g0 b0 [2] ok
@case("break_in_helper_called_in_loop")
def _(T):
    def helper(t):
        u = t * 3
        v = u.sum().item()
        return u + v

    def fn(x):
        for _ in range(2):
            x = helper(x)
        return x
    return dict(fn=fn, calls=[((rnd(T, 4),), {})], explain=True)


# A branch on a tensor inside a loop: the frame is skipped.
# PREDICTION (not measured): g0 b0 [0] ok
@case("tensor_branch_inside_for_loop")
def _(T):
    def fn(x):
        for _ in range(3):
            if x.sum() > 0:
                x = x - 1
            else:
                x = x + 1
        return x
    return dict(fn=fn, calls=[((rnd(T, 4),), {})], explain=True)
