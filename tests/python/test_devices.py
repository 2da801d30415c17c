"""The device surface that needs no GPU: mini.device objects as torch's (made without a GPU,
compared, hashed, printed), Tensor.data = (a tensor keeps its identity and takes another's
values), Module.to / double / float moving parameters in place so that an optimizer made
before keeps training them, and the errors of a bad device string."""
import numpy as np
import pytest

import mini
from conftest import assert_close


@pytest.mark.parametrize("spec, text, index", [
    ("cpu", "cpu", None), ("cuda", "cuda", None), ("cuda:0", "cuda:0", 0), ("cuda:3", "cuda:3", 3),
])
def test_device_objects_are_torchs(spec, text, index):
    d = mini.device(spec)
    assert str(d) == text and d.index == index and d.type == spec.split(":")[0]
    assert mini.device(d) == d and hash(mini.device(spec)) == hash(d)
    assert d == spec


def test_device_type_and_index_arguments():
    assert mini.device("cuda", 1) == mini.device("cuda:1")
    assert repr(mini.device("cuda", 0)) == "device(type='cuda', index=0)"
    assert repr(mini.device("cpu")) == "device(type='cpu')"
    assert mini.device(0) == mini.device("cuda:0")  # an int is a CUDA ordinal, as torch


@pytest.mark.parametrize("bad", ["tpu", "cuda:x", "cuda:", "gpu:0"])
def test_bad_device_strings_name_the_string(bad):
    with pytest.raises(RuntimeError, match="Expected one of cpu, cuda device type at start of device string: " + bad):
        mini.device(bad)


def test_cpu_tensors_report_their_device():
    t = mini.randn(3)
    assert t.device == mini.device("cpu") and not t.is_cuda
    assert t.to("cpu") is t and t.cpu() is t  # already there: no copy
    assert mini.zeros_like(t).device == t.device


def test_data_setter_keeps_identity_and_takes_values():
    t = mini.zeros(2, 3)
    before = id(t)
    t.data = mini.ones(4, dtype=mini.float64)
    assert id(t) == before
    assert t.shape == (4,) and t.dtype == mini.float64
    assert_close(t, np.ones(4))


def test_module_to_double_keeps_parameter_objects_so_optimizers_keep_working():
    mini.manual_seed(0)
    model = mini.nn.Linear(3, 2)
    params = list(model.parameters())
    opt = mini.optim.SGD(model.parameters(), lr=0.1)
    assert model.double() is model
    assert [id(p) for p in model.parameters()] == [id(p) for p in params]
    assert all(p.dtype == mini.float64 and p.requires_grad for p in model.parameters())
    x = mini.randn(5, 3, dtype=mini.float64)
    w_before = model.weight.detach().numpy().copy()
    loss = model(x).sum()
    loss.backward()
    opt.step()
    assert not np.allclose(model.weight.detach().numpy(), w_before)  # the step moved the moved weight
    model.float()
    assert all(p.dtype == mini.float32 for p in model.parameters())


def test_module_to_refuses_integer_dtypes():
    with pytest.raises(TypeError, match="floating point"):
        mini.nn.Linear(2, 2).to(mini.int64)
