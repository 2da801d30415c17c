#!/usr/bin/env bash
# run.sh KIND PYTHON BUILDDIR: one of mini's per-Python-version test runs (ctest registers one
# for each of 3.11, 3.12 and 3.13; see CMakeLists.txt).
#   probe        tests/capture_probe/test_capture_probe.py under PYTHON (builds the probe
#                extension for it into build/capture_probe/py<version>/)
#   probe-san    the same with the probe built with ASan + UBSan (build/capture_probe/
#                san-py<version>/), libasan preloaded
#   python-san   the capture, guard and inductor Python tests (and the misuse catalog) under
#                PYTHON against BUILDDIR/python built with MINI_SANITIZE=ON (ASan + UBSan;
#                scripts/setup.sh makes build-san/), libasan preloaded; the differential
#                fuzzer (test_inductor_fuzz.py) at 50 programs (MINI_INDUCTOR_FUZZ_N), with its
#                generated kernels built with ASan as well
#   capture      the capture Python tests (tests/python/test_capture*.py, test_guard*.py,
#                test_graph_break*.py, test_dynamic_shape*.py, and test_aot.py: training
#                graphs of captured functions and modules; all that exist) under PYTHON's
#                pytest, against BUILDDIR/python
#   conformance  tests/conformance_check.py under PYTHON, against BUILDDIR/python: every case
#                of tests/conformance/cases.py and cases_mini.py through run_mini.py, scored
#                against torch 2.11's records where there are some; fails on the required
#                cases of tests/conformance_required.txt
# Exits 77 (ctest: skipped) when PYTHON does not exist, i.e. scripts/setup.sh found no such
# interpreter; fails when PYTHON exists but BUILDDIR/python holds no built package.
set -euo pipefail
kind=${1:?usage: run.sh probe|probe-san|capture|conformance PYTHON BUILDDIR}
python=${2:?usage: run.sh KIND PYTHON BUILDDIR}
builddir=${3:?usage: run.sh KIND PYTHON BUILDDIR}
root=$(cd "$(dirname "$0")/../.." && pwd)
cd "$root"

if [ ! -x "$python" ]; then
  echo "SKIPPED: $python does not exist (scripts/setup.sh found no such Python version)"
  exit 77
fi
echo "$kind on $("$python" --version 2>&1) ($python), package from $builddir/python"

need_package() {
  if ! ls "$builddir"/python/mini/_C*.so >/dev/null 2>&1; then
    echo "FAIL: no built package in $builddir/python (run scripts/setup.sh)"
    exit 1
  fi
  export PYTHONPATH="$builddir/python" MINI_PYTHON_DIR="$builddir/python"
}

case "$kind" in
  probe)
    exec "$python" tests/capture_probe/test_capture_probe.py
    ;;
  probe-san)
    version=$("$python" -c 'import sys; print("%d.%d.%d" % sys.version_info[:3])')
    san_dir="$root/build/capture_probe/san-py$version"
    SAN=1 bash tests/capture_probe/build.sh "$python" "$san_dir" >/dev/null
    CAPTURE_PROBE_DIR="$san_dir" LD_PRELOAD="$(g++ -print-file-name=libasan.so)" \
      ASAN_OPTIONS=detect_leaks=0:allocator_may_return_null=1 UBSAN_OPTIONS=print_stacktrace=1 \
      exec "$python" tests/capture_probe/test_capture_probe.py
    ;;
  capture)
    need_package
    shopt -s nullglob
    files=(tests/python/test_capture*.py tests/python/test_guard*.py
           tests/python/test_graph_break*.py tests/python/test_dynamic_shape*.py
           tests/python/test_aot.py)
    if [ ${#files[@]} -eq 0 ]; then
      echo "no capture Python tests yet (tests/python/test_capture*.py, test_guard*.py, ...)"
      exit 0
    fi
    exec "$python" -m pytest -q -p no:cacheprovider "${files[@]}"
    ;;
  python-san)
    need_package
    shopt -s nullglob
    files=(tests/python/test_capture*.py tests/python/test_guard*.py
           tests/python/test_graph_break*.py tests/python/test_dynamic_shape*.py
           tests/python/test_inductor*.py tests/python/test_kernel_cache*.py
           tests/python/test_misuse*.py tests/python/test_aot.py)
    # Leaks are not checked: CPython keeps interned objects and arenas alive at exit; an
    # allocation too large returns null (as the real allocator does: mini raises), not abort. Tests
    # marked rss (resident memory stays flat) run in the plain build only: ASan's quarantine
    # holds freed memory by design.
    # ASan's frames are several times the release build's, and the recursion tests go near
    # Python's limit with mini's frames on the C stack: give the instrumented run room.
    ulimit -s 65536 2>/dev/null || ulimit -s unlimited 2>/dev/null || true
    export LD_PRELOAD="$(g++ -print-file-name=libasan.so) $(g++ -print-file-name=libubsan.so)"
    export ASAN_OPTIONS=detect_leaks=0:allocator_may_return_null=1 UBSAN_OPTIONS=print_stacktrace=1
    fuzz=tests/python/test_inductor_fuzz.py
    rest=()
    for f in "${files[@]}"; do [ "$f" = "$fuzz" ] || rest+=("$f"); done
    status=0
    "$python" -m pytest -q -p no:cacheprovider -m "not rss" "${rest[@]}" || status=$?
    # The differential fuzzer at a small program count, its generated kernels instrumented
    # too (CXX carries the flags into mini's compiler command): a kernel that reads past a
    # buffer, as one did when a broadcast against a dynamic size went unchecked, is an ASan
    # report in the forked child, and a failed program here.
    if [ -f "$fuzz" ]; then
      CXX="${CXX:-c++} -fsanitize=address -fno-omit-frame-pointer" MINI_INDUCTOR_FUZZ_N=${MINI_INDUCTOR_FUZZ_N:-50} \
        "$python" -m pytest -q -p no:cacheprovider -m "not rss" "$fuzz" || status=$?
    fi
    exit $status
    ;;
  conformance)
    need_package
    exec "$python" tests/conformance_check.py
    ;;
  *)
    echo "run.sh: unknown kind '$kind'" >&2
    exit 2
    ;;
esac
