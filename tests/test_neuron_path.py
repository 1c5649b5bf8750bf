"""The neuron contributor path, end to end, on the Python test backend registered under the name ``neuron``.

No Trainium and no torch-neuronx here: opcov.sources.pybackend claims PrivateUse1 as "neuron" (its
spec's name), and ``--import`` stands in for ``--import torch_neuronx``. The path the README gives,
``opcov scan neuron`` then ``opcov probe neuron`` then ``opcov check MODEL -b neuron``, runs in a
fresh folder with only a zoo model's op sets in it: the files must land under coverage/neuron/ by
their default names, and check must find and read them there.
"""

from __future__ import annotations

import glob
import json
import os
import shutil
import subprocess
import sys

import pytest
from conftest import ROOT, SCAN_REACH, child_env, dumps, load_yaml, opcov_here, run_scan

SPEC = {"name": "neuron", "kernels": {"aten::relu": "pass", "aten::addmm": "pass"}, "fallback": "raise"}
BACKEND = ["neuron", "--import", "opcov.sources.pybackend"]  # a contributor types --import torch_neuronx
MODEL = "nn-convnet"  # inference: addmm, relu, convolution, batch norm, max pool, mean, views


def opcov_in(folder, *args, **env):
    """``python -m opcov ARGS`` run in ``folder`` (where its default paths point)."""
    return subprocess.run(
        [sys.executable, "-m", "opcov", *args],
        capture_output=True,
        text=True,
        cwd=folder,
        env=child_env(OPCOV_PYBACKEND_SPEC=dumps(SPEC), **env),
        timeout=600,
    )


@pytest.fixture(scope="module")
def contributed(tmp_path_factory, reach_cache):
    """A folder where a contributor scanned and probed 'neuron', holding one zoo model's op sets."""
    work = tmp_path_factory.mktemp("neuron")
    shutil.copytree(os.path.join(ROOT, "coverage", "models", MODEL), work / "coverage" / "models" / MODEL)
    # the reach of the model's ops is recorded (convolution's decides its verdict), not every op's
    scan = run_scan(SCAN_REACH, *BACKEND, cwd=work, OPCOV_PYBACKEND_SPEC=dumps(SPEC), XDG_CACHE_HOME=reach_cache)
    assert scan.returncode == 0, scan.stderr[-3000:]
    probe = opcov_in(
        work, "probe", *BACKEND, "--ops", "^(aten::relu|addmm)$", "--dtypes", "float32", "--directions", "forward"
    )
    assert probe.returncode == 0, probe.stderr[-3000:]
    return work, scan, probe


def only(pattern):
    found = glob.glob(str(pattern))
    assert len(found) == 1, found
    return found[0]


def test_scan_and_probe_write_under_the_neuron_name(contributed):
    work, scan, probe = contributed
    assert sorted(os.listdir(work / "coverage")) == ["models", "neuron"]
    reg_path = only(work / "coverage" / "neuron" / "registered-torch-*-torch-neuronx-*.yaml")
    probed_path = only(work / "coverage" / "neuron" / "probed-torch-*-torch-neuronx-*.yaml")
    assert f"wrote {os.path.relpath(reg_path, work)}" in scan.stdout
    assert f"wrote {os.path.relpath(probed_path, work)}" in probe.stdout
    reg, probed = load_yaml(reg_path), load_yaml(probed_path)
    for doc in (reg, probed):
        assert doc["backend"]["name"] == doc["backend"]["device_type"] == "neuron"
        assert doc["backend"]["dispatch_key"] == "PrivateUse1" and doc["backend"]["package"] == "torch-neuronx"
    assert reg["provenance"]["command"] == "opcov scan " + " ".join(BACKEND)
    assert reg["ops"]["aten::relu"]["fwd"] == "kernel" and reg["ops"]["aten::convolution"]["res"] != "registered"
    assert probed["ops"]["aten::relu"]["float32"]["fwd"] == "pass"
    assert probed["ops"]["aten::addmm"]["float32"]["fwd"] == "pass"


def test_check_reads_the_neuron_data(contributed):
    work, _, _ = contributed
    r = opcov_here(
        "check",
        MODEL,
        "-b",
        "neuron",
        "--mode",
        "inference",
        "--format",
        "json",
        cwd=work,
        OPCOV_PYBACKEND_SPEC=dumps(SPEC),
    )
    assert r.returncode == 1, r.stderr  # convolution and friends have no kernel and the fallback raises
    out = json.loads(r.stdout)
    (v,) = out["verdicts"]
    assert v["backend"] == "neuron" and v["verdict"] == "fails"
    # every coverage file of the backend, and nothing else (the probe's .times.json beside it is no source)
    files = sorted(f for f in os.listdir(work / "coverage" / "neuron") if f.endswith(".yaml"))
    assert sorted(os.path.basename(s) for s in v["sources"]) == files, v["sources"]
    ops = {o["op"]: o for o in v["ops"]}
    assert ops["aten::relu"]["outcome"] == "ok" and ops["aten::relu"]["evidence"] == "probed"
    # OpInfo's addmm samples all scale by alpha and beta; the model's Linear calls it with neither, a path
    # no case took (PyTorch/XLA falls back on exactly that difference): probed, yet unverified
    addmm = ops["aten::addmm"]
    assert addmm["outcome"] == "unknown" and addmm["evidence"] == "probed", addmm
    assert "unverified for these arguments" in addmm["findings"][0]["why"]
    conv = ops["aten::convolution"]
    assert conv["outcome"] == "fails" and conv["evidence"] == "registered"
    # the text report says the same and names both files
    text = opcov_here("check", MODEL, "-b", "neuron", "--mode", "inference", cwd=work, OPCOV_PYBACKEND_SPEC=dumps(SPEC))
    assert text.returncode == 1 and "neuron (inference): FAIL" in text.stdout
    assert "coverage/neuron/registered-torch-" in text.stdout and "coverage/neuron/probed-torch-" in text.stdout


def test_backends_says_what_neuron_needs():
    r = opcov_here("backends", "--format", "json")
    rows = {row["name"]: row for row in json.loads(r.stdout)}
    neuron = rows["neuron"]
    assert neuron["package"] == "torch-neuronx" and neuron["dispatch_key"] == "PrivateUse1"
    assert "pip.repos.neuron.amazonaws.com" in neuron["setup"] and "Trn2" in neuron["setup"]
    assert neuron["commands"] == [
        "opcov scan neuron --import torch_neuronx",
        "opcov probe neuron --import torch_neuronx",
    ]
    text = opcov_here("backends").stdout
    assert (
        "$ opcov scan neuron --import torch_neuronx" in text and "$ opcov probe neuron --import torch_neuronx" in text
    )
