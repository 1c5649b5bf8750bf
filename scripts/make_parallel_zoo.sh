#!/usr/bin/env bash
# The zoo's sharded training steps, coverage/models/NAME/parallel/STYLE-8.yaml: one training step of each
# curated model below as rank 0 of 8 on torch's fake process group, wrapped as DDP, sharded with FSDP2 and
# split with tensor parallelism (the model's own base_model_tp_plan), fake tensors on the stand-in device
# (docs/DATA.md, "Sharded training steps"). About 25 s a trace on 2 cores. Then what the verdicts read
# beside the registrations: DTensor's sharding strategies of this torch, and the process group of each
# backend whose package is here (coverage/distributed/). PyTorch/XLA's torch (2.9) has its own DTensor file
# and process group, made in its Python: scripts/envs/xla.sh, then
#   PJRT_DEVICE=CPU .envs/xla/bin/python -m opcov.scan.sharding dtensor
#   PJRT_DEVICE=CPU .envs/xla/bin/python -m opcov.scan.sharding process-group xla
# Each op set's provenance.command re-traces it alone. MODELS and STYLES narrow it ('MODELS=llama').
set -euo pipefail
cd "$(dirname "$0")/.."
export TORCH_DEVICE_BACKEND_AUTOLOAD=0
opcov="${OPCOV:-.venv/bin/opcov}"
python="${PYTHON:-.venv/bin/python}"
for model in ${MODELS:-llama qwen3 gemma}; do
    for style in ${STYLES:-ddp fsdp2 tp}; do
        "$opcov" trace "$model" --parallel "$style" --world-size 8
    done
done
"$python" -m opcov.scan.sharding dtensor
for backend in cpu cuda tpu; do
    "$python" -m opcov.scan.sharding process-group "$backend"
done
