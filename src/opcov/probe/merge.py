"""``opcov merge``: combine probed files (shards of one probe, or separate runs) into one.

Only files that describe the same thing can be merged: the same schema, evidence kind,
backend (name, package, version) and torch version. Cells combine as in one run (worst
status, summed case counts, the representative case by rank, error and id), so the shards
of a probe merged give the file the whole probe would have written.
"""

from __future__ import annotations

from opcov.errors import DataError


def _identity(doc: dict) -> dict:
    b = doc["backend"]
    return {"backend": b["name"], "package": b["package"], "backend version": b["version"],
            "torch version": str(doc["provenance"]["torch"]), "schema": doc["schema_version"]}


def merge_files(paths, *, command: str) -> dict:
    from opcov.store import data

    docs = [(p, data.load(p)) for p in paths]
    for p, d in docs:
        if d["evidence"] != "probed":
            raise DataError(f"{p}: evidence is {d['evidence']!r}; opcov merge combines probed files only")
    return merge_docs(docs, command=command)


def merge_docs(docs, *, command: str) -> dict:
    from opcov.catalog import build_catalog
    from opcov.probe import results
    from opcov.probe.runner import now_iso

    first_path, first = docs[0]
    want = _identity(first)
    for p, d in docs[1:]:
        got = _identity(d)
        for key in want:
            if got[key] != want[key]:
                raise DataError(f"cannot merge {p} with {first_path}: {key} {got[key]!r} != {want[key]!r} "
                                "(merge only shards or runs of one backend, torch version and schema)")
    ops = results.merge_ops([d["ops"] for _, d in docs])
    if len(docs) > 1:
        for n, rec in ops.items():  # shard-specific reasons say less once shards are combined
            if "skipped" in rec and " (shard " in rec["skipped"]:
                rec["skipped"] = rec["skipped"].split(" (shard ")[0]
    table = results.merge_opinfo([d["summary"].get("opinfo", {}) for _, d in docs])
    catalog = build_catalog()
    prov = dict(first["provenance"])
    probe_settings = dict(prov.get("probe") or {})
    shards = sorted({str((d["provenance"].get("probe") or {}).get("shard", "all")) for _, d in docs})
    probe_settings["shard"] = "merged: " + ", ".join(shards)
    dtypes, directions = [], []
    for _, d in docs:
        for dt in (d["provenance"].get("probe") or {}).get("dtypes", []):
            if dt not in dtypes:
                dtypes.append(dt)
        for di in (d["provenance"].get("probe") or {}).get("directions", []):
            if di not in directions:
                directions.append(di)
    probe_settings["dtypes"], probe_settings["directions"] = dtypes, directions
    prov.update(created=now_iso(), command=command, probe=probe_settings,
                merged_from=[f"{p}: {d['provenance']['command']}" for p, d in docs])
    return {
        "schema_version": first["schema_version"],
        "evidence": "probed",
        "backend": dict(first["backend"]),
        "provenance": prov,
        "summary": results.summarize(ops, table, {op.name for op in catalog.core}),
        "ops": ops,
    }
