"""``opcov trace MODEL --on BACKEND``: the op set recorded on the backend's own device, its own path.

The xla tests need a Python with PyTorch/XLA (scripts/envs/xla.sh makes .envs/xla; OPCOV_XLA_PYTHON names
another); without one they are skipped, and say so."""

import json
import os

import pytest
from conftest import ROOT, load_yaml, needs_xla, opcov_here, run_opcov, run_xla

from opcov.store import opset


def kids(doc, op):
    """The ops below every ``op`` composite node of the op set's call tree."""
    tree = opset.nodes(doc)
    ids = {n.id for n in tree if n.op == op}
    return {n.op for n in tree if n.parent in ids}


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
    v = json.loads(opcov_here("check", str(out), "-b", "cpu", "--format", "json").stdout)["verdicts"][0]
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
    r = opcov_here("trace", "nn-gru", *args, "--out", str(out))
    assert r.returncode == 2 and r.stderr.startswith(said) and r.stderr.count("\n") == 1, r.stderr
    assert not out.exists()  # never the stand-in trace instead


def test_xla_without_torch_xla_says_so_in_one_line(tmp_path):
    import importlib.util

    if importlib.util.find_spec("torch_xla") is not None:
        pytest.skip("torch_xla is installed in this Python")
    r = opcov_here("trace", "nn-gru", "--on", "xla", "--out", str(tmp_path / "x.yaml"))
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
    assert doc["provenance"]["replaced_modules"] == ["torch.nn.GRU by torch_xla.experimental.gru.GRU"]
    stand_in = load_yaml(os.path.join(ROOT, "coverage", "models", "nn-gru", "training.yaml"))
    assert "aten::_thnn_fused_gru_cell" in stand_in["ops"]

    tr = tmp_path / "transformer.yaml"
    r = run_xla("trace", "nn-transformer", "--on", "xla", "--mode", "training", "--out", str(tr))
    assert r.returncode == 0, r.stderr
    doc = load_yaml(tr)
    assert "aten::addmm" not in kids(doc, "aten::linear") and "aten::mm" in kids(doc, "aten::linear")
    stand_in = load_yaml(os.path.join(ROOT, "coverage", "models", "nn-transformer", "training.yaml"))
    assert "aten::addmm" in kids(stand_in, "aten::linear")


def _forward_kernels(doc, op):
    return [n for n in opset.nodes(doc) if n.op == op and n.phase == "forward" and n.kind == "kernel"]


@needs_xla
def test_on_xla_a_training_step_keeps_grad_and_its_own_backwards_reads(tmp_path):
    """PyTorch/XLA functionalizes: a dispatch mode sees its inner tensors, which never require grad,
    while autograd above them makes each node. The op set still marks the calls that made a node
    (``grad``), ties each backward call to its forward call, and leaves out of ``reads=`` what only
    the op's own backward reads: nll_loss's total_weight (a loss) and batch norm's saved statistics
    (a normalisation layer), whose value differences on xla no model reads."""
    out = tmp_path / "convnet.yaml"
    r = run_xla("trace", "nn-convnet", "--on", "xla", "--mode", "training", "--out", str(out))
    assert r.returncode == 0, r.stderr
    doc = load_yaml(out)
    for op in ("aten::convolution", "aten::native_batch_norm", "aten::addmm"):
        nodes = _forward_kernels(doc, op)
        assert nodes and all(n.grad for n in nodes), op
    assert {n.reads for n in _forward_kernels(doc, "aten::native_batch_norm")} == {(0,)}

    out = tmp_path / "resnet.yaml"
    r = run_xla("trace", "resnet", "--on", "xla", "--mode", "training", "--out", str(out))
    assert r.returncode == 0, r.stderr
    doc = load_yaml(out)
    loss = _forward_kernels(doc, "aten::nll_loss_forward")
    assert loss and all(n.grad for n in loss) and {n.reads for n in loss} == {(0,)}
    backward = [n for n in opset.nodes(doc) if n.op == "aten::nll_loss_backward"]
    assert backward and all(n.issued_by in {n.id for n in loss} for n in backward)
    v = json.loads(opcov_here("check", str(out), "-b", "xla", "--format", "json").stdout)["verdicts"][0]
    assert not any("nll_loss_forward" in str(note) for note in v["value_notes"]), v["value_notes"]


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
    v = json.loads(opcov_here("check", str(out), "-b", "xla", "-b", "tpu", "--format", "json").stdout)["verdicts"]
    assert v[0]["variant"] == "given" and set(v[0]["variants"]) == {"padded_mask"}
    assert "recorded on xla itself (opcov trace --on xla): xla's own path" in v[0]["notes"]
    assert "recorded on xla itself (opcov trace --on xla): xla's own path, which tpu's may not be" in v[1]["notes"]


# ---------------------------------------------------------------- check judges a backend on its own path
# (the op sets under coverage/models/<model>/on/, made by 'scripts/envs/xla-data.sh ondevice'; no xla needed)


def check_json(*args):
    r = opcov_here("check", *args, "--format", "json")
    assert r.returncode in (0, 1), r.stderr
    return json.loads(r.stdout)["verdicts"]


def op_names(v):
    return {o["op"] for o in v["ops"]}


def test_check_judges_xla_on_the_op_set_recorded_on_xla():
    """nn-lstm's stand-in op set holds the fused LSTM cell, which xla never runs (its LSTM is addmm,
    sigmoid, tanh): judged on it, xla 'fails' a model that ran and matched CPU. With an op set recorded
    on xla bundled, check judges xla on that one and says which path it judged; another backend keeps
    the stand-in's."""
    xla, tpu = check_json("nn-lstm", "-b", "xla", "-b", "tpu", "--mode", "inference")
    assert xla["verdict"] in ("runs", "runs_with_fallback"), xla["says"]
    assert not any("_thnn_fused_lstm_cell" in op for op in op_names(xla))
    own = os.path.join("coverage", "models", "nn-lstm", "on", "xla-inference.yaml")
    assert any(n.startswith("recorded on xla itself (opcov trace --on xla)") and own in n for n in xla["notes"])
    assert any(n.startswith("recorded on a stand-in device") for n in tpu["notes"])


def test_an_op_set_file_is_judged_as_given():
    """A file names its op set: no other is put in its place, even where one was recorded on the backend."""
    stand_in = os.path.join(ROOT, "coverage", "models", "nn-lstm", "inference.yaml")
    (v,) = check_json(stand_in, "-b", "xla")
    assert not any("nn-lstm/on/" in s for s in v["sources"])  # not coverage/models/nn-lstm/on/xla-inference.yaml
    assert not any("recorded on xla itself" in n for n in v["notes"])
    assert any(n.startswith("recorded on a stand-in device") for n in v["notes"])
    (c,) = check_json(stand_in, "-b", "cuda")  # the stand-in's file keeps the fused branch cuda takes
    assert any("_thnn_fused_lstm_cell" in op for op in op_names(c))


def test_a_modules_replacement_by_the_backend_is_not_a_plain_runs():
    """import torch_xla replaces nn.GRU with its own scan GRU, whose training gradients were ~1000x the
    tolerance off on a real run though every op it dispatches passes its probes: the op set recorded
    on xla names the replacement, and the verdict says values may differ, naming it, never `runs`."""
    doc = load_yaml(os.path.join(ROOT, "coverage", "models", "nn-gru", "on", "xla-training.yaml"))
    assert doc["provenance"]["replaced_modules"] == ["torch.nn.GRU by torch_xla.experimental.gru.GRU"]
    (v,) = check_json("nn-gru", "-b", "xla", "--mode", "training")
    assert v["verdict"] == "runs_with_value_note", v["says"]
    assert "python:torch_xla.experimental.gru.GRU" in op_names(v)
    assert not any("gru_cell" in op for op in op_names(v))
    r = opcov_here("check", "nn-gru", "-b", "xla", "--mode", "training", "--fail-on", "value_note")
    assert r.returncode == 1 and "torch_xla.experimental.gru.GRU" in r.stdout


def test_op_sets_recorded_on_a_backend_stay_out_of_the_stand_in_readers():
    """gaps, compare and the site read the stand-in op sets; the on-device ones are not extra modes of a model."""
    from opcov.store import layout

    files = layout.model_files(os.path.join(ROOT, "coverage"))
    assert not any(f"{os.sep}on{os.sep}" in f for f in files)
    own = [f for f in files if f.endswith(os.path.join("models", "nn-gru", "training.yaml"))]
    assert len(own) == 1  # the stand-in's, once
    for model in ("nn-lstm", "nn-gru", "nn-transformer", "nn-convnet"):
        for mode in ("inference", "training"):
            path = os.path.join(ROOT, "coverage", "models", model, "on", f"xla-{mode}.yaml")
            doc = load_yaml(path)
            assert doc["provenance"]["path"] == "backend" and not opset.validate(doc, path)
            assert doc["provenance"]["command"].startswith(f"opcov trace {model} --mode {mode} ")
