"""``opcov diff OLD NEW``: what changed between two coverage snapshots of one backend.

Regressions are judged within one evidence kind: a registered op that no longer
resolves to a kernel, a probed cell that passed and now fails. A probed pass that
moves between precision tiers (strict ``pass``, usable ``pass_low_precision``) is
"precision degraded/improved", listed apart from regressions. What changes only
because the evidence changed (registered -> probed), the torch version's op set
changed, or a probe reached other samples is reported apart, never as a regression.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field

from opcov.errors import UsageError
from opcov.store import data
from opcov.store.cells import record_cells, skip_reason

# Registered: resolved statuses, best first; unresolved means "not known", not worse.
REG_RANK = {"not_applicable": 0, "registered": 0, "fallback": 2, "missing": 3}
# Probed: pass best; not_comparable/no_reference/skipped say nothing about quality.
PROBE_RANK = {"pass": 0, "pass_low_precision": 0, "mismatch": 3, "unsupported": 3, "error": 3, "crash": 3, "timeout": 3}
# The precision tier a probed pass met, strictest first: a move between them is a precision change.
TIERS = {"pass": 0, "pass_low_precision": 1}


@dataclass
class Change:
    op: str
    where: str  # "fwd", "bwd", or "float32 fwd" for probed cells
    old: str
    new: str


@dataclass
class DiffResult:
    old: str
    new: str
    backend: str
    header: list = field(default_factory=list)  # versions and evidence, old -> new
    regressions: list = field(default_factory=list)
    improvements: list = field(default_factory=list)
    precision: list = field(default_factory=list)  # probed passes that changed tier (Change.new says which way)
    apart: list = field(default_factory=list)  # evidence, catalogue or sample changes: not regressions
    added: list = field(default_factory=list)
    removed: list = field(default_factory=list)


def _cells(doc: dict) -> dict:
    """{(op, where): status} for either evidence kind."""
    out = {}
    for op, rec in doc["ops"].items():
        if doc["evidence"] == "registered":
            out[(op, "fwd")] = rec.get("res")
            out[(op, "bwd")] = rec.get("bwd_res")
            continue
        for dtype, cell in record_cells(rec).items():
            for key, status in cell.statuses():
                out[(op, f"{dtype} {key}")] = status
        if skip_reason(rec) is not None:
            out[(op, "all")] = "skipped"
    return out


def _rank(kind: str, status: str):
    return (REG_RANK if kind == "registered" else PROBE_RANK).get(status)


def diff_docs(old: dict, new: dict, old_path: str, new_path: str) -> DiffResult:
    ob, nb = old["backend"]["name"], new["backend"]["name"]
    if ob != nb:
        raise UsageError(f"{old_path} is backend {ob!r}, {new_path} is {nb!r}: diff compares snapshots of one backend")
    res = DiffResult(old_path, new_path, nb)
    for label, a, b in (
        ("evidence", old["evidence"], new["evidence"]),
        ("torch", old["provenance"].get("torch"), new["provenance"].get("torch")),
        (old["backend"]["package"], old["backend"]["version"], new["backend"]["version"]),
    ):
        res.header.append(f"{label}: {a} -> {b}" if a != b else f"{label}: {a}")
    ov, nv = old["provenance"].get("opcov"), new["provenance"].get("opcov")
    if ov != nv:
        res.header.append(f"opcov: {ov} -> {nv}")
        if new["evidence"] == "probed":
            res.apart.append(
                f"made by opcov {ov} and {nv}: the probe's checks and blame rules may differ, so "
                "a status change below can be the method's, not the backend's"
            )
    if old["evidence"] != new["evidence"]:
        res.apart.append(
            f"evidence kind changed ({old['evidence']} -> {new['evidence']}): statuses are not "
            "comparable, so no op counts as a regression"
        )
        return res
    kind = new["evidence"]
    same_torch = old["provenance"].get("torch") == new["provenance"].get("torch")
    oc, nc = _cells(old), _cells(new)
    for key in sorted(set(oc) | set(nc)):
        op, where = key
        a, b = oc.get(key), nc.get(key)
        if a == b:
            continue
        if a is None or b is None:
            in_other = op in (old["ops"] if a is None else new["ops"])  # the file the cell is missing from
            if not in_other and not same_torch:
                res.apart.append(f"{op}: only in torch {(new if a is None else old)['provenance']['torch']}'s op set")
                continue
            if kind == "probed" and in_other:
                res.apart.append(f"{op} {where}: {'now' if a is None else 'no longer'} probed (sample set changed)")
                continue
            (res.added if a is None else res.removed).append(Change(op, where, a or "-", b or "-"))
            if b is None and a is not None and _rank(kind, a) == 0:
                res.regressions.append(Change(op, where, a, "absent"))
            continue
        ra, rb = _rank(kind, a), _rank(kind, b)
        change = Change(op, where, a, b)
        if kind == "probed" and a in TIERS and b in TIERS:
            res.precision.append(change)
        elif ra is None or rb is None:
            res.apart.append(f"{op} {where}: {a} -> {b} (not a quality change)")
        elif rb > ra:
            res.regressions.append(change)
        elif rb < ra:
            res.improvements.append(change)
    return res


def diff_files(old_path: str, new_path: str) -> DiffResult:
    return diff_docs(data.load(old_path), data.load(new_path), old_path, new_path)


def render(res: DiffResult, fmt: str = "text") -> str:
    if fmt == "json":
        return (
            json.dumps(
                {
                    "old": res.old,
                    "new": res.new,
                    "backend": res.backend,
                    "header": res.header,
                    **{
                        k: [c.__dict__ for c in getattr(res, k)]
                        for k in ("regressions", "improvements", "precision", "added", "removed")
                    },
                    "apart": res.apart,
                },
                indent=2,
                sort_keys=True,
            )
            + "\n"
        )
    md = fmt == "markdown"
    lines = [f"{'### ' if md else ''}opcov diff {res.backend}: {res.old} -> {res.new}", ""]
    lines += [f"{'- ' if md else '  '}{h}" for h in res.header]
    lines.append("")
    lines.append(
        f"{len(res.regressions)} regression(s), {len(res.improvements)} improvement(s), "
        + (f"{len(res.precision)} precision change(s), " if res.precision else "")
        + f"{len(res.added)} added, {len(res.removed)} removed, {len(res.apart)} reported apart"
    )
    degraded = [c for c in res.precision if TIERS[c.new] > TIERS[c.old]]
    improved = [c for c in res.precision if TIERS[c.new] < TIERS[c.old]]
    for title, items in (
        ("regressions", res.regressions),
        ("improvements", res.improvements),
        ("precision degraded (strict -> usable tier; not a regression)", degraded),
        ("precision improved (usable -> strict tier)", improved),
        ("added", res.added),
        ("removed", res.removed),
    ):
        if items:
            lines += ["", f"{'#### ' if md else ''}{title}:"]
            lines += [f"{'- ' if md else '  '}{c.op} {c.where}: {c.old} -> {c.new}" for c in items]
    if res.apart:
        lines += ["", f"{'#### ' if md else ''}not regressions (evidence, op set or samples changed):"]
        lines += [f"{'- ' if md else '  '}{a}" for a in res.apart]
    return "\n".join(lines) + "\n"
