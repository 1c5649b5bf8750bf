#!/usr/bin/env bash
# Make .envs/xla: an isolated venv with PyTorch/XLA (torch-xla 2.9.0 and the registry's torch 2.9.0, its
# CUDA build, as torch-xla's wheel pins it) and opcov from this checkout, for 'opcov scan xla' and
# 'opcov probe xla' on the CPU (PJRT_DEVICE=CPU: XLA's own CPU client, no TPU or GPU needed). Not part
# of CI: several GB of downloads, run by hand.
#
# This machine's pip is set up to prefer local files: PIP_FIND_LINKS=/opt/wheels holds torch 2.13.0+cpu,
# /etc/xdg/pip/pip.conf adds local indexes and a torch<=2.14.1 constraint. So every install of torch and
# torch-xla runs with '--isolated' (no config files, no PIP_* variables) against the registry's index
# only. TORCH_INDEX may name another index (a mirror); TORCH_VERSION / XLA_VERSION another pair.
#
#   scripts/envs/xla.sh                       # make (or complete) .envs/xla
#   scripts/envs/xla-data.sh                  # the scans and the probe that coverage/xla/ holds
set -euo pipefail
cd "$(dirname "$0")/../.."
PY=${PYTHON:-python3}
ENV=${XLA_ENV:-.envs/xla}
TORCH_VERSION=${TORCH_VERSION:-2.9.0}
XLA_VERSION=${XLA_VERSION:-2.9.0}
TORCH_INDEX=${TORCH_INDEX:-https://pypi.org/simple}

[ -x "$ENV/bin/python" ] || "$PY" -m venv "$ENV"
pip_registry() { "$ENV/bin/python" -m pip --isolated --no-cache-dir "$@"; }
pip_registry install -q --upgrade pip
# One resolve for the pair, so pip never trades one's version for the other's. numpy: torch warns
# without it and torch-xla needs it; pyyaml and jinja2 are opcov's own dependencies; expecttest lets
# the probe load PyTorch's OpInfo database.
pip_registry install --index-url "$TORCH_INDEX" "torch==$TORCH_VERSION" "torch-xla==$XLA_VERSION" \
    numpy "pyyaml>=6" "jinja2>=3.1" expecttest
# opcov itself without dependencies: its [torch] extra must never pull another torch into this venv.
pip_registry install -q --no-deps -e .
# transformers, for running the zoo's Hugging Face models for real on xla (scripts/envs/xla_reality.py):
# the release opcov's op sets were traced with; the usual pip settings (it leaves torch as it is).
"$ENV/bin/python" -m pip install -q "transformers==${TRANSFORMERS_VERSION:-5.24.0}"
PJRT_DEVICE=CPU TORCH_DEVICE_BACKEND_AUTOLOAD=0 "$ENV/bin/python" - <<'PY'
import torch, torch_xla
x = torch.ones(2, device=torch_xla.device()) + 1
torch_xla.sync()
assert x.cpu().tolist() == [2.0, 2.0], x
print(f"torch {torch.__version__}, torch_xla {torch_xla.__version__} in {torch_xla.__file__}; "
      f"PJRT_DEVICE=CPU runs on {x.device}")
PY
