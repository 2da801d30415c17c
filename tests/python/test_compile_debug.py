"""MINI_COMPILE_DEBUG=1: every artifact of every graph written to ./mini_compile_debug/ (as
TORCH_COMPILE_DEBUG=1 writes torch_compile_debug/). Runs in a child process, since the
variable is read once per process."""
import os
import subprocess
import sys
import textwrap

import pytest

import mini

PKG_DIR = os.path.dirname(os.path.dirname(os.path.abspath(mini.__file__)))

SCRIPT = textwrap.dedent("""
    import mini
    mini.config.cache_dir = "cache"
    def f(x, w):
        y = (x @ w).relu()
        print("side effect")
        return (y * 2).sum()
    x, w = mini.randn(4, 4), mini.randn(4, 4).requires_grad_()
    mini.compile(f)(x, w).backward()
    mini.compile(lambda a: a.sin() + 1)(x)
""")


def run(tmp_path, **env):
    full = dict(os.environ, PYTHONPATH=PKG_DIR, **env)
    full.pop("MINI_LOGS", None)
    return subprocess.run([sys.executable, "-c", SCRIPT], cwd=tmp_path, env=full, capture_output=True,
                          text=True, timeout=120)


# every stage writes its artifact: the joint graph, the partition, the fusion groups, the C++ and
# the graphs on both sides of a break (no assignment's: it goes through five of them)
def test_every_artifact_of_every_graph_is_written(tmp_path):
    r = run(tmp_path, MINI_COMPILE_DEBUG="1")
    assert r.returncode == 0, r.stderr
    (run_dir,) = (tmp_path / "mini_compile_debug").iterdir()
    assert run_dir.name.startswith("run_") and "-pid_" in run_dir.name
    files = {str(p.relative_to(run_dir)) for p in run_dir.rglob("*") if p.is_file()}
    training = {"graph_code.txt", "guards.txt", "aot_joint_graph.txt", "aot_forward_graph.txt",
                "aot_backward_graph.txt",
                "fusion_forward.txt", "fusion_backward.txt", "output_code_forward.cpp",
                "output_code_backward.cpp"}
    for graph in ("__compiled_fn_1", "__compiled_fn_2"):  # the graphs before and after the print
        assert {f"{graph}/{name}" for name in training} <= files, sorted(files)
    # inference: one graph, no training graphs
    assert {"__compiled_fn_3/graph_code.txt", "__compiled_fn_3/guards.txt", "__compiled_fn_3/fusion.txt",
            "__compiled_fn_3/output_code.cpp"} <= files, sorted(files)
    assert not any(f.startswith("__compiled_fn_3/aot_") for f in files)
    brk = (run_dir / "graph_breaks" / "break_1.txt").read_text()
    assert "print" in brk and "__compiled_fn_1" in brk
    assert "mini.matmul(l_x_, l_w_)" in (run_dir / "__compiled_fn_1" / "graph_code.txt").read_text()
    assert "tangents_1" in (run_dir / "__compiled_fn_1" / "aot_backward_graph.txt").read_text()
    joint = (run_dir / "__compiled_fn_1" / "aot_joint_graph.txt").read_text()
    assert "===== Joint graph 1 =====" in joint and "tangents_1" in joint and "mini.matmul(l_x_, l_w_)" in joint
    source = (run_dir / "__compiled_fn_3" / "output_code.cpp").read_text()
    assert 'extern "C" void cpp_' in source
    assert "float exp_f32(float x)" in source  # the whole source, prelude included


def test_nothing_is_written_without_the_variable(tmp_path):
    r = run(tmp_path)
    assert r.returncode == 0, r.stderr
    assert not (tmp_path / "mini_compile_debug").exists()


@pytest.mark.parametrize("value", ["0", "false", "no", "off", "OFF", ""])
def test_a_value_that_says_off_writes_nothing(tmp_path, value):
    r = run(tmp_path, MINI_COMPILE_DEBUG=value)
    assert r.returncode == 0 and "MINI_COMPILE_DEBUG" not in r.stderr, r.stderr
    assert not (tmp_path / "mini_compile_debug").exists()


@pytest.mark.parametrize("value", ["1", "true", "Yes", "on"])
def test_a_value_that_says_on_writes_the_files(tmp_path, value):
    r = run(tmp_path, MINI_COMPILE_DEBUG=value)
    assert r.returncode == 0 and "MINI_COMPILE_DEBUG" not in r.stderr, r.stderr
    assert list((tmp_path / "mini_compile_debug").rglob("output_code.cpp"))


def test_an_unknown_value_warns_with_the_accepted_ones_and_is_off(tmp_path):
    r = run(tmp_path, MINI_COMPILE_DEBUG="verbose")
    assert r.returncode == 0, r.stderr
    assert "UserWarning: MINI_COMPILE_DEBUG='verbose' is not understood" in r.stderr
    assert "1, true, yes or on" in r.stderr and "0, false, no, off or empty" in r.stderr
    assert not (tmp_path / "mini_compile_debug").exists()


def test_a_removed_working_folder_does_not_abort(tmp_path):
    # the working folder removed under the process: the debug files go to the temporary folder
    # (TMPDIR), said once, and the compile goes on
    gone, tmp = tmp_path / "gone", tmp_path / "tmp"
    gone.mkdir()
    tmp.mkdir()
    script = (f"import os\nos.chdir({str(gone)!r})\nos.rmdir({str(gone)!r})\n" +
              SCRIPT.replace('"cache"', repr(str(tmp_path / "cache"))) + "\nprint('survived')\n")
    r = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120,
                       env=dict(os.environ, PYTHONPATH=PKG_DIR, MINI_COMPILE_DEBUG="1", TMPDIR=str(tmp)))
    assert r.returncode == 0 and r.stdout.split()[-1] == "survived", r.stderr[-3000:]
    assert r.stderr.count("the working folder cannot be read") == 1, r.stderr
    (run_dir,) = (tmp / "mini_compile_debug").iterdir()
    assert (run_dir / "__compiled_fn_3" / "output_code.cpp").exists()
