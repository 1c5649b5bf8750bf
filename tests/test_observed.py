"""Observed runs ('opcov run', opcov.tracing.observe): a model's step really run on a device, saved,
linted, and shown by 'opcov check' beside the verdict from coverage data (opcov.verdict.observed).
Runs on the planted PrivateUse1 test backend in child processes."""

from __future__ import annotations

import json
import os
import shutil

import pytest
from conftest import ROOT, needs_xla, opcov_here, run_opcov, run_xla

from opcov.store import observed as files
from opcov.verdict import observed

PB = ["--import", "opcov.sources.pybackend"]
MODEL = "nn-lstm"


def _run(tmp_path, name, spec, mode="training"):
    out = str(tmp_path / f"{name}.json")
    proc = run_opcov(
        "run", MODEL, "-b", "opcovtest", *PB, "--mode", mode, "--out", out, OPCOV_PYBACKEND_SPEC=json.dumps(spec)
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.load(open(out)), proc.stdout


@pytest.mark.parametrize(
    "planted,ran,match,says",
    [
        ({}, True, True, "values match CPU"),
        ({"aten::_thnn_fused_lstm_cell": "raise"}, False, None, "planted error"),
        ({"aten::_thnn_fused_lstm_cell": "small_error"}, True, False, "values differ from CPU"),
    ],
)
def test_a_run_records_what_really_happened(tmp_path, planted, ran, match, says):
    doc, stdout = _run(tmp_path, "r", {"kernels": planted, "fallback": "cpu"})
    assert files.problems(doc, "x") == []  # what it writes passes its own validation
    assert doc["result"]["ran"] is ran and says in stdout
    cell = doc["ops"]["aten::_thnn_fused_lstm_cell"]["float32"]  # every dispatched op, per dtype key
    assert cell["calls"] >= 1
    if ran:
        assert doc["result"]["values"]["match"] is match and doc["result"]["values"]["compared_tensors"] > 2
    else:
        assert "planted error" in cell["raised"]  # the op that raised is named
    assert doc["backend_record"]["source"].startswith("none")  # the test backend keeps no record


def _cov_with_run(tmp_path, doc, mode="training"):
    """A coverage folder with cpu's data, nn-lstm's op sets and ``doc`` filed as nn-lstm's run on cpu."""
    cov = tmp_path / "coverage"
    shutil.copytree(os.path.join(ROOT, "coverage", "cpu"), cov / "cpu")
    shutil.copytree(os.path.join(ROOT, "coverage", "models", MODEL), cov / "models" / MODEL)
    doc = json.loads(json.dumps(doc))
    doc["backend"] = {"name": "cpu", "package": "torch", "version": "2.13.0", "device_type": "cpu"}
    doc["model"]["mode"] = mode
    target = files.path_for(str(cov), "cpu", MODEL, mode)
    os.makedirs(os.path.dirname(target), exist_ok=True)
    open(target, "w").write(files.dumps(doc))
    return cov, target


def _check(cov, *extra, mode="training"):
    proc = opcov_here("check", MODEL, "-b", "cpu", "--mode", mode, "--coverage", str(cov), "--format", "json", *extra)
    assert proc.returncode in (0, 1), proc.stderr[-2000:]
    return proc.returncode, json.loads(proc.stdout)["verdicts"][0]


XLA_RUN = os.path.join(ROOT, "coverage", "observed", "xla", "nn-lstm.inference.json")


def test_an_observed_run_decides_the_verdict_with_what_it_saw(tmp_path):
    """The run is the verdict's evidence ('observed'), not a note beside it: its verdict, what it saw, its
    date, versions and source are in check's JSON, and the verdict from coverage data is kept apart."""
    run = json.load(open(XLA_RUN))
    run["backend_record"] = {"source": "none: this backend keeps no record of fallbacks", "tested": True}
    cov, target = _cov_with_run(tmp_path, run)
    rc, v = _check(cov)
    assert (v["verdict"], v["evidence"]) == ("runs", "observed")
    assert v["says"].startswith("runs (observed on the device)")
    assert rc == 0
    o = v["observed"]
    assert o["file"] == target and o["ran"] is True and o["values"]["match"] is True
    assert o["date"] == run["provenance"]["created"][:10] and o["torch"] == run["provenance"]["torch"]
    assert o["backend"] == "torch 2.13.0" and o["source"] == "committed to this repository"
    assert o["ops_run"] == len(run["ops"]) and o["calls"] > 0
    assert o["predicted"]["verdict"] in ("runs", "runs_with_fallback", "runs_with_value_note", "fails", "unknown")
    assert v["notes"][0].startswith("observed: this model's training step ran on") and target in v["sources"]
    assert opcov_here("lint", str(cov / "observed")).returncode == 0


@pytest.mark.parametrize(
    "change,verdict,gate",
    [
        (lambda r: r.update(result={"ran": False, "error": "RuntimeError: planted"}), "fails", 1),
        (
            lambda r: r["result"]["values"].update(match=False, max_error_x_tolerance=7.5),
            "runs_with_value_note",
            0,
        ),
        (
            lambda r: r.update(backend_record={"source": "counters", "fallback_ops": ["aten::addmm"], "tested": True}),
            "runs_with_fallback",
            0,
        ),
    ],
)
def test_a_run_that_raised_differed_or_fell_back_gives_that_verdict(tmp_path, change, verdict, gate):
    run = json.load(open(XLA_RUN))
    change(run)
    cov, _ = _cov_with_run(tmp_path, run)
    rc, v = _check(cov)
    assert (v["verdict"], v["evidence"], rc) == (verdict, "observed", gate)
    if verdict == "fails":
        assert "RuntimeError: planted" in v["observed"]["saw"] and "planted" in v["notes"][0]
    if verdict == "runs_with_fallback":
        assert v["observed"]["fallback_ops"] == ["aten::addmm"] and "aten::addmm" in v["notes"][0]
        assert _check(cov, "--fail-on", "fallback")[0] == 1  # the gate asks the run, not the ops
    if verdict == "runs_with_value_note":
        assert "7.5 x tolerance" in v["observed"]["saw"]


def test_a_failed_run_that_does_not_say_why_is_refused_by_lint(tmp_path):
    run = json.load(open(XLA_RUN))
    run["result"] = {"ran": False}
    cov, _ = _cov_with_run(tmp_path, run)
    bad = opcov_here("lint", str(cov / "observed"))
    assert bad.returncode != 0 and "must say why" in bad.stdout + bad.stderr


def test_check_judges_a_backend_on_the_op_set_recorded_on_its_own_device(tmp_path):
    """Where 'opcov trace MODEL --on xla' was kept (coverage/models/MODEL/on/xla-MODE.yaml), xla is judged on what
    its dispatcher received, not on a stand-in's path (an LSTM's fused cell, which xla never calls)."""
    cov = tmp_path / "coverage"
    shutil.copytree(os.path.join(ROOT, "coverage", "xla"), cov / "xla")
    shutil.copytree(os.path.join(ROOT, "coverage", "models", MODEL), cov / "models" / MODEL)
    proc = opcov_here("check", MODEL, "-b", "xla", "--mode", "inference", "--coverage", str(cov), "--format", "json")
    v = json.loads(proc.stdout)["verdicts"][0]
    ops = {r["op"] for r in v["ops"]}
    assert "aten::_thnn_fused_lstm_cell" not in ops and "aten::addmm" in ops
    assert v["sources"][0].endswith(os.path.join(MODEL, "on", "xla-inference.yaml"))
    assert "recorded on xla itself" in " ".join(v["notes"])
    # without it: the stand-in's op set, which keeps both device branches of the LSTM cell; xla is judged
    # on the generic one (torch's own decomposition: its sigmoid and tanh), never on the fused kernel
    shutil.rmtree(cov / "models" / MODEL / "on")
    proc = opcov_here("check", MODEL, "-b", "xla", "--mode", "inference", "--coverage", str(cov), "--format", "json")
    ops = {r["op"] for r in json.loads(proc.stdout)["verdicts"][0]["ops"]}
    assert "aten::_thnn_fused_lstm_cell" not in ops and {"aten::sigmoid", "aten::tanh"} <= ops, ops


def test_agreement_rules():
    ran = {"result": {"ran": True, "values": {"match": True}}, "backend_record": {"fallback_ops": []}}
    fell = {"result": {"ran": True, "values": {"match": True}}, "backend_record": {"fallback_ops": ["aten::x"]}}
    raised = {"result": {"ran": False, "error": "E"}, "backend_record": {}}
    wrong = {"result": {"ran": True, "values": {"match": False}}, "backend_record": {}}
    assert observed.agrees("runs", ran) and not observed.agrees("runs", fell)
    assert observed.agrees("runs_with_fallback", fell) and observed.agrees("fails", raised)
    assert observed.agrees("fails", wrong) and not observed.agrees("fails", ran)
    assert observed.agrees("unknown", ran) is None  # unknown claims nothing
    # verdict words are compared whole: a word that only begins like one claims nothing
    assert observed.agrees("runs_maybe", ran) is None and observed.agrees("failsafe", raised) is None
    assert observed.agrees("runs_with_value_note", wrong) and not observed.agrees("runs_with_value_note", raised)
    # a value note outranks a fallback in the word: the fallback its ops foretold agrees, another does not
    assert observed.agrees("runs_with_value_note", fell, ["aten::x", "aten::y"])
    assert not observed.agrees("runs_with_value_note", fell) and not observed.agrees(
        "runs_with_value_note", fell, ["aten::y"]
    )
    assert [observed.verdict_of(d) for d in (ran, fell, raised, wrong)] == [
        "runs",
        "runs_with_fallback",
        "fails",
        "runs_with_value_note",
    ]


def test_a_neuron_run_reads_torchneurons_own_counters(tmp_path):
    """'opcov run -b neuron' on a stand-in torch_neuronx (tests/fakes: the test backend named 'neuron'
    with get_fallback_ops() / get_executed_ops()): the backend's record is what those calls return, and
    the file says it was read through an API not run on Trainium here."""
    out = str(tmp_path / "neuron.json")
    fakes = os.path.join(ROOT, "tests", "fakes")
    env = {
        "PYTHONPATH": os.pathsep.join([fakes, os.path.join(ROOT, "src"), os.environ.get("PYTHONPATH", "")]),
        "OPCOV_FAKE_NEURON_KERNELS": json.dumps(["aten::_thnn_fused_lstm_cell"]),
    }
    proc = run_opcov("run", MODEL, "-b", "neuron", "--mode", "inference", "--out", out, **env)
    assert proc.returncode == 0, proc.stderr[-3000:]
    doc = json.load(open(out))
    rec = doc["backend_record"]
    assert rec["source"].startswith("torch_neuronx.get_fallback_ops() / get_executed_ops()")
    assert rec["executed_ops"] == ["aten::_thnn_fused_lstm_cell"]  # the planted kernel, as the counter says
    assert "aten::mm.out" in rec["fallback_ops"] and "aten::_thnn_fused_lstm_cell" not in rec["fallback_ops"]
    assert rec["tested"] is False and "untested on its hardware" in proc.stdout
    assert doc["result"]["ran"] is True and files.problems(doc, out) == []
    assert observed.verdict_of(doc) == "runs_with_fallback"  # the counters name fallbacks: not plain 'runs'


def test_an_op_set_recorded_on_a_backend_is_not_another_model():
    """gaps and compare count models over coverage/models/: MODEL/on/ is MODEL on xla's path, not one more."""
    from opcov.store import layout

    files = layout.model_files(os.path.join(ROOT, "coverage"))
    assert files and not any(f"{os.sep}on{os.sep}" in f for f in files)
    assert layout.ondevice_opset(os.path.join(ROOT, "coverage", "models", MODEL), "xla", "inference")


def test_the_cpu_reference_runs_torchs_module_where_a_backend_replaced_it(monkeypatch):
    """``import torch_xla`` makes ``nn.GRU`` its own scan-based GRU, which refuses CPU tensors: the CPU
    reference of an observed run must run torch's GRU (same weights), and the file says what was replaced;
    a model's own classes stay as they are."""
    import torch

    from opcov.sources.step import as_torch_modules

    torch_gru = torch.nn.GRU

    class DeviceOnlyGRU(torch_gru):
        def forward(self, *args, **kwargs):
            raise RuntimeError("Expected all tensors in the given list to be XLA tensors")

    monkeypatch.setattr(torch.nn, "GRU", DeviceOnlyGRU)  # what the backend's import does

    class Net(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.rnn = torch.nn.GRU(4, 8)

        def forward(self, x):
            return self.rnn(x)[0]

    torch.manual_seed(0)
    net = Net()
    want = torch_gru(4, 8)
    want.load_state_dict(net.rnn.state_dict())
    x = torch.randn(5, 2, 4)
    said = as_torch_modules(torch, net)
    assert said == [f"torch.nn.GRU by {DeviceOnlyGRU.__module__}.{DeviceOnlyGRU.__qualname__}"]
    assert type(net) is Net and type(net.rnn) is torch_gru
    assert torch.equal(net(x), want(x)[0])
    assert as_torch_modules(torch, net) == []  # nothing left to replace


@needs_xla
def test_an_xla_run_of_a_model_torch_xla_rewrote_has_a_cpu_reference(tmp_path):
    """nn-gru on xla: torch_xla's GRU runs on the device, torch's on CPU; the run is an observation."""
    out = tmp_path / "gru.json"
    r = run_xla("run", "nn-gru", "-b", "xla", "--mode", "inference", "--out", str(out))
    assert r.returncode == 0, r.stderr[-3000:]
    doc = json.load(open(out))
    assert doc["result"]["ran"] is True and doc["result"]["values"]["compared_tensors"] >= 1
    assert doc["result"]["replaced_modules"] == ["torch.nn.GRU by torch_xla.experimental.gru.GRU"]
    assert "aten::_thnn_fused_gru_cell" not in doc["ops"]  # the device ran torch_xla's GRU, not torch's
