"""mini: a small reimplementation of torch.compile, written in C++ and driven from Python.

This package is the torch-shaped surface: tensors (mini.tensor, mini.randn, ...),
autograd (backward, no_grad), mini.nn and mini.optim. See notes/ for each stage."""
import os as _os

# OpenMP's idle threads spin for a while before they sleep (libgomp: 300000 spins by default).
# On a machine with few cores they then take the CPU from OpenBLAS's own threads, and every
# matmul that follows a parallel kernel slows down (a training step of a 2-layer MLP: 32 ms
# instead of 15, notes/perf.md). 10000 spins still cover the gap between back-to-back kernels.
# Read by libgomp when it loads (with _C, next line); the user's own setting wins.
_os.environ.setdefault("GOMP_SPINCOUNT", "10000")

# OpenBLAS may not recognise a newer CPU and fall back to its SSE3 kernels, five times slower
# than the CPU's own (the GPU host's AVX-512 Xeon did): name the kernels from the CPU's flags
# before _C loads OpenBLAS, unless OPENBLAS_CORETYPE is set (mini/_cpu.py).
from ._cpu import choose_openblas_core as _choose_openblas_core  # noqa: E402

_choose_openblas_core()

from . import _C  # noqa: E402
from ._types import (Size, device, dtype, float32, float64, int64, bool, float, double, long,  # noqa: F401,A004
                     bfloat16)
from ._factories import (zeros, ones, empty, full, zeros_like, ones_like, full_like, empty_like,  # noqa: F401
                         randn, rand, randn_like, rand_like, arange, from_numpy, tensor)
from ._random import manual_seed, randint, randint_like, randperm, multinomial  # noqa: F401
from ._threads import set_num_threads, get_num_threads  # noqa: F401
from ._grad_mode import no_grad, enable_grad, set_grad_enabled, is_grad_enabled  # noqa: F401
from ._autocast_mode import autocast, is_autocast_enabled, get_autocast_dtype  # noqa: F401
from ._functional import (where, layer_norm, mse_loss, slice_scatter, cat, concat, stack,  # noqa: F401
                          allclose, functions as _functions)
from ._indexing import gather, index_select, topk  # noqa: F401
from ._tensor import Tensor, split, chunk, tril, triu, argmax, argmin  # noqa: F401
from ._metrics import metrics  # noqa: F401
from . import _factories, _functional, _grad_mode, _random, _tensor  # noqa: E402

globals().update(_functions)
del _functions

from . import nn, optim, cuda, backends, profiler, amp, compiler, autograd, distributed  # noqa: E402,F401
OutOfMemoryError = _C.OutOfMemoryError
from ._compile import (compile, explain, CompileCounter, reset, config, set_logs,  # noqa: E402,A004
                       mark_dynamic)
from . import _compile as _compile_module  # noqa: E402


def _register_capture():
    import os
    graph_functions = {fn: name for name, fn in _functional.functions.items()}
    graph_functions.update({_functional.where: "where", _functional.layer_norm: "layer_norm",
                            _functional.mse_loss: "mse_loss", _functional.embedding: "embedding",
                            _functional.attention_node: "attention_node",
                            _functional.slice_scatter: "slice_scatter", compiler.is_compiling: "is_compiling"})
    # function forms of methods capture handles itself (mini.split(x, 2) as x.split(2))
    graph_functions.update({getattr(_tensor, name): name for name in ("split", "chunk", "tril", "triu")})
    # factories and grad mode: capture records them by name (graph nodes, or the grad mode
    # the ops that follow are traced in)
    for module, names in _CAPTURED_BY_NAME.items():
        graph_functions.update({getattr(module, name): name for name in names})
    _C._register_bridge(nn.Module, Tensor, [bool, int64, float32, float64, bfloat16], graph_functions,
                        os.path.dirname(os.path.abspath(__file__)) + os.sep)
    _C._register_capture_types(Size, _grad_mode._GradMode,
                               _grad_mode._GradMode(False)(lambda: None).__code__)


_CAPTURED_BY_NAME = {
    _factories: ["zeros", "ones", "full", "empty", "zeros_like", "ones_like", "full_like", "empty_like", "rand",
                 "randn", "randn_like", "rand_like", "arange"],
    _random: ["randint"],
    _grad_mode: ["no_grad", "enable_grad", "set_grad_enabled", "is_grad_enabled"],
}


_register_capture()
Unsupported = _C.Unsupported

__all__ = ["Tensor", "tensor", "nn", "optim", "metrics", "compile", "explain", "CompileCounter",
           "reset", "config"]
