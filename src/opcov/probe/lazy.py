"""Lazy backends in the probe: execution deferred to a sync, the CPU fallback made visible, aliasing without
storage. Which backend is lazy, and how, is its record's ``lazy`` section (opcov.backends.Lazy: PyTorch/XLA).

Such a backend (PyTorch/XLA: device ``xla``, dispatch key ``XLA``) records ops into a graph and runs nothing
until the graph is synchronised, so every device step of a case ends with the record's ``sync``: a lowering
or compile error then belongs to the case that made it. An op it has no lowering for runs through its boxed
CPU fallback, which it counts per ``aten::`` overload; the sync reads and clears those counts, and a step that
ran (pass, low precision, not comparable) with ops that fell back is recorded as ``fallback`` with their names
(``Part.fallback``), never as ``pass``. Where its tensors have no storage (``untyped_storage()`` raises),
aliasing is judged from ``_is_view()``/``_base`` instead, on both sides. Each new graph compiles, so a group
keeps at most ``max_samples()`` samples (the record's ``samples``; ``OPCOV_<NAME>_MAX_SAMPLES`` overrides it),
one per signature class, the common path first (opcov.probe.pick).

The hooks are no-ops on every other device: ``probe.execute`` and ``probe.worker`` call them
unconditionally. The backend's module is imported only once a worker runs on its device.
"""

from __future__ import annotations

import os

from opcov import backends
from opcov.probe import pick
from opcov.torchenv import import_torch

# Statuses that say a step ran; with a fallback among its ops it becomes ``fallback``.
RAN = ("pass", "pass_low_precision", "not_comparable")

_state: dict = {"active": None, "fell": []}  # active: the lazy record of the device being probed


def record_for(device_type: str) -> backends.Backend | None:
    """The record of the lazy backend whose tensors live on ``device_type``, or None."""
    rec = backends.for_device(device_type)
    return rec if rec is not None and rec.lazy is not None else None


def samples_env(rec: backends.Backend) -> str:
    """The environment variable that overrides how many samples a group keeps on ``rec``'s device."""
    return f"OPCOV_{rec.name.upper()}_MAX_SAMPLES"


def max_samples(rec: backends.Backend) -> int:
    """Samples kept per group (an OpInfo at one dtype) on a lazy backend: its record's, or the environment's."""
    env = samples_env(rec)
    text = os.environ.get(env, "").strip()
    if not text:
        return rec.lazy.samples if rec.lazy else 0
    try:
        n = int(text)
    except ValueError:
        raise ValueError(f"{env}={text!r} is not a whole number of samples") from None
    if n < 1:
        raise ValueError(f"{env}={text!r}: keep at least 1 sample per group")
    return n


def sync_for(device_type: str, default):
    """The executor's synchronise function: on a lazy backend its record's sync (which also reads the fallback
    counts); elsewhere ``default``."""
    rec = record_for(device_type)
    if rec is None or rec.lazy is None or rec.sync is None:
        return default
    lazy, sync_hook = rec.lazy, rec.sync
    torch = import_torch()
    _clear(lazy)
    _state["active"] = lazy

    def sync() -> None:
        try:
            sync_hook(torch)
        finally:
            # What fell back since the last sync (or device error), read before anything
            # else runs on the device: judging copies the outputs back, through its kernels.
            _state["fell"] = _fell(lazy)
            _clear(lazy)

    return sync


def _clear(lazy: backends.Lazy) -> None:
    if lazy.clear is not None:
        lazy.clear()


def _fell(lazy: backends.Lazy) -> list[str]:
    """The overloads the backend ran through its CPU fallback since its counts were cleared, host reads left out."""
    return sorted(set(lazy.fell_back() if lazy.fell_back else ()) - set(lazy.host_reads))


def fallback_reader(device_type: str):
    """A function giving what ran through the device's CPU fallback since this call (the compile probe reads
    it after each compiled graph: opcov.probe.compiled); one giving nothing off a lazy backend."""
    rec = record_for(device_type)
    if rec is None or rec.lazy is None:
        return lambda: []
    lazy = rec.lazy
    _clear(lazy)
    return lambda: _fell(lazy)


def forget() -> None:
    """A device step raised: what fell back in it must not be counted in the next step."""
    if _state["active"] is not None:
        _clear(_state["active"])
        _state["fell"] = []


def mark(part: dict | None) -> None:
    """After a device step was judged: a step that ran with ops through the CPU fallback is
    ``fallback``; the fallen-back overloads go in ``part['fallback']`` either way."""
    lazy = _state["active"]
    if lazy is None or part is None:
        return
    fell = _state["fell"]
    forget()  # judging ran on the step's outputs: nothing of that belongs to the next step
    if not fell:
        return
    part["fallback"] = list(fell)
    if part.get("status") in RAN:
        was = part["status"]
        part["status"] = "fallback"
        part["why"] = (
            f"ran through {lazy.what}'s CPU fallback ({', '.join(fell)}); "
            f"the values {'pass' if was.startswith('pass') else 'were not comparable'}"
        )[:300]


def alias_key(t):
    """While probing a backend whose tensors have no storage, the identity aliasing is judged by, on the device
    and on CPU alike: a tensor's view base (``_base``), else the tensor itself. The CPU side must be judged by the
    same rule: ops that share storage without being autograd views (``detach``, ``_unsafe_view``) would otherwise
    differ on every backend that judges by views. None elsewhere (the caller uses storage identity)."""
    lazy = _state["active"]
    if lazy is None or lazy.storage:
        return None
    base = t._base if t._is_view() and t._base is not None else t
    return ("view", id(base))


def cap(loaded, device_type: str, source: str = ""):
    """On a lazy backend, keep at most ``max_samples()`` of an OpInfo group's samples, one per signature class
    with the common path first, at least ``pick.PAD`` (opcov.probe.pick), input-tier samples after them. A replayed trace
    (``trace.<model>``) keeps every call: each of its samples is another op; an OpInfo's argument sweep
    (``sweep.<opinfo>``) and an overridden composite's calls (``composite.<opinfo>``) each: one per class already."""
    rec = record_for(device_type)
    if rec is None or source.startswith(("trace.", "sweep.", "composite.")):
        return loaded
    n = max_samples(rec)
    plain = [s for s in loaded.samples if s.tier is None]
    if len(plain) > min(n, pick.PAD):
        for i, sample in enumerate(plain):
            sample.index = i  # its case id, whichever are kept
        kept = pick.keep(plain, n, loaded.fn, loaded.aten_of, import_torch())
        loaded.samples = kept + [s for s in loaded.samples if s.tier is not None]
    return loaded


def provenance_notes(backend: backends.Backend) -> list:
    """What a probed file of a lazy backend says about how it was run."""
    lazy = backend.lazy
    if lazy is None:
        return []
    reads = ", ".join(lazy.host_reads)
    notes = [
        f"{lazy.what}: at most {max_samples(backend)} samples per OpInfo and dtype ({samples_env(backend)}), "
        "one per signature class, the common path first; every device step ends with its sync, so a lowering "
        "or compile error is the step's own",
        f"{lazy.what}'s CPU fallback is counted per op (read at each sync): a step that ran with an op through it "
        "is 'fallback', naming the ops, never 'pass'" + (f" ({reads}, a host read, is not counted)" if reads else ""),
    ]
    if not lazy.storage:
        notes.append(
            f"{lazy.what}'s tensors have no storage: view aliasing is judged from _is_view()/_base on the device and "
            "on CPU alike (which input an output is a view of, or the input itself for an in-place op); storage "
            "shared without an autograd view (detach, _unsafe_view) is not judged"
        )
    return notes
