"""The reach of kernels torchgen generated, read from its rules (opcov.scan.generated), checked against
what recording PyTorch's own calls found, and the ops it resolves in the bundled data."""

import os

import pytest
from conftest import ROOT

from opcov.scan import generated
from opcov.store import data

torch = pytest.importorskip("torch")


@pytest.mark.parametrize(
    "name, wraps",
    [
        # out= of a functional op: the functional, then resize_output and copy_ into the out
        ("aten::_fused_adam.tensor_lr_out", ("aten::_fused_adam.tensor_lr", "aten::resize_", "aten::copy_")),
        # a functional made from an in-place op: clones, then the in-place op on them
        ("aten::_fused_adam.tensor_lr", ("aten::clone", "aten::_fused_adam_.tensor_lr")),
        # the copy of a view: the view, then clone
        ("aten::_sparse_broadcast_to_copy", ("aten::_sparse_broadcast_to", "aten::clone")),
        ("aten::_nested_view_from_buffer_copy", ("aten::_nested_view_from_buffer", "aten::clone")),
        ("aten::mm", None),  # a kernel of its own
        ("aten::add.out", None),  # written by hand (structured), not generated
    ],
)
def test_a_generated_kernel_reaches_what_it_wraps(name, wraps):
    assert generated.reach(torch, name) == wraps


def test_the_rule_agrees_with_every_recorded_reach_of_a_generated_kernel():
    """Where a call of a generated kernel could be recorded, it reached the op the rule names, or that
    op's own decomposition (the recorder sees through a composite: _fw_primal_copy reaches alias)."""
    doc = data.load(os.path.join(ROOT, "coverage", "cpu", "registered-torch-2.13.0+cpu.yaml"))
    checked, wrong = 0, []
    for name, rec in doc["ops"].items():
        if not name.startswith("aten::") or rec.get("fwd") != "composite" or rec.get("via") is None:
            continue
        if generated.WHY in str(rec.get("why")):
            continue  # given by the rule itself
        wraps = generated.reach(torch, name)
        if wraps is None:
            continue
        checked += 1
        seen_through = any(
            torch._C._dispatch_has_kernel_for_dispatch_key(wraps[0], key)
            for key in ("CompositeImplicitAutograd", "CompositeExplicitAutograd")
        )
        if wraps[0] not in rec["via"] and not seen_through:
            wrong.append((name, wraps[0], rec["via"][:4]))
    assert checked > 200 and not wrong, wrong[:5]


def test_the_bundled_cuda_data_resolves_generated_kernels():
    doc = data.load(os.path.join(ROOT, "coverage", "cuda", "registered-torch-2.13.0+cu130.yaml"))
    ops = doc["ops"]
    for name in ("aten::_fused_adam.tensor_lr", "aten::_fused_adamw.tensor_lr_out", "aten::_sparse_broadcast_to_copy"):
        assert ops[name]["res"] != "unresolved" and generated.WHY in ops[name]["why"], (name, ops[name])
    assert ops["aten::_fused_adam.tensor_lr"]["res"] == "registered"  # CUDA has _fused_adam_.tensor_lr
    assert ops["aten::_sparse_broadcast_to_copy"]["res"] == "missing"  # no dense CUDA _sparse_broadcast_to
