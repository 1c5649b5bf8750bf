"""``opcov gaps BACKEND``: what a backend team should implement next.

Every op set under coverage/models/ is judged on the backend (the given inputs' calls, as ``opcov check``
judges them); ops that fail (or are unknown) are ranked by how many models they block, naming the models.
"""

from __future__ import annotations

import json
from typing import Any

from opcov.errors import UsageError
from opcov.store import layout, lineyaml, opset
from opcov.verdict import check, judge
from opcov.verdict.check import iter_opsets


def tally(judged) -> list[dict]:
    """Failing and unknown ops over (model, mode, BackendVerdict) triples, ranked: failing first, then
    by distinct models blocked (a model's two modes count once), modes blocked, calls, name.
    Each entry: op, outcome, models [(model, mode)...], model_count, calls, why [...]."""
    blocked: dict[tuple[str, str], dict] = {}
    for model, mode, v in judged:
        for r in v.ops:
            if r.outcome in ("fails", "unknown"):
                entry = blocked.setdefault(
                    (r.op, r.outcome), {"op": r.op, "outcome": r.outcome, "models": set(), "calls": 0, "why": set()}
                )
                entry["models"].add((model, mode))
                entry["calls"] += r.calls
                entry["why"].update(f.why for f in r.problems())
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


def rank(backend: str, coverage_dir: str, modes=None) -> list[dict]:
    files = layout.model_files(coverage_dir)
    if not files:
        raise UsageError(f"no model op sets under {coverage_dir}/models/: trace some with 'opcov zoo trace'")
    read, pool, listings = reader(), dict[Any, Any](), dict[Any, Any]()
    with judge.bulk():
        judged = [  # the given inputs' calls, as check's verdicts judge them (opset.as_given), on the op set
            # recorded on the backend itself where the model has one (check.own_path), as check judges it
            (
                doc["model"]["name"],
                doc["mode"],
                judge.judge(
                    opset.as_given(own),
                    judge.share(judge.coverage_for(own, backend, coverage_dir, read=read, listings=listings), pool),
                ),
            )
            for _path, doc in iter_opsets(files, modes)
            for own in ((check.own_path(doc, backend, coverage_dir) or (None, doc))[1],)
        ]
    ranked = tally(judged)
    for e in ranked:
        e["models"] = [f"{m} ({mode})" for m, mode in e["models"]]
    return ranked


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
