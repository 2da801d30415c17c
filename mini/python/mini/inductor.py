"""mini.inductor: the code generator's pieces, callable directly (tests, labs, a course's
exercises). CUDA programs compile with NVRTC to a CUBIN for one architecture, through the
same checked disk cache as the C++ kernels (mini.config.cache_dir); compiling needs no GPU,
loading and launching do.

    prog = mini.inductor.compile_cuda(source)          # sm_90 without a GPU, else the GPU's
    prog.launch("scale", grid=(n // 256, 1, 1), block=(256, 1, 1), args=[x, y, 2.0, n])

A captured graph (a GraphModule a backend receives) compiles for CUDA the same way:

    info = mini.inductor.compile_graph_cuda(gm)         # info["source"]: the generated .cu
    outputs = info["run"](*cuda_inputs)                  # needs a GPU

MINI_CODEGEN_LAYOUT=N (1..cuda_layouts()) renders a numbered kernel layout instead of the
default; autotune_graph_cuda(gm) times them all on the first call (mode="max-autotune").
"""
from dataclasses import dataclass, field

from . import _C

__all__ = ["CudaProgram", "compile_cuda", "compile_graph_cuda", "render_graph_cuda", "autotune_graph_cuda",
           "nvrtc_version", "default_cuda_arch", "cuda_layouts", "default_cuda_layout",
           "cuda_layout", "cuda_reduction_threads", "cuda_rows_per_block", "cuda_min_blocks_per_sm",
           "cuda_split_grid"]


def nvrtc_version():
    """NVRTC's version ("13.0"), or None where this build has no CUDA toolkit."""
    return _C._nvrtc_version()


def default_cuda_arch():
    """The architecture compile_cuda targets by default: the GPU's ("sm_90"), else sm_90."""
    return _C._default_cuda_arch()


@dataclass
class CudaProgram:
    arch: str                 # "sm_90"
    key: str                  # the cache key: source, NVRTC options, arch, NVRTC version
    path: str                 # the cache entry (<key>.cubin; the source beside it, <key>.cu)
    cubin: bytes              # an ELF of SASS for `arch`
    log: str                  # NVRTC's warnings ("" when read from the cache)
    from_disk_cache: bool
    rejected: str             # why the cache's entry was compiled again ("" if none was)
    compile_seconds: float    # NVRTC, or reading and checking the entry
    _launch: object = field(repr=False, default=None)

    def launch(self, kernel, grid, block, args, shared_bytes=0):
        """Launches extern "C" __global__ `kernel` on the default stream. `args` in the kernel's
        order: CUDA tensors (their data pointers), floats (float) and ints (int64_t)."""
        self._launch(kernel, list(grid), list(block), list(args), shared_bytes)


def compile_cuda(source, arch=None):
    """Compiles CUDA C++ `source` (extern "C" __global__ kernels) to a CUBIN for `arch`
    (default_cuda_arch() if None), or reads it from the disk cache. A source NVRTC rejects
    raises mini.Error (a RuntimeError) holding NVRTC's log; a build without the CUDA toolkit
    raises saying so."""
    if not isinstance(source, str):
        raise TypeError(f"compile_cuda() takes the CUDA source as a str, got {type(source).__name__}")
    info = _C._compile_cuda(source, arch or "")
    launch = info.pop("launch")
    return CudaProgram(**info, _launch=launch)


def _layouts(layouts):
    """(per-kernel list, one layout for all or 0) from `layouts`: None, a layout number, or a list."""
    if isinstance(layouts, int):
        return [], layouts
    return list(layouts or []), 0


def compile_graph_cuda(gm, arch=None, layouts=None):
    """Fuses a captured graph, renders its kernels for CUDA (mini/codegen/cuda_kernel.cpp) and
    compiles them with NVRTC for `arch` (default_cuda_arch() if None); `layouts`, where given,
    a layout number for every kernel or a list of one per kernel (else MINI_CODEGEN_LAYOUT's,
    or the default, for all). Returns a
    dict: source, kernels (cuda_poi_..., cuda_red_..., cuda_per_...), decisions, arch,
    cubin_bytes, from_disk_cache (no NVRTC run: every body from memory or the disk cache),
    nvrtc_seconds, codegen_seconds, layouts, programs (per kernel: the function it runs, its
    program's key, the CUBIN; kernels of one body share them), distinct_programs, nvrtc_runs,
    and run(*inputs) taking CUDA tensors."""
    return _C._inductor_compile_cuda(gm, arch or "", *_layouts(layouts))


def render_graph_cuda(gm, layouts=None):
    """Fuses a captured graph and renders its kernels for CUDA without compiling them (no CUDA
    toolkit or GPU needed); `layouts` as compile_graph_cuda's. Returns a dict: source,
    decisions, and kernels, one dict each:
    name, shape ("poi", "per": each row held in registers, "red": each row looped over), block
    (threads), row_threads and rows_per_block (a reduction's: block = row_threads x
    rows_per_block; 0 for a pointwise kernel), split (reductions of one row split over blocks),
    column_split (a "col" kernel's reductions whose reduced elements are shared among blocks in
    y; 0 where not), column_vector (the kept elements each thread of a "col" kernel takes: 1, or
    a 16-byte Vec of them) and layout."""
    return _C._inductor_render_cuda(gm, *_layouts(layouts))


def cuda_column_split_grid(cols, rnumel, resident, vector=1):
    """The blocks in y that share the `rnumel` reduced elements of a column kernel of `cols` kept
    elements, `vector` a thread, on a GPU that holds `resident` blocks of the kernel at once (its
    SMs times the blocks an SM holds; 1: not shared)."""
    return _C._cuda_column_split_grid(int(cols), int(rnumel), int(resident), int(vector))


def cuda_column_max_splits():
    """The most blocks in y a column kernel's reduced elements are shared among."""
    return _C._cuda_column_max_splits()


def cuda_reduction_threads(rnumel, layout=None):
    """The threads that reduce one row of `rnumel` elements (-1: a symbolic length) under kernel
    layout `layout` (default_cuda_layout() if None): a power of two up to 1024, from 1 where
    rows share a block (from 32 in layout 1). Assignment A10's first decision
    (mini/codegen/cuda_launch.cpp)."""
    return _C._cuda_reduction_threads(int(rnumel), int(layout or _C._cuda_default_layout()))


def cuda_rows_per_block(rnumel, layout=None):
    """The rows one block reduces at once, rows of `rnumel` elements (-1: symbolic), under
    `layout`: where a row takes a warp or fewer lanes, the rows of layout's warp_rows warps
    (a warp, some lanes or a thread a row), else 1 (a block per row)."""
    return _C._cuda_rows_per_block(int(rnumel), int(layout or _C._cuda_default_layout()))


def cuda_min_blocks_per_sm(threads, layout=None):
    """Blocks of `threads` threads that must fit on one SM at once under `layout` (the second
    number of a lean row's __launch_bounds__)."""
    return _C._cuda_min_blocks_per_sm(int(threads), int(layout or _C._cuda_default_layout()))


def cuda_layout(number=None):
    """Kernel layout `number`'s settings (default_cuda_layout()'s if None), as
    mini/codegen/cuda_launch.h's CudaLayout names them, and block_threads: a pointwise
    kernel's block, and a looped row's of symbolic length."""
    return _C._cuda_layout(int(number or _C._cuda_default_layout()))


def cuda_split_grid(rnumel, threads, sms):
    """The blocks one row of `rnumel` elements is split among (a full reduction in two
    stages), in blocks of `threads`, on a GPU of `sms` multiprocessors."""
    return _C._cuda_split_grid(int(rnumel), int(threads), int(sms))


def autotune_graph_cuda(gm):
    """mode="max-autotune" on a captured graph: compiled in every kernel layout
    (cuda_layouts()), each kernel timed in each at the first run(*cuda_inputs), every kernel's
    fastest layout kept (the graph compiled once more where its kernels chose differently) and
    the numbers written beside the CUBINs for later processes. Returns a dict: run, layouts()
    (the layout chosen, a kernel's each), times_ms() (per layout, its kernels' times added),
    kernel_times_ms() (per layout, per kernel; both empty when the choice was read from the
    cache), path."""
    return _C._inductor_autotune_cuda(gm)


def cuda_layouts():
    """How many numbered CUDA kernel layouts there are (MINI_CODEGEN_LAYOUT=1..N;
    mini/codegen/cuda_launch.h describes each)."""
    return _C._cuda_layouts()


def default_cuda_layout():
    """The layout rendered when MINI_CODEGEN_LAYOUT is unset (the fastest measured on the H200)."""
    return _C._cuda_default_layout()
