"""Tests of mini/capture/'s CPython-version-specific foundation, through _capture_probe.

Runs under pytest (the .venv, 3.11) or as a plain script on any of 3.11, 3.12, 3.13:

    .venv/bin/python -m pytest tests/capture_probe/test_capture_probe.py
    python3.12 tests/capture_probe/test_capture_probe.py

The probe extension is built on first use by build.sh into build/capture_probe/py<version>/
(or taken from $CAPTURE_PROBE_DIR, e.g. a SAN=1 build).
"""

import dis
import gc
import importlib
import os
import subprocess
import sys
import tracemalloc
import types

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
MINOR = sys.version_info.minor


def _load_probe():
    folder = os.environ.get("CAPTURE_PROBE_DIR")
    if not folder:
        version = "%d.%d.%d" % sys.version_info[:3]
        folder = os.path.join(ROOT, "build", "capture_probe", "py" + version)
        subprocess.run(["bash", os.path.join(HERE, "build.sh"), sys.executable, folder],
                       check=True, stdout=subprocess.DEVNULL)
    sys.path.insert(0, folder)
    try:
        return importlib.import_module("_capture_probe")
    finally:
        sys.path.remove(folder)


probe = _load_probe()
NULL = probe.NULL


# --------------------------------------------------------------------------------------
# Functions under test. Their line numbers matter: tests read them from co_firstlineno.

def loop_and_branches(n, limit):
    total = 0
    for i in range(n):
        if i % 3 == 0:
            total += i
        elif i > limit:
            total -= 1
        else:
            total = total * 2
    while total > 1000:
        total //= 2
    return total


def branchy(a):
    if a > 0:
        r = "pos"
    else:
        r = "neg"
    return r


def counted_loop(n):
    total = 0
    for i in range(n):
        total += i
    return total


def keyword_call(x):
    return sorted(x, key=abs, reverse=True)


def helper(a, b=1, *rest, scale=2, **extra):
    return (a + b + sum(rest)) * scale + len(extra)


def calls(x):
    y = helper(x, 2, 3, scale=x, flag=True)
    z = len([x, y]) + abs(-x)
    return str(x).upper() + str(y) + str(z)


def make_closure(k):
    def with_cells(a, b):
        c = a + b

        def inner():
            return a + c + k

        return inner()

    return with_cells


def comprehension(xs):
    doubled = [x * 2 for x in xs if x]
    return {x: x + 1 for x in doubled}


def try_and_with(path):
    import contextlib

    out = []
    try:
        with contextlib.suppress(KeyError):
            out.append({}[path])
        out.append(1 / len(path))
    except ZeroDivisionError as error:
        out.append(type(error).__name__)
    finally:
        out.append("done")
    return out


def fstrings(a, b):
    return f"{a}-{b!r}-{a:>5}"


def attributes(obj):
    obj.value = obj.value + 1
    return obj.value.bit_length(), obj.__class__.__name__


def unpack_and_slice(seq):
    a, b, *rest = seq
    seq[1:3] = [b, a]
    return rest[::2], seq[-1], not a, ~b, -a


def is_and_contains(x, items):
    return x is None, x is not None, x in items, x not in items, x == 3, x != 4, x <= 5


def make_big_function():
    # More than 256 constants and a jump over more than 256 code units: EXTENDED_ARG.
    lines = ["def big(flag):", "    total = 0", "    if flag:"]
    lines += ["        total += %d" % i for i in range(300)]
    lines += ["    return total"]
    scope = {}
    exec(compile("\n".join(lines), "<big>", "exec"), scope)
    return scope["big"]


def generator(n):
    for i in range(n):
        yield i * i


def recursive(n):
    return 1 if n <= 1 else n * recursive(n - 1)


def raises(x):
    return {}[x]


ALL_FUNCTIONS = [
    loop_and_branches, branchy, counted_loop, keyword_call, helper, calls, make_closure,
    make_closure(1), comprehension, try_and_with, fstrings, attributes, unpack_and_slice,
    is_and_contains, make_big_function(), generator, recursive, raises,
]


# --------------------------------------------------------------------------------------
# Helpers.

def dis_rows(func):
    """dis's view of func, with EXTENDED_ARG folded into the instruction it extends."""
    rows, prefix = [], None
    for ins in dis.get_instructions(func):
        if ins.opname == "EXTENDED_ARG":
            prefix = ins.offset if prefix is None else prefix
            continue
        offset = ins.offset if prefix is None else prefix
        prefix = None
        target = ins.argval if ins.opcode in dis.hasjrel else -1
        line = ins.positions.lineno
        rows.append((offset, ins.opname, ins.arg or 0, target, -1 if line is None else line))
    return rows


def decoded(func):
    return probe.decode(func)


def by_offset(func):
    return {row[0]: row for row in decoded(func)}


def first_offset_of_line(func, line):
    return min(row[0] for row in decoded(func) if row[5] == line)


def depth_at(func, offset):
    return dict(probe.stack_depths(func))[offset]


def rss_bytes():
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def asan_quarantine_active():
    return ("asan" in os.environ.get("LD_PRELOAD", "")
            and "quarantine_size_mb=0" not in os.environ.get("ASAN_OPTIONS", ""))


def all_codes(code):
    yield code
    for const in code.co_consts:
        if isinstance(const, types.CodeType):
            yield from all_codes(const)


def as_function(code):
    cells = tuple(types.CellType() for _ in code.co_freevars)
    return types.FunctionType(code, {}, None, None, cells)


# --------------------------------------------------------------------------------------
# Bytecode decoding.

def test_decode_matches_dis_for_every_instruction():
    for func in ALL_FUNCTIONS:
        mine = [(o, name, arg, target, line) for o, name, _, arg, target, line in decoded(func)]
        assert mine == dis_rows(func), func.__name__


def test_decode_matches_dis_on_stdlib_modules():
    for module in ("json.decoder", "argparse", "inspect", "dataclasses", "asyncio.tasks"):
        code = importlib.import_module(module).__loader__.get_code(module)
        for inner in all_codes(code):
            func = as_function(inner)
            mine = [(o, n, a, t, l) for o, n, _, a, t, l in decoded(func)]
            assert mine == dis_rows(func), (module, inner.co_name)


def test_extended_arg_is_folded():
    big = make_big_function()
    rows = decoded(big)
    assert any(arg > 255 and norm == "LOAD_CONST" for _, _, norm, arg, _, _ in rows)
    jump = next(r for r in rows if r[2] == "POP_JUMP_IF_FALSE")
    assert jump[3] > 255 and jump[4] in by_offset(big)
    assert "EXTENDED_ARG" not in [r[1] for r in rows]
    assert big(True) == sum(range(300)) and big(False) == 0


def test_tables_match_cpython_headers():
    table = probe.raw_opcode_table()
    headers = probe.header_cache_entries()
    for op in range(256):
        caches, is_base = headers[op]
        name = table[op][0]
        if is_base and not name.startswith("<"):
            assert table[op][2] == caches, (name, table[op][2], caches)
    # Opcode numbers: the public header that #defines each name.
    import sysconfig
    include = sysconfig.get_paths()["include"]
    header = os.path.join(include, "opcode_ids.h" if MINOR >= 13 else "opcode.h")
    defined = {}
    with open(header) as f:
        for line in f:
            parts = line.split()
            if len(parts) == 3 and parts[0] == "#define" and parts[2].isdigit():
                defined[parts[1]] = int(parts[2])
    checked = 0
    for name, number in defined.items():
        if number < 256 and name == table[number][0]:
            checked += 1
        elif number < 256 and name in dis.opmap and dis.opmap[name] == number:
            raise AssertionError("%s is %d in the header but not in mini's table" % (name, number))
    assert checked > 100


def test_normalized_names_per_version():
    names = {norm for _, _, norm, _, _, _ in decoded(loop_and_branches)}
    assert {"FOR_ITER", "GET_ITER", "BINARY_OP", "COMPARE_OP", "POP_JUMP_IF_FALSE",
            "JUMP_BACKWARD", "STORE_FAST"} <= names
    assert "Unknown" not in names
    raw = {name for _, name, _, _, _, _ in decoded(loop_and_branches)}
    if MINOR == 11:
        assert any(n.startswith("POP_JUMP_FORWARD_IF_") for n in raw)
    assert not any(n.startswith("POP_JUMP_FORWARD") for n in names)
    for func in ALL_FUNCTIONS:
        assert "Unknown" not in {r[2] for r in decoded(func)}, func.__name__


def test_for_iter_target_is_the_loop_exit():
    rows = by_offset(counted_loop)
    for_iter = next(r for r in rows.values() if r[2] == "FOR_ITER")
    skip = probe.dialect()["for_iter_exit_skip"]
    target = rows[for_iter[4]]
    if MINOR == 11:
        assert skip == 0
    else:
        assert target[2] == "END_FOR"
    after_loop = rows[for_iter[4] + skip]
    return_line = counted_loop.__code__.co_firstlineno + 4
    assert after_loop[5] == return_line and after_loop[2] == "LOAD_FAST"
    # The iterator is on the stack at FOR_ITER, gone where CPython continues.
    assert depth_at(counted_loop, for_iter[0]) == 1
    assert depth_at(counted_loop, after_loop[0]) == 0


def test_conditional_jump_target_is_the_else_branch():
    rows = by_offset(branchy)
    jump = next(r for r in rows.values() if r[2] == "POP_JUMP_IF_FALSE")
    else_line = branchy.__code__.co_firstlineno + 4
    assert rows[jump[4]][5] == else_line
    assert jump[4] == first_offset_of_line(branchy, else_line)


def test_calls_per_version():
    names = [r[2] for r in decoded(keyword_call)]
    if MINOR == 11:
        assert "KW_NAMES" in names and "PRECALL" in names and "CALL" in names
    elif MINOR == 12:
        assert "KW_NAMES" in names and "PRECALL" not in names and "CALL" in names
    else:
        assert "CALL_KW" in names and "KW_NAMES" not in names
    dialect = probe.dialect()
    assert dialect["call_null_position"] == ("after" if MINOR >= 13 else "before")
    assert dialect["has_precall"] == (MINOR == 11)
    assert dialect["has_call_kw"] == (MINOR >= 13)


def test_closure_opcodes_per_version():
    outer = [r[2] for r in decoded(make_closure(1))]
    assert outer[0] == "MAKE_CELL" or "COPY_FREE_VARS" in outer[:3]
    assert "COPY_FREE_VARS" in outer and "MAKE_CELL" in outer
    inner_names = [r[2] for r in decoded(make_closure)]
    if MINOR >= 13:
        assert "LOAD_CLOSURE" not in inner_names
        assert "SET_FUNCTION_ATTRIBUTE" in [r[2] for r in decoded(make_closure(1))]
    else:
        assert "LOAD_CLOSURE" in [r[2] for r in decoded(make_closure(1))]


def test_dialect_readings_of_arguments():
    details = probe.details(is_and_contains)
    symbols = [d["symbol"] for d in details if "symbol" in d]
    assert symbols == ["==", "!=", "<="]
    calls_details = probe.details(calls)
    globals_seen = {d["name"]: d["null"] for d in calls_details if "null" in d}
    assert globals_seen == {"helper": True, "len": True, "abs": True, "str": True}
    methods = {d["name"]: d["method"] for d in calls_details if "method" in d}
    assert methods == {"upper": True}
    attrs = {d["name"]: d["method"] for d in probe.details(attributes) if "method" in d}
    assert attrs == {"value": False, "bit_length": True, "__class__": False, "__name__": False}
    pairs = [d["pair"] for d in probe.details(straight_line) if "pair" in d]
    if MINOR >= 13:  # return x + y: LOAD_FAST_LOAD_FAST (x, y)
        names = localsplus_names(straight_line)
        assert [(names[a], names[b]) for a, b in pairs] == [("x", "y")]
    else:
        assert pairs == []


def test_exception_table_matches_dis():
    for func in ALL_FUNCTIONS:
        expected = [(e.start, e.end, e.target, e.depth, e.lasti)
                    for e in dis._parse_exception_table(func.__code__)]
        assert probe.exception_table(func) == expected, func.__name__
    assert probe.exception_table(try_and_with)


def test_stack_depths_agree_with_the_compiler():
    count = 0
    for module in ("json.decoder", "argparse", "inspect", "dataclasses", "asyncio.tasks"):
        code = importlib.import_module(module).__loader__.get_code(module)
        for inner in all_codes(code):
            depths = [d for _, d in probe.stack_depths(as_function(inner))]
            assert depths[0] == 0
            # Depth before an instruction; co_stacksize also counts a RETURN_CONST's push.
            assert inner.co_stacksize - 1 <= max(depths) <= inner.co_stacksize, inner.co_name
            count += 1
    assert count > 300


# --------------------------------------------------------------------------------------
# The frame hook.

def test_hooked_run_returns_the_same_result():
    cases = [
        (loop_and_branches, (40, 7)), (branchy, (-2,)), (calls, (5,)),
        (keyword_call, ([3, -5, 1],)),
        (make_closure(10), (1, 2)), (comprehension, ([0, 1, 2],)), (try_and_with, ("",)),
        (try_and_with, ("ab",)), (fstrings, (1, "x")), (unpack_and_slice, ([1, 2, 3, 4, 5],)),
        (helper, (1, 2, 3, 4)), (make_big_function(), (True,)),
    ]
    for func, args in cases:
        expected = func(*[list(a) if isinstance(a, list) else a for a in args])
        got = probe.run_hooked(func, *[list(a) if isinstance(a, list) else a for a in args])
        assert got == expected, func.__name__
        assert probe.intercepted() == 1, func.__name__
    assert not probe.hook_installed()


def test_hooked_recursion_sees_every_frame():
    assert probe.run_hooked(recursive, 6) == 720
    assert probe.intercepted() == 6


def test_exception_propagates_through_the_hook():
    try:
        probe.run_hooked(raises, "missing")
    except KeyError as error:
        assert error.args == ("missing",)
    else:
        raise AssertionError("KeyError expected")
    assert not probe.hook_installed()


def test_generators_pass_through_untouched():
    result = probe.run_hooked_on(generator, lambda: list(generator(5)))
    assert result == [0, 1, 4, 9, 16]
    assert probe.intercepted() == 0
    gen = generator(3)
    assert probe.run_hooked_on(generator, lambda: (next(gen), next(gen))) == (0, 1)
    assert probe.intercepted() == 0
    try:
        probe.run_hooked_on(generator, lambda: gen.throw(ValueError("x")))
    except ValueError:
        pass
    assert probe.intercepted() == 0


def test_other_threads_pass_through():
    import threading

    results = []

    def in_thread():
        thread = threading.Thread(target=lambda: results.append(recursive(5)))
        thread.start()
        thread.join()
        return recursive(3)

    assert probe.run_hooked_on(recursive, in_thread) == 6
    assert results == [120]
    assert probe.intercepted() == 3  # only this thread's three frames


def test_hook_disabled_hides_mini_own_work():
    result, nested, intercepted = probe.run_reentrant(recursive, True, 4)
    assert (result, nested, intercepted) == (24, 24, 4)  # the nested call's 4 frames: not seen
    result, nested, intercepted = probe.run_reentrant(recursive, False, 4)
    assert (result, nested, intercepted) == (24, 24, 8)


def test_frame_view_reads_arguments_cells_and_free_variables():
    func = make_closure(100)
    view, result = probe.frame_view(func, 1, 2)
    assert result == func(1, 2)
    names = view["names"]
    values = dict(zip(names, view["values"]))
    kinds = dict(zip(names, view["kinds"]))
    assert names[:2] == ["a", "b"] and view["argument_count"] == 2
    assert values["a"] == 1 and kinds["a"] == 0x60  # a cell argument, still the raw value
    assert values["b"] == 2 and kinds["b"] == 0x20
    assert values["c"] is NULL and kinds["c"] & 0x40  # a cell, not made yet
    assert values["k"] == 100 and kinds["k"] == 0x80  # read from func_closure
    assert view["function"] is func and view["code"] is func.__code__
    assert view["globals"] is func.__globals__ and isinstance(view["builtins"], dict)

    assert names == localsplus_names(func)
    view, _ = probe.frame_view(helper, 1, 2, 3, scale=4, z=5)
    values = dict(zip(view["names"], view["values"]))
    assert view["argument_count"] == 5
    assert values == {"a": 1, "b": 2, "rest": (3,), "scale": 4, "extra": {"z": 5}}


def test_finished_frame_returns_the_value():
    marker = object()
    assert probe.run_finished(helper, marker, 1, 2) is marker
    assert probe.intercepted() == 1
    assert probe.run_finished(make_closure(3), "compiled", 1, 2) == "compiled"


def test_finished_frame_leaks_nothing_over_100k_calls():
    argument, value = object(), object()
    baseline = (sys.getrefcount(argument), sys.getrefcount(value))
    top = probe.datastack_top()
    for _ in range(1000):  # warm up allocator pools
        probe.run_finished(helper, value, argument, 2)
    gc.collect()
    rss_before = rss_bytes()
    tracemalloc.start()
    traced_before = tracemalloc.get_traced_memory()[0]
    for _ in range(100_000):
        probe.run_finished(helper, value, argument, 2)
        assert probe.datastack_top() == top
    traced_after = tracemalloc.get_traced_memory()[0]
    tracemalloc.stop()
    gc.collect()
    assert (sys.getrefcount(argument), sys.getrefcount(value)) == baseline
    assert traced_after - traced_before < 64 * 1024
    if asan_quarantine_active():
        print("  (RSS check skipped: ASan's quarantine keeps freed memory resident; "
              "set ASAN_OPTIONS=quarantine_size_mb=0 to include it)")
    else:
        assert rss_bytes() - rss_before < 4 * 1024 * 1024


def test_finished_frame_at_every_data_stack_depth():
    # Frames live in 16 KiB chunks of the thread's data stack; a frame that starts a new
    # chunk owns it, and popping that frame must give the chunk back (3.12's copied helper).
    seen_tops = set()

    def descend(depth):
        if depth:
            return descend(depth - 1)
        top = probe.datastack_top()
        assert probe.run_finished(helper, "v", 1, 2) == "v"
        assert probe.datastack_top() == top
        seen_tops.add(top)
        return True

    chunk_starts = probe.frames_starting_a_chunk()
    for depth in range(0, 600, 3):
        assert descend(depth)
    assert len(seen_tops) > 150
    assert probe.frames_starting_a_chunk() > chunk_starts


# --------------------------------------------------------------------------------------
# Resuming natively.

def straight_line(a, b):
    x = a + 1
    y = b * 2
    return x + y


def binary_tail(a, b):
    z = (a * 3) - b
    return z


def loop_to_resume(items):
    s = 0
    for v in items:
        s += v
    return s


def call_to_resume(x):
    r = len(x)
    return r + 1


def try_after_resume(a, key):
    b = a + 1
    try:
        value = {"k": b}[key]
    except KeyError:
        value = "caught"
    return value, b


def free_and_cells(k):
    def f(a):
        c = a + 1
        t = a * 2
        return (lambda: a + c + k + t)()

    return f


class Recorder:
    def __init__(self):
        self.log = []

    def __enter__(self):
        self.log.append("enter")
        return self

    def __exit__(self, kind, value, traceback):
        self.log.append(("exit", kind))
        return True  # suppresses the exception


def with_block(rec, fail):
    with rec:
        rec.log.append("body")
        if fail:
            raise ValueError("inside")
    return rec.log


def localsplus_names(func):
    """The names of the frame's localsplus slots, in slot order."""
    code, names = func.__code__, []
    while True:
        try:
            names.append(code._varname_from_oparg(len(names)))
        except IndexError:
            return names


def locals_for(func, **values):
    """A locals list for resume_at: one entry per slot, None (unbound) unless given."""
    return [values.get(name) for name in localsplus_names(func)]


def test_resume_with_an_empty_stack():
    line = straight_line.__code__.co_firstlineno + 2  # y = b * 2
    offset = first_offset_of_line(straight_line, line)
    assert depth_at(straight_line, offset) == 0
    locals_ = locals_for(straight_line, a=1, b=5, x=100)
    assert probe.resume_at(straight_line, offset, locals_, [], 1, 5) == 110
    # The arguments the call passed are ignored: resume_native's locals win.
    locals_ = locals_for(straight_line, b=1, x=0)
    assert probe.resume_at(straight_line, offset, locals_, [], 7, 7) == 2


def test_resume_with_one_stack_item_before_binary_op():
    rows = decoded(binary_tail)
    subtract = [i for i, r in enumerate(rows) if r[2] == "BINARY_OP"][1]
    load_b = rows[subtract - 1]
    assert load_b[2] == "LOAD_FAST"
    assert depth_at(binary_tail, load_b[0]) == 1
    result = probe.resume_at(binary_tail, load_b[0], locals_for(binary_tail, a=1, b=4), [50], 1, 4)
    assert result == 46


def test_resume_at_for_iter_with_the_iterator_on_the_stack():
    for_iter = next(r for r in decoded(loop_to_resume) if r[2] == "FOR_ITER")
    assert depth_at(loop_to_resume, for_iter[0]) == 1
    iterator = iter([3, 4, 5])
    next(iterator)
    locals_ = locals_for(loop_to_resume, items=None, s=100)
    assert probe.resume_at(loop_to_resume, for_iter[0], locals_, [iterator], [9]) == 109


def test_resume_with_a_null_on_the_stack_before_a_call():
    rows = decoded(call_to_resume)
    load_x = next(r for r in rows if r[2] == "LOAD_FAST" and r[3] == 0)
    assert depth_at(call_to_resume, load_x[0]) == 2
    def fake_len(value):
        return 1000
    if probe.dialect()["call_null_position"] == "before":
        stack = [NULL, fake_len]
    else:
        stack = [fake_len, NULL]
    locals_ = locals_for(call_to_resume, x=[1, 2])
    assert probe.resume_at(call_to_resume, load_x[0], locals_, stack, [1]) == 1001


def test_try_except_after_the_resume_point_still_catches():
    line = try_after_resume.__code__.co_firstlineno + 2  # try:
    offset = first_offset_of_line(try_after_resume, line)
    locals_ = locals_for(try_after_resume, a=1, key="nope", b=10)
    assert probe.resume_at(try_after_resume, offset, locals_, [], 1, "nope") == ("caught", 10)
    locals_ = locals_for(try_after_resume, a=1, key="k", b=10)
    assert probe.resume_at(try_after_resume, offset, locals_, [], 1, "k") == (10, 10)


def test_resume_inside_a_with_block():
    line = with_block.__code__.co_firstlineno + 2  # rec.log.append("body")
    offset = first_offset_of_line(with_block, line)
    assert depth_at(with_block, offset) == 1  # the bound __exit__ stays on the stack
    for fail in (False, True):
        rec = Recorder()
        locals_ = locals_for(with_block, rec=rec, fail=fail)
        assert probe.resume_at(with_block, offset, locals_, [rec.__exit__], None, None) == [
            "body", ("exit", ValueError if fail else None)]


def test_an_uncaught_exception_after_resume_has_a_traceback():
    line = straight_line.__code__.co_firstlineno + 2
    offset = first_offset_of_line(straight_line, line)
    try:
        probe.resume_at(straight_line, offset, locals_for(straight_line, b="s", x=1), [], 1, 1)
    except TypeError as error:
        frames = [f.name for f in __import__("traceback").extract_tb(error.__traceback__)]
        assert frames[-1] == "straight_line"
    else:
        raise AssertionError("TypeError expected")


def test_closures_and_free_variables_work_after_resume():
    func = free_and_cells(1000)
    line = func.__code__.co_firstlineno + 2  # t = a * 2
    offset = first_offset_of_line(func, line)
    # a is a cell argument, c a cell, k a free variable: all given as plain values.
    locals_ = locals_for(func, a=5, c=70)
    assert probe.resume_at(func, offset, locals_, [], 5) == 5 + 70 + 1000 + 10
    # The same with cells made by the caller (ResumeCells::AreCells), k from the closure.
    cell_a, cell_c = types.CellType(5), types.CellType(70)
    locals_ = locals_for(func, a=cell_a, c=cell_c, k=func.__closure__[0], t=types.CellType())
    assert probe.resume_at_with_cells(func, offset, locals_, [], 5) == 1085
    assert cell_c.cell_contents == 70


def test_resume_at_offset_zero_and_at_resume():
    locals_ = locals_for(straight_line, a=1, b=2)
    assert probe.resume_at(straight_line, 0, locals_, [], 0, 0) == 6
    func = free_and_cells(1)
    resume = next(r for r in decoded(func) if r[2] == "RESUME")[0]
    assert resume > 0  # after MAKE_CELL / COPY_FREE_VARS
    assert probe.resume_at(func, resume, locals_for(func, a=2), [], 0) == 2 + 3 + 1 + 4
    raw = locals_for(func, a=2)
    assert probe.resume_at(func, 0, raw, [], 0) == 10  # offset 0: the prologue runs natively


def test_bad_resume_raises_and_releases_the_frame():
    argument = object()
    top = probe.datastack_top()
    cases = [
        (1, locals_for(straight_line, a=1, b=1)),   # odd offset
        (10_000, locals_for(straight_line, a=1, b=1)),  # past the end
        (first_offset_of_line(straight_line, straight_line.__code__.co_firstlineno + 2),
         [argument]),  # wrong number of locals
    ]
    baseline = sys.getrefcount(argument)
    for offset, locals_ in cases:
        try:
            probe.resume_at(straight_line, offset, list(locals_), [argument], argument, 1)
        except SystemError as error:
            assert "cannot resume straight_line" in str(error)
        else:
            raise AssertionError("SystemError expected")
        assert probe.datastack_top() == top
    func = free_and_cells(1)
    try:
        probe.resume_at(func, 2, locals_for(func, a=1), [], 1)  # inside the prologue
    except SystemError as error:
        assert "prologue" in str(error)
    gc.collect()
    assert sys.getrefcount(argument) == baseline


def test_resume_leaks_nothing():
    line = straight_line.__code__.co_firstlineno + 2
    offset = first_offset_of_line(straight_line, line)
    a, x = 10**30, 10**31
    func = free_and_cells(1)
    cell_offset = first_offset_of_line(func, func.__code__.co_firstlineno + 2)
    value = 10**32
    baseline = (sys.getrefcount(a), sys.getrefcount(x), sys.getrefcount(value))
    top = probe.datastack_top()
    for _ in range(20_000):
        probe.resume_at(straight_line, offset, locals_for(straight_line, a=a, b=1, x=x), [], a, 1)
        probe.resume_at(func, cell_offset, locals_for(func, a=1, c=value), [], 1)
        probe.resume_at(binary_tail, 0, locals_for(binary_tail, a=a, b=1), [], 1, 2)
    assert probe.datastack_top() == top
    gc.collect()
    assert (sys.getrefcount(a), sys.getrefcount(x), sys.getrefcount(value)) == baseline


# --------------------------------------------------------------------------------------

def main():
    tests = [(name, f) for name, f in sorted(globals().items())
             if name.startswith("test_") and callable(f)]
    failed = 0
    for name, test in tests:
        try:
            test()
        except Exception:  # report every failure, then exit non-zero
            failed += 1
            import traceback
            print("FAIL", name)
            traceback.print_exc()
        else:
            print("ok  ", name)
    print("%s: %d passed, %d failed (Python %s)"
          % (os.path.basename(__file__), len(tests) - failed, failed, sys.version.split()[0]))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
