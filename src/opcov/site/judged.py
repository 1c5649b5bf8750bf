"""The verdicts a site shows, as plain records: what its pages, badges, indexes, gaps and comparisons read of
each verdict, and nothing else.

Why: judging the zoo on every backend is most of a build's work (~9,000 verdicts of ~400,000 op results),
and pages read a few fields of each (the verdict, its evidence, counts, notes and problem ops). Made plain
(str, int, list, dict, tuple), the records are what opcov.site.kept keeps between builds, so that a build
whose data and code are unchanged judges nothing; every page is made from the records, judged now or kept.
"""

from __future__ import annotations

from typing import NamedTuple

from opcov import vocab
from opcov.store.parallel import is_site_key


class Verdict(NamedTuple):
    """One model x mode x backend verdict (a judge.BackendVerdict, as opcov check gives it) as the site reads it."""

    verdict: str
    evidence: str
    said: str  # BackendVerdict.says(): the verdict in words on its evidence
    counts: dict  # BackendVerdict.counts()
    sources: list
    notes: list
    variant: str  # the input variant it judges ('' where the op set records none)
    # the other input variants: {name, label, verdict, evidence, rest (its line after the verdict), deciding}
    variants: list
    # its problem ops, worst first: {op, outcome, evidence, calls, phases, flags, findings: [Finding as a dict]}
    problems: list
    blocking: list  # what it gives 'opcov gaps' (verdict.gaps.blocking)
    torch: str  # the torch version of the data it rests on

    def says(self) -> str:
        return self.said


class Compiled(NamedTuple):
    """One model x mode x backend verdict on the compile path (a compiled.CompiledVerdict) as the site reads it."""

    verdict: str
    evidence: str
    backend: str
    mode: str
    path: str  # the compiled op set
    compile_backend: str
    breaks: list
    why: str
    notes: list
    outcome: str
    observed: str  # the observed compiled run's summary, '' for none
    observed_file: str
    graphs: Verdict | None  # the compiled graphs' verdict on compile coverage
    eager: tuple | None  # (verdict, evidence) of the eager op set at the graph breaks
    eager_problems: int


class Judged(NamedTuple):
    """Every verdict of a site: ``eager`` (model, mode, backend) -> Verdict; ``compiled`` (model, mode,
    backend) -> Compiled, None (no compiled op set for the backend's compile backend) or a str (why that op set
    cannot be read); ``contrasts`` (a, b) -> what each op set judged on both contributes to comparing them
    (verdict.compare's contribution), in the site's order of models and modes."""

    eager: dict
    compiled: dict
    contrasts: dict


def problem(r) -> dict:
    """One problem op of a verdict (a judge.OpResult) as the model page and its JSON show it."""
    return {
        "op": r.op,
        "outcome": r.outcome,
        "evidence": r.evidence,
        "calls": r.calls,
        "phases": sorted(r.phases),
        "flags": list(r.flags),
        "findings": [dict(f.__dict__) for f in r.problems()],
    }


def verdict_record(v, torch: str) -> Verdict:
    """The Verdict of a judge.BackendVerdict ``v``, resting on data of torch ``torch``."""
    from opcov.verdict import gaps, reports

    variants = []
    for name, other in (getattr(v, "variants", None) or {}).items():
        label = reports.variant_label(name)
        line = reports.variant_line(other, v)
        head = f"{other.says()} with {label}"
        variants.append(
            {
                "name": name,
                "label": label,
                "verdict": other.verdict,
                "evidence": other.evidence,
                "rest": line[len(head) :] if line.startswith(head) else f": {line}",
                "deciding": reports.deciding(other, v),
            }
        )
    return Verdict(
        v.verdict,
        v.evidence,
        v.says(),
        v.counts(),
        list(v.sources),
        list(v.notes),
        getattr(v, "variant", "") or "",
        variants,
        [problem(r) for r in v.ops if r.outcome in vocab.PROBLEMS],
        gaps.blocking(v),
        torch,
    )


def compiled_record(cv):
    """The Compiled of a compiled.CompiledVerdict; None and a str (no op set, or why it cannot be read) as they are."""
    if cv is None or isinstance(cv, str):
        return cv
    return Compiled(
        cv.verdict,
        cv.evidence,
        cv.backend,
        cv.mode,
        cv.path,
        cv.compile_backend,
        list(cv.breaks),
        cv.why,
        list(cv.notes),
        cv.outcome,
        cv.observed["summary"] if cv.observed else "",
        cv.observed["file"] if cv.observed else "",
        verdict_record(cv.graphs, "") if cv.graphs is not None else None,
        (cv.eager.verdict, cv.eager.evidence) if cv.eager is not None else None,
        len([r for r in cv.eager.ops if r.outcome in vocab.PROBLEMS]) if cv.eager else 0,
    )


def judge_site(site) -> Judged:
    """Judge every op set of ``site`` on every backend with data, eager and compiled, as opcov check does
    (opcov.site.model.judge_models, judge_compiled_models), and contrast each pair of backends that are not
    controls op set by op set, as 'opcov compare A B --models zoo' does (on single-device op sets)."""
    from opcov.site import model as sitemodel
    from opcov.verdict import compare

    verdicts = sitemodel.judge_models(site)
    names = [b.name for b in site.backends if not b.control]
    contrasts: dict = {}
    memo: dict = {}  # each verdict's ops by name, once over every pair (compare.from_verdicts's memo)
    for i, a in enumerate(names):
        for b in names[i + 1 :]:
            contrasts[(a, b)] = [
                compare._contrast(
                    a,
                    b,
                    doc,
                    {x: (verdicts[(m.name, mode, x)], site.data_torch[(m.name, mode, x)]) for x in (a, b)},
                    memo,
                )
                for m in site.models
                for mode, (_, doc) in sorted(m.modes.items())
                if (m.name, mode, a) in verdicts and (m.name, mode, b) in verdicts and not is_site_key(mode)
            ]
    eager = {key: verdict_record(v, site.data_torch[key]) for key, v in verdicts.items()}
    compiled = {key: compiled_record(cv) for key, cv in sitemodel.judge_compiled_models(site).items()}
    return Judged(eager, compiled, contrasts)


def comparison(judged: Judged, a: str, b: str):
    """The compare.Comparison of ``a`` and ``b`` from their op sets' contrasts (compare.from_verdicts's)."""
    from opcov.verdict import compare

    return compare._collect(a, b, judged.contrasts[(a, b)])


def gaps_ranked(judged: Judged, backend: str) -> list[dict]:
    """The ops that block zoo models on ``backend``, ranked as 'opcov gaps' ranks them (verdict.gaps.tally)."""
    from opcov.verdict import gaps

    return gaps._ranked(
        (model, mode, v.blocking) for (model, mode, name), v in sorted(judged.eager.items()) if name == backend
    )


# ---------------------------------------------------------------- kept: as plain data (marshal)


def to_plain(judged: Judged) -> list:
    """``judged`` as str, int, list, dict and tuple only (marshal keeps them)."""
    return [
        {k: tuple(v) for k, v in judged.eager.items()},
        {k: _compiled_plain(c) for k, c in judged.compiled.items()},
        judged.contrasts,
    ]


def from_plain(data) -> Judged:
    """The Judged that ``to_plain`` gave ``data`` of."""
    eager, compiled, contrasts = data
    return Judged(
        {k: Verdict(*v) for k, v in eager.items()},
        {k: _compiled_back(c) for k, c in compiled.items()},
        contrasts,
    )


def _compiled_plain(c):
    """A Compiled as ('compiled', its fields as a tuple, the graphs' too); None and a str as they are."""
    if not isinstance(c, Compiled):
        return c
    return ("compiled", (*c[:-3], tuple(c.graphs) if c.graphs is not None else None, *c[-2:]))


def _compiled_back(c):
    if not isinstance(c, tuple):
        return c
    got = Compiled(*c[1])
    return got._replace(graphs=Verdict(*got.graphs) if got.graphs is not None else None)
