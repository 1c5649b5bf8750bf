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
from opcov.probe.disposition import RANK as RANK_SKIP
from opcov.probe.disposition import pick
from opcov.store.cells import MAX_FAILED, SLOTS
from opcov.vocab import INPUT_TIERS, PROBED_RAN

MAX_SAMPLES = 5  # OpInfo names kept per cell (the first, sorted)
SLOT_KEYS = (
    "err",
    "tol",
    "why",
    "blame",
    "case",
    "cases",
    "fails",
    "unpinned",
    "strides",
    "after_crash",
    "failed",
    "traced",
    "ran",
    "classes_whole",
)
MAX_RAN = 32  # signature classes of the cases that ran a cell keeps; a full list may have left some out
# Statuses whose case is kept in ``failed`` with its signature class: what the verdict matches against a
# model's calls (a failure, a value mismatch, a run through the CPU fallback).
NOTED = frozenset(FAILURES) | {"mismatch", "fallback"}
TRACE = "trace."
COUNTS = ("cases", "fails", "unpinned", "strides", "after_crash")  # summed over a cell's cases; written when not 0
UNPINNED = ("ambiguous", "composition")  # blame rules that do not single out this overload
# An infinite error (the device gave NaN/inf where the reference is finite, or the NaN/inf positions
# differ: opcov.probe.compare) is written as this finite number: data files and the JSON made from them
# hold finite numbers only (docs/DATA.md), and it still ranks above any real error.
NONFINITE_ERR = 1e308


def written_err(err: list) -> list:
    """``[abs, rel]`` as a data file holds it: a NaN or infinite error becomes ``NONFINITE_ERR``."""
    return [v if v == v and abs(v) < NONFINITE_ERR else NONFINITE_ERR for v in err]


def _base(name: str) -> str:
    return name.split(".", 1)[0] if "." in name.split("::", 1)[1] else name


def _blame(aten, part: dict, ops: list) -> tuple[list, str | None]:
    """The (op, dtype key) pairs a result is filed under, and how they were chosen; ``aten``: the
    base names the case is about (``CaseRecord.aten``)."""
    status = part.get("status")
    if status == "fallback":  # ran, with these overloads through the CPU fallback (probe.xla)
        # The backend's own counters name what fell back: that op, or (for a backward slot, filed under
        # forward overloads) the forward op whose backward kernel it is, never every op of the case.
        named = list(part.get("fallback", ()))
        fell = set(named) | {_base(f) for f in named}
        fell |= {f[: -len("_backward")] for f in fell if f.endswith("_backward")}
        hit = [p for p in ops if p[0] in fell or _base(p[0]) in fell | set(aten)]  # .out: its functional's
        if named:  # the op the case is about (if it ran) and those the counters name; never the others
            return hit, "fallback: the overload the case is about, or one the backend's fallback counters name"
        return hit or ops, "fallback: the overload the case is about, or one that ran through the CPU fallback"
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
        return (
            [tuple(p) for p in loc["failed"]],
            f"localized: of its {loc['replayed']} op calls replayed one at a time on the device, "
            f"{'only this one' if len(loc['failed']) == 1 else 'only these'} failed",
        )
    if loc and ops:
        return ops, (
            f"composition: each of its {loc['replayed']} op calls passes alone on the device; together they fail"
        )
    if ops:
        return ops, f"ambiguous: one of the {len(ops)} overloads the case dispatched"
    return [], None


def needs_localizing(aten, part: dict) -> bool:
    """A failure the recorded ops cannot pin on one overload: the worker replays them one by one."""
    ops = [tuple(p) for p in part.get("ops", ())]
    return part.get("status") in FAILURES and (_blame(aten, part, ops)[1] or "").startswith("ambiguous")


def _unpinned(e: dict) -> bool:
    return e["status"] in FAILURES and (e.get("blame") or "").startswith(UNPINNED)


def _sig(part: dict | None, target) -> str:
    """The signature class of ``target`` (op, dtype key)'s call in a part ('' when not recorded)."""
    part = part or {}
    for pair, sig in zip(part.get("ops", ()), part.get("sigs", ())):
        if tuple(pair) == tuple(target):
            return sig
    return ""


def failed_text(status: str, case: str, sig: str, outputs=None) -> str:
    """One ``failed`` item: 'STATUS CASE SIG' (a case id and a signature class hold no spaces), then
    ' out=1,2' for a mismatch only on those outputs of the overload (``compare.judge``; the verdict
    notes it for a model that never reads them)."""
    tail = f" out={','.join(str(i) for i in sorted(set(outputs)))}" if outputs else ""
    return f"{status} {case} {sig or '?'}{tail}"


def parse_failed(text: str) -> tuple[str, str, str]:
    """(status, case, signature class) of a ``failed`` item; '' for a class not recorded ('?')."""
    status, case, sig = (str(text).split(" ", 2) + ["", ""])[:3]
    sig = sig.split(" out=", 1)[0]
    return status, case, "" if sig == "?" else sig


def failed_outputs(text: str) -> str:
    """The ' out=...' part of a ``failed`` item ('' where it names no outputs)."""
    _, sep, rest = str(text).partition(" out=")
    return rest if sep else ""


def _source_of(case: str) -> str:
    return case.split("|", 1)[0]


def _entry(rec: CaseRecord, part: dict, blame: str | None, sig: str = "", op: str = "") -> dict:
    """One case's result in one slot. A case not run after its group's crash (``after_crash``) is
    counted there alone: not a case, not a failure; it never represents the cell (``_key``).

    A case whose status is in NOTED is kept in ``failed`` with ``sig``, the signature class of the call
    to the overload it is filed under (the verdict counts it only against calls of that class); a case
    replayed from a model's trace (``trace.<model>``) names its status under ``traced`` (a model's own
    calls, which the verdict prefers for that model)."""
    if part.get("after_crash"):
        return {
            "status": part["status"],
            "case": rec.case,
            "cases": 0,
            "fails": 0,
            "strides": 0,
            "unpinned": 0,
            "after_crash": 1,
            "not_run": True,
            "samples": [rec.source],
        }
    e = {
        "status": part["status"],
        "case": rec.case,
        "cases": 1,
        "fails": int(part["status"] in FAILURES),
        "strides": 1 if part.get("strides") else 0,
        "after_crash": 0,
        "samples": [rec.source],
    }
    for k in ("err", "tol", "why"):
        if k in part:
            e[k] = written_err(part[k]) if k == "err" else part[k]
    if blame:
        e["blame"] = blame
    e["unpinned"] = int(_unpinned(e))
    if part["status"] in NOTED:
        outputs = part.get("outputs") if op and part.get("output_of") == op else None
        e["failed"] = [failed_text(part["status"], rec.case, sig, outputs)]
    elif part["status"] in PROBED_RAN and sig:
        e["ran"] = [sig]  # which paths the cell's passes cover (opcov.verdict.signature.covered)
    if rec.source.startswith(TRACE):
        e["traced"] = {rec.source[len(TRACE) :]: part["status"]}
    return e


def entries(rec: CaseRecord):
    """(op, dtype key, slot, entry) for one case record; a harder case's (``rec.tier``) forward goes
    to its tier's slot."""
    fwd = rec.fwd or {}
    fops = [tuple(p) for p in fwd.get("ops", ())]
    if "status" in fwd:
        targets, how = _blame(rec.aten, fwd, fops)
        for op, dk in targets:
            yield op, dk, rec.tier or "fwd", _entry(rec, fwd, how, _sig(fwd, (op, dk)), op)
    out = rec.out  # the same call with out=: evidence for the .out overload it dispatched
    if out and "status" in out:
        oops = [tuple(p) for p in out.get("ops", ())]
        targets, how = _blame(rec.aten, out, oops)
        for op, dk in targets:
            yield op, dk, "fwd", _entry(rec, out, how, _sig(out, (op, dk)))
    bwd = rec.bwd
    if bwd and "status" in bwd:
        fallback = {"status": bwd["status"], "fallback": bwd.get("fallback", ())}
        targets, how = _blame(rec.aten, fallback, fops)  # bwd slot: forward overloads
        for op, dk in targets:
            yield op, dk, "bwd", _entry(rec, bwd, how, _sig(fwd, (op, dk)))  # the forward call's class
        bops = [tuple(p) for p in bwd.get("ops", ())]
        btargets, bhow = _blame(rec.aten, bwd, bops)
        if bwd["status"] in FAILURES and not bwd.get("raised"):
            btargets = []  # a wrong gradient is the forward op's backward, not these ops' fault
        for op, dk in btargets:
            how = (bhow or "") + (" (in a backward)" if bhow else "") or None
            yield op, dk, "fwd", _entry(rec, bwd, how, _sig(bwd, (op, dk)))


def _key(e: dict):
    """Which case represents a cell: the worst status, except that a failure not pinned on this
    overload ranks after the cases that ran it fine (it may be another overload's fault) and
    before those that judged nothing; then the largest error, then the smallest id."""
    err = e.get("err")
    rank = RANK["no_reference"] - 0.5 if _unpinned(e) else RANK[e["status"]]
    return (rank, bool(e.get("not_run")), -(err[0] if err else -1.0), e.get("case", ""))


def combine(a: dict | None, b: dict) -> dict:
    """Two slot entries (or cells' slot parts) of the same op/dtype/slot -> one."""
    if a is None:
        return dict(b)
    rep = a if _key(a) <= _key(b) else b
    out = {k: v for k, v in rep.items() if k not in COUNTS + ("samples", "failed", "traced", "ran", "classes_whole")}
    for k in COUNTS:
        out[k] = a.get(k, 0) + b.get(k, 0)
    out["samples"] = sorted(set(a["samples"]) | set(b["samples"]))[:MAX_SAMPLES]
    failed = _merge_failed(a.get("failed", ()), b.get("failed", ()))
    if failed:
        out["failed"] = failed
        if len(failed) >= MAX_FAILED and classes_whole(a, b, failed):
            out["classes_whole"] = True  # cut, but only repeats of a class by other traced models
    ran = _merge_ran(a, b)
    if ran:
        out["ran"] = ran
    traced = dict(a.get("traced") or {})
    for model, status in (b.get("traced") or {}).items():
        if model not in traced or RANK[status] < RANK[traced[model]]:
            traced[model] = status
    if traced:
        out["traced"] = dict(sorted(traced.items()))
    return out


def _merge_ran(a: dict, b: dict) -> list | None:
    """The classes that ran, of two entries: their union (at most MAX_RAN), or None where one entry had
    cases run without classes kept (an older file): then no list says which paths the passes covered."""

    def ran_cases(e):
        return e.get("cases", 0) - e.get("fails", 0) - int(e.get("status") in NOTED and not e.get("fails"))

    if any(ran_cases(e) > 0 and not e.get("ran") for e in (a, b)):
        return None
    return sorted({*a.get("ran", ()), *b.get("ran", ())})[:MAX_RAN]


def _merge_failed(a, b) -> list:
    """The ``failed`` items of two entries: one per (status, signature class, outputs) of every case first
    (the worst status, then the smallest case id), then one per traced model besides, at most MAX_FAILED:
    a list cut short keeps every class while they fit (``classes_whole``)."""
    items = sorted(
        {str(t) for t in list(a) + list(b)}, key=lambda t: (RANK.get(parse_failed(t)[0], 99), parse_failed(t)[1])
    )
    first, more, seen = [], [], set()
    for text in items:
        status, case, sig = parse_failed(text)
        src = _source_of(case)
        cls = (status, sig, failed_outputs(text))
        key = (*cls, src if src.startswith(TRACE) else "")
        if key in seen:
            continue
        seen.add(key)
        (more if cls in {k[:3] for k in seen if k != key} else first).append(text)
    return (first + more)[:MAX_FAILED]


def classes_whole(a: dict, b: dict, failed: list) -> bool:
    """Whether a merged ``failed`` list cut at MAX_FAILED still names every failing class of both entries:
    each entry's own list was whole (short of the cap, or marked so) and the classes fit."""

    def whole(e):
        return len(e.get("failed", ())) < MAX_FAILED or bool(e.get("classes_whole"))

    classes = {
        (parse_failed(t)[0], parse_failed(t)[2], failed_outputs(t))
        for t in [*a.get("failed", ()), *b.get("failed", ())]
    }
    return whole(a) and whole(b) and len(classes) <= MAX_FAILED


def to_cell(slots: dict) -> dict:
    """{'fwd': entry, 'bwd': entry, <tier>: entry} -> the file's cell (evidence keys prefixed as in
    ``opcov.store.cells.SLOTS``; an input tier that passes has its status and counts alone)."""
    cell = {}
    samples = set()
    for slot, pre in SLOTS.values():
        e = slots.get(slot)
        if e is None:
            continue
        cell[slot] = e["status"]
        samples |= set(e["samples"])
        brief = slot in INPUT_TIERS and e["status"] == "pass"  # a passing tier: its counts, no more
        for k in SLOT_KEYS:
            if brief and k not in COUNTS:
                continue
            if k in e and not (k in COUNTS[1:] and not e[k]):
                # a fresh list (or mapping): one shared between keys would be written as a YAML anchor
                v = e[k]
                cell[pre + k] = list(v) if isinstance(v, (list, tuple)) else dict(v) if isinstance(v, dict) else v
    cell["samples"] = sorted(samples)[:MAX_SAMPLES]
    return cell


def from_cell(cell: dict) -> dict:
    """Inverse of to_cell (samples are shared by all slots; good enough to combine)."""
    slots = {}
    for slot, pre in SLOTS.values():
        if slot not in cell:
            continue
        e = {
            "status": cell[slot],
            "samples": list(cell.get("samples", ())),
            "strides": 0,
            "fails": 0,
            "unpinned": 0,
            "after_crash": 0,
        }
        for k in SLOT_KEYS:
            if pre + k in cell:
                e[k] = cell[pre + k]
        if e["status"] in FAILURES and not e["fails"]:  # a file from before fails was counted
            e["fails"] = e.get("cases", 1)
        slots[slot] = e
    return slots


def build_ops(records, universe, skip) -> dict:
    """ops mapping of a probed file: every op in ``universe`` plus every op a case reached; an op of
    ``universe`` no case reached gets ``skip(name, probed op names)``, its ``{skipped: ...}`` record
    (``probe.disposition.Dispositions.record``)."""
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
    # A tier's result is kept only beside the plain cases' (a cell always has its forward status).
    acc = {op: kept for op, d in acc.items() if (kept := {dk: s for dk, s in d.items() if "fwd" in s})}
    ops = {op: {dk: to_cell(s) for dk, s in sorted(d.items())} for op, d in acc.items()}
    probed = frozenset(ops)
    for name in universe:
        if name not in ops:
            ops[name] = skip(name, probed)
    return ops


def merge_ops(docs_ops) -> dict:
    """Combine the ops mappings of several probed files."""
    acc: dict = {}
    skipped: dict = {}
    for ops in docs_ops:
        for op, rec in ops.items():
            if "skipped" in rec:
                skipped[op] = pick(skipped[op], rec) if op in skipped else dict(rec)
                continue
            for dk, cell in rec.items():
                cur = acc.setdefault(op, {}).setdefault(dk, {})
                for slot, e in from_cell(cell).items():
                    e = dict(e)
                    e.setdefault("cases", 1)
                    cur[slot] = combine(cur.get(slot), e)
    ops = {op: {dk: to_cell(s) for dk, s in sorted(d.items())} for op, d in acc.items()}
    for op, rec in skipped.items():
        ops.setdefault(op, rec)
    return ops


# ---------------------------------------------------------------- per OpInfo


def opinfo_table(records, group_errors) -> dict:
    """{OpInfo id: {dtype: "fwd/bwd/cases"}}: the worst fwd and bwd status of each group's plain
    cases (its input tiers are counted per cell), and the cases run (not those left after a crash)."""
    acc: dict = {}
    for rec in records:
        g = acc.setdefault(rec.source, {}).setdefault(rec.dtype, ["-", "-", 0])
        for i, slot in ((0, "fwd"), (1, "bwd")) if rec.tier is None else ():
            s = rec.status(slot)
            if s and (g[i] == "-" or RANK[s] < RANK[g[i]]):
                g[i] = s
        g[2] += not rec.not_run()
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
        tcells = {t: _order(Counter(c[t] for n in probed for c in ops[n].values() if t in c)) for t in INPUT_TIERS}
        why = Counter(str(ops[n]["skipped"]) for n in names if "skipped" in ops[n])
        return {
            "overloads": len(names),
            "probed": len(probed),
            "skipped": len(names) - len(probed),
            "skipped_by": {w: why[w] for w in sorted(why, key=lambda w: (RANK_SKIP.get(w, len(RANK_SKIP)), w))},
            "fwd": _order(fwd),
            "bwd": _order(bwd),
            "cells_fwd": _order(cells),
            "cells_bwd": _order(bcells),
            "cells_tiers": {t: c for t, c in tcells.items() if c},
        }

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
        "aten": section(aten),
        "core": section(core),
        "other_namespaces": section(other),
        "dtypes": {dk: _order(c) for dk, c in sorted(per_dtype.items())},
        "cases": total,
        "opinfo_groups": {
            "count": sum(len(d) for d in opinfo.values()),
            "fwd": _order(cases_f),
            "bwd": _order(cases_b),
        },
        "opinfo": opinfo,
    }
