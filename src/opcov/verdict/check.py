"""``opcov check``: find the model's op sets, the backends' coverage, and judge each pair.

MODEL may be an op-set file, a folder of them (one per mode), the name of a model
under coverage/models/, or anything ``opcov trace`` accepts (traced on the fly,
which imports torch). Only the last needs torch: a saved op set keeps the gate fast.
"""

from __future__ import annotations

import os

from opcov.store import layout
from opcov.store import opset
from opcov.verdict import judge
from opcov.errors import UsageError


def find_opsets(model: str, modes, coverage_dir: str) -> list[tuple[str, dict]]:
    """(path, op-set document) for each wanted mode of MODEL; [] when MODEL is no saved op set."""
    candidates = []
    if layout.is_yaml(model) and not os.path.exists(model):
        raise UsageError(f"{model}: no such op-set file (trace one with 'opcov trace MODEL --out {model}')")
    if os.path.isfile(model):
        candidates = [model]
    else:
        folder = layout.model_folder(model, coverage_dir)
        if os.path.isdir(folder):
            candidates = layout.opset_files(folder)
            if not candidates:
                raise UsageError(f"{folder}: no op-set files (*.yaml) in this folder")
    found = []
    for path in candidates:
        doc = opset.load(path)
        if not modes or doc["mode"] in modes:
            found.append((path, doc))
    if candidates and not found:
        have = sorted({opset.load(p)["mode"] for p in candidates})
        raise UsageError(f"{model}: no op set for mode {', '.join(modes)} (there is: {', '.join(have)}); "
                         f"trace it with 'opcov trace {model} --mode {modes[0]}'")
    return found


def trace_on_the_fly(model: str, modes, args) -> list[tuple[str, dict]]:
    """Trace MODEL now (imports torch); used when it names no saved op set."""
    try:
        from opcov.tracing.spec import trace_spec
    except ImportError:  # pragma: no cover - trace ships with opcov
        raise UsageError(f"{model}: not an op-set file or zoo model, and tracing is unavailable") from None
    out = []
    for mode in modes or ("inference",):
        doc = trace_spec(model, mode=mode, dtype=getattr(args, "dtype", None)).doc
        out.append((f"<traced {model} {mode}>", doc))
    return out


def live_scan(backend: str, names) -> dict | None:
    """A registered scan now, of ``names`` only, for an installed backend that has no data in coverage/;
    None when the backend is not installed here."""
    if not _installed(backend):
        return None
    from opcov import backends
    from opcov.scan import registered

    b = backends.get_backend(backend)
    torch = backends.load(b)
    doc = registered.scan(b, torch, command=f"opcov scan {backend}")
    wanted = set(names)
    doc["ops"] = {k: v for k, v in doc["ops"].items() if k in wanted}
    return doc


def run(model: str, backends_, modes, coverage_dir: str, args=None) -> tuple[list, dict]:
    """(verdicts, model description) for MODEL on each backend and mode."""
    opsets = find_opsets(model, modes, coverage_dir)
    if not opsets:
        opsets = trace_on_the_fly(model, modes, args)
    verdicts = []
    for path, doc in opsets:
        for backend in backends_:
            verdicts.append(judge.judge(doc, judge.coverage_for(doc, backend, coverage_dir, scan=live_scan)))
    first = opsets[0][1]
    describe = ", ".join(f"{d['mode']} {d.get('dtype', '?')}" + (f" autocast {d['autocast']}" if d.get("autocast")
                                                                   else "") for _, d in opsets)
    return verdicts, {"name": first["model"]["name"], "describe": describe,
                      "opsets": [p for p, _ in opsets], "torch": str(first["provenance"].get("torch"))}


def _installed(backend: str) -> bool:
    from opcov import backends

    try:
        b = backends.get_backend(backend)
    except UsageError:
        return False
    return bool(b.installed_version()) and b.available_in_build() and (b.package is None or b.module is not None)
