"""A backward kernel with no meta kernel, sized on CPU for fake tensors on the storage-less stand-in.

Why: a backward kernel with no meta kernel (no fake impl) and no decomposition, such as
``multi_margin_loss_backward``, ``multilabel_margin_loss_backward`` or ``fractional_max_pool3d_backward``,
is sized by FakeTensorMode running the op's real kernel on zero-filled tensors of the fake tensor's own
device. On CPU fake tensors that works; on the stand-in (target.py) it cannot: the stand-in holds no
data and has no kernels, so FakeTensorMode raises NotImplementedError ("Could not run 'aten::zero_'
with arguments from the 'opcov_accel' backend"). Raised in a backward kernel on the stand-in's autograd
thread, that error does not unwind cleanly in torch 2.13 (the process aborts, or the backward raises a
SystemError that has lost the error, run to run).

``run`` does what FakeTensorMode does, on CPU: the op's CPU kernel on zero-filled CPU tensors with
each fake argument's shape, strides and dtype, and fake outputs of the same metadata on the
arguments' device. Zeros size an output right only where its shape does not hang on values: a
backward kernel's outputs are gradients of its forward's inputs, which it is handed, so the tracer
takes the result in the backward alone and only where ``shaped_like_arguments`` holds (a forward op
such as CTC's loss sizes its result by the target lengths' values; it stays a fake-trace error, and
a user's model is then traced with real values).
"""

from __future__ import annotations


def fallback_failed(exc: BaseException, device_type: str) -> bool:
    """Whether ``exc`` is FakeTensorMode's fallback failing on the stand-in: a real kernel was asked to
    run on the ``device_type`` backend, which under fake tensors only that fallback does."""
    return isinstance(exc, NotImplementedError) and f"from the '{device_type}' backend" in str(exc)


def run(torch, func, args, kwargs):
    """``func``'s outputs as fake tensors, sized by its CPU kernel on zero-filled copies of the fake
    arguments; None where FakeTensorMode's own fallback would refuse (an op that changes an argument's
    metadata, a sparse argument, an output that views an argument, no fake argument) or the CPU
    kernel raises. Called where the caller's FakeTensorMode is current (inside a dispatch mode above it)."""
    from torch._subclasses.fake_tensor import FakeTensor
    from torch.utils import _pytree as pytree
    from torch.utils._mode_utils import no_dispatch

    flat, spec = pytree.tree_flatten((args, kwargs))
    fakes = [a for a in flat if isinstance(a, FakeTensor)]
    if not fakes or torch.Tag.inplace_view in func.tags or any(a.layout != torch.strided for a in fakes):
        return None
    device = next((a.device for a in fakes if a.device.type != "cpu"), fakes[0].device)
    inputs: dict = {}  # id of a CPU copy -> the fake argument it stands for
    with no_dispatch():
        try:
            cpu = [_zeros(torch, a, inputs) if isinstance(a, FakeTensor) else a for a in flat]
            cpu_args, cpu_kwargs = pytree.tree_unflatten(cpu, spec)
            out = func(*cpu_args, **cpu_kwargs)
        except Exception:  # noqa: BLE001 - the CPU kernel refused too: the caller raises the first error
            return None
        storages = {t.untyped_storage().data_ptr() for t in cpu if isinstance(t, torch.Tensor) and t.numel()}
        leaves = [t for t in pytree.tree_leaves(out) if isinstance(t, torch.Tensor)]
        if any(id(t) not in inputs and t.numel() and t.untyped_storage().data_ptr() in storages for t in leaves):
            return None  # a view of an argument: its fake would not alias the argument
    # made outside no_dispatch, so that the caller's FakeTensorMode makes them: fake tensors on ``device``
    return pytree.tree_map_only(
        torch.Tensor,
        lambda t: (
            inputs[id(t)] if id(t) in inputs else torch.empty_strided(t.shape, t.stride(), dtype=t.dtype, device=device)
        ),
        out,
    )


def shaped_like_arguments(torch, out, arguments) -> bool:
    """Whether every tensor ``out`` holds has the shape of a tensor in ``arguments`` (or none): what a
    gradient of a forward input, handed to its backward kernel, has whatever the values."""
    from torch.utils import _pytree as pytree

    shapes = {tuple(t.shape) for t in pytree.tree_leaves(arguments) if isinstance(t, torch.Tensor)}
    return all(tuple(t.shape) in shapes for t in pytree.tree_leaves(out) if isinstance(t, torch.Tensor))


def _zeros(torch, fake, inputs: dict):
    t = torch.empty_strided(fake.shape, fake.stride(), dtype=fake.dtype, device="cpu").zero_()
    inputs[id(t)] = fake
    return t
