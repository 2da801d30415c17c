"""The threads of the CPU's parallel work (torch.set_num_threads, torch.get_num_threads): mini's
kernels, the generated kernels and OpenBLAS's matmuls share one OpenMP pool. Importing this
module caps an OMP_NUM_THREADS larger than the machine runs (see _max_threads)."""
import builtins
import os
import warnings

from . import _C


def set_num_threads(n):
    """The threads the CPU's parallel work uses, as torch.set_num_threads: mini's kernels, the
    generated kernels and the matmuls (OpenBLAS on OpenMP) share one pool (OMP_NUM_THREADS
    sets the starting value). At most 4 a core, and at least 64 are allowed: more only share the
    same cores, and libgomp failing to create tens of thousands of threads ends the process (or
    crashes it) at the next parallel op, where torch accepts any positive number."""
    if isinstance(n, builtins.bool) or not isinstance(n, builtins.int) or n < 1:
        raise ValueError(f"set_num_threads expects a positive int, got {n!r}")
    if n > _max_threads():
        raise ValueError(f"set_num_threads takes at most {_max_threads_said()} on this machine, got {n}")
    _C.set_num_threads(n)


def _max_threads():
    """The most threads mini runs its parallel work on (set_num_threads' limit)."""
    return max(64, 4 * (os.cpu_count() or 1))


def _max_threads_said():
    return f"{_max_threads()} threads (4 for each of its {os.cpu_count()} cores, at least 64)"


if _C.get_num_threads() > _max_threads():  # OMP_NUM_THREADS=100000: the same crash, at the first parallel op
    warnings.warn(f"OMP_NUM_THREADS={os.environ.get('OMP_NUM_THREADS')} asks for more threads than mini runs on "
                  f"this machine; it uses {_max_threads_said()}")
    _C.set_num_threads(_max_threads())


def get_num_threads():
    """The threads the CPU's next parallel kernel will use (torch.get_num_threads)."""
    return _C.get_num_threads()
