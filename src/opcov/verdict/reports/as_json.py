"""JSON: everything the verdict knows, for other tools.

``verdict`` (runs, runs_with_fallback, runs_with_value_note, unknown, fails) and ``evidence`` (the level of
opcov.vocab.EVIDENCE it rests on, or none) are separate fields, on each verdict and each op. A verdict's
``verdict`` is the given inputs' (``variant: given``); ``variants`` maps every other input variant to its own
verdict, evidence and the ops that decide it. ``variant`` is null where the op set records no variants (judged
as one set). ``value_notes`` lists the requirements that ran with values that differ from CPU's on a probe case
(outcome ``value_note``): the model runs, its results may differ. ``observed`` is null, or the model's step
run on the device that decided the verdict (evidence ``observed``; opcov.verdict.observed.record), with the
verdict from coverage data in ``observed.predicted``.
"""

from __future__ import annotations

import json

from opcov.verdict.finding import fell_ops
from opcov.verdict.reports import deciding, variant_label, variants_said


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
                "value_notes": [
                    {"op": op, "dtype": dtype, "direction": direction, "why": why}
                    for op, dtype, direction, why in v.value_notes()
                ],
                "sources": v.sources,
                "notes": v.notes,
                "observed": v.observed,
                "variant": v.variant or None,
                "says": variants_said(v) or v.says(),
                "no_data": v.no_data or None,  # a known backend with no data yet: the commands that fill it
                "variants": {
                    name: {
                        "label": variant_label(name),
                        "verdict": other.verdict,
                        "evidence": other.evidence,
                        "says": other.says(),
                        "deciding": deciding(other, v),
                        "counts": other.counts(),
                    }
                    for name, other in v.variants.items()
                },
                "ops": [
                    {
                        "op": r.op,
                        "outcome": r.outcome,
                        "evidence": r.evidence,
                        "calls": r.calls,
                        "phases": sorted(r.phases),
                        "dtypes": sorted(r.dtypes),
                        "flags": r.flags,
                        "fell": _fell(r),
                        "findings": [f.__dict__ for f in r.findings],
                    }
                    for r in v.ops
                ],
            }
        )
    return json.dumps(out, indent=2, sort_keys=True) + "\n"


def _fell(r) -> list[str]:
    """The ops the backend's fallback counters named for an op judged ``fallback`` on its forward (the kernel the
    backend runs may be another than the op set's: cummin's ``_cummin_helper``); [] where none were named."""
    if r.outcome != "fallback":
        return []
    found = (fell_ops(f.why) for f in r.findings if f.outcome == "fallback" and f.direction == "forward")
    return sorted({op for ops in found for op in ops})
