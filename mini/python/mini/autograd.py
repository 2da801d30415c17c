"""mini.autograd: what torch.autograd has beyond Tensor.backward that mini's engine offers too.

Variable._execution_engine.queue_callback(fn) queues fn to run once the backward now running has
accumulated every leaf's gradient, before backward() returns (torch's name; DDP finishes its
gradient reduction this way). Outside a backward it raises RuntimeError. The per-leaf hook is a
Tensor method: t.register_post_accumulate_grad_hook(hook)."""
from . import _C


class _ExecutionEngine:
    @staticmethod
    def queue_callback(callback):
        """Run `callback()` at the end of the backward now running."""
        _C._queue_callback(callback)


class Variable:
    """torch.autograd.Variable, as far as code reaches the engine through it."""

    _execution_engine = _ExecutionEngine()
