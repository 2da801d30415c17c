#!/usr/bin/env bash
# gpu_ddp.sh: run ON a lent multi-GPU machine, in ONE device call: issue 35's scaling of the GPT-2
# training step over GPUs. The call: kind nvidia-h200-x4 (the bar's 4 GPUs; nvidia-h200-x2 to
# develop), command 'bash scripts/gpu_ddp.sh', carry [".gpu_carry"] (bash scripts/gpu_prepare.sh
# stages it here first, as for gpu_cuda.sh), timeout_s 600. It adapts to the GPUs present: on a
# machine of one GPU it runs world size 1 only (the build, the tests and the 1-GPU DDP step, with
# no scaling to compare). Stages, each timed, under one deadline (MINI_GPU_BUDGET seconds,
# default 560), the next one started after a failure:
#   build             _C + mini_python_files with CUDA into build-gpu/ (scripts/gpu_build.sh), with
#                     NCCL where CMake finds nccl.h (the CUDA toolkit's, or the nvidia-nccl
#                     package's)
#   nccl              mini sees the GPUs, and its NCCL backend is built
#   pytest -m cuda    tests/python/test_distributed.py tests/python/test_ddp.py
#   bench ddp gpt2    labs/bench/bench_ddp_gpt2.py --device cuda over 1, 2, 4, ... GPUs (powers of
#                     two up to the count, and the count): mini DDP + mini.compile beside torch DDP
#                     + torch.compile, bfloat16 autocast; MINI_DDP_ARGS: more of its flags
#                     (e.g. --modes mini-compiled,mini-eager,torch-compile or --world-sizes 1,4)
# It writes 8 files to $OUT (default ./gpu_out), the most a device call brings back:
#   summary.txt       one line per stage (PASS / FAIL / TIMEOUT / SKIP, seconds, its telling line),
#                     the bench's table, the machine and how its GPUs connect
#   env_build.log     the machine and the CMake configure + build
#   tests.log         the nccl check and the pytest run
#   bench_ddp.log     all the bench printed (its ranks' lines prefixed [rank<r>])
#   ddp_scaling.txt, ddp_scaling.json, ddp_scaling.png, ddp_scaling.svg
#                     the bench's table, report and figure (copy them to figures/cuda/ to keep)
set -uo pipefail
cd "$(dirname "$0")/.." || exit 1
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
note() { echo "gpu_ddp: $*" >>"$log"; }
source scripts/gpu_build.sh
# NVLink multicast stays off, as the lent machines require (a program using it can take the
# host's shared GPUs out of service); mini's NCCL and torch's both read these
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1

summary_line() { printf '%-8s %-16s %5s  %s\n' "$@" >>"$summary"; }   # STATUS NAME SECONDS SAID

# run_stage NAME CAP LOGFILE COMMAND...: COMMAND under `timeout` (SIGINT to its process group after
# CAP seconds or at the deadline, whichever comes first, SIGKILL 20 s later), its output appended
# to LOGFILE, one line to summary.txt. Returns COMMAND's status (124: out of time).
run_stage() {
  local name=$1 cap=$2 logfile=$3
  shift 3
  local left=$(( deadline - $(date +%s) - 10 ))
  if (( left < 15 )); then
    summary_line SKIP "$name" - "no time left before the deadline"
    return 1
  fi
  (( cap > left )) && cap=$left
  local t0 rc status said
  t0=$(date +%s)
  timeout -s INT -k 20 "$cap" "$@" >"$work/stage.out" 2>&1 </dev/null
  rc=$?
  { echo "==== $name (cap ${cap} s, status $rc): $*"; cat "$work/stage.out"; echo; } >>"$logfile"
  case $rc in
    0) status=PASS ;; 124) status=TIMEOUT ;; *) status="FAIL($rc)" ;;
  esac
  said=$(grep -E ' passed| failed|[0-9]+ errors?( |$)|^bar |nccl available|skipped: no CUDA' \
         "$work/stage.out" | tail -1 | cut -c1-150)
  [ -n "$said" ] || said=$(grep -v '^\s*$' "$work/stage.out" | tail -1 | cut -c1-150)
  summary_line "$status" "$name" "$(( $(date +%s) - t0 ))s" "$said"
  return "$rc"
}

# ---- the machine, then the build ------------------------------------------------------------
{
  echo "== machine"; uname -a; nproc; nvidia-smi 2>&1 | head -20
  echo "== python: $python"; "$python" --version
  "$python" -c 'import torch; print("torch", torch.__version__, "NCCL", torch.cuda.nccl.version())' \
    2>&1 | tail -1
  echo "== tools"; cmake --version | head -1; nvcc --version 2>&1 | tail -1; command -v ccache
} >>"$log" 2>&1
gpu_build_setup
gpu_args+=(-DMINI_CUDA=ON -DMINI_CPP_TESTS=OFF)
[ -n "${CXX:-}" ] && gpu_args+=(-DCMAKE_CUDA_HOST_COMPILER="$CXX")
command -v ccache >/dev/null &&
  gpu_args+=(-DCMAKE_CXX_COMPILER_LAUNCHER=ccache -DCMAKE_CUDA_COMPILER_LAUNCHER=ccache)
t0=$(date +%s)
if gpu_build _C mini_python_files; then
  summary_line PASS build "$(( $(date +%s) - t0 ))s" \
    "$(grep -hoE 'mini: (NCCL|no Gloo)[^(]*' "$log" | tr '\n' ' ' | cut -c1-150)"
else
  summary_line FAIL build "$(( $(date +%s) - t0 ))s" "env_build.log says why; nothing else was run"
  grep -v '^==== ' "$log" | tail -15 | sed 's/^/  /' >>"$summary"
  rm -rf "$work"
  cat "$summary"
  exit 1
fi
export PYTHONPATH="$build/python${PYTHONPATH:+:$PYTHONPATH}" MINI_PYTHON_DIR="$build/python"
export MINI_CACHE_DIR="$work/kernel_cache" PYTHONUNBUFFERED=1 MPLBACKEND=Agg

# ---- NCCL and the distributed tests -----------------------------------------------------------
run_stage nccl 60 "$out/tests.log" "$python" -c '
import mini, mini.distributed as dist
print("GPUs mini sees:", mini.cuda.device_count(), "; nccl available:", dist.is_nccl_available(),
      "; gloo available:", dist.is_gloo_available())
assert dist.is_nccl_available(), "no NCCL in this build of mini (env_build.log: no nccl.h found)"'
# pytest with Python's SIGINT handler even where SIGINT came in ignored (gpu_cuda.sh says why)
run_stage "pytest -m cuda" 180 "$out/tests.log" "$python" -c 'import signal, sys, pytest
signal.signal(signal.SIGINT, signal.default_int_handler)
sys.exit(pytest.main(sys.argv[1:]))' -q -rfEs -p no:cacheprovider -m cuda \
  tests/python/test_distributed.py tests/python/test_ddp.py

# ---- the scaling bench over the GPUs present ----------------------------------------------------
gpus=$("$python" -c 'import mini; print(mini.cuda.device_count())' 2>/dev/null || echo 0)
sizes=1
for (( n = 2; n <= gpus; n *= 2 )); do sizes+=",$n"; done
[[ ",$sizes," == *",$gpus,"* ]] || (( gpus < 2 )) || sizes+=",$gpus"
note "$gpus GPUs: world sizes $sizes"
# the bench starts no configuration later than a minute before the stage's end (a cold
# torch.compile of GPT-2 takes about that), and keeps what it measured when the stage's time ends
left=$(( deadline - $(date +%s) - 20 ))
run_stage "bench ddp gpt2" "$left" "$out/bench_ddp.log" "$python" labs/bench/bench_ddp_gpt2.py \
  --device cuda --world-sizes "$sizes" --out "$out" --timeout 240 --budget $(( left - 60 )) \
  ${MINI_DDP_ARGS:-}

# ---- what comes back --------------------------------------------------------------------------
{
  echo
  [ -f "$out/ddp_scaling.txt" ] && cat "$out/ddp_scaling.txt"
  echo
  echo "gpu_ddp.sh, $(date -u '+%Y-%m-%d %H:%M UTC'), $(( $(date +%s) - start )) s in all, commit" \
       "$(cat "$carry/COMMIT" 2>/dev/null || echo '? (run scripts/gpu_prepare.sh first)')"
  nvidia-smi --query-gpu=index,name,driver_version,memory.total --format=csv,noheader 2>&1
  echo "how the GPUs connect (nvidia-smi topo -m; NV<n>: NVLink, the all-reduces' path):"
  nvidia-smi topo -m 2>&1 | head -10
} >>"$summary"
rm -rf "$work"
cat "$summary"
