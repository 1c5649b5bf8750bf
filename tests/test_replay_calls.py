"""A model's own calls replayed on the device (``opcov probe B --opsets``, ``opcov check --replay``): each
distinct call, with the arguments the model gave it, is a case filed under the model's name, and the verdict
judges each op it reaches from those cases first.

Run on cpu (the one device every machine has; ``--replay`` must be asked for there): the mechanism a user
gets on xla where torch_xla is installed, with the replayed file kept and reused.
"""

import json
import os
import textwrap

import pytest
from conftest import ROOT, opcov_here, run_opcov

from opcov.store import data

FACTORY = textwrap.dedent(
    """
    import torch
    import torch.nn as nn

    def pooled():
        torch.manual_seed(0)
        model = nn.Sequential(nn.Conv2d(3, 4, 3), nn.MaxPool2d(2, dilation=2, ceil_mode=True), nn.Flatten(), nn.LazyLinear(3))
        x = torch.randn(2, 3, 12, 12)
        model(x)
        return model, (x,)
    """
)


@pytest.fixture(scope="module")
def opset_dir(tmp_path_factory):
    root = tmp_path_factory.mktemp("replay")
    (root / "replaymodel.py").write_text(FACTORY)
    out = root / "opsets" / "pooled" / "training.yaml"
    r = run_opcov("trace", "replaymodel:pooled", "--mode", "training", "--out", str(out), PYTHONPATH=str(root))
    assert r.returncode == 0, r.stdout + r.stderr
    return root


def test_check_replay_judges_ops_from_the_models_own_calls_and_keeps_them(opset_dir, tmp_path):
    keep = tmp_path / "kept"
    args = ("check", str(opset_dir / "opsets" / "pooled"), "-b", "cpu", "--replay", "--replay-dir", str(keep))
    r = run_opcov(*args, "--format", "json", PYTHONPATH=str(opset_dir))
    assert r.returncode == 0, r.stdout + r.stderr
    verdict = json.loads(r.stdout)["verdicts"][0]
    assert any("own calls were replayed on cpu" in n for n in verdict["notes"]), verdict["notes"]
    ops = {o["op"]: o for o in verdict["ops"]}
    pool = ops["aten::max_pool2d_with_indices"]["findings"][0]
    assert "this model's own calls, replayed" in pool["why"], pool
    (kept,) = (keep / "cpu").glob("*-training-*.yaml")
    cell = data.load(str(kept))["ops"]["aten::max_pool2d_with_indices"]["float32"]
    assert cell["traced"] == {"replaymodel.pooled": "pass"} and cell["fwd"] == "pass"
    # a training forward call keeps the inputs that required grad: its backward ran too, through the
    # device's own autograd (where a backend's autograd kernel or checks differ from CPU's, that shows)
    assert cell.get("bwd") == "pass", cell
    # the kept file is reused: a second check replays nothing (no new file, the same one named)
    again = run_opcov(*args, PYTHONPATH=str(opset_dir))
    assert again.returncode == 0 and str(kept) in again.stdout
    assert len(list((keep / "cpu").glob("*-training-*.yaml"))) == 1


def test_replay_refuses_a_backend_that_does_not_run_here_in_one_line(opset_dir):
    r = run_opcov("check", str(opset_dir / "opsets" / "pooled"), "-b", "tpu", "--replay", PYTHONPATH=str(opset_dir))
    assert r.returncode == 2 and r.stderr.count("\n") == 1, r.stderr
    assert "--replay: tpu does not run in this Python" in r.stderr and "--opsets" in r.stderr


def test_an_opset_whose_model_cannot_be_rebuilt_is_refused_by_probe_opsets(tmp_path):
    """The curated zoo's op set names its zoo entry (rebuilt); a hand-written one names no source."""
    from test_check import model

    from opcov.store import opset

    path = tmp_path / "x.yaml"
    opset.save(model({"aten::mm": {"forward": {"float32": {"calls": 1}}}}, mode="inference"), str(path))
    r = run_opcov("probe", "cpu", "--opsets", str(path), "--ops", r"^trace\.", "--out", str(tmp_path / "o.yaml"))
    assert r.returncode == 2 and "cannot be rebuilt" in r.stderr, r.stderr


def test_traces_takes_a_factory_and_names_its_cases_as_trace_names_the_model(opset_dir, tmp_path):
    """'opcov probe B --traces pkg.mod:fn': the factory's calls are cases filed under 'pkg.mod.fn', the name
    'opcov trace pkg.mod:fn' gives the model, so 'opcov check' finds them as that model's own calls."""
    out = tmp_path / "replayed.yaml"
    r = run_opcov(
        "probe", "cpu", "--traces", "replaymodel:pooled", "--ops", r"^trace\.", "--dtypes", "float32",
        "--directions", "forward", "--tiers", "none", "--out", str(out), PYTHONPATH=str(opset_dir),
    )  # fmt: skip
    assert r.returncode == 0, r.stderr
    cell = data.load(str(out))["ops"]["aten::max_pool2d_with_indices"]["float32"]
    assert cell["traced"] == {"replaymodel.pooled": "pass"}
    assert any("dilation=2x2" in sig for sig in cell["ran"]), cell  # the class of the call that ran
    bad = opcov_here("probe", "cpu", "--traces", "notamodel", "--out", str(tmp_path / "x.yaml"))
    assert bad.returncode == 2 and "neither a zoo model nor a factory" in bad.stderr


def test_a_serve_op_sets_own_calls_are_generates():
    """Replaying a serve op set (``probe --opsets .../serve.yaml``, ``check --mode serve --replay``) captures the
    calls of generate's runs, as serve mode traced them: greedy's argmax and sampling's topk and multinomial,
    which no forward or training step makes (a serve op set was once replayed as a training step)."""
    import re

    from opcov.probe import replay

    calls = replay.capture("gpt2", only=re.compile(r"^aten::(argmax|topk|multinomial)$"), modes=("serve",))
    assert {func.name() for func, *_ in calls} >= {"aten::argmax", "aten::topk", "aten::multinomial"}
    assert not replay.capture("gpt2", only=re.compile(r"^aten::(argmax|topk|multinomial)$"), modes=("inference",))


def test_a_zoo_op_sets_replay_builds_the_model_as_the_zoo_traced_it(monkeypatch):
    """``probe --opsets coverage/models/mistral/serve.yaml`` names the model by its zoo spec (hf:mistral); the
    replay must still build it from the zoo entry (its tiny config), not at the default config's full size (7 B
    real-valued parameters on CPU, which stalled every such group until its worker was killed)."""
    from opcov.probe import replay
    from opcov.sources import models, zoo

    built = []

    def build(spec, sizes, **kw):
        built.append((spec, kw.get("zoo_entry")))
        raise RuntimeError("built")

    monkeypatch.setattr(models, "build", build)
    target = replay.opset_targets([os.path.join(ROOT, "coverage", "models", "mistral", "serve.yaml")])[0]
    with pytest.raises(RuntimeError, match="built"):
        replay.capture(target.name, spec=target.spec, dtype=target.dtype, modes=target.modes)
    assert built == [("hf:mistral", zoo.BY_NAME["mistral"])]


def test_a_replayed_call_that_raised_inside_its_op_counts_against_the_op_the_model_called():
    """PyTorch/XLA's slice raised in its own slice_copy (an overload no op set holds) on a sliding-window
    cache's out-of-range slice. An OpInfo case is filed under the overload that raised alone; a model's own
    call replayed is filed under the op it called too, with the call's class, so the model's verdict sees it."""
    from opcov.probe.caserecord import CaseRecord
    from opcov.probe.results import entries

    def case(cid, source):
        rec = CaseRecord.start(cid, {"id": f"{source}|float32", "source": source, "dtype": "float32"}, ["aten::slice"])
        rec.fwd = {
            "ops": [["aten::slice.Tensor", "float32"], ["aten::slice_copy.Tensor", "float32"]],
            "sigs": ["float32:4;bounds=under", "float32:4;"],
            "status": "error",
            "why": "RuntimeError: Value out of range",
            "raised": ["aten::slice_copy.Tensor", "float32"],
        }
        return {op: e for op, _, slot, e in entries(rec) if slot == "fwd"}

    replayed = case("trace.mistral|float32|85", "trace.mistral")
    assert set(replayed) == {"aten::slice.Tensor", "aten::slice_copy.Tensor"}
    assert "float32:4;bounds=under" in replayed["aten::slice.Tensor"]["failed"][0]
    assert set(case("slice|float32|0", "slice")) == {"aten::slice_copy.Tensor"}


def test_calls_only_needs_calls_to_replay():
    """--calls-only runs the replayed calls alone; without --traces or --opsets it is one line saying so."""
    proc = opcov_here("probe", "cpu", "--calls-only", "--ops", "^aten::mm$", "--out", "x.yaml")
    assert proc.returncode == 2 and proc.stderr.strip().splitlines() == [
        "opcov: error: --calls-only runs replayed calls alone: name them with --traces or --opsets"
    ], proc.stderr
