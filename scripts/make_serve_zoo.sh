#!/usr/bin/env bash
# The zoo's serve op sets, coverage/models/NAME/serve.yaml: transformers' generate on every curated text
# decoder (opcov.tracing.serve.ZOO), a prefill and 3 decode steps with a static and a dynamic KV cache,
# greedy and sampling, real values on the computing stand-in (docs/DATA.md, "Serve op sets").
# About 25-40 s a model, 7 minutes for the 15 on 2 cores. Each file's provenance.command re-traces it
# alone; arguments are passed on ('--only llama,gpt2').
set -euo pipefail
cd "$(dirname "$0")/.."
export TORCH_DEVICE_BACKEND_AUTOLOAD=0
opcov="${OPCOV:-.venv/bin/opcov}"
"$opcov" zoo trace --mode serve "$@"
# The compiled decode step for TorchTPU's compile recipe (coverage/models/NAME/compile/tpu-serve.yaml):
# prefill and decode graphs with a static, a dynamic and a bounded-dynamic KV cache, fake tensors, about
# 80 s a model. Skipped with SERVE_COMPILE=0.
if [[ "${SERVE_COMPILE:-1}" != 0 ]]; then
    "$opcov" zoo trace --mode serve --path compile --compile-backend tpu "$@"
fi
