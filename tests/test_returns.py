"""Which outputs a model returns to its caller (``returns=``), and a difference of an output's dtype alone
judged by who consumes it.

The class of calls: ops whose result dtype differs on a backend while the values are equal (PyTorch/XLA's
cumulative sum of bool or int32 gives bool or int32, CPU's int64). Where only the model's own ops consume
the output, they take it as it is (a selective scan's cumulative mask count: the real run matched CPU);
where the model returns it, its caller receives another dtype (a model returning an int32 count: the real
run gave another dtype, docs/reality/nn-xla-unseen.json's scan_kron_cross). Two families are traced: a
segmentation-style head returning an argmax through a view, and a counting model returning a cumsum.
"""

import pytest
import torch
from test_check import kernel, probed, registered, tree_opset
from torch import nn

import opcov
from opcov.store import opset
from opcov.verdict import judge


class _Counts(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(6, 6)

    def forward(self, x):
        h = self.fc(x)
        inner = torch.cumsum(h > 0, dim=1)  # consumed by the model's own ops (a node apart: bool)
        count = torch.cumsum((h < 0).int(), dim=1)  # returned
        return h.sum(1) + inner.float().mean(1), count


class _SegHead(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(2, 3, 1)

    def forward(self, x):
        logits = self.conv(x)
        return logits, logits.argmax(1).view(x.shape[0], -1)


def _returns(doc, op):
    return [n.returns for n in opset.nodes(doc) if n.op == op]


@pytest.mark.parametrize("mode", ["inference", "training"])
def test_the_trace_records_which_outputs_the_model_returns(mode):
    torch.manual_seed(0)
    doc = opcov.trace(_Counts(), (torch.randn(3, 6),), mode=mode).doc
    assert doc["provenance"]["returns"] == opset.RETURNS_RECORDED
    nodes = {n.dtype: n.returns for n in opset.nodes(doc) if n.op == "aten::cumsum"}
    assert nodes == {"bool": (), "int32": (0,)}, doc["calltree"]
    seg = opcov.trace(_SegHead(), (torch.randn(2, 2, 4, 4),), mode=mode).doc
    assert _returns(seg, "aten::argmax") == [(0,)]  # through the view that the model returns
    assert all(r == () for r in _returns(seg, "aten::mean") + _returns(seg, "aten::sum"))
    assert opset.validate(doc, "x.yaml") == [] and opset.validate(seg, "y.yaml") == []


def test_returns_round_trip_and_a_bad_list_is_named():
    text = "3 forward kernel aten::cumsum int32 x1 reads=0 returns=0 | shape=[3, 6] | sig=int32:2;"
    node = opset.parse_node(text)
    assert node.returns == (0,) and opset.node_text({**node._asdict(), "variants": ()}) == text
    with pytest.raises(ValueError, match="returns=1,0|reads=1,0"):
        opset.parse_node("3 forward kernel aten::cumsum int32 x1 returns=1,0")


CELL = {
    "fwd": "mismatch",
    "cases": 2,
    "fails": 2,
    "case": "trace.other|float32|0",
    "why": "output: dtype int32, cpu gives int64; values equal",
    "failed": ["mismatch trace.other|float32|0 int32:2; values=equal"],
}


@pytest.mark.parametrize(
    "node, recorded, outcome",
    [
        ("1 forward kernel aten::cumsum int32 x1 reads=0 | shape=[3, 6] | sig=int32:2;", True, "ok"),
        ("1 forward kernel aten::cumsum int32 x1 reads=0 returns=0 | shape=[3, 6] | sig=int32:2;", True, "value_note"),
        ("1 forward kernel aten::cumsum int32 x1 reads=0 | shape=[3, 6] | sig=int32:2;", False, "ok"),
        # another rank: the dtype of a result does not hang on it
        ("1 forward kernel aten::cumsum int32 x1 reads=0 | shape=[2, 3, 6] | sig=int32:3;", True, "ok"),
        (
            "1 forward kernel aten::cumsum int32 x1 reads=0 returns=0 | shape=[2, 3, 6] | sig=int32:3;",
            True,
            "value_note",
        ),
    ],
)
def test_a_dtype_only_difference_is_a_value_note_only_where_the_caller_receives_it(node, recorded, outcome):
    """Consumed inside the model: a note that names the dtype; returned to the caller: a value note that says
    so; an op set that does not record what the model returns (traced before opcov did): the note."""
    doc = tree_opset([node])
    if recorded:
        doc["provenance"]["returns"] = opset.RETURNS_RECORDED
    cov = judge.Coverage(
        "fake", registered(ops={"aten::cumsum": kernel()}), probed(ops={"aten::cumsum": {"int32": CELL}}), ["r", "p"]
    )
    found = judge.judge(doc, cov).ops[0].findings[0]
    assert found.outcome == outcome, found
    if outcome == "ok":
        assert "dtype differs from CPU's, its values do not" in found.why
    else:
        assert "this model returns that output to its caller" in found.why
