"""Second case source: op calls captured from model traces, replayed one call at a time.

OpInfo reaches about 600 of the ~3,100 aten overloads; models reach others (index_put_,
_grouped_mm, the fused backward kernels). A ``trace.<model>`` group builds a zoo model (small
sizes, real CPU weights, seeded), runs it on CPU (an inference forward; a training step: forward,
loss, backward, AdamW; each with the input variants its op set holds) under a TorchDispatchMode that
copies the arguments of the first call of each distinct call signature (overload, dtype key and
signature class: ranks, 0-d/empty/non-contiguous, path-selecting scalars), and replays each copied
call as one case: the op alone, with the values the model gave it (valid indices, realistic
magnitudes), forward only. The verdict prefers these cases, a model's own calls, for that model.

The calls are CPU's: composite ops that pick a path per device (scaled-dot-product attention,
dropout) were decomposed the way CPU does, so CPU-only kernels (``*_for_cpu``, mkldnn) are left
out; a device would never receive them.
"""

from __future__ import annotations

import re

from opcov.dtypes import call_dtype, dtype_name
from opcov.probe.record import signature
from opcov.probe.sample import Loaded, op_call
from opcov.tracing import models, zoo
from opcov.tracing.realtrace import input_variants
from opcov.tracing.trace import _default_loss

TRACE_PREFIX = "trace."
MAX_SIGS_PER_KEY = 32  # distinct signature classes replayed per (overload, dtype key): a bound, rarely met
# CPU-only kernels and host-side metadata ops: a device never receives them.
EXCLUDE = re.compile(
    r"cpu|mkldnn|nnpack|^aten::sym_|^aten::_local_scalar_dense$|^aten::detach$|"
    r"^aten::lift_fresh$|^aten::_to_copy$|^aten::copy_$|^aten::empty"
)


def zoo_names() -> dict:
    """Zoo model name -> its dtype (without importing torch or transformers)."""
    return {e.name: e.dtype for e in zoo.ZOO}


def capture(name: str):
    """[(OpOverload, args, kwargs)] of one zoo model's steps on CPU (arguments copied): each distinct call
    signature (op, dtype key, signature class: opcov.probe.record.signature) once, over an inference
    forward and a training step (forward, loss, backward, one AdamW step), each with every input variant
    its op set was traced with (as built, and with a padded attention mask where the model takes one)."""
    import torch
    import torch.utils._pytree as pytree
    from torch.utils._python_dispatch import TorchDispatchMode

    entry = zoo.BY_NAME[name]
    want = getattr(torch, entry.dtype)
    seen: dict = {}
    calls = []

    def conv(x):
        return x.to(want) if isinstance(x, torch.Tensor) and x.is_floating_point() else x

    def copy(tree):
        return pytree.tree_map(lambda t: t.detach().clone() if isinstance(t, torch.Tensor) else t, tree)

    def dts(tree):
        return [dtype_name(t.dtype) for t in pytree.tree_leaves(tree) if isinstance(t, torch.Tensor)]

    class Capture(TorchDispatchMode):
        def __torch_dispatch__(self, func, types, a=(), k=None):
            k = k or {}
            op = func.name()
            if not EXCLUDE.search(op):
                key = (op, call_dtype(dts((a, k))))
                sigs = seen.setdefault(key, set())
                try:
                    sig = signature(func, a, k)
                except Exception:  # noqa: BLE001 - no class: one call of the key stands for all
                    sig = ""
                if sig not in sigs and len(sigs) < MAX_SIGS_PER_KEY:
                    sigs.add(sig)
                    calls.append((func, copy(a), copy(k)))
            return func(*a, **k)

    for mode in ("inference", "training"):
        torch.manual_seed(0)
        built = models.build(entry.spec, models.Sizes(), mode=mode, real=True, zoo_entry=entry)
        model = built.model.to(want)
        model.train(mode == "training")
        for _, inputs in input_variants(torch, built):
            inputs = pytree.tree_map(conv, inputs)
            if isinstance(inputs, dict):
                args, kwargs = (), inputs
            elif isinstance(inputs, (tuple, list)):
                args, kwargs = tuple(inputs), {}
            else:
                args, kwargs = (inputs,), {}
            with Capture():
                if mode == "inference":
                    with torch.no_grad():
                        model(*args, **kwargs)
                    continue
                out = model(*args, **kwargs)
                _default_loss(torch, out).backward()
                params = [p for p in model.parameters() if p.grad is not None]
                torch.optim.AdamW(params, lr=1e-3, foreach=True).step()
            model.zero_grad(set_to_none=True)
    return calls


def load(group: dict):
    """The Loaded group of a ``trace.<model>`` source: one sample per captured call."""
    name = group["source"][len(TRACE_PREFIX) :]
    only = re.compile(group["ops"][0]) if group.get("ops") else None  # --ops: the calls of the ops it selects
    samples = []
    for func, args, kwargs in capture(name):
        op = func.name()
        if only is None or only.search(op) or only.search(op.split(".", 1)[0]):
            samples.append(op_call(func, args, kwargs))
    return Loaded(None, samples, (), False, True, False)
