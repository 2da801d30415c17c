#!/usr/bin/env bash
# gpu_cuda.sh: run ON the lent GPU machine (one H200, its python3 3.12 with torch 2.11, nvcc,
# CMake, compute-sanitizer, no network), in ONE device call of at most 10 minutes. Builds mini
# with CUDA into build-gpu/ (Release, -DMINI_CUDA=ON, ccache if present, one job per core) and
# runs everything CUDA, each stage timed and capped (capped() below), going on after a failure,
# the most important first; the script keeps its own deadline (MINI_GPU_BUDGET seconds,
# default 560) and gives each later stage at most what is left:
#   build                    _C + mini_python_files, then `import mini` (scripts/gpu_build.sh)
#   cuda available           mini.cuda.is_available() on this machine
#   pytest -m cuda           every CUDA test: the op catalog on cuda, test_cuda.py, the labs
#   bench_cuda_eager         labs/bench/bench_cuda_eager.py, full size, torch beside mini
#   bench_cuda_inductor      labs/bench/bench_cuda_inductor.py: mini compiled (CUDA codegen) against
#                            torch.compile; its table in bench_labs.txt, its files in labs.tar.gz
#   pytest vs torch          tests/python/test_cuda_vs_torch.py (its own process: imports torch)
#   attention pytest, bench_attention   tests/python/test_flash_attention.py, test_fused_attention.py,
#                            test_attention_node.py and the eager fused kernels' tests (layer norm
#                            backward, broadcasts, cross-entropy) on cuda; labs/bench/bench_attention.py
#                            (mini's FlashAttention beside torch's SDPA), only where MINI_GPU_STAGES names them
#   ncu reductions           Nsight Compute over mini's and torch.compile's fused softmax and
#                            layer norm (labs/bench/ncu_reductions.py; layouts MINI_NCU_LAYOUTS, programs
#                            MINI_NCU_PROGRAMS: chain8 too where it names it),
#                            only where MINI_GPU_STAGES names it
#   nvrtc probe              scripts/nvrtc_probe.py: first and repeated NVRTC compiles against the
#                            page cache, only where MINI_GPU_STAGES names it
#   column variants          labs/bench/column_variants.py: GPT-2's column kernels (layer norm's and the
#                            MLP's bias gradients) by blocks in y and launch bounds, only where named
#   kernel variants          labs/bench/cuda_kernel_variants.py: hand edits of the fused layer norm and
#                            softmax kernels timed side by side, only where MINI_GPU_STAGES names it
#   mini_cuda_tests          the C++ CUDA tests (build-gpu/mini_cuda_tests), where they build
#   kernel sweep             mini_cuda_tests "[.sweep]": the eager kernels' variants timed
#                            side by side with a copy ceiling (tests/cuda/bench_cuda_sweep.cpp)
#   eager_anatomy, fusion_wins, train_gpt   the labs with --device cuda, full size
#   profile gpt step         labs/bench/profile_gpt_step.py: the GPT training step under torch's profiler
#                            (GPU busy and idle, host time in CUDA calls by kind), only where named
#   bench gpt2               labs/bench/bench_gpt2.py: GPT-2 124M's training step, mini beside torch
#                            (MINI_GPT2_ARGS: its flags, e.g. --modes/--dtypes/--budget), its table in
#                            bench_labs.txt, its files in labs.tar.gz under labs/gpt2, only where named
#   train_gpt cuda autocast  train_gpt.py --autocast: the forward in bfloat16 autocast, mini and torch,
#                            only where MINI_GPU_STAGES names it
#   reduction layouts cuda   labs/reduction_layouts.py --device cuda: every reduction layout (A10) timed
#                            by row length beside torch.compile, only where MINI_GPU_STAGES names it
#   figures cuda             labs/run_all.py --device cuda: the GPU figure set (figures/cuda/), in
#                            labs.tar.gz under labs/figures_cuda (MINI_GPU_FIGURES_SKIP: labs to skip),
#                            only where MINI_GPU_STAGES names it
#   bench_training cpu       labs/bench/bench_training.py on the host's CPU cores
#   threads cpu              the same script's issue-15 MLP and GPT steps at 1, 2, 4, 8 and 16 threads
#                            (--threads), only where MINI_GPU_STAGES names it
#   blas cpu                 labs/bench/cpu_blas_probe.py and the MLP steps under OPENBLAS_CORETYPE and
#                            OMP_WAIT_POLICY variants, only where MINI_GPU_STAGES names it
#   memcheck, racecheck      compute-sanitizer over mini_cuda_tests; memcheck over a short
#                            Python subset of test_cuda.py, over the flash attention kernels on
#                            small cases ("memcheck attention", only where named), and over the
#                            generated kernels (every layout) and the CUDA graph replays ("memcheck codegen")
#   pytest (rest)            the whole tests/python suite but the cuda tests, on this
#                            interpreter, in 8 processes, with whatever time is left (a timeout
#                            stops it with pytest's summary so far)
# It writes 8 files to $OUT (default ./gpu_out), the most a device call brings back:
#   summary.txt              first: one line per stage (PASS / FAIL / TIMEOUT / SKIP, seconds,
#                            the stage's last telling line), then the machine in a few lines
#   env_build.log            the machine (GPU, driver, versions) and the CMake configure + build
#   tests.log                the pytest runs and mini_cuda_tests
#   sanitizers.log           compute-sanitizer's reports
#   bench_labs.txt           what the benchmark, the kernel sweep and the two labs printed
#   bench_cuda_eager.json, bench_cuda_eager.md   the benchmark's table (for notes/perf.md)
#   labs.tar.gz              the labs' JSON and figures, bench_cuda_inductor.json / .md
# Before the call, HERE: bash scripts/gpu_prepare.sh (stages .gpu_carry/: pybind11, headers,
# OpenBLAS, Catch2). The call: command 'bash scripts/gpu_cuda.sh', carry [".gpu_carry"],
# timeout_s 600. MINI_GPU_STAGES='sweep|bench' (an extended regex, case-insensitive) runs only
# the stages whose names match it, and the build. notes/cuda.md ("Running on the GPU") says what to read first.
set -uo pipefail
cd "$(dirname "$0")/.."
root=$PWD
out=${OUT:-$root/gpu_out}
mkdir -p "$out"
python=${PYTHON:-$(command -v python3)}
start=$(date +%s)
deadline=$(( start + ${MINI_GPU_BUDGET:-560} ))
build=$root/build-gpu
log=$out/env_build.log
summary=$out/summary.txt
work=$(mktemp -d)
: >"$summary"
: >"$log"
note() { echo "gpu_cuda: $*" >>"$log"; }
source scripts/gpu_build.sh

# capped CAP COMMAND...: COMMAND (a shell function too, unlike `timeout`) in its own process
# group; after CAP seconds the group gets SIGINT (pytest then still prints its summary so far),
# 20 s later SIGKILL. Returns COMMAND's status, or 124 when it ran out of time.
capped() {
  local cap=$1
  shift
  rm -f "$work/timed_out"
  set -m
  "$@" &
  local pid=$!
  # the watchdog: its own group too, so that killing it also ends its `sleep` (a sleep left
  # behind would hold the call's output open)
  ( exec >/dev/null 2>&1; sleep "$cap"; touch "$work/timed_out"; kill -INT -- -"$pid"
    sleep 20; kill -KILL -- -"$pid" ) &
  local dog=$!
  set +m
  wait "$pid"
  local rc=$?
  kill -- -"$dog" 2>/dev/null
  wait "$dog" 2>/dev/null
  if [ -f "$work/timed_out" ]; then return 124; fi
  return "$rc"
}

# stage NAME CAP LOGFILE COMMAND...: runs COMMAND capped at CAP seconds and what the deadline
# leaves, appends its output to LOGFILE and one line to summary.txt. Exit 77 means skipped
# (the stage printed why).
stage() {
  local name=$1 cap=$2 logfile=$3
  shift 3
  if [ -n "${MINI_GPU_STAGES:-}" ] && [ "$name" != build ] &&
     ! grep -qiE "$MINI_GPU_STAGES" <<<"$name"; then
    printf '%-8s %-22s %5s  %s\n' SKIP "$name" - "not in MINI_GPU_STAGES" >>"$summary"
    return 77
  fi
  local left=$(( deadline - $(date +%s) - 10 ))
  if (( left < 15 )); then
    printf '%-8s %-22s %5s  %s\n' SKIP "$name" - "no time left before the deadline" >>"$summary"
    return 1
  fi
  (( cap > left )) && cap=$left
  local t0 rc status said
  t0=$(date +%s)
  capped "$cap" "$@" >"$work/stage.out" 2>&1 </dev/null
  rc=$?
  { echo "==== $name (cap ${cap} s, status $rc): $*"; cat "$work/stage.out"; echo; } >>"$logfile"
  case $rc in
    0) status=PASS ;; 77) status=SKIP ;; 124) status=TIMEOUT ;; *) status="FAIL($rc)" ;;
  esac
  said=$(grep -E '^rest, | passed| failed|[0-9]+ errors?( |$)|ERROR SUMMARY|bars: |skipped|All tests passed|test cases|^wrote |CUDA code generation|no CUDA device' \
         "$work/stage.out" | tail -1 | cut -c1-150)
  [ -n "$said" ] || said=$(grep -v '^\s*$' "$work/stage.out" | tail -1 | cut -c1-150)
  printf '%-8s %-22s %4ds  %s\n' "$status" "$name" "$(( $(date +%s) - t0 ))" "$said" >>"$summary"
  [ "$rc" = 0 ]
}

# ---- the machine ----------------------------------------------------------------------------
{
  echo "== machine"; uname -a; nproc; nvidia-smi 2>&1 | head -15
  echo "== python: $python"; "$python" --version
  for m in torch numpy pytest matplotlib; do
    "$python" -c "import $m; print('$m', $m.__version__)" 2>&1 | tail -1
  done
  echo "== tools"; cmake --version | head -1; ninja --version 2>&1; /usr/bin/g++ --version | head -1
  nvcc --version 2>&1 | tail -2; command -v ccache
  sanitizer=$(command -v compute-sanitizer || ls /usr/local/cuda/bin/compute-sanitizer 2>/dev/null)
  echo "compute-sanitizer: ${sanitizer:-not found}"
} >>"$log" 2>&1
sanitizer=$(command -v compute-sanitizer || ls /usr/local/cuda/bin/compute-sanitizer 2>/dev/null || true)

# ---- build ----------------------------------------------------------------------------------
gpu_build_setup
gpu_args+=(-DMINI_CUDA=ON)
[ -n "${CXX:-}" ] && gpu_args+=(-DCMAKE_CUDA_HOST_COMPILER="$CXX")
if command -v ccache >/dev/null; then
  gpu_args+=(-DCMAKE_CXX_COMPILER_LAUNCHER=ccache -DCMAKE_CUDA_COMPILER_LAUNCHER=ccache)
fi
# the C++ CUDA tests need Catch2 (header-only): the machine's, or the one gpu_prepare.sh carried
if [ -f "$carry/catch2/include/catch2/catch.hpp" ]; then
  gpu_args+=(-DMINI_CPP_TESTS=ON -DCMAKE_PREFIX_PATH="$carry/catch2")
elif ls /usr/lib/cmake/Catch2 /usr/lib/x86_64-linux-gnu/cmake/Catch2 /usr/local/lib/cmake/Catch2 \
       >/dev/null 2>&1; then
  gpu_args+=(-DMINI_CPP_TESTS=ON)
else
  gpu_args+=(-DMINI_CPP_TESTS=OFF)
  note "no Catch2 (run scripts/gpu_prepare.sh first): mini_cuda_tests is not built"
fi
build_package() { gpu_build _C mini_python_files; }
if ! stage build 360 "$log" build_package; then
  grep -v '^==== ' "$log" | tail -15 | sed 's/^/  /' >>"$summary"
fi
# The extension must use the shared libstdc++ Python loaded: a copy linked in statically (the
# machine's /opt/gcc habit) made capture crash. Its libraries and link line go to the log.
{
  echo "== the extension's libraries (LDFLAGS='${LDFLAGS:-}')"
  ldd "$build"/python/mini/_C*.so 2>&1
  grep -A3 '^build python/mini/_C' "$build/build.ninja" 2>/dev/null
  grep -h 'IMPLICIT_LINK' "$build"/CMakeFiles/*/CMakeCUDACompiler.cmake "$build"/CMakeFiles/*/CMakeCXXCompiler.cmake 2>/dev/null
} >>"$log"
if ! ldd "$build"/python/mini/_C*.so 2>/dev/null | grep -q 'libstdc++'; then
  printf '%-8s %-22s %4s  %s\n' WARN "libstdc++" - "_C does not load the shared libstdc++ (see env_build.log)" >>"$summary"
fi
export PYTHONPATH="$build/python${PYTHONPATH:+:$PYTHONPATH}" MINI_PYTHON_DIR="$build/python"
export MINI_CACHE_DIR="$work/kernel_cache" PYTHONUNBUFFERED=1 MPLBACKEND=Agg
# pytest with Python's SIGINT handler even where SIGINT came in ignored (a background job of a
# shell without job control): capped()'s SIGINT then stops it with its summary, and the tests
# that interrupt themselves (test_misuse_catalog.py) see KeyboardInterrupt
pytest=("$python" -c 'import signal, sys, pytest
signal.signal(signal.SIGINT, signal.default_int_handler)
sys.exit(pytest.main(sys.argv[1:]))' -q -rfE -p no:cacheprovider)

only_when_named() {   # only_when_named COMMAND...: runs it only where MINI_GPU_STAGES is set
  [ -n "${MINI_GPU_STAGES:-}" ] || { echo "runs only where MINI_GPU_STAGES names it"; return 77; }
  "$@"
}

# ---- CUDA tests -----------------------------------------------------------------------------
stage "cuda available" 60 "$out/tests.log" "$python" -c '
import mini
print("mini.cuda.is_available():", mini.cuda.is_available(), "device_count:", mini.cuda.device_count())
assert mini.cuda.is_available(), "mini sees no GPU here"
x = mini.randn(1000, device="cuda")
print("sum of 1000 normals on cuda:", (x * 2).sum().item())'
# MINI_GPU_PYTEST_K: only the cuda tests pytest -k selects (a short call for one change)
stage "pytest -m cuda" "${MINI_GPU_PYTEST_CAP:-360}" "$out/tests.log" "${pytest[@]}" -m cuda tests/python \
  --ignore=tests/python/test_cuda_vs_torch.py ${MINI_GPU_PYTEST_K:+-k "$MINI_GPU_PYTEST_K"}

# ---- the benchmark and the labs -------------------------------------------------------------
mkdir -p "$work/labs"
stage bench_cuda_eager 150 "$out/bench_labs.txt" "$python" labs/bench/bench_cuda_eager.py \
  --out "$work/bench"
cp "$work"/bench/bench_cuda_eager.json "$work"/bench/bench_cuda_eager.md "$out/" 2>/dev/null
# compiled CUDA against torch.compile; its .json/.md travel in labs.tar.gz (8 files at most in $OUT)
# MINI_BENCH_ARGS: more of its options (--nvrtc-variants=-lineinfo,-,-Ofc=min: the = sign, as the
# value starts with a dash)
stage bench_cuda_inductor 150 "$out/bench_labs.txt" "$python" labs/bench/bench_cuda_inductor.py --layouts \
  --out "$work/labs" ${MINI_BENCH_ARGS:-}
# FlashAttention (issue 32): its tests, its benchmark beside torch's SDPA (table in bench_labs.txt,
# files in labs.tar.gz under labs/bench_attention/), only where MINI_GPU_STAGES names them
# ('attention' selects these three stages and the memcheck below)
stage "attention pytest" 120 "$out/tests.log" only_when_named "${pytest[@]}" \
  tests/python/test_flash_attention.py tests/python/test_fused_attention.py tests/python/test_attention_node.py tests/python/test_layer_norm_backward.py tests/python/test_cuda_broadcast.py tests/python/test_cross_entropy.py -m cuda
stage "bench_attention" 150 "$out/bench_labs.txt" only_when_named "$python" labs/bench/bench_attention.py \
  --out "$work/labs/bench_attention"
stage "pytest vs torch" 120 "$out/tests.log" "${pytest[@]}" tests/python/test_cuda_vs_torch.py
# Nsight Compute over the fused softmax and layer norm, mini's (layouts MINI_NCU_LAYOUTS, default
# the default one) beside torch.compile's, with torch's Triton source (in labs.tar.gz,
# torch_code/); only where MINI_GPU_STAGES names it (ncu replays each kernel many times)
run_ncu() {
  [ -n "${MINI_GPU_STAGES:-}" ] || { echo "ncu runs only where MINI_GPU_STAGES names it"; return 77; }
  command -v ncu >/dev/null || { echo "no ncu on this machine"; return 77; }
  ncu --section SpeedOfLight --section Occupancy --section LaunchStats --section WarpStateStats \
    --section MemoryWorkloadAnalysis -k regex:fused "$python" labs/bench/ncu_reductions.py \
    --layouts "${MINI_NCU_LAYOUTS:-}" --torch-code "$work/labs/torch_code" \
    --programs "${MINI_NCU_PROGRAMS:-softmax_decomp,layernorm_decomp}"
}
stage "ncu reductions" 150 "$out/bench_labs.txt" run_ncu

# ---- the C++ CUDA tests -----------------------------------------------------------------------
cuda_tests=$build/mini_cuda_tests
has_cuda_tests() {
  grep -qs '/mini_cuda_tests.dir$' "$build/CMakeFiles/TargetDirectories.txt" || {
    echo "no mini_cuda_tests target in this build (no Catch2, or tests/cuda/ not there yet)"
    return 77; }
}
build_cuda_tests() { has_cuda_tests && cmake --build "$build" -j"$(nproc)" --target mini_cuda_tests; }
stage "build mini_cuda_tests" 150 "$log" build_cuda_tests
run_cuda_tests() { [ -x "$cuda_tests" ] || { echo "mini_cuda_tests was not built"; return 77; }; "$cuda_tests" "$@"; }
stage mini_cuda_tests 90 "$out/tests.log" run_cuda_tests
stage "kernel sweep" 60 "$out/bench_labs.txt" run_cuda_tests "[.sweep]"

stage "eager_anatomy cuda" 90 "$out/bench_labs.txt" "$python" labs/eager_anatomy.py \
  --device cuda --out "$work/labs"
stage "fusion_wins cuda" 120 "$out/bench_labs.txt" "$python" labs/fusion_wins.py \
  --device cuda --out "$work/labs"
stage "train_gpt cuda" 240 "$out/bench_labs.txt" "$python" labs/train_gpt.py \
  --device cuda --out "$work/labs"
stage "profile gpt step" 180 "$out/bench_labs.txt" only_when_named "$python" labs/bench/profile_gpt_step.py \
  --json "$work/labs/profile_gpt_step.json"
stage "bench gpt2" "${MINI_GPT2_CAP:-540}" "$out/bench_labs.txt" only_when_named "$python" labs/bench/bench_gpt2.py \
  --device cuda --out "$work/labs/gpt2" ${MINI_GPT2_ARGS:-}
stage "train_gpt cuda autocast" 240 "$out/bench_labs.txt" only_when_named "$python" labs/train_gpt.py \
  --device cuda --autocast --out "$work/labs"
# assignment A10's lab on the GPU: each reduction layout timed by row length, torch.compile beside
stage "reduction layouts cuda" 240 "$out/bench_labs.txt" only_when_named "$python" labs/reduction_layouts.py \
  --device cuda --out "$work/labs/reduction_layouts_cuda"
# the GPU figure set (issue 14): every lab with --device cuda, torch beside mini where a lab runs it
stage "figures cuda" "${MINI_GPU_FIGURES_CAP:-420}" "$out/bench_labs.txt" only_when_named "$python" labs/run_all.py --device cuda \
  --out "$work/labs/figures_cuda" ${MINI_GPU_FIGURES_SKIP:+--skip "$MINI_GPU_FIGURES_SKIP"}
# training steps on this host's CPU (16 cores): issue 15's bars, compiled against eager
stage "bench_training cpu" 150 "$out/bench_labs.txt" "$python" labs/bench/bench_training.py \
  --json "$work/labs/bench_training_cpu.json"
stage "threads cpu" 200 "$out/bench_labs.txt" only_when_named "$python" labs/bench/bench_training.py \
  --only 'gpt|MSE' --threads 1,2,4,8,16 --profile --json "$work/labs/bench_training_threads.json"

# the MLP rows' matmuls: which OpenBLAS core this CPU gets and how fast each matmul form runs,
# then the MLP steps, each with mini's choice of core (mini/_cpu.py), OpenBLAS's own
# (MINI_BLAS_CORE=openblas: Prescott's SSE3 kernels on the H200 host, 2026-12-03) and with
# OMP_WAIT_POLICY=PASSIVE; only where MINI_GPU_STAGES names it
blas_cpu() {
  [ -n "${MINI_GPU_STAGES:-}" ] || { echo "runs only where MINI_GPU_STAGES names it"; return 77; }
  local v rc=0
  # at 1 and 4 threads too: is Debian's OpenBLAS slower than numpy's in its kernels or its threading?
  for v in "" "MINI_BLAS_CORE=openblas" "OMP_WAIT_POLICY=PASSIVE" \
           "OMP_NUM_THREADS=4 OPENBLAS_NUM_THREADS=4" "OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1"; do
    echo "---- blas probe, ${v:-default environment}"
    env $v "$python" labs/bench/cpu_blas_probe.py --torch || rc=1
  done
  for v in "" "MINI_BLAS_CORE=openblas" "OMP_WAIT_POLICY=PASSIVE"; do
    echo "---- bench_training MLPs, ${v:-default environment}"
    env $v "$python" labs/bench/bench_training.py --only 'MSE|relu' $([ -z "$v" ] && echo --profile) || rc=1
  done
  return $rc
}
stage "blas cpu" 240 "$out/bench_labs.txt" blas_cpu

# ---- experiments, only where MINI_GPU_STAGES names them ---------------------------------------
# after the benchmark, whose cold compiles must be the machine's first of those sources
# (scripts/nvrtc_probe.py says why)
stage "nvrtc probe" 120 "$out/bench_labs.txt" only_when_named "$python" scripts/nvrtc_probe.py
stage "kernel variants" 120 "$out/bench_labs.txt" only_when_named bash -c \
  "'$python' labs/bench/cuda_kernel_variants.py --program layernorm_decomp &&
   '$python' labs/bench/cuda_kernel_variants.py --program softmax_decomp"
stage "column variants" 120 "$out/bench_labs.txt" only_when_named "$python" labs/bench/column_variants.py

# ---- compute-sanitizer ------------------------------------------------------------------------
sanitize() {   # sanitize TOOL COMMAND...
  [ -n "$sanitizer" ] || { echo "compute-sanitizer not found"; return 77; }
  local tool=$1
  shift
  "$sanitizer" --tool "$tool" --error-exitcode 99 "$@"
}
sanitize_cuda_tests() { [ -x "$cuda_tests" ] || { echo "mini_cuda_tests was not built"; return 77; }; sanitize "$@" "$cuda_tests"; }
# memcheck: no --leak-check (the caching allocator keeps its blocks, and cuBLAS its workspace,
# until the process ends, by design), and not the out-of-memory test, whose failing cudaMalloc
# memcheck would report as an API error (the allocator handles it; the test checks that)
memcheck_cuda_tests() {
  [ -x "$cuda_tests" ] || { echo "mini_cuda_tests was not built"; return 77; }
  sanitize memcheck "$cuda_tests" "~allocator: out of memory*"
}
stage "memcheck C++" 120 "$out/sanitizers.log" memcheck_cuda_tests
stage "racecheck C++" 120 "$out/sanitizers.log" sanitize_cuda_tests racecheck
stage "memcheck Python" 120 "$out/sanitizers.log" sanitize memcheck "${pytest[@]}" -x \
  tests/python/test_cuda.py tests/python/test_optim_adam.py tests/python/test_model_ops.py \
  tests/python/test_fused_attention.py \
  -k "(round_trips and float32) or each_op or softmax_rows or autograd_of or (fused_adam and cuda) or (model_ops and cuda) or (embedding and cuda) or (float64_forward and cuda and float32)"
# the generated kernels (every layout) and the CUDA graph replays under memcheck: a misaligned
# vector read or an out-of-bounds lane shows here, not only as a wrong number
stage "memcheck attention" 120 "$out/sanitizers.log" only_when_named sanitize memcheck "${pytest[@]}" -x \
  tests/python/test_flash_attention.py -k "single or ragged or L_gt_S or transposed"
stage "memcheck codegen" 150 "$out/sanitizers.log" sanitize memcheck "${pytest[@]}" -x \
  tests/python/test_cuda_codegen.py tests/python/test_capture_cuda.py tests/python/test_cuda_reduction_layout.py \
  -k "split_columns or anchor_runs or every_layout_runs or reduce_overhead or one_generated_kernel or odd_offsets or decision_runs_as_eager"

# ---- the rest of the suite, with what time is left -------------------------------------------
# In 8 processes at once, the test files dealt out largest first (one process took 390 s for
# 40% of it on the 16-core machine); then one line of totals.
rest_sharded() {
  local shards=8 s j rc=0 pids=()
  local files=($(ls -S tests/python/test_*.py | grep -v test_cuda_vs_torch))
  for ((s = 0; s < shards; s++)); do
    local part=()
    for ((j = s; j < ${#files[@]}; j += shards)); do part+=("${files[j]}"); done
    "${pytest[@]}" -m "not cuda" "${part[@]}" >"$work/shard$s.log" 2>&1 &
    pids+=($!)
  done
  for s in "${pids[@]}"; do wait "$s" || rc=1; done
  for ((s = 0; s < shards; s++)); do echo "---- shard $s"; cat "$work/shard$s.log"; done
  grep -hoE '[0-9]+ (passed|failed|skipped|errors?)' "$work"/shard*.log |
    awk '{n[$2] += $1} END {printf "rest, %d processes:", '"$shards"';
         for (k in n) printf " %d %s", n[k], k; print ""}'
  return "$rc"
}
stage "pytest (rest)" 600 "$out/tests.log" rest_sharded

# ---- what comes back ----------------------------------------------------------------------------
tar czf "$out/labs.tar.gz" -C "$work" labs 2>/dev/null
{
  echo
  echo "gpu_cuda.sh, $(date -u '+%Y-%m-%d %H:%M UTC'), $(( $(date +%s) - start )) s in all," \
       "commit $(cat "$carry/COMMIT" 2>/dev/null || echo '? (run scripts/gpu_prepare.sh first)')"
  nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader 2>&1 | head -2
  "$python" -c 'import torch; print("torch", torch.__version__, "CUDA", torch.version.cuda)' 2>&1 | tail -1
  nvcc --version 2>&1 | tail -1
} >>"$summary"
rm -rf "$work"
cat "$summary"
