"""PyTorch/XLA in the probe: lazy execution, its CPU fallback made visible, aliasing without storage.

PyTorch/XLA (device ``xla``, dispatch key ``XLA``) records ops into a graph and runs nothing until
the graph is synchronised, so every device step of a case ends with ``torch_xla.sync()``: a lowering
or compile error then belongs to the case that made it. An op it has no lowering for runs through
its boxed CPU fallback, which counts every call per ``aten::`` overload (torch_xla.debug.metrics);
the sync reads and clears those counts, and a step that ran (pass, low precision, not comparable)
with ops that fell back is recorded as ``fallback`` with their names (``Part.fallback``), never as
``pass``. XLA tensors have no storage (``untyped_storage()`` raises): aliasing is judged from
``_is_view()``/``_base`` instead, on both sides. PJRT's CPU client compiles every new graph, so a group keeps at
most ``max_samples()`` samples (``OPCOV_XLA_MAX_SAMPLES``, default 3).

The hooks are no-ops on every other device: ``probe.execute`` and ``probe.worker`` call them
unconditionally. torch_xla is imported only once a worker runs on ``xla``.
"""

from __future__ import annotations

import os

DEVICE_TYPE = "xla"
MAX_SAMPLES_ENV = "OPCOV_XLA_MAX_SAMPLES"
DEFAULT_MAX_SAMPLES = 3
# Statuses that say a step ran; with a fallback among its ops it becomes ``fallback``.
RAN = ("pass", "pass_low_precision", "not_comparable")
# Reading a scalar to the host goes through the fallback's kernel on XLA (item(), a Python bool of
# a tensor): a host sync, as on every device, not a missing lowering; kept out of ``fallback``.
HOST_READS = frozenset({"aten::_local_scalar_dense"})

_state: dict = {"active": False, "fell": []}


def max_samples() -> int:
    """Samples kept per group on xla (an OpInfo at one dtype): ``OPCOV_XLA_MAX_SAMPLES``, default 3."""
    text = os.environ.get(MAX_SAMPLES_ENV, "").strip()
    if not text:
        return DEFAULT_MAX_SAMPLES
    try:
        n = int(text)
    except ValueError:
        raise ValueError(f"{MAX_SAMPLES_ENV}={text!r} is not a whole number of samples") from None
    if n < 1:
        raise ValueError(f"{MAX_SAMPLES_ENV}={text!r}: keep at least 1 sample per group")
    return n


def sync_for(device_type: str, default):
    """The executor's synchronise function: on xla the lazy graph's sync (which also reads the
    fallback counts); elsewhere ``default``."""
    if device_type != DEVICE_TYPE:
        return default
    import torch_xla
    import torch_xla.debug.metrics as met

    met.clear_counters()
    _state["active"] = True

    def sync() -> None:
        try:
            torch_xla.sync()
        finally:
            # What fell back since the last sync (or device error), read before anything
            # else runs on the device: judging copies the outputs back, through XLA kernels.
            _state["fell"] = _fell(met)
            met.clear_counters()

    return sync


def _fell(met) -> list[str]:
    """The overloads PyTorch/XLA ran through its CPU fallback since its counters were cleared, host
    reads left out."""
    return sorted(set(met.executed_fallback_ops()) - HOST_READS)


def fallback_reader():
    """A function giving what ran through the CPU fallback since this call (the compile probe reads it
    after each compiled graph: opcov.probe.compiled)."""
    import torch_xla.debug.metrics as met

    met.clear_counters()
    return lambda: _fell(met)


def forget() -> None:
    """A device step raised: what fell back in it must not be counted in the next step."""
    if _state["active"]:
        import torch_xla.debug.metrics as met

        met.clear_counters()
        _state["fell"] = []


def mark(part: dict | None) -> None:
    """After a device step was judged: a step that ran with ops through the CPU fallback is
    ``fallback``; the fallen-back overloads go in ``part['fallback']`` either way."""
    if not _state["active"] or part is None:
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
            f"ran through PyTorch/XLA's CPU fallback ({', '.join(fell)}); "
            f"the values {'pass' if was.startswith('pass') else 'were not comparable'}"
        )[:300]


def alias_key(t):
    """While probing xla, the identity aliasing is judged by, on the device and on CPU alike: a
    tensor's view base (``_base``), else the tensor itself. XLA tensors have no storage, and the
    CPU side must be judged by the same rule: ops that share storage without being autograd views
    (``detach``, ``_unsafe_view``) would otherwise differ on every backend that judges by views.
    None off xla (the caller uses storage identity)."""
    if not _state["active"]:
        return None
    base = t._base if t._is_view() and t._base is not None else t
    return ("view", id(base))


def cap(loaded, device_type: str, source: str = ""):
    """On xla, keep an OpInfo group's first ``max_samples()`` samples (input-tier samples stay: they
    come after the plain ones, one each). A replayed trace (``trace.<model>``) keeps every call: each
    of its samples is another op."""
    if device_type != DEVICE_TYPE or source.startswith("trace."):
        return loaded
    n = max_samples()
    plain = [s for s in loaded.samples if s.tier is None]
    if len(plain) > n:
        loaded.samples = plain[:n] + [s for s in loaded.samples if s.tier is not None]
    return loaded


def provenance_notes(backend_name: str) -> list:
    """What a probed file of xla says about how it was run."""
    if backend_name != DEVICE_TYPE:
        return []
    return [
        f"PyTorch/XLA: at most {max_samples()} samples per OpInfo and dtype ({MAX_SAMPLES_ENV}); "
        "every device step ends with torch_xla.sync(), so a lowering or compile error is the step's own",
        "PyTorch/XLA's CPU fallback is counted per op (torch_xla.debug.metrics.executed_fallback_ops, "
        "read at each sync): a step that ran with an op through it is 'fallback', naming the ops, never "
        "'pass' (aten::_local_scalar_dense, the host read of item(), is not counted)",
        "XLA tensors have no storage: view aliasing is judged from _is_view()/_base on the device and on "
        "CPU alike (which input an output is a view of, or the input itself for an in-place op); storage "
        "shared without an autograd view (detach, _unsafe_view) is not judged",
    ]
