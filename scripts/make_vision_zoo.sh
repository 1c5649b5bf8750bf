#!/usr/bin/env bash
# Trace what needs timm or torchvision, in the CUDA torch environment where they import (no GPU needed:
# tracing never touches a device). Two outcome tables, beside the transformers one (coverage/zoo/outcomes.tsv,
# made in .venv by 'opcov zoo trace --all'):
#   coverage/zoo/outcomes-vision.tsv     timm (one model per family) and torchvision (all but the quantized)
#   coverage/zoo/outcomes-needs-libraries.tsv the transformers architectures that outcomes.tsv says need timm or scipy
# Op sets go to coverage/models/ like every other; each one's provenance names the torch that traced it.
# Not part of CI (the environment is about 5 GB); about 30 min on 2 cores.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/envs/vision.sh
export TORCH_DEVICE_BACKEND_AUTOLOAD=0
opcov=.envs/cuda/bin/opcov
"$opcov" zoo trace --all --library timm --library torchvision --jobs "${JOBS:-2}" \
    --table coverage/zoo/outcomes-vision.tsv "$@" || true
needs=$(awk -F'\t' '$3 == "cannot_build" && $8 ~ /needs the (timm|scipy) library/ {print $1}' coverage/zoo/outcomes.tsv | sort -u | paste -sd, -)
if [ -n "$needs" ]; then
    "$opcov" zoo trace --only "$needs" --jobs "${JOBS:-2}" --table coverage/zoo/outcomes-needs-libraries.tsv "$@" || true
fi
for t in coverage/zoo/outcomes-vision.tsv coverage/zoo/outcomes-needs-libraries.tsv; do
    [ -f "$t" ] && awk -F'\t' 'NF > 3 && $1 != "model" {n[$2" "$3]++} END {for (k in n) print FILENAME": "k, n[k]}' "$t" | sort
done
