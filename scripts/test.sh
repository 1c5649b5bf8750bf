#!/usr/bin/env bash
# Set up .venv (torch 2.13.0 CPU + torch-tpu 0.2.0), then run the whole test suite.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
# The site's browser tests drive Debian's chromium (headless); install it when missing and we are root.
if ! command -v chromium >/dev/null && [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
    (apt-get -qq update && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null) \
        || echo "scripts/test.sh: could not install chromium; the browser tests will be skipped" >&2
fi
# One worker per core (OPCOV_TEST_JOBS=1 for one process); each test file stays in one worker.
TORCH_DEVICE_BACKEND_AUTOLOAD=0 .venv/bin/python -m pytest -q -n "${OPCOV_TEST_JOBS:-auto}" --dist loadfile "$@"
