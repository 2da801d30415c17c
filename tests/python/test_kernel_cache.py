"""The on-disk kernel cache and the failures of inductor's C++ compile (issue 11, part 2 and
the compile-failure report of part 1): a damaged or misplaced cache entry is compiled again,
never loaded; an unusable cache folder becomes a temporary one with a warning; a failing
compiler and a code generation bug are told apart and say how to fall back; and
mini.config.suppress_errors runs a graph that fails to compile eagerly.

Each test points mini.config.cache_dir (or MINI_CACHE_DIR, in a subprocess) at a folder it
owns. What could crash the interpreter (loading a damaged library) runs in a subprocess whose
exit status and output are checked."""
import json
import os
import shutil
import subprocess
import sys
import warnings

import pytest

import mini
from capture_helpers import ALIVE, T, fresh_mini, same  # noqa: F401  (fresh_mini: autouse)

PKG_DIR = os.path.dirname(os.path.dirname(os.path.abspath(mini.__file__)))

# Compiles graph "a" or "b" with inductor against the cache folder argv[1] and prints what
# happened: the compiled and the eager result, whether the entry came from the disk cache, why
# an entry found there was rejected, and the library's path.
VICTIM = r"""
import json, sys
import mini
mini.config.cache_dir = sys.argv[1]
FNS = {"a": lambda x: (x.sin() * 2 + x.cos()).sum(0), "b": lambda x: (x.sin() * 3 + x.cos()).sum(0)}
fn = FNS[sys.argv[2]]
x = mini.tensor([[0.5, -1.0, 2.0], [1.5, 0.25, -0.75]])
graphs = []
def capture(gm, example_inputs):
    graphs.append(gm)
    return gm.forward
mini.compile(fn, backend=capture, fullgraph=True)(x)
info = mini._C._inductor_compile(graphs[0])
print(json.dumps(dict(got=info["run"](x)[0].tolist(), expected=fn(x).tolist(), library=info["library"],
                      from_disk_cache=info["from_disk_cache"], rejected=info.get("rejected", ""))))
"""


def victim(cache_dir, graph="a"):
    """Runs VICTIM in a new process; it must exit cleanly and match eager."""
    r = subprocess.run([sys.executable, "-c", VICTIM, str(cache_dir), graph], env=dict(os.environ, PYTHONPATH=PKG_DIR),
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, f"the process exited with {r.returncode}:\n{r.stderr[-3000:]}"
    out = json.loads(r.stdout.strip().splitlines()[-1])
    assert out["got"] == pytest.approx(out["expected"], rel=1e-5, abs=1e-6)
    return out


def test_a_whole_entry_is_loaded_by_a_new_process(tmp_path):
    first = victim(tmp_path)
    assert not first["from_disk_cache"]
    second = victim(tmp_path)
    assert second["from_disk_cache"] and second["rejected"] == ""
    assert second["library"] == first["library"]


def test_a_truncated_library_is_compiled_again_not_loaded(tmp_path):
    lib = victim(tmp_path)["library"]
    with open(lib, "r+b") as f:  # a library cut short: its segments reach past the end (SIGBUS)
        f.truncate(os.path.getsize(lib) // 2)
    out = victim(tmp_path)
    assert not out["from_disk_cache"] and "trailer" in out["rejected"]
    assert victim(tmp_path)["from_disk_cache"]  # the entry written again is whole


@pytest.mark.parametrize("damage, reason", [("empty", "too few"), ("garbage", "trailer"), ("flipped byte", "checksum")])
def test_a_damaged_library_is_compiled_again(tmp_path, damage, reason):
    lib = victim(tmp_path)["library"]
    data = bytearray(open(lib, "rb").read())
    if damage == "empty":
        data = b""
    elif damage == "garbage":
        data = b"not a shared object\n" * 100
    else:
        data[len(data) // 2] ^= 0xFF
    open(lib, "wb").write(bytes(data))
    out = victim(tmp_path)
    assert not out["from_disk_cache"] and reason in out["rejected"]
    assert victim(tmp_path)["from_disk_cache"]


def test_another_graphs_library_under_this_name_is_not_loaded(tmp_path):
    lib_a = victim(tmp_path, "a")["library"]
    lib_b = victim(tmp_path, "b")["library"]
    assert lib_a != lib_b
    shutil.copyfile(lib_b, lib_a)  # a valid library with the same kernel names, of another graph: a wrong result
    out = victim(tmp_path, "a")
    assert not out["from_disk_cache"] and "another graph" in out["rejected"]
    assert victim(tmp_path, "a")["from_disk_cache"]


def test_an_entry_is_replaced_by_a_new_file_never_rewritten(tmp_path):
    lib = victim(tmp_path)["library"]
    open(lib, "wb").write(b"garbage")
    with open(lib, "rb") as old:  # as a process that mapped the old file would still see it
        out = victim(tmp_path)
        assert not out["from_disk_cache"]
        assert os.stat(lib).st_ino != os.fstat(old.fileno()).st_ino
        assert old.read() == b"garbage"
    assert not [p for p in os.listdir(tmp_path) if p.count(".") > 1], "temporary files left behind"


def capture_graph(fn, *args):
    graphs = []

    def backend(gm, example_inputs):
        graphs.append(gm)
        return gm.forward

    ALIVE.append(backend)
    mini.compile(fn, backend=backend, fullgraph=True)(*args)
    return graphs[0]


# A process that loaded an entry, whose file is then overwritten in place (as `cp` does) while
# the process runs: it keeps running the library it checked, and compiling the same graph
# again answers with that library; the next process compiles the entry again.
OVERWRITTEN = r"""
import json, sys
import mini
mini.config.cache_dir = sys.argv[1]
x = mini.tensor([[0.5, -1.0, 2.0], [1.5, 0.25, -0.75]])
graphs = []
def capture(gm, example_inputs):
    graphs.append(gm)
    return gm.forward
mini.compile(lambda x: (x * 2).sum(1), backend=capture, fullgraph=True)(x)
info = mini._C._inductor_compile(graphs[0])
open(info["library"], "wb").write(b"garbage")
again = mini._C._inductor_compile(graphs[0])
assert info["run"](x)[0].tolist() == again["run"](x)[0].tolist() == (x * 2).sum(1).tolist()
print(json.dumps([info["from_disk_cache"], info.get("rejected", ""), again["from_disk_cache"], again.get("rejected", "")]))
"""


def test_a_running_process_is_immune_to_its_entry_being_overwritten(tmp_path):
    r = subprocess.run([sys.executable, "-c", OVERWRITTEN, str(tmp_path)], env=dict(os.environ, PYTHONPATH=PKG_DIR),
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, f"the process exited with {r.returncode}:\n{r.stderr[-3000:]}"
    assert json.loads(r.stdout) == [False, "", True, ""]
    [lib] = [p for p in os.listdir(tmp_path) if p.endswith(".so")]
    assert open(tmp_path / lib, "rb").read() == b"garbage"
    r = subprocess.run([sys.executable, "-c", OVERWRITTEN, str(tmp_path)], env=dict(os.environ, PYTHONPATH=PKG_DIR),
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-3000:]
    first_from_disk, rejected, *_ = json.loads(r.stdout)  # the entry it found was garbage: compiled again
    assert not first_from_disk and "too few" in rejected


def unusable_folder(tmp_path, kind):
    if kind == "a file":
        (tmp_path / "cache").write_text("a file, not a folder")
        return str(tmp_path / "cache")
    if kind == "under a file":
        (tmp_path / "file").write_text("a file, not a folder")
        return str(tmp_path / "file" / "cache")
    if kind == "in /proc":
        return f"/proc/mini-kernel-cache-{os.getpid()}-{tmp_path.name}"
    if os.geteuid() == 0:
        pytest.skip("root writes into a folder without write permission")
    (tmp_path / "cache").mkdir(mode=0o500)
    return str(tmp_path / "cache")


@pytest.mark.parametrize("kind", ["a file", "under a file", "in /proc", "not writable"])
def test_an_unusable_cache_folder_becomes_a_temporary_one_with_one_warning(tmp_path, kind):
    mini.config.cache_dir = folder = unusable_folder(tmp_path, kind)
    x = T(5)
    with pytest.warns(UserWarning, match="cache_dir") as caught:
        got = mini.compile(lambda x: x.sin() + 1)(x)
    same(got, x.sin() + 1)
    texts = [str(w.message) for w in caught if "cache_dir" in str(w.message)]
    assert len(texts) == 1 and folder in texts[0] and "MINI_CACHE_DIR" in texts[0]
    assert "code generation" not in texts[0]
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # once per folder: a second graph says nothing
        info = mini._C._inductor_compile(capture_graph(lambda x: x.cos() * 3, x))
    assert not info["library"].startswith(folder) and info["library"].split("/")[-2] in texts[0]
    same(info["run"](x)[0], x.cos() * 3)


def compile_error(fn, *args):
    with pytest.raises(RuntimeError) as e:
        mini.compile(fn)(*args)
    return str(e.value)


def test_a_failing_compiler_is_reported_as_such(tmp_path, monkeypatch):
    mini.config.cache_dir = str(tmp_path)
    monkeypatch.setenv("CXX", "false")

    def f(x):
        return x.exp() - 1

    msg = compile_error(f, T(4))
    assert "the C++ compiler fails" in msg and "`false -O3" in msg and "status 1" in msg
    assert "__compiled_fn_" in msg and "'f'" in msg
    assert "backend='eager'" in msg and "suppress_errors" in msg
    assert "bug in mini's code generation" not in msg


def test_a_missing_compiler_is_reported_as_such(tmp_path, monkeypatch):
    mini.config.cache_dir = str(tmp_path)
    monkeypatch.setenv("CXX", "/nonexistent/c++")

    def f(x):
        return x.exp() - 1

    msg = compile_error(f, T(4))
    assert "no C++ compiler" in msg and "/nonexistent/c++" in msg and "not found" in msg
    assert "backend='eager'" in msg and "bug in mini's code generation" not in msg


def test_generated_code_that_does_not_compile_names_graph_kernel_error_source_and_fallback(tmp_path):
    mini.config.cache_dir = str(tmp_path)
    x = T(3, 4)

    def scaled_sum(x):
        return (x.sin() * 2).sum(1)

    kernel = mini._C._inductor_compile(capture_graph(scaled_sum, x))["kernels"][0]
    mini._C._inject_codegen_error()
    msg = compile_error(scaled_sum, x)
    assert "__compiled_fn_" in msg and "'scaled_sum'" in msg
    assert f"in kernel {kernel} " in msg and "bug in mini's code generation" in msg
    first_error = msg[msg.index("first error:"):].splitlines()[1]
    assert "error:" in first_error and "mini_injected_error" in first_error
    source = msg[msg.index("The source: "):].splitlines()[0].split(": ", 1)[1]
    assert first_error.startswith(source + ":") and "mini_injected_error" in open(source).read()
    assert "backend='eager'" in msg and "mini.config.suppress_errors = True" in msg
    mini.reset()  # the hook served one compile: the next one compiles
    same(mini.compile(scaled_sum)(x), scaled_sum(x))


def suppressed_warnings(fn, *args):
    """fn compiled with suppress_errors on, called twice: its results and the warnings."""
    with mini.config.patch(suppress_errors=True), warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        compiled = mini.compile(fn)
        results = [compiled(*args), compiled(*args)]
    return results, [str(w.message) for w in caught]


def test_suppress_errors_runs_a_graph_with_a_codegen_bug_eagerly_with_one_warning(tmp_path):
    mini.config.cache_dir = str(tmp_path)
    x = T(3, 4)

    def f(x):
        return (x.sin() * 2).sum(1)

    mini._C._inject_codegen_error()
    results, texts = suppressed_warnings(f, x)
    for r in results:
        same(r, f(x))
    assert len(texts) == 1, texts
    assert "'f'" in texts[0] and "mini_injected_error" in texts[0] and "runs eagerly" in texts[0]


def test_suppress_errors_runs_eagerly_when_the_compiler_fails(tmp_path, monkeypatch):
    mini.config.cache_dir = str(tmp_path)
    monkeypatch.setenv("CXX", "false")
    x = T(5)
    results, texts = suppressed_warnings(lambda x: x.exp() - 1, x)
    for r in results:
        same(r, x.exp() - 1)
    assert len(texts) == 1 and "the C++ compiler fails" in texts[0]


def test_suppress_errors_keeps_gradients_of_a_training_graph(tmp_path):
    mini.config.cache_dir = str(tmp_path)

    def f(x, w):
        return ((x * w).tanh() * 3).sum()

    x, w = T(4, 3), T(4, 3, seed=1, requires_grad=True)
    mini._C._inject_codegen_error()
    with mini.config.patch(suppress_errors=True), pytest.warns(UserWarning, match="mini_injected_error"):
        got = mini.compile(f)(x, w)
    got.backward()
    grad, w.grad = w.grad, None
    expected = f(x, w)
    expected.backward()
    same(got, expected)
    same(grad, w.grad)


def test_suppress_errors_is_a_bool_and_off_by_default():
    assert mini.config.suppress_errors is False
    with pytest.raises(TypeError, match="suppress_errors must be bool"):
        mini.config.suppress_errors = 1
