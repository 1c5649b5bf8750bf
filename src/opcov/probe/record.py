"""Which aten overloads a case dispatches, and which one raised on the device.

A TorchDispatchMode sits below autograd and composite-implicit decompositions, so it sees
the overloads that reach a backend's kernels: those are what a case gives evidence about.
Each call is filed under the shared dtype key (``opcov.dtypes.call_dtype``), so an index
tensor never decides the key of a float op.
"""

from __future__ import annotations

from opcov import sigclass
from opcov.catalog import overload_name
from opcov.dtypes import call_dtype, dtype_name
from opcov.trees import leaves, map_leaves

_torch = None


def _t():
    global _torch
    if _torch is None:
        import torch

        _torch = torch
    return _torch


def _dtypes(tree):
    tensor = _t().Tensor
    return [dtype_name(x.dtype) for x in leaves(tree) if isinstance(x, tensor)]


_MODES: dict = {}


def _mode_class(name: str, dispatch):
    """A TorchDispatchMode subclass calling ``dispatch(mode, func, args, kwargs)``, made once per
    name: a class made per case costs about 0.1 ms, and torch wraps each new class's
    ``__torch_dispatch__`` for dynamo anew (the probe runs eagerly: no wrapper at all)."""
    cls = _MODES.get(name)
    if cls is None:
        from torch.utils._python_dispatch import TorchDispatchMode

        def __init__(self, state):
            TorchDispatchMode.__init__(self)
            self.state = state

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            return dispatch(self.state, func, args, kwargs or {})

        cls = _MODES[name] = type(
            name,
            (TorchDispatchMode,),
            {
                "__init__": __init__,
                "__torch_dispatch__": __torch_dispatch__,
                # eager only: no dynamo-disabling wrapper around every dispatched call
                "_should_skip_dynamo": classmethod(lambda cls: False),
            },
        )
    return cls


SIG_TENSORS = sigclass.SIG_TENSORS  # tensor arguments a signature names, as an op set's ``shape`` does
tensor_class = sigclass.tensor_class


def signature(func, args, kwargs) -> str:
    """A call's signature class (opcov.sigclass): what decides whether a backend's finding on one call says
    anything about another call of the same op (opcov.verdict.signature matches it against an op set's
    calls): each tensor argument's class, then ';' and every argument that selects behaviour
    ('float32:2,float32:2,float32:2;alpha=2')."""
    return sigclass.of_call(func, args, kwargs, _t().Tensor)


# Attention ops tagged nondeterministic_seeded only for the dropout they apply with their ``dropout_p``
# argument: with dropout_p == 0 they are deterministic, so a case calling them with it is compared by
# value (under the probe's fixed seeds) rather than classed random.
DROPOUT_ONLY = frozenset(
    {
        "scaled_dot_product_attention",
        "_scaled_dot_product_attention_math",
        "_scaled_dot_product_flash_attention_for_cpu",
        "_scaled_dot_product_flash_attention",
        "_scaled_dot_product_efficient_attention",
        "_scaled_dot_product_cudnn_attention",
        "_scaled_dot_product_fused_attention_overrideable",
        "_fused_sdp_choice",
    }
)


def seeded_random(func, args, kwargs) -> bool:
    """Whether a call draws random numbers: a nondeterministic_seeded op, except a DROPOUT_ONLY op called
    with dropout_p == 0 (its default where the call leaves it out)."""
    if _t().Tag.nondeterministic_seeded not in func.tags:
        return False
    if func.name().split("::", 1)[-1].split(".")[0] not in DROPOUT_ONLY:
        return True
    for i, arg in enumerate(func._schema.arguments):
        if arg.name == "dropout_p":
            value = args[i] if i < len(args) and not arg.kwarg_only else kwargs.get(arg.name, arg.default_value)
            return not (isinstance(value, (int, float)) and value == 0)
    return True


class Calls:
    """Ordered distinct (op name, dtype key) pairs, each with its op's tags, the signature class of its
    first call, and the random-op flag."""

    def __init__(self):
        self.calls: dict[tuple[str, str], list] = {}
        self.sigs: dict[tuple[str, str], str] = {}
        self.seeded_random = False

    def add(self, func, args, kwargs, out) -> None:
        key = call_dtype(_dtypes((args, kwargs)), _dtypes(out))
        tags = func.tags
        pair = (overload_name(func), key)
        self.calls[pair] = tags
        if pair not in self.sigs:
            try:
                self.sigs[pair] = signature(func, args, kwargs)
            except Exception:  # noqa: BLE001 - a tensor without metadata (a subclass): no class, not a failure
                self.sigs[pair] = ""
        if seeded_random(func, args, kwargs):
            self.seeded_random = True

    def pairs(self) -> list[list[str]]:
        return [list(p) for p in self.calls]

    def sig_list(self) -> list[str]:
        """The signature class of each pair of ``pairs``, in the same order."""
        return [self.sigs.get(p, "") for p in self.calls]

    def tags_about(self, bases) -> list[set]:
        """The tag names of each call of an op whose base name is in ``bases`` ('mul'), or of every
        call when none is."""

        def base(name):
            return name.split("::", 1)[1].split(".", 1)[0]

        about = [tags for (name, _), tags in self.calls.items() if base(name) in bases] or list(self.calls.values())
        return [{t.name for t in tags} for tags in about]


def _record(calls: Calls, func, args, kwargs):
    try:
        out = func(*args, **kwargs)
    except BaseException:
        calls.add(func, args, kwargs, ())
        raise
    calls.add(func, args, kwargs, out)
    return out


def recording(calls: Calls):
    """A mode that files every call into ``calls`` (also those that raise)."""
    return _mode_class("Recorder", _record)(calls)


class Spot:
    """The first overload that raised under ``spotting`` (None when nothing did)."""

    def __init__(self):
        self.raised: str | None = None
        self.dkey: str | None = None


def _spot(spot: Spot, func, args, kwargs):
    try:
        return func(*args, **kwargs)
    except BaseException:
        if spot.raised is None:
            spot.raised = overload_name(func)
            spot.dkey = call_dtype(_dtypes((args, kwargs)))
        raise


def spotting(spot: Spot):
    """A light mode for the device run: remembers which overload raised, changes nothing else."""
    return _mode_class("Spotter", _spot)(spot)


class Captured:
    """The first ``limit`` calls of a run with copies of their arguments, to replay one at a time."""

    def __init__(self, limit: int):
        self.limit = limit
        self.calls: list = []  # (OpOverload, args, kwargs), arguments copied before the call
        self.truncated = False  # the run made more calls than were kept


def copied(tree):
    """``tree`` with each tensor detached and cloned: arguments a later call cannot change."""
    tensor = _t().Tensor
    return map_leaves(lambda t: t.detach().clone() if isinstance(t, tensor) else t, tree)


def _capture(cap: Captured, func, args, kwargs):
    if len(cap.calls) >= cap.limit:
        cap.truncated = True
        return func(*args, **kwargs)
    cap.calls.append((func, copied(args), copied(kwargs)))
    return func(*args, **kwargs)


def capturing(cap: Captured):
    """A mode that copies each call's arguments, before the call, into ``cap``."""
    return _mode_class("Capturer", _capture)(cap)
