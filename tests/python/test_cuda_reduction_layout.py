"""A CUDA reduction kernel's layout (assignment A10, mini/codegen/cuda_launch.cpp): how many
threads reduce a row, whether the row is held in registers or looped over, how many blocks
share an SM, and when one long row is split over many blocks.

The decisions are checked against their contracts (notes/assignments/A10.md) without a GPU or a
CUDA toolkit: each function directly, for row lengths around every power of two and in every
kernel layout, and through the renderer (mini.inductor.render_graph_cuda), which names each
kernel by its shape and compiles it for the block it is launched with. Where NVRTC is there the
rendered kernels compile; where a GPU is there they run and agree with eager on the CPU.

    PYTHONPATH=build/python .venv/bin/python -m pytest -q tests/python/test_cuda_reduction_layout.py
"""
import re

import numpy as np
import pytest

import mini
import mini.inductor as inductor
from conftest import CUDA_SKIP_REASON, HAS_CUDA, cuda_like, to_np

pytestmark = [pytest.mark.a10, pytest.mark.usefixtures("own_cache_dir")]

LAYOUTS = range(1, inductor.cuda_layouts() + 1)
# around every power of two a block can take, and far past the largest
LENGTHS = sorted({1, 2, 3} | {n + d for p in range(2, 15) for n in [2 ** p] for d in (-1, 0, 1)}
                 | {100_000, 1 << 20, 2 ** 31})


def layout(number):
    return inductor.cuda_layout(number)


def powers_of_two(lo, hi):
    return [1 << p for p in range(lo.bit_length() - 1, hi.bit_length())]


# ---- the decisions, one function at a time -------------------------------------------------------

def fewest_threads(number):
    """A row's fewest threads: a warp where a block takes one row (block_reduce needs whole
    warps), else one (rows of a warp or fewer lanes share a block)."""
    return 1 if layout(number)["warp_rows"] > 1 else 32


@pytest.mark.parametrize("number", LAYOUTS)
def test_a_rows_threads_are_a_power_of_two_up_to_1024(number):
    for r in [-1] + LENGTHS:
        t = inductor.cuda_reduction_threads(r, number)
        assert t in powers_of_two(fewest_threads(number), 1024), f"layout {number}, a row of {r}: {t} threads"


@pytest.mark.parametrize("number", LAYOUTS)
def test_a_longer_row_never_gets_fewer_threads(number):
    threads = [inductor.cuda_reduction_threads(r, number) for r in LENGTHS]
    assert threads == sorted(threads), f"layout {number}: {list(zip(LENGTHS, threads))}"


@pytest.mark.parametrize("number", LAYOUTS)
def test_a_row_of_symbolic_length_is_looped_by_the_default_block(number):
    assert inductor.cuda_reduction_threads(-1, number) == layout(number)["block_threads"]


@pytest.mark.parametrize("number", LAYOUTS)
def test_rows_of_a_warp_or_fewer_lanes_share_a_block(number):
    warps = layout(number)["warp_rows"]
    assert warps == (1 if number == 1 else 8)
    for r in [-1] + LENGTHS:
        t = inductor.cuda_reduction_threads(r, number)
        rows = inductor.cuda_rows_per_block(r, number)
        want = warps * 32 // t if t <= 32 else 1
        assert rows == want, f"layout {number}, a row of {r} ({t} threads): {rows} rows a block, not {want}"
        assert (t * rows) % 32 == 0 and t * rows <= 1024


def fewest(r, per_thread, cap, low):
    """The contract's threads: the fewest, from `low`, giving each thread at most per_thread
    elements of the row, but never more than cap."""
    return next((t for t in powers_of_two(low, cap) if t * per_thread >= r), cap)


@pytest.mark.parametrize("number", [n for n in LAYOUTS if layout(n)["vector_loop_rows"]])
def test_a_looped_vector_row_gets_at_most_four_elements_a_thread_and_512_threads(number):
    for r in LENGTHS:
        t = inductor.cuda_reduction_threads(r, number)
        assert t == fewest(r, 4, 512, fewest_threads(number)), f"layout {number}, a row of {r}: {t} threads"


@pytest.mark.parametrize("number", [n for n in LAYOUTS if not layout(n)["vector_loop_rows"]])
def test_a_row_held_in_registers_gets_the_fewest_threads_that_hold_it(number):
    regs = layout(number)["row_registers"]
    for r in LENGTHS:
        t = inductor.cuda_reduction_threads(r, number)
        want = layout(number)["block_threads"] if regs == 0 else fewest(r, regs, 1024, fewest_threads(number))
        assert t == want, f"layout {number} ({regs} registers a thread), a row of {r}: {t} threads, not {want}"


@pytest.mark.parametrize("number", LAYOUTS)
def test_the_blocks_an_sm_must_hold_fit_its_registers_threads_and_block_slots(number):
    regs = layout(number)["row_max_registers"]
    for t in powers_of_two(32, 1024):
        m = inductor.cuda_min_blocks_per_sm(t, number)
        assert m >= 1
        fits = lambda b: b * t <= 2048 and b <= 32 and b * t * regs <= 65536  # noqa: E731
        assert m == 1 or fits(m), f"layout {number}, {t} threads: {m} blocks do not fit an SM"
        assert not fits(m + 1), f"layout {number}, {t} threads: {m + 1} blocks fit, it asked for {m}"


def test_a_split_row_gives_each_thread_16_elements_over_at_most_two_blocks_an_sm():
    for sms in (1, 8, 132):
        for threads in (32, 256, 512, 1024):
            for r in LENGTHS + [10 ** 9]:
                g = inductor.cuda_split_grid(r, threads, sms)
                assert 1 <= g <= 2 * sms, (r, threads, sms, g)
                assert g == 2 * sms or g * threads * 16 >= r, f"{r} elements, {g} blocks of {threads}: more than 16 a thread"
                assert g == 1 or (g - 1) * threads * 16 < r, f"{r} elements: {g} blocks where {g - 1} would do"


# ---- through the renderer (mini.inductor.render_graph_cuda: no toolkit, no GPU) -------------------

def graph_of(fn, *args, dynamic=None):
    graphs = []

    def backend(gm, example_inputs):
        graphs.append(gm)
        return gm.forward

    mini.reset()
    mini.compile(fn, backend=backend, fullgraph=True, dynamic=dynamic)(*args)
    assert len(graphs) == 1
    return graphs[0]


def softmax(x):
    m = x.amax(-1, keepdim=True)
    e = (x - m).exp()
    return e / e.sum(-1, keepdim=True)


def row_sum(x):
    return x.sum(-1)


def full_sum(x):
    return x.sum()


def sum_and_max(x):
    return x.sum(), x.amax()


def minus_sum(x):
    """A full-size value that needs the whole row's sum: never split (a block cannot store its
    share before every block's partial is in)."""
    return x - x.sum()


def doubled_and_sum(x):
    """A full-size value beside the sum, in the same pass: stored by the kernel, so not split."""
    return x * 2, x.sum()


def rendered(fn, shape, number, dynamic=None):
    return inductor.render_graph_cuda(graph_of(fn, mini.randn(*shape), dynamic=dynamic), layouts=number)


def reductions(info):
    return [k for k in info["kernels"] if k["shape"] != "poi"]


@pytest.mark.parametrize("number", [3, 6, 9])
@pytest.mark.parametrize("fn", [softmax, row_sum], ids=["softmax", "row_sum"])
def test_a_row_is_held_in_registers_only_where_its_block_holds_all_of_it(fn, number):
    regs = layout(number)["row_registers"]
    for r in (1, 33, 100, 512, 513, 4096, 16385, 40000):
        info = rendered(fn, (4, r), number)
        kernels = reductions(info)
        assert len(kernels) == 1, info["kernels"]
        k = kernels[0]
        held = regs > 0 and r <= k["block"] * regs
        assert k["shape"] == ("per" if held else "red"), f"layout {number}, rows of {r}: {k}"
        assert k["name"].startswith(f"cuda_{k['shape']}_"), k
        assert k["row_threads"] == inductor.cuda_reduction_threads(r, number)
        assert k["rows_per_block"] == inductor.cuda_rows_per_block(r, number)
        assert k["block"] == k["row_threads"] * k["rows_per_block"]
        assert k["split"] == 0, f"4 rows are a block per row, not split: {k}"


@pytest.mark.parametrize("number", [3, 9])
def test_a_row_of_symbolic_length_is_looped(number):
    gm = graph_of(row_sum, mini.randn(4, 300), dynamic=True)
    info = inductor.render_graph_cuda(gm, layouts=[number])
    (k,) = reductions(info)
    assert k["shape"] == "red" and k["block"] == layout(number)["block_threads"], k


@pytest.mark.parametrize("number", [3, 6, 9])
def test_each_kernel_is_compiled_for_the_block_it_is_launched_with(number):
    info = rendered(softmax, (8, 3000), number)
    for k in info["kernels"]:
        head = re.search(r"__launch_bounds__\((\d+)(?:, (\d+))?\) " + k["name"] + r"\(", info["source"])
        assert head, f"{k['name']} has no __launch_bounds__ in\n{info['source'][-2000:]}"
        assert int(head.group(1)) == k["block"], (k, head.group(0))
        if head.group(2):
            assert int(head.group(2)) == inductor.cuda_min_blocks_per_sm(k["block"], number), (k, head.group(0))


def kernel_source(info, name):
    start = info["source"].index(f" {name}(")
    end = info["source"].find("extern \"C\"", start)
    return info["source"][start:end if end > 0 else None]


@pytest.mark.parametrize("number", [3, 9])
def test_rows_in_a_warp_combine_with_shuffles_alone_and_a_block_per_row_through_shared_memory(number):
    for r in (1, 8, 100, 400, 5000):
        info = rendered(softmax, (64, r), number)
        (k,) = reductions(info)
        src = kernel_source(info, k["name"])
        t = k["row_threads"]
        if t == 1:  # a thread per row: nothing to combine across threads
            assert "warp_reduce<" not in src and "block_reduce<" not in src and "__shared__" not in src, src
            assert "const int lane = 0;" in src and "r_warp += row_step" in src
        elif t < 32:  # several rows a warp: shuffles within each row's lanes
            assert f"mini::warp_reduce<float, mini::max_of<float>, {t}>" in src and "block_reduce<" not in src, src
            assert f"const int lane = threadIdx.x & {t - 1};" in src and "r_warp += row_step" in src
            assert f"const int sub_row = (threadIdx.x & 31) / {t};" in src
        elif t == 32:  # a warp per row
            assert "mini::warp_reduce<float, mini::max_of<float>>" in src and "block_reduce<" not in src, src
            assert "__shared__" not in src and "const int lane = threadIdx.x & 31;" in src and "r += row_step" in src
        else:  # a block per row
            assert "mini::block_reduce<" in src and "warp_reduce<" not in src, src
            assert "r += gridDim.x" in src
    shapes = {reductions(rendered(softmax, (64, r), number))[0]["row_threads"] for r in (1, 8, 100, 400, 5000)}
    assert min(shapes) < 32 and 32 in shapes and max(shapes) > 32, f"layout {number}: {shapes} do not cover the three"


@pytest.mark.parametrize("number", [2, 3, 9])
def test_one_long_row_is_split_over_blocks_and_many_rows_are_not(number):
    (k,) = reductions(rendered(full_sum, (1 << 16,), number))
    assert k["split"] == 1, f"a full sum of 65536 elements: {k}"
    ks = reductions(rendered(sum_and_max, (5000,), number))
    assert sum(k["split"] for k in ks) == 2, f"a full sum and max: {ks}"
    (k,) = reductions(rendered(row_sum, (64, 1000), number))
    assert k["split"] == 0, f"64 rows: a block per row, {k}"
    # a row whose pass needs a reduction's result (a softmax): two passes, not split
    assert all(k["split"] == 0 for k in reductions(rendered(softmax, (1, 1 << 14), number)))
    # a kernel that stores a full-size value (is_full) is never split, one pass or two
    for fn in (minus_sum, doubled_and_sum):
        ks = reductions(rendered(fn, (1 << 16,), number))
        assert ks and all(k["split"] == 0 for k in ks), f"{fn.__name__} over 65536 elements: {ks}"


def test_the_naive_layout_never_splits():
    (k,) = reductions(rendered(full_sum, (1 << 16,), 1))
    assert k["split"] == 0, k


# ---- compiled by NVRTC where it is there, run on the GPU where there is one ----------------------

SWEEP = [(row_sum, (64, r)) for r in (1, 31, 32, 33, 129, 1000, 4097, 40000)] + \
        [(row_sum, (61, 7)), (softmax, (100_003, 3)), (row_sum, (3, 64)), (softmax, (1001, 8)), (softmax, (77, 1)),
         (softmax, (300, 16)), (row_sum, (1000, 2))] + \
        [(softmax, (16, r)) for r in (1, 100, 513, 5000)] + \
        [(full_sum, (n,)) for n in (1, 4097, 1 << 20)] + [(sum_and_max, (100_003,))] + \
        [(minus_sum, (1 << 16,)), (doubled_and_sum, (1 << 16,))]


@pytest.mark.skipif(inductor.nvrtc_version() is None, reason="this build has no CUDA toolkit (NVRTC)")
@pytest.mark.parametrize("number", [3, 9])
def test_every_layout_decision_compiles_with_nvrtc(number):
    for fn, shape in SWEEP:
        info = inductor.compile_graph_cuda(graph_of(fn, mini.randn(*shape)), arch="sm_90", layouts=number)
        assert info["cubin_bytes"] > 0, (fn.__name__, shape)


@pytest.mark.cuda
@pytest.mark.skipif(not HAS_CUDA, reason=CUDA_SKIP_REASON)
@pytest.mark.parametrize("number", [3, 6, 9])
def test_every_layout_decision_runs_as_eager(number):
    rng = np.random.default_rng(0)
    for fn, shape in SWEEP:
        x = mini.tensor(rng.standard_normal(shape, dtype=np.float32))
        gm = graph_of(fn, x)
        got = inductor.compile_graph_cuda(gm, layouts=number)["run"](cuda_like(x))
        want = gm.forward(x)
        want = want if isinstance(want, (tuple, list)) else (want,)
        for g, w in zip(got, want):
            w = to_np(w)
            scale = max(1.0, float(np.abs(w).max()))
            np.testing.assert_allclose(to_np(g.cpu()), w, rtol=1e-4, atol=1e-4 * scale,
                                       err_msg=f"layout {number}, {fn.__name__} of {shape}")


def test_the_rows_a_block_shares_out_cover_every_row_once_in_bounds():
    # The row mapping the renderer writes, read from its source and run for every thread of a
    # launch: each row is reduced by one whole group of lanes (0 .. lanes-1), once; a lane past
    # the last row takes the last row again (so its warp's shuffles have every lane), never a row
    # out of bounds. Any grid, from one block to more than the rows need.
    for rows, r, number in [(61, 1, 9), (61, 8, 9), (1001, 8, 9), (77, 100, 9), (300, 16, 3), (5, 64, 9), (2, 1, 3)]:
        info = rendered(row_sum, (rows, r), number)
        (k,) = reductions(info)
        src = kernel_source(info, k["name"])
        t, w = k["row_threads"], k["rows_per_block"]
        assert t <= 32 and w == 256 // t, k
        m = re.search(r"first_row = int64_t\(blockIdx\.x\) \* (\d+) \+ \(threadIdx\.x >> 5\) \* (\d+), "
                      r"row_step = int64_t\(gridDim\.x\) \* (\d+);", src)
        assert m, src
        per_block, per_warp, step_rows = map(int, m.groups())
        assert per_block == step_rows == w and per_warp == 32 // t
        lane_of = (lambda x: 0) if t == 1 else (lambda x: x & (t - 1))
        assert ("const int lane = 0;" if t == 1 else f"const int lane = threadIdx.x & {t - 1};") in src
        if per_warp > 1:
            assert f"const int sub_row = (threadIdx.x & 31) / {t};" in src
            assert "r_warp + sub_row < rows ? r_warp + sub_row : rows - 1" in src
        for grid in sorted({1, 2, 7, -(-rows // w), -(-rows // w) + 3}):
            seen = {}
            for b in range(grid):
                for x in range(k["block"]):
                    start = b * per_block + (x >> 5) * per_warp
                    sub = (x & 31) // t
                    r_warp = start
                    while r_warp < rows:
                        row = r_warp + sub if r_warp + sub < rows else rows - 1
                        assert 0 <= row < rows
                        seen.setdefault(row, []).append(lane_of(x))
                        r_warp += grid * step_rows
            assert sorted(seen) == list(range(rows)), f"{rows} rows of {r}, grid {grid}: rows missed"
            for row, lanes in seen.items():
                if row < rows - 1:
                    assert sorted(lanes) == list(range(t)), f"row {row} of {rows} ({t} lanes), grid {grid}: {sorted(lanes)}"
                else:
                    assert len(lanes) % t == 0 and set(lanes) == set(range(t)), (row, lanes)
