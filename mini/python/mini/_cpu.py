"""The CPU's vector extensions, and the OpenBLAS kernels mini's extern matmuls should run.

OpenBLAS built with DYNAMIC_ARCH (Debian's) picks its kernels from the CPU's family and model
when it loads. A CPU newer than the library, or one a hypervisor names "Intel(R) Xeon(R)
Processor", can fall through to the oldest x86-64 kernels, Prescott's (SSE3): on the GPU host's
16-core CPU (AVX-512) OpenBLAS 0.3.21 did, and every matmul of a training step ran at a
fifth of numpy's speed, 160 GFLOP/s against 810 (labs/bench/cpu_blas_probe.py, notes/perf.md).
OpenBLAS reads OPENBLAS_CORETYPE when it loads, so `import mini` names the kernels from the
extensions the kernel reports in /proc/cpuinfo (which lists only those the OS enabled) before
it loads _C. A value the user set wins; a CPU this does not recognise keeps OpenBLAS's choice,
and so does MINI_BLAS_CORE=openblas (to measure that choice).
"""

import ctypes
import os

# OpenBLAS core names, best first, with the /proc/cpuinfo flags each one's kernels need.
OPENBLAS_CORES = (
    ("SkylakeX", ("avx512f", "avx512cd", "avx512bw", "avx512dq", "avx512vl", "fma")),
    ("Haswell", ("avx2", "fma")),
)


def cpu_flags(cpuinfo="/proc/cpuinfo"):
    """The x86 flags of the first processor in `cpuinfo` (a path), or an empty set."""
    try:
        with open(cpuinfo) as f:
            for line in f:
                if line.startswith("flags"):
                    return set(line.split(":", 1)[1].split())
    except OSError:
        pass
    return set()


def openblas_core_for(flags):
    """The best OpenBLAS core whose kernels `flags` can run, or None (OpenBLAS decides)."""
    for core, needs in OPENBLAS_CORES:
        if all(f in flags for f in needs):
            return core
    return None


def choose_openblas_core(environ=os.environ, cpuinfo="/proc/cpuinfo"):
    """Sets environ["OPENBLAS_CORETYPE"] from the CPU's flags unless it is set already. Returns
    the core set, or None when nothing was set."""
    if "OPENBLAS_CORETYPE" in environ or environ.get("MINI_BLAS_CORE") == "openblas":
        return None
    core = openblas_core_for(cpu_flags(cpuinfo))
    if core:
        environ["OPENBLAS_CORETYPE"] = core
    return core


def openblas():
    """What the loaded OpenBLAS says of itself: {"path", "config", "core", "threads"}, or None
    when this process has not mapped an OpenBLAS (mini links another BLAS)."""
    try:
        with open("/proc/self/maps") as maps:
            paths = sorted({line.split()[-1] for line in maps
                            if "openblas" in line and line.split()[-1].startswith("/")})
    except OSError:
        return None
    for path in paths:
        try:
            lib = ctypes.CDLL(path)
            lib.openblas_get_config.restype = ctypes.c_char_p
            lib.openblas_get_corename.restype = ctypes.c_char_p
            return {"path": path, "config": lib.openblas_get_config().decode(),
                    "core": lib.openblas_get_corename().decode(),
                    "threads": lib.openblas_get_num_threads()}
        except (OSError, AttributeError):
            continue
    return None
