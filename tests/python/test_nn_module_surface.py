"""The nn.Module surface real model files use (issue 15, section 1, its first part): buffers,
apply, state_dict / load_state_dict, ModuleList, ModuleDict, Dropout, nn.init, weight tying;
eager and under mini.compile (buffers and ModuleList read in compiled code without a break).

    PYTHONPATH=build/python .venv/bin/python -m pytest tests/python/test_nn_module_surface.py
"""
import numpy as np
import pytest

import mini
import mini.nn as nn
import mini.nn.functional as F
from conftest import to_np


class Block(nn.Module):
    """A residual MLP block with a causal-mask-like buffer, the shape of a GPT block's parts."""

    def __init__(self, width):
        super().__init__()
        self.ln = nn.LayerNorm(width)
        self.fc = nn.Linear(width, width)
        self.register_buffer("scale", mini.full((width,), 0.5))

    def forward(self, x):
        return x + self.fc(self.ln(x)) * self.scale


class Model(nn.Module):
    def __init__(self, width=8, depth=3):
        super().__init__()
        self.parts = nn.ModuleDict({"inp": nn.Linear(width, width), "h": nn.ModuleList(Block(width) for _ in range(depth))})
        self.head = nn.Linear(width, width, bias=False)
        self.head.weight = self.parts["inp"].weight  # tied, as a GPT ties its output head
        self.drop = nn.Dropout(0.25)
        self.register_buffer("steps", mini.zeros(1), persistent=False)

    def forward(self, x):
        x = self.drop(self.parts.inp(x))
        for block in self.parts.h:
            x = block(x)
        return self.head(x)


def test_buffers_are_registered_listed_and_read_as_attributes():
    m = Model()
    names = [n for n, _ in m.named_buffers()]
    assert names == ["steps", "parts.h.0.scale", "parts.h.1.scale", "parts.h.2.scale"]
    assert np.allclose(to_np(m.parts.h[1].scale), 0.5)
    m.parts.h[1].scale = mini.full((8,), 2.0)  # assigning a tensor to a buffer's name replaces it
    assert np.allclose(to_np(dict(m.named_buffers())["parts.h.1.scale"]), 2.0)
    assert all(b.requires_grad is False for b in m.buffers())
    with pytest.raises(TypeError, match="buffer 'scale'"):
        m.parts.h[0].scale = 3
    with pytest.raises(KeyError, match="already exists"):
        m.parts.h[0].register_buffer("fc", mini.zeros(1))


def test_a_tied_weight_is_one_parameter():
    m = Model()
    assert m.head.weight is m.parts.inp.weight
    names = [n for n, _ in m.named_parameters()]
    assert "head.weight" not in names and names.count("parts.inp.weight") == 1
    # 2 + 3 blocks * 4 + 0 (the head's weight is the input layer's)
    assert len(names) == 2 + 3 * 4


def test_module_list_and_dict_index_iterate_and_slice():
    blocks = nn.ModuleList([nn.Linear(2, 2) for _ in range(4)])
    assert len(blocks) == 4 and blocks[-1] is list(blocks)[3]
    assert isinstance(blocks[1:3], nn.ModuleList) and len(blocks[1:3]) == 2
    blocks.append(nn.ReLU()).extend([nn.GELU()])
    assert [type(b).__name__ for b in blocks][-2:] == ["ReLU", "GELU"]
    blocks[0] = nn.ReLU()
    assert type(blocks[0]).__name__ == "ReLU"
    with pytest.raises(IndexError):
        blocks[9]
    d = nn.ModuleDict({"a": nn.Linear(2, 3)})
    d["b"] = nn.ReLU()
    assert list(d) == ["a", "b"] and "a" in d and len(d) == 2 and d.a is d["a"]
    assert [n for n, _ in d.named_parameters()] == ["a.weight", "a.bias"]
    with pytest.raises(TypeError, match="keys must be str"):
        d[1] = nn.ReLU()


def test_apply_visits_children_first_and_initialises():
    m = Model()
    seen = []

    def init(module):
        seen.append(type(module).__name__)
        if isinstance(module, nn.Linear):
            nn.init.normal_(module.weight, mean=0.0, std=0.02)
            if module.bias is not None:
                nn.init.zeros_(module.bias)

    assert m.apply(init) is m
    assert seen[-1] == "Model" and seen.index("Block") > seen.index("LayerNorm")
    w = to_np(m.parts.h[0].fc.weight)
    assert abs(w.std() - 0.02) < 0.01 and np.all(to_np(m.parts.h[0].fc.bias) == 0)
    assert m.parts.h[0].fc.weight.is_leaf and m.parts.h[0].fc.weight.requires_grad
    nn.init.ones_(m.parts.h[0].ln.weight)
    nn.init.constant_(m.parts.h[0].ln.bias, 3)
    nn.init.uniform_(m.parts.h[2].fc.bias, -1, 1)
    assert np.all(to_np(m.parts.h[0].ln.bias) == 3)
    b = to_np(m.parts.h[2].fc.bias)
    assert b.min() >= -1 and b.max() < 1 and b.std() > 0


def test_state_dict_round_trip_restores_outputs():
    mini.manual_seed(1)
    a, b = Model().eval(), Model().eval()
    x = mini.randn(5, 8)
    assert not np.allclose(to_np(a(x)), to_np(b(x)))
    sd = a.state_dict()
    assert "steps" not in sd and "parts.h.2.scale" in sd and "head.weight" in sd
    assert all(not t.requires_grad for t in sd.values())
    missing, unexpected = b.load_state_dict(sd)
    assert missing == [] and unexpected == []
    np.testing.assert_allclose(to_np(b(x)), to_np(a(x)), rtol=1e-6)
    assert b.parts.inp.weight.is_leaf and b.parts.inp.weight.requires_grad


def test_load_state_dict_names_what_does_not_fit():
    m = Model()
    sd = m.state_dict()
    del sd["parts.inp.bias"]
    sd["extra"] = mini.zeros(1)
    with pytest.raises(RuntimeError, match=r"missing keys \['parts.inp.bias'\], unexpected keys \['extra'\]"):
        m.load_state_dict(sd)
    missing, unexpected = m.load_state_dict(sd, strict=False)
    assert missing == ["parts.inp.bias"] and unexpected == ["extra"]
    bad = m.state_dict()
    bad["parts.inp.weight"] = mini.zeros(3, 3)
    with pytest.raises(RuntimeError, match="size mismatch for parts.inp.weight"):
        m.load_state_dict(bad)


def test_dropout_zeroes_about_p_scales_the_rest_and_is_the_identity_in_eval():
    mini.manual_seed(0)
    x = mini.ones(200, 100, requires_grad=True)
    y = F.dropout(x, 0.3, training=True)
    v = to_np(y.detach())
    kept = v != 0
    assert abs(1 - kept.mean() - 0.3) < 0.02
    np.testing.assert_allclose(v[kept], 1 / 0.7, rtol=1e-6)
    y.sum().backward()  # the gradient flows through the kept elements, scaled
    np.testing.assert_allclose(to_np(x.grad), kept / 0.7, rtol=1e-6)
    d = nn.Dropout(0.3).eval()
    assert d(x) is x and F.dropout(x, 0.3, training=False) is x
    assert np.all(to_np(F.dropout(x, 1.0).detach()) == 0)
    with pytest.raises(ValueError, match="between 0 and 1"):
        nn.Dropout(1.5)


def test_the_model_compiles_in_one_graph_with_its_buffers_and_module_list():
    mini.manual_seed(2)
    m = Model().eval()  # eval: dropout is the identity, so eager and compiled agree exactly
    x = mini.randn(4, 8)
    want = to_np(m(x))
    mini.reset()
    compiled = mini.compile(m, fullgraph=True)
    np.testing.assert_allclose(to_np(compiled(x)), want, rtol=1e-5, atol=1e-6)
    # a buffer changed in place is read again, not baked in: the next call sees it
    with mini.no_grad():
        m.parts.h[0].scale.fill_(3.0)
    np.testing.assert_allclose(to_np(compiled(x)), to_np(m(x)), rtol=1e-5, atol=1e-6)


def test_training_with_dropout_compiles_and_its_gradients_match_eager_for_one_seed():
    m = Model().train()
    x = mini.randn(4, 8)
    grads = []
    for fn in (m, mini.compile(m, fullgraph=True)):
        mini.manual_seed(7)
        m.zero_grad()
        fn(x).sum().backward()
        grads.append({n: to_np(p.grad) for n, p in m.named_parameters()})
    assert grads[0].keys() == grads[1].keys()
    for n in grads[0]:
        np.testing.assert_allclose(grads[1][n], grads[0][n], rtol=1e-4, atol=1e-5, err_msg=n)


def test_to_moves_buffers_with_the_parameters():
    m = Model().to(mini.float64)
    assert all(p.dtype == mini.float64 for p in m.parameters())
    assert all(b.dtype == mini.float64 for b in m.buffers())
