"""The ``opcov trace`` line that reproduces a trace, written from its options (options at their defaults
left out): every op set records it, so the CLI, the zoo, the real-valued runs and Python callers record the
same line for the same trace. A module of its own because all of them need it (``spec``, ``realtrace``,
the CLI's ``--on``), below each of them."""

from __future__ import annotations

import shlex

import yaml

from opcov.sources import models
from opcov.tracing.trace import Options


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
    if real and mode != "serve":  # serve mode always runs real values
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
