#!/usr/bin/env bash
# Create .venv with opcov, torch 2.13.0 (CPU, pinned by constraints.txt) and torch-tpu.
# torch-tpu is installed in the same pip command as the torch pin, else pip may pick a CUDA torch.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
[ -x .venv/bin/python ] || "$PY" -m venv .venv
.venv/bin/python -m pip install -q --upgrade pip >/dev/null 2>&1 || true
.venv/bin/python -m pip install -q -c constraints.txt -e '.[test,tpu,models]'
