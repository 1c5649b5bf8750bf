"""Case records -> per-op, per-dtype cells; cells -> summary. Pure functions of the records.

Attribution (``blame``): a passing case (or one whose values were not comparable, or whose CPU
reference failed) is evidence for every overload it dispatched. A failing case is filed only
under the overload it is blamed on:

- ``raised_in``: the device raised inside this overload (seen by the dispatch mode); for a model's own
  call replayed (a ``trace.`` case) also under the op it called, which raised for the model whatever
  overload inside it raised (PyTorch/XLA's slice raises in its own slice_copy, an op no op set holds);
- ``opinfo``: the overload the OpInfo names (``aten::<aten_name>``) was dispatched;
- ``sole``: the case dispatched only this overload;
- ``ambiguous``: none of the above; every dispatched overload carries the failure.

A backward result goes to the ``bwd`` slot of the forward overloads (by the same rules), and
the overloads the backward itself dispatched (``threshold_backward``...) get it in their
``fwd`` slot, since they ran as ops: that is how backward-only kernels get probe evidence.

Cells combine associatively (worst status, summed counts, representative case chosen by
(rank, larger error, case id)), so shards merged equal the whole run: the rules are opcov.store.combine's,
which an ingested bundle merges by too.
"""

from __future__ import annotations

from opcov.catalog import TEST_NAMESPACES
from opcov.probe import FAILURES, RANK
from opcov.probe.caserecord import CaseRecord
from opcov.store.combine import (  # noqa: F401 - the runner and tests read them through results
    LOCALIZED,
    NOTED,
    TRACE,
    VALUES_EQUAL,
    _unpinned,
    combine,
    dtype_only,
    merge_ops,
    summarize,
    to_cell,
)
from opcov.vocab import PROBED_RAN

# An infinite error (the device gave NaN/inf where the reference is finite, or the NaN/inf positions
# differ: opcov.probe.compare) is written as this finite number: data files and the JSON made from them
# hold finite numbers only (docs/DATA.md), and it still ranks above any real error.
NONFINITE_ERR = 1e308


def written_err(err: list) -> list:
    """``[abs, rel]`` as a data file holds it: a NaN or infinite error becomes ``NONFINITE_ERR``."""
    return [v if v == v and abs(v) < NONFINITE_ERR else NONFINITE_ERR for v in err]


def _base(name: str) -> str:
    return name.split(".", 1)[0] if "." in name.split("::", 1)[1] else name


def _blame(aten, part: dict, ops: list, replayed: bool = False) -> tuple[list, str | None]:
    """The (op, dtype key) pairs a result is filed under, and how they were chosen; ``aten``: the
    base names the case is about (``CaseRecord.aten``); ``replayed``: a model's own call (a trace case)."""
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
        called = [p for p in ops if replayed and _base(p[0]) in set(aten) and tuple(p) != tuple(raised)]
        if called:
            return [tuple(raised), *called], "raised_in: the device raised in this overload, in a model's own call"
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


def _sig(part: dict | None, target) -> str:
    """The signature class of ``target`` (op, dtype key)'s call in a part ('' when not recorded)."""
    part = part or {}
    for pair, sig in zip(part.get("ops", ()), part.get("sigs", ())):
        if tuple(pair) == tuple(target):
            return sig
    return ""


def failed_text(
    status: str, case: str, sig: str, outputs=None, fell=(), values_equal: bool = False, localized: bool = False
) -> str:
    """One ``failed`` item: 'STATUS CASE SIG' (a case id and a signature class hold no spaces), then
    ' fell=OP,OP' for a case that is not ``fallback`` but ran ops through the backend's CPU fallback (a
    mismatch on an output the model may never read hides it otherwise), ' values=equal' for a mismatch
    that is a dtype only (the values equal CPU's), ' via=localized' for a failure pinned on the overload by
    replaying another op's failed case one call at a time, and ' out=1,2' last, for a mismatch only on those
    outputs of the overload (``compare.judge``; the verdict notes it for a model that never reads them)."""
    tail = f" fell={','.join(sorted(set(fell)))}" if fell and status != "fallback" else ""
    tail += f" {VALUES_EQUAL}" if values_equal and status == "mismatch" else ""
    tail += f" {LOCALIZED}" if localized else ""
    tail += f" out={','.join(str(i) for i in sorted(set(outputs)))}" if outputs else ""
    return f"{status} {case} {sig or '?'}{tail}"


def _values_equal(part: dict) -> bool:
    """Whether a mismatching case differs from CPU in an output's dtype alone, every value equal: its text
    says so of its one output ('output: ...'), or of output N where N is the only output that differs."""
    why = part.get("why")
    if part.get("status") != "mismatch" or not dtype_only(why):
        return False
    outputs = part.get("outputs")
    return str(why).startswith("output:") or (outputs is not None and len(outputs) == 1)


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
        localized = (blame or "").startswith("localized")
        e["failed"] = [
            failed_text(
                part["status"], rec.case, sig, outputs, part.get("fallback") or (), _values_equal(part), localized
            )
        ]
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
    replayed = rec.source.startswith(TRACE)
    if "status" in fwd:
        targets, how = _blame(rec.aten, fwd, fops, replayed)
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


# ---------------------------------------------------------------- summary
