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
has a loss (causal LM, masked LM, seq2seq, image classification...; the base model where the
config cannot build the head), ``use_cache=False`` (a KV cache is generation, not the model) and
``attn_implementation="sdpa"`` where the architecture supports it. Their inputs are made from the
model's own forward signature and config (``inputs.py``), and ``Built.dtype`` says when the model
needs a dtype to trace (bfloat16 for grouped_mm experts). Whatever stops a build is one line
(``BuildError``): a config the class refuses, a library that is not installed, an input opcov
cannot make.
"""

from __future__ import annotations

import contextlib
import importlib
import json
import os
import re
import sys
from dataclasses import dataclass, field

from opcov.errors import UsageError
from opcov.sources import inputs, nnblocks, vision
from opcov.torchenv import import_torch

# Task heads tried in order for a model type, with the inputs each needs.
# A contrastive (image-text) head comes before image classification: it runs both towers.
TASKS = (
    ("causal_lm", "MODEL_FOR_CAUSAL_LM_MAPPING_NAMES"),
    ("masked_lm", "MODEL_FOR_MASKED_LM_MAPPING_NAMES"),
    ("seq2seq_lm", "MODEL_FOR_SEQ_TO_SEQ_CAUSAL_LM_MAPPING_NAMES"),
    ("speech_seq2seq", "MODEL_FOR_SPEECH_SEQ_2_SEQ_MAPPING_NAMES"),
    ("contrastive", "MODEL_FOR_ZERO_SHOT_IMAGE_CLASSIFICATION_MAPPING_NAMES"),
    ("image_classification", "MODEL_FOR_IMAGE_CLASSIFICATION_MAPPING_NAMES"),
    ("audio_classification", "MODEL_FOR_AUDIO_CLASSIFICATION_MAPPING_NAMES"),
)


@dataclass
class Sizes:
    """Input sizes (the model's own sizes come from its config, see ``overrides``)."""

    batch: int = 2
    seq: int = 16
    image: int | None = None  # default: the config's image_size
    audio: int | None = None  # raw-audio samples or feature frames (default: from the config's strides)
    overrides: dict = field(default_factory=dict)  # config attributes set before building
    inputs: tuple = ()  # forward inputs to make beside those opcov picks (--input NAME)


@dataclass
class Built:
    model: object
    inputs: object
    name: str
    source: str
    config: dict = field(default_factory=dict)
    notes: list = field(default_factory=list)
    dtype: str | None = None  # the dtype the model needs to trace (bfloat16 for grouped_mm experts), if any
    facets: dict = field(default_factory=dict)  # family, task, modality where the builder knows them (op set's model)


class BuildError(UsageError):
    """The model cannot be built (or given inputs) from its config: one line saying why."""


def build(spec: str, sizes: Sizes, *, mode: str, real: bool, zoo_entry=None) -> Built:
    """The model and example inputs that ``spec`` names (see the module docstring)."""
    if spec.startswith("nn:"):
        name = spec[3:]
        model, inputs, config = nnblocks.build(name, sizes, real=real)
        return Built(
            model,
            inputs,
            name=name,
            source=spec,
            config=config,
            notes=[f"torch.nn {name} block built by opcov.tracing.nnblocks", *(zoo_entry.notes if zoo_entry else ())],
        )
    if vision.is_spec(spec):
        try:
            model, made, family, notes = vision.build(spec, sizes, mode=mode, real=real)
        except UsageError:
            raise
        except Exception as exc:  # noqa: BLE001 - a model its library cannot build here
            raise BuildError(f"cannot build {spec}: {_why(exc)}") from None
        library, _, kind = family.partition(".")
        task = "image_classification" if library == "timm" or kind == "classification" else kind
        modality = "video" if task == "video" else "vision"
        family = library
        return Built(
            model,
            made,
            name=vision.arch_name(spec),
            source=spec,
            facets={"family": family, "task": task, "modality": modality},
            notes=[*notes, *(zoo_entry.notes if zoo_entry else ())],
        )
    if spec.startswith("factory:") or (":" in spec and not spec.startswith("hf:") and "/" not in spec):
        return build_factory(spec.removeprefix("factory:"), real=real)
    if spec.endswith(".json") or os.path.isdir(spec):
        return build_hf(
            _local_config(spec),
            sizes,
            mode=mode,
            real=real,
            source=f"config:{spec}",
            name=os.path.basename(os.path.dirname(os.path.abspath(spec)))
            if spec.endswith(".json")
            else os.path.basename(os.path.abspath(spec)),
        )
    model_type = spec.removeprefix("hf:")
    config, task, notes = _hf_config(model_type, zoo_entry)
    return build_hf(
        config, sizes, mode=mode, real=real, source=f"hf:{model_type}", name=model_type, task=task, notes=notes
    )


# ---------------------------------------------------------------- factories


def build_factory(target: str, *, real: bool) -> Built:
    mod_name, _, fn_name = target.partition(":")
    if not mod_name or not fn_name:
        raise UsageError(f"factory {target!r}: expected package.module:function")
    torch = import_torch()
    if "" not in sys.path and os.getcwd() not in sys.path:  # as 'python -m' does: a module beside the user
        sys.path.insert(0, os.getcwd())
    try:
        module = importlib.import_module(mod_name)
    except Exception as exc:  # noqa: BLE001 - any import failure is the user's module
        raise UsageError(
            f"factory {target}: cannot import {mod_name}: {type(exc).__name__}: "
            f"{_first_line(exc)} (is it on PYTHONPATH?)"
        ) from None
    fn = getattr(module, fn_name, None)
    if not callable(fn):
        raise UsageError(f"factory {target}: {mod_name} has no function {fn_name!r}")
    try:
        with contextlib.nullcontext() if real else torch.device("meta"):
            result = fn()
    except KeyboardInterrupt:
        raise
    except BaseException as exc:  # noqa: BLE001 - SystemExit or any BaseException subclass is the factory's too
        raise UsageError(f"factory {target} raised {type(exc).__name__}: {_first_line(exc)}") from None
    if getattr(sys.stdout, "closed", False) or getattr(sys.stderr, "closed", False):
        raise UsageError(f"factory {target} closed standard output or error; a factory returns (model, inputs) only")
    if not (isinstance(result, tuple) and len(result) == 2 and isinstance(result[0], torch.nn.Module)):
        raise UsageError(
            f"factory {target} must return (model, inputs) with an nn.Module; it returned {type(result).__name__}"
        )
    model, inputs = result
    if not isinstance(inputs, (tuple, list, dict, torch.Tensor)):
        raise UsageError(
            f"factory {target} returned inputs of type {type(inputs).__name__}: expected a tuple or list of "
            "positional arguments, a dict of keyword arguments, or a tensor"
        )
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
        from opcov.torchenv import install_command

        raise UsageError(f"transformers is not installed: {install_command('trace')}") from None
    transformers.logging.set_verbosity_error()
    return transformers


def _hf_config(model_type: str, zoo_entry):
    tf = _transformers()
    from transformers.models.auto.configuration_auto import CONFIG_MAPPING_NAMES

    if model_type not in CONFIG_MAPPING_NAMES:
        import difflib

        near = difflib.get_close_matches(model_type, list(CONFIG_MAPPING_NAMES), n=3)
        hint = f"; did you mean {', '.join(near)}?" if near else ""
        raise UsageError(
            f"unknown model type {model_type!r}: not a transformers {tf.__version__} model type"
            f"{hint} (or pass a config.json, a factory package.module:function, or nn:NAME)"
        )
    kwargs = dict(zoo_entry.config) if zoo_entry else {}
    sub = {k: kwargs.pop(k) for k in list(kwargs) if k.endswith("_config") and isinstance(kwargs[k], dict)}
    try:
        config = tf.AutoConfig.for_model(model_type, **kwargs)
    except Exception as exc:  # noqa: BLE001 - a default config that does not construct
        raise BuildError(f"cannot make the {model_type} config: {_why(exc)}") from None
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
    """(task, class name) of the first head in TASKS the model type has (``task`` only, when given;
    an encoder-decoder's sequence-to-sequence head first), else ("base", the base model class)."""
    from transformers.models.auto import modeling_auto

    model_type = config.model_type
    order = TASKS
    if getattr(config, "is_encoder_decoder", False):  # the whole model, not its decoder as a causal LM
        order = sorted(TASKS, key=lambda t: t[0] not in ("seq2seq_lm", "speech_seq2seq"))
    for name, mapping in order:
        if task and name != task:
            continue
        cls_name = getattr(modeling_auto, mapping).get(model_type)
        if cls_name:
            return name, _first(cls_name)
    if task:
        raise BuildError(f"model type {model_type!r} has no {task} head in this transformers")
    return "base", _first(modeling_auto.MODEL_MAPPING_NAMES.get(model_type))


def _first(cls_name):
    """A mapping's class name (some map a type to several classes: the first)."""
    return cls_name[0] if isinstance(cls_name, (list, tuple)) else cls_name


def build_hf(config, sizes: Sizes, *, mode, real, source, name, task=None, notes=()) -> Built:
    """The model of ``config`` (with ``sizes.overrides`` set) with its task head, and inputs made from
    its own signature and config (``opcov.sources.inputs``). A head the config cannot build falls back
    to the base model class; every failure is one line (``BuildError``)."""
    tf = _transformers()
    torch = import_torch()
    for key, value in sizes.overrides.items():
        target = config
        *path, leaf = key.split(".")
        for part in path:
            target = getattr(target, part, None)
            if target is None:
                raise UsageError(f"--set {key}: the config has no {part!r}")
        try:
            if leaf.endswith("_config") and isinstance(value, dict) and "model_type" in value:
                value = tf.AutoConfig.for_model(**value)  # a whole sub-config, named by its model_type
            if isinstance(value, list) and isinstance(getattr(target, leaf, None), tuple):
                value = tuple(value)  # YAML has lists only; a config that holds a tuple keeps one
            setattr(target, leaf, value)
        except Exception as exc:  # noqa: BLE001 - a config that validates what is set
            raise BuildError(f"--set {key}={value!r}: the config refuses it: {_why(exc)}") from None
    _no_cache(config)
    chosen, cls_name = _task_for(config, task)
    candidates = [(chosen, cls_name)]
    if chosen != "base" and not task:
        candidates.append(("base", _first(_base_class(config))))
    failures = []
    unrun = None  # a head that builds but whose forward fails on meta: kept should the base fail too
    for chosen, cls_name in candidates:
        if not cls_name or not hasattr(tf, cls_name):
            failures.append(f"model type {config.model_type!r}: no model class in transformers {tf.__version__}")
            continue
        cls = getattr(tf, cls_name)
        try:
            own, part = _own_config(cls, config)  # a class whose library is missing raises on its first attribute
            model = _instantiate(torch, cls, own, real)
            if type(model).forward is torch.nn.Module.forward:
                raise BuildError("it has no forward() (a pipeline of sub-models that generate() runs)")
            made, input_notes = inputs.make(torch, model, own, chosen, sizes, mode=mode, real=real)
            if part:
                input_notes = [
                    f"{cls_name} takes a {type(own).__name__}: built from the config's {part!r} "
                    f"part (the other parts of {type(config).__name__} are not traced)",
                    *input_notes,
                ]
        except inputs.NoInput as exc:
            failures.append(f"{cls_name}: {exc}")
            continue
        except BuildError as exc:
            failures.append(f"{cls_name}: {exc}")
            continue
        except Exception as exc:  # noqa: BLE001 - a config the class rejects, a missing library
            failures.append(f"{cls_name}: {_why(exc)}")
            continue
        built = (chosen, cls_name, model, made, input_notes)
        head_fails = None if real or chosen == "base" or len(candidates) == 1 else _head_fails(torch, model, made)
        if head_fails:  # a head this config does not run (its own code raises): the base model instead
            failures.append(f"{cls_name}: {head_fails}")
            unrun = unrun or built
            continue
        break
    else:
        if unrun is None:
            raise BuildError("cannot build " + "; nor ".join(dict.fromkeys(failures)))
        built = unrun
    chosen, cls_name, model, made, input_notes = built
    need = needed_dtype(model)
    fell_back = (
        []
        if chosen == candidates[0][0]
        else [
            f"the {candidates[0][0]} head cannot be built or run from this config ({failures[0]}); traced the base model"
        ]
    )
    return Built(
        model,
        made,
        name=name,
        source=source,
        config=_config_summary(config, sizes),
        dtype=need[0] if need else None,
        notes=[
            f"{cls_name} ({chosen}) built from {type(config).__name__} with random initialisation",
            "inputs made from the forward signature and config: " + ", ".join(made),
            *input_notes,
            *fell_back,
            *([need[1]] if need else []),
            *notes,
        ],
    )


# Errors of a model's own Python code (a head its config does not set up), as opposed to an op that
# has no meta kernel or a value read on meta, which a fake-tensor or real-valued trace gets past.
_CODE_ERRORS = (AttributeError, TypeError, KeyError, IndexError, ValueError)


def _head_fails(torch, model, made) -> str | None:
    """Why the task head's forward fails on meta with these inputs (its own code raising), else None."""
    from torch.utils._python_dispatch import TorchDispatchMode

    class OnesOnRead(TorchDispatchMode):  # a value read on meta (mask.all(), x.item()) answers 1
        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            if func is torch.ops.aten._local_scalar_dense.default:
                return True if args[0].dtype == torch.bool else 1
            return func(*args, **(kwargs or {}))

    try:
        with torch.no_grad(), OnesOnRead():
            model(**made)
    except _CODE_ERRORS as exc:
        if inputs.META_READ.search(str(exc)):
            return None
        return f"its forward raises {type(exc).__name__}: {_first_line(exc)}"
    except Exception:  # noqa: BLE001 - a kernel or value read on meta: the trace decides
        return None
    return None


def _base_class(config):
    from transformers.models.auto import modeling_auto

    return modeling_auto.MODEL_MAPPING_NAMES.get(config.model_type)


def _own_config(cls, config):
    """The config ``cls`` declares it takes (its ``config_class``): ``config`` itself, else the sub-config
    of that class a composite config holds (MusicgenForCausalLM takes the MusicgenConfig's ``decoder``),
    with that part's name (else None)."""
    want = getattr(cls, "config_class", None)
    if want is None or isinstance(config, want):
        return config, None
    from opcov.sources.tiny import sub_configs

    for prefix, cfg in sub_configs(config):
        if prefix and type(cfg) is want:
            return cfg, prefix.rstrip(".")
    return config, None


def _instantiate(torch, cls, config, real):
    """``cls`` from ``config`` with random weights (on meta unless ``real``): sdpa where it has it, else eager."""
    for attn in ("sdpa", "eager"):
        try:
            with contextlib.nullcontext() if real else torch.device("meta"):
                return cls._from_config(config, attn_implementation=attn)
        except (ValueError, ImportError):
            if attn == "eager":
                raise
    raise AssertionError("unreachable")


def _why(exc) -> str:
    """One line for a build failure; a missing optional library says which."""
    text = _first_line(exc)
    m = re.search(r"requires the (\w+) library but it was not found", text)
    library = m.group(1) if m else exc.name.split(".")[0] if isinstance(exc, ModuleNotFoundError) and exc.name else None
    if library:
        where = (
            " here (timm needs torchvision, which imports only beside the CUDA torch: scripts/make_vision_zoo.sh "
            "traces it there)"
            if library in ("timm", "torchvision")
            else ""
        )
        return f"needs the {library} library, which is not installed{where}"
    return f"{type(exc).__name__}: {text}"


GROUPED_MM_NOTE = (
    "bfloat16: the experts' grouped matmul (aten::_grouped_mm) refuses float32 under fake tensors "
    "(its meta kernel expects bfloat16)"
)


def needed_dtype(model):
    """(dtype, note) when the model needs a dtype other than float32 to trace, else None: bfloat16 for
    mixture-of-experts layers that run transformers' grouped_mm experts implementation."""
    for module in model.modules():
        cfg = getattr(module, "config", None)
        if (
            cfg is not None
            and getattr(cfg, "_experts_implementation", None) == "grouped_mm"
            and getattr(module, "_can_set_experts_implementation", lambda: False)()
        ):
            return "bfloat16", GROUPED_MM_NOTE
    return None


def _no_cache(config):
    for cfg in [config] + [
        getattr(config, k)
        for k in dir(config)
        if k.endswith("_config") and hasattr(getattr(config, k, None), "to_dict")
    ]:
        if hasattr(cfg, "use_cache"):
            cfg.use_cache = False


_SUMMARY_KEYS = (
    "num_hidden_layers",
    "hidden_size",
    "intermediate_size",
    "num_attention_heads",
    "num_key_value_heads",
    "vocab_size",
    "num_local_experts",
    "num_experts",
    "num_experts_per_tok",
    "image_size",
    "patch_size",
    "hidden_sizes",
    "depths",
    "encoder_layers",
    "decoder_layers",
    "d_model",
    "num_mel_bins",
)


def _config_summary(config, sizes: Sizes) -> dict:
    """The sizes that make this trace, small enough for the file header."""
    out = {"batch": sizes.batch, "seq": sizes.seq}
    for cfg_name, cfg in [("", config)] + [
        (k, getattr(config, k))
        for k in ("text_config", "vision_config")
        if hasattr(getattr(config, k, None), "to_dict")
    ]:
        d = cfg.to_dict()
        for key in _SUMMARY_KEYS:
            if d.get(key) is not None:
                out[f"{cfg_name}.{key}" if cfg_name else key] = d[key]
    if sizes.image:
        out["image"] = sizes.image
    if sizes.audio:
        out["audio"] = sizes.audio
    return out
