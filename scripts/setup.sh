#!/usr/bin/env bash
# Sets up what is missing and builds mini. Idempotent: a second run only rebuilds what changed.
#   1. Debian packages (C/C++ dependencies): catch2, libopenblas-dev, a C++ compiler, CMake.
#   2. .venv from the python3 on the PATH, with requirements.txt's pinned Python packages.
#   3. CMake configure + build into build/ (the importable package lands in build/python).
set -euo pipefail
cd "$(dirname "$0")/.."

need_apt=()
for pkg in catch2 libopenblas-dev cmake g++ ninja-build; do
  dpkg -s "$pkg" >/dev/null 2>&1 || need_apt+=("$pkg")
done
if [ ${#need_apt[@]} -gt 0 ]; then
  echo "setup: installing Debian packages: ${need_apt[*]}"
  SUDO=""; [ "$(id -u)" -ne 0 ] && SUDO="sudo"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "${need_apt[@]}" >/dev/null
fi

if [ ! -x .venv/bin/python ]; then
  echo "setup: creating .venv from $(command -v python3) ($(python3 --version))"
  python3 -m venv .venv
fi
stamp=.venv/.requirements.stamp
if [ ! -f "$stamp" ] || ! cmp -s requirements.txt "$stamp"; then
  echo "setup: installing Python packages from requirements.txt"
  .venv/bin/pip install -q --disable-pip-version-check -r requirements.txt
  cp requirements.txt "$stamp"
fi

if [ ! -f build/CMakeCache.txt ]; then
  cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release \
        -DPython_EXECUTABLE="$PWD/.venv/bin/python" >/dev/null
fi
cmake --build build -j"$(nproc)"
