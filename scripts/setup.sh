#!/usr/bin/env bash
# Create .venv with opcov, torch 2.13.0 (pinned by constraints.txt), the test tools and, on Python 3.11
# and later (torch-tpu 0.2.0 has no wheel for 3.10), torch-tpu. torch-tpu is installed in the same pip
# command as the torch pin, else pip may pick another torch. Which index torch comes from is pip's own
# configuration (pip.conf, PIP_INDEX_URL / PIP_EXTRA_INDEX_URL): for the CPU build, add PyTorch's CPU
# index there, as .github/workflows/test.yml does.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
[ -x .venv/bin/python ] || "$PY" -m venv .venv
extras=test,models,docs
if .venv/bin/python -c 'import sys; sys.exit(sys.version_info < (3, 11))'; then
    extras=$extras,tpu
else
    echo "scripts/setup.sh: Python $(.venv/bin/python -c 'import platform; print(platform.python_version())'): no torch-tpu (it needs 3.11 or later); its tests will be skipped" >&2
fi
.venv/bin/python -m pip install -q --upgrade pip >/dev/null 2>&1 || true
.venv/bin/python -m pip install -q -c constraints.txt -e ".[$extras]"
