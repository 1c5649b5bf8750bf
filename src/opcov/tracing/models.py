"""Building the model to trace, from what a user names: a factory, a transformers model type or
config.json, or a torch.nn building block. Nothing is downloaded and no weights are allocated.

The factory protocol (``opcov trace package.module:function``): the function takes no
arguments and returns ``(model, inputs)``; ``inputs`` is a tuple of positional arguments, a
dict of keyword arguments, or one tensor. opcov calls it under ``torch.device("meta")``, so
``nn.Module`` parameters and ``torch.empty/zeros/randn`` inputs cost no memory; with
``--real`` it is called normally and must return real CPU tensors (valid indices included).
A training trace uses ``output.loss`` when the model returns one, else the sum of its
floating outputs.

transformers models are built from their config class with random initialisation
(``HF_HUB_OFFLINE=1``; ``from_config``, never ``from_pretrained``), with the task head that
has a loss (causal LM, masked LM, seq2seq, image classification...), ``use_cache=False``
(a KV cache is generation, not the model) and ``attn_implementation="sdpa"`` where the
architecture supports it.
"""

from __future__ import annotations

import contextlib
import importlib
import json
import os
from dataclasses import dataclass, field

from opcov.errors import UsageError
from opcov.torchenv import import_torch
from opcov.tracing import nnblocks

# Task heads tried in order for a model type, with the inputs each needs.
TASKS = (
    ("causal_lm", "MODEL_FOR_CAUSAL_LM_MAPPING_NAMES"),
    ("masked_lm", "MODEL_FOR_MASKED_LM_MAPPING_NAMES"),
    ("seq2seq_lm", "MODEL_FOR_SEQ_TO_SEQ_CAUSAL_LM_MAPPING_NAMES"),
    ("speech_seq2seq", "MODEL_FOR_SPEECH_SEQ_2_SEQ_MAPPING_NAMES"),
    ("image_classification", "MODEL_FOR_IMAGE_CLASSIFICATION_MAPPING_NAMES"),
    ("audio_classification", "MODEL_FOR_AUDIO_CLASSIFICATION_MAPPING_NAMES"),
    ("contrastive", "MODEL_FOR_ZERO_SHOT_IMAGE_CLASSIFICATION_MAPPING_NAMES"),
)


@dataclass
class Sizes:
    """Input sizes (the model's own sizes come from its config, see ``overrides``)."""

    batch: int = 2
    seq: int = 16
    image: int | None = None  # default: the config's image_size
    overrides: dict = field(default_factory=dict)  # config attributes set before building


@dataclass
class Built:
    model: object
    inputs: object
    name: str
    source: str
    config: dict = field(default_factory=dict)
    notes: list = field(default_factory=list)


def build(spec: str, sizes: Sizes, *, mode: str, real: bool, zoo_entry=None) -> Built:
    """The model and example inputs that ``spec`` names (see the module docstring)."""
    if spec.startswith("nn:"):
        name = spec[3:]
        model, inputs, config = nnblocks.build(name, sizes, real=real)
        return Built(model, inputs, name=name, source=spec, config=config,
                     notes=[f"torch.nn {name} block built by opcov.tracing.nnblocks",
                            *(zoo_entry.notes if zoo_entry else ())])
    if spec.startswith("factory:") or (":" in spec and not spec.startswith("hf:") and "/" not in spec):
        return build_factory(spec.removeprefix("factory:"), real=real)
    if spec.endswith(".json") or os.path.isdir(spec):
        return build_hf(_local_config(spec), sizes, mode=mode, real=real, source=f"config:{spec}",
                        name=os.path.basename(os.path.dirname(os.path.abspath(spec))) if spec.endswith(".json")
                        else os.path.basename(os.path.abspath(spec)))
    model_type = spec.removeprefix("hf:")
    config, task, notes = _hf_config(model_type, zoo_entry)
    return build_hf(config, sizes, mode=mode, real=real, source=f"hf:{model_type}", name=model_type,
                    task=task, notes=notes)


# ---------------------------------------------------------------- factories

def build_factory(target: str, *, real: bool) -> Built:
    mod_name, _, fn_name = target.partition(":")
    if not mod_name or not fn_name:
        raise UsageError(f"factory {target!r}: expected package.module:function")
    torch = import_torch()
    try:
        module = importlib.import_module(mod_name)
    except Exception as exc:  # noqa: BLE001 - any import failure is the user's module
        raise UsageError(f"factory {target}: cannot import {mod_name}: {type(exc).__name__}: "
                         f"{_first_line(exc)} (is it on PYTHONPATH?)") from None
    fn = getattr(module, fn_name, None)
    if not callable(fn):
        raise UsageError(f"factory {target}: {mod_name} has no function {fn_name!r}")
    try:
        with (contextlib.nullcontext() if real else torch.device("meta")):
            result = fn()
    except Exception as exc:  # noqa: BLE001
        raise UsageError(f"factory {target} raised {type(exc).__name__}: {_first_line(exc)}") from None
    if not (isinstance(result, tuple) and len(result) == 2 and isinstance(result[0], torch.nn.Module)):
        raise UsageError(f"factory {target} must return (model, inputs) with an nn.Module; "
                         f"it returned {type(result).__name__}")
    model, inputs = result
    return Built(model, inputs, name=f"{mod_name}.{fn_name}", source=f"factory:{target}")


def _first_line(exc) -> str:
    text = str(exc).strip()
    return text.splitlines()[0][:200] if text else type(exc).__name__


# ---------------------------------------------------------------- transformers

def _transformers():
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")
    import_torch()  # backend autoload off before transformers imports torch
    try:
        import transformers
    except ImportError:
        raise UsageError("transformers is not installed: pip install 'opcov[models]'") from None
    transformers.logging.set_verbosity_error()
    return transformers


def _hf_config(model_type: str, zoo_entry):
    tf = _transformers()
    from transformers.models.auto.configuration_auto import CONFIG_MAPPING_NAMES

    if model_type not in CONFIG_MAPPING_NAMES:
        import difflib

        near = difflib.get_close_matches(model_type, list(CONFIG_MAPPING_NAMES), n=3)
        hint = f"; did you mean {', '.join(near)}?" if near else ""
        raise UsageError(f"unknown model type {model_type!r}: not a transformers {tf.__version__} model type"
                         f"{hint} (or pass a config.json, a factory package.module:function, or nn:NAME)")
    kwargs = dict(zoo_entry.config) if zoo_entry else {}
    sub = {k: kwargs.pop(k) for k in list(kwargs) if k.endswith("_config") and isinstance(kwargs[k], dict)}
    config = tf.AutoConfig.for_model(model_type, **kwargs)
    for key, values in sub.items():
        base = getattr(config, key)
        for k, v in values.items():
            setattr(base, k, v)
    return config, zoo_entry.task if zoo_entry else None, list(zoo_entry.notes) if zoo_entry else []


def _local_config(path: str):
    tf = _transformers()
    file = os.path.join(path, "config.json") if os.path.isdir(path) else path
    try:
        with open(file) as f:
            raw = json.load(f)
    except OSError as exc:
        raise UsageError(f"{file}: cannot read: {exc.strerror}") from None
    except ValueError as exc:
        raise UsageError(f"{file}: not valid JSON: {exc}") from None
    model_type = raw.get("model_type") if isinstance(raw, dict) else None
    if not model_type:
        raise UsageError(f"{file}: no 'model_type' key; a transformers config.json names its architecture")
    from transformers.models.auto.configuration_auto import CONFIG_MAPPING_NAMES

    if model_type not in CONFIG_MAPPING_NAMES:
        raise UsageError(f"{file}: model_type {model_type!r} is unknown to transformers {tf.__version__}")
    return tf.AutoConfig.for_model(**raw)


def _task_for(config, task):
    from transformers.models.auto import modeling_auto

    model_type = config.model_type
    for name, mapping in TASKS:
        if task and name != task:
            continue
        cls_name = getattr(modeling_auto, mapping).get(model_type)
        if cls_name:
            return name, cls_name
    if task:
        raise UsageError(f"model type {model_type!r} has no {task} head in this transformers")
    return "base", modeling_auto.MODEL_MAPPING_NAMES.get(model_type)


def build_hf(config, sizes: Sizes, *, mode, real, source, name, task=None, notes=()) -> Built:
    tf = _transformers()
    torch = import_torch()
    for key, value in sizes.overrides.items():
        target = config
        *path, leaf = key.split(".")
        for part in path:
            target = getattr(target, part, None)
            if target is None:
                raise UsageError(f"--set {key}: the config has no {part!r}")
        setattr(target, leaf, value)
    _no_cache(config)
    task, cls_name = _task_for(config, task)
    if not cls_name or not hasattr(tf, cls_name):
        raise UsageError(f"model type {config.model_type!r}: no model class in transformers {tf.__version__}")
    cls = getattr(tf, cls_name)
    model = None
    for attn in ("sdpa", "eager"):
        try:
            with (contextlib.nullcontext() if real else torch.device("meta")):
                model = cls._from_config(config, attn_implementation=attn)
            break
        except (ValueError, ImportError) as exc:
            if attn == "eager":
                raise UsageError(f"cannot build {cls_name} from its config: {_first_line(exc)}") from None
        except Exception as exc:  # noqa: BLE001 - a config that the class rejects
            raise UsageError(f"cannot build {cls_name} from its config: {type(exc).__name__}: "
                             f"{_first_line(exc)}") from None
    inputs = _hf_inputs(torch, config, task, sizes, mode=mode, real=real)
    return Built(model, inputs, name=name, source=source, config=_config_summary(config, sizes),
                 notes=[f"{cls_name} ({task}) built from {type(config).__name__} with random initialisation",
                        *notes])


def _no_cache(config):
    for cfg in [config] + [getattr(config, k) for k in dir(config) if k.endswith("_config")
                           and hasattr(getattr(config, k, None), "to_dict")]:
        if hasattr(cfg, "use_cache"):
            cfg.use_cache = False


def _sub(config, key):
    return getattr(config, key, None) or config


def _hf_inputs(torch, config, task, sizes: Sizes, *, mode, real):
    b, s = sizes.batch, sizes.seq
    dev = contextlib.nullcontext() if real else torch.device("meta")
    text = _sub(config, "text_config")
    vocab = int(getattr(text, "vocab_size", 100) or 100)

    def ids(n=s, high=vocab):
        with dev:
            return torch.randint(3, max(4, min(high, 100)), (b, n)) if real else torch.zeros(b, n, dtype=torch.long)

    def floats(*shape):
        with dev:
            return torch.randn(*shape)

    train = mode == "training"
    if task in ("causal_lm", "masked_lm"):
        x = ids()
        return {"input_ids": x, "labels": x} if train else {"input_ids": x}
    if task == "seq2seq_lm":
        return {"input_ids": ids(), ("labels" if train else "decoder_input_ids"): ids()}
    if task == "speech_seq2seq":
        frames = 2 * int(getattr(config, "max_source_positions", 1500))
        feats = floats(b, int(config.num_mel_bins), frames)
        return {"input_features": feats, ("labels" if train else "decoder_input_ids"): ids()}
    vision = _sub(config, "vision_config")
    size = sizes.image or _image_size(vision)
    pixels = floats(b, int(getattr(vision, "num_channels", 3)), size, size)
    if task == "image_classification":
        if not train:
            return {"pixel_values": pixels}
        with dev:
            return {"pixel_values": pixels, "labels": torch.zeros(b, dtype=torch.long)}
    if task == "contrastive":
        out = {"input_ids": ids(), "pixel_values": pixels}
        return {**out, "return_loss": True} if train else out
    if task == "audio_classification":
        wav = floats(b, 16 * 400)
        if not train:
            return {"input_values": wav}
        with dev:
            return {"input_values": wav, "labels": torch.zeros(b, dtype=torch.long)}
    if hasattr(config, "vocab_size"):
        return {"input_ids": ids()}
    return {"pixel_values": pixels}


def _image_size(config) -> int:
    size = getattr(config, "image_size", 224)
    if isinstance(size, (list, tuple)):
        size = size[0]
    if isinstance(size, dict):
        size = size.get("height", 224)
    return int(size)


_SUMMARY_KEYS = ("num_hidden_layers", "hidden_size", "intermediate_size", "num_attention_heads",
                 "num_key_value_heads", "vocab_size", "num_local_experts", "num_experts",
                 "num_experts_per_tok", "image_size", "patch_size", "hidden_sizes", "depths",
                 "encoder_layers", "decoder_layers", "d_model", "num_mel_bins")


def _config_summary(config, sizes: Sizes) -> dict:
    """The sizes that make this trace, small enough for the file header."""
    out = {"batch": sizes.batch, "seq": sizes.seq}
    for cfg_name, cfg in [("", config)] + [(k, getattr(config, k)) for k in ("text_config", "vision_config")
                                          if hasattr(getattr(config, k, None), "to_dict")]:
        d = cfg.to_dict()
        for key in _SUMMARY_KEYS:
            if d.get(key) is not None:
                out[f"{cfg_name}.{key}" if cfg_name else key] = d[key]
    if sizes.image:
        out["image"] = sizes.image
    return out
