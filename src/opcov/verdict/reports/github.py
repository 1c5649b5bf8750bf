"""GitHub Actions workflow commands: an ::error or ::warning annotation per problem op, then a notice."""

from __future__ import annotations

from opcov.verdict.reports import fixes, headline, problem_lines

LEVEL = {"fails": "error", "unknown": "warning", "fallback": "warning"}


def _escape(text: str) -> str:
    return text.replace("%", "%25").replace("\r", "%0D").replace("\n", "%0A")


def report(verdicts, model: dict) -> str:
    out = []
    for v in verdicts:
        for r in v.ops:
            level = LEVEL.get(r.outcome)
            if level:
                msg = "; ".join(problem_lines(r) + [f"fix: {x}" for x in fixes(r)])
                out.append(f"::{level} title=opcov {v.backend} {v.mode}: {r.op} {r.outcome}::"
                           f"{_escape(f'{r.op} ({r.calls} calls): {msg}')}")
        out.append(f"::notice title=opcov {model['name']} on {v.backend} ({v.mode}): {v.verdict}::"
                   f"{_escape(headline(v))}")
    return "\n".join(out) + "\n"
