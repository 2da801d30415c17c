"""mini.nn.parallel: data-parallel training (torch.nn.parallel). DistributedDataParallel lives in
distributed.py; notes/distributed.md explains its buckets and how mini.compile meets it."""
from .distributed import DistributedDataParallel

__all__ = ["DistributedDataParallel"]
