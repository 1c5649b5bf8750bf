"""Fourth case source: the composite ops a backend overrides with its own kernel, called as themselves.

A CompositeImplicitAutograd op (``selu``, ``kl_div``, ``std.dim``, ``diag``...) decomposes on CPU before a
dispatch mode sees it, so an OpInfo's cases about it are filed under the ops it decomposes into, and the
op's own record says ``skipped: other_overload``. A backend that registers its own kernel for such an op
runs that kernel instead; without an autograd kernel beside it, the backward is whatever differentiable ops
the kernel happens to call (PyTorch's autograd fallback, ``opcov.verdict.judge.LOST``): it may match CPU,
give other values or raise, and no registration shows which.

A ``composite.<opinfo>`` group runs each of the OpInfo's samples on CPU once with the overloads the backend
overrides caught at ``AutogradCPU`` (the outermost call's arguments copied, with which inputs require grad),
and makes each distinct caught call one case: the overload alone (``probe.sample.op_call``), forward and
backward, on the device (the backend's kernel and its autograd fallback) against CPU (the decomposition and
its derivative). The OpInfo's own group is unchanged.
"""

from __future__ import annotations

import contextlib

from opcov.catalog import resolve_overload
from opcov.probe.record import signature
from opcov.probe.sample import Loaded, op_call

PREFIX = "composite."


def overridden(torch, catalog, dispatch_key: str) -> list[str]:
    """The aten overloads of ``catalog`` that are CompositeImplicitAutograd and that the backend registers a
    kernel of its own for at ``dispatch_key`` (sorted); none for a key the dispatcher does not know."""
    has = torch._C._dispatch_has_kernel_for_dispatch_key
    out = []
    for op in catalog:
        if op.namespace != "aten":
            continue
        try:
            if has(op.name, "CompositeImplicitAutograd") and has(op.name, dispatch_key):
                out.append(op.name)
        except RuntimeError:  # an unknown key (a backend with no dispatch key of its own)
            return []
    return sorted(out)


def of_opinfo(aten_names, ops) -> tuple:
    """The overloads of ``ops`` (``overridden``) whose base an OpInfo is about (its ``aten_names``)."""
    bases = set(aten_names)
    return tuple(n for n in ops if n.split(".", 1)[0] in bases)


@contextlib.contextmanager
def catching(torch, names):
    """While inside, the outermost call of each overload of ``names`` on CPU is appended to the list yielded as
    (overload, args, kwargs), its tensors copied (a copy requires grad where the argument did, under grad
    mode); the call then runs its decomposition as before. The kernels are removed on leaving."""
    import torch.utils._pytree as pytree

    lib = torch.library.Library("aten", "IMPL")
    math = torch._C.DispatchKey.CompositeImplicitAutograd
    caught: list = []
    depth = [0]

    def copy(t):
        c = t.detach().clone()
        if torch.is_grad_enabled() and t.requires_grad and (t.is_floating_point() or t.is_complex()):
            c.requires_grad_(True)
        return c

    def kernel_for(func):
        def kernel(*args, **kwargs):
            if depth[0] == 0:
                a, k = pytree.tree_map(lambda t: copy(t) if isinstance(t, torch.Tensor) else t, (args, kwargs))
                caught.append((func, a, k))
            depth[0] += 1
            try:
                return func._op_dk(math, *args, **kwargs)
            finally:
                depth[0] -= 1

        return kernel

    for name in names:
        func = resolve_overload(torch, name)
        lib.impl(func, kernel_for(func), "AutogradCPU")
    try:
        yield caught
    finally:
        lib._destroy()


def load(group: dict) -> Loaded:
    """The Loaded group of a ``composite.<opinfo>`` source: one case per distinct call (signature class) of the
    group's ``ops`` that the OpInfo's samples make on CPU."""
    import warnings

    import torch

    from opcov.sources.opinfo import aten_names, opinfo_samples, opinfos

    op = opinfos()[group["source"][len(PREFIX) :]]
    dtype = getattr(torch, group["dtype"])
    samples, seen = [], set()
    with warnings.catch_warnings(), catching(torch, group.get("ops", ())) as caught:
        warnings.simplefilter("ignore")
        for s in opinfo_samples(op, dtype, group["backward"]):
            del caught[:]
            try:
                op.op(s.input, *s.args, **s.kwargs)
            except Exception:  # noqa: BLE001 - a sample CPU refuses makes no case
                continue
            for func, args, kwargs in caught[:1]:
                try:
                    key = (func.name(), signature(func, args, kwargs))
                except Exception:  # noqa: BLE001 - no class: the overload's first call stands for all
                    key = (func.name(), "")
                if key not in seen:
                    seen.add(key)
                    samples.append(op_call(func, args, kwargs))
    return Loaded(
        None,
        samples,
        aten_names(op),
        bool(getattr(op, "has_nondeterministic_output", False)),
        torch.float64 in op.supported_dtypes("cpu"),
        False,
    )
