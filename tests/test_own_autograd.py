"""Ops a backend registers at its own autograd key (registered ``bwd: backend_kernel``): its dispatcher stops
there, forward and backward, so the backward kernels the op's derivative formula calls on other devices
never run on it. PyTorch/XLA registers native_layer_norm and native_group_norm so; a model's training
step on xla must not be judged on native_layer_norm_backward or native_group_norm_backward (which its
CPU fallback would catch: a false "runs with fallback"), while cpu, which has no such kernel, still is.
Two normalisation families (a transformer block's LayerNorm, a CNN's GroupNorm), traced by the real
tracer and judged on the bundled data."""

import textwrap

import pytest
from conftest import check_verdict, trace_factories

FACTORIES = textwrap.dedent(
    """
    import torch
    import torch.nn as nn

    def layer_norm_block():
        torch.manual_seed(0)
        model = nn.Sequential(nn.Linear(8, 16), nn.LayerNorm(16), nn.GELU(), nn.Linear(16, 2))
        return model, (torch.randn(3, 8),)

    def group_norm_cnn():
        torch.manual_seed(0)
        model = nn.Sequential(nn.Conv2d(3, 8, 3), nn.GroupNorm(4, 8), nn.ReLU(), nn.Flatten(), nn.LazyLinear(2))
        model(torch.randn(2, 3, 6, 6))
        return model, (torch.randn(2, 3, 6, 6),)
    """
)
CASES = [("layer_norm_block", "aten::native_layer_norm"), ("group_norm_cnn", "aten::native_group_norm")]


@pytest.fixture(scope="module")
def opsets(tmp_path_factory):
    names = [name for name, _ in CASES]
    return trace_factories(tmp_path_factory.mktemp("own_autograd"), "normmodels", FACTORIES, names, "training")


def _judged(path, backend):
    verdict = check_verdict(path, backend)
    return {o["op"] for o in verdict["ops"]}, verdict["notes"]


@pytest.mark.parametrize("name, op", CASES)
def test_a_backward_the_backend_runs_at_its_autograd_key_is_not_judged_on_the_formulas_kernels(opsets, name, op):
    xla_ops, xla_notes = _judged(opsets[name], "xla")
    cpu_ops, _ = _judged(opsets[name], "cpu")
    backward = op + "_backward"
    assert backward in cpu_ops  # cpu runs the derivative formula's kernel
    assert op in xla_ops and backward not in xla_ops, sorted(xla_ops)
    assert any(n.startswith(f"xla runs {op}'s backward at its own autograd key") and backward in n for n in xla_notes)
