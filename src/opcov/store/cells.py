"""Probed cells parsed once: one op's probe evidence at one dtype key, as a typed, frozen record.

In a probed file a cell is a flat mapping (docs/DATA.md): the ``fwd`` and ``bwd`` statuses, each
slot's evidence beside its status (the backward's under a ``bwd_`` prefix), and the ``samples``
the cases came from. Readers (check, the site, diff) take ``ProbedCell.from_dict`` of it instead
of reaching into the mapping with key prefixes, so the file layout is known here and in the probe
that writes it. More slots per dtype key (input tiers, precision tiers) are rows of ``SLOTS``:
they are parsed into ``ProbedCell.extra``. Torch-free.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, fields
from types import MappingProxyType

from opcov.vocab import INPUT_TIERS, SKIP_REASONS

# Slot name -> (its status key, the prefix of its evidence keys) in a cell, in display order: the op
# run as itself, its backward, then one slot per input tier (its harder case, forward only).
# Failing cases a slot keeps with their signature class (``failed``): one per status and class, and one per
# traced model; a slot holding this many may have left some out (the verdict then judges it as a whole). An
# argument sweep (opcov.probe.argsweep) names up to 24 classes a group: addmm falls back with every alpha and beta
# but 1, and a list of 16 cut short left each model's Linear judged by the cell as a whole.
MAX_FAILED = 64
SLOTS = {"forward": ("fwd", ""), "backward": ("bwd", "bwd_"), **{t: (t, f"{t}_") for t in INPUT_TIERS}}


class FrozenDict(dict):
    """A mapping read from a file (``traced``), hashable and read-only so that the record holding it stays
    frozen; still a dict for the readers that index it."""

    __slots__ = ()

    def __hash__(self):  # type: ignore[override]
        return hash(frozenset(self.items()))

    def _readonly(self, *args, **kwargs):
        raise TypeError("a probed cell's mapping is read-only")

    __setitem__ = __delitem__ = clear = pop = popitem = setdefault = update = __ior__ = _readonly


def _frozen(value):
    """A value read from a file, with lists made tuples and mappings read-only (a frozen record holds
    nothing mutable)."""
    if isinstance(value, list):
        return tuple(_frozen(v) for v in value)
    if isinstance(value, dict) and not isinstance(value, FrozenDict):
        return FrozenDict((k, _frozen(v)) for k, v in value.items())
    return value


def _as_read(value):
    """The value as the file holds it (tuples back to lists, read-only mappings back to dicts)."""
    if isinstance(value, tuple):
        return [_as_read(v) for v in value]
    if isinstance(value, dict):
        return {k: _as_read(v) for k, v in value.items()}
    return value


@dataclass(frozen=True)
class ProbedSlot:
    """One slot of a cell (the op run as itself, or its backward): a status and the evidence beside it.

    None is "not in the file": a slot the probe did not run has no status.
    """

    status: str | None = None
    err: float | tuple | None = None  # (max abs, max rel) error of the representative case, or one number
    tol: str | None = None  # tolerance class
    why: str | None = None  # first line of the error or difference
    blame: str | None = None  # how a failure was put on this op
    case: str | None = None  # id of the representative case
    cases: int | None = None
    fails: int | None = None
    unpinned: int | None = None  # failing cases not pinned on this overload
    strides: int | None = None  # cases whose output strides differed from CPU's
    after_crash: int | None = None  # cases not run after a crash or timeout of their group
    failed: tuple | None = None  # 'STATUS CASE SIG' of failing cases, with their signature class
    ran: tuple | None = None  # signature classes of cases that ran (where the probe keeps them)
    ran_part: bool | None = None  # ``ran`` names some of them only (merged with a file that kept none)
    classes_whole: bool | None = None  # ``failed`` cut at MAX_FAILED still names every failing class
    traced: FrozenDict | None = None  # zoo model -> the worst status of its own replayed calls

    @classmethod
    def from_dict(cls, cell: dict, status_key: str, prefix: str) -> ProbedSlot:
        keys = _KEYS.get(prefix)
        if keys is None:
            keys = _KEYS[prefix] = tuple((k, prefix + k) for k in EVIDENCE_KEYS)
        values = {"status": cell.get(status_key)}
        for k, key in keys:
            value = cell.get(key)
            values[k] = _frozen(value) if isinstance(value, (list, dict)) else value
        if values["status"] is None and all(v is None for v in values.values()):
            return _EMPTY  # a slot the probe did not run (most input-tier slots): one shared record
        # The frozen record's fields set at once (its generated __init__ sets them one by one through
        # object.__setattr__: ~5x slower, and a site build makes ~300k of them).
        slot = object.__new__(cls)
        slot.__dict__.update(values)
        return slot

    def evidence(self) -> list[tuple[str, object]]:
        """(key, value) of the evidence the file holds for this slot, by key, values as read."""
        return [(k, _as_read(getattr(self, k))) for k in sorted(EVIDENCE_KEYS) if getattr(self, k) is not None]


EVIDENCE_KEYS = tuple(f.name for f in fields(ProbedSlot) if f.name != "status")
_KEYS: dict = {}  # a slot's key prefix -> (field, key in the cell) of its evidence
_EMPTY = ProbedSlot()
_BLANK = dict.fromkeys(("status", *EVIDENCE_KEYS))  # a slot's fields, in order, before its cell's values


def _readers() -> dict:
    """A cell's key -> ((slot name, field), ...) of the slots that read it (SLOTS, EVIDENCE_KEYS)."""
    out: dict = {}
    for name, (status_key, prefix) in SLOTS.items():
        out.setdefault(status_key, []).append((name, "status"))
        for k in EVIDENCE_KEYS:
            out.setdefault(prefix + k, []).append((name, k))
    return {key: tuple(v) for key, v in out.items()}


_READERS = _readers()


@dataclass(frozen=True)
class ProbedCell:
    """One op at one dtype key: its forward and backward slots, any further slots, and the case sources."""

    forward: ProbedSlot
    backward: ProbedSlot
    samples: tuple | None = None  # sources of the cases (OpInfo names, canary.*, trace.*); None: not in the file
    extra: Mapping[str, ProbedSlot] = field(default_factory=lambda: MappingProxyType({}), hash=False)  # further SLOTS

    @classmethod
    def from_dict(cls, cell: dict) -> ProbedCell:
        """The record of a cell as a probed file holds it (validated by opcov.store.data): each slot as
        ProbedSlot.from_dict reads it, from one pass over the cell's keys (a slot looked up its fifteen
        keys in each cell, most of them absent: a site build reads ~60,000 cells of six slots)."""
        found: dict = {}
        for key, value in cell.items():
            readers = _READERS.get(key)
            if readers is None or value is None:
                continue
            if isinstance(value, (list, dict)):
                value = _frozen(value)
            for name, k in readers:
                found.setdefault(name, {})[k] = value
        slots = {}
        for name in SLOTS:
            values = found.get(name)
            if values is None:
                slots[name] = _EMPTY  # a slot the probe did not run
                continue
            slot = slots[name] = object.__new__(ProbedSlot)
            slot.__dict__.update(_BLANK)
            slot.__dict__.update(values)
        out = object.__new__(cls)  # the frozen fields set at once, as ProbedSlot.from_dict does
        out.__dict__.update(
            forward=slots.pop("forward"),
            backward=slots.pop("backward"),
            samples=_frozen(cell.get("samples")),
            extra=MappingProxyType(slots),
        )
        return out

    def slot(self, name: str) -> ProbedSlot:
        """A slot by name ('forward', 'backward', or one of ``extra``)."""
        return {"forward": self.forward, "backward": self.backward}.get(name) or self.extra[name]

    def slots(self) -> list[tuple[str, ProbedSlot]]:
        """(name, slot) for every slot, in SLOTS order."""
        return [(name, self.slot(name)) for name in SLOTS]

    def statuses(self) -> list[tuple[str, str]]:
        """(status key as in the file, status) of each slot that has one."""
        return [(SLOTS[name][0], s.status) for name, s in self.slots() if s.status is not None]

    def evidence(self) -> list[tuple[str | None, str, object]]:
        """(slot name, key, value) of everything beside the forward and backward statuses, values as
        read: the forward's evidence and the cell's own (samples, slot None) by key, then each further
        slot's by key, an input tier's status first (key 'status')."""
        first: list[tuple[str | None, str, object]] = [("forward", k, v) for k, v in self.forward.evidence()]
        if self.samples is not None:
            first.append((None, "samples", _as_read(self.samples)))
        out = sorted(first, key=lambda e: e[1])
        for name, s in self.slots()[1:]:
            if name in self.extra and s.status is not None:
                out.append((name, "status", s.status))
            out.extend((name, k, v) for k, v in s.evidence())
        return out


def skip_reason(rec) -> str | None:
    """Why a probed op has no cells, in words (its record is ``{skipped: <reason word>}``, with ``of:
    <functional op>`` for a variant; a file from before the words holds the sentence), else None."""
    if isinstance(rec, dict) and "skipped" in rec and not isinstance(rec["skipped"], dict):
        word = SKIP_REASONS.get(str(rec["skipped"]))
        if word is None:
            return str(rec["skipped"])
        return word.label + (f" ({rec['of']})" if rec.get("of") else "")
    return None


def record_cells(rec) -> dict[str, ProbedCell]:
    """dtype key -> ProbedCell of one probed op record, by key; {} for a skipped op or no record."""
    if not isinstance(rec, dict) or skip_reason(rec) is not None:
        return {}
    return {
        str(k): ProbedCell.from_dict(v)
        for k, v in sorted(rec.items(), key=lambda kv: str(kv[0]))
        if isinstance(v, dict)
    }
