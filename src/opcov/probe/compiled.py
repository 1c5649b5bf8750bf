"""The compile probe: PyTorch's OpInfo samples compiled for a backend and compared with eager CPU.

Why: a compiler's tables (opcov.scan.compiled) say which ops it lowers, not that the code it generates is
right. So each OpInfo sample of the chosen ops is run eagerly on CPU (recording the ATen overloads it
dispatches) and then through ``torch.compile(..., backend=B, fullgraph=True, dynamic=False)``, where
B is Inductor on this CPU (backend ``cpu``) or ``openxla`` on PyTorch/XLA's device (backend ``xla``,
run in a Python with torch_xla; PJRT_DEVICE=CPU is its CPU client), its inputs on that device:

* ``pass`` / ``pass_low_precision``: the compiled values match eager's (``probe.compare.judge``);
* ``mismatch``: they do not (shape, dtype or values);
* on xla, ``fallback`` also where a node of the compiled graph ran through PyTorch/XLA's CPU fallback
  (its counters, as the eager probe reads them: opcov.probe.lazy), with the ops' names;
* ``fallback``: Dynamo broke the graph (``fullgraph=True`` raises): the op runs eagerly there, with why;
* ``error``: compiling or running the compiled code raised; ``timeout``: a sample took over ``timeout`` s;
* ``not_comparable``: random or tie-breaking ops (their values differ legitimately), shape and dtype checked;
* ``flaky``: it raised in a worker that had compiled other graphs, and ran when compiled again alone
  in a fresh process (``_again_alone``).

It runs at the eager probe's depth (opcov.probe.compiled_run, in the workers): every dtype the eager
probe runs (``--dtypes``), each sample as given and laid out transposed inside the graph; where the
OpInfo differentiates at the dtype, its backward (opcov.probe.compiled_grad: the forward compiled with
inputs that require grad, differentiated through the compiled backward graph, the gradients compared with
eager CPU's; ``--directions``); and one harder case per input tier (``--tiers``, opcov.probe.tiers). A
result is compared against float64's where it differs from eager's, as the eager probe's are.

A forward case's status is filed under the recorded overloads of the OpInfo's own op (its aten names),
per dtype key (``_blamed``), an input tier's under the tier's key of the same cells; a backward case's,
as the eager probe files one, under the ``bwd`` of those overloads and, where it ran, under the ``fwd`` of
the overloads eager CPU's backward dispatched (``_filed``): a compiled training op set's backward graph
names such ops, and ``opcov check --path compile`` judges each as an op. Cases run in worker processes
(``jobs``), several OpInfo x dtype groups at a time compiled as one graph (``TOGETHER``; the C++ build of
Inductor's kernels was nine tenths of a sample's time, one build per sample), their backward cases as
another, each result compared with its own eager value and a failing graph split down to the sample
that fails; each finished group is appended to a journal beside the output, so an interrupted probe
continues with ``resume``. The file is a probed snapshot (docs/DATA.md) under
coverage/<backend>/compile/, read by ``opcov check --path compile``.
"""

from __future__ import annotations

import datetime as _dt
import json
import os
import platform
import re
import time

from opcov import backends, provenance, vocab
from opcov.catalog import build_catalog
from opcov.errors import UsageError
from opcov.probe import DEFAULT_DTYPES, KNOWN_DTYPES, compiled_run, lazy
from opcov.probe.results import NOTED, failed_text
from opcov.sources import opinfo
from opcov.store.cells import MAX_FAILED, SLOTS
from opcov.version import __version__

# the worker's side (opcov.probe.compiled_run): what it compiles for each backend, and how deep
BACKEND, TARGETS, Depth, FORWARD_ONLY, Samples = (
    compiled_run.BACKEND,
    compiled_run.TARGETS,
    compiled_run.Depth,
    compiled_run.FORWARD_ONLY,
    compiled_run.Samples,
)
TOGETHER = 16  # OpInfo x dtype groups compiled as one graph: one C++ build where each sample cost one


def journal_path(out: str) -> str:
    return out + ".journal"


def _groups(core: bool, pattern: str | None, dtypes) -> list[tuple[str, str]]:
    """(OpInfo id, dtype) to run, sorted."""
    rx = re.compile(pattern) if pattern else None
    core_bases = {op.base for op in build_catalog().core} if core else None
    out = []
    for oid, op in sorted(opinfo.opinfo_index()["ops"].items()):  # not the database: the workers load that
        names = op["aten_names"]
        if core_bases is not None and not any(n.split("::", 1)[1] in core_bases for n in names):
            continue
        if rx and not (rx.search(oid) or any(rx.search(n) for n in names)):
            continue
        supported = set(op["cpu"])
        out += [(oid, d) for d in dtypes if d in supported]
    return out


def probe(
    *,
    out: str,
    core: bool = True,
    pattern: str | None = None,
    dtypes=("float32",),
    samples: int | Samples = 2,
    jobs: int = 1,
    timeout: float = 120.0,
    resume: bool = False,
    command: str = "",
    limit: float | None = None,
    together: int = TOGETHER,
    backend: str = BACKEND,
    depth: Depth = FORWARD_ONLY,
) -> tuple[dict, dict]:
    """Run the compile probe and return (the probed document, figures); the journal keeps finished groups.
    ``limit``: stop starting groups after this many seconds (what was run is written, and --resume goes on).
    ``together``: OpInfo x dtype groups a worker compiles as one graph (``compiled_run._compiled_together``).
    ``depth``: each group's backward and input tiers besides its samples' forward (``compiled_run.Depth``).
    ``samples``: per OpInfo and dtype, a count or a ``Samples`` (a count per dtype)."""
    import multiprocessing

    from opcov.store import data, layout

    groups = _groups(core, pattern, dtypes)
    if not groups:
        raise UsageError("no OpInfo matches: check --ops and --dtypes")
    journal = journal_path(out)
    done: dict = {}
    if resume and os.path.exists(journal):
        with open(journal) as f:
            for line in f:
                rec = json.loads(line)
                done[rec["group"], rec["dtype"]] = rec
    todo = [(g, d) for g, d in groups if (g, d) not in done]
    step = max(1, together)
    batches = [(todo[i : i + step], samples, timeout, backend, depth) for i in range(0, len(todo), step)]
    start = time.monotonic()
    os.makedirs(os.path.dirname(os.path.abspath(out)), exist_ok=True)
    stopped = 0
    worker_cpu = 0.0
    if todo:
        ctx = multiprocessing.get_context("spawn")
        with (
            ctx.Pool(jobs, initializer=compiled_run._worker_init, initargs=(backend,), maxtasksperchild=20) as pool,
            open(journal, "a") as jf,
        ):
            n = 0
            for spent, recs in pool.imap_unordered(compiled_run._timed_batch, batches):
                worker_cpu += spent
                for rec in recs:
                    n += 1
                    done[rec["group"], rec["dtype"]] = rec
                    jf.write(json.dumps(rec) + "\n")
                    worst = max((c["status"] for c in rec["cases"]), key=_badness, default="-")
                    print(f"[{n}/{len(todo)}] {rec['group']} {rec['dtype']}: {worst}", flush=True)
                jf.flush()
                if limit and time.monotonic() - start > limit:
                    stopped = len(todo) - n
                    pool.terminate()
                    break
    not_again = 0
    if not stopped:
        deadline = start + limit if limit else None
        not_again = _again_alone(done, (samples, timeout, backend, depth), jobs, journal, deadline)
    wall = time.monotonic() - start
    import torch

    eager = layout.pick(layout.snapshots(layout.DEFAULT_COVERAGE, backend)["registered"], str(torch.__version__))
    backend_rec = data.load(eager)["backend"] if eager else {"name": backend, "device_type": TARGETS[backend][1]}
    doc = _document(done, backend_rec, command, samples, stopped, str(torch.__version__), together, backend, depth)
    if not_again:  # their errors may be the worker's own: said, and --resume compiles them again alone
        doc["provenance"]["notes"].append(
            f"{not_again} OpInfo x dtype group(s) with an error or timeout not yet compiled again alone (time "
            "limit): an error there may be the worker's, not the op's; continue with --resume"
        )
    by_slot = case_counts(done)
    figures = {"wall_s": wall, "groups": len(done), "cases_run": sum(by_slot.values()), "not_started": stopped}
    figures["not_again"] = not_again
    figures["cases"] = by_slot
    figures.update(groups_run=len(done) - (len(groups) - len(todo)), worker_cpu_s=worker_cpu)
    return doc, figures


AGAIN = ("error", "timeout")  # statuses whose group is compiled again alone, in a fresh worker


def _again_alone(done: dict, task: tuple, jobs: int, journal: str, deadline: float | None = None) -> int:
    """Compile each group that had an error or timeout again, alone in a fresh worker process: a worker
    that has compiled many graphs can fail on the next for reasons of its own (PyTorch/XLA's computation
    cache: "Failed to get computation by hash", "Execution supplied 5 buffers but compiled program
    expected 4"). A case that then runs is ``flaky`` (the first error is kept in its why); one that fails
    again keeps the second run's status. Each group is compiled alone once (``alone`` in its record).
    ``task``: (samples, timeout, backend, depth), as the first run's. ``deadline`` (time.monotonic()): start
    none after it, as --time-limit starts no group; returns how many were left to compile again."""
    import multiprocessing

    again = [
        key
        for key, rec in sorted(done.items())
        if not rec.get("alone") and any(c["status"] in AGAIN for c in rec["cases"])
    ]
    if not again:
        return 0
    if deadline is not None and time.monotonic() > deadline:
        return len(again)
    print(f"compiling {len(again)} group(s) with an error or timeout again, each alone in a fresh process", flush=True)
    ctx = multiprocessing.get_context("spawn")
    tasks = [([key], *task) for key in again]
    with (
        ctx.Pool(jobs, initializer=compiled_run._worker_init, initargs=(task[2],), maxtasksperchild=1) as pool,
        open(journal, "a") as jf,
    ):
        n = 0
        for _spent, recs in pool.imap_unordered(compiled_run._timed_batch, tasks):
            for alone in recs:
                n += 1
                rec = done[alone["group"], alone["dtype"]]
                merge_alone(rec, alone)
                jf.write(json.dumps(rec) + "\n")
            jf.flush()
            if deadline is not None and time.monotonic() > deadline:
                pool.terminate()
                return len(again) - n
    return 0


def merge_alone(rec: dict, alone: dict) -> None:
    """Fold a group's run alone into its first record: each case that raised or timed out the first time
    is ``flaky`` where it ran alone (the first error kept in its why), else takes the second run's status."""
    by_i = {(c.get("slot"), c["i"]): c for c in alone["cases"]}
    for case in rec["cases"]:
        second = by_i.get((case.get("slot"), case["i"]))
        if case["status"] not in AGAIN or second is None:
            continue
        if second["status"] in vocab.PROBED_RAN:
            first = case.get("why", "")
            case.update(status="flaky", why=f"passed compiled alone; with other samples: {first}"[:200])
        else:
            case["status"] = second["status"]
            case.pop("why", None)
            if second.get("why"):
                case["why"] = second["why"]
    rec["alone"] = True


def _blamed(case: dict, cases: list) -> list[tuple[str, str, str]]:
    """The (op, dtype key, signature class) a case is filed under: its OpInfo's own ops; but a case that
    failed while running ops that no case of its group that ran did (embedding's samples with max_norm
    also run embedding_renorm_, in place on the weight, which openxla compiles wrongly now and then) is
    filed under those ops alone (the in-place ones among them where there are: max_norm's samples also
    run detach, which every case of other groups runs): the plain calls of the OpInfo's op ran, so the
    failure is not theirs. An in-place op is filed under its functional overload too: a compiled graph
    is functional (AOTAutograd turns ``as_strided_`` into ``as_strided``), so a compiled op set names only
    that one, and the finding would reach no model under the in-place name alone."""
    own = _own(case)
    if case.get("status") in vocab.PROBED_RAN:
        return own
    ran = {
        (n, k)
        for c in cases
        if c.get("status") in vocab.PROBED_RAN
        for n, k, *_ in list(c["ops"]) + list(c.get("other") or [])
    }
    if not ran:
        return own
    beyond = [(n, k, sig) for n, k, sig in own + [tuple(o) for o in case.get("other") or []] if (n, k) not in ran]
    in_place = [c for c in beyond if _in_place(c[0])]  # ATen's in-place ops: embedding_renorm_
    return in_place + [(_functional(n), k, sig) for n, k, sig in in_place] or beyond or own


def _own(case: dict) -> list[tuple[str, str, str]]:
    """(op, dtype key, signature class) of the OpInfo's own overloads a case dispatched."""
    sigs = case.get("sigs") or [""] * len(case["ops"])  # a journal of an older probe: no classes
    return [(n, k, sig) for (n, k), sig in zip(case["ops"], sigs)]


def _in_place(name: str) -> bool:
    base = compiled_run.base_name(name)
    return base.endswith("_") and not base.startswith("__")


def _functional(name: str) -> str:
    """An in-place overload's functional one: 'aten::as_strided_' -> 'aten::as_strided',
    'aten::add_.Tensor' -> 'aten::add.Tensor'."""
    ns, _, rest = name.partition("::")
    base, dot, overload = rest.partition(".")
    return f"{ns}::{base[:-1]}{dot}{overload}"


def _device_text(device_type: str) -> str:
    """What the provenance says the probe ran on: the machine, and the settings the backend's record reads."""
    if device_type == "cpu":
        return f"cpu: {platform.machine()}"
    rec = backends.for_device(device_type)
    said = ""
    if rec is not None and rec.read_settings is not None:
        from opcov.torchenv import import_torch

        said = ", ".join(f"{k}={v}" for k, v in rec.read_settings(import_torch()).items())
    return f"{device_type}: on {platform.machine()}" + (f" ({said})" if said else "")


def _badness(status: str) -> int:
    return -vocab.PROBED_RANK.get(status, len(vocab.PROBED_RANK))


_STATUS_KEYS = tuple(key for key, _ in SLOTS.values())  # fwd, bwd, then each input tier
_PREFIX = dict(SLOTS.values())  # a slot's status key -> the prefix of its evidence keys


def _filed(case: dict, plain: list) -> list[tuple[str, str, str, str]]:
    """(op, dtype key, signature class, slot) that a case's result is filed under. A forward case:
    ``_blamed`` (``plain``: its group's forward cases); an input tier's: the OpInfo's own overloads (where
    it dispatched none, as a forward case). A backward case, as the eager probe
    files one (opcov.probe.results): the ``bwd`` of the OpInfo's own forward overloads; where it ran, the
    ``fwd`` of every overload eager CPU's backward dispatched (``bops``), where the compiler raised lowering
    one of them (``raised``), of that one, and where it fell back, of those the counters name; any other
    failure is the forward op's backward, not theirs."""
    slot = case.get("slot", "fwd")
    if slot == "fwd":
        return [(n, k, sig, slot) for n, k, sig in _blamed(case, plain)]
    if slot != "bwd":  # an input tier's harder sample may be one no plain case ran (batch norm with running
        # stats, which it updates in place): its failure is the OpInfo's op's, as the eager probe blames one
        return [(n, k, sig, slot) for n, k, sig in _own(case) or _blamed(case, plain)]
    out = [(n, k, sig, "bwd") for n, k, sig in _own(case)]
    bops = [tuple(b) for b in case.get("bops") or ()]
    if case.get("status") in vocab.PROBED_RAN:
        out += [(n, k, sig, "fwd") for n, k, sig in bops]
    elif case.get("raised"):  # the compiler raised on this op of the backward graph: its own failure too
        out += [(n, k, sig, "fwd") for n, k, sig in bops if n == case["raised"]]
    elif case.get("status") == "fallback":
        fell = {f.split(".", 1)[0] for f in case.get("fell") or ()}
        out += [(n, k, sig, "fwd") for n, k, sig in bops if n.split(".", 1)[0] in fell]
    return out


def _add(entry: dict, case: dict, case_id: str, sig: str) -> None:
    """Count one case into a slot's entry: the worst status first (its case, why, error and tolerance), the
    failing cases with their class (``failed``), the classes of those that ran (``ran``)."""
    status = case["status"]
    entry["cases"] += 1
    if status in vocab.PROBED_FAILURES or status == "fallback":
        entry["fails"] += 1
    if status in NOTED and len(entry.setdefault("failed", [])) < MAX_FAILED:
        entry["failed"].append(failed_text(status, case_id, sig))
    ran = entry.setdefault("ran", [])
    if status in vocab.PROBED_RAN and sig and sig not in ran and len(ran) < MAX_FAILED:
        ran.append(sig)
    if "status" not in entry or _badness(status) > _badness(entry["status"]):
        entry.update(status=status, case=case_id)
        for k in ("why", "err", "tol"):
            if case.get(k) is not None:
                entry[k] = case[k]
            else:
                entry.pop(k, None)


def _flat(cell: dict) -> dict:
    """A cell as the probed file holds it (opcov.store.cells): each slot's status under its key and its
    evidence under the slot's prefix; a passing input tier keeps its counts alone, as the eager probe's."""
    out: dict = {}
    for key in _STATUS_KEYS:
        entry = cell.get(key)
        if entry is None:
            continue
        out[key] = entry["status"]
        brief = key not in ("fwd", "bwd") and entry["status"] == "pass"
        for k in ("case", "why", "err", "tol", "cases", "fails", "failed", "ran"):
            value = entry.get(k)
            if value and not (brief and k != "cases"):
                out[_PREFIX[key] + k] = value
    out["samples"] = sorted(cell["samples"])[:5]
    return out


def case_counts(done: dict) -> dict:
    """Cases run, by kind: forward (the samples as given and laid out transposed), backward, input tiers."""
    out = {"forward": 0, "backward": 0, "tiers": 0}
    for rec in done.values():
        for case in rec["cases"]:
            slot = case.get("slot", "fwd")
            out["forward" if slot == "fwd" else "backward" if slot == "bwd" else "tiers"] += 1
    return out


def _notes(done: dict, samples, stopped: int, together: int, backend: str, depth: Depth) -> list[str]:
    """What the probed file's provenance says the probe did."""
    compile_backend, device_type = TARGETS[backend]
    where = "on CPU" if device_type == "cpu" else f"on {device_type} (inputs there, outputs read back)"
    ran = {d for _, d in done}
    order = DEFAULT_DTYPES + tuple(d for d in KNOWN_DTYPES if d not in DEFAULT_DTYPES)
    dtypes = [d for d in order if d in ran] + sorted(ran - set(order))
    notes = [
        f"compile path: OpInfo samples compiled with {compile_backend} (fullgraph=True, dynamic=False) {where} "
        "and compared with eager CPU, against a float64 reference where they differ (as the eager probe judges); "
        "a graph break is recorded as 'fallback' (the op runs eagerly there)",
        f"up to {_samples_text(samples, dtypes)} sample(s) per OpInfo and dtype ({', '.join(dtypes) or 'none'}); "
        "a case is filed under the OpInfo's own recorded overloads",
    ]
    if depth.backward:
        notes.append(
            "backward: where the OpInfo differentiates at the dtype, each sample's forward compiled with inputs "
            "that require grad and differentiated through the compiled backward graph (torch.autograd.grad, "
            "seeded output gradients), the gradients compared with eager CPU's; filed under the bwd of the "
            "OpInfo's own overloads, and where it ran under the fwd of the overloads eager CPU's backward dispatched"
        )
    else:
        notes.append("forward only")
    tiers = compiled_run.tiers_on(depth.tiers, backend)
    if tiers:
        notes.append(
            f"input tiers: one harder case per OpInfo x dtype for each of {', '.join(tiers)}, forward only, "
            "filed under the tier's key"
            + (
                ""
                if tiers == tuple(depth.tiers)
                else "; the layout tiers are not run here: an XLA tensor has no strides"
            )
        )
    if together > 1:
        notes.append(
            f"the samples of up to {together} OpInfo x dtype groups are compiled as one graph (their backward "
            "cases as another), each output compared with its own eager value; a graph that fails is split in "
            "halves down to a sample compiled alone, so an error, graph break or timeout is its own sample's"
        )
    rec = lazy.record_for(device_type)
    if rec is not None and rec.lazy is not None:
        notes.append(
            f"a case whose compiled graph ran a node through {rec.lazy.what}'s CPU fallback (its counters) is "
            "'fallback', with the ops' names"
        )
    if stopped:
        notes.append(f"{stopped} OpInfo x dtype group(s) not run (time limit): continue with --resume")
    return notes


def _samples_text(samples, dtypes: list) -> str:
    """'2', or '2 (10 at float32)' where a dtype the probe ran had its own count."""
    if not isinstance(samples, Samples):
        return str(samples)
    own = [f"{n} at {d}" for d, n in samples.by_dtype if d in dtypes]
    return f"{samples.default}" + (f" ({', '.join(own)})" if own else "")


def parse_samples(text: str | None, known) -> Samples:
    """--samples: 'N' (every dtype) or 'N,DTYPE=M,...' (M samples at DTYPE, N at the others)."""
    default, by = None, {}
    for part in (p.strip() for p in (text or "2").split(",")):
        dtype, eq, count = part.rpartition("=")
        if eq and dtype.strip() not in known:
            raise UsageError(f"unknown dtype {dtype.strip()!r} in --samples; choose from {', '.join(known)}")
        if not count.strip().isdigit() or int(count) < 1:
            raise UsageError(f"--samples {text!r}: give N or N,DTYPE=M (whole numbers from 1)")
        if eq:
            by[dtype.strip()] = int(count)
        elif default is None:
            default = int(count)
        else:
            raise UsageError(f"--samples {text!r}: one count for every dtype, then DTYPE=M for the others")
    return Samples(2 if default is None else default, tuple(by.items()))


def _document(
    done: dict,
    backend_rec: dict,
    command: str,
    samples,
    stopped: int,
    torch_version: str,
    together: int = 1,
    backend: str = BACKEND,
    depth: Depth = FORWARD_ONLY,
) -> dict:
    cells: dict = {}
    for (group, dtype), rec in sorted(done.items()):
        plain = [c for c in rec["cases"] if "slot" not in c]
        for case in rec["cases"]:
            for name, key, sig, slot in _filed(case, plain):
                cell = cells.setdefault(name, {}).setdefault(key, {"samples": set()})
                cell["samples"].add(group)
                _add(cell.setdefault(slot, {"cases": 0, "fails": 0}), case, f"{group}|{dtype}|{case['i']}", sig)
    ops: dict = {}
    counts: dict = {}
    for name, by_key in sorted(cells.items()):
        for key, cell in sorted(by_key.items()):
            if "fwd" not in cell:
                continue  # a cell only a tier or a backward reached: kept beside the plain cases only, as eager's
            flat = _flat(cell)
            ops.setdefault(name, {})[key] = flat
            for slot in _STATUS_KEYS:
                if slot in flat:
                    by = counts.setdefault(slot, {})
                    by[flat[slot]] = by.get(flat[slot], 0) + 1
    summary = {"groups": len(done), "cells": dict(sorted(counts.pop("fwd", {}).items()))}
    if "bwd" in counts:
        summary["cells_bwd"] = dict(sorted(counts.pop("bwd").items()))
    if counts:
        summary["cells_tiers"] = {t: dict(sorted(counts[t].items())) for t in _STATUS_KEYS if t in counts}
    summary["cases"] = case_counts(done)
    compile_backend, device_type = TARGETS[backend]
    notes = _notes(done, samples, stopped, together, backend, depth)
    return {
        "schema_version": 1,
        "evidence": "probed",
        "backend": backend_rec,
        "provenance": {
            "torch": torch_version,
            "opcov": __version__,
            "created": _dt.datetime.now(_dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%S+00:00"),
            "command": command or f"opcov probe {backend} --path compile",
            "host": provenance.host(),
            "device": _device_text(device_type),
            "mode": f"compile ({compile_backend})",
            "notes": notes,
        },
        "summary": summary,
        "ops": ops,
    }
