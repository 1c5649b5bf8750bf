"""How 'opcov check' agrees with the observed runs under coverage/observed/ (opcov run).

Usage: python scripts/observed_agreement.py [COVERAGE]   (default: coverage)

One line per observed run: the model, mode and backend, what the run saw, the verdict 'opcov check'
would give from coverage data alone (judged, as check does, on the op set recorded on the backend's own
device where one is kept) and whether it agrees (opcov.verdict.observed.agrees); then the counts. The
verdict check prints is the run's own (evidence 'observed'): this measures the prediction. Torch-free.
"""

import collections
import os
import sys

from opcov.store import observed as files
from opcov.verdict import check, observed


def main() -> None:
    cov = sys.argv[1] if len(sys.argv) > 1 else "coverage"
    counts = collections.Counter()
    for path in files.files(os.path.join(cov, files.FOLDER)):
        run = files.load(path)
        b, m, mode = run["backend"]["name"], run["model"]["name"], run["model"]["mode"]
        opsets = check.find_opsets(m, [mode], cov)
        if not opsets:
            print(f"{m} {mode} on {b}: no op set in {cov}/models: not judged")
            counts["no op set"] += 1
            continue
        v = check.judge_opsets(opsets[:1], [b], cov, folder=m)[0][0]
        predicted = v.observed["predicted"] if v.observed else {"verdict": v.verdict, "evidence": v.evidence}
        agree = observed.agrees(predicted["verdict"], run)
        word = {True: "agrees", False: "DISAGREES", None: "unknown (claims nothing)"}[agree]
        res = run["result"]
        saw = "ran" if res["ran"] else "raised"
        if res["ran"]:
            saw += ", values " + ("match" if (res.get("values") or {}).get("match") else "differ")
        fb = (run.get("backend_record") or {}).get("fallback_ops") or []
        saw += f", fallback: {', '.join(fb) or 'none'}"
        path = "own path" if v.sources and f"{os.sep}on{os.sep}" in v.sources[0] else "stand-in path"
        print(
            f"{m} {mode} on {b}: run {saw}; from coverage data ({path}) {predicted['verdict']} "
            f"({predicted['evidence']}): {word}"
        )
        counts[word] += 1
    print(", ".join(f"{k}: {n}" for k, n in sorted(counts.items())) or "no observed runs")


if __name__ == "__main__":
    main()
