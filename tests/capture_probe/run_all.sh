#!/usr/bin/env bash
# run_all.sh: the probe tests on CPython 3.11, 3.12 and 3.13, then once more on 3.11 under
# AddressSanitizer + UndefinedBehaviorSanitizer. Interpreters are found as scripts/setup.sh
# finds them (pyenv's, or python3.X on the PATH); override with PY311=... PY312=... PY313=...
# (ctest runs the same tests per version: capture_probe_py311, _py312, _py313.)
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
source "$root/scripts/find_python.sh"
py311=$(find_python 3.11) || { echo "run_all.sh: no Python 3.11 found" >&2; exit 1; }
py312=$(find_python 3.12) || { echo "run_all.sh: no Python 3.12 found" >&2; exit 1; }
py313=$(find_python 3.13) || { echo "run_all.sh: no Python 3.13 found" >&2; exit 1; }

for python in "$py311" "$py312" "$py313"; do
  "$python" "$here/test_capture_probe.py"
done

san_dir="$root/build/capture_probe/san-py311"
SAN=1 bash "$here/build.sh" "$py311" "$san_dir" >/dev/null
CAPTURE_PROBE_DIR="$san_dir" LD_PRELOAD="$(g++ -print-file-name=libasan.so)" \
  ASAN_OPTIONS=detect_leaks=0 UBSAN_OPTIONS=print_stacktrace=1 \
  "$py311" "$here/test_capture_probe.py"
