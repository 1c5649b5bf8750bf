"""``opcov trace MODEL --on BACKEND``: the op set recorded on the backend's own device, where it runs here.

Why: the default trace runs on a stand-in accelerator, which takes core torch's path for every
composite, and never runs a backend's Python. A real backend takes its own: ATen's ``linear`` checks
``!input.is_xla()`` (a 3-d linear is ``mm`` + ``add`` on xla, ``addmm`` elsewhere), ``import torch_xla``
replaces ``nn.GRU`` with a scan-based GRU above the dispatcher, XLA runs layer norm as
``native_batch_norm``. Recorded on the device itself (a dispatch mode on real tensors at the tiny
size: the model's real weights, seeded), the op set holds what that backend's dispatcher receives.
Each input variant (``vocab.INPUT_VARIANTS``) is its own run on the device, merged, each node naming
the runs that made it. The provenance says which path was recorded (``path: backend``,
``traced_on``). A backend this process cannot run is a one-line error; the stand-in trace is what
``opcov trace`` does without ``--on``.
"""

from __future__ import annotations

import importlib.util

from opcov.errors import UsageError
from opcov.sources import models, zoo
from opcov.sources.step import input_variants
from opcov.store.opset import OpSet
from opcov.tracing import realtrace


def _runnable() -> dict:
    """Backends opcov can record on in this process, and how (their records' ``runs_here``): the module
    that gives the device (None: torch itself), the device to put tensors on, and what it is."""
    from opcov import backends

    return {
        b.name: (b.runs_here.module, b.runs_here.device, b.runs_here.what) for b in backends.with_record("runs_here")
    }


PATH_BACKEND = "backend"  # provenance ``path``: recorded on the backend itself


def runnable(backend: str) -> tuple:
    """(module, device, what) of a backend that runs in this process; a UsageError, one line, says why
    not (an unknown name names those opcov knows)."""
    from opcov import backends

    record = backends.get_backend(backend)  # an unknown name: one line naming the known ones
    runnable = _runnable()
    if backend not in runnable:
        raise UsageError(
            f"--on {backend}: opcov records only on backends it can run in this process ({', '.join(runnable)}); "
            f"leave out --on to trace on the stand-in device (its path, not {backend}'s)"
        )
    module, _, _ = runnable[backend]
    if module and importlib.util.find_spec(module) is None:
        hint = f"(for {backend}: {record.runs_here.hint}), " if record.runs_here and record.runs_here.hint else ""
        raise UsageError(
            f"--on {backend}: {module} is not installed in this Python; run opcov from one that has it "
            f"{hint}or leave out --on to trace on the stand-in device"
        )
    return runnable[backend]


def trace_on(
    model: str,
    backend: str,
    *,
    mode: str,
    dtype: str | None,
    optimizer: str,
    sizes: models.Sizes | None = None,
    command: str = "",
) -> OpSet:
    """The op set of ``model`` (anything ``opcov trace`` accepts but a saved op set) recorded on
    ``backend``'s own device, one run per input variant, merged."""
    module, device, what = runnable(backend)
    from opcov.torchenv import import_torch

    torch = import_torch()
    if module:  # before the model is built: a backend may replace modules (torch_xla's nn.GRU)
        try:
            importlib.import_module(module)
            from opcov import backends

            record = backends.get_backend(backend)
            if record.device_hook:
                record.device(torch)  # its runtime (PyTorch/XLA's PJRT client) starts now, or says why it cannot
        except Exception as exc:  # noqa: BLE001 - a backend that does not start is the user's setup
            first = (str(exc).strip().splitlines() or [""])[0][:200]
            raise UsageError(
                f"--on {backend}: {module} does not start here ({type(exc).__name__}: {first}); "
                "leave out --on to trace on the stand-in device"
            ) from None
    entry = zoo.BY_NAME.get(model)
    sizes = sizes or models.Sizes()
    torch.manual_seed(0)
    built = models.build(entry.spec if entry else model, sizes, mode=mode, real=True, zoo_entry=entry)
    dtype = dtype or (entry.dtype if entry else built.dtype or "float32")
    replaced = replaced_modules(built.model, module) if module else []
    variants = input_variants(torch, built)
    runs = realtrace.traced_variants(
        torch,
        built,
        entry,
        variants,
        mode=mode,
        dtype=dtype,
        device=backend,
        optimizer=optimizer,
        command=command,
        on=device,
    )
    doc = runs[0][1]
    realtrace.merge_runs(doc, [d for _, d in runs[1:]])
    version = _version(module) if module else str(torch.__version__)
    doc["provenance"]["path"] = PATH_BACKEND
    doc["provenance"]["traced_on"] = f"{device} ({what}, {module or 'torch'} {version}): {backend}'s own path"
    if replaced:  # the backend's Python runs above the dispatcher: the verdict says op-level data cannot vouch for it
        doc["provenance"][REPLACED] = replaced
    doc["provenance"]["notes"].append(
        f"recorded on {backend} itself with real values at the tiny size, one run per input variant "
        f"({', '.join(realtrace.label(v) for v, _ in runs)}): the ops its dispatcher received, its Python-level "
        "replacements and device-type branches in composites included; another backend's path may differ"
    )
    return OpSet(doc)


REPLACED = "replaced_modules"  # provenance: 'torch.nn.GRU by torch_xla.experimental.gru.GRU', one per class


def replaced_modules(model, package: str) -> list[str]:
    """The model's modules whose class the backend's own package defines ('torch.nn.GRU by
    torch_xla.experimental.gru.GRU'), sorted: Python that runs above the dispatcher in place of
    torch's, whose ops the op set records but whose composition (its own autograd, scans) no
    op-level probe checks."""
    out = set()
    for m in model.modules():
        cls = type(m)
        if cls.__module__.split(".")[0] != package:
            continue
        base = next((b for b in cls.__mro__[1:] if b.__module__.split(".")[0] == "torch"), None)
        public = f"torch.nn.{base.__name__}" if base and base.__module__.startswith("torch.nn.") else None
        out.add(f"{public or 'a torch module'} by {cls.__module__}.{cls.__qualname__}")
    return sorted(out)


def _version(module: str) -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version(module.replace("_", "-"))
    except PackageNotFoundError:
        return "?"
