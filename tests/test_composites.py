"""Composite ops a backend overrides with its own kernel (opcov.probe.composites): PyTorch/XLA registers kl_div,
selu, std.dim and diag at its XLA key without an autograd kernel, so its backward is whatever its kernel's
calls give. The OpInfo cases about them were filed under CPU's decomposition (``skipped: other_overload``),
and every training step that called one read ``unknown``. The bundled xla data now holds cases of the op
called as itself, forward and backward, and models of two families are judged on them: a distillation loss
(kl_div, matched CPU on xla) and a statistics head (std.dim), while selu's backward, which differs on xla, is
a value note."""

import textwrap

import pytest
from conftest import check_verdict, trace_factories

FACTORIES = textwrap.dedent(
    """
    import torch
    import torch.nn as nn
    import torch.nn.functional as F

    class Distill(nn.Module):
        def __init__(self):
            super().__init__()
            self.student, self.teacher = nn.Linear(6, 5), nn.Linear(6, 5)

        def forward(self, x):
            with torch.no_grad():
                soft = F.softmax(self.teacher(x) / 2.0, dim=-1)
            return F.kl_div(F.log_softmax(self.student(x) / 2.0, dim=-1), soft, reduction="batchmean")

    def distill():
        torch.manual_seed(0)
        return Distill(), (torch.randn(4, 6),)

    class StdHead(nn.Module):
        def __init__(self):
            super().__init__()
            self.conv, self.fc = nn.Conv2d(3, 4, 3), nn.Linear(4, 2)

        def forward(self, x):
            return self.fc(self.conv(x).flatten(2).std(dim=-1))

    def std_head():
        torch.manual_seed(0)
        return StdHead(), (torch.randn(2, 3, 6, 6),)

    def selu_mlp():
        torch.manual_seed(0)
        return nn.Sequential(nn.Linear(6, 8), nn.SELU(), nn.Linear(8, 2)), (torch.randn(3, 6),)
    """
)


@pytest.fixture(scope="module")
def opsets(tmp_path_factory):
    return trace_factories(
        tmp_path_factory.mktemp("composites"), "compmodels", FACTORIES, ["distill", "std_head", "selu_mlp"], "training"
    )


def _row(verdict, op):
    return next(o for o in verdict["ops"] if o["op"] == op)


@pytest.mark.parametrize("name, op", [("distill", "aten::kl_div"), ("std_head", "aten::std.dim")])
def test_an_overridden_composite_is_judged_on_its_own_probed_calls_forward_and_backward(opsets, name, op):
    verdict = check_verdict(opsets[name], "xla")
    row = _row(verdict, op)
    found = {(f["direction"], f["evidence"], f["outcome"]) for f in row["findings"]}
    assert found == {("forward", "probed", "ok"), ("backward", "probed", "ok")}, row
    assert verdict["verdict"] == "runs", verdict["says"]


def test_an_overridden_composite_whose_backward_differs_is_a_value_note(opsets):
    verdict = check_verdict(opsets["selu_mlp"], "xla")
    row = _row(verdict, "aten::selu")
    back = [f for f in row["findings"] if f["direction"] == "backward"]
    assert back and back[0]["evidence"] == "probed" and back[0]["outcome"] == "value_note", row
    assert verdict["verdict"] == "runs_with_value_note"


def test_the_calls_are_caught_as_the_overload_itself_and_the_catch_is_undone():
    import torch
    import torch.nn.functional as F

    from opcov.probe import composites

    x = torch.randn(4, 5, requires_grad=True)
    t = torch.rand(4, 5)
    with composites.catching(torch, ["aten::kl_div"]) as caught:
        loss = F.kl_div(x.log_softmax(-1), t, reduction="sum")
        loss.backward()  # the decomposition still runs, with its derivative
    assert x.grad is not None
    (func, args, kwargs), *rest = caught
    assert not rest and func.name() == "aten::kl_div"
    assert args[0].requires_grad and not args[1].requires_grad  # which inputs require grad is kept
    assert args[0] is not x and torch.equal(args[1], t)  # copies
    F.kl_div(x.log_softmax(-1), t, reduction="sum")  # the kernels are gone: nothing caught after the block
    assert len(caught) == 1


def test_a_composite_group_is_planned_only_for_opinfos_about_an_overridden_overload():
    from opcov.probe import cases, composites

    groups = cases.select_groups(
        "^(std|nn.functional.selu|nn.functional.relu)$",
        dtypes=("float32",),
        directions=("forward", "backward"),
        canaries=False,
        composite_ops=["aten::std.dim", "aten::selu"],
    )
    made = {g.id: g for g in groups if g.source.startswith(composites.PREFIX)}
    assert set(made) == {"composite.std|float32", "composite.nn.functional.selu|float32"}
    assert made["composite.std|float32"].ops == ("aten::std.dim",) and made["composite.std|float32"].backward
    loaded = composites.load(made["composite.nn.functional.selu|float32"].as_dict())
    assert loaded.samples and {s.fn.func.name() for s in loaded.samples} == {"aten::selu"}
