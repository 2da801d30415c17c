"""Figure -- eager's kernels and the bytes they move, against the one fused kernel.

The program is labs/programs.py's transform, relu((x + bias) * 0.5), on a tensor large enough
to be bound by memory bandwidth (4096 x 4096 float32, 64 MiB; --quick: 1024 x 1024).

Eager: the three ops run one by one, mini.metrics reset before each: its kernel launches and
bytes moved (mini.metrics.bytes_moved), its time (the best of several calls), and the bytes it
reads and writes from its operands' shapes (they add up to the metric). The two values made and
consumed inside the chain, t1 and t2, are the intermediates: each is written to memory by one
kernel and read back by the next.

Compiled: mini.compile(transform) with a backend that records the captured graph and compiles
it with inductor itself (mini._C._inductor_compile(gm) on the CPU,
mini.inductor.compile_graph_cuda(gm) on the GPU), so the figure has the compile's own report:
its kernels (their generated names) and its fusion decisions. A kernel's loads and stores are
counted in its generated source: the buffers in<N> it reads and out<N> it writes (the renderer
names a kernel's loads in0.. in the order of the graph's inputs, then its stores), each shown
with its first index expression. Their bytes are the tensors' sizes; mini.metrics.bytes_moved
of one compiled call is the measured total, and on the CPU mini.profiler times the kernel and
counts its bytes on its own.

With --device cuda the same runs on CUDA tensors (times from CUDA events); where torch imports
and sees the GPU, torch eager and torch.compile of the same function are timed beside it. That
part is optional: any error there is recorded in the JSON and the figure is mini's alone.
"""

import inspect
import re
import statistics
import textwrap
import time

import mini
import mini.inductor  # compile_graph_cuda: the fused kernel of a graph of CUDA tensors

from measure import cuda_ms, synchronizer
from programs import transform

TITLE = ("Fusion keeps intermediates out of memory: one generated kernel reads each input "
         "and writes the output once")
CAPTION = ("relu((x + bias) * 0.5): eager's 3 kernels (mini.metrics per op) against inductor's "
           "one generated kernel (loads and stores read from its source); bytes and best times "
           "measured in one run.")

FULL = {"rows": 4096, "cols": 4096, "repeats": 10}
QUICK = {"rows": 1024, "cols": 1024, "repeats": 5}
MB = 1e6

# transform's ops, one at a time: (op, statement, operands, result, function)
EAGER_STEPS = [
    ("add", "t1 = x + bias", ("x", "bias"), "t1", lambda x, bias: x + bias),
    ("mul", "t2 = t1 * 0.5", ("t1",), "t2", lambda t1: t1 * 0.5),
    ("relu", "y = relu(t2)", ("t2",), "y", mini.relu),
]


# ---- timing ---------------------------------------------------------------------------------


def timer(device, repeats):
    """best_ms(run): the fastest of `repeats` calls after one warm-up on the CPU; the median of
    `repeats` calls with CUDA events on the GPU."""
    if device == "cuda":
        return lambda run: cuda_ms(mini.cuda, run, repeats, reduce=statistics.median)
    sync = synchronizer(device)

    def best_ms(run):
        run()
        best = float("inf")
        for _ in range(repeats):
            start = time.perf_counter()
            run()
            sync()
            best = min(best, time.perf_counter() - start)
        return best * 1e3
    return best_ms


def nbytes(t):
    return t.numel() * t.element_size()


# ---- eager, op by op ------------------------------------------------------------------------


def measure_eager(inputs, best_ms):
    values = dict(inputs)
    consumed = {name for _, _, operands, _, _ in EAGER_STEPS for name in operands}
    kernels = []
    for op, statement, operands, result, fn in EAGER_STEPS:
        args = [values[name] for name in operands]
        mini.metrics.reset()
        out = fn(*args)
        counts = mini.metrics.snapshot()
        values[result] = out
        kernels.append({
            "op": op, "statement": statement, "reads": list(operands), "writes": result,
            "read_bytes": sum(nbytes(a) for a in args), "written_bytes": nbytes(out),
            "bytes_moved": counts["bytes_moved"], "kernel_launches": counts["kernel_launches"],
            "time_ms": best_ms(lambda: fn(*args)),
            "output_is_intermediate": result in consumed,
        })
    return values["y"], kernels


# ---- the fused kernel -----------------------------------------------------------------------


class RecordAndCompile:
    """A backend: keeps the captured graph and inductor's report on it (kernels, source,
    decisions) and returns its runner, so the compiled function runs that very compile."""

    def __init__(self, device):
        self.device = device
        self.graph_module = None
        self.info = None

    def __call__(self, graph_module, example_inputs):
        self.graph_module = graph_module
        if self.device == "cuda":
            self.info = mini.inductor.compile_graph_cuda(graph_module)
        else:
            self.info = mini._C._inductor_compile(graph_module)
        return self.info["run"]


def kernel_text(source, name):
    """The generated function `name`, from its signature to the next kernel's."""
    start = re.search(r'extern "C"[^\n]*\b' + re.escape(name) + r"\(", source)
    if start is None:
        return ""
    end = source.find('extern "C"', start.end())
    return source[start.start():end if end >= 0 else len(source)]


def accesses(body, prefix, tensors):
    """The buffers named prefix<N> in a kernel's text: [{"buffer", "tensor", "access"}], the
    access being the buffer's first index expression (CPU: in0[x0 * 4096 + x1 * 1]; CUDA:
    in0 + i, a vector load)."""
    found = []
    for number in sorted({int(n) for n in re.findall(rf"\b{prefix}(\d+)\b", body)}):
        name = f"{prefix}{number}"
        access = re.search(rf"\b{name}\[[^\]]*\]", body) or re.search(rf"\b{name} \+ \w+", body)
        found.append({"buffer": name, "access": access.group(0) if access else name})
    for entry, tensor in zip(found, tensors):
        entry.update(tensor)
    return found


def measure_fused(fn, inputs, expected, best_ms, device):
    names = list(inspect.signature(fn).parameters)
    args = [inputs[name] for name in names]
    backend = RecordAndCompile(device)
    compiled = mini.compile(fn, backend=backend)
    start = time.perf_counter()
    result = compiled(*args)
    synchronizer(device)()
    compile_seconds = time.perf_counter() - start
    if not mini.allclose(result, expected, rtol=1e-5, atol=1e-6):
        raise RuntimeError("the fused kernel's result differs from eager's")
    mini.metrics.reset()
    compiled(*args)
    counts = mini.metrics.snapshot()
    info, gm = backend.info, backend.graph_module
    graph_ops = [n.target.replace("mini.", "") for n in gm.nodes if n.op == "call_function"]
    ins = [{"tensor": name, "shape": list(inputs[name].shape), "bytes": nbytes(inputs[name])}
           for name in names]
    outs = [{"tensor": "y", "shape": list(expected.shape), "bytes": nbytes(expected)}]
    kernels = []
    for name in info["kernels"]:
        body = kernel_text(info["source"], name)
        kernels.append({"name": name, "loads": accesses(body, "in", ins),
                        "stores": accesses(body, "out", outs)})
    fused = {
        "graph_ops": graph_ops,
        "kernels": kernels,
        "decisions": list(info["decisions"]),
        "kernel_launches": counts["kernel_launches"],
        "bytes_moved": counts["bytes_moved"],
        "time_ms": best_ms(lambda: compiled(*args)),
        "compile_seconds": compile_seconds,
        "from_disk_cache": bool(info.get("from_disk_cache", False)),
    }
    if device == "cpu":
        with mini.profiler.profile() as prof:
            for _ in range(3):
                compiled(*args)
        fused["profile"] = [{"name": s.name, "ms_per_call": s.ms_per_call,
                             "bytes_per_call": s.bytes // s.calls} for s in prof.steps]
    return fused


# ---- torch beside it (GPU only, optional) ---------------------------------------------------


def measure_torch(rows, cols, repeats):
    """torch eager (op by op and whole) and torch.compile on the same function, CUDA events;
    {"error": why} where torch is missing or fails: the figure is then mini's alone."""
    try:
        import torch
        if not torch.cuda.is_available():
            return {"error": "torch sees no GPU"}
        x = torch.randn(rows, cols, device="cuda")
        bias = torch.randn(cols, device="cuda")

        def torch_transform(x, bias):
            return torch.relu((x + bias) * 0.5)
        compiled = torch.compile(torch_transform)
        compiled(x, bias)
        t1 = x + bias
        t2 = t1 * 0.5
        steps = {"add": lambda: x + bias, "mul": lambda: t1 * 0.5, "relu": lambda: torch.relu(t2)}
        return {
            "version": torch.__version__,
            "eager_op_ms": {op: cuda_ms(torch.cuda, run, repeats, reduce=statistics.median)
                            for op, run in steps.items()},
            "eager_ms": cuda_ms(torch.cuda, lambda: torch_transform(x, bias), repeats,
                                reduce=statistics.median),
            "compiled_ms": cuda_ms(torch.cuda, lambda: compiled(x, bias), repeats,
                                   reduce=statistics.median),
        }
    except Exception as error:  # noqa: BLE001 -- torch's side must never lose mini's figure
        lines = str(error).strip().splitlines()
        return {"error": f"{type(error).__name__}: {lines[0] if lines else ''}"}


# ---- measure --------------------------------------------------------------------------------


def measure(args):
    sizes = QUICK if args.quick else FULL
    device = args.device
    best_ms = timer(device, sizes["repeats"])
    mini.manual_seed(0)
    inputs = {"x": mini.randn(sizes["rows"], sizes["cols"], device=device),
              "bias": mini.randn(sizes["cols"], device=device)}
    y, eager_kernels = measure_eager(inputs, best_ms)
    whole_eager_ms = best_ms(lambda: transform(inputs["x"], inputs["bias"]))
    mini.reset()
    fused = measure_fused(transform, inputs, y, best_ms, device)
    if fused["graph_ops"] != [k["op"] for k in eager_kernels]:
        raise RuntimeError(f"the captured graph's ops {fused['graph_ops']} are not the eager "
                           f"steps {[k['op'] for k in eager_kernels]}")
    minimum = sum(nbytes(t) for t in inputs.values()) + nbytes(y)
    eager_bytes = sum(k["bytes_moved"] for k in eager_kernels)
    data = {
        "program": "relu((x + bias) * 0.5)",
        "device": device,
        "shapes": {name: list(t.shape) for name, t in inputs.items()},
        "output_shape": list(y.shape),
        "dtype": "float32",
        "repeats": sizes["repeats"],
        "eager": {
            "kernels": eager_kernels,
            "kernel_launches": sum(k["kernel_launches"] for k in eager_kernels),
            "bytes_moved": eager_bytes,
            "intermediate_bytes": sum(2 * k["written_bytes"] for k in eager_kernels
                                      if k["output_is_intermediate"]),
            "time_ms_ops": sum(k["time_ms"] for k in eager_kernels),
            "time_ms_whole_call": whole_eager_ms,
        },
        "fused": fused,
        "minimum_bytes": minimum,
        "bytes_ratio": eager_bytes / fused["bytes_moved"],
        "time_ratio": whole_eager_ms / fused["time_ms"],
        "how": ("bytes: mini.metrics.bytes_moved of one call (eager: one op at a time); read/"
                "written per eager op from its operands' shapes; the fused kernel's loads and "
                "stores: the in<N>/out<N> buffers of its generated source; times: "
                + ("median of CUDA events" if device == "cuda" else "best of")
                + f" {sizes['repeats']} calls after a warm-up"),
    }
    if device == "cuda":
        data["torch"] = measure_torch(sizes["rows"], sizes["cols"], sizes["repeats"])
    return data


# ---- draw -----------------------------------------------------------------------------------

EAGER_COLOR, FUSED_COLOR = "#C44E52", "#4C72B0"
MEMORY_COLOR, MINIMUM_COLOR = "#E8E8E8", "#55A868"


def mb(n):
    return f"{n / MB:.1f} MB" if n >= 0.1 * MB else f"{n / 1e3:.1f} KB"


def box(ax, x, y, width, height, text, face, edge="black", hatch=None, size=8,
        family=None, left=False):
    """A rounded box with its text centred (or, left=True, flush left), over any hatching."""
    from matplotlib.patches import FancyBboxPatch
    ax.add_patch(FancyBboxPatch((x, y), width, height, boxstyle="round,pad=0.015",
                                facecolor=face, edgecolor=edge, hatch=hatch, linewidth=0.8))
    background = {"facecolor": "white", "edgecolor": "none", "pad": 1.5} if hatch else None
    ax.text(x + 0.02 if left else x + width / 2, y + height / 2, text,
            ha="left" if left else "center", va="center", fontsize=size, family=family,
            bbox=background)


def arrow(ax, x0, y0, x1, y1):
    ax.annotate("", xy=(x1, y1), xytext=(x0, y0),
                arrowprops={"arrowstyle": "->", "color": "#333333", "lw": 0.9})


def draw_inputs(ax, data, top):
    """The input tensors in memory, side by side at height `top`; returns their centres."""
    names = list(data["shapes"])
    width = 0.9 / len(names)
    centres = []
    for i, name in enumerate(names):
        x = 0.05 + i * width
        shape = data["shapes"][name]
        size = 4
        for d in shape:
            size *= d
        box(ax, x, top, width - 0.04, 0.07, f"{name} {shape}\nin memory: {mb(size)}",
            MEMORY_COLOR, size=8)
        centres.append(x + (width - 0.04) / 2)
    return centres


def draw_eager(ax, data):
    eager = data["eager"]
    ax.set_title(f"eager: {eager['kernel_launches']} kernels, one per op; "
                 f"{mb(eager['bytes_moved'])} moved, {eager['time_ms_ops']:.2f} ms",
                 fontsize=10, color=EAGER_COLOR, loc="left")
    draw_inputs(ax, data, 0.90)
    y = 0.90
    for i, k in enumerate(eager["kernels"]):
        y_kernel = y - 0.145
        arrow(ax, 0.5, y, 0.5, y_kernel + 0.09)
        box(ax, 0.08, y_kernel, 0.84, 0.09,
            f"kernel {i + 1}: {k['op']}    {k['statement']}\n"
            f"reads {mb(k['read_bytes'])}, writes {mb(k['written_bytes'])} "
            f"(metrics: {mb(k['bytes_moved'])})   {k['time_ms']:.2f} ms",
            "#F6D5D5", edge=EAGER_COLOR, size=8)
        y_buffer = y_kernel - 0.12
        arrow(ax, 0.5, y_kernel, 0.5, y_buffer + 0.065)
        if k["output_is_intermediate"]:
            box(ax, 0.2, y_buffer, 0.6, 0.065,
                f"{k['writes']}: intermediate, in memory ({mb(k['written_bytes'])}):\n"
                "written here, read back by the next kernel", "#FBEAEA", edge=EAGER_COLOR,
                hatch="//", size=7.5)
        else:
            box(ax, 0.2, y_buffer, 0.6, 0.065, f"{k['writes']} {data['output_shape']}: the "
                f"output ({mb(k['written_bytes'])})", MEMORY_COLOR, size=8)
        y = y_buffer
    ax.set_xlim(0, 1)
    ax.set_ylim(y - 0.03, 1.0)
    ax.axis("off")


def draw_fused(ax, data):
    fused = data["fused"]
    kernel = fused["kernels"][0] if fused["kernels"] else {"name": "-", "loads": [], "stores": []}
    ax.set_title(f"compiled: {len(fused['kernels'])} generated kernel, "
                 f"{fused['kernel_launches']} launch; {mb(fused['bytes_moved'])} moved, "
                 f"{fused['time_ms']:.2f} ms", fontsize=10, color=FUSED_COLOR, loc="left")
    draw_inputs(ax, data, 0.90)
    arrow(ax, 0.5, 0.90, 0.5, 0.80)
    lines = ["loads (each input read once):"]
    for load in kernel["loads"]:
        lines.append(f"  {load['access']}  <- {load.get('tensor', '?')} "
                     f"({mb(load['bytes']) if 'bytes' in load else '?'})")
    lines.append("stores (the output written once):")
    for store in kernel["stores"]:
        lines.append(f"  {store['access']}  -> {store.get('tensor', '?')} "
                     f"({mb(store['bytes']) if 'bytes' in store else '?'})")
    kept = [d for d in fused["decisions"] if "stay in registers" in d]
    if kept:
        detail = kept[0].split(": ", 1)[-1]
        lines += [""] + textwrap.wrap("inductor's decision: " + detail, 58,
                                      subsequent_indent="  ")
    profile = {s["name"]: s for s in fused.get("profile", [])}
    if kernel["name"] in profile:
        p = profile[kernel["name"]]
        lines.append(f"mini.profiler: {p['ms_per_call']:.2f} ms, {mb(p['bytes_per_call'])} a call")
    box(ax, 0.04, 0.30, 0.92, 0.50, "\n".join(lines), "#DCE6F2", edge=FUSED_COLOR,
        size=8, family="monospace", left=True)
    ax.text(0.5, 0.765, f"the generated kernel: {kernel['name']}", ha="center", va="center",
            fontsize=9.5, family="monospace", fontweight="bold", color=FUSED_COLOR)
    arrow(ax, 0.5, 0.30, 0.5, 0.20)
    box(ax, 0.2, 0.135, 0.6, 0.065, f"y {data['output_shape']}: the output "
        f"({mb(kernel['stores'][0]['bytes']) if kernel['stores'] else '?'})", MEMORY_COLOR,
        size=8)
    ax.text(0.5, 0.06, "t1 and t2 never reach memory: they live in registers, one element "
            "at a time", ha="center", fontsize=8.5, color=FUSED_COLOR, style="italic")
    ax.set_xlim(0, 1)
    ax.set_ylim(0.0, 1.0)
    ax.axis("off")


def draw_bars(ax_bytes, ax_time, data):
    eager, fused = data["eager"], data["fused"]
    names = ["eager\n(3 kernels)", "fused\n(1 kernel)"]
    values = [eager["bytes_moved"] / MB, fused["bytes_moved"] / MB]
    bars = ax_bytes.bar(names, values, color=[EAGER_COLOR, FUSED_COLOR], width=0.55)
    ax_bytes.bar_label(bars, labels=[f"{v:.1f} MB" for v in values], fontsize=8.5)
    ax_bytes.axhline(data["minimum_bytes"] / MB, color=MINIMUM_COLOR, linestyle="--",
                     label=f"minimum: inputs read once + output written once "
                           f"({data['minimum_bytes'] / MB:.1f} MB)")
    ax_bytes.set_ylabel("bytes moved per call (MB, mini.metrics)")
    ax_bytes.set_ylim(0, max(values) * 1.3)
    ax_bytes.legend(fontsize=7.5, loc="upper right")
    ax_bytes.set_title(f"memory traffic: eager moves {data['bytes_ratio']:.2f}x the fused "
                       "kernel's bytes", fontsize=9.5, loc="left")
    ax_bytes.grid(axis="y", alpha=0.3)

    names = ["mini eager\n(whole call)", "mini fused"]
    values = [eager["time_ms_whole_call"], fused["time_ms"]]
    colors = [EAGER_COLOR, FUSED_COLOR]
    torch = data.get("torch") or {}
    if "eager_ms" in torch:
        names += ["torch eager", "torch.compile"]
        values += [torch["eager_ms"], torch["compiled_ms"]]
        colors += ["#DD8452", "#8172B3"]
    bars = ax_time.bar(names, values, color=colors, width=0.55)
    labels = [f"{v:.2f} ms" for v in values]
    for i, moved in enumerate([eager["bytes_moved"], fused["bytes_moved"]]):
        labels[i] += f"\n{moved / (values[i] * 1e-3) / 1e9:.1f} GB/s"
    ax_time.bar_label(bars, labels=labels, fontsize=8.5)
    ax_time.set_ylabel("time per call (ms, best of %d)" % data["repeats"]
                       if data["device"] != "cuda" else "time per call (ms, CUDA events)")
    ax_time.set_ylim(0, max(values) * 1.3)
    ax_time.set_title(f"time: the fused kernel is {data['time_ratio']:.2f}x faster than eager "
                      "(GB/s: bytes moved / time)",
                      fontsize=9.5, loc="left")
    ax_time.grid(axis="y", alpha=0.3)
    if "error" in torch:
        ax_time.text(0.99, 0.97, f"torch: {torch['error'][:60]}", transform=ax_time.transAxes,
                     ha="right", va="top", fontsize=7, color="#666666")


def draw(data, plt):
    fig = plt.figure(figsize=(13, 10.5))
    grid = fig.add_gridspec(2, 2, height_ratios=[1.75, 1], hspace=0.28, wspace=0.22,
                            top=0.89, bottom=0.12, left=0.07, right=0.97)
    draw_eager(fig.add_subplot(grid[0, 0]), data)
    draw_fused(fig.add_subplot(grid[0, 1]), data)
    draw_bars(fig.add_subplot(grid[1, 0]), fig.add_subplot(grid[1, 1]), data)
    shapes = ", ".join(f"{name} {shape}" for name, shape in data["shapes"].items())
    fig.text(0.07, 0.935, f"{data['program']} on {data['device']}, float32, {shapes}",
             fontsize=10)
    return fig
