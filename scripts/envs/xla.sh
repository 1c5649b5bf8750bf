#!/usr/bin/env bash
# Make .envs/xla: an isolated venv with PyTorch/XLA (torch-xla 2.9.0 and the registry's torch 2.9.0, its
# CUDA build, as torch-xla's wheel pins it) and opcov from this checkout, for 'opcov scan xla' and
# 'opcov probe xla' on the CPU (PJRT_DEVICE=CPU: XLA's own CPU client, no TPU or GPU needed). Not part
# of CI: several GB of downloads, run by hand.
#
# pip's own configuration (pip.conf, PIP_* variables) decides where torch and torch-xla come from, as for
# any install. Two opt-in variables for a configuration that would give another torch build (one that
# prefers local +cpu wheels, or caps torch's version): OPCOV_PIP_ISOLATED=1 runs those installs with
# '--isolated' (no configuration files, no PIP_* variables: pip's defaults); TORCH_INDEX=URL installs
# them from that index only (a mirror). TORCH_VERSION / XLA_VERSION name another pair.
#
#   scripts/envs/xla.sh                       # make (or complete) .envs/xla
#   scripts/envs/xla-data.sh                  # the scans and the probe that coverage/xla/ holds
set -euo pipefail
cd "$(dirname "$0")/../.."
PY=${PYTHON:-python3}
ENV=${XLA_ENV:-.envs/xla}
TORCH_VERSION=${TORCH_VERSION:-2.9.0}
XLA_VERSION=${XLA_VERSION:-2.9.0}
ISOLATED=(); [ -n "${OPCOV_PIP_ISOLATED:-}" ] && ISOLATED=(--isolated)
INDEX=(); [ -n "${TORCH_INDEX:-}" ] && INDEX=(--index-url "$TORCH_INDEX")

[ -x "$ENV/bin/python" ] || "$PY" -m venv "$ENV"
pip_torch() { "$ENV/bin/python" -m pip "${ISOLATED[@]}" --no-cache-dir "$@"; }
pip_torch install -q --upgrade pip
# One resolve for the pair, so pip never trades one's version for the other's. numpy: torch warns
# without it and torch-xla needs it; pyyaml and jinja2 are opcov's own dependencies; expecttest lets
# the probe load PyTorch's OpInfo database.
pip_torch install "${INDEX[@]}" "torch==$TORCH_VERSION" "torch-xla==$XLA_VERSION" \
    numpy "pyyaml>=6" "jinja2>=3.1" expecttest
# opcov itself without dependencies: its [torch] extra must never pull another torch into this venv.
pip_torch install -q --no-deps -e .
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
