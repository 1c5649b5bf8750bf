"""``opcov trace MODEL --on BACKEND``: the op set recorded on the backend's own device, its own path.

The xla tests need a Python with PyTorch/XLA (scripts/envs/xla.sh makes .envs/xla; OPCOV_XLA_PYTHON names
another); without one they are skipped, and say so."""

import json
import os

import pytest
from conftest import ROOT, child_env, load_yaml, run_opcov

from opcov.store import opset

XLA_PYTHON = os.environ.get("OPCOV_XLA_PYTHON") or os.path.join(ROOT, ".envs", "xla", "bin", "python")
needs_xla = pytest.mark.skipif(
    not os.path.exists(XLA_PYTHON), reason=f"no Python with PyTorch/XLA at {XLA_PYTHON} (OPCOV_XLA_PYTHON)"
)


def kids(doc, op):
    """The ops below every ``op`` composite node of the op set's call tree."""
    tree = opset.nodes(doc)
    ids = {n.id for n in tree if n.op == op}
    return {n.op for n in tree if n.parent in ids}


def run_xla(*args):
    import subprocess

    return subprocess.run(
        [XLA_PYTHON, "-m", "opcov", *args],
        capture_output=True,
        text=True,
        env=child_env(PJRT_DEVICE="CPU"),
        timeout=900,
        cwd=ROOT,
    )


def test_on_cpu_records_the_cpus_own_path(tmp_path):
    """The stand-in runs nn.LSTM as the accelerator path (_thnn_fused_lstm_cell); CPU itself takes its
    own (oneDNN's rnn layer), and --on cpu records that, saying so in the provenance."""
    out = tmp_path / "lstm.yaml"
    r = run_opcov("trace", "nn-lstm", "--on", "cpu", "--mode", "inference", "--out", str(out))
    assert r.returncode == 0, r.stderr
    doc = load_yaml(out)
    prov = doc["provenance"]
    assert prov["path"] == "backend" and prov["target_device"] == "cpu" and prov["tracing"] == "real"
    assert prov["traced_on"].startswith("cpu (CPU itself")
    assert prov["command"] == f"opcov trace nn-lstm --mode inference --on cpu --out {out}"
    assert not any(op.startswith("aten::_thnn_fused_lstm_cell") for op in doc["ops"])
    assert all(n.variants == ("given",) for n in opset.nodes(doc))
    assert not opset.validate(doc, str(out))
    v = json.loads(run_opcov("check", str(out), "-b", "cpu", "--format", "json").stdout)["verdicts"][0]
    assert "recorded on cpu itself (opcov trace --on cpu): cpu's own path" in v["notes"]


@pytest.mark.parametrize(
    "args, said",
    [
        (
            ("--on", "tpu"),
            "opcov: error: --on tpu: opcov records only on backends it can run in this process (cpu, xla)",
        ),
        (("--on", "nosuch"), "opcov: error: unknown backend 'nosuch'; known: "),
        (("--on", "cpu", "--real"), "opcov: error: --on cpu records real values already; leave out --real"),
    ],
)
def test_a_backend_that_cannot_record_here_is_one_line(tmp_path, args, said):
    out = tmp_path / "x.yaml"
    r = run_opcov("trace", "nn-gru", *args, "--out", str(out))
    assert r.returncode == 2 and r.stderr.startswith(said) and r.stderr.count("\n") == 1, r.stderr
    assert not out.exists()  # never the stand-in trace instead


def test_xla_without_torch_xla_says_so_in_one_line(tmp_path):
    import importlib.util

    if importlib.util.find_spec("torch_xla") is not None:
        pytest.skip("torch_xla is installed in this Python")
    r = run_opcov("trace", "nn-gru", "--on", "xla", "--out", str(tmp_path / "x.yaml"))
    assert r.returncode == 2
    assert r.stderr.startswith("opcov: error: --on xla: torch_xla is not installed in this Python")


@needs_xla
def test_on_xla_records_torch_xlas_gru_and_linear_path(tmp_path):
    """On xla: torch_xla's scan-based GRU replaces nn.GRU above the dispatcher (no fused GRU cell), and
    ATen's linear skips the fused addmm for a 3-d input (`!input.is_xla()`): what the stand-in records
    for both is another backend's path."""
    gru = tmp_path / "gru.yaml"
    r = run_xla("trace", "nn-gru", "--on", "xla", "--mode", "training", "--out", str(gru))
    assert r.returncode == 0, r.stderr
    doc = load_yaml(gru)
    assert doc["provenance"]["path"] == "backend" and doc["provenance"]["traced_on"].startswith("xla (PyTorch/XLA")
    assert not any("gru" in op for op in doc["ops"])  # neither aten::gru nor _thnn_fused_gru_cell
    stand_in = load_yaml(os.path.join(ROOT, "coverage", "models", "nn-gru", "training.yaml"))
    assert "aten::_thnn_fused_gru_cell" in stand_in["ops"]

    tr = tmp_path / "transformer.yaml"
    r = run_xla("trace", "nn-transformer", "--on", "xla", "--mode", "training", "--out", str(tr))
    assert r.returncode == 0, r.stderr
    doc = load_yaml(tr)
    assert "aten::addmm" not in kids(doc, "aten::linear") and "aten::mm" in kids(doc, "aten::linear")
    stand_in = load_yaml(os.path.join(ROOT, "coverage", "models", "nn-transformer", "training.yaml"))
    assert "aten::addmm" in kids(stand_in, "aten::linear")


@needs_xla
def test_on_xla_records_a_transformers_model_per_input_variant(tmp_path):
    """llama on xla: each input variant is its own run on the device (the padded mask's own calls are
    named so), sdpa takes the math path (xla answers no _fused_sdp_choice), and check says which path."""
    out = tmp_path / "llama.yaml"
    r = run_xla("trace", "llama", "--on", "xla", "--mode", "inference", "--out", str(out))
    assert r.returncode == 0, r.stderr
    doc = load_yaml(out)
    tree = opset.nodes(doc)
    assert {n.variants for n in tree} == {("given",), ("padded_mask",), ("given", "padded_mask")}
    assert "aten::bmm" in kids(doc, "aten::scaled_dot_product_attention")
    assert not any(op.startswith("aten::_scaled_dot_product_flash") for op in doc["ops"])
    v = json.loads(run_opcov("check", str(out), "-b", "xla", "-b", "tpu", "--format", "json").stdout)["verdicts"]
    assert v[0]["variant"] == "given" and set(v[0]["variants"]) == {"padded_mask"}
    assert "recorded on xla itself (opcov trace --on xla): xla's own path" in v[0]["notes"]
    assert "recorded on xla itself (opcov trace --on xla): xla's own path, which tpu's may not be" in v[1]["notes"]
