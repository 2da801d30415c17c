"""The guard fuzzer's families of Python-side changes (issue 10 §2): globals, closures, plain
objects, nn.Modules, containers, *args/**kwargs, state written. Each generator makes one
program (guard_fuzz_programs.py)."""
from guard_fuzz_programs import Builder, add_features, bound, enabled, knob, two_branches


# ---- family: globals ---------------------------------------------------------------------------------
# Module-level values rebound between calls: numbers, flags, strings, None, a tensor, a function,
# a tuple, attributes of a Python module; read by fn and by a helper it calls; a global written.

def gen_globals(r, force=None):
    b = Builder(r, "globals")
    b.shapes = [(2, 3)]
    b.dynamic = r.choice([None, None, False])

    def g_flag(b):
        b.top.append("G_FLAG = True")
        b.knobs.append(knob("G_FLAG = {}", [True, False]))
        two_branches(b, "G_FLAG")

    def g_scale(b):
        b.top.append("G_SCALE = 2")
        b.knobs.append(knob("G_SCALE = {}", [2, 3, 0.5, -1, True]))
        b.line("y = y * G_SCALE")

    def g_mode(b):
        b.top.append('G_MODE = "a"')
        b.knobs.append(knob("G_MODE = {}", ["a", "b"]))
        two_branches(b, 'G_MODE == "a"')

    def g_optional(b):
        b.top.append("G_OPT = None")
        b.knobs.append(knob("G_OPT = {}", [None, 1.5, 3]))
        b.line("if G_OPT is None:\n    y = y - 1\nelse:\n    y = y * G_OPT")

    def g_tensor(b):
        b.top.append("G_W = t((3,), 'f32', 0)")
        b.knobs += [lambda r2: f"G_W = t((3,), {r2.choice(['f32', 'f64', 'i64'])!r}, {r2.randrange(3)}, "
                               f"layout={r2.choice(['c', 'x', 's', 'e'])!r})",
                    lambda r2: r2.choice(["G_W.requires_grad_(True)", "G_W.requires_grad_(False)",
                                          "G_W.mul_(2)"])]
        b.line("y = y * G_W")

    def g_list(b):
        b.top.append("G_TS = [t((3,), 'f32', 0)]")
        b.knobs += [lambda r2: f"G_TS.append(t((3,), {r2.choice(['f32', 'f64'])!r}, {r2.randrange(3)}))",
                    lambda r2: "G_TS.pop(0) if len(G_TS) > 1 else None",
                    lambda r2: f"G_TS[0] = t((3,), {r2.choice(['f32', 'i64'])!r}, {r2.randrange(3)}, "
                               f"layout={r2.choice(['c', 'x'])!r})"]
        b.line(r.choice(["for v in G_TS:\n    y = y + v", "y = y * len(G_TS) + G_TS[-1]"]))

    def g_dict(b):
        b.top.append('G_D = {"s": 2}')
        b.knobs += [knob('G_D["s"] = {}', [2, 3, 0.5]),
                    lambda r2: r2.choice(['G_D["z"] = 1', 'G_D.pop("z", None)'])]
        b.line(r.choice(['y = y * G_D["s"]', "y = y + len(G_D)"]))

    def g_function(b):
        b.top += ["def h_a(y):\n    return y * 2", "def h_b(y):\n    return y + 1", "G_FN = h_a"]
        b.knobs.append(lambda r2: f"G_FN = {r2.choice(['h_a', 'h_b'])}")
        b.line("y = G_FN(y)")

    def g_helper(b):
        b.top += ["G_HFLAG = False", "def helper(y):\n    if G_HFLAG:\n        return y * 3\n    return y - 1"]
        b.knobs.append(knob("G_HFLAG = {}", [True, False]))
        b.line("y = helper(y)")

    def g_tuple(b):
        b.top.append("G_SEQ = (1, 2)")
        b.knobs.append(knob("G_SEQ = {}", [(1, 2), (2,), (1, 2, 3), [3, 1], ()]))
        b.line(r.choice(["for v in G_SEQ:\n    y = y * v", "y = y + len(G_SEQ)"]))

    def module_attr(b):
        b.top += ["import types", 'cfgmod = types.ModuleType("cfgmod")', "cfgmod.SCALE = 2", "cfgmod.FLAG = True"]
        b.knobs += [knob("cfgmod.SCALE = {}", [2, -1, 0.5]), knob("cfgmod.FLAG = {}", [True, False])]
        b.line("y = y * cfgmod.SCALE")
        two_branches(b, "cfgmod.FLAG")

    def inlined_defaults(b):  # new: defaults of inlined functions are not guarded
        b.top.append("def scaled(y, k=2, *, c=1):\n    return y * k + c")
        b.knobs += [knob("scaled.__defaults__ = ({},)", [2, 3]),
                    knob("scaled.__kwdefaults__ = {{'c': {}}}", [1, -1])]
        b.line("y = scaled(y)")

    def other_module(b):
        b.top += ["import types", 'othermod = types.ModuleType("othermod")',
                  'exec("K = 2\\ndef scale(y):\\n    return y * K", othermod.__dict__)']
        b.knobs.append(knob("othermod.K = {}", [2, 3, 0.5]))
        b.line("y = othermod.scale(y)")

    def other_module_builtins(b):  # new: builtins of another module's function
        b.top += ["import types", 'bmod = types.ModuleType("bmod")',
                  'exec("def shift(y):\\n    return y + abs(-2)", bmod.__dict__)']
        b.knobs.append(lambda r2: r2.choice(["bmod.abs = lambda v: 3 * v", "bmod.__dict__.pop('abs', None)"]))
        b.line("y = bmod.shift(y)")

    def global_write(b):
        b.top.append("G_COUNT = 0")
        b.body.insert(0, "    global G_COUNT")
        b.line("G_COUNT = G_COUNT + 1\ny = y * G_COUNT")
        b.knobs.append(lambda r2: "G_COUNT = 0")
        b.state.append("G_COUNT")

    pool = {"g_flag": g_flag, "g_scale": g_scale, "g_mode": g_mode, "g_optional": g_optional,
            "g_tensor": g_tensor, "g_list": g_list, "g_dict": g_dict, "g_function": g_function,
            "g_helper": g_helper, "g_tuple": g_tuple,
            "module_attr": module_attr, "global_write": global_write, "inlined_defaults": inlined_defaults,
            "other_module": other_module, "other_module_builtins": other_module_builtins}
    add_features(b, pool, force=force)
    return b.build()


# ---- family: closures -------------------------------------------------------------------------------
# fn is made by a factory; its cells change through setters between calls (numbers, flags, a
# tensor, a function); fn calls a helper with a closure of its own (its cell set, or the helper
# made anew); fn writes a cell with nonlocal, or calls a closure that does.

def gen_closures(r, force=None):
    b = Builder(r, "closures")
    b.shapes = [(2, 3)]
    b.closure = []
    b.dynamic = r.choice([None, None, False])

    def cell(name, value, values):
        b.closure.append((name, value))
        b.knobs.append(lambda r2: f"set_{name}({r2.choice(values)!r})")

    def c_flag(b):
        cell("c_flag", "True", [True, False])
        two_branches(b, "c_flag")

    def c_scale(b):
        cell("c_scale", "2", [2, 3, -1, 0.5])
        b.line("y = y * c_scale")

    def c_mode(b):
        cell("c_mode", '"a"', ["a", "b"])
        two_branches(b, 'c_mode == "a"')

    def c_tensor(b):
        b.closure.append(("c_w", "t((3,), 'f32', 0)"))
        b.knobs.append(lambda r2: f"set_c_w(t((3,), {r2.choice(['f32', 'f64'])!r}, {r2.randrange(3)}, "
                                  f"rg={r2.random() < 0.3}, layout={r2.choice(['c', 'x', 's'])!r}))")
        b.line("y = y + c_w")

    def c_function(b):
        b.top += ["def h_a(y):\n    return y * 2", "def h_b(y):\n    return y + 1"]
        b.closure.append(("c_fn", "h_a"))
        b.knobs.append(lambda r2: f"set_c_fn({r2.choice(['h_a', 'h_b'])})")
        b.line("y = c_fn(y)")

    def helper_closure(b):
        b.top += ["def make_helper(k):\n    def helper(y):\n        return y * k\n    def set_k(v):\n"
                  "        nonlocal k\n        k = v\n    return helper, set_k",
                  "helper, set_helper_k = make_helper(2)"]
        b.knobs += [lambda r2: f"set_helper_k({r2.choice([2, 3, -1])})",
                    lambda r2: f"helper, set_helper_k = make_helper({r2.choice([2, 3, -1])})"]
        b.line("y = helper(y)")

    def closure_writes(b):  # known: writes to cells (nonlocal)
        if r.random() < 0.5:
            b.closure.append(("c_count", "0"))
            b.nonlocals.append("c_count")
            b.knobs.append(lambda r2: "set_c_count(0)")
            b.line("c_count = c_count + 1\ny = y * c_count")
            b.state.append("get_c_count()")
        else:
            b.top += ["def make_counter():\n    n = 0\n    def tick():\n        nonlocal n\n        n += 1\n"
                      "        return n\n    return tick, lambda: n", "tick, tick_count = make_counter()"]
            b.line("y = y * tick()")
            b.state.append("tick_count()")

    pool = {"c_flag": c_flag, "c_scale": c_scale, "c_mode": c_mode, "c_tensor": c_tensor,
            "c_function": c_function, "helper_closure": helper_closure, "closure_writes": closure_writes}
    add_features(b, pool, force=force)
    return b.build()


# ---- family: objects ----------------------------------------------------------------------------------
# A plain object read by fn (a global or an argument: the same one or a new one each call): its
# attributes change (instance and class attributes, a tensor, a nested object, a property's
# input), it is replaced by another of its class; fn writes an attribute.

OBJECT_CLASSES = '''class Sub:
    def __init__(self, k):
        self.k = k
class Cfg:
    scale = 2
    def __init__(self, flag=True, k=1):
        self.flag = flag
        self.k = k
        self.w = t((3,), 'f32', 1)
        self.sub = Sub(k)
        self.calls = 0
    @property
    def double(self):
        return self.k * 2
    def apply(self, y):
        return y * self.k
class Bag:
    def __init__(self, n):
        self.items = list(range(n))
    def __len__(self):
        return len(self.items)
cfg = Cfg()'''


def gen_objects(r, force=None):
    b = Builder(r, "objects")
    b.shapes = [(2, 3)]
    b.top.append(OBJECT_CLASSES)
    b.dynamic = r.choice([None, None, False])
    how = r.choice(["global", "argument", "new argument"])
    name = "cfg" if how == "global" else "c"
    if how != "global":
        b.params.append(("c", lambda r2, ctx: "cfg" if how == "argument" else
                         f"Cfg({r2.choice([True, False])}, {r2.choice([1, 2])})"))
    b.knobs.append(lambda r2: f"cfg = Cfg({r2.choice([True, False])}, {r2.choice([1, 2])})")

    def attr_flag(b):
        b.knobs.append(knob("cfg.flag = {}", [True, False]))
        two_branches(b, f"{name}.flag")

    def class_attr(b):
        b.knobs += [knob("cfg.scale = {}", [2, 3, 0.5]), knob("Cfg.scale = {}", [2, -1])]
        b.line(f"y = y * {name}.scale")

    def attr_tensor(b):
        b.knobs.append(lambda r2: f"cfg.w = t((3,), {r2.choice(['f32', 'f64', 'i64'])!r}, {r2.randrange(3)}, "
                                  f"layout={r2.choice(['c', 'x', 's'])!r})")
        b.line(f"y = y + {name}.w")

    def nested(b):
        b.knobs += [knob("cfg.sub.k = {}", [1, 2, 3]), lambda r2: f"cfg.sub = Sub({r2.choice([1, 2, 3])})"]
        b.line(f"y = y * {name}.sub.k")

    def prop(b):
        b.knobs.append(knob("cfg.k = {}", [1, 2, 3]))
        b.line(f"y = y + {name}.double")

    def method(b):
        b.knobs.append(knob("cfg.k = {}", [1, 2, 3]))
        b.line(f"y = {name}.apply(y)")

    def attr_write(b):
        b.line(f"{name}.calls = {name}.calls + 1\ny = y * {name}.calls")
        b.state.append("cfg.calls")

    def object_truth(b):  # new: the truth of an object is taken as True
        b.top.append("bag = Bag(1)")
        b.knobs += [knob("bag = Bag({})", [0, 1, 2]), lambda r2: "bag.items.clear()"]
        two_branches(b, "bag")

    def enum_member(b):  # an enum argument and an enum global, compared by identity and ==
        b.top += ["import enum", "class Mode(enum.Enum):\n    A = 1\n    B = 2", "G_MODE = Mode.A"]
        b.params.append(("mode", lambda r2, ctx: r2.choice(["Mode.A", "Mode.B"])))
        b.knobs.append(lambda r2: f"G_MODE = Mode.{r2.choice('AB')}")
        two_branches(b, r.choice(["mode is Mode.A", "mode == Mode.B", "mode is G_MODE", "G_MODE != Mode.A"]))

    def object_identity(b):  # new: `a is b` of two plain objects is not guarded
        b.top.append("other = cfg")
        b.knobs.append(lambda r2: r2.choice(["other = cfg", "other = Cfg()"]))
        two_branches(b, r.choice([f"{name} is other", f"other is not {name}"]))

    pool = {"attr_flag": attr_flag, "class_attr": class_attr, "attr_tensor": attr_tensor, "nested": nested,
            "prop": prop, "method": method, "attr_write": attr_write, "object_truth": object_truth,
            "enum_member": enum_member, "object_identity": object_identity}
    add_features(b, pool, force=force)
    b.feature(how)
    return b.build()


# ---- family: modules ---------------------------------------------------------------------------------
# An nn.Module, compiled itself or passed to fn: a weight replaced, a parameter's requires_grad
# flipped, a flag flipped, training through .eval()/.train(), a submodule swapped (for another
# class, for None, for a Sequential of another length), a plain tensor attribute replaced.

MODULE_CLASSES = '''class Double(mini.nn.Module):
    def forward(self, y):
        return y * 2
class AddOne(mini.nn.Module):
    def forward(self, y):
        return y + 1
class Net(mini.nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = linear(3, 3, 0)
        self.act = Double()
        self.extra = None
        self.seq = mini.nn.Sequential(linear(3, 3, 1), mini.nn.ReLU())
        self.w = param((3,), 2)
        self.buf = t((3,), 'f32', 3)
        self.flag = True
        self.scale = 2.0
    def helper(self, y):
        return y * self.scale
    def helper2(self, y):
        return y - self.scale
    def forward(self, x):
        y = x
{body}
        return y'''


def gen_modules(r, force=None):
    b = Builder(r, "modules")
    b.shapes = [(2, 3)]
    b.rg = [False, True] if r.random() < 0.3 else [False]
    b.no_grad_calls = True
    b.dynamic = r.choice([None, None, False])

    def lin(b):
        b.line("y = self.lin(y)")
        b.knobs += [lambda r2: f"net.lin = linear(3, 3, {r2.randrange(3)}, bias={r2.random() < 0.7})",
                    lambda r2: f"net.lin.weight = param((3, 3), {r2.randrange(3)})",
                    lambda r2: f"net.lin.weight.requires_grad_({r2.random() < 0.5})"]

    def training(b):
        two_branches(b, r.choice(["self.training", "self.lin.training"]))
        b.knobs += [lambda r2: "net.eval()", lambda r2: "net.train()", lambda r2: "net.lin.train(False)"]

    def flag(b):
        two_branches(b, "self.flag")
        b.knobs.append(knob("net.flag = {}", [True, False]))

    def scale(b):
        b.line("y = y * self.scale")
        b.knobs.append(knob("net.scale = {}", [2.0, 3, -1.0]))

    def swap(b):
        b.line("y = self.act(y)")
        b.knobs.append(lambda r2: f"net.act = {r2.choice(['Double()', 'AddOne()', 'mini.nn.ReLU()'])}")

    def optional(b):
        b.line("if self.extra is not None:\n    y = self.extra(y)")
        b.knobs.append(lambda r2: f"net.extra = {r2.choice(['None', 'linear(3, 3, 4)', 'Double()'])}")

    def sequential(b):
        b.line(r.choice(["y = self.seq(y)", "for m in self.seq:\n    y = m(y)"]))
        b.knobs.append(lambda r2: r2.choice(["net.seq = mini.nn.Sequential(linear(3, 3, 1), mini.nn.ReLU())",
                                             "net.seq = mini.nn.Sequential(AddOne())",
                                             "net.seq = mini.nn.Sequential(Double(), linear(3, 3, 2), AddOne())"]))

    def parameter(b):
        b.line("y = y * self.w")
        b.knobs += [lambda r2: f"net.w = param((3,), {r2.randrange(3)})",
                    lambda r2: f"net.w.requires_grad_({r2.random() < 0.5})"]

    def tensor_attr(b):
        b.line("y = y + self.buf")
        b.knobs.append(lambda r2: f"net.buf = t((3,), {r2.choice(['f32', 'f64'])!r}, {r2.randrange(3)}, "
                                  f"layout={r2.choice(['c', 'x'])!r})")

    def module_methods(b):  # known: a method replaced on the module's class
        b.line("y = self.helper(y)")
        b.knobs += [lambda r2: f"Net.helper = Net.{r2.choice(['helper_a', 'helper_b'])}"] * (3 if force else 1)

    pool = {"lin": lin, "training": training, "flag": flag, "scale": scale, "swap": swap,
            "optional": optional, "sequential": sequential, "parameter": parameter,
            "tensor_attr": tensor_attr, "module_methods": module_methods}
    add_features(b, pool, force=force)
    body = "\n".join("    " + ln for ln in b.body)
    b.body = []
    b.top.append(MODULE_CLASSES.replace("{body}", body))
    b.top.append("net = Net()")
    b.top.append("Net.helper_a, Net.helper_b = Net.helper, Net.helper2")
    b.grad_leaves = "list(net.parameters())"
    if r.random() < 0.5:
        b.fn_source = ["fn = net"]
        b.feature("compiled module")
    else:
        b.params.append(("m", lambda r2, ctx: "net"))
        b.fn_source = ["def fn(x, m):", "    return m(x)"]
        b.feature("module argument")
    return b.build()


# ---- family: containers ----------------------------------------------------------------------------
# Lists and tuples whose length, kind and contents change (tensors, ints, pairs, None among
# them), and dict arguments.

def gen_containers(r, force=None):
    b = Builder(r, "containers")
    b.shapes = [(2, 3)]
    b.dynamic = r.choice([None, None, False])
    b.rg = [False, True] if r.random() < 0.3 else [False]

    def seq(r2, items):
        text = ", ".join(items)
        if r2.random() < 0.5:
            return f"[{text}]"
        return f"({text},)" if len(items) == 1 else f"({text})"

    def tensors(b):
        b.params.append(("xs", lambda r2, ctx: seq(r2, [b.tensor(ctx["shape"], "f32", r2.random() < 0.3, "c", r2)
                                                       for _ in range(r2.randint(1, 3))])))
        b.line(r.choice(["for v in xs:\n    y = y + v"] + (  # the others leave an item unused
            ["y = y * len(xs) + xs[-1]", "if len(xs) > 1:\n    y = y * xs[1]\nelse:\n    y = y - xs[0]"]
            if enabled("passthrough_grad") else [])))

    def ints(b):
        b.params.append(("ks", lambda r2, ctx: seq(r2, [str(r2.choice([1, 2, 3]))
                                                       for _ in range(r2.randint(0, 3))])))
        b.line(r.choice([bound("k") + "for k in ks:\n    y = y * k", "y = y + sum(ks)",
                         "if ks:\n    y = y * ks[0]\nelse:\n    y = y - 1"]))

    def pairs(b):
        b.params.append(("pairs", lambda r2, ctx: seq(r2, [f"({b.tensor(ctx['shape'], r=r2)}, {r2.choice([2, 0.5])})"
                                                           for _ in range(r2.randint(1, 2))])))
        b.line("for v, k in pairs:\n    y = y + v * k" if enabled("pair_store_after_break")
               else "for pair in pairs:\n    y = y + pair[0] * pair[1]")

    def optional_items(b):
        b.params.append(("items", lambda r2, ctx: seq(r2, [r2.choice(["None", "2", b.tensor(ctx['shape'], r=r2)])
                                                           for _ in range(r2.randint(1, 3))])))
        b.line("for v in items:\n    if v is not None:\n        y = y + v\n    else:\n        y = y * 2")

    def dict_arg(b):
        def make(r2, ctx):
            d = {"s": r2.choice([2, 3]), "flag": r2.choice([True, False])}
            if r2.random() < 0.5:
                d["extra"] = b.tensor(ctx["shape"], r=r2)
            return "{" + ", ".join(f"{k!r}: {v!r}" if k != "extra" else f"{k!r}: {v}" for k, v in d.items()) + "}"
        b.params.append(("d", make))
        b.line(r.choice(['y = y * d["s"]', 'if d["flag"]:\n    y = y * 2\nelse:\n    y = y + 1',
                         'if "extra" in d:\n    y = y + d["extra"]', "y = y + len(d)"]
                        + (['if d:\n    y = y * 2'] if enabled("kwargs_counts") else [])))

    def break_in_loop(b):  # the loop's iterator is on the stack of the resume unit
        b.params.append(("ws", lambda r2, ctx: seq(r2, [b.tensor(ctx["shape"], r=r2)
                                                       for _ in range(r2.randint(0, 3))])))
        loop = r.choice(["for v in ws:", "for i in range(len(ws)):\n    v = ws[i]"])
        b.line(f"{bound('v') + bound('i') + bound('g')}{loop}\n    y = y + v\n    g = mini.is_grad_enabled()\n"
               "    y = y * 2")

    pool = {"tensors": tensors, "ints": ints, "pairs": pairs, "optional_items": optional_items,
            "dict_arg": dict_arg,
            "break_in_loop": break_in_loop}
    add_features(b, pool, 1, 3, force=force)
    return b.build()


# ---- family: varargs ---------------------------------------------------------------------------------
# fn(x, *args, **kwargs) called with varying counts of positional and keyword arguments; fn
# loops over them, counts them and passes them on.

def gen_varargs(r, force=None):
    b = Builder(r, "varargs")
    b.shapes = [(2, 3)]
    b.dynamic = r.choice([None, None, False])
    kinds = r.choice([["t"], ["n"], ["t", "n"]])

    def positional(r2, ctx):
        return [b.tensor(ctx["shape"], r=r2) if r2.choice(kinds) == "t" else str(r2.choice([2, 3]))
                for _ in range(r2.randint(0, 3))], {}

    def keywords(r2, ctx):
        names = r2.sample(["scale", "flag", "w"], r2.randint(0, 3))
        values = {"scale": str(r2.choice([2, 3])), "flag": str(r2.choice([True, False])),
                  "w": b.tensor(ctx["shape"], r=r2)}
        return [], {n: values[n] for n in names}

    b.varargs = [("*args", positional), ("**kwargs", keywords)]

    def loop(b):  # with no args, `a` stays unbound: a resume unit must not read it
        b.line(bound("a") + "for a in args:\n    y = y + a")

    def count(b):
        b.line(r.choice(["y = y * len(args)", "y = y + len(kwargs)", "y = y * (len(args) + len(kwargs))"]))

    def branch(b):
        two_branches(b, r.choice(["len(args) > 1", "args", "not args"]))

    def kwargs_counts(b):  # known: the truth of **kwargs
        two_branches(b, r.choice(["kwargs", "not kwargs"]))

    def forward(b):
        b.top.append("def helper(y, *rest):\n    for v in rest:\n        y = y * v\n    return y")
        b.line("y = helper(y, *args)")

    def keyword_read(b):
        b.line(r.choice(['if "scale" in kwargs:\n    y = y * kwargs["scale"]',
                         'y = y * kwargs.get("scale", 1)', "for k in kwargs:\n    y = y + 1"]))

    pool = {"loop": loop, "count": count, "branch": branch, "forward": forward, "keyword_read": keyword_read,
            "kwargs_counts": kwargs_counts}
    add_features(b, pool, force=force)
    return b.build()


# ---- family: writes ----------------------------------------------------------------------------------
# fn writes state: it appends to a list argument, stores into a dict argument, writes a global
# or an attribute; or it changes a tensor in place (an argument or a value it computed).

def gen_writes(r, force=None):
    b = Builder(r, "writes")
    b.shapes = [(2, 3)]
    # x requires grad in some calls: an in-place write into it (or into a view of it) raises
    b.rg = [False, False, True] if enabled("side_effects_before_error") else [False]
    b.dynamic = r.choice([None, None, False])
    b.top.append(OBJECT_CLASSES)
    b.top.append("G_COUNT = 0")
    b.state += ["G_COUNT", "cfg.calls"]

    def list_append(b):
        b.params.append(("acc", lambda r2, ctx: r2.choice(["[]", "[1]"])))
        b.line("acc.append(y * 2)\ny = y + len(acc)")

    def dict_store(b):
        b.params.append(("d", lambda r2, ctx: "{}"))
        b.line('d["k"] = y + 1\ny = y * 2')

    def global_write(b):
        b.body.insert(0, "    global G_COUNT")
        b.line("G_COUNT = G_COUNT + 1\ny = y * G_COUNT")

    def attr_write(b):
        b.line("cfg.calls = cfg.calls + 1\ny = y - cfg.calls")

    def inplace(b):
        b.line(r.choice(["x.add_(1)\ny = y * 2", "x.mul_(2)\ny = x + y", "y = y * 1\ny.add_(3)",
                         "y += 1", "y = x * 2\ny += x", "x[0] = 5.0\ny = y + x"]))

    def view_write(b):  # a view made in one graph, written after a graph break
        views = ["x.t()", "x[0]", "x.reshape(-1)"]
        if b.rg == [False]:  # mini's eager autograd refuses an in-place op on a view of a value requiring grad
            views.append("(y * 1).t()")
        view = r.choice(views)
        b.line(f"v = {view}\ng = mini.is_grad_enabled()\nv.mul_(2)\ny = y + v.sum()")

    pool = {"list_append": list_append, "dict_store": dict_store, "global_write": global_write,
            "attr_write": attr_write, "inplace": inplace, "view_write": view_write}
    add_features(b, pool, 1, 3, force=force)
    return b.build()
