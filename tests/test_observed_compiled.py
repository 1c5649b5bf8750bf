"""Observed compiled runs ('opcov run --path compile'): the model's step really run through torch.compile
on the device, saved under coverage/observed/<backend>/compile/, and deciding 'opcov check --path compile'
(opcov.verdict.observed.annotate_compiled) with the verdict from coverage data kept as its prediction.
The real runs use Inductor on this CPU (nn-lstm: Dynamo breaks the graph at the LSTM) and, where there is
a Python with PyTorch/XLA, openxla on its CPU client (swin: its compile raises)."""

from __future__ import annotations

import json
import os
import shutil

import pytest
from conftest import ROOT, needs_xla, opcov_here, run_opcov, run_xla

from opcov.store import observed as files

MODEL = "nn-lstm"


@pytest.fixture(scope="module")
def cov_run(tmp_path_factory):
    """(coverage folder with cpu's data and nn-lstm's op sets, the compiled inference run opcov wrote there)."""
    cov = tmp_path_factory.mktemp("observed-compiled") / "coverage"
    shutil.copytree(os.path.join(ROOT, "coverage", "cpu"), cov / "cpu")
    shutil.copytree(os.path.join(ROOT, "coverage", "models", MODEL), cov / "models" / MODEL)
    proc = run_opcov("run", MODEL, "-b", "cpu", "--path", "compile", "--mode", "inference", "--coverage", str(cov))
    assert proc.returncode == 0, proc.stderr[-3000:]
    path = files.path_for(str(cov), "cpu", MODEL, "inference", "compile")
    assert f"wrote {path}" in proc.stdout
    return cov, path, proc.stdout


def _check(cov, *extra):
    return opcov_here(
        "check", MODEL, "-b", "cpu", "--path", "compile", "--mode", "inference", "--coverage", str(cov), *extra
    )


def test_a_compiled_run_keeps_its_graph_breaks_and_values(cov_run):
    cov, path, stdout = cov_run
    doc = json.load(open(path))
    assert files.problems(doc, path) == [] and files.path_of(doc) == "compile"
    assert doc["compile"]["backend"] == "inductor"  # cpu's default torch.compile backend
    (brk,) = doc["compile"]["graph_breaks"]
    assert brk["reason"] == "Attempted to wrap RNN, GRU, or LSTM" and "external_utils.py:" in brk["where"]
    assert doc["result"]["ran"] is True and doc["result"]["values"]["match"] is True
    assert "inference step compiled with inductor ran on cpu" in stdout and "1 graph break(s)" in stdout
    assert path != files.path_for(str(cov), "cpu", MODEL, "inference")  # not where the eager run goes
    assert not os.path.exists(files.path_for(str(cov), "cpu", MODEL, "inference"))


def test_check_takes_the_compiled_run_as_its_verdict_and_keeps_the_prediction(cov_run):
    cov, path, _ = cov_run
    text = _check(cov)
    assert text.returncode == 0, text.stderr[-2000:]
    head, observed_line = text.stdout.splitlines()[:2]
    assert head.startswith("cpu inference (compile path, inductor): runs (") and "observed" in head
    assert observed_line.strip().startswith("observed: this model's inference step compiled with inductor ran")
    assert "graph breaks foretold" in observed_line and "agrees" in observed_line
    (v,) = json.loads(_check(cov, "--format", "json").stdout)
    assert (v["verdict"], v["evidence"]) == ("runs", "observed")
    assert v["observed"]["predicted"]["agrees"] is True and v["observed"]["predicted"]["graph_breaks"] == 1
    assert v["observed"]["file"] == path


def test_a_compiled_run_that_raised_makes_the_verdict_fails_and_says_the_data_did_not_foresee_it(cov_run, tmp_path):
    cov, path, _ = cov_run
    other = tmp_path / "coverage"
    shutil.copytree(cov, other)
    mine = files.path_for(str(other), "cpu", MODEL, "inference", "compile")
    doc = json.load(open(mine))
    doc["result"] = {"ran": False, "error": "BackendCompilerFailed: backend='inductor' raised: RuntimeError: boom"}
    with open(mine, "w") as f:
        f.write(files.dumps(doc))
    (v,) = json.loads(_check(other, "--format", "json").stdout)
    assert (v["verdict"], v["evidence"]) == ("fails", "observed")
    assert v["observed"]["predicted"]["verdict"].startswith("runs") and v["observed"]["predicted"]["agrees"] is False
    assert "RuntimeError: boom" in _check(other).stdout
    # an eager run filed where the compiled one goes is not taken for one
    eager = json.loads(json.dumps(doc))
    del eager["compile"]
    with open(mine, "w") as f:
        f.write(files.dumps(eager))
    (v,) = json.loads(_check(other, "--format", "json").stdout)
    assert v["evidence"] != "observed" and any(
        "a run of the eager path, not used for the compile path" in n for n in v["notes"]
    )


def test_a_compile_backend_torch_does_not_have_is_one_line_and_writes_nothing(tmp_path):
    out = tmp_path / "x.json"
    r = run_opcov("run", MODEL, "-b", "cpu", "--path", "compile", "--compile-backend", "nope", "--out", str(out))
    assert r.returncode == 2 and "Traceback" not in r.stderr and not out.exists()
    assert "--compile-backend nope: torch.compile has no such backend" in r.stderr
    r = run_opcov("run", MODEL, "-b", "cpu", "--compile-backend", "inductor", "--out", str(out))
    assert r.returncode == 2 and "--compile-backend goes with --path compile" in r.stderr


def test_lint_refuses_a_compile_record_without_its_backend_or_breaks():
    doc = {
        "schema_version": 1,
        "evidence": "observed",
        "backend": {"name": "cpu"},
        "model": {"name": MODEL, "mode": "inference"},
        "provenance": {"torch": "2.13", "created": "2026-12-05", "command": "opcov run"},
        "result": {"ran": True},
        "backend_record": {},
        "ops": {},
        "compile": {"graph_breaks": []},
    }
    assert files.problems(doc, "f.json") == ["f.json: compile must name its backend and list its graph_breaks"]
    doc["compile"]["backend"] = "inductor"
    assert files.problems(doc, "f.json") == []


@needs_xla
def test_openxla_compiled_run_of_swin_raises_and_says_why(tmp_path):
    """Swin's classifier head (adaptive_avg_pool1d of a transposed view) does not compile with openxla;
    the observed run keeps the cause, not Dynamo's 'raised:' alone, nor this machine's traceback."""
    out = tmp_path / "swin.json"
    r = run_xla("run", "swin", "-b", "xla", "--path", "compile", "--mode", "inference", "--out", str(out), timeout=600)
    assert r.returncode == 0, r.stderr[-3000:]
    doc = json.load(open(out))
    assert doc["result"]["ran"] is False and doc["compile"]["backend"] == "openxla"
    assert "Expected XLA tensor" in doc["result"]["error"] and "Original traceback" not in doc["result"]["where"]


def test_a_compiled_run_travels_in_a_bundle_to_the_compile_folder(cov_run, tmp_path):
    """What a hardware owner sends: 'opcov bundle' of the compiled run, 'opcov ingest' on the maintainer's
    side, where it lands beside the compiled op sets' runs (observed/<backend>/compile/), not the eager run."""
    cov, path, _ = cov_run
    bundle = tmp_path / "run.opcov-bundle.json.gz"
    r = opcov_here("bundle", path, "--source", "a test", "--out", str(bundle))
    assert r.returncode == 0, r.stderr[-2000:]
    theirs = tmp_path / "coverage"
    shutil.copytree(os.path.join(ROOT, "coverage", "cpu"), theirs / "cpu")
    r = opcov_here("ingest", str(bundle), "--coverage", str(theirs))
    assert r.returncode == 0, r.stderr[-2000:]
    landed = files.path_for(str(theirs), "cpu", MODEL, "inference", "compile")
    assert json.load(open(landed))["compile"]["backend"] == "inductor"
    assert not os.path.exists(files.path_for(str(theirs), "cpu", MODEL, "inference"))
