"""Golden files of generated C++ (tests/golden/*.cpp): the kernels of the Inductor anchors as
mini renders them, so that a change to code generation shows up as a diff a person reviews.
The math prelude is left out (it is mini/tensor/scalar_math.h verbatim) and the path of the
user's file as <repo>/labs/. After an intended change, rewrite them and review the diff:

    MINI_UPDATE_GOLDEN=1 PYTHONPATH=build/python .venv/bin/python -m pytest tests/python/test_golden_source.py
    git diff tests/golden
"""
import os
import re
import sys
from pathlib import Path

import pytest

import mini

REPO = Path(__file__).resolve().parents[2]
GOLDEN = REPO / "tests" / "golden"
sys.path.insert(0, str(REPO / "labs"))
from programs import chain8, layernorm_decomp, softmax_decomp, transform  # noqa: E402

pytestmark = [pytest.mark.usefixtures("own_cache_dir"), pytest.mark.a4]


def source_of(fn, *args):
    graphs = []

    def backend(gm, example_inputs):
        graphs.append(gm)
        return gm.forward

    mini.compile(fn, backend=backend, fullgraph=True)(*args)
    source = mini._C._inductor_compile(graphs[0])["source"]
    begin = source.index("// ---- prelude:")
    end = source.index("// ---- end of prelude ----") + len("// ---- end of prelude ----")
    source = source[:begin] + "// (prelude)" + source[end:]
    # the user's file as Python named it: absolute, and with ../.. when another test module
    # put labs/ on sys.path that way first
    return re.sub(r"File: \S*?/labs/", "File: <repo>/labs/", source)


CASES = {
    "transform": (transform, lambda: (mini.randn(64, 64), mini.randn(64))),
    "chain8": (chain8, lambda: (mini.randn(4096, 4096), mini.randn(4096, 4096))),
    "softmax_decomp": (softmax_decomp, lambda: (mini.randn(256, 4096),)),
    "layernorm_decomp": (layernorm_decomp, lambda: (mini.randn(64, 512), mini.randn(512), mini.randn(512))),
}


@pytest.mark.parametrize("name", list(CASES))
def test_generated_source_matches_its_golden_file(name):
    mini.reset()
    fn, make = CASES[name]
    got = source_of(fn, *make())
    path = GOLDEN / f"{name}.cpp"
    if os.environ.get("MINI_UPDATE_GOLDEN"):
        path.write_text(got)
    assert path.exists(), f"no golden file {path}: run with MINI_UPDATE_GOLDEN=1 and review it"
    assert got == path.read_text(), (f"the generated source of {name} changed; if that is intended, "
                                     f"rewrite tests/golden with MINI_UPDATE_GOLDEN=1 and review the diff")
