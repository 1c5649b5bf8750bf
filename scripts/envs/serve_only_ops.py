"""Print a regular expression of the ops the curated decoders' serve op sets call that their inference op sets do
not, or call with a signature class (opcov.sigclass) their inference op sets never do: what generate adds to a
forward (token selection, the KV cache's bookkeeping, stopping checks, a sliding-window cache's slice past its
dimension). Their calls, replayed on the device (scripts/envs/xla-data.sh servereplay), decide the serve
verdicts that a forward's evidence cannot.

Usage: python scripts/envs/serve_only_ops.py [COVERAGE]   (prints '^(aten::a|aten::b)$', or nothing)
"""

from __future__ import annotations

import glob
import os
import re
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(ROOT, "src"))

from opcov.store import opset  # noqa: E402


def _classes(doc: dict) -> set[tuple[str, str]]:
    """(op, signature class) of every call the op set's call tree records with one."""
    return {(n.op, sig) for n in opset.nodes(doc) for sig in (n.sig or "").split() if sig != "..."}


def serve_only(coverage: str) -> list[str]:
    """Ops of any model's serve op set that the same model's inference op set does not call, or calls in no
    class the serve op set calls it with."""
    out: set[str] = set()
    for serve in sorted(glob.glob(os.path.join(coverage, "models", "*", "serve.yaml"))):
        inference = os.path.join(os.path.dirname(serve), "inference.yaml")
        forward = opset.load(inference) if os.path.exists(inference) else {"ops": {}}
        served = opset.load(serve)
        out |= set(served["ops"]) - set(forward["ops"])
        out |= {op for op, _ in _classes(served) - _classes(forward)}
    return sorted(out)


if __name__ == "__main__":
    ops = serve_only(sys.argv[1] if len(sys.argv) > 1 else os.path.join(ROOT, "coverage"))
    if ops:
        print("^(" + "|".join(re.escape(op) for op in ops) + ")$")
