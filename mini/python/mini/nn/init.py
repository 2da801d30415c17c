"""mini.nn.init: torch.nn.init's in-place initialisers, over mini tensors.

Each fills its tensor in place, outside autograd (a parameter stays a leaf), and returns it:

    nn.init.normal_(linear.weight, mean=0.0, std=0.02)
    nn.init.zeros_(linear.bias)
"""

import mini


def _fill(tensor, values):
    if not isinstance(tensor, mini.Tensor):
        raise TypeError(f"nn.init expects a mini.Tensor, got {type(tensor).__name__}")
    with mini.no_grad():
        tensor.copy_(values.to(device=tensor.device, dtype=tensor.dtype))
    return tensor


def normal_(tensor, mean=0.0, std=1.0):
    """Values drawn from N(mean, std^2)."""
    return _fill(tensor, mini.randn(*tensor.shape) * std + mean)


def uniform_(tensor, a=0.0, b=1.0):
    """Values drawn uniformly from [a, b)."""
    return _fill(tensor, mini.rand(*tensor.shape) * (b - a) + a)


def constant_(tensor, val):
    return _fill(tensor, mini.full(tuple(tensor.shape), float(val)))


def zeros_(tensor):
    return _fill(tensor, mini.zeros(*tensor.shape))


def ones_(tensor):
    return _fill(tensor, mini.ones(*tensor.shape))
