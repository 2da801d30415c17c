#!/usr/bin/env bash
# The main command: sets up and builds (scripts/setup.sh), then runs every lab, writing the
# figures to figures/.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
PYTHONPATH=build/python .venv/bin/python labs/run_all.py "$@"
