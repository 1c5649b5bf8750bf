#!/usr/bin/env bash
# Complete .envs/cuda (scripts/envs/cuda.sh: the registry's CUDA build of torch) with torchvision, timm and
# transformers (and scipy, which one transformers model needs), for tracing timm and torchvision models: torchvision's wheel for torch 2.13 is built
# against the CUDA torch and does not import beside the CPU build, and timm imports torchvision. Tracing
# never touches a device, so no GPU is needed. Not part of CI (about 5 GB with cuda.sh), run by hand:
#
#   scripts/envs/vision.sh
#   TORCH_DEVICE_BACKEND_AUTOLOAD=0 .envs/cuda/bin/opcov zoo trace --all --library timm --library torchvision \
#       --jobs 2 --table coverage/zoo/outcomes-vision.tsv
#
# torchvision and timm go in with --no-deps (pip would otherwise weigh the CUDA torch against the local
# +cpu one); their own dependencies (pillow; huggingface_hub, safetensors, which transformers brings) after.
set -euo pipefail
cd "$(dirname "$0")/../.."
ENV=${CUDA_ENV:-.envs/cuda}
TORCHVISION_VERSION=${TORCHVISION_VERSION:-0.28.0}  # the release built for torch 2.13
TIMM_VERSION=${TIMM_VERSION:-1.0.31}
TRANSFORMERS_VERSION=$(.venv/bin/python -c 'import importlib.metadata as m; print(m.version("transformers"))' 2>/dev/null || echo 5.24.0)

[ -x "$ENV/bin/python" ] || scripts/envs/cuda.sh
ISOLATED=(); [ -n "${OPCOV_PIP_ISOLATED:-}" ] && ISOLATED=(--isolated)  # as in scripts/envs/cuda.sh
pip_torch() { "$ENV/bin/python" -m pip "${ISOLATED[@]}" --no-cache-dir "$@"; }
pip_torch install -q --no-deps "torchvision==$TORCHVISION_VERSION" "timm==$TIMM_VERSION"
pip_torch install -q "transformers==$TRANSFORMERS_VERSION" pillow scipy
"$ENV/bin/python" - <<'PY'
import torch, torchvision, timm, transformers
print(f"torch {torch.__version__}, torchvision {torchvision.__version__}, timm {timm.__version__}, "
      f"transformers {transformers.__version__}")
PY
