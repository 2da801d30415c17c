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
import time
import warnings

import pytest

import mini
from capture_helpers import ALIVE, T, chain, fresh_mini, same  # noqa: F401  (fresh_mini: autouse)

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


def test_a_compiler_that_cannot_be_started_is_reported_as_such(tmp_path, monkeypatch):
    mini.config.cache_dir = str(tmp_path / "cache")
    not_executable = tmp_path / "cxx"
    not_executable.write_text("#!/bin/sh\n")  # no x bit: exec fails with EACCES
    monkeypatch.setenv("CXX", str(not_executable))
    msg = compile_error(lambda x: x.exp() - 1, T(4))
    assert f"`{not_executable}` cannot be started: Permission denied" in msg and "Set CXX" in msg
    assert "code generation" not in msg


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


# ---- the compiler runs without a shell (issue 31) -------------------------------------------

# Compiles a small graph and, with MINI_COMPILE_THREADS=2, one large enough for two units and a
# link, against the cache folder MINI_CACHE_DIR; prints whether both match eager.
HOSTILE_VICTIM = r"""
import json, os
import numpy as np
import mini
def chain(x):  # kernels enough for two units (a constant a step: no two kernels of one body)
    for i in range(300):
        x = (x * 1.0001 + (0.001 + i * 1e-7)).sin()
    return x
small = lambda x: (x.sin() * 2 + x.cos()).sum(0)
x = mini.rand(4, 8)
ok = [np.allclose(mini.compile(f, fullgraph=True)(x).numpy(), f(x).numpy(), rtol=1e-4, atol=1e-5)
      for f in (small, chain)]
print(json.dumps(dict(ok=ok, files=sorted(os.listdir(mini.config.cache_dir)))))
"""

HOSTILE_NAMES = ["with space", "semi;colon", "dollar$(touch pwned)", "back`touch pwned`tick", "quote'\"s",
                 "new\nline", "glob*?[x]", "-dash", "amp&&touch pwned", "pipe|touch pwned", "lt<gt>"]


@pytest.mark.parametrize("name", HOSTILE_NAMES, ids=range(len(HOSTILE_NAMES)))
def test_a_cache_folder_of_any_name_compiles_and_runs_nothing(tmp_path, name):
    # the cache folder's name reached a shell: a space broke every compile, `;` looked like a
    # missing compiler, $(...) and backticks ran. Now every path is one word of the compiler's
    # argument vector; the small graph takes the one-unit path, the chain the units-and-link one.
    folder = tmp_path / name
    work = tmp_path / "cwd"
    work.mkdir()
    r = subprocess.run([sys.executable, "-c", HOSTILE_VICTIM], cwd=work, capture_output=True, text=True, timeout=300,
                       env=dict(os.environ, PYTHONPATH=PKG_DIR, MINI_CACHE_DIR=str(folder), MINI_COMPILE_THREADS="2"))
    assert r.returncode == 0, r.stderr[-3000:]
    out = json.loads(r.stdout.strip().splitlines()[-1])
    assert out["ok"] == [True, True]
    assert sum(f.endswith(".so") for f in out["files"]) == 2  # both in the folder asked for
    assert not list(tmp_path.rglob("pwned"))  # nothing the name holds ran


@pytest.mark.parametrize("name", ["-o", "-dash", "-fplugin=x"])
def test_a_relative_cache_folder_named_like_an_option_is_a_folder(tmp_path, name):
    # a relative folder "-o" reached the compiler as `-o/<key>.cpp`, an option: every compile
    # failed, blamed on the compiler's setup. A relative folder is made absolute at first use.
    work = tmp_path / "cwd"
    work.mkdir()
    r = subprocess.run([sys.executable, "-c", HOSTILE_VICTIM], cwd=work, capture_output=True, text=True, timeout=300,
                       env=dict(os.environ, PYTHONPATH=PKG_DIR, MINI_CACHE_DIR=name, MINI_COMPILE_THREADS="2"))
    assert r.returncode == 0, r.stderr[-3000:]
    out = json.loads(r.stdout.strip().splitlines()[-1])
    assert out["ok"] == [True, True]
    assert sum(f.endswith(".so") for f in os.listdir(work / name)) == 2  # in the working folder's "-o"


def test_an_empty_cache_folder_name_is_refused():
    with pytest.raises(ValueError, match="must name a folder, got ''; None restores the default"):
        mini.config.cache_dir = ""
    assert mini.config.cache_dir  # unchanged


def test_mini_config_cache_dir_takes_a_hostile_name_and_a_path(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # where a shell would have run `touch pwned`
    folder = tmp_path / "a b;$(touch pwned)"
    mini.config.cache_dir = folder  # an os.PathLike
    assert mini.config.cache_dir == str(folder)
    x = T(5)
    same(mini.compile(lambda t: t.exp() * 3)(x), x.exp() * 3)
    assert [f for f in os.listdir(folder) if f.endswith(".so")]
    assert not list(tmp_path.rglob("pwned"))


def test_cxx_may_hold_several_words(tmp_path, monkeypatch):
    # CXX="env g++": a launcher and a compiler, split on whitespace as make and CMake read CXX
    mini.config.cache_dir = str(tmp_path)
    monkeypatch.setenv("CXX", f"env MINI_SOME_VAR=1 {shutil.which('c++') or 'g++'}")
    x = T(6)
    same(mini.compile(lambda t: t.sin() * 7)(x), x.sin() * 7)


# ---- a compiler that is killed, interrupted or out of disk -----------------------------------

def fake_compiler(tmp_path, body):
    """A CXX in tmp_path: a shell script whose body runs in place of the compiler."""
    path = tmp_path / "fake compiler"
    path.write_text("#!/bin/sh\n" + body + "\n")
    path.chmod(0o755)
    link = tmp_path / "fakecxx"  # CXX is split on whitespace: reached by a name without one
    link.symlink_to(path)
    return str(link)


@pytest.mark.parametrize("units", ["1", "3"])
def test_a_compiler_killed_by_a_signal_says_so(tmp_path, monkeypatch, units):
    mini.config.cache_dir = str(tmp_path / "cache")
    monkeypatch.setenv("CXX", fake_compiler(tmp_path, 'echo started >> "$(dirname "$0")/runs"; kill -KILL $$'))
    monkeypatch.setenv("MINI_COMPILE_THREADS", units)
    msg = compile_error(chain(300), T(4, 8))
    assert "killed by signal 9 (Killed)" in msg and "OOM killer" in msg
    assert "code generation" not in msg and "fails the same on mini's prelude" not in msg
    runs = (tmp_path / "runs").read_text().count("started")
    assert runs == int(units)  # the units, not compiled once more for a report, nor the prelude probed
    assert not [f for f in os.listdir(tmp_path / "cache") if f.count(".") > 1]  # no temporary file left


@pytest.mark.parametrize("units", ["1", "3"])
def test_a_compiler_killed_by_sigint_raises_keyboard_interrupt(tmp_path, monkeypatch, units):
    mini.config.cache_dir = str(tmp_path / "cache")
    mini.config.suppress_errors = True  # Ctrl-C is never a graph to run eagerly
    monkeypatch.setenv("CXX", fake_compiler(tmp_path, 'echo started >> "$(dirname "$0")/runs"; kill -INT $$'))
    monkeypatch.setenv("MINI_COMPILE_THREADS", units)
    with pytest.raises(KeyboardInterrupt):
        mini.compile(chain(300))(T(4, 8))
    assert (tmp_path / "runs").read_text().count("started") == int(units)
    mini.config.suppress_errors = False


CTRL_C = r"""
import os, signal, sys, time
import mini
mini.config.cache_dir = sys.argv[1]
signal.setitimer(signal.ITIMER_REAL, 0.5)
signal.signal(signal.SIGALRM, lambda *a: os.kill(os.getpid(), signal.SIGINT))  # Ctrl-C, to this process only
start = time.monotonic()
try:
    mini.compile(lambda x: x.sin() + 1)(mini.rand(3))
    print("compiled")
except KeyboardInterrupt:
    print("interrupted", time.monotonic() - start < 30)
"""


def alive(pid):
    """Whether `pid` runs (a zombie, dead and not yet reaped, does not)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except FileNotFoundError:
        return False


def test_ctrl_c_while_the_compiler_runs_interrupts_the_compile(tmp_path):
    # SIGINT to mini's process alone, while its compiler waits for a child of its own (as gcc
    # waits for cc1plus): the wait stops, KeyboardInterrupt is raised, and the compiler's
    # whole process group is killed (the child would sleep for a minute)
    cxx = fake_compiler(tmp_path, 'sleep 60 & echo $! > "$(dirname "$0")/child"; wait')
    r = subprocess.run([sys.executable, "-c", CTRL_C, str(tmp_path / "cache")], capture_output=True, text=True,
                       timeout=120, env=dict(os.environ, PYTHONPATH=PKG_DIR, CXX=cxx))
    assert r.stdout.split() == ["interrupted", "True"], r.stdout + r.stderr[-3000:]
    child = int((tmp_path / "child").read_text())
    for _ in range(100):  # SIGKILL is delivered at once; the process may take a moment to go
        if not alive(child):
            break
        time.sleep(0.1)
    assert not alive(child)
    assert not [f for f in os.listdir(tmp_path / "cache") if f.count(".") > 1]  # the compile's files went too


def test_a_compiler_out_of_disk_says_so(tmp_path, monkeypatch):
    mini.config.cache_dir = str(tmp_path / "cache")
    monkeypatch.setenv("CXX", fake_compiler(
        tmp_path, 'echo "/usr/bin/ld: final link failed: No space left on device" >&2; exit 1'))
    msg = compile_error(lambda x: x.exp() - 1, T(4))
    assert "No space left on device" in msg and str(tmp_path / "cache") in msg
    assert "mini.config.cache_dir" in msg and "MINI_CACHE_DIR" in msg and "Free space" in msg
    assert "code generation" not in msg


FULL_DISK = r"""
import sys
import mini
mini.config.cache_dir = sys.argv[1]
try:
    mini.compile(lambda x: x.sin() + 1)(mini.rand(3))
    print("compiled")
except RuntimeError as e:
    print(e)
"""


def test_a_source_that_cannot_be_written_says_so(tmp_path):
    # a cache folder on a full disk: a 64 KB tmpfs filled up, mounted in a user and mount
    # namespace of the child's own (unshare); the generated source does not fit
    if not shutil.which("unshare") or subprocess.run(["unshare", "-rm", "true"]).returncode != 0:
        pytest.skip("no user namespaces here to mount a small tmpfs in")
    disk = tmp_path / "disk"
    disk.mkdir()
    script = (f"mount -t tmpfs -o size=64k tmpfs '{disk}' && head -c 60000 /dev/zero > '{disk}/filler'; "
              f"exec {sys.executable} -c \"$0\" '{disk}/cache'")
    r = subprocess.run(["unshare", "-rm", "sh", "-c", script, FULL_DISK], capture_output=True, text=True, timeout=120,
                       env=dict(os.environ, PYTHONPATH=PKG_DIR))
    assert r.returncode == 0, r.stderr[-3000:]
    assert "No space left on device" in r.stdout and f"{disk}/cache" in r.stdout, r.stdout
    assert "MINI_CACHE_DIR" in r.stdout and "code generation" not in r.stdout


# ---- temporary files of a killed process -----------------------------------------------------

def test_temporary_files_of_a_dead_process_are_removed_once_old(tmp_path):
    # a process killed mid-compile leaves <key>.<pid>.<n>.* behind; a dead pid's files an hour
    # old go when a process first uses the folder. A live pid's and a fresh file stay (a
    # compile on another machine sharing the folder), as do entries and other files.
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    names = {"stale": [f"0123456789abcdef.{dead.pid}.0.cpp", f"0123456789abcdef.{dead.pid}.3.u1.o",
                       f"fedcba9876543210.{dead.pid}.12.load.so", f".probe.{dead.pid}"],
             "kept": [f"0123456789abcdef.{os.getpid()}.0.cpp", "0123456789abcdef.so", "0123456789abcdef.cpp",
                      f"notakey.{dead.pid}.0.cpp", "fresh"]}
    for name in names["stale"] + names["kept"]:
        (tmp_path / name).write_text("x")
        os.utime(tmp_path / name, (0, 0) if name != "fresh" else None)
    fresh = f"0123456789abcdef.{dead.pid}.1.so"  # the dead pid's, written a minute ago
    (tmp_path / fresh).write_text("x")
    os.utime(tmp_path / fresh, (time.time() - 60,) * 2)
    victim(tmp_path)
    left = set(os.listdir(tmp_path))
    assert not left & set(names["stale"])
    assert set(names["kept"]) | {fresh} <= left


# ---- the key names the CPU ------------------------------------------------------------------

def test_the_key_names_the_cpus_features(tmp_path, monkeypatch):
    # -march=native stands for the CPU the compile runs on: a folder shared by machines of
    # different CPUs must not hand one a library built for another. MINI_CPU_FEATURES stands in
    # for /proc/cpuinfo's features.
    monkeypatch.setenv("MINI_CPU_FEATURES", "fpu sse2 avx2")
    first = victim(tmp_path)
    again = victim(tmp_path)
    assert again["from_disk_cache"] and again["library"] == first["library"]
    monkeypatch.setenv("MINI_CPU_FEATURES", "fpu sse2 avx2 avx512f")
    other = victim(tmp_path)
    assert not other["from_disk_cache"] and other["library"] != first["library"]
    monkeypatch.delenv("MINI_CPU_FEATURES")
    native = victim(tmp_path)
    assert native["library"] not in (first["library"], other["library"])
    assert victim(tmp_path)["library"] == native["library"]  # /proc/cpuinfo's: the same each process
