#!/usr/bin/env bash
# gpu_prepare.sh: run HERE (not on the GPU machine) before the device call that runs
# scripts/gpu_compare.sh or scripts/gpu_cuda.sh. Stages, in the git-ignored folder .gpu_carry/ (name it in the call's
# `carry`), what that machine may lack and cannot download (it has no network):
#   .gpu_carry/site/pybind11       pybind11 at requirements-test.txt's pin (header-only)
#   .gpu_carry/include/python3.12  CPython 3.12's headers, used there only if its python3
#                                  has no Python.h
#   .gpu_carry/openblas/           OpenBLAS (cblas.h, libopenblas.so: the OpenMP build where
#                                  installed, libgfortran, libquadmath)
#                                  from this Debian machine, used there only if CMake finds
#                                  no BLAS with cblas.h of the machine's own
#   .gpu_carry/COMMIT             the commit staged (and whether the tree had uncommitted changes)
#   .gpu_carry/catch2/             Catch2 2.x (header-only, with its CMake package) from this
#                                  machine, for gpu_cuda.sh's C++ CUDA tests (mini_cuda_tests)
# The folder is git-ignored through .git/info/exclude, so it must be named in the call's carry.
# About 41 MB. The conformance cases travel with the repository (tests/conformance/).
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/find_python.sh
carry=.gpu_carry
exclude=$(git rev-parse --git-path info/exclude)   # in a worktree: the main checkout's
mkdir -p "$(dirname "$exclude")"
grep -qx /.gpu_carry/ "$exclude" 2>/dev/null || echo /.gpu_carry/ >>"$exclude"
mkdir -p "$carry"

pin=$(grep -E '^pybind11==' requirements-test.txt)
if [ ! -f "$carry/site/pybind11/__init__.py" ] || [ "$(cat "$carry/site/.pin" 2>/dev/null)" != "$pin" ]; then
  rm -rf "$carry/site"
  python3 -m pip install -q --disable-pip-version-check --root-user-action=ignore --no-deps --no-compile \
    --target "$carry/site" "$pin"
  echo "$pin" >"$carry/site/.pin"
fi

if py312=$(find_python 3.12); then
  inc=$("$py312" -c 'import sysconfig; print(sysconfig.get_paths()["include"])')
  rm -rf "$carry/include" && mkdir -p "$carry/include"
  cp -r "$inc" "$carry/include/python3.12"
else
  echo "gpu_prepare: no Python 3.12 here: no fallback headers staged"
fi

# the OpenMP build where installed (what CMakeLists.txt links here: one thread pool with mini's
# kernels); the GPU machine uses it with MINI_GPU_BLAS=carried (gpu_build.sh), else its own BLAS
blas_lib=$(readlink -f /usr/lib/x86_64-linux-gnu/openblas-openmp/libopenblas.so.0 2>/dev/null ||
           readlink -f /usr/lib/x86_64-linux-gnu/openblas-pthread/libopenblas.so.0)
[ -f "$blas_lib" ] || blas_lib=$(readlink -f /usr/lib/x86_64-linux-gnu/openblas-pthread/libopenblas.so.0)
blas_inc=/usr/include/x86_64-linux-gnu/openblas-pthread
rm -rf "$carry/openblas" && mkdir -p "$carry/openblas/include" "$carry/openblas/lib" \
                                     "$carry/openblas/extra"
cp "$blas_inc/cblas.h" "$blas_inc/openblas_config.h" "$carry/openblas/include/"
cp "$blas_lib" "$carry/openblas/lib/libopenblas.so"   # gpu_compare.sh adds the .so.0 link
for dep in libgfortran.so.5 libquadmath.so.0; do
  cp "$(readlink -f "/lib/x86_64-linux-gnu/$dep")" "$carry/openblas/extra/$dep"
done

if [ -f /usr/include/catch2/catch.hpp ] && [ -d /usr/lib/cmake/Catch2 ]; then
  rm -rf "$carry/catch2" && mkdir -p "$carry/catch2/include" "$carry/catch2/lib/cmake"
  cp -r /usr/include/catch2 "$carry/catch2/include/"
  cp -r /usr/lib/cmake/Catch2 "$carry/catch2/lib/cmake/"
  # its CMake package checks that the Catch2WithMain library it lists exists
  [ -f /usr/lib/libCatch2WithMain.a ] && cp /usr/lib/libCatch2WithMain.a "$carry/catch2/lib/"
else
  echo "gpu_prepare: no Catch2 here: gpu_cuda.sh builds the C++ CUDA tests only where the GPU machine has it"
fi

# the commit being sent (the device's copy of the tree has no usable git history)
{ git rev-parse --short HEAD; git diff --quiet HEAD -- . ':!.gpu_carry' || echo "+ uncommitted changes"; } |
  paste -sd ' ' >"$carry/COMMIT"
echo "gpu_prepare: staged $(du -sh "$carry" | cut -f1) in $carry/, commit $(cat "$carry/COMMIT")"
echo "device call: command 'bash scripts/gpu_compare.sh' (or 'bash scripts/gpu_cuda.sh'), carry [\".gpu_carry\"]"
