"""The bundled model zoo: popular architectures on tiny configs, traced into coverage/models/.

Tiny configs (two layers, width 64) dispatch the same ops as the full-size models, only
fewer times; the sizes used are in each file's ``model.config``. Each file's
``provenance.command`` (``opcov trace NAME --mode MODE ...``) regenerates it alone;
``opcov zoo trace`` regenerates them all (``opcov.tracing.spec.trace_zoo``), reporting a failing
model and going on. ``opcov zoo trace --all`` goes further: every transformers architecture, on tiny
configs derived from its own config (``zoorun.py``); a type this zoo holds is traced from its entry.
The entries' dtypes agree with what the models say they need (``models.needed_dtype``).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from opcov.errors import UsageError
from opcov.store import layout

ROOT = layout.models_dir()

_LM = dict(
    num_hidden_layers=2,
    hidden_size=64,
    intermediate_size=128,
    num_attention_heads=4,
    num_key_value_heads=2,
    head_dim=16,
    vocab_size=256,
    max_position_embeddings=256,
)
_ENC = dict(
    num_hidden_layers=2,
    hidden_size=64,
    intermediate_size=128,
    num_attention_heads=4,
    vocab_size=256,
    max_position_embeddings=256,
)
_VIT = dict(
    num_hidden_layers=2, hidden_size=64, intermediate_size=128, num_attention_heads=4, image_size=32, patch_size=8
)
_S2S = dict(
    d_model=64,
    encoder_layers=2,
    decoder_layers=2,
    encoder_attention_heads=4,
    decoder_attention_heads=4,
    encoder_ffn_dim=128,
    decoder_ffn_dim=128,
    vocab_size=256,
    max_position_embeddings=256,
)


@dataclass(frozen=True)
class Entry:
    name: str
    spec: str  # hf:TYPE or nn:BLOCK
    config: dict = field(default_factory=dict)
    task: str | None = None
    dtype: str = "float32"
    real: bool = False
    notes: tuple = ()


ZOO = (
    Entry("llama", "hf:llama", _LM),
    Entry("qwen2", "hf:qwen2", _LM),
    Entry("qwen3", "hf:qwen3", _LM),
    Entry("mistral", "hf:mistral", _LM),
    Entry(
        "mixtral",
        "hf:mixtral",
        {**_LM, "num_local_experts": 4, "num_experts_per_tok": 2},
        dtype="bfloat16",
        notes=("--real traces float32 on CPU",),
    ),
    Entry(
        "qwen2_moe",
        "hf:qwen2_moe",
        {
            **_LM,
            "num_experts": 4,
            "num_experts_per_tok": 2,
            "moe_intermediate_size": 64,
            "shared_expert_intermediate_size": 64,
        },
        dtype="bfloat16",
    ),
    Entry("gemma", "hf:gemma", _LM),
    Entry("gemma2", "hf:gemma2", _LM),
    Entry("phi3", "hf:phi3", {**_LM, "pad_token_id": 0}),
    Entry("gpt2", "hf:gpt2", dict(n_layer=2, n_embd=64, n_head=4, vocab_size=256, n_positions=256)),
    Entry("gpt_neox", "hf:gpt_neox", _ENC),
    Entry(
        "opt",
        "hf:opt",
        dict(
            num_hidden_layers=2,
            hidden_size=64,
            ffn_dim=128,
            num_attention_heads=4,
            word_embed_proj_dim=64,
            vocab_size=256,
            max_position_embeddings=256,
        ),
    ),
    Entry("falcon", "hf:falcon", dict(num_hidden_layers=2, hidden_size=64, num_attention_heads=4, vocab_size=256)),
    Entry("bloom", "hf:bloom", dict(n_layer=2, hidden_size=64, n_head=4, vocab_size=256)),
    Entry("bert", "hf:bert", _ENC),
    Entry("roberta", "hf:roberta", {**_ENC, "max_position_embeddings": 260}),
    Entry(
        "distilbert",
        "hf:distilbert",
        dict(n_layers=2, dim=64, n_heads=4, hidden_dim=128, vocab_size=256, max_position_embeddings=256),
    ),
    Entry("albert", "hf:albert", {**_ENC, "embedding_size": 32}),
    Entry("electra", "hf:electra", {**_ENC, "embedding_size": 32}),
    Entry(
        "t5",
        "hf:t5",
        dict(
            d_model=64,
            d_ff=128,
            d_kv=16,
            num_layers=2,
            num_heads=4,
            vocab_size=256,
            pad_token_id=0,
            decoder_start_token_id=0,
        ),
    ),
    Entry("bart", "hf:bart", _S2S, task="causal_lm"),
    Entry(
        "whisper",
        "hf:whisper",
        {
            **_S2S,
            "num_mel_bins": 16,
            "max_source_positions": 32,
            "max_target_positions": 64,
            "pad_token_id": 0,
            "bos_token_id": 1,
            "eos_token_id": 2,
            "decoder_start_token_id": 1,
        },
        task="speech_seq2seq",
    ),
    Entry("vit", "hf:vit", _VIT),
    Entry("dinov2", "hf:dinov2", _VIT),
    Entry(
        "clip",
        "hf:clip",
        dict(projection_dim=32, text_config={**_ENC, "max_position_embeddings": 64}, vision_config=_VIT),
        task="image_classification",
    ),
    Entry(
        "swin",
        "hf:swin",
        dict(embed_dim=16, depths=[1, 1], num_heads=[2, 2], window_size=4, image_size=32, patch_size=4),
    ),
    Entry("convnext", "hf:convnext", dict(hidden_sizes=[16, 32], depths=[1, 1], num_stages=2, image_size=32)),
    Entry(
        "resnet",
        "hf:resnet",
        dict(embedding_size=16, hidden_sizes=[16, 32], depths=[1, 1], layer_type="basic", image_size=32),
    ),
    Entry(
        "wav2vec2",
        "hf:wav2vec2",
        dict(
            hidden_size=64,
            num_hidden_layers=2,
            num_attention_heads=4,
            intermediate_size=128,
            conv_dim=[16, 16],
            conv_stride=[5, 2],
            conv_kernel=[10, 3],
            num_conv_pos_embeddings=16,
            num_conv_pos_embedding_groups=4,
            classifier_proj_size=32,
            mask_time_prob=0.0,
            layerdrop=0.0,
        ),
        task="audio_classification",
        notes=(
            "mask_time_prob=0: SpecAugment draws its masks on the host from the data (data-dependent, "
            "so fake tensors cannot trace it); it adds a masked_fill on the device",
            "layerdrop=0: LayerDrop draws on the host and skips whole layers; it adds no device op",
        ),
    ),
    Entry("mamba", "hf:mamba", dict(num_hidden_layers=2, hidden_size=64, state_size=8, vocab_size=256)),
    Entry("nn-transformer", "nn:transformer"),
    Entry("nn-lstm", "nn:lstm"),
    Entry("nn-gru", "nn:gru"),
    Entry("nn-convnet", "nn:convnet"),
)
BY_NAME = {e.name: e for e in ZOO}


def select(only) -> list[Entry]:
    if not only:
        return list(ZOO)
    names = [n for part in only for n in part.split(",") if n]
    unknown = [n for n in names if n not in BY_NAME]
    if unknown:
        raise UsageError(f"not in the zoo: {', '.join(unknown)}; the zoo has {', '.join(BY_NAME)}")
    return [BY_NAME[n] for n in names]


def path_for(name: str, mode: str, root: str = ROOT) -> str:
    return layout.opset_path(name, mode, root)
