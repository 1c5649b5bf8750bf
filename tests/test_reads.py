"""Which outputs of a call something reads, and what a probe mismatch on the other outputs means.

The tracer records, per call-tree node, the outputs that a later op (a backward op reading what autograd
saved included, but for the op's own backward), the model's return value, the loss or the state the step
leaves read (``reads=``); the
probe records which outputs of a multi-output overload differ (``out=`` on a failing case); the verdict
notes a mismatch only on outputs no call of the model reads instead of calling it a value note. An op set
traced before ``reads=`` existed is judged as before.
"""

import json

import pytest
from test_check import TORCH, check, kernel, probed, registered, tree_opset
from test_trace import run_child

from opcov.store import data, opset

# ---------------------------------------------------------------- the tracer

TRACE = """
import json, torch
import torch.nn.functional as F
from opcov.tracing.trace import trace

class Max(torch.nn.Module):
    def __init__(self, how):
        super().__init__()
        self.lin = torch.nn.Linear(8, 8)
        self.how = how

    def forward(self, x):
        values, indices = torch.max(self.lin(x), dim=-1)
        if self.how == "values":
            return values
        if self.how == "unused view":
            indices.view(-1)  # a view made and dropped reads nothing
            return values
        return values + indices.view(-1).float()  # read through a view

class Nll(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = torch.nn.Linear(8, 5)

    def forward(self, x):
        return F.nll_loss(F.log_softmax(self.lin(x), -1), torch.zeros(4, dtype=torch.long, device=x.device))

def reads(model, mode, op):
    doc = trace(model, (torch.randn(4, 8),), mode=mode).doc
    return [t.split(" reads=")[1].split(" ")[0] for t in doc["calltree"] if f" {op} " in t]

print(json.dumps({
    "values": reads(Max("values"), "inference", "aten::max.dim"),
    "unused view": reads(Max("unused view"), "inference", "aten::max.dim"),
    "view": reads(Max("view"), "inference", "aten::max.dim"),
    "values, training": reads(Max("values"), "training", "aten::max.dim"),
    "nll inference": reads(Nll(), "inference", "aten::nll_loss_forward"),
    "nll training": reads(Nll(), "training", "aten::nll_loss_forward"),
    "nll backward": reads(Nll(), "training", "aten::nll_loss_backward"),
}))
"""


@pytest.fixture(scope="module")
def traced():
    return run_child(TRACE)


def test_an_output_nothing_reads_is_not_in_reads(traced):
    """torch.max(x, dim): a model that uses the values alone reads output 0; making a view of the indices and
    dropping it reads nothing; reading the indices through a view reads output 1."""
    assert traced["values"] == ["0"]
    assert traced["unused view"] == ["0"]
    assert traced["view"] == ["0,1"]


def test_an_output_only_the_ops_own_backward_reads_is_not_a_read(traced):
    """max.dim's backward takes its indices and nll_loss_backward takes nll_loss_forward's total_weight (output
    1): values autograd saved for the op's own backward, which go from the backend's forward kernel to its
    backward kernel (PyTorch/XLA's total_weight differs from CPU's while the loss and gradients match). The
    backward's own evidence judges that pair, so they are not reads of the forward's outputs; a read by any
    other op is (the indices read through a view above)."""
    assert traced["values, training"] == ["0"]
    assert traced["nll inference"] == ["0"]
    assert traced["nll training"] == ["0"]
    assert traced["nll backward"] == ["0"]  # its grad_input, read by _log_softmax_backward_data


# ---------------------------------------------------------------- the op-set format


def test_reads_round_trips_and_an_old_node_records_none():
    row = {"id": 3, "phase": "forward", "kind": "kernel", "op": "aten::max.dim", "dtype": "float32", "calls": 2}
    for reads, word in (((0,), "reads=0"), ((), "reads=none"), ((0, 2), "reads=0,2")):
        text = opset.node_text({**row, "reads": reads})
        assert text.endswith(word)
        assert opset.parse_node(text).reads == reads
        assert opset.nodes({"calltree": [text]})[0].reads == reads
    old = opset.node_text(row)
    assert "reads" not in old and opset.parse_node(old).reads is None


def test_the_one_scan_reader_reads_reads_as_the_node_reader_does():
    tree = [
        "1 forward kernel aten::max.dim float32 x2 grad seen=both variant=given,padded_mask reads=0,1 | shape=[4, 8]",
        "2 forward kernel aten::max.dim float32 x1 reads=none",
        "3 forward kernel aten::max.dim float32 x1 variant=given reads=10",
        "4 forward kernel aten::max.dim float32 x1 variant=given",
    ]
    assert opset._parse_tree(tree) == [opset.parse_node(t) for t in tree]
    assert [n.reads for n in opset._parse_tree(tree)] == [(0, 1), (), (10,), None]
    assert opset._parse_tree(["1 forward kernel aten::max.dim float32 x1 reads=1,0"]) is None  # careful reader


@pytest.mark.parametrize("word", ["reads=1,0", "reads=a", "reads=0,0"])
def test_a_malformed_reads_word_names_itself(tmp_path, word):
    doc = tree_opset(["1 forward kernel aten::max.dim float32 x1 variant=given reads=0"])
    path = tmp_path / "m.yaml"
    path.write_text(opset.dumps(doc).replace("reads=0", word))
    with pytest.raises(data.DataError, match="reads="):
        opset.load(str(path))


# ---------------------------------------------------------------- the verdict


NLL = "1 forward kernel aten::nll_loss_forward float32 x1 variant=given{} | shape=[32, 256], [32]"


def _save(tmp_path, name, reads):
    path = tmp_path / f"{name}.yaml"
    opset.save(tree_opset([NLL.format(reads)], name=name), str(path))
    return str(path)


def _backend(tmp_path, cell):
    root = tmp_path / "coverage"
    data.save(
        registered(ops={"aten::nll_loss_forward": kernel()}),
        str(root / "fake" / f"registered-torch-{TORCH}-fakepkg-1.0.yaml"),
    )
    data.save(
        probed(ops={"aten::nll_loss_forward": {"float32": cell}}),
        str(root / "fake" / f"probed-torch-{TORCH}-fakepkg-1.0.yaml"),
    )
    return root


def _finding(path, root):
    r = check(path, root, "--format", "json")
    v = json.loads(r.stdout)["verdicts"][0]
    return r, v, v["ops"][0]["findings"][0]


MISMATCH = {
    "fwd": "mismatch",
    "cases": 3,
    "fails": 2,
    "case": "nll_loss|float32|0",
    "why": "output 1: values differ: max abs err 31 (rel 0.969); at index () 1, cpu gives 32",
    "failed": ["mismatch nll_loss|float32|0 float32:2,int64:1 out=1"],
}


def test_a_mismatch_on_an_output_no_call_reads_is_a_note(tmp_path):
    """total_weight (output 1) differs: a model that reads only the loss runs, with the difference named in
    the op's finding; one whose calls read output 1 runs with a value note."""
    root = _backend(tmp_path, MISMATCH)
    r, v, f = _finding(_save(tmp_path, "loss_only", " reads=0"), root)
    assert r.returncode == 0 and v["verdict"] == "runs", f
    assert f["outcome"] == "ok" and "only in output 1" in f["why"] and "never reads" in f["why"]
    r, v, f = _finding(_save(tmp_path, "reads_both", " reads=0,1"), root)
    assert v["verdict"] == "runs_with_value_note" and f["outcome"] == "value_note"


def test_an_op_set_without_reads_and_a_case_without_outputs_judge_as_before(tmp_path):
    """No reads= (an op set traced before it was recorded): every output counts; no out= on the failing case
    (an older probe, or a mismatch not pinned on one output): the mismatch counts whatever the model reads."""
    root = _backend(tmp_path, MISMATCH)
    r, v, f = _finding(_save(tmp_path, "old", ""), root)
    assert v["verdict"] == "runs_with_value_note" and f["outcome"] == "value_note"
    root = _backend(tmp_path, {**MISMATCH, "failed": ["mismatch nll_loss|float32|0 float32:2,int64:1"]})
    r, v, f = _finding(_save(tmp_path, "loss_only", " reads=0"), root)
    assert v["verdict"] == "runs_with_value_note" and f["outcome"] == "value_note"


def test_an_error_counts_whatever_the_model_reads(tmp_path):
    """An op that raises stops the model: which outputs it reads does not matter."""
    cell = {
        **MISMATCH,
        "fwd": "error",
        "why": "RuntimeError: boom",
        "failed": ["error nll_loss|float32|1 float32:2,int64:1", *MISMATCH["failed"]],
    }
    r, v, f = _finding(_save(tmp_path, "loss_only", " reads=0"), _backend(tmp_path, cell))
    assert r.returncode == 1 and v["verdict"] == "fails" and f["outcome"] == "fails"


def test_a_models_own_replayed_mismatch_on_an_unread_output_is_a_note(tmp_path):
    cell = {
        **MISMATCH,
        "case": "trace.loss_only|float32|9",
        "failed": ["mismatch trace.loss_only|float32|9 float32:2,int64:1 out=1"],
        "traced": {"loss_only": "mismatch"},
    }
    r, v, f = _finding(_save(tmp_path, "loss_only", " reads=0"), _backend(tmp_path, cell))
    assert v["verdict"] == "runs" and "own calls" in f["why"] and "only in output 1" in f["why"]


def _cut_cell(*extra):
    """A cell whose replayed models' mismatches filled the list (16 others' items), the model
    'loss_only' cut from it, marked classes_whole: every failing class is still named."""
    others = [f"mismatch trace.m{i:02d}|float32|0 float32:2,int64:1 out=1" for i in range(16 - len(extra))]
    traced = {f"m{i:02d}": "mismatch" for i in range(16)}
    return {
        **MISMATCH,
        "case": "trace.m00|float32|0",
        "fails": 30,
        "failed": [*extra, *others],
        "traced": {**traced, "loss_only": "mismatch"},
        "classes_whole": True,
    }


def test_a_models_own_mismatch_cut_from_a_whole_list_is_judged_by_the_classes_named(tmp_path):
    """Thirty zoo models replayed nll_loss_forward on xla; the list keeps 16 items, so most models' own
    items are cut. classes_whole says every failing class is named: when each is a mismatch only on an
    output this model never reads, its own is too, and it runs; a named class on an output it reads, or
    another failure, keeps the value note."""
    r, v, f = _finding(_save(tmp_path, "loss_only", " reads=0"), _backend(tmp_path, _cut_cell()))
    assert v["verdict"] == "runs" and "only in output 1" in f["why"], f
    r, v, f = _finding(_save(tmp_path, "loss_only", " reads=0,1"), _backend(tmp_path, _cut_cell()))
    assert v["verdict"] == "runs_with_value_note", f
    also = "mismatch trace.m99|float32|0 float32:2,int64:1 out=0"  # another model's class differs in output 0
    r, v, f = _finding(_save(tmp_path, "loss_only", " reads=0"), _backend(tmp_path, _cut_cell(also)))
    assert v["verdict"] == "runs_with_value_note", f
    cell = {k: v for k, v in _cut_cell().items() if k != "classes_whole"}  # cut, unmarked: the mismatch counts
    r, v, f = _finding(_save(tmp_path, "loss_only", " reads=0"), _backend(tmp_path, cell))
    assert v["verdict"] == "runs_with_value_note", f


@pytest.mark.parametrize("own", [False, True], ids=["opinfo cases", "own calls replayed"])
def test_a_mismatch_on_an_unread_output_that_ran_through_the_fallback_is_a_fallback(tmp_path, own):
    """PyTorch/XLA's _ctc_loss and _embedding_bag fall back to the CPU and give their extra outputs (log_alpha,
    offset2bag) unlike CPU's: the case is a mismatch, and the fallback rides on it (' fell='). A model that
    never reads those outputs runs, but through the fallback: 'fallback', naming the op, never a plain 'runs'."""
    case = "trace.loss_only|float32|9" if own else "nll_loss|float32|0"
    cell = {
        **MISMATCH,
        "case": case,
        "failed": [f"mismatch {case} float32:2,int64:1 fell=aten::_ctc_loss.Tensor out=1"],
        **({"traced": {"loss_only": "mismatch"}} if own else {}),
    }
    r, v, f = _finding(_save(tmp_path, "loss_only", " reads=0"), _backend(tmp_path, cell))
    assert v["verdict"] == "runs_with_fallback" and f["outcome"] == "fallback", f
    assert "aten::_ctc_loss.Tensor" in f["why"] and "CPU fallback" in f["why"] and "never reads" in f["why"]


def test_the_probe_writes_the_fallback_of_a_mismatching_case_and_readers_skip_it():
    from opcov.probe.results import failed_text
    from opcov.store.combine import failed_fell, failed_outputs, parse_failed

    text = failed_text("mismatch", "c|float32|0", "float32:2;", [1], ["aten::_ctc_loss.Tensor"])
    assert text == "mismatch c|float32|0 float32:2; fell=aten::_ctc_loss.Tensor out=1"
    assert parse_failed(text) == ("mismatch", "c|float32|0", "float32:2;")
    assert failed_fell(text) == ("aten::_ctc_loss.Tensor",) and failed_outputs(text) == "1"
    assert " fell=" not in failed_text("fallback", "c|float32|0", "float32:2;", None, ["aten::x"])


# ---------------------------------------------------------------- the probe's record


def test_the_comparison_names_every_output_that_differs():
    import torch

    from opcov.probe.compare import judge

    cpu = (torch.ones(3), torch.tensor(32.0), torch.zeros(2))
    v = judge((torch.ones(3), torch.tensor(1.0), torch.zeros(2)), cpu, None, dtype="float32", mode="values")
    assert v["status"] == "mismatch" and v["why"].startswith("output 1:") and v["outputs"] == [1]
    v = judge((torch.ones(3), torch.tensor(1.0), torch.ones(2)), cpu, None, dtype="float32", mode="values")
    assert v["outputs"] == [1, 2]
    v = judge(torch.ones(3), torch.zeros(3), None, dtype="float32", mode="values")
    assert v["status"] == "mismatch" and "outputs" not in v  # one output: nothing to tell apart


def test_a_case_keeps_its_outputs_only_for_the_overload_it_calls_itself():
    """A replayed call of the overload keeps which outputs differ, filed under that overload; an OpInfo
    function's outputs (or the inputs it mutates, compared after them) are not the overload's."""
    import torch

    from opcov.probe.caserecord import CaseRecord
    from opcov.probe.execute import _keep_outputs
    from opcov.probe.results import build_ops
    from opcov.probe.sample import _Call

    out = (torch.ones(3), torch.tensor(1.0))
    verdict = {"status": "mismatch", "why": "output 1: values differ", "outputs": [1]}
    part = {"ops": [["aten::nll_loss_forward", "float32"]], "sigs": ["float32:2,int64:1"], **verdict}
    _keep_outputs(part, verdict, _Call(torch.ops.aten.nll_loss_forward.default), out)
    assert part["outputs"] == [1] and part["output_of"] == "aten::nll_loss_forward"
    other = {**verdict}
    _keep_outputs(other, verdict, torch.nn.functional.nll_loss, out)
    assert "outputs" not in other
    rec = CaseRecord("trace.m|float32|9", "trace.m|float32", "trace.m", "float32", ["aten::nll_loss_forward"], fwd=part)
    cell = build_ops([rec], (), lambda name, probed: {"skipped": "no_source"})["aten::nll_loss_forward"]["float32"]
    assert cell["failed"] == ["mismatch trace.m|float32|9 float32:2,int64:1 out=1"]


def test_a_number_a_call_returns_is_read_by_the_host_and_a_storage_read_once_is_read():
    """item()'s number (or a SymInt output) reaches the host, which reads it; an output read through a view
    of a later call is read, and an output filed after that read waits for a read of its own."""
    import torch

    from opcov.tracing.calltree import Builder
    from opcov.tracing.trace import _Reads

    tree = Builder()
    reads = _Reads(tree)
    x = torch.ones(4)
    a = tree.leaf("aten::max.dim", "forward", "float32")
    values, indices = torch.ones(2), torch.zeros(2, dtype=torch.long)
    reads.produced(torch, a, (values, indices, 3))
    reads.read([indices.view(-1)])
    b = tree.leaf("aten::add_.Tensor", "forward", "float32")
    reads.produced(torch, b, x)  # filed on x's storage, not read yet
    assert [row["reads"] for row in tree.rows()] == [(1, 2), ()]
    reads.read([x.view(2, 2)])
    assert [row["reads"] for row in tree.rows()] == [(1, 2), (0,)]


# ---------------------------------------------------------------- a dtype-only difference, model by model


def test_a_dtype_only_difference_is_kept_on_each_replayed_case():
    """PyTorch/XLA's cumsum of a bool mask returns bool where CPU returns int64. Where the model's values
    make them equal (a mask with no True: all zeros), the case's item says so ('values=equal'), not only
    the cell's representative why; where they differ ([1, 2, 2, 3] against True), it does not."""
    import torch

    from opcov.probe.caserecord import CaseRecord
    from opcov.probe.compare import judge
    from opcov.probe.results import build_ops
    from opcov.store.combine import failed_values_equal

    def item(model, dev, cpu, sig="bool:2;"):
        v = judge(dev, cpu, None, dtype="bool", mode="values")
        part = {"ops": [["aten::cumsum", "bool"]], "sigs": [sig], **v}
        rec = CaseRecord(f"trace.{model}|float32|0", f"trace.{model}|float32", f"trace.{model}", "bool",
                         ["aten::cumsum"], fwd=part)  # fmt: skip
        cell = build_ops([rec], (), lambda name, probed: {"skipped": "no_source"})["aten::cumsum"]["bool"]
        return cell["failed"][0]

    zeros = item("packed_free", torch.zeros(2, 4, dtype=torch.bool), torch.zeros(2, 4, dtype=torch.long))
    assert zeros == "mismatch trace.packed_free|float32|0 bool:2; values=equal" and failed_values_equal(zeros)
    counts = item("packed", torch.ones(1, 4, dtype=torch.bool), torch.tensor([[1, 2, 2, 3]]))
    assert counts == "mismatch trace.packed|float32|0 bool:2;" and not failed_values_equal(counts)
    v = judge((torch.ones(2), torch.ones(2, dtype=torch.bool)), (torch.ones(2), torch.ones(2, dtype=torch.long)),
              None, dtype="float32", mode="values")  # fmt: skip
    assert v["outputs"] == [1] and v["why"] == "output 1: dtype bool, cpu gives int64; values equal"


CUMSUM = "1 forward kernel aten::cumsum bool x1 variant=given reads=0 | shape=[2, 16] | sig=bool:2;"


def _cumsum_backend(tmp_path, failed, traced):
    root = tmp_path / "coverage"
    data.save(
        registered(ops={"aten::cumsum": kernel()}),
        str(root / "fake" / f"registered-torch-{TORCH}-fakepkg-1.0.yaml"),
    )
    cell = {
        "fwd": "mismatch",
        "cases": len(failed),
        "fails": len(failed),
        "case": "trace.first|float32|0",
        "why": "output: dtype bool, cpu gives int64; values equal",
        "failed": failed,
        "traced": traced,
    }
    data.save(
        probed(ops={"aten::cumsum": {"bool": cell}}), str(root / "fake" / f"probed-torch-{TORCH}-fakepkg-1.0.yaml")
    )
    return root


def test_each_models_own_dtype_only_difference_is_a_note_and_a_value_difference_is_not(tmp_path):
    """Four models replayed the same cumsum: the representative (first) and another whose item says
    values=equal run, with the dtype named apart; one whose own values differed, and one with two calls of
    which one differed, keep the value note, though the cell's representative text says 'values equal'."""
    failed = [
        "mismatch trace.first|float32|0 bool:2; values=equal",
        "mismatch trace.second|float32|0 bool:2; values=equal",
        "mismatch trace.third|float32|0 bool:2;",
        "mismatch trace.fourth|float32|0 bool:2; values=equal",
        "mismatch trace.fourth|float32|1 bool:3;",  # another of its calls: its values differ
    ]
    traced = {"first": "mismatch", "second": "mismatch", "third": "mismatch", "fourth": "mismatch"}
    root = _cumsum_backend(tmp_path, failed, traced)
    verdicts = (
        ("first", "runs"),
        ("second", "runs"),
        ("third", "runs_with_value_note"),
        ("fourth", "runs_with_value_note"),
    )
    for model, verdict in verdicts:
        path = tmp_path / f"{model}.yaml"
        opset.save(tree_opset([CUMSUM], name=model), str(path))
        r, v, f = _finding(str(path), root)
        assert v["verdict"] == verdict, (model, f)
        if verdict == "runs":
            assert "dtype differs from CPU's, its values do not" in f["why"], f
