"""Real values where a model branches on data: a real-valued trace merged into the fake-tensor one.

Why: a fake tensor has no values, so a model that reads one on the host takes a branch eager would
not take. transformers asks "is the attention mask all ones?" (``mask.all()``, a host read) and
then calls sdpa with ``is_causal``; under fake tensors it cannot ask, and builds the full causal
mask instead, so ``aten::all``, ``aten::eq.Scalar``, the host read ``aten::_local_scalar_dense`` and
the like never reach the op set, while a real run calls them.

So a small curated zoo model (at most MAX_PARAMS parameters) is also run with real values, in a
child process (PrivateUse1 can be claimed once per process) whose PrivateUse1 device computes: the
test backend (``opcov.testing.pybackend``) keeps CPU payloads and runs every op through its CPU
fallback, so host reads see real values, while composites still take an accelerator's path (the
device is PrivateUse1, and it has no kernels of its own but convolution's (its CPU computation
counts integer ``histc``, which CPU's kernel lacks and MoE routing uses), so no device query such as ``_fused_sdp_choice`` is answered as CPU would), and the
stand-in's pass-through kernels show every composite call (``target.show_composites``). Text models
run twice: with their inputs as built, and with a padded attention mask, since that branch depends
on the inputs and not on real-vs-fake. ``calltree.merge`` adds what only the real runs saw
(``seen=real``) and marks what both saw (``seen=both``); counts and shapes stay the fake trace's
where it has them. A real run that cannot run says so in the op set's notes, which then keeps the
fake trace alone.
"""

from __future__ import annotations

import dataclasses
import json
import os
import subprocess
import sys

from opcov.store import opset
from opcov.store.opset import OpSet
from opcov.tracing import calltree

MAX_PARAMS = 50_000_000
PYBACKEND_SPEC_VAR = "OPCOV_PYBACKEND_SPEC"  # opcov.testing.pybackend.ENV_VAR (the child asserts they agree)
# Kernels of the computing device besides its CPU fallback: convolution as one op, as accelerators
# (TorchTPU) register it; ATen's own PrivateUse1 path ends in convolution_overrideable, a stub that
# raises, which no fallback catches. The op set does not change: the trace records aten::convolution
# above any kernel.
CHILD_KERNELS = {"aten::convolution": "pass", "aten::convolution_backward": "pass"}
TIMEOUT_S = 600
PADDED = "a padded attention mask"


def with_real_branches(result: OpSet, model: str, *, sizes, mode: str, dtype: str, autocast: bool,
                       device: str, optimizer: str, curated: bool) -> OpSet:
    """``result`` (a fake-tensor trace of ``model``, a reference trace_spec accepts) merged with
    real-valued runs of the same model, or with a note saying why there are none. Only curated zoo
    models (``curated``) get the runs for now: each is a child process (~10 s of imports), which the
    whole-zoo tracer (hundreds of models) would pay again for every one."""
    doc = result.doc
    notes = doc["provenance"]["notes"]
    why_not = ("it was traced with real tensors already" if doc["provenance"].get("tracing") != "fake"
               else "the target is the CPU" if device == "cpu"
               else "only curated zoo models get one" if not curated
               else "--autocast: the real run has no autocast policy for its device" if autocast
               else f"{doc['model']['params']:,} parameters is over {MAX_PARAMS:,} for a real run"
               if doc["model"].get("params", 0) > MAX_PARAMS else "")
    if why_not:
        if doc["provenance"].get("tracing") == "fake" and device != "cpu":
            notes.append(f"no real-valued run ({why_not}): branches on data are as fake tensors took them")
        return result
    job = {"model": model, "sizes": dataclasses.asdict(sizes), "mode": mode, "dtype": dtype, "optimizer": optimizer}
    runs, failure = _run_child(job)
    if failure:
        notes.append(f"the real-valued run failed ({failure}): branches on data are as fake tensors took them")
        return result
    fake_rows = [dataclasses.asdict(n) for n in opset.nodes(doc)]
    real_rows = [[dataclasses.asdict(n) for n in opset.nodes(run["doc"])] for run in runs]
    merged = calltree.merge(fake_rows, real_rows)
    doc["calltree"] = [opset.node_text(row) for row in merged]
    doc["ops"] = calltree.flat(merged, doc["ops"], [run["doc"]["ops"] for run in runs])
    only_real = sorted({f"{op} ({phase})" for op, rec in doc["ops"].items() for phase, cells in rec.items()
                        if any(c.get("seen") == "real" for c in cells.values())})
    both = sum(r.get("seen") == "both" for r in merged)
    notes.append(
        f"real values: a run on a computing PrivateUse1 device ({', '.join(run['variant'] for run in runs)}) "
        f"saw {both} of the fake trace's {len(fake_rows)} call-tree nodes, and {len(merged) - len(fake_rows)} "
        f"more (seen=real); ops only it called: {', '.join(only_real) if only_real else 'none'}")
    doc["summary"] = {"distinct_ops": len(doc["ops"]),
                      "calls": {phase: sum(c["calls"] for rec in doc["ops"].values()
                                           for c in (rec.get(phase) or {}).values()) for phase in opset.PHASES}}
    return result


def _run_child(job: dict) -> tuple[list, str]:
    """(the real runs' documents with their input variant, '') or ([], why it failed)."""
    from opcov.tracing.target import NAME

    src = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    env = dict(os.environ, TORCH_DEVICE_BACKEND_AUTOLOAD="0",
               PYTHONPATH=os.pathsep.join(p for p in (src, os.environ.get("PYTHONPATH")) if p))
    # pybackend.ENV_VAR: importing pybackend here would claim this process's PrivateUse1
    env[PYBACKEND_SPEC_VAR] = json.dumps({"name": NAME, "kernels": CHILD_KERNELS, "fallback": "cpu"})
    try:
        r = subprocess.run([sys.executable, "-m", "opcov.tracing.realtrace"], input=json.dumps(job),
                           capture_output=True, text=True, env=env, timeout=TIMEOUT_S)
    except subprocess.TimeoutExpired:
        return [], f"over {TIMEOUT_S} s"
    lines = [ln for ln in r.stdout.splitlines() if ln.startswith("{")]
    if r.returncode != 0 or not lines:
        tail = (r.stderr.strip().splitlines() or [f"exit {r.returncode}, no output"])[-1]
        return [], tail[:300]
    out = json.loads(lines[-1])
    return (out["runs"], "") if out.get("runs") else ([], out.get("error", "no run"))


def input_variants(torch, built) -> list:
    """(name, inputs): as built, and, for a model that takes an attention mask, with one padded."""
    import inspect

    out = [("inputs as built", built.inputs)]
    inputs = built.inputs
    try:
        takes_mask = "attention_mask" in inspect.signature(built.model.forward).parameters
    except (TypeError, ValueError):
        takes_mask = False
    if isinstance(inputs, dict) and isinstance(inputs.get("input_ids"), torch.Tensor) and takes_mask:
        ids = inputs["input_ids"]
        mask = torch.ones_like(ids)
        mask[0, ids.shape[-1] - max(1, ids.shape[-1] // 4):] = 0
        out.append((PADDED, {**inputs, "attention_mask": mask}))
    return out


def _child(job: dict) -> dict:
    """In the child: build the model with real weights and run each input variant on the computing device."""
    from opcov.torchenv import import_torch

    torch = import_torch()
    import opcov.testing.pybackend as pb  # claims PrivateUse1 as the stand-in's name, computing on CPU

    assert pb.ENV_VAR == PYBACKEND_SPEC_VAR and pb.current_spec()["fallback"] == "cpu"
    from opcov.tracing import models, target, zoo
    from opcov.tracing.trace import Options, trace_computing

    target.show_composites(torch)
    entry = zoo.BY_NAME.get(job["model"])
    torch.manual_seed(0)
    built = models.build(entry.spec if entry else job["model"], models.Sizes(**job["sizes"]), mode=job["mode"],
                         real=True, zoo_entry=entry)
    opts = Options(job["mode"], job["dtype"], False, "accelerator", job["optimizer"], real=True)
    runs = []
    for variant, inputs in input_variants(torch, built):
        torch.manual_seed(1)
        runs.append({"variant": variant, "doc": trace_computing(built.model, inputs, pb.device().type, opts)})
    return {"runs": runs}


def main() -> None:
    job = json.loads(sys.stdin.read())
    try:
        out = _child(job)
    except Exception as exc:  # noqa: BLE001 - the parent notes it and keeps the fake trace
        text = str(exc).strip().splitlines()
        out = {"error": f"{type(exc).__name__}: {text[0][:200] if text else ''}"}
    print(json.dumps(out))


if __name__ == "__main__":
    main()
