"""Example inputs for a transformers model, read from the model itself: no per-model list.

Processors would say what a model eats, but they need hub files, which are not reachable; so the
inputs are made from what the model class and its config say:

* which inputs: the forward signature's required parameters, the class's ``main_input_name``
  (``input_ids``, ``pixel_values``, ``input_values``, ``input_features``...) and what the task head
  needs for a loss (``labels``; ``decoder_input_ids`` for encoder-decoders at inference);
* their shapes: from the config that holds the modality (``vision_config``, ``audio_config``,
  ``encoder_config`` or the config itself): ``num_channels`` and ``image_size`` for images,
  ``num_mel_bins`` / ``feature_size`` / ``input_feat_per_channel`` for audio features (whose frame
  count is ``2 * max_source_positions`` where the encoder has a fixed length, as Whisper's),
  the product of the convolution strides for raw audio, ``num_frames`` for video, ``vocab_size``
  and ``num_labels`` for token ids and labels;
* where the layout is ambiguous, each candidate is run once on the meta device and the first that
  fits is kept: audio features channels-first or frames-first; an image or an image pair; patches as
  rows or as small images; a NaViT-packed strip of every image's patches (MiniCPM-V); token ids per
  codebook (``num_codebooks``: flattened into the batch, as MusicGen's, or a dim of their own); a
  codec's ``hidden_states`` as raw audio or as latents.

Token ids are drawn from ``[3, min(vocab, 100))`` (real tensors), clear of the usual special ids.
"""

from __future__ import annotations

import contextlib
import inspect
import itertools
import math
import re

# Config keys naming an audio frame's feature count, most specific first.
_FEATURE_KEYS = (
    "num_mel_bins",
    "input_feat_size",
    "feature_size",
    "n_mels",
    "num_mel_filters",
    "feature_projection_input_dim",
    "input_dim",
    "mel_bins",
)
# Config keys listing the strides of a raw-audio encoder (their product: samples per frame).
_STRIDE_KEYS = ("conv_stride", "downsampling_ratios", "upsampling_ratios", "encoder_rates", "strides", "ratios")
# Sub-configs that hold a modality's settings, searched in order after the config itself.
_AUDIO = (
    "audio_config",
    "encoder_config",
    "speech_config",
    "audio_encoder_config",
    "codec_config",
    "semantic_model_config",
    "asr_config",
)
_VISION = ("vision_config", "backbone_config", "image_config", "encoder_config", "visual_config")
_FRAME_KEYS = ("num_frames", "frames_per_clip", "num_video_frames")
_TEXT = (
    "text_config",
    "decoder_config",
    "decoder",
    "language_config",
    "llm_config",
    "model_config",
)  # a text-to-speech model's beside its vocoder (fastspeech2_conformer_with_hifigan)
TOKEN_LOW, TOKEN_HIGH = 3, 100
FRAMES = 64  # audio feature frames where the encoder takes any length
META_READ = re.compile(
    r"cannot be called on meta tensors|on meta tensors? is not|data-dependent|"
    r"cannot \w+ a meta tensor",
    re.I,
)
_SHAPE_ERROR = re.compile(
    r"shape|size|dimension|reduction dim|expected|mat1|mat2|match|length|channels|out of range|"
    r"input_features|not enough values|invalid for input|mono",
    re.I,
)


class NoInput(Exception):
    """The model needs an input opcov cannot make from its config (the message names it)."""


def sub(config, names):
    """The first of ``names`` that is a sub-config of ``config``, else ``config``."""
    for name in names:
        value = getattr(config, name, None)
        if hasattr(value, "to_dict"):
            return value
    return config


# An image's channel count, by the names vision configs give it (one order for every image shape:
# no transformers 5.24 config sets two of them to different values)
_IMAGE_CHANNELS = ("num_channels", "in_channels", "in_chans")


def find(config, keys, subs=(), default=None):
    """The first int-valued key of ``keys`` in the config or, after it, its sub-configs ``subs``."""
    for cfg in [config] + [getattr(config, s) for s in subs if hasattr(getattr(config, s, None), "to_dict")]:
        for key in keys:
            value = vars(cfg).get(key)
            if isinstance(value, int) and not isinstance(value, bool) and value > 0:
                return value
    return default


def image_size(config) -> tuple[int, int]:
    """The config's input image (height, width): an int, a [height, width] list or a dict in configs; else 224."""
    size = vars(config).get("image_size") or vars(config).get("input_size") or 224
    if isinstance(size, dict):
        size = size.get("height") or size.get("shortest_edge") or 224
    if isinstance(size, (list, tuple)):
        return int(size[-2 if len(size) > 1 else -1]), int(size[-1])
    return int(size), int(size)


def signature(model) -> tuple[dict, bool]:
    """The forward's parameters (name -> inspect.Parameter) and whether it takes **kwargs."""
    params = dict(inspect.signature(model.forward).parameters)
    var_kw = any(p.kind is p.VAR_KEYWORD for p in params.values())
    return {n: p for n, p in params.items() if p.kind not in (p.VAR_KEYWORD, p.VAR_POSITIONAL)}, var_kw


def wanted(model, task: str, mode: str) -> list[str]:
    """The inputs to make: the main input(s), the required parameters, and what the task's loss needs."""
    params, _ = signature(model)
    main = getattr(model, "main_input_name", "input_ids")
    names = list(main) if isinstance(main, (list, tuple)) else [main]
    names += [n for n, p in params.items() if p.default is inspect.Parameter.empty]
    seq2seq = task in ("seq2seq_lm", "speech_seq2seq")  # a head that shifts its labels into decoder inputs
    if (mode == "inference" and seq2seq) or (
        not seq2seq and getattr(getattr(model, "config", None), "is_encoder_decoder", False)
    ):
        names.append("decoder_input_ids")  # a base encoder-decoder, a transducer's prediction network (parakeet)
    if task == "contrastive":  # both towers
        names += ["input_ids", "pixel_values"]
    if mode == "training" and task != "base":
        names.append("return_loss" if task == "contrastive" else "labels")
    names += [f"{n}_mask" for n in names if n.startswith("input_")] + ["bbox"]  # the main input's mask; layout boxes
    out = []
    for n in names:
        if n in params and n not in out:
            out.append(n)
    return out


class Maker:
    """Makes one input tensor by name, on the meta device or as small real CPU tensors."""

    def __init__(self, torch, config, task, sizes, real: bool):
        self.torch, self.config, self.task, self.sizes, self.real = torch, config, task, sizes, real
        self.dev = contextlib.nullcontext() if real else torch.device("meta")
        self.b, self.s = sizes.batch, sizes.seq
        self.patched = False  # the forward takes a patch grid (grid_thw): pixels come as flattened patches
        self.audio_states = False  # the main input is raw audio (input_values), taken as hidden_states
        self.naflex = False  # the forward takes spatial_shapes: pixels come as (batch, patches, patch values)
        self.video_like = find(config, _FRAME_KEYS, _VISION) is not None  # images may come as clips

    # -- kinds

    def ids(self, *shape, low=TOKEN_LOW, high=None):
        """Integer ids in [low, min(high, TOKEN_HIGH)); high defaults to the text vocabulary."""
        torch = self.torch
        high = high or find(self.config, ("vocab_size",), _TEXT, TOKEN_HIGH)
        with self.dev:
            if self.real:
                return torch.randint(min(low, high - 1), max(low + 1, min(high, TOKEN_HIGH)), shape)
            return torch.zeros(*shape, dtype=torch.long)

    def floats(self, *shape):
        with self.dev:
            return self.torch.randn(*shape)

    def ones(self, *shape, dtype=None):
        with self.dev:
            return self.torch.ones(*shape, dtype=dtype or self.torch.long)

    # -- by name

    def make(self, name: str, made: dict):
        """The input ``name``: one value, or a list of candidate values (ambiguous layouts)."""
        b, s, cfg = self.b, self.s, self.config
        if name == "return_loss":
            return True
        if name == "labels":
            return self.labels(made)
        if name.endswith("token_type_ids"):  # one segment (or modality) for every token
            with self.dev:
                return self.torch.zeros(b, s, dtype=self.torch.long)
        if name == "input_ids" and (placeholders := self.query_placeholders()):  # BLIP-2: one per query token
            token, count = placeholders
            with self.dev:
                return self.torch.cat([self.torch.full((b, count), token, dtype=self.torch.long), self.ids(b, s)], 1)
        if name.endswith("input_ids") or name in ("input_ids", "inputs"):
            books = find(cfg, ("num_codebooks",), _TEXT)
            if books:  # an audio-token decoder: a row of ids per codebook, flattened or as a dim of its own
                return [
                    self.ids(b, s),
                    self.ids(b * books, s),
                    self.ids(b, books, s),
                    self.ids(b, s, books),
                    self.ids(b, s, books + 1),
                ]  # the text stream beside the codebooks (kyutai)
            return self.ids(b, s)
        if name.endswith("grid_thw"):
            return self.grid()
        if (name == "hidden_states" or name.startswith("pixel_values")) and self.patched:
            return self.patches()
        if name == "hidden_states" and self.audio_states:  # a codec's raw audio or latents, channels first
            hidden = find(cfg, ("hidden_size", "latent_dim", "vae_dim"), default=64)
            return [
                self.floats(b, find(cfg, ("channels", "audio_channels"), default=1), self.samples()),
                self.floats(b, hidden, s),
                self.floats(b, s, hidden),
            ]
        if name == "pixel_values" and self.naflex:
            return self.patch_rows()
        if name in ("spatial_shapes", "target_sizes"):  # each image's patch grid (rows, columns)
            rows, cols, _ = self.patch_grid()
            with self.dev:
                return self.torch.tensor([[rows, cols]] * b)
        if name == "pixel_attention_mask" and self.naflex:
            rows, cols, _ = self.patch_grid()
            return self.ones(b, rows * cols)
        if name == "merge_sizes":  # one spatial merge size per image of the grid
            with self.dev:
                return self.torch.tensor([find(cfg, ("spatial_merge_size", "merge_size"), _VISION, 2)] * b)
        if name == "task_inputs":  # a task prompt's token ids (oneformer: "the task is semantic")
            return self.ids(
                b,
                find(cfg, ("task_seq_len",), default=s),
                high=find(cfg, ("text_encoder_vocab_size", "vocab_size"), _TEXT, TOKEN_HIGH),
            )
        if name in ("pixel_values", "prompt_pixel_values", "pixel_values_images"):
            # an image pair (keypoint matchers take (batch, 2, channels, height, width)) where one image does not fit
            return [self.pixels(), self.video()] if self.video_like else [self.pixels(), self.pair()]
        if name == "pixel_values_videos":
            return self.video()
        if name == "input_values":
            n = self.samples()
            feats, frames, _ = self.features_shape()
            spectrogram = [self.floats(b, frames, feats)] if find(cfg, ("max_length",), _AUDIO) else []
            return [self.floats(b, n), self.floats(b, 1, n)] + spectrogram
        if name in ("input_features", "audio_mel"):
            return self.features()
        if name == "past_values":
            return self.series()
        if name.startswith("past_") and made.get("past_values") is not None:  # time features, padding
            ref = made["past_values"]
            width = find(cfg, ("num_time_features",), default=0) if name.endswith("time_features") else None
            shape = tuple(ref.shape[:2]) + ((width,) if width is not None else tuple(ref.shape[2:]))
            with self.dev:
                return self.torch.zeros(*shape) if name.endswith("padding") else self.torch.ones(*shape)
        if name == "bbox":  # layout models: one box (x0, y0, x1, y1) per token
            with self.dev:
                return self.torch.tensor([0, 0, 1, 1]).repeat(b, s, 1)
        if name == "freq":  # a forecaster's frequency class per series
            return self.ids(b, 1, low=0, high=find(cfg, ("freq_size",), default=3))
        if name.endswith(("attention_mask", "_mask", "_masks")):
            return self.mask(name, made)
        if name == "visual_feats":  # region features of a detector (lxmert)
            return self.floats(b, s, find(cfg, ("visual_feat_dim",), default=2048))
        if name == "visual_pos":  # their boxes
            return self.floats(b, s, find(cfg, ("visual_pos_dim",), default=4))
        if name == "encoder_hidden_states":  # what a cross-attending model attends to
            return self.floats(b, s, find(cfg, ("encoder_hidden_size", "encoder_width", "hidden_size"), _TEXT, 64))
        if name.endswith("_embeds") or name.endswith("hidden_states") or name in ("latents", "states"):
            hidden = find(cfg, ("hidden_size", "d_model", "latent_dim", "n_embd", "embed_dim"), _TEXT, 64)
            if name == "latents":  # a codec's latents may be channels-first
                return [self.floats(b, s, hidden), self.floats(b, hidden, s)]
            return self.floats(b, s, hidden)
        raise NoInput(
            f"the forward needs {name!r}, and opcov cannot make it from the config "
            f"(pass a factory package.module:function that returns (model, inputs))"
        )

    def video(self):
        vision = sub(self.config, _VISION)
        frames = find(self.config, _FRAME_KEYS, _VISION, 8)
        return self.floats(self.b, frames, find(vision, _IMAGE_CHANNELS, default=3), *self._side(vision))

    def query_placeholders(self) -> tuple[int, int] | None:
        """(image token id, count) where the config has a query-token count (BLIP-2's ``num_query_tokens``)
        and sets its image placeholder token: the text must hold that many placeholders."""
        count = find(self.config, ("num_query_tokens",))
        keys = _PLACEHOLDERS + ("video_token_index", "video_token_id")  # InstructBLIP-Video: one per query token
        token = next((v for k in keys if isinstance(v := vars(self.config).get(k), int)), None)
        return (token, count) if count and token is not None else None

    def pair(self):
        """Two images per sample: (batch, 2, channels, height, width)."""
        vision = sub(self.config, _VISION)
        return self.floats(self.b, 2, find(vision, _IMAGE_CHANNELS, default=3), *self._side(vision))

    def grid(self):
        """(temporal, height, width) patch counts per image: one frame of 2x2 merge windows."""
        merge = find(self.config, ("spatial_merge_size", "merge_size"), _VISION, 2)
        with self.dev:
            return self.torch.tensor([[1, 2 * merge, 2 * merge]] * self.b)

    def patches(self):
        """Patches for a tower that takes a patch grid, one per patch of ``grid()``: flattened rows, and
        where a patch has one frame, (patches, channels, patch, patch) too, for a conv embedding (kimi_k25)."""
        vision = sub(self.config, _VISION)
        merge = find(self.config, ("spatial_merge_size", "merge_size"), _VISION, 2)
        channels = find(vision, _IMAGE_CHANNELS, default=3)
        frames, side = (
            find(vision, ("temporal_patch_size", "patch_temporal"), default=1),
            find(vision, ("patch_size",), default=14),
        )
        flat = self.floats(self.b * 4 * merge * merge, channels * frames * side * side)
        return [flat, flat.reshape(flat.shape[0], channels, side, side)] if frames == 1 else flat

    def patch_rows(self):
        """Pixels for a tower that takes each image's patch grid (``spatial_shapes``, ``target_sizes``): a
        row per patch; or the patches side by side in a strip, per image or every image's packed into one
        (NaViT packing, MiniCPM-V: the grids say where each image's patches are)."""
        rows, cols, dim = self.patch_grid()
        vision = sub(self.config, _VISION)
        patch, channels = find(vision, ("patch_size",), default=16), find(vision, _IMAGE_CHANNELS, default=3)
        b, n = self.b, rows * cols
        return [
            self.floats(b, n, dim),
            self.floats(b, channels, patch, n * patch),
            self.floats(1, channels, patch, b * n * patch),
        ]

    def patch_grid(self) -> tuple[int, int, int]:
        """(rows, columns, values per patch) of an image cut into the vision config's patches."""
        vision = sub(self.config, _VISION)
        patch = find(vision, ("patch_size",), default=16)
        height, width = self._side(vision)
        count = find(vision, ("num_patches",))
        rows = cols = int(math.isqrt(count)) if count else None
        rows, cols = rows or max(1, height // patch), cols or max(1, width // patch)
        return rows, cols, find(vision, _IMAGE_CHANNELS, default=3) * patch * patch

    def _side(self, vision) -> tuple[int, int]:
        return (self.sizes.image, self.sizes.image) if self.sizes.image else image_size(vision)

    def pixels(self):
        vision = sub(self.config, _VISION)
        return self.floats(self.b, find(vision, _IMAGE_CHANNELS, default=3), *self._side(vision))

    def samples(self) -> int:
        """Raw-audio length: the encoder's samples per frame times the sequence length (or as asked)."""
        if self.sizes.audio:
            return self.sizes.audio
        from opcov.sources.tiny import sub_configs

        lengths = []  # per (sub-)config; the longest, so that the most downsampling encoder gets frames
        for _, cfg in sub_configs(self.config):
            for key in _STRIDE_KEYS:
                value = vars(cfg).get(key)
                if isinstance(value, (list, tuple)) and value and all(isinstance(v, int) for v in value):
                    kernel = vars(cfg).get("conv_kernel")
                    lengths.append(
                        math.prod(value) * self.s + (sum(kernel) if isinstance(kernel, (list, tuple)) else 0)
                    )
                    break
            else:
                hop = vars(cfg).get("hop_length")
                if isinstance(hop, int) and hop > 0:
                    lengths.append(hop * self.s)
        return max(lengths) if lengths and max(lengths) > self.s else 16 * 400

    def series(self):
        """Past values of a time series: [(batch, length), (batch, length, channels)] candidates, the
        length being the context plus the largest lag."""
        cfg = self.config
        lags = vars(cfg).get("lags_sequence")
        length = find(cfg, ("context_length", "prediction_length"), default=self.s) + (
            max(lags) if isinstance(lags, (list, tuple)) and lags else 0
        )
        channels = find(cfg, ("input_size", "num_input_channels"), default=1)
        return [self.floats(self.b, length), self.floats(self.b, length, channels)]

    def features_shape(self) -> tuple[int, int, bool]:
        """(features per frame, frames, whether the encoder fixes the frame count) of audio features:
        Whisper-like encoders take 2 x max_source_positions frames, a spectrogram model max_length."""
        cfg = self.config
        feats = find(cfg, _FEATURE_KEYS, _AUDIO)
        per_channel = find(cfg, ("input_feat_per_channel",), _AUDIO)
        if per_channel:
            feats = per_channel * find(cfg, ("input_channels",), _AUDIO, 1)
        positions = find(cfg, ("max_source_positions",), _AUDIO)
        if positions and find(cfg, ("num_mel_bins",), _AUDIO) and not per_channel:
            return feats, 2 * positions, True
        return feats or 80, self.sizes.audio or find(cfg, ("max_length",), _AUDIO, FRAMES), False

    def features(self):
        """Audio features: channels-first (batch, features, frames) where the encoder fixes the frame
        count, else [channels-first, frames-first, a one-channel spectrogram image] candidates."""
        feats, frames, fixed = self.features_shape()
        first = self.floats(self.b, feats, frames)
        return first if fixed else [first, self.floats(self.b, frames, feats), self.floats(self.b, 1, frames, feats)]

    def mask(self, name: str, made: dict):
        """A mask of ones shaped like the input it masks (the one named by its prefix, else the main one)."""
        base = name.rsplit("_mask", 1)[0].rsplit("_attention", 1)[0]
        ref = next(
            (made[k] for k in (base, f"{base}_input_ids", "input_ids") if made.get(k) is not None),
            next((v for v in made.values() if hasattr(v, "shape")), None),
        )
        if ref is None:
            return self.ones(self.b, self.s)
        shape = tuple(ref.shape[:2]) if ref.dim() >= 2 else tuple(ref.shape)
        if name in ("input_features_mask", "audio_mel_mask") and ref.dim() == 3:
            shape = (ref.shape[0], ref.shape[-1] if ref.shape[1] < ref.shape[2] else ref.shape[1])
        return self.ones(*shape, dtype=self.torch.bool if "audio_mel" in name else None)

    def labels(self, made: dict):
        task = self.task
        if task in ("causal_lm", "masked_lm"):
            books = find(self.config, ("num_codebooks",), _TEXT)
            if books:  # an audio-token decoder's labels: per codebook, in one of the layouts its ids take
                b, s = self.b, self.s
                return [self.ids(b, s, books), self.ids(b * books, s), self.ids(b, books, s), self.ids(b, s)]
            return made.get("input_ids") if made.get("input_ids") is not None else self.ids(self.b, self.s)
        if task in ("seq2seq_lm", "speech_seq2seq"):
            return self.ids(self.b, self.s)
        return self.ids(self.b, low=0, high=max(1, int(getattr(self.config, "num_labels", 2) or 2)))


# A second modality's input, and the sub-configs that say a model has that modality.
_MODALITIES = (
    ("pixel_values", ("vision_config", "visual_config", "image_config")),
    ("input_features", ("audio_config", "speech_config", "audio_encoder_config")),
    ("input_ids", ("text_config", "language_config", "llm_config")),
)
_MAIN = ("input_ids", "pixel_values", "input_values", "input_features")
# Config keys of an image placeholder token: such a model takes images only with as many placeholders in
# its text as its vision tower makes features (a check on the data), so it is traced on text alone.
_PLACEHOLDERS = ("image_token_id", "image_token_index", "image_token", "img_token_id")


def other_modality(model, config, names: list[str]) -> list[str]:
    """Inputs of another modality the forward takes and the config describes, beside the wanted ones:
    images for a text model with a vision config, audio with an audio config, text with a text config."""
    params, _ = signature(model)
    if not any(n in _MAIN for n in names):
        return []
    tokens = any(isinstance(vars(config).get(k), int) for k in _PLACEHOLDERS)
    return [
        name
        for name, subs in _MODALITIES
        if name in params
        and name not in names
        and any(hasattr(getattr(config, k, None), "to_dict") for k in subs)
        and not (name == "pixel_values" and tokens)
    ]


def make(torch, model, config, task: str, sizes, *, mode: str, real: bool) -> tuple[dict, list[str]]:
    """Keyword inputs for ``model.forward`` (see the module docstring) and notes on them; NoInput when
    one cannot be made."""
    maker = Maker(torch, config, task, sizes, real)
    names = wanted(model, task, mode)
    params, _ = signature(model)
    for name in sizes.inputs:  # asked for (--input); a decoder's input_ids are its decoder_input_ids
        name = name if name in params else f"decoder_{name}"
        if name in params and name not in names:
            names.append(name)
    extra = other_modality(model, config, names)
    maker.patched = any(n.endswith("grid_thw") for n in names)
    maker.naflex = "spatial_shapes" in params or "target_sizes" in params
    if maker.naflex and "pixel_values" in names + extra:  # patches need their grid and mask beside them
        names += [
            n for n in ("spatial_shapes", "target_sizes", "pixel_attention_mask") if n in params and n not in names
        ]
    main = getattr(model, "main_input_name", None)
    maker.audio_states = main == "input_values" and main not in params and "hidden_states" in params
    maker.video_like = maker.video_like or "video" in type(model).__name__.lower()
    made: dict = {}
    choices: dict = {}
    for name in names + extra:
        value = maker.make(name, made)
        if isinstance(value, list):
            choices[name] = value
            value = value[0]
        made[name] = value
    if mode == "inference":
        made.pop("labels", None)
        choices.pop("labels", None)
    notes = []
    combos = itertools.product(*[choices.pop(n, [made[n]]) for n in extra])
    fitting = next((combo for combo in combos if _runs(torch, model, {**made, **dict(zip(extra, combo))})), None)
    if fitting is not None:
        made.update(zip(extra, fitting))
    elif extra:
        for name in extra:
            made.pop(name)
        notes.append(
            f"without {' and '.join(extra)}: the model does not run with them as opcov makes them; "
            "only the other modality was traced"
        )
    for name, candidates in choices.items():  # labels last (wanted() puts them last), against the inputs chosen
        fitted = {k: v for k, v in made.items() if k != "labels" or name == "labels"}
        made[name] = _first_fitting(torch, model, fitted, name, candidates, real)
    return made, notes


def _runs(torch, model, made: dict) -> bool:
    """Whether the model's forward runs on these inputs (on meta, or for real); reading a value on
    meta counts as running: the inputs got that far."""
    try:
        with torch.no_grad():
            model(**made)
        return True
    except Exception as exc:  # noqa: BLE001
        return bool(META_READ.search(str(exc)))


def _first_fitting(torch, model, made: dict, name: str, candidates: list, real: bool):
    """The first candidate for input ``name`` with which the model's forward runs (on meta, or for real)."""
    for value in candidates:
        try:
            with torch.no_grad():
                model(**{**made, name: value})
            return value
        except Exception as exc:  # noqa: BLE001 - a candidate that does not fit
            if META_READ.search(str(exc)) or not _SHAPE_ERROR.search(f"{type(exc).__name__} {exc}"):
                return value  # it got past the input layers: a later failure is not the layout's
    return candidates[0]
