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
from ._tensor import (Tensor, Size, device, dtype, float32, float64, int64, bool, float,  # noqa: F401,A004
                      double, long, bfloat16, zeros, ones, empty, full, zeros_like, ones_like, full_like,
                      empty_like, randn, rand, randn_like, rand_like, randint, randint_like, randperm, arange,
                      manual_seed, set_num_threads,
                      get_num_threads, from_numpy, tensor,
                      no_grad, enable_grad, set_grad_enabled, is_grad_enabled, autocast,
                      is_autocast_enabled, get_autocast_dtype, where, layer_norm,
                      mse_loss, split, chunk, tril, triu, argmax, argmin, slice_scatter, cat, concat, stack,
                      gather, index_select, topk, multinomial,
                      allclose, metrics, functions as _functions)

globals().update(_functions)
del _functions

from . import nn, optim, cuda, backends, profiler, amp, compiler  # noqa: E402,F401
OutOfMemoryError = _C.OutOfMemoryError
from ._compile import (compile, explain, CompileCounter, reset, config, set_logs,  # noqa: E402,A004
                       mark_dynamic)
from . import _compile as _compile_module  # noqa: E402


def _register_capture():
    import os
    graph_functions = {fn: name for name, fn in _tensor.functions.items()}
    graph_functions.update({_tensor.where: "where", _tensor.layer_norm: "layer_norm",
                            _tensor.mse_loss: "mse_loss", _tensor.embedding: "embedding",
                            _tensor.attention_node: "attention_node",
                            _tensor.slice_scatter: "slice_scatter", compiler.is_compiling: "is_compiling"})
    # function forms of methods capture handles itself (mini.split(x, 2) as x.split(2))
    graph_functions.update({getattr(_tensor, name): name for name in ("split", "chunk", "tril", "triu")})
    # factories and grad mode: capture records them by name (graph nodes, or the grad mode
    # the ops that follow are traced in)
    graph_functions.update({getattr(_tensor, name): name for name in _CAPTURED_BY_NAME})
    _C._register_bridge(nn.Module, Tensor, [bool, int64, float32, float64, bfloat16], graph_functions,
                        os.path.dirname(os.path.abspath(__file__)) + os.sep)
    _C._register_capture_types(Size, _tensor._GradMode,
                               _tensor._GradMode(False)(lambda: None).__code__)


_CAPTURED_BY_NAME = ["zeros", "ones", "full", "empty", "zeros_like", "ones_like", "full_like",
                     "empty_like", "rand", "randn", "randn_like", "rand_like", "randint", "arange", "no_grad",
                     "enable_grad", "set_grad_enabled", "is_grad_enabled"]


from . import _tensor  # noqa: E402
_register_capture()
Unsupported = _C.Unsupported

__all__ = ["Tensor", "tensor", "nn", "optim", "metrics", "compile", "explain", "CompileCounter",
           "reset", "config"]
