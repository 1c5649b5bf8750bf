"""A sharded training step's verdict (an op set with a ``parallel`` header, opcov.store.parallel): what a
single-device verdict says of its local ops, plus

* DTensor's sharding strategies: every aten op DTensor dispatched (a ``dtensor:OP`` node) must have one in
  the torch release the backend runs (coverage/distributed/dtensor-torch-<torch>.json). An op without one
  fails on every device: DTensor raises before any kernel runs. No data for that release: unknown.
* The collectives: each ``c10d::`` op is judged against the backend's registration of it, as any op is
  (the judge), and against the process-group backend its device uses where that could be read
  (coverage/distributed/process-group-<backend>.json): a collective, or a collective with this reduce op,
  that the group raises on fails; where the group cannot be read the notes say so plainly, and the
  collectives rest on the registration alone.
* A composite the stand-in ran as its decomposition with DTensor or collective calls below it is judged
  as recorded (its children), even on a backend with its own kernel for it: with DTensor arguments DTensor
  receives the op and decomposes it (its data says so), and the collectives under it run either way.

Torch-free: ``prepare`` before judging, ``judge_sharded`` after (opcov.verdict.check calls both).
"""

from __future__ import annotations

import os

from opcov import vocab
from opcov.errors import DataError, UsageError
from opcov.store import distributed, layout, opset, parallel, vendor
from opcov.verdict import judge
from opcov.verdict.finding import Finding

SHOWN = 8  # ops named per note
PROBED, REGISTERED = "probed", "registered"  # vocab.EVIDENCE's levels: a group run here, a registry read
_FIX = (
    "keep this op's arguments plain tensors (DTensor.to_local() or full_tensor() around it), or register a "
    "sharding strategy for it (torch.distributed.tensor.experimental.register_sharding)"
)


def find(model: str, style: str, world_size: int | None, coverage_dir: str) -> list[str]:
    """The sharded op sets of MODEL (a zoo name or model folder) for ``style`` (and ``world_size``): its
    parallel/<style>-<world size>.yaml files. A one-line UsageError naming what there is when there is none."""
    if os.path.isfile(model):
        raise UsageError(f"{model} is an op-set file: check it as it is, without --parallel")
    have = layout.parallel_opset_files(layout.model_folder(model, coverage_dir))
    wanted = []
    for path in have:
        named = parallel.parse_file_name(os.path.basename(path))
        if named and named[0] == style and world_size in (None, named[1]):
            wanted.append(path)
    if not wanted:
        there = ", ".join(os.path.basename(p).rsplit(".", 1)[0] for p in have) or "none"
        size = f" --world-size {world_size}" if world_size else ""
        raise UsageError(
            f"{model}: no sharded op set for --parallel {style}{size} (there is: {there}); trace it with "
            f"'opcov trace {model} --parallel {style} --world-size {world_size or 8}'"
        )
    return wanted


def prepare(doc: dict) -> dict:
    """``doc`` with each composite node that has DTensor or collective calls below it made a ``call`` node
    (judged as its children on every backend); ``doc`` itself for an op set of one device."""
    if parallel.header(doc) is None:
        return doc
    nodes = opset.nodes(doc)
    by_id = {n.id: n for n in nodes}
    marked: set = set()
    for n in nodes:
        if n.op.startswith((parallel.DTENSOR, parallel.REDISTRIBUTE)) or parallel.is_collective(n.op):
            up = n.parent
            while up is not None and up not in marked:
                marked.add(up)
                up = by_id[up].parent
    kept = {i for i in marked if by_id[i].kind == opset.COMPOSITE}
    if not kept:
        return doc
    tree = []
    for text, n in zip(doc["calltree"], nodes):
        if n.id in kept:
            head, _, rest = text.partition(f" {opset.COMPOSITE} ")
            text = f"{head} {opset.CALL} {rest}"
        tree.append(text)
    out = dict(doc)
    out["calltree"] = tree
    out["_sharded_composites"] = sorted({by_id[i].op for i in kept})
    return out


def judge_sharded(v, doc: dict, cov, coverage_dir: str | None) -> None:
    """Add DTensor's and the process group's findings and notes to ``v`` (judge.BackendVerdict) of a sharded
    op set ``doc`` (``prepare``'d), and its verdict anew; nothing for an op set of one device."""
    rec = parallel.header(doc)
    if rec is None:
        return
    v.mode = parallel.label(doc)
    notes = [_lead(rec, v.backend, cov)]
    by_op = {r.op: r for r in v.ops}
    notes += _sharding(v, doc, by_op, cov, coverage_dir)
    notes += _groups(v, doc, by_op, coverage_dir, cov)
    composites = [op for op in doc.get("_sharded_composites") or [] if not parallel.is_collective(op)]
    if composites:
        notes.append(
            "with DTensor arguments these composites are judged as the stand-in ran them (their decomposition, "
            f"DTensor's and the collectives' calls below them), whatever kernel {v.backend} has for them: "
            + _names(composites)
        )
    v.notes[0:0] = notes
    _rejudge(v)


def _lead(rec: dict, backend: str, cov) -> str:
    return (
        f"sharded step: {rec.get('style')} over {rec.get('world_size')} ranks, rank {rec.get('rank')} recorded "
        f"({str(rec.get('ranks', '')).split(':')[0]}), traced on torch's fake process group: local ops judged as "
        f"on one device, collectives against {backend}'s registrations and its process group, DTensor's ops "
        f"against its sharding strategies in torch {cov.torch}"
    )


def _dtensor_calls(doc: dict) -> dict:
    """aten op -> (calls, phases, dtypes, placements) of every ``dtensor:OP`` node."""
    out: dict = {}
    for n in opset.nodes(doc):
        op = parallel.dtensor_op(n.op)
        if op is None:
            continue
        calls, phases, dtypes, shown = out.get(op, (0, set(), set(), n.args))
        out[op] = (calls + n.calls, phases | {n.phase}, dtypes | {n.dtype}, shown)
    return out


def _sharding(v, doc: dict, by_op: dict, cov, coverage_dir: str | None) -> list[str]:
    """Findings for the ops DTensor has no strategy for (or no data about); the notes that say what was read."""
    calls = _dtensor_calls(doc)
    if not calls:
        return ["DTensor: no op was dispatched with DTensor arguments in this step"]
    try:
        data = distributed.sharding_for(coverage_dir, cov.torch) if coverage_dir else None
    except DataError as exc:
        data, unread = None, str(exc)
    else:
        unread = (
            f"no DTensor data for torch {cov.torch} (make it with 'python -m opcov.scan.sharding dtensor' in a "
            "Python with that torch)"
        )
    if data is None:
        for op, (n, phases, dtypes, _) in calls.items():
            why = f"DTensor dispatched {op} here; whether torch {cov.torch} has a sharding strategy for it was not read: {unread}"
            _add(v, by_op, op, n, phases, dtypes, "unknown", vocab.NO_EVIDENCE.name, why, "")
        return [f"DTensor: {len(calls)} op(s) dispatched with DTensor arguments, unknown: {unread}"]
    source = _shown(data["_path"], coverage_dir)
    v.sources.append(source)
    ops = data["ops"]
    counts: dict = {}
    for op, (n, phases, dtypes, placements) in sorted(calls.items()):
        how = ops.get(op)
        counts.setdefault(how or "not in data", []).append(op)
        if how == "none":
            why = (
                f"DTensor has no sharding strategy for {op} in torch {cov.torch} ({placements}): a call with DTensor "
                "arguments raises 'does not have a sharding strategy registered', on every device"
            )
            _add(v, by_op, op, n, phases, dtypes, "fails", REGISTERED, why, source, _FIX)
        elif how is None:
            why = f"{op} is not an op of torch {cov.torch} as DTensor's data lists them ({source})"
            _add(v, by_op, op, n, phases, dtypes, "unknown", vocab.NO_EVIDENCE.name, why, source)
    said = "; ".join(f"{how} {len(names)}: {_names(names)}" for how, names in sorted(counts.items()))
    return [
        f"DTensor: {len(calls)} op(s) dispatched with DTensor arguments, by how torch {cov.torch} handles them ({source}): {said}"
    ]


def _groups(v, doc: dict, by_op: dict, coverage_dir: str | None, cov=None) -> list[str]:
    """Findings for the collectives the backend's process group raises on; a note that says what was read."""
    used = _collectives(doc)
    if not used:
        return ["collectives: none in this step"]
    try:
        pg = distributed.group_for(coverage_dir, v.backend) if coverage_dir else None
    except DataError as exc:
        return [f"process group: {exc}"]
    if pg is None:
        return [
            f"process group: opcov has no record of {v.backend}'s process-group backend "
            f"('python -m opcov.scan.sharding process-group {v.backend}' reads it): {len(used)} collective op(s) "
            "rest on their registrations alone"
        ]
    source = _shown(pg["_path"], coverage_dir)
    v.sources.append(source)
    named = f"{v.backend} uses process group {pg.get('name', '?')!r} ({pg.get('read', 'not read')})"
    if not pg.get("readable"):
        return [
            f"process group: {named}; {pg.get('why')}: the collectives rest on their registrations alone"
            f"{_generic(used, cov)} ({source})"
        ] + (_vendor_called(v, used, coverage_dir) if coverage_dir else [])
    level = PROBED if pg.get("implementation") == "run" else REGISTERED
    python = pg.get("implementation") == "python"  # its methods run in place of the c10d ops' kernels
    said = []
    for op, (n, phases, dtypes, reduce_ops) in sorted(used.items()):
        rec = pg["collectives"].get(op)
        if rec is None:
            said.append(f"{op} not recorded")
            continue
        bad = [r for r in sorted(reduce_ops) if (rec.get("reduce_ops") or {}).get(r) == "raises"]
        fails = rec["state"] in ("raises", "not_defined") or bad
        which = f" with reduce op {', '.join(bad)}" if bad else ""
        if python and op in by_op:  # the op's own kernel is not on the path: the group's method decides
            by_op[op].findings = []
        if fails or python:
            why = f"{pg.get('name')} {'raises on' if fails else 'runs'} {op}{which}: {rec['why']}"
            _add(v, by_op, op, n, phases, dtypes, "fails" if fails else "ok", level, why, source)
        shown = f" ({', '.join(sorted(reduce_ops))})" if reduce_ops and not fails else ""
        said.append(f"{op}{which}{shown} {'fails' if fails else rec['state']}")
    return [f"process group: {named}: " + "; ".join(said) + f" ({source})"]


def _vendor_called(v, used: dict, coverage_dir: str) -> list[str]:
    """Which of this step's collectives the backend's own distributed tests call, and which they do not
    (opcov.store.vendor): said beside an unreadable process group, never judged from."""
    doc = vendor.find(coverage_dir, v.backend)
    if not doc or not doc.get("collectives"):
        return []
    called = {c["c10d"] for c in doc["collectives"] if c.get("c10d")}
    said = vendor.collectives_said(doc, c10d=set(used) & called)
    missing = sorted(set(used) - called)
    if missing:
        said.append(vendor.uncalled_said(doc, missing))
    v.sources.append(vendor.path_for(coverage_dir, v.backend))
    return said


def _generic(used: dict, cov) -> str:
    """', which are torch's own kernels (FILE): ...' where the registered data says the c10d ops' kernels are
    torch's generic ones, which hand every call to the device's process group; '' otherwise."""
    ops = ((cov.registered or {}).get("ops") or {}) if cov is not None else {}
    sources = {str((ops.get(op) or {}).get("src", "")).split(":")[0] for op in used}
    if len(sources) == 1 and next(iter(sources)).startswith("torch/csrc/distributed/c10d/"):
        return (
            f", which are torch's own kernels for every device ({next(iter(sources))}): they hand "
            "each call to the device's process group, so they say nothing of what it implements"
        )
    return ""


def _collectives(doc: dict) -> dict:
    """c10d op -> (calls, phases, dtypes, reduce ops) of every ``c10d::`` kernel node."""
    out: dict = {}
    for n in opset.nodes(doc):
        if n.kind != opset.KERNEL or not n.op.startswith("c10d::"):
            continue
        reduce = {w.split("=", 1)[1] for w in n.args.replace(",", " ").split() if w.startswith("reduce_op=")}
        calls, phases, dtypes, reduces = out.get(n.op, (0, set(), set(), set()))
        out[n.op] = (calls + n.calls, phases | {n.phase}, dtypes | {n.dtype}, reduces | reduce)
    return out


def _add(v, by_op, op, calls, phases, dtypes, outcome, evidence, why, source, fix="") -> None:
    """A finding on ``op``'s row (made where the op has none: a DTensor op whose local calls are other ops)."""
    dtype = sorted(dtypes)[0] if dtypes else "none"
    finding = Finding("forward", dtype, outcome, evidence, why, source, fix)
    row = by_op.get(op)
    if row is None:
        row = by_op[op] = judge.OpResult(op, calls, set(phases), set(dtypes), [])
        v.ops.append(row)
    row.findings = [*row.findings, finding]


def _rejudge(v) -> None:
    """The verdict and its evidence anew from every op (worst first), as judge.judge works them out."""
    order = {o: i for i, o in enumerate(judge.OUTCOMES)}
    v.ops.sort(key=lambda r: (order.get(r.outcome, len(order)), -r.calls, r.op))
    judged = [r.judged for r in v.ops]
    worst = min((order[o] for o, _ in judged if o in order), default=None)
    if worst is None:
        return
    v.verdict = judge.VERDICTS.get(judge.OUTCOMES[worst], "runs")
    v.evidence = judge.rests_on(judged)


def _names(names) -> str:
    names = list(names)
    more = len(names) - SHOWN
    return ", ".join(names[:SHOWN]) + (f" and {more} more" if more > 0 else "")


def _shown(path: str, coverage_dir: str | None) -> str:
    """A data file as reports name it: from the coverage folder on."""
    if coverage_dir and path.startswith(os.path.join(str(coverage_dir), "")):
        return f"coverage/{os.path.relpath(path, coverage_dir).replace(os.sep, '/')}"
    return path
