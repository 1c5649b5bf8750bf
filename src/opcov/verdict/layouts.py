"""Calls with sparse or quantized tensors, judged against the backend's keys for those layouts.

A sparse tensor dispatches on ``Sparse<backend>`` (or ``SparseCsr<backend>``), a quantized one on
``Quantized<backend>``, never on the dense key whose path a registered record's ``fwd``/``res`` describes.
So a call whose signature class (an op set's ``sig``, opcov.sigclass) has a ``!sparse`` or ``!q`` tensor,
or any call of an op that on CPU has kernels only for such tensors (its ``layouts.only``: the sparse
factory ``_sparse_coo_tensor_with_dims_and_tensors`` takes dense indices and values), is judged here from
what the registered scan read at those keys (opcov.scan.layouts), never from the dense record: PyTorch/XLA's
CPU fallback catches ``_sparse_coo_tensor_with_dims_and_tensors`` at the ``XLA`` key, while a sparse call
of it raises there.

- an own kernel at the key (or at the key of the op's ``.out``): runs (registered, unverified);
- a composite kernel there, on a backend with kernels at that key: runs (registered, unverified), and the
  words say that what it reaches with those tensors is not recorded;
- the key's own boxed fallback: runs with fallback;
- nothing, or a backend with no kernel at that key for any op (no such tensor can be made there): fails;
- data whose scan read no layout keys: unknown ("predates sparse keys: rescan").

A call the op set records by shapes only (no class), or with dense tensors only, is not judged here. A
probe that ran cases of the same layout, or replayed this model's own calls, is judged as probes are.
Torch-free.
"""

from __future__ import annotations

import functools

from opcov import vocab
from opcov.sigclass import parse
from opcov.store.layouts import RUNS, derived, fallback_at
from opcov.verdict import signature
from opcov.verdict.finding import Finding

SPARSE = "sparse"
QUANTIZED = "quantized"
FAMILIES = {SPARSE: ("sparse", "sparse_csr"), QUANTIZED: ("quantized",)}  # a kind -> its data families
FLAGS = {SPARSE: "sparse", QUANTIZED: "q"}  # a kind -> its flag in a signature class
WORDS = {
    "sparse": "sparse tensors",
    "sparse_csr": "compressed sparse tensors",
    "quantized": "quantized tensors",
}
KIND_OF = {f: kind for kind, fams in FAMILIES.items() for f in fams}
COMMAND = "python -m opcov.scan.layouts FILE"


@functools.lru_cache(maxsize=4096)
def kinds(cls: str) -> frozenset:
    """The layouts (sparse, quantized) of a signature class's tensors; empty for a dense call, or for a
    call named by its shapes only (its layouts not recorded)."""
    if not signature.is_class(cls):
        return frozenset()
    flags = set().union(*(f for _, _, f in parse(cls)[0]))
    return frozenset(kind for kind, flag in FLAGS.items() if flag in flags)


def special(shapes: tuple) -> tuple:
    """The classes of ``shapes`` with a sparse or quantized tensor (what judge's ``_relevant`` keeps where a
    probe cell has nothing to match classes against)."""
    return tuple(c for c in shapes if kinds(c))


def judged(cov, args: tuple, plain):
    """The finding of requirement ``args`` (judge's (op, dtype, direction, torch, shapes, model, reads, returns)):
    ``plain(cov, args)`` where no call has a sparse or quantized tensor, else from the layout keys (for
    calls of both kinds, the worse of the two)."""
    op, dtype, direction, _, shapes, model, _, _ = args
    rec = ((cov.registered or {}).get("ops") or {}).get(op)
    only = _only(rec)
    needed: dict = {}  # kind -> the families its calls may dispatch on
    dense = []
    for cls in shapes:
        found = kinds(cls)
        if not found:
            dense.append(cls)
        for kind in found:
            needed.setdefault(kind, set()).update(FAMILIES[kind])
    if only:  # every call takes or makes tensors of these layouts, whatever its inputs
        fams = {kind: set(FAMILIES[kind]) & only for kind in {KIND_OF[f] for f in only}}
        needed = {kind: (needed.get(kind, set()) & fams[kind]) or fams[kind] for kind in fams}
        dense = []
    if direction != "forward" or not needed or rec is None or _probe_decides(cov, op, dtype, direction, needed, model):
        return plain(cov, args)
    findings = [
        _finding(cov, op, dtype, rec, kind, sorted(fams, key=FAMILIES[kind].index)) for kind, fams in needed.items()
    ]
    if dense:
        findings.append(plain(cov, args[:4] + (tuple(dense),) + args[5:]))
    rank = {o: i for i, o in enumerate(vocab.OUTCOMES)}
    return min(findings, key=lambda f: rank.get(f.outcome, len(rank)))


def _only(rec) -> frozenset:
    text = str(((rec or {}).get("layouts") or {}).get("only") or "")
    return frozenset(f for f in text.split(",") if f in KIND_OF)


def _probe_decides(cov, op: str, dtype: str, direction: str, needed: dict, model: str) -> bool:
    """Whether the probe cell saw calls of these layouts: this model's own calls replayed, or cases that
    ran (or failed) with a tensor of each layout needed."""
    cell = cov.cells(op).get(dtype)
    slot = cell.slot(direction) if cell else None
    if slot is None or not slot.status or slot.status == "skipped":
        return False
    if model and isinstance(slot.traced, dict) and model in slot.traced:
        return True
    seen: set = set()
    failed = [(str(t).split(" ", 2)[2:] or [""])[0].split(" out=")[0] for t in slot.failed or ()]  # 'STATUS CASE SIG'
    for text in list(slot.ran or ()) + failed:
        seen |= kinds(str(text))
    return set(needed) <= seen


def _finding(cov, op: str, dtype: str, rec: dict, kind: str, fams: list):
    """One kind of layout judged from the registered data (opcov.scan.layouts)."""
    level, claim = cov.static, vocab.evidence_word(cov.static).label
    src = cov.paths[0] if cov.paths else ""
    block = ((cov.registered or {}).get("provenance") or {}).get("layouts")
    words = WORDS[fams[0]] if len(fams) == 1 else WORDS[KIND_OF[fams[0]]]
    if not isinstance(block, dict):
        return Finding(
            "forward",
            dtype,
            "unknown",
            "none",
            f"this model calls {op} with {words}; the {cov.backend} data predates sparse and quantized keys "
            f"(its registered scan read no Sparse*/Quantized* key): rescan ({COMMAND}, or opcov scan {cov.backend})",
            src,
        )
    said = [(f, _state(block, rec, f)) for f in fams]
    outcomes = {_outcome(cov, block, f, state) for f, state in said}
    if len(outcomes) > 1:  # COO and compressed sparse tensors part ways; the op set does not say which
        return Finding(
            "forward",
            dtype,
            "unknown",
            level,
            f"{cov.backend} takes {op} apart for COO and compressed sparse tensors "
            f"({'; '.join(_words(cov, block, op, f, s) for f, s in said)}), and the op set does not record which "
            f"sparse layout this model's calls have ({claim})",
            src,
        )
    f, state = said[0]
    outcome = outcomes.pop()
    fix = f"move the {words} to dense ones before {cov.backend} (to_dense())" if outcome == "fails" else ""
    return Finding("forward", dtype, outcome, level, f"{_words(cov, block, op, f, state)} ({claim})", src, fix)


def _state(block: dict, rec: dict, family: str) -> str:
    """The op's state at the family's key: its record's ``layouts``, else what its dense record implies
    (opcov.store.layouts.derived); 'no_kernels' where the backend has no kernel at that key for any op."""
    fallback = bool(fallback_at(block, family))
    if "layouts" in rec:
        state = str(rec["layouts"].get(family) or "none")
    else:
        state = derived(rec, fallback)
    has = int((block.get("kernels") or {}).get(family) or 0) + int((block.get("out_variants") or {}).get(family) or 0)
    if not has and state not in RUNS and state != "fallback":
        return "no_kernels"
    return state


def _outcome(cov, block: dict, family: str, state: str) -> str:
    if state == "fallback":  # the dense key's own fallback, registered for this key too, is judged as there
        if not _same_fallback(cov, block, family):
            return "unknown"
        kind, enabled = cov.fallback()
        return "fallback" if kind == "cpu" and enabled else "fails"
    return "ok" if state in RUNS or state == "composite" else "fails"


def _same_fallback(cov, block: dict, family: str) -> bool:
    dense = ((cov.registered or {}).get("provenance") or {}).get("fallback") or {}
    return bool(dense.get("source")) and fallback_at(block, family) == dense.get("source")


def _words(cov, block: dict, op: str, family: str, state: str) -> str:
    key = (block.get("keys") or {}).get(family) or family
    words = WORDS[family]
    if state == "kernel":
        return f"own {key} kernel for {words}"
    if state == "out_variant":
        return f"{key} kernel for {words} via its .out variant"
    if state == "composite":
        return (
            f"composite kernel at {key}: generic code for {words}, whose reach with them is not recorded "
            f"({cov.backend} has {key} kernels for other ops)"
        )
    if state == "fallback":
        where = fallback_at(block, family)
        if _same_fallback(cov, block, family):
            return f"only {cov.backend}'s fallback catches it with {words}: the dense key's, registered for {key} too ({where})"
        return (
            f"only a boxed fallback registered for {key} ({where}) catches it with {words}; what it does with "
            "them (run them on the CPU, or raise) is not read from the dispatcher"
        )
    lacks = (
        f"it has no {key} kernel for any op, so no such tensor can be made there"
        if state == "no_kernels"
        else f"{key} holds nothing for it"
    )
    fb = ((cov.registered or {}).get("provenance") or {}).get("fallback") or {}
    dense_key = ((cov.registered or {}).get("backend") or {}).get("dispatch_key") or cov.backend
    taken = ""
    if fb.get("present"):
        kind = "CPU" if fb.get("kind") == "cpu" else str(fb.get("kind") or "boxed")
        taken = f"; its {kind} fallback does not take {words} (it is registered for the {dense_key} key only)"
    return f"{cov.backend} has no kernel for {op} with {words} ({lacks}){taken}"
