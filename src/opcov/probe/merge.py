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

from opcov.errors import DataError, UsageError
from opcov.store import data, output
from opcov.store.combine import merge_docs


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
