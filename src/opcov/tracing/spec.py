"""From what a user names to an op set: the one place that turns a model reference and the trace
options into a traced op set, for ``opcov trace``, ``opcov zoo trace`` and ``opcov check`` on a
model that has no saved op set.

A reference is a zoo name, a transformers model type (``hf:TYPE`` or bare), a config.json, a
torch.nn block (``nn:NAME``), a factory (``package.module:function``) or a saved op-set file (loaded
as it is; the options do not apply). A zoo name brings its entry's config, its dtype (bfloat16 for
the MoE models, whose grouped matmul has no float32 path under fake tensors) and its fake-or-real
choice; the op set is named after the zoo entry, else after what was built. Every op set records
the ``opcov trace`` line that reproduces it, written here from the options (options at their
defaults left out), so the CLI, the zoo and Python callers record the same line for the same trace.
"""

from __future__ import annotations

import os
import sys
import time

from opcov.errors import OpcovError, UsageError
from opcov.sources import models, tiny, zoo
from opcov.store import layout, opset
from opcov.store.opset import OpSet
from opcov.torchenv import import_torch
from opcov.tracing import ladder, realtrace
from opcov.tracing.command import command_line
from opcov.tracing.trace import Options, trace

__all__ = ["command_line", "cpu_trace", "fake_trace", "is_saved", "trace_spec", "trace_zoo"]


def is_saved(model: str) -> bool:
    """Whether the reference is a saved op-set file rather than a model to trace."""
    return layout.is_yaml(model) and os.path.isfile(model)


def trace_spec(
    model: str,
    *,
    mode: str = "training",
    dtype: str | None = None,
    autocast: bool = False,
    device: str = "accelerator",
    optimizer: str = "adamw",
    real: bool = False,
    sizes: models.Sizes | None = None,
    out: str | None = None,
    defer_real: bool = False,
) -> OpSet:
    """The op set of anything ``opcov trace MODEL`` accepts (see the module docstring).

    ``dtype`` None: the zoo entry's, else what the model needs (``Built.dtype``), else float32;
    ``real`` also when the zoo entry says so; ``sizes`` None: the defaults (batch 2, seq 16). ``out`` is only named in the provenance
    command (where the caller saves the op set); nothing is written here. ``defer_real``: the
    real-valued branch run is left to the caller as ``result.real_job`` (``realtrace.with_real_branches``).
    """
    if is_saved(model):
        return OpSet(opset.load(model))
    entry = zoo.BY_NAME.get(model)
    real = real or bool(entry and entry.real) or mode == "serve"  # generate reads token values: real, always
    sizes = sizes or models.Sizes()
    if real and device != "cpu":
        if autocast:
            raise UsageError(
                "--real with --autocast: the computing stand-in that real values run on has no "
                "autocast policy; leave out --autocast, or trace on CPU with --device cpu"
            )
        return _real(model, sizes=sizes, mode=mode, dtype=dtype, optimizer=optimizer, out=out)
    # a model to serve is built as for inference; its prompt is made from the inputs built (serve.prepare)
    build_mode = "inference" if mode == "serve" else mode
    built = models.build(entry.spec if entry else model, sizes, mode=build_mode, real=real, zoo_entry=entry)
    if mode == "serve":  # on CPU itself (--device cpu): generate on a prompt made from the built inputs
        from opcov.tracing import serve

        serve.prepare(import_torch(), built)
    dtype = dtype or (entry.dtype if entry else built.dtype or Options.dtype)
    command = command_line(
        model,
        mode=mode,
        dtype=dtype,
        autocast=autocast,
        device=device,
        optimizer=optimizer,
        real=real,
        sizes=sizes,
        out=out,
    )
    try:
        result = trace(
            built.model,
            built.inputs,
            mode=mode,
            dtype=dtype,
            autocast=autocast,
            device=device,
            optimizer=optimizer,
            real=real,
            name=entry.name if entry else built.name,
            source=built.source,
            config=built.config,
            command=command,
            notes=built.notes,
        )
    except OpcovError as exc:
        # A shape that hangs on values (CTC's target lengths, nonzero, masks read on the host) stops a
        # fake-tensor trace; a user's own model is then traced with real values, as --real does, and
        # the op set says why. The zoo's runner (defer_real) schedules that itself.
        if "--real" not in str(exc) or defer_real or autocast or device == "cpu":
            raise
        retried = _real(model, sizes=sizes, mode=mode, dtype=dtype, optimizer=optimizer, out=out)
        retried.doc["provenance"].setdefault("notes", []).append(
            f"traced with real values (as --real): fake tensors could not trace it ({ladder.one_line(exc, 160)})"
        )
        return retried
    result.doc["model"].update(built.facets)
    try:
        return realtrace.with_real_branches(
            result,
            model,
            built=built,
            sizes=sizes,
            mode=mode,
            dtype=dtype,
            autocast=autocast,
            device=device,
            optimizer=optimizer,
            defer=defer_real,
        )
    except realtrace.LayoutError as exc:
        return _on_cpu(model, exc, sizes=sizes, mode=mode, dtype=dtype, optimizer=optimizer, out=out)


def _real(model: str, *, sizes, mode: str, dtype, optimizer: str, out) -> OpSet:
    """The real-valued trace on the computing stand-in, or on CPU for a layout it cannot hold (``_on_cpu``)."""
    try:
        return realtrace.trace_real(model, sizes=sizes, mode=mode, dtype=dtype, optimizer=optimizer, out=out)
    except realtrace.LayoutError as exc:
        return _on_cpu(model, exc, sizes=sizes, mode=mode, dtype=dtype, optimizer=optimizer, out=out)
    except UsageError as exc:
        if realtrace.STAND_IN_ABORT not in str(exc):
            raise
        return _on_cpu(model, exc, sizes=sizes, mode=mode, dtype=dtype, optimizer=optimizer, out=out)


def _on_cpu(model: str, exc, *, sizes, mode: str, dtype, optimizer: str, out) -> OpSet:
    """A model whose tensors take a layout the computing stand-in has no kernels for (sparse, quantized: its
    device registers strided kernels alone; fake tensors lose the layout), or whose real-valued trace aborted
    the stand-in's process, traced with real values on CPU itself, the op set saying why (its own
    device-type branches are CPU's then)."""
    on_cpu = trace_spec(
        model, mode=mode, dtype=dtype, device="cpu", optimizer=optimizer, real=True, sizes=sizes, out=out
    )
    why = (
        f"the computing stand-in has no {exc.layout} kernels ({ladder.one_line(exc.failure, 160)})"
        if isinstance(exc, realtrace.LayoutError)
        else "the real-valued trace aborted the computing stand-in's process (SIGABRT; torch 2.13 aborts where "
        "an error is raised inside a backward on a Python-defined device)"
    )
    on_cpu.doc["provenance"].setdefault("notes", []).append(f"traced on CPU itself, with real values: {why}")
    return on_cpu


# ---------------------------------------------------------------- the zoo


def trace_zoo(entries, modes, root: str = zoo.ROOT, out=sys.stderr) -> list[tuple[str, str, str]]:
    """Trace every zoo entry in every mode into ROOT/<name>/<mode>.yaml with a progress line;
    returns the failures (name, mode, why). Serve mode is traced for the decoders ``serve.ZOO`` names."""
    failures = []
    from opcov.tracing.serve import ZOO as SERVED

    jobs = [(e, m) for e in entries for m in modes if m != "serve" or e.name in SERVED]
    start = time.monotonic()
    for i, (entry, mode) in enumerate(jobs, 1):
        t0 = time.monotonic()
        bar = _bar(i - 1, len(jobs))
        print(f"\r{bar} {i - 1}/{len(jobs)} {entry.name} {mode}...".ljust(79), end="", file=out, flush=True)
        try:
            path = zoo.path_for(entry.name, mode, root)
            result = trace_spec(entry.name, mode=mode, out=path)
            result.save(path)
            status = f"{result.doc['summary']['distinct_ops']} ops -> {path}"
        except Exception as exc:  # noqa: BLE001 - one model failing must not stop the zoo
            why = str(exc) if isinstance(exc, OpcovError) else f"{type(exc).__name__}: {_first_line(exc)}"
            failures.append((entry.name, mode, why))
            status = f"FAILED: {why}"
        print(
            f"\r{bar} {i}/{len(jobs)} {entry.name} {mode}: {status} ({time.monotonic() - t0:.1f} s)".ljust(79),
            file=out,
            flush=True,
        )
    print(f"{len(jobs) - len(failures)}/{len(jobs)} traced in {time.monotonic() - start:.1f} s", file=out)
    return failures


def _first_line(exc) -> str:
    text = str(exc).strip()
    return text.splitlines()[0][:200] if text else ""


def _bar(done: int, total: int, width: int = 20) -> str:
    filled = width * done // max(total, 1)
    return "[" + "#" * filled + "." * (width - filled) + "]"


# ---------------------------------------------------------------- the whole zoo's jobs (zoorun's workers)


def fake_trace(arch, mode: str, path: str):
    """The op set, traced with fake tensors (a data-dependent model: ``ladder.NeedsReal``), its real-valued
    branch run left to a real-valued worker (``real_job``); a default config its model refuses is
    repaired first (``ladder.repaired``)."""
    if arch.curated:
        return trace_spec(arch.name, mode=mode, out=path, defer_real=True)
    try:
        if not arch.spec.startswith("hf:"):  # timm, torchvision: their default sizes
            return trace_spec(arch.spec, mode=mode, out=path, defer_real=True)
        return _tiny_or_default(arch, mode, path)
    except models.BuildError:
        raise
    except OpcovError as exc:
        if "--real" not in str(exc):
            raise
        raise ladder.NeedsReal(ladder.one_line(exc, 160)) from None


def _tiny_or_default(arch, mode: str, path: str):
    """A transformers model's fake trace at its tiny config, repaired; a tiny config whose sizes no
    longer fit together at the default config (its full depth), with a note saying why."""
    config = ladder.default_config(arch.spec[3:])

    def run(sizes):
        return trace_spec(arch.spec, mode=mode, sizes=sizes, out=path, defer_real=True)

    small = tiny.overrides(config)
    try:
        return ladder.repaired(run, config, small)
    except Exception as exc:
        if not small or ladder.LASTING.search(str(exc)):
            raise
        first = exc
    try:
        return ladder.repaired(
            run,
            config,
            {},
            [
                f"traced at the default config's full depth: its tiny "
                f"configuration ({ladder.set_text(small)}) fails ({ladder.one_line(first, 160)})"
            ],
        )
    except Exception as second:
        if "--real" in str(second) and "--real" not in str(first):  # got further: the real-valued trace's turn
            raise
        raise first from None


def cpu_trace(arch, mode: str, path: str, real: bool):
    """The op set for a CPU target (``opcov trace --device cpu``, ``--real`` for ``real``: eager on CPU
    with real weights, seeded), at the sizes of ``ladder.narrow``, fake and real alike, so that the two
    differ by fake-vs-real only (scripts/zoo_recall.py --device cpu). A fake trace that meets a
    data-dependent op fails as it is (a cannot_trace row): no stand-in traces it instead."""

    def run(sizes):
        if real:
            import_torch().manual_seed(0)
        return trace_spec(model, mode=mode, device="cpu", real=real, sizes=sizes, out=path)

    model = arch.name if arch.curated else arch.spec
    return ladder.narrow(arch, run)
