"""Fourth case source: an OpInfo's own calls, each class of them, and with one path-selecting argument changed.

Why: a finding speaks for a model's call only when their signature classes match (opcov.sigclass), and a
probe reaches only some classes of each op: cdist's OpInfo samples all pass ``compute_mode``, so a model
calling ``torch.cdist(a, b, p=0.5)`` (no compute_mode) had no case of its class and the verdict could only
say "unverified for these arguments"; on a backend that compiles every graph the probe keeps a few samples
per OpInfo (opcov.probe.lazy), and nll_loss2d was probed with mean reduction only. A ``sweep.<opinfo>``
group runs the OpInfo's samples once on CPU and copies each distinct call they make to the ops the OpInfo is
about; its cases are those calls (every class, no cap), then calls made from them by changing ONE argument
that selects a path (opcov.sigclass) to a value of another kind: a bool flipped; an optional argument left
out, or given where it was left out; an integer or float moved to each other kind (0, 1, -1, a whole
number, a fraction); a reduction to each of none/mean/sum; a list of amounts to none or some; an output
size to a whole multiple, one more, and half of the input's; an optional tensor left out; an integer index
into a boolean mask (over the first dimension, and of the whole shape); then each of
those with one more argument set back to its default (a model's call sets fewer arguments than OpInfo's
samples). A changed call CPU rejects is tried once more with the other optional non-tensor arguments left
out (a resize takes an output size or scale factors, not both), else dropped. Only classes the probed
file the run names (``--sweep FILE``) holds no case of are kept, up to ``MAX_CASES`` per group; each is
run and compared like a replayed call (forward; its backward too where its inputs require grad).

These are calls the schema allows built from the values OpInfo chose, not calls some model made: a pass
says the kernel agrees with CPU on that class of arguments. The generator knows no op by name.
"""

from __future__ import annotations

import math
import re
import warnings

from opcov import sigclass
from opcov.probe import pick
from opcov.probe.replay import EXCLUDE
from opcov.probe.sample import Loaded, op_call
from opcov.sources.opinfo import aten_names, opinfo_samples, opinfos

PREFIX = "sweep."
MAX_CASES = 24  # new classes kept per group: a bound on the cases one OpInfo adds
MAX_CALLS = 64  # distinct calls copied from a group's samples before others are made from them
# One value of each kind sigclass.abstract tells apart, for numbers: 0, 1, -1, a whole number, a fraction.
NUMBERS = (0, 1, -1, 2, 0.5)
CODES = (0, 1, 2)  # an enum code's values (a reduction's none, mean, sum)
# Integer arguments that are an enum's code (a reduction, embedding_bag's sum/mean/max, grid_sampler's
# interpolation and padding modes): only their codes, never -1 (torch 2.9's CPU embedding_bag crashes on it).
ENUM_CODES = frozenset({"reduction", "mode", "interpolation_mode", "padding_mode"})
# Ops whose CPU kernels crash the process (SIGSEGV) on argument combinations their checks let through (batch
# norm left without running statistics in eval mode: found by running the sweep of every OpInfo): their calls
# are kept as the samples made them, never changed.
CRASH_ON_CHANGE = re.compile(r"batch_norm|_convert_indices|_transform_bias_rescale")


def load(group: dict) -> Loaded:
    """The Loaded group of a ``sweep.<opinfo>`` source: one sample per class (see the module doc) that the
    probed file ``group['known']`` names for none of the op's cells at the group's dtype."""
    import torch

    op = opinfos()[group["source"][len(PREFIX) :]]
    dtype = getattr(torch, group["dtype"])
    bases = {n.split("::", 1)[-1] for n in aten_names(op)}
    known = known_classes(group["known"], group["dtype"]) if group.get("known") else {}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        calls = _captured(torch, op, dtype, bool(group["backward"]), bases)
        samples = [op_call(func, args, kwargs) for func, args, kwargs in _cases(torch, calls, known)]
    return Loaded(None, samples, (), False, True, False)


_KNOWN: dict = {}


def known_classes(path: str, dtype: str) -> dict:
    """{op: {path class}} of the cases a probed file's cells at ``dtype`` ran or failed (their ``ran`` and
    ``failed`` classes), read once per process."""
    if (path, dtype) not in _KNOWN:
        from opcov.store import combine, data

        out: dict = {}
        for op, cell in (data.load(path).get("ops") or {}).items():
            entry = cell.get(dtype) if isinstance(cell, dict) else None
            if not isinstance(entry, dict):
                continue
            sigs = [*(entry.get("ran") or ()), *(combine.parse_failed(t)[2] for t in entry.get("failed") or ())]
            out[op] = {pick.path(s) for s in sigs if s}
        _KNOWN[(path, dtype)] = out
    return _KNOWN[(path, dtype)]


def _captured(torch, op, dtype, requires_grad: bool, bases: set) -> list:
    """[(OpOverload, args, kwargs)]: the first call of each class the OpInfo's samples make on CPU to the ops
    it is about (an op whose name holds one of ``bases``: cdist's ``_cdist_forward``; every op where they call
    none of those: a Python-level OpInfo), arguments copied, the common path first (opcov.probe.pick.rank)."""
    import torch.utils._pytree as pytree
    from torch.utils._python_dispatch import TorchDispatchMode

    mine: list = []
    other: list = []
    seen: set = set()

    class Copy(TorchDispatchMode):
        def __torch_dispatch__(self, func, types, a=(), k=None):
            k = k or {}
            name = func.name()
            if not EXCLUDE.search(name) and len(seen) < MAX_CALLS:
                try:
                    sig = sigclass.of_call(func, a, k, torch.Tensor)
                except Exception:  # noqa: BLE001 - a call whose class cannot be read: not varied
                    sig = ""
                if sig and (name, sig) not in seen:
                    seen.add((name, sig))
                    grad = torch.is_grad_enabled() and not func._schema.is_mutable

                    def copy(t):
                        c = t.detach().clone()
                        return c.requires_grad_(True) if grad and t.requires_grad and c.is_floating_point() else c

                    copied = pytree.tree_map(lambda t: copy(t) if isinstance(t, torch.Tensor) else t, (a, k))
                    base = name.split("::", 1)[-1].split(".", 1)[0]
                    (mine if any(b in base for b in bases) else other).append((func, *copied))
            return func(*a, **k)

    for sample in opinfo_samples(op, dtype, requires_grad):
        try:
            with Copy():
                op.op(sample.input, *sample.args, **sample.kwargs)
        except Exception:  # noqa: BLE001 - a sample CPU rejects: nothing to copy from it
            continue
    found = mine or other
    return sorted(found, key=lambda c: _odd(torch, c))


def _odd(torch, call) -> bool:
    """Whether a call has a 0-d or empty tensor argument: a path models seldom take, run after the others."""
    import torch.utils._pytree as pytree

    return any(t.dim() == 0 or t.numel() == 0 for t in pytree.tree_leaves(call[1:]) if isinstance(t, torch.Tensor))


def _cases(torch, calls: list, known: dict) -> list:
    """The calls to run: each of ``calls`` (its 0-d and empty ones last) and each call one change away from one
    of them, then each of those with one more argument back at its default (a model's call sets fewer arguments than OpInfo's samples),
    whose class (its path: opcov.probe.pick.path) no earlier one has and ``known`` (op -> classes) does not
    hold; each changed call run once on CPU first; at most ``MAX_CASES``."""
    have: set = set()
    out: list = []

    def new(func, a, k):
        try:
            key = (func.name(), pick.path(sigclass.of_call(func, a, k, torch.Tensor)))
        except Exception:  # noqa: BLE001 - no class: nothing to add
            return None
        return None if key in have or key[1] in known.get(key[0], ()) else key

    def add(func, a, k, check: bool) -> bool:
        if new(func, a, k) is None:
            return False
        runs = _cpu_runs(torch, func, a, k) if check else (a, k)
        key = new(func, *runs) if runs is not None else None  # CPU may have run it with fewer arguments
        if key is None:
            return False
        have.add(key)
        out.append((func, *runs))  # type: ignore[misc]
        return True

    for func, a, k in calls:
        if not _odd(torch, (func, a, k)):
            add(func, a, k, check=False)
    changed = [
        (func, a, k)
        for func, args, kwargs in calls
        if not _odd(torch, (func, args, kwargs))  # a change of a 0-d or empty call: seldom a model's path
        and not CRASH_ON_CHANGE.search(func.name())
        for a, k in changes(torch, func, args, kwargs)
    ]
    for func, a, k in changed:
        if len(out) >= MAX_CASES:
            return out[:MAX_CASES]
        add(func, a, k, check=True)
    for func, args, kwargs in changed:
        for a, k in resets(func, args, kwargs):
            if len(out) >= MAX_CASES:
                return out[:MAX_CASES]
            add(func, a, k, check=True)
    for func, a, k in calls:  # the 0-d and empty calls last
        if len(out) >= MAX_CASES:
            break
        add(func, a, k, check=False)
    return out[:MAX_CASES]


def resets(func, args, kwargs):
    """Each (args, kwargs) with one more selecting argument that is not at its default set back to it."""
    named = _named(func, args, kwargs)
    for arg in func._schema.arguments:
        value = named.get(arg.name)
        if arg.name in sigclass.NOT_SELECTORS or _is_tensor_type(arg) or value is None:
            continue
        if arg.has_default_value() and not _same(value, arg.default_value):
            yield _set(func, args, kwargs, arg, arg.default_value)
        elif _optional(arg) and not arg.has_default_value():
            yield _set(func, args, kwargs, arg, None)


def _cpu_runs(torch, func, args, kwargs):
    """(args, kwargs) of the call, or of it with its other optional non-tensor arguments left out, that CPU
    runs; None where neither does."""
    tries = [(args, kwargs)]
    named = _named(func, args, kwargs)
    for arg in func._schema.arguments:
        if _optional(arg) and not _is_tensor_type(arg) and named.get(arg.name) is not None:
            tries.append(_set(func, args, kwargs, arg, None))
    for a, k in tries:
        try:
            with torch.no_grad():
                func(*_fresh(torch, a), **_fresh(torch, k))
        except Exception:  # noqa: BLE001 - CPU rejects this call: try the next
            continue
        return a, k
    return None


def changes(torch, func, args, kwargs):
    """Each (args, kwargs) with one path-selecting argument of ``func``'s schema set to a value of another kind
    (the module doc lists them). Values only (no CPU run here)."""
    named = _named(func, args, kwargs)
    for arg in func._schema.arguments:
        current = named.get(arg.name, arg.default_value if arg.has_default_value() else None)
        if arg.name == "output_size":  # the size a result is made to picks the path (scale=, bins=)
            values = _sizes(torch, named, current)
        elif _kind_of(arg) == "List[Optional[Tensor]]":  # an index: integers, or a boolean mask
            values = _masks(torch, named, current)
        elif arg.name in sigclass.NOT_SELECTORS or arg.name in sigclass.VALUES_ONLY:
            continue
        else:
            values = _others(arg, current, torch)
        for value in values:
            yield _set(func, args, kwargs, arg, value)


def _masks(torch, named: dict, current) -> list:
    """For a list of index tensors with an integer one (``x[idx]``): boolean masks instead, of the indexed
    tensor's whole shape (``x[mask]``, the common use) and over its first dimension: a mask's result size hangs
    on its values, a path of its own (a device that sizes it on the host, through ``nonzero``)."""
    first = next((v for v in named.values() if isinstance(v, torch.Tensor)), None)
    given = [t for t in current or () if isinstance(t, torch.Tensor)]
    if first is None or first.dim() < 1 or not given or given[0].dtype == torch.bool:
        return []

    def every_other(shape):
        return (torch.arange(math.prod(shape)) % 2 == 0).reshape(shape)

    return [[every_other(tuple(first.shape))], [every_other(tuple(first.shape[:1]))]]


def _sizes(torch, named: dict, current) -> list:
    """For an ``output_size`` of n dimensions: twice the input's last n sizes (a whole-number ratio: even
    bins, an integer scale), one more than them (uneven bins, a fractional scale) and half of them."""
    first = next((v for v in named.values() if isinstance(v, torch.Tensor)), None)
    n = len(current) if isinstance(current, (list, tuple)) else 0
    if first is None or not n or first.dim() < n:
        return []
    sizes = [int(s) for s in first.shape[-n:]]
    return [[2 * s for s in sizes], [s + 1 for s in sizes], [max(1, s // 2) for s in sizes]]


def _others(arg, current, torch) -> list:
    """Values of other kinds than ``current`` for schema argument ``arg``."""
    kind = _kind_of(arg)
    if kind == "Tensor":  # an optional tensor given: left out
        return [None] if _optional(arg) and isinstance(current, torch.Tensor) else []
    values: list = []
    if kind == "bool":
        values = [not current] if isinstance(current, bool) else [True, False]
    elif kind == "int" and arg.name in ENUM_CODES:
        values = list(CODES)
    elif kind in ("int", "float", "Scalar"):
        numbers = [n for n in NUMBERS if kind != "int" or float(n).is_integer()]
        values = [n for n in numbers if _kind(arg.name, n) != _kind(arg.name, current)]
    elif kind in ("int[]", "float[]"):
        values = _list_others(arg.name, current)
    if _optional(arg) and current is not None:
        values.append(None)
    return [v for v in values if not _same(v, current)]


# Schema type texts (as torch prints them: 'Optional[List[int]]', 'number') -> the kinds this module varies.
_KINDS = {"number": "Scalar", "SymInt": "int", "List[int]": "int[]", "List[SymInt]": "int[]", "List[float]": "float[]"}


def _kind_of(arg) -> str:
    """'Tensor', 'bool', 'int', 'float', 'Scalar', 'int[]', 'float[]' or another type's own text."""
    text = str(arg.type)
    inner = text[len("Optional[") : -1] if _optional(arg) and text.startswith("Optional[") else text.rstrip("?")
    return _KINDS.get(inner, inner)


def _list_others(name: str, current) -> list:
    """For a list argument: the same length of amounts none and some (``AMOUNTS``), or 1s, 2s and 1.5s."""
    n = len(current) if isinstance(current, (list, tuple)) and current else 0
    if not n:
        return []  # an absent list: its length is the op's to know, not guessed
    if name in sigclass.AMOUNTS:
        return [[0] * n, [1] * n]
    return [[1] * n, [2] * n] + ([[1.5] * n] if any(isinstance(v, float) for v in current) else [])


def _kind(name: str, value) -> str:
    if value is None:
        return "default"
    return sigclass.abstract(name, sigclass._value_text(value))


def _same(a, b) -> bool:
    try:
        if isinstance(a, float) and isinstance(b, float) and math.isnan(a) and math.isnan(b):
            return True
        return bool(a == b) and type(a) is type(b)
    except Exception:  # noqa: BLE001 - values that do not compare: different
        return False


def _optional(arg) -> bool:
    return str(arg.type).endswith("?") or str(arg.type).startswith("Optional[")


def _is_tensor_type(arg) -> bool:
    return _kind_of(arg) == "Tensor"


def _named(func, args, kwargs) -> dict:
    out = {}
    for i, arg in enumerate(func._schema.arguments):
        if i < len(args) and not arg.kwarg_only:
            out[arg.name] = args[i]
        elif arg.name in kwargs:
            out[arg.name] = kwargs[arg.name]
    return out


def _set(func, args, kwargs, arg, value):
    """(args, kwargs) with schema argument ``arg`` set to ``value`` (positional where it was given so)."""
    position = next(i for i, a in enumerate(func._schema.arguments) if a.name == arg.name)
    if position < len(args) and not arg.kwarg_only:
        return tuple(args[:position]) + (value,) + tuple(args[position + 1 :]), dict(kwargs)
    return tuple(args), {**kwargs, arg.name: value}


def _fresh(torch, tree):
    import torch.utils._pytree as pytree

    return pytree.tree_map(lambda t: t.detach().clone() if isinstance(t, torch.Tensor) else t, tree)
