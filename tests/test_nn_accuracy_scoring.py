"""How scripts/nn_accuracy.py scores a verdict against a real PyTorch/XLA run (docs/accuracy.md): a fallback
verdict agrees only when it names exactly the ops whose kernels the backend's counters saw fall back; a fallback
found on an op's backward is its backward kernel's, named by that kernel's own row, not by the forward op."""

import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "scripts"))

import nn_accuracy  # noqa: E402


def _op(op, **dirs):
    return {"op": op, "outcome": "fallback", "findings": [{"direction": d, "outcome": o} for d, o in dirs.items()]}


def test_a_backward_fallback_is_named_by_the_backward_kernel_not_the_forward_op():
    verdict = {
        "ops": [
            _op("aten::upsample_nearest2d", forward="ok", backward="fallback"),
            _op("aten::upsample_nearest2d_backward", forward="fallback"),
        ]
    }
    named = nn_accuracy.fallback_named(verdict)
    assert named == ["aten::upsample_nearest2d_backward"]
    real = {"actual": "fallback", "fallback": ["aten::upsample_nearest2d_backward"]}
    assert nn_accuracy.classify("runs_with_fallback", real, named) == (True, "agree")


def test_a_fallback_verdict_naming_other_ops_does_not_agree():
    verdict = {"ops": [_op("aten::_ctc_loss.Tensor", forward="fallback", backward="fallback")]}
    named = nn_accuracy.fallback_named(verdict)
    assert named == ["aten::_ctc_loss.Tensor"]
    real = {"actual": "fallback", "fallback": ["aten::_ctc_loss_backward.Tensor"]}
    assert nn_accuracy.classify("runs_with_fallback", real, named) == (False, "right verdict, wrong ops")
    assert nn_accuracy.classify("runs", real, [])[0] is False
