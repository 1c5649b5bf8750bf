#!/usr/bin/env bash
# Set up .venv, then the main job on the bundled data: validate coverage/, summarise tpu's data, render
# site/, rank tpu's gaps by zoo models blocked, and last, where it stays on screen, answer "can the zoo's
# Llama run on tpu?". 'opcov summary' with no name summarises every backend (about 450 lines).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
export TORCH_DEVICE_BACKEND_AUTOLOAD=0
.venv/bin/opcov lint coverage
.venv/bin/opcov summary tpu
# The user guide first (site/docs/), as the Pages workflow publishes it: the site links to it only when it is there.
.venv/bin/python -m sphinx -q -b html docs site/docs
.venv/bin/opcov site   # site/ is not committed: rendered here from coverage/ (CI publishes it to GitHub Pages)
.venv/bin/opcov gaps tpu --top 10
.venv/bin/opcov check llama --backend tpu --backend cpu || [ $? -eq 1 ]   # exit 1 = a verdict "fails"
echo "site: open site/index.html (the guide: site/docs/index.html)"
