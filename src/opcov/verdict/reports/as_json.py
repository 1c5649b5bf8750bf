"""JSON: everything the verdict knows, for other tools.

``verdict`` (runs, runs_with_fallback, unknown, fails) and ``evidence`` (the level of opcov.vocab.EVIDENCE it
rests on, or none) are separate fields, on each verdict and each op.
"""

from __future__ import annotations

import json


def report(verdicts, model: dict) -> str:
    out: dict = {"model": model, "verdicts": []}
    for v in verdicts:
        out["verdicts"].append(
            {
                "backend": v.backend,
                "mode": v.mode,
                "verdict": v.verdict,
                "evidence": v.evidence,
                "counts": v.counts(),
                "sources": v.sources,
                "notes": v.notes,
                "ops": [
                    {
                        "op": r.op,
                        "outcome": r.outcome,
                        "evidence": r.evidence,
                        "calls": r.calls,
                        "phases": sorted(r.phases),
                        "dtypes": sorted(r.dtypes),
                        "flags": r.flags,
                        "findings": [f.__dict__ for f in r.findings],
                    }
                    for r in v.ops
                ],
            }
        )
    return json.dumps(out, indent=2, sort_keys=True) + "\n"
