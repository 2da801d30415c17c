"""Indexing with a list or an int64 tensor (torch's advanced indexing: x[:, [1, 2]]) and the
index ops gather, index_select, topk and narrow, composed from ops capture and autograd know:
a selection is a one-hot compare and a sum. Basic indexing (ints, slices, None, ...) and
assignment stay C++'s (Tensor.__getitem__ as _C binds it). Importing this module installs
Tensor.__getitem__, __setitem__, gather, index_select, topk and narrow."""
import builtins
import collections

import numpy as np

from ._C import Tensor
from ._factories import arange, from_numpy, tensor
from ._functional import _as_tensor, where
from ._tensor_str import _values
from ._types import bool, int64, _dim_index  # noqa: A004

return_types_topk = collections.namedtuple("topk", ["values", "indices"])


def _check_index_range(index, low, n, what, d):
    """IndexError naming the first index outside [low, n), as torch raises: a one-hot select
    would read such an index as 0. The values are read on the host (inside a compiled function
    this is a graph break, and the op runs eagerly)."""
    if ((index < low).long() + (index >= n).long()).sum().item() > 0:
        host = _values(index)
        bad = host[(host < low) | (host >= n)].flat[0]
        raise IndexError(f"{what}(): index {bad} is out of range for dim {d} of size {n}")


def _one_hot_gather(self, d, index):
    """gather along dim d of indices known to be in [0, size): a one-hot select and a sum, so
    that it has a gradient and runs on every device and in a graph (memory of index.numel() x
    self.size(d) booleans: for the small selections models make)."""
    source = self
    for e in range(self.dim()):  # torch reads only the first index.size(e) entries of other dims
        if e != d and index.shape[e] < self.shape[e]:
            source = source.narrow(e, 0, index.shape[e])
    classes = arange(self.shape[d], device=self.device)
    for _ in range(self.dim() - d - 1):
        classes = classes.unsqueeze(-1)
    hit = index.unsqueeze(d + 1) == classes  # [..., k, n, ...]
    return where(hit, source.unsqueeze(d), 0).sum(d + 1)


def _gather(self, dim, index):
    """out[..., j, ...] = self[..., index[..., j, ...], ...] along dim (torch.gather)."""
    d = _dim_index(self, dim)
    if index.dtype != int64 or index.dim() != self.dim():
        raise RuntimeError(f"gather(): index must be an int64 tensor with as many dims as input, got "
                           f"{index.dtype}{list(index.shape)} for input {list(self.shape)}")
    _check_index_range(index, 0, self.shape[d], "gather", d)
    return _one_hot_gather(self, d, index)


def _index_select(self, dim, index):
    """The slices of self along dim at the int64 indices of the 1-d `index` (negative ones
    count from the end), in their order: gather of index laid along dim."""
    d = _dim_index(self, dim)
    if index.dim() != 1:
        raise IndexError(f"index_select(): index must be 1-d, got {list(index.shape)}")
    n = self.shape[d]
    _check_index_range(index, -n, n, "index_select", d)
    index = where(index < 0, index + n, index)
    shape = list(self.shape)
    shape[d] = index.shape[0]
    view = [1] * self.dim()
    view[d] = index.shape[0]
    return _one_hot_gather(self, d, index.reshape(view).expand(shape))


def _topk(self, k, dim=-1, largest=True, sorted=True):
    """(values, indices) of the k largest (smallest) entries along dim, largest first; ties by
    position. The order is found on the host (numpy's stable argsort of a copy), the values
    are gathered on the tensor's device, so they carry a gradient."""
    d = _dim_index(self, dim)
    if not 0 <= k <= self.shape[d]:
        raise RuntimeError(f"topk(): k ({k}) must be between 0 and the size of dim {dim} ({self.shape[d]})")
    host = _values(self.detach())
    order = np.argsort(-host if largest else host, axis=d, kind="stable")
    order = np.take(order, np.arange(k), axis=d)
    indices = from_numpy(np.ascontiguousarray(order.astype(np.int64))).to(self.device)
    return return_types_topk(_one_hot_gather(self, d, indices), indices)  # in range by construction


def _narrow(self, dim, start, length):
    d = _dim_index(self, dim)
    return self[(slice(None),) * d + (slice(start, start + length),)]


def _advanced_position(idx):
    """Where a list or an int64 tensor sits in a basic index tuple (one of them at most), with
    the tuple; None where the index is basic (C++ handles it)."""
    items = idx if isinstance(idx, tuple) else (idx,)
    found = None
    for p, i in enumerate(items):
        if isinstance(i, list) or (isinstance(i, Tensor) and i.dtype in (int64, bool)):
            if found is not None:
                raise IndexError("mini supports one list or tensor index per indexing, with slices around it")
            found = p
    return None if found is None else (found, items)


def _getitem(self, idx):
    adv = _advanced_position(idx) if isinstance(idx, (tuple, list, Tensor)) else None
    if adv is None:
        return _basic_getitem(self, idx)
    p, items = adv
    sel = items[p]
    if isinstance(sel, Tensor) and sel.dtype == bool:
        raise IndexError("indexing with a boolean mask gives a shape known only from the mask's values; "
                         "mini supports it in assignment (x[mask] = v) and mini.where(mask, x, other)")
    if any(i is Ellipsis or i is None or isinstance(i, builtins.int) for i in items[:p]):
        raise IndexError("mini supports a list or tensor index after slices only (x[:, [1, 2]], not after "
                         "an int, None or ...)")
    if isinstance(sel, list):
        if any(isinstance(i, builtins.bool) for i in sel):  # torch reads a list of bools as a mask
            raise IndexError("indexing with a list of bools is a boolean mask, whose shape is known only from its "
                             "values; use mini.where(mask, x, other), or a list of int positions")
        sel = tensor(sel, dtype=int64, device=self.device)
    rest = _basic_getitem(self, items[:p] + (slice(None),) + items[p + 1:]) if len(items) > 1 else self
    if sel.dim() != 1:
        raise IndexError(f"mini supports a 1-d list or tensor index, got {list(sel.shape)}")
    return _index_select(rest, p, sel)


def _setitem(self, idx, value):
    if isinstance(idx, Tensor) and idx.dtype == bool:  # x[mask] = v: masked_fill_, in place
        return self.masked_fill_(idx, value)
    if _advanced_position(idx) is not None if isinstance(idx, (tuple, list, Tensor)) else False:
        raise IndexError("mini supports assignment through a boolean mask (x[mask] = v) and basic indices, "
                         "not through a list or an int64 tensor")
    return _basic_setitem(self, idx, value)


def gather(input, dim, index):
    return _gather(_as_tensor(input), dim, index)


def index_select(input, dim, index):
    return _index_select(_as_tensor(input), dim, index)


def topk(input, k, dim=-1, largest=True, sorted=True):
    return _topk(_as_tensor(input), k, dim, largest, sorted)


_basic_getitem = Tensor.__getitem__
_basic_setitem = Tensor.__setitem__
Tensor.__getitem__ = _getitem
Tensor.__setitem__ = _setitem
Tensor.gather = _gather
Tensor.index_select = _index_select
Tensor.topk = _topk
Tensor.narrow = _narrow
