"""How 'opcov check' agrees with the observed runs under coverage/observed/ (opcov run).

Usage: python scripts/observed_agreement.py [COVERAGE] [--write-docs]   (default: coverage)

One line per observed run (every file under COVERAGE/observed/, every backend): the model, mode and
backend, what the run saw, the verdict 'opcov check' would give from coverage data alone (judged, as
check does, on the op set recorded on the backend's own device where one is kept; a run through
torch.compile, 'opcov run --path compile', by 'opcov check --path compile' on the compiled op set, and
counted as the backend's compile path) and whether it agrees (opcov.verdict.observed.agrees); then the
counts. The verdict check prints is the run's own
(evidence 'observed'): this measures the prediction. With --write-docs, the table goes to the
'observed-agreement' section of docs/accuracy.md. Torch-free.
"""

import argparse
import collections
import os
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "benchmarks"))

from opcov.errors import OpcovError  # noqa: E402
from opcov.store import observed as files  # noqa: E402 - after the path
from opcov.verdict import check, compiled, observed  # noqa: E402

WORDS = {True: "agrees", False: "DISAGREES", None: "unknown (claims nothing)"}


def saw(run: dict) -> str:
    """What the run saw, as the table's column: raised / values differ / through the CPU fallback / ran."""
    res, rec = run["result"], run.get("backend_record") or {}
    if not res["ran"]:
        return "raised"
    if not (res.get("values") or {}).get("match", True):
        return "values differ"
    if rec.get("fallback_ops"):
        return "ran, CPU fallback"
    return "ran, values match"


def measure(cov: str) -> list[dict]:
    """One row per observed run: backend, model, mode, what it saw, the verdict from coverage data."""
    rows = []
    for path in files.files(os.path.join(cov, files.FOLDER)):
        run = files.load(path)
        b, m, mode = run["backend"]["name"], run["model"]["name"], run["model"]["mode"]
        row = {"backend": b, "model": m, "mode": mode, "saw": saw(run), "run": run}
        if files.path_of(run) == files.COMPILE:
            rows.append(dict(row, backend=f"{b} (compile)", **_compiled_prediction(m, b, mode, cov, run)))
            continue
        opsets = check.find_opsets(m, [mode], cov)
        if not opsets:
            rows.append(dict(row, predicted=None, evidence=None, agrees=None, path=None))
            continue
        v = check.judge_opsets(opsets[:1], [b], cov, folder=m)[0][0]
        predicted = v.observed["predicted"] if v.observed else {"verdict": v.verdict, "evidence": v.evidence}
        own = bool(v.sources) and f"{os.sep}on{os.sep}" in v.sources[0]
        rows.append(
            dict(
                row,
                predicted=predicted["verdict"],
                evidence=predicted["evidence"],
                agrees=observed.agrees(predicted["verdict"], run, predicted.get("fallback_ops", ())),
                path="own path" if own else "stand-in path",
            )
        )
    return rows


def _compiled_prediction(model: str, backend: str, mode: str, cov: str, run: dict) -> dict:
    """What 'opcov check --path compile' says from coverage data of a model run through torch.compile."""
    try:
        (v,) = compiled.check(model, [backend], [mode], cov)
    except (OpcovError, ValueError):
        return {"predicted": None, "evidence": None, "agrees": None, "path": None}
    p = v.observed["predicted"] if v.observed else {"verdict": v.verdict, "evidence": v.evidence}
    agree = observed.agrees(p["verdict"], run, p.get("fallback_ops", ()))
    return {"predicted": p["verdict"], "evidence": p["evidence"], "agrees": agree, "path": "compiled op set"}


def line(r: dict) -> str:
    run = r["run"]
    if r["predicted"] is None:
        return f"{r['model']} {r['mode']} on {r['backend']}: no op set under models/: not judged"
    res = run["result"]
    said = "ran" if res["ran"] else f"raised ({res.get('error')})"
    if res["ran"]:
        said += ", values " + ("match" if (res.get("values") or {}).get("match") else "differ")
    fb = (run.get("backend_record") or {}).get("fallback_ops") or []
    said += f", fallback: {', '.join(fb) or 'none'}"
    return (
        f"{r['model']} {r['mode']} on {r['backend']}: run {said}; from coverage data ({r['path']}) "
        f"{r['predicted']} ({r['evidence']}): {WORDS[r['agrees']]}"
    )


def section(rows: list[dict]) -> tuple[str, str]:
    """(table, note) for the docs page: verdict from coverage data x what the run saw, per backend."""
    from docs_page import markdown_table

    cols = ["ran, values match", "ran, CPU fallback", "values differ", "raised"]
    out, notes = [], []
    for b in sorted({r["backend"] for r in rows}):
        mine = [r for r in rows if r["backend"] == b]
        counts = collections.Counter((r["predicted"] or "no op set", r["saw"]) for r in mine)
        verdicts = sorted({k[0] for k in counts})
        table = markdown_table(
            [f"verdict from coverage data \\ observed run on {b}", *cols],
            [[f"`{v}`", *(counts[(v, c)] for c in cols)] for v in verdicts],
        )
        out.append(table)
        judged = [r for r in mine if r["agrees"] is not None]
        agree = sum(1 for r in judged if r["agrees"])
        unknown = sum(1 for r in mine if r["agrees"] is None)
        models = len({r["model"] for r in mine})
        bad = [f"{r['model']} {r['mode']} ({r['predicted']}; run {r['saw']})" for r in judged if not r["agrees"]]
        notes.append(
            f"{b}: {len(mine)} observed runs ({models} models; {sum(r['run']['result']['ran'] for r in mine)} ran). "
            f"**{agree} of {len(judged)}** verdicts that claim something agree with the run; {unknown} claim nothing "
            f"(`unknown` or no op set)" + (f"; disagree: {', '.join(bad)}" if bad else "") + "."
        )
    return "\n\n".join(out), "\n\n".join(notes)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("coverage", nargs="?", default="coverage")
    ap.add_argument(
        "--write-docs", action="store_true", help="rewrite the 'observed-agreement' section of docs/accuracy.md"
    )
    args = ap.parse_args()
    rows = measure(args.coverage)
    counts = collections.Counter(WORDS[r["agrees"]] if r["predicted"] else "no op set" for r in rows)
    for r in rows:
        print(line(r))
    print(", ".join(f"{k}: {n}" for k, n in sorted(counts.items())) or "no observed runs")
    if args.write_docs and rows:
        from docs_page import ACCURACY, command_line, write_section

        table, note = section(rows)
        write_section(ACCURACY, "observed-agreement", table, command_line(), packages=(), note=note)


if __name__ == "__main__":
    main()
