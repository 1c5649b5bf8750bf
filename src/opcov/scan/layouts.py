"""What a backend's Sparse, SparseCsr and Quantized keys hold for each op, read from the dispatcher.

Why: a sparse or quantized tensor dispatches on a key of its own, ``Sparse<backend>``,
``SparseCsr<backend>`` or ``Quantized<backend>`` (``SparseXLA``, ``QuantizedPrivateUse1``...), never on the
backend's dense key. What the dense key holds says nothing about them: PyTorch/XLA's CPU fallback is
registered for the ``XLA`` key only, so ``_sparse_coo_tensor_with_dims_and_tensors``, which the dense
scan finds caught by that fallback, raises on xla ("Could not run ... from the 'SparseXLA' backend").

For each family of keys the state of an op is read from ``_dispatch_dump_table`` exactly as the dense
scan reads the dense key (opcov.scan.registered):

- ``kernel``: an own kernel at the key;
- ``out_variant``: the functional wrapper of a structured op whose ``.out`` has an own kernel there;
- ``composite``: a composite kernel (CompositeExplicitAutograd or CompositeImplicitAutograd): generic
  code, whose reach with tensors of that layout is not recorded;
- ``fallback``: a boxed fallback registered for the key itself;
- ``none``: nothing: a call raises.

Recorded compactly (``layouts`` in an op's record) only where it says something the rest of the record
does not: an op with an own kernel (or ``.out`` kernel) at some key, an op that on CPU has kernels only
for some layouts (``only``: its calls take or make such tensors whatever their inputs, as
``_sparse_coo_tensor_with_dims_and_tensors`` does), and, at the keys where the backend has kernels, an
op whose state is not the one its dense record implies (``derived``). The file says which keys were read
(``provenance.layouts``). ``python -m opcov.scan.layouts FILE...`` adds both to registered files made
before this, reading the dispatcher of the torch (and backend package) installed here, which must be
the file's own build; nothing else in the file changes.
"""

from __future__ import annotations

import functools
from collections import Counter

from opcov.scan.amend import amend
from opcov.store.data import LAYOUT_FAMILIES, LAYOUT_STATES
from opcov.store.layouts import RUNS, derived

# (field, dispatch key prefix, the tensors in words)
FAMILIES = (
    ("sparse", "Sparse", "sparse (COO) tensors"),
    ("sparse_csr", "SparseCsr", "compressed sparse (CSR, CSC, BSR, BSC) tensors"),
    ("quantized", "Quantized", "quantized tensors"),
)
NAMES = LAYOUT_FAMILIES
STATES = LAYOUT_STATES
assert NAMES == tuple(f for f, _, _ in FAMILIES)
ONLY = "only"  # the key of ``layouts`` naming the families an op has its only CPU kernels for
REFERENCE = "CPU"  # the key whose kernels tell an op of one layout from a dense one
COMMAND = "python -m opcov.scan.layouts"
HOW = (
    "read from the dispatcher's table of each key (torch._C._dispatch_dump_table), as the dense key is; "
    "an op with no `layouts` has, at a key where this backend has kernels, the composite kernel its `fwd` "
    "names (fwd: composite) or else nothing (or the key's boxed fallback); at a key where it has none, no "
    "tensor of that layout can be made here"
)


def keys(C, dispatch_key: str) -> dict[str, str | None]:
    """family -> the runtime key a tensor of that layout dispatches on for this backend (``SparseXLA``), or
    None where torch has no such key (a backend whose key is not a backend component)."""
    members = C.DispatchKey.__members__
    return {f: (prefix + dispatch_key if prefix + dispatch_key in members else None) for f, prefix, _ in FAMILIES}


def state(table: dict, key: str | None, delegate: str | None = None, delegate_table: dict | None = None) -> str:
    """An op's state at ``key`` from its dispatch table (``opcov.scan.dispatch.dispatch_table``): see the module's
    list. A structured op's functional wrapper (``delegate``: its ``.out``) is followed one step."""
    entry = table.get(key) if key else None
    if entry is None:
        return "none"
    if entry.tag == "kernel":
        return "kernel"
    if entry.tag == "backend fallback":
        return "none" if entry.fallthrough else "fallback"
    if entry.tag == "default backend kernel" and delegate and delegate_table is not None:
        via = state(delegate_table, key)
        return "out_variant" if via in RUNS else via
    if entry.tag in ("default backend kernel", "math kernel"):
        return "composite"
    return "none"


def only(table: dict) -> list[str]:
    """The families an op has its only CPU kernels for: kernels at ``SparseCPU`` (...) and none of its own,
    nor a composite, at ``CPU``. Every call of such an op takes or makes tensors of those layouts."""
    dense = table.get(REFERENCE)
    if dense is not None and dense.tag != "backend fallback":
        return []
    return [f for f, prefix, _ in FAMILIES if state(table, prefix + REFERENCE) == "kernel"]


def record(C, dispatch_key: str, ops: dict, tables, delegates: dict) -> dict:
    """Add ``layouts`` to the records of ``ops`` (name -> a registered record, changed in place) that need
    one, for the backend of ``dispatch_key``; ``tables(name)`` gives an op's dispatch table. Returns the
    ``provenance.layouts`` block."""
    family_keys = keys(C, dispatch_key)
    present = {
        f: bool(k and C._dispatch_has_backend_fallback(getattr(C.DispatchKey, k))) for f, k in family_keys.items()
    }
    sources: dict[str, str | None] = dict.fromkeys(NAMES)  # where each key's boxed fallback was registered
    states: dict[str, dict[str, str]] = {}
    onlies: dict[str, list[str]] = {}
    missing = 0
    for name in ops:
        table = tables(name)
        if not table:
            missing += 1
            continue
        delegate = delegates.get(name)
        dtable = tables(delegate) if delegate else None
        states[name] = {f: state(table, k, delegate, dtable) for f, k in family_keys.items()}
        for f, k in family_keys.items():
            entry = table.get(k) if present[f] and sources[f] is None else None
            if entry is not None and entry.tag == "backend fallback":
                sources[f] = entry.source
        onlies[name] = only(table)
    kernels = {f: sum(1 for s in states.values() if s[f] == "kernel") for f in NAMES}
    reaching = {f: sum(1 for s in states.values() if s[f] in RUNS) for f in NAMES}
    written = 0
    for name, st in states.items():
        rec = ops[name]
        rec.pop("layouts", None)
        kept = {f: s for f, s in st.items() if s != "none"}
        need = bool(onlies[name]) or any(s in RUNS for s in st.values())
        need = need or any(reaching[f] and st[f] != derived(rec, present[f]) for f in NAMES)
        if need:
            if onlies[name]:
                kept[ONLY] = ",".join(onlies[name])
            rec["layouts"] = kept
            written += 1
    return {
        "keys": {f: k or "none" for f, k in family_keys.items()},
        "kernels": kernels,
        "out_variants": {f: reaching[f] - kernels[f] for f in NAMES},
        "fallback": {f: sources[f] or ("unknown source" if present[f] else "none") for f in NAMES},
        "ops_with_layouts": written,
        "ops_not_in_this_torch": missing,
        "how": HOW,
    }


def said(block: dict | None, backend: str) -> str:
    """The block in words: 'SparseXLA: 0 own kernels, SparseCsrXLA: 0, QuantizedXLA: 0'."""
    if not block:
        return f"the {backend} data records no Sparse*/Quantized* keys"
    parts = []
    for f in NAMES:
        key = (block.get("keys") or {}).get(f, "?")
        parts.append(f"{key}: {(block.get('kernels') or {}).get(f, 0)} own kernels")
    return ", ".join(parts)


def _block(doc: dict, path: str) -> dict:
    from opcov import backends as _backends
    from opcov.catalog import import_catalog_modules, structured_delegates
    from opcov.scan.dispatch import dispatch_table

    backend = _backends.get_backend(doc["backend"]["name"])
    torch = _backends.load(backend)
    import_catalog_modules(tuple(doc["provenance"].get("catalog_modules") or ()))  # the ops they register
    made = str(doc["provenance"].get("torch"))
    if made != str(torch.__version__):
        raise SystemExit(f"opcov: {path} was made with torch {made}; this is {torch.__version__}: kernels differ")
    C = torch._C
    tables = functools.lru_cache(maxsize=None)(functools.partial(dispatch_table, C))
    return record(C, doc["backend"]["dispatch_key"], doc["ops"], tables, structured_delegates())


def _said(doc: dict, block: dict) -> str:
    counts = Counter(s for r in doc["ops"].values() for f, s in (r.get("layouts") or {}).items() if f != ONLY)
    return f"{said(block, doc['backend']['name'])}; {block['ops_with_layouts']} ops record layouts ({dict(counts)})"


def main(argv=None) -> int:
    """Add the layout keys' states to registered files made before they were recorded."""
    return amend(argv, command=COMMAND, key="layouts", make=_block, said=_said)


if __name__ == "__main__":
    raise SystemExit(main())
