"""Reporters for ``opcov check``: one module per output format, each with ``report(verdicts, model) -> str``.

``verdicts`` is a list of verdict.BackendVerdict (one per backend and mode);
``model`` is a short description of the op set (name, mode, dtype).
"""

from opcov import vocab

FORMATS = ("text", "json", "junit", "markdown", "github")


def render(fmt: str, verdicts, model: dict) -> str:
    from importlib import import_module

    module = {"json": "as_json"}.get(fmt, fmt)
    return import_module(f"opcov.verdict.reports.{module}").report(verdicts, model)


def headline(v) -> str:
    """'142 ops, 138 supported (97.2%); by calls 99.1%' as pre-flight tools print it."""
    if v.no_data:
        return f"no data yet: fill it with {v.no_data}"
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


DECIDING_SHOWN = 3  # ops named in a variant's sentence


def deciding(v, lead=None) -> list[str]:
    """The ops that decide verdict ``v``, one 'aten::bitwise_and.Tensor bool: no kernel' each: those whose
    outcome is the verdict's; with ``lead`` (the given inputs' verdict), those it does not already blame."""
    outcome = {verdict: o for o, verdict in vocab.VERDICT_OF.items()}.get(v.verdict)
    if outcome in (None, "ok"):
        return []
    blamed = {r.op for r in lead.ops if r.outcome == outcome} if lead is not None else set()
    rows = [r for r in v.ops if r.outcome == outcome]
    rows = [r for r in rows if r.op not in blamed] or rows
    out = []
    for r in rows:
        whys: dict = {}
        for f in r.findings:
            if f.outcome == outcome:
                whys.setdefault(f.why, set()).add(f.dtype)
        out += [
            f"{r.op} {','.join(sorted(d for d in dtypes if d))}: {why}".replace(" :", ":")
            for why, dtypes in whys.items()
        ]
    return out


def variant_line(other, lead) -> str:
    """'fails with a padded attention mask: aten::bitwise_and.Tensor bool: no kernel': another input
    variant's verdict and the ops that decide it."""
    ops = deciding(other, lead)
    shown = "; ".join(ops[:DECIDING_SHOWN]) + (
        f"; and {len(ops) - DECIDING_SHOWN} more" if len(ops) > DECIDING_SHOWN else ""
    )
    said = f"{other.says()} with {variant_label(other.variant)}"
    outcome = {verdict: o for o, verdict in vocab.VERDICT_OF.items()}.get(other.verdict)
    blamed = {r.op for r in lead.ops if r.outcome == outcome}
    if ops and all(r.op in blamed for r in other.ops if r.outcome == outcome):  # nothing the given inputs lack
        return f"{said}, on the same ops as with {variant_label(lead.variant)}: {shown}"
    return said + (f": {shown}" if shown else "")


def variants_said(v) -> str:
    """The verdict across input variants in one sentence: 'runs with the given inputs; fails with a
    padded attention mask: aten::bitwise_and.Tensor bool: no kernel'; '' where the op set records none."""
    if not v.variant:
        return ""
    return "; ".join(
        [f"{v.says()} with {variant_label(v.variant)}"] + [variant_line(o, v) for o in v.variants.values()]
    )


def variant_label(name: str) -> str:
    """'the given inputs', 'a padded attention mask' (vocab.INPUT_VARIANTS)."""
    word = vocab.INPUT_VARIANTS.get(name)
    return word.label if word else name
