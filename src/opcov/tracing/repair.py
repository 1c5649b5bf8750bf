"""Repairs for default transformers configs that do not build or run, as ``--set`` overrides.

Why: about one architecture in twenty ships a default config that its own model class refuses
(``head_dim`` or ``num_key_value_heads`` left None, an attribute the model reads and the config
class lacks, rotary sections that do not fit the head dim). Real checkpoints set these fields, so
the model a user has does run; opcov fills them the way checkpoints do and says so. The rules read
the failure's message and the config's key names and values, never a per-model list; the
overrides go into the op set's command line (``--set``), so the trace reproduces, and each is
explained in a note.

``repairs(config, why)`` returns (overrides, notes) for failure message ``why``, or ({}, []) when
no rule applies (the failure is then reported as it is). ``asked_inputs(why)``: the forward inputs
a model's own check asks for ("You have to specify either pixel_values or image_embeds"), which
``--input`` makes beside those opcov picks, and ``none_inputs(exc)`` those its code used while
opcov left them None; ``image_size(why)`` and ``audio_length(why)``: the image side and audio length
a model's check names (``--image-size``, ``--audio-length``).
"""

from __future__ import annotations

import math
import re

from opcov.sources.tiny import sub_configs

# A value the model needs where the default config leaves it None: derived from other keys.
_DERIVED = {
    "head_dim": lambda c: _div(c, "hidden_size", "num_attention_heads"),
    "num_key_value_heads": lambda c: _int(c, "num_attention_heads"),
    "num_attention_heads": lambda c: _int(c, "num_heads"),
    "moe_intermediate_size": lambda c: _int(c, "intermediate_size"),
}
# Values that checkpoints set and some config classes lack (the model reads them): the usual ones.
_USUAL = {
    "dropout": 0.1,
    "dropout_rate": 0.1,
    "attention_dropout": 0.0,
    "hidden_dropout": 0.0,
    "rope_theta": 10000.0,
    "layer_norm_eps": 1e-5,
    "rms_norm_eps": 1e-6,
    "initializer_range": 0.02,
    "vocab_size": 512,
    "layerdrop": 0.0,
    "pad_token_id": 1,
    "sliding_window": 4096,
    # a mixture of experts' counts (a default config of dots1 leaves them None)
    "n_routed_experts": 8,
    "num_experts": 8,
    "num_experts_per_tok": 2,
    "top_k_experts": 2,
    "n_shared_experts": 1,
    "n_group": 1,
    "topk_group": 1,
}
# A None size: the message itself, or what torch.empty(None, a, b) says.
_NONE = re.compile(
    r"NoneType|must be tuple of ints, but found element of type NoneType|"
    r"empty\(\) takes 1 positional argument but \d+ were given"
)
_MISSING = re.compile(r"'(\w+)' object has no attribute '(\w+)'")
_HEADS = re.compile(r"embed_dim\W+must be divisible by num_heads \(got `?embed_dim`?: (\d+) and `?num_heads`?: (\d+)")
_AXIAL = re.compile(r"axial_pos_shape factors: \(([\d, ]+)\) multiply to sequence length.*?sequence_length: (\d+)")
_KEYERROR = re.compile(r"KeyError: '(\w+)'")
_NO_BACKBONE = re.compile(r"backbone is not set in the config")
_SPLIT = re.compile(r"split_with_sizes expects split_sizes to sum exactly to (\d+).*?split_sizes=\[([\d, ]+)\]")


# Inputs opcov can make (opcov.sources.inputs) that a model's own check may ask for by name.
ASKABLE = (
    "input_ids",
    "pixel_values",
    "pixel_values_videos",
    "input_values",
    "input_features",
    "visual_feats",
    "visual_pos",
    "encoder_hidden_states",
    "decoder_input_ids",
)
_ASKING = re.compile(
    r"specify|must be given|cannot be `?None|has to be not-None|is required|are required|"
    r"must be provided|should be provided|missing",
    re.I,
)


def asked_inputs(why: str) -> list:
    """The inputs (of ASKABLE) that failure message ``why``, a model's own check, asks for, in the order
    named: the caller makes the first it has not made yet ("either pixel_values or image_embeds" needs
    one; "at least two of input_ids, pixel_values_videos, or input_values" gets a second on the next try)."""
    if not _ASKING.search(why):
        return []
    named = [n for n in re.findall(r"\w+", why) if n in ASKABLE or n.endswith("token_type_ids")]
    return list(dict.fromkeys(named))


# A value the model's code uses as a tensor ("pixel_values.dtype") on the line that raised.
_USED = re.compile(
    r"\b([A-Za-z_]\w*)\s*\.\s*(?:dtype|device|shape|size|to|unsqueeze|dim|float)\b"
    r"|[(,]\s*([A-Za-z_]\w*)\s*(?=[,)])"
)  # or passed on as an argument: embed(input_ids)


def none_inputs(exc) -> list:
    """The inputs (of ASKABLE) that the model's code used as tensors, or passed on as arguments, while opcov
    left them None: read from the source lines of the traceback of ``exc`` and those frames' locals
    ("pixel_values.dtype" where the forward's optional pixel_values was not given, as tvp's;
    "embed_tokens(input_ids)", as instructblipvideo's). Innermost frame first."""
    import linecache

    frames, seen = [], 0
    while exc is not None and seen < 5:  # opcov's one-line error holds the model's own as its context
        tb = exc.__traceback__
        while tb is not None:
            frames.append((tb.tb_frame, tb.tb_lineno))
            tb = tb.tb_next
        exc, seen = exc.__context__, seen + 1
    out = []
    for frame, line in reversed(frames):
        text = linecache.getline(frame.f_code.co_filename, line)
        for name in (a or b for a, b in _USED.findall(text)):
            if name in ASKABLE and name in frame.f_locals and frame.f_locals[name] is None and name not in out:
                out.append(name)
    return out


# A model's own check that names the image size it was built for (timm's patch embedding).
_IMAGE = re.compile(r"Input (?:height|width|image size) \(\d+\*?\d*\) doesn't match model \((\d+)\*?\d*\)")
# Or that its image is too small for its patches at every scale it cuts (depth_pro).
_TOO_SMALL = re.compile(r"too small to be scaled with \w*ratios=\(([\d., ]+)\) when patch_size=(\d+)")


# A model's own check that its audio length be a multiple of a frame or window size.
_MULTIPLE = (
    re.compile(r"length (\d+) is not a multiple of (\d+)"),
    re.compile(r"to be a multiple of[^(]{0,40}\((\d+)\), but got (\d+)"),
)


def audio_length(why: str) -> int | None:
    """The audio length (samples or frames) that failure message ``why`` says the model wants: the length
    it got rounded up to the multiple it names ("`input_values` length 6400 is not a multiple of 1920"
    -> 7680), or None."""
    m = _MULTIPLE[0].search(why)
    if m:
        got, step = int(m.group(1)), int(m.group(2))
    else:
        m = _MULTIPLE[1].search(why)
        if not m:
            return None
        step, got = int(m.group(1)), int(m.group(2))
    return -(-got // step) * step if step else None


def image_size(why: str) -> int | None:
    """The image side that failure message ``why`` says the model wants ("Input height (224) doesn't
    match model (336)"), or None."""
    m = _IMAGE.search(why)
    if m:
        return int(m.group(1))
    m = _TOO_SMALL.search(why)  # the smallest scale must still hold a patch: patch / smallest ratio
    if m:
        ratios = [float(r) for r in m.group(1).split(",") if r.strip()]
        return math.ceil(int(m.group(2)) / min(ratios)) if ratios and min(ratios) > 0 else None
    return None


def _int(cfg, key):
    value = vars(cfg).get(key)
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else None


def _div(cfg, a, b):
    x, y = _int(cfg, a), _int(cfg, b)
    return x // y if x and y and x % y == 0 else None


def repairs(config, why: str, given: dict | None = None) -> tuple[dict, list]:
    """Overrides (dotted key -> value) that repair ``config`` for failure ``why``, and a note for each;
    ``given``: the overrides the failing run had (sizes a repair derives from are read through them)."""
    out, notes, given = {}, [], given or {}
    if _NONE.search(why):
        for prefix, cfg in sub_configs(config):
            for key, derive in _DERIVED.items():
                if key in vars(cfg) and vars(cfg)[key] is None and prefix + key not in given and derive(cfg):
                    out[prefix + key] = derive(cfg)
            for key, value in _USUAL.items():
                if key in vars(cfg) and vars(cfg)[key] is None and prefix + key not in given:
                    out[prefix + key] = value
        if out:
            notes.append(
                "the default config leaves " + ", ".join(sorted(out)) + " unset, which the model "
                "needs: set as checkpoints do (" + ", ".join(f"{k}={v}" for k, v in out.items()) + ")"
            )
    if _NONE.search(why) or "has no attribute 'get'" in why:
        for prefix, cfg in sub_configs(config):
            for key, value in vars(cfg).items():
                if key.endswith("_map") and value is None and "dict" in str(_annotation(cfg, key)):
                    # a token map checkpoints ship (chameleon's vocabulary_map); not a list of layer pairs
                    out[prefix + key] = {}
                    notes.append(
                        f"the default config leaves {prefix + key} unset (checkpoints ship the tokenizer's "
                        "map): an empty map, so no image tokens are mapped (the text path is traced)"
                    )
            layers = given.get(prefix + "num_hidden_layers") or _int(cfg, "num_hidden_layers")
            if "layer_types" in vars(cfg) and vars(cfg)["layer_types"] is None and layers:
                out[prefix + "layer_types"] = ["full_attention"] * layers
                notes.append(
                    f"the default config leaves {prefix}layer_types unset: every layer full_attention, as "
                    "transformers' configs default it (a checkpoint that mixes in other layer kinds, "
                    "such as convolutions, dispatches ops this trace lacks)"
                )
            for key in (k for k, v in vars(cfg).items() if k.endswith("_layer_types") and v is None and layers):
                example = _documented_example(type(cfg), key)
                if example:  # the config's own docs show a per-layer list: its pattern, its last kind repeated
                    kinds = [example[min(i, len(example) - 1)] for i in range(layers)]
                    out[prefix + key] = kinds
                    notes.append(
                        f"the default config leaves {prefix}{key} unset: {kinds}, after the example its own "
                        f"documentation gives ({example})"
                    )
    if "has no len()" in why:  # multimodal rotary sections the model splits its positions by, left unset
        out.update(_mrope_sections(config, given, notes))
    m = _KEYERROR.search(why)
    if m:
        for prefix, cfg in sub_configs(config):
            kinds, rope = vars(cfg).get("layer_types"), vars(cfg).get("rope_parameters")
            if (
                isinstance(kinds, (list, tuple))
                and m.group(1) in kinds
                and isinstance(rope, dict)
                and m.group(1) not in rope
            ):
                flat = {k: v for k, v in rope.items() if not isinstance(v, dict)} or {"rope_type": "default"}
                flat.setdefault("rope_type", "default")
                flat.setdefault("rope_theta", vars(cfg).get("rope_theta") or _USUAL["rope_theta"])
                out[prefix + "rope_parameters"] = {kind: dict(flat) for kind in dict.fromkeys(kinds)}
                notes.append(
                    f"the model reads rotary parameters per layer kind and the default config has none for "
                    f"{m.group(1)!r}: {flat} for each of its layer kinds"
                )
    if "'bool' object has no attribute" in why or _NONE.search(why):  # input_ids == None: a bool, not a mask
        queries = _int(config, "num_query_tokens")
        unset = [
            k
            for k in ("image_token_index", "image_token_id", "video_token_index", "video_token_id")
            if k in vars(config) and vars(config)[k] is None
        ]
        text = next((cfg for p, cfg in sub_configs(config) if p.startswith("text_config")), config)
        vocab = _int(text, "vocab_size")
        if queries and unset and vocab:
            out[unset[0]] = vocab - 1
            notes.append(
                f"the default config leaves {unset[0]} unset (checkpoints add an image token to the "
                f"vocabulary): {vocab - 1}, the last id, with {queries} such placeholders in the text, "
                f"one per query token"
            )
    if "default_language" in why:  # "Please call set_default_language()" (xmod's adapters are per language)
        for prefix, cfg in sub_configs(config):
            langs = vars(cfg).get("languages")
            if vars(cfg).get("default_language", "") is None and isinstance(langs, (list, tuple)) and langs:
                out[prefix + "default_language"] = langs[0]
                notes.append(f"the default config names no default language: {langs[0]}, the first of its languages")
    m = _MISSING.search(why)
    if m and m.group(1).endswith("Config"):
        cls, key = m.groups()
        for prefix, cfg in sub_configs(config):
            if type(cfg).__name__ != cls or key in vars(cfg):
                continue
            value = (_DERIVED[key](cfg) if key in _DERIVED else None) or _USUAL.get(key)
            if value is not None:
                out[prefix + key] = value
                notes.append(f"{cls} has no {key!r}, which the model reads: set to {value} as checkpoints do")
    if "config" in why:  # a config key the model's own check names ("`sliding_window` ... in the config")
        for key in (k for k in re.findall(r"`(\w+)`", why) if k in _USUAL):
            subs = list(sub_configs(config))  # the sub-configs that hold the key unset, else the config
            unset = [p for p, cfg in subs if key in vars(cfg) and vars(cfg)[key] is None] or (
                [""] if vars(config).get(key) is None else []
            )
            for prefix in unset:
                out[prefix + key] = _USUAL[key]
            if unset:
                notes.append(
                    f"the model asks for {key}, which the default config leaves unset: "
                    f"{key}={_USUAL[key]} as checkpoints set it"
                )
    if _NO_BACKBONE.search(why) and "backbone" in vars(config) and not vars(config)["backbone"]:
        out["backbone"] = "resnet18"
        notes.append("the default config names no timm backbone: resnet18, a small timm model, chosen by opcov")
    m = _SPLIT.search(why)
    if m:
        out.update(_rotary_sections(config, int(m.group(1)), [int(x) for x in m.group(2).split(",")], notes))
    m = _HEADS.search(why)
    if m:
        out.update(_heads(config, int(m.group(1)), int(m.group(2)), notes))
    m = _AXIAL.search(why)
    if m:
        length, k = int(m.group(2)), len(m.group(1).split(","))
        shape = _factors(length, k)
        for prefix, cfg in sub_configs(config):
            if "axial_pos_shape" in vars(cfg) and shape:
                out[prefix + "axial_pos_shape"] = shape
                notes.append(
                    f"axial position factors {shape}, whose product is the traced sequence length "
                    f"{length} (the default config's are for longer sequences)"
                )
                break
    return out, notes


def _annotation(cfg, key: str):
    """The type a config class declares for ``key`` (its dataclass annotation, maybe a string), or None."""
    for klass in type(cfg).__mro__:
        if key in getattr(klass, "__annotations__", {}):
            return klass.__annotations__[key]
    return None


def _documented_example(cls, key: str) -> list | None:
    """The example list of strings that config class ``cls``'s docstring gives for ``key``
    (``mlp_layer_types``: "e.g. `["dense", "sparse", "sparse", ...]`"), or None."""
    doc = cls.__doc__ or ""
    m = re.search(rf"^\s*{key} \(.*?\n(.*?)(?=^\s*\w+ \(|\Z)", doc, re.S | re.M)
    lists = re.findall(r"\[((?:\s*[\"'][\w-]+[\"']\s*,?)+)", m.group(1)) if m else []
    return re.findall(r"[\"']([\w-]+)[\"']", lists[0]) if lists else None


def _mrope_sections(config, given: dict, notes: list) -> dict:
    """A text config whose class documents ``mrope_section`` and whose rotary parameters leave it out:
    three sections over half the head dim in the proportions of Qwen2-VL's checkpoints (16, 24, 24 of 64)."""
    import inspect

    for prefix, cfg in sub_configs(config):
        rope = given.get(prefix + "rope_parameters", vars(cfg).get("rope_parameters"))
        if not isinstance(rope, dict) or rope.get("mrope_section") is not None:
            continue
        try:
            documented = "mrope_section" in inspect.getsource(type(cfg))
        except (OSError, TypeError):
            documented = False
        value = lambda key, prefix=prefix, cfg=cfg: given.get(prefix + key, vars(cfg).get(key))  # noqa: E731
        hidden, heads = value("hidden_size"), value("num_attention_heads")
        head = value("head_dim") or (
            hidden // heads
            if isinstance(hidden, int) and isinstance(heads, int) and heads and hidden % heads == 0
            else None
        )
        if documented and isinstance(head, int) and head % 2 == 0:
            half = head // 2
            side = 3 * half // 8
            sections = [half - 2 * side, side, side]
            notes.append(
                f"the default config's rotary parameters have no mrope_section, which the model splits "
                f"its positions by: {sections} (half the head dim {head}, in Qwen2-VL's proportions)"
            )
            return {prefix + "rope_parameters": {**rope, "mrope_section": sections}}
    return {}


def _factors(n: int, k: int) -> list | None:
    """``k`` factors of ``n``, as even as can be (16, 2 -> [4, 4]), or None."""
    if k == 1:
        return [n]
    for d in sorted((d for d in range(1, n + 1) if n % d == 0), key=lambda d: abs(d - round(n ** (1 / k)))):
        rest = _factors(n // d, k - 1)
        if rest:
            return [d] + rest
    return None


def _heads(config, width: int, heads: int, notes: list) -> dict:
    """A sub-config whose width does not divide into its heads: the nearest head count that divides
    it (the larger on a tie), as the checkpoints of such a default set it."""
    for prefix, cfg in sub_configs(config):
        for key in ("num_attention_heads", "num_heads"):
            if _int(cfg, key) == heads and width in (_int(cfg, "hidden_size"), _int(cfg, "embed_dim")):
                fit = min((d for d in range(1, width + 1) if width % d == 0), key=lambda d: (abs(d - heads), -d))
                notes.append(
                    f"the default config's width {width} does not divide into its {heads} heads: "
                    f"{fit} heads, the nearest count that divides it"
                )
                return {prefix + key: fit}
    return {}


def _rotary_sections(config, rotary: int, sections: list, notes: list) -> dict:
    """Multimodal rotary sections (``mrope_section``) that do not sum to the rotary frequencies the
    head dim gives: a partial rotary factor that makes them fit (as real checkpoints set it), else
    the sections scaled to the rotary size."""
    total = sum(sections)
    for prefix, cfg in sub_configs(config):
        rope = vars(cfg).get("rope_parameters")
        if not isinstance(rope, dict):
            continue
        factor = float(rope.get("partial_rotary_factor", 1.0))
        hidden, heads = _int(cfg, "hidden_size"), _int(cfg, "num_attention_heads")
        fits = 2 * total / factor
        if (
            vars(cfg).get("head_dim") is None and hidden and heads and hidden % heads and fits == int(fits)
        ):  # no whole head dim from hidden_size: the one the sections fit
            notes.append(
                f"the default config leaves head_dim unset and hidden_size {hidden} does not divide into "
                f"{heads} heads: head_dim={int(fits)}, which its rotary sections {sections} fit"
            )
            return {prefix + "head_dim": int(fits)}
        if total < rotary:
            new = round(factor * total / rotary, 6)
            notes.append(
                f"the rotary sections {sections} fit {total} of the {rotary} rotary frequencies this "
                f"default config's head dim gives: partial_rotary_factor={new} as checkpoints set it"
            )
            return {prefix + "rope_parameters": {**rope, "partial_rotary_factor": new}}
        if rotary and all(s * rotary % total == 0 for s in sections):
            scaled = [s * rotary // total for s in sections]
            notes.append(
                f"the rotary sections {sections} exceed the {rotary} rotary frequencies of these "
                f"narrow widths: scaled to {scaled}"
            )
            return {prefix + "rope_parameters": {**rope, "mrope_section": scaled}}
    return {}
