"""Observed runs ('opcov run', opcov.tracing.observe): a model's step really run on a device, saved,
linted, and shown by 'opcov check' beside the verdict from coverage data (opcov.verdict.observed).
Runs on the planted PrivateUse1 test backend in child processes."""

from __future__ import annotations

import json
import os
import shutil

import pytest
from conftest import ROOT, run_opcov

from opcov.store import observed as files
from opcov.verdict import observed

PB = ["--import", "opcov.testing.pybackend"]
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


def test_check_puts_the_observed_run_first_and_says_whether_it_agrees(tmp_path):
    doc, _ = _run(tmp_path, "ok", {"kernels": {}, "fallback": "cpu"})
    cov = tmp_path / "coverage"
    shutil.copytree(os.path.join(ROOT, "coverage", "cpu"), cov / "cpu")
    shutil.copytree(os.path.join(ROOT, "coverage", "models", MODEL), cov / "models" / MODEL)
    doc["backend"]["name"] = "cpu"  # filed as a cpu run: check judges cpu from the bundled data
    target = files.path_for(str(cov), "cpu", MODEL, "training")
    os.makedirs(os.path.dirname(target))
    open(target, "w").write(files.dumps(doc))
    proc = run_opcov("check", MODEL, "-b", "cpu", "--mode", "training", "--coverage", str(cov), "--format", "json")
    assert proc.returncode in (0, 1), proc.stderr[-2000:]
    v = json.loads(proc.stdout)["verdicts"][0]
    first = v["notes"][0]  # the run leads the notes, and says how the verdict from coverage data compares
    assert first.startswith("observed: this model's training step ran on")
    word = {True: "agrees with it", False: "does NOT agree with it", None: "claims nothing"}
    assert word[observed.agrees(v["verdict"], doc)] in first
    assert any(s.endswith(os.path.join("cpu", f"{MODEL}.training.json")) for s in v["sources"])
    assert run_opcov("lint", str(cov / "observed")).returncode == 0
    doc["result"] = {"ran": False}  # a failed run that does not say why is refused by lint
    open(target, "w").write(files.dumps(doc))
    bad = run_opcov("lint", str(cov / "observed"))
    assert bad.returncode != 0 and "must say why" in bad.stdout + bad.stderr


def test_agreement_rules():
    ran = {"result": {"ran": True, "values": {"match": True}}, "backend_record": {"fallback_ops": []}}
    fell = {"result": {"ran": True, "values": {"match": True}}, "backend_record": {"fallback_ops": ["aten::x"]}}
    raised = {"result": {"ran": False, "error": "E"}, "backend_record": {}}
    wrong = {"result": {"ran": True, "values": {"match": False}}, "backend_record": {}}
    assert observed.agrees("runs", ran) and not observed.agrees("runs", fell)
    assert observed.agrees("runs_with_fallback", fell) and observed.agrees("fails", raised)
    assert observed.agrees("fails", wrong) and not observed.agrees("fails", ran)
    assert observed.agrees("unknown", ran) is None  # unknown claims nothing
