"""mini.cuda: torch.cuda's names over mini's CUDA runtime (mini/tensor/cuda/cuda.h).

One device (cuda:0) and one stream (the default stream) — notes/cuda.md says why. Without a GPU
or without a CUDA build, is_available() is False and device_count() is 0; everything that
needs a GPU raises a RuntimeError naming the reason and the fix."""
from . import _C

_cuda = _C._cuda
OutOfMemoryError = _C.OutOfMemoryError


def is_available():
    return _cuda.is_available()


def device_count():
    return _cuda.device_count()


def current_device():
    _cuda.require("mini.cuda.current_device()")
    return 0


def get_device_name(device=None):
    _cuda.require("mini.cuda.get_device_name()")
    return _cuda.get_device_name(0 if device is None else _index(device))


def synchronize(device=None):
    """Waits for every kernel launched so far; an error a kernel hit while running is raised
    here, naming the op that launched last (CUDA reports such errors asynchronously)."""
    _cuda.synchronize()


def manual_seed(seed):
    """Seeds the generators (mini keeps one seed for the CPU and the CUDA generator)."""
    _C.manual_seed(int(seed) & 0xFFFFFFFFFFFFFFFF)


manual_seed_all = manual_seed


# ---- memory: the caching allocator's counters ---------------------------------------------------
def memory_stats(device=None):
    return dict(_cuda.memory_stats())


def memory_allocated(device=None):
    """Bytes of device memory held by tensors now (block sizes, as torch counts them)."""
    return _cuda.memory_stats()["allocated_bytes.all.current"]


def max_memory_allocated(device=None):
    return _cuda.memory_stats()["allocated_bytes.all.peak"]


def memory_reserved(device=None):
    """Bytes obtained from cudaMalloc: in use plus cached for reuse."""
    return _cuda.memory_stats()["reserved_bytes.all.current"]


def max_memory_reserved(device=None):
    return _cuda.memory_stats()["reserved_bytes.all.peak"]


def reset_peak_memory_stats(device=None):
    _cuda.reset_peak_memory_stats()


def empty_cache():
    """Returns the cached, unused blocks to the driver (memory_reserved() drops; tensors keep theirs)."""
    _cuda.empty_cache()


def _index(device):
    if isinstance(device, int):
        return device
    text = str(device)
    return int(text.split(":")[1]) if ":" in text else 0


# ---- events -----------------------------------------------------------------------------------------
class Event:
    """torch.cuda.Event: a marker in the default stream. With enable_timing=True two recorded
    events give the GPU time between them: start.elapsed_time(end), in milliseconds."""

    def __init__(self, enable_timing=False, blocking=False, interprocess=False):
        self._timing = enable_timing
        self._handle = _cuda.event_create(bool(enable_timing))

    def record(self, stream=None):
        _cuda.event_record(self._handle)

    def synchronize(self):
        _cuda.event_synchronize(self._handle)

    def query(self):
        return _cuda.event_query(self._handle)

    def elapsed_time(self, end_event):
        return _cuda.event_elapsed_ms(self._handle, end_event._handle)

    def __del__(self):
        handle = getattr(self, "_handle", None)
        if handle:
            _cuda.event_destroy(handle)
            self._handle = None

    def __repr__(self):
        return f"<mini.cuda.Event enable_timing={self._timing}>"
