"""Every registered path, on a real dispatcher: the Python test backend with planted kernels.

Each scan runs in a child process, since PrivateUse1 can be claimed once per process.
"""

import os

import pytest
from conftest import SCAN_REACH, dumps, load_yaml, opcov_here, run_scan

SPEC = {
    "kernels": {
        "aten::add.out": "pass",  # add.Tensor / add_.Tensor reach it: out_variant
        "aten::mm": "pass",  # an own kernel
        "aten::relu": "pass",
        "aten::linear": "pass",  # overrides a CompositeImplicitAutograd op that has an autograd kernel
        "aten::layer_norm": "pass",  # overrides one that has none: derivative lost
    },
    "autograd": ["aten::relu"],  # the backend's own autograd kernel
}


def scan(tmp_path, reach_cache, spec, *extra):
    out = tmp_path / "scan.yaml"
    proc = run_scan(
        SCAN_REACH,
        "opcovtest",
        "--import",
        "opcov.sources.pybackend",
        "--out",
        str(out),
        *extra,
        OPCOV_PYBACKEND_SPEC=dumps(spec),
        XDG_CACHE_HOME=reach_cache,
    )
    assert proc.returncode == 0, proc.stderr
    return load_yaml(out), proc


@pytest.fixture(scope="module")
def raise_fallback(tmp_path_factory, reach_cache):
    return scan(tmp_path_factory.mktemp("a"), reach_cache, dict(SPEC, fallback="raise"))[0]


def test_own_kernel_keeps_its_registration_site(raise_fallback):
    mm = raise_fallback["ops"]["aten::mm"]
    assert mm["fwd"] == "kernel" and mm["res"] == "registered"
    assert "pybackend.py" in mm["src"]


def test_structured_op_reaches_backend_through_out_kernel(raise_fallback):
    ops = raise_fallback["ops"]
    assert ops["aten::add.Tensor"]["fwd"] == "out_variant"
    assert ops["aten::add.Tensor"]["via"] == ["aten::add.out"]
    assert ops["aten::add.Tensor"]["res"] == "registered"
    # mul.out is not planted: mul.Tensor reaches only the (disabled) fallback
    assert ops["aten::mul.Tensor"]["fwd"] == "out_variant"
    assert ops["aten::mul.Tensor"]["res"] == "fallback"


def test_composite_resolves_to_what_it_reaches(raise_fallback):
    ops = raise_fallback["ops"]
    # matmul is CompositeImplicitAutograd: on 2-d inputs it reaches mm, which is planted (not on its first
    # OpInfo sample, 1-d, which reaches dot: the schema's fitting call comes first)
    assert ops["aten::matmul"]["fwd"] == "composite"
    assert "aten::mm" in ops["aten::matmul"]["via"]
    assert ops["aten::matmul"]["res"] == "registered"
    # a composite whose reach meets an op without a kernel is no better than that op
    reached = [ops[v]["res"] for v in ops["aten::softmax.int"]["via"]]
    assert ops["aten::softmax.int"]["res"] in reached


def test_fallback_is_recorded_with_its_state(raise_fallback):
    prov = raise_fallback["provenance"]
    assert prov["fallback"]["present"] is True
    assert prov["fallback"]["enabled"] is False
    assert raise_fallback["ops"]["aten::abs.out"]["fwd"] == "fallback"


def test_autograd_override_and_lost_derivative(raise_fallback):
    ops = raise_fallback["ops"]
    assert ops["aten::relu"]["bwd"] == "backend_kernel"
    assert ops["aten::relu"]["bwd_res"] == "registered"
    # layer_norm is CompositeImplicitAutograd with no autograd kernel of its own: a direct
    # backend kernel bypasses the decomposition and with it the derivative
    assert ops["aten::layer_norm"]["fwd"] == "kernel"
    assert ops["aten::layer_norm"]["bwd"] == "lost"
    assert ops["aten::layer_norm"]["bwd_res"] == "missing"
    # linear is CompositeImplicitAutograd too, but torch registers an autograd kernel for it
    assert ops["aten::linear"]["fwd"] == "kernel"
    assert ops["aten::linear"]["bwd"] == "formula"
    # the generic formula path elsewhere, with what its backward reaches
    assert ops["aten::mm"]["bwd"] == "formula"
    assert "aten::mm" in ops["aten::mm"]["bwd_via"]


def test_host_only_ops_are_not_applicable(raise_fallback):
    assert raise_fallback["ops"]["aten::sym_size.int"]["fwd"] == "not_applicable"


def test_without_fallback_unplanted_ops_are_missing(tmp_path, reach_cache):
    doc, proc = scan(tmp_path, reach_cache, dict(SPEC, fallback=None))
    ops = doc["ops"]
    assert ops["aten::abs.out"]["fwd"] == "missing"
    assert ops["aten::mul.Tensor"]["res"] == "missing"
    assert doc["provenance"]["fallback"] == {"present": False}
    assert "registered, unverified" in proc.stdout


def test_enabled_cpu_fallback_is_recorded(tmp_path, reach_cache):
    doc, proc = scan(tmp_path, reach_cache, dict(SPEC, fallback="cpu"))
    assert doc["provenance"]["fallback"]["enabled"] is True
    assert "ENABLED" in proc.stdout


@pytest.mark.parametrize(
    "name, composite, reaches",
    [
        # N, C, HxW and group must agree with the input's shape
        ("aten::native_group_norm", "explicit", "aten::var_mean.correction"),
        # one stride per size
        ("aten::as_strided_scatter", "explicit_nonfunctional", "aten::as_strided"),
        # randint's low must be below its high (was low=1, high=1)
        ("aten::randint.low", "explicit", "aten::random_.from"),
        # a composite's wrapped scalar reaches the recorder as a number (remainder.Scalar -> remainder.Tensor)
        ("aten::remainder.Scalar", "explicit", "aten::remainder.Tensor"),
    ],
)
def test_reach_synthesizes_arguments_that_agree(name, composite, reaches):
    """Arguments valid alone but not together left these composites unresolved (and wav2vec2, swin
    'unknown' on tpu); the recorder now makes them agree."""
    from opcov.scan import reach
    from opcov.torchenv import import_torch

    torch = import_torch()
    fwd, _ = reach._record_one(torch, reach._recorder(torch), name, composite)
    assert fwd.ops is not None, fwd.error
    assert reaches in fwd.ops


def test_sdpa_choice_on_cpu_is_read_by_calling_the_chooser_and_seeing_the_kernel():
    """cpu's scaled_dot_product_attention takes its fused kernel without dropout and the math path with it:
    read by calling aten::_fused_sdp_choice and confirmed by running the call (no disagreement)."""
    from collections import Counter

    import torch

    from opcov.scan import sdpa

    calls = Counter(
        {
            ("float32", ((2, 4, 8, 16),) * 3, "bool", 0.0, False, False): 3,
            ("float32", ((2, 4, 8, 16),) * 3, "none", 0.1, False, False): 1,
        }
    )
    got = sdpa.choose_here(torch, calls)
    assert got["calls"] == {"aten::_scaled_dot_product_flash_attention_for_cpu": 3, sdpa.MATH: 1}
    assert "disagree" not in got and got["kernels"][0] == "aten::_scaled_dot_product_flash_attention_for_cpu"


def test_reach_takes_calls_that_reach_the_op_where_the_schema_does_not_fit():
    """select_backward's reach was recorded on schema-made inputs that do not fit (a [3, 4] gradient for a
    [2, 3, 4] input): unresolved, and a ViT step 'unknown' on cuda. Where the schema's float32 call does
    not fit, a call that reaches the op for real (as an OpInfo sample's backward makes, copied to meta)
    is used."""
    from opcov.scan import reach
    from opcov.torchenv import import_torch

    torch = import_torch()
    rec = reach._recorder(torch)
    grad = torch.empty(3, 4, device="meta")
    wrong = ((torch.empty(5, device="meta"), [2], 0, 0), {})  # does not fit: skipped, the next one is used
    fwd, _ = reach._record_one(
        torch, rec, "aten::select_backward", "explicit_nonfunctional", [wrong, ((grad, [2, 3, 4], 0, 1), {})]
    )
    assert fwd.source == "opinfo" and fwd.ops is not None and "aten::select.int" in fwd.ops
    schema_only, _ = reach._record_one(torch, rec, "aten::select_backward", "explicit_nonfunctional")
    assert schema_only.source == "schema"


def test_rereach_resolves_from_the_files_own_paths():
    from opcov.scan import rereach

    ops = {
        "aten::a": {"fwd": "composite", "via": ["aten::b", "aten::c"], "bwd": "formula", "bwd_via": ["aten::b"]},
        "aten::b": {"fwd": "kernel", "bwd": "none"},
        "aten::c": {"fwd": "fallback", "bwd": "none"},
        "aten::d": {"fwd": "composite", "bwd": "formula"},
    }
    rereach.resolve(ops)
    assert [ops[n]["res"] for n in sorted(ops)] == ["fallback", "registered", "fallback", "unresolved"]
    assert ops["aten::a"]["bwd_res"] == "registered" and ops["aten::d"]["bwd_res"] == "unresolved"


def test_cuda_reach_is_resolved_for_the_ops_a_vit_step_needs():
    """cuda's file came from a CUDA build; its composites' reach, recorded on meta, is re-recorded here
    (python -m opcov.scan.rereach): none of the ops a new user met stays unresolved, and the file says so."""
    from conftest import ROOT, load_yaml

    doc = load_yaml(os.path.join(ROOT, "coverage", "cuda", "registered-torch-2.13.0+cu130.yaml"))
    for name in (
        "aten::select_backward",
        "aten::remainder.Scalar",
        "aten::binary_cross_entropy_with_logits",
        "aten::randint.low",
        "aten::bmm",
    ):
        rec = doc["ops"][name]
        assert "unresolved" not in (rec["res"], rec["bwd_res"]), (name, rec)
    assert "python -m opcov.scan.rereach" in doc["provenance"]["reach"]
    assert "zoo's recorded calls" in doc["provenance"]["reach"]
    # the CUDA build's scan left 596; schema and OpInfo calls 455; with the zoo's calls, cpu calls and outs
    # made as the functional's results: 300; torchgen's rules: 165; recipes: 90. The bar is an 80%
    # cut (119). Each that stays says why.
    assert doc["summary"]["aten"]["res"].get("unresolved", 0) <= 119
    from opcov.scan import rereach

    why = rereach.reasons(doc["ops"])
    assert sum(why.values()) == doc["summary"]["aten"]["res"]["unresolved"] and "no reach recorded" not in why


def test_a_reach_being_recorded_elsewhere_is_waited_for_not_recorded_again(tmp_path, monkeypatch):
    """Two scans at once (shards, test workers) make the minutes-long recording once: the second waits
    on the cache lock, then reads what the first wrote."""
    import threading

    from opcov import torchenv
    from opcov.scan import reach

    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))

    class Catalog:
        torch_version = "9.9.9"

        def get(self, name):
            return None

    def recorded_again(todo, keep=None):
        raise AssertionError(f"recorded again: {todo}")

    monkeypatch.setattr(reach, "_record_isolated", recorded_again)
    name = reach.cache_name("9.9.9")
    got = {}
    with torchenv.cache_lock(name):  # 'the first scan' is recording
        t = threading.Thread(target=lambda: got.update(zip(("fwd", "bwd"), reach.record(["aten::x"], Catalog()))))
        t.start()
        t.join(0.5)
        assert t.is_alive()  # waiting on the lock
        entry = {"ops": ["aten::y"], "error": None, "source": "schema"}
        torchenv.write_cache(name, {"aten::x": [entry, None]})
    t.join(10)
    assert got["fwd"]["aten::x"].ops == ("aten::y",) and got["bwd"] == {}


def test_reach_makes_an_out_variants_outs_from_its_functional():
    """An out= overload was called with outs made from the schema alone (a float out for a bool result,
    the wrong shape): 244 of cuda's 455 unresolved ops were out= overloads. Its outs are now made as its
    functional overload's results."""
    from opcov.scan import reach
    from opcov.torchenv import import_torch

    torch = import_torch()
    rec = reach._recorder(torch)
    fwd, _ = reach._record_one(torch, rec, "aten::float_power.Scalar_out", "implicit")
    assert fwd.ops is not None and "aten::pow.Scalar_out" in fwd.ops, fwd
    fwd, _ = reach._record_one(torch, rec, "aten::clip.out", "implicit")  # clip needs a bound: min given
    assert fwd.ops == ("aten::clamp.out",), fwd


def test_reach_calls_on_cpu_what_meta_cannot_run():
    """A data-dependent op (where(condition) is nonzero) cannot run on meta tensors: it is called on small
    cpu tensors instead, and the file says so in the reach's source."""
    from opcov.scan import reach
    from opcov.torchenv import import_torch

    torch = import_torch()
    fwd, _ = reach._record_one(torch, reach._recorder(torch), "aten::where", "implicit")
    assert fwd.source == "schema on cpu" and "aten::nonzero" in fwd.ops, fwd


def test_reach_replays_the_zoo_calls_and_binds_opinfo_samples_by_type():
    """batch_norm's schema-made call does not fit (running stats of the wrong size); the call a zoo
    model made (its shapes and dtype) does, forward and backward. einsum's OpInfo sample is made for
    torch.einsum(operands, equation): its values are bound to the schema's (equation, tensors) by type."""
    from opcov.scan import reach
    from opcov.torchenv import import_torch

    torch = import_torch()
    rec = reach._recorder(torch)
    zoo = [{"dtype": "float32", "shapes": [[2, 8, 4, 4], [8], [8], [8]]}]  # weight left out
    assert reach._record_one(torch, rec, "aten::batch_norm", "implicit")[0].ops is None
    fwd, bwd = reach._record_one(torch, rec, "aten::batch_norm", "implicit", (), zoo)
    assert fwd.source == "zoo" and "aten::native_batch_norm" in fwd.ops, fwd
    assert bwd is not None and "aten::native_batch_norm_backward" in bwd.ops, bwd
    sample = (([torch.rand(3, 4), torch.rand(4, 5)], "ij,jk->ik"), {})
    fwd, _ = reach._record_one(torch, rec, "aten::einsum", "implicit", [sample])
    assert fwd.source == "opinfo" and "aten::bmm" in fwd.ops, fwd


def test_summary_says_why_reach_stays_unresolved(tmp_path):
    """opcov summary counts the ops whose composite reach stays unresolved, by why."""
    from conftest import ROOT

    from opcov.scan import rereach

    ops = {
        "aten::a": {"fwd": "composite", "res": "unresolved", "why": "reach unresolved: RuntimeError: sparse layout"},
        "aten::b": {"fwd": "composite", "res": "unresolved", "via": ["aten::a"]},
        "aten::c": {"fwd": "composite", "res": "unresolved", "why": "reach unresolved: RuntimeError: bad 3 of 4"},
    }
    assert rereach.reasons(ops) == {
        "an op of sparse tensors (the dense kernel only raises)": 1,
        "reaches an unresolved op": 1,
        "no input fits: RuntimeError: bad N of N": 1,
    }
    path = os.path.join(ROOT, "coverage", "cuda", "registered-torch-2.13.0+cu130.yaml")
    r = opcov_here("summary", path)
    assert r.returncode == 0, r.stderr
    from conftest import load_yaml

    unresolved = load_yaml(path)["summary"]["aten"]["res"].get("unresolved", 0)
    assert f"aten overloads whose forward reach stays unresolved, {unresolved}, by why:" in r.stdout


def test_a_call_that_hangs_the_recorder_is_skipped_not_waited_for(tmp_path, monkeypatch):
    """oneDNN's LSTM backward (aten::lstm.input, recorded on cpu) has hung a recording child on a lock
    forever, and with it 'opcov scan'. A call that gives no answer in the call timeout kills the child;
    the next child goes on without that call, and an op whose every call hangs says so."""
    import sys
    import time

    from opcov.scan import reach

    child = tmp_path / "child.py"
    child.write_text(
        "import json, sys, time\n"
        "todo = json.load(sys.stdin)\n"
        "for name, _kind, _zoo, skip in todo:\n"
        "    for i in range(10):\n"
        "        if i in skip:\n"
        "            continue\n"
        "        print(json.dumps(['@', name, i]), flush=True)\n"
        "        if name == 'aten::hangs' or i == 0:\n"
        "            time.sleep(60)\n"
        "        print(json.dumps([name, {'ops': [], 'error': None, 'source': f'call {i}'}, None]), flush=True)\n"
        "        break\n"
    )
    monkeypatch.setattr(reach, "_CHILD", [sys.executable, str(child)])
    done: dict = {}
    start = time.monotonic()
    reach._run_children([["aten::first_call_hangs", None], ["aten::hangs", None]], {}, done, call_timeout=1.0)
    assert time.monotonic() - start < 30
    assert done["aten::first_call_hangs"][0]["source"] == "call 1"  # its hanging call 0 skipped
    assert done["aten::hangs"][0] == {"ops": None, "error": "recording hung (no answer in 1 s)"}
