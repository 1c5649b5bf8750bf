"""A model whose run looks up the device's own module (``torch.<device>``): recorded by the trace, judged
against whether the backend registers one.

The class of calls: torch APIs that fetch ``torch.<device type>`` by name before any op is dispatched
(``torch.utils.checkpoint`` in both its forms, ``torch.get_device_module``). PyTorch/XLA registers no
``torch.xla``, and a checkpointed model raised there ("module 'torch' has no attribute 'xla'",
docs/reality/nn-xla-sixth.json) while every op it dispatches runs. Two families are traced: an MLP block
checkpointed without reentrancy and a conv stack run through ``checkpoint_sequential`` in its reentrant form.
"""

import json
import pathlib

import pytest
import torch
from conftest import ROOT, opcov_here
from test_check import TORCH, check, kernel, registered, save_model
from torch import nn
from torch.utils import checkpoint as ckpt

import opcov
from opcov.scan import devicemodule as scan_devicemodule
from opcov.store import data, opset


class _CheckpointedMLP(nn.Module):
    def __init__(self):
        super().__init__()
        self.block = nn.Sequential(nn.Linear(6, 6), nn.GELU(), nn.Linear(6, 6))

    def forward(self, x):
        return x + ckpt.checkpoint(self.block, x, use_reentrant=False)


class _ReentrantConvStack(nn.Module):
    def __init__(self):
        super().__init__()
        self.convs = nn.Sequential(nn.Conv2d(2, 4, 3, padding=1), nn.ReLU(), nn.Conv2d(4, 2, 3, padding=1), nn.Tanh())

    def forward(self, x):
        return ckpt.checkpoint_sequential(self.convs, 2, x, use_reentrant=True).mean((2, 3))


class _Plain(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(6, 2)

    def forward(self, x):
        return self.fc(x)


@pytest.mark.parametrize(
    "model, x, mode",
    [
        (_CheckpointedMLP, (4, 6), "inference"),
        (_ReentrantConvStack, (2, 2, 5, 5), "training"),
    ],
)
def test_the_trace_records_each_checkpoint_lookup_with_the_models_line(model, x, mode):
    """Each lookup names the API the model called and the model's own line, not torch's helper."""
    torch.manual_seed(0)
    doc = opcov.trace(model(), (torch.randn(*x),), mode=mode, device="cpu", real=True).doc
    entries = doc[opset.DEVICE_MODULE]
    assert {e["via"] for e in entries} == {"torch.utils.checkpoint"}, entries
    assert all(e["at"].startswith("test_device_module.py:") and e["calls"] >= 1 for e in entries), entries
    assert opset.validate(doc, "x.yaml") == []


def test_a_model_that_looks_up_no_device_module_records_none():
    doc = opcov.trace(_Plain(), (torch.randn(2, 6),), mode="training", device="cpu", real=True).doc
    assert opset.DEVICE_MODULE not in doc


def _coverage(tmp_path, **backends):
    """coverage/ with backends whose registered file says ``device_module`` as given (None: says nothing)."""
    root = tmp_path / "coverage"
    for name, block in backends.items():
        doc = registered(backend=name, ops={"aten::addmm": kernel(), "aten::t": kernel()})
        if block is not None:
            doc["provenance"]["device_module"] = block
        data.save(doc, str(root / name / f"registered-torch-{TORCH}-fakepkg-1.0.yaml"))
    return root


def _checkpointed_opset(tmp_path, lookups):
    path = save_model(
        tmp_path,
        {"aten::addmm": {"forward": {"float32": {"calls": 2}}}, "aten::t": {"forward": {"float32": {"calls": 2}}}},
    )
    doc = opset.load(path)
    doc[opset.DEVICE_MODULE] = lookups
    opset.save(doc, path)
    return path


LOOKUPS = [{"via": "torch.utils.checkpoint", "at": "model.py:41", "calls": 2}]


def test_a_checkpointed_model_fails_where_the_backend_registers_no_device_module(tmp_path):
    root = _coverage(
        tmp_path,
        xlaish={"name": "torch.xlaish", "registered": False},
        tpuish={"name": "torch.tpuish", "registered": True, "has": list(scan_devicemodule.NEEDS)},
    )
    path = _checkpointed_opset(tmp_path, LOOKUPS)
    r = opcov_json(path, root, "xlaish")
    assert r["verdict"] == "fails" and r["evidence"] == "registered"
    row = r["ops"][0]
    assert row["op"] == "python:torch.utils.checkpoint" and row["outcome"] == "fails"
    assert "torch.xlaish" in json.dumps(row) and "model.py:41" in json.dumps(row)
    ok = opcov_json(path, root, "tpuish")
    assert ok["verdict"] == "runs" and all(not o["op"].startswith("python:") for o in ok["ops"])


def test_where_the_backend_data_does_not_say_a_note_names_what_records_it(tmp_path):
    root = _coverage(tmp_path, fake=None)
    path = _checkpointed_opset(tmp_path, LOOKUPS)
    r = check(path, root)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "RUNS (registered, unverified)" in r.stdout
    assert "looks up the device's own module through torch.utils.checkpoint" in r.stdout
    assert scan_devicemodule.COMMAND in r.stdout


def test_a_malformed_lookup_list_is_one_line_naming_the_file(tmp_path):
    root = _coverage(tmp_path, fake=None)
    path = _checkpointed_opset(tmp_path, LOOKUPS)
    text = open(path).read().replace("via: torch.utils.checkpoint", "via: 3")
    open(path, "w").write(text)
    r = check(path, root)
    assert r.returncode == 2, r.stdout + r.stderr
    assert "Traceback" not in r.stderr and path in r.stderr and "device_module entry 1" in r.stderr


def test_the_bundled_registered_data_says_which_backends_register_their_module():
    """The scan's record, as committed: PyTorch/XLA registers no torch.xla; TorchTPU and CUDA register theirs
    with the RNG state functions checkpointing calls."""
    said = {}
    for backend in ("xla", "tpu", "cuda"):
        (path,) = pathlib.Path(ROOT, "coverage", backend).glob("registered-*.yaml")
        said[backend] = data.load(str(path))["provenance"]["device_module"]
    assert said["xla"]["registered"] is False and said["xla"]["name"] == "torch.xla"
    for backend in ("tpu", "cuda"):
        assert said[backend]["registered"] is True and set(scan_devicemodule.NEEDS) <= set(said[backend]["has"])
    assert scan_devicemodule.record(torch, "cpu")["registered"] is True
    assert scan_devicemodule.record(torch, "no_such_device")["registered"] is False


def opcov_json(path, root, backend):
    r = opcov_here("check", path, "--backend", backend, "--coverage", str(root), "--format", "json")
    assert r.returncode in (0, 1), r.stdout + r.stderr
    return json.loads(r.stdout)["verdicts"][0]


@pytest.mark.parametrize("text", ["a: [1\n", None])
def test_adding_the_record_to_a_wrong_file_is_one_line_and_writes_nothing(tmp_path, text):
    """A file that is not YAML, or an op set instead of registered data: one line naming it, exit 2, unchanged."""
    import shutil
    import subprocess
    import sys

    path = tmp_path / "x.yaml"
    if text is None:
        shutil.copy(pathlib.Path(ROOT, "coverage", "models", "gpt2", "inference.yaml"), path)
    else:
        path.write_text(text)
    before = path.read_bytes()
    r = subprocess.run(
        [sys.executable, "-m", "opcov.scan.devicemodule", str(path)], capture_output=True, text=True, timeout=300
    )
    assert r.returncode == 2 and "Traceback" not in r.stderr and str(path) in r.stderr, r.stderr
    assert len(r.stderr.strip().splitlines()) == 1 and path.read_bytes() == before
