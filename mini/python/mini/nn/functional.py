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


def dropout(input, p=0.5, training=True, inplace=False):
    """Each element zeroed with probability p (a fresh uniform draw per call), the others
    scaled by 1/(1-p), when training; `input` itself otherwise. In compiled code the draw is a
    random node of the graph (mini.manual_seed makes it repeatable)."""
    if not 0.0 <= p <= 1.0:
        raise ValueError(f"dropout probability has to be between 0 and 1, but got {p}")
    if inplace:
        raise NotImplementedError("F.dropout(inplace=True) is not supported by mini: use inplace=False "
                                  "(the result is the same tensor values)")
    if not training or p == 0.0:
        return input
    if p == 1.0:
        return input * 0.0
    keep = mini.rand(*input.shape, device=input.device, dtype=input.dtype) >= p
    return input * keep * (1.0 / (1.0 - p))
