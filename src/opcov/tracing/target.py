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

Composite calls are made visible: every CompositeImplicitAutograd aten op whose
AutogradPrivateUse1 entry is its math kernel gets a pass-through Python kernel at that key
(``show_composites``) which runs the very same math kernel and, while a tracer has set a
hook (``composite_hook``), tells it the call began and ended. A TorchDispatchMode sits below
autograd, so it sees only what a decomposition calls; the pass-through also sees the
composites autograd itself calls in the backward (``silu_backward``). Nothing else changes:
the dispatcher ran the math kernel at that key before, and runs it now.
"""

from __future__ import annotations

import contextlib

from opcov.catalog import resolve_overload
from opcov.tracing import autocast

NAME = "opcov_accel"
_STATE: dict = {}
_HOOK: list = [None]  # hook(op, run, args, kwargs) while a trace records composite calls
# Keys whose kernel, if an op has one, may stand before the math kernel at AutogradPrivateUse1.
_MAYBE_NOT_MATH = (
    "AutogradPrivateUse1",
    "PrivateUse1",
    "Autograd",
    "CompositeExplicitAutograd",
    "CompositeExplicitAutogradNonFunctional",
)


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
    show_composites(torch)
    _STATE["name"] = NAME
    return NAME


def show_composites(torch) -> None:
    """Register the pass-through composite kernels (once per process) on whatever PrivateUse1 backend
    this process has: the stand-in, or the computing one of a real-valued trace (realtrace.py)."""
    if "composites" not in _STATE:
        _STATE["composites"] = _composite_kernels(torch)


@contextlib.contextmanager
def composite_hook(hook):
    """While inside: each composite call on the stand-in goes through ``hook(op, run, args, kwargs)``,
    which must return ``run(*args, **kwargs)`` (the op's math kernel)."""
    _HOOK[0] = hook
    try:
        yield
    finally:
        _HOOK[0] = None


def _composite_kernels(torch):
    """Pass-through AutogradPrivateUse1 kernels for the ops the stand-in runs as their decomposition."""
    C = torch._C
    lib = torch.library.Library("aten", "IMPL")
    math = C.DispatchKey.CompositeImplicitAutograd
    for name in C._dispatch_get_all_op_names():
        if (
            name.startswith("aten::")
            and C._dispatch_has_kernel_for_dispatch_key(name, "CompositeImplicitAutograd")
            and _math_at_autograd(C, name)
        ):
            op = resolve_overload(torch, name)
            lib.impl(op, _passthrough(op, math), "AutogradPrivateUse1")
    return lib


def _math_at_autograd(C, name: str) -> bool:
    """Whether the op's AutogradPrivateUse1 entry is its math kernel (the dump table decides when
    another kernel could stand before it: ~10 ops)."""
    if not any(C._dispatch_has_kernel_for_dispatch_key(name, key) for key in _MAYBE_NOT_MATH):
        return True
    return any(
        line.startswith("AutogradPrivateUse1:") and "[math kernel]" in line
        for line in C._dispatch_dump_table(name).splitlines()
    )


def _passthrough(op, math):
    def kernel(*args, **kwargs):
        hook = _HOOK[0]
        if hook is None:
            return op._op_dk(math, *args, **kwargs)
        return hook(op, lambda *a, **k: op._op_dk(math, *a, **k), args, kwargs)

    kernel.__name__ = f"opcov_composite_{op.name()}"
    return kernel


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
    return C._dispatch_has_kernel_for_dispatch_key(
        "aten::add.Tensor", "PrivateUse1"
    ) or C._dispatch_has_kernel_for_dispatch_key("aten::mm", "PrivateUse1")
