"""How 'opcov check' agrees with the observed runs under coverage/observed/ (opcov run).

Usage: python scripts/observed_agreement.py [COVERAGE]   (default: coverage)

One line per observed run: the model, mode and backend, what the run saw, the verdict from coverage
data and whether it agrees (opcov.verdict.observed.agrees); then the counts. Torch-free.
"""

import collections
import os
import sys

from opcov.store import observed as files
from opcov.verdict import check, judge, observed


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
        v = judge.judge(opsets[0][1], judge.coverage_for(opsets[0][1], b, cov))
        agree = observed.agrees(v.verdict, run)
        word = {True: "agrees", False: "DISAGREES", None: "unknown (claims nothing)"}[agree]
        res = run["result"]
        saw = "ran" if res["ran"] else "raised"
        if res["ran"]:
            saw += ", values " + ("match" if (res.get("values") or {}).get("match") else "differ")
        fb = (run.get("backend_record") or {}).get("fallback_ops") or []
        saw += f", fallback: {', '.join(fb) or 'none'}"
        print(f"{m} {mode} on {b}: run {saw}; check says {v.verdict} ({v.evidence}): {word}")
        counts[word] += 1
    print(", ".join(f"{k}: {n}" for k, n in sorted(counts.items())) or "no observed runs")


if __name__ == "__main__":
    main()
