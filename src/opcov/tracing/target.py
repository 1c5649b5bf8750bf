"""A stand-in accelerator for tracing: PrivateUse1 claimed as a storage-less Python backend.

Fake tensors on this device carry the PrivateUse1 dispatch keys, so composite kernels
that check ``is_privateuseone()`` take the path a real out-of-tree accelerator gets
(``dropout`` -> ``native_dropout``, convolution -> ``convolution_overrideable``, the
math path of scaled_dot_product_attention) while no kernel ever runs: FakeTensorMode
answers every call from meta kernels. Fake tensors on "cuda" would fail on a CPU-only
torch build, and a real backend's device (torch_tpu) must never be initialised here.

PrivateUse1 can be claimed once per process: ``ensure()`` returns None when another
backend already holds it, and the tracer then falls back to CPU with parent calls.
Core torch registers no AutocastPrivateUse1 policy (each backend brings its own): a
fallthrough makes ops outside the policy pass, and autocast.py registers CUDA's policy.
"""

from __future__ import annotations

from opcov.tracing import autocast

NAME = "opcov_accel"
_STATE: dict = {}


def ensure(torch) -> str | None:
    """The stand-in device type name, claiming PrivateUse1 on first use; None if taken."""
    if "name" in _STATE:
        return _STATE["name"]
    current = torch._C._get_privateuse1_backend_name()
    if current == NAME:  # claimed by an earlier import of this module under another name
        _STATE["name"] = NAME
        return NAME
    if current != "privateuseone" or _has_privateuse1_kernels(torch):
        _STATE["name"] = None
        return None
    from torch.utils.backend_registration import _DummyBackendModule, _setup_privateuseone_for_python_backend

    class _Module(_DummyBackendModule):
        """What torch asks a device module while building fake tensors and autocast regions."""

        def is_initialized(self):
            return True

        def is_available(self):
            return True

        def current_device(self):
            return 0

        def device_count(self):
            return 1

        def get_amp_supported_dtype(self):
            return [torch.float16, torch.bfloat16]

        def _is_in_bad_fork(self):
            return False

        def manual_seed_all(self, seed):
            return None

    _setup_privateuseone_for_python_backend(NAME, backend_module=_Module())
    lib = torch.library.Library("_", "IMPL")
    lib.fallback(torch.library.fallthrough_kernel, "AutocastPrivateUse1")
    # kept alive for the process
    _STATE["libs"] = [lib, _creation_kernels(torch), _meta_kernels(torch), autocast.register(torch, NAME)]
    _STATE["name"] = NAME
    return NAME


def _creation_kernels(torch):
    """Storage-less tensors for code that bypasses FakeTensorMode (``torch.tensor(data, device=...)``
    builds the tensor with Python modes excluded, then FakeTensorMode lifts it): no data is kept."""
    lib = torch.library.Library("aten", "IMPL")

    def empty(size, dtype=None, layout=None, device=None, pin_memory=None, memory_format=None):
        return torch._C._acc.create_empty_tensor(list(size), dtype or torch.get_default_dtype())

    def empty_strided(size, stride, dtype=None, layout=None, device=None, pin_memory=None):
        return torch._C._acc.create_empty_tensor(list(size), dtype or torch.get_default_dtype())

    lib.impl("empty.memory_format", empty, "PrivateUse1")
    lib.impl("empty_strided", empty_strided, "PrivateUse1")
    lib.impl("_copy_from", lambda self, dst, non_blocking=False: dst, "PrivateUse1")
    return lib


def _meta_kernels(torch):
    """Shape functions FakeTensorMode lacks for ops that accelerators take (cuda and PrivateUse1 run
    ``nn.GRU`` through the fused cell, CPU does not); without them such models could not be traced."""
    lib = torch.library.Library("aten", "IMPL")
    if not torch._C._dispatch_has_kernel_for_dispatch_key("aten::_thnn_fused_gru_cell", "Meta"):
        def gru_cell(input_gates, hidden_gates, hx, input_bias=None, hidden_bias=None):
            return torch.empty_like(hx), hx.new_empty((hx.shape[0], 5 * hx.shape[1]))

        lib.impl("_thnn_fused_gru_cell", gru_cell, "Meta")
    if not torch._C._dispatch_has_kernel_for_dispatch_key("aten::_thnn_fused_gru_cell_backward", "Meta"):
        def gru_cell_backward(grad_hy, workspace, has_bias):
            b, h = grad_hy.shape
            gates = grad_hy.new_empty((b, 3 * h))
            bias = grad_hy.new_empty((3 * h,)) if has_bias else grad_hy.new_empty((0,))
            return gates, torch.empty_like(gates), torch.empty_like(grad_hy), bias, torch.empty_like(bias)

        lib.impl("_thnn_fused_gru_cell_backward", gru_cell_backward, "Meta")
    return lib


def _has_privateuse1_kernels(torch) -> bool:
    """A backend (not renamed yet, e.g. torch_tpu without a TPU) already registered kernels."""
    C = torch._C
    return C._dispatch_has_kernel_for_dispatch_key("aten::add.Tensor", "PrivateUse1") or \
        C._dispatch_has_kernel_for_dispatch_key("aten::mm", "PrivateUse1")
