"""How probed files combine: two cases' entries of one slot into one (worst status first, summed counts, the
representative case by rank, error and id), cells of several files into one, their OpInfo tables and summary,
and whole probed documents of one backend and torch version (``merge_docs``). Associative, so the shards of
a probe merged give the file the whole probe would have written. Shared by the probe that writes cells
(opcov.probe.results, ``opcov merge``) and the ingestion of a contributed bundle (opcov.store.bundle).

Merging never imports torch: the files may come from a machine with another torch, and the summary's "core
ATen" section must be that of the files' torch. Probed files do not say which ops are core; registered files do
(per-op ``tags``), so the core ops are read from a registered file of the same torch version. Torch-free.
"""

from __future__ import annotations

import datetime as _dt
import os
import re
from collections import Counter

from opcov.errors import DataError
from opcov.store import layout, lineyaml
from opcov.store.cells import MAX_FAILED, SLOTS
from opcov.vocab import INPUT_TIERS, SKIP_REASONS
from opcov.vocab import PROBED_FAILURES as FAILURES
from opcov.vocab import PROBED_RANK as RANK
from opcov.vocab import PROBED_STATUSES as STATUSES

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
    "ran_part",
    "classes_whole",
)
MAX_RAN = 128  # signature classes of the cases that ran a cell keeps; a full list may have left some out
# Statuses whose case is kept in ``failed`` with its signature class: what the verdict matches against a
# model's calls (a failure, a value mismatch, a run through the CPU fallback).
NOTED = frozenset(FAILURES) | {"mismatch", "fallback"}
TRACE = "trace."
COUNTS = ("cases", "fails", "unpinned", "strides", "after_crash")  # summed over a cell's cases; written when not 0
UNPINNED = ("ambiguous", "composition")  # blame rules that do not single out this overload
SKIP_RANK: dict = {w: i for i, w in enumerate(SKIP_REASONS)}  # the skip reasons, best explained first


def _unpinned(e: dict) -> bool:
    return e["status"] in FAILURES and (e.get("blame") or "").startswith(UNPINNED)


def parse_failed(text: str) -> tuple[str, str, str]:
    """(status, case, signature class) of a ``failed`` item; '' for a class not recorded ('?')."""
    status, case, sig = (str(text).split(" ", 2) + ["", ""])[:3]
    sig = sig.split(" ", 1)[0]  # the tags after it: ' fell=...', ' out=...'
    return status, case, "" if sig == "?" else sig


def failed_fell(text: str) -> tuple[str, ...]:
    """The ops a ``failed`` item's case ran through the CPU fallback while its status is another (its
    ' fell=OP,OP' tag); () where it names none."""
    for tag in str(text).split(" ")[3:]:
        if tag.startswith("fell="):
            return tuple(filter(None, tag[len("fell=") :].split(",")))
    return ()


# A comparison's text for outputs that differ only in dtype, their values equal (opcov.probe.compare).
_DTYPE_ONLY = re.compile(r"outputs?(?: [0-9]+)?: dtype [a-z0-9_]+, cpu gives [a-z0-9_]+; values equal")
VALUES_EQUAL = "values=equal"  # a ``failed`` item's tag: its mismatch is a dtype only, the values equal CPU's


def dtype_only(why) -> bool:
    """Whether a probe mismatch's text says only that an output's dtype differs, its values being equal
    ('output: dtype int32, cpu gives int64; values equal'): the same numbers in another dtype, worded
    apart from a value difference. An older text without 'values equal' did not compare the values."""
    return bool(why) and _DTYPE_ONLY.fullmatch(str(why).strip()) is not None


def failed_values_equal(text: str) -> bool:
    """Whether a ``failed`` item's mismatch is a dtype only, its values equal CPU's (its 'values=equal'
    tag): kept on each item, since the cell's ``why`` is its representative case's alone."""
    return VALUES_EQUAL in str(text).split(" ")[3:]


LOCALIZED = (
    "via=localized"  # a ``failed`` item's tag: pinned on its op by replaying another op's case one call at a time
)


def failed_localized(text: str) -> bool:
    """Whether a ``failed`` item was pinned on its op by replaying, one call at a time, the calls of a case about
    another op that failed (opcov.probe.results ``localized``): replayed in the process where that case just
    failed, which on a lazy device may fail calls that run in a fresh one."""
    return LOCALIZED in str(text).split(" ")[3:]


def failed_outputs(text: str) -> str:
    """The ' out=...' part of a ``failed`` item ('' where it names no outputs)."""
    _, sep, rest = str(text).partition(" out=")
    return rest if sep else ""


def _source_of(case: str) -> str:
    return case.split("|", 1)[0]


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
    out = {
        k: v
        for k, v in rep.items()
        if k not in COUNTS + ("samples", "failed", "traced", "ran", "ran_part", "classes_whole")
    }
    for k in COUNTS:
        out[k] = a.get(k, 0) + b.get(k, 0)
    out["samples"] = sorted(set(a["samples"]) | set(b["samples"]))[:MAX_SAMPLES]
    failed = _merge_failed(a.get("failed", ()), b.get("failed", ()))
    if failed:
        out["failed"] = failed
        cut = len(failed) >= MAX_FAILED or a.get("classes_whole") or b.get("classes_whole")
        if cut and classes_whole(a, b, failed):
            out["classes_whole"] = True  # cut (here or before), but only repeats of a class by other traced models
    ran, part = _merge_ran(a, b)
    if ran:
        out["ran"] = ran
        if part:
            out["ran_part"] = True
    traced = dict(a.get("traced") or {})
    for model, status in (b.get("traced") or {}).items():
        if model not in traced or RANK[status] < RANK[traced[model]]:
            traced[model] = status
    if traced:
        out["traced"] = dict(sorted(traced.items()))
    return out


def _merge_ran(a: dict, b: dict) -> tuple[list, bool]:
    """The classes that ran, of two entries: their union (at most MAX_RAN), and whether it is partial: one entry
    had cases run without classes kept (an older file), or was partial itself. A partial list still shows
    classes that ran (a pass of the model's own class); it cannot show that a class did not."""

    def ran_cases(e):
        return e.get("cases", 0) - e.get("fails", 0) - int(e.get("status") in NOTED and not e.get("fails"))

    part = any((ran_cases(e) > 0 and not e.get("ran")) or e.get("ran_part") for e in (a, b))
    return sorted({*a.get("ran", ()), *b.get("ran", ())})[:MAX_RAN], part


def _merge_failed(a, b) -> list:
    """The ``failed`` items of two entries: one per (status, signature class, outputs) of every case first
    (the worst status, then the smallest case id), then one per traced model besides, at most MAX_FAILED:
    a list cut short keeps every class while they fit (``classes_whole``)."""
    items = sorted(
        {str(t) for t in list(a) + list(b)}, key=lambda t: (RANK.get(parse_failed(t)[0], 99), parse_failed(t)[1])
    )
    first: list[str] = []
    more: list[str] = []
    seen: set = set()
    for text in items:
        status, case, sig = parse_failed(text)
        src = _source_of(case)
        cls = (status, sig, failed_outputs(text), failed_values_equal(text))
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
            "skipped_by": {w: why[w] for w in sorted(why, key=lambda w: (SKIP_RANK.get(w, len(SKIP_RANK)), w))},
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
    cases_f: Counter = Counter()
    cases_b: Counter = Counter()
    total = 0
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


def pick(a: dict, b: dict) -> dict:
    """Of two records of one unprobed op (from merged files), the better explained: the first bucket
    in SKIP_REASONS order; a reason that is not a bucket (a file from before buckets) loses."""
    return (
        a if SKIP_RANK.get(a.get("skipped"), len(SKIP_RANK)) <= SKIP_RANK.get(b.get("skipped"), len(SKIP_RANK)) else b
    )


def now_iso() -> str:
    return _dt.datetime.now(_dt.timezone.utc).replace(microsecond=0).isoformat()


def _identity(doc: dict) -> dict:
    b = doc["backend"]
    return {
        "backend": b["name"],
        "package": b["package"],
        "backend version": b["version"],
        "torch version": str(doc["provenance"]["torch"]),
        "schema": doc["schema_version"],
    }


def _registered_candidates(paths) -> list[list[str]]:
    """Registered files that may carry the core tags: one per folder (the one named with the
    wanted torch version when there is one), first the folders of ``paths``, then each backend
    folder of the default coverage folder."""
    folders = []
    for p in paths:
        folder = os.path.dirname(os.path.abspath(p))
        if folder not in folders:
            folders.append(folder)
    if os.path.isdir(layout.DEFAULT_COVERAGE):
        for name in sorted(os.listdir(layout.DEFAULT_COVERAGE)):
            folder = os.path.abspath(os.path.join(layout.DEFAULT_COVERAGE, name))
            if name != layout.MODELS and os.path.isdir(folder) and folder not in folders:
                folders.append(folder)
    return [f for f in (layout.snapshots(os.path.dirname(d), os.path.basename(d))["registered"] for d in folders) if f]


def core_names(paths, doc: dict) -> set[str]:
    """The core ATen ops of ``doc``'s torch version, without importing torch: the ops tagged
    ``core`` in a registered file made with that torch version, looked for next to ``paths`` and
    then under the default coverage folder. A file is taken only if it tags as many of ``doc``'s
    ops core as ``doc``'s own summary counts (a file from before tags were stored tags none)."""
    version = str(doc["provenance"]["torch"])
    want = ((doc.get("summary") or {}).get("core") or {}).get("overloads")
    for files in _registered_candidates(paths):
        try:
            path = layout.pick(files, version)
            assert path is not None  # each candidate list holds a file
            reg = lineyaml.load(path, summary=False)
        except DataError:  # a broken file says nothing here; 'opcov lint' names its problem
            continue
        if str(reg["provenance"].get("torch")) != version:
            continue
        core = {n for n, rec in reg["ops"].items() if "core" in (rec.get("tags") or ())}
        if core and (want is None or len(core & set(doc["ops"])) == want):
            return core
    raise DataError(
        f"cannot tell which ops are core ATen in torch {version} without importing torch: "
        f"no registered file of torch {version} with op tags next to {paths[0]} or under "
        f"{layout.DEFAULT_COVERAGE}/<backend>/; write one with 'opcov scan BACKEND' (no device needed)"
    )


def merge_docs(docs, *, command: str) -> dict:
    first_path, first = docs[0]
    want = _identity(first)
    for p, d in docs[1:]:
        got = _identity(d)
        for key in want:
            if got[key] != want[key]:
                raise DataError(
                    f"cannot merge {p} with {first_path}: {key} {got[key]!r} != {want[key]!r} "
                    "(merge only shards or runs of one backend, torch version and schema)"
                )
    core = core_names([p for p, _ in docs], first)
    ops = merge_ops([d["ops"] for _, d in docs])
    if len(docs) > 1:
        for rec in ops.values():  # shard-specific reasons say less once shards are combined
            if "skipped" in rec and " (shard " in rec["skipped"]:
                rec["skipped"] = rec["skipped"].split(" (shard ")[0]
    table = merge_opinfo([d["summary"].get("opinfo", {}) for _, d in docs])
    prov = dict(first["provenance"])
    probe_settings = dict(prov.get("probe") or {})
    shards = sorted({str((d["provenance"].get("probe") or {}).get("shard", "all")) for _, d in docs})
    probe_settings["shard"] = "merged: " + ", ".join(shards)
    probe_settings.pop("plan", None)  # one shard's part of the plan says nothing of the whole
    dtypes, directions = [], []
    for _, d in docs:
        for dt in (d["provenance"].get("probe") or {}).get("dtypes", []):
            if dt not in dtypes:
                dtypes.append(dt)
        for di in (d["provenance"].get("probe") or {}).get("directions", []):
            if di not in directions:
                directions.append(di)
    probe_settings["dtypes"], probe_settings["directions"] = dtypes, directions
    for key in ("ops", "core"):  # runs of different selections: the first's would misstate the whole
        if len({repr((d["provenance"].get("probe") or {}).get(key)) for _, d in docs}) > 1:
            probe_settings[key] = "merged: differs between the files (see merged_from)"
    prov.update(
        created=now_iso(),
        command=command,
        probe=probe_settings,
        merged_from=[f"{p}: {d['provenance']['command']}" for p, d in docs],
    )
    return {
        "schema_version": first["schema_version"],
        "evidence": "probed",
        "backend": dict(first["backend"]),
        "provenance": prov,
        "summary": summarize(ops, table, core),
        "ops": ops,
    }
