"""Tiny configurations derived from a transformers config, as ``--set`` overrides.

Why: under fake tensors a trace costs per op *call*, not per FLOP, so what makes a trace slow is the
number of layers (a 61-layer default config records 30 times the calls of a 2-layer one), and what
makes a real-valued trace (``--real``) costly is the width. Every op a deep model dispatches is
dispatched by two of its layers, provided the two cover every kind of layer it has; so the
overrides keep every distinct layer kind and drop the repeats:

* layer counts (``num_hidden_layers``, ``encoder_layers``, ``depth``...) become the number of layer
  kinds, at least 2; lists with one entry per layer (``layer_types``, ``mlp_layer_types``...) keep
  the first layer of each kind, and lists of layer indices (``mlp_only_layers``...) are renumbered;
  ``first_k_dense_replace``-style counts keep one dense layer, and periods (``attn_layer_period``)
  shrink to 2 so both kinds of layer appear;
* per-stage block counts (``depths`` of a CNN or Swin) become 1 per stage;
* in mixture-of-experts configs, an unset ``num_experts_per_tok`` becomes 2 and intermediate sizes
  round up to a multiple of 16 (the grouped matmul of the experts needs 16-byte aligned rows);
* a timm ResNet backbone (timm needs torchvision) becomes transformers' ResNet of the same widths;
* a forecaster's ``prediction_length`` and ``context_length``, which default configs leave unset and
  models refuse, are 8;
* with ``width=True`` (for real-valued traces): hidden sizes 64, heads 4 (key-value heads 2 or 4),
  intermediate sizes 128, vocabularies 512 (or up to the largest special token id), experts 4 (2 per
  token); head dims stay, since rotary sections and the like are sized by them; sizes equal to a
  hidden size (a projection, a Q-Former's encoder width) follow it, and a composite's token ids
  stay inside its text vocabulary. ``width="heads"``:
  the same, but hidden sizes are the 4 heads times the config's own head dim, for models whose code
  derives a size from hidden / heads and another from the head dim (codegen's fused qkv split,
  helium's projections), which a 64-wide hidden size with a larger head dim breaks.

The result is a dict of dotted keys (``text_config.num_hidden_layers``) that ``opcov trace --set``
reads back, so the op set's command line reproduces the trace. No per-model lists: the rules read
key names and values only.
"""

from __future__ import annotations

import re

# Layer counts: an int config key that counts repeated layers or blocks.
_COUNT = re.compile(
    r"^(?:num_|n_)?(?:\w+_)?(?:hidden_)?(?:layers|layer|depth|blocks)$|"
    r"^(?:\w+_)?num_(?:hidden_)?layers$|^num_(?:\w+_)?layers$"
)
# Keys that look like counts but are not: indices, sizes, periods and counts of other things.
_NOT_COUNT = (
    "index",
    "indices",
    "interval",
    "period",
    "offset",
    "feature",
    "insert",
    "shared",
    "max_window",
    "dense",
    "per_",
    "nextn",
    "stride",
    "divis",
    "kernel",
    "size",
    "random",
    "min_",
    "max_",
    "group",
    "input",
    "loop",
    "start",
    "end",
    "conv",
    "feat_extract",
    "adapter",
    "expert",
    "global",
    "mem",
)
MIN_LAYERS = 2
HORIZON = 8  # the forecast length where the default config leaves it unset (it must be set)
MAX_KINDS = 4  # a per-layer list with more distinct values holds per-layer numbers, not layer kinds
# Counts of leading dense layers before the MoE ones: keep one of each kind.
_DENSE_FIRST = ("first_k_dense_replace", "num_dense_layers", "first_k_dense")
# Periods of a layer kind (every Nth layer is attention / MoE): 2 keeps both kinds in 2 layers.
_PERIOD = re.compile(r"(?:_period|_interval|_every_n_layers|_step)$")
# Counts of routed experts (mixture-of-experts layers).
_EXPERTS = ("num_local_experts", "num_experts", "n_routed_experts")
# The width keys and head-count keys whose ratio is a head dim (``width="heads"``).
_HIDDEN = ("hidden_size", "d_model", "n_embd", "dim", "embed_dim")
_HEAD_COUNTS = ("num_attention_heads", "num_heads", "n_head", "n_heads", "encoder_attention_heads")
# Sizes that equal a hidden size by coincidence, not because they follow it.
_UNRELATED = re.compile(r"codebook|image|patch|flow|vocab|position|max_|window|chunk|kernel|num_|_len")
# Per-stage block counts of hierarchical vision models.
_STAGES = ("depths", "blocks_per_stage", "stage_num_blocks", "num_block_repeats", "n_attn_blocks")

WIDTH = {
    "hidden_size": 64,
    "d_model": 64,
    "n_embd": 64,
    "dim": 64,
    "embed_dim": 64,
    "embedding_size": 64,  # narrowed with hidden_size: MobileBERT's head is hidden - embedding wide
    "intermediate_size": 128,
    "ffn_dim": 128,
    "d_ff": 128,
    "encoder_ffn_dim": 128,
    "decoder_ffn_dim": 128,
    "n_inner": 128,
    "hidden_dim": 128,
    "moe_intermediate_size": 64,
    "shared_expert_intermediate_size": 64,
    "num_attention_heads": 4,
    "num_heads": 4,
    "n_head": 4,
    "n_heads": 4,
    "encoder_attention_heads": 4,
    "decoder_attention_heads": 4,
    "vocab_size": 512,
    "num_local_experts": 4,
    "num_experts": 4,
    "n_routed_experts": 4,
    "num_experts_per_tok": 2,
}


def sub_configs(config, prefix: str = "", depth: int = 2):
    """(dotted prefix, config) for the config and its nested sub-configs (``text_config``; a composite's
    ``decoder``, ``text_encoder``...)."""
    yield prefix, config
    if depth == 0:
        return
    for key, value in sorted(vars(config).items()):
        if hasattr(value, "to_dict") and isinstance(getattr(value, "model_type", None), str):
            yield from sub_configs(value, f"{prefix}{key}.", depth - 1)


def is_count(key: str, value) -> bool:
    """Whether config key ``key`` (holding ``value``) counts repeated layers."""
    return (
        isinstance(value, int)
        and not isinstance(value, bool)
        and bool(_COUNT.match(key))
        and not any(word in key for word in _NOT_COUNT)
    )


def overrides(config, *, width: bool | str = False) -> dict:
    """``--set`` overrides (dotted key -> value) that make ``config`` tiny (see the module docstring)."""
    out: dict = {}
    subs = list(sub_configs(config))
    top = _token_ids(vars(config))  # the composite's own token ids index its text config's vocabulary
    for prefix, cfg in subs:
        out.update({prefix + k: v for k, v in _one(cfg, width, top).items()})
    return {**out, **_followers(subs, out)} if width else out


# Standard names the rules read that some configs keep under their own (the class's attribute_map):
# kimi_linear's num_experts_per_token, bailing_hybrid's num_expert_group. A ``--set`` of the standard name
# reaches the config's own key through the same map.
_ALIASED = ("num_experts_per_tok", "n_group")


def _one(cfg, width: bool | str, ids=()) -> dict:
    raw = {k: v for k, v in vars(cfg).items() if not k.startswith("_")}
    aliases = getattr(type(cfg), "attribute_map", None) or {}
    for key in _ALIASED:
        if key not in raw and aliases.get(key) in raw:
            raw[key] = raw[aliases[key]]
    out: dict = {}
    for key, value in raw.items():
        if key.endswith("_config") and getattr(value, "model_type", None) == "timm_backbone":
            resnet = _resnet_for_timm(value)
            if resnet:
                out[key] = resnet
    for key, value in raw.items():
        if key in _STAGES and isinstance(value, list) and value and all(isinstance(v, int) for v in value):
            if any(v > 1 for v in value):
                out[key] = [min(v, 1) for v in value]
        elif key in _DENSE_FIRST and isinstance(value, int) and value > 1:
            out[key] = 1
        elif _PERIOD.search(key) and isinstance(value, int) and not isinstance(value, bool) and value > 2:
            out[key] = 2
            offset = key.rsplit("_", 1)[0] + "_offset"
            if isinstance(raw.get(offset), int) and raw[offset] >= 2:
                out[offset] = raw[offset] % 2
    for key in ("prediction_length", "context_length"):  # a forecaster's horizon and context, which it needs
        if key in raw and raw[key] is None and "prediction_length" in raw:
            out[key] = HORIZON
    experts = [v for k, v in raw.items() if k in _EXPERTS and isinstance(v, int) and v > 0]
    if "num_experts_per_tok" in raw and raw["num_experts_per_tok"] is None and experts:
        out["num_experts_per_tok"] = min(2, *experts)  # unset in the default config, which routing needs
    for key, value in raw.items():  # grouped_mm experts need 16-byte aligned rows (deepseek_v2's 1407)
        if experts and key.endswith("intermediate_size") and isinstance(value, int) and value % 16:
            out[key] = value + 16 - value % 16
    for key, count in raw.items():
        if is_count(key, count) and count > MIN_LAYERS:
            out.update(_layers(raw, key, count))
    if width:
        out.update(_width(raw, ids))
    if width == "heads":
        out.update(_whole_heads(raw, out))
        out.update(_ssm_heads(raw, out))
    return out


def _resnet_for_timm(cfg) -> dict | None:
    """A timm ResNet backbone (which needs timm, and timm torchvision) as transformers' own ResNet of
    the same stage widths, one block per stage: a sub-config that ``--set`` builds (it names its
    model_type). None for other timm backbones."""
    name = str(getattr(cfg, "backbone", "") or "")
    if not re.fullmatch(r"resnet\d+", name):
        return None
    basic = name in ("resnet18", "resnet34")
    out = {
        "model_type": "resnet",
        "depths": [1, 1, 1, 1],
        "layer_type": "basic" if basic else "bottleneck",
        "hidden_sizes": [64, 128, 256, 512] if basic else [256, 512, 1024, 2048],
        "num_channels": getattr(cfg, "num_channels", 3),
    }
    indices = getattr(cfg, "out_indices", None)
    if indices:
        out["out_indices"] = list(indices)
    return out


def _layers(raw: dict, key: str, count: int) -> dict:
    """Fewer layers for count key ``key``: the first layer of each kind, per-layer lists cut to match."""
    per_layer = {
        k: v
        for k, v in raw.items()
        if k != key
        and isinstance(v, (list, str))
        and len(v) == count
        and k not in _STAGES
        and (isinstance(v, list) or k.endswith(("pattern", "types")))
    }
    indices = {
        k: v
        for k, v in raw.items()
        if k not in per_layer
        and k not in _STAGES
        and isinstance(v, list)
        and v
        and len(v) < count
        and all(isinstance(i, int) and not isinstance(i, bool) and 0 <= i < count for i in v)
        and any(w in k for w in ("layer", "block", "indices", "indexes", "ids"))
    }
    kinds: dict = {}
    typed = [v for v in per_layer.values() if len({str(x) for x in v}) <= MAX_KINDS]  # not per-layer numbers
    for i in range(count):
        kind = tuple(str(v[i]) for v in typed) + tuple(i in v for v in indices.values())
        kinds.setdefault(kind, i)
    keep = sorted(kinds.values())
    for i in range(count):  # at least MIN_LAYERS, the first ones
        if len(keep) >= MIN_LAYERS:
            break
        if i not in keep:
            keep = sorted(keep + [i])
    if len(keep) >= count:
        return {}
    out: dict = {key: len(keep)}
    for k, v in per_layer.items():
        picked = [v[i] for i in keep]
        if _sources(k, v):  # each layer's source layer (kv_source_layers): renumbered to the kept ones
            picked = [sum(1 for j in keep if j <= v[i]) - 1 for i in keep]
        out[k] = "".join(picked) if isinstance(v, str) else picked
    for k, v in indices.items():
        out[k] = [n for n, i in enumerate(keep) if i in v]
    return out


def _sources(key: str, values) -> bool:
    """Whether a per-layer list names, for each layer, an earlier layer (or itself) by its index."""
    return (
        "layer" in key
        and isinstance(values, list)
        and all(isinstance(v, int) and not isinstance(v, bool) and 0 <= v <= i for i, v in enumerate(values))
        and any(v > 1 for v in values)
    )


def _token_ids(raw: dict) -> list:
    return [
        v
        for k, v in raw.items()
        if k.endswith(("_token_id", "_token_index", "_id")) and isinstance(v, int) and not isinstance(v, bool)
    ]


def _width(raw: dict, more_ids=()) -> dict:
    """Narrow widths (WIDTH); head dims stay (rotary sections are sized by them), and the vocabulary
    keeps every special token id the config names (and ``more_ids``: its composite's)."""
    out = {
        k: v
        for k, v in WIDTH.items()
        if isinstance(raw.get(k), int) and not isinstance(raw.get(k), bool) and raw[k] > v
    }
    ids = _token_ids(raw) + list(more_ids)
    if "vocab_size" in out and ids and max(ids) >= out["vocab_size"]:
        out["vocab_size"] = max(ids) + 1 if max(ids) < raw["vocab_size"] else raw["vocab_size"]
    heads = out.get("num_attention_heads", raw.get("num_attention_heads"))
    kv = raw.get("num_key_value_heads")
    if isinstance(kv, int) and isinstance(heads, int) and kv > 0:
        out["num_key_value_heads"] = heads if kv >= raw.get("num_attention_heads", kv) else min(kv, 2)
    experts = min(v for k, v in out.items() if k in _EXPERTS) if any(k in out for k in _EXPERTS) else None
    if isinstance(raw.get("num_experts_per_tok"), int) and experts:
        out["num_experts_per_tok"] = min(raw["num_experts_per_tok"], 2, experts)
    out.update(_ssm_heads(raw, out))
    group = raw.get("n_group")  # routing views the experts as n_group groups (deepseek_v3): they must divide
    if experts and isinstance(group, int) and group > 1 and experts % group:
        out["n_group"] = 1
        if isinstance(raw.get("topk_group"), int) and raw["topk_group"] > 1:
            out["topk_group"] = 1
    return out


# A state-space (Mamba-2) mixer's head count, head dim and expansion: heads x head dim = expand x hidden.
_SSM_HEADS = ("mamba_n_heads", "n_mamba_heads", "mamba_num_heads", "num_heads")
_SSM_DIMS = ("mamba_d_head", "mamba_headdim", "mamba_head_dim", "head_dim")
_SSM_EXPAND = ("mamba_expand", "expand")
_SSM_GROUPS = ("n_groups", "mamba_n_groups", "mamba_ngroups")


def _ssm_heads(raw: dict, narrow: dict) -> dict:
    """A Mamba-2 mixer's heads for the narrowed hidden size, where the config's own sizes hold
    heads x head dim = expand x hidden (mamba2, bamba, zamba2...): the head count that keeps its head
    dim, else the head dim that keeps its count."""
    width = next((k for k in _HIDDEN if k in narrow), None)
    keys = [next((k for k in names if _positive(raw.get(k))), None) for names in (_SSM_HEADS, _SSM_DIMS, _SSM_EXPAND)]
    if width is None or None in keys:
        return {}
    heads, dim, expand = keys
    inner = narrow[width] * raw[expand]
    if raw[heads] * raw[dim] != raw[width] * raw[expand] or inner != int(inner):
        return {}
    inner = int(inner)
    if inner % raw[dim] == 0:
        out = {heads: inner // raw[dim]}
    else:
        count = narrow.get(heads, raw[heads])
        out = {heads: count, dim: inner // count} if inner % count == 0 else {}
    for key in _SSM_GROUPS:  # the heads are split into groups (of B and C): they must divide
        if out and _positive(raw.get(key)) and out[heads] % raw[key]:
            out[key] = 1
    return out


def _positive(value) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and value > 0


def _followers(subs: list, out: dict) -> dict:
    """Sizes a config sets equal to a hidden size, which follow that hidden size narrowed: its own
    (``projection_size``, ``pooler_hidden_size``: a projection or pooler as wide as the model's
    hidden states), else another sub-config's where only one narrows from that width (a Q-Former's
    ``encoder_hidden_size``, the vision tower's width)."""
    hidden = {}  # prefix -> (its width, narrowed)
    for prefix, cfg in subs:
        key = next((k for k in _HIDDEN if prefix + k in out), None)
        if key:
            hidden[prefix] = (vars(cfg)[key], out[prefix + key])
    others: dict = {}
    for width, narrow in hidden.values():
        others.setdefault(width, set()).add(narrow)
    fix = {}
    for prefix, cfg in subs:
        own = hidden.get(prefix)
        for key, value in vars(cfg).items():
            if (
                prefix + key in out
                or key in _HIDDEN
                or key in WIDTH
                or not key.endswith(("_size", "_dim"))
                or _UNRELATED.search(key)
                or not isinstance(value, int)
                or isinstance(value, bool)
            ):
                continue
            if own and value == own[0]:
                fix[prefix + key] = own[1]
            elif len(others.get(value, ())) == 1:
                fix[prefix + key] = next(iter(others[value]))
    return fix


def _whole_heads(raw: dict, narrow: dict) -> dict:
    """The narrowed hidden size made the narrowed head count times the config's own head dim (its
    ``head_dim``, else hidden / heads): the width of whole heads. Only where that is narrower than the
    config's own width; {} where the config names no head dim to keep."""
    width = next((k for k in _HIDDEN if k in narrow), None)
    count = next((k for k in _HEAD_COUNTS if isinstance(raw.get(k), int) and raw[k] > 0), None)
    if width is None or count is None:
        return {}
    head = raw.get("head_dim")
    if not isinstance(head, int) or isinstance(head, bool) or head <= 0:
        head = raw[width] // raw[count] if raw[width] % raw[count] == 0 else None
    wide = head * narrow.get(count, raw[count]) if head else None
    return {width: wide} if wide and wide < raw[width] and wide != narrow[width] else {}
