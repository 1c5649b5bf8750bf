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

import os
import re
import sys
from collections import Counter

from opcov import vocab
from opcov.store import data, layout, opset
from opcov.store.data import worst

COMMAND = "python -m opcov.scan.rereach"
_NOTE = "re-recorded here with torch"  # this command's note, last in provenance.reach; a later run replaces it


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


def _add_why(rec: dict, text: str, first: bool = False) -> None:
    parts = [p for p in str(rec.get("why") or "").split("; ") if p]
    rec["why"] = "; ".join([text, *parts] if first else [*parts, text])


def _drop_why(rec: dict, prefix: str) -> None:
    parts = [p for p in str(rec.get("why") or "").split("; ") if p and not p.startswith(prefix)]
    if parts:
        rec["why"] = "; ".join(parts)
    else:
        rec.pop("why", None)


def reason(name: str, ops: dict) -> str:
    """Why ``name``'s forward stays unresolved, in a few words: it reaches an unresolved op, or no call
    fitted (the kind of op, read from the recording's error, or its first error, digits dropped)."""
    rec = ops.get(name) or {}
    if rec.get("via") is not None:
        return "reaches an unresolved op"
    text = str(rec.get("why") or "")
    first = text.split("; ")[0].replace("reach unresolved: ", "")
    if not first:
        return "no reach recorded"
    for needle, words in vocab.REACH_REASONS:  # the words check and the site give a user too
        if needle.lower() in first.lower():
            return words
    return "no input fits: " + re.sub(r"\d+", "N", first.split(" / on cpu: ")[0])[:70]


def reasons(ops: dict) -> Counter:
    """The aten ops whose forward stays unresolved, counted by reason."""
    return Counter(reason(n, ops) for n, r in ops.items() if n.startswith("aten::") and r.get("res") == "unresolved")


ZOO_CALLS = 3  # distinct zoo calls kept per op
_SHAPE = re.compile(r"\[([0-9, ]*)\]")


def zoo_calls(coverage_dir: str, names) -> dict[str, list[dict]]:
    """Op name -> up to ZOO_CALLS distinct calls the zoo's op sets record of it ({dtype, shapes}: a
    call-tree node's dtype and argument shapes), for the ops in ``names``: calls a real model made."""
    wanted = set(names)
    found: dict[str, list[dict]] = {}
    for path in layout.model_files(coverage_dir):
        try:
            doc = opset.load(path)
        except data.DataError:
            continue  # 'opcov lint' names it; a broken op set gives no call here
        for node in opset.nodes(doc):
            if node.op not in wanted or not node.shape or "+" in node.dtype:
                continue
            shapes = [[int(d) for d in dims.split(",") if d.strip()] for dims in _SHAPE.findall(node.shape)]
            call = {"dtype": node.dtype, "shapes": shapes}
            got = found.setdefault(node.op, [])
            if shapes and call not in got and len(got) < ZOO_CALLS:
                got.append(call)
    return found


def update(path: str) -> dict:
    """Re-record the unresolved reach of one registered file; returns the figures."""
    from opcov.catalog import Catalog, Op, build_catalog
    from opcov.scan import generated, reach, registered
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
    coverage_dir = os.path.dirname(os.path.dirname(os.path.abspath(path)))
    fwd_reach, bwd_reach = reach.record(todo, catalog, zoo_calls(coverage_dir, todo))
    for name in todo:
        rec = ops[name]
        want_fwd, want_bwd = _unresolved(rec)
        f, b = fwd_reach.get(name), bwd_reach.get(name)
        if want_fwd and f is not None:
            _drop_why(rec, "reach unresolved:")
            if f.ops is not None:
                rec["via"] = list(f.ops)
            else:  # this recording's error, which names what meta and cpu said
                _add_why(rec, f"reach unresolved: {f.error}", first=True)
        if want_bwd and b is not None:
            _drop_why(rec, "backward reach unresolved:")
            if b.ops is not None:
                rec["bwd_via"] = list(b.ops)
            else:
                _add_why(rec, f"backward reach unresolved: {b.error}")
    filled = generated.fill(torch, ops)
    resolve(ops)
    after_ops = [n for n, r in ops.items() if n.startswith("aten::") and r.get("res") == "unresolved"]
    why = reasons(ops)
    data_catalog = Catalog(made, (), {n: Op(n, "", tuple(r.get("tags") or ())) for n, r in ops.items()})
    doc["summary"] = registered.summarize(data_catalog, ops)
    kinds = Counter(k.split(":")[0] for k in why.elements())
    note = (
        f"re-recorded here with torch {torch.__version__} ({COMMAND} {path}: calls tried in turn on meta "
        "tensors, then on cpu: the schema's float32 call, the calls OpInfo samples make, the zoo's recorded "
        f"calls, the schema's other dtypes) for {len(todo)} ops left unresolved, and torchgen's rule for the "
        f"kernels it generated where no call fitted ({filled} ops): aten forward unresolved "
        f"{before} -> {len(after_ops)} (" + ", ".join(f"{n} {k}" for k, n in kinds.most_common()) + ")"
    )
    earlier = str(doc["provenance"].get("reach", "")).split(_NOTE)[0].rstrip("; ")  # the scan's own words
    doc["provenance"]["reach"] = f"{earlier}; {note}".lstrip("; ")
    data.save(doc, path)
    return {"file": path, "rerecorded": len(todo), "before": before, "after": len(after_ops), "why": dict(why)}


def record_together(paths) -> None:
    """Record, in one go, the reach every file of this torch release leaves unresolved: the calls to
    try (OpInfo's, over a minute to make) are made once, and each file then finds its ops recorded
    the same, whichever files are named with it."""
    from opcov.catalog import build_catalog
    from opcov.scan import reach
    from opcov.torchenv import import_torch

    torch = import_torch()
    catalog = build_catalog()
    todo: set[str] = set()
    dirs = set()
    for path in paths:
        doc = data.load(path)
        if layout.same_torch(str(doc["provenance"].get("torch")), str(torch.__version__)):
            todo.update(n for n, r in doc["ops"].items() if any(_unresolved(r)) and n in catalog)
            dirs.add(os.path.dirname(os.path.dirname(os.path.abspath(path))))
    zoo: dict = {}
    for coverage_dir in sorted(dirs):
        for name, calls in zoo_calls(coverage_dir, todo).items():
            zoo.setdefault(name, calls)
    reach.record(sorted(todo), catalog, zoo)


def main(argv=None) -> int:
    paths = list(sys.argv[1:] if argv is None else argv)
    if len(paths) > 1:
        record_together(paths)
    for path in paths:
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
