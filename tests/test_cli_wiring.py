"""Flags that no other test drives through the command line: each test runs ``opcov`` as a user does and
asserts what the flag changes in its output or exit code."""

import json

import pytest
import yaml
from conftest import opcov_here, run_opcov
from test_check import TORCH, kernel, model, registered

from opcov.store import data, opset

MISSING = {"fwd": "missing", "res": "missing", "bwd": "none", "bwd_res": "not_applicable"}


def _call(dtype="float32", grad=False):
    return {dtype: {"calls": 1, **({"grad": True} if grad else {})}}


def _save_backend(cov, name, ops):
    data.save(registered(name, ops=ops), str(cov / name / f"registered-torch-{TORCH}-fakepkg-1.0.yaml"))


def _save_model(cov, name, mode, ops):
    opset.save(model(ops, mode=mode, name=name), str(cov / "models" / name / f"{mode}.yaml"))


# ---------------------------------------------------------------- check --manifest --fail-on unclaimed


def test_check_fails_on_an_unclaimed_dtype_only_when_asked(tmp_path):
    cov = tmp_path / "coverage"
    _save_backend(cov, "fake", {"aten::mm": kernel()})
    path = tmp_path / "tiny.yaml"
    opset.save(model({"aten::mm": {"forward": _call("float32")}}, mode="inference"), str(path))
    manifest = tmp_path / "manifest.yaml"
    manifest.write_text("manifest: 1\nbackend: fake\nclaims:\n  aten::mm: [bfloat16]\n")
    base = ("check", str(path), "-b", "fake", "--coverage", str(cov), "--manifest", str(manifest))
    assert opcov_here(*base).returncode == 0  # runs; the manifest alone does not fail the gate
    r = opcov_here(*base, "--fail-on", "unclaimed")
    assert r.returncode == 1, r.stdout + r.stderr
    assert "not claimed by the manifest: aten::mm float32" in r.stderr and "Traceback" not in r.stderr
    manifest.write_text("manifest: 1\nbackend: fake\nclaims:\n  aten::mm: [float32]\n")
    assert opcov_here(*base, "--fail-on", "unclaimed").returncode == 0


def test_check_fail_on_unclaimed_without_a_manifest_says_what_it_needs(tmp_path):
    cov = tmp_path / "coverage"
    _save_backend(cov, "fake", {"aten::mm": kernel()})
    path = tmp_path / "tiny.yaml"
    opset.save(model({"aten::mm": {"forward": _call()}}, mode="inference"), str(path))
    r = opcov_here("check", str(path), "-b", "fake", "--coverage", str(cov), "--fail-on", "unclaimed")
    assert r.returncode != 0 and "--manifest" in r.stderr and "Traceback" not in r.stderr


# ---------------------------------------------------------------- gaps --top N (text) and compare --mode


@pytest.fixture(scope="module")
def zoo(tmp_path_factory):
    """Backends a (every kernel) and b (no aten::sub, aten::mul; aten::mm without a backward), and three
    models: the op blocking the most models ranks first."""
    cov = tmp_path_factory.mktemp("zoo") / "coverage"
    nodiff = {"fwd": "kernel", "res": "registered", "bwd": "not_implemented", "bwd_res": "missing"}
    _save_backend(cov, "a", {op: kernel() for op in ("aten::mm", "aten::sub.Tensor", "aten::mul.Tensor")})
    _save_backend(cov, "b", {"aten::mm": nodiff, "aten::sub.Tensor": MISSING, "aten::mul.Tensor": MISSING})
    for name, ops in {
        "m1": ("aten::sub.Tensor", "aten::mul.Tensor"),
        "m2": ("aten::sub.Tensor",),
        "m3": ("aten::sub.Tensor",),
    }.items():
        _save_model(cov, name, "inference", {op: {"forward": _call()} for op in ops})
    _save_model(cov, "m1", "training", {"aten::mm": {"forward": _call(grad=True), "backward": _call()}})
    return cov


def test_gaps_top_limits_the_text_listing(zoo):
    full = opcov_here("gaps", "b", "--coverage", str(zoo))
    assert full.returncode == 0, full.stderr
    assert "aten::sub.Tensor" in full.stdout and "aten::mul.Tensor" in full.stdout
    r = opcov_here("gaps", "b", "--coverage", str(zoo), "--top", "1", "--mode", "inference")
    assert r.returncode == 0, r.stderr
    assert "aten::sub.Tensor" in r.stdout  # blocks 3 models: first
    assert "aten::mul.Tensor" not in r.stdout
    assert "1 more (--top N)" in r.stdout


def test_gaps_top_limits_json_too(zoo):
    r = opcov_here("gaps", "b", "--coverage", str(zoo), "--top", "1", "--format", "json")
    assert r.returncode == 0, r.stderr
    assert len(json.loads(r.stdout)) == 1


def test_compare_mode_judges_only_that_modes_op_sets(zoo):
    def lacking(mode):
        r = opcov_here("compare", "a", "b", "--coverage", str(zoo), "--mode", mode, "--format", "json")
        assert r.returncode == 0, r.stderr
        out = json.loads(r.stdout)
        assert out["opsets"] == (1 if mode == "training" else 3), out
        return {d["op"] for d in out["lacks"].get("b", [])}

    training, inference = lacking("training"), lacking("inference")
    assert "aten::mm" in training and "aten::sub.Tensor" not in training  # only m1's training op set
    assert "aten::sub.Tensor" in inference and "aten::mm" not in inference


# ---------------------------------------------------------------- ops --format yaml


def test_ops_format_yaml_is_the_json_answer(tmp_path):
    cov = tmp_path / "coverage"
    _save_backend(cov, "fake", {"aten::mm": kernel(), "aten::sub.Tensor": MISSING})
    base = ("ops", "aten::mm", "-b", "fake", "--coverage", str(cov))
    as_json = opcov_here(*base, "--format", "json")
    as_yaml = opcov_here(*base, "--format", "yaml")
    assert as_json.returncode == 0 and as_yaml.returncode == 0, as_json.stderr + as_yaml.stderr
    assert yaml.safe_load(as_yaml.stdout) == json.loads(as_json.stdout)
    assert "aten::mm" in as_yaml.stdout and not as_yaml.stdout.lstrip().startswith("{")


# ---------------------------------------------------------------- scan --no-reach, trace --input (torch)


def test_scan_no_reach_leaves_composites_unresolved_and_says_so(tmp_path):
    pytest.importorskip("torch")
    out = tmp_path / "cpu.yaml"
    r = run_opcov("scan", "cpu", "--no-reach", "--out", str(out), timeout=900)
    assert r.returncode == 0, r.stderr
    doc = data.load(str(out))
    assert "--no-reach" in doc["provenance"]["command"]
    composites = [rec for rec in doc["ops"].values() if rec["fwd"] == "composite"]
    assert composites and all(rec["res"] == "unresolved" for rec in composites)
    assert not any(rec.get("via") for rec in composites)


def test_trace_input_makes_the_named_forward_input(tmp_path):
    """bert's forward takes token_type_ids without requiring it: made only when --input names it (without
    the flag the op set's notes list input_ids alone)."""
    pytest.importorskip("transformers")
    out = tmp_path / "bert.yaml"
    base = ("trace", "hf:bert", "--mode", "inference", "--device", "cpu", "--set", "num_hidden_layers=1")
    r = run_opcov(*base, "--input", "token_type_ids", "--out", str(out), timeout=900)
    assert r.returncode == 0, r.stderr
    doc = opset.load(str(out))
    made = next(n for n in doc["provenance"]["notes"] if n.startswith("inputs made"))
    assert made.endswith(": input_ids, token_type_ids"), made
    assert "--input token_type_ids" in doc["provenance"]["command"]
