"""mini.profiler: the steps of compiled CPU graphs, timed and added up across calls."""

import numpy as np
import pytest

import mini


def mlp(x, w, b):
    return mini.relu(x @ w + b).sum(dim=1)


def inputs():
    rng = np.random.default_rng(0)
    return [mini.from_numpy(rng.standard_normal(s).astype(np.float32)) for s in [(64, 32), (32, 48), (48,)]]


def test_a_profile_names_every_step_and_adds_up_the_calls():
    f = mini.compile(mlp)
    args = inputs()
    f(*args)  # compiled outside the profile
    mini.metrics.reset()
    with mini.profiler.profile() as prof:
        for _ in range(3):
            f(*args)
    moved = mini.metrics.bytes_moved
    names = [s.name for s in prof.steps]
    assert any(n.startswith("extern matmul [64, 32] x [32, 48]") for n in names), names
    kernels = [s for s in prof.steps if s.name.startswith("cpp_")]
    assert kernels and all(s.graph for s in kernels)  # a kernel is named with its library
    assert all(s.calls == 3 and s.seconds > 0 for s in prof.steps), prof.steps
    assert sum(s.bytes for s in prof.steps) == moved  # every byte mini.metrics counted, once
    table = prof.table()
    assert table.splitlines()[0].split()[:3] == ["step", "calls", "total"]
    assert "extern matmul" in table and kernels[0].name in table and "all steps" in table


def test_nothing_is_recorded_outside_a_profile():
    f = mini.compile(mlp)
    args = inputs()
    with mini.profiler.profile() as first:
        f(*args)
    f(*args)
    f(*args)
    with mini.profiler.profile() as second:
        f(*args)
    assert {s.calls for s in first.steps} == {1} and {s.calls for s in second.steps} == {1}


def test_eager_code_alone_says_no_compiled_graph_ran():
    with mini.profiler.profile() as prof:
        mlp(*inputs())
    assert prof.steps == [] and "no compiled CPU graph ran" in prof.table()


def test_profiles_do_not_nest():
    with mini.profiler.profile():
        with pytest.raises(RuntimeError, match="already active"):
            with mini.profiler.profile():
                pass
    with mini.profiler.profile() as again:  # the outer one ended cleanly
        mini.compile(mlp)(*inputs())
    assert again.steps
