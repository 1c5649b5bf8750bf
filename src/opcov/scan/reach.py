"""What a composite op reaches, forward and backward, recorded on meta tensors.

A composite kernel (CompositeImplicitAutograd or CompositeExplicitAutograd) runs on
any backend by calling other ops; whether it runs on a given backend depends on
those. We call it once on meta tensors built from its schema, under a recording
TorchDispatchMode, and keep the overloads it dispatched. The same for its backward
(autograd.grad with ones as grad_outputs). The recording depends on the inputs:
where no synthesized input is accepted the reach stays unresolved and says why.
Reach does not depend on the backend, so one recording serves every scan: it runs
in a child process that has no backend loaded (some ops query the current
accelerator, and torch_tpu aborts the process when its runtime starts without a
TPU; a synthesized call may also crash), and is cached per torch and opcov version.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from dataclasses import dataclass

from opcov.catalog import import_catalog_modules, overload_name, resolve_overload
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
    backward, copied to meta; ``schema``: synthesized from the schema, the fallback)."""

    ops: tuple[str, ...] | None
    error: str | None = None
    source: str | None = None


MAX_REAL = 3  # real calls kept per overload


def real_inputs(torch, names) -> dict[str, list]:
    """Overload name -> up to MAX_REAL (args, kwargs) on meta tensors that reach it for real: the calls
    PyTorch's OpInfo samples (float32, on CPU) make, forward and backward, seen by a dispatch mode (which
    sees CompositeExplicit ops and every kernel), and, for an op the mode cannot see (a
    CompositeImplicitAutograd op decomposes above it), the samples of the OpInfos named after it."""
    import warnings

    import torch.utils._pytree as pytree
    from torch.utils._python_dispatch import TorchDispatchMode

    try:
        from torch.testing._internal.common_methods_invocations import op_db
    except Exception:  # noqa: BLE001 - no OpInfo here (expecttest missing): the schema alone
        return {}
    wanted = set(names)
    found: dict[str, list] = {}

    def meta(tree):
        return pytree.tree_map(lambda t: t.detach().to("meta") if isinstance(t, torch.Tensor) else t, tree)

    def keep(name, args, kwargs):
        got = found.setdefault(name, [])
        if len(got) < MAX_REAL:
            try:
                got.append(meta((tuple(args), dict(kwargs))))
            except Exception:  # noqa: BLE001 - a tensor meta cannot copy (sparse, quantized): not kept
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
            samples = list(op.sample_inputs("cpu", torch.float32, requires_grad=op.supports_autograd))[:2]
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
                samples = list(op.sample_inputs("cpu", torch.float32))[:MAX_REAL]
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


def _value(torch, arg, shape, dtype):
    """A meta-device value for one schema argument, or raise _Unsynthesizable."""
    t = _normalize_type(str(arg.type))
    name = arg.name
    optional = t.endswith("?")
    base = t.rstrip("?")

    def tensor(dt=dtype, s=shape):
        return torch.empty(s, dtype=dt, device="meta")

    if base == "Tensor":
        if name in _INT_TENSOR_ARGS:
            return tensor(torch.int64)
        if name in _BOOL_TENSOR_ARGS:
            return tensor(torch.bool)
        if name in ("weight", "bias") and optional:
            return None
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
        return False
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
        return torch.device("meta")
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


def _synthesize(torch, schema, shape, dtype):
    values, kwarg_only = {}, set()
    for arg in schema.arguments:
        writes = arg.alias_info is not None and arg.alias_info.is_write
        if arg.has_default_value() and not writes:
            continue
        values[arg.name] = _value(torch, arg, shape, dtype)
        if arg.kwarg_only:
            kwarg_only.add(arg.name)
    _consistent(values, shape)
    args = [v for k, v in values.items() if k not in kwarg_only]
    kwargs = {k: v for k, v in values.items() if k in kwarg_only}
    return args, kwargs


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
            leaf = torch.empty(v.shape, dtype=v.dtype, device="meta", requires_grad=True)
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
    gargs = [grad_input(a) for a in args]
    gkwargs = {k: (v if k in writes else grad_input(v)) for k, v in kwargs.items()}
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


def _record_one(torch, Recorder, name: str, composite, real=()) -> tuple[Reach, Reach | None]:
    """Call one op on meta tensors and record its forward and backward: with float32 inputs synthesized
    from its schema where they fit (forward and backward), else with the ``real`` inputs (calls that
    reach it for real, see real_inputs), else with the schema's other dtypes. The schema's fitting call
    comes first because a real sample is not a typical call either (matmul's first OpInfo sample is 1-d
    and reaches dot; the schema's 2-d call reaches mm); the real calls resolve what the schema cannot."""
    try:
        overload = resolve_overload(torch, name)
    except (AttributeError, RuntimeError) as exc:
        return Reach(None, _first_line(exc)), None
    fwd, bwd = _record_schema(torch, Recorder, overload, name, composite, float_only=True)
    if fwd.ops is not None and (bwd is None or bwd.ops is not None):
        return fwd, bwd
    for args, kwargs in real:
        rec = Recorder()
        try:
            with rec:
                _call_forward(torch, overload, composite, list(args), dict(kwargs))
        except Exception:  # noqa: BLE001 - this call does not fit the overload: the next one
            continue
        fwd = Reach(tuple(o for o in rec.ops if o != name), source="opinfo")
        try:
            ops = _backward(torch, Recorder, overload, list(args), dict(kwargs))
            bwd = Reach(ops, source="opinfo") if ops is not None else None
        except Exception as exc:  # noqa: BLE001
            bwd = Reach(None, _first_line(exc), source="opinfo")
        if bwd is not None and bwd.ops is not None:
            return fwd, bwd
        # no backward from this call (an integer call of the op, or one that failed): the schema's, if any
        schema_fwd, schema_bwd = _record_schema(torch, Recorder, overload, name, composite)
        return fwd, (schema_bwd if schema_bwd is not None and schema_bwd.ops is not None else bwd)
    return _record_schema(torch, Recorder, overload, name, composite)


def _record_schema(
    torch, Recorder, overload, name: str, composite, float_only: bool = False
) -> tuple[Reach, Reach | None]:
    """Inputs synthesized from the schema, each shape (then, unless ``float_only``, dtype) in turn."""
    error = "no input shape tried"
    attempts = [(shape, torch.float32) for shape in SHAPES]
    if not float_only:
        attempts += [(shape, dt) for dt in (torch.int64, torch.complex64, torch.bool) for shape in SHAPES[:2]]
    for shape, dtype in attempts:
        try:
            args, kwargs = _synthesize(torch, overload._schema, shape, dtype)
        except _Unsynthesizable as exc:
            return Reach(None, f"input synthesis: {exc}"), None
        rec = Recorder()
        try:
            with rec:
                _call_forward(torch, overload, composite, args, kwargs)
        except Exception as exc:  # noqa: BLE001 - any failure means "try the next shape"
            error = _first_line(exc)
            continue
        fwd = Reach(tuple(o for o in rec.ops if o != name), source="schema")
        try:
            ops = _backward(torch, Recorder, overload, args, kwargs)
            bwd = Reach(ops, source="schema") if ops is not None else None
        except Exception as exc:  # noqa: BLE001
            bwd = Reach(None, _first_line(exc), source="schema")
        return fwd, bwd
    return Reach(None, error, source="schema"), None


def _record_here(items, out) -> None:
    """Reach for (name, composite kind) pairs; one JSON line per op to ``out`` as it goes."""
    import warnings

    warnings.simplefilter("ignore")
    torch = import_torch()
    import_catalog_modules()  # the same op names as the catalogue that asked
    Recorder = _recorder(torch)
    real = real_inputs(torch, [name for name, _ in items])
    for name, composite in items:
        fwd, bwd = _record_one(torch, Recorder, name, composite, real.get(name, ()))
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
    """Keyed by torch version and by this recorder's source, so a changed recorder re-records."""
    import hashlib

    with open(__file__, "rb") as f:
        recorder = hashlib.sha256(f.read()).hexdigest()[:12]
    return f"reach-torch{torch_version}-opcov{__version__}-{recorder}.json"


def record(names, catalog) -> tuple[dict[str, Reach], dict[str, Reach]]:
    """Forward and backward reach for each op name (cached; recorded in a clean child process)."""
    name = cache_name(catalog.torch_version)
    names = list(names)
    cache = read_cache(name, {})
    if any(n not in cache for n in names):
        with cache_lock(name):  # another process may be recording it: wait, then read what it wrote
            cache = read_cache(name, {})
            todo = [(n, catalog.get(n).composite if catalog.get(n) else None) for n in names if n not in cache]
            if todo:
                cache.update(_record_isolated(todo))
                write_cache(name, cache)
    fwd, bwd = {}, {}
    for n in names:
        f, b = cache.get(n, [None, None])
        if f is not None:
            fwd[n] = _from_json(f)
        if b is not None:
            bwd[n] = _from_json(b)
    return fwd, bwd


def _record_isolated(todo) -> dict:
    """Run the recorder in child processes; an op whose call kills the child is recorded as such."""
    env = dict(os.environ, **{AUTOLOAD_ENV: "0"})
    done: dict = {}
    while todo:
        proc = subprocess.run(
            [sys.executable, "-m", "opcov.scan.reach"], input=json.dumps(todo), capture_output=True, text=True, env=env
        )
        for line in proc.stdout.splitlines():
            try:
                name, f, b = json.loads(line)
            except ValueError:
                continue
            done[name] = [f, b]
        todo = [t for t in todo if t[0] not in done]
        if proc.returncode == 0 or not todo:
            break
        crashed = todo.pop(0)[0]  # the op being recorded when the child died
        done[crashed] = [{"ops": None, "error": f"recording crashed the process (exit {proc.returncode})"}, None]
    return done


if __name__ == "__main__":  # the child process of record()
    _record_here([tuple(x) for x in json.load(sys.stdin)], sys.stdout)
