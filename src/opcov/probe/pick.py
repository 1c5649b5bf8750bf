"""Which of a group's samples a capped probe keeps: one per signature class, the default path first.

Why: where every new graph compiles (PyTorch/XLA), a group keeps a few samples only (opcov.probe.lazy).
OpInfo lists its samples oddest first for many ops: the first three of ``amax`` are all 0-d, so a probe
that kept them raised on every case and never ran the 4-d ``keepdim=True`` reduction a model makes, and
the verdict could only say ``unknown``. A finding speaks for a model's call only when the signature
classes match (opcov.verdict.signature), so the samples kept should cover as many distinct classes as the
cap allows, in the order a model is likely to call them: tensors with elements and dimensions, selectors
at their defaults, before 0-d or empty tensors and unusual arguments. The first case that crashes a
group stops the cases after it, which is one more reason to run the common path first.

A sample's class is read from the calls it makes when run once on CPU (opcov.probe.record's recorder,
the classes an op set's ``sig=`` holds): the selectors are the aten schema's, not OpInfo's keywords.
"""

from __future__ import annotations

from opcov import sigclass
from opcov.probe.record import Calls, copied, recording

PAD = 3  # samples kept even where fewer classes are found: more shapes and values for the same path


def keep(samples: list, n: int, fn, about, torch) -> list:
    """At most ``n`` of ``samples``: each that brings a class not yet kept (a sample whose class cannot be read
    counts as its own), in ``rank`` order (the common path first); where that is fewer than ``PAD``, the
    next ones in that order up to it. The kept ones run in that order."""
    if len(samples) <= min(n, PAD):
        return samples
    keys = [classes(s, fn, about(s), torch) for s in samples]
    order = sorted(range(len(samples)), key=lambda i: (rank(keys[i]), i))
    chosen: list[int] = []
    seen: set = set()
    for i in order:
        if keys[i] - seen or not keys[i]:
            chosen.append(i)
            seen |= keys[i]
        if len(chosen) == n:
            return [samples[i] for i in chosen]
    chosen += [i for i in order if i not in chosen][: max(0, min(n, PAD) - len(chosen))]
    return [samples[i] for i in chosen]


def classes(sample, fn, bases, torch) -> frozenset:
    """(overload, path class) of each call ``sample`` makes to the ops it is about (``bases``: aten base
    names; every call where it makes none, as a Python-level OpInfo's do), run once on CPU on copies of its
    inputs; empty where it raises. The overload counts: ``mean()`` and ``mean(dim)`` are two paths."""
    (first, rest), kwargs = copied((sample.input, sample.args)), copied(sample.kwargs)
    calls = Calls()
    try:
        with torch.no_grad(), recording(calls):
            (sample.fn or fn)(first, *rest, **kwargs)
    except Exception:  # noqa: BLE001 - a sample CPU rejects: no class known, kept last
        pass
    named = {b.split("::", 1)[-1] for b in bases}
    made = [(op, sig) for (op, _), sig in calls.sigs.items()]
    mine = [(op, sig) for op, sig in made if op.split("::", 1)[-1].split(".", 1)[0] in named]
    return frozenset((op, path(sig)) for op, sig in mine or made if sig)


def path(sig: str) -> tuple:
    """What of a class picks a backend's path: per tensor, 0-d, empty, layout and whether it is bool (ranks
    above 0 and other dtypes are the group's or the probe's spread; a bool index is a mask, whose result's
    size hangs on its values), and each selector's kind (opcov.sigclass.abstract)."""
    tensors, selectors = sigclass.parse(sig)
    shape = tuple((r == 0, "empty" in f, "sparse" in f, d == "bool") for d, r, f in tensors)
    kinds = tuple(sorted((k, sigclass.abstract(k, v)) for k, v in (selectors or {}).items() if k != "__old__"))
    return shape, kinds


def rank(keys: frozenset) -> tuple:
    """How unusual a sample's calls are, least first: none known last, then by 0-d or empty tensors, then
    by the number of selectors away from their defaults."""
    if not keys:
        return (2, 0)
    odd = any(zero or empty for _, (shape, _) in keys for zero, empty, *_ in shape)
    return (int(odd), max(len(kinds) for _, (_, kinds) in keys))
