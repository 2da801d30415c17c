#!/usr/bin/env bash
# The test command: sets up and builds (scripts/setup.sh), then runs every test through ctest:
# the Catch2 C++ tests, the same tests under AddressSanitizer + UndefinedBehaviorSanitizer,
# and the Python tests (pytest).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
ctest --test-dir build --output-on-failure "$@"
