"""Observed runs in a verdict: the note ``check`` gives from this model's step really run on the device.

An observed run is the strongest evidence a verdict can have. Where one exists for the model, backend
and mode, ``check`` says what it saw first among the verdict's notes: ran or raised, the ops the
backend ran through its CPU fallback, and the values against CPU, beside (not instead of) the
op-by-op verdict from coverage data, and whether the two agree, so a disagreement shows. Torch-free.
"""

from __future__ import annotations

from opcov.errors import DataError
from opcov.store.observed import find, path_for


def summary(doc: dict) -> str:
    """One line: what the run saw."""
    res, rec = doc["result"], doc.get("backend_record") or {}
    n_ops = len(doc.get("ops") or {})
    when = str(doc["provenance"].get("created", ""))[:10]
    where = f"{doc['provenance'].get('device', '?')}, {doc['backend'].get('package')} {doc['backend'].get('version')}"
    if not res["ran"]:
        head = f"observed: this model's {doc['model']['mode']} step raised on {where} ({when}): {res.get('error')}"
    else:
        v = res.get("values") or {}
        values = (
            (
                "values match CPU"
                if v.get("match")
                else f"values differ from CPU ({v.get('max_error_x_tolerance')} x tolerance)"
            )
            if v
            else "values not compared"
        )
        head = f"observed: this model's {doc['model']['mode']} step ran on {where} ({when}), {n_ops} ops dispatched; {values}"
    fb = rec.get("fallback_ops")
    if fb:
        head += f"; through the CPU fallback ({rec.get('source', '').split(' (')[0]}): {', '.join(fb)}"
    elif fb == []:
        head += "; no op through the CPU fallback"
    if rec.get("host_reads"):
        head += f"; host reads (a sync, not a fallback): {', '.join(rec['host_reads'])}"
    if rec.get("tested") is False:
        head += " (the backend's record is read through an API untested here)"
    return head


def annotate(v, doc: dict, coverage_dir: str) -> None:
    """Put what an observed run of this model on ``v``'s backend saw first among the verdict's notes
    (and its file among the sources), saying whether the verdict from coverage data agrees."""
    name = (doc.get("model") or {}).get("name")
    if not name:
        return
    try:
        run = find(coverage_dir, v.backend, name, v.mode)
    except DataError as exc:
        v.notes.insert(0, f"observed run unreadable: {exc}")
        return
    if run is None:
        return
    agree = agrees(v.verdict, run)
    word = (
        "claims nothing; the run settles it"
        if agree is None
        else "agrees with it"
        if agree
        else "does NOT agree with it"
    )
    v.notes.insert(0, f"{summary(run)}; the verdict from coverage data ({v.verdict}) {word}")
    v.sources.append(path_for(coverage_dir, v.backend, name, v.mode))


def agrees(verdict: str, doc: dict) -> bool | None:
    """Whether a coverage verdict word agrees with what the run saw: runs <-> ran and matched with
    no fallback; runs_with_fallback <-> ran and matched; fails <-> raised or values differ;
    None for unknown (it claims nothing)."""
    res = doc["result"]
    ok = res["ran"] and (res.get("values") or {}).get("match", True)
    fb = bool((doc.get("backend_record") or {}).get("fallback_ops"))
    if verdict.startswith("runs_with_fallback"):
        return bool(ok)
    if verdict.startswith("runs"):
        return bool(ok) and not fb
    if verdict.startswith("fails"):
        return not ok
    return None
