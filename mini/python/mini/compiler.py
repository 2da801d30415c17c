"""mini.compiler: the functions of torch.compiler that model code calls."""


def is_compiling():
    """True while mini.compile captures the code that calls it, False when that code runs
    eagerly (torch.compiler.is_compiling). Code may branch on it: capture sees True and records
    the branch taken under it, so the two paths must compute the same values.
    F.scaled_dot_product_attention does: eagerly it runs one fused kernel, captured it is
    written as the matmuls and the softmax that fusion works on."""
    return False


is_dynamo_compiling = is_compiling


def stats():
    """What the frame hook did and where compile time went since the last reset_stats() or
    mini.reset() (torch's torch._dynamo.utils.counters and compile_times()), as a dict:

      frames  seen: frames that started while a compiled function ran; captured: those run
              unit by unit; skipped: {reason: frames} run by CPython untouched (mini's own
              code, no tensor among the arguments, ...)
      units   cache_hits, compiles, recompiles (compiles after a guard failed), entries_checked
              (entries whose guards a lookup ran), evictions (entries a cache policy dropped), and
              run_natively: {reason: unit runs} CPython ran instead (capture cannot trace it,
              the cache size limit, inputs that alias differently)
      stages  {stage: {"seconds", "count"}} in the order a compile runs them: capture (symbolic
              bytecode evaluation, with its guards), joint graph (AOT: the joint graph and its
              partition), fusion, codegen, compile (the C++ compiler or NVRTC) or disk cache (a
              compile the on-disk kernel cache served), first run (an artifact's first call;
              a training graph's forward and, inside backward(), its backward count apart)

    print_stats() prints it as a table."""
    from . import _C
    return _C._compile_stats()


def reset_stats():
    """Zeroes stats() (mini.reset() does too)."""
    from . import _C
    _C._reset_compile_stats()


def format_stats(s=None):
    """stats() as the lines print_stats() prints."""
    s = stats() if s is None else s
    f, u = s["frames"], s["units"]
    lines = [f"frames: {f['seen']} seen, {f['captured']} captured, {sum(f['skipped'].values())} skipped"]
    lines += [f"  skipped ({n}): {why}" for why, n in sorted(f["skipped"].items(), key=lambda kv: -kv[1])]
    lines.append(f"units: {u['cache_hits']} cache hits, {u['compiles']} compiles ({u['recompiles']} recompiles), "
                 f"{sum(u['run_natively'].values())} run natively")
    lines += [f"  run natively ({n}): {why}" for why, n in sorted(u["run_natively"].items(), key=lambda kv: -kv[1])]
    lines.append("compile time by stage:")
    for name, t in s["stages"].items():
        if t["count"]:
            lines.append(f"  {name:<12} {t['seconds'] * 1e3:9.2f} ms  over {t['count']}")
    return "\n".join(lines)


def print_stats():
    print(format_stats())


def cache_entries(fn):
    """The guard cache of `fn` (a function, a mini.compile wrapper or a module's forward):
    one dict per resume unit (offset 0 is the function from its start; a graph break starts a
    unit after the breaking instruction), each {"offset", "frame", "entries"} with the entries
    in the order a lookup checks them (mini.config.cache_policy's: most recently hit first under
    "recent", torch's) as {"compile_id", "guards" (the guard set, printed), "hits" (lookups it
    answered), "last_used" (the unit's clock, counting lookups, at its last hit or its compile),
    "address" (where the entry lives: the same as long as it stays in the cache, as no policy
    copies or moves an entry)}. Empty before the first compile and after mini.reset()."""
    from . import _C
    from ._compile import _CompiledModule
    # mini.compile(module) holds the module, mini.compile(function) the function
    if isinstance(fn, _CompiledModule):
        code = fn._captured_code()
    else:
        target = getattr(fn, "_fn", fn)
        code = getattr(target, "__code__", None) or getattr(getattr(target, "forward", None), "__code__", None)
    if code is None:
        raise TypeError(f"cache_entries takes a function or a mini.compile wrapper, got {type(fn).__name__}")
    return [{"offset": offset, "frame": frame,
             "entries": [{"compile_id": k, "guards": g, "hits": hits, "last_used": used, "address": address}
                         for k, g, hits, used, address in entries]}
            for offset, frame, entries in _C._cache_entries(code)]
