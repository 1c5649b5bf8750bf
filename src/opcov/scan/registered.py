"""Registered coverage: how each catalogue op reaches a backend, read from the dispatcher.

For the backend's dispatch key (``PrivateUse1`` for torch_tpu: without a TPU it is
never renamed to "tpu", and the device is never touched) every op gets a forward
path and a backward path, then a resolved status found by following what the path
reaches: an ``.out`` delegate, or the ops a composite calls (recorded on meta
tensors, see reach.py). A registered kernel is a claim, not proof: the resolved
status ``registered`` reads "registered, unverified" until a probe runs the op.

Signals deliberately not used: ``_dispatch_has_computed_kernel_for_dispatch_key`` is
true for every op once a backend registers a boxed fallback.
"""

from __future__ import annotations

import datetime as _dt
import sys
from collections import Counter

from opcov import backends as _backends
from opcov import provenance
from opcov.catalog import Catalog, build_catalog
from opcov.scan import devicemodule, generated, layouts
from opcov.scan.derivatives import Derivatives
from opcov.scan.dispatch import dispatch_table
from opcov.scan.reach import record
from opcov.store.data import DATA_TAGS, SCHEMA_VERSION, worst
from opcov.version import __version__

VARIABLE_FALLBACK = "VariableFallbackKernel.cpp"


class Scanner:
    """Classifies every catalogue op for one backend's dispatch key."""

    def __init__(self, torch, backend, catalog: Catalog, derivatives: Derivatives):
        self.torch, self.C = torch, torch._C
        self.backend, self.catalog, self.derivatives = backend, catalog, derivatives
        self.key, self.akey = backend.dispatch_key, backend.autograd_key
        self.tables = {op.name: dispatch_table(self.C, op.name) for op in catalog}
        self.paths: dict[str, dict] = {}
        self._res: dict[str, str] = {}

    def table(self, name: str) -> dict:
        """An op's dispatch table, read once (an op outside the catalogue too, such as an ``.out`` delegate)."""
        if name not in self.tables:
            self.tables[name] = dispatch_table(self.C, name)
        return self.tables[name]

    # ------------------------------------------------------------ paths
    def forward_path(self, name: str) -> dict:
        op = self.catalog.get(name)
        entry = self.tables.get(name, {}).get(self.key)
        if op is not None and not op.applicable:
            return {"fwd": "not_applicable", "why": "host-only metadata op; needs no device kernel"}
        if entry is None:
            return {"fwd": "missing"}
        if entry.tag == "kernel":
            return {"fwd": "kernel", "src": entry.source}
        if entry.tag == "default backend kernel":
            if op is not None and op.structured_delegate:
                return {"fwd": "out_variant", "via": [op.structured_delegate]}
            return {"fwd": "composite"}
        if entry.tag == "math kernel":
            return {"fwd": "composite"}
        if entry.tag == "backend fallback":
            return {"fwd": "fallback", "src": entry.source}
        return {"fwd": "missing", "why": f"unrecognised dispatch entry [{entry.tag}]"}

    def backward_path(self, name: str, fwd: str) -> dict:
        op = self.catalog.get(name)
        if fwd == "not_applicable":
            return {"bwd": "not_applicable"}
        entry = self.tables.get(name, {}).get(self.akey)
        if entry is None:
            return {"bwd": "none", "why_bwd": "no autograd entry"}
        if self.C._dispatch_has_kernel_for_dispatch_key(name, self.akey):
            return {"bwd": "backend_kernel", "bwd_src": entry.source}
        if entry.tag == "math kernel":
            return {"bwd": "composite"}
        if entry.tag == "backend fallback" and VARIABLE_FALLBACK in entry.source:
            if op is not None and op.composite == "implicit" and fwd == "kernel":
                return {
                    "bwd": "lost",
                    "why_bwd": (
                        "the backend overrides a CompositeImplicitAutograd op without an autograd "
                        "kernel: the decomposition's derivative no longer applies"
                    ),
                }
            return {"bwd": "none"}
        if op is not None and "out" in op.tags:
            return {"bwd": "none"}  # out= variants do not support autograd
        kind = self.derivatives.kind(name)
        return {"bwd": kind}  # formula | not_implemented | none

    def classify(self, names) -> None:
        for name in names:
            rec = self.forward_path(name)
            rec.update(self.backward_path(name, rec["fwd"]))
            self.paths[name] = rec

    # ------------------------------------------------------------ resolution
    def resolve_forward(self, name: str, stack=()) -> str:
        """What a call of ``name`` meets on this backend, following delegates and composites."""
        if name in self._res:
            return self._res[name]
        if name in stack:
            return "unresolved"
        if name not in self.paths:
            self.table(name)  # a reached op outside the catalogue (e.g. prim::)
            self.classify([name])
        rec = self.paths[name]
        fwd = rec["fwd"]
        if fwd == "kernel":
            res = "registered"
        elif fwd in ("fallback", "missing", "not_applicable"):
            res = fwd
        elif fwd in ("out_variant", "composite"):
            via = rec.get("via")
            if via is None:
                res = "unresolved"
            else:
                res = worst(self.resolve_forward(v, stack + (name,)) for v in via)
        else:
            res = "unresolved"
        self._res[name] = res
        return res

    def resolve_backward(self, name: str) -> str:
        rec = self.paths[name]
        bwd = rec["bwd"]
        if bwd == "backend_kernel":
            return "registered"
        if bwd in ("lost", "not_implemented"):
            return "missing"
        if bwd in ("none", "not_applicable"):
            return "not_applicable"
        via = rec.get("bwd_via")
        if via is None:
            return "unresolved"
        return worst(self.resolve_forward(v) for v in via)


# Composites whose path depends on the device, where the reach recorded on meta shows the
# wrong one: ATen's convolution picks its "Overrideable" backend for any device that is not
# CPU, CUDA, MPS or another built-in (aten/src/ATen/native/Convolution.cpp, select_conv_backend).
PRIVATEUSE1_REACH = {
    "aten::_convolution": ["aten::convolution_overrideable"],
    "aten::convolution_backward": ["aten::convolution_backward_overrideable"],
}
# On an MPS device it picks the MPS convolution (ConvBackend::Mps, or MpsTranspose when transposed).
MPS_REACH = {
    "aten::_convolution": ["aten::_mps_convolution", "aten::_mps_convolution_transpose"],
    "aten::convolution_backward": ["aten::mps_convolution_backward", "aten::mps_convolution_transpose_backward"],
}

# On a CUDA device it picks cuDNN (the default for floating dtypes in the regular build), else a
# depthwise, dilated, transposed or slow native kernel; every one is a candidate, judged worst-first.
# (3-d convolutions go to slow_conv_dilated3d on CUDA, never slow_conv3d_forward, which is CPU-only.)
CUDA_REACH = {
    "aten::_convolution": [
        "aten::cudnn_convolution",
        "aten::cudnn_convolution_transpose",
        "aten::_conv_depthwise2d",
        "aten::conv_depthwise3d",
        "aten::slow_conv_dilated2d",
        "aten::slow_conv_dilated3d",
        "aten::_slow_conv2d_forward",
        "aten::slow_conv_transpose2d",
        "aten::slow_conv_transpose3d",
    ],
}
DEVICE_REACH = {
    "PrivateUse1": (PRIVATEUSE1_REACH, "on a PrivateUse1 device ATen routes this composite to the overrideable op"),
    "MPS": (MPS_REACH, "on an MPS device ATen routes this composite to the MPS convolution (or its transpose)"),
    "CUDA": (
        CUDA_REACH,
        "on a CUDA device ATen routes this composite to cuDNN or a native CUDA "
        "convolution (depthwise, dilated, transposed, slow); each is judged",
    ),
}


def _device_paths(scanner, backend, fwd_reach) -> None:
    """Correct what meta tensors cannot show: device-dependent composites and ATen's raising stubs."""
    for name, rec in scanner.paths.items():
        if rec["fwd"] != "composite":
            continue
        f = fwd_reach.get(name)
        if name.endswith("_overrideable") and f is not None and "NotImplementedError" in (f.error or ""):
            rec.update(
                fwd="missing",
                why="ATen's kernel for this key is a stub that raises NotImplementedError; "
                "the backend must register its own",
            )
        elif name in DEVICE_REACH.get(backend.dispatch_key, ({}, ""))[0]:
            routes, why = DEVICE_REACH[backend.dispatch_key]
            rec["via"] = list(routes[name])
            rec["why"] = why
        elif name == "aten::convolution" and rec.get("via") is None:
            # torch 2.9's recording on meta stops in _convolution's device choice; ATen's convolution
            # calls _convolution on every device (Convolution.cpp)
            rec["via"] = ["aten::_convolution"]
            rec["why"] = "ATen's convolution calls _convolution (not recorded on meta in this torch)"


def _reach_wanted(paths: dict) -> list[str]:
    return sorted(n for n, r in paths.items() if r["fwd"] == "composite" or r["bwd"] in ("formula", "composite"))


def scan(
    backend, torch=None, *, command: str = "", catalog: Catalog | None = None, reach: bool = True, scanner=Scanner
) -> dict:
    """The registered-coverage document for ``backend`` (already loaded); ``scanner`` makes the
    Scanner (opcov.scan.declared passes one that reads native_functions.yaml for the key)."""
    torch = torch or _backends.load(backend)
    catalog = catalog or build_catalog((backend.module,) if backend.module else (), _backends.added_ops(backend))
    scanner = scanner(torch, backend, catalog, Derivatives.load())
    scanner.classify(op.name for op in catalog)
    reach_note = "not recorded (--no-reach)"
    if reach:
        wanted = _reach_wanted(scanner.paths)
        fwd_reach, bwd_reach = record(wanted, catalog)
        for name in wanted:
            rec = scanner.paths[name]
            f = fwd_reach.get(name)
            if rec["fwd"] == "composite":
                if f is not None and f.ops is not None:
                    rec["via"] = list(f.ops)
                else:
                    rec["why"] = f"reach unresolved: {f.error if f else 'not recorded'}"
            b = bwd_reach.get(name)
            if rec["bwd"] in ("formula", "composite"):
                if b is not None and b.ops is not None:
                    rec["bwd_via"] = list(b.ops)
                elif b is not None:
                    if "not implemented" in (b.error or ""):
                        rec["bwd"] = "not_implemented"
                    rec["why_bwd"] = f"backward reach unresolved: {b.error}"
                elif f is not None and f.ops is None:
                    rec["why_bwd"] = "backward reach unresolved: forward could not be called on meta"
        generated.fill(torch, {n: scanner.paths[n] for n in wanted})
        _device_paths(scanner, backend, fwd_reach)
        resolved = sum(
            1 for n in wanted if scanner.paths[n].get("via") is not None or scanner.paths[n].get("bwd_via") is not None
        )
        reach_note = (
            f"recorded on meta tensors from inputs synthesized from each schema; "
            f"{resolved} of {len(wanted)} composite or differentiable ops resolved"
        )
    ops = {}
    for op in catalog:
        rec = dict(scanner.paths[op.name])
        rec["res"] = scanner.resolve_forward(op.name)
        rec["bwd_res"] = scanner.resolve_backward(op.name)
        why = [w for w in (rec.pop("why", None), rec.pop("why_bwd", None)) if w]
        if why:
            rec["why"] = "; ".join(why)
        tags = [t for t in op.tags if t in DATA_TAGS]
        if tags:
            rec["tags"] = tags
        ops[op.name] = rec
    prov = _provenance(torch, backend, catalog, scanner, ops, command, reach_note)
    if type(scanner) is Scanner:  # declared data reads no build of the key: its layout keys are not read here
        delegates = {op.name: op.structured_delegate for op in catalog if op.structured_delegate}
        prov["layouts"] = layouts.record(scanner.C, scanner.key, ops, scanner.table, delegates)
    if type(scanner) is Scanner or not backend.package:  # core torch's device modules are in every build
        prov["device_module"] = devicemodule.record(torch, backend.device_type)
    return {
        "schema_version": SCHEMA_VERSION,
        "evidence": "registered",
        "backend": {
            "name": backend.name,
            "device_type": backend.device_type,
            "dispatch_key": backend.dispatch_key,
            "package": backend.package or "torch",
            "version": backend.installed_version() or "unknown",
        },
        "provenance": prov,
        "summary": summarize(catalog, ops),
        "ops": ops,
    }


def _provenance(torch, backend, catalog, scanner, ops, command, reach_note) -> dict:
    fallback_present = bool(
        torch._C._dispatch_has_backend_fallback(getattr(torch._C.DispatchKey, backend.dispatch_key))
    )
    settings = _backends.settings(backend, torch)
    fallback = {"present": fallback_present}
    if fallback_present:
        sources = Counter(r["src"] for r in ops.values() if r["fwd"] == "fallback" and "src" in r)
        kind, enabled = _backends.fallback_kind(backend)
        fallback.update(
            {
                "kind": settings.get("fallback_kind", kind),
                "enabled": settings.get("cpu_fallback_enabled", enabled),
                "source": sources.most_common(1)[0][0] if sources else None,
            }
        )
    kernel_sources = Counter(r["src"] for r in ops.values() if r["fwd"] == "kernel")
    notes = [
        "eager mode only: the torch.compile path is not scanned",
        "a registered kernel is a claim, not proof: 'registered' reads 'registered, unverified' "
        "until a probe runs the op",
    ]
    if kernel_sources:
        top, count = kernel_sources.most_common(1)[0]
        share = count / sum(kernel_sources.values())
        if share > 0.5:
            notes.append(
                f"{count} of {sum(kernel_sources.values())} kernels come from one registration "
                f"site ({top}), a generic loop: registration alone says nothing about which "
                "dtypes or arguments work"
            )
    if backend.python_patches:  # what importing it changes above the dispatcher (its record says)
        notes.append(backend.python_patches)
    return {
        "torch": str(torch.__version__),
        "opcov": __version__,
        "created": _dt.datetime.now(_dt.timezone.utc).replace(microsecond=0).isoformat(),
        "command": command,
        "host": provenance.host(),
        "device": "none: a registered scan reads the dispatcher and never initialises the device",
        "catalog_modules": list(catalog.modules),
        "mode": "eager",
        "settings": settings,
        "fallback": fallback,
        "reach": reach_note,
        "kernel_sources": dict(kernel_sources.most_common(5)),
        "notes": notes,
    }


def summarize(catalog: Catalog, ops: dict) -> dict:
    """Counts per path and resolved status: aten overloads, core ATen, other namespaces."""

    def counts(names, key):
        return dict(sorted(Counter(ops[n][key] for n in names).items()))

    aten = [op.name for op in catalog if op.namespace == "aten"]
    core = [op.name for op in catalog.core]
    other = [op.name for op in catalog if op.namespace != "aten"]
    kernel_bases = {catalog.get(n).base for n in aten if ops[n]["fwd"] == "kernel"}
    registered_bases = {catalog.get(n).base for n in aten if ops[n]["res"] == "registered"}
    return {
        "aten": {
            "overloads": len(aten),
            "fwd": counts(aten, "fwd"),
            "res": counts(aten, "res"),
            "bwd": counts(aten, "bwd"),
            "bwd_res": counts(aten, "bwd_res"),
            "base_names_with_kernel": len(kernel_bases),
            "base_names_registered": len(registered_bases),
        },
        "core": {
            "overloads": len(core),
            "fwd": counts(core, "fwd"),
            "res": counts(core, "res"),
            "bwd_res": counts(core, "bwd_res"),
        },
        "other_namespaces": {"overloads": len(other), "fwd": counts(other, "fwd"), "res": counts(other, "res")},
    }


def command_line() -> str:
    """The command that reproduces this run, as typed."""
    import shlex

    args = sys.argv[1:]
    return "opcov " + " ".join(shlex.quote(a) for a in args)
