"""Verdicts on the torch.compile path (opcov.verdict.compiled): graph breaks first, then the compiled graphs'
ops on the backend's compile coverage, with the eager evidence words."""

import json
import os
import shutil

import pytest
from conftest import opcov_here

from opcov.store import layout, opset
from opcov.verdict import compiled

BUNDLED = layout.DEFAULT_COVERAGE
TPU_EAGER = "registered-torch-2.13.0+cpu-torch_tpu-0.2.0.yaml"


def compiled_doc(name="nn-lstm", breaks=1, outcome="compiled"):
    rows = [
        {"id": 1, "phase": "forward", "kind": "call", "op": "dynamo.graph.0", "dtype": "float32", "calls": 1},
        {"id": 2, "parent": 1, "phase": "forward", "kind": "kernel", "op": "aten::mm", "dtype": "float32", "calls": 2},
        {"id": 3, "phase": "forward", "kind": "call", "op": "dynamo.graph.1", "dtype": "float32", "calls": 1},
        {
            "id": 4,
            "parent": 3,
            "phase": "forward",
            "kind": "kernel",
            "op": "aten::_aminmax",
            "dtype": "float32",
            "calls": 1,
        },
        {"id": 5, "phase": "backward", "kind": "call", "op": "dynamo.graph.0", "dtype": "float32", "calls": 1},
        {"id": 6, "parent": 5, "phase": "backward", "kind": "kernel", "op": "aten::mm", "dtype": "float32", "calls": 4},
    ]
    return {
        "schema_version": 2,
        "kind": "opset",
        "path": "compile",
        "compile": {"backend": "tpu", "outcome": outcome, "graphs": 2},
        "graph_breaks": [
            {"reason": "Data-dependent branching", "where": "/src/net.py:42", "construct": "if x.sum() > 0:"}
        ][:breaks],
        "model": {"name": name},
        "mode": "training",
        "dtype": "float32",
        "autocast": None,
        "optimizer": "none",
        "provenance": {"torch": "2.13.0+cpu", "command": "opcov trace ...", "created": "2026-01-01T00:00:00Z"},
        "calltree": [opset.node_text(r) for r in rows],
        "ops": {
            "aten::mm": {"forward": {"float32": {"calls": 2}}, "backward": {"float32": {"calls": 4}}},
            "aten::_aminmax": {"forward": {"float32": {"calls": 1}}},
        },
    }


@pytest.fixture
def cov(tmp_path):
    """A coverage folder with tpu's eager and compile data, nn-lstm's eager op set and a compiled one."""
    root = tmp_path / "coverage"
    (root / "tpu" / "compile").mkdir(parents=True)
    shutil.copy(os.path.join(BUNDLED, "tpu", TPU_EAGER), root / "tpu" / TPU_EAGER)
    shutil.copy(os.path.join(BUNDLED, "tpu", "compile", TPU_EAGER), root / "tpu" / "compile" / TPU_EAGER)
    (root / "models" / "nn-lstm" / "compile").mkdir(parents=True)
    shutil.copy(os.path.join(BUNDLED, "models", "nn-lstm", "training.yaml"), root / "models" / "nn-lstm")
    opset.save(compiled_doc(), str(root / "models" / "nn-lstm" / "compile" / "tpu-training.yaml"))
    return str(root)


def test_graph_breaks_come_first_then_the_compiled_ops_on_compile_coverage(cov):
    proc = opcov_here("check", "nn-lstm", "-b", "tpu", "--path", "compile", "--coverage", cov)
    assert proc.returncode == 1, proc.stderr  # _aminmax only runs through tpu's CPU fallback: a compile error
    lines = proc.stdout.splitlines()
    assert lines[0].startswith("tpu training (compile path, tpu): fails (registered evidence)")
    assert lines[1] == "  1 graph break(s); each runs eagerly: its ops are judged on eager coverage"
    assert lines[2] == "    /src/net.py:42: Data-dependent branching: if x.sum() > 0:"
    assert lines[3].startswith("  eagerly at the breaks (eager coverage): ")
    graphs = next(i for i, ln in enumerate(lines) if ln.startswith("  compiled graphs (compile coverage)"))
    assert "aten::_aminmax [float32]: fails (registered evidence)" in lines[graphs + 1]
    assert "compile error" in lines[graphs + 1]


def test_compile_verdict_as_json_and_with_eager(cov):
    proc = opcov_here("check", "nn-lstm", "-b", "tpu", "--path", "eager,compile", "--coverage", cov, "--format", "json")
    eager_part, _, compile_part = proc.stdout.partition("\n[\n")
    (v,) = json.loads("[\n" + compile_part)
    assert v["verdict"] == "fails" and v["evidence"] == "registered" and v["path"] == "compile"
    assert v["graph_breaks"][0]["where"] == "/src/net.py:42"
    assert {o["op"]: o["outcome"] for o in v["graphs"]["ops"]} == {"aten::_aminmax": "fails", "aten::mm": "ok"}
    assert '"mode": "training"' in eager_part  # the eager verdict came first


def test_a_model_dynamo_could_not_finish_is_unknown_with_why(cov):
    path = os.path.join(cov, "models", "nn-lstm", "compile", "tpu-training.yaml")
    doc = compiled_doc(outcome="failed")
    doc["compile"]["failure"] = "UserError: data-dependent"
    opset.save(doc, path)
    (v,) = compiled.check("nn-lstm", ["tpu"], None, cov)
    assert v.verdict == "unknown" and "data-dependent" in v.why and v.says() != "runs"


def test_no_compile_coverage_or_op_set_is_one_line(cov):
    shutil.rmtree(os.path.join(cov, "tpu", "compile"))
    proc = opcov_here("check", "nn-lstm", "-b", "tpu", "--path", "compile", "--coverage", cov)
    assert proc.returncode == 2 and "opcov scan tpu --path compile" in proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1
    proc = opcov_here("check", "llama", "-b", "tpu", "--path", "compile", "--coverage", cov)
    assert proc.returncode == 2 and "--path compile --compile-backend tpu" in proc.stderr


def test_a_model_folder_or_its_compile_folder_reads_as_the_models_op_sets(cov, tmp_path):
    """'check DIR/compile --path compile' judges the model's compiled op sets (it read 'compile' as a model's
    name); DIR/compile on the eager path is the model's eager op sets; a folder a user filled with 'opcov trace
    --path compile --out' is read by each file's compile backend, never judged on eager coverage."""
    folder = os.path.join(cov, "models", "nn-lstm")
    for named in (folder, os.path.join(folder, "compile"), os.path.join(folder, "compile") + os.sep):
        proc = opcov_here("check", named, "-b", "tpu", "--path", "compile", "--coverage", cov)
        assert proc.returncode == 1, (named, proc.stderr)  # _aminmax fails on tpu's compile coverage
        assert proc.stdout.startswith("tpu training (compile path, tpu): fails"), (named, proc.stdout)
        assert "nn-lstm/compile/tpu-training.yaml]" in proc.stdout.splitlines()[0]
    eager = opcov_here("check", os.path.join(folder, "compile"), "-b", "tpu", "--coverage", cov, "--format", "json")
    assert eager.returncode in (0, 1), eager.stderr
    assert json.loads(eager.stdout)["model"]["opsets"] == [os.path.join(folder, "training.yaml")]
    mine = tmp_path / "opsets"
    mine.mkdir()
    opset.save(compiled_doc(), str(mine / "b.yaml"))  # any file name: 'trace --out' chose it
    other = compiled_doc()
    other["compile"]["backend"] = "openxla"
    opset.save(other, str(mine / "a.yaml"))  # another compile backend's: not tpu's to judge
    proc = opcov_here("check", str(mine), "-b", "tpu", "--path", "compile", "--coverage", cov)
    said = [ln for ln in proc.stdout.splitlines() if not ln.startswith(" ")]
    assert proc.returncode == 1 and said == [
        f"tpu training (compile path, tpu): fails (registered evidence)  [{mine / 'b.yaml'}]"
    ]
    proc = opcov_here("check", str(mine), "-b", "tpu", "--coverage", cov)
    assert proc.returncode == 2 and "holds compiled op sets only" in proc.stderr and "--path compile" in proc.stderr
    os.remove(mine / "b.yaml")
    proc = opcov_here("check", str(mine), "-b", "tpu", "--path", "compile", "--coverage", cov)
    assert proc.returncode == 2 and f"no compiled op set for tpu (the compile backend of tpu) in {mine}/" in proc.stderr


def test_gaps_rank_compile_blockers_and_graph_breaks(cov):
    proc = opcov_here("gaps", "tpu", "--path", "compile", "--coverage", cov)
    assert proc.returncode == 0, proc.stderr
    out = proc.stdout
    assert "1  Data-dependent branching  (nn-lstm training)" in out
    assert "1  aten::_aminmax  fails:" in out
    assert "aten::mm" not in out


@pytest.fixture
def cpu_cov(tmp_path):
    """cpu's eager and compile data, nn-lstm's stand-in eager op set (its fused LSTM cell, which CPU has
    no kernel for) and a compiled op set in which Dynamo compiled no graph (it wraps an RNN whole)."""
    root = tmp_path / "coverage"
    (root / "cpu" / "compile").mkdir(parents=True)
    for name in ("registered-torch-2.13.0+cpu.yaml", "probed-torch-2.13.0+cpu.yaml"):
        shutil.copy(os.path.join(BUNDLED, "cpu", name), root / "cpu" / name)
    name = "registered-torch-2.13.0+cpu.yaml"
    shutil.copy(os.path.join(BUNDLED, "cpu", "compile", name), root / "cpu" / "compile" / name)
    folder = root / "models" / "nn-lstm"
    (folder / "compile").mkdir(parents=True)
    shutil.copy(os.path.join(BUNDLED, "models", "nn-lstm", "inference.yaml"), folder)
    doc = compiled_doc()
    doc.update(mode="inference", calltree=[], ops={})
    doc["compile"].update(backend="inductor", graphs=0)
    doc["graph_breaks"] = [
        {"reason": "Attempted to wrap RNN, GRU, or LSTM", "where": "the model's call", "construct": "mod(x)"}
    ]
    opset.save(doc, str(folder / "compile" / "inductor-inference.yaml"))
    return str(root)


def test_a_model_dynamo_compiled_no_graph_of_is_judged_at_its_breaks(cpu_cov):
    proc = opcov_here("check", "nn-lstm", "-b", "cpu", "--path", "compile", "--coverage", cpu_cov)
    assert proc.returncode in (0, 1) and "no ops" not in proc.stderr, proc.stderr  # was refused as an empty op set
    assert "1 graph break(s)" in proc.stdout and "no compiled graph" in proc.stdout
    assert "compiled graphs (compile coverage)" not in proc.stdout  # no empty 'runs' for graphs that do not exist


def test_the_breaks_are_judged_on_the_eager_op_set_recorded_on_the_backend_itself(cpu_cov):
    """The stand-in records both branches of LSTM's cell: the fused kernel the accelerators take, which
    has no cpu kernel, and the generic one cpu takes, on which cpu's breaks are judged. An op set recorded
    on cpu itself takes the stand-in's place, and says so: a real Inductor compile of nn-lstm runs the
    break eagerly and matches."""
    (before,) = compiled.check("nn-lstm", ["cpu"], ["inference"], cpu_cov)
    assert before.verdict == "runs", before.says()
    assert "aten::_thnn_fused_lstm_cell" not in {r.op for r in before.eager.ops}
    assert not any("recorded on cpu itself" in n for n in before.notes)
    folder = os.path.join(cpu_cov, "models", "nn-lstm")
    os.makedirs(os.path.dirname(layout.break_opset_path(folder, "cpu", "inference")), exist_ok=True)
    shutil.copy(
        os.path.join(BUNDLED, "models", "nn-lstm", "on", "cpu-inference.yaml"),
        layout.break_opset_path(folder, "cpu", "inference"),
    )
    (after,) = compiled.check("nn-lstm", ["cpu"], ["inference"], cpu_cov)
    assert after.verdict == "runs", after.says()
    assert "aten::_thnn_fused_lstm_cell" not in {r.op for r in after.eager.ops}
    assert any("recorded on cpu itself" in n for n in after.notes)
    # the other backends still judge the stand-in op set, and the file is no compiled op set of its own
    assert layout.compiled_opset_files(folder) == [os.path.join(folder, "compile", "inductor-inference.yaml")]


def test_gaps_rank_the_break_of_a_model_with_no_compiled_graph(cpu_cov):
    proc = opcov_here("gaps", "cpu", "--path", "compile", "--coverage", cpu_cov)
    assert proc.returncode == 0, proc.stderr  # was: 'no ops' for the bundled nn-lstm/nn-gru, gaps exited 2
    assert "1  Attempted to wrap RNN, GRU, or LSTM  (nn-lstm inference)" in proc.stdout


def test_a_module_the_backend_replaces_with_its_own_python_leaves_the_compile_verdict_unknown(tmp_path):
    """PyTorch/XLA replaces nn.GRU with a scan-based GRU of its own Python. Eagerly it runs; under
    torch.compile Dynamo compiles that Python as a frame of its own (it skips only torch's modules at the
    break), and a real openxla compile of nn-gru raises. The compiled op set was traced with torch's GRU, so
    judging its break on eager coverage said 'runs; values may differ': the verdict is unknown, with why."""
    root = tmp_path / "coverage"
    (root / "xla" / "compile").mkdir(parents=True)
    for sub in ("", "compile"):
        for name in os.listdir(os.path.join(BUNDLED, "xla", sub)):
            if name.endswith(".yaml"):
                shutil.copy(os.path.join(BUNDLED, "xla", sub, name), root / "xla" / sub / name)
    folder = root / "models" / "nn-gru"
    for sub in ("compile", "on"):
        (folder / sub).mkdir(parents=True)
    shutil.copy(os.path.join(BUNDLED, "models", "nn-gru", "inference.yaml"), folder)
    for sub, name in (("compile", "openxla-inference.yaml"), ("on", "xla-inference.yaml")):
        shutil.copy(os.path.join(BUNDLED, "models", "nn-gru", sub, name), folder / sub / name)
    (v,) = compiled.check("nn-gru", ["xla"], ["inference"], str(root))
    assert v.verdict == "unknown", v.says()
    assert v.replaced == ["torch.nn.GRU by torch_xla.experimental.gru.GRU"]
    assert v.eager is not None and v.eager.verdict == "runs_with_value_note"  # the eager rule alone said it runs
    proc = opcov_here("check", "nn-gru", "-b", "xla", "--path", "compile", "--coverage", str(root), "--format", "json")
    (said,) = json.loads(proc.stdout)
    assert said["verdict"] == "unknown" and "Dynamo compiles that Python" in said["why"]
    assert said["replaced_modules"] == ["torch.nn.GRU by torch_xla.experimental.gru.GRU"]
    # cpu replaces nothing: its eager op set recorded on cpu has no replaced_modules, and nn-gru runs there
    assert compiled.replaced_unseen({}, {"provenance": {"traced_on": "cpu (CPU itself)"}}, "cpu") == []
    # a compiled op set traced with the replacement in place has seen it
    with_it = {"provenance": {"replaced_modules": ["torch.nn.GRU by torch_xla.experimental.gru.GRU"]}}
    assert compiled.replaced_unseen(with_it, opset.load(str(folder / "on" / "xla-inference.yaml")), "xla") == []
