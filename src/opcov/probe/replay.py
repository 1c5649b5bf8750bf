"""Second case source: op calls captured from model traces, replayed one call at a time.

OpInfo reaches about 600 of the ~3,100 aten overloads; models reach others (index_put_,
_grouped_mm, the fused backward kernels). A ``trace.<model>`` group builds a zoo model (small
sizes, real CPU weights, seeded from the group id), runs a training step (forward, loss,
backward) on CPU under a TorchDispatchMode that copies the arguments of the first calls of
each (overload, dtype key), and replays each copied call as one case: the op alone, with the
values the model gave it (valid indices, realistic magnitudes), forward only.

The calls are CPU's: composite ops that pick a path per device (scaled-dot-product attention,
dropout) were decomposed the way CPU does, so CPU-only kernels (``*_for_cpu``, mkldnn) are left
out; a device would never receive them.
"""

from __future__ import annotations

import re

from opcov.dtypes import call_dtype, dtype_name
from opcov.probe.sample import Loaded, op_call
from opcov.tracing import models, zoo
from opcov.tracing.trace import _default_loss

TRACE_PREFIX = "trace."
MAX_CALLS_PER_KEY = 2
# CPU-only kernels and host-side metadata ops: a device never receives them.
EXCLUDE = re.compile(
    r"cpu|mkldnn|nnpack|^aten::sym_|^aten::_local_scalar_dense$|^aten::detach$|"
    r"^aten::lift_fresh$|^aten::_to_copy$|^aten::copy_$|^aten::empty"
)


def zoo_names() -> dict:
    """Zoo model name -> its dtype (without importing torch or transformers)."""
    return {e.name: e.dtype for e in zoo.ZOO}


def capture(name: str):
    """[(OpOverload, args, kwargs)] of one zoo model's training step on CPU (arguments copied)."""
    import torch
    import torch.utils._pytree as pytree
    from torch.utils._python_dispatch import TorchDispatchMode

    entry = zoo.BY_NAME[name]
    built = models.build(entry.spec, models.Sizes(), mode="training", real=True, zoo_entry=entry)
    want = getattr(torch, entry.dtype)
    model = built.model.to(want)
    model.train()

    def conv(x):
        return x.to(want) if isinstance(x, torch.Tensor) and x.is_floating_point() else x

    inputs = pytree.tree_map(conv, built.inputs)
    if isinstance(inputs, dict):
        args, kwargs = (), inputs
    elif isinstance(inputs, (tuple, list)):
        args, kwargs = tuple(inputs), {}
    else:
        args, kwargs = (inputs,), {}
    seen: dict = {}
    calls = []

    def copy(tree):
        return pytree.tree_map(lambda t: t.detach().clone() if isinstance(t, torch.Tensor) else t, tree)

    def dts(tree):
        return [dtype_name(t.dtype) for t in pytree.tree_leaves(tree) if isinstance(t, torch.Tensor)]

    class Capture(TorchDispatchMode):
        def __torch_dispatch__(self, func, types, a=(), k=None):
            k = k or {}
            name = func.name()
            if not EXCLUDE.search(name):
                key = (name, call_dtype(dts((a, k))))
                if seen.get(key, 0) < MAX_CALLS_PER_KEY:
                    seen[key] = seen.get(key, 0) + 1
                    calls.append((func, copy(a), copy(k)))
            return func(*a, **k)

    with Capture():
        out = model(*args, **kwargs)
        _default_loss(torch, out).backward()
    return calls


def load(group: dict):
    """The Loaded group of a ``trace.<model>`` source: one sample per captured call."""
    name = group["source"][len(TRACE_PREFIX) :]
    samples = []
    for func, args, kwargs in capture(name):
        samples.append(op_call(func, args, kwargs))
    return Loaded(None, samples, (), False, True, False)
