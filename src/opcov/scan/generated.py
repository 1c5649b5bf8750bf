"""What a kernel torchgen generated calls, read from the code generator's rules: the reach of such an op
where recording found no call that fits (no meta kernel and no cpu call, inputs of a layout no call makes).

torchgen writes three kinds of kernels that have no source of their own (torchgen/native_function_generation.py
and the CompositeViewCopyKernels.cpp template):

- an out= overload of a functional op (tag ``generated``) calls the functional op, then ``resize_output``
  (``aten::resize_``) and ``copy_`` into each out;
- a functional overload of a mutable op (tag ``generated``) clones the arguments it would mutate
  (``aten::clone``) and calls the in-place or out= overload on the clones;
- ``X_copy``, the copy of a view op X (tag ``view_copy``), calls X and clones the result.

So such an op runs on a backend exactly where the op it wraps does; the ops it wraps are judged as any other.
"""

from __future__ import annotations

from opcov.catalog import overload_name, resolve_overload
from opcov.scan.reach import _functional, _out_names

WHY = "reach read from torchgen's rule for the kernel it generated (no recorded call fitted)"


def _writes(overload) -> bool:
    return any(a.alias_info is not None and a.alias_info.is_write for a in overload._schema.arguments)


def _overload(torch, packet: str, name: str):
    try:
        return resolve_overload(torch, f"aten::{packet}" + (f".{name}" if name != "default" else ""))
    except (AttributeError, RuntimeError):
        return None


def reach(torch, name: str) -> tuple[str, ...] | None:
    """The ops ``name``'s generated kernel calls, or None when torchgen did not generate it (or the op
    it wraps cannot be found)."""
    try:
        overload = resolve_overload(torch, name)
    except (AttributeError, RuntimeError):
        return None
    tags = set(getattr(overload, "tags", ()))
    packet = overload._schema.name.split("::", 1)[1]
    own = overload._overloadname
    if torch.Tag.view_copy in tags and packet.endswith("_copy") and not _out_names(overload._schema):
        view = _overload(torch, packet[: -len("_copy")], own)
        return (overload_name(view), "aten::clone") if view is not None else None
    if torch.Tag.generated not in tags:
        return None
    if _out_names(overload._schema):
        functional = _functional(overload)
        return (overload_name(functional), "aten::resize_", "aten::copy_") if functional is not None else None
    if _writes(overload):
        return None
    inplace = _overload(torch, packet + "_", own)
    if inplace is not None and _writes(inplace):
        return ("aten::clone", overload_name(inplace))
    for other in overload.overloadpacket.overloads():
        candidate = getattr(overload.overloadpacket, other)
        found = _functional(candidate) if _out_names(candidate._schema) else None
        if found is not None and overload_name(found) == name:
            return ("aten::clone", overload_name(candidate))
    return None


def fill(torch, records: dict) -> int:
    """Give each composite with no recorded reach whose kernel torchgen generated the reach of that kernel
    (``via``), and say so in its ``why``; returns how many were given one."""
    given = 0
    for name, rec in records.items():
        if rec.get("fwd") != "composite" or rec.get("via") is not None or not name.startswith("aten::"):
            continue
        ops = reach(torch, name)
        if ops is None:
            continue
        rec["via"] = list(ops)
        parts = [p for p in str(rec.get("why") or "").split("; ") if p and not p.startswith("reach unresolved:")]
        rec["why"] = "; ".join([WHY, *parts])
        given += 1
    return given
