"""A pure-Python PrivateUse1 device backend with planted behaviours, for opcov's tests.

opcov measures which ATen operators a device backend supports and how well.
To test opcov itself without real hardware, this module registers a fake
device (``opcovtest`` by default) whose data lives in CPU memory, and lets a
test *plant* behaviours per operator: a correct kernel, a slightly or badly
wrong one, one that is only bfloat16-accurate, one that raises, aborts,
segfaults, hangs or reports out-of-memory, and kernels that go wrong only on
harder inputs (NaN, non-contiguous or channels_last ones).  A boxed fallback (working CPU
fallback, one that raises, or none) and real ``AutogradPrivateUse1`` kernels
can be planted too.

How it works: a device tensor is a storage-less ``torch._C._acc`` tensor whose
``StorageImpl`` is mapped (by its address, cleaned up by a weak finalizer on
the storage object) to a CPU ``UntypedStorage`` holding the bytes.  Keying by
storage rather than by Python attribute makes views, in-place ops and the
shallow copies autograd makes of saved tensors all see the same data.  View
ops only change metadata; they are delegated to the Meta kernels, which share
the storage and keep its ``nbytes`` right without allocating anything.

Usage: importing the module installs the spec named by the environment
variable ``OPCOV_PYBACKEND_SPEC`` (JSON text, or a path to a JSON file), or
``DEFAULT_SPEC`` if the variable is unset.  PrivateUse1 can be claimed only
once per process, so run each differently-planted backend in its own process.
Set ``TORCH_DEVICE_BACKEND_AUTOLOAD=0`` so no installed plugin claims
PrivateUse1 first.  Nothing here touches real hardware.
"""

from __future__ import annotations

import ctypes
import json
import os
import sys
import tempfile
import time
import weakref
from collections.abc import Callable
from typing import Any, NoReturn

import torch
import torch.utils._pytree as pytree
from torch.library import Library

__all__ = [
    "BEHAVIOURS",
    "DEFAULT_NAME",
    "DEFAULT_SPEC",
    "ENV_VAR",
    "FALLBACKS",
    "PLUMBING_OPS",
    "current_spec",
    "device",
    "install",
    "spec_from_env",
    "spec_json",
]

ENV_VAR = "OPCOV_PYBACKEND_SPEC"
ONCE_DIR_VAR = "OPCOV_PYBACKEND_ONCE_DIR"  # where "segfault_once" kernels keep their marker files
DEFAULT_NAME = "opcovtest"

#: What a planted kernel may do (values of ``spec["kernels"]``).
BEHAVIOURS = (
    "pass",
    "small_error",
    "large_error",
    "low_precision",
    "raise",
    "abort",
    "segfault",
    "segfault_once",  # segfaults the first time only (a marker file in $OPCOV_PYBACKEND_ONCE_DIR): a flaky crash
    "hang",
    "oom",
    "fails_on_nan",  # NaN results become 0 when an input holds a NaN
    "fails_on_noncontig",  # a non-contiguous input is read as if it were contiguous (wrong values)
    "fails_on_channels_last",  # raises when an input is in channels_last memory format
)
#: Behaviours that perturb a kernel's results (``_perturb``).
NUMERIC = ("small_error", "large_error", "low_precision")

#: Values of ``spec["fallback"]``.
FALLBACKS = (None, "cpu", "raise")

#: Ops always registered so tensors can exist, move and be viewed.  They are
#: backend infrastructure, not measured features: tests should exclude them.
PLUMBING_OPS = (
    "aten::empty.memory_format",
    "aten::empty_strided",
    "aten::copy_",
    "aten::_copy_from",
    "aten::_copy_from_and_resize",
    "aten::_to_copy",
    "aten::_local_scalar_dense",
    "aten::view",
    "aten::as_strided",
    "aten::_reshape_alias",
    "aten::resize_",
    "aten::set_.source_Storage_storage_offset",
    "aten::set_.source_Storage",
    "aten::set_.source_Tensor",
    "aten::set_",
    "aten::fill_.Scalar",
    "aten::fill_.Tensor",
    "aten::zero_",
)

#: A small working backend: a few real kernels (enough for ``torch.randn(...,
#: device=...)``, a linear layer with relu, and its backward), one autograd
#: kernel, and the CPU fallback switched off (ops without a kernel raise
#: NotImplementedError).
DEFAULT_SPEC: dict[str, Any] = {
    "name": DEFAULT_NAME,
    "kernels": {
        "aten::add.out": "pass",
        "aten::mul.out": "pass",
        "aten::mm": "pass",
        "aten::addmm": "pass",
        "aten::relu": "pass",
        "aten::sum.dim_IntList": "pass",
        "aten::threshold_backward": "pass",
        "aten::normal_": "pass",
        "aten::uniform_": "pass",
    },
    "autograd": ["aten::relu"],
    "fallback": "raise",
}

_SPEC_KEYS = ("name", "kernels", "autograd", "fallback")
_META = torch._C.DispatchKeySet(torch._C.DispatchKey.Meta)
_aten = torch.ops.aten

#: Process-wide install state.
_STATE: dict[str, Any] = {
    "name": None,  # device name once set up
    "plumbing": None,  # Library holding the plumbing kernels
    "libs": [],  # Libraries of the current spec (replaced on re-install)
    "spec": None,
}


# --------------------------------------------------------------------------
# Device storage: device StorageImpl -> CPU UntypedStorage holding the bytes
# --------------------------------------------------------------------------


class _Store:
    """Maps device storages (by StorageImpl address) to CPU backing storages."""

    def __init__(self) -> None:
        self._entries: dict[int, tuple[int, torch.UntypedStorage]] = {}
        self._tokens = 0

    def bind(self, dev_storage: torch.UntypedStorage, backing: torch.UntypedStorage) -> None:
        """Make ``backing`` the data of ``dev_storage`` (replacing any old binding)."""
        key = dev_storage._cdata
        self._tokens += 1
        token = self._tokens
        self._entries[key] = (token, backing)
        fin = weakref.finalize(dev_storage, self._drop, key, token)
        fin.atexit = False

    def _drop(self, key: int, token: int) -> None:
        entry = self._entries.get(key)
        if entry is not None and entry[0] == token:
            del self._entries[key]

    def backing(self, dev_storage: torch.UntypedStorage, min_nbytes: int) -> torch.UntypedStorage:
        """The CPU storage behind ``dev_storage``, created or grown as needed."""
        need = max(min_nbytes, dev_storage.nbytes())
        entry = self._entries.get(dev_storage._cdata)
        if entry is None:
            backing = _zeros_storage(need)
            self.bind(dev_storage, backing)
            return backing
        backing = entry[1]
        if backing.nbytes() < need:
            backing.resize_(need)
        return backing

    def __len__(self) -> int:
        return len(self._entries)


_STORE = _Store()


def _zeros_storage(nbytes: int) -> torch.UntypedStorage:
    return torch.zeros(nbytes, dtype=torch.uint8).untyped_storage()


def _nbytes_needed(t: torch.Tensor) -> int:
    """Bytes a storage must have for ``t``'s sizes, strides and offset."""
    if t.numel() == 0:
        return 0
    span = 1 + sum((s - 1) * st for s, st in zip(t.size(), t.stride()))
    return (t.storage_offset() + span) * t.element_size()


def _meta_set(t: torch.Tensor, storage, offset: int, size, stride) -> None:
    """Set ``t``'s metadata (and grow its storage's nbytes) without allocating."""
    _aten.set_.source_Storage_storage_offset.redispatch(_META, t, storage, offset, list(size), list(stride))


def _new_device_tensor(size, stride, dtype, offset: int = 0, backing=None) -> torch.Tensor:
    """A device tensor with the given layout; fresh zeroed data unless ``backing``."""
    t = torch._C._acc.create_empty_tensor((0,), dtype)
    st = t.untyped_storage()
    _meta_set(t, st, offset, size, stride)
    if backing is None:
        backing = _zeros_storage(max(st.nbytes(), _nbytes_needed(t)))
    _STORE.bind(st, backing)
    return t


def _is_dev(x: Any) -> bool:
    return isinstance(x, torch.Tensor) and x.device.type == _STATE["name"]


def _cpu_view(t: torch.Tensor) -> torch.Tensor:
    """A CPU tensor aliasing the device tensor ``t``'s data (same layout)."""
    backing = _STORE.backing(t.untyped_storage(), _nbytes_needed(t))
    return torch.empty(0, dtype=t.dtype).set_(backing, t.storage_offset(), t.size(), t.stride())


def _cpu(x: Any) -> Any:
    return _cpu_view(x) if _is_dev(x) else x


def _adopt(cpu: torch.Tensor) -> torch.Tensor:
    """A device tensor whose data *is* ``cpu``'s storage (no copy)."""
    return _new_device_tensor(cpu.size(), cpu.stride(), cpu.dtype, cpu.storage_offset(), cpu.untyped_storage())


def _sync_meta(dev: torch.Tensor, cpu: torch.Tensor) -> None:
    """After a CPU kernel mutated ``cpu`` (a view of ``dev``), mirror it on ``dev``."""
    dst = dev.untyped_storage()
    if cpu.untyped_storage()._cdata != _STORE.backing(dst, 0)._cdata:
        _STORE.bind(dst, cpu.untyped_storage())
    if (cpu.size(), cpu.stride(), cpu.storage_offset()) != (
        dev.size(),
        dev.stride(),
        dev.storage_offset(),
    ):
        _meta_set(dev, dst, cpu.storage_offset(), cpu.size(), cpu.stride())


# --------------------------------------------------------------------------
# Plumbing kernels (always registered)
# --------------------------------------------------------------------------


def _contiguous_strides(size, dtype, memory_format=None):
    fmt = memory_format or torch.contiguous_format
    return torch.empty(size, dtype=dtype, device="meta", memory_format=fmt).stride()


def _k_empty(size, *, dtype=None, layout=None, device=None, pin_memory=None, memory_format=None):
    dtype = dtype or torch.get_default_dtype()
    return _new_device_tensor(size, _contiguous_strides(size, dtype, memory_format), dtype)


def _k_empty_strided(size, stride, *, dtype=None, layout=None, device=None, pin_memory=None):
    return _new_device_tensor(size, stride, dtype or torch.get_default_dtype())


def _k_copy_(self, src, non_blocking=False):
    _cpu(self).copy_(_cpu(src))
    return self


def _k_copy_from(self, dst, non_blocking=False):
    _cpu(dst).copy_(_cpu(self))
    return dst


def _k_copy_from_and_resize(self, dst):
    dst.resize_(self.size())
    _cpu(dst).copy_(_cpu(self))
    return dst


def _k_to_copy(
    self,
    *,
    dtype=None,
    layout=None,
    device=None,
    pin_memory=None,
    non_blocking=False,
    memory_format=None,
):
    target = torch.device(device) if device is not None else self.device
    res = _aten._to_copy.default(
        _cpu(self),
        dtype=dtype,
        layout=layout,
        device=torch.device("cpu"),
        pin_memory=pin_memory,
        memory_format=memory_format,
    )
    if target.type == _STATE["name"]:
        return _adopt(res)
    if target.type == "cpu":
        return res
    return res.to(target)


def _k_local_scalar_dense(self):
    return _cpu_view(self).item()


def _meta_redispatch(op) -> Callable:
    def kernel(*args, **kwargs):
        return op.redispatch(_META, *args, **kwargs)

    kernel.__name__ = f"meta_{op.name()}"
    return kernel


def _k_resize_(self, size, memory_format=None):
    stride = _contiguous_strides(size, self.dtype, memory_format)
    _meta_set(self, self.untyped_storage(), self.storage_offset(), size, stride)
    return self


def _k_set_storage_offset(self, source, storage_offset, size, stride=()):
    if not stride:
        stride = _contiguous_strides(size, self.dtype)
    _meta_set(self, source, storage_offset, size, stride)
    return self


def _k_set_storage(self, source):
    n = source.nbytes() // self.element_size()
    _meta_set(self, source, 0, [n], [1])
    return self


def _k_set_tensor(self, source):
    _meta_set(self, source.untyped_storage(), source.storage_offset(), source.size(), source.stride())
    return self


def _k_set_empty(self):
    fresh = _new_device_tensor([0], [1], self.dtype)
    _meta_set(self, fresh.untyped_storage(), 0, [0], [1])
    return self


def _k_fill_scalar(self, value):
    _cpu_view(self).fill_(value)
    return self


def _k_fill_tensor(self, value):
    _cpu_view(self).fill_(_cpu(value))
    return self


def _k_zero_(self):
    _cpu_view(self).zero_()
    return self


_PLUMBING_KERNELS: dict[str, Callable] = {
    "aten::empty.memory_format": _k_empty,
    "aten::empty_strided": _k_empty_strided,
    "aten::copy_": _k_copy_,
    "aten::_copy_from": _k_copy_from,
    "aten::_copy_from_and_resize": _k_copy_from_and_resize,
    "aten::_to_copy": _k_to_copy,
    "aten::_local_scalar_dense": _k_local_scalar_dense,
    "aten::view": _meta_redispatch(_aten.view.default),
    "aten::as_strided": _meta_redispatch(_aten.as_strided.default),
    "aten::_reshape_alias": _meta_redispatch(_aten._reshape_alias.default),
    "aten::resize_": _k_resize_,
    "aten::set_.source_Storage_storage_offset": _k_set_storage_offset,
    "aten::set_.source_Storage": _k_set_storage,
    "aten::set_.source_Tensor": _k_set_tensor,
    "aten::set_": _k_set_empty,
    "aten::fill_.Scalar": _k_fill_scalar,
    "aten::fill_.Tensor": _k_fill_tensor,
    "aten::zero_": _k_zero_,
}
assert tuple(_PLUMBING_KERNELS) == PLUMBING_OPS


# --------------------------------------------------------------------------
# Running an op on CPU copies, with optional planted numeric errors
# --------------------------------------------------------------------------


def _perturb(t: torch.Tensor, behaviour: str) -> torch.Tensor:
    """``t`` with the planted numeric error applied (floating tensors only)."""
    if not t.is_floating_point() or behaviour == "pass":
        return t
    if behaviour == "small_error":
        return t * (1 + 1e-3)
    if behaviour == "large_error":
        return t + 1.0
    if behaviour == "low_precision":
        return t.to(torch.bfloat16).to(t.dtype)
    raise AssertionError(behaviour)


def _written_values(op, args, kwargs) -> list:
    """The argument values the op's schema marks as written (``Tensor(a!)``)."""
    out = []
    for i, a in enumerate(op._schema.arguments):
        if a.alias_info is None or not a.alias_info.is_write:
            continue
        v = args[i] if i < len(args) and not a.kwarg_only else kwargs.get(a.name)
        out.extend(x for x in pytree.tree_leaves(v) if isinstance(x, torch.Tensor))
    return out


def _misread(x: Any) -> Any:
    """A non-contiguous tensor read as if its data were laid out contiguously (wrong values)."""
    if not isinstance(x, torch.Tensor) or x.is_contiguous() or x.numel() <= 1:
        return x
    return x.as_strided(x.size(), _contiguous_strides(x.size(), x.dtype), x.storage_offset())


def _channels_last(x: Any) -> bool:
    return (
        isinstance(x, torch.Tensor)
        and x.dim() == 4
        and not x.is_contiguous()
        and x.is_contiguous(memory_format=torch.channels_last)
    )


def _unwrap_numbers(op, cargs, ckwargs):
    """Tensors again where a boxed call handed Python numbers for ``Tensor`` arguments: the dispatcher
    boxes a wrapped-number tensor (``x % 3`` -> ``remainder.Tensor`` with a wrapped 3) as a Python
    scalar, which the op's own overload then refuses. Made 0-dim with the dtype a wrapped number
    promotes as (int64, bool, the default float dtype), so type promotion comes out as on CPU."""
    args = op._schema.arguments
    fixed = list(cargs)
    for i, a in enumerate(args[: len(fixed)]):
        if str(a.type) == "Tensor" and isinstance(fixed[i], (bool, int, float, complex)):
            fixed[i] = _number_tensor(fixed[i])
    for a in args:
        if a.name in ckwargs and str(a.type) == "Tensor" and isinstance(ckwargs[a.name], (bool, int, float, complex)):
            ckwargs = {**ckwargs, a.name: _number_tensor(ckwargs[a.name])}
    return tuple(fixed), ckwargs


def _number_tensor(v):
    dtype = (
        torch.bool
        if isinstance(v, bool)
        else torch.int64
        if isinstance(v, int)
        else torch.get_default_dtype()
        if isinstance(v, float)
        else None
    )
    return torch.tensor(v, dtype=dtype)


def _cpu_compute(op, cargs, ckwargs):
    """``op`` on CPU. CPU's histc has no integer kernel, which accelerators have and MoE routing uses
    (transformers counts expert ids with it): integers are counted in float64 and cast back, so a
    backend planted with histc (or one running it through its CPU fallback) does what it claims."""
    if op.name() == "aten::histc" and cargs and not cargs[0].is_floating_point():
        x = cargs[0]
        return op(x.double(), *cargs[1:], **ckwargs).to(x.dtype)
    if op.name() in _FUSED_CELLS:  # kernels CPU lacks: aten::lstm picks them on any non-CPU device
        return _FUSED_CELLS[op.name()](*cargs, **ckwargs)
    cargs, ckwargs = _unwrap_numbers(op, cargs, ckwargs)
    return op(*cargs, **ckwargs)


def _lstm_cell(input_gates, hidden_gates, cx, input_bias=None, hidden_bias=None):
    """aten::_thnn_fused_lstm_cell as CUDA computes it: (hy, cy, workspace of the activated gates)."""
    gates = input_gates + hidden_gates
    if input_bias is not None:
        gates = gates + input_bias + hidden_bias
    i, f, g, o = gates.chunk(4, 1)
    i, f, g, o = i.sigmoid(), f.sigmoid(), g.tanh(), o.sigmoid()
    cy = f * cx + i * g
    return o * cy.tanh(), cy, torch.cat([i, f, g, o], 1)


def _lstm_cell_backward(grad_hy, grad_cy, cx, cy, workspace, has_bias):
    """aten::_thnn_fused_lstm_cell_backward_impl: (grad_gates, grad_cx, grad_bias) from the workspace."""
    i, f, g, o = workspace.chunk(4, 1)
    tanh_cy = cy.tanh()
    grad_hy = torch.zeros_like(cy) if grad_hy is None else grad_hy
    gcx = (torch.zeros_like(cy) if grad_cy is None else grad_cy) + grad_hy * o * (1 - tanh_cy * tanh_cy)
    grad_gates = torch.cat(
        [gcx * g * i * (1 - i), gcx * cx * f * (1 - f), gcx * i * (1 - g * g), grad_hy * tanh_cy * o * (1 - o)], 1
    )
    return grad_gates, gcx * f, grad_gates.sum(0) if has_bias else torch.empty(0, dtype=cy.dtype)


def _gru_cell(input_gates, hidden_gates, hx, input_bias=None, hidden_bias=None):
    """aten::_thnn_fused_gru_cell as CUDA computes it: (hy, workspace of r, z, n, hx and the hidden
    gates' new part)."""
    if input_bias is not None:
        input_gates, hidden_gates = input_gates + input_bias, hidden_gates + hidden_bias
    ir, iz, in_ = input_gates.chunk(3, 1)
    hr, hz, hn = hidden_gates.chunk(3, 1)
    r, z = (ir + hr).sigmoid(), (iz + hz).sigmoid()
    n = (in_ + r * hn).tanh()
    return n + z * (hx - n), torch.cat([r, z, n, hx, hn], 1)


def _gru_cell_backward(grad_hy, workspace, has_bias):
    """aten::_thnn_fused_gru_cell_backward: (grad input gates, grad hidden gates, grad hx, grad input
    bias, grad hidden bias) from the workspace."""
    r, z, n, hx, hn = workspace.chunk(5, 1)
    gn = grad_hy * (1 - z) * (1 - n * n)  # through n = tanh(in + r * hn)
    gr, gz = gn * hn * r * (1 - r), grad_hy * (hx - n) * z * (1 - z)
    gi, gh = torch.cat([gr, gz, gn], 1), torch.cat([gr, gz, gn * r], 1)
    none = torch.empty(0, dtype=hx.dtype)
    return gi, gh, grad_hy * z, gi.sum(0) if has_bias else none, gh.sum(0) if has_bias else none


_FUSED_CELLS = {
    "aten::_thnn_fused_lstm_cell": _lstm_cell,
    "aten::_thnn_fused_lstm_cell_backward_impl": _lstm_cell_backward,
    "aten::_thnn_fused_gru_cell": _gru_cell,
    "aten::_thnn_fused_gru_cell_backward": _gru_cell_backward,
}


def _run_on_cpu(op, args, kwargs, behaviour: str = "pass"):
    """Run ``op`` on CPU views of the device tensors and map results back.

    In-place and ``out=`` ops write straight into device data (the CPU views
    alias it); fresh results are adopted as device tensors without a copy.
    """
    pairs: list[tuple[torch.Tensor, torch.Tensor]] = []
    foreign: set[int] = set()
    name = _STATE["name"]

    def to_cpu(x):
        if isinstance(x, torch.Tensor):
            if x.device.type == name:
                c = _cpu_view(x)
                pairs.append((x, c))
                return c
            if x.device.type == "cpu" and x.layout == torch.strided:
                foreign.add(x.untyped_storage()._cdata)
            return x
        if isinstance(x, torch.device) and x.type == name:
            return torch.device("cpu")
        return x

    cargs, ckwargs = pytree.tree_map(to_cpu, (tuple(args), dict(kwargs)))
    if behaviour == "fails_on_noncontig":
        cargs, ckwargs = pytree.tree_map(_misread, (cargs, ckwargs))
    result = _cpu_compute(op, cargs, ckwargs)
    if behaviour == "fails_on_nan" and any(
        bool(c.isnan().any()) for _, c in pairs if c.is_floating_point() or c.is_complex()
    ):
        result = pytree.tree_map(
            lambda x: x.nan_to_num(nan=0.0) if isinstance(x, torch.Tensor) and x.is_floating_point() else x,
            result,
        )

    dev_of = {id(c): d for d, c in pairs}
    if behaviour in NUMERIC:
        written_values = _written_values(op, cargs, ckwargs)
        for c in written_values:
            c.copy_(_perturb(c, behaviour))
        written = {id(c) for c in written_values}

        def perturb(x):
            if isinstance(x, torch.Tensor) and id(x) not in written:
                return _perturb(x, behaviour)
            return x

        result = pytree.tree_map(perturb, result)

    for d, c in pairs:
        _sync_meta(d, c)

    def to_dev(x):
        if not isinstance(x, torch.Tensor):
            return x
        if id(x) in dev_of:
            return dev_of[id(x)]
        if x.device.type != "cpu" or x.layout != torch.strided:
            return x
        if x.untyped_storage()._cdata in foreign:
            x = x.clone()
        return _adopt(x)

    return pytree.tree_map(to_dev, result)


# --------------------------------------------------------------------------
# Planted kernels, fallbacks and autograd kernels
# --------------------------------------------------------------------------


def _planted_kernel(op, behaviour: str) -> Callable:
    """The PrivateUse1 kernel for ``op`` that does ``behaviour``."""
    opname = op.name()

    def kernel(*args, **kwargs):
        if behaviour == "raise":
            raise RuntimeError(f"opcovtest: planted error in {opname}")
        if behaviour == "abort":
            os.abort()
        if behaviour == "segfault":
            ctypes.string_at(0)
        if behaviour == "segfault_once":
            marker = os.path.join(os.environ.get(ONCE_DIR_VAR) or tempfile.gettempdir(), f"opcov-once-{opname}")
            if not os.path.exists(marker):
                open(marker, "w").close()
                ctypes.string_at(0)
        if behaviour == "hang":
            while True:
                time.sleep(3600)
        if behaviour == "oom":
            raise torch.OutOfMemoryError(f"opcovtest: planted out of memory in {opname}: tried to allocate 1024.00 GiB")
        if behaviour == "fails_on_channels_last" and any(_channels_last(x) for x in pytree.tree_leaves((args, kwargs))):
            raise RuntimeError(f"opcovtest: planted error in {opname}: channels_last input")
        return _run_on_cpu(op, args, kwargs, behaviour)

    kernel.__name__ = f"planted_{behaviour}"
    return kernel


def _fallback_cpu(op, *args, **kwargs):
    """Boxed fallback: compute any op on CPU copies."""
    return _run_on_cpu(op, args, kwargs)


def _fallback_raise(op, *args, **kwargs):
    """Boxed fallback standing for a CPU fallback that is switched off."""
    raise NotImplementedError(f"opcovtest: no kernel for {op.name()} and the CPU fallback is disabled")


class _CpuGradFunction(torch.autograd.Function):
    """Forward: the op's device kernel.  Backward: CPU autograd on CPU copies."""

    @staticmethod
    def forward(ctx, op, spec, leaves, *tensors):
        ctx.op, ctx.spec, ctx.leaves = op, spec, leaves
        ctx.save_for_backward(*tensors)
        args, kwargs = _unflatten(spec, leaves, tensors)
        with torch._C._AutoDispatchBelowAutograd():
            out = op(*args, **kwargs)
        outs = out if isinstance(out, tuple) else (out,)
        ctx.mark_non_differentiable(*[o for o in outs if not (o.is_floating_point() or o.is_complex())])
        return out

    @staticmethod
    def backward(ctx, *grads):
        saved = ctx.saved_tensors
        need = ctx.needs_input_grad[3:]
        cpu_in = [
            t.detach().cpu().requires_grad_(bool(n) and (t.is_floating_point() or t.is_complex()))
            for t, n in zip(saved, need)
        ]
        cpu_args, cpu_kwargs = pytree.tree_map(
            lambda x: torch.device("cpu") if _is_device_obj(x) else x,
            _unflatten(ctx.spec, ctx.leaves, cpu_in),
        )
        with torch.enable_grad():
            out = ctx.op(*cpu_args, **cpu_kwargs)
        outs = out if isinstance(out, tuple) else (out,)
        pairs = [(o, g) for o, g in zip(outs, grads) if o.requires_grad and g is not None]
        wanted = [t for t in cpu_in if t.requires_grad]
        got = iter(
            torch.autograd.grad([o for o, _ in pairs], wanted, [g.cpu() for _, g in pairs], allow_unused=True)
            if pairs and wanted
            else [None] * len(wanted)
        )
        result = []
        for orig, t in zip(saved, cpu_in):  # each gradient on its input's device (to() crosses devices)
            g = next(got) if t.requires_grad else None
            result.append(None if g is None else g.to(orig.device))
        return (None, None, None, *result)


def _is_device_obj(x: Any) -> bool:
    """Whether ``x`` is a ``torch.device`` of this backend."""
    return isinstance(x, torch.device) and x.type == _STATE["name"]


_TENSOR_SLOT = object()  # marks where a tensor sits among flattened args


def _unflatten(spec, leaves, tensors):
    """Rebuild ``(args, kwargs)`` from flattened leaves, filling tensor slots."""
    it = iter(tensors)
    flat = [next(it) if leaf is _TENSOR_SLOT else leaf for leaf in leaves]
    return pytree.tree_unflatten(flat, spec)


def _autograd_kernel(op) -> Callable:
    """An AutogradPrivateUse1 kernel for ``op`` built on ``_CpuGradFunction``."""
    opname = op.name()

    def kernel(*args, **kwargs):
        leaves, spec = pytree.tree_flatten((tuple(args), dict(kwargs)))
        tensors = [x for x in leaves if isinstance(x, torch.Tensor)]
        if not (torch.is_grad_enabled() and any(t.requires_grad for t in tensors)):
            with torch._C._AutoDispatchBelowAutograd():
                return op(*args, **kwargs)
        if op._schema.is_mutable or any(r.alias_info is not None for r in op._schema.returns):
            raise RuntimeError(f"opcovtest: autograd kernel for {opname} supports only functional ops")
        slots = [_TENSOR_SLOT if isinstance(x, torch.Tensor) else x for x in leaves]
        return _CpuGradFunction.apply(op, spec, slots, *tensors)

    kernel.__name__ = "autograd_kernel"
    return kernel


# --------------------------------------------------------------------------
# Installation
# --------------------------------------------------------------------------


class _BackendModule:
    """``torch.<name>``: the device module of this fake backend."""

    def is_initialized(self) -> bool:
        return True

    def is_available(self) -> bool:
        return True

    def current_device(self) -> int:
        return 0

    def device_count(self) -> int:
        return 1

    def synchronize(self, device=None) -> None:
        pass

    def _is_in_bad_fork(self) -> bool:
        return False

    def manual_seed(self, seed: int) -> None:
        pass

    def manual_seed_all(self, seed: int) -> None:
        pass

    def get_amp_supported_dtype(self) -> list:
        """What autocast asks, and gradient checkpointing's recompute enters an autocast region for (without
        it a checkpointed block's backward aborted the process, raising inside the autograd engine)."""
        return [torch.float16, torch.bfloat16]


def _resolve(qualname: str):
    """``"aten::add.out"`` -> ``torch.ops.aten.add.out`` (``.default`` optional)."""
    if "::" not in qualname:
        raise ValueError(f"op name {qualname!r} must look like 'aten::name.overload'")
    ns, rest = qualname.split("::", 1)
    name, _, overload = rest.partition(".")
    try:
        return getattr(getattr(getattr(torch.ops, ns), name), overload or "default")
    except (AttributeError, RuntimeError) as e:
        raise ValueError(f"unknown operator {qualname!r}") from e


def _normalize(spec: dict) -> dict:
    """Validate ``spec`` and fill in defaults; op names become canonical."""
    unknown = set(spec) - set(_SPEC_KEYS)
    if unknown:
        raise ValueError(f"unknown spec keys {sorted(unknown)}; allowed: {_SPEC_KEYS}")
    kernels = {}
    for qualname, behaviour in (spec.get("kernels") or {}).items():
        if behaviour not in BEHAVIOURS:
            raise ValueError(f"{qualname}: behaviour {behaviour!r} not in {BEHAVIOURS}")
        canonical = _resolve(qualname).name()
        if canonical in PLUMBING_OPS:
            raise ValueError(f"{canonical} is plumbing (always registered); cannot plant it")
        kernels[canonical] = behaviour
    autograd = []
    for qualname in spec.get("autograd") or []:
        op = _resolve(qualname)
        if not op._schema.returns or any(str(r.type) != "Tensor" for r in op._schema.returns):
            raise ValueError(f"{op.name()}: autograd kernels need ops returning only Tensors")
        autograd.append(op.name())
    fallback = spec.get("fallback")
    if fallback not in FALLBACKS:
        raise ValueError(f"fallback {fallback!r} not in {FALLBACKS}")
    return {
        "name": spec.get("name") or DEFAULT_NAME,
        "kernels": kernels,
        "autograd": autograd,
        "fallback": fallback,
    }


def _setup(name: str) -> None:
    """Claim PrivateUse1 under ``name`` and register the plumbing (once)."""
    if _STATE["name"] is not None:
        if _STATE["name"] != name:
            raise RuntimeError(
                f"opcovtest backend already installed as {_STATE['name']!r}; "
                f"PrivateUse1 cannot be renamed to {name!r} in the same process"
            )
        return
    current = torch._C._get_privateuse1_backend_name()
    if current not in ("privateuseone", name):
        raise RuntimeError(
            f"PrivateUse1 is already claimed by {current!r}; set TORCH_DEVICE_BACKEND_AUTOLOAD=0 before importing torch"
        )
    from torch.utils.backend_registration import _setup_privateuseone_for_python_backend

    _setup_privateuseone_for_python_backend(name, backend_module=_BackendModule())
    lib = Library("aten", "IMPL")
    for qualname, fn in _PLUMBING_KERNELS.items():
        lib.impl(_resolve(qualname), fn, "PrivateUse1")
    _STATE["plumbing"] = lib
    _STATE["name"] = name


def _lib(libs: dict, ns: str) -> Library:
    if ns not in libs:
        libs[ns] = Library("_" if ns == "_" else ns, "IMPL")
    return libs[ns]


def install(spec: dict) -> dict:
    """Install the backend described by ``spec``; return the normalized spec.

    The device setup and plumbing happen once per process; calling again with
    the same name replaces the planted kernels, autograd kernels and fallback.
    """
    norm = _normalize(spec)
    _setup(norm["name"])
    for lib in _STATE["libs"]:
        lib._destroy()
    libs: dict[str, Library] = {}
    for qualname, behaviour in norm["kernels"].items():
        op = _resolve(qualname)
        _lib(libs, op.namespace).impl(op, _planted_kernel(op, behaviour), "PrivateUse1")
    for qualname in norm["autograd"]:
        op = _resolve(qualname)
        _lib(libs, op.namespace).impl(op, _autograd_kernel(op), "AutogradPrivateUse1")
    if norm["fallback"] is not None:
        fn = _fallback_cpu if norm["fallback"] == "cpu" else _fallback_raise
        _lib(libs, "_").fallback(fn, "PrivateUse1")
    _STATE["libs"] = list(libs.values())
    _STATE["spec"] = norm
    return norm


def current_spec() -> dict | None:
    """The normalized spec installed last, or None."""
    return _STATE["spec"]


def device() -> torch.device:
    """The ``torch.device`` of the installed backend."""
    return torch.device(_STATE["name"] or DEFAULT_NAME)


def end_process(code: int = 0) -> NoReturn:
    """Flush and end this process without interpreter teardown.

    A process that ran a backward on this backend holds an autograd device thread; if that thread
    touches Python while the interpreter finalizes, the process aborts after its work is done
    ("terminate called without an active exception", pytorch/pytorch#38228; seen rarely with torch
    2.13 under load). A child whose answer is already printed ends here instead, so its exit status
    says what it did.
    """
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


def __opcov_settings__() -> dict:
    """What opcov's scan records about this backend's fallback (the vendor hook in backends.settings)."""
    fallback = (_STATE["spec"] or {}).get("fallback")
    if fallback is None:
        return {}
    return {"fallback_kind": "cpu", "cpu_fallback_enabled": fallback == "cpu"}


def spec_json(spec: dict) -> str:
    """``spec`` as JSON text, ready for ``OPCOV_PYBACKEND_SPEC``."""
    return json.dumps(spec, sort_keys=True)


def spec_from_env(environ=None) -> dict | None:
    """The spec named by ``OPCOV_PYBACKEND_SPEC`` (JSON text or file), or None."""
    value = (environ if environ is not None else os.environ).get(ENV_VAR)
    if value is None or not value.strip():
        return None
    if value.lstrip().startswith("{"):
        return json.loads(value)
    with open(value, encoding="utf-8") as f:
        return json.load(f)


install(spec_from_env() or DEFAULT_SPEC)
