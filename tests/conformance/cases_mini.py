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
