"""Views and basic slicing: values against numpy, strides/offsets, and storage sharing in both
directions (writing the base shows through the view, writing the view shows in the base).
Every test runs on each device of conftest's `device` fixture (mk() builds there)."""
import numpy as np
import pytest

import mini
from conftest import assert_close, mk, to_np

pytestmark = pytest.mark.usefixtures("device")

BASE_SHAPE = (2, 3, 4)

# (id, mini view of a tensor of BASE_SHAPE, the same view on a numpy array)
VIEWS = [
    ("reshape", lambda t: t.reshape(6, 4), lambda a: a.reshape(6, 4)),
    ("reshape tuple -1", lambda t: t.reshape((4, -1)), lambda a: a.reshape(4, -1)),
    ("view", lambda t: t.view(3, 8), lambda a: a.reshape(3, 8)),
    ("view -1", lambda t: t.view(-1), lambda a: a.reshape(-1)),
    ("transpose", lambda t: t.transpose(0, 2), lambda a: a.swapaxes(0, 2)),
    ("transpose neg", lambda t: t.transpose(-1, -2), lambda a: a.swapaxes(-1, -2)),
    ("permute", lambda t: t.permute(2, 0, 1), lambda a: a.transpose(2, 0, 1)),
    ("permute tuple", lambda t: t.permute((1, 2, 0)), lambda a: a.transpose(1, 2, 0)),
    ("unsqueeze 0", lambda t: t.unsqueeze(0), lambda a: a[None]),
    ("unsqueeze -1", lambda t: t.unsqueeze(-1), lambda a: a[..., None]),
    ("unsqueeze 2", lambda t: t.unsqueeze(2), lambda a: np.expand_dims(a, 2)),
    ("squeeze", lambda t: t.reshape(1, 2, 1, 12).squeeze(), lambda a: a.reshape(2, 12)),
    ("squeeze dim", lambda t: t.reshape(1, 2, 1, 12).squeeze(2), lambda a: a.reshape(1, 2, 12)),
    ("squeeze non-1 dim", lambda t: t.squeeze(1), lambda a: a),
    ("expand", lambda t: t[:, :1, :].expand(2, 5, 4), lambda a: np.broadcast_to(a[:, :1], (2, 5, 4))),
    ("expand -1 new dim", lambda t: t.expand(3, -1, -1, -1),
     lambda a: np.broadcast_to(a, (3,) + BASE_SHAPE)),
    ("t on 2-D", lambda t: t[0].t(), lambda a: a[0].T),
    ("int index", lambda t: t[1], lambda a: a[1]),
    ("negative index", lambda t: t[-1], lambda a: a[-1]),
    ("two ints", lambda t: t[1, 2], lambda a: a[1, 2]),
    ("three ints (0-d)", lambda t: t[1, 2, 3], lambda a: a[1, 2, 3, ...]),
    ("slice", lambda t: t[:, 1:3], lambda a: a[:, 1:3]),
    ("slice open", lambda t: t[:, 1:], lambda a: a[:, 1:]),
    ("slice negative bounds", lambda t: t[:, -2:], lambda a: a[:, -2:]),
    ("slice step", lambda t: t[..., ::2], lambda a: a[..., ::2]),
    ("slice start+step", lambda t: t[:, :, 1::2], lambda a: a[:, :, 1::2]),
    ("slice past end", lambda t: t[:, 1:100], lambda a: a[:, 1:100]),
    ("ellipsis int", lambda t: t[..., 1], lambda a: a[..., 1]),
    ("None", lambda t: t[None], lambda a: a[None]),
    ("ellipsis None", lambda t: t[..., None], lambda a: a[..., None]),
    ("mixed", lambda t: t[1, None, ::2, 1:3], lambda a: a[1, None, ::2, 1:3]),
    ("view of view", lambda t: t.transpose(0, 1)[1:].unsqueeze(0)[0, :, 1],
     lambda a: a.swapaxes(0, 1)[1:][None][0, :, 1]),
]


def _base(rng):
    a = rng.permutation(24).astype(np.float32).reshape(BASE_SHAPE)
    return a, mk(a)


@pytest.mark.parametrize("case", VIEWS, ids=[c[0] for c in VIEWS])
def test_view_values_and_base_writes_show_through(case, rng):
    _, view, ref = case
    a, t = _base(rng)
    v = view(t)
    assert_close(v, ref(a), dtype=mini.float32)
    new = rng.standard_normal(BASE_SHAPE).astype(np.float32)
    t.copy_(mk(new))  # overwrite the base in place: the view must see it
    assert_close(v, ref(new), dtype=mini.float32)


WRITABLE = [c for c in VIEWS if not c[0].startswith("expand")]


@pytest.mark.parametrize("case", WRITABLE, ids=[c[0] for c in WRITABLE])
def test_view_writes_show_in_base(case, rng):
    _, view, ref = case
    a, t = _base(rng)
    v = view(t)
    v.add_(100)
    expected = a.astype(np.float64).copy()
    ref(expected)[...] += 100  # numpy basic indexing / reshape of a contiguous array are views
    assert_close(t, expected)


def test_strides_and_offsets():
    t = mini.zeros(2, 3, 4)
    assert tuple(t.stride()) == (12, 4, 1)
    assert t.is_contiguous()
    assert t.storage_offset() == 0
    tt = t.transpose(0, 2)
    assert tuple(tt.shape) == (4, 3, 2)
    assert tuple(tt.stride()) == (1, 4, 12)
    assert not tt.is_contiguous()
    assert t[1].storage_offset() == 12
    assert t[:, 1:3].storage_offset() == 4
    assert tuple(t[:, 1:3].stride()) == (12, 4, 1)
    assert tuple(t[..., ::2].stride()) == (12, 4, 2)
    assert tuple(t[:, :1].expand(2, 5, 4).stride()) == (12, 0, 1)
    assert tuple(t.permute(1, 2, 0).stride()) == (4, 1, 12)
    assert tuple(t.unsqueeze(1).shape) == (2, 1, 3, 4)
    assert t[1, 2, 3].dim() == 0


def test_contiguous_on_contiguous_is_same_storage(rng):
    a, t = _base(rng)
    c = t.contiguous()
    assert c.is_contiguous()
    c.add_(1)  # no copy happened, so the base changes too
    assert_close(t, a + 1)


def test_contiguous_of_transposed_copies(rng):
    a, t = _base(rng)
    c = t.transpose(0, 2).contiguous()
    assert c.is_contiguous()
    assert tuple(c.stride()) == (6, 2, 1)
    assert_close(c, a.swapaxes(0, 2))
    c.add_(1)  # a real copy: the base is unchanged
    assert_close(t, a)


def test_reshape_of_non_contiguous_copies(rng):
    a, t = _base(rng)
    r = t.transpose(0, 1).reshape(-1)
    assert_close(r, a.swapaxes(0, 1).reshape(-1))
    r.add_(1)
    assert_close(t, a)


def test_view_of_transposed_back_to_contiguous_is_allowed(rng):
    a, t = _base(rng)
    v = t.transpose(0, 2).transpose(0, 2).view(24)
    assert_close(v, a.reshape(-1))


def test_len_and_iteration_basics(rng):
    a, t = _base(rng)
    assert len(t) == 2
    assert len(t[0]) == 3
    assert_close(t[0][1][2], np.array(a[0, 1, 2]))


def test_one_element_view_item(rng):
    a, t = _base(rng)
    assert t[1, 2, 3].item() == float(a[1, 2, 3])
    assert t[1][2][3].item() == float(a[1, 2, 3])


def test_slicing_int64_and_bool_tensors():
    i = mk(np.arange(10))
    assert_close(i[2:8:3], np.arange(10)[2:8:3])
    b = mk(np.array([True, False, True, True]))
    assert_close(b[1:], np.array([False, True, True]))
    assert b[0].item() is True


def test_squeeze_unsqueeze_roundtrip_shapes():
    t = mini.zeros(3, 1, 4, 1)
    assert tuple(t.squeeze().shape) == (3, 4)
    assert tuple(t.squeeze(-1).shape) == (3, 1, 4)
    assert tuple(t.squeeze(1).unsqueeze(1).shape) == (3, 1, 4, 1)
    assert tuple(mini.zeros(()).unsqueeze(0).shape) == (1,)


def test_expand_0d_and_values():
    s = mini.tensor(2.5)
    e = s.expand(3, 2)
    assert tuple(e.shape) == (3, 2)
    assert tuple(e.stride()) == (0, 0)
    assert_close(e, np.full((3, 2), 2.5))


def test_to_np_of_views_matches_numpy_method(rng):
    a, t = _base(rng)
    v = t.permute(2, 0, 1)[1:, :, ::2]
    np.testing.assert_array_equal(np.asarray(v.cpu()), to_np(v))


@pytest.mark.parametrize("dtype", ["float32", "int64", "bool"])
def test_copies_between_layouts_with_contiguous_rows_match_numpy(dtype):
    # clone / reshape / copy_ where the last dim is contiguous on both sides take one memcpy a
    # row (loops.h copy_rows); a broadcast or strided last dim, or short rows, the element loop
    rng = np.random.default_rng(7)
    data = (rng.standard_normal((6, 4, 10, 16)) * 5).astype(dtype)
    x = mini.from_numpy(data)
    heads = x.transpose(1, 2)  # [6, 10, 4, 16]: rows of 16 contiguous, the rest strided
    np.testing.assert_array_equal(heads.reshape(6, 10, 64).numpy(), data.transpose(0, 2, 1, 3).reshape(6, 10, 64))
    np.testing.assert_array_equal(heads.clone().numpy(), data.transpose(0, 2, 1, 3))
    z = mini.zeros(6, 10, 4, 48, dtype=getattr(mini, dtype))
    z[:, :, :, 16:32].copy_(heads)  # into a slice: rows of 16 in rows of 48
    want = np.zeros((6, 10, 4, 48), dtype)
    want[:, :, :, 16:32] = data.transpose(0, 2, 1, 3)
    np.testing.assert_array_equal(z.numpy(), want)
    z[:, :, :, 32:48].copy_(x[:, 0:1, 0:1, :])  # a broadcast source: strides 0 on dims 1 and 2
    want[:, :, :, 32:48] = data[:, 0:1, 0:1, :]
    np.testing.assert_array_equal(z.numpy(), want)
    short = x[:, :, :, :4].transpose(0, 1)  # rows of 4: the element loop
    np.testing.assert_array_equal(short.clone().numpy(), data[:, :, :, :4].transpose(1, 0, 2, 3))
    cols = x.transpose(2, 3)  # the last dim strided
    np.testing.assert_array_equal(cols.clone().numpy(), data.transpose(0, 1, 3, 2))
