"""mini.nn.parallel.DistributedDataParallel (torch/nn/parallel/distributed.py): every rank holds a
replica of the model and trains on its own part of the batch; DDP makes their gradients the
average over the ranks before the optimizer step, so the replicas stay equal.

    ddp = DistributedDataParallel(model)        # rank 0's parameters broadcast to every rank
    loss_fn(ddp(x), y).backward()               # gradients all-reduced, in buckets, during backward
    optimizer.step()

How (notes/distributed.md):
- construction: the ranks compare a signature of their parameters (count, elements, shapes and
  dtypes) in one all-gather, so that different models are a clear error instead of a collective
  that hangs; then rank 0's parameters and buffers are broadcast;
- the parameters go into buckets of bucket_cap_mb (25 MB), in reverse registration order, the
  order the backward produces their gradients; the bucket filled first holds 1 MB, to start
  communicating early (torch's _DEFAULT_FIRST_BUCKET_BYTES);
- each parameter has a post-accumulate-grad hook (mini's autograd engine runs it as soon as the
  parameter's .grad is final); when a bucket's last gradient is in, the bucket is flattened,
  divided by the world size and all-reduced asynchronously. Buckets are launched in order (every
  rank must call collectives in one order), each as soon as it and those before it are full;
- a callback queued on the engine at the first hook runs once the backward has accumulated
  every gradient: it waits for each bucket's all-reduce and copies the averages back to .grad.

The hooks fire where the engine accumulates a leaf's gradient, whether it came from eager ops or
from a compiled graph's backward. A compiled graph's backward is one autograd node, so all its
gradients come out together at its end; mini.compile of a DDP module therefore cuts the graph at
these buckets (capture/ddp_optimizer.h, mini.config.optimize_ddp), torch's DDPOptimizer.
"""
import contextlib
import time
import zlib

import mini

from .. import modules

_DEFAULT_FIRST_BUCKET_BYTES = 1024 * 1024  # torch.distributed._DEFAULT_FIRST_BUCKET_BYTES


def _dist():
    from ... import distributed  # imported when a DDP module is made: mini.nn imports before it
    return distributed


def _bucket_assignment(params, bucket_bytes, first_bucket_bytes):
    """Lists of parameter indices, one per bucket, in the order their all-reduces start: parameters
    in reverse registration order, one open bucket per dtype (a bucket is one flat tensor), a bucket
    closed once it holds its cap (torch's compute_bucket_assignment_by_size). The first bucket's cap
    is first_bucket_bytes, or bucket_bytes where that is smaller (mini's: torch keeps 1 MB)."""
    first_bucket_bytes = min(first_bucket_bytes, bucket_bytes)
    buckets, open_buckets = [], {}
    for index in reversed(range(len(params))):
        p = params[index]
        bucket = open_buckets.setdefault(p.dtype, [[], 0])
        bucket[0].append(index)
        bucket[1] += p.numel() * p.element_size()
        if bucket[1] >= (first_bucket_bytes if not buckets else bucket_bytes):
            buckets.append(bucket[0])
            del open_buckets[p.dtype]
    buckets.extend(indices for indices, _ in open_buckets.values())
    return buckets


class _Event:
    """One moment of a step, for labs/ddp_overlap.py and the tests: `kind` is "ready" (a parameter's
    gradient is final), "launch" (a bucket's all-reduce started), "wait" (the end of backward waited
    `seconds` for a bucket), "done" (the gradients are written back); `compute_kernels` counts the
    kernels mini ran so far outside DDP's own (mini.metrics.kernel_launches), which says whether
    backward compute still went on after a launch."""
    __slots__ = ("time", "compute_kernels", "kind", "bucket", "seconds")

    def __init__(self, time_, compute_kernels, kind, bucket, seconds=0.0):
        self.time, self.compute_kernels, self.kind, self.bucket, self.seconds = \
            time_, compute_kernels, kind, bucket, seconds

    def __repr__(self):
        return f"{self.kind}({self.bucket})@{self.compute_kernels}"


class _Reducer:
    """The buckets of one DDP module and their all-reduces (torch's C++ Reducer)."""

    def __init__(self, ddp, params, names, buckets):
        self.ddp, self.params, self.names, self.buckets = ddp, params, names, buckets
        self.bucket_of = {index: b for b, indices in enumerate(buckets) for index in indices}
        self.own_kernels = 0  # kernels DDP ran itself (flatten, divide, copy back)
        self.launch_observers = []  # called with (bucket, work) at each launch (the lab times them)
        # one flat buffer per bucket, made once (as torch's Reducer): a step copies the gradients
        # in, all-reduces it in place and copies the averages back, without allocating
        self.flat = [mini.zeros(sum(params[i].numel() for i in indices), dtype=params[indices[0]].dtype,
                                device=params[indices[0]].device) for indices in buckets]
        self.prepare_for_backward(expecting=False)
        for index, p in enumerate(params):
            p.register_post_accumulate_grad_hook(lambda param, index=index: self._grad_ready(index))

    def prepare_for_backward(self, expecting=True):
        """Called by each forward that will be synchronized: a fresh step, whose backward the hooks
        then reduce (`expecting`)."""
        self.ready = [0] * len(self.buckets)
        self.seen = set()  # the parameters whose gradient is in
        self.works = [None] * len(self.buckets)
        self.next_bucket = 0
        self.callback_queued = False
        self.timeline = []
        self.expecting = expecting

    def _record(self, kind, bucket, seconds=0.0):
        compute = mini.metrics.kernel_launches - self.own_kernels
        self.timeline.append(_Event(time.perf_counter(), compute, kind, bucket, seconds))

    def _grad_ready(self, index):
        if not (self.expecting and self.ddp.require_backward_grad_sync):
            return  # no_sync(), or a backward not through this DDP's forward: gradients stay local
        if not self.callback_queued:
            # The end of the step waits in an engine callback, not in the last bucket's hook: the
            # last hook is not the end of the backward (nodes that make no parameter's gradient
            # may follow), a hook that waits would stall the engine there, and the callback runs
            # even where a bucket never fills, so that it can say which parameters got nothing.
            mini.autograd.Variable._execution_engine.queue_callback(self._finish_backward)
            self.callback_queued = True
        bucket = self.bucket_of[index]
        self.seen.add(index)
        self.ready[bucket] += 1
        self._record("ready", bucket)
        while self.next_bucket < len(self.buckets) and \
                self.ready[self.next_bucket] == len(self.buckets[self.next_bucket]):
            self._launch(self.next_bucket)
            self.next_bucket += 1

    def _bucket_views(self, bucket):
        """(parameter, its part of the bucket's flat buffer, shaped as the parameter)."""
        offset = 0
        for i in self.buckets[bucket]:
            p = self.params[i]
            yield p, self.flat[bucket][offset:offset + p.numel()].view(p.shape)
            offset += p.numel()

    def _launch(self, bucket):
        kernels = mini.metrics.kernel_launches
        with mini.no_grad():
            for p, part in self._bucket_views(bucket):
                part.copy_(p.grad)
            self.flat[bucket].mul_(1.0 / _dist().get_world_size())  # the ranks' shares sum to their average
        self.own_kernels += mini.metrics.kernel_launches - kernels
        self._record("launch", bucket)
        self.works[bucket] = _dist().all_reduce(self.flat[bucket], async_op=True)
        for observe in self.launch_observers:
            observe(bucket, self.works[bucket])

    def _finish_backward(self):
        """Queued on the engine: every gradient is accumulated; wait for each bucket, write back."""
        self.expecting = False
        for bucket, work in enumerate(self.works):
            if work is None:
                continue
            start = time.perf_counter()
            work.wait()
            self._record("wait", bucket, time.perf_counter() - start)
        if any(work is None for work in self.works):
            missing = [name for i, name in enumerate(self.names) if i not in self.seen]
            raise RuntimeError(
                "DistributedDataParallel: these parameters got no gradient in this backward, so their "
                f"bucket's all-reduce never started: {', '.join(missing)}. "
                "Every parameter must take part in the loss on every rank (torch's "
                "find_unused_parameters=True is not supported by mini); freeze the unused ones "
                "(requires_grad_(False)) before wrapping the model.")
        kernels = mini.metrics.kernel_launches
        with mini.no_grad():
            for bucket in range(len(self.buckets)):
                for p, part in self._bucket_views(bucket):
                    p.grad.copy_(part)
        self.own_kernels += mini.metrics.kernel_launches - kernels
        self._record("done", -1)


def _verify_same_parameters(params, names, device):
    """torch's _verify_param_shape_across_processes: one all-gather of (count, elements, a checksum
    of the shapes and dtypes) per rank; where they differ, every rank raises the same error."""
    dist = _dist()
    described = ";".join(f"{tuple(p.shape)}:{p.dtype}" for p in params)
    mine = mini.tensor([len(params), sum(p.numel() for p in params), zlib.crc32(described.encode())],
                       dtype=mini.int64, device=device)
    world = dist.get_world_size()
    every = mini.zeros(world * 3, dtype=mini.int64, device=device)
    dist.all_gather_into_tensor(every, mine)
    rows = [tuple(row) for row in every.view(world, 3).tolist()]
    if all(row == rows[0] for row in rows):
        return
    per_rank = "; ".join(f"rank {r}: {count} parameters, {elements} elements"
                         + ("" if checksum == rows[0][2] else " (shapes or dtypes differ from rank 0's)")
                         for r, (count, elements, checksum) in enumerate(rows))
    listed = [f"{n} {tuple(p.shape)} {p.dtype}" for n, p in zip(names, params)]
    if len(listed) > 8:
        listed = listed[:8] + [f"... ({len(listed) - 8} more)"]
    raise RuntimeError(
        f"DistributedDataParallel: the ranks' modules do not have the same parameters ({per_rank}). "
        "Every rank must wrap the same model, built the same way (DDP then broadcasts rank 0's "
        f"values). This rank ({dist.get_rank()}) has: " + ", ".join(listed))


class DistributedDataParallel(modules.Module):
    """torch.nn.parallel.DistributedDataParallel over mini.distributed's default process group."""

    def __init__(self, module, device_ids=None, output_device=None, dim=0, broadcast_buffers=True,
                 process_group=None, bucket_cap_mb=None, find_unused_parameters=False,
                 gradient_as_bucket_view=False, static_graph=False):
        super().__init__()
        dist = _dist()
        if not dist.is_initialized():
            raise RuntimeError("DistributedDataParallel needs a process group: call "
                               "mini.distributed.init_process_group(backend=...) first")
        if process_group is not None or find_unused_parameters:
            raise NotImplementedError("mini's DistributedDataParallel uses the default process group and "
                                      "needs every parameter in the loss (process_group and "
                                      "find_unused_parameters=True are not supported)")
        self.module = module
        self.broadcast_buffers = broadcast_buffers
        self.bucket_bytes_cap = int((25 if bucket_cap_mb is None else bucket_cap_mb) * 1024 * 1024)
        self.require_backward_grad_sync = True
        named = [(n, p) for n, p in module.named_parameters() if p.requires_grad]
        names, params = [n for n, _ in named], [p for _, p in named]
        device = params[0].device if params else "cpu"
        _verify_same_parameters(params, names, device)
        self._module_buffers = list(module.buffers())
        self._sync_module_states()
        buckets = _bucket_assignment(params, self.bucket_bytes_cap, _DEFAULT_FIRST_BUCKET_BYTES)
        self._params = params
        self._reducer = _Reducer(self, params, names, buckets)

    def _sync_module_states(self, buffers_only=False):
        """Rank 0's parameters (and buffers) to every rank, in place (torch's _sync_module_states)."""
        dist = _dist()
        tensors = [] if buffers_only else list(self.module.parameters())
        tensors += self._module_buffers
        with mini.no_grad():
            for t in tensors:
                dist.broadcast(t.detach(), src=0)

    @property
    def bucket_sizes(self):
        """The bytes of each bucket, in the order their all-reduces start (mini's, for labs)."""
        return [sum(self._params[i].numel() * self._params[i].element_size() for i in b)
                for b in self._reducer.buckets]

    @property
    def _timeline(self):
        """The last step's events (_Event), for labs/ddp_overlap.py and the tests."""
        return self._reducer.timeline

    def __call__(self, *inputs, **kwargs):
        # Module.__call__'s two lines, here: capture never traces mini.nn.parallel's code, so a
        # DDP module called from traced code is one graph break, not a second one in a captured
        # frame of Module.__call__ that would meet this forward
        compiled = self.__dict__.get("_compiled_call")  # Module.compile()
        return (compiled or self.forward)(*inputs, **kwargs)

    def forward(self, *inputs, **kwargs):
        # Under mini.compile this frame runs as it is (capture skips mini.nn.parallel, as Dynamo
        # skips torch.nn.parallel) and the inner module's call is the frame captured; so it calls
        # nothing else capture would look at (no contextlib, no Module method).
        if mini.is_grad_enabled():
            if self.broadcast_buffers and self._module_buffers:
                self._sync_module_states(buffers_only=True)
            if self.require_backward_grad_sync:
                self._reducer.prepare_for_backward()
        # While the inner module runs, capture knows that a DDP forward is running: a graph
        # compiled now is cut at this module's buckets (torch's _inside_ddp_forward).
        mini._C._set_active_ddp(self._params, self.bucket_bytes_cap, _DEFAULT_FIRST_BUCKET_BYTES)
        try:
            return self.module(*inputs, **kwargs)
        finally:
            mini._C._set_active_ddp(None)

    @contextlib.contextmanager
    def no_sync(self):
        """Backwards run inside (with their forwards) accumulate gradients locally, without
        communication; the first synchronized backward after it all-reduces the sums."""
        previous = self.require_backward_grad_sync
        self.require_backward_grad_sync = False
        try:
            yield
        finally:
            self.require_backward_grad_sync = previous
