#!/usr/bin/env bash
# The opcov GitHub Action's step (action.yml), runnable anywhere: 'opcov check' as a CI gate.
#
# Writes the markdown report to $GITHUB_STEP_SUMMARY (appended; stdout when unset), prints the
# github-annotation report on stdout (the runner turns its ::error/::warning lines into
# annotations), and exits with the gate's exit code: 0 runs, 1 the gate failed, 2 bad input.
#
# Inputs come from the environment (the action passes them so, never pasted into shell code):
#   OPCOV_MODEL     op-set file, folder of op sets, zoo model name, or anything 'opcov trace' accepts
#   OPCOV_BACKENDS  backend names, separated by commas or spaces (tpu,cpu)
#   OPCOV_MODE      inference, training, serve, several (comma-separated), or empty for every mode there is
#   OPCOV_ARGS      more 'opcov check' arguments, split on whitespace (--strict --fail-on unknown)
# 'opcov' must be on PATH.

model="${OPCOV_MODEL:-}"
if [[ -z "$model" ]]; then
    echo "opcov: error: no model given (the action's 'model' input; OPCOV_MODEL here)" >&2
    exit 2
fi
IFS=', ' read -r -a backends <<< "${OPCOV_BACKENDS:-}"
if [[ ${#backends[@]} -eq 0 ]]; then
    echo "opcov: error: no backend given (the action's 'backends' input; OPCOV_BACKENDS here)" >&2
    exit 2
fi
IFS=', ' read -r -a modes <<< "${OPCOV_MODE:-}"
read -r -a extra <<< "${OPCOV_ARGS:-}"

args=(check "$model")
for b in "${backends[@]}"; do args+=(--backend "$b"); done
for m in "${modes[@]}"; do args+=(--mode "$m"); done
args+=("${extra[@]}")

# The summary first: a failing gate still shows its table. Then the annotations, whose exit code
# is the gate's (both runs judge the same data; the worse code wins should they ever differ).
if [[ -n "${GITHUB_STEP_SUMMARY:-}" ]]; then
    opcov "${args[@]}" --format markdown >> "$GITHUB_STEP_SUMMARY"
else
    opcov "${args[@]}" --format markdown
fi
summary_rc=$?
opcov "${args[@]}" --format github
gate_rc=$?
exit $(( summary_rc > gate_rc ? summary_rc : gate_rc ))
