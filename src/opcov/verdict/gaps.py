"""``opcov gaps BACKEND``: what a backend team should implement next.

Every op set under coverage/models/ is judged on the backend (the given inputs' calls, as ``opcov check``
judges them); ops that fail (or are unknown) are ranked by how many models they block, naming the models.
"""

from __future__ import annotations

import json
from typing import Any

from opcov.activity import activity
from opcov.errors import UsageError
from opcov.store import layout, lineyaml, opset
from opcov.verdict import check, judge
from opcov.verdict.kept import Kept, committed


def tally(judged) -> list[dict]:
    """Failing and unknown ops over (model, mode, BackendVerdict) triples, ranked: failing first, then
    by distinct models blocked (a model's two modes count once), modes blocked, calls, name.
    Each entry: op, outcome, models [(model, mode)...], model_count, calls, why [...]."""
    return _ranked((model, mode, blocking(v)) for model, mode, v in judged)


def blocking(verdict) -> list:
    """[op, outcome, calls, [why...]] of each op that fails or is unknown in ``verdict``: what a verdict
    gives gaps (small plain data, kept between runs)."""
    return [
        [r.op, r.outcome, r.calls, sorted({f.why for f in r.problems()})]
        for r in verdict.ops
        if r.outcome in ("fails", "unknown")
    ]


def _ranked(rows) -> list[dict]:
    """tally's ranking over (model, mode, blocking rows)."""
    blocked: dict[tuple[str, str], dict] = {}
    for model, mode, ops in rows:
        for op, outcome, calls, whys in ops:
            entry = blocked.setdefault(
                (op, outcome), {"op": op, "outcome": outcome, "models": set(), "calls": 0, "why": set()}
            )
            entry["models"].add((model, mode))
            entry["calls"] += calls
            entry["why"].update(whys)
    for e in blocked.values():
        e["models"], e["why"] = sorted(e["models"]), sorted(e["why"])
        e["model_count"] = len({m for m, _ in e["models"]})
    return sorted(
        blocked.values(),
        key=lambda e: (e["outcome"] != "fails", -e["model_count"], -len(e["models"]), -e["calls"], e["op"]),
    )


def reader():
    """A ``read`` for judge.coverage_for that reads each coverage file once, whole (as the site does: a
    superset of the ops an op set needs judges it the same; ~0.2 s a file), so that the Coverages of
    every op set share documents and so their judgments (judge.share)."""
    docs: dict[str, dict] = {}

    def read(path: str, _names) -> dict:
        if path not in docs:
            docs[path] = lineyaml.load(path, summary=False)
        return docs[path]

    return read


def rank(backend: str, coverage_dir: str, modes=None, cache: bool = True) -> list[dict]:
    """The ops that block zoo models on ``backend``, ranked (tally). Each op set is judged on the given
    inputs' calls, as check's verdicts judge them (opset.as_given), on the op set recorded on the backend
    itself where the model has one (check.own_path), as check judges it. What each op set contributes is
    kept between runs in the user's cache folder (kept.Kept, as compare keeps its own) while nothing it
    rests on changed: a run after one that changed nothing reads no op set; a first run reads what the
    answers committed with the data hold (kept.committed) where they are fresh. ``cache=False`` reads
    and writes neither: every op set is judged."""
    files = layout.model_files(coverage_dir)
    if not files:
        raise UsageError(f"no model op sets under {coverage_dir}/models/: trace some with 'opcov zoo trace'")
    kept = Kept(question(backend), coverage_dir, files) if cache else None
    done = kept.reuse(modes) if kept is not None else {}
    todo = [p for p in files if p not in done]
    if todo and cache:
        done.update(committed(question(backend), coverage_dir, todo, relocate))
        todo = [p for p in files if p not in done]
    if todo:
        done.update(judged(backend, coverage_dir, todo, modes))
        if kept is not None:
            kept.save(done, sources)
    rows = [
        (c[0], mode, c[2])
        for mode, c in (done[p] for p in files)
        if c is not None and not (modes and mode not in modes)
    ]
    ranked = _ranked(rows)
    for e in ranked:
        e["models"] = [f"{m} ({mode})" for m, mode in e["models"]]
    return ranked


def question(backend: str) -> str:
    """The name of gaps' answers for ``backend`` (kept.Kept, kept.committed)."""
    return f"gaps-{backend}"


def judged(backend: str, coverage_dir: str, paths: list[str], modes=None) -> dict:
    """path -> (mode, contribution) of each op set ``paths`` judged on ``backend``: [model, the coverage
    files the verdict rests on, ``blocking``], or None for an op set of a mode not in ``modes``."""
    done: dict[str, tuple] = {}
    read, pool, listings = reader(), dict[Any, Any](), dict[Any, Any]()
    with activity(f"judging {len(paths)} op sets on {backend}"), judge.bulk():
        for path in paths:
            doc = opset.load(path)
            if modes and doc["mode"] not in modes:
                done[path] = (doc["mode"], None)
                continue
            own = (check.own_path(doc, backend, coverage_dir) or (None, doc))[1]
            cov = judge.share(judge.coverage_for(own, backend, coverage_dir, read=read, listings=listings), pool)
            v = judge.judge(opset.as_given(own), cov)
            done[path] = (doc["mode"], [doc["model"]["name"], list(v.sources), blocking(v)])
    return done


def sources(contribution) -> list[str]:
    """The coverage files a contribution rests on."""
    return contribution[1]


def relocate(contribution, fn) -> list:
    """The contribution with ``fn`` applied to each of its source paths."""
    return [contribution[0], [fn(s) for s in contribution[1]], contribution[2]]


def render(ranked: list[dict], backend: str, top: int, fmt: str = "text") -> str:
    if fmt == "json":
        return json.dumps(ranked[:top], indent=2, sort_keys=True) + "\n"
    fails = [e for e in ranked if e["outcome"] == "fails"]
    lines = [
        f"opcov gaps {backend}: {len(fails)} failing op(s), {len(ranked) - len(fails)} unknown; "
        f"ranked by zoo models blocked (model op sets in coverage/models/)",
        "",
    ]
    for e in ranked[:top]:
        lines.append(
            f"  {e['model_count']:3d} model{'s' if e['model_count'] != 1 else ' '}  {e['outcome']:7s}  "
            f"{e['op']}  ({e['calls']} call{'s' if e['calls'] != 1 else ''})"
        )
        lines.append(
            f"               why: {e['why'][0]}" + (f" (+{len(e['why']) - 1} more)" if len(e["why"]) > 1 else "")
        )
        lines.append(f"               blocks: {', '.join(e['models'])}")
    if len(ranked) > top:
        lines.append(f"  ... {len(ranked) - top} more (--top N)")
    return "\n".join(lines) + "\n"
