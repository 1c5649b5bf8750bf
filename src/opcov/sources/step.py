"""A model's step as every producer runs it: its input variants, the loss a training step backs from and the
tensors of its output. tracing traces the step, probe replays the calls it makes (opcov.probe.replay), and a
real run compares its outputs (opcov.tracing.observe, opcov.testing.reality and the scripts that run models
for real): each takes these from here. Torch is passed in, never imported."""

from __future__ import annotations

from opcov import vocab
from opcov.errors import UsageError

PADDED = "padded_mask"  # vocab.INPUT_VARIANTS: the run with a padded attention mask


def input_variants(torch, built) -> list:
    """(variant, inputs), a variant a word of vocab.INPUT_VARIANTS: the inputs as given (as built), and,
    for a model that takes an attention mask, with one padded (``padded_mask``)."""
    import inspect

    out = [(vocab.GIVEN, built.inputs)]
    inputs = built.inputs
    try:
        takes_mask = "attention_mask" in inspect.signature(built.model.forward).parameters
    except (TypeError, ValueError):
        takes_mask = False
    if isinstance(inputs, dict) and isinstance(inputs.get("input_ids"), torch.Tensor) and takes_mask:
        ids = inputs["input_ids"]
        mask = torch.ones_like(ids)
        mask[0, ids.shape[-1] - max(1, ids.shape[-1] // 4) :] = 0
        out.append((PADDED, {**inputs, "attention_mask": mask}))
    return out


def tensors_of(obj, torch):
    """The tensors in ``obj`` (a tensor, or lists, tuples and dicts of them), in order."""
    if isinstance(obj, torch.Tensor):
        yield obj
    elif isinstance(obj, (list, tuple)):
        for x in obj:
            yield from tensors_of(x, torch)
    elif isinstance(obj, dict):
        for x in obj.values():
            yield from tensors_of(x, torch)


def default_loss(torch, out):
    """The model's own loss (HF outputs given labels), else the sum of its floating outputs."""
    own = out.get("loss") if isinstance(out, dict) else getattr(out, "loss", None)
    if isinstance(own, torch.Tensor):
        return own if own.dim() == 0 else own.sum()  # a per-sample loss (audio codecs): summed
    parts = [
        t.sum()
        for t in tensors_of(out if not hasattr(out, "to_tuple") else out.to_tuple(), torch)
        if t.requires_grad and t.is_floating_point()
    ]
    if not parts:
        raise UsageError(
            "the model's outputs do not depend on its parameters, so training has no "
            "backward; trace with --mode inference"
        )
    total = parts[0]
    for p in parts[1:]:
        total = total + p
    return total


def output_tensors(out) -> list:
    """The tensors of a model's output (a ModelOutput, tuple, dict or tensor), flattened in order:
    what a real run's outputs are compared by (the child scripts of this module and of
    scripts/envs/xla_reality.py)."""
    import torch

    if hasattr(out, "to_tuple"):
        out = out.to_tuple()
    if isinstance(out, torch.Tensor):
        return [out]
    if isinstance(out, dict):
        out = list(out.values())
    if isinstance(out, (list, tuple)):
        return [t for v in out for t in output_tensors(v)]
    return []


def as_torch_modules(torch, model) -> list[str]:
    """Make ``model`` (the CPU reference's copy) run torch's own modules where a backend's package put its
    class in their place in ``torch.nn`` (``import torch_xla`` makes ``nn.GRU`` its scan-based GRU, which
    refuses CPU tensors): each such module becomes the torch class it derives from, same parameters.
    The device's copy keeps the backend's class, as a user's script gets it. Returns what was replaced
    ('torch.nn.GRU by torch_xla.experimental.gru.GRU'), for the file."""
    said = set()
    for m in model.modules():
        cls = type(m)
        if cls.__module__.split(".")[0] == "torch":
            continue
        base = next((b for b in cls.__mro__[1:] if b.__module__.startswith("torch.nn.")), None)
        if base is not None and getattr(torch.nn, base.__name__, None) is cls:
            m.__class__ = base
            said.add(f"torch.nn.{base.__name__} by {cls.__module__}.{cls.__qualname__}")
    return sorted(said)
