#!/usr/bin/env bash
# Make .envs/cuda: an isolated venv with the registry's CUDA build of torch 2.13.0 and opcov from this
# checkout, for 'opcov scan cuda' (the CUDA wheel imports without a GPU; its dispatcher holds the CUDA
# kernels, and a scan never touches a device). Not part of CI: about 5 GB of downloads, run by hand.
#
# This machine's pip is set up to prefer local files: PIP_FIND_LINKS=/opt/wheels holds torch 2.13.0+cpu,
# /etc/xdg/pip/pip.conf adds local indexes and a torch<=2.14.1 constraint. For 'torch==2.13.0' pip would
# take the local +cpu wheel, so the torch install runs with '--isolated' (no config files, no PIP_*
# variables) against the registry's index only. TORCH_INDEX may name another index (e.g. a mirror, or
# https://download.pytorch.org/whl/cu126 for another CUDA build); TORCH_VERSION another release.
#
#   scripts/envs/cuda.sh                   # make (or complete) .envs/cuda
#   .envs/cuda/bin/opcov scan cuda         # -> coverage/cuda/registered-torch-2.13.0.yaml
set -euo pipefail
cd "$(dirname "$0")/../.."
PY=${PYTHON:-python3}
ENV=${CUDA_ENV:-.envs/cuda}
TORCH_VERSION=${TORCH_VERSION:-2.13.0}
TORCH_INDEX=${TORCH_INDEX:-https://pypi.org/simple}

[ -x "$ENV/bin/python" ] || "$PY" -m venv "$ENV"
pip_registry() { "$ENV/bin/python" -m pip --isolated --no-cache-dir "$@"; }
pip_registry install -q --upgrade pip
pip_registry install --index-url "$TORCH_INDEX" "torch==$TORCH_VERSION"
# opcov itself, no extras: torch is already there and must stay the registry's build (opcov's own
# dependencies, pyyaml and jinja2, may come from the usual places). numpy as in opcov's .venv: torch
# warns without it, and the scan should see the same torch the cpu scan saw.
"$ENV/bin/python" -m pip install -q -e . numpy
"$ENV/bin/python" - <<'PY'
import torch
cuda = torch.version.cuda
assert cuda, f"torch {torch.__version__} is not a CUDA build"
assert torch.backends.cuda.is_built()
print(f"torch {torch.__version__} (CUDA {cuda}) in {torch.__file__}")
PY
