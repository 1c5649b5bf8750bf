"""Markdown for a pull-request comment or a CI step summary."""

from __future__ import annotations

from opcov import vocab
from opcov.verdict.reports import fixes, headline, problem_lines, variants_said


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def said(verdict: str, evidence: str) -> str:
    """'✓ runs' on probed evidence; a run on a claim gets its level's icon: '○ runs (registered, unverified)'."""
    return f"{vocab.verdict_icon(verdict, evidence)} {vocab.verdict_words(verdict, evidence)}"


def level(evidence: str) -> str:
    word = vocab.evidence_word(evidence)
    return f"{word.icon} {word.short}"


def report(verdicts, model: dict) -> str:
    out = [
        f"### opcov check: `{model['name']}` ({model['describe']})",
        "",
        "| backend | mode | verdict | evidence | summary |",
        "|---|---|---|---|---|",
    ]
    for v in verdicts:
        out.append(
            f"| {v.backend} | {v.mode} | {said(v.verdict, v.evidence)} | {level(v.evidence)} | {_cell(headline(v))} |"
        )
    said_apart = [f"- {v.backend} ({v.mode}): {variants_said(v)}" for v in verdicts if v.variants]
    if said_apart:
        out += ["", "Input variants opcov added are judged apart (the table is the given inputs'):"] + said_apart
    for v in verdicts:
        problems = [r for r in v.ops if r.outcome in vocab.PROBLEMS]
        if not problems:
            continue
        out += [
            "",
            f"<details><summary>{v.backend} ({v.mode}): {len(problems)} problem op(s)</summary>",
            "",
            "| op | outcome | evidence | calls | why | fix |",
            "|---|---|---|---|---|---|",
        ]
        for r in problems:
            out.append(
                f"| `{r.op}` | {r.outcome} | {level(r.evidence)} | {r.calls} | "
                f"{_cell('; '.join(problem_lines(r)))} | {_cell('; '.join(fixes(r)))} |"
            )
        out += ["", "</details>"]
    flagged = sorted({r.op for v in verdicts for r in v.ops if r.flags})
    if flagged:
        out += ["", "May force a host sync (data-dependent shape or value): " + ", ".join(f"`{o}`" for o in flagged)]
    notes = sorted({n for v in verdicts for n in v.notes})
    out += [""] + [f"- {n}" for n in notes]
    out += [
        f"- {level(e)}: {meaning}"
        for e, meaning in vocab.EVIDENCE_MEANING.items()  # the claims shown
        if e != "probed" and any(v.evidence == e for v in verdicts)
    ]
    return "\n".join(out) + "\n"
