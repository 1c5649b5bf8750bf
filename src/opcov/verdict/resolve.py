"""Which calls of an op set a backend really runs: its call tree resolved as that backend's dispatcher would.

Why: an op set is traced on a stand-in device with no kernels, where every CompositeImplicitAutograd
op runs its decomposition. A backend that registers its own kernel for such an op at its dispatch
key runs that kernel instead (TorchTPU's ``linear``, ``silu_backward``, ``cross_entropy_loss``), and
its autograd kernel (else the op's derivative formula, else nothing: the backward is lost) instead
of the backward of the decomposition. Judging the decomposition there judges ops the backend never
calls, and misses the one it does.

So each node of the op set's ``calltree`` (``opcov.store.opset``), top down:

* a ``composite`` node the backend has its own kernel for (registered ``fwd: kernel``), or, with no
  registered record of the op, that its probe ran at the node's dtype key, is judged itself, as one
  call (with its backward when its
  inputs required grad), and its children are not; nor are the backward calls that autograd nodes
  of its children issued (their forward never ran there);
* any other composite, and a Python-level ``call`` node (the optimizer step), is not judged itself:
  its children are;
* a ``kernel`` node is judged, and so are the backward calls its autograd node issued, by the same
  rules (a backward composite such as ``silu_backward`` is resolved like any other);
* a ``device-branch:NAME`` call node (opcov.branches: an LSTM's fused cells, which only CUDA, XPU and
  PrivateUse1 devices take, beside the generic cells the others take) is walked only where the
  backend's dispatch key takes that branch.

Backward calls no forward node issued (the loss's ``ones_like``, gradient accumulation) are judged
as they are. A schema 1 op set has no tree: its calls are judged flat, and each ``parents`` entry the
backend has its own kernel for is judged too (both the kernel and the decomposition: the file does
not say which calls came from it). Torch-free.
"""

from __future__ import annotations

import functools
import os
from dataclasses import dataclass, field

from opcov import backends, branches
from opcov.backends import RECORDS_ENV, get_backend
from opcov.backends import record as get_record
from opcov.errors import UsageError
from opcov.store import opset
from opcov.store.opset import CALL, COMPOSITE, KERNEL

NOTE_OPS = 4  # decomposition ops named in a note


@dataclass
class Resolved:
    """The calls to judge, and the notes that say where the backend's own kernel was judged instead."""

    calls: list = field(default_factory=list)  # opset.Call, or the call tree's opset.Node (a Call's fields)
    notes: list = field(default_factory=list)
    # The same dict for every backend whose dispatcher resolves the op set's tree to the same calls (None
    # for a schema 1 op set): where a caller keeps what it works out from ``calls`` alone (judge.judge's
    # requirements), so that judging one op set on a dozen backends does that work once per resolution.
    shared: dict | None = field(default=None, compare=False, repr=False)


def needed_ops(doc: dict) -> list[str]:
    """The ops to read from coverage data to resolve and judge ``doc``: its calls, its tree's composite
    ops (does the backend have its own kernel?) and schema 1 parents."""
    names = set(doc["ops"])
    own = backends.own_kernels()
    names |= {own[op][1] for op in names if op in own}
    names |= {node.op for node in opset.nodes(doc) if node.kind == COMPOSITE}
    names |= {p for p in doc.get("parents") or {} if "::" in p}
    return sorted(names)


def own_level(cov, op: str, dtype: str, above: dict | None = None) -> str:
    """Why the backend runs ``op`` itself at ``dtype``, else '': 'above' when its Python patch takes the
    call before the dispatcher (``raised_above``); 'kernel' when it registers its own kernel for it; 'probed' when no registered record says which path the dispatcher takes and the
    probe ran the op at ``dtype``. A registered record that names another path (a composite, an
    .out variant) wins over a probe: the probe saw OpInfo's inputs, the children are the model's.
    ``above``: the backend's ``raises_above`` where the caller read it once for many ops."""
    if (raises_above(cov.backend) if above is None else above).get(op):
        return "above"
    reg = (cov.registered or {}).get("ops", {}).get(op)
    if isinstance(reg, dict):
        if reg.get("fwd") == "kernel":
            return "kernel"
        return "autograd" if own_autograd(cov, op) else ""
    cell = cov.cells(op).get(dtype)
    status = cell.slot("forward").status if cell else None
    return "probed" if status and status != "skipped" else ""


def raised_above(backend: str, op: str) -> str:
    """Why a Python patch that importing ``backend`` installs takes a call of ``op`` before the dispatcher
    and raises (its record's ``raises_above``: torch_xla's nn.GRU on a PackedSequence), else ''. The call
    is judged as one op that fails; no scan or probe of the dispatcher sees it."""
    return raises_above(backend).get(op, "")


def raises_above(backend: str) -> dict:
    """{op: why} of every call ``backend``'s Python patch raises on (``raised_above``), for the records
    files named now."""
    return _raises_above(backend, os.environ.get(RECORDS_ENV, ""))


@functools.lru_cache(maxsize=32)
def _raises_above(backend: str, records: str) -> dict:
    """{op: why} of ``backend``'s record (``records``: the records files named then, so a change is seen)."""
    record = get_record(backend)
    return dict(record.raises_above) if record else {}


def own_autograd(cov, op: str) -> bool:
    """Whether the backend registers ``op`` at its own autograd key (registered ``bwd: backend_kernel``):
    its dispatcher stops there, forward and backward, so neither the op's decomposition nor the backward
    kernels its derivative formula would issue (``native_layer_norm_backward`` under ``native_layer_norm``)
    run on it. PyTorch/XLA does this for its own einsum, max pooling, layer and group norm."""
    reg = (cov.registered or {}).get("ops", {}).get(op)
    return isinstance(reg, dict) and reg.get("bwd") == "backend_kernel"


def backend_branch(backend: str) -> tuple[str, str]:
    """(the device branch (opcov.branches) a backend's dispatch key takes, its device type); a backend
    opcov does not know is taken as an out-of-tree PrivateUse1 one."""
    try:
        b = get_backend(backend)
        key, device = b.dispatch_key, b.device_type
    except UsageError:
        key, device = "PrivateUse1", backend
    return branches.family(key), device


def resolve(doc: dict, cov) -> Resolved:
    """The calls of ``doc`` that backend ``cov`` runs (``cov``: a judge.Coverage), with notes."""
    if not doc.get("calltree"):
        return _flat(doc, cov)
    plan = _plan(doc)
    # The walk asks only which branch the backend takes, which of the tree's kernels are another device's
    # own, and whether the backend runs each composite (op, dtype) itself: with the same answers it makes
    # the same calls, which are worked out once per set of answers (often shared by several backends).
    branch, device = backend_branch(cov.backend)
    stand = branches.foreign(plan.kernels, device)
    above = raises_above(cov.backend)
    own = tuple(own_level(cov, op, dtype, above) for op, dtype in plan.composites)
    autograd = frozenset(op for op in plan.issuers if own_autograd(cov, op))
    answers = (branch, tuple(sorted(stand.items())), autograd, *own)
    walk = plan.walks.get(answers)
    if walk is None:
        walk = _Walk(plan, dict(zip(plan.composites, own)), branch, stand, autograd).run()
        for other in plan.walks.values():  # another device's walk that made the same calls: its requirements too
            if other[0] == walk[0]:
                walk = (walk[0], walk[1], other[2], walk[3])
                break
        plan.walks[answers] = walk
    calls, own, shared, stood = walk
    notes = [_note(cov, *key, *rec) for key, rec in sorted(own.items())]
    notes += [
        f"{op} is {backends.own_kernels()[op][0]}'s own kernel (the op set was traced there); on {cov.backend} "
        f"the call is its own choice of {generic}, judged as that"
        for op, generic in sorted(stood.items())
    ]
    return Resolved(list(calls), notes, shared)


_PLANS: dict = {}  # id(a calltree list) -> (a copy of the list, its _Plan), the newest last
_PLANS_KEPT = 4


class _Plan:
    """A call tree's shape, worked out once for every backend that judges it: each node's children,
    the backward roots each forward node issued, the tree's roots and its composite (op, dtype) pairs;
    ``walks``: the walk's outcome per answer of ``own_level`` to those pairs."""

    def __init__(self, tree):
        self.children: dict = {}
        self.issued: dict = {}  # forward node id -> backward roots it issued
        self.roots = []
        for node in tree:
            if node.parent is not None:
                self.children.setdefault(node.parent, []).append(node)
            elif node.issued_by is not None:
                self.issued.setdefault(node.issued_by, []).append(node)
            else:
                self.roots.append(node)
        self.composites = sorted({(node.op, node.dtype) for node in tree if node.kind == COMPOSITE})
        self.kernels = frozenset(node.op for node in tree if node.kind == KERNEL)
        by_id = {node.id: node for node in tree}
        self.issuers = sorted({by_id[i].op for i in self.issued if i in by_id})  # ops whose backward was traced
        self.walks: dict = {}


def _plan(doc: dict) -> _Plan:
    """The _Plan of the op set's call tree; the last few are kept (the site and gaps judge one op set on
    every backend in a row). A tree is the same when its texts are, as in opset.nodes."""
    tree = doc.get("calltree") or []
    kept = _PLANS.pop(id(tree), None)  # by identity, then the texts compared (the same objects: quick)
    if kept is None or kept[0] != tree:
        kept = (list(tree), _Plan(opset.nodes(doc)))
    _PLANS[id(tree)] = kept
    while len(_PLANS) > _PLANS_KEPT:
        del _PLANS[next(iter(_PLANS))]
    return kept[1]


class _Walk:
    """One walk of a plan's tree, top down, given which composite (op, dtype) the backend runs itself."""

    def __init__(self, plan: _Plan, own_of: dict, branch: str = branches.FUSED, stand=None, autograd=frozenset()):
        self.plan, self.own_of, self.branch = plan, own_of, branch
        self.stand = stand or {}  # another device's own kernel -> the generic op it stands for (branches.foreign)
        self.autograd = autograd  # kernel ops whose backward is the backend's own autograd kernel
        self.calls: list = []
        self.own: dict = {}  # (op, phase, reason) -> [calls, {decomposition ops}, grad]
        self.stood: dict = {}  # another device's own kernel -> the generic op judged in its place

    def run(self) -> tuple:
        for node in self.plan.roots:
            self.visit(node)
        return tuple(self.calls), self.own, {}, self.stood

    def visit(self, node) -> None:
        if node.kind == KERNEL:
            generic = self.stand.get(node.op)
            if generic:  # another device's own kernel (its record's own_kernels)
                self.stood[node.op] = generic
                node = node._replace(op=generic)
            self.calls.append(node)  # a Node has a Call's fields (a Call each was a tenth of judging)
            if node.op in self.autograd:  # its backward is the backend's autograd kernel, judged with the op
                issued = self.plan.issued.get(node.id, ())
                rec = self.own.setdefault((node.op, "backward", "autograd"), [0, set(), False])
                rec[0] += sum(n.calls for n in issued)
                rec[1].update(n.op for n in issued)
                return
            for issued in self.plan.issued.get(node.id, ()):
                self.visit(issued)
            return
        if node.kind == CALL and branches.skipped(node.op, self.branch):
            return  # a device branch this backend's dispatcher does not take (opcov.branches)
        why = self.own_of[node.op, node.dtype] if node.kind == COMPOSITE else ""
        if not why:
            for child in self.plan.children.get(node.id, ()):
                self.visit(child)
            return
        self.calls.append(node)
        rec = self.own.setdefault((node.op, node.phase, why), [0, set(), False])
        rec[0] += node.calls
        rec[1] |= {n.op for n in self._below(node) if n.kind == KERNEL}
        rec[2] = rec[2] or node.grad

    def _below(self, node):
        for child in self.plan.children.get(node.id, ()):
            yield child
            yield from self._below(child)


def _note(cov, op, phase, why, calls, inside, grad) -> str:
    b = cov.backend
    shown = ", ".join(sorted(inside)[:NOTE_OPS]) + (", ..." if len(inside) > NOTE_OPS else "")
    if why == "autograd" and phase == "backward" and not grad:  # a kernel's backward, from _Walk.visit
        return (
            f"{b} runs {op}'s backward at its own autograd key: the backward kernels its derivative formula "
            f"calls elsewhere ({shown}, {calls} call{'s' if calls != 1 else ''}) do not run there and were not judged"
        )
    what = {
        "kernel": f"{b} runs its own {op} kernel",
        "autograd": f"{b} runs {op} at its own autograd key, forward and backward",
        "above": f"{b}'s Python patch takes {op} before the dispatcher",
    }.get(why, f"{b}'s probe ran {op} itself, so it is judged as one op")
    text = f"{what} ({phase}, {calls} call{'s' if calls != 1 else ''})"
    text += f": its decomposition ({shown}) was not judged" if inside else ": judged as one op"
    if grad:
        bwd = ((cov.registered or {}).get("ops", {}).get(op) or {}).get("bwd")
        text += {
            "backend_kernel": f"; its backward is {b}'s autograd kernel, not the decomposition's",
            "formula": "; its backward is its derivative formula, not the decomposition's",
            "lost": f"; {b} has no autograd kernel for it, so its backward is whatever its kernel's calls give",
        }.get(str(bwd), "; the backward of the decomposition was not judged either")
    return text


def _flat(doc: dict, cov) -> Resolved:
    """A schema 1 op set: every call, and the parents the backend has its own kernel for."""
    out = Resolved(opset.calls(doc))
    for parent, rec in sorted((doc.get("parents") or {}).items()):
        reg = (cov.registered or {}).get("ops", {}).get(parent)
        if not (reg and reg.get("fwd") == "kernel" and isinstance(rec, dict)):
            continue
        traced = set()
        for phase, cells in sorted(rec.items()):
            for dtype, cell in sorted((cells or {}).items()) if isinstance(cells, dict) else ():
                if isinstance(cell, dict):
                    out.calls.append(opset.Call(parent, phase, dtype, int(cell.get("calls", 1)), phase == "forward"))
                    traced |= set(cell.get("traced_as", ()))
        shown = ", ".join(sorted(traced)[:NOTE_OPS]) + (", ..." if len(traced) > NOTE_OPS else "")
        out.notes.append(
            f"{parent}: {cov.backend} registers its own kernel, so it may not run the decomposition "
            f"traced here ({shown}); the kernel and the decomposition are both judged (a schema 1 "
            "op set has no call tree: re-trace it to judge only what the backend runs)"
        )
    return out
