"""Sharded training steps (``opcov trace MODEL --parallel ddp|fsdp2|tp --world-size N``, ``opcov check ...
--parallel``): a trace records the collectives with their reduce op and group size, DTensor's ops and
redistributions; a check fails an op DTensor has no sharding strategy for, on every backend, and a
collective the backend's process group raises on; the gate and lint work as for the other modes."""

import json
import os
import shutil
import textwrap

import pytest
import yaml
from conftest import ROOT, opcov_here, run_opcov

from opcov.store import distributed, opset, parallel

COVERAGE = os.path.join(ROOT, "coverage")

# A module with a tensor-parallel plan of its own, whose forward sends DTensor arguments to an op DTensor
# has no sharding strategy for in torch 2.13 (searchsorted), and through one it has (sort).
FACTORY = textwrap.dedent("""\
    import torch


    class Bucketed(torch.nn.Module):
        base_model_tp_plan = {"proj": "colwise", "out": "rowwise"}

        def __init__(self):
            super().__init__()
            self.proj = torch.nn.Linear(16, 32)
            self.out = torch.nn.Linear(32, 16)

        def forward(self, x):
            edges = self.proj.weight.sort(dim=-1).values
            torch.searchsorted(edges, edges)
            return self.out(torch.relu(self.proj(x)))


    def build():
        return Bucketed(), (torch.randn(4, 16),)
""")


@pytest.fixture(scope="module")
def sharded(tmp_path_factory):
    """(folder, env, path) of the factory traced with --parallel tp over 4 ranks (a child process)."""
    folder = tmp_path_factory.mktemp("sharded")
    (folder / "bucketed.py").write_text(FACTORY)
    env = {"PYTHONPATH": f"{folder}{os.pathsep}{os.path.join(ROOT, 'src')}"}
    out = folder / "tp-4.yaml"
    r = run_opcov("trace", "bucketed:build", "--parallel", "tp", "--world-size", "4", "--out", str(out), **env)
    assert r.returncode == 0, r.stderr
    return folder, env, str(out)


def dtensor_nodes(doc):
    return {n.op[len(parallel.DTENSOR) :]: n for n in opset.nodes(doc) if n.op.startswith(parallel.DTENSOR)}


def test_a_tensor_parallel_trace_records_collectives_dtensor_ops_and_redistributions(sharded):
    _, _, path = sharded
    doc = opset.load(path)  # what was written reads back, validated
    rec = doc["parallel"]
    assert (rec["style"], rec["world_size"], rec["rank"], rec["mesh"]) == ("tp", 4, 0, [4])
    assert rec["plan"] == {"proj": "ColwiseParallel", "out": "RowwiseParallel"}
    assert "fake" in rec["process_group"] and rec["ranks"].startswith("symmetric")
    nodes = opset.nodes(doc)
    # rowwise's output is all-reduced: the functional collective over the c10d op its kernel calls
    functional = [n for n in nodes if n.op == "_c10d_functional::all_reduce"]
    assert functional and all(n.kind == opset.COMPOSITE for n in functional)
    reached = [n for n in nodes if n.parent in {f.id for f in functional}]
    assert {n.op for n in reached} == {"c10d::allreduce_"}
    assert all("reduce_op=sum" in n.args and "group_size=4" in n.args for n in reached)
    assert "c10d::allreduce_" in doc["ops"] and "_c10d_functional::wait_tensor" in doc["ops"]
    assert any(n.op == f"{parallel.REDISTRIBUTE}P(sum)->R" for n in nodes)
    # DTensor's ops, each over the local op it ran; sort has a strategy, searchsorted none
    seen = dtensor_nodes(doc)
    assert {"aten::t", "aten::addmm", "aten::sort", "aten::searchsorted.Tensor"} <= set(seen)
    local = [n for n in nodes if n.parent == seen["aten::sort"].id]
    assert [n.op for n in local] == ["aten::sort"]
    assert "no sharding strategy" in seen["aten::searchsorted.Tensor"].args
    assert any("no sharding strategy for aten::searchsorted.Tensor" in n for n in doc["provenance"]["notes"])
    assert doc["provenance"]["command"].endswith(f"--out {path} --parallel tp --world-size 4")


@pytest.mark.parametrize(
    "style, collectives",
    [
        ("ddp", {("backward", "c10d::allreduce_", "reduce_op=sum")}),
        (
            "fsdp2",
            {("forward", "c10d::_allgather_base_", ""), ("backward", "c10d::_reduce_scatter_base_", "reduce_op=avg")},
        ),
    ],
)
def test_data_parallel_traces_record_their_collectives_by_phase(sharded, tmp_path, style, collectives):
    folder, env, _ = sharded
    out = tmp_path / f"{style}-2.yaml"
    r = run_opcov("trace", "bucketed:build", "--parallel", style, "--world-size", "2", "--out", str(out), **env)
    assert r.returncode == 0, r.stderr
    doc = opset.load(str(out))
    found = {(n.phase, n.op): n.args for n in opset.nodes(doc) if n.op.startswith("c10d::")}
    for phase, op, arg in collectives:
        assert (phase, op) in found, sorted(found)
        assert "group_size=2" in found[(phase, op)] and arg in found[(phase, op)]
    assert doc["parallel"]["style"] == style and doc["parallel"]["world_size"] == 2
    if style == "ddp":  # the stand-in hook for DDP's built-in one is said
        assert any("built-in all-reduce hook" in n for n in doc["provenance"]["notes"])
    else:  # FSDP2's sharded parameters are DTensors in the optimizer step
        assert any(op.startswith("aten::_foreach") for op in dtensor_nodes(doc))


def test_an_op_without_a_sharding_strategy_fails_on_every_backend(sharded):
    _, _, path = sharded
    r = opcov_here("check", path, "-b", "tpu", "-b", "cpu", "--format", "json")
    assert r.returncode == 1, r.stderr  # the gate: it fails
    report = json.loads(r.stdout)
    for v in report["verdicts"]:
        assert v["verdict"] == "fails" and v["mode"] == "training, tp x4"
        failing = {o["op"]: o for o in v["ops"] if o["outcome"] == "fails"}
        assert set(failing) == {"aten::searchsorted.Tensor"}, failing
        why = " ".join(f["why"] for f in failing["aten::searchsorted.Tensor"]["findings"])
        assert "no sharding strategy" in why and "every device" in why
    assert "gate failed" in r.stderr


def test_check_answers_for_the_zoo_step_by_name_with_named_ops_and_evidence():
    r = opcov_here("check", "llama", "-b", "tpu", "--mode", "training", "--parallel", "fsdp2", "--world-size", "8")
    assert r.returncode == 0, r.stderr
    assert "training, fsdp2 x8" in r.stdout and "registered" in r.stdout
    # the collectives and DTensor's optimizer ops are named, with where each judgement comes from
    assert "aten::_foreach_addcdiv_.ScalarList" in r.stdout and "dtensor-torch-2.13.0+cpu.json" in r.stdout
    assert "'tpu_dist'" in r.stdout and "cannot be read without the device" in r.stdout
    r = opcov_here("check", "llama", "-b", "tpu", "--parallel", "fsdp2", "--world-size", "3")
    assert r.returncode == 2 and "there is: " in r.stderr and "fsdp2-8" in r.stderr and "\n" not in r.stderr.strip()
    r = opcov_here("check", "llama", "-b", "tpu", "--mode", "serve", "--parallel", "tp")
    assert r.returncode == 2 and "training step" in r.stderr


def test_the_gate_fails_on_unknown_when_dtensor_data_for_the_torch_is_missing(tmp_path):
    """Without DTensor's data for the backend's torch every DTensor op is unknown: --fail-on unknown fails."""
    cov = tmp_path / "coverage"
    shutil.copytree(os.path.join(COVERAGE, "tpu"), cov / "tpu")
    shutil.copytree(os.path.join(COVERAGE, "models", "llama", "parallel"), cov / "models" / "llama" / "parallel")
    args = ("check", "llama", "-b", "tpu", "--parallel", "fsdp2", "--coverage", str(cov))
    r = opcov_here(*args)
    assert r.returncode == 0, r.stderr  # unknown is reported, not failed, by default
    assert "no DTensor data for torch 2.13.0+cpu" in r.stdout
    r = opcov_here(*args, "--fail-on", "unknown")
    assert r.returncode == 1 and "unknown" in r.stderr


def test_a_collective_the_process_group_raises_on_fails(tmp_path):
    """cpu's gloo group was run here: a collective with a reduce op it refuses (premul_sum) fails the step."""
    cov = tmp_path / "coverage"
    for sub in ("cpu", "distributed"):
        shutil.copytree(os.path.join(COVERAGE, sub), cov / sub)
    doc = opset.load(os.path.join(COVERAGE, "models", "llama", "parallel", "fsdp2-8.yaml"))
    tree = [t.replace("reduce_op=avg", "reduce_op=premul_sum") for t in doc["calltree"]]
    assert tree != doc["calltree"]
    path = str(tmp_path / "fsdp2-8.yaml")
    opset.save({**doc, "calltree": tree}, path)
    r = opcov_here("check", path, "-b", "cpu", "--coverage", str(cov), "--format", "json")
    assert r.returncode == 1, r.stderr
    v = json.loads(r.stdout)["verdicts"][0]
    failing = [o for o in v["ops"] if o["outcome"] == "fails"]
    assert [o["op"] for o in failing] == ["c10d::_reduce_scatter_base_"]
    why = failing[0]["findings"][-1]["why"]
    assert "premul_sum" in why and "gloo" in why
    assert failing[0]["evidence"] == "probed"  # the group was run, not read


def test_lint_takes_the_parallel_header_and_refuses_a_malformed_one(tmp_path):
    r = opcov_here("lint", os.path.join(COVERAGE, "models", "llama"), os.path.join(COVERAGE, "distributed"))
    assert r.returncode == 0, r.stdout + r.stderr
    folder = tmp_path / "models" / "llama" / "parallel"
    folder.mkdir(parents=True)
    raw = yaml.safe_load(open(os.path.join(COVERAGE, "models", "llama", "parallel", "tp-8.yaml")))
    raw.pop("integrity")
    for name, bad, said in (
        ("tp-8.yaml", {"style": "zero3"}, "parallel.style is 'zero3'"),
        ("ddp-8.yaml", {"style": "ddp", "world_size": 0}, "parallel.world_size is 0"),
        ("fsdp2-8.yaml", {"style": "fsdp2", "mesh": [2, 2]}, "holds 4 ranks; world_size is 8"),
    ):
        path = folder / name
        path.write_text(yaml.safe_dump({**raw, "parallel": {**raw["parallel"], **bad}}))
        r = opcov_here("lint", str(path))
        assert r.returncode == 1
        lines = [line for line in r.stdout.splitlines() if said in line]
        assert lines and lines[0].startswith(f"{path}:"), r.stdout
        r = opcov_here("check", str(path), "-b", "tpu")
        assert r.returncode == 2 and said in r.stderr and "Traceback" not in r.stderr


def test_the_distributed_data_is_checked_when_read(tmp_path):
    path = tmp_path / "process-group-cpu.json"
    good = json.load(open(distributed.group_path("cpu", COVERAGE)))
    path.write_text(json.dumps({**good, "collectives": {"c10d::allreduce_": {"state": "maybe", "why": ""}}}))
    with pytest.raises(Exception) as err:
        distributed.load(str(path), distributed.GROUP_KIND)
    assert str(path) in str(err.value) and "state" in str(err.value) and "\n" not in str(err.value)
    assert distributed.load(distributed.group_path("cpu", COVERAGE), distributed.GROUP_KIND)["name"] == "gloo"


def test_the_site_shows_each_sharded_step_as_a_mode_of_its_model(tmp_path):
    """A model page has a section per sharded step, with what was sharded and how to check it; its JSON has
    the verdicts; the models list counts the mode."""
    from opcov.store import data

    cov = tmp_path / "coverage"
    folder = cov / "models" / "llama"
    shutil.copytree(os.path.join(COVERAGE, "models", "llama", "parallel"), folder / "parallel")
    shutil.copy(os.path.join(COVERAGE, "models", "llama", "training.yaml"), folder / "training.yaml")
    shutil.copytree(os.path.join(COVERAGE, "distributed"), cov / "distributed")
    registered = data.load(os.path.join(COVERAGE, "cpu", "registered-torch-2.13.0+cpu.yaml"))
    wanted = {
        op for name in os.listdir(folder / "parallel") for op in opset.load(str(folder / "parallel" / name))["ops"]
    }
    registered["ops"] = {k: v for k, v in registered["ops"].items() if k in wanted}
    data.save(registered, str(cov / "cpu" / "registered-torch-2.13.0+cpu.yaml"))
    out = tmp_path / "site"
    r = run_opcov("site", "--coverage", str(cov), "--out", str(out))
    assert r.returncode == 0, r.stderr
    page = (out / "models" / "llama.html").read_text()
    for style in ("ddp", "fsdp2", "tp"):
        assert f'id="mode-training-{style}-x8"' in page
        assert f"--parallel {style} --world-size 8" in page
    api = json.loads((out / "api" / "models.json").read_text())["models"]["llama"]
    cpu = api["modes"]["training-fsdp2-x8"]["backends"]["cpu"]
    assert cpu["verdict"] == "runs"  # the notes are on the page (api/models.json keeps verdicts in short)
    assert "sharded step: fsdp2 over 8 ranks" in page
    assert "process group: cpu uses process group" in page and "gloo" in page
    assert "training-tp-x8" in (out / "models.html").read_text()
