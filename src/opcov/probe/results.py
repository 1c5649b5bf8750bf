"""Case records -> per-op, per-dtype cells; cells -> summary. Pure functions of the records.

Attribution (``blame``): a passing case (or one whose values were not comparable, or whose CPU
reference failed) is evidence for every overload it dispatched. A failing case is filed only
under the overload it is blamed on:

- ``raised_in``: the device raised inside this overload (seen by the dispatch mode);
- ``opinfo``: the overload the OpInfo names (``aten::<aten_name>``) was dispatched;
- ``sole``: the case dispatched only this overload;
- ``ambiguous``: none of the above; every dispatched overload carries the failure.

A backward result goes to the ``bwd`` slot of the forward overloads (by the same rules), and
the overloads the backward itself dispatched (``threshold_backward``...) get it in their
``fwd`` slot, since they ran as ops: that is how backward-only kernels get probe evidence.

Cells combine associatively (worst status, summed counts, representative case chosen by
(rank, larger error, case id)), so shards merged equal the whole run.
"""

from __future__ import annotations

from collections import Counter

from opcov.catalog import TEST_NAMESPACES
from opcov.probe import FAILURES, RANK, STATUSES
from opcov.probe.caserecord import CaseRecord

MAX_SAMPLES = 5  # OpInfo names kept per cell (the first, sorted)
SLOT_KEYS = ("err", "tol", "why", "blame", "case", "cases", "fails", "unpinned", "strides")
COUNTS = ("cases", "fails", "unpinned", "strides")  # summed over a cell's cases; written when not 0
UNPINNED = ("ambiguous", "composition")  # blame rules that do not single out this overload


def _base(name: str) -> str:
    return name.split(".", 1)[0] if "." in name.split("::", 1)[1] else name


def _blame(aten, part: dict, ops: list) -> tuple[list, str | None]:
    """The (op, dtype key) pairs a result is filed under, and how they were chosen; ``aten``: the
    base names the case is about (``CaseRecord.aten``)."""
    status = part.get("status")
    if status not in FAILURES:
        return ops, None
    raised = part.get("raised")
    if raised and raised[0]:
        return [tuple(raised)], "raised_in: the device raised in this overload"
    named = [p for p in ops if _base(p[0]) in set(aten)]
    if named:
        return named, "opinfo: the overload the OpInfo is about"
    if len(ops) == 1:
        return ops, "sole: the only overload the case dispatched"
    loc = part.get("localized")
    if loc and loc["failed"]:
        return ([tuple(p) for p in loc["failed"]],
                f"localized: of its {loc['replayed']} op calls replayed one at a time on the device, "
                f"{'only this one' if len(loc['failed']) == 1 else 'only these'} failed")
    if loc and ops:
        return ops, (f"composition: each of its {loc['replayed']} op calls passes alone on the device; "
                     "together they fail")
    if ops:
        return ops, f"ambiguous: one of the {len(ops)} overloads the case dispatched"
    return [], None


def needs_localizing(aten, part: dict) -> bool:
    """A failure the recorded ops cannot pin on one overload: the worker replays them one by one."""
    ops = [tuple(p) for p in part.get("ops", ())]
    return part.get("status") in FAILURES and (_blame(aten, part, ops)[1] or "").startswith("ambiguous")


def _unpinned(e: dict) -> bool:
    return e["status"] in FAILURES and (e.get("blame") or "").startswith(UNPINNED)


def _entry(rec: CaseRecord, part: dict, blame: str | None) -> dict:
    e = {"status": part["status"], "case": rec.case, "cases": 1, "fails": int(part["status"] in FAILURES),
         "strides": 1 if part.get("strides") else 0, "samples": [rec.source]}
    for k in ("err", "tol", "why"):
        if k in part:
            e[k] = part[k]
    if blame:
        e["blame"] = blame
    e["unpinned"] = int(_unpinned(e))
    return e


def entries(rec: CaseRecord):
    """(op, dtype key, slot, entry) for one case record."""
    fwd = rec.fwd or {}
    fops = [tuple(p) for p in fwd.get("ops", ())]
    if "status" in fwd:
        targets, how = _blame(rec.aten, fwd, fops)
        for op, dk in targets:
            yield op, dk, "fwd", _entry(rec, fwd, how)
    out = rec.out  # the same call with out=: evidence for the .out overload it dispatched
    if out and "status" in out:
        oops = [tuple(p) for p in out.get("ops", ())]
        targets, how = _blame(rec.aten, out, oops)
        for op, dk in targets:
            yield op, dk, "fwd", _entry(rec, out, how)
    bwd = rec.bwd
    if bwd and "status" in bwd:
        targets, how = _blame(rec.aten, {"status": bwd["status"]}, fops)  # bwd slot: forward overloads
        for op, dk in targets:
            yield op, dk, "bwd", _entry(rec, bwd, how)
        bops = [tuple(p) for p in bwd.get("ops", ())]
        btargets, bhow = _blame(rec.aten, bwd, bops)
        if bwd["status"] in FAILURES and not bwd.get("raised"):
            btargets = []  # a wrong gradient is the forward op's backward, not these ops' fault
        for op, dk in btargets:
            yield op, dk, "fwd", _entry(rec, bwd, (bhow or "") + (" (in a backward)" if bhow else "") or None)


def _key(e: dict):
    """Which case represents a cell: the worst status, except that a failure not pinned on this
    overload ranks after the cases that ran it fine (it may be another overload's fault) and
    before those that judged nothing; then the largest error, then the smallest id."""
    err = e.get("err")
    rank = RANK["no_reference"] - 0.5 if _unpinned(e) else RANK[e["status"]]
    return (rank, -(err[0] if err else -1.0), e["case"])


def combine(a: dict | None, b: dict) -> dict:
    """Two slot entries (or cells' slot parts) of the same op/dtype/slot -> one."""
    if a is None:
        return dict(b)
    rep = a if _key(a) <= _key(b) else b
    out = {k: v for k, v in rep.items() if k not in COUNTS + ("samples",)}
    for k in COUNTS:
        out[k] = a.get(k, 0) + b.get(k, 0)
    out["samples"] = sorted(set(a["samples"]) | set(b["samples"]))[:MAX_SAMPLES]
    return out


def to_cell(slots: dict) -> dict:
    """{'fwd': entry, 'bwd': entry} -> the file's cell (bwd evidence keys prefixed)."""
    cell = {}
    samples = set()
    for slot in ("fwd", "bwd"):
        e = slots.get(slot)
        if e is None:
            continue
        pre = "" if slot == "fwd" else "bwd_"
        cell[slot] = e["status"]
        for k in SLOT_KEYS:
            if k in e and not (k in COUNTS[1:] and not e[k]):
                # a fresh list: a list shared between keys would be written as a YAML anchor
                cell[pre + k] = list(e[k]) if isinstance(e[k], list) else e[k]
        samples |= set(e["samples"])
    cell["samples"] = sorted(samples)[:MAX_SAMPLES]
    return cell


def from_cell(cell: dict) -> dict:
    """Inverse of to_cell (samples are shared by both slots; good enough to combine)."""
    slots = {}
    for slot in ("fwd", "bwd"):
        if slot not in cell:
            continue
        pre = "" if slot == "fwd" else "bwd_"
        e = {"status": cell[slot], "samples": list(cell.get("samples", ())), "strides": 0, "fails": 0,
             "unpinned": 0}
        for k in SLOT_KEYS:
            if pre + k in cell:
                e[k] = cell[pre + k]
        if e["status"] in FAILURES and not e["fails"]:  # a file from before fails was counted
            e["fails"] = e.get("cases", 1)
        slots[slot] = e
    return slots


def build_ops(records, universe, skip_reason, host_only=frozenset()) -> dict:
    """ops mapping of a probed file: every op in ``universe`` plus every op a case reached."""
    acc: dict = {}
    known = set(universe)
    for rec in sorted(records, key=lambda r: r.case):
        for op, dk, slot, e in entries(rec):
            if "::" not in op or op.split("::")[0] in TEST_NAMESPACES:
                continue
            if known and op not in known and not op.startswith("aten::"):
                continue  # a namespace the catalogue leaves out (OpInfo's own torch_nn:: test ops)
            slots = acc.setdefault(op, {}).setdefault(dk, {})
            slots[slot] = combine(slots.get(slot), e)
    ops = {op: {dk: to_cell(s) for dk, s in sorted(d.items())} for op, d in acc.items()}
    for name in universe:
        if name not in ops:
            ops[name] = {"skipped": "host-only metadata op; no device kernel to probe"
                         if name in host_only else skip_reason}
    return ops


def merge_ops(docs_ops) -> dict:
    """Combine the ops mappings of several probed files."""
    acc: dict = {}
    skipped: dict = {}
    for ops in docs_ops:
        for op, rec in ops.items():
            if "skipped" in rec:
                skipped.setdefault(op, rec["skipped"])
                continue
            for dk, cell in rec.items():
                cur = acc.setdefault(op, {}).setdefault(dk, {})
                for slot, e in from_cell(cell).items():
                    e = dict(e)
                    e.setdefault("cases", 1)
                    cur[slot] = combine(cur.get(slot), e)
    ops = {op: {dk: to_cell(s) for dk, s in sorted(d.items())} for op, d in acc.items()}
    for op, why in skipped.items():
        ops.setdefault(op, {"skipped": why})
    return ops


# ---------------------------------------------------------------- per OpInfo

def opinfo_table(records, group_errors) -> dict:
    """{OpInfo id: {dtype: "fwd/bwd/cases"}}: the worst fwd and bwd status of each group."""
    acc: dict = {}
    for rec in records:
        g = acc.setdefault(rec.source, {}).setdefault(rec.dtype, ["-", "-", 0])
        for i, slot in ((0, "fwd"), (1, "bwd")):
            s = rec.status(slot)
            if s and (g[i] == "-" or RANK[s] < RANK[g[i]]):
                g[i] = s
        g[2] += 1
    for gid in group_errors:
        source, dtype = gid.rsplit("|", 1)
        acc.setdefault(source, {}).setdefault(dtype, ["error", "-", 0])
    return {src: {dt: f"{v[0]}/{v[1]}/{v[2]}" for dt, v in sorted(d.items())} for src, d in sorted(acc.items())}


def merge_opinfo(tables) -> dict:
    acc: dict = {}
    for table in tables:
        for src, d in table.items():
            for dt, text in d.items():
                f, b, n = text.split("/")
                cur = acc.setdefault(src, {}).get(dt)
                if cur is None:
                    acc[src][dt] = [f, b, int(n)]
                    continue
                for i, s in ((0, f), (1, b)):
                    if s != "-" and (cur[i] == "-" or RANK[s] < RANK[cur[i]]):
                        cur[i] = s
                cur[2] += int(n)
    return {src: {dt: f"{v[0]}/{v[1]}/{v[2]}" for dt, v in sorted(d.items())} for src, d in sorted(acc.items())}


# ---------------------------------------------------------------- summary

def _order(counter) -> dict:
    return {s: counter[s] for s in STATUSES if counter.get(s)}


def worst_status(rec: dict, slot: str) -> str | None:
    found = [c[slot] for c in rec.values() if isinstance(c, dict) and slot in c]
    return min(found, key=RANK.__getitem__) if found else None


def summarize(ops: dict, opinfo: dict, core_names) -> dict:
    """Counts a user reads first: how much of the catalogue has probe evidence, per status."""

    def section(names):
        names = list(names)
        probed = [n for n in names if "skipped" not in ops[n]]
        fwd = Counter(worst_status(ops[n], "fwd") for n in probed)
        bwd = Counter(worst_status(ops[n], "bwd") for n in probed)
        cells = Counter(c["fwd"] for n in probed for c in ops[n].values() if "fwd" in c)
        bcells = Counter(c["bwd"] for n in probed for c in ops[n].values() if "bwd" in c)
        return {"overloads": len(names), "probed": len(probed), "skipped": len(names) - len(probed),
                "fwd": _order(fwd), "bwd": _order(bwd), "cells_fwd": _order(cells),
                "cells_bwd": _order(bcells)}

    aten = [n for n in ops if n.startswith("aten::")]
    core = [n for n in aten if n in core_names]
    other = [n for n in ops if not n.startswith("aten::")]
    per_dtype: dict = {}
    for n in ops:
        for dk, c in ops[n].items():
            if isinstance(c, dict) and "fwd" in c:
                per_dtype.setdefault(dk, Counter())[c["fwd"]] += 1
    cases_f, cases_b, total = Counter(), Counter(), 0
    for d in opinfo.values():
        for text in d.values():
            f, b, n = text.split("/")
            total += int(n)
            cases_f[f] += 1
            if b != "-":
                cases_b[b] += 1
    return {
        "aten": section(aten), "core": section(core), "other_namespaces": section(other),
        "dtypes": {dk: _order(c) for dk, c in sorted(per_dtype.items())},
        "cases": total,
        "opinfo_groups": {"count": sum(len(d) for d in opinfo.values()), "fwd": _order(cases_f),
                          "bwd": _order(cases_b)},
        "opinfo": opinfo,
    }
