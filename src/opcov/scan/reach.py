"""What a composite op reaches, forward and backward, recorded by calling it.

A composite kernel (CompositeImplicitAutograd or CompositeExplicitAutograd) runs on
any backend by calling other ops; whether it runs on a given backend depends on
those. We call it under a recording TorchDispatchMode and keep the overloads it
dispatched; the same for its backward (autograd.grad with ones as grad_outputs). The
recording depends on the inputs, tried in turn (_record_one): float32 inputs made from
its schema on meta tensors; the calls PyTorch's OpInfo samples make; the calls zoo models
made (their shapes and dtype); the schema's other dtypes; then the same on small cpu
tensors with values, for an op meta cannot run (no meta kernel, a data-dependent result).
An out= overload's outs are made as its functional overload's results. Where no input
is accepted the reach stays unresolved and says why. Reach does not depend on the
backend, so one recording serves every scan: it runs in a child process that has no
backend loaded (some ops query the current accelerator, and torch_tpu aborts the process
when its runtime starts without a TPU; a call may also crash the process: the next
child goes on without that call), and is cached per torch and opcov version.
"""

from __future__ import annotations

import functools
import itertools
import json
import os
import re
import subprocess
import sys
from dataclasses import dataclass

from opcov.catalog import import_catalog_modules, overload_name, resolve_overload
from opcov.scan import recipes
from opcov.sources.opinfo import opinfo_samples
from opcov.torchenv import AUTOLOAD_ENV, cache_lock, import_torch, read_cache, write_cache
from opcov.version import __version__

# Shapes tried in turn for every Tensor argument (float32 first, then other dtypes).
SHAPES = ((3, 3), (2, 3, 4), (2, 3, 4, 5), (3,), (1, 2, 3, 4, 5))
_INT_TENSOR_ARGS = {
    "index",
    "indices",
    "offsets",
    "lengths",
    "target",
    "counts",
    "indices_or_sections",
    "per_sample_weights_idx",
    "batch_sizes",
    "repeats",
}
_BOOL_TENSOR_ARGS = {"mask", "condition"}
_COUNT_TENSOR_ARGS = {"lengths", "counts", "repeats", "batch_sizes"}  # on cpu: 1, not 0
_SCALAR_TENSOR_ARGS = {"value", "high", "low"}
_TRUE_BOOL_ARGS = {"use_input_stats"}  # instance_norm without running stats needs the input's
_NO_GRAD_ARGS = {"running_mean", "running_var"}  # buffers, never differentiated
_STR_ARGS = {
    "reduce": "sum",
    "approximate": "none",
    "padding": "same",
    "reduction": "mean",
    "side": "left",
    "mode": "reflect",
    "interpolation": "linear",
    "indexing": "ij",
    "UPLO": "L",
    "driver": None,
    "rounding_mode": None,
    "reduce_op": "sum",
    "reduceOp": "sum",
    "norm": None,
}


@dataclass(frozen=True)
class Reach:
    """Ops one call dispatched. ``ops`` is None when the call could not be made. ``source``: where the
    inputs of the recorded call came from (``opinfo``: a call PyTorch's OpInfo samples made, forward or
    backward, copied to meta; ``recipe``: a hand-written call, opcov.scan.recipes; ``schema``: synthesized
    from the schema, the fallback)."""

    ops: tuple[str, ...] | None
    error: str | None = None
    source: str | None = None


MAX_REAL = 3  # real calls kept per overload


def real_inputs(torch, names) -> dict[str, list]:
    """Overload name -> up to MAX_REAL (args, kwargs) that reach it for real: the calls PyTorch's OpInfo
    samples (float32, on cpu) make, forward and backward, seen by a dispatch mode (which sees
    CompositeExplicit ops and every kernel), and, for an op the mode cannot see (a
    CompositeImplicitAutograd op decomposes above it), the samples of the OpInfos named after it. Kept
    as cpu copies; _record_one calls them on meta, then on cpu."""
    import warnings

    import torch.utils._pytree as pytree
    from torch.utils._python_dispatch import TorchDispatchMode

    try:
        from torch.testing._internal.common_methods_invocations import op_db
    except Exception:  # noqa: BLE001 - no OpInfo here (expecttest missing): the schema alone
        return {}
    wanted = set(names)
    found: dict[str, list] = {}

    def copy(tree):  # the sample may change its tensors in place after the call
        return pytree.tree_map(lambda t: t.detach().clone() if isinstance(t, torch.Tensor) else t, tree)

    def keep(name, args, kwargs):
        got = found.setdefault(name, [])
        if len(got) < MAX_REAL:
            try:
                got.append(copy((tuple(args), dict(kwargs))))
            except Exception:  # noqa: BLE001 - a tensor that cannot be copied: not kept
                pass

    class Capture(TorchDispatchMode):
        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            name = overload_name(func)
            if name in wanted and len(found.get(name, ())) < MAX_REAL:
                keep(name, args, kwargs or {})
            return func(*args, **(kwargs or {}))

    by_base: dict[str, list] = {}
    for op in op_db:
        for label in {op.name, op.name.rsplit(".", 1)[-1], getattr(op, "aten_name", None) or ""}:
            by_base.setdefault(label, []).append(op)
    warnings.simplefilter("ignore")
    for op in op_db:
        try:
            samples = list(itertools.islice(opinfo_samples(op, torch.float32, op.supports_autograd), 2))
        except Exception:  # noqa: BLE001 - an OpInfo that cannot make float32 samples
            continue
        for sample in samples:
            try:
                with Capture():
                    out = op(sample.input, *sample.args, **sample.kwargs)
                    tensors = [t for t in pytree.tree_leaves(out) if isinstance(t, torch.Tensor) and t.grad_fn]
                    leaves = [
                        t
                        for t in pytree.tree_leaves((sample.input, sample.args, sample.kwargs))
                        if isinstance(t, torch.Tensor) and t.requires_grad
                    ]
                    if tensors and leaves:
                        torch.autograd.grad(tensors, leaves, [torch.ones_like(t) for t in tensors], allow_unused=True)
            except Exception:  # noqa: BLE001 - a sample that fails says nothing here
                continue
    for name in wanted - set(found):
        base = name.split("::", 1)[-1].split(".")[0]
        for op in by_base.get(base, ())[:2]:
            try:
                samples = list(itertools.islice(opinfo_samples(op, torch.float32, False), MAX_REAL))
            except Exception:  # noqa: BLE001
                continue
            for sample in samples:
                keep(name, (sample.input, *sample.args), sample.kwargs)
    return found


class _Unsynthesizable(Exception):
    pass


def _recorder(torch):
    from torch.utils._python_dispatch import TorchDispatchMode

    class Recorder(TorchDispatchMode):
        def __init__(self):
            super().__init__()
            self.ops: list[str] = []

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            name = overload_name(func)
            if name not in self.ops:
                self.ops.append(name)
            try:
                return func(*args, **(kwargs or {}))
            except RuntimeError as exc:
                if "Expected a value of type 'Tensor'" not in str(exc):
                    raise
                return func(*_numbers_as_tensors(torch, func, args), **(kwargs or {}))

    return Recorder


def _numbers_as_tensors(torch, func, args):
    """``args`` with a Python number where the schema wants a Tensor made a 0-d meta tensor again: a
    composite kernel's wrapped scalar (remainder.Scalar calls remainder.Tensor with one) reaches a
    dispatch mode as a plain number, which the op then refuses when called again."""
    out = list(args)
    for i, arg in enumerate(func._schema.arguments[: len(out)]):
        if str(arg.type) == "Tensor" and isinstance(out[i], (int, float, bool)):
            out[i] = torch.scalar_tensor(out[i], device="meta")
    return out


def _normalize_type(t: str) -> str:
    """Python-registered ops spell types as List[Tensor] / Optional[int]; use the schema spelling."""
    m = re.fullmatch(r"Optional\[(.*)\]", t)
    if m:
        return _normalize_type(m.group(1)) + "?"
    m = re.fullmatch(r"List\[(.*)\]", t)
    if m:
        return _normalize_type(m.group(1)) + "[]"
    return t


def _tensor(torch, name, shape, dtype, device):
    if device == "meta":
        return torch.empty(shape, dtype=dtype, device="meta")
    if dtype.is_floating_point or dtype.is_complex:
        return torch.rand(shape, dtype=dtype)
    return (torch.ones if name in _COUNT_TENSOR_ARGS else torch.zeros)(shape, dtype=dtype)


def _value(torch, arg, shape, dtype, device="meta"):
    """A value for one schema argument on ``device``, or raise _Unsynthesizable. On meta a tensor has
    no values; on cpu (for an op that meta cannot run) floats are in [0, 1), indices 0, counts 1."""
    t = _normalize_type(str(arg.type))
    name = arg.name
    optional = t.endswith("?")
    base = t.rstrip("?")

    def tensor(dt=dtype, s=shape):
        return _tensor(torch, name, s, dt, device)

    if base == "Tensor":
        if name in _INT_TENSOR_ARGS:
            return tensor(torch.int64)
        if name in _BOOL_TENSOR_ARGS:
            return tensor(torch.bool)
        if name in ("weight", "bias") and optional:
            return None
        if name in _SCALAR_TENSOR_ARGS:  # fill.Tensor's value, *_like.Tensor's high: one number
            return tensor(s=())
        return tensor()
    if base in ("Tensor[]", "Tensor?[]"):
        if name == "indices":
            return [tensor(torch.int64, (2,))]
        return [tensor(), tensor()]
    if base in ("int", "SymInt"):
        if "dim" in name:
            return 0
        return 1
    if base.startswith(("int[", "SymInt[")):
        if "dim" in name:
            return [0]
        if name == "output_size":
            return list(shape[2:]) or [1]
        if name in ("padding", "output_padding"):
            return [0] * (len(shape) - 2 or 1)
        if name in ("kernel_size", "stride", "dilation"):
            return [1] * (len(shape) - 2 or 1)
        return list(shape)
    if base in ("number[]", "float[]", "Scalar[]"):
        if name == "scalars":  # _foreach_*.ScalarList: one scalar per tensor of the lists above
            return [1, 1]
        return None if optional else [1]
    if base == "bool[]" or base.startswith("bool["):
        return [True, True, True]
    if base == "float":
        return 0.5
    if base == "bool":
        return name in _TRUE_BOOL_ARGS
    if base in ("Scalar", "number"):
        return 1
    if base == "ScalarType":
        return torch.float32
    if base == "str":
        if name in _STR_ARGS:
            return _STR_ARGS[name]
        if optional:
            return None
        raise _Unsynthesizable(f"no value for str argument {name!r}")
    if base == "Device":
        return torch.device(device)
    if base == "Layout":
        return torch.strided
    if base == "MemoryFormat":
        return torch.contiguous_format
    if base == "Generator" and optional:
        return None
    if optional:
        return None
    raise _Unsynthesizable(f"no value for {t} argument {name!r}")


def _consistent(values: dict, shape) -> None:
    """Arguments that must agree with each other or with the input's shape (each value alone is
    fine, together they were not): native_group_norm's N, C, HxW and group; as_strided's stride,
    one per size."""
    if {"N", "C", "HxW", "group"} <= values.keys() and len(shape) >= 2:
        hxw = 1
        for n in shape[2:]:
            hxw *= n
        values.update(N=shape[0], C=shape[1], HxW=hxw, group=1)
    if isinstance(values.get("low"), int) and isinstance(values.get("high"), int):  # randint: low < high
        values["high"] = values["low"] + 2
    if isinstance(values.get("size"), list) and isinstance(values.get("stride"), list):
        strides, step = [], 1
        for n in reversed(values["size"]):
            strides.insert(0, step)
            step *= n
        values["stride"] = strides


def _synthesize(torch, schema, shape, dtype, device="meta"):
    values, kwarg_only = {}, set()
    bounds = {"min", "max"} <= {a.name for a in schema.arguments}  # clamp, clip: one bound at least
    for arg in schema.arguments:
        writes = arg.alias_info is not None and arg.alias_info.is_write
        if arg.has_default_value() and not writes and not (bounds and arg.name == "min"):
            continue
        values[arg.name] = _value(torch, arg, shape, dtype, device)
        if arg.kwarg_only:
            kwarg_only.add(arg.name)
    _consistent(values, shape)
    args = [v for k, v in values.items() if k not in kwarg_only]
    kwargs = {k: v for k, v in values.items() if k in kwarg_only}
    return args, kwargs


def _out_names(schema) -> list[str]:
    """The keyword-only arguments an out= overload writes its results to."""
    return [a.name for a in schema.arguments if a.kwarg_only and a.alias_info is not None and a.alias_info.is_write]


def _functional(overload):
    """The overload that computes what an out= overload writes (the same arguments, less the outs):
    its results give the out tensors their shapes and dtypes. None for an overload without outs."""
    outs = _out_names(overload._schema)
    if not outs:
        return None
    wanted = [(a.name, str(a.type)) for a in overload._schema.arguments if a.name not in outs]
    names = {name for name, _type in wanted}
    packet = overload.overloadpacket
    for name in packet.overloads():
        candidate = getattr(packet, name)
        arguments = candidate._schema.arguments
        if any(a.alias_info is not None and a.alias_info.is_write for a in arguments):
            continue
        # a factory's functional overload also takes the new tensor's options, which an out= overload
        # takes from its out tensor (linspace.Tensor_Tensor_out and linspace.Tensor_Tensor)
        taken = [
            (a.name, str(a.type))
            for a in arguments
            if not (a.kwarg_only and a.name in _TENSOR_OPTIONS - names and a.has_default_value())
        ]
        if taken == wanted:
            return candidate
    return None


_TENSOR_OPTIONS = {"dtype", "layout", "device", "pin_memory", "memory_format"}


def _with_outs(torch, overload, args, kwargs):
    """``kwargs`` with each out tensor missing from it made as the functional overload's result would be
    (empty, the same shape and dtype): an out tensor made from the schema alone rarely fits (a bool
    result written to a float tensor raises). Unchanged where there is no functional overload."""
    outs = [n for n in _out_names(overload._schema) if kwargs.get(n) is None]
    functional = _functional(overload) if outs else None
    if functional is None:
        return kwargs
    ins = {k: v for k, v in kwargs.items() if k not in outs}
    result = functional(*args, **ins)
    results = list(result) if isinstance(result, tuple) else [result]
    if len(outs) != len(results):
        return kwargs

    def empty(v):
        if isinstance(v, torch.Tensor):
            return torch.empty_like(v)
        if isinstance(v, (list, tuple)):
            return [empty(x) for x in v]
        return v

    return dict(ins, **{n: empty(r) for n, r in zip(outs, results)})


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {text[0][:200] if text else ''}"


def _call_forward(torch, overload, composite, args, kwargs):
    C = torch._C
    if composite == "implicit":
        return overload.decompose(*args, **kwargs)
    key = {
        "explicit": C.DispatchKey.CompositeExplicitAutograd,
        "explicit_nonfunctional": C.DispatchKey.CompositeExplicitAutogradNonFunctional,
    }.get(composite)
    if key is None:
        return overload(*args, **kwargs)
    return overload._op_dk(key, *args, **kwargs)


def _flat_tensors(torch, value):
    if isinstance(value, torch.Tensor):
        return [value]
    if isinstance(value, (list, tuple)):
        return [t for v in value for t in _flat_tensors(torch, v)]
    return []


def _backward(torch, Recorder, overload, args, kwargs):
    """Record the ops the backward of one call dispatches, or None when nothing is differentiable."""
    leaves = []

    def grad_input(v):
        if isinstance(v, torch.Tensor) and v.is_floating_point():
            leaf = v.detach().clone().requires_grad_(True)
            leaves.append(leaf)
            return leaf.clone()
        if isinstance(v, list):
            return [grad_input(x) for x in v]
        return v

    writes = {
        a.name
        for a in overload._schema.arguments
        if a.alias_info is not None and a.alias_info.is_write and a.kwarg_only
    }
    names = [a.name for a in overload._schema.arguments]
    gargs = [a if i < len(names) and names[i] in _NO_GRAD_ARGS else grad_input(a) for i, a in enumerate(args)]
    gkwargs = {k: (v if k in writes or k in _NO_GRAD_ARGS else grad_input(v)) for k, v in kwargs.items()}
    if not leaves:
        return None
    outs = [t for t in _flat_tensors(torch, overload(*gargs, **gkwargs)) if t.requires_grad and t.grad_fn is not None]
    if not outs:
        return None
    grads = [torch.ones_like(t) for t in outs]  # made outside the recording
    rec = Recorder()
    with rec:
        torch.autograd.grad(outs, leaves, grads, allow_unused=True)
    return tuple(rec.ops)


def _record_one(
    torch, Recorder, name: str, composite, real=(), zoo=(), skip=(), attempt=None
) -> tuple[Reach, Reach | None]:
    """Call one op and record its forward and backward, trying inputs in this order: its recipe, where
    opcov.scan.recipes has one (for an op no other call fits); float32 inputs
    synthesized from its schema on meta tensors; the ``real`` calls (calls that reach it for real, see
    real_inputs; for an out= overload, its functional overload's calls, outs added); the ``zoo``
    calls (the argument shapes and dtype a zoo model called it with, see zoo_calls); the schema's other
    dtypes. Then the same on small cpu tensors with values, for an op meta cannot run (no meta kernel,
    a data-dependent result, an argument that must be on cpu). The schema's fitting call comes first
    because a real sample is not a typical call either (matmul's first OpInfo sample is 1-d and
    reaches dot; the schema's 2-d call reaches mm). The forward is the first call that fits; the
    backward the first fitting call's whose backward could be recorded. ``skip``: the numbers of calls not
    to try (one that crashed the process before); ``attempt(i)`` is told each call's number first."""
    try:
        overload = resolve_overload(torch, name)
    except (AttributeError, RuntimeError) as exc:
        return Reach(None, _first_line(exc)), None
    errors: dict[str, str] = {}
    fwd: Reach | None = None
    bwd: Reach | None = None
    for i, (device, source, make) in enumerate(_candidates(torch, overload, real, zoo)):
        if i in skip:
            errors.setdefault(device, "a call crashed the process")
            continue
        if attempt is not None:
            attempt(i)
        try:
            args, kwargs = make()
            kwargs = _with_outs(torch, overload, args, kwargs)
            rec = Recorder()
            with rec:
                _call_forward(torch, overload, composite, list(args), dict(kwargs))
        except _Unsynthesizable as exc:
            errors.setdefault(device, f"input synthesis: {exc}")
            continue
        except Exception as exc:  # noqa: BLE001 - this call does not fit the overload: the next one
            errors.setdefault(device, _first_line(exc))
            continue
        label = source if device == "meta" else f"{source} on cpu"
        got = Reach(tuple(o for o in rec.ops if o != name), source=label)
        if device == "cpu" and not got.ops:  # its kernel computed on cpu itself, not through the dispatcher:
            errors.setdefault("cpu", "the cpu call reached no op through the dispatcher")  # says nothing of others
            continue
        try:
            ops = _backward(torch, Recorder, overload, list(args), dict(kwargs))
            back = Reach(ops, source=label) if ops is not None else None
        except Exception as exc:  # noqa: BLE001
            back = Reach(None, _first_line(exc), source=label)
        if fwd is None:
            fwd, bwd = got, back
            if source == "schema" and device == "meta" and (back is None or back.ops is not None):
                return fwd, bwd  # the schema's float32 call: forward and backward (or none to take)
        elif back is not None and back.ops is not None and (bwd is None or bwd.ops is None):
            bwd = back
        if bwd is not None and bwd.ops is not None:
            return fwd, bwd
    if fwd is not None:
        return fwd, bwd
    meta = errors.get("meta", "no input tried")
    error = meta if "cpu" not in errors else f"{meta} / on cpu: {errors['cpu']}"
    return Reach(None, error, source="schema"), None


_ZOO_GUESSES = 3  # which optional tensors a zoo call left out, when its shapes do not say
_MAX_CPU_ELEMENTS = 1 << 20  # a zoo call replayed on cpu (values are computed there) stays this small


def _candidates(torch, overload, real, zoo):
    """(device, source, make) for each call to try, in _record_one's order; ``make()`` returns
    (args, kwargs) or raises _Unsynthesizable."""
    float_shapes = [(shape, torch.float32) for shape in SHAPES]
    other = [(shape, dt) for dt in (torch.int64, torch.complex64, torch.bool) for shape in SHAPES[:2]]
    schema = overload._schema
    outs = _out_names(schema)
    functional = _functional(overload)
    recipe = recipes.RECIPES.get(overload_name(overload)) or (
        recipes.RECIPES.get(overload_name(functional)) if functional is not None else None
    )

    def synth(shape, dtype, device):
        def make():
            args, kwargs = _synthesize(torch, schema, shape, dtype, device)
            return args, {k: v for k, v in kwargs.items() if k not in outs}  # made to fit by _with_outs

        return make

    def copied(call, device, bind):
        def make():
            args, kwargs = _to_device(torch, call, device)
            if bind:
                args = _bind_by_type(torch, schema, args)
            return args, kwargs

        return make

    def replay(spec, device, which):
        return lambda: _zoo_call(torch, schema, spec, device, which)

    for device in ("meta", "cpu"):
        if recipe is not None:
            yield device, "recipe", functools.partial(recipe, torch, device)
        yield from ((device, "schema", synth(s, d, device)) for s, d in float_shapes)
        yield from ((device, "opinfo", copied(call, device, bind)) for call in real for bind in (False, True))
        yield from (
            (device, "zoo", replay(spec, device, which))
            for spec in zoo
            if device == "meta" or _elements(spec) <= _MAX_CPU_ELEMENTS
            for which in range(_ZOO_GUESSES)
        )
        yield from ((device, "schema", synth(s, d, device)) for s, d in other + [((), torch.float32)])


def _elements(spec) -> int:
    total = 0
    for shape in spec["shapes"]:
        n = 1
        for d in shape:
            n *= d
        total += n
    return total


def _to_device(torch, call, device):
    """A real call's (args, kwargs), kept on cpu, as fresh copies on ``device``."""
    import torch.utils._pytree as pytree

    def move(t):
        if not isinstance(t, torch.Tensor):
            return t
        if device == "meta":
            return t.detach().to("meta")
        return t.detach().clone()

    try:
        args, kwargs = pytree.tree_map(move, call)
    except Exception as exc:  # noqa: BLE001 - a tensor that cannot be copied there (sparse to meta)
        raise _Unsynthesizable(f"cannot copy a real call to {device}: {_first_line(exc)}") from exc
    return list(args), dict(kwargs)


def _fits(torch, type_: str, value) -> bool:
    base = _normalize_type(type_).rstrip("?")
    if base == "Tensor":
        return isinstance(value, torch.Tensor)
    if base.startswith("Tensor"):
        return isinstance(value, (list, tuple)) and all(isinstance(v, torch.Tensor) for v in value)
    if base == "str":
        return isinstance(value, str)
    if base in ("int", "SymInt"):
        return isinstance(value, int) and not isinstance(value, bool)
    if base in ("float", "Scalar", "number"):
        return isinstance(value, (int, float)) and not isinstance(value, bool)
    if base == "bool":
        return isinstance(value, bool)
    if base.startswith(("int[", "SymInt[")):
        return isinstance(value, (list, tuple, int)) and not isinstance(value, bool)
    return False


def _bind_by_type(torch, schema, args):
    """An OpInfo sample's positional values in the schema's order, each to the first argument its type
    fits: a sample is made for the Python function (torch.einsum(equation, *operands) gets (operands,
    equation)), not for the ATen schema. Raises _Unsynthesizable where the values do not all fit."""
    left = list(args)
    bound = []
    for arg in schema.arguments:
        if arg.kwarg_only or not left:
            break
        i = next((i for i, v in enumerate(left) if _fits(torch, str(arg.type), v)), None)
        if i is None:
            if arg.has_default_value():
                break
            raise _Unsynthesizable(f"no sample value fits {arg.name}")
        bound.append(left.pop(i))
    if left or bound == list(args):
        raise _Unsynthesizable("the sample's values are in the schema's order already, or do not fit")
    return bound


def _tensor_args(schema):
    return [
        a
        for a in schema.arguments
        if _normalize_type(str(a.type)).rstrip("?") == "Tensor"
        and not (a.alias_info is not None and a.alias_info.is_write)
    ]


def _zoo_call(torch, schema, spec, device, which=0):
    """A zoo model's call of the op made again: its tensors' shapes (in argument order) and dtype, the
    other arguments from the schema. Where it passed fewer tensors than the schema takes, ``which``
    picks the optional ones it left out (the first guesses in argument order)."""
    import itertools

    shapes = [tuple(s) for s in spec["shapes"]]
    tensors = _tensor_args(schema)
    optional = [a.name for a in tensors if _normalize_type(str(a.type)).endswith("?")]
    required = len(tensors) - len(optional)
    if not required <= len(shapes) <= len(tensors):
        raise _Unsynthesizable(f"{len(shapes)} recorded shapes for {len(tensors)} tensor arguments")
    dtype = getattr(torch, spec["dtype"], None)
    if not isinstance(dtype, torch.dtype):
        raise _Unsynthesizable(f"recorded dtype {spec['dtype']!r}")
    guesses = list(itertools.islice(itertools.combinations(optional, len(tensors) - len(shapes)), which + 1))
    if which >= len(guesses):
        raise _Unsynthesizable("no other guess of the tensors a zoo call left out")
    absent = set(guesses[which])
    names = {a.name for a in tensors}
    given = iter(shapes)
    values, by_name, positional = {}, set(), True
    for arg in schema.arguments:
        if arg.name in absent:
            values[arg.name] = None
        elif arg.name in names:
            kind = (
                torch.int64 if arg.name in _INT_TENSOR_ARGS else torch.bool if arg.name in _BOOL_TENSOR_ARGS else dtype
            )
            values[arg.name] = _tensor(torch, arg.name, next(given), kind, device)
        elif arg.has_default_value():
            positional = False  # the arguments after one left to its default go by name
            continue
        else:
            values[arg.name] = _value(torch, arg, shapes[0], dtype, device)
        if arg.kwarg_only or not positional:
            by_name.add(arg.name)
    _consistent(values, shapes[0])
    outs = _out_names(schema)
    args = [v for k, v in values.items() if k not in by_name]
    return args, {k: v for k, v in values.items() if k in by_name and k not in outs}


_REAL_FILE = "OPCOV_REACH_REAL_INPUTS"  # where a child keeps real_inputs for the child that follows a crash


def _real_inputs_once(torch, names) -> dict:
    """real_inputs, computed by the first child of a recording (about 8 s of CPU) and kept for the child
    that goes on after a call crashed the first (the names asked only shrink)."""
    path = os.environ.get(_REAL_FILE)
    if path and os.path.exists(path):
        try:
            return torch.load(path, weights_only=False)
        except Exception:  # noqa: BLE001 - unreadable: worked out again
            pass
    found = real_inputs(torch, names)
    if path:
        import io

        kept: dict = {}
        for name, calls in found.items():
            for call in calls:
                try:  # a call whose values cannot be saved (a generator, a function) is left out of the file
                    torch.save(call, io.BytesIO())
                except Exception:  # noqa: BLE001
                    continue
                kept.setdefault(name, []).append(call)
        torch.save(kept, f"{path}.{os.getpid()}")
        os.replace(f"{path}.{os.getpid()}", path)
    return found


def _record_here(items, out) -> None:
    """Reach for [name, composite kind, zoo calls] items; one JSON line per op to ``out`` as it goes."""
    import warnings

    warnings.simplefilter("ignore")
    torch = import_torch()
    import_catalog_modules()  # the same op names as the catalogue that asked
    Recorder = _recorder(torch)
    functional = {}
    for item in items:
        try:
            f = _functional(resolve_overload(torch, item[0]))
        except (AttributeError, RuntimeError):
            f = None
        if f is not None:
            functional[item[0]] = overload_name(f)
    real = _real_inputs_once(torch, [item[0] for item in items] + list(functional.values()))
    for item in items:
        name, composite = item[0], item[1]
        calls = list(real.get(name, ())) + list(real.get(functional.get(name, ""), ()))
        zoo, skip = (item[2] if len(item) > 2 else ()), set(item[3] if len(item) > 3 else ())

        def attempt(i, name=name):  # so that the parent knows which call crashed this process, if one does
            out.write(json.dumps(["@", name, i]) + "\n")
            out.flush()

        fwd, bwd = _record_one(torch, Recorder, name, composite, calls, zoo, skip, attempt)
        out.write(json.dumps([name, _as_json(fwd), _as_json(bwd)]) + "\n")
        out.flush()


def _as_json(r: Reach | None):
    if r is None:
        return None
    return {"ops": list(r.ops) if r.ops is not None else None, "error": r.error, "source": r.source}


def _from_json(d) -> Reach | None:
    if d is None:
        return None
    return Reach(tuple(d["ops"]) if d["ops"] is not None else None, d["error"], d.get("source"))


def cache_name(torch_version: str) -> str:
    """Keyed by torch version and by this recorder's source, so a changed recorder re-records. Each entry
    keeps the zoo calls it was recorded with (other calls, recorded again)."""
    import hashlib

    h = hashlib.sha256()
    for source in (__file__, recipes.__file__):
        with open(source, "rb") as f:
            h.update(f.read())
    recorder = h.hexdigest()[:12]
    return f"reach-torch{torch_version}-opcov{__version__}-{recorder}.json"


def _zoo_of(entry) -> list:
    return entry[2] if isinstance(entry, list) and len(entry) > 2 else []


def record(names, catalog, zoo=None) -> tuple[dict[str, Reach], dict[str, Reach]]:
    """Forward and backward reach for each op name (cached; recorded in a clean child process).
    ``zoo``: op name -> the calls zoo models made of it (zoo_calls), tried where the schema's do not fit."""
    zoo = zoo or {}
    name = cache_name(catalog.torch_version)
    names = list(names)
    cache = read_cache(name, {})

    def todo_of(cache: dict) -> list:
        return [
            (n, catalog.get(n).composite if catalog.get(n) else None, zoo.get(n, []))
            for n in names
            if n not in cache or _zoo_of(cache[n]) != zoo.get(n, [])
        ]

    if todo_of(cache):
        with cache_lock(name):  # another process may be recording it: wait, then read what it wrote
            cache = read_cache(name, {})
            todo = todo_of(cache)
            if todo:
                calls_of = {n: calls for n, _composite, calls in todo}

                def keep(done: dict) -> None:  # after each child: a long recording cut short keeps what it did
                    for n, got in done.items():
                        cache[n] = got + ([calls_of[n]] if calls_of.get(n) else [])
                    write_cache(name, cache)

                done = _record_isolated(todo, keep)
                for n in calls_of:
                    if n not in done:
                        cache[n] = [{"ops": None, "error": "not recorded"}, None] + (
                            [calls_of[n]] if calls_of[n] else []
                        )
                write_cache(name, cache)
    fwd, bwd = {}, {}
    for n in names:
        f, b = cache.get(n, [None, None])[:2]
        if f is not None:
            fwd[n] = _from_json(f)
        if b is not None:
            bwd[n] = _from_json(b)
    return fwd, bwd


def _record_isolated(todo, keep=None) -> dict:
    """Run the recorder in child processes; an op whose call kills the child is recorded as such.
    ``keep(done)`` is called with what is recorded so far after each child."""
    import tempfile

    folder = tempfile.TemporaryDirectory(prefix="opcov-reach-")
    env = dict(os.environ, **{AUTOLOAD_ENV: "0"})
    env.setdefault(_REAL_FILE, os.path.join(folder.name, "real.pt"))  # a file given: real calls made before
    done: dict = {}
    with folder:
        _run_children(todo, env, done, keep)
    return done


_CRASHES = 4  # calls of one op that may crash a child before the op is recorded as crashing it
CALL_TIMEOUT = 60.0  # seconds one call may take before its child is taken for hung (oneDNN's LSTM backward
# has waited forever on a lock); the first call's clock starts when the child has made the OpInfo calls


def _run_children(todo, env, done, keep=None, call_timeout: float | None = None) -> None:
    """Children record ``todo`` in turn: after one dies, or hangs in one call for ``call_timeout``
    seconds (it is killed), the next goes on from the op it was recording, without the call that
    killed it (the op's other calls may fit: one on cpu where meta crashed)."""
    todo = [list(t) + [[]] * (4 - len(t)) for t in todo]
    while todo:
        returncode, lines, hung = _child(todo, env, CALL_TIMEOUT if call_timeout is None else call_timeout)
        last = None
        for line in lines:
            try:
                row = json.loads(line)
                if row[0] == "@":
                    last = (row[1], row[2])
                    continue
                name, f, b = row
            except (ValueError, IndexError, TypeError):
                continue
            done[name] = [f, b]
        if keep is not None:
            keep(done)
        todo = [t for t in todo if t[0] not in done]
        if returncode == 0 or not todo:
            break
        crashed = todo[0]  # the op being recorded when the child died
        if last is not None and last[0] == crashed[0] and len(crashed[3]) < _CRASHES:
            crashed[3] = crashed[3] + [last[1]]
            continue
        todo.pop(0)
        what = f"hung (no answer in {hung:g} s)" if hung else f"crashed the process (exit {returncode})"
        done[crashed[0]] = [{"ops": None, "error": f"recording {what}"}, None]


_CHILD = [sys.executable, "-m", "opcov.scan.reach"]  # runs _record_here


def _child(todo, env, call_timeout: float) -> tuple[int, list[str], float]:
    """One recording child: (its exit code, the lines it wrote, the timeout when it was killed for
    hanging in one call, else 0)."""
    import threading
    import time

    proc = subprocess.Popen(
        _CHILD,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
        env=env,
    )
    lines: list[str] = []
    seen = {"at": None}  # when the last call began (None: the child is still making the OpInfo calls)

    def read() -> None:
        assert proc.stdout is not None
        for line in proc.stdout:
            lines.append(line)
            seen["at"] = time.monotonic()

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    assert proc.stdin is not None
    proc.stdin.write(json.dumps(todo))
    proc.stdin.close()
    hung = 0.0
    while proc.poll() is None:
        reader.join(0.5)
        began = seen["at"]
        if began is not None and time.monotonic() - began > call_timeout:
            proc.kill()
            hung = call_timeout
    proc.wait()
    reader.join()
    return proc.returncode, lines, hung


if __name__ == "__main__":  # the child process of record()
    _record_here(json.load(sys.stdin), sys.stdout)
