#!/usr/bin/env bash
# Set up .venv (torch 2.13.0 CPU + torch-tpu 0.2.0), then run the whole test suite.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
TORCH_DEVICE_BACKEND_AUTOLOAD=0 .venv/bin/python -m pytest -q "$@"
