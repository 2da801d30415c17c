"""What the labs share (the capture labs graph_breaks, shape_thrash, scalar_guards,
cache_storm and regional_compile most of it).

- the command line every lab takes (--out, --quick, --device, --backend);
- torch 2.11's recorded numbers (tests/conformance/expected_torch_2.11.jsonl), to print
  beside mini's where a lab runs one of the conformance programs;
- CountingBackend: a backend that counts the graphs it is given and times each compile, so
  a lab can count compiles under "inductor" as mini.CompileCounter does under "eager";
- per-call timing, figure saving (save_figure, used by every lab) and progress lines;
- for --device cuda: why there is no GPU here (cuda_unavailable_reason; skip_without_cuda, the
  one line and exit status 0 of the capture labs; require_cuda, the exit status 1 of
  eager_anatomy and bench_cuda_eager), what to call before reading the clock (synchronizer),
  the device in titles and JSON (device_title, device_fields), and GPU timing with CUDA events
  (cuda_ms).

This file is not a lab: labs/run_all.py does not run it.
"""

import contextlib
import json
import os
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

import mini

REPO_ROOT = Path(__file__).resolve().parents[1]
TORCH_EXPECTATIONS = REPO_ROOT / "tests" / "conformance" / "expected_torch_2.11.jsonl"
# the project's own conformance cases (tests/conformance/cases_mini.py), measured the same way
TORCH_EXPECTATIONS_MINI = REPO_ROOT / "tests" / "conformance" / "expected_torch_2.11_mini.jsonl"


# ---- the command line -----------------------------------------------------------------------


def add_common_arguments(parser, quick_help):
    """--out, --quick, --device and --backend, the same in every capture lab."""
    parser.add_argument("--out", type=Path, default=REPO_ROOT / "figures",
                        help="folder for the figures and the JSON (default: figures/)")
    parser.add_argument("--quick", action="store_true", help=quick_help)
    parser.add_argument("--device", choices=["cpu", "cuda"], default="cpu")
    parser.add_argument("--backend", choices=["inductor", "eager"], default=None,
                        help="the backend compiled graphs run on (default: inductor; eager "
                             "under --quick, where a C++ compile per graph would be slow)")


def finish_arguments(args, lab_name):
    """Fills the --backend default (inductor; eager under --quick) and makes the --out folder.
    With --device cuda where no GPU is usable, it prints why in one line and exits with
    status 0 before making anything (skip_without_cuda): it returns only when the lab can run."""
    if args.device == "cuda":
        skip_without_cuda(lab_name)
    if args.backend is None:
        args.backend = "eager" if args.quick else "inductor"
    args.out.mkdir(parents=True, exist_ok=True)
    return args


def cuda_unavailable_reason():
    """Why mini cannot run on a GPU here ("" when it can): no mini.cuda in this build, or
    what mini says when a CUDA tensor is asked for (no device, no driver, ...)."""
    cuda = getattr(mini, "cuda", None)
    if cuda is None:
        return "mini built without CUDA: mini.cuda does not exist"
    if cuda.is_available():
        return ""
    try:
        mini.zeros(1, device="cuda")
    except RuntimeError as error:
        return str(error)
    return "mini.cuda.is_available() is False"


def require_cuda(lab_name):
    """Exits (status 1, the reason on stderr) when --device cuda cannot run here."""
    reason = cuda_unavailable_reason()
    if reason:
        sys.exit(f"{lab_name}: --device cuda: no CUDA device ({reason}); run with --device cpu")


def skip_without_cuda(lab_name):
    """Where no GPU is usable, prints one line saying why and exits with status 0: the lab's
    --device cuda run is skipped, not failed (as fusion_wins and train_gpt do), so that
    labs/run_all.py --device cuda passes on a machine without a GPU. Returns when one is."""
    reason = cuda_unavailable_reason()
    if reason:
        print(f"{lab_name}: --device cuda: skipped: no CUDA device ({reason})", flush=True)
        raise SystemExit(0)


def cuda_torch(wanted=True):
    """(torch, "") where torch imports and sees a GPU, else (None, why not): the torch columns
    beside mini's on the GPU."""
    if not wanted:
        return None, "--no-torch"
    try:
        import torch
    except (ImportError, OSError) as error:
        return None, f"torch does not import ({str(error).splitlines()[0]})"
    if not torch.cuda.is_available():
        return None, "torch sees no CUDA device"
    return torch, ""


def synchronizer(device):
    """What to call before reading the clock: mini.cuda.synchronize on "cuda" (a call returns
    once its kernels are queued, not run), nothing on the CPU."""
    if device == "cuda":
        return mini.cuda.synchronize
    return lambda: None


def device_title(device):
    """What a figure's title adds for the device: nothing on the CPU (the labs' default),
    " (cuda: <GPU name>)" on the GPU."""
    if device != "cuda":
        return ""
    return f" (cuda: {mini.cuda.get_device_name(0)})"


def device_fields(device):
    """The JSON's "device", and on the GPU its name ("device_name", as fusion_wins writes)."""
    if device != "cuda":
        return {"device": device}
    return {"device": device, "device_name": mini.cuda.get_device_name(0)}


def cuda_ms(cuda, run, repeats, warmup=1, reduce=min):
    """GPU time of run() in milliseconds: CUDA events around each of `repeats` calls after
    `warmup` untimed ones, one synchronize at the end, reduced with `reduce` (min: the best
    call, as the CPU labs take; statistics.median for benchmarks). `cuda` is mini.cuda or
    torch.cuda, whose Event and synchronize have the same meaning."""
    for _ in range(warmup):
        run()
    cuda.synchronize()
    events = [(cuda.Event(enable_timing=True), cuda.Event(enable_timing=True))
              for _ in range(repeats)]
    for start, end in events:
        start.record()
        run()
        end.record()
    cuda.synchronize()
    return reduce([start.elapsed_time(end) for start, end in events])


# ---- torch 2.11's numbers -------------------------------------------------------------------


def load_torch_expectations():
    """{case name: record} from the conformance files (tests/conformance's cases and the
    project's own), or {} (saying why) when the first is missing."""
    if not TORCH_EXPECTATIONS.exists():
        print(f"note: {TORCH_EXPECTATIONS} is missing; torch 2.11's numbers are not shown")
        return {}
    records = {}
    for path in (TORCH_EXPECTATIONS, TORCH_EXPECTATIONS_MINI):
        if not path.exists():
            continue
        for line in path.read_text().splitlines():
            line = line.strip().lstrip("@")
            if not line:
                continue
            record = json.loads(line)
            if "case" in record:
                records[record["case"]] = record
    return records


# ---- compiling and counting -----------------------------------------------------------------


class CountingBackend:
    """A backend that counts the graphs capture gives it and times each compile.

    kind "eager" runs each graph with eager ops (as mini.CompileCounter does); kind
    "inductor" compiles it with mini's inductor, the same code path as backend="inductor":
    to C++ for a graph of CPU tensors, to CUDA (NVRTC) for one of CUDA tensors.
    `frame_count` has CompileCounter's meaning; `compile_seconds[i]` is how long the backend
    took on graph i (lowering, code generation and the C++ compiler or NVRTC for inductor;
    almost nothing for eager)."""

    def __init__(self, kind):
        if kind not in ("eager", "inductor"):
            raise ValueError(f"CountingBackend kind must be 'eager' or 'inductor', got {kind!r}")
        self.kind = kind
        self.compile_seconds = []

    @property
    def frame_count(self):
        return len(self.compile_seconds)

    def __call__(self, graph_module, example_inputs):
        start = time.perf_counter()
        if self.kind == "inductor" and any(getattr(t, "is_cuda", False) for t in example_inputs):
            run = mini._C._inductor_compile_cuda(graph_module)["run"]
        elif self.kind == "inductor":
            run = mini._C._inductor_compile(graph_module)["run"]
        else:
            run = graph_module.forward
        self.compile_seconds.append(time.perf_counter() - start)
        return run


@contextlib.contextmanager
def cold_kernel_cache(backend_name):
    """Points mini's on-disk kernel cache at a fresh folder for the block, so every inductor
    compile in it is a real one (what a first run costs), then puts the setting back.
    MINI_LAB_KEEP_KERNELS=DIR keeps a copy of the folder (each generated source and binary) in
    DIR, for reading what was compiled."""
    if backend_name != "inductor":
        yield
        return
    saved = mini.config.cache_dir
    folder = tempfile.mkdtemp(prefix="mini-lab-kernels-")
    mini.config.cache_dir = folder
    try:
        yield
    finally:
        mini.config.cache_dir = saved
        keep = os.environ.get("MINI_LAB_KEEP_KERNELS")
        if keep:
            shutil.copytree(folder, os.path.join(keep, os.path.basename(folder)), dirs_exist_ok=True)
        shutil.rmtree(folder, ignore_errors=True)


# ---- timing ---------------------------------------------------------------------------------


def per_call_us(run, sample_seconds, samples, sync=lambda: None):
    """Median over `samples` of the mean time per run() call, in microseconds.

    Each sample is a loop of back-to-back calls sized, from a warm-up, to take about
    `sample_seconds`, so fast and slow functions are both timed over many clock ticks.
    `sync` runs before each reading of the clock (synchronizer(device): on the GPU a sample
    ends when its kernels have run, not when the last one was queued)."""
    sync()
    start = time.perf_counter()
    run()
    sync()
    one_call = max(time.perf_counter() - start, 1e-7)
    calls = max(1, min(100_000, int(sample_seconds / one_call)))
    times = []
    for _ in range(samples):
        start = time.perf_counter()
        for _ in range(calls):
            run()
        sync()
        times.append((time.perf_counter() - start) / calls * 1e6)
    return statistics.median(times)


class DiscardedOutput:
    """A stdout that drops what is written: the programs' own print() calls still run (they
    are the graph breaks being measured) without flooding the lab's table."""

    def write(self, text):
        return len(text)

    def flush(self):
        pass


def quietly():
    return contextlib.redirect_stdout(DiscardedOutput())


class Progress:
    """One line per step, with the seconds since the lab started, flushed at once."""

    def __init__(self, lab_name):
        self.lab_name = lab_name
        self.start = time.perf_counter()

    def say(self, text):
        print(f"  [{time.perf_counter() - self.start:6.1f} s] {text}", flush=True)


# ---- figures --------------------------------------------------------------------------------


def print_torch_comparison(conformance, torch, what, columns):
    """The table of compile counts beside torch 2.11's recorded ones. `conformance` maps a
    row name to {"case": ..., and one key per extra column}; `columns` lists
    (heading, key, width) after the first two: (row name, case)."""
    rows = [(name, record) for name, record in conformance.items() if record["case"] in torch]
    if not rows:
        return
    print("\nbeside torch 2.11 (tests/conformance/expected_torch_2.11.jsonl): compiles "
          f"after {what}\n")
    (name_head, name_w), (case_w, torch_head, torch_w) = columns[0], columns[1]
    header = f"{name_head:<{name_w}}{'case':<{case_w}}{torch_head:<{torch_w}}"
    header += "".join(f"{head:<{w}}" for head, _, w in columns[2:])
    print(header)
    print("-" * len(header))
    for name, record in rows:
        want = torch[record["case"]]["compiles_after_each_call"]
        line = f"{name:<{name_w}}{record['case']:<{case_w}}{str(want):<{torch_w}}"
        line += "".join(f"{str(record[key]):<{w}}" for _, key, w in columns[2:])
        print(line)


def pyplot():
    """matplotlib's pyplot on the Agg backend (no display needed)."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    return plt


def save_figure(fig, out_dir, stem):
    """Writes stem.png and stem.svg into out_dir; returns both paths."""
    paths = [out_dir / f"{stem}.png", out_dir / f"{stem}.svg"]
    fig.savefig(paths[0], dpi=150)
    fig.savefig(paths[1])
    return paths


def write_json(out_dir, stem, results):
    path = out_dir / f"{stem}.json"
    path.write_text(json.dumps(results, indent=2) + "\n")
    return path


@contextlib.contextmanager
def cpu_threads(device, count):
    """mini.set_num_threads(count) for the block on the CPU (nothing on the GPU); yields the
    count (None on the GPU). On the project's 2-core VM a 2-thread matmul of a small program
    swings tenfold between calls (a thread waits for a busy core); one thread is steady, and a
    small program is too small for a second thread to help its kernels."""
    if device != "cpu":
        yield None
        return
    saved = mini.get_num_threads()
    mini.set_num_threads(count)
    try:
        yield count
    finally:
        mini.set_num_threads(saved)
