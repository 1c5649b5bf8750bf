"""Which aten overloads a case dispatches, and which one raised on the device.

A TorchDispatchMode sits below autograd and composite-implicit decompositions, so it sees
the overloads that reach a backend's kernels: those are what a case gives evidence about.
Each call is filed under the shared dtype key (``opcov.dtypes.call_dtype``), so an index
tensor never decides the key of a float op.
"""

from __future__ import annotations

from opcov.catalog import overload_name
from opcov.dtypes import call_dtype, dtype_name


def _dtypes(tree):
    import torch
    import torch.utils._pytree as pytree

    return [dtype_name(x.dtype) for x in pytree.tree_leaves(tree) if isinstance(x, torch.Tensor)]


def _mode_base():
    from torch.utils._python_dispatch import TorchDispatchMode

    return TorchDispatchMode


class Calls:
    """Ordered distinct (op name, dtype key) pairs, each with its op's tags, and the random-op flag."""

    def __init__(self):
        self.calls: dict[tuple[str, str], list] = {}
        self.seeded_random = False

    def add(self, func, args, kwargs, out) -> None:
        import torch

        key = call_dtype(_dtypes((args, kwargs)), _dtypes(out))
        self.calls[(overload_name(func), key)] = func.tags
        if torch.Tag.nondeterministic_seeded in func.tags:
            self.seeded_random = True

    def pairs(self) -> list[list[str]]:
        return [list(p) for p in self.calls]

    def tags_about(self, bases) -> list[set]:
        """The tag names of each call of an op whose base name is in ``bases`` ('mul'), or of every
        call when none is."""
        def base(name):
            return name.split("::", 1)[1].split(".", 1)[0]

        about = [tags for (name, _), tags in self.calls.items() if base(name) in bases] or list(self.calls.values())
        return [{t.name for t in tags} for tags in about]


def recording(calls: Calls):
    """A mode that files every call into ``calls`` (also those that raise)."""

    class Recorder(_mode_base()):
        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            kwargs = kwargs or {}
            try:
                out = func(*args, **kwargs)
            except BaseException:
                calls.add(func, args, kwargs, ())
                raise
            calls.add(func, args, kwargs, out)
            return out

    return Recorder()


class Spot:
    """The first overload that raised under ``spotting`` (None when nothing did)."""

    def __init__(self):
        self.raised: str | None = None
        self.dkey: str | None = None


def spotting(spot: Spot):
    """A light mode for the device run: remembers which overload raised, changes nothing else."""

    class Spotter(_mode_base()):
        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            kwargs = kwargs or {}
            try:
                return func(*args, **kwargs)
            except BaseException:
                if spot.raised is None:
                    spot.raised = overload_name(func)
                    spot.dkey = call_dtype(_dtypes((args, kwargs)))
                raise

    return Spotter()


class Captured:
    """The first ``limit`` calls of a run with copies of their arguments, to replay one at a time."""

    def __init__(self, limit: int):
        self.limit = limit
        self.calls: list = []  # (OpOverload, args, kwargs), arguments copied before the call
        self.truncated = False  # the run made more calls than were kept


def capturing(cap: Captured):
    """A mode that copies each call's arguments, before the call, into ``cap``."""
    import torch
    import torch.utils._pytree as pytree

    def copy(tree):
        return pytree.tree_map(lambda t: t.detach().clone() if isinstance(t, torch.Tensor) else t, tree)

    class Capturer(_mode_base()):
        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            kwargs = kwargs or {}
            if len(cap.calls) >= cap.limit:
                cap.truncated = True
                return func(*args, **kwargs)
            cap.calls.append((func, copy(args), copy(kwargs)))
            return func(*args, **kwargs)

    return Capturer()
