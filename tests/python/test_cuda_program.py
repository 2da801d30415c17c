"""CUDA programs (issue 13, the CUDA side of the Program seam): NVRTC compiles CUDA C++ to a
CUBIN of SASS for one architecture through the checked disk cache, with no GPU (the "null
device" CI runs on); loading and launching need a GPU and say so without one."""
import os
import struct

import pytest

import mini
import mini.inductor as inductor
from conftest import CUDA_SKIP_REASON, HAS_CUDA, requires_no_cuda

pytestmark = pytest.mark.skipif(
    inductor.nvrtc_version() is None,
    reason="this build has no CUDA toolkit (NVRTC): " + mini._C._nvrtc_unavailable_reason())

SCALE = """
extern "C" __global__ void scale(const float* x, float* y, float a, long long n) {
  long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x;
  if (i < n) y[i] = a * x[i];
}
"""


@pytest.fixture
def cache(tmp_path):
    before = mini.config.cache_dir
    mini.config.cache_dir = str(tmp_path)
    yield tmp_path
    mini.config.cache_dir = before


def elf_sm(cubin):
    """The SM version a CUDA ELF was compiled for (e_machine 190 = EM_CUDA)."""
    assert cubin[:4] == b"\x7fELF", cubin[:16]
    (machine,) = struct.unpack("<H", cubin[18:20])
    assert machine == 190, machine
    (flags,) = struct.unpack("<I", cubin[48:52])
    return (flags >> 8) & 0xFF


def test_a_source_compiles_to_sass_for_the_architecture_asked(cache):
    p = inductor.compile_cuda(SCALE, arch="sm_90")
    assert (p.arch, elf_sm(p.cubin), p.from_disk_cache) == ("sm_90", 90, False)
    assert p.path == os.path.join(str(cache), p.key + ".cubin") and os.path.exists(p.path)
    assert open(os.path.join(str(cache), p.key + ".cu")).read() == SCALE  # kept for reading
    other = inductor.compile_cuda(SCALE, arch="sm_80")
    assert elf_sm(other.cubin) == 80 and other.key != p.key  # the architecture is in the key


def test_a_second_compile_reads_the_checked_entry(cache):
    first = inductor.compile_cuda(SCALE, arch="sm_90")
    again = inductor.compile_cuda(SCALE, arch="sm_90")
    assert again.from_disk_cache and again.cubin == first.cubin and again.rejected == ""
    assert again.log == ""  # nothing was compiled


@pytest.mark.parametrize("damage, reason", [
    (lambda b, other: b[: len(b) // 2], "truncated"),
    (lambda b, other: b"garbage" * 10, "trailer"),
    (lambda b, other: b[:100] + bytes([b[100] ^ 1]) + b[101:], "checksum"),
    (lambda b, other: other, "another graph"),
], ids=["truncated", "garbage", "flipped_bit", "another_key"])
def test_a_damaged_or_foreign_entry_is_compiled_again_never_used(cache, damage, reason):
    p = inductor.compile_cuda(SCALE, arch="sm_90")
    other = inductor.compile_cuda(SCALE.replace("a * x[i]", "a + x[i]"), arch="sm_90")
    with open(p.path, "rb") as f:
        whole = f.read()
    with open(other.path, "rb") as f:
        foreign = f.read()
    with open(p.path, "wb") as f:
        f.write(damage(whole, foreign))
    again = inductor.compile_cuda(SCALE, arch="sm_90")
    assert not again.from_disk_cache and reason in again.rejected, again.rejected
    assert again.cubin == p.cubin
    with open(p.path, "rb") as f:
        assert f.read() == whole  # the rewritten entry is whole again


def test_a_source_nvrtc_rejects_raises_with_its_log(cache):
    with pytest.raises(RuntimeError, match=r"NVRTC could not compile(.|\n)*undefined_thing(.|\n)*is undefined"):
        inductor.compile_cuda('extern "C" __global__ void k() { undefined_thing; }')
    p = inductor.compile_cuda(SCALE)  # and the next compile works
    assert p.cubin[:4] == b"\x7fELF"


def test_only_real_architectures(cache):
    with pytest.raises(RuntimeError, match="sm_90"):
        inductor.compile_cuda(SCALE, arch="compute_90")  # PTX: the driver would JIT it at load
    with pytest.raises(TypeError, match="str"):
        inductor.compile_cuda(b"bytes")


@requires_no_cuda
def test_launching_without_a_gpu_says_why(cache):
    p = inductor.compile_cuda(SCALE)
    with pytest.raises(RuntimeError, match="needs a CUDA GPU"):
        p.launch("scale", (1, 1, 1), (32, 1, 1), [])


@pytest.mark.cuda
@pytest.mark.skipif(not HAS_CUDA, reason=CUDA_SKIP_REASON)
def test_a_compiled_kernel_runs_on_the_gpu(cache):
    n = 1000
    x = mini.randn(n, device="cuda")
    y = mini.empty(n, device="cuda")
    p = inductor.compile_cuda(SCALE)  # the GPU's architecture
    assert p.arch == inductor.default_cuda_arch()
    p.launch("scale", ((n + 255) // 256, 1, 1), (256, 1, 1), [x, y, 2.5, n])
    assert mini.allclose(y.cpu(), x.cpu() * 2.5)
    with pytest.raises(RuntimeError, match="no kernel missing"):
        p.launch("missing", (1, 1, 1), (1, 1, 1), [])
    with pytest.raises(ValueError, match="CUDA tensors"):
        p.launch("scale", (1, 1, 1), (1, 1, 1), [x.cpu(), y, 2.5, n])
    wrong = "sm_90" if p.arch.startswith("sm_8") else "sm_80"  # another major: no SASS compatibility
    with pytest.raises(RuntimeError, match="architecture"):
        inductor.compile_cuda(SCALE, arch=wrong).launch("scale", (1, 1, 1), (1, 1, 1), [x, y, 2.5, n])
