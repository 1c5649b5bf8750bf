"""GitHub Actions workflow commands: an ::error or ::warning annotation per problem op, then a notice."""

from __future__ import annotations

from opcov import vocab
from opcov.verdict.reports import fixes, headline, problem_lines, variant_line

LEVEL = {"fails": "error", "unknown": "warning", "value_note": "warning", "fallback": "warning"}


def _escape(text: str) -> str:
    return text.replace("%", "%25").replace("\r", "%0D").replace("\n", "%0A")


def _escape_property(text: str) -> str:
    """A property value (title=...): ':' and ',' end it unless escaped (op names hold '::')."""
    return _escape(text).replace(":", "%3A").replace(",", "%2C")


def report(verdicts, model: dict) -> str:
    out = []
    for v in verdicts:
        for r in v.ops:
            level = LEVEL.get(r.outcome)
            if level:
                msg = "; ".join(problem_lines(r) + [f"fix: {x}" for x in fixes(r)])
                title = f"opcov {v.backend} {v.mode}: {r.op} {vocab.verdict_words(r.outcome, r.evidence)}"
                out.append(
                    f"::{level} title={_escape_property(title)}::"
                    f"{_escape(f'{r.op} ({r.calls} calls, {vocab.evidence_name(r.evidence)}): {msg}')}"
                )
        for other in v.variants.values():
            if other.verdict != "runs":
                title = f"opcov {v.backend} {v.mode}: {variant_line(other, v).split(':')[0]}"
                out.append(f"::warning title={_escape_property(title)}::{_escape(variant_line(other, v))}")
        title = f"opcov {model['name']} on {v.backend} ({v.mode}): {v.says()}"
        out.append(f"::notice title={_escape_property(title)}::{_escape(headline(v))}")
    return "\n".join(out) + "\n"
