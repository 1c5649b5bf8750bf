"""The readers' fast paths give what the careful paths give, and refuse what they refuse.

An op set's call tree is read in one scan of its joined node texts (opset._parse_tree) and its ops
checked in one loop (opset._op_fine); each falls back to the node-by-node reader and the generator
that names the problem. These tests hold the fast paths to the careful ones, on the zoo's committed
op sets and on texts made to sit at the edges (a text of two lines, a node that is not a string,
parts out of order, a count that is a bool). Torch-free.
"""

import glob
import os

import pytest
from test_calltree import OPS, TREE, tree_doc

from opcov.errors import DataError
from opcov.store import opset

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def zoo_trees(n=30):
    files = sorted(glob.glob(os.path.join(ROOT, "coverage", "models", "**", "*.yaml"), recursive=True))
    return [opset.load(f)["calltree"] for f in files[:: max(1, len(files) // n)]]


def test_one_scan_of_a_tree_reads_every_node_as_parse_node_does():
    trees = zoo_trees()
    assert trees, "no op sets under coverage/models"
    for tree in trees:
        assert opset._parse_tree(tree) == [opset.parse_node(t) for t in tree]
    odd = [
        "1 forward composite aten::scaled_dot_product_attention bfloat16 x2 grad seen=both variant=given,padded_mask"
        " | args=mask=bool, p=0.0 | shape=[2, 4], []",
        "2 forward kernel aten::mm bfloat16 x1 parent=1 | shape=a|b, c |d",  # "|" without a space each side is text
        "3 backward kernel aten::mm bfloat16 x12 issued_by=2 seen=real | args=",
        "4 optimizer call torch.optim.AdamW.step none x1",
        "5 forward kernel aten::add.Tensor float32 x1 | shape=[é, ü]",
    ]
    assert opset._parse_tree(odd) == [opset.parse_node(t) for t in odd]


@pytest.mark.parametrize(
    "tree",
    [
        # one text holding two well-formed node lines: joined, the lines would count as two nodes
        ["1 forward kernel aten::mm float32 x1\n2 forward kernel aten::t float32 x1", "junk"],
        ["1 forward kernel aten::mm float32 x1", 7],  # a node that is not a string
        ["1 forward kernel aten::mm float32 x1 | shape=[2] | args=x"],  # parts out of order: word by word
        ["1 forward kernel aten::mm float32 x1 | "],  # an empty part
        ["1 forward kernel aten::mm float32 x0"],
    ],
)
def test_a_tree_outside_the_written_layout_takes_the_careful_reader(tree):
    assert opset._parse_tree(tree) is None


def test_a_node_text_of_two_lines_is_refused_as_before(tmp_path):
    doc = tree_doc(TREE, OPS)
    doc["calltree"][3] = doc["calltree"][3] + "\n" + doc["calltree"][3]
    problems = [p.message for p in opset.validate(doc, "x.yaml")]
    assert any("calltree node 4" in m for m in problems), problems
    path = tmp_path / "two.yaml"
    path.write_text(opset.dumps(doc))
    with pytest.raises(DataError):
        opset.load(str(path))


class Str(str):
    def __repr__(self):
        return f"Str({str(self)!r})"


@pytest.mark.parametrize(
    "rec",
    [
        {"forward": {"float32": {"calls": 3, "grad": True, "seen": "both", "shape": "[2]"}}},
        {"backward": {"bfloat16": {"calls": 1}}, "optimizer": {"float32": {"calls": opset.MAX_CALLS}}},
        {"forward": {"float32": {"calls": True}}},  # a bool is no count
        {"forward": {"float32": {"calls": 0}}},
        {"forward": {"float32": {"calls": opset.MAX_CALLS + 1}}},
        {"forward": {"float32": {"calls": 2.0}}},
        {"forward": {"float32": {"calls": 2, "seen": "never"}}},
        {"forward": {"float32": {"calls": 2, "colour": "red"}}},
        {"forward": {"float32": {"calls": 2, "shape": Str("[2]")}}},  # a str subclass: the careful path decides
        {"sideways": {"float32": {"calls": 2}}},
        {"forward": {3: {"calls": 2}}},
        {"forward": {"float32": [2]}},
        {"forward": []},
        {},
        [],
    ],
)
def test_the_one_loop_op_check_agrees_with_the_careful_one(rec):
    subclass = "Str" in repr(rec)  # a str subclass takes the careful path, which finds nothing wrong
    for name in ("aten::mm", "mm", 5):
        problems = list(opset._op_problems(name, rec))
        assert opset._op_fine(name, rec) == (not problems and not subclass), (name, rec, problems)
