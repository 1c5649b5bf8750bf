"""A sharded training step (``opcov trace MODEL --mode training --parallel ddp|fsdp2|tp --world-size N``):
one forward, backward and optimizer step of the model wrapped as DDP, sharded with FSDP2 (``fully_shard``)
or split with tensor parallelism (``parallelize_module``: ColwiseParallel and RowwiseParallel on the
Linear layers of the model's own ``base_model_tp_plan``), traced as one rank of a world of N.

Why this way:

* One process plays rank 0 of N on torch's ``fake`` process-group backend
  (torch.testing._internal.distributed.fake_pg.FakeStore): every collective is dispatched as on a real
  group, with the group's size, and moves nothing. Parameters and inputs are fake tensors on the stand-in
  PrivateUse1 device (target.py), as for a single-device trace, so composites take an accelerator's
  path; the stand-in gets stream and event objects that do nothing (FSDP2 asks the device for them).
  Ranks are symmetric where every sharded dimension divides by N (the op set says whether it does), so
  rank 0 stands for all.
* What is recorded (opcov.store.parallel): the local aten ops, as a single-device trace records them;
  each collective (``c10d::*``, ``_c10d_functional::*``, FSDP2's ``fsdp::*``) with its reduce op and group
  size; a functional collective as a composite over the ``c10d::`` op its kernel calls on the process group,
  learned by running that kernel once on small CPU tensors with the same fake group (a fake tensor never
  reaches the process group); each aten op DTensor dispatched as a ``dtensor:OP`` node over the local ops it
  ran (the verdict asks whether DTensor has a sharding strategy for it); each redistribution as a
  ``dtensor.redistribute:FROM->TO`` node over its collectives. Calls DTensor makes only to work out output
  shapes (its sharding propagator runs the op on fake tensors) are left out: no device runs them.
* DDP's built-in all-reduce hook cannot finish on the fake group (its work's future holds no value), so a
  Python hook doing what it does (divide the bucket by N, all-reduce it with SUM) is registered; DDP's
  construction-time checks (parameter shapes across ranks, rank 0's broadcast) read values fake tensors do
  not have and are not part of a step: they are skipped. The op set's notes say both.
"""

from __future__ import annotations

import contextlib
import datetime as _dt
import fnmatch
import functools

from opcov import sigclass
from opcov.catalog import overload_name
from opcov.dtypes import dtype_name
from opcov.errors import UsageError
from opcov.sources import models, zoo
from opcov.sources.step import default_loss, tensors_of
from opcov.store import parallel
from opcov.store.opset import CALL, COMPOSITE, OpSet
from opcov.torchenv import import_torch
from opcov.tracing import target, trace
from opcov.tracing.command import command_line

PROCESS_GROUP = "fake (torch.testing._internal.distributed.fake_pg: one process plays one rank; nothing is sent)"
TP_STYLES = {"colwise": "ColwiseParallel", "rowwise": "RowwiseParallel"}  # the plan entries tp applies
# Argument names that carry a reduce op in c10d's and the functional collectives' schemas.
_REDUCE_ARG = ("reduce_op", "reduceOp", "op")
NO_STRATEGY = "does not have a sharding strategy registered"  # DTensor's words for an op it cannot shard


def trace_parallel(
    model: str,
    *,
    style: str,
    world_size: int,
    dtype: str | None = None,
    optimizer: str = "adamw",
    sizes: models.Sizes | None = None,
    out: str | None = None,
) -> OpSet:
    """The op set of one sharded training step of ``model`` (a zoo name or anything ``models.build``
    takes) as rank 0 of ``world_size`` (see the module docstring). ``out`` is named in the command only."""
    if style not in parallel.STYLES:
        raise UsageError(f"--parallel {style!r}: expected one of {', '.join(parallel.STYLES)}")
    if world_size < 1:
        raise UsageError(f"--world-size {world_size}: a process group has at least 1 rank")
    if optimizer == "none":
        raise UsageError("--parallel traces a training step with its optimizer; leave out --optimizer none")
    entry = zoo.BY_NAME.get(model)
    sizes = sizes or models.Sizes()
    spec = entry.spec if entry else model
    built = models.build(spec, sizes, mode="training", real=False, zoo_entry=entry)
    notes = list(built.notes)
    if style == "tp":
        wanted = _tp_sizes(built, world_size)
        if wanted:
            sizes = models.Sizes(**{**vars(sizes), "overrides": {**sizes.overrides, **wanted}})
            built = models.build(spec, sizes, mode="training", real=False, zoo_entry=entry)
            notes.append(
                f"tensor parallelism over {world_size} ranks splits attention heads: the config was set to "
                + ", ".join(f"{k}={v}" for k, v in wanted.items())
            )
    dtype = dtype or (entry.dtype if entry else built.dtype or "float32")
    torch = import_torch()
    doc = _run(torch, built, style, world_size, dtype, optimizer, notes)
    command = command_line(model, mode="training", dtype=dtype, optimizer=optimizer, sizes=sizes, out=out)
    command += f" --parallel {style} --world-size {world_size}"
    doc["model"] = {
        "name": entry.name if entry else built.name,
        "source": built.source,
        "params": sum(p.numel() for p in built.model.parameters()),
        **({"config": built.config} if built.config else {}),
        **trace._hf_header(built.model),
        **built.facets,
    }
    doc["provenance"].update(command=command, created=_dt.datetime.now(_dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"))
    return OpSet(doc)


def _tp_sizes(built, world_size: int) -> dict:
    """Config overrides that let tensor parallelism split the attention heads over ``world_size`` ranks: {} when
    they divide already (or the model has no heads to split)."""
    cfg = getattr(built.model, "config", None)
    heads = getattr(cfg, "num_attention_heads", None)
    hidden = getattr(cfg, "hidden_size", None)
    if not isinstance(heads, int) or not isinstance(hidden, int):
        return {}
    kv = getattr(cfg, "num_key_value_heads", None) or heads
    if heads % world_size == 0 and kv % world_size == 0:
        return {}
    if hidden % world_size:
        raise UsageError(
            f"--parallel tp --world-size {world_size}: hidden_size {hidden} does not divide into {world_size} "
            "shards; choose a world size that divides it, or --set hidden_size=..."
        )
    out = {"num_attention_heads": world_size, "head_dim": hidden // world_size}
    if hasattr(cfg, "num_key_value_heads"):
        out["num_key_value_heads"] = world_size
    return out


# ---------------------------------------------------------------- the step


def _run(torch, built, style: str, world_size: int, dtype: str, optimizer: str, notes: list) -> dict:
    from torch._subclasses.fake_tensor import FakeTensorMode

    dev = target.ensure(torch)
    if dev is None:
        raise UsageError(
            "--parallel needs the stand-in device, and PrivateUse1 is taken in this process; run 'opcov trace' "
            "in a fresh process"
        )
    opts = trace.Options(mode="training", dtype=dtype, optimizer=optimizer)
    rec = trace.Recording()
    fake = FakeTensorMode(allow_non_fake_inputs=True)
    with _process_group(torch, dev, world_size) as mesh, _device_streams(torch, dev):
        with fake:
            module = _on_device(torch, built.model, dev, getattr(torch, dtype))
            args, kwargs = trace._move_inputs(torch, built.inputs, dev, opts)
            wrapped, plan = _parallelize(torch, module, style, mesh, notes)
        recorder = _recorder(torch, rec, dev)
        hook = target.composite_hook(trace._make_composite_hook(torch, rec, dev))
        try:
            with fake, hook, recorder, _dtensor_hooks(torch, rec, recorder):
                _step(torch, wrapped, args, kwargs, rec, optimizer)
        except Exception as exc:  # noqa: BLE001 - one line naming the op
            raise trace._explain(torch, exc, opts, dev) from None
        ranks = _ranks(torch, module, style, world_size)
    for op in dict.fromkeys(recorder.missing):
        notes.append(
            f"DTensor has no sharding strategy for {op}: it raised 'does not have a sharding strategy registered', "
            "as it does on every device; the trace went on with the op run on full copies of its arguments "
            "(unrecorded) to record the rest of the step"
        )
    doc = trace._document(torch, opts, rec, dev, dev, notes)
    doc["parallel"] = {
        "style": style,
        "world_size": world_size,
        "rank": 0,
        "ranks": ranks,
        "mesh": [world_size],
        "process_group": PROCESS_GROUP,
        "plan": plan,
    }
    return doc


@contextlib.contextmanager
def _process_group(torch, dev: str, world_size: int):
    """Rank 0 of a fake process group of ``world_size`` ranks, for CPU and the stand-in device, and its 1-d
    DeviceMesh; destroyed afterwards."""
    import torch.distributed as dist
    from torch.distributed.device_mesh import DeviceMesh
    from torch.testing._internal.distributed.fake_pg import FakeStore

    if dist.is_initialized():
        raise UsageError("--parallel starts its own (fake) process group; this process already has one")
    dist.init_process_group(f"cpu:fake,{dev}:fake", store=FakeStore(), rank=0, world_size=world_size)
    try:
        yield DeviceMesh(dev, list(range(world_size)))  # init_device_mesh refuses a device name with '_'
    finally:
        dist.destroy_process_group()


class _Stream:
    """A stream on the stand-in device: nothing runs there, so there is nothing to order."""

    def __init__(self, *args, **kwargs):
        pass

    def wait_stream(self, stream):
        return None

    def wait_event(self, event):
        return None

    def record_event(self, event=None):
        return _Event()

    def synchronize(self):
        return None


class _Event:
    def __init__(self, *args, **kwargs):
        pass

    def record(self, stream=None):
        return self

    def wait(self, stream=None):
        return None

    def synchronize(self):
        return None

    def query(self):
        return True


@contextlib.contextmanager
def _device_streams(torch, dev: str):
    """Stream and event objects on the stand-in's device module while the step runs (FSDP2 asks for them)."""
    module = getattr(torch, dev)
    current = _Stream()
    given = {
        "Stream": _Stream,
        "Event": _Event,
        "current_stream": lambda *a: current,
        "stream": lambda s: contextlib.nullcontext(),
        "synchronize": lambda *a: None,
    }
    before = {k: getattr(module, k) for k in given if hasattr(module, k)}
    for k, v in given.items():
        setattr(module, k, v)
    try:
        yield
    finally:
        for k in given:
            if k in before:
                setattr(module, k, before[k])
            else:
                delattr(module, k)


def _on_device(torch, module, dev: str, dtype):
    """``module`` (built on meta) with fake parameters and buffers on the stand-in, floating ones in ``dtype``."""
    module = module.to_empty(device=dev)
    for t in list(module.parameters()) + list(module.buffers()):
        if t.is_floating_point():
            t.data = t.data.to(dtype)
    return module


def _parallelize(torch, module, style: str, mesh, notes: list):
    """(the module to call, the plan recorded) for ``style``."""
    if style == "ddp":
        return _ddp(torch, module, notes)
    if style == "fsdp2":
        from torch.distributed.fsdp import fully_shard

        blocks = _blocks(torch, module)
        for _name, block in blocks:
            fully_shard(block, mesh=mesh)
        fully_shard(module, mesh=mesh)
        plan = {name: "fully_shard" for name, _ in blocks}
        plan["(root)"] = "fully_shard (the parameters no block holds)"
        return module, plan
    return module, _tensor_parallel(torch, module, mesh, notes)


def _blocks(torch, module) -> list:
    """The repeated blocks FSDP2 shards one by one (a transformers model's decoder layers): every
    ModuleList's items, else none (the root alone)."""
    out = []
    for name, child in module.named_modules():
        if isinstance(child, torch.nn.ModuleList):
            out += [(f"{name}.{i}", m) for i, m in enumerate(child)]
    return out


def _ddp(torch, module, notes: list):
    import torch.distributed as dist
    import torch.nn.parallel.distributed as ddp_module

    skipped = {"_verify_param_shape_across_processes": None, "_sync_module_states": None}
    kept = {k: getattr(ddp_module, k) for k in skipped}
    for k in skipped:
        setattr(ddp_module, k, lambda *a, **kw: None)
    try:
        wrapped = ddp_module.DistributedDataParallel(module)
    finally:
        for k, v in kept.items():
            setattr(ddp_module, k, v)
    size = dist.get_world_size()

    def allreduce_hook(state, bucket):
        tensor = bucket.buffer()
        tensor.div_(size)
        dist.all_reduce(tensor)
        fut = torch.futures.Future()
        fut.set_result(tensor)
        return fut

    wrapped.register_comm_hook(None, allreduce_hook)
    notes.append(
        "DDP: its built-in all-reduce hook cannot finish on torch's fake process group (the work's future holds no "
        "value), so a Python hook doing what it does was registered: the bucket divided by the world size "
        "(div_), then all-reduced with SUM (c10d::allreduce_); the built-in path multiplies each gradient into "
        "its bucket (mul.out) where this one copies it (copy_)"
    )
    notes.append(
        "DDP: its construction-time checks (parameter shapes across ranks, rank 0's state broadcast) read values "
        "fake tensors do not have and are not part of a step: skipped"
    )
    return wrapped, {"(root)": "DistributedDataParallel, every parameter replicated; gradients all-reduced in buckets"}


def _tensor_parallel(torch, module, mesh, notes: list) -> dict:
    """parallelize_module with the model's own ``base_model_tp_plan`` (transformers' recipe), its 'colwise' and
    'rowwise' entries only: the plan recorded."""
    from torch.distributed.tensor.parallel import ColwiseParallel, RowwiseParallel, parallelize_module

    cfg = getattr(module, "config", None)
    own = getattr(module, "base_model_tp_plan", None) if cfg is None else None  # a factory's module may carry one
    recipe = dict(own or getattr(cfg, "base_model_tp_plan", None) or {})
    if not recipe:
        raise UsageError(
            "--parallel tp uses the model's own tensor-parallel plan (a transformers config's base_model_tp_plan, "
            "or a base_model_tp_plan attribute of a factory's module); this model has none: use --parallel ddp or fsdp2"
        )
    prefix = getattr(module, "base_model_prefix", "") or ""
    base = getattr(module, prefix, None) if prefix and not own else None
    root = f"{prefix}." if isinstance(base, torch.nn.Module) else ""
    names = [n for n, m in module.named_modules() if isinstance(m, torch.nn.Linear)]
    styles = {"colwise": ColwiseParallel, "rowwise": RowwiseParallel}
    applied: dict = {}
    left = sorted({how for how in recipe.values() if how not in styles})
    for pattern, how in recipe.items():
        if how not in styles:
            continue
        for name in names:
            if fnmatch.fnmatchcase(name, root + pattern):
                applied[name] = how
    if not applied:
        raise UsageError(f"--parallel tp: the model's plan {sorted(recipe)} matches none of its Linear layers")
    parallelize_module(module, mesh, {name: styles[how]() for name, how in applied.items()})
    if left:
        notes.append(
            f"tensor parallelism: the model's plan also names {', '.join(left)}; those modules stay replicated "
            "(only colwise and rowwise are applied)"
        )
    notes.append(
        "tensor parallelism: the optimizer holds the DTensor parameters and the replicated plain ones in two "
        "parameter groups (one foreach group mixing them raises 'got mixed torch.Tensor and DTensor' on every device)"
    )
    return {k: TP_STYLES[v] for k, v in sorted(applied.items())}


def _ranks(torch, module, style: str, world_size: int) -> str:
    """Why rank 0 stands for every rank, or where it does not."""
    if style == "ddp" or world_size == 1:
        return "symmetric: every rank holds every parameter and runs the same step; rank 0 recorded"
    from torch.distributed.tensor import DTensor

    uneven = []
    for name, p in module.named_parameters():
        if isinstance(p, DTensor):
            for placement in p.placements:
                d = getattr(placement, "dim", None)
                if d is not None and p.shape[d] % world_size:
                    uneven.append(name)
    if not uneven:
        return f"symmetric: every sharded dimension divides by {world_size}, so every rank makes the same calls on shards of the same shapes; rank 0 recorded"
    shown = ", ".join(uneven[:4]) + (f" and {len(uneven) - 4} more" if len(uneven) > 4 else "")
    return (
        f"rank 0 only: {shown} do not divide by {world_size}, so the last ranks hold padded or empty shards and "
        "may call with other shapes"
    )


def _step(torch, module, args, kwargs, rec, optimizer: str) -> None:
    from torch.distributed.tensor import DTensor

    module.train(True)
    rec.phase = "forward"
    out = module(*args, **kwargs)
    trace._outlive(torch, rec, out)
    loss = default_loss(torch, out)
    trace._outlive(torch, rec, loss)
    rec.phase = "backward"
    loss.backward()
    params = [p for p in module.parameters() if p.requires_grad and p.grad is not None]
    rec.phase = "optimizer"
    groups = [
        {"params": g}
        for g in ([p for p in params if isinstance(p, DTensor)], [p for p in params if not isinstance(p, DTensor)])
        if g
    ]
    cls = torch.optim.SGD if optimizer == "sgd" else torch.optim.AdamW
    opt = cls(groups, lr=1e-3, foreach=True, **({"momentum": 0.9} if optimizer == "sgd" else {}))
    idx = rec.tree.open(f"torch.optim.{cls.__name__}.step", "optimizer", CALL)
    try:
        opt.step()
    finally:
        rec.tree.close(idx, dtype=dtype_name(params[0].dtype), shape=f"{len(params)} parameters",
                       args="foreach=True", on_device=False)  # fmt: skip
    trace._outlive(torch, rec, [s for st in opt.state.values() for s in st.values()])
    trace._outlive(torch, rec, [*params, *(p.grad for p in params)])


# ---------------------------------------------------------------- recording


def _recorder(torch, rec, dev: str):
    """The single-device trace's recorder, which also files DTensor's ops, functional collectives and the
    arguments of every collective (see the module docstring)."""
    from torch.distributed.tensor import DTensor

    base = type(trace._make_recorder(torch, rec, dev))
    wait = "_c10d_functional::wait_tensor"

    class Recorder(base):  # type: ignore[misc, valid-type]
        def __init__(self):
            super().__init__()
            self.passing = None  # the DTensor op sent on to DTensor's own dispatch
            self.mute = 0  # inside DTensor's sharding propagation: its fake runs are no device's calls
            self.missing: list = []  # aten ops DTensor raised on: no sharding strategy

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            kwargs = kwargs or {}
            if self.mute:
                return func(*args, **kwargs)
            if any(issubclass(t, DTensor) for t in types):
                if self.passing is func:
                    self.passing = None
                    return NotImplemented  # DTensor's dispatch runs it, this mode still sees the local ops
                return _dtensor_call(torch, rec, dev, self, func, args, kwargs)
            name = overload_name(func)
            collective = func.namespace in parallel.COLLECTIVE_NAMESPACES
            if collective and name != wait and func.namespace != "c10d":
                return _functional(torch, rec, dev, self, func, args, kwargs)
            before = len(rec.tree.calls)
            out = super().__torch_dispatch__(func, types, args, kwargs)
            if collective and len(rec.tree.calls) > before:
                call = rec.tree.calls[before]
                call.args, call.sig = _collective_args(torch, func, args, kwargs)
            return out

    return Recorder()


def _dtensor_call(torch, rec, dev: str, mode, func, args, kwargs):
    """An aten op with DTensor arguments: a ``dtensor:OP`` call node over what DTensor's dispatch runs."""
    name = overload_name(func)
    ins = list(tensors_of(args, torch)) + list(tensors_of(kwargs, torch))
    idx = rec.tree.open(parallel.DTENSOR + name, rec.phase, CALL, trace._issuer(torch, rec))
    out, missing = None, False
    try:
        mode.passing = func
        with mode:
            out = func(*args, **kwargs)
    except (NotImplementedError, RuntimeError) as exc:
        if NO_STRATEGY not in str(exc):
            raise
        missing = True  # DTensor raises here on every device; the rest of the step is traced all the same
        mode.missing.append(name)
        out = _replicated(torch, mode, func, args, kwargs)
    finally:
        mode.passing = None
        outs = list(tensors_of(out, torch))
        rec.tree.close(
            idx,
            dtype=trace._call_key(ins, outs),
            shape=functools.partial(trace._shape, [t.shape for t in (ins or outs)[:4]]),
            args=f"in={_placements(ins)} out={'none: no sharding strategy' if missing else _placements(outs)}",
            on_device=True,
        )
    return out


def _replicated(torch, mode, func, args, kwargs):
    """What ``func`` gives on the full tensors of its DTensor arguments, as replicated DTensors: unrecorded
    (mode.mute), only so that the trace goes on past an op DTensor has no sharding strategy for."""
    from torch.distributed.tensor import DTensor, Replicate

    mesh = next(t.device_mesh for t in tensors_of((args, kwargs), torch) if isinstance(t, DTensor))

    def full(x):
        if isinstance(x, DTensor):
            return x.full_tensor()
        if isinstance(x, (list, tuple)):
            return type(x)(full(v) for v in x)
        return x

    def wrap(x):
        if isinstance(x, torch.Tensor) and not isinstance(x, DTensor):
            return DTensor.from_local(x, mesh, [Replicate()] * mesh.ndim, run_check=False)
        if isinstance(x, (list, tuple)):
            return type(x)(wrap(v) for v in x)
        return x

    mode.mute += 1
    try:
        return wrap(func(*full(args), **{k: full(v) for k, v in kwargs.items()}))
    finally:
        mode.mute -= 1


def _placements(tensors) -> str:
    """'S(0)|R' for the placements of each DTensor among ``tensors`` ('-' for a plain tensor)."""
    words = []
    for t in tensors[:4]:
        places = getattr(t, "placements", None)
        words.append(",".join(_place(p) for p in places) if places is not None else "-")
    return "|".join(words) or "-"


def _place(p) -> str:
    text = str(p)
    return text.replace("Shard(dim=", "S(").replace("Replicate()", "R").replace("Partial(", "P(")


def _functional(torch, rec, dev: str, mode, func, args, kwargs):
    """A functional collective: a composite node over the ``c10d::`` op(s) its kernel calls on the process
    group (``_reached``), each a kernel node with the call's dtype, shape and arguments."""
    name = overload_name(func)
    reached = _reached(torch, func, args, kwargs)
    text, sig = _collective_args(torch, func, args, kwargs)

    def run(*a, **kw):
        out = func(*a, **kw)
        ins = list(tensors_of(a, torch))
        key = trace._call_key(ins, list(tensors_of(out, torch)))
        for op in reached:
            _leaf(torch, rec, op, key, ins, text, sig)
        return out

    before = len(rec.tree.calls)
    out = trace._composite(torch, rec, dev, name, run, args, kwargs, kind=COMPOSITE, op=func)
    rec.tree.calls[before].args, rec.tree.calls[before].sig = text, sig  # the group by its size, not its name
    return out


def _leaf(torch, rec, op: str, key: str, ins, args: str, sig: str) -> None:
    """A kernel call ``op`` the dispatcher makes below a functional collective's kernel (its ``ops`` cell too)."""
    cell = rec.ops.setdefault((op, rec.phase, key), trace._Cell())
    cell.calls += 1
    shape = trace._shape([t.shape for t in ins[:4]])
    cell.shape = cell.shape or shape
    idx = rec.tree.leaf(op, rec.phase, key, shape=shape, sig=sig)
    rec.tree.calls[idx].args = args


_REACHED: dict = {}  # (op, argument shapes and dtypes) -> the c10d ops its kernel dispatched


def _reached(torch, func, args, kwargs) -> tuple:
    """The ``c10d::`` ops a functional collective's kernel dispatches: its CompositeExplicitAutograd kernel
    run once on CPU zeros of the call's shapes and dtypes with the same (fake) process group, under a mode that
    names what it dispatches. Memoized per op and argument shapes."""
    from torch._subclasses.fake_tensor import unset_fake_temporarily
    from torch.utils._python_dispatch import TorchDispatchMode, _disable_current_modes

    def cpu(x):
        return torch.zeros(x.shape, dtype=x.dtype) if isinstance(x, torch.Tensor) else x

    def walk(x):
        if isinstance(x, (list, tuple)):
            return type(x)(walk(v) for v in x)
        return cpu(x)

    key = (overload_name(func), tuple((tuple(t.shape), str(t.dtype)) for t in tensors_of(args, torch)))
    if key in _REACHED:
        return _REACHED[key]
    kernel = torch._C.DispatchKey.CompositeExplicitAutograd
    if not torch._C._dispatch_has_kernel_for_dispatch_key(func.name(), kernel):
        _REACHED[key] = ()
        return ()
    seen: list = []

    class Names(TorchDispatchMode):
        def __torch_dispatch__(self, f, types, a=(), kw=None):
            name = overload_name(f)
            if f.namespace == "c10d" and name not in seen:
                seen.append(name)
            return f(*a, **(kw or {}))

    with _disable_current_modes(), unset_fake_temporarily():
        real_args, real_kwargs = walk(args), {k: walk(v) for k, v in kwargs.items()}
        probe = Names()
        with probe:
            out = func._op_dk(kernel, *real_args, **real_kwargs)
        for t in tensors_of(out, torch):
            torch.ops._c10d_functional.wait_tensor(t)
    _REACHED[key] = tuple(seen)
    return _REACHED[key]


def _collective_args(torch, func, args, kwargs) -> tuple[str, str]:
    """(args text, signature class) of a collective call: what selects its behaviour (reduce op, group size,
    and its other non-tensor arguments as sigclass writes them), the group by its size, never its name."""
    import torch.distributed as dist

    schema = func._schema
    named = dict(zip((a.name for a in schema.arguments), args))
    named.update(kwargs)
    words = {}
    for arg in schema.arguments:
        if arg.name not in named:
            continue
        value = named[arg.name]
        text = str(arg.type)
        if "ProcessGroup" in text:
            words["group_size"] = str(dist.ProcessGroup.unbox(value).size())
        elif arg.name == "group_name":
            words["group_size"] = str(dist.distributed_c10d._resolve_process_group(value).size())
        elif "ReduceOp" in text or arg.name in _REDUCE_ARG:
            words["reduce_op"] = _reduce_text(value)
        elif arg.name in ("group_size", "world_size"):
            words["group_size"] = str(value)
        elif arg.name == "asyncOp":
            words["async"] = str(bool(value))
    tensors = sigclass.of_call(func, args, kwargs, torch.Tensor).split(";", 1)[0]
    selectors = ",".join(f"{k}={v}" for k, v in sorted(words.items()))
    return ", ".join(f"{k}={v}" for k, v in sorted(words.items())), f"{tensors};{selectors}"


def _reduce_text(value) -> str:
    """'sum' for a c10d ReduceOp (a script object whose op() is the RedOpType's number) or the functional
    collectives' own 'sum'/'avg'."""
    import torch.distributed as dist

    if hasattr(value, "_method_names") and "op" in value._method_names():
        try:
            return dist.ReduceOp.RedOpType(value.op()).name.lower()
        except ValueError:
            return f"op{value.op()}"
    return str(getattr(value, "name", value)).rsplit(".", 1)[-1].lower()


@contextlib.contextmanager
def _dtensor_hooks(torch, rec, recorder):
    """While the step runs: each redistribution is a ``dtensor.redistribute:FROM->TO`` node, and DTensor's
    sharding propagation (which runs each op once on fake tensors to learn its output's shape) is muted."""
    import torch.distributed.tensor._api as api
    import torch.distributed.tensor._dispatch as dispatch
    import torch.distributed.tensor._redistribute as redistribute
    from torch.distributed.tensor._sharding_prop import ShardingPropagator

    original = redistribute.redistribute_local_tensor
    meta = ShardingPropagator._propagate_tensor_meta_non_cached

    def redistribute_local_tensor(local, current, target_spec, **kw):
        src, dst = _places(current.placements), _places(target_spec.placements)
        if src == dst or recorder.mute:
            return original(local, current, target_spec, **kw)
        idx = rec.tree.open(f"{parallel.REDISTRIBUTE}{src}->{dst}", rec.phase, CALL, trace._issuer(torch, rec))
        try:
            return original(local, current, target_spec, **kw)
        finally:
            rec.tree.close(
                idx,
                dtype=trace._call_key([local], []),
                shape=trace._shape([local.shape]),
                args="explicit" if kw.get("is_explicit") else "implicit (DTensor's dispatch)",
                on_device=True,
            )

    def muted(self, schema):
        recorder.mute += 1
        try:
            return meta(self, schema)
        finally:
            recorder.mute -= 1

    modules = (redistribute, dispatch, api)
    for m in modules:
        m.redistribute_local_tensor = redistribute_local_tensor
    ShardingPropagator._propagate_tensor_meta_non_cached = muted
    try:
        yield
    finally:
        for m in modules:
            m.redistribute_local_tensor = original
        ShardingPropagator._propagate_tensor_meta_non_cached = meta


def _places(placements) -> str:
    return ",".join(_place(p) for p in placements)
