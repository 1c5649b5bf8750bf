#!/usr/bin/env bash
# Set up .venv, then the main job on the bundled data: validate coverage/ and print
# per backend how many ATen ops fall on each registered path.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
export TORCH_DEVICE_BACKEND_AUTOLOAD=0
.venv/bin/opcov lint coverage
.venv/bin/opcov summary coverage
