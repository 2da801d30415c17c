"""Where a compiled CPU graph's time goes, step by step (a small torch.profiler).

    with mini.profiler.profile() as prof:
        step()                      # anything that runs compiled graphs on the CPU
    print(prof.table())             # one line per generated kernel and per extern op

Inside the block every compiled CPU graph times each of its steps (a generated kernel, or an
extern op such as a matmul, named with its operand shapes) and adds them up across calls. The
table sorts them by total time, with calls, time a call, bytes moved and GB/s, and the share of
all the steps' time. Eager ops are not timed one by one: time the eager step as a whole beside.
"""

from dataclasses import dataclass

from . import _C

__all__ = ["profile", "StepStat"]


@dataclass
class StepStat:
    name: str        # cpp_poi_fused_add_relu_0, or "extern mm [256, 1024] x [1024, 1024]"
    graph: str       # the compiled library holding the kernel ("" for an extern op)
    calls: int
    seconds: float   # summed over the calls
    bytes: int       # summed over the calls

    @property
    def ms_per_call(self):
        return self.seconds * 1e3 / self.calls


class profile:
    """A context manager: profiles the compiled CPU graphs run inside it (not reentrant)."""

    active = False

    def __init__(self):
        self.steps = []

    def __enter__(self):
        if profile.active:
            raise RuntimeError("mini.profiler.profile() is already active: profiles do not nest; "
                               "end the outer one first")
        profile.active = True
        _C._profiler_reset()
        _C._profiler_set(True)
        return self

    def __exit__(self, *exc):
        _C._profiler_set(False)
        profile.active = False
        self.steps = [StepStat(*e) for e in _C._profiler_entries()]
        _C._profiler_reset()
        return False

    def total_seconds(self):
        return sum(s.seconds for s in self.steps)

    def table(self, limit=20):
        """The steps by total time, the largest first (at most `limit` rows, then a summary)."""
        total = self.total_seconds()
        if not self.steps:
            return "no compiled CPU graph ran inside the profile"
        rows = sorted(self.steps, key=lambda s: -s.seconds)
        width = max(len("step"), *(len(s.name) for s in rows[:limit]))
        lines = [f"{'step':{width}s}  {'calls':>6s}  {'total ms':>9s}  {'ms/call':>8s}  {'MB/call':>8s}  "
                 f"{'GB/s':>6s}  {'share':>6s}"]
        lines.append("-" * len(lines[0]))
        for s in rows[:limit]:
            mb = s.bytes / s.calls / 1e6
            gbs = s.bytes / s.seconds / 1e9 if s.seconds > 0 else 0.0
            share = s.seconds / total if total > 0 else 0.0
            lines.append(f"{s.name:{width}s}  {s.calls:6d}  {s.seconds * 1e3:9.3f}  {s.ms_per_call:8.3f}  "
                         f"{mb:8.2f}  {gbs:6.1f}  {share:6.1%}")
        if len(rows) > limit:
            rest = rows[limit:]
            lines.append(f"... {len(rest)} more steps, {sum(s.seconds for s in rest) * 1e3:.3f} ms")
        kernels = sum(s.seconds for s in rows if not s.name.startswith("extern "))
        lines.append(f"all steps {total * 1e3:.3f} ms: generated kernels {kernels * 1e3:.3f} ms, "
                     f"extern ops {(total - kernels) * 1e3:.3f} ms")
        return "\n".join(lines)
