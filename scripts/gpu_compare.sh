#!/usr/bin/env bash
# gpu_compare.sh [CONFDIR]: run ON the lent GPU machine (its python3 is 3.12 with torch 2.11).
# Builds mini's extension against that python3 into build-gpu/, then runs, on that one
# interpreter, the conformance cases of CONFDIR (default tests/conformance/: cases.py and
# cases_mini.py) on mini (run_mini.py) and on real torch.compile (run_torch.py), and writes to
# $OUT (default ./gpu_out; 8 files, the most a device call brings back):
#   env.txt                  what the machine has (versions, headers, BLAS, Catch2)
#   build.log                CMake configure + build
#   torch_live.jsonl         run_torch.py's records (a first line with the versions)
#   expected_torch_<v>_mini.jsonl  the same records of cases_mini.py's cases, in the form of
#                            the recorded files: copied into tests/conformance/, it is what
#                            run_mini.py scores those cases against (notes/gpu_conformance.md)
#   mini_vs_recorded.txt     run_mini.py against CONFDIR's recorded files
#   mini_vs_torch_live.txt   run_mini.py --json against torch_live.jsonl (same interpreter)
#   summary.txt              side by side, case by case: recorded torch, live torch, mini
#   extras.txt               the capture probe and capture Python tests on this interpreter
# What it may need and that machine may lack comes from .gpu_carry/ (scripts/gpu_prepare.sh
# stages it here; name it in the call's carry): pybind11 at the pin, Python 3.12 headers,
# OpenBLAS. The Catch2 C++ tests are not built there (-DMINI_CPP_TESTS=OFF).
# MINI_GPU_BLAS=carried skips the machine's own BLAS; MINI_GPU_HEADERS=carried uses the carried
# Python headers even where the machine has its own (both for trying the fallbacks elsewhere).
set -uo pipefail
cd "$(dirname "$0")/.."
root=$PWD
conf=$(cd "${1:-tests/conformance}" 2>/dev/null && pwd) || {
  echo "gpu_compare: conformance folder '${1:-tests/conformance}' not found"; exit 2; }
out=${OUT:-$root/gpu_out}
mkdir -p "$out"
python=${PYTHON:-$(command -v python3)}
# That machine sets CXX/CC to a GCC under /opt/gcc that links libstdc++ statically into shared
# objects, without libstdc++'s stream initialization: the first std::ostringstream in mini
# then crashes. Build (and let mini's inductor compile) with the distribution's compiler,
# whose libstdc++ is the shared one Python already loaded. MINI_GPU_CXX overrides.
if [ -x "${MINI_GPU_CXX:-/usr/bin/g++}" ]; then
  export CXX=${MINI_GPU_CXX:-/usr/bin/g++}
  [ -x /usr/bin/gcc ] && export CC=/usr/bin/gcc
fi
carry=$root/.gpu_carry
build=$root/build-gpu
jobs=$(nproc)
t0=$(date +%s)
note() { echo "gpu_compare: $*" | tee -a "$out/env.txt"; }
: >"$out/env.txt"

# ---- what is there ------------------------------------------------------------------------
{
  echo "== machine"; uname -a; nproc; nvidia-smi -L 2>&1 | head -4
  echo "== python: $python"; "$python" --version
  "$python" -c 'import sysconfig, os; i = sysconfig.get_paths()["include"]; print("include", i, "Python.h:", os.path.exists(os.path.join(i, "Python.h")))'
  for m in torch numpy pybind11 pytest; do
    "$python" -c "import $m; print('$m', $m.__version__, $m.__file__)" 2>&1 | tail -1
  done
  echo "== tools"; cmake --version | head -1; ninja --version 2>&1; g++ --version | head -1
  nvcc --version 2>&1 | tail -1
  echo "== cblas.h:"; find /usr/include /usr/local/include /opt -maxdepth 4 -name cblas.h 2>/dev/null | head
  echo "== BLAS libraries:"; ldconfig -p | grep -Ei 'libopenblas|libblas|libcblas|libmkl_rt|libblis' | head
  echo "== libgfortran:"; ldconfig -p | grep -E 'libgfortran.so.5' | head -2
  echo "== Catch2:"; ls -d /usr/include/catch2 /usr/lib/cmake/Catch2 /usr/share/Catch2 2>/dev/null || echo "not found"
} >>"$out/env.txt" 2>&1

# ---- configure + build --------------------------------------------------------------------
args=(-DCMAKE_BUILD_TYPE=Release -DPython_EXECUTABLE="$python"
      -DMINI_SANITIZED_TESTS=OFF -DMINI_CPP_TESTS=OFF)
command -v ninja >/dev/null && args+=(-G Ninja)
if [ -f "$carry/site/pybind11/__init__.py" ]; then
  export PYTHONPATH="$carry/site${PYTHONPATH:+:$PYTHONPATH}"   # the pinned pybind11 first
  note "pybind11 from .gpu_carry/site ($(cat "$carry/site/.pin" 2>/dev/null))"
fi
has_header=$("$python" -c 'import sysconfig, os; print(int(os.path.exists(os.path.join(sysconfig.get_paths()["include"], "Python.h"))))')
if [ "$has_header" != 1 ] || [ "${MINI_GPU_HEADERS:-}" = carried ]; then
  if [ -f "$carry/include/python3.12/Python.h" ]; then
    args+=(-DPython_INCLUDE_DIR="$carry/include/python3.12")
    note "using the carried 3.12 headers (another 3.12 patch release): $([ "$has_header" = 1 ] && echo "MINI_GPU_HEADERS=carried" || echo "$python has no Python.h")"
  else
    note "no Python.h for $python and none carried: the build will fail"
  fi
fi

configure() { rm -rf "$build"; cmake -S . -B "$build" "${args[@]}" "$@" >>"$out/build.log" 2>&1; }
build_and_import() {   # builds the package, then imports it (an unresolved BLAS symbol shows here)
  cmake --build "$build" -j"$jobs" --target _C mini_python_files >>"$out/build.log" 2>&1 || return 1
  PYTHONPATH="$build/python" "$python" -c 'import mini; mini.matmul(mini.randn(2, 3), mini.randn(3, 2))' \
    >>"$out/build.log" 2>&1
}
use_carried_blas() {
  [ -f "$carry/openblas/lib/libopenblas.so" ] || return 1
  ln -sf libopenblas.so "$carry/openblas/lib/libopenblas.so.0"
  export LD_LIBRARY_PATH="$carry/openblas/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
  if ! ldconfig -p | grep -q 'libgfortran.so.5'; then
    export LD_LIBRARY_PATH="$LD_LIBRARY_PATH:$carry/openblas/extra"
    note "no libgfortran.so.5 on the machine: using the carried one"
  fi
  configure -DBLA_VENDOR=OpenBLAS -DCMAKE_LIBRARY_PATH="$carry/openblas/lib" \
            -DCBLAS_INCLUDE_DIR="$carry/openblas/include"
}
blas_in_cache() {
  grep -E '^(BLAS_[A-Za-z0-9]+_LIBRARY|CBLAS_INCLUDE_DIR):' "$build/CMakeCache.txt" | grep -v NOTFOUND |
    sed 's/:[A-Z]*=/=/' | tr '\n' ' '
}

ok=0
if [ "${MINI_GPU_BLAS:-}" != carried ] && configure; then
  note "configured with the machine's own BLAS: $(blas_in_cache)"
  if build_and_import; then
    ok=1
  else
    note "build or import with the machine's own BLAS failed (build.log)"
  fi
elif [ "${MINI_GPU_BLAS:-}" != carried ]; then
  note "configure failed with the machine's own libraries (build.log)"
fi
if [ "$ok" = 0 ]; then
  if ! [ -f "$carry/openblas/lib/libopenblas.so" ]; then
    note "no carried OpenBLAS (scripts/gpu_prepare.sh) to fall back on; nothing was run"
    tail -40 "$out/build.log"; exit 1
  fi
  note "configuring with the carried OpenBLAS"
  if ! use_carried_blas; then
    note "configure failed with the carried OpenBLAS too (build.log); nothing was run"
    tail -40 "$out/build.log"; exit 1
  fi
  note "configured with: $(blas_in_cache)"
  if ! build_and_import; then
    note "build or import failed (build.log); nothing was run"
    tail -40 "$out/build.log"; exit 1
  fi
fi
note "built $(ls "$build"/python/mini/_C*.so) in $(( $(date +%s) - t0 )) s"

# ---- the conformance cases on one interpreter ---------------------------------------------
export PYTHONUNBUFFERED=1
mini_env=(env PYTHONPATH="$build/python" MINI_PYTHON_DIR="$build/python")
t1=$(date +%s)
records=$(mktemp -d)
write=()
[ -f "$conf/cases_mini.py" ] && write=(--write "$records")   # a runner that has cases_mini.py
"$python" "$conf/run_torch.py" ${write[@]+"${write[@]}"} >"$out/torch_live.jsonl" 2>"$out/torch_live.err"
note "run_torch.py: status $?, $(grep -c '^@@' "$out/torch_live.jsonl") cases in $(( $(date +%s) - t1 )) s"
grep '^run_torch:' "$out/torch_live.err" | while read -r line; do note "$line"; done
for f in "$records"/expected_torch_*.jsonl; do
  [ -f "$f" ] || continue
  name=$(basename "$f")
  if [ "${name%_mini.jsonl}" != "$name" ]; then
    cp "$f" "$out/$name"
    note "torch's records of cases_mini.py in $name: copied into tests/conformance/," \
         "it scores mini on them"
  elif cmp -s "$f" "$conf/$name"; then
    note "torch's records of cases.py now equal $name byte for byte"
  else
    note "torch's records of cases.py now differ from $name (summary.txt says which fields)"
  fi
done
t1=$(date +%s)
"${mini_env[@]}" "$python" "$conf/run_mini.py" >"$out/mini_vs_recorded.txt" 2>&1
note "run_mini.py vs recorded: status $?, $(tail -1 "$out/mini_vs_recorded.txt") in $(( $(date +%s) - t1 )) s"
# run_torch.py's output also holds what the cases print ("step"): keep the JSON records only
grep -E '^@*\{' "$out/torch_live.jsonl" | sed -E 's/^@+//' >"$records/torch_live_records.jsonl"
"${mini_env[@]}" "$python" "$conf/run_mini.py" --json --expected "$records/torch_live_records.jsonl" \
  >"$out/mini_vs_torch_live.txt" 2>&1
note "run_mini.py vs live torch: status $?, $(tail -1 "$out/mini_vs_torch_live.txt")"
recorded=()
for f in "$conf"/expected_torch_2.11.jsonl "$conf"/expected_torch_2.11_mini.jsonl; do
  [ -f "$f" ] && recorded+=(--recorded "$f")
done
"$python" scripts/gpu_summary.py "${recorded[@]}" \
  --torch "$out/torch_live.jsonl" --mini "$out/mini_vs_torch_live.txt" \
  --required tests/conformance_required.txt >"$out/summary.txt" 2>&1
rm -rf "$records"
# torch's warnings, if any, go at the end of the log rather than into an extra file
{ echo "== run_torch.py stderr"; tail -50 "$out/torch_live.err"; } >>"$out/build.log"
rm -f "$out/torch_live.err"

# ---- extras: the per-version tests on this interpreter (informational) ---------------------
{
  echo "== capture probe tests"
  timeout 300 bash tests/python_versions/run.sh probe "$python" "$build" 2>&1 | tail -40
  echo "== capture Python tests"
  timeout 300 bash tests/python_versions/run.sh capture "$python" "$build" 2>&1 | tail -40
  echo "== conformance_check (required cases)"
  timeout 300 env MINI_CONFORMANCE_DIR="$conf" \
    bash tests/python_versions/run.sh conformance "$python" "$build" 2>&1 | tail -12
} >"$out/extras.txt" 2>&1

cat "$out/summary.txt"
echo "---- extras (tails)"; grep -E 'passed|failed|error|conformance_check|FAIL' "$out/extras.txt" | tail -12
note "done in $(( $(date +%s) - t0 )) s; outputs in $out"
