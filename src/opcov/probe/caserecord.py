"""The case record: what running one case found, declared once.

A worker builds one per case (``probe.execute``) and sends it to the parent through the pipe;
while the case runs, its partial record sits in the flight recorder (``probe.flight``), from
which the parent records a crash or timeout (``probe.pool``); the journal stores each finished
record as one JSON line (``probe.journal``), and ``probe.results`` folds records into cells.
Every record is built through ``CaseRecord``; ``to_json``/``from_json`` give the journal's
layout, which is unchanged, so an older journal still resumes.

JSON layout: ``case`` (id), ``group`` (group id), ``source`` (OpInfo, canary or trace id),
``dtype``, ``aten`` (the aten base names the case is about, for blame), ``tier`` (only for a case
made harder for an input tier, ``probe.tiers``), and a part per step
that ran: ``fwd`` (the op as itself), ``out`` (the same call with ``out=``), ``bwd`` (its
backward). A part (``Part``) holds the overloads the CPU run dispatched and, once judged, the
status with its evidence. A case not run because an earlier case of its group crashed or timed
out has that case's parts and status, marked ``after_crash`` (``not_run_after``).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import TypedDict

from opcov.vocab import AFTER_CRASH

REFERENCE = "reference"  # mark of a part whose CPU reference is running, in the flight record (probe.pool)


class Part(TypedDict, total=False):
    """One step's result. Only ``ops`` is there while the step runs."""

    ops: list  # [[op, dtype key], ...]: the overloads the CPU run dispatched, in order
    sigs: list  # the signature class of each one's first call (opcov.probe.record.signature), as ``ops``
    status: str  # a probed status (opcov.vocab.PROBED_STATUSES)
    why: str  # first line of the error or of the difference found
    err: list  # [max abs error, max rel error] against the reference
    tol: str  # tolerance class
    strides: bool  # output strides differ from CPU's (recorded, not judged)
    raised: list  # [op, dtype key]: the overload the device raised in
    localized: dict  # {"replayed": n, "failed": [[op, dtype key], ...]}: the failure's calls replayed alone
    after_crash: str  # not run: the id of the earlier case of the group that crashed or timed out
    outputs: list  # a mismatch: the indices of the outputs that differ (opcov.probe.compare.judge)
    output_of: str  # the overload ``outputs`` counts the outputs of (the case calls it itself)


@dataclass
class CaseRecord:
    """One case's record; a part is None when its step did not run."""

    case: str
    group: str
    source: str
    dtype: str
    aten: list
    fwd: Part | None = None
    out: Part | None = None
    bwd: Part | None = None
    tier: str | None = None  # the input tier of a harder case (probe.tiers): its fwd goes to that cell key

    @classmethod
    def start(cls, cid: str, group: dict, aten, tier: str | None = None) -> CaseRecord:
        """The record of a case about to run: its forward step, nothing dispatched yet."""
        return cls(cid, group["id"], group["source"], group["dtype"], list(aten), fwd={"ops": []}, tier=tier)

    def status(self, slot: str) -> str | None:
        """The status of step ``slot`` ("fwd", "out", "bwd"); None when it has none."""
        return (getattr(self, slot) or {}).get("status")

    def fail(self, phase: str, status: str, why: str) -> None:
        """File a failure (crash, timeout, a harness error) in the step the case was in."""
        part = getattr(self, phase)
        if part is None:
            part = {"ops": []}
            setattr(self, phase, part)
        part.update(status=status, why=why)

    def not_run_after(self, phase: str, cid: str) -> CaseRecord:
        """The record of case ``cid`` of this record's group, not run because this case crashed or
        timed out in ``phase``: this case's parts (the overloads it dispatched, for blame) without
        their results, but for ``phase``'s status, marked ``after_crash``."""
        doc = json.loads(json.dumps(self.to_json()))
        doc.pop("out", None)
        doc["case"] = cid
        for slot in ("fwd", "bwd"):
            part = doc.get(slot)
            if part is None:
                continue
            if slot == phase:
                doc[slot] = {
                    "ops": part.get("ops", []),
                    "status": part["status"],
                    "after_crash": self.case,
                    "why": f"{AFTER_CRASH.label}: case {self.case}: {part.get('why', '')}"[:300],
                }
                if part.get("raised"):
                    doc[slot]["raised"] = part["raised"]
            else:
                doc[slot] = {"ops": part.get("ops", [])}
        return CaseRecord.from_json(doc)

    def not_run(self) -> bool:
        """Whether this case was not run (``not_run_after``)."""
        return any((getattr(self, s) or {}).get("after_crash") for s in ("fwd", "bwd"))

    def to_json(self) -> dict:
        """The journal's layout: the steps that ran, no null ones."""
        doc = {
            "case": self.case,
            "group": self.group,
            "source": self.source,
            "dtype": self.dtype,
            "aten": list(self.aten),
        }
        if self.tier is not None:
            doc["tier"] = self.tier
        for slot in ("fwd", "out", "bwd"):
            part = getattr(self, slot)
            if part is not None:
                doc[slot] = part
        return doc

    @classmethod
    def from_json(cls, doc: dict) -> CaseRecord:
        return cls(
            doc["case"],
            doc["group"],
            doc["source"],
            doc["dtype"],
            list(doc["aten"]),
            doc.get("fwd"),
            doc.get("out"),
            doc.get("bwd"),
            doc.get("tier"),
        )

    def in_flight(self, phase: str) -> dict:
        """What the flight recorder holds while step ``phase`` runs: the record without its ``out``
        part (a case that dies after the out= check is filed as before, under its phase alone)."""
        doc = self.to_json()
        doc.pop("out", None)
        doc["phase"] = phase
        return doc

    @classmethod
    def from_flight(cls, state: dict) -> tuple[CaseRecord, str]:
        """(record, phase) from a flight state written by ``in_flight``. A state too large for the
        recorder keeps no parts (see ``Flight.write``); the record then has none."""
        state = dict(state)
        phase = state.pop("phase")
        return cls.from_json(state), phase
