"""mini.nn: torch.nn's shape in plain Python over mini tensors.

    import mini
    import mini.nn as nn
    model = nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.Linear(32, 1))
    loss = nn.functional.mse_loss(model(x), y)

Modules and Parameter live in modules.py; the stateless functions in functional.py; the
in-place initialisers in init.py.
"""

from . import functional, init, utils
from .modules import (GELU, Dropout, Embedding, LayerNorm, Linear, Module, ModuleDict, ModuleList, Parameter, ReLU,
                      Sequential)

__all__ = [
    "functional",
    "init",
    "utils",
    "Module",
    "Parameter",
    "Linear",
    "ReLU",
    "GELU",
    "LayerNorm",
    "Sequential",
    "ModuleList",
    "ModuleDict",
    "Dropout",
    "Embedding",
]
