"""Which probe findings say something about a model's calls: signature classes matched, own calls preferred.

A probe cell holds the worst of many cases, most of them not like a given model's calls: ``mean.dim``
raising when it reduces dim 0 of a 0-d tensor says nothing about a model whose calls are 3-d. So the
probe keeps each failing case with its signature class (``failed``: 'STATUS CASE SIG', see
opcov.probe.record.signature: dtype and rank per tensor argument, 0-d / empty / non-contiguous, the
path-selecting scalars that are not 1), and a model's calls keep their shapes (an op set's ``shape``).
A failure counts against a model's call only when its class is the call's; what the op set does not
record (contiguity, scalars) is taken as matching, so a finding is never dropped on a guess. And a cell
whose cases include the model's own calls, replayed one by one on the device (``traced``), is judged
from those alone for that model. Torch-free.
"""

from __future__ import annotations

import functools
import re

from opcov.sigclass import covers, parse, same_path, selectors
from opcov.store.cells import MAX_FAILED
from opcov.store.combine import (
    MAX_RAN,  # a list this long may have left classes out
    dtype_only,  # noqa: F401 - the judge reads it here
    failed_fell,
    failed_localized,
    failed_values_equal,
    parse_failed,
)
from opcov.vocab import PROBED_RANK

_SHAPE = re.compile(r"\[([0-9, ]*)\]")
MORE = "..."  # opcov.tracing.calltree.MORE: a node's classes left out
NOTED = ("crash", "timeout", "error", "unsupported", "mismatch", "fallback")  # what ``failed`` keeps


@functools.lru_cache(maxsize=4096)
def call_class(shape: str) -> tuple | None:
    """((rank, empty), ...) of the tensors of an op set's ``shape`` text ('[2, 16], []'), with True
    appended when the text was cut short ('...'); None when it names no tensor shapes (a parameter
    count, nothing recorded): a class unknown, which every finding may match."""
    if not shape or "[" not in shape:
        return None
    out = []
    for dims in _SHAPE.findall(shape):
        sizes = [int(d) for d in dims.replace(" ", "").split(",") if d]
        out.append((len(sizes), 0 in sizes))
    return (*out, True) if shape.endswith("...") else tuple(out)


@functools.lru_cache(maxsize=4096)
def case_class(sig: str) -> tuple | None:
    """((rank, empty), ...) of a probe case's signature class ('float32:0d,int64:1!empty;alpha=2');
    None when the probe recorded none."""
    if not sig:
        return None
    tensors = sig.split(";", 1)[0]
    out = []
    for t in filter(None, tensors.split(",")):
        _, _, rest = t.partition(":")
        rank, *flags = rest.split("!")
        out.append((0 if rank == "0d" else int(rank) if rank.isdigit() else -1, "empty" in flags))
    return tuple(out)


def is_class(call: str) -> bool:
    """Whether a model's call is named by its signature class (an op set's ``sig``), not by its shapes."""
    return bool(call) and not call.startswith("[") and ":" in call


def call_classes(node) -> tuple:
    """How a node's calls are matched against probe cases: its signature classes where the op set records
    them (``sig``; a class left out, ``...``, is unknown: ""), else its ``shape`` text."""
    sig = getattr(node, "sig", "")
    if not sig:
        return (node.shape,)
    return tuple("" if w == MORE else w for w in sig.split())


def matches(sig: str, shape: str) -> bool:
    """Whether a failing case of class ``sig`` may be like a call of ``shape``: the call's signature class
    (``is_class``: the same path, opcov.sigclass.same_path), or its shape text (the same number of tensor
    arguments, each of the same rank and emptiness). Unknown on either side matches."""
    if is_class(shape):
        return not sig or same_path(sig, shape)
    case, call = case_class(sig), call_class(shape)
    if case is None or call is None:
        return True
    if call and call[-1] is True:  # cut short: its first tensors only
        call = call[:-1]
        return case[: len(call)] == call
    return case == call


def all_values_equal(slot, keep) -> bool:
    """Whether the slot's failing items ``keep`` selects are some, each a mismatch that is a dtype only
    (its 'values=equal' tag), and the list names every failing class (not cut, or ``classes_whole``)."""
    items = [t for t in slot.failed or () if keep(*_parse(t)[:2])]
    return bool(items) and not cut(slot) and all(failed_values_equal(t) for t in items)


def uncovered(slot, shapes: tuple, reads: frozenset | None = None) -> tuple:
    """The model's call classes that no case of the slot ran with (``ran``, where the probe keeps it whole, not
    ``ran_part``):
    a pass on other arguments is no evidence for them (opcov.sigclass.covers). () where the slot keeps no
    list, a list that may be cut short, or calls named by shapes only. A case whose values differed only in
    outputs the model never reads (``reads``), with nothing through the CPU fallback, ran its class too: the
    reads of every multi-output op (a loss's ``total_weight``, a norm's saved statistics) are the model's."""
    ran = slot.ran
    if not ran or slot.ran_part or len(ran) >= MAX_RAN:
        return ()
    also = [
        sig for text, (_, _, sig) in zip(slot.failed or (), map(_parse, slot.failed or ())) if _ran_unread(text, reads)
    ]
    return tuple(c for c in shapes if is_class(c) and not any(covers(str(r), c) for r in (*ran, *also)))


def shown_ran(slot, shapes: tuple) -> bool:
    """Whether the slot's ``ran`` list (whole or partial) names, for each of the model's call classes, a class
    covering it; True where the calls keep no class (an older op set: nothing to compare)."""
    classes = [c for c in shapes if is_class(c)]
    if not classes:
        return True
    ran = (slot.ran or ()) if slot is not None else ()
    return all(any(covers(str(r), c) for r in ran) for c in classes)


def _ran_unread(text, reads) -> bool:
    """Whether a failing item is a value mismatch only on outputs the model never reads, nothing through the fallback."""
    return unread(text, reads) is not None and not failed_fell(text)


def describe(shapes) -> str:
    """The model's calls in words: 'shapes [2, 16, 64]; [64]'."""
    shown = list(dict.fromkeys(s for s in shapes if s))[:3]
    return "shapes " + "; ".join(shown) if shown else "shapes not recorded"


def _parse(text) -> tuple[str, str, str]:
    return parse_failed(text)


def _outputs(text) -> frozenset | None:
    """The outputs a failing case's mismatch was on (its ' out=1,2'), or None where it names none (any
    other failure, or an older file): then it counts whatever the model reads."""
    _, sep, rest = str(text).partition(" out=")
    if not sep:
        return None
    try:
        return frozenset(int(i) for i in rest.split(","))
    except ValueError:
        return None


def scalar_dependent(sig: str, ran) -> bool:
    """Whether a failing case of class ``sig`` failed because of its path scalars: it has some
    ('...;alpha=0.6,beta=0.2') and a case of the same tensor classes with none ran (``ran``: the classes
    of the cases that ran). addmm on openxla falls back on every OpInfo sample, all with alpha and beta
    not 1, while addmm.decomposed's samples of the same classes, with the defaults, ran compiled."""
    tensors, sep, _ = str(sig).partition(";")
    if not sep or not selectors(sig):
        return False
    return any(str(r).partition(";")[0] == tensors and not selectors(str(r)) for r in ran)


def cut(slot) -> bool:
    """Whether the slot's ``failed`` list may have left a failing class out: it holds MAX_FAILED items and
    the probe did not mark it ``classes_whole`` (every class named, only other models' repeats left out)."""
    return len(slot.failed or ()) >= MAX_FAILED and not slot.classes_whole


def listed(slot, keep) -> bool:
    """Whether the slot's ``failed`` list holds an item ``keep`` (status, case) selects."""
    return any(keep(*_parse(text)[:2]) for text in slot.failed or ())


def unread(text, reads) -> frozenset | None:
    """The outputs a ``failed`` item's value mismatch was on, where the model's calls read none of them
    (``reads``: the indices they read, from the op set's ``reads=``; None: not recorded); else None."""
    if reads is None or not str(text).startswith("mismatch "):
        return None
    outs = _outputs(text)
    return outs if outs is not None and not outs & reads else None


def fell_back(slot, keep=lambda status, case: True) -> tuple[str, ...]:
    """The ops that the slot's failing cases (those ``keep`` selects) ran through the backend's CPU
    fallback while their status is another, a value mismatch (their ' fell=' tags), sorted."""
    fell: set = set()
    for text in slot.failed or ():
        status, case, _ = _parse(text)
        if keep(status, case):
            fell.update(failed_fell(text))
    return tuple(sorted(fell))


def unread_text(outs) -> str:
    """'output 1' / 'outputs 1, 2': the outputs a note names."""
    return ("output " if len(outs) == 1 else "outputs ") + ", ".join(str(i) for i in sorted(outs))


def all_unread(slot, reads, keep=lambda status, case: True) -> frozenset | None:
    """The outputs the slot's value mismatches were on when every failing case (those ``keep`` selects)
    is a mismatch on outputs the model never reads (``unread``) and the list is whole (not cut at
    MAX_FAILED); else None: the mismatch counts as it always did."""
    failed = slot.failed
    if reads is None or not failed or cut(slot):
        return None
    outs: frozenset = frozenset()
    found = False
    for text in failed:
        status, case, _ = _parse(text)
        if not keep(status, case):
            continue
        found = True
        off = unread(text, reads)
        if off is None:
            return None
        outs |= off
    return outs if found else None


def own_calls(slot, model: str, shapes: tuple = ()) -> tuple | None:
    """(status, case, why) of ``model``'s own calls replayed on the device for this cell, when the probe
    replayed them (``traced``); else None. Also None where every failing item of the model names a class and
    none is the class of a call of ``shapes`` (this op set's calls): the model's other calls failed (another
    mode's, as a serve replay's sliding-window slice past its dimension), not these."""
    traced = slot.traced if isinstance(slot.traced, dict) else None
    if not model or not traced or model not in traced:
        return None
    status = str(traced[model])
    prefix = f"trace.{model}|"
    mine = [sig for s, c, sig in map(_parse, slot.failed or ()) if c.startswith(prefix)]
    if shapes and mine and not cut(slot) and all(is_class(sig) for sig in mine):
        if not any(matches(sig, shape) for sig in mine for shape in shapes):
            return None
    case = next((c for s, c, _ in map(_parse, slot.failed or ()) if s == status and c.startswith(prefix)), "")
    why = slot.why if case and case == slot.case else ""
    return status, case, why or ""


def by_class(
    slot, shapes: tuple, reads: frozenset | None = None, *, dtype_note: bool = True, pointwise: bool = False
) -> tuple | None:
    """How the cell's failing cases bear on calls of ``shapes`` that read outputs ``reads`` (None: not
    recorded): None when the cell keeps no classes (an older file), its status is not a failure, or its
    list may be cut short (then the cell is judged as a whole); else (status, case, note): the worst status
    among failing cases of the calls' class, but for value mismatches only on outputs the calls never
    read (each a note), or, when none is left, 'pass' (its other cases ran; the note says what failed and
    why it does not count) or 'unknown' (no case of this class ran). Mismatches of an output's dtype alone
    (values equal) are a pass with a note where ``dtype_note`` (no call returns the output to the model's
    caller), else a mismatch. ``pointwise`` (the op's tag): a value mismatch at another rank counts too
    (``_fell_at_other_ranks``)."""
    status = slot.status
    failed = slot.failed
    if status not in NOTED or not failed or cut(slot) or not shapes:
        return None
    failed = newest(failed)
    items = [_parse(t) for t in failed]
    ran_alike = _ran_alike(slot, shapes)
    like = [
        (text, s, c, sig)
        for text, (s, c, sig) in zip(failed, items)
        if any(matches(sig, shape) for shape in shapes) and not (ran_alike and ";" not in sig)
    ]
    if not like and not ran_alike:
        like = _fell_at_other_ranks(failed, items, shapes, pointwise)
    pinned = [item for item in like if not failed_localized(item[0])]
    if like and not pinned:  # failures only pinned here by replaying another op's failed case: not proof
        _, s0, c0, sig0 = like[0]
        note = (
            f"{s0} only when replayed alone right after a failed case of another op (case {c0}, {sig0}), "
            "where a lazy device may fail calls that run in a fresh process"
        )
        return ("pass", "", note + "; its other cases ran") if _ran_beyond(slot, len(items)) else ("unknown", "", note)
    like = pinned
    scalar_note = ""
    known = all(is_class(s) for s in shapes)  # the calls' own scalars are recorded: matches compared them
    by_scalars = [item for item in like if slot.ran and not known and scalar_dependent(item[3], slot.ran)]
    if by_scalars:  # failures that hang on path scalars (alpha, beta) the model's calls are not known to have
        _, s0, c0, sig0 = by_scalars[0]
        scalar_note = (
            f"{s0} on probe cases like this model's calls only with {sig0.split(';', 1)[1]} (case {c0}); "
            "with the default scalars those cases ran, and the op set does not record this model's scalars"
        )
        like = [item for item in like if item not in by_scalars]
        if not like:
            return "pass", "", scalar_note
    like, magnitude_note = _past_exact_range(like)
    if not like and magnitude_note:
        return "pass", "", "; ".join(filter(None, (scalar_note, magnitude_note)))
    off = [(unread(text, reads), c) for text, _, c, _ in like]
    hit = [(s, c) for (_, s, c, _), (outs, _) in zip(like, off) if outs is None]
    unread_note = ""
    if len(hit) < len(like):
        outs = frozenset().union(*(o for o, _ in off if o is not None))
        first = next(c for o, c in off if o is not None)
        unread_note = (
            f"values differ from CPU only in {unread_text(outs)} on a probe case like this model's calls "
            f"(case {first}), which this model never reads"
        )
    # a mismatch on unread outputs that ran ops through the CPU fallback still ran through it
    hit += [("fallback", c) for (text, _, c, _), (outs, _) in zip(like, off) if outs is not None and failed_fell(text)]
    fell = sorted({op for text, _, _, _ in like for op in failed_fell(text)})
    fell_note = f"ran {', '.join(fell)} through the CPU fallback" if fell else ""
    said = "; ".join(filter(None, (fell_note, unread_note, scalar_note, magnitude_note)))
    if hit:
        s, c = min(hit, key=lambda sc: (PROBED_RANK.get(sc[0], 99), sc[1]))
        if dtype_note and s == "mismatch" and all(failed_values_equal(t) for t, s1, _, _ in like if s1 == "mismatch"):
            return "pass", "", "; ".join(filter(None, (_dtype_note(like), said)))
        return s, c, said
    if said:
        return "pass", "", said
    sigs = ", ".join(dict.fromkeys(f"{sig or '?'} ({s}, case {c})" for s, c, sig in items[:3]))
    note = f"fails only on probe cases unlike this model's calls: {sigs}; this model's calls have {describe(shapes)}"
    if _ran_beyond(slot, len(items)):
        return "pass", "", note
    return "unknown", "", f"every probe case failed or fell back, none like this model's calls ({note})"


INT_CANARY = "canary.int64_"  # the probe's int64 canaries (opcov.probe.cases): values past an exact range


def _past_exact_range(like: list) -> tuple[list, str]:
    """``like`` without the value mismatches of int64 canary cases, and a note for them. Such a canary's values
    lie past float32's exact integers (2**24) or int32's range on purpose (PyTorch/XLA divides int64 through
    float32): the call's class matches, but whether the model's own values are that large (a hash bucket, a big
    index) no op set records, so such a mismatch is said, not counted (smaller values come out exact). A float64
    canary stays a mismatch: narrowing float64 changes every value, at float32's precision."""
    past = [item for item in like if item[2].startswith(INT_CANARY) and item[1] == "mismatch"]
    if not past:
        return like, ""
    note = (
        f"values differ from CPU on a canary case of this class (case {past[0][2]}), whose int64 values lie "
        "past float32's exact integers or int32's range: exact for smaller values, other values for a model "
        "whose values are that large (hashes, large indices)"
    )
    return [item for item in like if item not in past], note


def newest(failed) -> list:
    """``failed`` without an item whose case a later probe named again with a whole class (one with ';'): the same
    case (ids are a sample's place among its OpInfo's samples), known better; a probe written before classes
    named every argument kept 'float32:3,float32:1,float32:1,float32:1', which matches any arguments."""
    items = [_parse(t) for t in failed]
    whole = {c for _, c, sig in items if ";" in sig}
    return [t for t, (_, c, sig) in zip(failed, items) if ";" in sig or c not in whole]


def _dtype_note(like: list) -> str:
    """The words for mismatches of an output's dtype alone (each item tagged values=equal)."""
    _, _, c, sig = next(item for item in like if item[1] == "mismatch")
    return (
        f"an output's dtype differs from CPU's, its values do not (case {c}, {sig}): only a consumer that "
        "relies on CPU's dtype would see it"
    )


def _fell_at_other_ranks(failed, items, shapes: tuple, pointwise: bool = False) -> list:
    """The fallback items, and the mismatches of an output's dtype alone (values=equal), whose class is the
    calls' but for the ranks of their tensors (each of some elements and at least one dimension on both sides),
    where no case of the calls' own class failed or ran: whether an op has a kernel of its own does not hang on
    the rank (PyTorch/XLA runs huber_loss and the cumulative minimum through the CPU fallback at every rank
    probed), nor does the dtype type promotion gives its result (its cumsum of bool stays bool, CPU's is int64,
    at every rank), and a pass at another rank would otherwise decide alone. Errors and value mismatches stay
    rank-bound: a 0-d reduction's error says nothing of a 2-d one; but a pointwise op (``pointwise``, its tag)
    computes each element alike at every rank, so its value mismatches count at the calls' ranks too
    (PyTorch/XLA's selu and celu backward differ from CPU at ranks 1 and 2 alike)."""
    out = []
    for text, (s, c, sig) in zip(failed, items):
        if not (s == "fallback" or s == "mismatch" and (pointwise or failed_values_equal(text))):
            continue
        if not is_class(sig) or any(r < 1 or "empty" in f for _, r, f in parse(sig)[0]):
            continue
        if any(is_class(call) and covers(sig, call) and _ranked(call) for call in shapes):
            out.append((text, s, c, sig))
    return out


def _ranked(call: str) -> bool:
    return all(r >= 1 and "empty" not in f for _, r, f in parse(call)[0])


def _ran_alike(slot, shapes: tuple) -> bool:
    """Whether, for every call of ``shapes`` (each named by its class), a case of the same path ran clean (the
    slot's ``ran``, kept whole): then a failing case whose class the probe could not record (the device raised
    in an op CPU's path never called), or recorded before classes named every argument (a text without ';',
    which matches any arguments), is of another class, not the model's."""
    ran = slot.ran
    if not ran or len(ran) >= MAX_RAN or not shapes or not all(is_class(c) for c in shapes):
        return False
    return all(any(same_path(str(r), c) for r in ran) for c in shapes)


def _ran_beyond(slot, named: int) -> bool:
    """Whether some of the cell's cases ran clean: neither counted in ``fails`` nor among the ``named`` items of
    its (whole) list, where a case through the CPU fallback is named though ``fails`` does not count it: a cell
    that only fell back ran nothing."""
    fails = slot.fails if isinstance(slot.fails, int) else 0
    cases = slot.cases if isinstance(slot.cases, int) else 0
    return cases > max(fails, named)
