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
# The build (scripts/gpu_build.sh, shared with gpu_cuda.sh) takes what that machine may lack
# from .gpu_carry/ (scripts/gpu_prepare.sh stages it here; name it in the call's carry):
# pybind11 at the pin, Python 3.12 headers, OpenBLAS. The Catch2 C++ tests are not built there
# (-DMINI_CPP_TESTS=OFF). MINI_GPU_BLAS=carried / MINI_GPU_HEADERS=carried: gpu_build.sh.
set -uo pipefail
cd "$(dirname "$0")/.."
root=$PWD
conf=$(cd "${1:-tests/conformance}" 2>/dev/null && pwd) || {
  echo "gpu_compare: conformance folder '${1:-tests/conformance}' not found"; exit 2; }
out=${OUT:-$root/gpu_out}
mkdir -p "$out"
python=${PYTHON:-$(command -v python3)}
source scripts/gpu_build.sh   # gpu_build_setup, gpu_build: the build shared with gpu_cuda.sh
build=$root/build-gpu
log=$out/build.log
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
gpu_build_setup
gpu_args+=(-DMINI_CPP_TESTS=OFF)
if ! gpu_build _C mini_python_files; then
  note "nothing was run"
  tail -40 "$out/build.log"; exit 1
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
