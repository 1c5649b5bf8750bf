"""Observed runs in a verdict: this model's step really run on the device decides it.

An observed run (``opcov run``) is the strongest evidence a verdict can have, for that model, mode and
backend. Where one exists, ``check`` takes its verdict from the run: raised -> ``fails``; ran with values
off CPU's -> ``runs_with_value_note``; ran, but the backend's own counters name ops that went through its
CPU fallback -> ``runs_with_fallback``; else ``runs``; its evidence word is ``observed``. The verdict
from coverage data (op by op) is kept beside it as a prediction (``predicted``), and a note says whether
the two agree, so a disagreement shows. Torch-free.
"""

from __future__ import annotations

from opcov import vocab
from opcov.errors import DataError
from opcov.store.observed import COMPILE, MODES, find, path_for, path_of


def verdict_of(doc: dict) -> str:
    """The verdict word an observed run gives (see the module docstring)."""
    res = doc["result"]
    if not res["ran"]:
        return "fails"
    if not (res.get("values") or {}).get("match", True):
        return "runs_with_value_note"
    if (doc.get("backend_record") or {}).get("fallback_ops"):
        return "runs_with_fallback"
    return "runs"


def _saw(doc: dict) -> str:
    """What the run saw, in a few words: 'raised: E' / 'ran, values match CPU, no op through the CPU fallback'."""
    res, rec = doc["result"], doc.get("backend_record") or {}
    if not res["ran"]:
        raised = [op for op, cells in (doc.get("ops") or {}).items() if any("raised" in c for c in cells.values())]
        return f"raised {res.get('error')}" + (f" (in {', '.join(raised)})" if raised else "")
    v = res.get("values") or {}
    said = (
        ("values match CPU" if v.get("match") else f"values differ from CPU ({_how_far(v)})")
        if v
        else "values not compared"
    )
    fb = rec.get("fallback_ops")
    if fb:
        said += f"; through the CPU fallback: {', '.join(fb)}"
    elif fb == []:
        said += "; no op through the CPU fallback"
    return "ran, " + said


def _how_far(values: dict) -> str:
    """How far a run's values are from CPU's: 'N x tolerance', or where a tensor's shape or (a serve run's
    tokens) its exact values differ, that and which."""
    err, at = values.get("max_error_x_tolerance"), values.get("worst_at")
    if isinstance(err, (int, float)):
        return f"{err} x tolerance" + (f" at {at}" if at else "")
    return f"{err}: {at}" if at else str(err)


def record(doc: dict, path: str) -> dict:
    """What a verdict keeps of an observed run (check's JSON ``observed``; what the site shows)."""
    prov, res, rec, b = doc["provenance"], doc["result"], doc.get("backend_record") or {}, doc["backend"]
    ops = doc.get("ops") or {}
    contributed = prov.get("contributed") or []
    return {
        "file": path,
        "saw": _saw(doc),
        "ran": res["ran"],
        "error": res.get("error"),
        "values": res.get("values"),
        "ops_run": len(ops),
        "calls": sum(c.get("calls", 0) for cells in ops.values() for c in cells.values()),
        "raised_ops": sorted(op for op, cells in ops.items() if any("raised" in c for c in cells.values())),
        "fallback_ops": rec.get("fallback_ops"),
        "host_reads": rec.get("host_reads") or [],
        "record_source": rec.get("source"),
        "record_tested": rec.get("tested", True),
        "date": str(prov.get("created", ""))[:10],
        "created": prov.get("created"),
        "device": prov.get("device"),
        "backend": f"{b.get('package')} {b.get('version')}",
        "torch": prov.get("torch"),
        "opcov": prov.get("opcov"),
        "command": prov.get("command"),
        "source": (contributed[-1].get("source") if contributed else None) or "committed to this repository",
    }


def summary(doc: dict) -> str:
    """One line: what the run saw, where, when and with what."""
    mode = doc["model"]["mode"]
    where = f"{doc['provenance'].get('device', '?')}, {doc['backend'].get('package')} {doc['backend'].get('version')}"
    when = str(doc["provenance"].get("created", ""))[:10]
    res = doc["result"]
    crec = doc.get(COMPILE)
    step = ("serve run (generate's prefill and decode steps)" if mode == "serve" else f"{mode} step") + (
        f" compiled with {crec['backend']}" if crec else ""
    )
    dispatched = (
        f"{len(crec['graph_breaks'])} graph break(s)" if crec else f"{len(doc.get('ops') or {})} ops dispatched"
    )
    head = (
        f"observed: this model's {step} raised on {where} ({when}): {res.get('error')}"
        if not res["ran"]
        else f"observed: this model's {step} ran on {where} ({when}), {dispatched}; " + _saw(doc).removeprefix("ran, ")
    )
    rec = doc.get("backend_record") or {}
    if not res["ran"] and rec.get("fallback_ops"):
        head += f"; through the CPU fallback: {', '.join(rec['fallback_ops'])}"
    if rec.get("host_reads"):
        head += f"; host reads (a sync, not a fallback): {', '.join(rec['host_reads'])}"
    if rec.get("source"):
        head += f"; fallbacks as counted by {rec['source'].split(' (')[0]}"
    if rec.get("tested") is False:
        head += " (the backend's record is read through an API untested on its hardware here)"
    return head


def annotate(v, doc: dict, coverage_dir: str) -> None:
    """Where this model was run on ``v``'s backend (same mode), let the run decide ``v``: its verdict and
    the evidence word 'observed', the run's record in ``v.observed`` (with the verdict from coverage
    data as ``predicted``), its summary first among the notes and its file among the sources."""
    name = (doc.get("model") or {}).get("name")
    found = _run_for(v, name, coverage_dir, "eager") if name else None
    if found is None:
        return
    run, path = found
    fell = sorted({r.op for r in v.ops if r.outcome == "fallback"})  # what the data says falls back
    predicted, said = _predicted(v, run, fell)
    v.notes.insert(0, said)
    v.observed = dict(record(run, path), predicted=predicted)
    v.verdict, v.evidence = verdict_of(run), vocab.OBSERVED
    v.sources.append(path)


def annotate_compiled(cv, name: str, coverage_dir: str) -> None:
    """Where ``name`` was run through torch.compile on ``cv``'s backend (same mode; ``opcov run --path
    compile``), let the run decide the compile verdict ``cv`` (opcov.verdict.compiled.CompiledVerdict) as
    ``annotate`` does the eager one: its verdict, evidence 'observed', and in ``cv.observed`` the run's
    record with its one-line ``summary``, the graph breaks it met, and the verdict from the data as
    ``predicted`` (whether it agrees, and whether it foretold the breaks)."""
    found = _run_for(cv, name, coverage_dir, COMPILE)
    if found is None:
        return
    run, path = found
    fell = sorted({r.op for v in (cv.graphs, cv.eager) if v is not None for r in v.ops if r.outcome == "fallback"})
    predicted, said = _predicted(cv, run, fell)
    predicted["graph_breaks"] = len(cv.breaks)
    saw_breaks = run[COMPILE]["graph_breaks"]
    if run["result"]["ran"]:
        said += (
            "; graph breaks foretold"
            if bool(saw_breaks) == bool(cv.breaks)
            else f"; graph breaks NOT foretold (op set {len(cv.breaks)}, run {len(saw_breaks)})"
        )
    cv.observed = dict(record(run, path), predicted=predicted, graph_breaks=saw_breaks, summary=said)
    cv.observed_verdict = verdict_of(run)


def _run_for(v, name: str, coverage_dir: str, path: str) -> tuple[dict, str] | None:
    """(the observed run of ``name`` on ``v``'s backend and mode along ``path``, its file), or None; a file
    that cannot be read, or a run of the other path filed there, is a note on ``v`` and not used."""
    if v.mode not in MODES:  # no run is observed in this mode: the data alone decides
        return None
    where = path_for(coverage_dir, v.backend, name, v.mode, path)
    try:
        run = find(coverage_dir, v.backend, name, v.mode, path)
    except DataError as exc:
        v.notes.insert(0, f"observed run unreadable, not used: {exc}")
        return None
    if run is None:
        return None
    if path_of(run) != path:
        v.notes.insert(0, f"{where}: a run of the {path_of(run)} path, not used for the {path} path")
        return None
    return run, where


def _predicted(v, run: dict, fell: list) -> tuple[dict, str]:
    """The verdict from coverage data (``v``'s, before the run decides it) as the run's prediction, and the
    line that says what the run saw and whether the prediction agrees (``agrees``)."""
    agree = agrees(v.verdict, run, fell)
    word = (
        "claims nothing; the run settles it"
        if agree is None
        else "agrees with it"
        if agree
        else "does NOT agree with it"
    )
    predicted = {"verdict": v.verdict, "evidence": v.evidence, "says": v.says(), "agrees": agree, "fallback_ops": fell}
    return predicted, f"{summary(run)}; the verdict from coverage data ({predicted['says']}) {word}"


def agrees(verdict: str, doc: dict, fallback_ops=()) -> bool | None:
    """Whether a verdict from coverage data agrees with what the run saw: ``fails`` with a run that raised
    (or gave values off CPU's: a failure foretold that it would not run right); every 'runs' word with a
    run that ran, with ``runs`` also needing no op through the CPU fallback, and ``runs_with_value_note``
    (values *may* differ) none but those its ops said fall back (``fallback_ops``: a value note outranks
    a fallback in the verdict's word, and the ops under it still name theirs); None for ``unknown`` (it
    claims nothing) and for any word that is not a verdict: words are compared whole."""
    res = doc["result"]
    ok = res["ran"] and (res.get("values") or {}).get("match", True)
    ran_through = set((doc.get("backend_record") or {}).get("fallback_ops") or ())
    fb = bool(ran_through)
    if verdict == "runs_with_fallback":
        return bool(ok)
    if verdict == "runs_with_value_note":
        return bool(res["ran"]) and ran_through <= set(fallback_ops)
    if verdict == "runs":
        return bool(ok) and not fb
    if verdict == "fails":
        return not ok
    return None
