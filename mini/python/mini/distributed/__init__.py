"""mini.distributed: torch.distributed's names over mini's process groups (mini/distributed/).

    python -m mini.distributed.run --nproc-per-node 2 train.py   # or torchrun: the same variables

    import mini.distributed as dist
    dist.init_process_group("gloo")     # MASTER_ADDR, MASTER_PORT, RANK, WORLD_SIZE from the launcher
    dist.all_reduce(t)                  # in place: t is now the sum of every rank's t
    work = dist.all_reduce(t, op=dist.ReduceOp.AVG, async_op=True)
    ...                                 # overlaps with the collective
    work.wait()
    dist.destroy_process_group()

Backends: "gloo" moves CPU tensors, "nccl" CUDA tensors, "cpu:gloo,cuda:nccl" each tensor by
its device (backend=None means that where NCCL can run, else "gloo"). The C++ stage does the
work: the rendezvous store, Gloo's and NCCL's groups, the checks and every error message
(notes/distributed.md). This module reads the environment, keeps the default group and picks
the group of a tensor's device. One process group, the default one: `group=` takes None.
"""
import atexit as _atexit
import datetime as _datetime
import os as _os
from urllib.parse import urlparse as _urlparse

from .. import _C

_dist = _C._distributed
DistError = _dist.DistError
DistBackendError = _dist.DistBackendError
DistNetworkError = _dist.DistNetworkError
DistStoreError = _dist.DistStoreError
ReduceOp = _dist.ReduceOp
Work = _dist.Work
TCPStore = _dist.TCPStore
ProcessGroup = _dist.ProcessGroup

# torch waits 30 minutes by default; a learner's mistake (a rank that never calls) shows sooner.
default_pg_timeout = _datetime.timedelta(minutes=5)

_LAUNCH_HINT = ("Start the script with `python -m mini.distributed.run --nproc-per-node N "
                "script.py` (or torchrun), which sets MASTER_ADDR, MASTER_PORT, RANK and "
                "WORLD_SIZE, or set them yourself")
_NOT_INITIALIZED = ("Default process group has not been initialized, please make sure to call "
                    "init_process_group.")


class Backend:
    """torch.distributed.Backend's names."""
    GLOO = "gloo"
    NCCL = "nccl"
    UNDEFINED = "undefined"


class _World:
    """The default process group: the store, and a C++ ProcessGroup per device type."""

    def __init__(self, store, groups, backend, rank, world_size):
        self.store, self.groups, self.backend = store, groups, backend
        self.rank, self.world_size = rank, world_size


_world = None


class _GroupMember:
    WORLD = object()  # torch's group.WORLD: the default group


group = GroupMember = _GroupMember


# ---- availability and state -----------------------------------------------------------------
def is_available():
    """True: the store and the process groups are always built (each backend may not be)."""
    return True


def is_gloo_available():
    return _dist.gloo_available()


def is_nccl_available():
    """Built with NCCL and a GPU answers."""
    return _dist.nccl_available()


def is_initialized():
    return _world is not None


def _default(what="this"):
    if _world is None:
        raise ValueError(f"{what}: {_NOT_INITIALIZED}")
    return _world


def _check_group(group):
    if group is not None and group is not GroupMember.WORLD:
        raise ValueError("mini has one process group, the default one: pass group=None")


def get_rank(group=None):
    _check_group(group)
    return _default("get_rank()").rank


def get_world_size(group=None):
    _check_group(group)
    return _default("get_world_size()").world_size


def get_backend(group=None):
    _check_group(group)
    return _default("get_backend()").backend


def get_node_local_rank(fallback_rank=None):
    """LOCAL_RANK as the launcher (or torchrun) sets it, else `fallback_rank`."""
    if "LOCAL_RANK" in _os.environ:
        return int(_os.environ["LOCAL_RANK"])
    if fallback_rank is not None:
        return int(fallback_rank)
    raise RuntimeError("LOCAL_RANK is not in the environment: " + _LAUNCH_HINT)


def _get_default_group():
    """The default group's _World (its C++ groups by device type in .groups): for mini.nn.parallel."""
    return _default("_get_default_group()")


# ---- init and destroy -----------------------------------------------------------------------
def init_process_group(backend=None, init_method=None, timeout=None, world_size=-1, rank=-1,
                       store=None, group_name="", pg_options=None, device_id=None):
    """Joins this process to the job's default process group; returns once every rank has.

    init_method "env://" (the default) reads MASTER_ADDR, MASTER_PORT, and RANK and WORLD_SIZE
    unless `rank` and `world_size` are given; "tcp://host:port" takes them from the arguments.
    `timeout` (a timedelta; default_pg_timeout) bounds the rendezvous and every collective."""
    global _world
    if _world is not None:
        raise ValueError("trying to initialize the default process group twice! Call "
                         "destroy_process_group() first")
    if pg_options is not None:
        raise ValueError("pg_options is not supported by mini")
    backends, name = _parse_backend(backend)
    timeout = default_pg_timeout if timeout is None else timeout
    if not isinstance(timeout, _datetime.timedelta):
        raise TypeError(f"timeout must be a datetime.timedelta, not {type(timeout).__name__}")
    if store is None:
        host, port, rank, world_size = _rendezvous_address(init_method, rank, world_size)
        _check_rank(rank, world_size)
        store = TCPStore(host, port, world_size, rank == 0, timeout)
    else:
        _check_rank(rank, world_size)
    groups = {}
    for device_type, backend_name in backends.items():
        make = _dist.new_gloo_group if backend_name == "gloo" else _dist.new_nccl_group
        groups[device_type] = make(store, backend_name + "/", rank, world_size, timeout)
    _world = _World(store, groups, name, rank, world_size)


def destroy_process_group(group=None):
    """Tears the default group down: Gloo's worker stops, NCCL's queued collectives finish."""
    global _world
    _check_group(group)
    world, _world = _world, None
    if world is not None:
        world.groups.clear()  # the C++ groups go first (they use the store while they stop)
        world.store = None


@_atexit.register
def _destroy_at_exit():
    if _world is not None:
        destroy_process_group()


def _parse_backend(backend):
    """{device type: backend name} and the name get_backend() reports."""
    if backend is None:
        if is_nccl_available() and is_gloo_available():
            backend = "cpu:gloo,cuda:nccl"
        else:
            backend = "nccl" if is_nccl_available() and not is_gloo_available() else "gloo"
    text = str(backend).lower()
    wanted = {"cpu": "gloo", "cuda": "nccl"}
    if text in ("gloo", "nccl"):
        pairs = {"cpu" if text == "gloo" else "cuda": text}
    else:
        pairs = dict(part.split(":", 1) for part in text.split(",") if ":" in part)
        if not pairs or any(wanted.get(d) != b for d, b in pairs.items()) or \
                len(pairs) != len(text.split(",")):
            raise ValueError(f"Invalid backend: '{backend}'. mini has 'gloo' (CPU tensors), "
                             "'nccl' (CUDA tensors) and 'cpu:gloo,cuda:nccl' (both)")
    if "gloo" in pairs.values() and not is_gloo_available():
        raise RuntimeError("init_process_group(backend='gloo'): this build of mini has no Gloo: "
                           "install Debian's libgloo-dev (scripts/setup.sh does) and rebuild")
    if "nccl" in pairs.values() and not is_nccl_available():
        raise RuntimeError(f"init_process_group(backend='{backend}'): "
                           f"{_dist.nccl_unavailable_reason()}")
    return pairs, text


def _env(name, parse=str):
    value = _os.environ.get(name)
    if value is None or value == "":
        raise ValueError(f"Error initializing mini.distributed using env:// rendezvous: "
                         f"environment variable {name} expected, but not set. {_LAUNCH_HINT}")
    try:
        return parse(value)
    except ValueError:
        raise ValueError(f"environment variable {name}={value!r} is not a number") from None


def _rendezvous_address(init_method, rank, world_size):
    """(MASTER_ADDR, MASTER_PORT, rank, world_size) from init_method and the environment."""
    url = _urlparse(init_method or "env://")
    if url.scheme == "env":
        host, port = _env("MASTER_ADDR"), _env("MASTER_PORT", int)
        rank = rank if rank >= 0 else _env("RANK", int)
        world_size = world_size if world_size >= 0 else _env("WORLD_SIZE", int)
    elif url.scheme == "tcp":
        if not url.hostname or not url.port:
            raise ValueError(f"init_method={init_method!r}: expected tcp://host:port")
        if rank < 0 or world_size < 0:
            raise ValueError(f"init_method={init_method!r} needs rank= and world_size= as well")
        host, port = url.hostname, url.port
    else:
        raise ValueError(f"init_method={init_method!r}: mini supports env:// (the default) and "
                         "tcp://host:port")
    if not 0 < port < 65536:
        raise ValueError(f"MASTER_PORT={port} is not a port (1 to 65535)")
    return host, port, rank, world_size


def _check_rank(rank, world_size):
    if world_size < 1:
        raise ValueError(f"WORLD_SIZE={world_size}: a job needs at least one process")
    if not 0 <= rank < world_size:
        raise ValueError(f"RANK={rank} is not a rank of a job of WORLD_SIZE={world_size}: ranks "
                         f"go from 0 to {world_size - 1}, one per process")


# ---- collectives ----------------------------------------------------------------------------
def _group_of(what, tensor=None, group=None):
    """The C++ group for `tensor`'s device; with none for that device, any (it raises the error
    that names the fix)."""
    _check_group(group)
    world = _default(what)
    if tensor is None:  # barrier: the CPU group where there is one
        return world.groups.get("cpu") or world.groups["cuda"]
    if not isinstance(tensor, _C.Tensor):
        raise TypeError(f"{what}: expected a mini.Tensor, not {type(tensor).__name__}")
    device_type = "cuda" if tensor.is_cuda else "cpu"
    return world.groups.get(device_type) or next(iter(world.groups.values()))


def _check_op(op, what):
    if not isinstance(op, ReduceOp):
        raise ValueError(f"{what}: op={op!r} is not supported; mini has ReduceOp.SUM, "
                         "ReduceOp.AVG and ReduceOp.MAX")
    return op


def _finish(work, async_op):
    if async_op:
        return work
    work.wait()
    return None


def all_reduce(tensor, op=ReduceOp.SUM, group=None, async_op=False):
    """In place: `tensor` becomes the reduction (op) of every rank's `tensor`."""
    pg = _group_of("all_reduce()", tensor, group)
    return _finish(pg.all_reduce(tensor, _check_op(op, "all_reduce()")), async_op)


def broadcast(tensor, src=None, group=None, async_op=False, group_src=None):
    """In place: every rank's `tensor` becomes rank `src`'s."""
    src = group_src if src is None else src
    if src is None:
        raise ValueError("broadcast(): give src, the rank whose tensor every rank receives")
    return _finish(_group_of("broadcast()", tensor, group).broadcast(tensor, int(src)), async_op)


def all_gather_into_tensor(output_tensor, input_tensor, group=None, async_op=False):
    """`output_tensor` (world_size times the input's elements) gets every rank's input, by rank."""
    pg = _group_of("all_gather_into_tensor()", input_tensor, group)
    return _finish(pg.all_gather_into_tensor(output_tensor, input_tensor), async_op)


def reduce_scatter_tensor(output, input, op=ReduceOp.SUM, group=None, async_op=False):  # noqa: A002
    """`input` (world_size times the output's elements) is reduced over the ranks; rank r's
    `output` gets part r of the result."""
    pg = _group_of("reduce_scatter_tensor()", input, group)
    return _finish(pg.reduce_scatter_tensor(output, input, _check_op(op, "reduce_scatter_tensor()")),
                   async_op)


def barrier(group=None, async_op=False, device_ids=None):
    """Returns once every rank has called it."""
    return _finish(_group_of("barrier()", None, group).barrier(), async_op)
