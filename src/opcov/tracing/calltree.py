"""The call tree a trace records: every op call with the chain of calls it was made from.

Why: a model's op set is recorded on a stand-in device with no kernels, where every
CompositeImplicitAutograd op decomposes; a backend with its own kernel for such an op runs
that kernel and never the decomposition. So the trace keeps each call's ancestry (composite
ops, the optimizer step) and, for a backward call, the forward call whose autograd node issued
it; ``opcov.verdict.resolve`` then judges each node as the backend's dispatcher would.

Torch-free: the tracer (``trace.py``) tells the builder what it sees, one call at a time;
``rows()`` aggregates the calls into the nodes of the op set's ``calltree`` (``opcov.store.opset``):
calls with the same chain of ancestors, op, phase, kind and dtype key become one node, which keeps the
distinct signature classes of its calls (``sig``, opcov.sigclass: what selects a backend's path).
"""

from __future__ import annotations

from dataclasses import dataclass

from opcov.store.opset import KERNEL

MAX_SIGS = 8  # distinct signature classes a node keeps; more are marked MORE (then any finding may match)
MORE = "..."


@dataclass
class _Call:
    op: str
    phase: str
    kind: str  # kernel | composite | call (opset's node kinds)
    parent: int  # index of the enclosing call, -1 for a root
    issued_by: int  # backward roots: index of the forward call whose autograd node issued it; else -1
    dtype: str = ""
    shape: object = ""  # text, or a callable giving it (made only for a node's first call)
    grad: bool = False
    args: str = ""
    kept: bool = True  # composites and calls: decided when they return
    has_kept_child: bool = False
    reads: set | None = None  # indices of its outputs something later read (``read``); None: not tracked
    returns: set | None = None  # indices of its outputs the model's return value holds (``returned``)
    sig: str = ""  # its signature class (opcov.sigclass), made when the call is seen


class Builder:
    """Collects calls while tracing; ``rows()`` gives the aggregated tree."""

    def __init__(self):
        self.calls: list[_Call] = []
        self.stack: list[int] = []  # open composite calls and Python-level calls
        self._owner: dict[int, int] = {}  # autograd sequence number -> forward kernel call

    # -- recording

    def open(self, op: str, phase: str, kind: str, issued_by: int = -1) -> int:
        """A composite op (or a Python-level call such as the optimizer step) starts; returns its index."""
        idx = self._add(_Call(op, phase, kind, self.stack[-1] if self.stack else -1, -1 if self.stack else issued_by))
        self.stack.append(idx)
        return idx

    def close(
        self,
        idx: int,
        *,
        dtype: str,
        shape: str = "",
        grad: bool = False,
        args: str = "",
        sig: str = "",
        on_device: bool,
    ) -> None:
        """The call ``idx`` returned. It is kept when it touched the target device or a call inside it was kept."""
        if self.stack and self.stack[-1] == idx:
            self.stack.pop()
        call = self.calls[idx]
        call.dtype, call.shape, call.grad, call.args, call.sig = dtype, shape, grad, args, sig
        call.kept = on_device or call.has_kept_child
        if call.kept:
            self._mark_parent(call)

    def leaf(
        self,
        op: str,
        phase: str,
        dtype: str,
        *,
        shape: str = "",
        grad: bool = False,
        issued_by: int = -1,
        sig: str = "",
    ) -> int:
        """A call a backend kernel receives (no decomposition seen below it); returns its index."""
        call = _Call(
            op, phase, KERNEL, self.stack[-1] if self.stack else -1, -1 if self.stack else issued_by, dtype, shape, grad
        )
        call.sig = sig
        idx = self._add(call)
        self._mark_parent(call)
        return idx

    def track(self, idx: int) -> None:
        """Call ``idx``'s outputs are tracked: its node says which were read (``reads=``), none until ``read``."""
        if self.calls[idx].reads is None:
            self.calls[idx].reads = set()

    def read(self, idx: int, output: int) -> None:
        """Output ``output`` (its index as the probe counts outputs) of call ``idx`` was read later."""
        reads = self.calls[idx].reads
        if reads is not None:
            reads.add(output)

    def returned(self, idx: int, output: int) -> None:
        """Output ``output`` of call ``idx`` is held by the model's return value: its caller receives it."""
        call = self.calls[idx]
        if call.returns is None:
            call.returns = set()
        call.returns.add(output)

    def created_node(self, sequence_nr: int, idx: int) -> None:
        """Forward call ``idx`` ran just after autograd made the node numbered ``sequence_nr``
        (the first call after it is the one that made it)."""
        self._owner.setdefault(sequence_nr, idx)

    def open_issuer(self) -> int:
        """The forward call whose autograd node issued the outermost call open now (a backward composite
        such as ``value_selecting_reduction_backward``); -1 when none is open or it was not issued."""
        return self.calls[self.stack[0]].issued_by if self.stack else -1

    def issued_by(self, sequence_nr: int | None) -> int:
        """The forward call whose autograd node (by its sequence number) is running now; -1 if unknown."""
        return -1 if sequence_nr is None else self._owner.get(sequence_nr, -1)

    def _add(self, call: _Call) -> int:
        self.calls.append(call)
        return len(self.calls) - 1

    def _mark_parent(self, call: _Call) -> None:
        if call.parent >= 0:
            self.calls[call.parent].has_kept_child = True

    # -- the tree

    def rows(self) -> list[dict]:
        """The ``calltree`` rows: kept calls aggregated by (parent node, issuing node, op, phase, kind,
        dtype key), ids in order of first call (a parent before its children); a node's ``reads`` are
        the outputs any of its calls had read, unknown (absent) where one call's were not tracked."""
        node_of: dict[int, dict] = {}
        index: dict[tuple, dict] = {}
        rows: list[dict] = []
        for i, call in enumerate(self.calls):
            if not call.kept or (call.parent >= 0 and call.parent not in node_of):
                continue
            parent = node_of[call.parent]["id"] if call.parent >= 0 else None
            by = node_of[call.issued_by]["id"] if call.issued_by in node_of else None
            key = (parent, by, call.op, call.phase, call.kind, call.dtype)
            row = index.get(key)
            if row is None:
                row = {"id": len(rows) + 1}
                if parent is not None:
                    row["parent"] = parent
                if by is not None:
                    row["issued_by"] = by
                row.update(phase=call.phase, kind=call.kind, op=call.op, dtype=call.dtype, calls=0)
                if call.args:
                    row["args"] = call.args
                shape = call.shape() if callable(call.shape) else call.shape
                if shape:
                    row["shape"] = shape
                index[key] = row
                rows.append(row)
            sig = call.sig
            if sig:
                sigs = row.setdefault("sig", {})
                if sig in sigs or len(sigs) < MAX_SIGS:
                    sigs[sig] = None
                else:
                    row["sig_more"] = True
            if row["calls"] == 0:
                row["reads"] = None if call.reads is None else set(call.reads)
            elif row.get("reads") is not None:
                row["reads"] = None if call.reads is None else row["reads"] | call.reads
            if call.returns:
                row["returns"] = row.get("returns", set()) | call.returns
            row["calls"] += 1
            if call.grad:
                row["grad"] = True
            node_of[i] = row
        for row in rows:
            reads = row.pop("reads", None)
            if reads is not None:
                row["reads"] = tuple(sorted(reads))
            if row.get("returns"):
                row["returns"] = tuple(sorted(row["returns"]))
            sigs = row.pop("sig", None)
            if sigs:
                row["sig"] = " ".join(sigs) + (" " + MORE if row.pop("sig_more", False) else "")
        return rows


# ---------------------------------------------------------------- merging real-valued runs (realtrace.py)


def join_sigs(a: str, b: str) -> str:
    """Two nodes' ``sig`` texts as one: their classes in order, at most MAX_SIGS, MORE where some were left out."""
    sigs = dict.fromkeys(w for w in (a or "").split() + (b or "").split() if w != MORE)
    more = MORE in (a or "").split() or MORE in (b or "").split() or len(sigs) > MAX_SIGS
    kept = list(sigs)[:MAX_SIGS]
    return " ".join(kept + ([MORE] if more else []))


def _paths(rows: list[dict]) -> list[tuple]:
    """Each node's identity across traces: its ancestry (and issuing node) down to (phase, kind, op, dtype)."""
    by_id: dict = {}
    out = []
    for row in rows:
        if row.get("parent") is not None:
            anchor = by_id[row["parent"]]
        elif row.get("issued_by") is not None:
            anchor = (("issued_by", by_id[row["issued_by"]]),)
        else:
            anchor = ()
        path = anchor + ((row["phase"], row["kind"], row["op"], row["dtype"]),)
        by_id[row["id"]] = path
        out.append(path)
    return out


def merge(fake: list[dict], reals: list[list[dict]]) -> list[dict]:
    """The fake trace's nodes, ``seen: both`` where a real run saw them too, then the nodes only real
    runs saw (``seen: real``, with the first such run's counts), ids continuing, a parent before its
    children; each node's ``variants`` are those of every trace that saw it, and its ``reads`` the
    outputs any of them saw read. Rows are node mappings (opset.Node's fields)."""
    merged = [{k: v for k, v in row.items() if v not in (None, "", False) or k == "calls"} for row in fake]
    index = dict(zip(_paths(fake), merged))
    for rows in reals:
        new_id = {}
        for row, path in zip(rows, _paths(rows)):
            known = index.get(path)
            if known is not None:
                if known.get("seen") != "real":
                    known["seen"] = "both"
                if row.get("variants"):  # the input variants that made it: every run's that saw it
                    known["variants"] = tuple(sorted({*known.get("variants", ()), *row["variants"]}))
                known_sig = join_sigs(known.get("sig", ""), row.get("sig", ""))
                if known_sig:
                    known["sig"] = known_sig
                # the outputs read: what any run saw read; unknown where one run did not record it
                both = known.get("reads"), row.get("reads")
                known["reads"] = None if None in both else tuple(sorted({*both[0], *both[1]}))  # type: ignore[misc]
                if known["reads"] is None:
                    del known["reads"]
                if row.get("returns"):  # what the caller receives: any run's
                    known["returns"] = tuple(sorted({*known.get("returns", ()), *row["returns"]}))
                new_id[row["id"]] = known["id"]
                continue
            added = {k: v for k, v in row.items() if v not in (None, "", False) or k == "calls"}
            added["id"] = len(merged) + 1
            for key in ("parent", "issued_by"):
                if row.get(key) is not None:
                    added[key] = new_id[row[key]]
            added["seen"] = "real"
            merged.append(added)
            index[path] = added
            new_id[row["id"]] = added["id"]
    return merged


def flat(rows: list[dict], fake_ops: dict, real_ops: list[dict]) -> dict:
    """The flat ``ops`` view of merged rows: calls summed from the kernel nodes, shape and grad from
    the fake trace's cell where it has one, ``seen`` as for nodes (absent: the fake trace alone)."""
    cells: dict = {}
    for row in rows:
        if row["kind"] != KERNEL:
            continue
        key = (row["op"], row["phase"], row["dtype"])
        cell = cells.get(key)
        if cell is None:
            cell = cells[key] = dict((fake_ops.get(row["op"]) or {}).get(row["phase"], {}).get(row["dtype"]) or {})
            cell["calls"] = 0
            if not cell.get("shape") and row.get("shape"):
                cell["shape"] = row["shape"]
        cell["calls"] += row["calls"]
        if row.get("grad"):
            cell["grad"] = True
    out: dict = {}
    for (op, phase, dtype), cell in sorted(cells.items()):
        in_fake = dtype in (fake_ops.get(op) or {}).get(phase, {})
        in_real = any(dtype in (ops.get(op) or {}).get(phase, {}) for ops in real_ops)
        if in_real:
            cell["seen"] = "both" if in_fake else "real"
        out.setdefault(op, {}).setdefault(phase, {})[dtype] = cell
    return out
