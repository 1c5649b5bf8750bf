"""Known crashes and hangs, per backend version, kept beside the probe's journal across runs.

A crash costs a worker restart and a hang costs the whole ``--timeout``; a probe that meets them
late ends late, waiting on the last hang. The ledger remembers, per backend version (backend,
package version, torch version), the groups (one OpInfo at one dtype) whose case crashed or timed
out, so that a re-run sends them to workers first, where their cost overlaps the rest of the run.
A group that runs clean again leaves the ledger. The ledger never changes a result: the file is
built from the journal alone, whatever order the groups ran in.

Layout (JSON, ``<out>.ledger.json``): ``{version key: {group id: {"case", "status", "why"}}}``;
no file while no version has an entry.
"""

from __future__ import annotations

import json
import os

FATAL = ("crash", "timeout")  # what the ledger remembers: the failures that cost a worker


def ledger_path(out: str) -> str:
    return out + ".ledger.json"


def version_key(backend: dict, torch_version: str) -> str:
    """'opcovtest 1.0 (torch 2.13.0+cpu)': whose crashes an entry is."""
    return f"{backend['name']} {backend['package']} {backend['version']} (torch {torch_version})"


class Ledger:
    """The known crashes and hangs of one backend version (``entries``), and the others' as read."""

    def __init__(self, path: str, key: str):
        self.path, self.key = path, key
        try:
            with open(path) as f:
                self.doc = json.load(f)
        except (OSError, ValueError):  # none yet, or unreadable: start a fresh one
            self.doc = {}
        if not isinstance(self.doc, dict):
            self.doc = {}
        entries = self.doc.get(key)
        self.entries: dict = dict(entries) if isinstance(entries, dict) else {}

    def first(self, group_ids) -> list[str]:
        """The groups of ``group_ids`` known to crash or hang, to be run first (sorted)."""
        return sorted(g for g in group_ids if g in self.entries)

    def update(self, records, finished) -> None:
        """After a run: the groups in ``finished`` are forgotten, then those of them whose cases
        (``records``, CaseRecords) crashed or timed out are remembered, with their first such case."""
        for gid in finished:
            self.entries.pop(gid, None)
        for rec in sorted(records, key=lambda r: r.case):
            if rec.group not in finished or rec.group in self.entries or rec.not_run():
                continue
            for slot in ("fwd", "bwd"):
                if rec.status(slot) in FATAL:
                    part = getattr(rec, slot)
                    self.entries[rec.group] = {"case": rec.case, "status": part["status"], "why": part.get("why", "")}
                    break

    def save(self) -> None:
        """Write the ledger; remove it when no version has an entry. Never fails a probe."""
        doc = {k: v for k, v in self.doc.items() if k != self.key and v}
        if self.entries:
            doc[self.key] = dict(sorted(self.entries.items()))
        try:
            if doc:
                with open(self.path, "w") as f:
                    json.dump(doc, f, indent=1, sort_keys=True)
                    f.write("\n")
            elif os.path.exists(self.path):
                os.remove(self.path)
        except OSError:
            pass
