"""The compile probe's backward: an OpInfo sample's gradients through a compiled graph, against eager CPU's.

Why: a model trained under torch.compile runs the backward graph that AOTAutograd made from its forward,
lowered by the same compiler (Inductor, openxla): another graph than the forward probe's inference graph,
made of the derivative formulas' ops (``threshold_backward``, ``convolution_backward``...) or their
decompositions. So the sample's forward is compiled with its differentiable inputs requiring grad
(``fullgraph=True, dynamic=False``, as the forward probe's), its differentiable outputs (after OpInfo's
``output_process_fn_grad``) are differentiated with ``torch.autograd.grad`` and seeded random output
gradients, which runs the compiled backward graph, and the gradients are compared with eager CPU's
(``compare.judge``, against float64's where they differ). ``autograd.grad`` is called outside the compiled
function, as a training step calls ``backward``: Dynamo does not trace it inside (``trace_autograd_ops``).

A backward case is filed as the eager probe files one (opcov.probe.results): under the ``bwd`` slot of
the OpInfo's own forward overloads, and, where it ran, under the ``fwd`` slot of the overloads eager CPU's
backward dispatched (a compiled training op set's backward graph names such ops, and ``opcov check --path
compile`` judges them as ops); a failure is the forward op's backward, not theirs.
"""

from __future__ import annotations

from dataclasses import dataclass

from opcov.probe.execute import widen
from opcov.probe.record import Calls, recording
from opcov.sources.opinfo import seed_of
from opcov.trees import leaves, map_leaves

NO_GRADIENT = "no gradient"  # an input the outputs do not depend on (autograd.grad's None), compared as such


@dataclass
class Grad:
    """What a backward case compiles: ``fn(input, *args, **kwargs)`` of the sample, the differentiable
    outputs it keeps (indices among the leaves of ``process(output)``) and their output gradients."""

    fn: object
    sample: tuple  # (input, args, kwargs), as the OpInfo made them (differentiable leaves require grad)
    process: object  # OpInfo's output_process_fn_grad
    keep: list
    gos: list


def fresh(torch, tree, device=None):
    """Copies of the tensors of ``tree`` (on ``device`` where given) that require grad where the
    originals do, as leaves of a new graph."""

    def one(t):
        c = t.detach().clone() if device is None else t.detach().to(device)
        return c.requires_grad_(True) if t.requires_grad else c

    if isinstance(tree, torch.Tensor):
        return one(tree)
    if isinstance(tree, (list, tuple)):
        return type(tree)(fresh(torch, t, device) for t in tree)
    if isinstance(tree, dict):
        return {k: fresh(torch, v, device) for k, v in tree.items()}
    return tree


def _wrt(torch, inputs) -> list:
    return [t for t in leaves(inputs) if isinstance(t, torch.Tensor) and t.requires_grad]


def named(grads) -> list:
    return [g.detach() if g is not None else NO_GRADIENT for g in grads]


def eager_case(torch, fn, sample, i, fwd: dict, case_id: str) -> dict | None:
    """A sample's backward run eagerly on CPU (``sample``: an OpInfo SampleInput whose differentiable
    leaves require grad): its reference gradients (``ref``), the overloads that backward dispatched
    (``bops``: [name, dtype key, signature class]) and what the compiled run needs (``_grad``); filed
    under the forward case ``fwd``'s own overloads. None where the sample has nothing to differentiate
    or its forward fails eagerly (its forward case says so)."""
    given = (sample.input, tuple(sample.args), dict(sample.kwargs))
    inputs = fresh(torch, given)
    try:
        outs = leaves(sample.output_process_fn_grad(fn(inputs[0], *inputs[1], **inputs[2])))
    except Exception:  # noqa: BLE001 - the forward case records eager's refusal
        return None
    keep = [j for j, t in enumerate(outs) if isinstance(t, torch.Tensor) and t.requires_grad]
    wrt = _wrt(torch, inputs)
    if not keep or not wrt:
        return None
    gen = torch.Generator().manual_seed(seed_of(case_id + "|grad"))
    gos = [torch.randn(outs[j].shape, dtype=outs[j].dtype, generator=gen) for j in keep]
    case = {"i": i, "slot": "bwd", "ops": fwd["ops"], "sigs": fwd.get("sigs") or [""] * len(fwd["ops"])}
    calls = Calls()
    try:
        with recording(calls):
            grads = torch.autograd.grad([outs[j] for j in keep], wrt, gos, allow_unused=True)
    except Exception as exc:  # noqa: BLE001 - eager CPU cannot differentiate the sample
        why = (str(exc).strip().splitlines() or [""])[0]
        case.update(status="no_reference", why=f"eager cpu backward: {type(exc).__name__}: {why}"[:200], bops=[])
        return case
    case["bops"] = [[n, k, sig] for (n, k), sig in zip(calls.pairs(), calls.sig_list())]
    case.update(ref=named(grads), mode=fwd["mode"], _family=fwd.get("_family", "other"))
    case["_grad"] = Grad(fn, given, sample.output_process_fn_grad, keep, gos)
    if "_ref64" in fwd:  # float64 gradients, made only where the compiled ones differ from eager's
        case["_ref64"] = lambda: _wide_grads(torch, case["_grad"])
    return case


def wide(torch, tree):
    """``tree`` with its floating (complex) tensors in float64 (complex128), requiring grad where they do."""
    return map_leaves(lambda t: widen(torch, t) if isinstance(t, torch.Tensor) else t, tree)


def _wide_grads(torch, g: Grad) -> list:
    """The sample's gradients in float64 (complex128): the reference a low-precision result is judged by."""
    inputs = wide(torch, fresh(torch, g.sample))
    outs = leaves(g.process(g.fn(inputs[0], *inputs[1], **inputs[2])))
    gos = [wide(torch, t) for t in g.gos]
    return named(torch.autograd.grad([outs[j] for j in g.keep], _wrt(torch, inputs), gos, allow_unused=True))


def run(torch, batch: list, compile_backend: str, device) -> list:
    """The gradients of each backward case of ``batch`` (on CPU, in ``named`` form), from one compiled
    graph of all their forwards and one ``autograd.grad`` through it: one forward and one backward graph
    built for the batch. Raises what compiling or running either raises (the caller splits the batch)."""
    fns = [c["_grad"].fn for c in batch]

    def together(inputs):
        return [f(a[0], *a[1], **a[2]) for f, a in zip(fns, inputs)]

    compiled = torch.compile(together, backend=compile_backend, fullgraph=True, dynamic=False)
    inputs = [fresh(torch, c["_grad"].sample, device) for c in batch]
    outs = compiled(inputs)
    diff: list = []
    gos: list = []
    wrt: list = []
    spans = []
    for c, inp, out in zip(batch, inputs, outs):
        g = c["_grad"]
        got = leaves(g.process(out))
        diff += [got[j] for j in g.keep]
        gos += [t.to(got[j].device) for t, j in zip(g.gos, g.keep)]
        mine = _wrt(torch, inp)
        spans.append((len(wrt), len(mine)))
        wrt += mine
    grads = torch.autograd.grad(diff, wrt, gos, allow_unused=True)
    grads = [g.detach().to("cpu") if g is not None else None for g in grads]  # read back: runs the graph
    return [named(grads[start : start + n]) for start, n in spans]
