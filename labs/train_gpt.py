"""Lab -- a small GPT, trained for real: eager, compiled whole, compiled by region.

A character-level GPT (labs/gpt.py: token and position embeddings, causal self-attention
through F.scaled_dot_product_attention, GELU MLP, LayerNorm, output head tied to the token
embedding), written for torch's API with only its imports naming mini, learns the text of
the project's own notes (notes/*.md). Three ways to train it, each from the same seed on the
same batches:

    eager       the model as written
    compiled    mini.compile(model): one graph for the forward, its joint backward
    regional    each block compiled in place (Module.compile): one graph for every block

For each: the loss at every step (the three curves agree: compilation changes no math), the
training speed in tokens a second (median step after the first), the first step's extra time
(capture and compile, into an empty kernel cache), the graphs and graph breaks of the training
step (mini.explain), the kernels launched per step (mini.metrics), and the peak tensor memory
of a step (mini.metrics.max_memory_allocated; on CUDA mini.cuda.max_memory_allocated). Then a
few lines sampled from the eager model. Where torch imports (the GPU machine), the same file
runs under torch beside them (its three imports naming torch instead), from mini's initial
weights on the same batches: torch eager and torch.compile, their losses, tokens a second and
peak memory, and mini's compiled step against torch.compile's (--no-torch skips them).

    PYTHONPATH=build/python .venv/bin/python labs/train_gpt.py [--quick] [--out DIR]
        [--device cpu|cuda] [--steps N] [--autocast]

--autocast runs every mode's forward under autocast(device, dtype=bfloat16) (mini.autocast,
and torch.autocast for torch's modes): matmuls in bfloat16, the rest as autocast decides.

Writes train_gpt.png/.svg (loss against step per mode) and train_gpt.json into --out
(default: figures/); under --autocast train_gpt_autocast.*.
"""

import argparse
import contextlib
import platform
import statistics
import sys
import time
from pathlib import Path

import numpy as np

import mini

from gpt import GPT, Config
from measure import REPO_ROOT, cold_kernel_cache, cuda_unavailable_reason, pyplot, save_figure, write_json

MODES = ("eager", "compiled", "regional")


def corpus():
    """The notes' text and its characters: the vocabulary."""
    text = "\n".join(p.read_text() for p in sorted((REPO_ROOT / "notes").glob("*.md")))
    chars = sorted(set(text))
    return np.array([chars.index(c) for c in text], dtype=np.int64), chars


def batches(data, config, batch, steps, seed):
    """`steps` (inputs, next characters) pairs of random windows, the same for every mode."""
    rng = np.random.default_rng(seed)
    out = []
    for _ in range(steps):
        start = rng.integers(0, len(data) - config.block_size - 1, size=batch)
        x = np.stack([data[s:s + config.block_size] for s in start])
        y = np.stack([data[s + 1:s + 1 + config.block_size] for s in start])
        out.append((x, y))
    return out


def train(mode, config, data, args):
    mini.manual_seed(0)
    model = GPT(config).to(args.device)
    if mode == "compiled":
        step_fn = mini.compile(model)
    else:
        if mode == "regional":
            for block in model.transformer.h:
                block.compile()
        step_fn = model
    opt = model.configure_optimizers(weight_decay=0.1, learning_rate=args.lr, betas=(0.9, 0.95),
                                     device_type=args.device)
    losses, seconds, kernels = [], [], []
    explained = None
    cuda = args.device == "cuda"
    for i, (x, y) in enumerate(batches(data, config, args.batch, args.steps, seed=1)):
        x, y = mini.from_numpy(x).to(args.device), mini.from_numpy(y).to(args.device)
        before = mini.metrics.kernel_launches
        if i == 1 and cuda:  # the first step compiles: the peak is the steady steps'
            mini.cuda.reset_peak_memory_stats()
        elif i == 1:
            mini.metrics.reset_peak_memory()
        t0 = time.perf_counter()
        with cold_kernel_cache("inductor" if i == 0 else None):  # the first step compiles for real
            with mixed_precision(mini, args):
                _, loss = step_fn(x, y)
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
            value = float(loss.item())  # waits for the step
        seconds.append(time.perf_counter() - t0)
        if i == 0 and mode != "eager":  # the graphs one training step makes
            explained = mini.explain(model if mode == "compiled" else model.transformer.h[0])(
                *((x, y) if mode == "compiled" else (model.transformer.wte(x),)))
        kernels.append(mini.metrics.kernel_launches - before)
        losses.append(value)
    # the most tensor memory alive at once in a step after the first (model, optimizer state,
    # activations saved for the backward, gradients)
    peak = mini.cuda.max_memory_allocated() if cuda else mini.metrics.max_memory_allocated
    steady = statistics.median(seconds[1:]) if len(seconds) > 1 else seconds[0]
    phases = phases_ms(step_fn, opt, x, y, mini.cuda.synchronize if cuda else (lambda: None),
                       lambda: mixed_precision(mini, args))
    return model, {
        "losses": losses,
        "step_ms": steady * 1e3,
        "tokens_per_s": args.batch * config.block_size / steady,
        "first_step_extra_s": seconds[0] - steady,
        "graphs": explained.graph_count if explained else 0,
        "graph_breaks": explained.graph_break_count if explained else 0,
        "kernels_per_step": statistics.median(kernels[1:]) if len(kernels) > 1 else kernels[0],
        "peak_memory_bytes": peak,
        "phases_ms": phases,
    }


def mixed_precision(lib, args):
    """The forward's context: `lib.autocast(device, dtype=bfloat16)` under --autocast (lib is
    mini or torch: the same call in both), else nothing."""
    if not args.autocast:
        return contextlib.nullcontext()
    return lib.autocast(args.device, dtype=lib.bfloat16)


def phases_ms(step_fn, opt, x, y, sync, forward_context, repeats=10):
    """Where a step's time goes: the forward (logits and loss), the backward (zero_grad and
    loss.backward()) and the optimizer's step, each timed to the device's finish (`sync` after
    each), the median of `repeats` steps on one batch. Synchronizing serializes what a normal
    step overlaps (the host queueing the next phase while the GPU runs this one), so the three
    add up to more than the step."""
    times = {"forward": [], "backward": [], "optimizer": []}
    for _ in range(repeats):
        t0 = time.perf_counter()
        with forward_context():
            _, loss = step_fn(x, y)
        sync()
        t1 = time.perf_counter()
        opt.zero_grad(set_to_none=True)
        loss.backward()
        sync()
        t2 = time.perf_counter()
        opt.step()
        sync()
        t3 = time.perf_counter()
        for name, seconds in zip(times, (t1 - t0, t2 - t1, t3 - t2)):
            times[name].append(seconds * 1e3)
    return {name: statistics.median(v) for name, v in times.items()}


def phases_line(r):
    p = r["phases_ms"]
    return f"forward {p['forward']:.1f} ms, backward {p['backward']:.1f}, optimizer {p['optimizer']:.1f}"


def sample(model, chars, device, lines=3, length=120):
    model.eval()
    mini.manual_seed(7)
    start = mini.tensor([[chars.index("\n")]], device=device)
    out = model.generate(start, length, temperature=0.8, top_k=20)
    model.train()
    text = "".join(chars[i] for i in out[0].tolist())
    return [line for line in text.split("\n") if line.strip()][:lines]


TORCH_MODES = ("torch eager", "torch.compile")
GPT_FILE = Path(__file__).resolve().parent / "gpt.py"
MINI_IMPORTS = {"import mini as torch\n": "import torch\n", "import mini.nn as nn\n": "import torch.nn as nn\n",
                "from mini.nn import functional as F\n": "from torch.nn import functional as F\n"}


def torch_gpt_source():
    """labs/gpt.py's text with its three imports naming torch (nothing else in it names mini)."""
    source = GPT_FILE.read_text()
    for mini_line, torch_line in MINI_IMPORTS.items():
        if mini_line not in source:
            raise RuntimeError(f"labs/gpt.py no longer imports {mini_line.strip()!r}: update MINI_IMPORTS")
        source = source.replace(mini_line, torch_line)
    return source


def torch_gpt(torch):
    """labs/gpt.py run by torch itself (torch_gpt_source), loaded as a module of its own."""
    import types
    module = types.ModuleType("gpt_torch")
    module.__file__ = str(GPT_FILE)
    exec(compile(torch_gpt_source(), str(GPT_FILE), "exec"), module.__dict__)
    return module


def train_torch(mode, torch, config, data, args, weights):
    """The same model, batches and optimizer in torch (eager, or torch.compile), from mini's
    initial weights, timed as train() times mini's modes (kernels a step not counted)."""
    gpt = torch_gpt(torch)
    model = gpt.GPT(gpt.Config(**vars(config))).to(args.device)
    model.load_state_dict({k: torch.from_numpy(v) for k, v in weights.items()})
    if mode == "torch.compile":
        torch._dynamo.reset()
    step_fn = torch.compile(model) if mode == "torch.compile" else model
    opt = model.configure_optimizers(weight_decay=0.1, learning_rate=args.lr, betas=(0.9, 0.95),
                                     device_type=args.device)
    cuda = args.device == "cuda"
    losses, seconds = [], []
    for i, (x, y) in enumerate(batches(data, config, args.batch, args.steps, seed=1)):
        x, y = torch.from_numpy(x).to(args.device), torch.from_numpy(y).to(args.device)
        if i == 1 and cuda:
            torch.cuda.reset_peak_memory_stats()
        t0 = time.perf_counter()
        with mixed_precision(torch, args):
            _, loss = step_fn(x, y)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        value = float(loss.item())
        seconds.append(time.perf_counter() - t0)
        losses.append(value)
    steady = statistics.median(seconds[1:]) if len(seconds) > 1 else seconds[0]
    phases = phases_ms(step_fn, opt, x, y, torch.cuda.synchronize if cuda else (lambda: None),
                       lambda: mixed_precision(torch, args))
    return {
        "phases_ms": phases,
        "losses": losses,
        "step_ms": steady * 1e3,
        "tokens_per_s": args.batch * config.block_size / steady,
        "first_step_extra_s": seconds[0] - steady,
        "peak_memory_bytes": torch.cuda.max_memory_allocated() if cuda else None,
        "torch": torch.__version__,
    }


def parse_args(argv):
    """The lab's command line."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--out", type=Path, default=REPO_ROOT / "figures")
    parser.add_argument("--quick", action="store_true", help="a smaller model and 25 steps")
    parser.add_argument("--device", choices=["cpu", "cuda"], default="cpu")
    parser.add_argument("--steps", type=int, default=None)
    parser.add_argument("--batch", type=int, default=None)
    parser.add_argument("--lr", type=float, default=None,
                        help="AdamW's learning rate (default 3e-3 under --quick, 1e-3 at full size: at 3e-3 the "
                             "full-size model's loss spikes near step 10, and the modes' rounding differences "
                             "grow from there)")
    parser.add_argument("--autocast", action="store_true",
                        help="run each forward (and loss) under autocast(device, dtype=bfloat16): matmuls in "
                             "bfloat16, softmax, layer_norm and the loss in float32; weights, gradients and the "
                             "optimizer stay float32 (torch's runs do the same with torch.autocast)")
    parser.add_argument("--no-torch", action="store_true",
                        help="skip torch's eager and torch.compile runs of the same file (run where torch imports)")
    return parser.parse_args(argv)


def cuda_skip_reason():
    """Why the lab cannot train on the GPU here ("" when it can): no GPU, or the model's first op fails."""
    why = cuda_unavailable_reason()
    if not why:
        try:  # the model's first op
            mini.nn.functional.embedding(mini.zeros(1, dtype=mini.int64, device="cuda"), mini.ones(2, 2, device="cuda"))
        except (RuntimeError, NotImplementedError) as e:
            why = str(e).split("\n")[0]
    return why


def model_config(args, chars):
    """The model's Config, and args' steps, batch and lr filled in for --quick or the full size."""
    if args.quick:
        config = Config(block_size=32, vocab_size=len(chars), n_layer=2, n_head=2, n_embd=32)
        args.steps, args.batch, args.lr = args.steps or 25, args.batch or 8, args.lr or 3e-3
    else:
        config = Config(block_size=64, vocab_size=len(chars), n_layer=4, n_head=4, n_embd=128)
        args.steps, args.batch, args.lr = args.steps or 200, args.batch or 16, args.lr or 1e-3
    return config


def new_results(config, args, argv):
    """The JSON's fields known before any run: the setup and where and how it was measured."""
    return {"config": vars(config), "steps": args.steps, "batch": args.batch, "device": args.device,
            "autocast": "bfloat16" if args.autocast else None,
            "measured": {"date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
                         "on": mini.cuda.get_device_name(0) if args.device == "cuda" else platform.processor()
                         or platform.machine(),
                         "command": "python labs/train_gpt.py " + " ".join(sys.argv[1:] if argv is None else argv)},
            "modes": {}}


def run_mini_modes(config, data, args, results):
    """Trains in each of mini's modes, into results["modes"]; returns the first mode's model and
    mini's initial weights (for torch's runs of the same file)."""
    model = None
    for mode in MODES:
        if mode == "eager":  # mini's initial weights, for torch's runs of the same file
            mini.manual_seed(0)
            weights = {k: v.detach().cpu().numpy().copy() for k, v in GPT(config).state_dict().items()}
        trained, r = train(mode, config, data, args)
        model = model or trained
        results["modes"][mode] = r
        print(f"  {mode:9s} loss {r['losses'][0]:.3f} -> {r['losses'][-1]:.3f}, {r['tokens_per_s']:8.0f} tokens/s "
              f"({r['step_ms']:.1f} ms a step), first step +{r['first_step_extra_s']:.2f} s, graphs {r['graphs']}, "
              f"breaks {r['graph_breaks']}, kernels a step {r['kernels_per_step']}, "
              f"peak memory {r['peak_memory_bytes'] / 2**20:.1f} MiB", flush=True)
        print(f"            synchronized: {phases_line(r)}", flush=True)
    return model, weights


def run_torch_modes(config, data, args, weights, results):
    """Trains in torch's modes from mini's initial weights, where torch imports, into results["modes"]."""
    torch = None
    if not args.no_torch:
        try:
            import torch
        except ImportError:
            print("  (torch does not import here: mini's modes only)")
    for mode in TORCH_MODES if torch is not None else ():
        try:
            r = train_torch(mode, torch, config, data, args, weights)
        except Exception as e:  # torch's side must not lose mini's results: say what failed
            print(f"  {mode}: failed: {type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}")
            continue
        results["modes"][mode] = r
        peak = "-" if r["peak_memory_bytes"] is None else f"{r['peak_memory_bytes'] / 2**20:.1f} MiB"
        print(f"  {mode:13s} loss {r['losses'][0]:.3f} -> {r['losses'][-1]:.3f}, {r['tokens_per_s']:8.0f} tokens/s "
              f"({r['step_ms']:.1f} ms a step), first step +{r['first_step_extra_s']:.2f} s, peak memory {peak} "
              f"(torch {r['torch']})", flush=True)
        print(f"                synchronized: {phases_line(r)}", flush=True)


def compare_modes(results):
    """mini compiled against torch.compile, and each mode's largest loss difference to eager."""
    if "torch.compile" in results["modes"]:
        mini_c, torch_c = results["modes"]["compiled"]["step_ms"], results["modes"]["torch.compile"]["step_ms"]
        print(f"  mini compiled against torch.compile: {mini_c / torch_c:.2f}x its step time; "
              f"against mini eager: {results['modes']['eager']['step_ms'] / mini_c:.2f}x faster")
    eager = np.array(results["modes"]["eager"]["losses"])
    for mode in [m for m in results["modes"] if m != "eager"]:
        gap = float(np.max(np.abs(np.array(results["modes"][mode]["losses"]) - eager)))
        results["modes"][mode]["max_loss_gap_to_eager"] = gap
        print(f"  {mode} against eager: largest loss difference over the run {gap:.2e}")


def plot_losses(results, config, args):
    """The figure: each mode's training loss by step; written with the JSON."""
    args.out.mkdir(parents=True, exist_ok=True)
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(6.4, 4.0))
    for mode, style in zip(results["modes"], ("-", "--", ":", "-.", (0, (1, 3)))):
        r = results["modes"][mode]
        ax.plot(range(1, len(r["losses"]) + 1), r["losses"], linestyle=style,
                label=f"{mode} ({r['tokens_per_s']:.0f} tokens/s)")
    ax.set_xlabel("step")
    ax.set_ylabel("training loss (cross-entropy, nats)")
    ax.set_title(f"A {config.n_layer}-layer character GPT on mini's notes ({args.device}"
                 + (", bfloat16 autocast)" if args.autocast else ")"))
    ax.legend()
    ax.grid(alpha=0.3)
    stem = "train_gpt_autocast" if args.autocast else "train_gpt"
    save_figure(fig, args.out, stem)
    write_json(args.out, stem, results)


def main(argv=None):
    args = parse_args(argv)
    if args.device == "cuda":
        why = cuda_skip_reason()
        if why:
            print(f"train_gpt: skipped on cuda: {why}")
            return 0
    data, chars = corpus()
    config = model_config(args, chars)
    print(f"train_gpt: {len(data)} characters of notes/*.md, vocabulary {len(chars)}; {config.n_layer} layers, "
          f"width {config.n_embd}, context {config.block_size}; batch {args.batch}, {args.steps} steps on {args.device}"
          + (", the forward under autocast(bfloat16)" if args.autocast else ""))
    if args.autocast and args.device == "cpu":
        print("  (on the CPU mini's inductor generates no bfloat16 C++: its compiled modes run the bfloat16 "
              "graph's ops eagerly; CUDA code generation has bfloat16)")
    results = new_results(config, args, argv)
    model, weights = run_mini_modes(config, data, args, results)
    run_torch_modes(config, data, args, weights, results)
    compare_modes(results)
    results["parameters"] = sum(p.numel() for p in model.parameters())
    results["samples"] = sample(model, chars, args.device)
    print("  sampled from the eager model:")
    for line in results["samples"]:
        print("    " + line)
    plot_losses(results, config, args)
    return 0


if __name__ == "__main__":
    sys.exit(main())
