"""Signature classes: every argument that selects a backend's path is recorded per call, and a probe finding
counts against a model's call only when its case took the same path (opcov.sigclass).

The rules are checked on live torch calls, then end to end: a real model traced by ``opcov trace`` and
judged against a backend whose probe failed only on other arguments. Two families of calls each: scalar
selectors (addmm's alpha/beta under Linear; nearest upsampling's scale factor) and size-derived ones
(adaptive pooling's uneven bins; a max pool's dilation).
"""

import json
import textwrap

import pytest
from conftest import opcov_here, trace_factories
from test_check import TORCH, kernel, probed, registered

from opcov import sigclass
from opcov.probe import results
from opcov.probe.caserecord import CaseRecord
from opcov.store import data
from opcov.verdict import signature

torch = pytest.importorskip("torch")
aten = torch.ops.aten


def test_a_class_names_the_selectors_that_are_not_defaults():
    b, m1, m2 = torch.zeros(3), torch.zeros(2, 4), torch.zeros(4, 3)
    assert sigclass.of_call(aten.addmm.default, (b, m1, m2), {}, torch.Tensor) == "float32:1,float32:2,float32:2;"
    assert sigclass.of_call(aten.addmm.default, (b, m1, m2), {"alpha": 2}, torch.Tensor).endswith(";alpha=2")
    x = torch.zeros(1, 2, 4, 4)
    pool = sigclass.of_call(
        aten.max_pool2d_with_indices.default, (x, [2, 2], [], [0, 0], [2, 2], True), {}, torch.Tensor
    )
    assert pool == "float32:4;ceil_mode=True,dilation=2x2,kernel_size=2x2"
    up = aten.upsample_nearest2d.vec
    assert sigclass.of_call(up, (x, None, [1.5, 1.5]), {}, torch.Tensor).endswith("scale=frac")
    assert sigclass.of_call(up, (x, None, [2.0, 2.0]), {}, torch.Tensor).endswith("scale=int")
    assert sigclass.of_call(up, (x, [6, 6], None), {}, torch.Tensor).endswith("scale=frac")  # 4 -> 6
    adaptive = aten._adaptive_avg_pool2d.default
    assert sigclass.of_call(adaptive, (torch.zeros(1, 2, 5, 5), [3, 3]), {}, torch.Tensor).endswith(";bins=uneven")
    assert sigclass.of_call(adaptive, (torch.zeros(1, 2, 6, 6), [3, 3]), {}, torch.Tensor).endswith(";")
    sparse = torch.sparse_coo_tensor(torch.tensor([[0, 1], [1, 0]]), torch.ones(2), (2, 2))
    assert (
        sigclass.of_call(aten.mm.default, (sparse, torch.zeros(2, 2)), {}, torch.Tensor)
        == "float32:2!sparse,float32:2;"
    )
    z = torch.zeros(3, dtype=torch.complex64, requires_grad=True)
    assert sigclass.of_call(aten.abs.default, (z,), {}, torch.Tensor) == "complex64:1!rg;"


def test_a_slice_past_its_dimension_is_its_own_class():
    """CPU clamps a slice's bounds to the dimension; a backend that checks them raises (PyTorch/XLA on a start
    before -size: a sliding-window KV cache's ``keys[:, :, -4095:]`` on 9 positions). Python's ``x[a:]`` (an
    end of sys.maxsize) is no bound; a slice within its dimension keeps the plain class."""
    import sys

    sl = aten.slice.Tensor
    x = torch.zeros(2, 4, 9, 16)
    assert sigclass.of_call(sl, (x, 2, -4095, sys.maxsize), {}, torch.Tensor) == "float32:4;bounds=under"
    assert sigclass.of_call(sl, (x, 2, -4, sys.maxsize), {}, torch.Tensor) == "float32:4;"
    assert sigclass.of_call(sl, (x, 2, 0, 100), {}, torch.Tensor) == "float32:4;bounds=over"
    assert sigclass.of_call(sl, (x, -1, -100, 100), {}, torch.Tensor) == "float32:4;bounds=over/under"
    assert sigclass.of_call(sl, (torch.zeros(30, 2), 0, -20, None), {}, torch.Tensor) == "float32:2;"
    assert not sigclass.same_path("float32:4;", "float32:4;bounds=under")


def test_a_count_or_size_of_zero_that_empties_the_result_is_its_own_class():
    """PyTorch/XLA's repeat raises ('Concatenate expects at least one argument') when a repeat count is 0 and
    runs every other count; a probe case repeating by 0 must not count against a model's repeat by 2. The same
    class holds for a second family, a size of 0 given to new_zeros; an input already empty keeps its !empty."""
    x = torch.zeros(2, 3)
    assert sigclass.of_call(aten.repeat.default, (x, [2, 1]), {}, torch.Tensor) == "float32:2;"
    assert sigclass.of_call(aten.repeat.default, (x, [0, 2]), {}, torch.Tensor) == "float32:2;sizes=zero"
    assert sigclass.of_call(aten.new_zeros.default, (x, [0, 3]), {}, torch.Tensor) == "float32:2;sizes=zero"
    assert sigclass.of_call(aten.new_zeros.default, (x, [4, 3]), {}, torch.Tensor) == "float32:2;"
    empty = torch.zeros(0, 3)
    assert sigclass.of_call(aten.repeat.default, (empty, [0, 2]), {}, torch.Tensor) == "float32:2!empty;"
    assert not sigclass.same_path("float32:2;sizes=zero", "float32:2;")


def test_a_conversion_names_its_target_dtype():
    """PyTorch/XLA's _to_copy raises converting to complex32 (OpInfo's chalf) and runs every other target: a
    conversion's class names its target, and cases converting to other dtypes are other paths. A side that
    does not name it (an op set traced before) matches; the judge names the model's dtypes there."""
    x = torch.zeros(2, 3)
    assert sigclass.of_call(aten._to_copy.default, (x,), {"dtype": torch.complex32}, torch.Tensor) == (
        "float32:2;to=complex32"
    )
    assert sigclass.of_call(aten._to_copy.default, (x,), {}, torch.Tensor) == "float32:2;"
    assert not sigclass.same_path("float32:2;to=complex32", "float32:2;to=bfloat16")
    assert sigclass.same_path("float32:2;to=bfloat16", "float32:2;to=bfloat16")
    assert sigclass.same_path("float32:2;to=complex32", "float32:2;")  # not known on the call's side
    held = sigclass.with_targets("float32:2;", {"float32", "bfloat16"})
    assert held == "float32:2;to=bfloat16|float32"
    assert not sigclass.same_path("float32:2;to=complex32", held)
    assert sigclass.same_path("float32:2;to=bfloat16", held)
    assert sigclass.with_targets("float32:2;to=int64", {"float32"}) == "float32:2;to=int64"


def test_a_class_names_the_optional_tensors_left_out():
    """Tensors are named by position, so a batch norm given weight and bias and one given running statistics
    alone read alike; which optional tensors are absent tells them apart (PyTorch/XLA's batch-norm backward
    raised on one of them). A second family: a convolution without its bias. A text written before names no
    ``absent`` and matches either."""
    x, c = torch.randn(2, 3, 4, 4), torch.ones(3)
    bn = aten.native_batch_norm.default
    affine = sigclass.of_call(bn, (x, c, c, None, None, True, 0.1, 1e-5), {}, torch.Tensor)
    stats = sigclass.of_call(bn, (x, None, None, c, c, True, 0.1, 1e-5), {}, torch.Tensor)
    assert affine.split(";")[0] == stats.split(";")[0] == "float32:4,float32:1,float32:1"
    assert "absent=running_mean/running_var" in affine and "absent=bias/weight" in stats
    assert not sigclass.same_path(affine, stats)
    assert sigclass.same_path("float32:4,float32:1,float32:1;training=True", stats)
    w = torch.randn(3, 3, 1, 1)
    conv = aten.convolution.default
    plain = sigclass.of_call(conv, (x, w, None, [1, 1], [0, 0], [1, 1], False, [0, 0], 1), {}, torch.Tensor)
    biased = sigclass.of_call(conv, (x, w, c, [1, 1], [0, 0], [1, 1], False, [0, 0], 1), {}, torch.Tensor)
    assert ";absent=bias," in plain and ";absent=-," in biased
    assert not sigclass.same_path(plain, biased)
    assert "absent" not in sigclass.selectors(biased)  # nothing left out is the default


def test_adaptive_pooling_backward_names_uneven_bins():
    """Adaptive pooling whose input does not divide into its output takes another path (PyTorch/XLA falls back):
    the backward, which has no output_size argument, reads it from its gradient's and input's sizes; the
    same for the max family."""
    x = torch.zeros(1, 2, 5, 5)
    avg = aten._adaptive_avg_pool2d_backward.default
    assert sigclass.of_call(avg, (torch.zeros(1, 2, 3, 3), x), {}, torch.Tensor).endswith(";bins=uneven")
    assert sigclass.of_call(avg, (torch.zeros(1, 2, 5, 5), x), {}, torch.Tensor).endswith(";")
    mx = aten.adaptive_max_pool3d_backward.default
    x3, idx = torch.zeros(1, 2, 6, 6, 6), torch.zeros(1, 2, 4, 4, 4, dtype=torch.int64)
    assert "bins=uneven" in sigclass.of_call(mx, (torch.zeros(1, 2, 4, 4, 4), x3, idx), {}, torch.Tensor)
    assert "bins" not in sigclass.of_call(mx, (torch.zeros(1, 2, 3, 3, 3), x3, idx), {}, torch.Tensor)


def test_same_path_compares_the_kind_of_each_selector_both_sides_know():
    call = "float32:1,float32:2,float32:2;"
    assert not sigclass.same_path("float32:1,float32:2,float32:2;beta=0.2,alpha=0.6", call)  # an older case
    assert sigclass.same_path("float32:1,float32:2,float32:2;beta=0.2,alpha=0.6", call + "alpha=0.5,beta=0.3")
    assert sigclass.same_path("float32:4", "float32:4;dilation=2x2")  # an older case knows no dilation: kept
    assert not sigclass.same_path("float32:4;", "float32:4;dilation=2x2")
    assert sigclass.same_path("float32:4;dilation=3x3", "float32:4;dilation=2x2")
    assert not sigclass.same_path("float32:4;scale=frac", "float32:4;scale=int")
    assert not sigclass.same_path("float32:2!sparse,float32:2;", "float32:2,float32:2;")
    assert not sigclass.same_path("float32:2;", "float32:3;")
    # a node's classes left out ('...') are unknown: any finding may match them
    node = type("N", (), {"sig": "float32:4; ...", "shape": "[1, 2]"})()
    assert signature.call_classes(node) == ("float32:4;", "")
    assert signature.matches("float32:4;dilation=2x2", "")


FACTORIES = textwrap.dedent(
    """
    import torch
    import torch.nn as nn
    import torch.nn.functional as F

    class Up(nn.Module):
        def __init__(self, scale):
            super().__init__()
            self.scale = scale
            self.conv = nn.Conv2d(2, 2, 1)

        def forward(self, x):
            return F.interpolate(self.conv(x), scale_factor=self.scale, mode="nearest")

    def linear():
        torch.manual_seed(0)
        return nn.Sequential(nn.Linear(8, 4), nn.ReLU(), nn.Linear(4, 2)), (torch.randn(3, 8),)

    def up_int():
        torch.manual_seed(0)
        return Up(2.0), (torch.randn(1, 2, 4, 4),)

    def up_frac():
        torch.manual_seed(0)
        return Up(1.5), (torch.randn(1, 2, 4, 4),)

    class LastFrames(nn.Module):
        # An audio head that pools the last `window` frames of a clip (all of it when the clip is shorter).

        def __init__(self, window):
            super().__init__()
            self.window = window
            self.proj = nn.Linear(4, 2)

        def forward(self, x):
            return self.proj(x[:, -self.window:].mean(1))

    def tail_short_clip():
        torch.manual_seed(0)
        return LastFrames(32), (torch.randn(2, 10, 4),)

    def tail_long_clip():
        torch.manual_seed(0)
        return LastFrames(8), (torch.randn(2, 10, 4),)

    class Cast(nn.Module):
        # A head that hands its features on in another dtype (mixed precision, or class ids as int64).

        def __init__(self, dtype):
            super().__init__()
            self.dtype = dtype
            self.proj = nn.Linear(4, 4)

        def forward(self, x):
            return self.proj(x).to(self.dtype) * 2

    def cast_bf16():
        torch.manual_seed(0)
        return Cast(torch.bfloat16), (torch.randn(2, 4),)

    def cast_int64():
        torch.manual_seed(0)
        return Cast(torch.int64), (torch.randn(2, 4),)
    """
)


@pytest.fixture(scope="module")
def traced(tmp_path_factory):
    """Op sets of seven small models, traced by the real tracer (inference), in one child."""
    names = ("linear", "up_int", "up_frac", "tail_short_clip", "tail_long_clip", "cast_bf16", "cast_int64")
    return trace_factories(tmp_path_factory.mktemp("sig"), "sigmodels", FACTORIES, names, "inference")


def _judge(tmp_path, path, ops, static=None):
    root = tmp_path / "coverage"
    data.save(
        registered(ops={op: (static or kernel)() for op in ops}, fallback_enabled=static is not None),
        str(root / "fake" / f"registered-torch-{TORCH}-fakepkg-1.0.yaml"),
    )
    data.save(probed(ops=ops), str(root / "fake" / f"probed-torch-{TORCH}-fakepkg-1.0.yaml"))
    r = opcov_here("check", path, "--backend", "fake", "--coverage", str(root), "--format", "json")
    assert r.returncode in (0, 1), r.stdout + r.stderr
    verdict = json.loads(r.stdout)["verdicts"][0]
    return {o["op"]: o for o in verdict["ops"]}


def test_a_fallback_seen_only_with_other_scalars_does_not_count_against_a_linear(tmp_path, traced):
    """addmm fell back only with alpha/beta not 1 (PyTorch/XLA's eager addmm); a Linear's addmm has the
    defaults: it runs. A model that calls addmm with a fractional alpha gets the fallback."""
    failed = [f"fallback addmm|float32|{i} float32:1,float32:2,float32:2;beta=0.2,alpha=0.6" for i in range(2)]
    cell = {"fwd": "fallback", "cases": 6, "fails": 2, "case": "addmm|float32|0", "why": "ran through the CPU fallback"}
    ops = _judge(tmp_path, traced["linear"], {"aten::addmm": {"float32": dict(cell, failed=failed)}})
    assert ops["aten::addmm"]["outcome"] == "ok", ops["aten::addmm"]


def test_a_value_difference_seen_only_at_fractional_scale_counts_only_there(tmp_path, traced):
    """Nearest upsampling gave wrong values only at a non-integer scale factor: a model upsampling by 2 runs,
    one upsampling by 1.5 gets the value note."""
    op = "aten::upsample_nearest2d.vec"
    cell = {
        "fwd": "mismatch",
        "cases": 4,
        "fails": 1,
        "case": "interp|float32|3",
        "why": "output: values differ",
        "failed": ["mismatch interp|float32|3 float32:4;scale=frac"],
    }
    by_int = _judge(tmp_path, traced["up_int"], {op: {"float32": cell}})
    by_frac = _judge(tmp_path, traced["up_frac"], {op: {"float32": cell}})
    assert by_int[op]["outcome"] == "ok", by_int[op]
    assert by_frac[op]["outcome"] == "value_note", by_frac[op]


def test_a_pass_only_with_other_arguments_leaves_the_call_unverified(tmp_path, traced):
    """A cell whose passing cases (``ran``) all resized by whole numbers is no evidence for a model resizing
    by 1.5: that call is unknown ('unverified for these arguments'); the model resizing by 2 runs. A cell
    that keeps no list of what ran is judged as before."""
    op = "aten::upsample_nearest2d.vec"
    cell = {"fwd": "pass", "cases": 3, "case": "interp|float32|0", "ran": ["float32:4;scale=int"]}
    by_int = _judge(tmp_path, traced["up_int"], {op: {"float32": cell}})
    by_frac = _judge(tmp_path, traced["up_frac"], {op: {"float32": cell}})
    assert by_int[op]["outcome"] == "ok", by_int[op]
    assert by_frac[op]["outcome"] == "unknown" and "unverified for these arguments" in by_frac[op]["findings"][0]["why"]
    older = {k: v for k, v in cell.items() if k != "ran"}
    assert _judge(tmp_path, traced["up_frac"], {op: {"float32": older}})[op]["outcome"] == "ok"


def test_a_slice_that_raised_only_past_its_dimension_counts_only_there(tmp_path, traced):
    """A slice that raised only when its start lay before -size (a KV cache's window on a short prompt, here a
    plain audio head's last frames of a clip shorter than the window) fails that model; the same head on a clip
    longer than its window runs."""
    op = "aten::slice.Tensor"
    cell = {
        "fwd": "error",
        "cases": 5,
        "fails": 1,
        "case": "trace.m|float32|0",
        "why": "RuntimeError: Value out of range",
        "failed": ["error trace.m|float32|0 float32:3;bounds=under"],
        "ran": ["float32:3;", "float32:2;"],
    }
    short = _judge(tmp_path, traced["tail_short_clip"], {op: {"float32": cell}})
    long = _judge(tmp_path, traced["tail_long_clip"], {op: {"float32": cell}})
    assert short[op]["outcome"] == "fails", short[op]
    assert long[op]["outcome"] == "ok", long[op]


def test_a_conversion_fails_only_a_model_converting_to_that_dtype(tmp_path, traced):
    """_to_copy raised converting to complex32 and to bfloat16: a head casting to bfloat16 fails, one casting to
    int64 runs. Op sets name no conversion's target (the committed ones never did, and tracing again must make
    them): a conversion into a dtype none of the model's calls holds is not one of its conversions."""
    op = "aten::_to_copy"
    failed = ["error chalf|float32|0 float32:2;to=complex32", "error bf|float32|1 float32:2;to=bfloat16"]
    cell = {"fwd": "error", "cases": 6, "fails": 2, "case": "chalf|float32|0", "why": "RuntimeError: x"}
    verdicts = {}
    for name in ("cast_bf16", "cast_int64"):
        assert ";to=" not in open(traced[name]).read() and "absent=" not in open(traced[name]).read()
        verdicts[name] = _judge(tmp_path, traced[name], {op: {"float32": dict(cell, failed=failed)}})[op]
    assert verdicts["cast_bf16"]["outcome"] == "fails", verdicts["cast_bf16"]
    assert verdicts["cast_int64"]["outcome"] == "ok", verdicts["cast_int64"]


def test_a_failure_pinned_by_replaying_another_ops_failed_case_is_not_proof():
    """A composite's failed case (PyTorch/XLA's linalg.cond) is replayed one call at a time to pin the failure;
    in the process where the case just failed, slice and _linalg_svd raised, and both run when replayed in a fresh
    process. The probe tags such items, and a failure known only so leaves the model's call unknown; the same
    failure pinned directly (the OpInfo about the op) fails it."""
    rec = CaseRecord("linalg.cond|float32|1", "g", "linalg.cond", "float32", ["aten::linalg_cond"])
    rec.fwd = {
        "ops": [["aten::_linalg_svd", "float32"], ["aten::slice.Tensor", "float32"], ["aten::div.Tensor", "float32"]],
        "sigs": ["float32:3;", "float32:2;", "float32:2,float32:2;"],
        "status": "error",
        "why": "RuntimeError: Error while lowering",
        "localized": {"replayed": 3, "failed": [["aten::slice.Tensor", "float32"]]},
    }
    [(op, _, _, entry)] = list(results.entries(rec))
    assert op == "aten::slice.Tensor" and entry["failed"] == ["error linalg.cond|float32|1 float32:2; via=localized"]


@pytest.mark.parametrize(
    "name,op,sig",
    [
        ("tail_long_clip", "aten::slice.Tensor", "float32:3;"),
        ("linear", "aten::addmm", "float32:1,float32:2,float32:2;"),
    ],
)
def test_a_localized_failure_leaves_the_call_unknown(tmp_path, traced, name, op, sig):
    def cell(tag, cases=6):
        item = f"error other.op|float32|1 {sig}{tag}"
        return {"fwd": "error", "cases": cases, "fails": 1, "case": "other.op|float32|1", "why": "x", "failed": [item]}

    localized = _judge(tmp_path, traced[name], {op: {"float32": cell(" via=localized")}})[op]
    assert localized["outcome"] == "ok", localized  # its other cases ran
    assert "replayed alone right after a failed case of another op" in localized["findings"][0]["why"]
    alone = _judge(tmp_path, traced[name], {op: {"float32": cell(" via=localized", cases=1)}})[op]
    assert alone["outcome"] == "unknown", alone  # nothing else ran
    assert _judge(tmp_path, traced[name], {op: {"float32": cell("")}})[op]["outcome"] == "fails"


TRAINED = textwrap.dedent(
    """
    import torch
    from torch import nn
    import torch.nn.functional as F

    class Tagger(nn.Module):
        # token ids with a padding row, as a text model's embedding has
        def __init__(self):
            super().__init__()
            self.emb = nn.Embedding(10, 4, padding_idx=0)
            self.out = nn.Linear(4, 2)

        def forward(self, x):
            return self.out(self.emb(x))

    class Upsampler(nn.Module):
        def __init__(self):
            super().__init__()
            self.conv = nn.Conv2d(2, 2, 1)

        def forward(self, x):
            return F.interpolate(self.conv(x), scale_factor=1.5, mode="nearest")

    def tagger():
        torch.manual_seed(0)
        return Tagger(), (torch.tensor([[0, 3, 4], [5, 0, 1]]),)

    def upsampler():
        torch.manual_seed(0)
        return Upsampler(), (torch.randn(1, 2, 4, 4),)
    """
)


@pytest.mark.parametrize(
    "name,op,ran",
    [
        ("tagger", "aten::embedding", "float32:2!rg,int64:2;"),
        ("upsampler", "aten::upsample_nearest2d.vec", "float32:4!rg;scale=int"),
    ],
)
def test_a_backward_probed_on_other_arguments_leaves_it_to_the_backward_kernels(tmp_path, name, op, ran):
    """A backward slot's classes are its forward call's; the kernels the backward runs (embedding_dense_backward
    with the padding row, upsample_nearest2d_backward at 1.5) are in the op set's backward phase with their own
    classes and judged there. So a backward probed only on other arguments does not leave the training call
    unverified; the forward probed only on other arguments still does."""
    path = trace_factories(tmp_path, "trained", TRAINED, [name], "training")[name]
    both = {"fwd": "pass", "cases": 3, "case": "x|float32|0", "ran": [ran]}
    both.update({"bwd": "pass", "bwd_cases": 3, "bwd_case": "x|float32|0", "bwd_ran": [ran]})
    judged = _judge(tmp_path, path, {op: {"float32": both}})[op]
    forward = [f for f in judged["findings"] if f["direction"] == "forward"]
    backward = [f for f in judged["findings"] if f["direction"] == "backward"]
    assert forward and forward[0]["outcome"] == "unknown", judged  # the forward: another path than the probe's
    assert backward and all(f["outcome"] == "ok" for f in backward), judged


def test_a_negative_padding_crops_another_path():
    """PyTorch/XLA's replication pad raises on a negative padding (a crop) and runs positive ones: a probe case
    padding by -4 is not like a model padding by 1; reflection padding as a second family."""
    assert not sigclass.same_path("float32:4;padding=-4x5x0x0", "float32:4;padding=1x1x1x1")
    assert not sigclass.same_path("float32:3;padding=-1x2", "float32:3;padding=2x2")
    assert sigclass.same_path("float32:3;padding=3x2", "float32:3;padding=2x2")
    assert sigclass.covers("float32:4;padding=0x2x0x1", "float32:4;padding=1x1x1x1")  # some sides: still a padding


def test_a_case_probed_again_with_its_whole_class_replaces_its_older_text():
    """A probe written before classes named every argument kept 'float32:3,float32:1,...' (no ';'), which matches
    any arguments; the same case (same id) probed again names training=False. The newer text decides: a batch norm
    in training mode is not like it. addmm with alpha as a second family."""
    failed = [
        "error native_batch_norm|float32|1 float32:3,float32:1,float32:1,float32:1",
        "error native_batch_norm|float32|1 float32:3!rg,float32:1!rg,float32:1!rg,float32:1;training=False",
        "error native_batch_norm|float32|2 float32:2,float32:1",
    ]
    assert signature.newest(failed) == failed[1:]
    addmm = [
        "fallback addmm|float32|0 float32:1,float32:2,float32:2",
        "fallback addmm|float32|0 float32:1,float32:2,float32:2;alpha=0.6",
    ]
    assert signature.newest(addmm) == addmm[1:]


@pytest.mark.parametrize(
    "name,op,ran",
    [
        ("linear", "aten::addmm", "float32:1,float32:2,float32:2;"),
        ("up_int", "aten::upsample_nearest2d.vec", "float32:4;scale=int"),
    ],
)
def test_a_failure_of_unknown_class_does_not_count_where_the_calls_class_ran(tmp_path, traced, name, op, ran):
    """A failing case whose class the probe could not record (the device raised in an op CPU's path never called)
    counts against every call, unless a case of the call's own class ran clean: then it was another class."""
    cell = {
        "fwd": "error",
        "cases": 6,
        "fails": 1,
        "case": "other|float32|5",
        "why": "x",
        "failed": ["error other|float32|5 ?"],
    }
    assert _judge(tmp_path, traced[name], {op: {"float32": cell}})[op]["outcome"] == "fails"
    judged = _judge(tmp_path, traced[name], {op: {"float32": dict(cell, ran=[ran])}})[op]
    assert judged["outcome"] == "ok", judged


@pytest.mark.parametrize(
    "name,op,ran",
    [
        ("linear", "aten::addmm", "float32:1,float32:2,float32:2;alpha=2"),
        ("tail_long_clip", "aten::slice.Tensor", "float32:3;bounds=under"),
    ],
)
def test_a_call_no_case_had_falls_back_where_the_backend_registers_no_kernel(tmp_path, traced, name, op, ran):
    """Every probe case fell back, none with the model's arguments: the call is unknown from the probe, but where the
    backend registers no kernel for the op (only its CPU fallback catches it) every argument falls back, and the
    verdict says so (PyTorch/XLA's multi_margin_loss, grid_sampler_3d); with a kernel registered it stays unknown."""
    failed = [f"fallback x|float32|0 {ran}"]
    cell = {
        "fwd": "fallback",
        "cases": 1,
        "fails": 0,
        "case": "x|float32|0",
        "why": "ran through the fallback",
        "failed": failed,
    }
    no_kernel = lambda: {"fwd": "fallback", "res": "fallback", "bwd": "none", "bwd_res": "not_applicable"}  # noqa: E731
    assert _judge(tmp_path, traced[name], {op: {"float32": cell}}, static=no_kernel)[op]["outcome"] == "fallback"
    assert _judge(tmp_path, traced[name], {op: {"float32": cell}})[op]["outcome"] == "unknown"


def test_the_probe_keeps_the_classes_that_ran_and_marks_the_list_partial_when_a_merge_cannot_say():
    """Merged with cases that kept no classes (an older file), the list still shows what ran, marked partial:
    it cannot show that a class did not run (opcov.verdict.signature.uncovered then says nothing)."""
    from opcov.probe.results import combine

    a = {"status": "pass", "case": "x|0", "cases": 2, "fails": 0, "samples": ["x"], "ran": ["float32:2;"]}
    b = {"status": "pass", "case": "x|1", "cases": 1, "fails": 0, "samples": ["x"], "ran": ["float32:2;alpha=2"]}
    both = combine(a, b)
    assert both["ran"] == ["float32:2;", "float32:2;alpha=2"] and "ran_part" not in both
    older = {"status": "pass", "case": "y|0", "cases": 4, "fails": 0, "samples": ["y"]}
    merged = combine(a, older)
    assert merged["ran"] == ["float32:2;"] and merged["ran_part"] is True
    assert combine(merged, b)["ran_part"] is True  # a partial list stays partial


def test_a_failing_list_cut_by_other_models_repeats_still_names_every_class():
    """More traced models than a list keeps, each mismatching nll_loss_forward's output 1 in one class: the merged list keeps one
    item per class first and is marked whole, so the verdict may still match classes and outputs against a
    model outside the zoo; a list cut with a class left out is not."""
    from opcov.probe.results import combine
    from opcov.store.cells import MAX_FAILED, ProbedCell, record_cells
    from opcov.verdict.signature import cut

    def entry(model, sig="float32:2,int64:1;reduction=1"):
        return {"status": "mismatch", "case": f"trace.{model}|float32|0", "cases": 1, "fails": 0, "samples": [model],
                "failed": [f"mismatch trace.{model}|float32|0 {sig} out=1"]}  # fmt: skip

    merged = entry("m00")
    for i in range(1, MAX_FAILED + 15):
        merged = combine(merged, entry(f"m{i:03d}"))
    assert len(merged["failed"]) == MAX_FAILED and merged["classes_whole"] is True
    slot = ProbedCell.from_dict({"fwd": "mismatch", "failed": merged["failed"], "classes_whole": True}).slot("forward")
    assert not cut(slot)
    many = entry("a00", "float32:2;x=0")
    for i in range(1, MAX_FAILED + 2):
        many = combine(many, entry(f"a{i:03d}", f"float32:2;x={i}"))  # more classes than fit
    assert "classes_whole" not in many
    # a file cut at an older, smaller cap stays cut when merged under this one: its mark is kept
    older = {**entry("o00"), "failed": merged["failed"][:16], "classes_whole": True}
    again = combine(older, entry("b00", "float32:2,int64:1;reduction=2"))
    assert len(again["failed"]) == 17 and again["classes_whole"] is True
    assert cut(record_cells({"float32": {"fwd": "mismatch", "failed": many["failed"]}})["float32"].slot("forward"))


def test_which_index_an_argument_names_is_one_path():
    """An embedding's padding row 0 and row 5 take one path (a probe case with padding_idx=1 covers a model's
    padding_idx=0); giving none is another. A second family: nll_loss's ignore_index."""
    assert sigclass.covers("float32:2,int64:2;padding_idx=1", "float32:2,int64:2;padding_idx=0")
    assert not sigclass.covers("float32:2,int64:2;", "float32:2,int64:2;padding_idx=0")
    assert sigclass.same_path("float32:2,int64:1;ignore_index=3", "float32:2,int64:1;ignore_index=0")
    assert not sigclass.same_path("float32:2,int64:1;", "float32:2,int64:1;ignore_index=0")


def test_a_scalar_that_only_shapes_an_activations_values_is_no_path():
    """softshrink's lambd of 0.2 runs the kernel OpInfo's default 0.5 ran, as any leaky_relu slope and any
    hardtanh bounds do; a pass on one covers the others (arguments that pick a path, as reduction, still count)."""
    assert sigclass.covers("float32:2;", "float32:2;lambd=0.2")
    assert sigclass.covers("float32:2;negative_slope=0.01", "float32:2;negative_slope=0.2")
    assert sigclass.same_path("float32:2;max_val=6,min_val=0", "float32:2;")
    assert not sigclass.covers("float32:2,int64:1;", "float32:2,int64:1;reduction=0")


def test_the_values_nan_to_num_writes_are_no_path():
    """A tabular model's nan_to_num(nan=0, posinf=10, neginf=-10) runs the kernel OpInfo's nan=0.5 or its defaults
    ran: which values replace NaN and the infinities picks no path, as an activation's bounds do not."""
    assert sigclass.covers("float32:1!rg;nan=0.5", "float32:2;nan=0,neginf=-10,posinf=10")
    assert sigclass.same_path("float32:2;", "float32:2;posinf=1")
    assert not sigclass.same_path("float32:1;nan=0", "float32:0d;nan=0")  # ranks still count


def test_which_dimensions_a_transpose_swaps_is_no_path():
    """A statistics head's in-place transpose of dims 0 and 1 takes the path OpInfo's transpose of 0 and -1 took;
    a second family, attention's out-of-place transpose of 1 and 2, likewise (``dim`` was never a selector)."""
    assert sigclass.covers("float32:4!nc;dim0=0,dim1=-1", "float32:4!nc;dim0=1,dim1=2")
    assert sigclass.same_path("float32:4;dim0=0,dim1=-1", "float32:4;dim1=2")
    assert not sigclass.same_path("float32:4;dim0=0,dim1=-1", "float32:3;dim1=2")  # ranks still count


def test_an_amount_of_padding_or_kernel_is_one_path_whatever_its_size():
    """Replication padding by 4 takes the path padding by 1 took (a pass on one covers the other), and so does
    a conv padded by 2 against one padded by 1; no padding at all is another path, and a dilation of 2 is
    not a dilation of 1."""
    assert sigclass.covers("float32:4;padding=1x1x1x1", "float32:4;padding=4x4x4x4")
    assert sigclass.same_path("float32:4,float32:4;padding=1x1", "float32:4,float32:4;padding=2x2")
    assert not sigclass.same_path("float32:4,float32:4;padding=0x0", "float32:4,float32:4;padding=2x2")
    assert not sigclass.same_path("float32:4;dilation=1x1", "float32:4;dilation=2x2")


def test_the_name_a_linalg_op_gives_its_error_check_is_no_path():
    """Every linalg op checks its ``info`` with ``_linalg_check_errors(info, api_name, is_matrix)``, naming itself:
    a probe case from linalg.inv covers a model's torch.linalg.solve and linalg.cholesky (two families of callers),
    while whether the info is a matrix's still counts."""
    case = "int32:0d;api_name=linalg.inv,is_matrix=True"
    for caller in ("torch.linalg.solve", "linalg.cholesky"):
        assert sigclass.covers(case, f"int32:0d;api_name={caller},is_matrix=True")
        assert sigclass.same_path(case, f"int32:0d;api_name={caller},is_matrix=True")
        assert not sigclass.same_path(case, f"int32:0d;api_name={caller},is_matrix=False")


def test_an_einsum_equation_selects_a_path_by_its_structure_not_its_letters():
    """Attention's 'bhqd_bhkd->bhqk' and OpInfo's 'aij_ajk->aik' are both plain contractions (PyTorch/XLA lowers
    them as XLA's einsum); a broadcast ('...') or a diagonal (a letter twice in one operand) takes another path."""
    plain = "float32:4,float32:4;equation=bhqd_bhkd->bhqk"
    assert sigclass.same_path("float32:4,float32:4;equation=aij_ajk->aik", plain)
    assert sigclass.covers("float32:3,float32:3;equation=aij_ajk->aik", plain)
    assert not sigclass.same_path("float32:4,float32:4;equation=...ij_...jk->...ik", plain)
    assert not sigclass.same_path("float32:4,float32:4;equation=bii_bij->bj", plain)
    assert sigclass.same_path("float32:3;equation=bii->bi", "float32:3;equation=ajj->a")
