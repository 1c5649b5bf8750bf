"""The torch.compile path's op sets (opcov.tracing.compiled): Dynamo's graphs and breaks, the AOT graphs after
each compile backend's decompositions, and the file format that holds them."""

import importlib.util
import os
import subprocess
import sys

import pytest

from opcov.store import data, opset
from opcov.tracing import compiled

HERE = os.path.abspath(__file__)

LOG = """Graph break in user code at /models/net.py:12
Graph Break Reason: Encountered graph break when attempting to trace CALL: a function call, e.g. f(x, y):

Dynamic shape operator
  Explanation: Operator `aten.nonzero.default`'s output shape depends on input Tensor data.

  Developer debug context: aten.nonzero.default

 For more details about this graph break, please visit: https://meta-pytorch.github.io/compile-graph-break-site/gb/gb0036.html

User code traceback:
  File "/run.py", line 19, in <module>
    c(torch.randn(4))
  File "/models/net.py", line 12, in forward
    z = torch.nonzero(y)
        ^^^^^^^^^^^^^^^^
"""


def test_a_graph_break_log_line_reads_as_reason_location_and_construct():
    b = compiled.parse_break(LOG)
    assert b.reason == "Dynamic shape operator"
    assert b.where == "/models/net.py:12"
    assert b.construct == "z = torch.nonzero(y) (aten.nonzero.default)"
    assert b.code == "gb0036"


class Net:
    """A module with one graph break (a value read on the host) and a masked_fill, made in the test's process."""

    @staticmethod
    def make():
        import torch

        class Masked(torch.nn.Module):
            def __init__(self):
                super().__init__()
                self.lin = torch.nn.Linear(8, 8)

            def forward(self, x):
                y = self.lin(x).masked_fill(x > 0, 0.0)
                print("host")  # graph break: Dynamo cannot trace print
                return torch.nn.functional.relu(y) * 2

        return Masked()


@pytest.fixture(scope="module")
def traced():
    import torch

    return compiled.trace_compiled(
        Net.make(), (torch.randn(4, 8),), backends=("inductor", "aot_eager"), mode="training", name="masked"
    )


def test_compiled_op_sets_record_graph_breaks_with_the_users_line(traced):
    doc = traced["inductor"].doc
    assert doc["path"] == "compile" and doc["compile"]["backend"] == "inductor"
    assert doc["compile"]["outcome"] == "compiled"
    (brk,) = doc["graph_breaks"]
    line = next(i for i, text in enumerate(open(HERE), 1) if 'print("host")' in text and "graph break" in text)
    assert brk["where"] == f"{HERE}:{line}"
    assert "print" in brk["construct"]
    # the graph before the break, the one after it, and the loss after the model returns to the compiled step
    assert doc["compile"]["graphs"] == 3


def test_each_backend_gets_its_own_decompositions_forward_and_backward(traced):
    eager_aot, inductor = traced["aot_eager"].doc, traced["inductor"].doc
    # AOTAutograd alone keeps masked_fill; Inductor's table decomposes it (into where)
    assert "forward" in eager_aot["ops"]["aten::masked_fill.Scalar"]
    assert "aten::masked_fill.Scalar" not in inductor["ops"]
    assert "backward" in inductor["ops"]["aten::mm"]  # the linear's gradient, from the AOT backward graph
    # the op set is readable and complete: written and read back
    for doc in (eager_aot, inductor):
        assert not opset.validate(doc, "x.yaml")
        roots = [n for n in opset.nodes(doc) if n.parent is None]
        assert {n.op for n in roots} == {"dynamo.graph.0", "dynamo.graph.1", "dynamo.graph.2"}


def test_tpu_table_is_read_from_the_wheel():
    # find_spec, not importorskip: importing torch_tpu here would claim PrivateUse1 in this test process,
    # and a later test file in the same worker (test_reality) registers its own backend there
    if importlib.util.find_spec("torch_tpu") is None:
        pytest.skip("torch_tpu is not installed")
    from opcov import backends

    ops, version = compiled.package_table(backends.get_backend("tpu"))
    assert ops == ("aten::masked_fill.Tensor", "aten::masked_fill_.Tensor")
    assert version.startswith("0.")


def test_a_compiled_op_set_without_its_backend_is_refused(tmp_path, traced):
    doc = dict(traced["inductor"].doc)
    doc["compile"] = {"outcome": "compiled"}
    assert any("names its compile backend" in p.message for p in opset.validate(doc, "x.yaml"))
    doc["path"] = "jit"
    assert any("path is 'jit'" in p.message for p in opset.validate(doc, "x.yaml"))
    eager = {k: v for k, v in traced["inductor"].doc.items() if k != "path"}
    assert any("belongs to a compiled op set" in p.message for p in opset.validate(eager, "x.yaml"))
    path = tmp_path / "c.yaml"
    traced["inductor"].save(str(path))
    assert opset.load(str(path))["graph_breaks"] == traced["inductor"].doc["graph_breaks"]
    with pytest.raises(data.DataError):
        text = path.read_text().replace("outcome: compiled", "outcome: maybe")
        path.write_text(text)
        opset.load(str(path))


def test_unknown_compile_backend_is_one_line(opcov):
    proc = opcov("trace", "nn-lstm", "--path", "compile", "--compile-backend", "neuron")
    assert proc.returncode == 2
    assert proc.stderr.strip().splitlines() == [
        "opcov: error: --compile-backend 'neuron': expected one of inductor, openxla, tpu, aot_eager (comma-separated)"
    ]


def test_a_break_logged_again_for_the_frame_dynamo_gives_up_on_is_one_break():
    first = compiled.Break("logging.Logger method not supported", "/lib/m.py:7", "logger.warning_once(", "gb0291")
    again = compiled.Break(
        "Encountered graph break that we cannot resume from. Compiling up to the previous resumable state",
        "unknown",
        "warning_once",
        "gb0291",
    )
    same_code = compiled.Break("logging.Logger method not supported for export", "unknown", "x", "gb0291")
    assert compiled.distinct_breaks([first, again, same_code, first]) == [compiled.replace(first, times=2)]


def test_a_break_in_an_installed_package_is_named_by_the_package():
    text = LOG.replace("/models/net.py:12", "/opt/venv/lib/python3.11/site-packages/transformers/m.py:12", 1)
    assert compiled.parse_break(text).where == "transformers/m.py:12"


def test_a_model_dynamo_compiles_no_graph_of_is_recorded_with_its_break(tmp_path):
    """Dynamo wraps an RNN whole: no graph, one break, every op eager. The op set says so and reads back
    (the reader's 'no ops' rule refused it, so 'opcov trace nn-lstm --path compile' could write nothing)."""
    import torch

    torch.manual_seed(0)
    (cs,) = compiled.trace_compiled(
        torch.nn.GRU(8, 8, batch_first=True), (torch.randn(2, 3, 8),), mode="inference", name="gru"
    ).values()
    assert cs.doc["compile"]["outcome"] == "compiled" and cs.doc["compile"]["graphs"] == 0 and not cs.doc["ops"]
    (brk,) = cs.doc["graph_breaks"]
    assert "RNN, GRU, or LSTM" in brk["reason"]
    cs.save(str(tmp_path / "gru.yaml"))
    assert opset.load(str(tmp_path / "gru.yaml"))["graph_breaks"][0]["reason"] == brk["reason"]
    eager = {k: v for k, v in cs.doc.items() if k not in ("path", "compile", "graph_breaks")}
    assert any("no ops" in p.message for p in opset.validate(eager, "x.yaml"))  # an empty eager op set still is not


READS_A_VALUE = """import torch


class ReadsAValue(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = torch.nn.Linear(4, 4)

    def forward(self, x):
        y = self.lin(x)
        if y.sum() > 0:  # data-dependent branching: on fake tensors the compiled run stops here
            return y * 2
        return y


def build():
    return ReadsAValue(), (torch.randn(2, 4),)
"""


def test_a_model_dynamo_cannot_take_to_the_end_is_a_recorded_outcome_with_why(tmp_path):
    """On fake tensors, eager code after a break that reads a value cannot run: the op set records
    'failed' and why, not a traceback."""
    factory: dict = {}
    exec(READS_A_VALUE, factory)
    (cs,) = compiled.trace_compiled(*factory["build"](), mode="inference", name="reads").values()
    rec = cs.doc["compile"]
    assert rec["outcome"] == "failed" and rec["failure"] and "\n" not in rec["failure"]
    cs.save(str(tmp_path / "reads.yaml"))
    assert opset.load(str(tmp_path / "reads.yaml"))["compile"]["outcome"] == "failed"


def test_an_older_torch_asks_for_real_tensors_in_one_line(monkeypatch):
    """With torch before 2.10 AOTAutograd refused the fake tensors made outside Dynamo, and every graph
    came out 'aot_failed': a compile error that was opcov's, not the backend's. Now one line says so."""
    import torch

    from opcov.errors import UsageError
    from opcov.tracing import compiled

    monkeypatch.setattr(torch, "__version__", "2.9.0+cpu")
    with pytest.raises(UsageError, match="needs torch 2.10 or later.*--real"):
        compiled.trace_compiled(torch.nn.Linear(2, 2), (torch.ones(1, 2),), backends=("aot_eager",), mode="inference")


def test_a_stop_after_graph_breaks_names_the_last_break_that_has_a_place():
    """Dynamo logs some breaks without a place ('unknown'); the one-line why names the last located one,
    never 'at unknown'."""
    exc = RuntimeError("Could not guard on data-dependent expression u0 > 0")
    located = compiled.Break("Data-dependent branching", "model.py:12", "if x.sum() > 0:")
    unplaced = compiled.Break("Unsupported", "unknown", "")
    said = compiled._why(exc, [located, unplaced])
    assert "after the graph break at model.py:12" in said and "unknown" not in said and "--real" in said
    assert "after the graph break, the eager code" in compiled._why(exc, [unplaced])


def test_trace_exits_1_after_writing_a_compile_that_stopped_and_says_why(tmp_path):
    """'opcov trace ... --path compile --out F' whose compile did not reach the end writes F, then exits 1 with
    one last line that says so and why (the documented exit code: 'opcov trace --help')."""
    from conftest import child_env

    (tmp_path / "reads_mod.py").write_text(READS_A_VALUE)
    out = tmp_path / "b.yaml"
    cmd = ["trace", "reads_mod:build", "--mode", "inference", "--path", "compile", "--compile-backend", "inductor"]
    proc = subprocess.run(
        [sys.executable, "-m", "opcov", *cmd, "--out", str(out)],
        capture_output=True,
        text=True,
        env=child_env(),
        cwd=str(tmp_path),
        timeout=600,
    )
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert f"wrote {out}" in proc.stdout and opset.load(str(out))["compile"]["outcome"] == "failed"
    last = proc.stderr.strip().splitlines()[-1]
    assert last.startswith("opcov trace: exit 1: the op set is written, but the compile did not reach the end "), last
    assert "inductor: the compiled run stopped" in last and "--path compile" in last, last
    helped = subprocess.run(
        [sys.executable, "-m", "opcov", "trace", "--help"], capture_output=True, text=True, env=child_env()
    )
    assert "Exit codes: 0 the op set is written" in " ".join(helped.stdout.split())


def test_dynamos_own_log_is_kept_off_stderr_unless_verbose(monkeypatch):
    """'opcov trace --path compile' keeps Dynamo's and Inductor's log lines (a failed frame, a recompile) out
    of its output, as what they say is recorded in the op set; '--verbose' (OPCOV_VERBOSE in a factory's
    child) keeps them for a user who wants Dynamo's own words."""
    import logging

    name = "opcov_test.dynamo_like"
    monkeypatch.delenv(compiled.VERBOSE_ENV, raising=False)
    logging.getLogger(name).setLevel(logging.NOTSET)
    compiled._quiet(name)
    assert logging.getLogger(name).level == logging.CRITICAL
    logging.getLogger(name).setLevel(logging.NOTSET)
    monkeypatch.setenv(compiled.VERBOSE_ENV, "1")
    compiled._quiet(name)
    assert logging.getLogger(name).level == logging.NOTSET


def test_verbose_without_path_compile_is_one_line():
    from conftest import opcov_here

    r = opcov_here("trace", "gpt2", "--verbose", "--out", os.devnull)
    assert r.returncode == 2 and r.stderr.count("\n") == 1 and "--verbose goes with --path compile" in r.stderr
