#!/usr/bin/env bash
# The data in coverage/xla/ and coverage/cpu/registered-torch-2.9.0*.yaml, made in .envs/xla
# (scripts/envs/xla.sh) with PyTorch/XLA on XLA's CPU client (PJRT_DEVICE=CPU): no accelerator.
#
#   scripts/envs/xla-data.sh scan     # registered: xla (dispatch key XLA) and cpu at torch 2.9
#   scripts/envs/xla-data.sh probe    # probed: zoo ops, then core ATen in two shards; then merged
#   scripts/envs/xla-data.sh reprobe  # the ops that decide zoo verdicts, with every zoo model's calls replayed
#   scripts/envs/xla-data.sh ondevice # op sets recorded on xla itself (coverage/models/M/on/xla-MODE.yaml)
#   scripts/envs/xla-data.sh onreprobe # xla's own-path ops, with the calls those op sets' steps make on xla
#   scripts/envs/xla-data.sh nnreplay # the plain torch.nn tuning set's own calls, replayed and merged in
#   scripts/envs/xla-data.sh classes  # the ops whose failing cells predate signature classes, probed again
#   scripts/envs/xla-data.sh servereplay # the curated decoders' serve calls of generate's own ops, replayed
#   scripts/envs/xla-data.sh picked   # the OpInfo groups whose capped samples now cover other classes
#   scripts/envs/xla-data.sh opinfos  # the OpInfos no case came from yet (ops outside core ATen and the zoo)
#   scripts/envs/xla-data.sh intpaths # those OpInfos' int64 and bool cases
#   scripts/envs/xla-data.sh sweep    # every OpInfo's calls in the argument classes no case had yet
#   scripts/envs/xla-data.sh factories # the factory OpInfos, made on the device (earlier probes made them on CPU)
#   scripts/envs/xla-data.sh division # the int64 division and shift canaries (values past 2**24), added later
#   scripts/envs/xla-data.sh masks    # indexing by a boolean mask (the sweep's mask change), added later
#   scripts/envs/xla-data.sh maskints # the same for int64 and bool tensors, added later
#   scripts/envs/xla-data.sh composites # the composite ops xla overrides, called as themselves, added later
#   scripts/envs/xla-data.sh          # all seventeen
#
# The probe covers the OpInfos of every core ATen op (--core) and of every other op the zoo's op sets
# call (scripts/envs/xla_zoo_ops.py), in float32, bfloat16, int64 and bool, forward and backward, at
# most 3 samples per OpInfo and dtype, one per signature class (OPCOV_XLA_MAX_SAMPLES; PJRT-CPU compiles
# every graph), no input tiers; and the calls of ten zoo models' training steps replayed one by one (XLA_TRACES). Shards
# go to .envs/xla-data/ and are kept: a rerun skips a shard whose file exists, and an
# interrupted one continues with --resume. Each shard's wall time and load average go to its log.
set -euo pipefail
cd "$(dirname "$0")/../.."
ENV=${XLA_ENV:-.envs/xla}
WORK=${XLA_DATA:-.envs/xla-data}
JOBS=${JOBS:-2}
TRACES=${XLA_TRACES:-llama,gpt2,bert,vit,resnet,t5,nn-lstm,nn-gru,nn-transformer,nn-convnet}
export PJRT_DEVICE=CPU TORCH_DEVICE_BACKEND_AUTOLOAD=0
OPCOV="$ENV/bin/opcov"
[ -x "$OPCOV" ] || { echo "no $OPCOV: run scripts/envs/xla.sh first" >&2; exit 2; }
mkdir -p "$WORK"
TV=$("$ENV/bin/python" -c 'import torch; print(torch.__version__)' 2>/dev/null)
XV=$("$ENV/bin/python" -c 'import importlib.metadata as m; print(m.version("torch_xla"))')
PROBED="coverage/xla/probed-torch-$TV-torch_xla-$XV.yaml"
COMMON=(--dtypes float32,bfloat16,int64,bool --directions forward,backward --tiers none --jobs "$JOBS")

scan() {
    "$OPCOV" scan cpu
    "$OPCOV" scan xla
}

shard() {  # shard NAME ARGS...: one probe run, timed, skipped when its file exists
    local name=$1 out="$WORK/$1.yaml"; shift
    if [ -f "$out" ]; then echo "$out exists: kept"; return; fi
    local resume=()
    [ -f "$out.journal.jsonl" ] && resume=(--resume)
    local t0; t0=$(date +%s)
    echo "== $name: start $(date -u +%FT%TZ), load average $(cut -d' ' -f1-3 /proc/loadavg)" | tee -a "$WORK/times.log"
    nice "$OPCOV" probe xla "${COMMON[@]}" "$@" "${resume[@]}" --out "$out" > "$WORK/$name.log" 2>&1  # a stage's own options win
    echo "== $name: done in $(( $(date +%s) - t0 )) s, load average $(cut -d' ' -f1-3 /proc/loadavg)" \
        | tee -a "$WORK/times.log"
}

probe() {
    shard zoo --ops "$("$ENV/bin/python" scripts/envs/xla_zoo_ops.py .)"
    shard core-1-of-2 --core --shard 1/2
    shard core-2-of-2 --core --shard 2/2
    # op calls captured from zoo models' training steps, replayed one call at a time (forward only):
    # the ops no OpInfo is about (backward kernels, _safe_softmax...); every call, no sample cap
    shard traces --ops '^trace\.' --traces "$TRACES"
    "$OPCOV" merge "$WORK/zoo.yaml" "$WORK/core-1-of-2.yaml" "$WORK/core-2-of-2.yaml" "$WORK/traces.yaml" \
        --out "$PROBED"
}

# The ops whose cells decide a curated zoo model's verdict beyond a plain pass, re-probed with the
# signature classes of their failing cases and every distinct call of every curated zoo model replayed
# (each model's own calls, which the verdict prefers for it); their cells replace the earlier ones.
REPROBE_OPS='^aten::(transpose|softplus|addmm|mean|sum|nll_loss|nll_loss_forward|nll_loss_backward|cumsum|layer_norm|native_layer_norm|native_layer_norm_backward|unsqueeze|squeeze|avg_pool1d|avg_pool2d|avg_pool2d_backward|max_pool2d|max_pool2d_with_indices|max_pool2d_with_indices_backward|expand|repeat|batch_norm|native_batch_norm|native_batch_norm_backward|_weight_norm_interface|_weight_norm_interface_backward|constant_pad_nd|pad|histc|_grouped_mm|_to_copy)$'

reprobe() {
    shard reprobe --ops "$REPROBE_OPS" --traces zoo
    # merge refuses an output that is one of its inputs: merged beside, then moved over the old file
    "$OPCOV" merge --replace "$PROBED" "$WORK/reprobe.yaml" --out "$WORK/merged.yaml"
    mv "$WORK/merged.yaml" "$PROBED"
}

# The ops xla runs on its own path where CPU's steps call others (layer norm as native_batch_norm, the
# functionalized *_copy views), re-probed with the calls of every model that has an op set recorded on xla
# (coverage/models/M/on/xla-MODE.yaml, made by 'ondevice'): --traces replays those steps' calls on the
# device too, as each model's own calls; the cells of these ops are replaced (their OpInfo, schema and
# CPU-call cases run again with them, so nothing earlier is lost).
ONDEVICE_OPS='^aten::(batch_norm|native_batch_norm|native_batch_norm_backward|view_copy|t_copy|transpose_copy|expand_copy|permute_copy|select_copy|slice_copy|split_copy|split_with_sizes_copy|squeeze_copy|unsqueeze_copy|alias_copy|detach_copy|unbind_copy)(\.[A-Za-z_]+)?$'

onreprobe() {
    local models
    models=$(find coverage/models -path '*/on/xla-*.yaml' | cut -d/ -f3 | sort -u | paste -sd,)
    shard reprobe-on --ops "$ONDEVICE_OPS" --traces "$models" --timeout 300
    "$OPCOV" merge --replace "$PROBED" "$WORK/reprobe-on.yaml" --out "$WORK/merged.yaml"
    mv "$WORK/merged.yaml" "$PROBED"
}

# The curated zoo models whose path on xla differs from the stand-in's (ATen's device-type branches,
# torch_xla's own modules: docs/DATA.md): their op sets recorded on xla itself, which 'opcov check
# MODEL -b xla' judges in place of the stand-in's. Real values at the tiny size, each input variant.
ONDEVICE=${XLA_ONDEVICE:-nn-lstm,nn-gru,nn-transformer,nn-convnet,bert}

ondevice() {
    local m mode
    for m in ${ONDEVICE//,/ }; do
        for mode in inference training; do
            nice "$OPCOV" trace "$m" --on xla --mode "$mode" --out "coverage/models/$m/on/xla-$mode.yaml"
        done
    done
}

# The plain torch.nn tuning set's own calls (scripts/reality/nn_models.py), replayed on xla one by one
# (forward, and the calls of their backward) and merged into the probed file: evidence, per signature
# class, for every model that makes the same calls (the held-out set, nn_heldout.py, is never replayed
# here: it measures).
NN_SET=${NN_SET:-nn_models}

nnreplay() {
    local factories
    factories=$(.venv/bin/python -c "import sys; sys.path.insert(0, 'scripts/reality'); import $NN_SET as m; print(','.join('$NN_SET:' + n for n in m.MODELS))")
    PYTHONPATH=scripts/reality shard nnreplay --traces "$factories" --ops '^trace\.' --timeout 120
    "$OPCOV" merge "$PROBED" "$WORK/nnreplay.yaml" --out "$WORK/merged.yaml"
    mv "$WORK/merged.yaml" "$PROBED"
}

# The ops whose non-passing cells name no signature class (written before the probe recorded classes:
# scripts/envs/xla_unclassed_ops.py lists them): such a cell counts against every call of its op, whatever its
# arguments (a 0-d input's failure against a 4-d call). Probed again, with the calls of the curated zoo and
# of the nn tuning set replayed (as 'reprobe' and 'nnreplay' gave them), and their cells replaced.
classes() {
    local ops factories zoo
    ops=$(.venv/bin/python scripts/envs/xla_unclassed_ops.py "$PROBED")
    [ -n "$ops" ] || { echo "every non-passing cell of $PROBED names its classes"; return; }
    factories=$(.venv/bin/python -c "import sys; sys.path.insert(0, 'scripts/reality'); import $NN_SET as m; print(','.join('$NN_SET:' + n for n in m.MODELS))")
    zoo=$(.venv/bin/python -c "import sys; sys.path.insert(0, 'src'); from opcov.probe.replay import zoo_names; print(','.join(zoo_names()))")
    PYTHONPATH=scripts/reality shard classes --ops "$ops" --traces "$zoo,$factories" --timeout 120
    "$OPCOV" merge --replace "$PROBED" "$WORK/classes.yaml" --out "$WORK/merged.yaml"
    mv "$WORK/merged.yaml" "$PROBED"
}

# The curated decoders' serve op sets (coverage/models/M/serve.yaml): their own calls of the ops generate adds to
# a forward (scripts/envs/serve_only_ops.py: token selection, the KV cache's bookkeeping, stopping checks),
# replayed on xla as generate makes them (opcov.sources.generate) and merged in, as 'nnreplay' is.
servereplay() {
    local files ops
    files=$(find coverage/models -name serve.yaml | sort | paste -sd,)
    ops=$(.venv/bin/python scripts/envs/serve_only_ops.py)
    shard servereplay --opsets "$files" --ops "$ops" --calls-only --timeout 300
    "$OPCOV" merge "$PROBED" "$WORK/servereplay.yaml" --out "$WORK/merged.yaml"
    mv "$WORK/merged.yaml" "$PROBED"
}

# The ops whose OpInfo groups keep other samples now that the cap keeps one per signature class, the common
# path first (opcov.probe.pick; scripts/envs/xla_pick_ops.py lists them, in this venv's torch): their earlier
# cells hold what the first samples showed (0-d inputs only, for the reductions). Probed again, OpInfo samples
# only, and merged into their cells (combined: the earlier cases stay true of the arguments they had). With them,
# the ops whose registered backward is 'lost' and that no case ran: a claim the probe checks.
picked() {
    local ops
    ops=$("$ENV/bin/python" scripts/envs/xla_pick_ops.py "$PROBED" --lost "${PROBED/probed-/registered-}")
    [ -n "$ops" ] || { echo "no OpInfo group keeps other samples than before"; return; }
    shard picked --ops "$ops" --no-schema --timeout 120
    "$OPCOV" merge "$PROBED" "$WORK/picked.yaml" --out "$WORK/merged.yaml"
    mv "$WORK/merged.yaml" "$PROBED"
}

# The OpInfos no case of the probed file comes from (scripts/envs/xla_new_opinfos.py lists their ops): the ops
# outside core ATen and the zoo's op sets that models beyond the zoo call (elu, cdist, embedding_bag,
# grid_sampler_2d...), float32, up to 6 samples per group, one per signature class; merged into the cells.
opinfos() {
    local ops
    ops=$(cd scripts/envs && "../../$ENV/bin/python" xla_new_opinfos.py "../../$PROBED")
    [ -n "$ops" ] || { echo "every OpInfo has a case in $PROBED"; return; }
    OPCOV_XLA_MAX_SAMPLES=6 shard opinfos --ops "$ops" --no-schema --timeout 120 --dtypes float32
    "$OPCOV" merge "$PROBED" "$WORK/opinfos.yaml" --out "$WORK/merged.yaml"
    mv "$WORK/merged.yaml" "$PROBED"
}

# The same OpInfos' integer and bool paths: those holding no case at int64 or bool though CPU runs them so
# (cummax, kthvalue, bitwise shifts... of a model's integer features); up to 6 samples per group; merged in.
intpaths() {
    local ops
    ops=$(cd scripts/envs && "../../$ENV/bin/python" xla_new_opinfos.py "../../$PROBED" --dtypes int64,bool)
    [ -n "$ops" ] || { echo "every OpInfo has an int64 or bool case in $PROBED"; return; }
    OPCOV_XLA_MAX_SAMPLES=6 shard intpaths --ops "$ops" --no-schema --timeout 120 --dtypes int64,bool
    "$OPCOV" merge "$PROBED" "$WORK/intpaths.yaml" --out "$WORK/merged.yaml"
    mv "$WORK/merged.yaml" "$PROBED"
}

# Every OpInfo's argument sweep (opcov.probe.argsweep): the calls its samples make in each class, and with one
# path-selecting argument changed (a bool flipped, an optional argument left out, another reduction, a number or
# output size of another kind), in float32, one case per class the probed file holds no case of yet; merged in.
# A model's call of a class no OpInfo sample took (cdist with p=0.5 and no compute_mode) then has a case of its own.
sweep() {
    shard sweep --sweep "$PROBED" --dtypes float32 --timeout 120
    "$OPCOV" merge "$PROBED" "$WORK/sweep.yaml" --out "$WORK/merged.yaml"
    mv "$WORK/merged.yaml" "$PROBED"
}

# The factory OpInfos (full, eye, triu_indices, the signal windows: their samples name a device): a probe before
# the case's device argument was set to the probed device made them on CPU and read them as passes; merged in.
factories() {
    local ops
    ops=$("$ENV/bin/python" scripts/envs/xla_factory_opinfos.py)
    [ -n "$ops" ] || { echo "no factory OpInfo in this torch"; return; }
    shard factories --ops "$ops" --no-schema --timeout 120 --dtypes float32,bfloat16,float16,float64,int64,bool
    "$OPCOV" merge "$PROBED" "$WORK/factories.yaml" --out "$WORK/merged.yaml"
    mv "$WORK/merged.yaml" "$PROBED"
}

# The int64 division and shift canaries (div floor and trunc, floor_divide, >> of values past float32's 2**24), added
# to opcov after the 'probe' stage ran: probed and merged in.
division() {
    shard division --ops '^canary\.int64_(div_floor|div_trunc|floor_divide|rshift)$' --dtypes int64 --directions forward
    "$OPCOV" merge "$PROBED" "$WORK/division.yaml" --out "$WORK/merged.yaml"
    mv "$WORK/merged.yaml" "$PROBED"
}

# Indexing by a boolean mask (x[mask], x[mask] = v): the sweep's change of an integer index into a mask, added
# to opcov after the 'sweep' stage ran: probed and merged in.
masks() {
    shard masks --sweep "$PROBED" --ops '^(__getitem__|index_put)$' --dtypes float32 --timeout 120
    "$OPCOV" merge "$PROBED" "$WORK/masks.yaml" --out "$WORK/merged.yaml"
    mv "$WORK/merged.yaml" "$PROBED"
}

# The same for int64 and bool tensors indexed by a mask (counts, label maps, flags), added after float32's.
maskints() {
    shard masks-int --sweep "$PROBED" --ops '^(__getitem__|index_put)$' --dtypes int64,bool --timeout 120
    "$OPCOV" merge "$PROBED" "$WORK/masks-int.yaml" --out "$WORK/merged.yaml"
    mv "$WORK/merged.yaml" "$PROBED"
}

# The composite ops PyTorch/XLA overrides with its own kernel (kl_div, selu, std.dim, diag, einsum...), each
# called as itself with its OpInfo's arguments, forward and backward (opcov.probe.composites): the OpInfo
# cases file these under the decomposition CPU runs, so the backend's kernel, and the backward its autograd
# fallback gives where it has no autograd kernel, had no case. Added to opcov after the stages above ran.
composites() {
    shard composites --composites-only --timeout 120
    "$OPCOV" merge "$PROBED" "$WORK/composites.yaml" --out "$WORK/merged.yaml"
    mv "$WORK/merged.yaml" "$PROBED"
}

case "${1:-all}" in
    scan) scan ;;
    probe) probe ;;
    reprobe) reprobe ;;
    ondevice) ondevice ;;
    onreprobe) onreprobe ;;
    nnreplay) nnreplay ;;
    classes) classes ;;
    servereplay) servereplay ;;
    picked) picked ;;
    opinfos) opinfos ;;
    intpaths) intpaths ;;
    sweep) sweep ;;
    factories) factories ;;
    division) division ;;
    masks) masks ;;
    maskints) maskints ;;
    composites) composites ;;
    all) scan; probe; reprobe; ondevice; onreprobe; nnreplay; classes; servereplay; picked; opinfos; intpaths; sweep; factories; division; masks; maskints; composites ;;
    *) echo "usage: $0 [scan|probe|reprobe|ondevice|onreprobe|nnreplay|classes|servereplay|picked|opinfos|intpaths|sweep|factories|division|masks|maskints|composites|all]" >&2; exit 2 ;;
esac
