"""The guard-soundness fuzzer (issue 10 §2): scenarios and the engine that runs them. The tests
are in test_guard_fuzz.py; notes/guards.md says how to run a long run. Programs, and the
families that generate them, are in guard_fuzz_programs.py, guard_fuzz_tensors.py and
guard_fuzz_python.py.

A *scenario* is a program and a list of *steps*. Each step runs a few knobs, then calls `fn`
with arguments written as Python expressions (tensors through `t(shape, dtype, seed, rg,
layout)`), sometimes under `mini.no_grad()`. It runs in two *worlds*, each the program exec'd
into its own namespace: one calls `fn` itself (eager), the other `mini.compile(fn, backend,
dynamic)`. After every step the worlds must agree on
  * the result: its structure, Python values, and each tensor's shape, dtype, requires_grad
    and values (float tolerance 1e-4 relative + 1e-5 absolute; NaN equals NaN);
  * an exception: eager raised, so the compiled call raises the same type;
  * the tensor arguments afterwards (in-place writes) and the program's `state()` (a nonlocal
    counter, a global or an attribute the program writes);
  * the gradients: when the result requires grad, backward of a fixed weighting of it, then
    each argument leaf's and each parameter's `.grad`.

Steps are text, so a failing scenario prints as a standalone script (`Scenario.script`), is
shrunk to fewer steps, and is replayed by `replay(family, seed, backend)`.
"""
import contextlib
import random
import warnings

import numpy as np

import mini
from guard_fuzz_programs import linear, made_leaves, param, t
from guard_fuzz_python import (gen_closures, gen_containers, gen_globals, gen_modules, gen_objects,
                               gen_varargs, gen_writes)
from guard_fuzz_tensors import gen_dtypes_grad, gen_layouts, gen_scalars, gen_shapes

RTOL, ATOL = 1e-4, 1e-5

# Each family's generator; the known bugs' families are a general family's generator with
# their feature forced into every program.
GENERATORS = {
    "shapes": gen_shapes,
    "layouts": gen_layouts,
    "dtypes_grad": gen_dtypes_grad,
    "scalars": gen_scalars,
    "globals": gen_globals,
    "closures": gen_closures,
    "objects": gen_objects,
    "modules": gen_modules,
    "containers": gen_containers,
    "varargs": gen_varargs,
    "writes": gen_writes,
    "dynamic_sizes": lambda r: gen_shapes(r, force="dynamic_sizes"),
    "closure_writes": lambda r: gen_closures(r, force="closure_writes"),
    "intermediate_requires_grad": lambda r: gen_dtypes_grad(r, force="intermediate_requires_grad"),
    "inplace": lambda r: gen_writes(r, force="inplace"),
    "kwargs_counts": lambda r: gen_varargs(r, force="kwargs_counts"),
    "module_methods": lambda r: gen_modules(r, force="module_methods"),
    "duplicate_input": lambda r: gen_layouts(r, force="duplicate_input"),
}


# ---- scenarios ---------------------------------------------------------------------------

class Step:
    def __init__(self, setup, args, kwargs, no_grad=False):
        self.setup, self.args, self.kwargs, self.no_grad = list(setup), list(args), dict(kwargs), no_grad

    def call_text(self, name):
        parts = self.args + [f"{k}={v}" for k, v in self.kwargs.items()]
        return f"{name}({', '.join(parts)})"

    def lines(self, name):
        out = list(self.setup)
        call = self.call_text(name)
        if "_ARGS" in call:  # arguments that are earlier ones again
            out += ["_ARGS = []"] + [f"_ARGS.append({a})" for a in self.args]
            call = Step(["_ARGS"], ["*_ARGS"], self.kwargs).call_text(name)
        if self.no_grad:
            out += ["with mini.no_grad():", f"    out = {call}"]
        else:
            out.append(f"out = {call}")
        return out


class Scenario:
    def __init__(self, family, seed, program, steps):
        self.family, self.seed, self.program, self.steps = family, seed, program, steps

    def script(self, backend, upto=None):
        """The scenario as a standalone script that runs the compiled side."""
        p = self.program
        lines = ["import sys; sys.path.insert(0, 'tests/python')  # from the repository root",
                 "import mini",
                 "from guard_fuzz_programs import t, param, linear",
                 p.source.rstrip(),
                 f"fn_c = mini.compile(fn, backend={backend!r}, dynamic={p.dynamic!r})"]
        for i, s in enumerate(self.steps[:upto]):
            lines.append(f"# call {i + 1}")
            lines += s.lines("fn_c")
        return "\n".join(lines) + "\n"


def make_scenario(family, seed, n_steps):
    r = random.Random(f"{family}/{seed}")
    program = GENERATORS[family](r)
    steps = []
    for i in range(n_steps):
        setup = []
        if i > 0 and program.knobs:
            for _ in range(r.choice([0, 1, 1, 1, 2])):
                stmt = r.choice(program.knobs)(r)
                if stmt not in setup:
                    setup.append(stmt)
        args, kwargs = program.call(r)
        no_grad = program.no_grad_calls and r.random() < 0.3
        steps.append(Step(setup, args, kwargs, no_grad))
    return Scenario(family, seed, program, steps)


# ---- running a scenario in two worlds --------------------------------------------------------

class World:
    """The program exec'd into a namespace of its own; `fn` plain or compiled."""

    def __init__(self, program, backend, filename):
        self.ns = {"__name__": "guard_fuzz_program", "mini": mini, "t": t, "param": param, "linear": linear}
        exec(compile(program.source, filename, "exec"), self.ns)  # noqa: S102
        self.fn = self.ns["fn"]
        if backend is not None:
            self.fn = mini.compile(self.fn, backend=backend, dynamic=program.dynamic)
        self.leaves = []

    def run(self, step):
        """Runs one step: (outcome, args, kwargs). outcome: ("ok", result) or ("raised", type name)."""
        for stmt in step.setup:
            try:
                exec(stmt, self.ns)  # noqa: S102
            except Exception:  # noqa: BLE001, S110  (the same in both worlds; their state is compared)
                pass
        made_leaves.clear()
        args = self.ns["_ARGS"] = []  # an argument may be an earlier one again: _ARGS[0]
        for a in step.args:
            args.append(eval(a, self.ns))  # noqa: S307
        kwargs = {k: eval(v, self.ns) for k, v in step.kwargs.items()}  # noqa: S307
        self.leaves = list(made_leaves)
        grad = mini.no_grad() if step.no_grad else contextlib.nullcontext()
        try:
            with grad:
                return ("ok", self.fn(*args, **kwargs)), args, kwargs
        except Exception as e:  # noqa: BLE001
            return ("raised", f"{type(e).__name__}: {str(e)[:300]}"), args, kwargs

    def state(self):
        state = self.ns.get("state")
        return state() if state else None

    def grad_leaves(self):
        extra = self.ns.get("grad_leaves")
        return self.leaves + (list(extra()) if extra else [])


def diff(got, want, path):
    """None when got (compiled) matches want (eager), else what differs."""
    if isinstance(want, mini.Tensor):
        if not isinstance(got, mini.Tensor):
            return f"{path}: compiled gave {type(got).__name__}, eager a Tensor"
        g, w = describe(got), describe(want)
        if tuple(got.shape) != tuple(want.shape) or got.dtype != want.dtype:
            return f"{path}: compiled {g}, eager {w}"
        if got.requires_grad != want.requires_grad:
            return f"{path}: compiled requires_grad={got.requires_grad}, eager {want.requires_grad}"
        a = np.asarray(got.detach().tolist(), dtype=np.float64)
        b = np.asarray(want.detach().tolist(), dtype=np.float64)
        if not np.allclose(a, b, rtol=RTOL, atol=ATOL, equal_nan=True):
            return (f"{path}: values differ\n    compiled {np.round(a, 4).tolist()}\n"
                    f"    eager    {np.round(b, 4).tolist()}")
        return None
    if isinstance(want, (tuple, list)):
        if type(got) is not type(want) or len(got) != len(want):
            return f"{path}: compiled {summary(got)}, eager {summary(want)}"
        for i, (g, w) in enumerate(zip(got, want)):
            d = diff(g, w, f"{path}[{i}]")
            if d:
                return d
        return None
    if isinstance(want, dict):
        if type(got) is not dict or list(got) != list(want):
            return f"{path}: compiled {summary(got)}, eager {summary(want)}"
        for k in want:
            d = diff(got[k], want[k], f"{path}[{k!r}]")
            if d:
                return d
        return None
    if isinstance(want, (bool, int, float, str, type(None))):
        same = type(got) is type(want) and (got == want or (isinstance(want, float) and np.isclose(
            got, want, rtol=RTOL, atol=ATOL, equal_nan=True)))
        return None if same else f"{path}: compiled {got!r}, eager {want!r}"
    if type(got).__name__ != type(want).__name__:  # the program's objects: each world has its classes
        return f"{path}: compiled {type(got).__name__}, eager {type(want).__name__}"
    return None


def describe(v):
    return f"{str(v.dtype).replace('mini.', '')}{list(v.shape)}{' rg' if v.requires_grad else ''}"


def summary(v):
    if isinstance(v, mini.Tensor):
        return "Tensor " + describe(v)
    if isinstance(v, (tuple, list)):
        return f"{type(v).__name__} of {len(v)}"
    return repr(v)[:80]


def fixed_weights(shape, k):
    """The weights of the loss: the same in both worlds, not all one (so a wrong gradient
    shows in more than its sum)."""
    n = int(np.prod(shape)) if shape else 1
    w = (np.arange(n) % 5 + 1 + k) / 4.0
    return mini.tensor(w.reshape(shape).tolist() if shape else float(w[0]))


def differentiable_outputs(v, out):
    if isinstance(v, mini.Tensor):
        if v.requires_grad and v.dtype.is_floating_point:
            out.append(v)
    elif isinstance(v, (tuple, list)):
        for item in v:
            differentiable_outputs(item, out)
    elif isinstance(v, dict):
        for item in v.values():
            differentiable_outputs(item, out)
    return out


def backward(result):
    outs = differentiable_outputs(result, [])
    if not outs:
        return False
    loss = None
    for k, o in enumerate(outs):
        term = (o * fixed_weights(tuple(o.shape), k).to(o.dtype)).sum().to(mini.float64)
        loss = term if loss is None else loss + term
    loss.backward()
    return True


# Errors of mini's eager where compiled mini does what torch does (an in-place write into a
# view under autograd: functionalized while tracing, refused by mini's eager autograd): the
# worlds part there, and the scenario ends.
EAGER_LIMITS = ("not supported by mini's eager autograd",)


class EagerCannot(Exception):
    pass


def check_step(eager, compiled, step):
    """None if the compiled world agrees with the eager one after `step`, else the difference."""
    want, want_args, want_kwargs = eager.run(step)
    got, got_args, got_kwargs = compiled.run(step)
    if want[0] == "raised" and got[0] == "ok" and any(m in want[1] for m in EAGER_LIMITS):
        raise EagerCannot(want[1])
    if want[0] == "raised" or got[0] == "raised":
        if want[0] != got[0] or want[1].split(":")[0] != got[1].split(":")[0]:
            return (f"eager {'raised ' + want[1] if want[0] == 'raised' else 'returned'}, compiled "
                    f"{'raised ' + got[1] if got[0] == 'raised' else 'returned ' + summary(got[1])}")
    raised = want[0] == "raised"  # then the arguments and the state written must still agree
    problem = ((not raised and diff(got[1], want[1], "result")) or diff(got_args, want_args, "argument")
               or diff(got_kwargs, want_kwargs, "keyword argument")
               or diff(compiled.state(), eager.state(), "state()"))
    if problem or raised:
        return problem
    if step.no_grad:
        return None
    try:
        did = backward(want[1])
    except Exception:  # noqa: BLE001  (eager autograd cannot: nothing to compare)
        return None
    try:
        if did and not backward(got[1]):
            return "backward: the compiled result has nothing to differentiate"
    except Exception as e:  # noqa: BLE001
        return f"backward of the compiled result raised {type(e).__name__}: {str(e)[:300]}"
    for i, (g, w) in enumerate(zip(compiled.grad_leaves(), eager.grad_leaves())):
        if (g.grad is None) != (w.grad is None):
            return f"grad of leaf {i}: compiled {summary(g.grad)}, eager {summary(w.grad)}"
        if w.grad is not None:
            d = diff(g.grad, w.grad, f"grad of leaf {i} {describe(w)}")
            if d:
                return d
    return None


def run_scenario(scenario, backend, steps=None):
    """(index of the failing step, problem) or None when every step agrees."""
    steps = scenario.steps if steps is None else steps
    filename = f"<guard-fuzz {scenario.family} {scenario.seed}>"
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message="mini hit config.cache_size_limit")
        eager = World(scenario.program, None, filename)
        compiled = World(scenario.program, backend, filename)
        for i, step in enumerate(steps):
            try:
                problem = check_step(eager, compiled, step)
            except EagerCannot:
                return None
            except Exception as e:  # noqa: BLE001  (the harness itself: report, never hide)
                problem = f"the check raised {type(e).__name__}: {e}"
            if problem:
                return i, problem
    return None


def shrink(scenario, backend, failing_index, budget):
    """Fewer steps that still fail: drops chunks of the steps before the failing one."""
    steps = scenario.steps[:failing_index + 1]
    chunk = max(1, len(steps) // 2)
    while chunk >= 1 and budget > 0:
        i, progress = 0, False
        while i < len(steps) - 1 and budget > 0:
            trial = steps[:i] + steps[i + chunk:] if i + chunk < len(steps) else None
            budget -= 1
            found = trial and run_scenario(scenario, backend, trial)
            if found:
                steps = trial[:found[0] + 1]
                progress = True
            else:
                i += chunk
        if not progress:
            chunk //= 2
    return steps


def report(scenario, backend, failure, shrink_budget):
    index, problem = failure
    small = Scenario(scenario.family, scenario.seed, scenario.program,
                     shrink(scenario, backend, index, shrink_budget))
    small_failure = run_scenario(small, backend) or failure
    return "\n".join([
        f"guard fuzz: family {scenario.family!r}, seed {scenario.seed}, backend {backend!r}, "
        f"dynamic={scenario.program.dynamic!r}, features {', '.join(scenario.program.features)}",
        f"call {index + 1} of {len(scenario.steps)}: {problem}",
        f"shrunk to {len(small.steps)} calls; call {small_failure[0] + 1}: {small_failure[1]}",
        "replay: PYTHONPATH=build/python .venv/bin/python -c \"import sys; sys.path.insert(0, 'tests/python'); "
        f"import guard_fuzz; guard_fuzz.replay({scenario.family!r}, {scenario.seed}, {backend!r})\"",
        "---- reproducer (the compiled side; the eager side calls fn in a fresh copy) ----",
        small.script(backend),
    ])


def replay(family, seed, backend, n_steps=None):
    """Runs one scenario again and prints what happened (for a reproducer)."""
    scenario = make_scenario(family, seed, n_steps or steps_for(family, seed))
    failure = run_scenario(scenario, backend)
    print(report(scenario, backend, failure, 60) if failure else f"{family} {seed} {backend}: every call agrees")


def steps_for(family, seed):
    return random.Random(f"steps/{family}/{seed}").randint(8, 30)
