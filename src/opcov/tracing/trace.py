"""Trace a model's op set: the ATen ops (per phase and dtype key) it sends to a target device.

Why this shape:

* No weights, no hardware: parameters and inputs become fake tensors (``FakeTensorMode``),
  so a Llama-3-8B shape costs metadata only. ``real=True`` uses small real tensors for
  models whose ops depend on data (``nonzero``, MoE routing), which fake tensors refuse: on the
  computing stand-in where ``computing`` names it (``opcov trace --real``: realtrace.py), else on CPU.
* What the device receives, not what the CPU tracer did: for an accelerator target, the fake
  tensors live on a stand-in PrivateUse1 device (``target.py``), so device checks inside
  composite kernels take the accelerator's path (``dropout`` -> ``native_dropout``, sdpa's
  math path), and ``--autocast`` applies an accelerator policy (autocast.py). Where that
  stand-in is not available (the process already has a PrivateUse1 backend, autograd started
  before it was registered, or ``real=True``), the trace runs on CPU, dropout is run as
  ``native_dropout``, and the notes say so.
* A call tree, not only a list (``calltree.py``): on the stand-in, every CompositeImplicitAutograd
  call is seen where autograd dispatches it (``target.composite_hook``), so each op call is filed
  under the chain of composite calls it came from, forward, backward (autograd's own calls such
  as ``silu_backward``) and the optimizer step. A forward kernel call that made an autograd node
  is remembered by the node's sequence number, and each backward call is tied to the forward call
  whose node issued it, so a verdict can replace the backward of a composite a backend runs
  itself. On CPU only the device-dependent parent calls (``PARENTS``) are seen, from a
  TorchFunctionMode, and the notes say so.
* Real values where the model branches on data: ``trace_spec`` merges a real-valued run on a
  computing PrivateUse1 device into the fake trace (``realtrace.py``; ``trace(..., computing=)`` here).
* The optimizer step is what the target would run: ``foreach=True`` on accelerators (what
  ``torch.optim`` picks by default on cuda/xpu/PrivateUse1 with plain tensors; under fake
  tensors it would otherwise take the single-tensor path because a FakeTensor is not a plain
  tensor), the single-tensor path on CPU (CPU's default).
* Transformers models: the training loss is the model's own (``labels`` given); with fake
  tensors transformers cannot read the attention mask's values, so it builds the full causal
  mask where eager on real tensors would check ``mask.all()`` on the host and use
  ``is_causal`` (the one difference from eager, see tests/test_trace.py).
* Recorded by a ``TorchDispatchMode`` below autograd, so forward, backward and optimizer calls
  are what the dispatcher hands to a backend kernel. Dropped, each with a count in
  ``provenance.notes``: ``prim::`` metadata queries such as ``prim::device`` (answered by the
  tensor object; ~1,400 calls in a 2-layer Llama training step), ``profiler::`` record_function
  markers, ``aten::sym_*`` size queries (host only), ``aten::detach`` (autograd
  bookkeeping served by the CompositeExplicitAutograd alias kernel for every backend), and
  calls that touch no tensor on the target device (the optimizer's CPU step counters).
"""

from __future__ import annotations

import contextlib
import datetime as _dt
import functools
import logging
from collections import Counter
from dataclasses import dataclass, field

from opcov import branches, provenance, sigclass, vocab
from opcov import dtypes as _dtypes
from opcov.catalog import NO_KERNEL_NAMESPACES, NO_KERNEL_OPS, overload_name
from opcov.errors import OpcovError, UsageError, checked_arguments
from opcov.sources.step import default_loss, tensors_of
from opcov.store.opset import (
    CALL,
    COMPOSITE,
    KIND,
    MODES,
    PHASES,
    RETURNS_RECORDED,
    SCHEMA_VERSION,
    OpSet,
    node_text,
    phase_calls,
)
from opcov.torchenv import import_torch
from opcov.tracing import calltree, cpukernel, devicemodule, serve, target
from opcov.version import __version__

DTYPES = ("float32", "bfloat16", "float16")
OPTIMIZERS = ("adamw", "sgd", "none")
# Device-dependent parent calls a CPU trace records (a TorchFunctionMode sees them; the stand-in sees
# every composite call).
PARENTS = {
    "scaled_dot_product_attention": "aten::scaled_dot_product_attention",
    "dropout": "aten::dropout",
    "linear": "aten::linear",
}
SHAPE_CHARS = 80


@dataclass
class Options:
    """How to trace: mode, parameter dtype, autocast, target device, optimizer, fake or real."""

    mode: str = "training"
    dtype: str = "float32"
    autocast: bool = False
    device: str = "accelerator"  # target device type: cpu, or an accelerator name (tpu, cuda, ...)
    optimizer: str = "adamw"
    real: bool = False
    variant: str = vocab.GIVEN  # which inputs these are: the given ones, or a variant opcov adds (realtrace)

    def check(self) -> None:
        if self.mode not in MODES:
            raise UsageError(f"mode {self.mode!r}: expected one of {', '.join(MODES)}")
        if self.dtype not in DTYPES:
            raise UsageError(f"dtype {self.dtype!r}: expected one of {', '.join(DTYPES)}")
        if self.variant not in vocab.INPUT_VARIANTS:
            raise UsageError(f"input variant {self.variant!r}: expected one of {', '.join(vocab.INPUT_VARIANTS)}")
        if self.mode == "serve" and not self.real:
            raise UsageError(
                "--mode serve runs transformers' generate(), which reads token values on the host every step: "
                "it traces with real values ('opcov trace MODEL --mode serve' does; from Python, real=True)"
            )
        if self.optimizer not in OPTIMIZERS:
            raise UsageError(f"optimizer {self.optimizer!r}: expected one of {', '.join(OPTIMIZERS)}")
        if self.autocast and self.dtype != "float32":
            raise UsageError(
                "--autocast keeps float32 parameters and computes in bfloat16; drop --dtype (or drop --autocast)"
            )

    @property
    def accelerator(self) -> bool:
        return self.device != "cpu"


# ---------------------------------------------------------------- recording


@dataclass
class _Cell:
    calls: int = 0
    shape: str = ""
    grad: bool = False


class _Reads:
    """Which outputs of each call something later reads: every output tensor is filed under its storage
    (a view shares its base's storage, and autograd's saved tensors are new tensors on the same
    storage), and a later op taking a tensor on that storage as an argument reads every output filed
    there, as does the end of the step for what outlives it (``outlive``). A storage is keyed by its
    address while a weak reference to it is held (``StorageWeakRef``), so that no new storage takes the
    address of one that is filed. A call with an output whose storage cannot be read is not tracked (its
    node records no ``reads``: every output counts as read)."""

    def __init__(self, tree: calltree.Builder):
        from torch.multiprocessing.reductions import StorageWeakRef

        self.tree = tree
        self.weak = StorageWeakRef
        self.filed: dict = {}  # storage address -> (its weak reference, [(call index, output index)] not yet read)
        self.made: dict = {}  # storage address -> every (call index, output index) filed there, read or not

    @staticmethod
    def _address(t):
        try:
            return t.untyped_storage()._cdata
        except Exception:  # noqa: BLE001 - a tensor without a storage (sparse, a wrapper subclass)
            return None

    def read(self, tensors, own: int = -1) -> None:
        """``tensors`` were read: every output filed under their storages was, but by the backward of the
        call that made it (``own``: the forward call whose autograd node runs now). A value autograd saved
        for the op's own backward (nll_loss's total_weight, max pooling's indices) goes from the backend's
        forward kernel to its backward kernel, and the backward's own evidence judges that pair."""
        filed = self.filed
        for t in tensors:
            entry = filed.get(self._address(t))
            if entry is not None and entry[1]:
                kept = [(idx, i) for idx, i in entry[1] if idx == own]
                for idx, i in entry[1]:
                    if idx != own:
                        self.tree.read(idx, i)
                entry[1][:] = kept  # read once is read: later outputs filed there wait for a later read

    def produced(self, torch, idx: int, out) -> None:
        """Call ``idx`` returned ``out``: its tensor outputs are filed, by their index as the probe counts
        outputs (``opcov.trees.leaves``: each returned value, a list's items one by one)."""
        from opcov.trees import leaves

        found, host = [], []
        for i, t in enumerate(leaves(out)):
            if isinstance(t, torch.Tensor):
                address = self._address(t)
                if address is None:
                    return
                found.append((address, t, i))
            else:
                host.append(i)
        self.tree.track(idx)
        for i in host:  # a number (item()'s, a SymInt): the host has it, whoever reads it
            self.tree.read(idx, i)
        for address, t, i in found:
            entry = self.filed.get(address)
            if entry is None:
                entry = self.filed[address] = (self.weak(t.untyped_storage()), [])
            entry[1].append((idx, i))
            self.made.setdefault(address, []).append((idx, i))

    def returned(self, tensors) -> None:
        """``tensors`` are the model's return value: every output made on their storages reaches its caller."""
        for t in tensors:
            for idx, i in self.made.get(self._address(t), ()):
                self.tree.returned(idx, i)


@dataclass
class Recording:
    """What the dispatch mode saw, before it becomes an op-set document."""

    ops: dict = field(default_factory=dict)  # (op, phase, dtype) -> _Cell
    tree: calltree.Builder = field(default_factory=calltree.Builder)
    reads: _Reads | None = None  # made with the recorder (it imports torch)
    dropped: Counter = field(default_factory=Counter)  # op (prefixed "host:" when off the device) -> calls
    phase: str = "forward"
    serve_steps: dict = field(default_factory=dict)  # serve mode: generate run -> (forwards, cache class)
    # an error in a backward kernel on the stand-in, raised once backward is over (see _recover)
    deferred: Exception | None = None
    sized_on_cpu: Counter = field(default_factory=Counter)  # op -> calls sized by its CPU kernel (cpukernel.py)
    last_node: int = -1  # the newest autograd node's sequence number when the last call was seen (_grad)


def _as_if_all_true(torch, name: str, args):
    """The output of a boolean-mask op (``index.Tensor``, ``nonzero``, ``masked_select``) under fake
    tensors as if every mask value were true, or None for another op. Why: fake tensors cannot size
    such an output (DynamicOutputShapeException), and an error raised in a backward kernel on the
    stand-in device aborts the process (torch 2.13: the Python device guard's stream exchange runs
    while the error unwinds, and it may not raise), where in forward it is a clean error. So the
    backward goes on with this stand-in output, and the error is raised once it is over (the trace is
    then made with real values, as for a data-dependent forward); nothing traced after it is kept."""

    def every(mask):  # the long indices of every position of ``mask``
        grids = torch.meshgrid(*[torch.arange(n, device=mask.device) for n in mask.shape], indexing="ij")
        return [g.reshape(-1) for g in grids]

    if name == "aten::nonzero":
        return torch.stack(every(args[0]), dim=1) if args[0].dim() else None
    if name == "aten::masked_select":
        return torch.broadcast_tensors(args[0], args[1])[0].reshape(-1).clone()
    if name == "aten::index.Tensor":
        x, indices = args[0], []
        for index in args[1]:
            indices += every(index) if index is not None and index.dtype in (torch.bool, torch.uint8) else [index]
        return torch.ops.aten.index.Tensor(x, indices)
    return None


def _recover(torch, rec: Recording, func, args, kwargs, exc: Exception, target_type: str):
    """The outputs of a backward call on fake tensors on the stand-in that raised ``exc``, or ``exc``
    raised again (forward, CPU, real values). An error raised in a backward kernel on the stand-in would
    abort the process (torch 2.13, see ``_as_if_all_true`` and cpukernel.py), so the backward goes on:

    * a backward kernel with no meta kernel, whose outputs (gradients: each shaped as an argument) its
      CPU kernel sizes on zeros as FakeTensorMode does for CPU fake tensors (cpukernel.py): traced so;
    * any other error: with a stand-in output (every mask value true for a boolean-mask op, else the CPU
      kernel's on zeros), and ``exc`` is raised once the backward is over (the one-line error, then a
      trace with real values for a user's model, as for the same error in forward)."""
    from torch._subclasses.fake_tensor import FakeTensor

    fake = any(isinstance(t, FakeTensor) for t in tensors_of((args, kwargs), torch))
    if target_type == "cpu" or not fake or rec.phase != "backward":
        raise exc
    name = overload_name(func)
    if type(exc).__name__ == "DynamicOutputShapeException":
        out = _as_if_all_true(torch, name, args)
    else:
        out = cpukernel.run(torch, func, args, kwargs)
        if (
            out is not None
            and cpukernel.fallback_failed(exc, target_type)
            and cpukernel.shaped_like_arguments(torch, out, (args, kwargs))
        ):
            rec.sized_on_cpu[name] += 1
            return out
    if out is None:
        raise exc
    rec.deferred = rec.deferred or exc  # the first one is the error raised
    return out


def _shape(tensors) -> str:
    """Up to 4 shapes (of tensors, or torch.Size) as text."""
    text = ", ".join(str(list(getattr(t, "shape", t))) for t in tensors[:4])
    return text if len(text) <= SHAPE_CHARS else text[: SHAPE_CHARS - 3] + "..."


def _make_recorder(torch, rec: Recording, target_type: str):
    from torch.utils._python_dispatch import TorchDispatchMode

    rec.reads = _Reads(rec.tree)
    rec.last_node = torch._C._autograd._get_sequence_nr() - 1  # nodes made before the recording are not its calls

    class Recorder(TorchDispatchMode):
        """Files each op call under (op, phase, dtype key); see the module docstring for drops."""

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            kwargs = kwargs or {}
            name = overload_name(func)
            try:
                out = func(*args, **kwargs)
            except Exception as exc:
                if not hasattr(exc, "opcov_op"):
                    exc.opcov_op = name  # the innermost op that failed, for the one-line error
                out = _recover(torch, rec, func, args, kwargs, exc, target_type)
            if func.namespace in NO_KERNEL_NAMESPACES or name in NO_KERNEL_OPS or func._opname.startswith("sym_"):
                rec.dropped[name] += 1
                return out
            ins = list(tensors_of(args, torch)) + list(tensors_of(kwargs, torch))
            outs = list(tensors_of(out, torch))
            if (ins or outs) and not any(t.device.type == target_type for t in ins + outs):
                rec.dropped["host:" + name] += 1
                return out
            key = _call_key(ins, outs)
            shape = functools.partial(_shape, [t.shape for t in (ins or outs)[:4]])
            cell = rec.ops.setdefault((name, rec.phase, key), _Cell())
            cell.calls += 1
            if not cell.shape:
                cell.shape = shape()
            grad = _grad(torch, rec, ins)
            cell.grad = cell.grad or grad
            issuer = _issuer(torch, rec)
            idx = rec.tree.leaf(
                name,
                rec.phase,
                key,
                shape=shape,
                grad=grad,
                issued_by=issuer,
                sig=sigclass.of_call(func, args, kwargs, torch.Tensor, both_know=False),
            )
            if grad:  # autograd made this call's node just before dispatching it here
                rec.tree.created_node(torch._C._autograd._get_sequence_nr() - 1, idx)
            if not func.is_view:  # a view reads nothing: what reads the view reads its base's storage
                rec.reads.read(ins, issuer if issuer >= 0 or rec.phase != "backward" else rec.tree.open_issuer())
            rec.reads.produced(torch, idx, out)
            return out

    return Recorder()


def _call_key(ins, outs) -> str:
    return _dtypes.call_dtype([_dtypes.dtype_name(t.dtype) for t in ins], [_dtypes.dtype_name(t.dtype) for t in outs])


def _grad(torch, rec: Recording, ins) -> bool:
    """Whether a forward call made an autograd node: an input requires grad, or autograd numbered a new
    node since the last call seen (the first call after a node is made is the one that made it). Why
    both: a backend that functionalizes (PyTorch/XLA) hands a dispatch mode its inner tensors, which
    never require grad, while autograd above them made the node all the same; without it the call loses
    its ``grad`` mark and its own backward's reads (nll_loss's total_weight) count as the model's."""
    if rec.phase != "forward":  # backward may run on autograd's own threads, each with its own numbering
        return False
    newest = torch._C._autograd._get_sequence_nr() - 1
    made, rec.last_node = newest > rec.last_node, max(rec.last_node, newest)
    return torch.is_grad_enabled() and (made or any(t.requires_grad for t in ins))


def _issuer(torch, rec: Recording) -> int:
    """For a backward call outside any open composite: the forward call whose autograd node runs it."""
    if rec.phase != "backward" or rec.tree.stack:
        return -1
    node = torch._C._current_autograd_node()
    return rec.tree.issued_by(None if node is None else node._sequence_nr())


def _composite(torch, rec: Recording, dev_type: str, name: str, run, args, kwargs, kind=COMPOSITE, op=None):
    """Run one composite call (``run(*args, **kwargs)``) as a call-tree node around what it calls
    (``op``: its OpOverload, whose schema names the arguments of its signature class)."""
    phase = rec.phase
    sig = (
        sigclass.of_call(op, args, kwargs, torch.Tensor, both_know=False) if op is not None else ""
    )  # before it mutates
    idx = rec.tree.open(name, phase, kind, _issuer(torch, rec))
    ins = list(tensors_of(args, torch)) + list(tensors_of(kwargs, torch))
    try:
        out = run(*args, **kwargs)
    except BaseException:
        rec.tree.close(idx, dtype=_dtypes.NONE, on_device=False)
        raise
    outs = list(tensors_of(out, torch))
    if rec.reads is not None and any(t.device.type == dev_type for t in ins + outs):
        rec.reads.produced(torch, idx, out)  # read as its last child's outputs are: on the same storages
    grad = phase == "forward" and torch.is_grad_enabled() and any(t.requires_grad for t in ins)
    rec.tree.close(
        idx,
        dtype=_call_key(ins, outs),
        shape=functools.partial(_shape, [t.shape for t in (ins or outs)[:4]]),
        grad=grad,
        args=_parent_args(name, args, kwargs),
        sig=sig,
        on_device=any(t.device.type == dev_type for t in ins + outs),
    )
    return out


def _make_composite_hook(torch, rec: Recording, dev_type: str):
    """The stand-in's composite hook (target.composite_hook): each composite call becomes a node."""

    def hook(op, run, args, kwargs):
        other = branches.generic(op.name())
        if other is not None:  # the fused path the stand-in takes, and the generic one other devices take
            run = functools.partial(_both_branches, torch, rec, run, other)
        return _composite(torch, rec, dev_type, op.name(), run, args, kwargs, op=op)

    return hook


def _both_branches(torch, rec: Recording, run, other, *args, **kwargs):
    """Inside a device-branching composite (opcov.branches): its run as the stand-in takes it, under a
    ``device-branch:fused`` call node, then torch's generic decomposition on the same inputs under
    ``device-branch:generic``, with that branch's backward recorded there too where its inputs require
    grad (its outputs feed nothing else). Returns the fused run's outputs."""
    phase = rec.phase
    idx = rec.tree.open(branches.node_name(branches.FUSED), phase, CALL)
    try:
        out = run(*args, **kwargs)
    finally:
        rec.tree.close(idx, dtype=_dtypes.NONE, on_device=False)
    idx = rec.tree.open(branches.node_name(branches.GENERIC), phase, CALL)
    outs: list = []
    wrt: list = []
    # on leaves cut from the model's graph: the branch's backward must not run through (and free) the
    # history its inputs carry, as a cell's hidden state from the step before does
    cut = torch.utils._pytree.tree_map_only(
        torch.Tensor, lambda t: t.detach().requires_grad_(t.requires_grad), (args, kwargs)
    )
    try:
        alt = other(*cut[0], **cut[1])
        outs = [t for t in tensors_of(alt, torch) if t.requires_grad]
        wrt = [t for t in tensors_of(cut, torch) if t.requires_grad]
    finally:
        rec.tree.close(idx, dtype=_dtypes.NONE, on_device=False)
    if outs and wrt and phase == "forward" and torch.is_grad_enabled():
        # a root of the backward phase (a node's children share its phase), named as the branch is
        stack, rec.tree.stack, rec.phase = rec.tree.stack, [], "backward"
        idx = rec.tree.open(branches.node_name(branches.GENERIC), "backward", CALL)
        try:
            torch.autograd.grad(outs, wrt, [torch.ones_like(t) for t in outs], allow_unused=True)
        finally:
            rec.tree.close(idx, dtype=_dtypes.NONE, on_device=False)
            rec.tree.stack, rec.phase = stack, phase
    return out


def _make_parent_mode(torch, rec: Recording, dev_type: str, substitute_dropout: bool):
    """On CPU: records device-dependent parent calls as composite nodes; runs dropout as an accelerator would."""
    import torch.nn.functional as F
    from torch.overrides import TorchFunctionMode

    funcs = {getattr(F, n): op for n, op in PARENTS.items()}

    class Parents(TorchFunctionMode):
        def __torch_function__(self, func, types, args=(), kwargs=None):
            kwargs = kwargs or {}
            parent = funcs.get(func)
            if parent is None:
                return func(*args, **kwargs)
            if parent == "aten::dropout" and substitute_dropout:
                func = functools.partial(_accelerator_dropout, torch)
            return _composite(torch, rec, dev_type, parent, func, args, kwargs)

    return Parents()


def _accelerator_dropout(torch, input, p=0.5, training=True, inplace=False):
    """What ``aten::dropout`` runs on cuda/xpu/PrivateUse1: the fused ``native_dropout``."""
    if not training or p == 0 or p == 1 or input.numel() == 0:
        return torch.nn.functional.dropout(input, p, training, inplace)
    out = torch.ops.aten.native_dropout(input, p, True)[0]
    return input.copy_(out) if inplace else out


def _parent_args(parent, args, kwargs) -> str:
    if parent == "aten::scaled_dot_product_attention":
        names = ("attn_mask", "dropout_p", "is_causal", "scale", "enable_gqa")
        vals = dict(zip(names, args[3:]))
        vals.update({k: v for k, v in kwargs.items() if k in names})
        mask = vals.get("attn_mask")
        return (
            f"mask={'none' if mask is None else str(mask.dtype).rsplit('.', 1)[-1]}, "
            f"dropout_p={vals.get('dropout_p', 0.0)}, is_causal={bool(vals.get('is_causal', False))}, "
            f"enable_gqa={bool(vals.get('enable_gqa', False))}"
        )
    if parent == "aten::dropout":
        p = args[1] if len(args) > 1 else kwargs.get("p", 0.5)
        return f"p={p}"
    return ""


# ---------------------------------------------------------------- the driver


@dataclass
class Traced:
    """The model under trace: parameters as (fake) leaves on the device, inputs, how to get a loss."""

    module: object
    inputs: object  # tuple of positional args, dict of keyword args, or one tensor
    loss: object = None  # callable(output) -> scalar tensor; default: the model's own loss, else a sum


@checked_arguments
def trace(
    model,
    inputs=(),
    *,
    mode="training",
    dtype="float32",
    autocast=False,
    device="accelerator",
    optimizer="adamw",
    real=False,
    loss=None,
    name=None,
    source=None,
    config=None,
    command=None,
    notes=(),
    computing: str | None = None,
    variant: str = vocab.GIVEN,
    on: str | None = None,
) -> OpSet:
    """The op set ``model`` dispatches on ``device`` when called with ``inputs``.

    ``model`` may hold real or meta parameters; it is never modified. ``inputs``: a tuple
    of positional arguments, a dict of keyword arguments, or a tensor. For notebooks:
    ``opcov.trace(model, (x,), mode="training").save("my.yaml")``. ``computing``: the device type of
    a computing PrivateUse1 backend this process already has, to run ``real`` values on (realtrace.py).
    ``variant``: which inputs ``inputs`` are (vocab.INPUT_VARIANTS), written on every call-tree node:
    the given ones, unless realtrace runs a variant it made itself. ``on``: the device type of a backend
    this process runs (xla, cpu) to record on itself, with ``real`` values (``tracing.ondevice``).
    """
    opts = Options(mode, dtype, autocast, device, optimizer, real, variant)
    opts.check()
    torch = import_torch()
    _check_arguments(torch, model, inputs, loss, notes, name=name, source=source, command=command)
    with devicemodule.watch(torch, []) as lookups:
        doc = _run(torch, opts, Traced(model, inputs, loss), computing=computing, on=on)
    if lookups:
        doc[devicemodule.KEY] = devicemodule.records(lookups)
    params = sum(p.numel() for p in _unique_params(model))
    header = {
        "name": name or type(model).__name__,
        "source": source or f"python:{type(model).__qualname__}",
        "params": params,
    }
    if config:
        header["config"] = config
    doc["model"] = {**header, **_hf_header(model)}
    doc["provenance"].update(
        command=command or "opcov.trace(...) from Python: no command reproduces it",
        created=_dt.datetime.now(_dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
    )
    doc["provenance"]["notes"] = list(notes) + doc["provenance"]["notes"]
    return OpSet(doc)


def _check_arguments(torch, model, inputs, loss, notes, **texts) -> None:
    """``trace``'s arguments as it uses them, or one UsageError naming the argument and what it takes
    (a bad one raised deep inside the trace: 'NoneType' object is not iterable)."""
    if not isinstance(model, torch.nn.Module):
        raise UsageError(f"model is of type {type(model).__name__}: expected a torch.nn.Module")
    if not isinstance(inputs, (tuple, list, dict, torch.Tensor)):
        raise UsageError(
            f"inputs is of type {type(inputs).__name__}: expected a tuple of positional arguments, "
            "a dict of keyword arguments, or a tensor"
        )
    if loss is not None and not callable(loss):
        raise UsageError(f"loss is of type {type(loss).__name__}: expected a callable(output) or None")
    if isinstance(notes, str) or not all(isinstance(n, str) for n in _iterable(notes)):
        raise UsageError(f"notes {notes!r:.60}: expected a list of strings")
    for what, value in texts.items():
        if value is not None and (not isinstance(value, str) or "\0" in value):
            raise UsageError(f"{what} {value!r:.60}: expected a string without NUL bytes, or None")


def _iterable(value):
    try:
        return list(value)
    except TypeError:
        return [None]


def _unique_params(model):
    seen = set()
    for t in list(model.parameters()) + list(model.buffers()):
        if id(t) not in seen:
            seen.add(id(t))
            yield t


def _hf_header(model) -> dict:
    cfg = getattr(model, "config", None)
    if cfg is None or not hasattr(cfg, "to_dict"):
        return {}
    import transformers

    return {
        "transformers": transformers.__version__,
        "attn_implementation": str(getattr(cfg, "_attn_implementation", None) or "eager"),
    }


def _run(
    torch,
    opts: Options,
    traced: Traced,
    *,
    cpu_why: str | None = None,
    computing: str | None = None,
    on: str | None = None,
) -> dict:
    from torch._subclasses.fake_tensor import FakeTensorMode

    if on:  # the backend itself: no stand-in, what its own dispatcher receives
        stand_in = None
    elif computing:
        stand_in = computing
    else:
        stand_in = None if opts.real or not opts.accelerator or cpu_why else target.ensure(torch)
    dev_type = on or stand_in or "cpu"
    notes = []
    if opts.accelerator and stand_in is None and not on:
        why = cpu_why or (
            "--real traces real CPU tensors" if opts.real else "PrivateUse1 is taken by another backend in this process"
        )
        notes.append(
            f"traced on cpu for target {opts.device} ({why}): dropout was run as native_dropout; "
            "other device-dependent paths are recorded as the CPU took them"
        )
    if stand_in is None:
        notes.append(
            f"the calltree has only the composite calls {', '.join(sorted(PARENTS.values()))}, "
            f"seen where Python makes them: on {dev_type} other composites decompose out of a trace's sight"
        )
    fake = contextlib.nullcontext() if opts.real else FakeTensorMode(allow_non_fake_inputs=True)
    logging.getLogger("torch._subclasses.fake_tensor").setLevel(logging.CRITICAL)  # errors become one line
    rec = Recording()
    with fake:
        params, buffers = _leaves(torch, traced.module, dev_type, opts)
        args, kwargs = _move_inputs(torch, traced.inputs, dev_type, opts)
    composites = (
        target.composite_hook(_make_composite_hook(torch, rec, dev_type))
        if stand_in
        else _make_parent_mode(torch, rec, dev_type, substitute_dropout=opts.accelerator and not on)
    )
    try:
        with fake, composites, _make_recorder(torch, rec, dev_type):
            _phases(torch, opts, traced, params, buffers, args, kwargs, rec, dev_type)
    except Exception as exc:  # noqa: BLE001 - turned into one line naming the op
        if stand_in and not computing and not on and "device_ready_queues_" in str(exc):
            # autograd started its device threads before the stand-in device existed (a backward ran
            # earlier in this process); it cannot run a backward on it now, so trace on CPU instead
            return _run(
                torch,
                opts,
                traced,
                cpu_why="autograd had already started in this process before the stand-in device was registered",
            )
        raise _explain(torch, exc, opts, on or ("the computing stand-in" if computing else dev_type)) from None
    doc = _document(torch, opts, rec, dev_type, stand_in, notes)
    if computing:
        doc["provenance"]["traced_on"] = f"{computing} (a computing PrivateUse1 backend: CPU payloads)"
    if on:
        doc["provenance"]["traced_on"] = f"{on} (the backend itself: its own dispatcher's path)"
    return doc


def _kept_in_float32(torch, module, want):
    """A test of a parameter or buffer name of ``module``: whether it stays float32 at dtype ``want``, as
    transformers loads a checkpoint in that dtype: a model's ``_keep_in_fp32_modules_strict`` (MoE routers'
    ``gate.weight`` and ``e_score_correction_bias``: their matmul is float32 on any device) at
    bfloat16 or float16, its ``_keep_in_fp32_modules`` at float16, matched by transformers' own
    ``_get_dtype_plan`` and glob patterns. Without it a bfloat16 trace recorded the router's matmul in
    bfloat16, which the loaded model never runs (and inkling2's real run failed: float x bfloat16)."""
    found = next(((prefix, m) for prefix, m in module.named_modules() if hasattr(m, "_get_dtype_plan")), None)
    if found is None or want not in (torch.float16, torch.bfloat16):
        return lambda name: False
    prefix, model = found
    try:
        from transformers.core_model_loading import build_glob_alternation

        plan = model._get_dtype_plan(want)
        pattern = build_glob_alternation(list(plan))[0] if plan else None
    except Exception:  # noqa: BLE001 - another transformers: the model's dtype for every tensor, as before
        return lambda name: False
    if pattern is None:
        return lambda name: False
    start = prefix + "." if prefix else ""
    return lambda name: name.startswith(start) and pattern.search(name[len(start) :]) is not None


def _leaves(torch, module, dev_type, opts):
    """Parameters (leaves requiring grad as in the model) and buffers as tensors on the device, in the
    trace's dtype but for those a checkpoint loaded in it keeps in float32 (``_kept_in_float32``)."""
    want = getattr(torch, opts.dtype)
    kept = _kept_in_float32(torch, module, want)
    made: dict = {}

    def convert(name, t, is_param):
        if id(t) in made:
            return made[id(t)]
        dtype = (torch.float32 if kept(name) else want) if t.is_floating_point() else t.dtype
        if opts.real:
            new = t.detach().to(device=dev_type, dtype=dtype, copy=True)
            if t.device.type == "meta":
                raise UsageError("--real needs a model with real weights; this one was built on meta")
        else:
            new = torch.empty_strided(t.shape, t.stride(), dtype=dtype, device=dev_type)
        # as in the model, in every mode: a real eval() + no_grad() run keeps its parameters requiring
        # grad, and some ops pick their kernel by it (embedding_bag: _embedding_bag, not *_forward_only)
        if is_param and t.requires_grad:
            new.requires_grad_(True)
        made[id(t)] = new
        return new

    params = {n: convert(n, p, True) for n, p in module.named_parameters(remove_duplicate=False)}
    buffers = {n: convert(n, b, False) for n, b in module.named_buffers(remove_duplicate=False)}
    return params, buffers


def _move_inputs(torch, inputs, dev_type, opts):
    want = getattr(torch, opts.dtype)

    def move(x):
        if isinstance(x, torch.Tensor):
            dtype = want if x.is_floating_point() else x.dtype
            if opts.real:
                return x.to(device=dev_type, dtype=dtype)
            return torch.empty_strided(x.shape, x.stride(), dtype=dtype, device=dev_type)
        if isinstance(x, (list, tuple)):
            return type(x)(move(v) for v in x)
        if isinstance(x, dict):
            return {k: move(v) for k, v in x.items()}
        return x

    if isinstance(inputs, dict):
        return (), move(inputs)
    if isinstance(inputs, torch.Tensor):
        return (move(inputs),), {}
    return tuple(move(v) for v in inputs), {}


def _phases(torch, opts, traced, params, buffers, args, kwargs, rec, dev_type):
    from torch.func import functional_call

    if opts.mode == "serve":  # generate's prefill and decode steps (serve.py)
        if args or not isinstance(kwargs, dict):
            raise UsageError("--mode serve takes the prompt as keyword inputs (input_ids, attention_mask)")

        def close(idx, args_text):
            rec.tree.close(idx, dtype=_dtypes.NONE, args=args_text, on_device=False)

        try:
            rec.serve_steps = serve.run_all(
                torch,
                rec,
                traced.module,
                {**buffers, **params},
                kwargs,
                close=close,
                keep=functools.partial(_outlive, torch, rec),
            )
        finally:
            _outlive(torch, rec, [*params.values(), *buffers.values()])
        return
    module = traced.module
    was_training = module.training
    module.train(opts.mode == "training")
    try:
        amp = torch.autocast(device_type=dev_type, dtype=torch.bfloat16) if opts.autocast else contextlib.nullcontext()
        grad = torch.enable_grad() if opts.mode == "training" else torch.no_grad()
        rec.phase = "forward"
        with grad, amp:
            out = functional_call(module, {**buffers, **params}, args, kwargs, tie_weights=False)
            _outlive(torch, rec, out)  # the model's return value is read by its caller
            if rec.reads is not None:
                rec.reads.returned(list(_held(out, torch)))
            if opts.mode == "inference":
                return
            loss = traced.loss(out) if traced.loss else default_loss(torch, out)
            _outlive(torch, rec, loss)
        rec.phase = "backward"
        loss.backward()
        if rec.deferred is not None:
            raise rec.deferred
        if opts.optimizer == "none":
            return
        leaves = list({id(p): p for p in params.values() if p.requires_grad and p.grad is not None}.values())
        if not leaves:
            return
        rec.phase = "optimizer"
        opt = _optimizer(torch, opts, leaves)
        idx = rec.tree.open(f"torch.optim.{type(opt).__name__}.step", "optimizer", CALL)
        try:
            opt.step()
        finally:
            rec.tree.close(
                idx,
                dtype=_dtypes.dtype_name(leaves[0].dtype),
                shape=f"{len(leaves)} parameters",
                args="foreach=True" if opts.accelerator else "foreach=False (CPU default: single-tensor)",
                on_device=False,
            )
        _outlive(torch, rec, [s for st in opt.state.values() for s in st.values()])
    finally:
        # what the step leaves behind is read by the next one: parameters, their gradients, buffers
        _outlive(torch, rec, [*params.values(), *(p.grad for p in params.values()), *buffers.values()])
        module.train(was_training)


def _outlive(torch, rec: Recording, obj) -> None:
    """The tensors of ``obj`` outlive the traced step (the model's return value, the loss, the state it
    leaves): every output on their storages counts as read."""
    if rec.reads is not None:
        rec.reads.read(_held(obj, torch))


def _held(obj, torch, depth: int = 0):
    """Every tensor ``obj`` holds: in tuples, lists, dicts (transformers' outputs are dicts) and the
    attributes of any other object (a dataclass, a model's own output class), a few levels deep."""
    if isinstance(obj, torch.Tensor):
        yield obj
    elif depth > 6 or obj is None or isinstance(obj, (str, bytes, int, float, bool)):
        return
    elif isinstance(obj, (list, tuple, set, frozenset)):
        for x in obj:
            yield from _held(x, torch, depth + 1)
    elif isinstance(obj, dict):
        for x in obj.values():
            yield from _held(x, torch, depth + 1)
    elif hasattr(obj, "__dict__") and not isinstance(obj, (type, torch.nn.Module)):
        for x in vars(obj).values():
            yield from _held(x, torch, depth + 1)


def _optimizer(torch, opts, leaves):
    """The implementation the target picks by default: foreach on accelerators, single-tensor on CPU."""
    foreach = bool(opts.accelerator)
    if opts.optimizer == "sgd":
        return torch.optim.SGD(leaves, lr=1e-3, momentum=0.9, foreach=foreach)
    return torch.optim.AdamW(leaves, lr=1e-3, foreach=foreach)


def _explain(torch, exc, opts, ran_on: str = "cpu"):
    """One line naming the op that could not be traced, where it failed (``ran_on``: the device the real
    values ran on), and what to do."""
    if isinstance(exc, OpcovError):
        return exc
    outer = root = exc
    while root.__context__ is not None and "no fake impl" in str(root.__context__):
        root = root.__context__  # FakeTensorMode's own fallback failed after the real cause
    chain = " ".join(str(e) for e in (exc, root)) + " " + type(root).__name__
    exc = root
    text = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
    func = getattr(exc, "func", None)
    op = overload_name(func) if isinstance(func, torch._ops.OpOverload) else None
    op = op or getattr(exc, "opcov_op", None) or getattr(outer, "opcov_op", None)
    if op is None:
        import re

        m = re.search(r"\b(aten|prims)[.:]+([A-Za-z0-9_]+)(?:\.([A-Za-z0-9_]+))?", str(exc))
        if m:
            over = m.group(3)
            op = f"{m.group(1)}::{m.group(2)}" + (f".{over}" if over and over != "default" else "")
    where = f" at {op}" if op else ""
    if op is None:
        hint = (
            "the model's own code raised, not an op: check its inputs and config"
            if opts.real
            else "the model's own code raised under fake tensors, not an op: check its inputs and config, "
            "or trace with --real (small real CPU tensors)"
        )
    elif opts.real and ran_on == "cpu":
        hint = "the model itself fails on CPU with these inputs; check the inputs and sizes"
    elif opts.real and ran_on == "the computing stand-in":
        hint = (
            "it failed on the computing stand-in (CPU kernels, an accelerator's composite paths); "
            "'opcov trace MODEL --device cpu --real' says whether CPU itself runs it"
        )
    elif opts.real:
        hint = (
            f"the {ran_on} device raised on a real run of the model, not the tracer: that is the finding "
            f"('opcov check MODEL -b {ran_on}' judges it; 'opcov trace MODEL --device cpu --real' shows CPU runs it)"
        )
    elif "no fake impl or Meta kernel" in chain:
        hint = "the op has no fake-tensor (meta) implementation; trace with --real (small real CPU tensors)"
    elif "DataDependent" in chain or "data-dependent" in chain or "data dependent" in chain:
        hint = (
            "fake tensors carry no values, so data-dependent ops cannot run; trace with --real (small real CPU tensors)"
        )
    else:
        hint = (
            "the op refused these inputs under fake tensors; try --dtype bfloat16 if it lacks a float32 "
            "path, or --real (small real CPU tensors)"
        )
    return UsageError(f"cannot trace{where}: {type(exc).__name__}: {text[:200]} ({hint})")


def _document(torch, opts, rec: Recording, dev_type, stand_in, notes) -> dict:
    ops: dict = {}
    for (name, phase, key), cell in sorted(rec.ops.items()):
        rec_cell = {"calls": cell.calls}
        if cell.shape:
            rec_cell["shape"] = cell.shape
        if cell.grad:
            rec_cell["grad"] = True
        ops.setdefault(name, {}).setdefault(phase, {})[key] = rec_cell
    tree = rec.tree.rows()
    for row in tree:
        row["variants"] = (opts.variant,)
    dropped = Counter()
    host = Counter()
    for name, n in rec.dropped.items():
        (host if name.startswith("host:") else dropped)[name.removeprefix("host:")] += n
    if dropped:
        notes.append(
            "dropped (need no backend kernel): "
            + ", ".join(f"{k} x{v}" for k, v in sorted(dropped.items(), key=lambda kv: (-kv[1], kv[0])))
        )
    if host:
        notes.append(
            "dropped (no tensor on the target device, run by the host): "
            + ", ".join(f"{k} x{v}" for k, v in sorted(host.items(), key=lambda kv: (-kv[1], kv[0])))
        )
    if rec.sized_on_cpu:
        notes.append(
            "backward kernels sized by their CPU kernel on zero-filled tensors (no meta kernel: "
            "FakeTensorMode's fallback, run on CPU because the stand-in holds no data): "
            + ", ".join(f"{k} x{v}" for k, v in sorted(rec.sized_on_cpu.items()))
        )
    if any(n["op"] == "aten::scaled_dot_product_attention" for n in tree) and opts.accelerator:
        took = (
            "core torch's math fallback, which a PrivateUse1 device takes"
            if stand_in
            else "the CPU's (_scaled_dot_product_flash_attention_for_cpu); an accelerator takes another"
            if dev_type == "cpu"
            else f"{dev_type}'s own, recorded on it"
        )
        notes.append(
            f"scaled_dot_product_attention: the traced path is {took}; a backend that registers "
            "_fused_sdp_choice or its own sdpa kernel takes its own (see calltree)"
        )
    if opts.autocast and opts.accelerator and stand_in:
        notes.append(
            "autocast: CUDA's autocast policy applied on the stand-in device (core torch has no "
            "AutocastPrivateUse1 policy; a backend may bring its own, and it may differ)"
        )
    elif opts.autocast and opts.accelerator:
        notes.append(f"autocast: the CPU's autocast policy (traced on cpu); the {opts.device} policy may differ")
    if rec.serve_steps:
        notes.append(serve.note(rec.serve_steps))
    summary = {
        "distinct_ops": len(ops),
        "calls": phase_calls({p: sum(c.calls for (_, ph, _), c in rec.ops.items() if ph == p) for p in PHASES}),
    }
    doc = {
        "schema_version": SCHEMA_VERSION,
        "kind": KIND,
        "mode": opts.mode,
        "dtype": opts.dtype,
        "autocast": "bfloat16" if opts.autocast else None,
        "optimizer": opts.optimizer if opts.mode == "training" else "none",
        "provenance": {
            "torch": str(torch.__version__),
            "opcov": __version__,
            "host": provenance.host(),
            "tracing": "real" if opts.real else "fake",
            "target_device": opts.device,
            "traced_on": stand_in and f"{stand_in} (stand-in PrivateUse1 device)" or "cpu",
            "notes": notes,
        },
        "summary": summary,
        "calltree": [node_text(row) for row in tree],
        "ops": ops,
    }
    if rec.serve_steps:
        doc["serve"] = serve.header(rec.serve_steps)
    elif rec.reads is not None:  # each node's returns= says which outputs the caller receives
        doc["provenance"]["returns"] = RETURNS_RECORDED
    return doc
