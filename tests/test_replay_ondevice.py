"""``opcov probe B --traces MODELS`` replays the calls a model makes on B's own path where an op set was
recorded on B itself (coverage/models/MODEL/on/B-MODE.yaml): the ops the backend really runs (XLA's
native_batch_norm for layer norm) get the model's own calls as evidence, not only CPU's calls.

The end-to-end test needs a Python with PyTorch/XLA (OPCOV_XLA_PYTHON, or .envs/xla from
scripts/envs/xla.sh); without one it is skipped, and says so."""

import os
import shutil
import subprocess

from conftest import ROOT, XLA_PYTHON, child_env, load_yaml, needs_xla

from opcov.probe import cases, replay
from opcov.store import opset

BERT_ON = os.path.join(ROOT, "coverage", "models", "bert", "on")


def test_ondevice_names_the_modes_and_ops_recorded_on_the_backend(tmp_path):
    """Each mode with an op set recorded on that backend at the zoo's dtype, with its ops; nothing for a
    backend or a model without one, nor for an op set of another dtype (check would not judge with it)."""
    on = tmp_path / "models" / "bert" / "on"
    on.mkdir(parents=True)
    shutil.copy(os.path.join(BERT_ON, "xla-training.yaml"), on / "xla-training.yaml")
    got = replay.ondevice("bert", "xla", "xla", str(tmp_path))
    want = sorted(opset.load(os.path.join(BERT_ON, "xla-training.yaml"))["ops"])
    assert got == {"device": "xla", "modes": {"training": want}}
    assert "aten::native_batch_norm_backward" in want  # xla's layer norm backward: CPU never calls it
    assert replay.ondevice("bert", "cpu", "cpu", str(tmp_path)) == {}
    assert replay.ondevice("gpt2", "xla", "xla", str(tmp_path)) == {}
    doc = opset.load(str(on / "xla-training.yaml"))
    opset.save({**doc, "dtype": "bfloat16"}, str(on / "xla-training.yaml"))
    assert replay.ondevice("bert", "xla", "xla", str(tmp_path)) == {}


def test_a_trace_group_carries_what_runs_on_the_device():
    """The worker gets, in the group, the device and each mode's ops: what it runs there besides CPU."""
    on = {"device": "xla", "modes": {"inference": ["aten::mm", "aten::native_batch_norm"]}}
    groups = cases.select_groups(
        r"^trace\.", dtypes=("float32",), directions=("forward",), traces=("bert", "gpt2"), ondevice={"bert": on}
    )
    by_id = {g.id: g.as_dict() for g in groups}
    assert by_id["trace.bert|float32"]["on"] == on
    assert "on" not in by_id["trace.gpt2|float32"]


@needs_xla
def test_probe_on_xla_replays_the_calls_xla_itself_makes(tmp_path):
    """bert on xla runs layer norm as native_batch_norm (its on/ op sets say so); CPU's steps never call
    it. --traces bert replays those calls too, on the device, under trace.bert, and says so."""
    out = tmp_path / "p.yaml"
    r = subprocess.run(
        [XLA_PYTHON, "-m", "opcov", "probe", "xla", "--traces", "bert", "--ops", "native_batch_norm"]
        + ["--dtypes", "float32", "--directions", "forward", "--tiers", "none", "--no-schema", "--timeout", "300"]
        + ["--out", str(out)],
        capture_output=True,
        text=True,
        env=child_env(PJRT_DEVICE="CPU"),
        timeout=1200,
        cwd=ROOT,
    )
    assert r.returncode == 0, r.stderr[-3000:]
    doc = load_yaml(out)
    for op in ("aten::native_batch_norm", "aten::native_batch_norm_backward"):
        cell = doc["ops"][op]["float32"]
        assert "trace.bert" in cell["samples"] and "bert" in cell["traced"], (op, cell)
        assert cell["traced"]["bert"] == "pass"
    src = doc["provenance"]["probe"]["case_source"]
    assert src["traces_on_device"] == {"bert": ["inference", "training"]}
    assert any("recorded on xla itself too: for bert (inference, training)" in n for n in doc["provenance"]["notes"])


@needs_xla
def test_cpu_steps_of_a_model_torch_xla_rewrote_are_captured():
    """With torch_xla imported (as in an xla probe's worker) nn.GRU is its scan-based GRU, which refuses
    CPU tensors: the CPU steps run torch's GRU, so nn-gru's calls are captured, not a failed group."""
    code = (
        "import torch_xla\n"
        "from opcov.probe import replay\n"
        "calls = replay.capture('nn-gru')\n"
        "print(sorted({f.name() for f, *_ in calls}))\n"
    )
    r = subprocess.run(
        [XLA_PYTHON, "-c", code], capture_output=True, text=True, env=child_env(PJRT_DEVICE="CPU"), timeout=600
    )
    assert r.returncode == 0, r.stderr[-3000:]
    assert "aten::addmm" in r.stdout or "aten::mm" in r.stdout
