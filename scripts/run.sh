#!/usr/bin/env bash
# Set up .venv, then the main job on the bundled data: validate coverage/, summarise it, answer
# "can the zoo's Llama run on tpu?", rank tpu's gaps by zoo models blocked, and render site/.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
export TORCH_DEVICE_BACKEND_AUTOLOAD=0
.venv/bin/opcov lint coverage
.venv/bin/opcov summary coverage
.venv/bin/opcov check llama --backend tpu --backend cpu || [ $? -eq 1 ]   # exit 1 = a verdict "fails"
.venv/bin/opcov gaps tpu --top 10
# The user guide first (site/docs/), as the Pages workflow publishes it: the site links to it only when it is there.
.venv/bin/python -m sphinx -q -b html docs site/docs
.venv/bin/opcov site   # site/ is not committed: rendered here from coverage/ (CI publishes it to GitHub Pages)
echo "site: open site/index.html (the guide: site/docs/index.html)"
