"""A reason for every overload the probe did not reach: one disposition bucket per unprobed op.

A probed file lists every catalogue op; an op no case reached is ``{skipped: <bucket>}`` (with
``of: <functional op>`` for a variant), the bucket one word of ``opcov.vocab.SKIP_REASONS``, the
first that applies in that (worst-explained-last) order:

- facts of the op itself, read from the dispatcher and its schema (``intrinsic``): a host-only
  metadata op, one that needs a distributed process group, one with no tensor in or out, one CPU
  has no kernel for (no reference to compare with), a random op;
- ``excluded``: the backend's manifest (``probe.manifest``) rules it out;
- ``variant``: an ``out=`` or in-place overload whose functional form is probed (this overload is
  not; said so, not counted as probed);
- ``schema_no_case``: a schema group (``probe.schemacases``) tried it, and CPU accepted none of the
  inputs made from its schema;
- what the cases were (``reason``): an OpInfo about it ran but dispatched other overloads
  (``other_overload``), the OpInfos about it were not in this run's selection (``not_selected``),
  or no OpInfo is about it and no replayed zoo call reached it (``no_source``).

The order also merges: shards of one probe give an op the same facts, and the shard that probed
its functional form (or ran its OpInfo) says so, so the first bucket in ``SKIP_REASONS`` order
over the shards is the whole run's (``pick``).
"""

from __future__ import annotations

from opcov.catalog import resolve_overload
from opcov.probe.record import DROPOUT_ONLY

# Namespaces whose ops run collectives: they need an initialised process group.
DISTRIBUTED_NAMESPACES = frozenset(
    {"c10d", "_c10d_functional", "c10d_functional", "_c10d_functional_autograd", "symm_mem", "fsdp", "_dtensor"}
)


def _bare(base: str) -> str:
    """The functional base name of an in-place base ('add_' -> 'add'; dunders stay)."""
    return base[:-1] if base.endswith("_") and not base.endswith("__") else base


def _tensor_type(t) -> bool:
    return "Tensor" in str(t)


def intrinsic(torch, catalog) -> dict[str, str]:
    """op name -> the bucket its own facts put it in, for the ops some fact applies to."""
    has = torch._C._dispatch_has_kernel_for_dispatch_key
    out = {}
    for op in catalog:
        if not op.applicable:
            out[op.name] = "host_only"
            continue
        if op.namespace in DISTRIBUTED_NAMESPACES or "ProcessGroup" in op.schema:
            out[op.name] = "distributed"
            continue
        schema = _schema(torch, op.name)
        if schema is None or not any(_tensor_type(a.type) for a in list(schema.arguments) + list(schema.returns)):
            out[op.name] = "not_tensor_op"
            continue
        if op.composite is None and not has(op.name, "CPU"):
            out[op.name] = "no_cpu_kernel"
            continue
        if "nondeterministic_seeded" in op.tags and op.name.split("::", 1)[-1].split(".")[0] not in DROPOUT_ONLY:
            out[op.name] = "random"
    return out


def _schema(torch, name: str):
    try:
        return resolve_overload(torch, name)._schema
    except (AttributeError, RuntimeError):
        return None


def _signature(schema, drop_out: bool) -> tuple:
    """(name, type) of the arguments, alias annotations left out; the kwarg-only written ones (out=)
    dropped when ``drop_out``."""
    args = []
    for a in schema.arguments:
        written = a.alias_info is not None and a.alias_info.is_write
        if drop_out and written and a.kwarg_only:
            continue
        args.append((a.name, str(a.type)))
    return tuple(args)


def functional_forms(torch, catalog) -> dict[str, str]:
    """``out=`` / in-place overload -> its functional overload (same base name, same arguments but
    the written ones), for those that have one."""
    functional: dict[tuple, str] = {}
    variants = []
    for op in catalog:
        if not op.applicable:
            continue
        if "out" in op.tags or "inplace" in op.tags:
            variants.append(op)
        elif not {"mutating", "inplace_view"} & set(op.tags):
            schema = _schema(torch, op.name)
            if schema is not None:
                functional.setdefault((op.namespace, op.base, _signature(schema, False)), op.name)
    out = {}
    for op in variants:
        schema = _schema(torch, op.name)
        if schema is None:
            continue
        sig = _signature(schema, True)
        name = functional.get((op.namespace, _bare(op.base), sig))
        if name is not None:
            out[op.name] = name
    return out


class Dispositions:
    """Everything needed to give an unprobed op its bucket, once the probed ops are known."""

    def __init__(self, facts: dict, functional: dict, named: dict, selected, schema_tried=(), excluded=None):
        self.facts = facts  # op -> intrinsic bucket
        self.functional = functional  # variant op -> functional op
        self.named = named  # aten base name -> OpInfo ids about it
        self.selected = frozenset(selected)  # OpInfo ids this run had cases of
        self.schema_tried = frozenset(schema_tried)  # ops this run's schema groups made cases for
        self.excluded = excluded  # op -> why a backend manifest rules it out, or None (probe.manifest)

    def record(self, name: str, probed) -> dict:
        """The ``{skipped: bucket}`` record (``of`` for a variant) of op ``name``, given the probed ops."""
        bucket = self.facts.get(name)
        if bucket is not None:
            return {"skipped": bucket}
        if self.excluded is not None and self.excluded(name):
            return {"skipped": "excluded"}
        of = self.functional.get(name)
        if of is not None and of in probed:
            return {"skipped": "variant", "of": of}
        if name in self.schema_tried:
            return {"skipped": "schema_no_case"}
        if "::" in name:
            base = name.split("::", 1)[1].split(".", 1)[0]
            about = self.named.get(base, set()) | self.named.get(_bare(base), set())
        else:
            about = set()
        if about & self.selected:
            return {"skipped": "other_overload"}
        return {"skipped": "not_selected" if about else "no_source"}
