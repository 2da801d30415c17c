#!/usr/bin/env bash
# Sets up what is missing and builds mini. Idempotent: a second run only rebuilds what changed.
#   1. Debian packages (C/C++ dependencies): catch2, libopenblas-dev (its headers) and
#      libopenblas0-openmp (the OpenBLAS build that shares OpenMP's threads, which CMake links),
#      libgloo-dev (Gloo: mini.distributed's collectives of CPU tensors), a C++ compiler, CMake.
#   2. .venv from the python3 on the PATH (3.11), with requirements.txt's pinned Python packages.
#   3. CMake configure + build into build/ (the importable package lands in build/python).
#   4. With --all-pythons (scripts/test.sh passes it): for each of Python 3.12 and 3.13 that is
#      installed (pyenv's, or python3.X on the PATH; override with PY312=... PY313=...),
#      .venv-3.1X with requirements-test.txt's pins, and the package built for it by build/ itself
#      (CMake's MINI_EXTRA_PYTHONS: only guards, capture, the backends and the bindings are
#      compiled again, against that version's headers) into build-py31X/python. A missing
#      interpreter is reported and skipped; its ctest entries then show as skipped. Then the
#      package built with ASan + UBSan into build-san/ (for ctest's sanitized Python tests).
# With --student (a course kit's tree, notes/assignments.md): build/ holds what a student uses
# and nothing else: the package and the C++ tests (the Catch2 tags some assignments grade by),
# without the sanitized copies and without the CUDA kernels (no assignment needs a GPU; A10's
# tests render CUDA source without the toolkit). With --all-pythons too, the 3.12 and 3.13
# packages (A9 is graded on every Python built), still no sanitizer build.
set -euo pipefail
all_pythons=0
student=0
for arg in "$@"; do
  case "$arg" in
    --all-pythons) all_pythons=1 ;;
    --student) student=1 ;;
    *) echo "usage: setup.sh [--student] [--all-pythons]" >&2; exit 2 ;;
  esac
done
cd "$(dirname "$0")/.."
source scripts/find_python.sh
jobs=$(nproc)

need_apt=()
for pkg in catch2 libopenblas-dev libopenblas0-openmp libgloo-dev cmake g++ ninja-build; do
  dpkg -s "$pkg" >/dev/null 2>&1 || need_apt+=("$pkg")
done
if [ ${#need_apt[@]} -gt 0 ]; then
  echo "setup: installing Debian packages: ${need_apt[*]}"
  SUDO=""; [ "$(id -u)" -ne 0 ] && SUDO="sudo"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "${need_apt[@]}" >/dev/null
fi

# make_venv DIR PYTHON REQUIREMENTS...: DIR made from PYTHON, the requirements files installed
# (again only when one of them changed since the last install).
make_venv() {
  local dir=$1 python=$2; shift 2
  if [ ! -x "$dir/bin/python" ]; then
    echo "setup: creating $dir from $python ($("$python" --version))"
    "$python" -m venv "$dir"
  fi
  local stamp=$dir/.requirements.stamp
  if [ ! -f "$stamp" ] || ! cat "$@" | cmp -s - "$stamp"; then
    echo "setup: installing Python packages from $* into $dir"
    "$dir/bin/pip" install -q --disable-pip-version-check -r "$1"
    cat "$@" >"$stamp"
  fi
}

make_venv .venv python3 requirements.txt requirements-test.txt

# The other Python versions: a venv each, and their packages compiled by build/ (below).
extra_pythons=""
if [ "$all_pythons" = 1 ]; then
  for version in 3.12 3.13; do
    if ! python=$(find_python "$version"); then
      echo "setup: Python $version not found (no pyenv install, no python$version on the PATH):" \
           "skipping .venv-$version and build-py${version//./}; its tests will be reported as skipped"
      continue
    fi
    make_venv ".venv-$version" "$python" requirements-test.txt
    extra_pythons+="${extra_pythons:+;}$version=$PWD/.venv-$version/bin/python"
  done
fi

configure=(-G Ninja -DCMAKE_BUILD_TYPE=Release -DPython_EXECUTABLE="$PWD/.venv/bin/python")
[ "$student" = 1 ] && configure+=(-DMINI_SANITIZED_TESTS=OFF -DMINI_CUDA=OFF)
if [ ! -f build/CMakeCache.txt ]; then
  cmake -S . -B build "${configure[@]}" -DMINI_EXTRA_PYTHONS="$extra_pythons" >/dev/null
elif [ "$all_pythons" = 1 ] && ! grep -qxF "MINI_EXTRA_PYTHONS:STRING=$extra_pythons" build/CMakeCache.txt; then
  cmake -S . -B build -DMINI_EXTRA_PYTHONS="$extra_pythons" >/dev/null
fi
if [ "$student" = 1 ]; then
  cmake --build build -j"$jobs" --target _C mini_python_files mini_tests mini_extra_pythons
else
  cmake --build build -j"$jobs"
fi

# build-san/: the extension again, built with ASan + UBSan, for ctest's python_tests_asan_ubsan
# (only the tests need it: scripts/test.sh passes --all-pythons; not in a student's tree, whose
# grades do not use it).
if [ "$all_pythons" = 1 ] && [ "$student" = 0 ]; then
  if [ ! -f build-san/CMakeCache.txt ]; then
    cmake -S . -B build-san -G Ninja -DCMAKE_BUILD_TYPE=Release \
          -DPython_EXECUTABLE="$PWD/.venv/bin/python" -DMINI_SANITIZE=ON \
          -DMINI_SANITIZED_TESTS=OFF -DMINI_CPP_TESTS=OFF >/dev/null
  fi
  cmake --build build-san -j"$jobs" --target _C mini_python_files
fi
