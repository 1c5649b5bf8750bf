"""Model op sets: which ops (per phase and dtype key) a model dispatches; the file format and its reader.

Written by ``opcov trace`` / ``opcov zoo trace``, read by ``opcov check``, ``gaps`` and the site.
Torch-free on purpose: ``opcov check`` on a saved op set must not import torch.
One file holds one model in one mode (see docs/DATA.md):

    schema_version: 1
    kind: opset
    model: {name: llama, source: 'hf:llama', ...}
    mode: training            # or inference
    dtype: bfloat16           # the model's parameter dtype
    autocast: null            # or the autocast dtype
    optimizer: adamw          # or sgd / none (training only)
    provenance: {torch: ..., opcov: ..., created: ..., command: ..., host: ..., tracing: fake, target_device: ...,
                 traced_on: ..., notes: [...]}
    parents:                  # device-neutral parent calls, see below
      aten::scaled_dot_product_attention: {forward: {bfloat16: {calls: 2, shape: '...', args: '...',
                                                                traced_as: [aten::bmm, aten::_safe_softmax, ...]}}}
      torch.optim.AdamW.step: {optimizer: {bfloat16: {calls: 1, args: foreach=True, traced_as: [...]}}}
    summary: {distinct_ops: 61, calls: {forward: 266, backward: 345, optimizer: 50}}
    ops:
      aten::mm: {backward: {bfloat16: {calls: 24}}, forward: {bfloat16: {calls: 12, grad: true, shape: '...'}}}

``ops`` is what a backend's kernels receive. ``parents`` records the calls whose path depends on
the device (scaled_dot_product_attention, dropout, linear: a backend may register its own kernel
for a composite, or answer ``_fused_sdp_choice``) and the optimizer step, each per phase and
dtype key of its first tensor argument, with ``calls``, an example ``shape``, the arguments that
choose the path (``args``) and ``traced_as``: the ops (already in ``ops``) it decomposed into on
the tracing device, in order of first call. A verdict can re-derive the target's path from it.
"""

from __future__ import annotations

from dataclasses import dataclass

from opcov.store import data
from opcov.store.data import Problem

KIND = "opset"
MODES = ("inference", "training")
PHASES = ("forward", "backward", "optimizer")
TOP_KEYS = {"schema_version", "kind", "model", "mode", "dtype", "autocast", "optimizer",
            "provenance", "parents", "summary", "ops"}
CALL_KEYS = {"calls": int, "shape": str, "grad": bool}
PARENT_KEYS = {"calls": int, "shape": str, "args": str, "traced_as": list}


@dataclass(frozen=True)
class Call:
    """All calls of one op in one phase with one dtype key."""

    op: str
    phase: str
    dtype: str
    calls: int
    grad: bool = False  # some input required grad: training also needs this op's backward
    shape: str = ""


def calls(doc: dict) -> list[Call]:
    """The op set's calls, flattened, in file order (op, then phase, then dtype)."""
    out = []
    for op, rec in sorted(doc.get("ops", {}).items()):
        for phase in PHASES:
            for dtype, cell in sorted((rec.get(phase) or {}).items()):
                out.append(Call(op, phase, dtype, int(cell.get("calls", 1)), bool(cell.get("grad", False)),
                                str(cell.get("shape", ""))))
    return out


def validate(doc, path: str) -> list[Problem]:
    """Every problem in a parsed op-set document, with file:line."""
    if not isinstance(doc, dict):
        return [Problem(path, 1, "not an op-set file: the top level must be a mapping")]
    raw: list[tuple[tuple, str]] = []
    if doc.get("kind") != KIND:
        raw.append((("kind",), f"kind is {doc.get('kind')!r}; an op-set file says 'kind: {KIND}'"))
    if doc.get("schema_version") != data.SCHEMA_VERSION:
        raw.append((("schema_version",), f"schema_version is {doc.get('schema_version')!r}; this opcov reads "
                    f"{data.SCHEMA_VERSION} (re-trace the model with this opcov)"))
    for key in doc:
        if key not in TOP_KEYS:
            raw.append(((key,), f"unknown key {key!r}; expected one of {sorted(TOP_KEYS)}"))
    if doc.get("mode") not in MODES:
        raw.append((("mode",), f"mode is {doc.get('mode')!r}; expected one of {', '.join(MODES)}"))
    for key in ("model", "provenance", "ops"):
        if not isinstance(doc.get(key), dict):
            raw.append(((key,), f"missing or not a mapping: {key!r}"))
    model = doc.get("model") if isinstance(doc.get("model"), dict) else {}
    if not model.get("name"):
        raw.append((("model",), "model lacks 'name'"))
    prov = doc.get("provenance") if isinstance(doc.get("provenance"), dict) else {}
    for key in ("torch", "command", "created"):
        if not prov.get(key):
            raw.append((("provenance",), f"provenance lacks {key!r}: an op set without it cannot be reproduced"))
    if "parents" in doc and not isinstance(doc["parents"], dict):
        raw.append((("parents",), "parents must be a mapping of op name to record"))
    elif isinstance(doc.get("parents"), dict):
        for name, rec in doc["parents"].items():
            raw.extend(((("parents", name) + k), m) for k, m in _parent_problems(name, rec))
    ops = doc.get("ops") if isinstance(doc.get("ops"), dict) else {}
    for name, rec in ops.items():
        raw.extend(((("ops", name) + k), m) for k, m in _op_problems(name, rec))
    root = data._compose(path) if raw else None
    return [Problem(path, data._line_of(root, keys), msg) for keys, msg in raw]


def _op_problems(name, rec):
    if not isinstance(name, str) or "::" not in name:
        yield (), f"op name {name!r} is not of the form namespace::op[.overload]"
    if not isinstance(rec, dict) or not rec:
        yield (), f"{name}: record must be a non-empty mapping of phase to dtype to calls"
        return
    for phase, cells in rec.items():
        if phase not in PHASES:
            yield (phase,), f"{name}: unknown phase {phase!r}; expected one of {', '.join(PHASES)}"
            continue
        if not isinstance(cells, dict):
            yield (phase,), f"{name}: {phase} must map dtype to a call record"
            continue
        for dtype, cell in cells.items():
            if not isinstance(cell, dict):
                yield (phase,), f"{name}: {phase}.{dtype} must be a mapping such as {{calls: 3}}"
                continue
            for key, value in cell.items():
                want = CALL_KEYS.get(key)
                if want is None:
                    yield (phase,), f"{name}: {phase}.{dtype}: unknown key {key!r}"
                elif not isinstance(value, want) or (want is int and (isinstance(value, bool) or value < 1)):
                    yield (phase,), f"{name}: {phase}.{dtype}.{key} must be a {want.__name__}" + (
                        " of at least 1" if want is int else "")


def _parent_problems(name, rec):
    if not isinstance(rec, dict) or not rec:
        yield (), f"parent {name}: record must map phase to dtype to {{calls, traced_as, ...}}"
        return
    for phase, cells in rec.items():
        if phase not in PHASES or not isinstance(cells, dict):
            yield (phase,), f"parent {name}: {phase!r} must be one of {', '.join(PHASES)} mapping dtype to a record"
            continue
        for dtype, cell in cells.items():
            if not isinstance(cell, dict):
                yield (phase,), f"parent {name}: {phase}.{dtype} must be a mapping"
                continue
            for key, value in cell.items():
                want = PARENT_KEYS.get(key)
                if want is None:
                    yield (phase,), f"parent {name}: {phase}.{dtype}: unknown key {key!r}"
                elif not isinstance(value, want) or (want is list and not all(isinstance(v, str) for v in value)):
                    yield (phase,), f"parent {name}: {phase}.{dtype}.{key} must be a {want.__name__}" + (
                        " of op names" if want is list else "")


def is_opset(doc) -> bool:
    return isinstance(doc, dict) and doc.get("kind") == KIND


def load(path: str) -> dict:
    """Parse and validate an op-set file; DataError names file:line of the first problem."""
    return data.load(path, validate)


def save(doc: dict, path: str) -> None:
    """Deterministic, atomic write (the same writer as coverage files: one op per line)."""
    problems = validate(doc, path)
    if problems:  # a bug in the writer, not a user mistake: never write a file we could not read back
        raise ValueError(f"refusing to write an invalid op set: {problems[0]}")
    data.save(doc, path)


class OpSet:
    """An op-set document with the questions a notebook asks of it (``opcov.trace`` returns one)."""

    def __init__(self, doc: dict):
        self.doc = doc

    @property
    def ops(self) -> dict:
        return self.doc["ops"]

    @property
    def parents(self) -> dict:
        return self.doc.get("parents", {})

    def calls(self) -> list[Call]:
        return calls(self.doc)

    def names(self, phase: str | None = None) -> set[str]:
        """Op names, optionally only those called in one phase."""
        return {op for op, rec in self.ops.items() if phase is None or phase in rec}

    def save(self, path: str) -> None:
        save(self.doc, path)

    def __repr__(self) -> str:
        s = self.doc.get("summary", {})
        return (f"<OpSet {self.doc.get('model', {}).get('name')} {self.doc.get('mode')} {self.doc.get('dtype')}: "
                f"{s.get('distinct_ops')} ops, calls {s.get('calls')}>")
