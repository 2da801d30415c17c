"""mini.metrics: the counters of what mini's kernels did (launches, bytes moved, generated
kernels, matmuls by dtype) and the CPU tensors' memory, read from C++ (mini._C). Tests and
labs read them to count kernels; torch has no such object (its profiler counts these)."""
from . import _C


class _Metrics:
    """Counters of the kernels mini ran: kernel_launches, bytes_moved (bytes read and
    written by those kernels), generated_kernel_count (kernels emitted by codegen) and matmuls
    (matrix products by dtype); and the
    CPU tensors' memory: memory_allocated (bytes of storage alive now) and
    max_memory_allocated (the most alive at once since reset_peak_memory(); CUDA tensors:
    mini.cuda.max_memory_allocated)."""

    @property
    def memory_allocated(self):
        return _C.cpu_memory()[0]

    @property
    def max_memory_allocated(self):
        return _C.cpu_memory()[1]

    def reset_peak_memory(self):
        _C.reset_cpu_memory_peak()

    @property
    def kernel_launches(self):
        return _C.metrics_get()[0]

    @property
    def bytes_moved(self):
        return _C.metrics_get()[1]

    @property
    def generated_kernel_count(self):
        return _C.metrics_get()[2]

    @property
    def matmuls(self):
        """{dtype name: matrix products run with operands of that dtype} since the last reset()
        (eager matmuls and compiled graphs' alike): under autocast every one is "bfloat16"."""
        return dict(_C.metrics_matmuls())

    def reset(self):
        _C.metrics_reset()

    def snapshot(self):
        k, b, g = _C.metrics_get()
        return dict(kernel_launches=k, bytes_moved=b, generated_kernel_count=g)

    def __repr__(self):
        return "mini.metrics(" + ", ".join(f"{k}={v}" for k, v in self.snapshot().items()) + ")"


metrics = _Metrics()
