#!/usr/bin/env bash
# run_all.sh: the probe tests on CPython 3.11, 3.12 and 3.13, then once more on 3.11 under
# AddressSanitizer + UndefinedBehaviorSanitizer. Interpreters default to the pyenv ones;
# override with PY311=... PY312=... PY313=...
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
py311=${PY311:-/root/.pyenv/versions/3.11.7/bin/python3}
py312=${PY312:-/root/.pyenv/versions/3.12.1/bin/python3}
py313=${PY313:-/root/.pyenv/versions/3.13.0/bin/python3}

for python in "$py311" "$py312" "$py313"; do
  "$python" "$here/test_capture_probe.py"
done

san_dir="$root/build/capture_probe/san-py311"
SAN=1 bash "$here/build.sh" "$py311" "$san_dir" >/dev/null
CAPTURE_PROBE_DIR="$san_dir" LD_PRELOAD="$(g++ -print-file-name=libasan.so)" \
  ASAN_OPTIONS=detect_leaks=0 UBSAN_OPTIONS=print_stacktrace=1 \
  "$py311" "$here/test_capture_probe.py"
