"""mini.nn.utils: clip_grad_norm_, as torch.nn.utils'."""

import math

import mini


def clip_grad_norm_(parameters, max_norm, norm_type=2.0, error_if_nonfinite=False):
    """Scales every gradient in place so that their joint norm (the norm of all of them
    concatenated) is at most max_norm; returns that norm before clipping, a 0-d tensor.
    norm_type 2.0 or float('inf')."""
    if isinstance(parameters, mini.Tensor):
        parameters = [parameters]
    grads = [p.grad for p in parameters if p.grad is not None]
    if not grads:
        return mini.zeros(())
    norm_type = float(norm_type)
    with mini.no_grad():
        if norm_type == float("inf"):
            norms = [g.abs().amax() for g in grads]
            total = norms[0]
            for n in norms[1:]:
                total = mini.maximum(total, n)
        elif norm_type == 2.0:
            total = sum((g * g).sum().to(device=grads[0].device) for g in grads) ** 0.5
        else:
            raise NotImplementedError(f"clip_grad_norm_: norm_type={norm_type} is not supported by mini (2.0 or inf)")
        if error_if_nonfinite and not math.isfinite(float(total.item())):
            raise RuntimeError(f"The total norm of order {norm_type} for gradients is non-finite, so it cannot be clipped")
        scale = mini.minimum(mini.full((), float(max_norm)) / (total + 1e-6), mini.ones(()))
        for g in grads:
            g.mul_(scale.to(device=g.device))
    return total
