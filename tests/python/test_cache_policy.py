"""The course kit's A6 (notes/assignments/A6.md): mini.config.cache_policy = "yours", a guard
cache policy of the student's design (mini/guards/cache.cpp: your_hit, your_place, your_room).

The contract leaves the design open: where a hit moves, where a new compile goes, when to evict
and what. These tests check what every policy owes whatever it chooses (right answers, each
backend its own entries, at most cache_size_limit entries, at most twice that many compiles,
entries never copied), and one goal that torch's policy misses: a workload that moved on to new
sizes gets compiled code again. labs/cache_storm.py measures the rest, beside "recent" (torch's)
and "oldest".

Expected values come from running the same function eagerly on the same inputs."""
import warnings

import pytest

import mini
from capture_helpers import ALIVE, CountingConfig, T, fresh_mini, same, scale_times  # noqa: F401  (fresh_mini: autouse)

KIT_ASSIGNMENT = "a6"


def _affine(x):
    return x * 2 + 1


@pytest.fixture
def yours():
    """cache_policy "yours" with automatic dynamic off (each new size is a new entry); the
    limit's warning recorded, not printed."""
    with mini.config.patch(cache_policy="yours", automatic_dynamic_shapes=False), \
            warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        yield caught


def _stream(sizes, backend=None):
    """Calls compiled _affine on each size in turn, checking every result against eager;
    returns (the compiled function, its backend)."""
    backend = backend or mini.CompileCounter()
    ALIVE.append(backend)
    compiled = mini.compile(_affine, backend=backend)
    xs = {n: T(n, seed=n) for n in set(sizes)}
    for n in sizes:
        same(compiled(xs[n]), _affine(xs[n]), f"call with size {n}")
    return compiled, backend


def _entries(compiled):
    units = mini.compiler.cache_entries(compiled)
    return units[0]["entries"] if units else []


STORM = [n for _ in range(5) for n in range(2, 14)]                          # 12 sizes in turn
PHASES = [n for base in (2, 6, 10) for _ in range(10) for n in range(base, base + 4)]
DRIFT = [2 + i // 4 for i in range(64)]                                     # a new size every 4 calls


# ---- right answers, bounded cache -------------------------------------------------------------

@pytest.mark.parametrize("sizes", [STORM, PHASES, DRIFT], ids=["storm", "phases", "drift"])
def test_every_call_returns_what_eager_returns(yours, sizes):
    _stream(sizes)


def test_two_entries_alternating_never_recompile(yours):
    # whatever the order, an entry whose guards hold is found and run
    cnt = mini.CompileCounter()
    ALIVE.append(cnt)
    compiled = mini.compile(_affine, backend=cnt)
    a, b = T(4), T(4, dtype=mini.float64)
    for _ in range(10):
        same(compiled(a), _affine(a))
        same(compiled(b), _affine(b))
    assert cnt.frame_count == 2


def test_never_more_entries_than_the_limit(yours):
    compiled = mini.compile(_affine, backend="eager")
    with mini.config.patch(cache_size_limit=4):
        for n in DRIFT:
            x = T(n)
            same(compiled(x), _affine(x))
            assert len(_entries(compiled)) <= 4, f"after a call with size {n}: {len(_entries(compiled))} entries"


@pytest.mark.parametrize("sizes", [STORM, DRIFT], ids=["storm", "drift"])
def test_a_storm_ends_within_twice_the_limit(yours, sizes):
    # a contract the caller checks too: a policy that compiles more raises, naming the rule
    _, cnt = _stream(sizes)
    assert cnt.frame_count <= 2 * mini.config.cache_size_limit


def test_past_its_room_a_call_runs_eagerly_with_one_warning(yours):
    _, cnt = _stream(list(range(2, 40)))  # 38 new sizes: more than 2 * 8 can ever compile
    warned = [w for w in yours if "mini hit config.cache_size_limit (8)" in str(w.message)]
    assert len(warned) == 1, [str(w.message) for w in yours]
    assert cnt.frame_count <= 16


def test_limit_0_never_compiles(yours):
    with mini.config.patch(cache_size_limit=0):
        _, cnt = _stream([3, 3, 4])
    assert cnt.frame_count == 0


# ---- what the policy must never do --------------------------------------------------------------

def test_entries_are_never_copied_or_moved(yours):
    # a reorder is a splice: each entry keeps its address for as long as it stays in the cache
    compiled = mini.compile(_affine, backend="eager")
    xs = [T(3, dtype=d) for d in (mini.float32, mini.float64, mini.int64)]
    for x in xs:
        compiled(x)
    where = {e["compile_id"]: e["address"] for e in _entries(compiled)}
    for x in [xs[0], xs[2], xs[0], xs[1], xs[1], xs[2], xs[0]] * 3:
        same(compiled(x), _affine(x))
        for e in _entries(compiled):
            assert e["address"] == where[e["compile_id"]], f"entry {e['compile_id']} was copied or moved"


def test_another_backends_entries_are_never_checked(yours):
    # a guard can run user code (here a property): another backend's entries are not its business
    cfg = CountingConfig()
    other = mini.compile(scale_times, backend="eager")
    for dtype in (mini.float32, mini.float64, mini.int64):
        other(cfg, T(3, dtype=dtype))  # three entries of backend "eager"
    cnt = mini.CompileCounter()
    ALIVE.append(cnt)
    mine = mini.compile(scale_times, backend=cnt)
    mine(cfg, T(3))  # one entry of this backend
    before = cfg.reads
    same(mine(cfg, T(3)), scale_times(CountingConfig(), T(3)))
    assert cfg.reads - before == 1, "the hit should check only this backend's one entry"


def test_each_backend_gets_its_own_entry(yours):
    a, b = mini.CompileCounter(), mini.CompileCounter()
    ALIVE.extend([a, b])
    fa, fb = mini.compile(_affine, backend=a), mini.compile(_affine, backend=b)
    x = T(3)
    for f in (fa, fb, fa, fb):
        same(f(x), _affine(x))
    assert (a.frame_count, b.frame_count) == (1, 1)


# ---- the goal torch's policy misses ---------------------------------------------------------------

def test_a_workload_that_moved_on_gets_compiled_code_again(yours):
    # three phases of four sizes each: torch's "recent" runs the third phase eagerly (12 sizes,
    # limit 8); your policy must give it compiled code, at least in its last round
    ran_compiled = []

    def backend(gm, example_inputs):
        def run(*args):
            ran_compiled.append(tuple(args[0].shape)[0])
            return gm(*args)
        return run

    _stream(PHASES[:-4], backend)
    ran_compiled.clear()
    _stream(PHASES[-4:], backend)
    assert ran_compiled == PHASES[-4:], (f"of the last round's sizes {PHASES[-4:]} only {ran_compiled} "
                                         "ran compiled code")
