"""``opcov merge``: combine probed files (shards of one probe, or separate runs) into one.

Only files that describe the same thing can be merged: the same schema, evidence kind,
backend (name, package, version) and torch version. Cells combine as in one run (worst
status, summed case counts, the representative case by rank, error and id), so the shards
of a probe merged give the file the whole probe would have written.

Merging never imports torch: the files may come from a machine with another torch, and the
summary's "core ATen" section must be that of the files' torch. Probed files do not say which
ops are core; registered files do (per-op ``tags``, from ``torch.Tag.core`` of the torch that
scanned them), so the core ops are read from a registered file of the same torch version.
"""

from __future__ import annotations

import os

from opcov.errors import DataError, UsageError
from opcov.probe import results
from opcov.probe.runner import now_iso
from opcov.store import data, layout, lineyaml, output


def _identity(doc: dict) -> dict:
    b = doc["backend"]
    return {
        "backend": b["name"],
        "package": b["package"],
        "backend version": b["version"],
        "torch version": str(doc["provenance"]["torch"]),
        "schema": doc["schema_version"],
    }


def merge_files(paths, *, command: str, replace: bool = False) -> dict:
    for i, p in enumerate(paths):  # one file twice would count each of its cases twice
        for q in paths[:i]:
            if output.same_file(p, q):
                raise UsageError(f"{p} is given twice ({q}); opcov merge takes each file once")
    docs = [(p, data.load(p)) for p in paths]
    for p, d in docs:
        if d["evidence"] != "probed":
            raise DataError(f"{p}: evidence is {d['evidence']!r}; opcov merge combines probed files only")
    if replace:
        docs = replaced(docs)
    return merge_docs(docs, command=command)


def replaced(docs) -> list:
    """``docs`` with each cell (op, dtype key) that a later file probed taken out of the earlier files: a
    re-probe replaces what it probed again (its cases keep signature classes that older cells lack, and
    combining the two would mix a complete list of failing cases with counts it does not cover).

    A later file made with ``--ops PATTERN`` replaces the cells of the ops its pattern names; the other
    ops its cases happened to dispatch (add, view, ...) keep the earlier files' cells, and take the later
    file's only where the earlier files have none, since a few cases must not replace a whole probe's."""
    docs = [(p, _selected(d, docs[:i])) for i, (p, d) in enumerate(docs)]
    out = []
    for i, (p, d) in enumerate(docs):
        later = {}
        for _, newer in docs[i + 1 :]:
            for op, rec in newer["ops"].items():
                if isinstance(rec, dict) and "skipped" not in rec:
                    later.setdefault(op, set()).update(rec)
        ops = {}
        for op, rec in d["ops"].items():
            if op in later and isinstance(rec, dict) and "skipped" not in rec:
                # kept, if with no cell left: the file still names every op (its core count is checked)
                rec = {dk: cell for dk, cell in rec.items() if dk not in later[op]}
            ops[op] = rec
        out.append((p, {**d, "ops": ops}))
    return out


def _selected(doc: dict, earlier) -> dict:
    """``doc`` without the cells of ops outside its ``--ops`` selection that an earlier file already has."""
    pattern = (doc["provenance"].get("probe") or {}).get("ops")
    if not pattern or not isinstance(pattern, str) or pattern.startswith("merged:"):
        return doc
    import re

    try:
        rx = re.compile(pattern)
    except re.error:
        return doc
    ops = {}
    for op, rec in doc["ops"].items():
        if isinstance(rec, dict) and "skipped" not in rec and not rx.search(op):
            have = set()
            for _, d in earlier:
                old = d["ops"].get(op)
                if isinstance(old, dict) and "skipped" not in old:
                    have.update(old)
            rec = {dk: cell for dk, cell in rec.items() if dk not in have} or {"skipped": "not_selected"}
        ops[op] = rec
    return {**doc, "ops": ops}


def _registered_candidates(paths) -> list[str]:
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
            reg = lineyaml.load(layout.pick(files, version), summary=False)
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
    ops = results.merge_ops([d["ops"] for _, d in docs])
    if len(docs) > 1:
        for rec in ops.values():  # shard-specific reasons say less once shards are combined
            if "skipped" in rec and " (shard " in rec["skipped"]:
                rec["skipped"] = rec["skipped"].split(" (shard ")[0]
    table = results.merge_opinfo([d["summary"].get("opinfo", {}) for _, d in docs])
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
        "summary": results.summarize(ops, table, core),
        "ops": ops,
    }
