"""Every C++ source the code generator's tests render, in one file: to show that a change to the
C++ renderer leaves the generated code byte-identical (or to see exactly what it changes). The
C++ twin of cuda_corpus.py.

    PYTHONPATH=build/python .venv/bin/python scripts/cpp_corpus.py /tmp/before.txt
    ... change the renderer, rebuild ...
    PYTHONPATH=build/python .venv/bin/python scripts/cpp_corpus.py /tmp/after.txt
    cmp /tmp/before.txt /tmp/after.txt

It runs the C++ inductor, golden, kernel-cache and compile-time tests with a plugin that records
each graph compiled by mini._C._inductor_compile (its source, kernels and fusion decisions), and
a few programs of its own for the kernel forms those tests reach seldom: an outer reduction that
splits, a row long enough to split over threads, a staged chain, a loop nest, a source with
enough transcendental ops to call the out-of-line vector math, sizes as symbols. Paths of the
package are written as <pkg> (and the folder of its own programs as <tmp>), so two builds in
different folders compare equal.
"""
import sys
from pathlib import Path

from cuda_corpus import run_tests  # the pytest run with a recording plugin, shared

REPO = Path(__file__).resolve().parent.parent
TESTS = ["test_inductor.py", "test_inductor_edge_cases.py", "test_golden_source.py",
         "test_kernel_cache.py", "test_compile_time.py", "test_cuda_codegen.py"]

PLUGIN = '''
import json, os
import mini
from mini import _C

_out = open(os.environ["CORPUS_OUT"], "a")
_pkg = os.path.dirname(os.path.dirname(os.path.abspath(mini.__file__)))
_tmp = os.getcwd()  # where the programs below are written: a new folder each run
_compile = _C._inductor_compile


def compile_cpp(gm):
    info = _compile(gm)
    kept = {k: info[k] for k in ("source", "kernels", "decisions")}
    _out.write("render\\n" + json.dumps(kept, sort_keys=True).replace(_pkg, "<pkg>").replace(_tmp, "<tmp>") + "\\n")
    _out.flush()
    return info


_C._inductor_compile = compile_cpp
'''

# Kernel forms the tests above reach seldom, each compiled once (static sizes, and as symbols).
PROGRAMS = '''
import pytest
import mini


def graph_of(fn, *args, dynamic=None):
    graphs = []

    def backend(gm, example_inputs):
        graphs.append(gm)
        return gm.forward

    mini.compile(fn, backend=backend, dynamic=dynamic, fullgraph=True)(*args)
    return graphs[0]


def many_sins(x):  # more than 64 float transcendental ops: the out-of-line vector math
    for _ in range(24):
        x = x.sin().cos() + x.exp() * 0.01
    return x


CASES = {
    "outer_sum_split": (lambda x: (x * 2).sum(0), [(4096, 128)]),
    "outer_sum_mean_blocks": (lambda x: (x.sum(0), x.mean(0)), [(64, 1024)]),
    "outer_amax": (lambda x: x.amax(0), [(512, 300)]),
    "long_row_softmax": (lambda x: (x - x.amax(-1, keepdim=True)).exp().sum(-1), [(2, 65536)]),
    "loss": (lambda x, y: ((x - y) * (x - y)).mean(), [(300, 200), (300, 200)]),
    "min_and_sum": (lambda x: (x.amin(-1), (x.sin().cos().exp()).sum(-1)), [(8, 3000)]),
    "staged": (lambda x, y: ((x.sin() * y).cos() + x).exp() / y, [(1000, 100), (1000, 100)]),
    "nest": (lambda x, y: x.t() * y + 1, [(64, 32), (32, 64)]),
    "broadcast_flat": (lambda x, y: (x + y).sigmoid(), [(128, 1, 16), (1, 8, 16)]),
    "many_sins": (many_sins, [(64, 64)]),
    "layernorm_like": (lambda x: (x - x.mean(-1, keepdim=True))
                       / (((x - x.mean(-1, keepdim=True)) ** 2).mean(-1, keepdim=True) + 1e-5).sqrt(), [(32, 700)]),
}


@pytest.mark.parametrize("dynamic", [False, True])
@pytest.mark.parametrize("name", list(CASES))
def test_corpus_program(name, dynamic):
    mini.reset()
    fn, shapes = CASES[name]
    args = [mini.randn(*s) for s in shapes]
    mini._C._inductor_compile(graph_of(fn, *args, dynamic=dynamic))
'''


def main():
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    out = Path(sys.argv[1]).resolve()
    out.write_text("")
    code = run_tests(out, PLUGIN, [REPO / "tests" / "python" / t for t in TESTS],
                     {"test_cpp_corpus_programs.py": PROGRAMS})
    renders = sum(1 for line in out.read_text().splitlines() if line == "render")
    print(f"cpp_corpus: {renders} renders in {out}" + ("" if code == 0 else " (some tests failed)"))
    return code


if __name__ == "__main__":
    sys.exit(main())
