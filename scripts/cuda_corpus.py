"""Every CUDA source the code generator's tests render, in one file: to show that a change to
the CUDA renderer leaves the generated code byte-identical (or to see exactly what it changes).

    PYTHONPATH=build/python .venv/bin/python scripts/cuda_corpus.py /tmp/before.txt
    ... change the renderer, rebuild ...
    PYTHONPATH=build/python .venv/bin/python scripts/cuda_corpus.py /tmp/after.txt
    cmp /tmp/before.txt /tmp/after.txt

It runs the CUDA codegen, dedupe, reduction-layout, golden and kernel-variant tests (no GPU or
CUDA toolkit needed) with a plugin that records each graph rendered for CUDA — its source, kernels
and launch data — and renders each distinct graph in every kernel layout too. Paths of the
package are written as <pkg>, so two builds in different folders compare equal.
"""
import importlib.util
import os
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
TESTS = ["test_cuda_codegen.py", "test_cuda_kernel_dedupe.py", "test_cuda_reduction_layout.py",
         "test_golden_source.py", "test_kernel_variants.py"]

PLUGIN = '''
import json, os
import mini
from mini import _C

_out = open(os.environ["CORPUS_OUT"], "a")
_pkg = os.path.dirname(os.path.dirname(os.path.abspath(mini.__file__)))
_render, _compile = _C._inductor_render_cuda, _C._inductor_compile_cuda
_seen = set()


def _dump(tag, info):
    kept = {k: v for k, v in info.items() if isinstance(v, (str, int, float, list, dict, bool, type(None)))}
    _out.write(tag + "\\n" + json.dumps(kept, sort_keys=True, default=str).replace(_pkg, "<pkg>") + "\\n")
    _out.flush()


def render(gm, per_kernel, layout):
    info = _render(gm, per_kernel, layout)
    _dump(f"render {per_kernel} {layout}", info)
    if info["source"] not in _seen:  # each distinct graph in every layout too
        _seen.add(info["source"])
        for n in range(1, _C._cuda_layouts() + 1):
            _dump(f"  layout {n}", _render(gm, [], n))
    return info


def compile_cuda(gm, arch, per_kernel, layout):
    render(gm, per_kernel, layout)
    return _compile(gm, arch, per_kernel, layout)


_C._inductor_render_cuda, _C._inductor_compile_cuda = render, compile_cuda
'''


def run_tests(out, plugin, test_paths, extra_modules=None):
    """Runs pytest over test_paths (and extra_modules: {file name: its text}, written beside
    it) with `plugin` (a module's text) loaded, its records going to `out`; the return code."""
    with tempfile.TemporaryDirectory() as tmp:
        (Path(tmp) / "corpus_plugin.py").write_text(plugin)
        paths = [str(p) for p in test_paths]
        for name, text in (extra_modules or {}).items():
            (Path(tmp) / name).write_text(text)
            paths.append(str(Path(tmp) / name))
        env = dict(os.environ, CORPUS_OUT=str(out),
                   PYTHONPATH=os.pathsep.join(p for p in (tmp, os.environ.get("PYTHONPATH", "")) if p))
        # the tests' conftest imports mini from MINI_PYTHON_DIR (build/python by default), not from
        # PYTHONPATH: the package this process finds is the one to record
        package = importlib.util.find_spec("mini")
        if package and package.origin and "MINI_PYTHON_DIR" not in os.environ:
            env["MINI_PYTHON_DIR"] = str(Path(package.origin).parent.parent)
        return subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "corpus_plugin",
                               "-m", "not kit and not cuda", *paths], cwd=tmp, env=env).returncode


def main():
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    out = Path(sys.argv[1]).resolve()
    out.write_text("")
    code = run_tests(out, PLUGIN, [REPO / "tests" / "python" / t for t in TESTS])
    renders = sum(1 for line in out.read_text().splitlines() if line.startswith(("render", "  layout")))
    print(f"cuda_corpus: {renders} renders in {out}" + ("" if code == 0 else " (some tests failed)"))
    return code


if __name__ == "__main__":
    sys.exit(main())
