#!/usr/bin/env bash
# Regenerate coverage/cuda/: make the CUDA environment (scripts/envs/cuda.sh: the registry's CUDA
# build of torch in .envs/cuda, about 5 GB), scan it (registered evidence; no GPU needed, none is
# touched), and cross-check the scan against torchgen's native_functions.yaml. Not part of CI.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/envs/cuda.sh
version=$(.envs/cuda/bin/python -c 'import torch; print(torch.__version__)')
out=coverage/cuda/registered-torch-$version.yaml
TORCH_DEVICE_BACKEND_AUTOLOAD=0 .envs/cuda/bin/opcov scan cuda   # writes $out
.envs/cuda/bin/python scripts/crosscheck_torchgen.py "$out"
