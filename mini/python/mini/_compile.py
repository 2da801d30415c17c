"""mini.compile and its companions (explain, CompileCounter, reset, config, logs), over the
C++ capture stage in mini._C. Names and behaviour follow torch.compile / torch._dynamo."""
import contextlib
import functools
import os
import sys

from . import _C
from .nn import Module as _Module  # mini/__init__.py imports nn first

_BUILTIN_BACKENDS = ("eager", "aot_eager", "inductor")
_module_call = _Module.__call__  # what a compiled module calls, unless its class overrides it


class _Config:
    """mini.config: the knobs of capture. Change attributes directly or with patch()."""

    # suppress_errors: a graph the backend fails to compile (no compiler, a failing one, a
    # code generation bug) runs eagerly with a warning instead of raising, as torch's
    # partitioner: how "inductor" splits a training graph: "recompute" (mini's greedy rule:
    # cheap pointwise ops recomputed in the backward) or "min-cut" (torch's max-flow over bytes)
    # fused_attention: F.scaled_dot_product_attention in a compiled graph: one extern call to the
    # fused kernel with its backward ("auto": where FlashAttention runs, CUDA bfloat16 or float32
    # with head dim 64 or 128; "always": wherever the fused kernel runs, the CPU too; "never": its matmuls
    # and softmax, which fusion sees). Read while tracing: it applies to graphs compiled after.
    # optimize_ddp: a graph captured inside DistributedDataParallel's forward is split at DDP's gradient
    # buckets and each piece compiled on its own, so that a bucket's all-reduce starts while the rest
    # of the backward runs (torch._dynamo.config.optimize_ddp; notes/distributed.md).
    # cache_policy: how a compiled function's entries are ordered and what happens at
    # cache_size_limit: "recent" (torch's: a hit and a new compile go to the front; at the limit
    # the function runs eagerly), "oldest" (entries stay in compile order; the same limit) or
    # "yours" (the course kit's A6, notes/assignments/A6.md). Applies to the next lookup.
    _fields = dict(cache_size_limit=8, cache_policy="recent", automatic_dynamic_shapes=True, capture_scalar_outputs=False,
                   suppress_errors=False, partitioner="recompute", fused_attention="auto", optimize_ddp=True)
    _choices = dict(cache_policy=("recent", "oldest", "yours"), partitioner=("recompute", "min-cut"), fused_attention=("auto", "always", "never"))

    def __init__(self):
        object.__setattr__(self, "_values", dict(self._fields))
        object.__setattr__(self, "cache_dir", self._default_cache_dir())
        self._push()

    @staticmethod
    def _default_cache_dir():
        """$MINI_CACHE_DIR, else ~/.cache/mini (what mini.config.cache_dir = None restores)."""
        return os.environ.get("MINI_CACHE_DIR") or os.path.join(os.path.expanduser("~"), ".cache", "mini")

    def __getattr__(self, name):
        if name == "recompile_limit":  # torch 2.11's newer name for the same limit
            name = "cache_size_limit"
        try:
            return self._values[name]
        except KeyError:
            raise AttributeError(f"mini.config has no option '{name}'; options: "
                                 f"{', '.join(sorted(self._fields))}, cache_dir") from None

    def __setattr__(self, name, value):
        if name == "recompile_limit":
            name = "cache_size_limit"
        if name == "cache_dir":  # a folder (str or os.PathLike), or None for the default
            path = self._default_cache_dir() if value is None else value
            if isinstance(path, os.PathLike):
                path = os.fspath(path)
            if not isinstance(path, str):
                raise TypeError(f"mini.config.cache_dir must be a folder (str or os.PathLike), or None for the "
                                f"default ($MINI_CACHE_DIR or ~/.cache/mini), got {type(value).__name__}")
            if not path:
                raise ValueError("mini.config.cache_dir must name a folder, got ''; None restores the default "
                                 "($MINI_CACHE_DIR or ~/.cache/mini)")
            object.__setattr__(self, name, path)
            self._push()
            return
        if name not in self._fields:
            raise AttributeError(f"mini.config has no option '{name}'; options: "
                                 f"{', '.join(sorted(self._fields))}, cache_dir")
        expected = type(self._fields[name])
        if not isinstance(value, expected) or (expected is int and isinstance(value, bool)):
            raise TypeError(f"mini.config.{name} must be {expected.__name__}, got {type(value).__name__}")
        if name in self._choices and value not in self._choices[name]:
            raise ValueError(f"mini.config.{name} must be one of {', '.join(map(repr, self._choices[name]))}, "
                             f"got {value!r}")
        if name == "cache_size_limit" and value < 0:
            raise ValueError(f"mini.config.cache_size_limit must be >= 0 (the compiles kept per function; "
                             f"0 runs every function eagerly), got {value}")
        self._values[name] = value
        self._push()

    def _push(self):
        v = self._values
        _C._set_config(v["cache_size_limit"], v["cache_policy"], v["automatic_dynamic_shapes"], v["capture_scalar_outputs"],
                       self.cache_dir, v["suppress_errors"], v["partitioner"], v["fused_attention"],
                       v["optimize_ddp"])

    @contextlib.contextmanager
    def patch(self, **changes):
        """with mini.config.patch(cache_size_limit=2): ..."""
        saved = {k: getattr(self, k) for k in changes}
        for k, v in changes.items():
            setattr(self, k, v)
        try:
            yield self
        finally:
            for k, v in saved.items():
                setattr(self, k, v)

    def __repr__(self):
        return "mini.config(" + ", ".join(f"{k}={v!r}" for k, v in self._values.items()) + ")"


config = _Config()


def set_logs(*channels):
    """Turn MINI_LOGS channels on (graph_breaks, recompiles, guards, graph_code, dynamic, ...).
    set_logs() turns them all off."""
    names = []
    for c in channels:
        names.extend(x.strip() for x in c.split(",") if x.strip())
    _C._set_logs(names)


if os.environ.get("MINI_LOGS"):
    set_logs(os.environ["MINI_LOGS"])


def reset():
    """Forget every compiled entry, counter and explain record (torch._dynamo.reset())."""
    _C._reset()


def _resolve_backend(backend):
    if isinstance(backend, str):
        if backend not in _BUILTIN_BACKENDS:
            raise ValueError(f"unknown backend '{backend}': use one of {', '.join(_BUILTIN_BACKENDS)} "
                             "or a callable backend(graph_module, example_inputs)")
        return sys.intern(backend)  # built-in: "eager"/"aot_eager" run the graph, "inductor" compiles it
    if callable(backend):
        return backend
    raise TypeError(f"backend must be a string or a callable, got {type(backend).__name__}")


def _request(backend, fullgraph, dynamic, mode):
    if mode not in ("default", "reduce-overhead", "max-autotune", None):
        raise ValueError(f"unknown mode '{mode}': use 'default', 'reduce-overhead' or 'max-autotune'")
    if dynamic not in (None, True, False):
        raise TypeError("dynamic must be None, True or False")
    return _C.CompileRequest(_resolve_backend(backend), bool(fullgraph), -1 if dynamic is None else int(dynamic),
                             mode or "default")


def _compiled_function(fn, backend, fullgraph, dynamic, mode):
    """What mini.compile returns for a function: a C callable that runs fn with the frame
    hook on (so its frame is captured, cached and run compiled), then turns it off."""
    compiled = _C._compiled_call(fn, _request(backend, fullgraph, dynamic, mode))
    try:
        functools.update_wrapper(compiled, fn)
    except AttributeError:  # a callable object without __name__ and friends
        pass
    compiled._mini_orig_callable = fn  # what compile() unwraps (torch: _torchdynamo_orig_callable)
    return compiled


def _innermost(model):
    """The function or module under any number of mini.compile wrappers (torch's innermost_fn):
    compiling a compiled function compiles the original with the new settings. Without this the
    inner wrapper would turn the hook on with its own backend, and the outer one's (explain's
    recorder, a CompileCounter) would never see a graph."""
    while getattr(model, "_mini_orig_callable", None) is not None:
        model = model._mini_orig_callable
    return model


class _CompiledFunction:
    """The compiled form of a module's forward (see _CompiledModule)."""

    def __init__(self, fn, backend, fullgraph, dynamic, mode):
        self._fn = fn
        self._call = _compiled_function(fn, backend, fullgraph, dynamic, mode)

    def __call__(self, *args, **kwargs):
        return self._call(*args, **kwargs)


def _call_forward(module, *args, **kwargs):
    # Looks forward up at each call, as Module.__call__ does (a forward set on the instance
    # later is the one that runs). This frame is mini's own code, which the frame hook runs
    # as it is: the frame captured is forward's, whose cache every instance of the class shares.
    return module.forward(*args, **kwargs)


def _call_module(module, *args, **kwargs):
    # What calling the module runs, looked up at each call as Python looks it up: the class's
    # own __call__ where it overrides nn.Module's (torch's compiled module runs
    # type(m).__call__ too; its frame is the one captured), else forward.
    call = type(module).__call__
    if call is not _module_call:
        return call(module, *args, **kwargs)
    return module.forward(*args, **kwargs)


class _CompiledModule(_CompiledFunction):
    """What mini.compile returns for an nn.Module (torch's OptimizedModule): calling it runs
    what calling the module runs, compiled; other attributes are the module's. `forward_only`
    (Module.compile, which nn.Module.__call__ calls back) skips a class's own __call__."""

    def __init__(self, module, backend, fullgraph, dynamic, mode, forward_only=False):
        call = _call_forward if forward_only else _call_module
        super().__init__(functools.partial(call, module), backend, fullgraph, dynamic, mode)
        self._orig_mod = self._mini_orig_callable = module
        self._forward_only = forward_only

    def _captured_code(self):
        """The code object whose frame a call captures (cache_entries reads its cache)."""
        call = type(self._orig_mod).__call__
        if self._forward_only or call is _module_call:
            return getattr(getattr(self._orig_mod, "forward", None), "__code__", None)
        return getattr(call, "__code__", None)

    def __getattr__(self, name):
        return getattr(self.__dict__["_orig_mod"], name)

    def __repr__(self):
        return f"OptimizedModule({self._orig_mod!r})"


def compile(model=None, *, backend="inductor", mode="default", dynamic=None, fullgraph=False):  # noqa: A001
    """Compile a function or nn.Module, like torch.compile. Usable as @mini.compile and
    @mini.compile(backend=...)."""
    if model is None:
        return lambda fn: compile(fn, backend=backend, mode=mode, dynamic=dynamic, fullgraph=fullgraph)
    if not callable(model):
        raise TypeError(f"mini.compile expects a function or an nn.Module, got {type(model).__name__}")
    model = _innermost(model)
    if isinstance(model, _Module):
        return _CompiledModule(model, backend, fullgraph, dynamic, mode)
    return _compiled_function(model, backend, fullgraph, dynamic, mode)


def _compile_forward(module, *, backend="inductor", mode="default", dynamic=None, fullgraph=False):
    """Module.compile's compiled form: the module's forward (what nn.Module.__call__ runs), with
    mini.compile's keyword arguments."""
    return _CompiledModule(module, backend, fullgraph, dynamic, mode, forward_only=True)


class CompileCounter:
    """A backend that counts what it is given: frame_count (graphs compiled) and op_count
    (their call_function nodes). It runs each graph with eager ops."""

    def __init__(self):
        self.frame_count = 0
        self.op_count = 0

    def __call__(self, gm, example_inputs):
        self.frame_count += 1
        self.op_count += gm.op_count()
        return gm.forward

    def clear(self):
        self.frame_count = 0
        self.op_count = 0


class BreakReason:
    def __init__(self, reason, location, code):
        self.reason, self.location, self.code = reason, location, code

    def __repr__(self):
        return f"{self.reason} ({self.location})"


class ExplainOutput:
    """What mini.explain(fn)(*args) returns: the graphs compiled, the breaks and guards."""

    def __init__(self, graphs, break_reasons, guards, out):
        self.graphs = graphs
        self.graph_count = len(graphs)
        # torch 2.11 counts breaks as graphs - 1, so a function that compiles no graph (its
        # tensor work all outside the graph, say `return x.shape`) reports -1, as torch does
        self.graph_break_count = len(graphs) - 1
        self.break_reasons = break_reasons
        self.op_count = sum(g.op_count() for g in graphs)
        self.guards = guards
        self.out = out

    def __str__(self):
        lines = [f"Graph Count: {self.graph_count}", f"Graph Break Count: {self.graph_break_count}",
                 f"Op Count: {self.op_count}"]
        if self.break_reasons:
            lines.append("Break Reasons:")
            for i, r in enumerate(self.break_reasons, 1):
                lines.append(f"  Break Reason {i}:\n    Reason: {r.reason}\n    User Stack: {r.location}")
        lines.append("Ops per Graph:")
        for i, g in enumerate(self.graphs, 1):
            lines.append(f"  Ops {i}:")
            lines.extend(f"    {n.format_node()}" for n in g.nodes if n.op == "call_function")
        return "\n".join(lines)


def explain(fn):
    """mini.explain(fn)(*args, **kwargs): compile fn with a recording backend, run it once,
    and report graphs, graph breaks (with reasons and source lines), ops and guards."""
    def run(*args, **kwargs):
        reset()  # as torch's explain: a fresh cache, so every graph is compiled and seen
        graphs = []

        def record(gm, example_inputs):
            graphs.append(gm)
            return gm.forward

        out = compile(fn, backend=record)(*args, **kwargs)
        events = _C._compile_events()
        breaks = [BreakReason(*b) for b in _C._break_events()]
        return ExplainOutput(graphs, breaks, [e[1] for e in events], out)
    return run


def mark_dynamic(t, dim):
    """Declare dimension `dim` of tensor t dynamic before compiling (torch._dynamo.mark_dynamic)."""
    from ._tensor import Tensor
    if not isinstance(t, Tensor):
        raise TypeError(f"mark_dynamic expects a mini.Tensor, got {type(t).__name__}")
    dims = dim if isinstance(dim, (list, tuple)) else [dim]
    existing = getattr(t, "_mini_dynamic_dims", set())
    for d in dims:
        if isinstance(d, bool) or not isinstance(d, int):
            raise TypeError(f"mark_dynamic: dim must be an int (a dimension index) or a list of ints, "
                            f"got {type(d).__name__} {d!r}")
        if not -t.dim() <= d < t.dim():
            raise IndexError(f"mark_dynamic: dim {d} is out of range for a tensor of rank {t.dim()}")
        existing.add(d % t.dim())
    t._mini_dynamic_dims = existing
