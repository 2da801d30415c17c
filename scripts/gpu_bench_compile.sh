#!/usr/bin/env bash
# gpu_bench_compile.sh: run ON the lent GPU machine (after scripts/gpu_prepare.sh here; carry
# .gpu_carry). Builds mini there and checks it with scripts/gpu_compare.sh (the conformance
# cases on mini and on live torch.compile, the capture tests on that Python), then runs
# labs/bench/bench_compile.py with torch.compile compiling the same programs beside mini.
# Writes to $OUT (default ./gpu_out), five files:
#   summary.txt            gpu_compare's case-by-case summary and its extras' tails
#   bench_compile.txt      the bench's table (mini by stage, torch's total)
#   bench_compile.json/.png/.svg   its numbers and figure (copy to figures/cuda/ to keep)
set -uo pipefail
cd "$(dirname "$0")/.."
out=${OUT:-$PWD/gpu_out}
mkdir -p "$out"
work=$(mktemp -d)
OUT=$work bash scripts/gpu_compare.sh >"$work/compare.log" 2>&1
{ cat "$work/summary.txt"; echo "---- extras (tails)"
  grep -E 'passed|failed|error|conformance_check|FAIL' "$work/extras.txt" | tail -12
  echo "---- gpu_compare"; grep '^gpu_compare' "$work/env.txt"; } >"$out/summary.txt" 2>&1
# mini's inductor runs the compiler in CXX; gpu_compare.sh says why it is the distribution's
[ -x /usr/bin/g++ ] && export CXX=${MINI_GPU_CXX:-/usr/bin/g++}
PYTHONPATH=build-gpu/python MINI_CACHE_DIR=$(mktemp -d) python3 labs/bench/bench_compile.py --out "$out" \
  2>&1 | tee "$out/bench_compile.txt" | tail -40
