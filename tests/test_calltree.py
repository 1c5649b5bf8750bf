"""Op sets as call trees: the builder's aggregation, the file format and its validation, and the
verdict's backend-aware resolution (a backend's own kernel for a composite is judged, not the
decomposition the stand-in ran, forward and backward).

Torch-free: the trees here are made by hand, and the zoo's committed ones are read as they are.
"""

import json

import pytest
from conftest import opcov_here
from test_check import TORCH, kernel, model, probed, registered

from opcov.store import data, opset
from opcov.tracing.calltree import Builder, flat, merge

# ---------------------------------------------------------------- the builder


def test_builder_files_calls_under_their_ancestry_and_ties_the_backward():
    b = Builder()
    for seq in (7, 9):  # two calls of linear: one node each level, counted twice
        lin = b.open("aten::linear", "forward", "composite")
        b.leaf("aten::t", "forward", "float32", grad=True)
        mm = b.leaf("aten::mm", "forward", "float32", shape="[2, 8], [8, 8]", grad=True)
        b.created_node(seq, mm)  # the autograd node of this mm call
        b.created_node(seq, -5)  # a later call under the same number did not make it
        b.close(lin, dtype="float32", shape="[2, 8]", grad=True, on_device=True)
    host = b.open("aten::result_type.Scalar", "forward", "composite")
    b.close(host, dtype="none", on_device=False)  # nothing on the device, nothing inside: dropped
    empty = b.open("aten::contiguous", "forward", "composite")
    b.close(empty, dtype="float32", on_device=True)  # on the device, decomposed into nothing: kept
    for seq in (7, 9):
        b.leaf("aten::mm", "backward", "float32", issued_by=b.issued_by(seq))
    b.leaf("aten::ones_like", "backward", "float32", issued_by=b.issued_by(None))
    rows = b.rows()
    got = [(r["id"], r.get("parent"), r.get("issued_by"), r["op"], r["calls"]) for r in rows]
    assert got == [
        (1, None, None, "aten::linear", 2),
        (2, 1, None, "aten::t", 2),
        (3, 1, None, "aten::mm", 2),
        (4, None, None, "aten::contiguous", 1),
        (5, None, 3, "aten::mm", 2),
        (6, None, None, "aten::ones_like", 1),
    ]
    assert rows[2]["shape"] == "[2, 8], [8, 8]" and rows[2]["grad"] and "grad" not in rows[4]


def test_builder_keeps_a_composite_for_its_children_and_makes_shapes_once():
    b = Builder()
    made = []
    outer = b.open("aten::dropout", "forward", "composite")
    b.leaf("aten::native_dropout", "forward", "float32", shape=lambda: made.append(1) or "[4]")
    b.close(outer, dtype="float32", on_device=False)  # kept: a call inside it reached the device
    b.leaf("aten::native_dropout", "forward", "float32", shape=lambda: made.append(1) or "[9]")
    rows = b.rows()
    assert [(r["op"], r.get("parent"), r.get("shape")) for r in rows] == [
        ("aten::dropout", None, None),
        ("aten::native_dropout", 1, "[4]"),
        ("aten::native_dropout", None, "[9]"),
    ]
    assert len(made) == 2  # one text per node, not per call


def test_merge_adds_what_only_real_runs_saw_and_marks_what_both_saw():
    def row(i, phase, kind, op, calls, **kw):
        return {"id": i, "phase": phase, "kind": kind, "op": op, "dtype": "float32", "calls": calls, **kw}

    fake = [
        row(1, "forward", "composite", "aten::sdpa", 2),
        row(2, "forward", "kernel", "aten::bmm", 4, parent=1),
        row(3, "forward", "kernel", "aten::where.self", 2, parent=1),
    ]
    real = [
        row(1, "forward", "kernel", "aten::all", 1, shape="[2, 16]"),  # the host-side mask check
        row(2, "forward", "composite", "aten::sdpa", 2),
        row(3, "forward", "kernel", "aten::bmm", 4, parent=2),
    ]
    padded = [
        row(5, "forward", "composite", "aten::sdpa", 2),
        row(6, "forward", "kernel", "aten::where.self", 2, parent=5),
    ]
    merged = merge(fake, [real, padded])
    assert [(r["id"], r.get("parent"), r["op"], r["calls"], r.get("seen")) for r in merged] == [
        (1, None, "aten::sdpa", 2, "both"),
        (2, 1, "aten::bmm", 4, "both"),
        (3, 1, "aten::where.self", 2, "both"),
        (4, None, "aten::all", 1, "real"),
    ]
    fake_ops = {
        "aten::bmm": {"forward": {"float32": {"calls": 4, "shape": "[8, 16, 16]"}}},
        "aten::where.self": {"forward": {"float32": {"calls": 2}}},
    }
    real_ops = [
        {"aten::all": {"forward": {"float32": {"calls": 1}}}, "aten::bmm": {"forward": {"float32": {"calls": 4}}}}
    ]
    assert flat(merged, fake_ops, real_ops) == {
        "aten::all": {"forward": {"float32": {"calls": 1, "shape": "[2, 16]", "seen": "real"}}},
        "aten::bmm": {"forward": {"float32": {"calls": 4, "shape": "[8, 16, 16]", "seen": "both"}}},
        "aten::where.self": {"forward": {"float32": {"calls": 2}}},
    }


# ---------------------------------------------------------------- the format


def test_node_text_round_trips():
    row = {
        "id": 12,
        "parent": 3,
        "phase": "forward",
        "kind": "composite",
        "op": "aten::scaled_dot_product_attention",
        "dtype": "bfloat16",
        "calls": 2,
        "grad": True,
        "seen": "both",
        "args": "mask=bool, dropout_p=0.0, is_causal=False, enable_gqa=False",
        "shape": "[2, 4, 16, 16], [2, 4]",
    }
    text = opset.node_text(row)
    assert text == (
        "12 forward composite aten::scaled_dot_product_attention bfloat16 x2 parent=3 grad seen=both"
        " | args=mask=bool, dropout_p=0.0, is_causal=False, enable_gqa=False | shape=[2, 4, 16, 16], [2, 4]"
    )
    assert opset.parse_node(text) == opset.Node(**row)


@pytest.mark.parametrize(
    "text, expect",
    [
        ("3 forward kernel aten::mm", "needs ID PHASE KIND OP DTYPE CALLS first"),
        ("3 forward kernel aten::mm float32 7", "calls '7' must read xN"),
        ("0 forward kernel aten::mm float32 x1", "id '0' must be a whole number of at least 1"),
        ("3 forward kernel aten::mm float32 x1 parent=two", "parent 'two' must be a whole number"),
        ("3 forward kernel aten::mm float32 x1 fast", "unknown word 'fast'"),
        ("3 forward kernel aten::mm float32 x1 | colour=red", "unknown part 'colour=red'"),
    ],
)
def test_a_malformed_node_says_what_is_wrong(text, expect):
    with pytest.raises(ValueError, match=expect.replace("(", r"\(").replace(")", r"\)")):
        opset.parse_node(text)


def tree_doc(tree, ops, mode="training"):
    doc = model(ops, mode=mode)
    doc["schema_version"] = opset.SCHEMA_VERSION
    doc["calltree"] = [
        opset.node_text(dict(zip(("id", "phase", "kind", "op", "dtype", "calls"), n[:6]), **n[6]))
        if isinstance(n, tuple)
        else n
        for n in tree
    ]
    return doc


def calls(phase, n=1, grad=False):
    return {phase: {"float32": {"calls": n, **({"grad": True} if grad else {})}}}


# A linear layer (composite on the stand-in) and silu with its backward composite:
#   forward  linear > t, mm         silu
#   backward (by mm) mm, t          (by silu) silu_backward > sigmoid, mul.Tensor
TREE = [
    (1, "forward", "composite", "aten::linear", "float32", 2, {"grad": True}),
    (2, "forward", "kernel", "aten::t", "float32", 2, {"parent": 1, "grad": True}),
    (3, "forward", "kernel", "aten::mm", "float32", 2, {"parent": 1, "grad": True}),
    (4, "forward", "kernel", "aten::silu", "float32", 1, {"grad": True}),
    (5, "backward", "kernel", "aten::mm", "float32", 4, {"issued_by": 3}),
    (6, "backward", "kernel", "aten::t", "float32", 2, {"issued_by": 3}),
    (7, "backward", "composite", "aten::silu_backward", "float32", 1, {"issued_by": 4}),
    (8, "backward", "kernel", "aten::sigmoid", "float32", 1, {"parent": 7}),
    (9, "backward", "kernel", "aten::mul.Tensor", "float32", 2, {"parent": 7}),
]
OPS = {
    "aten::t": {**calls("forward", 2, True), **calls("backward", 2)},
    "aten::mm": {**calls("forward", 2, True), **calls("backward", 4)},
    "aten::silu": calls("forward", 1, True),
    "aten::sigmoid": calls("backward"),
    "aten::mul.Tensor": calls("backward", 2),
}


def test_saved_tree_reads_back_and_lints_clean(tmp_path):
    path = tmp_path / "m.yaml"
    opset.save(tree_doc(TREE, OPS), str(path))
    text = path.read_text()
    assert "\ncalltree:\n- '1 forward composite aten::linear float32 x2 grad'\n" in text
    assert text.index("calltree:") < text.index("\nops:")
    doc = opset.load(str(path))
    assert [n.op for n in opset.nodes(doc)] == [n[3] for n in TREE]
    r = opcov_here("lint", str(path))
    assert r.returncode == 0, r.stdout


@pytest.mark.parametrize(
    "change, expect",
    [
        (
            lambda t: t.__setitem__(2, t[2].replace("parent=1", "parent=4")),
            "calltree node 3 (aten::mm): parent 4 is not a node above it",
        ),
        (
            lambda t: t.__setitem__(5, t[5].replace("issued_by=3", "issued_by=7")),
            "calltree node 6 (aten::t): issued_by 7 is not a forward node above it",
        ),
        (
            lambda t: t.__setitem__(8, t[8].replace("parent=7", "parent=5")),
            "calltree node 9 (aten::mul.Tensor): parent 5 must be a composite or call node of the same phase",
        ),
        (
            lambda t: t.__setitem__(8, t[8].replace("x2", "x3")),
            "aten::mul.Tensor backward float32: 2 calls in ops, 3 in the tree",
        ),
        (lambda t: t.__setitem__(1, t[1].replace("2 forward", "1 forward", 1)), "ids must increase down the file"),
    ],
)
def test_lint_names_the_node_and_line_of_a_bad_tree(tmp_path, change, expect):
    doc = tree_doc(TREE, OPS)
    change(doc["calltree"])
    path = tmp_path / "bad.yaml"
    path.write_text(opset.dumps(doc))
    r = opcov_here("lint", str(path))
    assert r.returncode != 0 and expect in r.stdout, r.stdout
    problems = opset.validate(doc, str(path))
    assert problems and problems[0].line is not None


def test_schema_versions_and_the_tree_go_together(tmp_path):
    doc = tree_doc(TREE, OPS)
    del doc["calltree"]
    assert "has a calltree; this one has none" in str(opset.validate(doc, "x.yaml")[0])
    doc = tree_doc(TREE, OPS)
    doc["schema_version"] = 1
    assert "calltree is schema 2's" in str(opset.validate(doc, "x.yaml")[0])
    doc = tree_doc(TREE, OPS)
    doc["parents"] = {}
    assert "parents is schema 1's" in str(opset.validate(doc, "x.yaml")[0])


# ---------------------------------------------------------------- resolution in the verdict

MISSING = {"fwd": "missing", "res": "missing", "bwd": "none", "bwd_res": "not_applicable"}
COMPOSITE = {"fwd": "composite", "res": "registered", "bwd": "composite", "bwd_res": "registered"}


def judged(tmp_path, backend_ops, probe=None, tree=TREE, ops=OPS):
    """opcov check of the tree on a backend 'fake' with these ops: (verdict, {op: outcome}, notes)."""
    cov = tmp_path / "coverage"
    data.save(registered(ops=backend_ops), str(cov / "fake" / f"registered-torch-{TORCH}-fakepkg-1.0.yaml"))
    if probe:
        data.save(probed(ops=probe), str(cov / "fake" / f"probed-torch-{TORCH}-fakepkg-1.0.yaml"))
    path = tmp_path / "m.yaml"
    opset.save(tree_doc(tree, ops), str(path))
    r = opcov_here("check", str(path), "-b", "fake", "--coverage", str(cov), "--format", "json")
    assert r.returncode in (0, 1), r.stderr
    v = json.loads(r.stdout)["verdicts"][0]
    return v["verdict"], {o["op"]: o["outcome"] for o in v["ops"]}, v["notes"]


def test_a_backend_with_its_own_kernels_runs_without_the_decompositions(tmp_path):
    """Like TorchTPU: own kernels (and autograd kernels) for linear and silu_backward, and none for
    the ops their decompositions call; judging the decomposition would say it fails."""
    ops = {
        "aten::linear": kernel(bwd="backend_kernel"),
        "aten::silu_backward": kernel(),
        "aten::silu": kernel(),
        "aten::t": MISSING,
        "aten::mm": MISSING,
        "aten::sigmoid": MISSING,
        "aten::mul.Tensor": MISSING,
    }
    verdict, outcomes, notes = judged(tmp_path, ops)
    assert verdict == "runs"
    assert outcomes == {"aten::linear": "ok", "aten::silu": "ok", "aten::silu_backward": "ok"}
    assert any(
        n.startswith(
            "fake runs its own aten::silu_backward kernel (backward, 1 call): its decomposition "
            "(aten::mul.Tensor, aten::sigmoid) was not judged"
        )
        for n in notes
    ), notes
    assert any(
        "aten::linear kernel (forward, 2 calls)" in n and "its backward is fake's autograd kernel" in n for n in notes
    ), notes


def test_a_backend_without_them_is_judged_on_the_decompositions(tmp_path):
    ops = {
        "aten::linear": COMPOSITE,
        "aten::silu_backward": COMPOSITE,
        "aten::silu": kernel(),
        "aten::t": kernel(),
        "aten::mm": kernel(),
        "aten::sigmoid": MISSING,
        "aten::mul.Tensor": kernel(),
    }
    verdict, outcomes, notes = judged(tmp_path, ops)
    assert verdict == "fails" and outcomes["aten::sigmoid"] == "fails"
    assert set(outcomes) == {"aten::t", "aten::mm", "aten::silu", "aten::sigmoid", "aten::mul.Tensor"}
    assert not any("runs its own" in n for n in notes)


def test_an_overriding_kernel_without_an_autograd_kernel_leaves_the_backward_unknown(tmp_path):
    """The backend overrides linear (a composite) without an autograd kernel: the decomposition's derivative no
    longer applies, and the gradient is whatever the ops its kernel calls give, which no registration shows."""
    ops = {
        "aten::linear": {"fwd": "kernel", "res": "registered", "bwd": "lost", "bwd_res": "missing"},
        "aten::silu_backward": kernel(),
        "aten::silu": kernel(),
        "aten::t": kernel(),
        "aten::mm": kernel(),
    }
    verdict, outcomes, notes = judged(tmp_path, ops)
    assert verdict == "unknown" and outcomes["aten::linear"] == "unknown"
    assert any("has no autograd kernel for it, so its backward is whatever its kernel" in n for n in notes)


def test_probed_evidence_judges_a_composite_only_where_registration_is_silent(tmp_path):
    """A probe that ran linear itself on the device (and saw it fail) is evidence for the node when no
    registered record says which path the dispatcher takes; a record naming the composite path wins."""
    ops = {"aten::silu_backward": kernel(), "aten::silu": kernel(), "aten::t": kernel(), "aten::mm": kernel()}
    probe = {"aten::linear": {"float32": {"fwd": "error", "why": "boom"}}}
    verdict, outcomes, notes = judged(tmp_path / "a", ops, probe)
    assert verdict == "fails" and outcomes["aten::linear"] == "fails"
    assert "aten::mm" not in outcomes and "aten::t" not in outcomes  # neither forward nor its backward
    assert any("fake's probe ran aten::linear itself" in n for n in notes)
    verdict, outcomes, _ = judged(tmp_path / "b", {**ops, "aten::linear": COMPOSITE}, probe)
    assert verdict == "runs" and "aten::linear" not in outcomes and outcomes["aten::mm"] == "ok"


# ---------------------------------------------------------------- the bundled zoo


def test_llama_on_tpu_is_judged_at_tpus_own_kernels():
    r = opcov_here("check", "llama", "-b", "tpu", "-b", "cpu", "--mode", "training", "--format", "json")
    assert r.returncode in (0, 1), r.stderr
    by = {v["backend"]: v for v in json.loads(r.stdout)["verdicts"]}
    tpu = {o["op"] for o in by["tpu"]["ops"]}
    assert {"aten::silu_backward", "aten::linear", "aten::cross_entropy_loss"} <= tpu
    assert not {"aten::mm", "aten::t", "aten::sigmoid", "aten::_log_softmax"} & tpu  # decompositions tpu skips
    assert any("tpu runs its own aten::silu_backward kernel" in n for n in by["tpu"]["notes"])
    cpu = {o["op"] for o in by["cpu"]["ops"]}  # CPU has silu_backward, not linear: mm is judged there
    assert {"aten::silu_backward", "aten::mm"} <= cpu and "aten::linear" not in cpu
