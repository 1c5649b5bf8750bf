"""``opcov compare A B``: what backend A lacks that B has, and the reverse, ranked by models affected.

Users choosing or migrating hardware ask "what does tpu lack that cuda has?". A catalogue-wide
diff of two scans answers a different question (most of ~3,700 overloads no model calls), so
both backends are judged on the same model op sets (coverage/models/, as ``gaps`` and the site
do, through ``verdict.judge``) and compared op by op: an op one backend runs and the other does
worse (fails, unknown, or runs only through a CPU fallback where the other has a kernel) is a
difference. Ops judged on one backend only (a parent such as aten::linear that one backend
overrides) are not compared.

Each difference is filed under the evidence it rests on, the weaker of its two sides' (opcov.vocab's
ladder): between two probes it was measured; where either side is a registration it is a claim.
Torch-free: it reads saved data only.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field

from opcov import vocab
from opcov.activity import activity
from opcov.errors import UsageError
from opcov.store import layout, opset
from opcov.verdict import gaps, judge
from opcov.verdict.kept import Kept, committed

ZOO = "zoo"  # --models: every op set under coverage/models/
RUNS = ("ok", "fallback", "value_note")  # outcomes that say an op runs
_SECTIONS = vocab.EVIDENCE_LEVELS + (vocab.NO_EVIDENCE.name,)  # strongest first


@dataclass
class Difference:
    """One op that ``lacking`` lacks and ``having`` has, on one evidence level, over the op sets it matters to."""

    op: str
    lacking: str
    having: str
    evidence: str
    outcomes: set = field(default_factory=set)  # the lacking backend's outcomes (fails, unknown, fallback)
    other: set = field(default_factory=set)  # the having backend's (ok, fallback)
    models: set = field(default_factory=set)  # (model, mode)
    calls: int = 0
    why: set = field(default_factory=set)  # the lacking backend's reasons

    @property
    def outcome(self) -> str:
        return vocab.worst(self.outcomes, judge.OUTCOMES)

    @property
    def other_outcome(self) -> str:
        return vocab.worst(self.other, judge.OUTCOMES)

    @property
    def model_count(self) -> int:
        return len({m for m, _ in self.models})

    @property
    def absent(self) -> bool:
        """Whether the op does not exist in the lacking backend's torch (its data is of another release)."""
        return any(w.startswith(judge.NOT_IN_TORCH) for w in self.why)


@dataclass
class Comparison:
    a: str
    b: str
    opsets: int
    modes: dict  # model -> set of modes judged
    sources: dict  # backend -> sorted coverage files used
    torch: dict  # backend -> sorted torch versions of its data
    opset_torch: list  # torch versions the op sets were traced with
    lacks: dict  # backend -> [Difference], ranked


def _weaker(x: str, y: str) -> str:
    return x if vocab.weaker(x, y) else y


def _select(files: list[str], models) -> list[str]:
    """The op-set files of the wanted models (by their folder, coverage/models/<model>/<mode>.yaml);
    unknown model names are a UsageError. Modes are picked once each file is read."""
    if not models:
        return files
    folder = {p: os.path.basename(os.path.dirname(p)) for p in files}
    have = set(folder.values())
    unknown = sorted(set(models) - have)
    if unknown:
        raise UsageError(
            f"--models: no op sets for {', '.join(unknown)} under the coverage folder's "
            f"{layout.MODELS}/ (there are {len(have)}; see 'opcov zoo list')"
        )
    return [p for p in files if folder[p] in models]


def parse_models(value: str | None) -> list[str] | None:
    """``--models``: 'zoo' (or nothing) for every op set, else comma-separated model names."""
    if value is None or value.strip() == ZOO:
        return None
    names = [n.strip() for n in value.split(",") if n.strip()]
    if not names:
        raise UsageError(f"--models {value!r}: give '{ZOO}' or comma-separated model names")
    return names


def compare(
    a: str, b: str, coverage_dir: str, *, models=None, modes=None, fork: bool | None = None, cache: bool = True
) -> Comparison:
    """Judge every selected op set on ``a`` and ``b`` and collect the ops one runs and the other does not.

    Each coverage file is read once, whole, before any op set is judged, and the Coverages made from
    the same documents share their judgments (judge.share, as gaps and the site do): reading per op
    set and backend parsed the same files thousands of times (~40 s over the bundled zoo). The op sets
    are read and judged item by item by this process and, where a core is idle, a forked child
    (opcov.forked, as the site build reads the zoo); each hands back only the ops where the two
    backends differ. ``fork``: None decides by the idle cores, False never forks.

    What each op set contributes is kept between runs (``kept.Kept``, in the user's cache folder) while the
    op set, every other file under the coverage folder and opcov's own code are unchanged: judging the
    bundled zoo again (~1,500 op sets on two backends, ~10 s of work) is the whole cost of a run, and
    a run that changes nothing gives the same answer. A first run reads the contributions committed
    with the data (``kept.committed``) where they are fresh. ``cache=False`` reads and writes neither:
    every op set is judged."""
    if a == b:
        raise UsageError(f"compare needs two different backends, not {a!r} twice")
    files = layout.model_files(coverage_dir)
    if not files:
        raise UsageError(f"no model op sets under {layout.models_dir(coverage_dir)}: trace some with 'opcov zoo trace'")
    paths = _select(files, models)
    kept = Kept(f"compare-{a}-{b}", coverage_dir, paths) if cache else None
    done = kept.reuse(modes) if kept is not None else {}
    todo = [p for p in paths if p not in done]
    if todo and cache:
        done.update(committed(question(a, b), coverage_dir, todo, relocate))
        todo = [p for p in paths if p not in done]
    if todo:
        done.update(judged(a, b, coverage_dir, todo, modes, fork))
        if kept is not None:
            kept.save(done, sources)
    rows = [done[p][1] for p in paths if done[p][1] is not None and not (modes and done[p][0] not in modes)]
    if not rows:
        raise UsageError(f"no op sets for mode {', '.join(modes or ())} under {layout.models_dir(coverage_dir)}")
    return _collect(a, b, rows)


def question(a: str, b: str) -> str:
    """The name of the answers committed for comparing ``a`` and ``b``, either way round (kept.committed):
    an op set's contribution holds both backends' sides, and ``_collect`` reads it the same in either order."""
    return "compare-" + "-".join(sorted((a, b)))


def judged(a: str, b: str, coverage_dir: str, paths: list[str], modes=None, fork: bool | None = None) -> dict:
    """path -> (mode, ``_contrast``) of each op set ``paths`` judged on ``a`` and ``b``, None for an op set of
    a mode not in ``modes``. The coverage files are read once by the first op set, before a forked child
    (``fork``: None decides by the idle cores, False never) judges some of the rest."""
    from opcov import forked

    read = gaps.reader()
    pool: dict = {}
    listings: dict = {}

    def one(path: str):
        doc = opset.load(path)
        if modes and doc["mode"] not in modes:
            return (doc["mode"], None)
        verdicts = {}
        names = judge.needed_ops(doc)  # once for both backends: it walks the whole call tree
        for backend in (a, b):
            cov = judge.coverage_for(doc, backend, coverage_dir, read=read, listings=listings, names=names)
            cov = judge.share(cov, pool)
            verdicts[backend] = (judge.judge(doc, cov), cov.torch)
        return (doc["mode"], _contrast(a, b, doc, verdicts, {}))

    done = {}
    with activity(f"judging {len(paths)} op sets on {a} and {b}"), judge.bulk():
        done[paths[0]] = one(paths[0])  # reads the coverage files here, so that a forked child has them already
        if fork is None:
            fork = len(paths) >= 200 and forked.spare_core()
        done.update(zip(paths[1:], forked.split_map(one, paths[1:], fork=fork and forked.can_fork())))
    return done


def sources(contrast) -> list[str]:
    """The coverage files a contribution (``_contrast``) rests on, both backends'."""
    return [s for used, _torch in contrast[3].values() for s in used]


def relocate(contrast, fn) -> list:
    """The contribution with ``fn`` applied to each of its source paths."""
    name, mode, opset_torch, meta, rows = contrast
    return [name, mode, opset_torch, {k: [[fn(s) for s in used], torch] for k, (used, torch) in meta.items()}, rows]


def from_verdicts(a: str, b: str, judged, memo: dict | None = None) -> Comparison:
    """The Comparison of verdicts already made: ``judged`` yields (op set, {backend: (BackendVerdict,
    torch version of the data it rests on)}) for ``a`` and ``b`` (the site passes the verdicts it shows).
    ``memo``: a dict kept while the verdicts live, where each verdict's ops by name are worked out once
    over several comparisons (the site compares every pair of backends)."""
    memo = {} if memo is None else memo
    return _collect(a, b, [_contrast(a, b, doc, verdicts, memo) for doc, verdicts in judged])


def _contrast(a: str, b: str, doc: dict, verdicts: dict, memo: dict) -> tuple:
    """What one op set's two verdicts contribute, as small plain data (a forked child pickles it back):
    (model, mode, op set's torch, {backend: (sources, torch)}, [(lacking, having, op, evidence, lacked
    outcome, had outcome, calls, whys)])."""
    results, meta = {}, {}
    for backend in (a, b):
        verdict, torch = verdicts[backend]
        meta[backend] = (tuple(verdict.sources), torch)
        by_op = memo.get(id(verdict))
        if by_op is None or by_op[0] is not verdict:
            by_op = memo[id(verdict)] = (verdict, {r.op: (r, r.outcome) for r in verdict.ops})  # outcome: per call
        results[backend] = by_op[1]
    rows = []
    for op in sorted(results[a].keys() & results[b].keys()):
        (ra, oa), (rb, ob) = results[a][op], results[b][op]
        if oa == ob:
            continue
        for lack, have, lacked, had in ((ra, rb, oa, ob), (rb, ra, ob, oa)):
            if had not in RUNS or lacked not in judge.OUTCOMES:
                continue
            if judge.OUTCOMES.index(lacked) >= judge.OUTCOMES.index(had):
                continue  # not worse
            lacking, having = (a, b) if lack is ra else (b, a)
            evidence = _weaker(lack.evidence, have.evidence)
            rows.append((lacking, having, op, evidence, lacked, had, lack.calls, tuple(f.why for f in lack.problems())))
    return doc["model"]["name"], doc["mode"], judge.opset_torch(doc), meta, rows


def _collect(a: str, b: str, contrasts: list) -> Comparison:
    """The Comparison of the op sets' ``_contrast``s."""
    found: dict[tuple[str, str, str], Difference] = {}
    sources: dict[str, set[str]] = {a: set(), b: set()}
    torches: dict[str, set[str]] = {a: set(), b: set()}
    judged_modes: dict[str, set] = {}
    opset_torches = set()
    for name, mode, opset_torch, meta, rows in contrasts:
        opset_torches.add(opset_torch)
        judged_modes.setdefault(name, set()).add(mode)
        for backend, (used, torch) in meta.items():
            sources[backend].update(used)
            torches[backend].add(torch)
        for lacking, having, op, evidence, lacked, had, calls, whys in rows:
            d = found.setdefault((lacking, op, evidence), Difference(op, lacking, having, evidence))
            d.outcomes.add(lacked)
            d.other.add(had)
            d.models.add((name, mode))
            d.calls += calls
            d.why.update(whys)
    lacks = {backend: sorted((d for d in found.values() if d.lacking == backend), key=_rank) for backend in (a, b)}
    return Comparison(
        a,
        b,
        len(contrasts),
        judged_modes,
        {k: sorted(v) for k, v in sources.items()},
        {k: sorted(v) for k, v in torches.items()},
        sorted(opset_torches),
        lacks,
    )


def _rank(d: Difference):
    """Most models first, then most (model, mode) pairs, the worst outcome, most calls, the name."""
    return (-d.model_count, -len(d.models), judge.OUTCOMES.index(d.outcome), -d.calls, d.op)


def model_names(d: Difference, modes: dict) -> list[str]:
    """'llama' where every judged mode of the model is affected, else 'llama (training)'."""
    by_model: dict[str, set] = {}
    for m, mode in d.models:
        by_model.setdefault(m, set()).add(mode)
    return [
        m if affected == modes.get(m, affected) else f"{m} ({', '.join(sorted(affected))})"
        for m, affected in sorted(by_model.items(), key=lambda kv: kv[0])
    ]


# ---------------------------------------------------------------- output


def as_dict(c: Comparison) -> dict:
    """The comparison as plain data (``--format json``)."""

    def entry(d: Difference) -> dict:
        return {
            "op": d.op,
            "evidence": d.evidence,
            "outcome": d.outcome,
            "other_outcome": d.other_outcome,
            "model_count": d.model_count,
            "models": model_names(d, c.modes),
            "opsets": [f"{m} ({mode})" for m, mode in sorted(d.models)],
            "calls": d.calls,
            "why": sorted(d.why),
            "absent": d.absent,
        }

    return {
        "a": c.a,
        "b": c.b,
        "opsets": c.opsets,
        "models": len(c.modes),
        "sources": c.sources,
        "torch": c.torch,
        "opset_torch": c.opset_torch,
        "lacks": {backend: [entry(d) for d in ds] for backend, ds in c.lacks.items()},
    }


def by_evidence(ds: list) -> list[tuple[str, str, list]]:
    """(level, title, differences) per evidence level, strongest first, of the levels that have some."""
    return [
        (level, _section_title(level), [d for d in ds if d.evidence == level])
        for level in _SECTIONS
        if any(d.evidence == level for d in ds)
    ]


def _section_title(level: str) -> str:
    if level == "probed":
        return "measured (probed on both backends)"
    if level == vocab.NO_EVIDENCE.name:
        return "no evidence on one side (the op is not in that backend's data)"
    return f"a claim ({vocab.evidence_word(level).label} on at least one side)"


def render_text(c: Comparison) -> str:
    lines = [
        f"opcov compare {c.a} {c.b}: {c.opsets} model op set(s) of {len(c.modes)} model(s) judged on both "
        f"(traced with torch {', '.join(c.opset_torch)})"
    ]
    for backend in (c.a, c.b):
        lines.append(f"  {backend}: torch {', '.join(c.torch[backend])}; {', '.join(c.sources[backend])}")
    for lacking, having in ((c.a, c.b), (c.b, c.a)):
        ds = c.lacks[lacking]
        lines += ["", f"{lacking} lacks what {having} has: {len(ds)} op(s), ranked by models affected"]
        if not ds:
            lines.append(f"  (nothing: every op these models need that runs on {having} runs on {lacking} too)")
        for _level, title, in_level in by_evidence(ds):
            lines.append(f"  {title}: {len(in_level)} op(s)")
            for d in in_level:
                n = d.model_count
                absent = f" (no such op in torch {', '.join(c.torch[lacking])})" if d.absent else ""
                lines.append(
                    f"    {n:3d} model{'s' if n != 1 else ' '}  {d.op}  {lacking}: "
                    f"{vocab.OUTCOMES[d.outcome].label}{absent}, {having}: "
                    f"{vocab.OUTCOMES[d.other_outcome].label}  [{', '.join(model_names(d, c.modes))}]"
                )
    return "\n".join(lines) + "\n"


def render(c: Comparison, fmt: str = "text") -> str:
    if fmt == "json":
        return json.dumps(as_dict(c), indent=2, sort_keys=True) + "\n"
    return render_text(c)
