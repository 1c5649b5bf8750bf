#!/usr/bin/env bash
# Set up .venv, then the main job on the bundled data. The answer comes first: "can the zoo's Llama run on
# tpu (and cpu, the reference)?", one line per backend and mode; every op's reasons are kept in a file. Then
# the data is validated, tpu's data summarised, tpu's gaps ranked by zoo models blocked and site/ rendered,
# each saying one line on screen and keeping its whole report under build/run/.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
export TORCH_DEVICE_BACKEND_AUTOLOAD=0
out=build/run
mkdir -p "$out"
code=0
.venv/bin/opcov check llama --backend tpu --backend cpu > "$out/check-llama.txt" || code=$?
if [ "$code" -gt 1 ]; then cat "$out/check-llama.txt"; exit "$code"; fi  # 1: a verdict "fails"; more: an error
# the table, then one line per backend and mode (the indented reasons and notes stay in the file)
awk '/^ /{next} /^$/{if (++blank <= 2) print; next} {print}' "$out/check-llama.txt"
echo "  every op's reasons and notes: $out/check-llama.txt"
echo
.venv/bin/opcov gaps tpu --top 3
echo
.venv/bin/opcov lint coverage > "$out/lint.txt"
echo "lint: $(head -n 1 "$out/lint.txt")"
.venv/bin/opcov summary tpu > "$out/summary-tpu.txt"
echo "tpu's data, summarised: $out/summary-tpu.txt"
# The user guide first (site/docs/), as the Pages workflow publishes it: the site links to it only when it is there.
.venv/bin/python -m sphinx -q -b html docs site/docs
.venv/bin/opcov site > "$out/site.txt" # site/ is not committed: rendered here from coverage/ (CI publishes it to GitHub Pages)
echo "$(tail -n 1 "$out/site.txt"); open site/index.html (the guide: site/docs/index.html)"  # "site: N files ..."
