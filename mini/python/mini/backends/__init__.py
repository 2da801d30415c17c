"""mini.backends: torch.backends' switches that mini has: cuda.matmul.allow_tf32."""
from . import cuda  # noqa: F401
