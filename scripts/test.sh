#!/usr/bin/env bash
# The test command: sets up and builds (scripts/setup.sh, for Python 3.11 and also 3.12 and
# 3.13 where installed), then runs every test through ctest: the Catch2 C++ tests, the same
# tests under AddressSanitizer + UndefinedBehaviorSanitizer, the Python tests (pytest), and on
# each Python version the capture probe tests, the capture Python tests and the conformance
# runner (tests/python_versions/run.sh). The tests run side by side, one per core: most of them
# are one Python process each. Extra arguments go to ctest.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh --all-pythons
ctest --test-dir build --output-on-failure -j"$(nproc)" "$@"
