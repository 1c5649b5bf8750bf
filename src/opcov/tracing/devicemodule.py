"""The model's run looking up the device's own Python module (``torch.<device>``), recorded while tracing.

Why: some torch APIs fetch the module of the tensors' device type by name on every device, before any op is
dispatched: gradient checkpointing (``torch.utils.checkpoint`` saves and restores each device's RNG state
through it), ``torch.random.fork_rng`` and ``torch.get_device_module``. A backend that registers no such
module raises there (PyTorch/XLA has no ``torch.xla``: "module 'torch' has no attribute 'xla'"), and no
op-level evidence can see it. The trace records each lookup (the torch API that made it and the model's line
that led to it) in the op set's ``device_module`` list; the registered scan records whether the backend
registers its module (opcov.scan.devicemodule); the verdict joins them (opcov.verdict.devicemodule).
"""

from __future__ import annotations

import contextlib
import importlib
import os
import sys

from opcov.store.opset import DEVICE_MODULE

KEY = DEVICE_MODULE  # the op set's top-level list

# (module, function): the torch functions that look the device's module up by name
LOOKUPS = (("torch.utils.checkpoint", "_get_device_module"), ("torch", "get_device_module"))
# frames that are not the model's own code: torch, opcov, and the standard library's plumbing
_NOT_THE_MODEL = ("torch", "opcov", "contextlib", "functools", "typing", "importlib")


def _theirs(module: str) -> bool:
    return any(module == p or module.startswith(p + ".") for p in _NOT_THE_MODEL)


def _seen_at(frame) -> tuple[str, str]:
    """(the torch API the model called that led to the lookup, the model's file:line); ('', '') for opcov's own.
    The API is the outermost public torch module below the model's frame (``torch.utils.checkpoint``,
    whichever of its helpers made the lookup)."""
    via, at = "", ""
    f = frame
    while f is not None:
        module = str(f.f_globals.get("__name__") or "")
        if module == "opcov" or module.startswith("opcov."):
            return "", ""
        if not _theirs(module):
            at = f"{os.path.basename(f.f_code.co_filename)}:{f.f_lineno}"
            break
        if module == "torch" or module.startswith("torch.") and not module.startswith("torch._"):
            via = module  # public torch modules only: torch._compile's wrappers are plumbing
        f = f.f_back
    return via or str(frame.f_globals.get("__name__") or "?"), at


@contextlib.contextmanager
def watch(torch, seen: list):
    """While it is open, each device-module lookup of ``LOOKUPS`` appends (api, model line) to ``seen``."""
    patched = []
    for module_name, fn_name in LOOKUPS:
        module = importlib.import_module(module_name)
        original = getattr(module, fn_name, None)
        if original is None:
            continue

        def lookup(*args, __original=original, **kwargs):
            via, at = _seen_at(sys._getframe(1))
            if via:
                seen.append((via, at))
            return __original(*args, **kwargs)

        setattr(module, fn_name, lookup)
        patched.append((module, fn_name, original))
    try:
        yield seen
    finally:
        for module, fn_name, original in patched:
            setattr(module, fn_name, original)


def records(seen: list) -> list[dict]:
    """The op set's ``device_module`` list: one entry per (api, model line), in order of first lookup."""
    counts: dict[tuple[str, str], int] = {}
    for key in seen:
        counts[key] = counts.get(key, 0) + 1
    out = []
    for (via, at), n in counts.items():
        entry = {"via": via, "calls": n}
        if at:
            entry["at"] = at
        out.append(entry)
    return out


def merged(*lists) -> list[dict]:
    """Several op sets' ``device_module`` lists as one (the runs of a model's input variants)."""
    counts: dict[tuple[str, str], int] = {}
    for entries in lists:
        for e in entries or ():
            key = (str(e.get("via", "")), str(e.get("at", "")))
            counts[key] = max(counts.get(key, 0), int(e.get("calls", 1)))
    return [{"via": v, "calls": n, **({"at": a} if a else {})} for (v, a), n in counts.items()]
