"""mini.nn.functional: the stateless layer functions, as in torch.nn.functional.

Each one delegates to one eager C++ op of `mini` (linear to two: matmul, then add), so what
runs, and what the kernel counters in `mini.metrics` count, is exactly that op.
"""

import mini


def linear(input, weight, bias=None):
    """input @ weight.t() + bias, with weight [out_features, in_features]."""
    output = mini.matmul(input, weight.t())
    if bias is not None:
        output = output + bias
    return output


def relu(input, inplace=False):
    if inplace:
        raise NotImplementedError(
            "relu(inplace=True): mini has no in-place relu_; use inplace=False"
        )
    return mini.relu(input)


def gelu(input, approximate="none"):
    if approximate not in ("none", "tanh"):
        raise ValueError(f"gelu: approximate must be 'none' or 'tanh', got {approximate!r}")
    return mini.gelu(input, approximate=approximate)


def softmax(input, dim):
    return mini.softmax(input, dim)


def log_softmax(input, dim):
    return mini.log_softmax(input, dim)


def layer_norm(input, normalized_shape, weight=None, bias=None, eps=1e-5):
    if isinstance(normalized_shape, int):
        normalized_shape = (normalized_shape,)
    return mini.layer_norm(input, tuple(normalized_shape), weight, bias, eps)


def mse_loss(input, target, reduction="mean"):
    if reduction not in ("mean", "sum", "none"):
        raise ValueError(
            f"mse_loss: reduction must be 'mean', 'sum' or 'none', got {reduction!r}"
        )
    return mini.mse_loss(input, target, reduction=reduction)
