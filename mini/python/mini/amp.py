"""mini.amp: torch.amp's name for autocast (torch.amp.autocast(device_type=..., dtype=...))."""

from ._autocast_mode import autocast

__all__ = ["autocast"]
