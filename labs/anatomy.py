"""Lab -- the anatomy of a compile: one function through every stage, as each stage sees it.

Two programs go through mini.compile, and the lab prints what every stage made of them:

    inference   relu(x @ w + b)
    training    a training step of a small MLP: forward, mean squared error, loss.backward()

one section per stage, each the real artifact (trimmed, with the path of the whole file):

    1. frame hook and bytecode   the bytecode CPython hands to mini's frame hook (Python's dis)
    2. capture                   the graph symbolic evaluation of that bytecode recorded
    3. guards                    what must still hold for the cached graph to be used
    4. AOT autograd              the joint forward+backward graph and its partition
    5. fusion                    the kernels, and the reason for each fusion decision
    6. generated code            the C++ of each kernel, and the CUDA the same graph renders to
    7. time                      the first call, stage by stage; a disk-cache hit; a cached call

Each program is compiled in two fresh processes of this file: the first with
MINI_COMPILE_DEBUG=1 (read once per process) and an empty kernel cache, the second with that
cache filled, as a user's second run finds it; the second also renders the graph as CUDA
(mini.inductor.compile_graph_cuda: NVRTC compiles it without a GPU) and, with --device cuda
on a GPU, runs the CUDA kernels of relu(x @ w + b). Without a GPU --device cuda says so in one
line and writes the same CPU report, CUDA source included.

    PYTHONPATH=build/python .venv/bin/python labs/anatomy.py [--quick] [--out DIR]
                                                        [--device cpu|cuda]

Writes into --out (default figures/): anatomy.txt (relu(x @ w + b)), anatomy_training.txt
(the training step), anatomy.json (the facts: ops per graph, guards, kernels, lines of code,
times), anatomy.png/.svg (time per stage) and anatomy_debug/<program>/ (each program's
MINI_COMPILE_DEBUG folder, with the CUDA source beside the C++).
"""

import argparse
import collections
import dis
import inspect
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import mini
import mini.inductor
import mini.nn as nn
import mini.nn.functional as F

from measure import (REPO_ROOT, Progress, cuda_unavailable_reason, per_call_us, pyplot,
                     save_figure, write_json)

SIZES = {  # inference: x [rows, inner] @ w [inner, cols]; training: an MLP on [batch, inner]
    "quick": {"rows": 64, "inner": 32, "cols": 16, "batch": 16, "hidden": 64, "classes": 10,
              "sample_seconds": 0.05, "samples": 3},
    "full": {"rows": 512, "inner": 256, "cols": 128, "batch": 128, "hidden": 512, "classes": 10,
             "sample_seconds": 0.2, "samples": 5},
}
REPORTS = {"inference": "anatomy.txt", "training": "anatomy_training.txt"}
SECTIONS = [
    ("frame hook and bytecode", "CPython hands each new frame of the compiled function to "
     "mini's PEP 523 hook, which reads its bytecode instead of running it"),
    ("capture", "the bytecode is evaluated symbolically: every tensor operation becomes a node "
     "of a graph, everything else is decided while tracing"),
    ("guards", "what must still be true of the inputs and globals for the cached graph to run "
     "instead of the bytecode"),
    ("AOT autograd", "a graph whose inputs require grad is traced once more with its backward "
     "(the joint graph), then partitioned into a forward and a backward graph"),
    ("fusion", "which operations share one kernel (their intermediates never touch memory), "
     "and the reason for each decision"),
    ("generated code", "each kernel as C++ for the CPU (the C++ compiler, loaded with dlopen) "
     "and as CUDA for the GPU (NVRTC)"),
    ("time", "what the first call costs, stage by stage, against a disk-cache hit and a "
     "cached call"),
]
STAGE_NOTES = {"capture": "symbolic evaluation and guards", "joint graph": "AOT: joint graph "
               "and partition", "fusion": "the scheduler", "codegen": "the source text",
               "compile": "the C++ compiler, dlopen", "disk cache": "a compiled .so read, checked",
               "first run": "the compiled code's first call"}
VIEW_OPS = {"transpose", "reshape", "view", "expand", "permute", "t", "unsqueeze", "squeeze",
            "slice", "select", "as_strided", "flatten", "narrow", "unflatten"}
EXTERN_OPS = {"matmul", "mm", "bmm", "addmm"}
KERNEL_COMMENT = re.compile(r"^// ((?:cpp|cuda)_\w+): graph nodes (.*)$", re.M)
GRAPH_NODE = re.compile(r'^\s*(\w+): "[^"]*" = mini\.(\w+)\((.*)\)$', re.M)
GUARD_KIND = re.compile(r"\+- ([A-Z][A-Z_]+):")


# ---- the two programs -----------------------------------------------------------------------


def relu_linear(x, w, b):
    return mini.relu(x @ w + b)


class MLP(nn.Module):
    def __init__(self, inner, hidden, classes):
        super().__init__()
        self.fc1 = nn.Linear(inner, hidden)
        self.fc2 = nn.Linear(hidden, classes)

    def forward(self, x):
        return self.fc2(F.relu(self.fc1(x)))


def training_step(model, x, y):
    loss = F.mse_loss(model(x), y)
    loss.backward()
    return loss


def make_program(name, size):
    """(function, its arguments) for "inference" or "training", seeded."""
    mini.manual_seed(0)
    if name == "inference":
        return relu_linear, (mini.randn(size["rows"], size["inner"]),
                             mini.randn(size["inner"], size["cols"]), mini.randn(size["cols"]))
    model = MLP(size["inner"], size["hidden"], size["classes"])
    return training_step, (model, mini.randn(size["batch"], size["inner"]),
                           mini.randn(size["batch"], size["classes"]))


# ---- compile stage times (mini.compiler.stats, where this build has it) ----------------------


def reset_stage_times():
    if hasattr(mini.compiler, "reset_stats"):
        mini.compiler.reset_stats()


def compile_stage_times():
    """({stage: {"seconds", "count"}}, {"frames", "units"}) since reset_stage_times(), from
    mini's own clocks (mini.compiler.stats(): capture, joint graph, fusion, codegen, compile or
    disk cache, first run), or (None, None) in a build without it: the report then shows only
    the totals this lab measures around each call."""
    if not hasattr(mini.compiler, "stats"):
        return None, None
    stats = mini.compiler.stats()
    return ({name: dict(t) for name, t in stats["stages"].items()},
            {"frames": stats["frames"], "units": stats["units"]})


# ---- the child processes: measure, then hand the numbers to the parent as JSON --------------


def result_of(fn, args, training):
    """The output and, for the training step, every parameter's gradient (zeroed first)."""
    if training:
        args[0].zero_grad()
    out = fn(*args)
    grads = [p.grad for p in args[0].parameters()] if training else []
    return [out.detach()] + grads


def bytecode_of(fn):
    """[line, offset, opname, argrepr] per instruction, and {line: source text}."""
    lines, start = inspect.getsourcelines(fn)
    source = {start + i: text.rstrip() for i, text in enumerate(lines)}
    instructions = [[ins.positions.lineno if ins.positions else None, ins.offset, ins.opname,
                     ins.argrepr] for ins in dis.get_instructions(fn)]
    return instructions, source


def measure_cold(name, size):
    """The first process: MINI_COMPILE_DEBUG is on and the kernel cache empty."""
    fn, args = make_program(name, size)
    instructions, source = bytecode_of(fn)
    timing = (size["sample_seconds"], size["samples"])
    training = name == "training"
    eager = result_of(fn, args, training)
    eager_us = per_call_us(lambda: fn(*args), *timing)
    compiled = mini.compile(fn)
    reset_stage_times()
    start = time.perf_counter()
    result = result_of(compiled, args, training)
    first_ms = (time.perf_counter() - start) * 1e3
    stages, hook = compile_stage_times()
    inputs = ", ".join(f"f32{list(a.shape)}" if isinstance(a, mini.Tensor) else type(a).__name__
                       for a in args)
    return {"instructions": instructions, "source": source, "inputs": inputs,
            "eager_call_us": eager_us, "first_call_ms": first_ms, "stages": stages, "hook": hook,
            "cached_call_us": per_call_us(lambda: compiled(*args), *timing),
            "max_abs_diff_vs_eager": max(float((a - b).abs().max().item())
                                         for a, b in zip(result, eager)),
            "python": sys.version.split()[0]}


def render_cuda(name, graph):
    """The captured graph rendered as CUDA and compiled by NVRTC (no GPU needed)."""
    if mini.inductor.nvrtc_version() is None:
        return {"rendered": False,
                "reason": "this build has no NVRTC: " + mini._C._nvrtc_unavailable_reason()}
    start = time.perf_counter()
    try:
        if name == "inference":
            info = mini.inductor.compile_graph_cuda(graph)
            files = {"output_code.cu": info["source"]}
            kernels = {"graph": info["kernels"]}
        else:  # the joint graph partitioned as inductor does, each half rendered (no public name)
            info = mini._C._inductor_compile_training_cuda(graph, "")
            files = {"output_code_forward.cu": info["forward_source"],
                     "output_code_backward.cu": info["backward_source"]}
            kernels = {"forward": info["forward_kernels"], "backward": info["backward_kernels"]}
    except RuntimeError as error:
        return {"rendered": False, "reason": f"CUDA code generation failed: {error}"}
    return {"rendered": True, "arch": info.get("arch") or mini.inductor.default_cuda_arch(),
            "nvrtc": mini.inductor.nvrtc_version(), "files": files, "kernels": kernels,
            "wall_ms": (time.perf_counter() - start) * 1e3, "run": info["run"]}


def run_on_gpu(run, args, size):
    """relu(x @ w + b)'s CUDA kernels on the GPU: first call, a call, error against the CPU."""
    inputs = [a.to("cuda") for a in args]
    sync = mini.cuda.synchronize
    try:
        start = time.perf_counter()
        out = run(*inputs)[0]
        sync()
        first_ms = (time.perf_counter() - start) * 1e3
        call_us = per_call_us(lambda: run(*inputs), size["sample_seconds"], size["samples"],
                              sync=sync)
        diff = float((out.cpu() - relu_linear(*args)).abs().max().item())
    except RuntimeError as error:
        return {"error": str(error)}
    return {"device_name": mini.cuda.get_device_name(0), "first_call_ms": first_ms,
            "call_us": call_us, "max_abs_diff_vs_cpu": diff}


def measure_warm(name, size, device):
    """The second process: the kernel cache filled by the first, MINI_COMPILE_DEBUG off."""
    fn, args = make_program(name, size)
    fn(*args)  # eagerly once, as the first process did: thread pools and BLAS start off the clock
    compiled = mini.compile(fn)
    reset_stage_times()
    start = time.perf_counter()
    compiled(*args)
    first_ms = (time.perf_counter() - start) * 1e3
    stages, _ = compile_stage_times()
    explained = mini.explain(fn)(*args)  # the captured graphs, for the CUDA renderer
    cuda = render_cuda(name, explained.graphs[0])
    run = cuda.pop("run", None)
    if run and device == "cuda" and name == "inference":
        cuda["gpu"] = run_on_gpu(run, args, size)
    return {"first_call_ms": first_ms, "stages": stages, "graph": explained.graphs[0].name,
            "graph_count": explained.graph_count,
            "graph_break_count": explained.graph_break_count,
            "break_reasons": [b.reason for b in explained.break_reasons], "cuda": cuda}


def child_main(args):
    size = SIZES["quick" if args.quick else "full"]
    mini.config.cache_dir = str(args.cache_dir)
    if args.phase == "cold":
        result = measure_cold(args.program, size)
    else:
        result = measure_warm(args.program, size, args.device)
    Path(args.result).write_text(json.dumps(result))
    return 0


def run_child(program, phase, work, args, progress):
    """Runs this file as `phase` of `program` in a new process, in `work`; returns its JSON."""
    result = work / f"{phase}.json"
    command = [sys.executable, __file__, "--phase", phase, "--program", program,
               "--result", str(result), "--cache-dir", str(work / "kernels"),
               "--device", args.child_device] + (["--quick"] if args.quick else [])
    env = dict(os.environ)  # the child runs in `work`: the mini this process imported, by path
    package_dir = str(Path(mini.__file__).resolve().parents[1])
    env["PYTHONPATH"] = os.pathsep.join([package_dir] + [p for p in [env.get("PYTHONPATH")] if p])
    env.pop("MINI_LOGS", None)
    env.pop("MINI_COMPILE_DEBUG", None)
    if phase == "cold":
        env["MINI_COMPILE_DEBUG"] = "1"
    how = "empty kernel cache, MINI_COMPILE_DEBUG=1" if phase == "cold" else "kernels on disk"
    progress.say(f"{program}: {phase} process ({how})")
    done = subprocess.run(command, cwd=work, env=env, timeout=600)
    if done.returncode != 0:
        sys.exit(f"anatomy: the {phase} process of {program} failed (exit {done.returncode})")
    return json.loads(result.read_text())


# ---- reading the artifacts ------------------------------------------------------------------


def graph_ops(text):
    """{op: count} and [node names] of a printed graph (graph_code, aot_*_graph)."""
    nodes = GRAPH_NODE.findall(text)
    return dict(collections.Counter(op for _, op, _ in nodes)), [n for n, _, _ in nodes]


def reads_tangents(graph_text):
    """The nodes of a graph that depend on tangents_1 (the gradient side of a joint graph)."""
    grads = {"tangents_1"}
    for node, _, arguments in GRAPH_NODE.findall(graph_text):
        if grads & set(re.findall(r"\w+", arguments)):
            grads.add(node)
    return grads - {"tangents_1"}


def format_graph(text):
    """A printed graph with its forward() parameters one a line (the file has them on one)."""
    def split(match):
        params = re.findall(r'\w+: "[^"]*"', match.group(2))
        indent = " " * (len(match.group(1)) + 8)
        lines = ",\n".join(indent + p for p in params)
        return f"{match.group(1)}def forward(self,\n{lines}):"
    return re.sub(r"^( *)def forward\(self, (.*)\):$", split, text.rstrip(), flags=re.M)


def trim_guards(text, limit=30):
    """The guard tree; past `limit` lines, without the ID_MATCH / NONE_MATCH pairs (the
    identity of each function and global the code read), which are counted instead."""
    lines = text.rstrip().splitlines()
    if len(lines) <= limit:
        return text.rstrip()
    kept, left_out, i = [], 0, 0
    while i < len(lines):
        after = lines[i + 1] if i + 1 < len(lines) else ""
        if "GuardManager: source=" in lines[i] and re.search(r"\+- (ID|NONE)_MATCH:", after):
            left_out, i = left_out + 1, i + 2
            continue
        kept.append(lines[i])
        i += 1
    return "\n".join(kept) + (f"\n  ... and {left_out} ID_MATCH / NONE_MATCH guards (the "
                              "identity of each function and global the code read), left out")


def split_source(source):
    """((first, last) line of the prelude, counted from 1, or None; the kernels after it) of a
    generated C++ or CUDA source."""
    lines = source.splitlines()
    begin = next((i for i, line in enumerate(lines) if "---- prelude" in line), None)
    end = next((i for i, line in enumerate(lines) if "---- end of prelude" in line), None)
    if begin is None or end is None:
        return None, source
    return (begin + 1, end + 1), "\n".join(lines[end + 1:]).strip("\n")


def kernels_in(source):
    """{kernel name: [graph nodes]} from the comment above each generated kernel."""
    return {name: nodes.split() for name, nodes in KERNEL_COMMENT.findall(source)}


def show_kernels(body, budget, file_name):
    """Whole kernels until `budget` lines are shown; the rest named with their length."""
    chunks = re.split(r"(?m)^(?=// (?:cpp|cuda)_\w+: graph nodes)", body)
    shown, rest = [], []
    for chunk in (c.strip("\n") for c in chunks if c.strip()):
        lines = chunk.count("\n") + 1
        if not shown or sum(c.count("\n") + 1 for c in shown) + lines <= budget:
            shown.append(chunk)
        else:
            rest.append(f"{KERNEL_COMMENT.match(chunk).group(1)} ({lines} lines)")
    more = f"\n\n// ... and {', '.join(rest)}: in {file_name}" if rest else ""
    return "\n\n".join(shown) + more


def outside_kernels(graph_text, kernels):
    """The graph nodes in no kernel, grouped by why: extern calls, views, decomposed ops."""
    in_kernels = {n for nodes in kernels.values() for n in nodes}
    decomposed = sorted(in_kernels - set(graph_ops(graph_text)[1]))
    groups = collections.defaultdict(list)
    for node, op, _ in GRAPH_NODE.findall(graph_text):
        if node in in_kernels:
            continue
        if op in EXTERN_OPS:
            why = "extern calls: a library matmul (OpenBLAS here, cuBLAS on a GPU), no kernel"
        elif op in VIEW_OPS:
            why = ("views: no kernel, only new sizes and strides; the kernel that reads one "
                   "indexes the buffer under it")
        elif decomposed:
            why = ("composite ops, decomposed before fusion (fusion/decompose.cpp) into nodes "
                   f"the kernels name and the graph does not: {', '.join(decomposed)}")
        else:
            why = "in no generated kernel"
        groups[why].append(node if op == node.rstrip("_0123456789") else f"{node} ({op})")
    return [f"  {', '.join(nodes)}: {why}" for why, nodes in groups.items()]


def halves(folder):
    """[""] for an inference graph, ["_forward", "_backward"] for a training graph."""
    return ["_forward", "_backward"] if (folder / "fusion_forward.txt").exists() else [""]


# ---- the report: one section per stage --------------------------------------------------------


def section_bytecode(cold, warm, breaks):
    break_lines = {}
    for text in breaks.values():
        match = re.search(r"at .*:(\d+) in \w+\nGraph Break Reason: (.*)", text)
        if match:
            break_lines[int(match.group(1))] = match.group(2)
    out, last = [], None
    for line, offset, opname, arg in cold["instructions"]:
        if line != last and line is not None:
            mark = f"      <-- graph break: {break_lines[line]}" if line in break_lines else ""
            out.append(f"  line {line}: {cold['source'].get(str(line), '').strip()}{mark}")
            last = line
        out.append(f"      {offset:>4} {opname:<24}{arg}".rstrip())
    if cold["hook"]:
        f, u = cold["hook"]["frames"], cold["hook"]["units"]
        out.append(f"\nthe hook at the first call (mini.compiler.stats()): {f['seen']} frame(s) "
                   f"seen, {f['captured']} captured, {sum(f['skipped'].values())} skipped; "
                   f"{u['compiles']} unit(s) compiled, {warm['graph_count']} with a graph (a unit "
                   "is the code from the start, or from just after a graph break; one without "
                   "tensor ops has no graph)")
    return "\n".join(out)


def section_capture(folder, warm, breaks, program):
    text = (folder / "graph_code.txt").read_text()
    ops, _ = graph_ops(text)
    counts = ", ".join(f"{op} {n}" for op, n in ops.items())
    out = [format_graph(text), "", f"{sum(ops.values())} ops ({counts}); {warm['graph_count']} "
           f"graph(s), {len(warm['break_reasons'])} graph break(s) (mini.explain)"]
    if len(warm["break_reasons"]) != warm["graph_break_count"]:
        out[-1] += (f"; explain's graph_break_count is {warm['graph_break_count']}: it counts "
                    "graphs - 1, as torch's does, and no graph follows this break")
    if program == "training":
        out.append("model(x) is inlined: capture steps into MLP.forward and mini.nn's "
                   "Linear.forward and records their ops; each # File line says where from.")
    for name, text in sorted(breaks.items()):
        out += ["", f"graph_breaks/{name}:", text.rstrip()]
    if breaks and program == "training":
        out.append("(as in torch.compile without compiled autograd: the graph ends at the loss, "
                   "and loss.backward(), run by CPython, runs the backward graph of section 4)")
    return "\n".join(out), ops


def section_guards(folder):
    text = (folder / "guards.txt").read_text()
    kinds = collections.Counter(GUARD_KIND.findall(text))
    facts = {"guard_count": sum(kinds.values()), "guard_kinds": dict(kinds)}
    listed = ", ".join(f"{kind} {n}" for kind, n in kinds.most_common())
    return (trim_guards(text) + f"\n\n{facts['guard_count']} guards ({listed}); a call checks "
            "them before it runs the cached graph: one failing means another cache entry or a "
            "recompile"), facts


def section_aot(folder):
    if not (folder / "aot_joint_graph.txt").exists():
        return ("none: no input of this graph requires grad, so it is an inference graph and "
                "goes to fusion as it is (anatomy_training.txt shows a joint graph)"), {}
    texts = {part: (folder / f"aot_{part}_graph.txt").read_text()
             for part in ("joint", "forward", "backward")}
    facts, out = {part: graph_ops(text)[0] for part, text in texts.items()}, []
    for part, text in texts.items():
        out += [f"-- aot_{part}_graph.txt", format_graph(text), ""]
    joint_grads = reads_tangents(texts["joint"])
    first_grad = next(n for n in graph_ops(texts["joint"])[1] if n in joint_grads)
    saved = re.search(r"return \((.*)\)", texts["forward"]).group(1).split(", ")[1:]
    grads = reads_tangents(texts["backward"])
    backward = GRAPH_NODE.findall(texts["backward"])
    recomputed = [n for n, op, _ in backward if n not in grads and op not in VIEW_OPS]
    facts |= {"saved_for_backward": saved, "recomputed_in_backward": recomputed}
    out.append(
        "The joint graph is the forward, then the backward from its first node that reads "
        f"tangents_1 ({first_grad}): tangents_1 is the gradient flowing into the loss (1.0 when "
        "loss.backward() runs); the joint graph returns a gradient per input that requires "
        f"grad.\nThe partition cuts it in two: the forward returns the loss and saves "
        f"{len(saved)} values for the backward ({', '.join(saved)});\nthe backward "
        f"({len(backward)} nodes) computes {', '.join(recomputed) or 'nothing'} from the saved "
        "values alone (they do not read tangents_1): the recompute partitioner (inductor's) "
        "saves inputs and the outputs of costly ops (matmuls, reductions, composites) and "
        "recomputes cheap pointwise ops in the backward, where fusion folds them into the "
        "kernels that read them (notes/autograd.md).")
    return "\n".join(out), facts


def section_fusion(folder):
    out, facts = [], {}
    for suffix in halves(folder):
        decisions = (folder / f"fusion{suffix}.txt").read_text().rstrip()
        lines = [line.strip() for line in decisions.splitlines()[1:]]
        kernels = kernels_in((folder / f"output_code{suffix}.cpp").read_text())
        graph = (folder / (f"aot{suffix}_graph.txt" if suffix else "graph_code.txt")).read_text()
        outside = outside_kernels(graph, kernels)
        out += [f"-- fusion{suffix}.txt", decisions, "",
                "kernels (from the comments of the generated code):"]
        out += [f"  {k}: {' '.join(nodes)}" for k, nodes in kernels.items()]
        out += (["graph nodes in no kernel:"] + outside if outside else []) + [""]
        facts[suffix.strip("_") or "graph"] = {
            "kernels": kernels, "decisions": lines,
            "fused": sum(line.startswith("fuse ") for line in lines),
            "not_fused": sum(line.startswith(("cannot fuse", "close ")) for line in lines)}
    return "\n".join(out).rstrip(), facts


def code_block(name, source, prelude_is, budget):
    lines, body = split_source(source)
    prelude = f"lines {lines[0]}-{lines[1]} are the prelude, {prelude_is}, left out here" \
        if lines else "no prelude"
    facts = {"lines": source.count("\n"), "kernels": list(kernels_in(source)),
             "prelude_lines": lines[1] - lines[0] + 1 if lines else 0}
    return [f"-- {name} ({source.count(chr(10))} lines; {prelude})",
            show_kernels(body, budget, name), ""], facts


def section_code(folder, cuda, budget):
    out, facts = [], {"cpp": {}, "cuda": {}}
    for suffix in halves(folder):
        name = f"output_code{suffix}.cpp"
        block, facts["cpp"][name] = code_block(name, (folder / name).read_text(),
                                               "mini/tensor/scalar_math.h", budget)
        out += block
    if not cuda["rendered"]:
        return "\n".join(out + [f"-- CUDA: not rendered here: {cuda['reason']}"]), facts
    out.append(f"The same graph rendered as CUDA by mini/codegen/cuda_kernel.cpp and compiled by "
               f"NVRTC {cuda['nvrtc']} for {cuda['arch']} (no GPU needed); this lab writes each "
               "source beside the C++, under the name mini gives it for a graph of CUDA tensors:\n")
    for name, source in cuda["files"].items():
        (folder / name).write_text(source)
        block, facts["cuda"][name] = code_block(name, source, "what NVRTC lacks, scalar_math.h",
                                                budget)
        out += block
    return "\n".join(out).rstrip(), facts


def stage_rows(label, total_ms, stages):
    rows = [(label, total_ms)]
    if stages is None:
        return rows + [("   (this build has no mini.compiler.stats(): no stage split)", None)]
    for name, t in stages.items():
        if t["count"]:
            count = f", {t['count']}x" if t["count"] > 1 else ""
            rows.append((f"   {name} ({STAGE_NOTES.get(name, '')}{count})", t["seconds"] * 1e3))
    inside = sum(t["seconds"] for t in stages.values()) * 1e3
    return rows + [("   the rest (the hook, Python, running the graph)",
                    max(total_ms - inside, 0.0))]


def section_time(program, cold, warm):
    rows = stage_rows("first call, empty kernel cache (a new process)", cold["first_call_ms"],
                      cold["stages"])
    rows += stage_rows("first call, kernels in the disk cache (a new process)",
                       warm["first_call_ms"], warm["stages"])
    rows.append(("cached call (guards checked, then the compiled code)", cold["cached_call_us"]))
    rows.append(("eager call (one kernel per op, no compile)", cold["eager_call_us"]))
    cuda = warm["cuda"]
    if cuda["rendered"]:
        rows.append((f"CUDA: render and NVRTC for {cuda['arch']} (no GPU needed)", cuda["wall_ms"]))
    gpu = cuda.get("gpu", {})
    if "call_us" in gpu:
        rows.append((f"CUDA kernels on {gpu['device_name']}, first call", gpu["first_call_ms"]))
        rows.append(("CUDA kernels, a call", gpu["call_us"]))
    out = []
    for label, value in rows:
        unit = "us" if label.startswith(("cached", "eager", "CUDA kernels, a")) else "ms"
        out.append(f"  {label:<60}" + ("" if value is None else f"{value:10.2f} {unit}"))
    if "error" in gpu:
        out.append(f"  the CUDA kernels did not run on the GPU: {gpu['error']}")
    what = "the loss and every gradient" if program == "training" else "the result"
    out.append(f"\ncompiled against eager: largest difference {cold['max_abs_diff_vs_eager']:.2e} "
               f"({what}). Times are this machine's in this run: counts do not move, times do.")
    return "\n".join(out)


def build_report(program, cold, warm, debug, quick):
    """The report's text and the program's facts (the JSON), from the two processes' numbers
    and the MINI_COMPILE_DEBUG folder `debug`."""
    folder = debug / warm["graph"]
    breaks = {p.name: p.read_text() for p in sorted(debug.glob("graph_breaks/*.txt"))}
    title = {"inference": "relu(x @ w + b), inference", "training": "a training step of a "
             "small MLP: forward, mean squared error, loss.backward()"}[program]
    source = [f"    {text}" for _, text in sorted(cold["source"].items(), key=lambda l: int(l[0]))]
    parts = ["=" * 96, f"anatomy of {title}", f"inputs: {cold['inputs']}  (Python "
             f"{cold['python']}, {'--quick' if quick else 'full'} sizes)",
             f"artifacts: {folder} (MINI_COMPILE_DEBUG=1)", "=" * 96] + source
    capture, ops = section_capture(folder, warm, breaks, program)
    guards, guard_facts = section_guards(folder)
    aot, aot_facts = section_aot(folder)
    fusion, fusion_facts = section_fusion(folder)
    code, code_facts = section_code(folder, warm["cuda"], 60 if program == "inference" else 45)
    bodies = [section_bytecode(cold, warm, breaks), capture, guards, aot, fusion, code,
              section_time(program, cold, warm)]
    for number, ((name, what), body) in enumerate(zip(SECTIONS, bodies), 1):
        parts += [f"\n== {number}. {name}: {what}\n", body]
    times = {"first_call_ms": cold["first_call_ms"], "cached_call_us": cold["cached_call_us"],
             "eager_call_us": cold["eager_call_us"], "stages_cold": cold["stages"],
             "first_call_disk_cache_ms": warm["first_call_ms"], "stages_disk_cache": warm["stages"]}
    facts = {"inputs": cold["inputs"], "bytecode_instructions": len(cold["instructions"]),
             "graph_ops": ops, "graph_count": warm["graph_count"],
             "graph_break_count": warm["graph_break_count"],
             "break_reasons": warm["break_reasons"], "breaks": list(breaks.values()),
             **guard_facts, "aot": aot_facts, "fusion": fusion_facts,
             "generated_code": code_facts,
             "cuda": {k: v for k, v in warm["cuda"].items() if k != "files"}, "times": times,
             "max_abs_diff_vs_eager": cold["max_abs_diff_vs_eager"], "debug_dir": str(folder)}
    return "\n".join(parts) + "\n", facts


# ---- the figure -----------------------------------------------------------------------------


def plot(results, out_dir):
    """Per program: each stage of the first call (empty kernel cache, disk cache), the totals,
    a cached call and an eager call, on a log scale (a C++ compile against microseconds)."""
    plt = pyplot()
    fig, axes = plt.subplots(1, len(results), figsize=(11, 4.2), sharex=True)
    for ax, (program, facts) in zip(axes, results.items()):
        t = facts["times"]
        cold, warm = t["stages_cold"] or {}, t["stages_disk_cache"] or {}
        rows = [(name, cold[name]["seconds"] * 1e3, warm.get(name, {"seconds": 0})["seconds"] * 1e3)
                for name in cold]
        rows = [row for row in rows if row[1] or row[2]]
        rows += [("first call (total)", t["first_call_ms"], t["first_call_disk_cache_ms"]),
                 ("cached call", t["cached_call_us"] / 1e3, 0),
                 ("eager call", t["eager_call_us"] / 1e3, 0)]
        y = range(len(rows))
        ax.barh([i - 0.2 for i in y], [r[1] for r in rows], height=0.4, color="#4C72B0",
                label="first process: empty kernel cache (cached, eager: calls after it)")
        ax.barh([i + 0.2 for i in y], [r[2] for r in rows], height=0.4, color="#64B5CD",
                label="second process: kernels in the disk cache")
        ax.set_yticks(list(y))
        ax.set_yticklabels([r[0] for r in rows], fontsize=8)
        ax.invert_yaxis()
        ax.set_xscale("log")
        ax.set_xlabel("milliseconds (log scale)")
        ax.set_title({"inference": "relu(x @ w + b)", "training": "MLP training step"}[program],
                     fontsize=10)
    fig.legend(*axes[0].get_legend_handles_labels(), loc="lower center", ncol=2, fontsize=8)
    fig.suptitle("where the first call's time goes (mini.compiler.stats()), against a cached "
                 "call", fontsize=11)
    fig.tight_layout(rect=(0, 0.07, 1, 1))
    paths = save_figure(fig, out_dir, "anatomy")
    plt.close(fig)
    return paths


# ---- the command line -----------------------------------------------------------------------


def parse_args(argv):
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--out", type=Path, default=REPO_ROOT / "figures",
                        help="folder for the reports, the JSON, the figure and anatomy_debug/")
    parser.add_argument("--quick", action="store_true", help="small tensors, short timings")
    parser.add_argument("--device", choices=["cpu", "cuda"], default="cpu")
    for hidden in ("--phase", "--program", "--result", "--cache-dir"):  # the child processes'
        parser.add_argument(hidden, help=argparse.SUPPRESS)
    return parser.parse_args(argv)


def main(argv=None):
    args = parse_args(argv)
    if args.phase:
        return child_main(args)
    args.out = args.out.resolve()
    args.out.mkdir(parents=True, exist_ok=True)
    args.child_device = "cpu"
    if args.device == "cuda":
        reason = cuda_unavailable_reason()
        if reason:
            print(f"anatomy: --device cuda: no CUDA device ({reason}); the report runs on the "
                  "CPU and shows the CUDA source NVRTC compiles without a GPU", flush=True)
        else:
            args.child_device = "cuda"
    progress = Progress("anatomy")
    debug_root = args.out / "anatomy_debug"
    shutil.rmtree(debug_root, ignore_errors=True)
    results, reports = {}, []
    for program in REPORTS:
        with tempfile.TemporaryDirectory(prefix="mini-anatomy-") as work:
            cold = run_child(program, "cold", Path(work), args, progress)
            warm = run_child(program, "warm", Path(work), args, progress)
            (run_dir,) = (Path(work) / "mini_compile_debug").iterdir()
            shutil.move(str(run_dir), debug_root / program)
        report, results[program] = build_report(program, cold, warm, debug_root / program,
                                                args.quick)
        (args.out / REPORTS[program]).write_text(report)
        reports.append(report)
    print("\n".join(reports))
    figure_paths = plot(results, args.out)
    json_path = write_json(args.out, "anatomy", {
        "lab": "anatomy", "device": args.device, "ran_on": args.child_device,
        "quick": args.quick, "sections": [name for name, _ in SECTIONS], "programs": results,
        "reports": {p: str(args.out / name) for p, name in REPORTS.items()},
        "debug_dir": str(debug_root)})
    written = [args.out / name for name in REPORTS.values()] + figure_paths + [json_path]
    print("wrote " + ", ".join(str(path) for path in written + [debug_root]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
