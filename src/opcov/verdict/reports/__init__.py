"""Reporters for ``opcov check``: one module per output format, each with ``report(verdicts, model) -> str``.

``verdicts`` is a list of verdict.BackendVerdict (one per backend and mode);
``model`` is a short description of the op set (name, mode, dtype).
"""

FORMATS = ("text", "json", "junit", "markdown", "github")


def render(fmt: str, verdicts, model: dict) -> str:
    from importlib import import_module

    module = {"json": "as_json"}.get(fmt, fmt)
    return import_module(f"opcov.verdict.reports.{module}").report(verdicts, model)


def headline(v) -> str:
    """'142 ops, 138 supported (97.2%); by calls 99.1%' as pre-flight tools print it."""
    c = v.counts()
    pct = 100.0 * c["ok"] / c["ops"] if c["ops"] else 100.0
    cpct = 100.0 * c["ok_calls"] / c["calls"] if c["calls"] else 100.0
    return (
        f"{c['ops']} ops, {c['ok']} supported ({pct:.1f}%; {cpct:.1f}% of {c['calls']} calls): "
        f"{c['ok_probed']} probed, {c['ok_registered']} registered-only"
        + (f", {c['ok_declared']} declared-only" if c.get("ok_declared") else "")
        + "; "
        f"{c['fails']} failing, {c['unknown']} unknown, {c['fallback']} on a fallback"
        + (f", {c['value_note']} with values that may differ from CPU" if c.get("value_note") else "")
        + (f"; {c['not_judged']} not judged" if c["not_judged"] else "")
    )


def problem_lines(r) -> list[str]:
    """One line per distinct (outcome, why) of an op, e.g. 'forward bfloat16: no kernel'."""
    out, seen = [], set()
    for f in r.problems():
        key = (f.direction, f.why)
        if key in seen:
            continue
        seen.add(key)
        dtypes = sorted({g.dtype for g in r.problems() if (g.direction, g.why) == key})
        out.append(f"{f.direction} {','.join(dtypes)}: {f.why}")
    return out


def fixes(r) -> list[str]:
    return sorted({f.fix for f in r.findings if f.fix and f.outcome != "ok"})
