"""Markdown for a pull-request comment or a CI step summary."""

from __future__ import annotations

from opcov import vocab
from opcov.verdict.reports import fixes, headline, problem_lines

ICON = {v: f"{w.icon} {w.label}" for v, w in vocab.VERDICTS.items()}


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def report(verdicts, model: dict) -> str:
    out = [f"### opcov check: `{model['name']}` ({model['describe']})", "",
           "| backend | mode | verdict | summary |", "|---|---|---|---|"]
    for v in verdicts:
        out.append(f"| {v.backend} | {v.mode} | {ICON[v.verdict]} | {_cell(headline(v))} |")
    for v in verdicts:
        problems = [r for r in v.ops if r.outcome in ("fails", "unknown", "fallback")]
        if not problems:
            continue
        out += ["", f"<details><summary>{v.backend} ({v.mode}): {len(problems)} problem op(s)</summary>", "",
                "| op | outcome | calls | why | fix |", "|---|---|---|---|---|"]
        for r in problems:
            out.append(f"| `{r.op}` | {r.outcome} | {r.calls} | {_cell('; '.join(problem_lines(r)))} | "
                       f"{_cell('; '.join(fixes(r)))} |")
        out += ["", "</details>"]
    flagged = sorted({r.op for v in verdicts for r in v.ops if r.flags})
    if flagged:
        out += ["", "May force a host sync (data-dependent shape or value): " + ", ".join(f"`{o}`" for o in flagged)]
    notes = sorted({n for v in verdicts for n in v.notes})
    out += [""] + [f"- {n}" for n in notes]
    return "\n".join(out) + "\n"
