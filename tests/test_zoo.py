"""The whole model zoo: tiny configs keep every kind of layer, inputs come from the model's own signature
and config, every failure is a one-line row of the outcome table, and a run resumes, shards and merges.

Models are only built here (on the meta device, which claims no PrivateUse1); traces run in child
processes (``opcov zoo trace``), as in test_trace.py.
"""

import io
import json
import os

import pytest
from conftest import load_yaml, opcov_here

from opcov.errors import UsageError
from opcov.sources import tiny
from opcov.tracing import ladder, realtrace, zoorun


class Cfg:
    """A stand-in for a transformers config: its attributes are its keys."""

    model_type = "stand-in"

    def __init__(self, **keys):
        self.__dict__.update(keys)

    def to_dict(self):
        return dict(vars(self))


# ---------------------------------------------------------------- tiny configs


def test_tiny_keeps_one_layer_of_each_kind_and_renumbers():
    cfg = Cfg(
        num_hidden_layers=8,
        layer_types=["sliding", "sliding", "sliding", "full"] * 2,
        mlp_only_layers=[0, 5],
        rope_thetas=[float(i) for i in range(8)],
        hidden_size=4096,
        text_config=Cfg(num_layers=24, vision_feature_layer=-1),
        depths=[3, 4, 6, 3],
        first_k_dense_replace=3,
        attn_layer_period=8,
        attn_layer_offset=4,
        prediction_length=None,
    )
    ov = tiny.overrides(cfg)
    # kinds (layer type, dense): layer 0 (sliding, dense), 1 (sliding, moe), 3 (full, moe)
    assert ov["num_hidden_layers"] == 3
    assert ov["layer_types"] == ["sliding", "sliding", "full"]
    assert ov["mlp_only_layers"] == [0]
    assert ov["rope_thetas"] == [0.0, 1.0, 3.0]  # per-layer numbers follow the kept layers, define no kinds
    assert ov["text_config.num_layers"] == 2 and "text_config.vision_feature_layer" not in ov
    assert ov["depths"] == [1, 1, 1, 1] and ov["first_k_dense_replace"] == 1
    assert ov["attn_layer_period"] == 2 and ov["attn_layer_offset"] == 0
    assert ov["prediction_length"] == tiny.HORIZON
    assert "hidden_size" not in ov  # width costs nothing under fake tensors
    narrow = tiny.overrides(cfg, width=True)
    assert narrow["hidden_size"] == 64 and narrow["num_hidden_layers"] == 3


def test_tiny_rules_read_key_names_and_values():
    # per-layer source-layer indices are renumbered to the kept layers; per-stage repeats are not indices
    ov = tiny.overrides(
        Cfg(
            num_hidden_layers=6,
            mlp_layer_types=["dense", "moe", "moe", "moe", "moe", "moe"],
            kv_source_layers=[0, 1, 2, 3, 4, 5],
            vision_config=Cfg(num_hidden_layers=55, num_block_repeats=[1, 2, 2, 3, 3, 4, 1]),
        )
    )
    assert ov["num_hidden_layers"] == 2 and ov["kv_source_layers"] == [0, 1]
    assert ov["vision_config.num_block_repeats"] == [1] * 7
    # mixture of experts: routing needs experts per token; grouped_mm needs 16-byte aligned rows
    moe = tiny.overrides(
        Cfg(n_routed_experts=64, num_experts_per_tok=None, moe_intermediate_size=1407, intermediate_size=4096)
    )
    assert moe == {"num_experts_per_tok": 2, "moe_intermediate_size": 1408}
    # a timm ResNet backbone (timm needs torchvision) as transformers' ResNet of the same widths
    timm = Cfg(backbone="resnet50", num_channels=3, out_indices=[2, 3, 4])
    timm.model_type = "timm_backbone"
    swapped = tiny.overrides(Cfg(backbone_config=timm))["backbone_config"]
    assert swapped["model_type"] == "resnet" and swapped["hidden_sizes"][-1] == 2048
    assert swapped["out_indices"] == [2, 3, 4]
    other = Cfg(backbone="efficientnet_b0")
    other.model_type = "timm_backbone"
    assert "backbone_config" not in tiny.overrides(Cfg(backbone_config=other))


def test_tiny_leaves_small_configs_alone():
    assert tiny.overrides(Cfg(num_hidden_layers=2, layer_types=["a", "b"], depths=[1, 1])) == {}


# ---------------------------------------------------------------- inputs from signature and config


@pytest.fixture(scope="module")
def build():
    pytest.importorskip("transformers")
    from opcov.sources import models

    tf = models._transformers()

    def make(model_type, mode="training"):
        sizes = models.Sizes(overrides=tiny.overrides(tf.AutoConfig.for_model(model_type)))
        return models.build(f"hf:{model_type}", sizes, mode=mode, real=False)

    return make


def shapes(built):
    return {k: tuple(v.shape) if hasattr(v, "shape") else v for k, v in built.inputs.items()}


def test_inputs_per_modality(build):
    # speech-to-text, channels first at the encoder's fixed length; a decoder input at inference
    assert shapes(build("whisper", "inference")) == {"input_features": (2, 80, 3000), "decoder_input_ids": (2, 16)}
    # speech-to-text, frames first: the meta run picks the layout that fits
    assert shapes(build("speech_to_text"))["input_features"] == (2, 64, 80)
    # raw audio with a channel axis, picked the same way
    assert len(shapes(build("pe_audio_encoder"))["input_values"]) == 3
    # vision: deit maps its type to two classes (it was a TypeError traceback)
    deit = build("deit")
    assert shapes(deit) == {"pixel_values": (2, 3, 224, 224), "labels": (2,)}
    # text, and what the head needs for a loss
    assert shapes(build("bert")) == {"input_ids": (2, 16), "labels": (2, 16)}
    # contrastive: both towers, and the loss
    clip = shapes(build("clip"))
    assert clip["input_ids"] == (2, 16) and clip["pixel_values"][1:] == (3, 224, 224) and clip["return_loss"] is True
    assert any("inputs made from the forward signature and config" in n for n in deit.notes)


def test_a_head_the_config_does_not_run_falls_back_to_the_base_model(build):
    # blip-2's retrieval head needs use_qformer_text_input, which the default config leaves off
    blip = build("blip-2", "inference")
    assert type(blip.model).__name__ == "Blip2Model"
    assert any("the contrastive head cannot be built or run" in n and "'intermediate'" in n for n in blip.notes)
    assert type(build("bert", "inference").model).__name__ == "BertLMHeadModel"  # a head that runs stays


def test_a_model_without_forward_is_a_clean_build_error(build):
    from opcov.sources import models

    with pytest.raises(models.BuildError, match="BarkModel: it has no forward"):
        build("bark")


def test_moe_with_grouped_mm_needs_bfloat16(build):
    from opcov.sources import models

    moe = build("qwen3_moe")
    assert moe.dtype == "bfloat16" and models.GROUPED_MM_NOTE in moe.notes
    assert build("llama").dtype is None


def test_an_input_opcov_cannot_make_is_one_line():
    torch = pytest.importorskip("torch")
    from opcov.sources import inputs
    from opcov.sources.models import Sizes

    class Odd(torch.nn.Module):
        main_input_name = "input_ids"

        def forward(self, input_ids, weird_thing):
            return input_ids

    with pytest.raises(inputs.NoInput, match="the forward needs 'weird_thing'"):
        inputs.make(torch, Odd(), Cfg(vocab_size=10), "base", Sizes(), mode="inference", real=False)


def test_missing_library_is_a_clean_build_error(build):
    pytest.importorskip("transformers")
    try:
        import timm  # noqa: F401

        pytest.skip("timm is installed here")
    except ImportError:
        pass
    from opcov.sources import models

    with pytest.raises(models.BuildError) as err:
        build("timm_wrapper")
    assert "needs the timm library, which is not installed" in str(err.value) and "\n" not in str(err.value)


def test_a_transducer_gets_decoder_ids_and_the_audio_layout_that_fits(build):
    # parakeet's prediction network embeds decoder_input_ids (None was a TypeError); its encoder takes
    # frames first, which the meta run picks once a matmul's "reduction dim" counts as a shape error
    assert shapes(build("parakeet_tdt", "inference")) == {"input_features": (2, 64, 80), "decoder_input_ids": (2, 16)}


def test_default_configs_the_model_refuses_are_repaired_from_their_own_keys():
    pytest.importorskip("transformers")
    from opcov.sources import models
    from opcov.tracing import repair

    tf = models._transformers()
    # hunyuan's default config leaves head_dim None (the model computes head_dim ** -0.5)
    hunyuan = tf.AutoConfig.for_model("hunyuan_v1_dense")
    fix, notes = repair.repairs(
        hunyuan, "TypeError: unsupported operand type(s) for ** or pow(): 'NoneType' and 'float'"
    )
    assert fix["head_dim"] == hunyuan.hidden_size // hunyuan.num_attention_heads and "head_dim" in notes[0]
    sizes = models.Sizes(overrides={**tiny.overrides(hunyuan), **fix})
    assert models.build("hf:hunyuan_v1_dense", sizes, mode="inference", real=False).model is not None
    # glm4v's rotary sections [8, 12, 12] fit half its head dim: the partial rotary factor checkpoints set
    glm = tf.AutoConfig.for_model("glm4v_text")
    fix, _ = repair.repairs(
        glm,
        "RuntimeError: split_with_sizes expects split_sizes to sum exactly to 64 (input "
        "tensor's size at dimension -1), but got split_sizes=[8, 12, 12]",
    )
    assert fix["rope_parameters"]["partial_rotary_factor"] == 0.5
    # at narrow widths (8 frequencies) the sections themselves shrink
    fix, _ = repair.repairs(
        glm, "split_with_sizes expects split_sizes to sum exactly to 8 (x), but got split_sizes=[8, 12, 12]"
    )
    assert fix["rope_parameters"]["mrope_section"] == [2, 3, 3]
    # glm4v_moe: 4096 does not divide into 96 heads, so the head dim is the one the sections fit (as
    # GLM-4.5V's checkpoint sets it: 128)
    moe = tf.AutoConfig.for_model("glm4v_moe_text")
    assert repair.repairs(
        moe, "split_with_sizes expects split_sizes to sum exactly to 11 (x), but got split_sizes=[8, 12, 12]"
    )[0] == {"head_dim": 128}
    # a key the model's own check names, unset in the default config
    step = tf.AutoConfig.for_model("step3p7")
    assert repair.repairs(
        step, "ValueError: Could not find a `sliding_window` argument in the config, or it is not set"
    )[0] == {"text_config.sliding_window": 4096}
    # an attribute a config class lacks, named by the error; unknown failures get no repair
    t5 = tf.AutoConfig.for_model("t5gemma2_encoder")
    fix, _ = repair.repairs(
        t5, f"AttributeError: '{type(t5.text_config).__name__}' object has no attribute 'dropout_rate'"
    )
    assert fix == {"text_config.dropout_rate": 0.1}
    assert repair.repairs(hunyuan, "RuntimeError: something else") == ({}, [])
    # aya_vision's default vision tower: width 1152 in 14 heads; 16 divides it (SigLIP so400m's count)
    aya = tf.AutoConfig.for_model("aya_vision")
    fix, notes = repair.repairs(
        aya,
        "cannot build AyaVisionModel: ValueError: embed_dim must be divisible by "
        "num_heads (got `embed_dim`: 1152 and `num_heads`: 14).",
    )
    assert fix == {"vision_config.num_attention_heads": 16} and "16 heads" in notes[0]
    # dots1 leaves its expert counts None: torch.empty(None, ...) is the symptom
    dots = tf.AutoConfig.for_model("dots1")
    fix, _ = repair.repairs(dots, "TypeError: empty() takes 1 positional argument but 3 were given")
    assert fix["n_routed_experts"] > fix["num_experts_per_tok"] > 0 and fix["n_shared_experts"] == 1
    # reformer's axial position factors must multiply to the traced sequence length
    ref = tf.AutoConfig.for_model("reformer")
    fix, _ = repair.repairs(
        ref,
        "ValueError: If training, make sure that config.axial_pos_shape factors: (64, 64) "
        "multiply to sequence length. Got prod((64, 64)) != sequence_length: 16.",
    )
    assert fix == {"axial_pos_shape": [4, 4]}
    built = models.build("hf:reformer", models.Sizes(overrides=fix), mode="inference", real=False)
    assert built.model.config.axial_pos_shape == (4, 4)  # the config's tuple stays a tuple
    # the image size a model's own check names; every input such a check names, in order
    assert repair.image_size("AssertionError: Input height (224) doesn't match model (336).") == 336
    assert repair.image_size("Input height (224) is odd") is None
    assert repair.asked_inputs(
        "ValueError: At least two of input_ids, pixel_values_videos, or input_values must be provided."
    ) == ["input_ids", "pixel_values_videos", "input_values"]


def test_more_default_configs_are_repaired_from_the_failure_and_their_keys():
    # each failure message below is the one transformers 5.24 raised on its default config
    pytest.importorskip("transformers")
    from opcov.sources import models
    from opcov.tracing import repair

    tf = models._transformers()
    # lfm2_moe leaves layer_types None (the model indexes it): every layer full_attention, said in a note
    lfm = tf.AutoConfig.for_model("lfm2_moe")
    fix, notes = repair.repairs(lfm, "cannot build Lfm2MoeModel: TypeError: 'NoneType' object is not subscriptable")
    assert fix == {"layer_types": ["full_attention"] * lfm.num_hidden_layers} and "other layer kinds" in notes[0]
    sizes = models.Sizes(overrides={**tiny.overrides(lfm), **fix})
    assert models.build("hf:lfm2_moe", sizes, mode="inference", real=False).model is not None
    # cohere_compass reads rotary parameters per layer kind; its default has none
    cc = tf.AutoConfig.for_model("cohere_compass")
    fix, _ = repair.repairs(cc, "cannot build CohereCompassModel: KeyError: 'full_attention'")
    assert set(fix["text_config.rope_parameters"]) == set(cc.text_config.layer_types)
    # chameleon's token map (shipped with a checkpoint's tokenizer) is None: an empty map
    ch = tf.AutoConfig.for_model("chameleon")
    fix, notes = repair.repairs(
        ch, "cannot build ChameleonModel: AttributeError: 'NoneType' object has no attribute 'get'"
    )
    assert fix["vocabulary_map"] == {} and any("text path" in n for n in notes)
    # xmod needs a default language: the first of its languages
    xm = tf.AutoConfig.for_model("xmod")
    assert repair.repairs(
        xm, "ValueError: Input language unknown. Please call `XmodPreTrainedModel.set_default_language()`"
    )[0] == {"default_language": "en_XX"}
    # BLIP-2 compares input_ids with an unset image token (a bool, not a mask): the last id, with a
    # placeholder per query token in the text
    blip = tf.AutoConfig.for_model("blip-2")
    fix, _ = repair.repairs(blip, "AttributeError: 'bool' object has no attribute 'unsqueeze'")
    assert fix == {"image_token_index": blip.text_config.vocab_size - 1}
    built = models.build("hf:blip-2", models.Sizes(overrides=fix), mode="inference", real=False)
    ids = built.inputs["input_ids"]
    assert tuple(ids.shape) == (2, blip.num_query_tokens + 16)
    # an audio length the model's own check wants a multiple of: rounded up
    assert (
        repair.audio_length(
            "ValueError: `input_values` length 6400 is not a multiple of 1920. Prepare the "
            "audio with `MuseSparkFeatureExtractor`"
        )
        == 7680
    )
    assert (
        repair.audio_length(
            "ValueError: Qwen3ASREncoder expects `padded_feature_length` to be a multiple of "
            "`n_window * 2` (100), but got 64."
        )
        == 100
    )
    assert repair.audio_length("length 64 is fine") is None


def test_an_optional_input_the_model_uses_as_a_tensor_is_asked_for():
    from opcov.tracing import repair

    def forward(input_ids=None, pixel_values=None):  # tvp: pixel_values optional in the signature, used anyway
        return pixel_values.dtype

    try:
        forward(input_ids=1)
    except AttributeError as exc:
        assert repair.none_inputs(exc) == ["pixel_values"]
    try:  # opcov's one-line error keeps the model's own as its context
        try:
            forward(input_ids=1)
        except AttributeError:
            raise UsageError("cannot trace: AttributeError") from None
    except UsageError as exc:
        assert repair.none_inputs(exc) == ["pixel_values"]


def test_a_class_that_takes_part_of_a_composite_config_is_built_from_that_part(build):
    # MusicgenForCausalLM declares MusicgenDecoderConfig: built from the MusicgenConfig's decoder, and said so;
    # the tiny overrides reach the decoder (a composite's sub-configs are not all named *_config)
    pytest.importorskip("transformers")
    from opcov.sources import models

    tf = models._transformers()
    assert "decoder.num_hidden_layers" in tiny.overrides(tf.AutoConfig.for_model("musicgen"))
    built = build("musicgen", "inference")
    assert type(built.model).__name__ == "MusicgenForCausalLM"
    assert any("built from the config's 'decoder' part" in n for n in built.notes)


def test_unset_rotary_sections_layer_kinds_and_image_sizes_are_repaired_from_the_config_and_message():
    # each failure message below is the one transformers 5.24 raised on its default config
    pytest.importorskip("transformers")
    from opcov.sources import models
    from opcov.tracing import repair

    tf = models._transformers()
    hy = tf.AutoConfig.for_model("hunyuan_vl")  # its text config documents mrope_section and leaves it out
    fix, notes = repair.repairs(hy, "cannot trace: TypeError: object of type 'NoneType' has no len()")
    assert fix["text_config.rope_parameters"]["mrope_section"] == [16, 24, 24]  # half of head dim 4096 / 32
    assert fix["text_config.rope_parameters"]["rope_theta"] == hy.text_config.rope_parameters["rope_theta"]
    narrow = {"text_config.hidden_size": 256, "text_config.num_attention_heads": 4}  # the run's own widths
    fix, _ = repair.repairs(hy, "TypeError: object of type 'NoneType' has no len()", narrow)
    assert fix["text_config.rope_parameters"]["mrope_section"] == [8, 12, 12] and sum([8, 12, 12]) == 64 // 2
    assert (
        "text_config.rope_parameters"
        not in repair.repairs(tf.AutoConfig.for_model("llama"), "TypeError: object of type 'NoneType' has no len()")[0]
    )
    # deepseek_ocr2 leaves mlp_layer_types None: the pattern of the example its own docstring gives
    ds = tf.AutoConfig.for_model("deepseek_ocr2")
    fix, notes = repair.repairs(
        ds, "TypeError: 'NoneType' object is not subscriptable", {"text_config.num_hidden_layers": 3}
    )
    assert fix["text_config.mlp_layer_types"] == ["dense", "sparse", "sparse"]
    assert any("its own documentation" in n for n in notes)
    # depth_pro's image must hold a patch at its smallest scale
    assert (
        repair.image_size(
            "ValueError: Image size 224x224 is too small to be scaled with "
            "scaled_images_ratios=(0.25, 0.5, 1) when patch_size=384."
        )
        == 1536
    )


def test_narrow_widths_keep_the_head_the_zoo_traced(build):
    # the recall check's eager runs and real-valued traces use tiny.overrides(width=True); MobileBERT's
    # masked-LM head is hidden_size - embedding_size wide, so a narrowed hidden_size alone made it negative
    # and the build fell back to the base model, whose pooler ops then read as the op set's misses
    pytest.importorskip("transformers")
    from opcov.sources import models

    tf = models._transformers()
    narrow = tiny.overrides(tf.AutoConfig.for_model("mobilebert"), width=True)
    assert narrow["embedding_size"] <= narrow["hidden_size"]
    built = models.build("hf:mobilebert", models.Sizes(overrides=narrow), mode="training", real=False)
    assert type(built.model).__name__ == type(build("mobilebert").model).__name__ == "MobileBertForMaskedLM"


def test_whole_heads_widths_run_models_the_narrowest_widths_break():
    # codegen splits its fused qkv projection by the narrowed hidden / heads but rotates by the
    # config's own rotary_dim, so at hidden 64 its eager run fails (the zoo's branch runs did, on
    # CPU too); at 4 heads of the config's own head dim it runs. Real model, real CPU forward.
    pytest.importorskip("transformers")
    from opcov.sources import models
    from opcov.torchenv import import_torch

    torch, tf = import_torch(), models._transformers()
    cfg = tf.AutoConfig.for_model("codegen")
    narrow, heads = tiny.overrides(cfg, width=True), tiny.overrides(cfg, width="heads")
    assert narrow["n_embd"] == 64 and heads["n_embd"] == 4 * (cfg.n_embd // cfg.n_head)
    assert {k: v for k, v in heads.items() if k != "n_embd"} == {k: v for k, v in narrow.items() if k != "n_embd"}

    def forward(overrides):
        built = models.build("hf:codegen", models.Sizes(overrides=overrides), mode="inference", real=True)
        args = built.inputs
        with torch.no_grad():
            return built.model(**args) if isinstance(args, dict) else built.model(*args)

    with pytest.raises(RuntimeError):
        forward(narrow)
    assert forward(heads) is not None


def test_narrow_widths_keep_a_mamba2_mixer_whole():
    # Mamba-2 mixers hold heads x head dim = expand x hidden, and split their heads into n_groups:
    # at hidden 64 with the default 128 heads (or 4 heads of 64 and 8 groups) mamba2's eager CPU
    # forward failed (view, repeat_interleave); the narrowed head count keeps both. Real forward.
    pytest.importorskip("transformers")
    from opcov.sources import models
    from opcov.torchenv import import_torch

    torch, tf = import_torch(), models._transformers()
    narrow = tiny.overrides(tf.AutoConfig.for_model("mamba2"), width=True)
    assert (
        narrow["num_heads"] * 64 == 2 * narrow["hidden_size"] and narrow["num_heads"] % narrow.get("n_groups", 8) == 0
    )
    built = models.build("hf:mamba2", models.Sizes(overrides=narrow), mode="inference", real=True)
    with torch.no_grad():
        assert built.model(**built.inputs) is not None


def test_narrow_widths_route_no_more_experts_than_they_keep_under_a_configs_own_key_name():
    """kimi_linear keeps experts per token as num_experts_per_token (its attribute_map maps the standard
    name to it): at 4 experts it still routed 8 ('selected index k out of range' in topk at the branch
    run, so its op sets were fake-only). The standard name's --set reaches the config's own key."""
    pytest.importorskip("transformers")
    from opcov.sources import models

    config = models._transformers().AutoConfig.for_model("kimi_linear")
    narrow = tiny.overrides(config, width=True)
    assert narrow["num_experts"] == 4 and narrow["num_experts_per_tok"] == 2
    assert "num_experts_per_tok" not in tiny.overrides(config)  # fake traces keep the config's routing
    config.num_experts_per_tok = narrow["num_experts_per_tok"]
    assert config.num_experts_per_token == 2
    # bailing_hybrid's routing views its experts as num_expert_group (n_group) 8 groups: 4 cannot make
    # them ('shape [-1, 8, 0] is invalid' at the branch run before)
    hybrid = tiny.overrides(models._transformers().AutoConfig.for_model("bailing_hybrid"), width=True)
    assert hybrid["num_experts"] % hybrid["n_group"] == 0 and hybrid["topk_group"] <= hybrid["n_group"]


def test_narrow_widths_carry_the_sizes_that_follow_hidden_and_divide_experts():
    # siglip's text projection_size equals its hidden size and must follow it (mm 2x768 and 256x2 at
    # the branch run before); deepseek_v3 routes over n_group=8 groups of experts, which 4 experts
    # cannot make (view [-1, 8, 0]); an image_size equal to the hidden size by chance stays
    pytest.importorskip("transformers")
    from opcov.sources import models

    tf = models._transformers()
    siglip = tiny.overrides(tf.AutoConfig.for_model("siglip"), width=True)
    assert siglip["text_config.projection_size"] == siglip["text_config.hidden_size"] == 64
    ds = tiny.overrides(tf.AutoConfig.for_model("deepseek_v3"), width=True)
    assert ds["n_routed_experts"] % ds["n_group"] == 0 and ds["topk_group"] <= ds["n_group"]
    # instructblipvideo: the Q-Former's encoder_hidden_size is the vision tower's width (1408), and the
    # composite's video token id indexes the text vocabulary, which must keep it
    ibv = tf.AutoConfig.for_model("instructblipvideo")
    ibv.video_token_index = 50271
    narrow = tiny.overrides(ibv, width=True)
    assert narrow["qformer_config.encoder_hidden_size"] == narrow["vision_config.hidden_size"] == 64
    assert narrow["text_config.vocab_size"] > 50271
    cfg = Cfg(hidden_size=768, image_size=768, pooler_hidden_size=768, num_attention_heads=12)
    narrow = tiny.overrides(cfg, width=True)
    assert narrow["pooler_hidden_size"] == 64 and "image_size" not in narrow
    assert tiny.overrides(cfg, width="heads")["pooler_hidden_size"] == 4 * 64


def test_an_optional_input_passed_on_as_none_is_asked_for():
    from opcov.tracing import repair

    def embed(ids):
        return ids + 1

    def forward(input_ids=None, pixel_values=None):  # instructblipvideo embeds input_ids it took as optional
        return embed(input_ids)

    try:
        forward(pixel_values=1)
    except TypeError as exc:
        assert repair.none_inputs(exc) == ["input_ids"]


def test_codec_and_codebook_inputs_take_the_layout_the_model_runs(build):
    # a codec whose forward takes hidden_states for its raw audio (main input input_values): channels first
    enc = build("vibevoice_acoustic_tokenizer_encoder", "inference")
    assert shapes(enc)["hidden_states"][:2] == (2, 1)
    dec = build("vibevoice_acoustic_tokenizer_decoder", "inference")  # its latents, channels first
    assert shapes(dec)["hidden_states"][:2] == (2, dec.model.config.hidden_size)
    # musicgen's decoder takes a row of ids per codebook, flattened into the batch; labels per codebook
    mg = build("musicgen", "training")
    books = mg.model.config.num_codebooks
    assert shapes(mg)["input_ids"] == (2 * books, 16) and shapes(mg)["labels"] == (2, 16, books)


def test_timm_and_torchvision_say_where_they_trace(tmp_path):
    try:
        import torchvision  # noqa: F401

        pytest.skip("torchvision imports here")
    except Exception:  # noqa: BLE001 - the CPU torch's environment: it does not
        pass
    r = opcov_here("trace", "timm:resnet18", "--out", str(tmp_path / "t.yaml"))
    assert r.returncode == 2 and "scripts/envs/vision.sh" in r.stderr and "Traceback" not in r.stderr
    with pytest.raises(UsageError, match="scripts/envs/vision.sh"):
        zoorun.architectures(every=True, libraries=("timm",))


# ---------------------------------------------------------------- architectures, shards, tables


def test_architectures_cover_transformers_and_the_curated_zoo():
    pytest.importorskip("transformers")
    from opcov.sources import zoo

    every = zoorun.architectures(every=True)
    names = [a.name for a in every]
    assert names == sorted(names) and len(names) == len(set(names))
    assert {e.name for e in zoo.ZOO} <= set(names)
    assert len(zoorun.transformers_types()) >= 600
    by = {a.name: a for a in every}
    assert by["llama"].spec == "llama" and by["deit"].spec == "hf:deit" and by["nn-gru"].curated
    sample = zoorun.architectures(sample=40)
    assert len(sample) == 40 and sample == zoorun.architectures(sample=40)
    with pytest.raises(
        UsageError, match="not a zoo name, transformers model type, or timm-/torchvision- model of the zoo: nope"
    ):
        zoorun.architectures(only=["bert,nope"])


def test_shards_partition_the_architectures():
    shards = [{i for i in range(10) if zoorun.in_shard(i, (k, 3))} for k in (1, 2, 3)]
    assert set().union(*shards) == set(range(10)) and sum(map(len, shards)) == 10


ROWS = [
    {
        "model": m,
        "mode": mode,
        "outcome": "traced",
        "dtype": "float32",
        "tracing": "fake",
        "ops": 3,
        "source": "zoo",
        "reason": "",
    }
    for m in ("a", "b", "c")
    for mode in zoorun.MODES
]
ROWS[3] = {
    **ROWS[3],
    "outcome": "cannot_trace",
    "dtype": None,
    "tracing": None,
    "ops": None,
    "reason": "cannot trace:\tone\nline",
}
HEADER = {"command": "opcov zoo trace --all", "torch": "t", "transformers": "x", "modes": "inference,training"}


def test_table_reads_back_and_shard_tables_merge_into_the_unsharded_one(tmp_path):
    whole = zoorun.table_text(ROWS, HEADER)
    path = tmp_path / "whole.tsv"
    path.write_text(whole)
    header, rows = zoorun.read_table(str(path))
    assert header == HEADER and [r["model"] for r in rows] == ["a", "a", "b", "b", "c", "c"]
    assert rows[3]["reason"] == "cannot trace: one line" and rows[3]["ops"] == ""
    parts = []
    for k in (1, 2):
        part = tmp_path / f"outcomes-shard-{k}-of-2.tsv"
        part.write_text(
            zoorun.table_text(
                [r for i, r in enumerate(ROWS) if zoorun.in_shard(i // 2, (k, 2))], {**HEADER, "shard": f"{k}/2"}
            )
        )
        parts.append(str(part))
    assert zoorun.merge_tables(parts[::-1]) == whole
    r = opcov_here("zoo", "merge", *parts, "--table", str(tmp_path / "merged.tsv"))
    assert r.returncode == 0, r.stderr
    assert (tmp_path / "merged.tsv").read_text() == whole
    with pytest.raises(UsageError, match="also in"):
        zoorun.merge_tables([parts[0], parts[0]])
    other = tmp_path / "other.tsv"
    other.write_text(zoorun.table_text(ROWS[:2], {**HEADER, "torch": "u"}))
    with pytest.raises(UsageError, match="header differs"):
        zoorun.merge_tables([parts[1], str(other)])


# ---------------------------------------------------------------- the run, end to end


def test_zoo_run_in_workers_resumes_and_writes_one_line_reasons(opcov, tmp_path):
    pytest.importorskip("transformers")
    root, table = tmp_path / "models", tmp_path / "zoo" / "outcomes.tsv"
    names = "nn-convnet,nn-gru,bark,jetmoe"
    selection = f"opcov zoo trace --only {names} --mode inference"
    journal = zoorun.journal_path(str(table))
    os.makedirs(os.path.dirname(journal))
    done = {
        "model": "nn-convnet",
        "mode": "inference",
        "outcome": "traced",
        "dtype": "float32",
        "tracing": "fake",
        "ops": 12345,
        "source": "zoo",
        "reason": "",
        "seconds": 0.1,
    }
    with open(journal, "w") as f:
        f.write(json.dumps({"settings": zoorun.header_for(selection, ("inference",))}) + "\n")
        f.write(json.dumps({"row": done}) + "\n")
    args = (
        "zoo",
        "trace",
        "--only",
        names,
        "--mode",
        "inference",
        "--jobs",
        "1",
        "--root",
        str(root),
        "--table",
        str(table),
    )
    r = opcov_here(*args)  # without --resume the journal is refused, in one line
    assert r.returncode == 2 and "--resume" in r.stderr and r.stderr.count("\n") == 1
    r = opcov(*args, "--resume")
    assert r.returncode == 1, r.stderr  # one model cannot be built
    assert "Traceback" not in r.stderr
    header, rows = zoorun.read_table(str(table))
    assert header["command"] == selection
    by = {row["model"]: row for row in rows}
    assert by["nn-convnet"]["ops"] == "12345"  # from the journal: not traced again
    assert not (root / "nn-convnet").exists()
    assert by["nn-gru"]["outcome"] == "traced" and int(by["nn-gru"]["ops"]) > 0
    assert load_yaml(root / "nn-gru" / "inference.yaml")["mode"] == "inference"
    bad = by["bark"]  # a pipeline of sub-models that generate() runs: nothing to trace, said in one line
    assert bad["outcome"] == "cannot_build" and bad["reason"].startswith("cannot build BarkModel")
    assert "no forward()" in bad["reason"] and "\n" not in bad["reason"]
    # jetmoe's expert routing reads values on the host: fake tensors cannot trace it, so it is traced
    # with real values on the computing stand-in (an accelerator's path), not on CPU
    moe = load_yaml(root / "jetmoe" / "inference.yaml")
    assert by["jetmoe"]["tracing"] == "real" and moe["provenance"]["tracing"] == "real"
    assert "computing PrivateUse1" in moe["provenance"]["traced_on"]
    assert "--real" in moe["provenance"]["command"] and "aten::_local_scalar_dense" in moe["ops"]
    # its real-valued branch run takes the fused GRU cell, which CPU lacks and the stand-in computes
    assert by["nn-gru"]["tracing"] == "fake+real"
    assert any(
        n.startswith("real values: a run") for n in load_yaml(root / "nn-gru" / "inference.yaml")["provenance"]["notes"]
    )
    assert not os.path.exists(journal)  # the table is complete: the journal is gone
    assert str(table) in r.stderr and "traced 3" in r.stderr
    first = table.read_text()
    r = opcov(*args, "--retry-failed")  # the traced rows are kept, the failure is traced again
    assert r.returncode == 1 and "cannot build 1, traced 3" in r.stderr, r.stderr
    assert table.read_text() == first and not (root / "nn-convnet").exists()
    r = opcov_here(
        "zoo", "trace", "--only", "nn-gru", "--mode", "inference", "--root", str(root), "--table", str(table)
    )
    assert r.returncode == 2 and "would replace them" in r.stderr and r.stderr.count("\n") == 1, r.stderr
    assert table.read_text() == first  # another selection never overwrites a table's outcomes
    r = opcov_here(*args[:-2], "--table", str(tmp_path / "none.tsv"), "--retry-failed")
    assert r.returncode == 2 and "no outcome table to retry" in r.stderr


def test_zoo_all_needs_a_selection():
    r = opcov_here("zoo", "trace", "--jobs", "2")
    assert r.returncode == 2 and "--all, --sample N or --only NAMES" in r.stderr


def test_shard_runs_merge_into_the_table_of_the_unsharded_run(opcov, tmp_path):
    """--shard 1/2 and 2/2 (a CI matrix) traced for real, joined by 'opcov zoo merge': byte for byte the
    table one unsharded run writes, and the same op sets."""
    pytest.importorskip("transformers")
    names = "bitnet,olmo"  # small transformers architectures (curated ones also run real-valued children)
    base = ("zoo", "trace", "--only", names, "--mode", "inference", "--jobs", "1")
    r = opcov(*base, "--root", str(tmp_path / "whole"), "--table", str(tmp_path / "whole.tsv"))
    assert r.returncode == 0, r.stderr
    parts = []
    for k in (1, 2):
        part = str(tmp_path / f"outcomes-shard-{k}-of-2.tsv")
        r = opcov(*base, "--shard", f"{k}/2", "--root", str(tmp_path / "sharded"), "--table", part)
        assert r.returncode == 0, r.stderr
        assert zoorun.read_table(part)[0]["shard"] == f"{k}/2"
        parts.append(part)
    assert {row["model"] for p in parts for row in zoorun.read_table(p)[1]} == set(names.split(","))
    r = opcov_here("zoo", "merge", *parts, "--table", str(tmp_path / "merged.tsv"))
    assert r.returncode == 0, r.stderr
    whole = (tmp_path / "whole.tsv").read_text()
    assert (tmp_path / "merged.tsv").read_text() == whole and whole.count("\ttraced\t") == 2
    # the attention mask check a real run makes (mask.all() on the host) is in each op set: merged from
    # a real-valued branch run in a worker whose device is the computing stand-in
    assert whole.count("\tfake+real\t") == 2
    for name in names.split(","):
        a, b = (load_yaml(tmp_path / root / name / "inference.yaml") for root in ("whole", "sharded"))
        for doc in (a, b):  # the time it was made, the file it was written to, and their checksum differ
            doc.pop("integrity"), doc["provenance"].pop("created"), doc["provenance"].pop("command")
        assert a == b
        assert a["ops"]["aten::all"]["forward"]["bool"]["seen"] == "real"


def test_a_job_over_the_memory_bound_is_killed_and_is_one_line(tmp_path):
    """A worker whose resident memory passes the bound during a job is killed, and the job is a
    cannot_trace row saying so (bounded here far below what importing torch takes)."""
    import collections

    rows = []
    pool = zoorun.Pool(1, str(tmp_path), 300, max_job_mb=64)
    pool.run(collections.deque([(zoorun.Arch("nn-gru", "nn-gru"), "inference")]), rows.append)
    assert len(rows) == 1 and rows[0]["outcome"] == "cannot_trace"
    assert rows[0]["reason"] == "over 64 MB of memory (killed)"


def _fake_only_copy(tmp_path, model: str):
    """The bundled inference op set of ``model`` saved under ``tmp_path`` without its branch-run notes."""
    from opcov.store import opset

    path = tmp_path / model / "inference.yaml"
    path.parent.mkdir()
    doc = opset.load(os.path.join(os.path.dirname(__file__), "..", "coverage", "models", model, "inference.yaml"))
    doc["provenance"]["notes"] = [n for n in doc["provenance"]["notes"] if "real-valued run" not in n]
    opset.OpSet(doc).save(str(path))
    return path


def test_a_branch_run_that_narrow_widths_break_is_made_again_repaired(tmp_path, monkeypatch):
    """qwen2_vl's real-valued branch run failed at narrow widths (its rotary sections [16, 24, 24] sum
    past the narrowed head dim: the real message below) and its op set kept the fake trace alone; the
    zoo's own repairs fix that failure, so the branch run is made again with the repair in its sizes,
    merged, and noted. The runs themselves are stood in for here (each costs a model build), the
    config and the repair are transformers' and opcov's own."""
    pytest.importorskip("transformers")
    from opcov.store import opset

    path = _fake_only_copy(tmp_path, "qwen2_vl")
    asked = []

    def branch_runs(job):
        asked.append(job["sizes"]["overrides"])
        rope = job["sizes"]["overrides"].get("text_config.rope_parameters") or {}
        if rope.get("mrope_section") is None:
            return {}, (
                "UsageError: cannot trace at aten::split_with_sizes: RuntimeError: split_with_sizes "
                "expects split_sizes to sum exactly to 8 (input tensor's size at dimension -1), but got "
                "split_sizes=[16, 24, 24] (the model itself)"
            )
        return {"runs": [{"variant": "inputs as built", "doc": opset.load(str(path))}]}, ""

    monkeypatch.setattr(realtrace, "branch_runs", branch_runs)
    narrow = {"text_config.hidden_size": 64, "text_config.num_attention_heads": 4}
    job = {
        "kind": "branches",
        "model": "hf:qwen2_vl",
        "mode": "inference",
        "dtype": "float32",
        "optimizer": "adamw",
        "narrowed": True,
        "sizes": {"batch": 2, "seq": 16, "image": None, "audio": None, "overrides": narrow, "inputs": []},
    }
    notes = realtrace.merge_saved(str(path), job).doc["provenance"]["notes"]
    assert len(asked) == 2 and asked[0] == narrow
    assert asked[1]["text_config.rope_parameters"]["mrope_section"] == [2, 3, 3]  # 8 frequencies
    assert any(n.startswith("the rotary sections [16, 24, 24] exceed the 8 rotary frequencies") for n in notes), notes
    assert any(
        n.startswith(
            "real values: a run on a computing PrivateUse1 device (inputs as built; at narrow "
            "widths: text_config.hidden_size=64"
        )
        and "mrope_section" in n
        for n in notes
    ), notes
    assert not any("real-valued run failed" in n for n in notes), notes


def test_a_branch_run_the_narrowest_widths_break_is_made_again_with_whole_heads(tmp_path, monkeypatch):
    """codegen's branch run failed at hidden 64 (the real message below; the eager CPU forward fails
    the same way, test above) and its op set kept the fake trace alone: it is made again at 4 heads
    of the config's own head dim, merged, and the op set says at which widths and why. The runs are
    stood in for (each costs a model build)."""
    pytest.importorskip("transformers")
    from opcov.sources import models
    from opcov.store import opset

    path = _fake_only_copy(tmp_path, "codegen")
    asked = []

    def branch_runs(job):
        asked.append(job["sizes"]["overrides"]["n_embd"])
        if job["sizes"]["overrides"]["n_embd"] == 64:
            return {}, (
                "UsageError: cannot trace at aten::mul.Tensor: RuntimeError: The size of tensor a (16) "
                "must match the size of tensor b (64) at non-singleton dimension 3 (the model itself)"
            )
        return {"runs": [{"variant": "inputs as built", "doc": opset.load(str(path))}]}, ""

    monkeypatch.setattr(realtrace, "branch_runs", branch_runs)
    narrow = tiny.overrides(models._transformers().AutoConfig.for_model("codegen"), width=True)
    job = {
        "kind": "branches",
        "model": "hf:codegen",
        "mode": "inference",
        "dtype": "float32",
        "optimizer": "adamw",
        "narrowed": True,
        "sizes": {"batch": 2, "seq": 16, "image": None, "audio": None, "overrides": narrow, "inputs": []},
    }
    notes = realtrace.merge_saved(str(path), job).doc["provenance"]["notes"]
    assert asked == [64, 1024]
    assert any(n.startswith("at narrow widths whose hidden size is 4 heads") and "tensor a (16)" in n for n in notes)
    assert any(n.startswith("real values: a run") and "n_embd=1024" in n for n in notes), notes
    assert not any("real-valued run failed" in n for n in notes), notes


def test_retry_failed_also_retries_op_sets_whose_branch_run_failed(tmp_path):
    """--retry-failed after a fix: the failed rows, and the traced rows whose op set notes that its
    real-valued branch run failed (the fix may let it through), are traced again; the rest are kept."""
    from opcov.store import opset

    root, table = tmp_path / "models", tmp_path / "outcomes.tsv"
    header = zoorun.header_for("opcov zoo trace --all", ("inference",))
    src = os.path.join(os.path.dirname(__file__), "..", "coverage", "models", "qwen2_vl", "inference.yaml")
    rows = []
    for name, note in (
        (
            "a",
            "the real-valued run failed (UsageError: cannot trace at aten::split_with_sizes: ...): "
            "branches on data are as fake tensors took them",
        ),
        ("b", "real values: a run on a computing PrivateUse1 device (inputs as built) saw 3 of ..."),
        ("c", None),
    ):
        doc = opset.load(src)
        doc["provenance"]["notes"] = [n for n in doc["provenance"]["notes"] if "real-valued run" not in n]
        doc["provenance"]["notes"] += [note] if note else []
        os.makedirs(root / name)
        opset.OpSet(doc).save(str(root / name / "inference.yaml"))
        rows.append(
            {
                "model": name,
                "mode": "inference",
                "outcome": "traced",
                "dtype": "float32",
                "tracing": "fake+real" if name == "b" else "fake",
                "ops": "40",
                "source": f"hf:{name}",
                "reason": "",
            }
        )
    rows.append(
        {
            "model": "d",
            "mode": "inference",
            "outcome": "cannot_trace",
            "dtype": "",
            "tracing": "",
            "ops": "",
            "source": "hf:d",
            "reason": "the worker died (signal SIGABRT)",
        }
    )
    table.write_text(zoorun.table_text(rows, header))
    journal = zoorun.Journal(zoorun.journal_path(str(table)), header, False)
    try:
        again = zoorun._keep_traced(journal, str(table), header, str(root))
        assert sorted(m for m, _ in journal.rows) == ["b", "c"]  # a (branch run failed) and d are traced again
        assert list(again) == [("a", "inference")]
    finally:
        journal.close()
    os.remove(zoorun.journal_path(str(table)))
    # the retry itself: a's new trace fails (no such model type here), so its traced row and op set stay
    before = (root / "a" / "inference.yaml").read_bytes()
    out = zoorun.run(
        [zoorun.Arch(n, f"hf:{n}") for n in "abcd"],
        modes=("inference",),
        root=str(root),
        table=str(table),
        retry=True,
        selection="opcov zoo trace --all",
        stream=io.StringIO(),
    )
    by = {r["model"]: r for r in out}
    assert by["a"]["outcome"] == "traced" and by["a"]["tracing"] == "fake"
    assert by["d"]["outcome"] == "cannot_build"
    assert (root / "a" / "inference.yaml").read_bytes() == before


def test_a_model_built_from_one_part_of_a_composite_config_is_narrowed_through_that_part():
    """llama4, mllama, emu3 and dots3_note build their causal LM from the composite config's text part:
    the branch run's narrow widths were the part's own top-level keys, which the composite ignores, so
    it ran at full width and was memory-killed (fake-only op sets). They are the part's keys now."""
    pytest.importorskip("transformers")

    composite = ladder.default_config("llama4")
    narrow = tiny.overrides(realtrace._set_on("hf:llama4", composite.text_config), width=True)
    assert narrow["text_config.hidden_size"] == 64 and "hidden_size" not in narrow
    llama = ladder.default_config("llama")
    assert realtrace._set_on("hf:llama", llama) is llama
