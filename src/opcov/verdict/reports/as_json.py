"""JSON: everything the verdict knows, for other tools.

``verdict`` (runs, runs_with_fallback, runs_with_value_note, unknown, fails) and ``evidence`` (the level of opcov.vocab.EVIDENCE it
rests on, or none) are separate fields, on each verdict and each op. ``value_notes`` lists the
requirements that ran with values that differ from CPU's on a probe case (outcome ``value_note``): the model
runs, its results may differ.
"""

from __future__ import annotations

import json


def report(verdicts, model: dict) -> str:
    out = {"model": model, "verdicts": []}
    for v in verdicts:
        out["verdicts"].append(
            {
                "backend": v.backend,
                "mode": v.mode,
                "verdict": v.verdict,
                "evidence": v.evidence,
                "counts": v.counts(),
                "value_notes": [
                    {"op": op, "dtype": dtype, "direction": direction, "why": why}
                    for op, dtype, direction, why in v.value_notes()
                ],
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
