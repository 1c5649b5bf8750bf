"""One-off migration of the zoo run of 2026-12-01: drop the op sets that `opcov zoo trace --all` made
with a real-valued retry on CPU, and mark their outcome rows as `opcov zoo trace` now does
(its real-valued retry on CPU is gone: such op sets record CPU's kernels, not an accelerator's).

    python scripts/zoo_drop_cpu_real.py        # rewrites coverage/zoo/outcomes.tsv, removes the files
"""

import os
import re
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "src"))

from opcov.store import layout, opset  # noqa: E402
from opcov.tracing import zoo, zoorun  # noqa: E402

table = os.path.join(ROOT, "coverage", "zoo", "outcomes.tsv")
models = os.path.join(ROOT, "coverage", "models")
curated = {e.name for e in zoo.ZOO}
out, dropped = [], 0
with open(table, encoding="utf-8") as f:
    lines = f.read().splitlines()
cols = None
for line in lines:
    if line.startswith("#") or not line:
        out.append(line)
        continue
    row = line.split("\t")
    if cols is None:
        cols = row
        out.append(line)
        continue
    r = dict(zip(cols, row))
    if r["outcome"] == "traced" and r["tracing"] == "real" and r["model"] not in curated:
        path = layout.opset_path(r["model"], r["mode"], models)
        notes = opset.load(path)["provenance"].get("notes") or []
        why = next((n for n in notes if n.startswith("traced with real tensors")), "")
        m = re.search(r"under fake tensors (.*)", why)
        first = (m.group(1) if m else "needs real values")[:160]
        r.update(outcome="cannot_trace", tracing="", ops="", reason=zoorun.CPU_REAL_REASON.format(first=first))
        os.remove(path)
        folder = os.path.dirname(path)
        if not os.listdir(folder):
            os.rmdir(folder)
        dropped += 1
    out.append("\t".join(r[c] for c in cols))
with open(table, "w", encoding="utf-8") as f:
    f.write("\n".join(out) + "\n")
print(f"dropped {dropped} op sets traced with real tensors on CPU; {table} rewritten")
