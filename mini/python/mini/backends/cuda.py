"""mini.backends.cuda.matmul.allow_tf32: float32 matmuls on CUDA may use TF32 tensor cores
(10-bit mantissa products) when True. False by default, as torch's default since 1.12."""
from .. import _C


class _Matmul:
    @property
    def allow_tf32(self):
        return _C._cuda.allow_tf32()

    @allow_tf32.setter
    def allow_tf32(self, on):
        _C._cuda.set_allow_tf32(bool(on))


matmul = _Matmul()
