"""Registered compile coverage: what a backend's ``torch.compile`` path accepts, op by op, with no device.

Why its own data: under ``torch.compile`` a backend's compiler, not its dispatcher, takes each op of the
AOT graphs (``opcov.tracing.compiled``). So for each op, from where each compiler keeps its answer:

* cpu and cuda (Inductor): ``torch._inductor.lowering``'s ``lowerings`` (Inductor generates code for
  the op) and ``fallbacks`` (``make_fallback``: it calls the op's ATen kernel from the compiled code);
  an op with neither takes Inductor's implicit fallback to the ATen kernel
  (``torch._inductor.config.implicit_fallbacks``). A fallback runs only where the device has that
  kernel, so it is judged on the device's eager registered data.
* xla (PyTorch/XLA's ``openxla``): its Dynamo bridge runs the functional graph on XLA tensors and
  partitions out to CPU what has no XLA lowering, so its compile coverage is its eager registered data,
  fallback ops included (run on CPU, as in eager).
* tpu (TorchTPU 0.2.0): its compiler runs each node of the functional graph through the eager TPU
  kernels to emit StableHLO, so its compile coverage is its eager registered data, but an op that only
  the CPU fallback catches is a compile-time error (there is no fallback inside a compiled graph), and
  the ops TorchTPU's own op tests keep off compile (its record's ``compile.deny``, an expectation from its test
  suite, not a result) are unresolved, with that said.

Every record is a claim read from a package (evidence ``registered``), written in the registered
snapshot's schema (docs/DATA.md) under coverage/<backend>/compile/, so that ``opcov check --path
compile`` judges it with the eager rules and words (``opcov.verdict.compiled``).
"""

from __future__ import annotations

import datetime as _dt
import os

from opcov import backends as _backends
from opcov import provenance
from opcov.errors import UsageError
from opcov.store import data, layout
from opcov.version import __version__

# backend -> its compile backend, where 'opcov scan B --path compile' reads its compile coverage (its record's)
BACKENDS = dict(sorted((b.name, b.compile.backend) for b in _backends.BUILTIN if b.compile and b.compile.scanned))
NOT_BACKWARD = {"bwd": "not_applicable", "bwd_res": "not_applicable"}  # the AOT backward graph holds its ops


def _eager(coverage_dir: str, backend: str, torch_version: str) -> tuple[str, dict]:
    """The backend's eager registered snapshot for ``torch_version`` (else the newest), read whole."""
    path = layout.pick(layout.snapshots(coverage_dir, backend)["registered"], torch_version)
    if path is None:
        raise UsageError(
            f"{backend} has no eager registered data under {coverage_dir}/{backend}/: run 'opcov scan {backend}' first "
            "(the compile path's coverage builds on it)"
        )
    return path, data.load(path)


def inductor_tables(torch) -> tuple[set[str], set[str]]:
    """(ops Inductor lowers, ops it falls back to ATen for), as opcov names, read from torch._inductor."""
    from torch._inductor import lowering

    from opcov.catalog import overload_name

    def names(keys):
        out = set()
        for k in keys:
            if isinstance(k, torch._ops.OpOverload):
                out.add(overload_name(k))
            elif isinstance(k, torch._ops.OpOverloadPacket):
                for o in k.overloads():
                    out.add(overload_name(getattr(k, o)))
        return out

    fallbacks = names(lowering.fallbacks)
    return names(lowering.lowerings) - fallbacks, fallbacks


def inductor_records(eager: dict, lowered: set[str], fallbacks: set[str], device: str, ran=frozenset()) -> dict:
    """Each op's compile record on Inductor for ``device`` (see the module docstring). ``ran``: ops whose
    eager kernel the device's eager probe ran (every probed cell passed): a fallback to such a kernel whose
    registered reach the scan could not resolve is registered, with that said."""
    ops = {}
    # lowered ops beyond the dispatcher's catalogue (Python-only overloads such as aten::__and__.bool) left out
    for name in sorted(set(eager) | {n for n in lowered if n.startswith("prims::")}):
        rec = eager.get(name) or {}
        tags = {"tags": rec["tags"]} if rec.get("tags") else {}
        if name in lowered:
            ops[name] = {"fwd": "kernel", "res": "registered", "src": "torch._inductor.lowering: lowering", **tags}
        elif rec:
            how = "make_fallback" if name in fallbacks else "no lowering: implicit fallback"
            ops[name] = {
                "fwd": rec["fwd"],
                "res": rec["res"],
                "src": f"torch._inductor.lowering: {how} (the {device} ATen kernel)",
                **tags,
            }
            if rec.get("why"):
                ops[name]["why"] = rec["why"]
            if rec.get("via"):
                ops[name]["via"] = rec["via"]
            if rec["res"] == "unresolved" and name in ran:
                ops[name]["res"] = "registered"
                ops[name]["why"] = f"the {device} ATen kernel it falls back to ran in {device}'s eager probe"
        else:
            continue
        ops[name].update(NOT_BACKWARD)
    return ops


def eager_kernel_records(eager: dict, backend: _backends.Backend) -> dict:
    """Each op's compile record on a backend that compiles each node through its eager kernels (TorchTPU:
    see the module docstring), with the ops its own tests keep off compile (its record's ``compile.deny``)."""
    deny = dict(backend.compile.deny) if backend.compile else {}
    ops = {}
    for name, rec in sorted(eager.items()):
        out = {"fwd": rec["fwd"], "res": rec["res"], **NOT_BACKWARD}
        for key in ("tags", "via", "src", "why"):
            if rec.get(key):
                out[key] = rec[key]
        if rec["res"] == "fallback":
            out["res"] = "missing"
            out["why"] = "only the CPU fallback runs it in eager mode; a compiled graph has no fallback: compile error"
        if name in deny:
            out["res"] = "unresolved"
            out["why"] = (
                f"{backend.vendor or backend.name}'s own op tests keep it off compile ({deny[name]}): expected to fail "
                "there (vendor expectation, not a result)"
            )
        ops[name] = out
    return ops


def scan(backend: str, coverage_dir: str = layout.DEFAULT_COVERAGE, command: str = "") -> tuple[str, dict]:
    """(path, document) of ``backend``'s registered compile coverage; nothing is written here."""
    from opcov.torchenv import import_torch

    if backend not in BACKENDS:
        raise UsageError(
            f"no compile coverage for {backend!r}: opcov reads it for {', '.join(BACKENDS)} (scan --path compile)"
        )
    torch = import_torch()
    torch_version = str(torch.__version__)
    eager_path, eager_doc = _eager(coverage_dir, backend, torch_version)
    compiler = BACKENDS[backend]
    spec = _backends.get_backend(backend).compile
    lowering = spec.lowering if spec else "eager"
    notes = [
        "compile path: what the backend's torch.compile compiler accepts for each op of the AOT graphs "
        "(opcov trace --path compile); a record is a claim, not proof",
        f"built on the eager registered data {os.path.basename(eager_path)}",
    ]
    if lowering == "inductor":
        lowered, fallbacks = inductor_tables(torch)
        probed = layout.pick(layout.snapshots(coverage_dir, backend)["probed"], torch_version)
        ran = _ran(data.load(probed)) if probed else frozenset()
        ops = inductor_records(eager_doc["ops"], lowered, fallbacks, backend, ran)
        if probed:
            notes.append(f"an unresolved fallback whose ATen kernel passed {os.path.basename(probed)} is registered")
        notes.append(
            f"Inductor (torch {torch_version}): {len(lowered)} overloads lowered, {len(fallbacks)} explicit "
            "fallbacks to their ATen kernel; any other op takes the implicit fallback to its ATen kernel, "
            "judged on the eager registered data"
        )
        if not layout.same_torch(str(eager_doc["provenance"].get("torch")), torch_version):
            notes.append(
                f"the eager data is torch {eager_doc['provenance'].get('torch')}'s, Inductor's tables torch "
                f"{torch_version}'s"
            )
    elif lowering == "cpu_partition":  # a node without a lowering runs on the CPU, as the eager fallback runs it
        ops = {n: {**r, **NOT_BACKWARD} for n, r in sorted(eager_doc["ops"].items())}
    else:  # each node through the backend's eager kernels
        ops = eager_kernel_records(eager_doc["ops"], _backends.get_backend(backend))
    if spec and spec.lowering_note:
        notes.append(spec.lowering_note)
    prov = eager_doc["provenance"]
    backend_rec = dict(eager_doc["backend"])
    doc = {
        "schema_version": eager_doc["schema_version"],
        "evidence": "registered",
        "backend": backend_rec,
        "provenance": {
            "torch": str(prov.get("torch")),
            "opcov": __version__,
            "created": _dt.datetime.now(_dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%S+00:00"),
            "command": command or f"opcov scan {backend} --path compile",
            "host": provenance.host(),
            "device": "none: read from the compiler's tables and the eager registered data",
            "mode": f"compile ({compiler})",
            "settings": dict(prov.get("settings") or {}),
            "fallback": dict(prov.get("fallback") or {}) if lowering == "cpu_partition" else {"present": False},
            "notes": notes,
        },
        "summary": _summary(ops),
        "ops": ops,
    }
    name = os.path.basename(eager_path)
    return os.path.join(layout.compile_coverage_dir(backend, coverage_dir), name), doc


def _ran(probed: dict) -> frozenset:
    """Ops every probed forward cell of which ran (pass, pass_low_precision, not_comparable)."""
    from opcov.vocab import PROBED_RAN

    out = set()
    for name, cells in (probed.get("ops") or {}).items():
        fwd = (
            [c.get("fwd") for c in cells.values() if isinstance(c, dict) and c.get("fwd")]
            if isinstance(cells, dict)
            else []
        )
        if fwd and all(f in PROBED_RAN for f in fwd):
            out.add(name)
    return frozenset(out)


def _summary(ops: dict) -> dict:
    res: dict = {}
    for rec in ops.values():
        res[rec["res"]] = res.get(rec["res"], 0) + 1
    return {"ops": len(ops), "res": dict(sorted(res.items()))}
