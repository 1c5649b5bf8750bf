"""Re-record the composite reach of a registered file, and change nothing else in it.

``python -m opcov.scan.rereach FILE...`` takes each op whose forward (a composite with no recorded
reach) or backward (a formula or composite with none) the file leaves unresolved, records its reach
here (opcov.scan.reach: the calls PyTorch's OpInfo samples make, else inputs from the schema), and
resolves the file's statuses again from its own paths (kernel, fallback, missing...), which stay as
scanned. The reach is recorded on meta tensors, so it does not depend on the build that made the file:
a file made with another build of the same torch release (cuda's, from a CUDA wheel) can be re-resolved
here. The torch release must be the file's; a kernel that branches on the device type is where meta
and the device differ (opcov.scan.registered.DEVICE_REACH). The file's provenance says what was done.
"""

from __future__ import annotations

import sys
from collections import Counter

from opcov.store import data, layout
from opcov.store.data import worst

COMMAND = "python -m opcov.scan.rereach"


def _unresolved(rec: dict) -> tuple[bool, bool]:
    fwd = rec.get("fwd") == "composite" and rec.get("via") is None
    bwd = rec.get("bwd") in ("formula", "composite") and rec.get("bwd_via") is None
    return fwd, bwd


def resolve(ops: dict) -> None:
    """res and bwd_res of every op again, from the file's paths and reach (as the scan resolves them)."""
    memo: dict[str, str] = {}

    def fwd(name: str, stack=()) -> str:
        if name in memo:
            return memo[name]
        rec = ops.get(name)
        if rec is None or name in stack:
            return "unresolved"
        path = rec.get("fwd")
        if path == "kernel":
            res = "registered"
        elif path in ("fallback", "missing", "not_applicable"):
            res = path
        elif path in ("out_variant", "composite") and rec.get("via") is not None:
            res = worst(fwd(v, stack + (name,)) for v in rec["via"])
        else:
            res = "unresolved"
        memo[name] = res
        return res

    for name, rec in ops.items():
        rec["res"] = fwd(name)
        bwd = rec.get("bwd")
        if bwd == "backend_kernel":
            rec["bwd_res"] = "registered"
        elif bwd in ("lost", "not_implemented"):
            rec["bwd_res"] = "missing"
        elif bwd in ("none", "not_applicable"):
            rec["bwd_res"] = "not_applicable"
        elif rec.get("bwd_via") is not None:
            rec["bwd_res"] = worst(fwd(v) for v in rec["bwd_via"])
        else:
            rec["bwd_res"] = "unresolved"


def _drop_why(rec: dict, prefix: str) -> None:
    parts = [p for p in str(rec.get("why") or "").split("; ") if p and not p.startswith(prefix)]
    if parts:
        rec["why"] = "; ".join(parts)
    else:
        rec.pop("why", None)


def _why(rec: dict) -> str:
    """Why an op stays unresolved, in a few words: no input fitted (the error, digits dropped), or it
    reaches an op that is unresolved itself."""
    import re

    if rec.get("via") is not None:
        return "reaches an unresolved op"
    text = str(rec.get("why") or "")
    first = text.split("; ")[0].replace("reach unresolved: ", "")
    return "no input fits: " + re.sub(r"\d+", "N", first)[:80] if first else "no reach recorded"


def update(path: str) -> dict:
    """Re-record the unresolved reach of one registered file; returns the figures."""
    from opcov.catalog import Catalog, Op, build_catalog
    from opcov.scan import reach, registered
    from opcov.torchenv import import_torch

    torch = import_torch()
    doc = data.load(path)
    made = str(doc["provenance"].get("torch"))
    if not layout.same_torch(made, str(torch.__version__)):
        raise SystemExit(
            f"opcov: {path} was made with torch {made}; this is torch {torch.__version__} (another release)"
        )
    catalog = build_catalog()
    ops = doc["ops"]
    before = Counter(r.get("res") for n, r in ops.items() if n.startswith("aten::"))["unresolved"]
    todo = sorted(n for n, r in ops.items() if any(_unresolved(r)) and n in catalog)
    fwd_reach, bwd_reach = reach.record(todo, catalog)
    for name in todo:
        rec = ops[name]
        want_fwd, want_bwd = _unresolved(rec)
        f, b = fwd_reach.get(name), bwd_reach.get(name)
        if want_fwd and f is not None and f.ops is not None:
            rec["via"] = list(f.ops)
            _drop_why(rec, "reach unresolved:")
        if want_bwd and b is not None and b.ops is not None:
            rec["bwd_via"] = list(b.ops)
            _drop_why(rec, "backward reach unresolved:")
    resolve(ops)
    after_ops = [n for n, r in ops.items() if n.startswith("aten::") and r.get("res") == "unresolved"]
    why = Counter(_why(ops[n]) for n in after_ops)
    data_catalog = Catalog(made, (), {n: Op(n, "", tuple(r.get("tags") or ())) for n, r in ops.items()})
    doc["summary"] = registered.summarize(data_catalog, ops)
    kinds = Counter(k.split(":")[0] for k in why.elements())
    note = (
        f"re-recorded here with torch {torch.__version__} ({COMMAND} {path}; on meta tensors, from the calls "
        f"OpInfo samples make where they reach the op, else from the schema) for {len(todo)} ops the scan left "
        f"unresolved: aten forward unresolved {before} -> {len(after_ops)} ("
        + ", ".join(f"{n} {k}" for k, n in kinds.most_common())
        + ")"
    )
    doc["provenance"]["reach"] = f"{doc['provenance'].get('reach', '')}; {note}".lstrip("; ")
    data.save(doc, path)
    return {"file": path, "rerecorded": len(todo), "before": before, "after": len(after_ops), "why": dict(why)}


def main(argv=None) -> int:
    for path in list(sys.argv[1:] if argv is None else argv):
        got = update(path)
        print(
            f"{path}: reach re-recorded for {got['rerecorded']} ops; aten forward unresolved "
            f"{got['before']} -> {got['after']}"
        )
        for why, n in sorted(got["why"].items(), key=lambda kv: -kv[1])[:8]:
            print(f"  still unresolved, {n}: {why}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
