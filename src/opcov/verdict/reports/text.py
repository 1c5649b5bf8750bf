"""Plain text for a terminal: a side-by-side table of backends, then each backend's problem ops."""

from __future__ import annotations

from opcov import vocab
from opcov.verdict.reports import fixes, headline, problem_lines, variant_label, variant_line

MARK = {**{o: w.short for o, w in vocab.OUTCOMES.items() if w.short}, vocab.NOT_JUDGED.name: vocab.NOT_JUDGED.short}
MARK_WIDTH = max(len(m) for m in MARK.values())


def report(verdicts, model: dict) -> str:
    lines = [f"opcov check: {model['name']} ({model['describe']})", ""]
    rows = [
        (
            "backend",
            "mode",
            "verdict",
            "evidence",
            "ops",
            "supported",
            "calls",
            "probed",
            "registered",
            "unknown",
            "fallback",
            "failing",
        )
    ]
    for v in verdicts:
        if v.no_data:  # a known backend with no data yet: nothing counted, the notes say what fills it
            rows.append((v.backend, v.mode, "no_data_yet", "-", *["-"] * 8))
            continue
        c = v.counts()
        rows.append(
            (
                v.backend,
                v.mode,
                v.verdict,
                vocab.evidence_word(v.evidence).short.replace(" ", "_"),
                str(c["ops"]),
                f"{100.0 * c['ok'] / c['ops'] if c['ops'] else 100:.1f}%",
                f"{100.0 * c['ok_calls'] / c['calls'] if c['calls'] else 100:.1f}%",
                str(c["ok_probed"]),
                str(c["ok_registered"]),
                str(c["unknown"]),
                str(c["fallback"]),
                str(c["fails"]),
            )
        )
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    for row in rows:
        lines.append("  ".join(cell.ljust(w) for cell, w in zip(row, widths)).rstrip())
    for v in verdicts:
        said = vocab.VERDICTS[v.verdict].label.upper() + vocab.verdict_qualifier(v.verdict, v.evidence)
        if v.value_notes():
            said += f" (values may differ from CPU: {v.value_note_text()})"
        if v.no_data:
            lines += ["", f"{v.backend} ({v.mode}): NO DATA YET"] + [f"  note: {note}" for note in v.notes]
            continue
        lines += ["", f"{v.backend} ({v.mode}): {said}: {headline(v)}"]
        for r in v.ops:
            if r.outcome in ("ok", "not_judged"):
                continue
            lines.append(
                f"  {MARK[r.outcome].ljust(MARK_WIDTH)}  {r.op}  x{r.calls} ({', '.join(sorted(r.phases))}; "
                f"{vocab.evidence_name(r.evidence)})"
            )
            for why in problem_lines(r):
                lines.append(f"          {why}")
            for fix in fixes(r):
                lines.append(f"          fix: {fix}")
        skipped = [r.op for r in v.ops if r.outcome == "not_judged"]
        if skipped:
            lines.append(f"  not judged (outside the data: custom namespaces, collectives): {', '.join(skipped)}")
        flagged = [r.op for r in v.ops if r.flags]
        if flagged:
            lines.append(f"  may force a host sync (data-dependent shape or value): {', '.join(flagged)}")
        for note in v.notes:
            lines.append(f"  note: {note}")
        if v.variants:
            lines.append(
                f"  input variants: the verdict above is {variant_label(v.variant)}'; each variant opcov added "
                "is judged apart (--variants all gates on them too):"
            )
            lines += [f"    {variant_line(other, v)}" for other in v.variants.values()]
        lines.append(f"  data: {', '.join(v.sources)}")
    return "\n".join(lines) + "\n"
