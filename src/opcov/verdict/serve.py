"""What a serve verdict says beside its ops: which ops prefill and decode need, and how the KV cache's
update and generate's own work (logits processing, token selection, stopping checks) are judged.

A serve op set (``opcov trace MODEL --mode serve``, opcov.tracing.serve) files its calls under the phases
``prefill`` and ``decode``, each judged as a forward (``judge.judge``: nothing needs a backward); the
ops' results already name their phases. These notes put the serving questions first: what decode needs
that prefill does not, and the verdict on each op the cache update and the token step call, read from
the call tree's ``generate:cache-update`` nodes and from what a run's root holds outside the model's
forward. Torch-free.
"""

from __future__ import annotations

from opcov import vocab
from opcov.store import opset

# The call nodes opcov.tracing.serve writes (the tracer's names; that module imports torch).
GENERATE = "generate:"
MODEL = "generate:model"
CACHE_UPDATE = "generate:cache-update"
SHOWN = 12  # ops named per note before "and N more"


def notes(v, doc: dict) -> list[str]:
    """The serve notes of verdict ``v`` (judge.BackendVerdict) on op set ``doc``; [] for another mode."""
    if doc.get("mode") != "serve":
        return []
    by_op = {r.op: r for r in v.ops}
    out = []
    per_phase = {p: [r.op for r in v.ops if p in r.phases] for p in opset.SERVE_PHASES}
    prefill, decode = opset.SERVE_PHASES
    only = {p: sorted(set(per_phase[p]) - set(per_phase[q])) for p, q in ((prefill, decode), (decode, prefill))}
    runs = (doc.get("serve") or {}).get("runs") or {}
    steps = ", ".join(f"{name} {max(int(r.get('forwards', 0)) - 1, 0)}" for name, r in runs.items())
    out.append(
        f"serve: prefill needs {len(per_phase[prefill])} ops, decode {len(per_phase[decode])}"
        + (f" (decode steps per generate run: {steps})" if steps else "")
        + f"; only decode: {_names(only[decode])}; only prefill: {_names(only[prefill])}"
    )
    groups = _groups(doc)
    for group, what in (
        ("cache", "the KV cache's update"),
        ("generate", "generate's own work (logits processing, token selection, stopping checks)"),
    ):
        said = groups.get((decode, group)) or {}
        if said:
            out.append(f"serve decode, {what}: {_judged(said, by_op)}")
        more = {op: ks for op, ks in (groups.get((prefill, group)) or {}).items() if op not in said}
        if more:
            out.append(f"serve prefill, {what}{', besides those' if said else ''}: {_judged(more, by_op)}")
    return out


def _groups(doc: dict) -> dict:
    """(phase, 'cache' | 'generate') -> {op: [its kernel descendants]}: the ops the cache's update called
    (children of a ``generate:cache-update`` node) and those a run's root called outside the model."""
    nodes = opset.nodes(doc)
    by_id = {n.id: n for n in nodes}
    children: dict = {}
    for n in nodes:
        if n.parent is not None:
            children.setdefault(n.parent, []).append(n)
    out: dict = {}
    for n in nodes:
        parent = by_id.get(n.parent) if n.parent is not None else None
        if parent is None or n.kind == opset.CALL:
            continue
        if parent.op == CACHE_UPDATE:
            group = "cache"
        elif parent.op.startswith(GENERATE) and parent.op != MODEL and parent.parent is None:
            group = "generate"
        else:
            continue
        kernels = out.setdefault((n.phase, group), {}).setdefault(n.op, [])
        for k in _kernels(n, children):
            if k not in kernels:
                kernels.append(k)
    return out


def _kernels(node, children) -> list[str]:
    """The kernel ops at and below ``node``."""
    if node.kind == opset.KERNEL:
        return [node.op]
    out: list[str] = []
    for child in children.get(node.id, ()):
        out += [k for k in _kernels(child, children) if k not in out]
    return out


def _judged(called: dict, by_op: dict) -> str:
    """The ops grouped by how the verdict judged them, worst first: 'runs (registered evidence): aten::cat,
    aten::index_copy_'. A composite judged as what it decomposed into is named with those ops ('aten::
    softmax.int as aten::_softmax') under the worst of their outcomes; one that dispatched nothing the
    backend receives (a conversion to the dtype and device a tensor has) is said apart."""
    order = list(vocab.OUTCOMES)
    groups: dict = {}
    for op in sorted(called):
        r = by_op.get(op)
        if r is not None:
            shown, judged = op, [r]
        else:
            judged = [by_op[k] for k in called[op] if k in by_op]
            shown = f"{op} as {'+'.join(r.op for r in judged)}" if judged else op
        if not judged:
            groups.setdefault((len(order) + 1, "no kernel call (nothing to judge)"), []).append(shown)
            continue
        worst = min(judged, key=lambda r: order.index(r.outcome) if r.outcome in order else len(order))
        word = vocab.OUTCOMES.get(worst.outcome)
        label = f"{word.label if word else worst.outcome} ({vocab.evidence_name(worst.evidence)})"
        rank = order.index(worst.outcome) if worst.outcome in order else len(order)
        groups.setdefault((rank, label), []).append(shown)
    return "; ".join(f"{label}: {', '.join(ops)}" for (_, label), ops in sorted(groups.items()))


def _names(names: list) -> str:
    if not names:
        return "none"
    more = len(names) - SHOWN
    return ", ".join(names[:SHOWN]) + (f" and {more} more" if more > 0 else "")
