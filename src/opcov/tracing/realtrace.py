"""Real values where a model branches on data: a real-valued trace merged into the fake-tensor one.

Why: a fake tensor has no values, so a model that reads one on the host takes a branch eager would
not take. transformers asks "is the attention mask all ones?" (``mask.all()``, a host read) and
then calls sdpa with ``is_causal``; under fake tensors it cannot ask, and builds the full causal
mask instead, so ``aten::all``, ``aten::eq.Scalar``, the host read ``aten::_local_scalar_dense`` and
the like never reach the op set, while a real run calls them.

So a small curated zoo model (at most MAX_PARAMS parameters) is also run with real values, in a
child process (PrivateUse1 can be claimed once per process) whose PrivateUse1 device computes: the
test backend (``opcov.sources.pybackend``) keeps CPU payloads and runs every op through its CPU
fallback, so host reads see real values, while composites still take an accelerator's path (the
device is PrivateUse1, and it has no kernels of its own but convolution's (its CPU computation
counts integer ``histc``, which CPU's kernel lacks and MoE routing uses), so no device query such as
``_fused_sdp_choice`` is answered as CPU would), and the stand-in's pass-through kernels show every
composite call (``target.show_composites``). Text models run once per input variant
(``vocab.INPUT_VARIANTS``): with their inputs as given, and with a padded attention mask
(``padded_mask``), since that branch depends on the inputs and not on real-vs-fake; the fake trace is
of the given inputs. ``calltree.merge`` adds what only the real runs saw (``seen=real``) and marks what
both saw (``seen=both``); every node names the variants whose runs made it (``variant=``), so that
``opcov check`` judges the given inputs apart from the variants opcov added. Counts and shapes stay
the fake trace's where it has them. A real run that cannot run says so in the op set's notes, which then keeps the
fake trace alone. A CPU target's (``--device cpu``) branch run is eager on CPU itself, in the same
process: CPU needs no device claim, and its own kernels are what a CPU run calls.

A model whose ops depend on data (``nonzero``, MoE routing read on the host) cannot be traced with
fake tensors at all: ``--real`` (``trace_real``) then traces the whole op set with real values on the
same computing stand-in, not on CPU, whose own kernels (``_scaled_dot_product_flash_attention_for_cpu``)
an accelerator never runs. The whole-zoo tracer does this in workers whose device is the stand-in.
"""

from __future__ import annotations

import dataclasses
import json
import os
import sys

from opcov import children, vocab
from opcov.errors import UsageError
from opcov.sources import models
from opcov.sources.step import input_variants
from opcov.store import opset
from opcov.store.opset import OpSet
from opcov.tracing import calltree, devicemodule, ladder
from opcov.tracing.command import command_line

MAX_PARAMS = 50_000_000
PYBACKEND_SPEC_VAR = "OPCOV_PYBACKEND_SPEC"  # opcov.sources.pybackend.ENV_VAR (the child asserts they agree)
# Kernels of the computing device besides its CPU fallback: convolution as one op, as accelerators
# (TorchTPU) register it; ATen's own PrivateUse1 path ends in convolution_overrideable, a stub that
# raises, which no fallback catches. The op set does not change: the trace records aten::convolution
# above any kernel.
CHILD_KERNELS = {"aten::convolution": "pass", "aten::convolution_backward": "pass"}
TIMEOUT_S = 600
# The note of a fake trace whose real-valued branch run failed (zoo --retry-failed looks for it).
FAILED_NOTE = "the real-valued run failed ({why}): branches on data are as fake tensors took them"


def with_real_branches(
    result: OpSet,
    model: str,
    *,
    built,
    sizes,
    mode: str,
    dtype: str,
    autocast: bool,
    device: str,
    optimizer: str,
    defer: bool = False,
) -> OpSet:
    """``result`` (a fake-tensor trace of ``model``, a reference trace_spec accepts, built as ``built``)
    merged with real-valued runs of the same model, or with a note saying why there are none. A
    model over MAX_PARAMS runs at narrow widths (``tiny.overrides(width=True)`` on its config: the
    same layer kinds, so the same branches) where it is a transformers model. ``defer``: the run is
    not made here but left as ``result.real_job`` for the caller (the whole-zoo tracer runs it in a
    worker whose device is the computing stand-in, so it pays no child process)."""
    doc = result.doc
    notes = doc["provenance"]["notes"]
    config = getattr(built.model, "config", None)
    narrow = doc["model"].get("params", 0) > MAX_PARAMS and hasattr(config, "to_dict")
    cpu = device == "cpu"
    why_not = (
        "it was traced with real tensors already"
        if doc["provenance"].get("tracing") != "fake"
        else "--autocast: the real run has no autocast policy for its device"
        if autocast and not cpu
        else f"{doc['model']['params']:,} parameters is over {MAX_PARAMS:,} for a real run, and it is "
        "not a transformers model that opcov can narrow"
        if doc["model"].get("params", 0) > MAX_PARAMS and not narrow
        else ""
    )
    if why_not:
        if doc["provenance"].get("tracing") == "fake":
            notes.append(f"no real-valued run ({why_not}): branches on data are as fake tensors took them")
        return result
    if narrow:
        from opcov.sources import tiny

        sizes = dataclasses.replace(
            sizes, overrides={**sizes.overrides, **tiny.overrides(_set_on(model, config), width=True)}
        )
    job = {
        "kind": "branches",
        "model": model,
        "sizes": dataclasses.asdict(sizes),
        "mode": mode,
        "dtype": dtype,
        "optimizer": optimizer,
        "narrowed": narrow,
    }
    if cpu:  # eager on CPU itself, in this process: CPU needs no device claim
        job.update(device="cpu", autocast=autocast)
    if defer and not cpu:
        result.real_job = job
    else:  # repaired as the zoo's are, so `opcov trace X` and `opcov zoo trace` make the same runs
        job, answer, repairs = repaired_branch_runs(job)
        layout = stand_in_layout(answer[1]) if answer and not cpu else None
        if layout:  # fake tensors lose a sparse or quantized layout: the fake trace would judge dense calls
            raise LayoutError(layout, answer[1])
        merge_real_branches(result, job, answer=answer, repairs=repairs)
    return result


def _set_on(model: str, config):
    """The config that ``--set`` overrides of ``model`` are set on: the model's own, or, for a model built
    from one part of a composite config (dots3_note's, llama4's, mllama's and emu3's text part), the
    composite's default, whose narrow widths are that part's keys (``text_config.hidden_size``): the
    part's own would be top-level keys the composite ignores, and the run would be at full width (over
    8 GB for those four)."""
    kind = model[3:] if model.startswith("hf:") else None
    if kind and getattr(config, "model_type", kind) != kind:
        try:
            return ladder.default_config(kind)
        except Exception:  # noqa: BLE001 - a type whose default does not build: the part's own, as before
            return config
    return config


def branch_runs(job: dict) -> tuple[dict, str]:
    """(the real-valued runs of ``job``, '') or ({}, why they failed): in this process if its device is
    the computing stand-in or the target is the CPU, else in a child process."""
    if job.get("device") == "cpu" or computing_here():
        try:
            return _child(job), ""
        except Exception as exc:  # noqa: BLE001 - the caller notes it; the fake trace stays
            text = str(exc).strip().splitlines()
            return {}, f"{type(exc).__name__}: {text[0][:200] if text else ''}"
    return run_job(job)


def merge_real_branches(result: OpSet, job: dict, *, answer: tuple[dict, str] | None = None, repairs=()) -> bool:
    """Merge the real-valued runs of ``job`` (``with_real_branches`` makes it) into the fake trace
    ``result``, with a note (after ``repairs``: the notes of how its sizes were repaired); ``answer``:
    ``branch_runs(job)`` where the caller made it. Whether they ran (a failure is a note: the fake
    trace stays as it was)."""
    doc = result.doc
    out, failure = answer or branch_runs(job)
    notes = doc["provenance"]["notes"]
    notes.extend(repairs)
    if failure:
        notes.append(FAILED_NOTE.format(why=failure))
        return False
    runs = out["runs"]
    fake_rows = [n._asdict() for n in opset.nodes(doc)]
    merged = merge_runs(doc, [run["doc"] for run in runs], seen=True)
    only_real = sorted(
        {
            f"{op} ({phase})"
            for op, rec in doc["ops"].items()
            for phase, cells in rec.items()
            if any(c.get("seen") == "real" for c in cells.values())
        }
    )
    both = sum(r.get("seen") == "both" for r in merged)
    narrowed = job.get("narrowed")
    where = "on CPU itself" if job.get("device") == "cpu" else "on a computing PrivateUse1 device"
    notes.append(
        f"real values: a run {where} ({', '.join(label(run['variant']) for run in runs)}"
        f"{'; at narrow widths: ' + _set_text(job['sizes']) if narrowed else ''}) "
        f"saw {both} of the fake trace's {len(fake_rows)} call-tree nodes, and {len(merged) - len(fake_rows)} "
        f"more (seen=real); ops only it called: {', '.join(only_real) if only_real else 'none'}"
    )
    return True


def label(variant: str) -> str:
    """'the given inputs', 'a padded attention mask': how notes name an input variant."""
    word = vocab.INPUT_VARIANTS.get(variant)
    return word.label if word else variant


def _set_text(sizes: dict) -> str:
    return " ".join(f"{k}={v}" for k, v in sizes["overrides"].items()) or "the defaults"


def trace_real(model: str, *, sizes, mode: str, dtype: str | None, optimizer: str, out: str | None) -> OpSet:
    """``opcov trace MODEL --real`` for an accelerator target: the whole op set traced with real values
    on the computing stand-in (not on CPU, whose own kernels an accelerator never runs), in this
    process if its PrivateUse1 device is that stand-in (the zoo's real-valued workers), else in a
    child process. Text models run with their inputs as built and with a padded attention mask, merged."""
    job = {
        "kind": "trace",
        "model": model,
        "sizes": dataclasses.asdict(sizes),
        "mode": mode,
        "dtype": dtype,
        "optimizer": optimizer,
        "out": out,
    }
    if computing_here():
        return OpSet(_child(job)["doc"])
    result, failure = run_job(job)
    if failure:
        if stand_in_layout(failure):
            raise LayoutError(stand_in_layout(failure), failure)
        raise UsageError(f"{model}: the real-valued trace on the computing stand-in failed: {failure}")
    return OpSet(result["doc"])


# How a real-valued trace ends when torch aborts the stand-in's process (an error raised inside a backward on a
# Python-defined device, torch 2.13): the model is then traced on CPU itself (opcov.tracing.spec).
STAND_IN_ABORT = "its process crashed (SIGABRT)"


class LayoutError(UsageError):
    """The computing stand-in has no kernels for a layout the model uses (``layout``: 'sparse', 'quantized', 'nested'):
    its PrivateUse1 device registers strided kernels alone, so such a model is traced on CPU itself."""

    def __init__(self, layout: str, failure: str):
        super().__init__(f"the computing stand-in has no {layout} kernels: {failure}")
        self.layout, self.failure = layout, failure


def stand_in_layout(failure: str) -> str | None:
    """'sparse', 'quantized' or 'nested' where ``failure`` is the stand-in's missing kernel for that layout's
    dispatch key (``Could not run ... from the 'Sparse<stand-in>' backend``) or a nested tensor it cannot size,
    else None."""
    from opcov.tracing.target import NAME

    for key, layout in (("Sparse", "sparse"), ("SparseCsr", "sparse"), ("Quantized", "quantized")):
        if f"from the '{key}{NAME}' backend" in failure:
            return layout
    if "NestedTensorImpl" in failure or f"from the 'NestedTensor{NAME}' backend" in failure:
        return "nested"  # a TransformerEncoder's inference fast path packs its padded batch as a nested tensor
    return None


def computing_here() -> bool:
    """Whether this process's PrivateUse1 device is the computing stand-in (a zoo real-valued worker)."""
    pb = sys.modules.get("opcov.sources.pybackend")
    return pb is not None and (pb.current_spec() or {}).get("fallback") == "cpu"


def child_spec() -> str:
    """The computing stand-in's spec, for ``PYBACKEND_SPEC_VAR`` before ``opcov.sources.pybackend`` is imported."""
    from opcov.tracing.target import NAME

    return json.dumps({"name": NAME, "kernels": CHILD_KERNELS, "fallback": "cpu"})


def merge_runs(doc: dict, others: list[dict], *, seen: bool = False) -> list[dict]:
    """Merge the call trees and ops of ``others`` (runs of other input variants) into ``doc``
    (``calltree.merge``: each node names the variants whose runs made it); the merged rows. ``seen``
    True: ``doc`` is a fake trace, and what the real runs saw is marked (``seen=``); False: ``doc`` was
    itself a real run (``--real``, ``--on``), so nothing is."""
    rows = [n._asdict() for n in opset.nodes(doc)]
    merged = calltree.merge(rows, [[n._asdict() for n in opset.nodes(o)] for o in others])
    doc["ops"] = calltree.flat(merged, doc["ops"], [o["ops"] for o in others])
    if not seen:
        for row in merged:
            row.pop("seen", None)
        for rec in doc["ops"].values():
            for cells in rec.values():
                for cell in cells.values():
                    cell.pop("seen", None)
    doc["calltree"] = [opset.node_text(row) for row in merged]
    lookups = devicemodule.merged(doc.get(devicemodule.KEY), *(o.get(devicemodule.KEY) for o in others))
    if lookups:
        doc[devicemodule.KEY] = lookups
    doc["summary"] = {
        "distinct_ops": len(doc["ops"]),
        "calls": opset.phase_calls(
            {
                phase: sum(c["calls"] for rec in doc["ops"].values() for c in (rec.get(phase) or {}).values())
                for phase in opset.PHASES
            }
        ),
    }
    return merged


def run_job(job: dict) -> tuple[dict, str]:
    """(the child's answer, '') or ({}, why it failed): ``job`` run in a child process whose
    PrivateUse1 device is the computing stand-in."""
    src = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    env = dict(
        os.environ,
        TORCH_DEVICE_BACKEND_AUTOLOAD="0",
        PYTHONPATH=os.pathsep.join(p for p in (src, os.environ.get("PYTHONPATH")) if p),
    )
    # pybackend.ENV_VAR: importing pybackend here would claim this process's PrivateUse1
    env[PYBACKEND_SPEC_VAR] = child_spec()
    try:  # a child that ends with this process, and all it started with it (a factory's forks and daemons)
        r = children.run_module(["opcov.tracing.realtrace"], env, TIMEOUT_S, stdin=json.dumps(job), keep_stdout=True)
    except children.TimedOut:
        return {}, f"over {TIMEOUT_S} s"
    lines = [ln for ln in r.out.splitlines() if ln.startswith("{")]
    ended = (
        f"its process crashed ({children.signal_name(-r.returncode)})"
        if r.returncode < 0
        else f"its process ended (exit status {r.returncode}) before its output was written"
    )
    if r.returncode != 0 or not lines:
        tail = ended if r.returncode < 0 else (r.err.strip().splitlines() or [ended])[-1]
        return {}, tail[:300]
    try:  # the answer is its last line; a factory may print lines of its own, and exit before the answer
        out = json.loads(lines[-1])
    except ValueError:
        out = None
    if not (
        isinstance(out, dict)
        and out.keys() & {"doc", "runs", "error"}
        and isinstance(out.get("doc", {}), dict)
        and isinstance(out.get("runs", []), list)
    ):
        return {}, ended
    return (out, "") if "error" not in out else ({}, str(out["error"]))


def traced_variants(torch, built, entry, variants, **options) -> list[tuple[str, dict]]:
    """(variant, op-set document) of a real-valued trace of ``built`` per (variant, inputs) of ``variants``
    (input_variants gives them), each seeded alike and carrying the model's facets; ``options`` go to trace
    (mode, dtype, optimizer, command and where it runs). The stand-in's real-valued run (``_child``) and a
    trace on a backend itself (opcov.tracing.ondevice) both make their runs so."""
    from opcov.tracing.trace import trace

    runs = []
    for variant, inputs in variants:
        torch.manual_seed(1)
        doc = trace(
            built.model,
            inputs,
            real=True,
            name=entry.name if entry else built.name,
            source=built.source,
            config=built.config,
            notes=built.notes,
            variant=variant,
            **options,
        ).doc
        doc["model"].update(built.facets)
        runs.append((variant, doc))
    return runs


def _child(job: dict) -> dict:
    """Build the model with real weights and run each input variant on the computing device: the runs
    (``branches``, for ``with_real_branches``) or one merged op set (``trace``, for ``trace_real``)."""
    from opcov.torchenv import import_torch

    torch = import_torch()
    from opcov.sources import zoo
    from opcov.tracing import target

    cpu = job.get("device") == "cpu"  # a CPU target's branch run: eager on CPU, no stand-in
    if not cpu:
        import opcov.sources.pybackend as pb  # claims PrivateUse1 as the stand-in's name, computing on CPU

        assert pb.ENV_VAR == PYBACKEND_SPEC_VAR and pb.current_spec()["fallback"] == "cpu"
        target.show_composites(torch)
    entry = zoo.BY_NAME.get(job["model"])
    sizes = models.Sizes(**job["sizes"])
    torch.manual_seed(0)
    build_mode = "inference" if job["mode"] == "serve" else job["mode"]  # serve: its prompt comes from these inputs
    built = models.build(entry.spec if entry else job["model"], sizes, mode=build_mode, real=True, zoo_entry=entry)
    dtype = job["dtype"] or (entry.dtype if entry else built.dtype or "float32")
    command = None
    if job["kind"] == "trace":
        command = command_line(
            job["model"],
            mode=job["mode"],
            dtype=dtype,
            optimizer=job["optimizer"],
            real=True,
            sizes=sizes,
            out=job.get("out"),
        )
    where = {"device": "cpu", "autocast": job.get("autocast", False)} if cpu else {"computing": pb.device().type}
    variants = input_variants(torch, built)
    if job["mode"] == "serve":  # generate on a prompt made from the built inputs, as given (serve.py)
        from opcov.tracing import serve

        serve.prepare(torch, built)
        variants = [(vocab.GIVEN, built.inputs)]
    traced = traced_variants(
        torch,
        built,
        entry,
        variants,
        mode=job["mode"],
        dtype=dtype,
        optimizer=job["optimizer"],
        command=command,
        **where,
    )
    runs = [{"variant": variant, "doc": doc} for variant, doc in traced]
    if job["kind"] == "branches":
        return {"runs": runs}
    doc = runs[0]["doc"]
    if len(runs) == 1:  # one input variant (serve): nothing to merge
        doc["provenance"]["notes"].append(
            "real values: traced on a computing PrivateUse1 stand-in (CPU payloads; composites take an "
            f"accelerator's path), not on CPU; inputs: {label(runs[0]['variant'])}"
        )
        return {"doc": doc}
    merge_runs(doc, [run["doc"] for run in runs[1:]])
    doc["provenance"]["notes"].append(
        f"real values: traced on a computing PrivateUse1 stand-in (CPU payloads; composites take an accelerator's "
        f"path), not on CPU; input variants merged (each node's variant= names those that made it): "
        f"{', '.join(label(run['variant']) for run in runs)}"
    )
    return {"doc": doc}


# ---------------------------------------------------------------- the whole zoo's jobs (zoorun's workers)


class _BranchFailed(Exception):
    """A real-valued branch run that failed (its one-line reason), for ``ladder.repaired``."""


def repaired_branch_runs(job: dict) -> tuple[dict, tuple[dict, str], list]:
    """(the job as made, ``branch_runs``' answer, notes) for branch run ``job``. A
    transformers model's branch run that fails for a reason ``opcov.tracing.repair`` knows (its narrow
    widths miss a derived size, such as an mrope section) is made again repaired, as the zoo's own
    traces are; one whose narrowest widths do not fit together, at whole heads (see ``ladder.narrow``).
    Where it still fails, the answer says why (the fake trace stays)."""
    out, failure = branch_runs(job)
    notes: list = []
    if failure and job["model"].startswith("hf:"):

        def run(sizes):
            trial = {**job, "sizes": dataclasses.asdict(sizes)}
            runs, why = branch_runs(trial)
            if why:
                raise _BranchFailed(why)
            return trial, runs

        start = models.Sizes(**{**job["sizes"], "inputs": tuple(job["sizes"]["inputs"])})
        try:
            config = ladder.default_config(job["model"][3:])
        except models.BuildError:
            return job, (out, failure), notes
        tries = [(start.overrides, _BranchFailed(failure), [])]
        if job.get("narrowed"):
            tries += ladder.whole_heads(config, start.overrides, failure[:160])
        for overrides, failed, why in tries:
            try:
                job, out = ladder.repaired(
                    run, config, overrides, why, start=start, failed=failed, note=lambda _, why: notes.extend(why)
                )
                failure = ""
                break
            except Exception as exc:  # noqa: BLE001 - said in the answer; the fake trace stays
                failure = str(exc) if isinstance(exc, _BranchFailed) else failure
                if not ladder.SHAPE.search(failure):
                    break
    return job, (out, failure), notes


def merge_saved(path: str, job: dict) -> OpSet:
    """The fake trace saved at ``path`` with its real-valued branch run (``job``) merged in
    (``repaired_branch_runs``): a zoo worker's half of ``with_real_branches(..., defer=True)``."""
    result = OpSet(opset.load(path))
    job, answer, notes = repaired_branch_runs(job)
    merge_real_branches(result, job, answer=answer, repairs=notes)
    return result


def real_trace(arch, mode: str, path: str):
    """The op set, traced with real values on the computing stand-in this worker's device is, at
    narrow widths (a real model of a full-width config would hold its real weights); a config whose
    narrow widths do not fit together (a width some other size is derived from) at its full widths,
    with as few layers (the job memory limit guards the size), and a note saying so (``ladder.narrow``)."""

    def run(sizes):
        return trace_real(model, sizes=sizes, mode=mode, dtype=None, optimizer="adamw", out=path)

    model = arch.name if arch.curated else arch.spec
    return ladder.narrow(arch, run)


def main() -> None:
    job = json.loads(sys.stdin.read())
    try:
        out = _child(job)
    except Exception as exc:  # noqa: BLE001 - the parent notes it and keeps the fake trace
        text = str(exc).strip().splitlines()
        out = {"error": f"{type(exc).__name__}: {text[0][:200] if text else ''}"}
    print(json.dumps(out))
    # no interpreter teardown: after a backward through the stand-in's CPU fallback it may abort
    # ("terminate called without an active exception", torch 2.13), which would lose the answer
    sys.stdout.flush()
    os._exit(0)


if __name__ == "__main__":
    main()
