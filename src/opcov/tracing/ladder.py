"""The sizes a model is traced at, and the ladder of retries that finds sizes its model takes.

Why a module of its own: the zoo's workers (``zoorun``) and ``opcov trace``'s real-valued branch
runs (``realtrace.with_real_branches``) climb the same ladder, and a runner of jobs should not hold
the rules of a trace. It holds the rules only, each taking the trace to try as a ``run(sizes)``: the
traces that climb it are ``spec``'s (fake: ``fake_trace``, ``cpu_trace``) and ``realtrace``'s (real:
``real_trace``, ``repaired_branch_runs``), which import this module, never the other way round. The
rungs, each tried where the one before fails for a reason of sizes:

* a transformers model's tiny config (``tiny.overrides``: the layer kinds kept, repeats dropped),
  then its default config's full depth;
* at each size, the repairs ``opcov.tracing.repair`` knows (a config field the model needs, an input
  or image side its own check asks for), added as ``--set`` / ``--input`` so the op set's command
  reproduces it, and noted;
* for a real-valued trace or branch run (real weights: narrow widths), the narrowest widths
  (``tiny.overrides(width=True)``), then 4 whole heads of the config's own head dim
  (``width="heads"``), then the full widths with as few layers.

``arch`` is a ``zoorun.Arch`` (name, spec, curated). Torch and transformers are imported inside the
functions: this module is read by torch-free code too.
"""

from __future__ import annotations

import dataclasses
import re

from opcov.errors import OpcovError


class NeedsReal(Exception):
    """A fake-tensor trace met a data-dependent op: the job goes to a real-valued worker."""


def set_text(overrides: dict) -> str:
    return " ".join(f"{k}={v}" for k, v in overrides.items())


def repaired(run, config, overrides: dict, notes=(), *, start=None, failed: Exception | None = None, note=None):
    """``run(Sizes(overrides))``; where it fails for a reason ``opcov.tracing.repair`` knows (a config
    field, an input the model's own check asks for), again with the repairs added to the sizes (so
    they are in the op set's command: ``--set``, ``--input``), and noted. ``start``: the sizes whose
    other fields (inputs, image, audio, batch) the runs start from; ``failed``: how a run at ``start``
    with ``overrides`` already failed (it is not made again); ``note(result, notes)`` files the notes
    (default: in the op set's provenance)."""
    from opcov.sources import models
    from opcov.tracing import repair

    start = start or models.Sizes()
    notes, asked, image, audio = list(notes), tuple(start.inputs), start.image, start.audio

    def sizes():
        return dataclasses.replace(start, overrides=overrides, inputs=asked, image=image, audio=audio)

    for _ in range(5):
        if failed is None:
            try:
                result = run(sizes())
            except Exception as exc:  # noqa: BLE001 - repaired below, or raised as it is
                failed = exc
        if failed is None:
            (note or _note_in_opset)(result, notes)
            return result
        exc, failed = failed, None
        fix, why = repair.repairs(config, str(exc), overrides)
        fix = {k: v for k, v in fix.items() if overrides.get(k) != v}
        more = tuple(n for n in repair.asked_inputs(str(exc)) + repair.none_inputs(exc) if n not in asked)[:1]
        side = repair.image_size(str(exc))
        side = side if side != image else None
        length = repair.audio_length(str(exc))
        length = length if length != audio else None
        if not fix and not more and not side and not length:
            raise exc
        if length:
            why = why + [
                f"audio of length {length}, the multiple the model's own check asks for ({one_line(exc, 120)})"
            ]
            audio = length
        if more:
            why = why + [f"the model's own check asks for {', '.join(more)} ({one_line(exc, 120)}): made it too"]
        if side:
            why = why + [f"images of side {side}, the size the model's own check names ({one_line(exc, 120)})"]
            image = side
        overrides, asked, notes = {**overrides, **fix}, asked + more, notes + why
    return run(sizes())


def _note_in_opset(result, notes) -> None:
    result.doc["provenance"]["notes"].extend(notes)


def narrow(arch, run):
    """``run(sizes)`` at a real-valued trace's sizes: a curated entry's own (small already), a timm or
    torchvision model's defaults, a transformers model's narrow widths (``tiny.overrides(width=True)``),
    repaired, else its full widths with as few layers (see ``real_trace``)."""
    from opcov.sources import models, tiny

    if arch.curated or not arch.spec.startswith("hf:"):  # a curated entry's hand-checked config is small already
        return run(models.Sizes())
    config = default_config(arch.spec[3:])
    narrowest = tiny.overrides(config, width=True)
    try:
        return repaired(run, config, narrowest)
    except Exception as exc:
        if isinstance(exc, MemoryError) or not SHAPE.search(str(exc)):
            raise
        narrow = one_line(exc, 160)
    for heads, _, why in whole_heads(config, narrowest, narrow):
        try:
            return repaired(run, config, heads, why)
        except Exception as exc:
            if isinstance(exc, MemoryError) or not SHAPE.search(str(exc)):
                raise
    return repaired(
        run,
        config,
        tiny.overrides(config),
        [f"traced at the config's full widths (fewer layers only): at narrow widths it fails ({narrow})"],
    )


# Narrow widths whose hidden size is whole heads of the config's own head dim (tiny's width="heads").
WHOLE_HEADS_NOTE = (
    "at narrow widths whose hidden size is 4 heads of the config's own head dim: at the narrowest "
    "widths it fails ({why})"
)


def whole_heads(config, narrow: dict, why: str) -> list:
    """[(overrides, None, notes)] of the retry at whole heads of a run at ``narrow`` widths that failed
    for ``why`` (its shapes did not fit together), or [] where whole heads are the same widths: the
    step between the narrowest widths and full ones, for branch runs and real-valued traces alike."""
    from opcov.sources import tiny

    heads = {**narrow, **tiny.overrides(config, width="heads")}
    return [(heads, None, [WHOLE_HEADS_NOTE.format(why=why)])] if heads != narrow else []


# Failures no config size changes: a missing library or class, an input opcov cannot make, the
# real-valued trace needed. Any other failure of a tiny config is tried again at the default depth
# (the tiny sizes may be what breaks: shapes, or layer lists such as gemma3n's KV-sharing layers).
LASTING = re.compile(
    r"needs the \w+ library|no model class|has no forward|cannot make it from the config|"
    r"--real|out of memory|killed",
    re.I,
)
# A failure of shapes that do not fit together (narrow widths some other size does not follow).
SHAPE = re.compile(
    r"shape|size|dimension|mat1|mat2|match|channels|normalized_shape|split_sizes|invalid for input|"
    r"reduction dim|out of range|not enough values to unpack",
    re.I,
)


def default_config(model_type: str):
    from opcov.sources import models

    tf = models._transformers()
    try:
        return tf.AutoConfig.for_model(model_type)
    except Exception as exc:  # noqa: BLE001 - a default config that does not construct
        raise models.BuildError(f"cannot make the default config of {model_type}: {one_line(exc)}") from None


def one_line(exc, limit: int = 300) -> str:
    """An exception as one line: opcov's own message, else 'Type: first line' (at most ``limit`` characters)."""
    text = str(exc).strip()
    if not isinstance(exc, OpcovError):
        text = f"{type(exc).__name__}: {text.splitlines()[0] if text else ''}".rstrip(": ")
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 3] + "..."
