"""Harder inputs as extra case tiers: OpInfo samples made harder, one case per group and tier.

OpInfo's samples are small, finite, contiguous and non-empty; a kernel can pass them all and
still fail on what models feed it. Each tier (``opcov.vocab.INPUT_TIERS``) takes the first sample
of a group it changes (``--all-samples``: every sample it changes) and makes it harder:

- ``special``: NaN, +inf, -inf, -0.0 and the extremes of the dtype (largest finite value, its
  negative, the smallest normal) at the first positions of every floating input (the comparison
  then checks NaN/inf positions one by one against CPU, and the rest value by value);
- ``noncontig``: every input of two or more dimensions transposed in memory (same values,
  swapped strides), others laid out every other element;
- ``channels_last``: every 4-d (5-d) input in channels_last (channels_last_3d) memory format;
- ``empty``: the leading dimension cut to 0 in every input that shares the first input's.

A tier case runs forward only (no ``out=``, no backward), with its inputs laid out on the device
exactly as on CPU (``Sample.keep_layout``), and its status goes to the cell key of its tier. In the
layout tiers an output's memory format is judged too (``layout_problem``): where CPU's output keeps
a non-contiguous layout (PyTorch propagates channels_last and dense permuted layouts), the device's
must keep it as well.
"""

from __future__ import annotations

from opcov.probe.sample import Sample
from opcov.vocab import INPUT_TIERS

TIERS = tuple(INPUT_TIERS)
LAYOUT_TIERS = ("noncontig", "channels_last")
SPECIAL_VALUES = (float("nan"), float("inf"), float("-inf"), -0.0)


def tier_samples(samples, tiers, every: bool = False) -> list[Sample]:
    """For each tier of ``tiers``, the first sample of ``samples`` it changes, made harder; with
    ``every`` (``--all-samples``), each sample it changes."""
    out = []
    for tier in tiers:
        for sample in samples:
            made = harder(tier, sample)
            if made is not None:
                out.append(made)
                if not every:
                    break
    return out


def harder(tier: str, sample: Sample) -> Sample | None:
    """``sample`` with its inputs made harder for ``tier``; None when the tier changes nothing."""
    import torch
    import torch.utils._pytree as pytree

    leaves, spec = pytree.tree_flatten((sample.input, sample.args, sample.kwargs))
    host = sample.host_leaves
    mine = [
        i for i, x in enumerate(leaves) if isinstance(x, torch.Tensor) and i not in host and x.layout == torch.strided
    ]
    lead = next((leaves[i].size(0) for i in mine if leaves[i].dim() >= 1 and leaves[i].size(0) > 0), None)
    changed = False
    for i in mine:
        made = _LEAF[tier](torch, leaves[i].detach(), lead)
        if made is not None:
            leaves[i] = made
            changed = True
    if not changed:
        return None
    inp, args, kwargs = pytree.tree_unflatten(leaves, spec)
    out = Sample(inp, args, kwargs, sample.output_process_fn_grad)
    out.host_leaves = host
    out.tier = tier
    out.keep_layout = True
    return out


def _special(torch, t, lead):
    if not (t.is_floating_point() or t.is_complex()) or t.numel() == 0:
        return None
    v = t.clone(memory_format=torch.contiguous_format)
    flat = v.view(-1)
    info = torch.finfo(t.dtype)
    for i, x in enumerate((SPECIAL_VALUES + (info.max, -info.max, info.tiny))[: flat.numel()]):
        flat[i] = x
    return v


def _noncontig(torch, t, lead):
    if t.numel() <= 1:
        return None
    if t.dim() >= 2 and t.size(-1) > 1 and t.size(-2) > 1:
        return t.transpose(-1, -2).contiguous().transpose(-1, -2)
    if t.dim() >= 1 and t.size(-1) > 1:
        wide = torch.zeros(*t.shape[:-1], 2 * t.size(-1), dtype=t.dtype)
        v = wide[..., ::2]
        v.copy_(t)
        return v
    return None


def _channels_last(torch, t, lead):
    fmt = {4: torch.channels_last, 5: torch.channels_last_3d}.get(t.dim())
    if fmt is None or t.numel() <= 1:
        return None
    v = t.contiguous(memory_format=fmt)
    return v if v.stride() != t.stride() else None


def _empty(torch, t, lead):
    if lead is None or t.dim() < 1 or t.size(0) != lead:
        return None
    return t[:0].clone()


_LEAF = {"special": _special, "noncontig": _noncontig, "channels_last": _channels_last, "empty": _empty}
assert tuple(_LEAF) == TIERS


def copy_exact(torch, t, device):
    """A copy of ``t`` on ``device`` with its strides (``Tensor.to`` makes a non-dense one contiguous),
    in zeroed memory: the gaps between its elements read the same everywhere (as_strided reads them).
    A sparse or other unstrided tensor is copied as ``Tensor.to`` copies it."""
    if t.layout != torch.strided:
        d = t.detach().to(device, copy=True)
        return d.requires_grad_(t.requires_grad) if t.requires_grad else d
    span = 1 + sum((n - 1) * st for n, st in zip(t.size(), t.stride())) if t.numel() else 0
    out = torch.zeros(span, dtype=t.dtype, device=device).as_strided(t.size(), t.stride())
    out.copy_(t.detach())
    return out.requires_grad_(t.requires_grad) if t.requires_grad else out


def memory_format(torch, t) -> str:
    """The layout words an output is judged by: 'contiguous', 'channels_last', 'channels_last_3d',
    'permuted <dims by stride>' (dense, another order), or 'strided'."""
    if t.is_contiguous():
        return "contiguous"
    if t.dim() == 4 and t.is_contiguous(memory_format=torch.channels_last):
        return "channels_last"
    if t.dim() == 5 and t.is_contiguous(memory_format=torch.channels_last_3d):
        return "channels_last_3d"
    order = sorted(range(t.dim()), key=lambda d: (-t.stride(d), d))
    step = 1
    for d in reversed(order):  # dense: each dimension steps over all the faster ones
        if t.size(d) != 1:
            if t.stride(d) != step:
                return "strided"
            step *= t.size(d)
    return "permuted " + ",".join(map(str, order))


def layout_problem(torch, cpu_out, dev_out) -> str | None:
    """Why the device's outputs do not keep the memory format CPU's keep, else None: only outputs
    that CPU lays out non-contiguously are judged (a contiguous result is always allowed)."""
    import torch.utils._pytree as pytree

    cpu = [t for t in pytree.tree_leaves(cpu_out) if isinstance(t, torch.Tensor)]
    dev = [t for t in pytree.tree_leaves(dev_out) if isinstance(t, torch.Tensor)]
    for i, (c, d) in enumerate(zip(cpu, dev)):
        if c.layout != torch.strided or d.layout != torch.strided or c.numel() <= 1:
            continue
        want = memory_format(torch, c)
        if want in ("contiguous", "strided"):
            continue
        got = memory_format(torch, d)
        if got != want:
            where = f"output {i}" if len(cpu) > 1 else "output"
            return f"layout: {where} is {got} on the device, {want} on cpu (the input's memory format is kept there)"
    return None
