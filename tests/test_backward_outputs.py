"""The probe's backward goes through the outputs both autograds differentiate.

A backend that runs an op at its own autograd key may leave some outputs without a gradient where CPU's
formula gives one: PyTorch/XLA's native_group_norm returns mean and rstd that do not require grad. A
model's backward only reaches the normalised output, so the replayed call must not fail for the others;
but a device that differentiates none of the op's outputs fails, as the model's backward would.
Real torch on CPU, the device's outputs made as such a backend returns them.
"""

from types import SimpleNamespace

import torch

from opcov.probe.caserecord import CaseRecord
from opcov.probe.execute import Executor


def _group_norm_case(device_grads):
    """rec.bwd after Executor.backward on native_group_norm, the device's outputs requiring grad where
    ``device_grads`` says (one flag per output: out, mean, rstd)."""
    torch.manual_seed(0)
    x = torch.randn(2, 6, 8)
    w, b = torch.randn(6), torch.randn(6)

    def fn(x, w, b):
        return torch.native_group_norm(x, w, b, 2, 6, 8, 1, 1e-5)

    def leaves():
        return tuple(t.clone().requires_grad_(True) for t in (x, w, b))

    cpu_in, dev_in = leaves(), leaves()
    cpu_out = fn(*cpu_in)
    dev_out = tuple(t if keep else t.detach() for t, keep in zip(fn(*dev_in), device_grads))
    sample = SimpleNamespace(
        input=cpu_in[0], args=cpu_in[1:], kwargs={}, output_process_fn_grad=lambda o: o, keep_layout=False
    )
    rec = CaseRecord.start(
        "c|float32|0", {"id": "c", "source": "test", "dtype": "float32"}, ["aten::native_group_norm"]
    )
    ex = Executor("cpu")
    ex.backward(
        rec,
        sample,
        fn,
        0,
        "values",
        None,
        (cpu_out, dev_out),
        ((cpu_in[0], cpu_in[1:], {}), (dev_in[0], dev_in[1:], {})),
        None,
    )
    return rec.bwd


def test_outputs_the_device_does_not_differentiate_are_left_out_and_named():
    bwd = _group_norm_case((True, False, False))
    assert bwd["status"] == "pass", bwd
    assert bwd["outputs_without_grad"] == [1, 2]


def test_a_device_that_differentiates_no_output_fails():
    bwd = _group_norm_case((False, False, False))
    assert bwd["status"] not in ("pass", None), bwd
    assert "does not require grad" in bwd.get("why", ""), bwd


def test_all_outputs_differentiated_on_both_is_the_plain_backward():
    bwd = _group_norm_case((True, True, True))
    assert bwd["status"] == "pass" and "outputs_without_grad" not in bwd, bwd
