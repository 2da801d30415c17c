"""The guard fuzzer's families of tensor-side changes (issue 10 §2): shapes, layouts, dtypes and
autograd, Python scalars. Each generator makes one program (guard_fuzz_programs.py)."""
import numpy as np

from guard_fuzz_programs import Builder, add_features, const, enabled, two_branches


# ---- family: shapes -------------------------------------------------------------------------------
# Sizes change between calls (0 and 1 included, ranks sometimes), under automatic dynamic,
# dynamic=True and dynamic=False; the body branches on sizes and uses them as numbers.

def gen_shapes(r, force=None):
    b = Builder(r, "shapes")
    b.dynamic = r.choice([None, True] if force else [None, None, True, False])
    rank = r.choice([1, 2, 2, 3])
    sizes = [0, 1, 2, 2, 3, 3, 4, 5, 7]
    b.shapes = list({tuple(r.choice(sizes) for _ in range(rank)) for _ in range(r.randint(2, 5))})
    if r.random() < 0.2:  # a rank change too
        b.shapes.append(tuple(r.choice(sizes[2:]) for _ in range(rank + 1)))
    b.rg = [False, True] if r.random() < 0.3 else [False]
    b.layouts = ["c", "c", "c", "t", "s"]
    d = r.randrange(rank)

    def size_of(dim):
        return r.choice([f"x.shape[{dim}]", f"x.size({dim})", f"x.shape[{dim - rank}]"])

    def size_branch(b):
        op = r.choice([">", ">=", "==", "<", "!="])
        two_branches(b, f"{size_of(r.randrange(rank))} {op} {r.randint(0, 5)}")

    def size_number(b):
        b.line(r.choice([f"y = y * {size_of(r.randrange(rank))}",
                         f"y = y + {size_of(r.randrange(rank))} * 0.5 - {size_of(r.randrange(rank))}"]))

    def dim_branch(b):
        two_branches(b, r.choice([f"x.dim() == {rank}", f"x.ndim > {rank}"]))

    def size_pair(b):
        if rank >= 2:
            two_branches(b, f"x.shape[0] {r.choice(['==', '<', '>='])} x.shape[-1]")

    def keepdim_reduce(b):
        b.line(f"y = y - y.{r.choice(['sum', 'mean'])}({d}, keepdim=True) * 0.25")

    def broadcast_input(b):
        ones = [r.random() < 0.5 for _ in range(rank)]
        drop = r.randint(0, rank - 1) if r.random() < 0.3 else 0

        def make(r2, ctx):
            shape = tuple(1 if one else n for one, n in zip(ones, ctx["shape"]))[drop:]
            if len(ctx["shape"]) != rank:
                shape = ctx["shape"][-1:]
            return b.tensor(shape, "f32", r.choice(b.rg), "c", r2)
        b.params.append(("w", make))
        b.line(r.choice(["y = y * w + w", "y = y - w * 2"]))

    def reshape_back(b):
        b.line("y = (y.reshape(-1) * 2).reshape(x.shape)")

    def numel(b):  # known: dynamic sizes as numbers
        if r.random() < 0.5:  # a threshold some shapes of the pool pass and others do not
            counts = sorted({int(np.prod(s)) for s in b.shapes})
            two_branches(b, f"x.numel() > {counts[0] if len(counts) > 1 else r.randint(0, 12)}")
        else:
            b.line("y = y * x.numel()")

    def length(b):  # known: dynamic sizes as numbers
        if r.random() < 0.5:
            firsts = sorted({s[0] for s in b.shapes})
            k = firsts[0] if len(firsts) > 1 else r.randint(0, 5)
            two_branches(b, f"len(x) {r.choice(['>', '==', '<='])} {k}")
        else:
            b.line("y = y + len(x)")

    def size_loop(b):
        b.line(f"for i in range(x.shape[{d}]):\n    y = y * 0.5 + i")

    pool = {"size_branch": size_branch, "size_number": size_number, "dim_branch": dim_branch,
            "size_pair": size_pair, "keepdim_reduce": keepdim_reduce, "broadcast_input": broadcast_input,
            "reshape_back": reshape_back, "dynamic_sizes": lambda b: r.choice([numel, length])(b),
            "size_loop": size_loop}
    add_features(b, pool, force=force)
    if r.random() < 0.3:
        b.ret = r.choice(["y.sum(0)", "y.flatten()", "(y, x.shape[0])"])
    return b.build()


# ---- family: layouts ------------------------------------------------------------------------------
# Strides and views: transposed, expanded (stride 0), sliced with a storage offset, every other
# row; the body reads x through views whose results depend on the layout.

def gen_layouts(r, force=None):
    b = Builder(r, "layouts")
    rank = r.choice([2, 2, 3])
    b.shapes = list({tuple(r.choice([1, 2, 3, 4, 5]) for _ in range(rank)) for _ in range(r.randint(1, 3))})
    b.layouts = ["c", "t", "x", "s", "e"]
    b.dtype = r.choice(["f32", "f32", "f64"])
    b.rg = [False, True] if r.random() < 0.4 else [False]
    b.dynamic = r.choice([None, None, False, True])

    def contiguous(b):
        b.line("y = y + x.contiguous() * 0.5")

    def transpose_back(b):
        b.line("y = y * x.transpose(0, 1).transpose(0, 1) - 1")

    def flat(b):
        b.line("y = y + (x.reshape(-1) * 3).reshape(x.shape)")

    def first_row(b):
        b.line(r.choice(["y = y + x[:1]", "y = y * x[0]", "y = y - x[-1:] * 2"]))

    def reduce_keep(b):
        b.line(r.choice(["y = y * x.sum(-1, keepdim=True)", "y = y - x.mean(0, keepdim=True)"]))

    def matmul(b):
        if rank == 2:
            b.line("y = y + (x @ x.t()) @ x * 0.1")

    def second_input(b):
        b.params.append(("w", lambda r2, ctx: b.tensor(ctx["shape"], b.dtype, r2.choice(b.rg),
                                                      r2.choice(b.layouts), r2)))
        b.line(r.choice(["y = y * w - w.transpose(0, 1).transpose(0, 1)", "y = y + w.contiguous() * w"]
                        + (["y = y * w - w.t().t()"] if rank == 2 or enabled("t_of_3d") else [])))

    def duplicate_input(b):  # known: one tensor passed as two arguments
        def make(r2, ctx):  # x again, or another tensor that TENSOR_MATCH cannot tell from x
            shape, dtype, rg, layout = ctx["x_spec"]
            return r2.choice(["_ARGS[0]", f"t({shape!r}, {dtype!r}, 7, rg={rg}, layout={layout!r})"])
        b.params.append(("w2", make))
        b.line(r.choice(["y = y + w2 * 2", "y = y * w2 - x"]))

    def permute(b):
        if rank == 3:
            b.line("y = y + x.permute(2, 0, 1).permute(1, 2, 0) * 2")

    pool = {"contiguous": contiguous, "transpose_back": transpose_back, "flat": flat,
            "first_row": first_row, "reduce_keep": reduce_keep, "matmul": matmul,
            "second_input": second_input, "permute": permute, "duplicate_input": duplicate_input}
    add_features(b, pool, force=force)
    b.ret = r.choice(["y", "y", "y.t()" if rank == 2 or enabled("t_of_3d") else "y", "y.reshape(-1)",
                      "y.transpose(0, -1)", "y.sum(0)"])
    return b.build()


# ---- family: dtypes and autograd --------------------------------------------------------------------
# dtype, requires_grad and grad mode change between calls; the body branches on them.

def gen_dtypes_grad(r, force=None):
    b = Builder(r, "dtypes_grad")
    b.shapes = [r.choice([(3,), (2, 3), (4, 2)])]
    b.dtypes = r.sample(["f32", "f64", "i64", "f32"], r.randint(1, 3))
    if force:
        b.dtypes = ["f32"] + b.dtypes
    b.rg = [True] if force else [False, True]
    b.parameters = True
    b.no_grad_calls = True
    b.dynamic = r.choice([None, None, False, True])

    def dtype_branch(b):
        dt = r.choice(["float32", "float64", "int64"])
        two_branches(b, r.choice([f"x.dtype == mini.{dt}", f"x.dtype is mini.{dt}", f"x.dtype != mini.{dt}"]))

    def float_branch(b):
        two_branches(b, "x.is_floating_point()", "y * 0.5", "y * 3")

    def rg_branch(b):
        two_branches(b, r.choice(["x.requires_grad", "not x.requires_grad"]))

    def promote(b):
        dtypes = r.sample(["f32", "f64", "i64", "b"], r.randint(1, 3))
        b.params.append(("w", lambda r2, ctx: b.tensor(ctx["shape"], d := r2.choice(dtypes),
                                                      r2.random() < 0.5 and d in ("f32", "f64"), "c", r2)))
        b.line(r.choice(["y = y * w + 1", "y = y + w * 2"]))

    def cast(b):
        b.line(r.choice(["y = y.to(mini.float64)", "y = y.float() * 2", "y = y.double() + 1",
                         "y = y.to(x.dtype) * 3", "y = y.long() + y"]))

    def detach(b):  # new: detach is captured as a clone
        b.line("y = y * 2 + x.detach()")

    def inner_no_grad(b):
        b.line("with mini.no_grad():\n    z = y * 2\ny = y + z")

    def grad_mode_read(b):
        two_branches(b, "mini.is_grad_enabled()")

    def intermediate_requires_grad(b):  # known: requires_grad of values computed in the graph
        b.line("z = y * 2")
        two_branches(b, r.choice(["z.requires_grad", "(z + 1).requires_grad"]))

    pool = {"dtype_branch": dtype_branch, "float_branch": float_branch, "rg_branch": rg_branch,
            "promote": promote, "cast": cast, "detach": detach, "inner_no_grad": inner_no_grad,
            "grad_mode_read": grad_mode_read, "intermediate_requires_grad": intermediate_requires_grad}
    add_features(b, pool, force=force)
    return b.build()


# ---- family: Python scalars ---------------------------------------------------------------------------
# int, float, bool, str and None arguments (by position or keyword); the body multiplies by
# them, loops over them and branches on them; some programs return Python numbers.

def gen_scalars(r, force=None):
    b = Builder(r, "scalars")
    b.shapes = [r.choice([(3,), (2, 3)])]
    b.dtypes = r.choice([["f32"], ["f32"], ["i64"], ["f32", "f64", "i64"]])
    b.dynamic = r.choice([None, None, None, False, True])
    b.rg = [False, True] if r.random() < 0.3 else [False]
    numbers = []

    def int_arg(b):
        values = r.sample([0, 1, 2, 3, -1, 5], 3)
        b.params.append(("n", const(values)))
        numbers.append("n")
        lines = ["y = y * n", "y = y + n % 3", f"if n > {r.randint(0, 3)}:\n    y = y * n\nelse:\n    y = y - n"]
        if enabled("dynamic_sizes"):  # the range lands on a resume unit's stack
            lines.append("for i in range(max(n, 0)):\n    y = y * 0.5 + i")
        b.line(r.choice(lines))

    def float_arg(b):
        zeros = [[0.0], [0.0, -0.0], [-0.0]] if enabled("negative_zero_constant") else [[0.0]]
        values = r.sample([0.5, 1.5, -2.0, 3.25], 2) + r.choice(zeros)
        b.params.append(("f", const(values)))
        numbers.append("f")
        b.line(r.choice(["y = y * f", "y = y + f * f", "y = y / f",
                         f"if f > {r.choice([0, 1])}:\n    y = y * f\nelse:\n    y = y + 1"]))

    def bool_arg(b):
        b.params.append(("flag", const([True, False])))
        two_branches(b, r.choice(["flag", "not flag"]))

    def str_arg(b):
        b.params.append(("mode", const(["a", "b", "cc"])))
        b.line(r.choice(['if mode == "a":\n    y = y * 2\nelif mode == "b":\n    y = y - 1\nelse:\n    y = y * -1',
                         'if mode.startswith("c"):\n    y = y + 3']))

    def optional_arg(b):
        b.params.append(("opt", lambda r2, ctx: r2.choice(["None", "2", "0.5", b.tensor(ctx["shape"], r=r2)])))
        b.line("if opt is not None:\n    y = y + opt\nelse:\n    y = y * 4")

    def mixed_type_arg(b):
        b.params.append(("v", const([1, 2, 1.5, True, False, 0])))
        b.line("y = y * v")
        checks = ["v == 1"] + (["isinstance(v, float)", "isinstance(v, bool)"]
                               if enabled("isinstance_dynamic_number") else [])
        two_branches(b, r.choice(checks))

    def range_arg(b):  # known: a range argument is guarded by its type only
        b.params.append(("rng", lambda r2, ctx: r2.choice(["range(2)", "range(3)", "range(1, 3)"])))
        b.line("for i in rng:\n    y = y * 0.5 + i")

    pool = {"int_arg": int_arg, "float_arg": float_arg, "bool_arg": bool_arg, "str_arg": str_arg,
            "optional_arg": optional_arg, "mixed_type_arg": mixed_type_arg, "dynamic_sizes": range_arg}
    add_features(b, pool, force=force)
    if numbers and r.random() < 0.4:
        b.ret = f"y, {r.choice(numbers)} * 2"
    b.keyword_calls = r.random() < 0.5
    return b.build()
