"""The probe run: the worker pool, the journal, resume, shards and the probed coverage file.

Every finished case is appended to a journal (``probe.journal``), so an interrupted-and-resumed
run writes the same file as an uninterrupted one: the file is built from the journal alone,
sorted by case id. Workers, deadlines and crash handling are ``probe.pool``'s; the groups known
to crash or hang on this backend version (``probe.ledger``, kept beside the journal) run first.
"""

from __future__ import annotations

import collections
import os
import time

from opcov import backends as _backends
from opcov.catalog import build_catalog
from opcov.errors import OpcovError, UsageError
from opcov.probe import cases, composites, disposition, lazy, plan, replay, results, schemacases
from opcov.probe.compare import CPU_MARGIN, SCALED_FAMILIES, TOLERANCES, USABLE
from opcov.probe.journal import Journal, journal_path
from opcov.probe.ledger import Ledger, ledger_path, version_key
from opcov.probe.manifest import claim_counts
from opcov.probe.pool import Pool, ProbeError
from opcov.probe.progress import Progress
from opcov.provenance import host
from opcov.store import data, output
from opcov.store.combine import now_iso
from opcov.version import __version__

__all__ = ["probe", "journal_path", "ProbeError", "now_iso", "provenance"]


def probe(
    backend,
    *,
    out: str,
    pattern=None,
    core=False,
    dtypes,
    directions,
    jobs=1,
    timeout=60.0,
    shard=None,
    resume=False,
    command="",
    stream=None,
    traces=(),
    exhaustive=False,
    tiers=(),
    schema=True,
    calls_only=False,
    composites_only=False,
    manifest=None,
    all_samples=False,
    sweep_of="",
    times=None,
    max_time=None,
) -> tuple[dict, dict]:
    """Run the probe; return (document, run figures). The document is also written to ``out``.

    ``out`` and its journal are checked before any worker starts; a journal this run made is removed
    again when the run stops before any case finished (nothing to resume), and kept otherwise.
    ``exhaustive``: run every case of a group after one crashed or timed out (by default the rest
    are recorded as not run after it). ``tiers``: the input tiers (probe.tiers) each OpInfo group
    gets one harder case of (``all_samples``: one per sample the tier changes). ``schema``: also cases made from the schemas of functional overloads
    (probe.schemacases); ``calls_only``: the replayed calls' groups alone; ``composites_only``: the groups of
    the composite ops the backend overrides alone (probe.composites); ``sweep_of`` (a probed file): the
    selected OpInfos' argument sweep instead of their samples (probe.argsweep). ``manifest``: a backend manifest (probe.manifest.Manifest): cells counted as
    claimed or not, ops it rules out given the disposition ``excluded``. ``shard`` (I, N): part I of
    the plan balanced by the recorded group times of ``times`` (default: the times sidecar of the
    backend's default probed file; probe.plan); each group's time is written to ``<out>.times.json``."""
    output.check_output(
        out, kind=output.COVERAGE, evidence="probed", inputs=[getattr(manifest, "path", None), sweep_of or None]
    )
    tiers = () if sweep_of else tiers  # a variant is a class of arguments, not a harder input
    output.check_writable_file(journal_path(out))
    # The first worker starts now: its imports, smoke test and OpInfo load (about 3 s) overlap
    # this process's own (the backend, the catalogue, the case selection) instead of following them.
    # Each worker picks device (its index mod the device count) itself: the parent never starts it.
    config = {
        "backend": backend.name,
        "device_type": backend.device_type,
        "module": backend.module,
        "threads": 1,
    }  # OpInfo samples are small: intra-op threads cost more than they give
    t0 = time.monotonic()
    pool = Pool(config, jobs, timeout, exhaustive)
    pool.start(pool.slots[0])
    journal = progress = ledger = None
    try:
        torch, catalog, facts, groups = select(
            backend,
            pattern=pattern,
            core=core,
            dtypes=dtypes,
            directions=directions,
            traces=traces,
            tiers=tiers,
            schema=schema,
            all_samples=all_samples,
            sweep_of=sweep_of,
        )
        if calls_only:  # the replayed calls alone (--calls-only): no OpInfo, canary or schema group
            groups = [g for g in groups if g.source.startswith(replay.TRACE_PREFIX)]
        if composites_only:  # as calls_only, the overridden composites' own calls
            groups = [g for g in groups if g.source.startswith(composites.PREFIX)]
            if not groups:
                raise UsageError(
                    f"--composites-only: {backend.name} overrides no composite op that the selection's OpInfos are about"
                )
        times_file = times if times is not None else plan.default_times(backend)
        groups = plan.pick(groups, plan.load_times(times_file, required=times is not None), shard)
        settings = {
            "backend": backend.name,
            "module": backend.module,
            "torch": str(torch.__version__),
            "dtypes": list(dtypes),
            "directions": list(directions),
            "ops": pattern,
            "core": bool(core),
            "shard": f"{shard[0]}/{shard[1]}" if shard else None,
            "timeout": timeout,
            "traces": [t if isinstance(t, str) else t.name for t in traces],
            "exhaustive": bool(exhaustive),
            "tiers": list(tiers),
            "schema": bool(schema),
        }
        if all_samples:  # only when set: a journal from before the option resumes as it was
            settings["all_samples"] = True
        if calls_only:  # as all_samples
            settings["calls_only"] = True
        if composites_only:  # as all_samples
            settings["composites_only"] = True
        if sweep_of:  # as all_samples
            settings["sweep_of"] = sweep_of
        traces_on = {g.source[len(replay.TRACE_PREFIX) :]: [m for m, _ in g.on] for g in groups if g.on}
        if traces_on:  # only when some: as all_samples
            settings["traces_on"] = dict(sorted(traces_on.items()))
        if shard:  # the balanced plan's part: a resume under another plan would mix two
            settings["plan"] = plan.fingerprint(g.id for g in groups)
        journal = Journal(journal_path(out), {"settings": settings, "created": now_iso(), "command": command}, resume)
        done_ids: dict[str, set] = {}
        for cid, rec in journal.records.items():
            done_ids.setdefault(rec.group, set()).add(cid)
        finished = set(journal.groups_done) | set(journal.group_errors)
        todo = [g for g in groups if g.id not in finished]
        ledger = Ledger(ledger_path(out), version_key(_backend_doc(backend), str(torch.__version__)))
        first = set(ledger.first(g.id for g in todo))
        pending = collections.deque(g.as_dict() for g in sorted(todo, key=lambda g: g.id not in first))
        progress = Progress(len(groups), len(groups) - len(pending), stream)
        if resume and journal.records:
            progress.note(
                f"resuming: {len(journal.records)} cases and {len(finished)} groups already in {journal.path}"
            )
        if first:
            progress.note(
                f"{len(first)} group(s) known to crash or hang on this backend version run first ({ledger.path})"
            )
        if pending:
            pool.run(pending, done_ids, journal, progress, stop_at=t0 + max_time if max_time else None)
    except BaseException:  # a failed start, a usage error, Ctrl-C
        if journal is not None and not journal.records and not journal.groups_done and not journal.group_errors:
            journal.close()
            os.remove(journal.path)  # nothing ran: leave no journal that would demand --resume
        raise
    finally:
        pool.stop()
        if journal is not None:
            journal.close()
            if ledger is not None:
                ledger.update(journal.records.values(), set(journal.groups_done) | set(journal.group_errors))
                ledger.save()
            if journal.group_seconds:
                plan.save_times(
                    plan.times_path(out),
                    journal.group_seconds,
                    backend_key=version_key(_backend_doc(backend), str(torch.__version__)),
                    command=journal.header.get("command", ""),
                )
        if progress is not None:
            progress.finish()
    run_s = time.monotonic() - t0
    records = list(journal.records.values())
    if pool.not_run:  # --max-time: what this file lacks, said in it
        settings["not_run"] = sorted(pool.not_run)
    universe = [op.name for op in catalog]
    reasons = disposition.Dispositions(
        facts,
        disposition.functional_forms(torch, catalog),
        cases.named_bases(),
        {g.source for g in groups},
        {n for g in groups for n in g.ops},
        manifest.excluded if manifest is not None else None,
    )
    ops = results.build_ops(records, universe, reasons.record)
    table = results.opinfo_table(records, journal.group_errors)
    doc = {
        "schema_version": 1,
        "evidence": "probed",
        "backend": _backend_doc(backend),
        "provenance": provenance(
            torch,
            backend,
            catalog,
            journal.header,
            "; ".join(sorted(set(pool.devices) | set(journal.devices))),
            groups,
            settings,
        ),
        "summary": results.summarize(ops, table, {op.name for op in catalog.core}),
        "ops": ops,
    }
    if manifest is not None:
        doc["provenance"]["probe"]["manifest"] = manifest.provenance()
        doc["summary"]["claims"] = claim_counts({n: r for n, r in ops.items() if n.startswith("aten::")}, manifest)
    try:
        data.save(doc, out)
    except OpcovError as exc:  # the journal holds every case: --resume writes the file without rerunning
        raise OpcovError(
            f"{exc}; the results are kept in {journal.path}: run the same command with --resume to write them"
        ) from None
    os.remove(journal.path)
    figures = {
        "wall_s": time.monotonic() - t0,
        "run_s": run_s,
        "cases_run": progress.cases,
        "restarts": pool.restarts,
        "groups": len(groups),
        "start_s": (pool.ready_at - t0) if pool.ready_at else None,
    }
    return doc, figures


def select(backend, *, pattern, core, dtypes, directions, traces, tiers, schema, all_samples, sweep_of=""):
    """(torch, catalogue, op facts, every group of the selection, unsharded): what a probe, and
    'opcov plan' before it, derive the groups from. The composite ops the backend overrides get groups of
    their own calls (probe.composites) beside their OpInfos'."""
    torch = _backends.load(backend)
    catalog = build_catalog((backend.module,) if backend.module else (), _backends.added_ops(backend))
    core_bases = {op.base for op in catalog.core} if core else None
    facts = disposition.intrinsic(torch, catalog)
    schema_ops = schemacases.targets(torch, catalog, facts) if schema and not sweep_of else ()
    # a traced model recorded on this backend itself: its trace group replays the device's own calls too
    zoo_traces = [n for n in traces if isinstance(n, str)]  # a replayed op set (replay.Target) has no own-path op set
    ondevice = {n: on for n in zoo_traces if (on := replay.ondevice(n, backend.name, backend.device_type))}
    overridden = composites.overridden(torch, catalog, backend.dispatch_key) if backend.dispatch_key else []
    groups = cases.select_groups(
        pattern,
        composite_ops=overridden,
        core_bases=core_bases,
        dtypes=dtypes,
        directions=directions,
        traces=traces,
        tiers=tiers,
        schema_ops=schema_ops,
        all_samples=all_samples,
        ondevice=ondevice,
        canaries=not sweep_of,
        sweep_of=sweep_of,
    )
    return torch, catalog, facts, groups


def _backend_doc(backend) -> dict:
    """The probed file's ``backend`` mapping."""
    return {
        "name": backend.name,
        "device_type": backend.device_type,
        "dispatch_key": backend.dispatch_key,
        "package": backend.package or "torch",
        "version": backend.installed_version() or "unknown",
    }


NOTES_ALWAYS = [
    "eager mode only: the torch.compile path is not probed",
    "case source: PyTorch's OpInfo samples plus narrowing canaries (int64 beyond 2^31, float64 beyond "
    "float32 precision); with --traces also op calls captured from zoo model training steps on CPU and "
    "replayed one call at a time (forward only; CPU-only kernels left out). Ops no case reaches stay "
    "'skipped', each with its reason",
    "checked: values (float64 CPU reference, device no worse than CPU at the same dtype), NaN/inf "
    "positions, shape, dtype, in-place mutation of inputs, view aliasing (which outputs share storage "
    "with which inputs, as on CPU), and out= on each OpInfo's first sample (writes into the given tensor, "
    "returns it, same values; filed under the .out overload); strides are recorded, not judged",
    "precision tiers: pass is the strict tier (no worse than CPU at the dtype); pass_low_precision the "
    "usable tier of the op's family (tolerances under probe.tolerances)",
    "after a crash or timeout, the group's later cases are not run (counted as after_crash) unless --exhaustive",
]


def provenance(torch, backend, catalog, header, device, groups, settings) -> dict:

    notes = list(NOTES_ALWAYS)
    if settings.get("not_run"):
        notes.append(
            f"time limit (--max-time) reached: {len(settings['not_run'])} case group(s) not run: "
            + ", ".join(settings["not_run"])
        )
    if settings.get("sweep_of"):
        notes.append(
            "case source: argument sweep (probe.argsweep): each selected OpInfo's calls on CPU with one "
            "path-selecting argument changed at a time (a bool flipped, an optional argument left out or given, "
            "a number of another kind, another reduction or output size), one case per signature class that "
            f"{os.path.basename(settings['sweep_of'])} held no case of, groups 'sweep.<opinfo>'; values "
            "that OpInfo chose, not a model's: a pass says the kernel agrees with CPU on that class of arguments"
        )
    if settings["schema"] and not settings.get("sweep_of"):
        notes.append(
            f"schema cases: one case per functional aten overload at {', '.join(schemacases.SCHEMA_DTYPES)}, "
            "inputs made from its schema (small tensors, integers and shapes chosen by argument name; "
            "the first candidate CPU accepts), forward only, samples 'schema.<k>'; an overload no "
            "candidate runs on CPU is skipped as schema_no_case"
        )
    if settings["tiers"]:
        each = (
            "a harder case of every sample it changes (--all-samples)"
            if settings.get("all_samples")
            else "one harder case per OpInfo x dtype each"
        )
        notes.append(
            f"input tiers ({', '.join(settings['tiers'])}): {each}, "
            "forward only, its status in a cell key of its own; in the layout tiers an output's memory "
            "format is judged where CPU keeps a non-contiguous one"
        )
    if backend.probe_note:  # cpu's harness self-test, meta's shapes only: the record says
        notes.insert(0, backend.probe_note)
    notes += lazy.provenance_notes(backend)
    if settings.get("traces_on"):
        notes.append(
            f"replayed calls recorded on {backend.name} itself too: for "
            + ", ".join(f"{m} ({', '.join(modes)})" for m, modes in settings["traces_on"].items())
            + f", which have op sets recorded on {backend.name} (models/MODEL/on/), each such step was also run "
            "on the device and the calls of that op set's ops the CPU steps did not make were replayed "
            "(ops with no CPU kernel left out)"
        )
    n_canary = sum(g.source.startswith(cases.CANARY_PREFIX) for g in groups)
    n_trace = sum(g.source.startswith("trace.") for g in groups)
    return {
        "torch": str(torch.__version__),
        "opcov": __version__,
        "created": header["created"],
        "command": header["command"],
        "host": host(),
        "device": device or "unknown (no worker started)",
        "catalog_modules": list(catalog.modules),
        "mode": "eager",
        "settings": _backends.settings(backend, torch),
        "probe": {
            "dtypes": settings["dtypes"],
            "directions": settings["directions"],
            "ops": settings["ops"],
            "core": settings["core"],
            "shard": settings["shard"] or "all",
            **({"plan": settings["plan"]} if settings.get("plan") else {}),
            "timeout_s": settings["timeout"],
            "exhaustive": settings["exhaustive"],
            "tiers": settings["tiers"],
            "all_samples": bool(settings.get("all_samples")),
            "schema": settings["schema"],
            "case_source": {
                "opinfo_lists": cases.list_counts(),
                "opinfos": len({g.source for g in groups if not g.source.startswith((cases.CANARY_PREFIX, "trace."))}),
                "groups": len(groups),
                "canary_groups": n_canary,
                "trace_groups": n_trace,
                "traces": settings["traces"],
                **({"traces_on_device": settings["traces_on"]} if settings.get("traces_on") else {}),
                "schema_groups": sum(bool(g.ops) for g in groups),
                "schema_ops": len({n for g in groups for n in g.ops}),
            },
            "tolerances": {
                "per_dtype_rtol_atol": {k: list(v) for k, v in TOLERANCES.items()},
                "cpu_margin": CPU_MARGIN,
                "usable_rtol_atol": {f: {d: list(v) for d, v in t.items()} for f, t in USABLE.items()},
                "usable_scaled": list(SCALED_FAMILIES),
            },
        },
        "notes": notes,
    }
