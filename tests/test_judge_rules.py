"""The verdict's per-op rules against probe evidence: what a probe finding says about one model's calls.

Each test builds a tiny backend's data and an op set by hand and asserts what ``opcov check`` says, from the
rules (a value difference is not a failure; a failure counts only against calls of its signature class; a
model's own replayed calls outrank OpInfo's; a crash that does not repeat alone is flaky).
"""

import json

import pytest
from test_check import TORCH, check, kernel, probed, registered, save_model

from opcov.store import data


@pytest.fixture
def cov(tmp_path):
    """coverage/ with a backend 'fake' whose registered scan gives every op the tests use its own kernel."""
    ops = {op: kernel() for op in OPS}
    root = tmp_path / "coverage"
    data.save(registered(ops=ops), str(root / "fake" / f"registered-torch-{TORCH}-fakepkg-1.0.yaml"))
    return root


OPS = ("aten::mm", "aten::addmm", "aten::sum", "aten::mean.dim", "aten::cumsum", "aten::transpose.int")


def _probe(root, cells):
    data.save(probed(ops=cells), str(root / "fake" / f"probed-torch-{TORCH}-fakepkg-1.0.yaml"))


def _verdict(path, root, *extra):
    r = check(path, root, "--format", "json", *extra)
    return r, json.loads(r.stdout)["verdicts"][0]


def test_a_value_mismatch_is_a_value_note_not_a_failure(tmp_path, cov):
    """A probed mismatch (values differ) does not stop the model: the verdict says it runs and its values may
    differ, names the op, the gate passes unless asked; an error on the same op still fails."""
    _probe(
        cov,
        {
            "aten::mm": {
                "float32": {"fwd": "mismatch", "cases": 2, "fails": 2, "why": "output 1: values differ"},
                "bfloat16": {"fwd": "error", "cases": 2, "fails": 2, "why": "RuntimeError: no bf16"},
            }
        },
    )
    path = save_model(tmp_path, {"aten::mm": {"forward": {"float32": {"calls": 1}}}}, mode="inference")
    r, v = _verdict(path, cov)
    assert r.returncode == 0, r.stdout + r.stderr
    assert v["verdict"] == "runs_with_value_note"
    assert v["ops"][0]["outcome"] == "value_note"
    assert v["value_notes"] == [
        {"op": "aten::mm", "dtype": "float32", "direction": "forward", "why": v["value_notes"][0]["why"]}
    ]
    assert "output 1: values differ" in v["value_notes"][0]["why"]
    assert v["counts"]["value_note"] == 1 and v["counts"]["fails"] == 0
    text = check(path, cov).stdout
    assert "RUNS; VALUES MAY DIFFER" in text and "aten::mm float32" in text
    assert check(path, cov, "--fail-on", "value_note").returncode == 1
    bf = save_model(tmp_path, {"aten::mm": {"forward": {"bfloat16": {"calls": 1}}}}, mode="inference", name="bf")
    r, v = _verdict(bf, cov)
    assert r.returncode == 1 and v["verdict"] == "fails"


def test_reality_check_counts_a_value_note_as_agreeing_with_a_run_matched_or_not():
    from opcov.testing.reality import Outcome

    def agrees(actual):
        return Outcome("s", "m", "training", "runs_with_value_note", actual).agrees

    assert agrees("ran") and agrees("wrong")
    assert not agrees("raised") and not agrees("crashed")
