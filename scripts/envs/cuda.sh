#!/usr/bin/env bash
# Make .envs/cuda: an isolated venv with the registry's CUDA build of torch 2.13.0 and opcov from this
# checkout, for 'opcov scan cuda' (the CUDA wheel imports without a GPU; its dispatcher holds the CUDA
# kernels, and a scan never touches a device). Not part of CI: about 5 GB of downloads, run by hand.
#
# pip's own configuration (pip.conf, PIP_* variables) decides where torch comes from, as for any
# install. Two opt-in variables for a configuration that would not give the CUDA build (one that prefers
# local +cpu wheels, or PyTorch's CPU index): OPCOV_PIP_ISOLATED=1 runs pip with '--isolated' (no
# configuration files, no PIP_* variables: pip's defaults); TORCH_INDEX=URL installs torch from that
# index only (e.g. another CUDA build's index, or a mirror). TORCH_VERSION names another release.
#
#   scripts/envs/cuda.sh                   # make (or complete) .envs/cuda
#   .envs/cuda/bin/opcov scan cuda         # -> coverage/cuda/registered-torch-2.13.0.yaml
set -euo pipefail
cd "$(dirname "$0")/../.."
PY=${PYTHON:-python3}
ENV=${CUDA_ENV:-.envs/cuda}
TORCH_VERSION=${TORCH_VERSION:-2.13.0}
ISOLATED=(); [ -n "${OPCOV_PIP_ISOLATED:-}" ] && ISOLATED=(--isolated)
INDEX=(); [ -n "${TORCH_INDEX:-}" ] && INDEX=(--index-url "$TORCH_INDEX")

[ -x "$ENV/bin/python" ] || "$PY" -m venv "$ENV"
pip_torch() { "$ENV/bin/python" -m pip "${ISOLATED[@]}" --no-cache-dir "$@"; }
pip_torch install -q --upgrade pip
pip_torch install "${INDEX[@]}" "torch==$TORCH_VERSION"
# opcov itself, no extras: torch is already there and must stay the registry's build (opcov's own
# dependencies, pyyaml and jinja2, may come from the usual places). numpy as in opcov's .venv: torch
# warns without it, and the scan should see the same torch the cpu scan saw.
"$ENV/bin/python" -m pip install -q -e . numpy
"$ENV/bin/python" - <<'PY'
import torch
cuda = torch.version.cuda
assert cuda, f"torch {torch.__version__} is not a CUDA build (pip's configuration chose it: see OPCOV_PIP_ISOLATED and TORCH_INDEX in scripts/envs/cuda.sh)"
assert torch.backends.cuda.is_built()
print(f"torch {torch.__version__} (CUDA {cuda}) in {torch.__file__}")
PY
