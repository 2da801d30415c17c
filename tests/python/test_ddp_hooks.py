"""The autograd hooks DDP builds on, in one process: Tensor.register_post_accumulate_grad_hook
(called with the leaf once its .grad is final, as soon as the last node feeding it ran; a handle
whose remove() stops it) and mini.autograd.Variable._execution_engine.queue_callback (runs once
backward accumulated everything), from eager autograd and from a compiled graph's backward; a
Python exception in a hook or callback reaches the caller of backward()."""
import pytest

import mini
import mini.nn as nn


def mlp(layers=3, width=8, seed=0):
    mini.manual_seed(seed)
    return nn.Sequential(*[nn.Sequential(nn.Linear(width, width), nn.ReLU()) for _ in range(layers)])


def hook_log(model):
    """Registers a hook on every parameter that appends its name; returns (log, handles)."""
    log, handles = [], []
    for name, p in model.named_parameters():
        def hook(param, name=name, p=p):
            assert param is p and param.grad is not None
            log.append(name)
        handles.append(p.register_post_accumulate_grad_hook(hook))
    return log, handles


def test_hooks_fire_once_each_in_backward_order_with_the_leaf():
    model = mlp()
    log, _ = hook_log(model)
    model(mini.randn(4, 8)).sum().backward()
    assert sorted(log) == sorted(n for n, _ in model.named_parameters())
    # the last layer's gradients are final first; the first layer's last
    layers = [name.split(".")[0] for name in log]
    assert layers == sorted(layers, reverse=True)


def test_a_removed_hook_is_not_called_and_the_handle_is_a_context_manager():
    w = mini.randn(3, requires_grad=True)
    calls = []
    handle = w.register_post_accumulate_grad_hook(lambda p: calls.append(1))
    (w * w).sum().backward()
    handle.remove()
    (w * w).sum().backward()
    with w.register_post_accumulate_grad_hook(lambda p: calls.append(2)):
        (w * w).sum().backward()
    (w * w).sum().backward()
    assert calls == [1, 2]


def test_hooks_are_refused_where_torch_refuses_them():
    with pytest.raises(RuntimeError, match="doesn't require gradient"):
        mini.randn(3).register_post_accumulate_grad_hook(lambda p: None)
    w = mini.randn(3, requires_grad=True)
    with pytest.raises(RuntimeError, match="non-leaf"):
        (w * 2).register_post_accumulate_grad_hook(lambda p: None)


def test_an_exception_in_a_hook_reaches_backward_and_the_engine_recovers():
    w = mini.randn(3, requires_grad=True)

    def bad(p):
        raise ValueError("the hook refused")
    handle = w.register_post_accumulate_grad_hook(bad)
    with pytest.raises(ValueError, match="the hook refused"):
        (w * w).sum().backward()
    handle.remove()
    w.grad = None
    (w * 3).sum().backward()
    assert w.grad.tolist() == [3.0, 3.0, 3.0]


def test_queue_callback_runs_after_every_gradient_and_only_inside_backward():
    model = mlp()
    events = []
    engine = mini.autograd.Variable._execution_engine

    def hook(p):
        if not events:
            engine.queue_callback(lambda: events.append(
                ("callback", all(q.grad is not None for q in model.parameters()))))
        events.append("hook")
    for p in model.parameters():
        p.register_post_accumulate_grad_hook(hook)
    model(mini.randn(4, 8)).sum().backward()
    assert events[-1] == ("callback", True) and events.count("hook") == 6
    with pytest.raises(RuntimeError, match="during backward pass"):
        engine.queue_callback(lambda: None)

    def failing():
        raise KeyError("from the callback")
    w = mini.randn(2, requires_grad=True)
    w.register_post_accumulate_grad_hook(lambda p: engine.queue_callback(failing))
    with pytest.raises(KeyError, match="from the callback"):
        (w * w).sum().backward()


@pytest.mark.parametrize("backend", ["aot_eager", "inductor"])
def test_hooks_fire_for_gradients_from_a_compiled_backward(backend):
    mini.reset()
    model = mlp(layers=2)
    x = mini.randn(4, 8)
    model(x).sum().backward()
    expected = {n: p.grad.tolist() for n, p in model.named_parameters()}
    for p in model.parameters():
        p.grad = None
    seen = {}
    for name, p in model.named_parameters():
        p.register_post_accumulate_grad_hook(lambda param, name=name: seen.setdefault(name, param.grad.tolist()))
    mini.compile(model, backend=backend)(x).sum().backward()
    assert seen.keys() == expected.keys()
    for name in expected:
        assert mini.allclose(mini.tensor(seen[name]), mini.tensor(expected[name]), atol=1e-5), name
