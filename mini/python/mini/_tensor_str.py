"""How a tensor reads on the host (torch/_tensor_str.py): its values as a numpy array (_values,
which tolist, topk, multinomial and allclose read too) and the tensor(...) text of repr and
str, torch's layout."""
import numpy as np

from ._types import bool, bfloat16, float32, int64  # noqa: A004


def _values(self):
    """The values as a numpy array; bfloat16 ones widened to float32 (exact)."""
    t = self.detach().cpu()
    return (t.float() if t.dtype is bfloat16 else t).numpy()


def _repr(self):
    arr = _values(self)
    if self.dtype.is_floating_point and arr.size and np.all(np.isfinite(arr)) and \
            np.all(arr == np.round(arr)) and np.abs(arr).max() < 1e8:
        body = np.array2string(arr, separator=", ", prefix="tensor(",
                               formatter={"float_kind": lambda v: f"{v:.0f}."})
    else:
        body = np.array2string(arr, separator=", ", prefix="tensor(", precision=4)
    extras = []
    if self.dtype not in (float32, int64, bool) or (self.dtype is bool and False):
        extras.append(f"dtype={self.dtype!r}")
    if arr.size == 0:
        extras.append(f"size={tuple(self.shape)}")
    if self._device != "cpu":
        extras.insert(0, f"device='{self._device}'")
    if self.grad_fn is not None:
        extras.append(f"grad_fn={self.grad_fn!r}")
    elif self.requires_grad:
        extras.append("requires_grad=True")
    return "tensor(" + body + "".join(", " + e for e in extras) + ")"
