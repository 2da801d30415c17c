"""mini: a small reimplementation of torch.compile, written in C++ and driven from Python.

This package is the torch-shaped surface: tensors (mini.tensor, mini.randn, ...),
autograd (backward, no_grad), mini.nn and mini.optim. See notes/ for each stage."""
from . import _C
from ._tensor import (Tensor, Size, device, dtype, float32, float64, int64, bool, float,  # noqa: F401,A004
                      double, long, zeros, ones, empty, full, zeros_like, ones_like, full_like,
                      randn, rand, randn_like, arange, manual_seed, from_numpy, tensor,
                      no_grad, enable_grad, is_grad_enabled, where, layer_norm, mse_loss,
                      allclose, metrics, functions as _functions)

globals().update(_functions)
del _functions

from . import nn, optim  # noqa: E402,F401

__all__ = ["Tensor", "tensor", "nn", "optim", "metrics"]
