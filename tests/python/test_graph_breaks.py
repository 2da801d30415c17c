"""Graph breaks (issue 4): per break cause, the graphs and breaks explain and CompileCounter
count, each break's reason and source line, fullgraph=True and the graph_breaks log; resumed
frames that break again, breaks in loops and inlined helpers, and recompiles of resume units
(nonzero, which must not break, is in test_dynamic_shapes.py). Results are compared with eager."""
import collections
import inspect
import math
import os
import re
import subprocess
import sys
import warnings

import numpy as np
import pytest

import mini
from capture_helpers import ALIVE, T, fresh_mini, same  # noqa: F401  (fresh_mini: autouse fixture)


def line_of(fn, text):
    """The absolute line number of the first line of fn's source containing `text`."""
    lines, first = inspect.getsourcelines(fn)
    for i, line in enumerate(lines):
        if text in line:
            return first + i
    raise AssertionError(f"{text!r} not in the source of {fn.__name__}")


def check(got, expected):
    """same(), also for numpy arrays inside the result."""
    if isinstance(expected, np.ndarray):
        np.testing.assert_array_equal(got, expected)
    elif isinstance(expected, tuple):
        assert isinstance(got, tuple) and len(got) == len(expected)
        [check(g, e) for g, e in zip(got, expected)]
    else:
        same(got, expected)


_FILE = line_of.__code__.co_filename  # as the code objects of this module name it


def counted(fn, **kw):
    cnt = mini.CompileCounter()
    ALIVE.append(cnt)
    return mini.compile(fn, backend=cnt, **kw), cnt


# ---- one function per break cause -------------------------------------------------------------

_EVENTS = collections.deque()  # an object whose methods mini does not know


def _print_mid(x):
    y = x + 1
    print("middle")
    return y * 2


def _unknown_c_function(x):
    y = x.abs() + 1
    return y * math.sqrt(y.sum())


def _unknown_method(x):
    y = x * 2
    _EVENTS.append("called")
    return y + 1


def _item(x):
    y = x * 2
    s = y.sum().item()
    return y + s


def _tolist(x):
    y = x * 2
    first = y.tolist()[0]
    return y - first


def _numpy(x):
    y = x * 2
    a = y.numpy()
    return y + 1, a


def _if_tensor(x):
    s = x.sum()
    if s:
        return x + 1
    return x - 1


def _if_compare(x):
    y = x * 2
    if y.sum() > 0:
        return y + 1
    return y - 1


def _while_tensor(x):
    while x.sum() > 0:
        x = x - 1
    return x


def _set_literal(x):
    y = x + 1
    s = {y}
    return y * 2, len(s)


def _fstring(x):
    y = x + 1
    tag = f"{y}"
    return y * 2, len(tag) > 0


# name: (fn, args, graphs, breaks, reason regex, text of the breaking line)
CAUSES = {
    "print": (_print_mid, lambda: (T(3),), 2, 1, r"print", 'print("middle")'),
    "unknown_c_function": (_unknown_c_function, lambda: (T(3),), 2, 1, r"sqrt",
                           "return y * math.sqrt(y.sum())"),
    "unknown_method": (_unknown_method, lambda: (T(3),), 2, 1, r"append", '_EVENTS.append("called")'),
    "item": (_item, lambda: (T(3),), 2, 1, r"item\(\).*capture_scalar_outputs", "s = y.sum().item()"),
    "tolist": (_tolist, lambda: (T(3),), 2, 1, r"tolist\(\)", "first = y.tolist()[0]"),
    "numpy": (_numpy, lambda: (T(3),), 2, 1, r"numpy\(\)", "a = y.numpy()"),
    "if_tensor": (_if_tensor, lambda: (T(3),), 2, 1, r"data-dependent", "if s:"),
    "if_compare": (_if_compare, lambda: (T(3),), 2, 1, r"data-dependent", "if y.sum() > 0:"),
    # the test before the loop breaks; the one inside it leaves the rest to CPython (as torch)
    "while_tensor": (_while_tensor, lambda: (T(3, lo=1.0, hi=3.0),), 1, 0, r"data-dependent",
                     "while x.sum() > 0:"),
    # an instruction capture cannot run: the graph so far is compiled and the rest of the frame
    # runs in CPython, so there is no second graph
    "set_literal": (_set_literal, lambda: (T(3),), 1, 0, r"instruction \w+ is not supported", "s = {y}"),
    "fstring": (_fstring, lambda: (T(3),), 1, 0, r"instruction \w+ is not supported", 'tag = f"{y}"'),
}


@pytest.mark.a9  # a graph break's resume units: assignment A9
@pytest.mark.parametrize("cause", sorted(CAUSES))
def test_explain_counts_and_locates_the_breaks_of_each_cause(cause, capsys):
    fn, make_args, graphs, breaks, reason, text = CAUSES[cause]
    expected = fn(*make_args())
    e = mini.explain(fn)(*make_args())
    check(e.out, expected)
    assert (e.graph_count, e.graph_break_count) == (graphs, breaks), str(e)
    assert e.break_reasons and all(r.reason for r in e.break_reasons), "explain lists no break reason"
    assert any(re.search(reason, r.reason) for r in e.break_reasons), e.break_reasons
    r = e.break_reasons[0]
    where = f"{_FILE}:{line_of(fn, text)} in {fn.__name__}"
    assert r.location == where, f"{r.location!r} != {where!r}"
    assert text in r.code, f"{r.code!r} does not quote the source line"
    assert where in str(e) and r.reason in str(e)





@pytest.mark.a9  # a graph break's resume units: assignment A9
@pytest.mark.parametrize("cause", sorted(CAUSES))
def test_compiled_result_equals_eager_and_a_second_call_hits(cause, capsys):
    fn, make_args, graphs, _, _, _ = CAUSES[cause]
    cf, cnt = counted(fn)
    for args in [make_args() for _ in range(3)]:
        expected = fn(*args)
        check(cf(*args), expected)
    assert cnt.frame_count == graphs


# item() is no break under fullgraph=True: torch 2.11 captures it there (test_capture_features.py)
@pytest.mark.parametrize("cause", sorted(set(CAUSES) - {"item"}))
def test_fullgraph_raises_at_the_first_break_naming_reason_and_line(cause, capsys):
    fn, make_args, _, _, reason, text = CAUSES[cause]
    with pytest.raises(mini.Unsupported, match=reason) as info:
        mini.compile(fn, backend="eager", fullgraph=True)(*make_args())
    assert text in str(info.value), str(info.value)
    assert capsys.readouterr().out == "", "fullgraph ran the breaking instruction"


def test_unknown_call_side_effect_happens_once_per_call():
    _EVENTS.clear()
    cf, _ = counted(_unknown_method)
    with warnings.catch_warnings():  # past cache_size_limit too (see the ID_MATCH bug above)
        warnings.simplefilter("ignore")
        for _ in range(12):
            x = T(3)
            same(cf(x), x * 2 + 1)
    assert list(_EVENTS) == ["called"] * 12


@pytest.mark.a9  # a graph break's resume units: assignment A9
def test_tensor_branch_compiles_each_direction_once():
    cf, cnt = counted(_if_compare)
    pos, neg = T(3), T(3, lo=-2.0, hi=-1.0)
    frames = []
    for x in (pos, pos, neg, neg, pos):
        same(cf(x), _if_compare(x))
        frames.append(cnt.frame_count)
    assert frames == [2, 2, 3, 3, 3]  # the unit before the jump, then one unit per direction


def test_while_on_a_tensor_compiles_one_graph_for_any_trip_count():
    cf, cnt = counted(_while_tensor)
    for lo, hi in [(1.0, 2.0), (4.0, 6.0), (9.0, 12.0), (-3.0, -1.0)]:
        x = T(4, lo=lo, hi=hi)
        same(cf(x), _while_tensor(x))
    # the test before the loop; the loop runs in CPython (torch 2.11: compiles [1]); the exit
    # (`return x`) has no ops
    assert cnt.frame_count == 1


# ---- an empty graph before a break -----------------------------------------------------------

def _print_first(x):
    print("first")
    return x + 1


@pytest.mark.a9  # a graph break's resume units: assignment A9
def test_print_first_gives_one_graph_and_no_break(capsys):
    x = T(3)
    e = mini.explain(_print_first)(x)
    same(e.out, x + 1)
    assert (e.graph_count, e.graph_break_count, e.op_count) == (1, 0, 1)
    assert len(e.break_reasons) == 1 and "print" in e.break_reasons[0].reason
    cf, cnt = counted(_print_first)
    [same(cf(x), x + 1) for _ in range(2)]
    assert (cnt.frame_count, cnt.op_count) == (1, 1)
    assert capsys.readouterr().out == "first\n" * 3


# ---- resumed frames that break again ---------------------------------------------------------

def _two_prints(x):
    a = x + 1
    print("one")
    b = a * 2
    print("two")
    return b - 1


@pytest.mark.a9  # a graph break's resume units: assignment A9
def test_resumed_unit_reaches_a_second_break(capsys):
    x = T(3)
    e = mini.explain(_two_prints)(x)
    same(e.out, _two_prints(x))
    assert (e.graph_count, e.graph_break_count, e.op_count) == (3, 2, 3)
    lines = [line_of(_two_prints, 'print("one")'), line_of(_two_prints, 'print("two")')]
    assert [r.location for r in e.break_reasons] == [f"{_FILE}:{n} in _two_prints" for n in lines]
    assert [[n.target for n in g.nodes if n.op == "call_function"] for g in e.graphs] == \
        [["mini.add"], ["mini.mul"], ["mini.sub"]]
    cf, cnt = counted(_two_prints)
    for _ in range(3):
        same(cf(x), _two_prints(x))
    assert cnt.frame_count == 3
    assert capsys.readouterr().out == "one\ntwo\n" * 8


def _mixed_causes(x):
    a = x.exp()
    print("a")
    s = a.sum().item()
    b = a * s
    if b.sum() > 0:
        b = b + 1
    return b.relu()


@pytest.mark.a9  # a graph break's resume units: assignment A9
def test_resume_chain_of_different_causes(capsys):
    x = T(3)
    e = mini.explain(_mixed_causes)(x)
    same(e.out, _mixed_causes(x))
    assert (e.graph_count, e.graph_break_count) == (4, 3)
    reasons = " | ".join(r.reason for r in e.break_reasons)
    assert "print" in reasons and "item()" in reasons and "data-dependent" in reasons


def _prints_and_returns(t):
    print("helper")
    return t.cos()


def _stack_live_across_break(x):
    return x.sin() + _prints_and_returns(x) * 2


@pytest.mark.a9  # a graph break's resume units: assignment A9
def test_value_on_the_stack_survives_the_break(capsys):
    cf, cnt = counted(_stack_live_across_break)
    for seed in range(3):
        x = T(4, seed=seed)
        same(cf(x), _stack_live_across_break(x))
    # caller: sin | helper: (print) cos | caller resume: mul, add
    assert cnt.frame_count == 3 and cnt.op_count == 4


def _helper_breaks(y):
    z = y * 3
    print("in helper")
    return z + 1


def _calls_helper(x):
    y = x + 1
    w = _helper_breaks(y)
    return w - 2


@pytest.mark.a9  # a graph break's resume units: assignment A9
def test_break_inside_inlined_helper_breaks_the_caller_and_captures_the_helper(capsys):
    x = T(3)
    e = mini.explain(_calls_helper)(x)
    same(e.out, _calls_helper(x))
    # caller up to the call | helper up to print | helper resume | caller resume
    assert (e.graph_count, e.graph_break_count) == (4, 3)
    assert [[n.target for n in g.nodes if n.op == "call_function"] for g in e.graphs] == \
        [["mini.add"], ["mini.mul"], ["mini.add"], ["mini.sub"]]
    where = f"{_FILE}:{line_of(_helper_breaks, 'print(')} in _helper_breaks"
    assert e.break_reasons and all(r.location == where for r in e.break_reasons)
    with pytest.raises(mini.Unsupported, match="print") as info:
        mini.compile(_calls_helper, backend="eager", fullgraph=True)(x)
    assert 'print("in helper")' in str(info.value)


class _NoisyBlock(mini.nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = mini.nn.Linear(4, 3)

    def forward(self, x):
        h = self.lin(x).relu()
        print("shape", tuple(h.shape))
        return h * 2


@pytest.mark.a9  # a graph break's resume units: assignment A9
def test_break_inside_module_forward(capsys):
    m = _NoisyBlock()
    cf, cnt = counted(m)
    for seed in range(3):
        x = T(2, 4, seed=seed)
        same(cf(x), m(x))
    assert cnt.frame_count == 2


# ---- breaks inside loops ---------------------------------------------------------------------

def _print_in_loop(x):
    for _ in range(4):
        x = x * 2 + 1
        print("step")
    return x


@pytest.mark.a9  # a graph break's resume units: assignment A9
def test_break_inside_a_for_loop_leaves_the_frame_to_cpython(capsys):
    cf, cnt = counted(_print_in_loop)
    for seed in range(3):
        x = T(3, seed=seed)
        same(cf(x), _print_in_loop(x))
        # as Dynamo: every iteration would break again, so the frame runs in CPython, no graph
        # (torch 2.11 measured: tests/conformance, break_inside_for_loop)
        assert cnt.frame_count == 0
    assert capsys.readouterr().out == "step\n" * 24


def _loop_body_breaks(t):
    u = t * 3
    print("helper")
    return u + 1


def _helper_in_loop(x):
    for _ in range(2):
        x = _loop_body_breaks(x)
    return x


@pytest.mark.a9  # a graph break's resume units: assignment A9
def test_a_break_inside_a_helper_called_in_a_loop_breaks_at_the_call(capsys):
    # the break is the helper's, not the loop's own: the loop's unit ends at the call (as in
    # torch 2.11, which compiles 3 graphs for this), the helper's frame is captured on its own
    cf, cnt = counted(_helper_in_loop)
    x = T(3, seed=0)
    same(cf(x), _helper_in_loop(x))
    assert cnt.frame_count >= 2
    assert capsys.readouterr().out == "helper\n" * 4


def _break_in_try(x):
    y = x * 2
    try:
        print("inside")
        y = y + 1
    except RuntimeError:
        y = y - 1
    return y * 3


@pytest.mark.a9  # a graph break's resume units: assignment A9
def test_break_inside_a_try_block_leaves_the_frame_to_cpython(capsys):
    cf, cnt = counted(_break_in_try)
    x = T(3, seed=0)
    same(cf(x), _break_in_try(x))
    assert cnt.frame_count == 0  # torch 2.11: 0 graphs (tests/conformance, break_inside_try)
    assert capsys.readouterr().out == "inside\n" * 2


_SEEN = []


def _append_loop_var(x):
    for i in range(3):
        x = x + 1
        _SEEN.append(i)
    return x


def _append_arg(x, n):
    y = x * 2
    _SEEN.append(n)
    return y


def test_dynamic_ints_reach_the_break_as_ints():
    # automatic dynamic makes the int a graph input after one change; the call at the break
    # must still see an int (not the 0-d tensor the graph uses)
    _SEEN.clear()
    x = T(3)
    cf, _ = counted(_append_loop_var)
    same(cf(x), x + 3)
    cf, _ = counted(_append_arg)
    for n in [1, 2, 3]:
        same(cf(x, n), x * 2)
    assert _SEEN == [0, 1, 2, 1, 2, 3] and all(type(v) is int for v in _SEEN), _SEEN


# ---- recompiles of resume units --------------------------------------------------------------

def _break_then_use_y(x, y):
    a = x.sin()
    print("mid")
    return a * y


@pytest.mark.a9  # a graph break's resume units: assignment A9
def test_only_the_resume_unit_recompiles_when_a_later_input_changes(capsys):
    cf, cnt = counted(_break_then_use_y)
    for y, frames in [(T(3, seed=1), 2), (T(3, seed=2), 2), (T(3, dtype=mini.float64), 3),
                      (T(3, seed=3, dtype=mini.float64), 3)]:
        x = T(3)
        same(cf(x, y), _break_then_use_y(x, y))
        assert cnt.frame_count == frames
    mini.set_logs("recompiles")
    cf(T(3), T(3, dtype=mini.int64))
    err = capsys.readouterr().err
    assert err.count("Recompiling function _break_then_use_y") == 1 and "dtype" in err, err


# marked dynamic or static, each unit's compiles are A9's; automatic dynamic shapes (None) in
# each unit are A7's and A9's: no one assignment's
@pytest.mark.parametrize("dynamic,frames", [(None, [2, 4, 4, 4, 4]),
                                            pytest.param(True, [2, 2, 2, 2, 2], marks=pytest.mark.a9),
                                            pytest.param(False, [2, 4, 6, 8, 10], marks=pytest.mark.a9)])
def test_dynamic_shapes_apply_to_each_unit(dynamic, frames, capsys):
    cf, cnt = counted(_break_then_use_y, dynamic=dynamic)
    for n, count in zip([3, 4, 5, 6, 7], frames):  # automatic dynamic: each unit recompiles once
        x, y = T(n), T(n, seed=1)
        same(cf(x, y), _break_then_use_y(x, y))
        assert cnt.frame_count == count


# each resume unit (A9) has its own cache limit (A6): no one assignment's
def test_resume_unit_hits_its_own_cache_limit(capsys):
    cf, cnt = counted(_break_then_use_y)
    with mini.config.patch(cache_size_limit=2):
        with pytest.warns(UserWarning, match="cache_size_limit"):
            for dt in [mini.float32, mini.float64, mini.int64]:
                x, y = T(3), T(3, seed=1, dtype=dt)
                same(cf(x, y), _break_then_use_y(x, y))
        x, y = T(3), T(3, seed=2, dtype=mini.int64)
        same(cf(x, y), _break_then_use_y(x, y))  # runs eagerly from the break on
    assert cnt.frame_count == 3  # unit 0 once, the resume unit twice


# ---- logs ----------------------------------------------------------------------------------

@pytest.mark.a9  # a graph break's resume units: assignment A9
def test_graph_breaks_log_streams_each_break_to_stderr(capsys):
    counted(_two_prints)[0](T(3))
    assert capsys.readouterr().err == ""  # channel off
    mini.reset()
    cf, _ = counted(_two_prints)
    mini.set_logs("graph_breaks")
    cf(T(3))
    out = capsys.readouterr()
    assert out.out == "one\ntwo\n"
    assert out.err.count("Graph break in user code") == 2, out.err
    second = line_of(_two_prints, 'print("two")')
    assert f"{_FILE}:{second}" in out.err
    assert "print" in out.err and 'code: print("one")' in out.err


def test_mini_logs_environment_variable_graph_breaks(tmp_path):
    script = tmp_path / "user.py"
    script.write_text("import mini\n"
                      "def f(x):\n"
                      "    y = x + 1\n"
                      "    s = y.sum().item()\n"
                      "    return y * s\n"
                      "print(mini.compile(f, backend='eager')(mini.ones(3)).tolist())\n")
    pkg = os.path.dirname(os.path.dirname(mini.__file__))
    r = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=120,
                       env=dict(os.environ, PYTHONPATH=pkg, MINI_LOGS="graph_breaks"))
    assert r.returncode == 0, r.stderr[-2000:]
    assert r.stdout.strip() == "[12.0, 12.0, 12.0]"
    assert "Graph break in user code" in r.stderr and "item()" in r.stderr
    assert "s = y.sum().item()" in r.stderr


# ---- scalar outputs, comprehensions --------------------------------------------------------

def test_capture_scalar_outputs_keeps_item_in_the_graph():
    x = T(3)
    with mini.config.patch(capture_scalar_outputs=True):
        e = mini.explain(_item)(x)
    same(e.out, _item(x))
    assert (e.graph_count, e.graph_break_count) == (1, 0)


def _comprehension(p):
    return [p * i for i in range(3)]


def test_comprehension_frame_captured_on_its_own_gives_eagers_result():
    x = T(3)
    cf, _ = counted(_comprehension)
    for _ in range(3):
        same(cf(x), _comprehension(x))


def _minus_one(x):
    return x - 1


_compiled_minus_one = mini.compile(_minus_one, backend="eager")


def _reset_then_compile(x):
    print("a graph break: the frame that calls this function runs the call itself")
    mini.reset()  # frees every artifact, the calling frame's included
    return _compiled_minus_one(x)  # compiles again: the new artifact may take the freed memory


def _calls_reset(x):
    y = x + 1
    z = _reset_then_compile(x)
    return y * 2 + z


def test_reset_inside_the_call_a_break_runs_does_not_read_the_freed_artifact():
    """The breaking call runs mini.reset(), which frees the artifact of the unit that broke;
    the frame must not read it afterwards (it read the next unit's offset from freed memory,
    reused by the compile inside the call, and failed: 'cannot resume at offset ...')."""
    x = T(3)
    expected = _calls_reset(x)
    cf = mini.compile(_calls_reset, backend="eager")
    for _ in range(2):
        same(cf(x), expected)


@pytest.mark.parametrize("backend", ["eager", "inductor"])
def test_a_keyword_call_left_to_cpython_keeps_its_keywords(backend, capsys):
    """A break at a call inside a try block is left to CPython (a Skip exit: nothing of the unit
    is compiled). On 3.11 and 3.12
    the keyword names of KW_NAMES live in CPython's eval loop, not on the stack: resumed at the
    CALL, print("y", 1, sep="-", end="|\\n") printed "y 1 - |\\n\\n" (the keywords as positional
    arguments). CPython now resumes at the KW_NAMES."""
    def fn(x):
        try:
            print("y", 1, sep="-", end="|\n")
        except ValueError:
            pass
        return x + 1
    x = mini.ones(3)
    expected = fn(x)
    assert capsys.readouterr().out == "y-1|\n"
    cf = mini.compile(fn, backend=backend)
    for _ in range(2):  # the compile, then the cache hit
        got = cf(x)
        assert capsys.readouterr().out == "y-1|\n"
        assert got.tolist() == expected.tolist()


def _scaled(x, scale=1, *, shift=0):
    print("in helper", scale, shift)
    return x * scale + shift


def test_a_keyword_call_whose_callee_breaks_inside_a_try_keeps_its_keywords(capsys):
    """The same, with the break inside an inlined helper called with keywords: the caller's unit
    ends at its call, in a try block, so CPython resumes at the caller's KW_NAMES."""
    def fn(x):
        try:
            y = _scaled(x, scale=3, shift=5)
        except ValueError:
            y = x
        return y + 1
    x = mini.ones(2)
    assert fn(x).tolist() == [9.0, 9.0]
    assert capsys.readouterr().out == "in helper 3 5\n"
    for backend in ("eager", "aot_eager", "inductor"):
        assert mini.compile(fn, backend=backend)(x).tolist() == [9.0, 9.0], backend
        assert capsys.readouterr().out == "in helper 3 5\n", backend


# ---- a builtin on a number made dynamic --------------------------------------------------------

def _warmup_scale(x, step, steps):
    return x * min(1.0, step / steps)


def test_a_builtin_on_a_dynamic_number_names_the_number_and_the_fix():
    # a warm-up schedule's step changes every call: automatic dynamic makes it a number of the
    # graph at the first recompile, known only when the graph runs, and min() of it breaks the
    # graph. The reason says so (not "Tensor") and names the two ways out; the calls still run.
    x = T(4)
    mini.reset()
    strict = mini.compile(_warmup_scale, fullgraph=True)
    same(strict(x, 1, 10), x * 0.1)
    with pytest.raises(Exception) as info:
        strict(x, 2, 10)
    message = str(info.value)
    assert "`min`" in message and "a Python number made dynamic" in message and "Tensor" not in message, message
    assert "dynamic=False" in message and "mini.clamp" in message, message
    mini.reset()
    loose = mini.compile(_warmup_scale)
    for step in (1, 2, 3, 20):
        same(loose(x, step, 10), x * min(1.0, step / 10))
    mini.reset()
