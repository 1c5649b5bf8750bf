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
import shlex
import sys
import time

import yaml

from opcov.errors import OpcovError, UsageError
from opcov.store import layout, opset
from opcov.store.opset import OpSet
from opcov.tracing import models, realtrace, zoo
from opcov.tracing.trace import Options, trace


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
    real = real or bool(entry and entry.real)
    sizes = sizes or models.Sizes()
    if real and device != "cpu":
        if autocast:
            raise UsageError(
                "--real with --autocast: the computing stand-in that real values run on has no "
                "autocast policy; leave out --autocast, or trace on CPU with --device cpu"
            )
        return realtrace.trace_real(model, sizes=sizes, mode=mode, dtype=dtype, optimizer=optimizer, out=out)
    built = models.build(entry.spec if entry else model, sizes, mode=mode, real=real, zoo_entry=entry)
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
    result.doc["model"].update(built.facets)
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


def command_line(
    model: str,
    *,
    mode: str,
    dtype: str,
    autocast: bool = False,
    device: str = "accelerator",
    optimizer: str = "adamw",
    real: bool = False,
    sizes: models.Sizes | None = None,
    out: str | None = None,
    on: str | None = None,
) -> str:
    """The ``opcov trace`` line for these options, each left out where it has its default value."""
    default, sizes = Options(), sizes or models.Sizes()
    no_sizes = models.Sizes()
    parts = ["opcov", "trace", model, "--mode", mode]
    if dtype != default.dtype:
        parts += ["--dtype", dtype]
    if autocast:
        parts.append("--autocast")
    if device != default.device and device != on:
        parts += ["--device", device]
    if optimizer != default.optimizer:
        parts += ["--optimizer", optimizer]
    if real:
        parts.append("--real")
    if on:
        parts += ["--on", on]
    if sizes.batch != no_sizes.batch:
        parts += ["--batch", str(sizes.batch)]
    if sizes.seq != no_sizes.seq:
        parts += ["--seq", str(sizes.seq)]
    if sizes.image:
        parts += ["--image-size", str(sizes.image)]
    if sizes.audio:
        parts += ["--audio-length", str(sizes.audio)]
    for key, value in sizes.overrides.items():
        parts += ["--set", f"{key}={_yaml_value(value)}"]
    for name in sizes.inputs:
        parts += ["--input", name]
    if out:
        parts += ["--out", out]
    return shlex.join(parts)


def _yaml_value(value) -> str:
    """``value`` written as ``--set`` reads it back (one line of YAML)."""
    return yaml.safe_dump(value, default_flow_style=True, width=1 << 30).strip().removesuffix("...").strip()


# ---------------------------------------------------------------- the zoo


def trace_zoo(entries, modes, root: str = zoo.ROOT, out=sys.stderr) -> list[tuple[str, str, str]]:
    """Trace every zoo entry in every mode into ROOT/<name>/<mode>.yaml with a progress line;
    returns the failures (name, mode, why)."""
    failures = []
    jobs = [(e, m) for e in entries for m in modes]
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
