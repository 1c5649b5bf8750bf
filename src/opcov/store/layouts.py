"""The ``layouts`` block of a registered file, read: which ops run at a sparse or quantized key of their own
(``RUNS``), the state an op the block does not list has at such a key (``derived``), and where that key's boxed
fallback was registered (``fallback_at``). The scan writes the block (opcov.scan.layouts) and the verdict
judges calls by it (opcov.verdict.layouts); both read it so. Torch-free."""

from __future__ import annotations

RUNS = ("kernel", "out_variant")  # an own kernel, directly or through the op's .out


def derived(rec: dict, fallback: bool) -> str:
    """The state an op without ``layouts`` has at a key where the backend has kernels: the composite its
    dense record names, else the key's boxed fallback (``fallback``: one is registered), else nothing."""
    if rec.get("fwd") == "composite":
        return "composite"
    return "fallback" if fallback else "none"


def fallback_at(block: dict, family: str) -> str:
    """Where the boxed fallback of the family's key was registered, from a ``provenance.layouts`` block; ''
    where none is."""
    source = (block.get("fallback") or {}).get(family)
    return "" if source in (None, False, "none") else str(source)
