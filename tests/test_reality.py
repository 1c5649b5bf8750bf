"""Verdicts checked against reality: zoo models run for real on planted Python PrivateUse1 backends.

Each case scans the planted backend with opcov's own scan, judges the committed op set with
opcov check, runs the model on the device, and asserts that the two agree (see opcov.testing.reality).
"""

import os

from opcov.testing import reality

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
MODELS = os.path.join(ROOT, "coverage", "models")


def run(tmp_path, spec, models, modes, probe=False):
    import torch

    return {
        (o.model, o.mode): o
        for o in reality.reality_check(
            [spec], models, modes, str(tmp_path), probe=probe, torch_version=torch.__version__, models_dir=MODELS
        )
    }


def test_cpu_fallback_cannot_run_aten_stubs_but_runs_the_rest(tmp_path):
    out = run(tmp_path, "cpu-fallback", ["nn-convnet", "bert"], ["training"])
    conv, bert = out[("nn-convnet", "training")], out[("bert", "training")]
    # convolution reaches ATen's convolution_overrideable stub, which no CPU fallback catches
    assert (conv.predicted, conv.actual) == ("fails", "raised")
    assert "convolution_overrideable" in conv.detail and "aten::convolution" in conv.problems
    # everything else runs through the fallback, with CPU's numbers (tied weights re-tied after .to())
    assert (bert.predicted, bert.actual) == ("runs_with_fallback", "ran")


def test_missing_kernels_fail_where_predicted(tmp_path):
    out = run(tmp_path, "no-softmax", ["vit", "nn-convnet", "nn-lstm"], ["inference"])
    vit, conv, lstm = out[("vit", "inference")], out[("nn-convnet", "inference")], out[("nn-lstm", "inference")]
    assert (vit.predicted, vit.actual) == ("fails", "raised") and "aten::_safe_softmax" in vit.problems
    assert (conv.predicted, conv.actual) == ("runs", "ran")
    # the fused LSTM cell is CUDA/accelerator-only: the test backend cannot plant it (CPU lacks it)
    assert (lstm.predicted, lstm.actual) == ("fails", "raised")
    assert all(o.agrees for o in out.values())


def test_probe_sees_what_registration_cannot(tmp_path):
    """A registered kernel that raises: the scan claims it, the probe (OpInfo + replayed model calls) catches it."""
    out = run(tmp_path, "raising-layer-norm", ["bert"], ["inference"], probe=True)
    bert = out[("bert", "inference")]
    assert (bert.predicted, bert.actual) == ("fails", "raised")
    assert bert.problems == ["aten::native_layer_norm"] and "planted error" in bert.detail


def test_vendor_shaped_backend_is_judged_at_its_own_kernels(tmp_path):
    """Kernels for what TorchTPU registers (linear, silu_backward, ... with their autograd kernels), fallback
    off: the verdict judges tpu's own linear, not mm/t, and agrees with the run, forward and backward."""
    out = run(tmp_path, "vendor-shaped", ["llama", "mixtral"], ["training"])
    llama = out[("llama", "training")]
    assert (llama.predicted, llama.actual) == ("runs", "ran"), llama
    # bfloat16 mixtral: tpu's own linear rounds the router logits otherwise than CPU's decomposition, so a
    # near-tie token picks another expert; top-k decisions are replayed from the CPU run and the values
    # compared per tensor, so it ran (it did)
    mixtral = out[("mixtral", "training")]
    assert (mixtral.predicted, mixtral.actual) == ("runs", "ran"), mixtral
    assert "top-k decisions replayed from the CPU run" in mixtral.detail


def test_an_overriding_kernel_that_raises_is_caught(tmp_path):
    """tpu's own linear raises: only judging linear itself (probed) can see it; its decomposition is fine."""
    out = run(tmp_path, "vendor-raising-linear", ["gpt2"], ["inference"], probe=True)
    gpt2 = out[("gpt2", "inference")]
    assert (gpt2.predicted, gpt2.actual) == ("fails", "raised") and "planted error in aten::linear" in gpt2.detail
    assert gpt2.problems == ["aten::linear"]


def test_an_op_only_a_data_dependent_branch_calls_is_judged(tmp_path):
    """Without aten::all, transformers' host-side "is the mask all ones?" check raises; only the op set's
    real-valued run (seen=real) has the op, so the verdict can say fails."""
    out = run(tmp_path, "vendor-no-mask-check", ["llama"], ["inference"])
    llama = out[("llama", "inference")]
    assert (llama.predicted, llama.actual) == ("fails", "raised") and "aten::all" in llama.problems


def test_a_wrong_kernel_gives_wrong_values():
    """A planted addmm + 1.0: the model runs, and the comparison with CPU says its values are wrong
    (the real run alone: no scan or verdict needed to see what happened)."""
    actual, detail = reality.run_for_real(reality.SPECS["wrong-addmm"](None), "gpt2", "inference")
    assert actual == "wrong" and "x tolerance" in detail, detail
