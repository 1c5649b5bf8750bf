"""What a compile probe worker runs: OpInfo x dtype groups made into cases, run eagerly on CPU, then compiled.

Why apart from the probe (opcov.probe.compiled, which plans, journals and files the cases): this is the
part in the spawned worker processes, with torch imported. Each group (one OpInfo at one dtype) gives:

* up to ``samples`` samples as given, and each again with its tensors laid out transposed inside the
  compiled graph (``_transposed``, case id ``<i>t``): the forward (slot ``fwd``), compiled for inference;
* where the OpInfo differentiates at the dtype (``Depth.backward``), each sample's backward (slot ``bwd``,
  opcov.probe.compiled_grad): its forward compiled with inputs that require grad, then differentiated
  through the compiled backward graph;
* one harder case per input tier (``Depth.tiers``, opcov.probe.tiers; case id ``<tier>``, forward only),
  made from the first sample the tier changes among the first ``samples + TIER_LOOK``. On a device
  without strides (xla) the layout tiers are not run: an XLA tensor has no strides to give a graph, and the
  transposed variant makes its layout inside the graph there.

Every case is first run eagerly on CPU (its reference, the overloads it dispatches); then the forward cases
of a batch of groups are compiled as one graph and the backward cases as another (``_compiled_together``),
each result compared with its own eager value (against float64's where they differ, as the eager probe
judges: ``compare.judge``).
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass

from opcov import backends
from opcov.errors import cause_line
from opcov.probe import cases, compare, compiled_grad, lazy
from opcov.probe.record import Calls, recording
from opcov.probe.results import written_err
from opcov.probe.sample import Sample
from opcov.probe.tiers import LAYOUT_TIERS, copy_exact, layout_problem, tier_samples
from opcov.sources import opinfo
from opcov.trees import leaves

BACKEND = backends.REFERENCE
# backend -> (torch.compile backend, device type of the compiled run's inputs): the records' compile.probed
TARGETS = {b.name: (b.compile.backend, b.device_type) for b in backends.BUILTIN if b.compile and b.compile.probed}
TIER_LOOK = 16  # samples looked through beyond those run, for one each input tier changes
WIDENED = ("float32", "bfloat16", "float16", "complex64")  # dtypes judged against a float64 reference
RANDOM_OR_TIES = (
    "rand",
    "bernoulli",
    "dropout",
    "multinomial",
    "normal",
    "uniform",
    "sort",
    "topk",
    "max",
    "min",
    "median",
    "mode",
    "kthvalue",
    "unique",
    "argmax",
    "argmin",
    "scatter",
    "index_put",
    "empty",
)


@dataclass(frozen=True)
class Depth:
    """What a worker runs of each group beyond its samples' forward: their ``backward`` (where the
    OpInfo differentiates at the dtype) and one harder case per input tier of ``tiers``."""

    backward: bool = False
    tiers: tuple = ()


FORWARD_ONLY = Depth()


@dataclass(frozen=True)
class Samples:
    """How many OpInfo samples a group runs: ``default`` at every dtype, or its dtype's count in ``by_dtype``
    ((dtype, n) pairs). Why per dtype: openxla fails samples past the first two that models do reach
    (adaptive_avg_pool1d's fifth, pooled to size 1, runs as_strided_ as Swin's classifier head does;
    gather's, topk's, squeeze's later samples), so the dtype models run most can be probed with more
    samples while the others keep the eager probe's depth, in one run."""

    default: int
    by_dtype: tuple = ()

    def at(self, dtype: str) -> int:
        return dict(self.by_dtype).get(dtype, self.default)

    def __str__(self) -> str:
        return ",".join([str(self.default), *(f"{d}={n}" for d, n in self.by_dtype)])


def samples_at(samples, dtype: str) -> int:
    """The samples a group at ``dtype`` runs: ``samples`` a count, or a ``Samples``."""
    return samples.at(dtype) if isinstance(samples, Samples) else samples


_NOT_COMPILED = ("error", "timeout", "fallback")  # a forward case's statuses where its graph did not run


def _device(torch, backend: str):
    return backends.get_backend(backend).device(torch)


def _worker_init(backend: str = BACKEND):
    """Each worker compiles one thing at a time (the probe's workers, --jobs, are its parallelism; Inductor's
    own pool of compile subprocesses, one per core, in each worker only adds processes to start and feed),
    and pays Inductor's imports and first compiles (a forward, and a backward) here, before any case:
    charged to a worker's first sample, they made its 60 s limit a false timeout ('add', 'InductorError:
    TimeoutError: over 60 s')."""
    os.environ.setdefault("TORCH_DEVICE_BACKEND_AUTOLOAD", "0")
    os.environ.setdefault("TORCHINDUCTOR_COMPILE_THREADS", "1")
    import logging

    import torch

    logging.getLogger("torch._dynamo").setLevel(logging.CRITICAL)
    logging.getLogger("torch._inductor").setLevel(logging.CRITICAL)
    compile_backend, _ = TARGETS[backend]
    x = torch.ones(2, device=_device(torch, backend))
    torch.compile(lambda x: x + 1, backend=compile_backend, fullgraph=True, dynamic=False)(x)
    x = x.detach().requires_grad_(True)
    torch.compile(lambda x: x * 2, backend=compile_backend, fullgraph=True, dynamic=False)(x).sum().backward()
    torch._dynamo.reset()


def run_group(task) -> dict:
    """One OpInfo at one dtype: up to ``samples`` samples, each eager then compiled (in a worker)."""
    oid, dtype, samples, timeout, *rest = task
    return run_batch(([(oid, dtype)], samples, timeout, *rest))[0]


def run_batch(task) -> list[dict]:
    """Several OpInfo x dtype groups (in a worker): ``(groups, samples, timeout[, backend[, depth]])``
    (``samples``: a count, or a ``Samples`` per dtype).
    Each case run eagerly, then the forward cases that ran compiled together as one graph and the backward
    cases as another (``_compiled_together``); a record per group: its cases, each with ``i``, ``status``,
    ``ops`` (and ``slot`` where not ``fwd``)."""
    import signal

    import torch

    groups, samples, timeout, *rest = task
    backend = rest[0] if rest else BACKEND
    depth = rest[1] if len(rest) > 1 else FORWARD_ONLY

    def alarm(signum, frame):
        raise TimeoutError(f"over {timeout:g} s")

    signal.signal(signal.SIGALRM, alarm)
    records, forward, backward = [], [], []
    try:
        for oid, dtype in groups:
            rec = {"group": oid, "dtype": dtype, "cases": []}
            records.append(rec)
            _group_cases(torch, oid, dtype, samples_at(samples, dtype), depth, backend, rec["cases"])
            for case in rec["cases"]:
                if "ref" in case:
                    (backward if case.get("slot") == "bwd" else forward).append(case)
        _compiled_together(torch, forward, timeout, backend)
        # a backward whose forward did not compile is compiled alone: in the batch it would only fail the
        # graph and be split out again, at a compile per halving
        apart = [c["_fwd"].get("status") in _NOT_COMPILED for c in backward]
        _compiled_together(torch, [c for c, a in zip(backward, apart) if not a], timeout, backend)
        for case in [c for c, a in zip(backward, apart) if a]:
            _compiled_together(torch, [case], timeout, backend)
    finally:
        signal.alarm(0)
    for rec in records:
        for case in rec["cases"]:
            for key in [k for k in case if k.startswith("_") or k in ("ref", "mode")]:
                del case[key]  # a journal record holds JSON only
    return records


def _timed_batch(task) -> tuple[float, list[dict]]:
    """run_batch's records with the CPU seconds the worker spent on them (its own and its C++ builds'):
    the per-group cost the benchmark extrapolates, apart from each run's fixed start."""
    import resource

    def cpu() -> float:
        own, kids = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
        return own.ru_utime + own.ru_stime + kids.ru_utime + kids.ru_stime

    before = cpu()
    records = run_batch(task)
    return cpu() - before, records


def differentiable(op, dtype: str) -> bool:
    """Whether the OpInfo differentiates at ``dtype`` on CPU (as the eager probe decides its backward)."""
    return bool(op.supports_autograd) and dtype in {
        str(d).rsplit(".", 1)[-1] for d in op.supported_backward_dtypes("cpu")
    }


def tiers_on(tiers, backend: str) -> tuple:
    """The input tiers run on ``backend``: the layout ones only where inputs keep their strides (cpu)."""
    return tuple(t for t in tiers if TARGETS[backend][1] == "cpu" or t not in LAYOUT_TIERS)


def _group_cases(torch, oid: str, dtype: str, samples: int, depth: Depth, backend: str, out: list) -> None:
    """One group's cases, run eagerly, into ``out``: a case that ran keeps its reference (``ref``) and what
    the compiled run needs (``_run``, or ``_grad`` for a backward case)."""
    op = opinfo.opinfos()[oid]
    bases = {n.split("::", 1)[1] for n in cases.aten_names(op)}
    grad = depth.backward and differentiable(op, dtype)
    tiers = tiers_on(depth.tiers, backend)
    given, more = _samples(torch, op, dtype, samples, TIER_LOOK if tiers else 0, grad, out)
    for i, sample in enumerate(given):
        plain = (sample.input, *sample.args)
        first = None
        for i_, fn, args in [(i, op.op, plain), *_transposed(torch, op.op, plain, i)]:
            case = _eager(torch, op, args, sample.kwargs, i_, bases, dtype)
            out.append(case)
            if "ref" in case:
                case["_run"] = (fn, args, sample.kwargs, dtype)
            first = first or case
        if grad and "ref" in first:
            back = compiled_grad.eager_case(torch, op.op, sample, i, first, f"{oid}|{dtype}|{i}")
            if back is not None:
                back.update(_dtype=dtype, _fwd=first)
                out.append(back)
    wrapped = [Sample(s.input, s.args, s.kwargs, s.output_process_fn_grad) for s in given + more]
    for hard in tier_samples(wrapped, tiers):
        case = _eager(torch, op, (hard.input, *hard.args), hard.kwargs, hard.tier, bases, dtype, exact=True)
        case["slot"] = hard.tier
        out.append(case)
        if "ref" in case:
            case["_run"] = (op.op, (hard.input, *hard.args), hard.kwargs, dtype)


def _samples(torch, op, dtype: str, n: int, look: int, grad: bool, out: list) -> tuple[list, list]:
    """The OpInfo's first ``n`` samples at ``dtype`` (differentiable leaves requiring grad where ``grad``),
    and up to ``look`` more (for the input tiers); a case ``no_reference`` in ``out`` where the OpInfo cannot
    make its samples here."""
    it = opinfo.opinfo_samples(op, getattr(torch, dtype), grad)
    got: list = []
    while len(got) < n + look:
        try:
            got.append(next(it))
        except StopIteration:
            break
        except Exception as exc:  # noqa: BLE001 - the OpInfo cannot make samples here
            if len(got) < n:
                out.append({"i": len(got), "status": "no_reference", "why": f"samples: {_first(exc)}", "ops": []})
            break
    return got[:n], got[n:]


def _transposed(torch, fn, args: tuple, i: int) -> list:
    """The sample's layout variant, where it has one: [(case id, the fn to compile, args)], each tensor argument of
    two or more dims whose last two are over 1 given transposed strides (the same values), or [].

    Why: a compiled graph sees the strides its own ops make (``x.transpose(1, 2)`` feeding a pool), and
    ATen's composites choose their path by them: ``adaptive_avg_pool1d(x.transpose(1, 2), 1)`` runs
    ``as_strided_`` for a channels-last-like input, which openxla cannot compile ("Expected XLA tensor",
    Swin's classifier head), while the same values contiguous compile. A device's inputs come in
    contiguous (an XLA tensor has no strides), so the compiled variant makes the layout inside the graph
    (``_laid_out``); its eager reference gets the transposed tensors themselves. Case id: ``<i>t``."""
    laid = tuple(_transpose(torch, a) for a in args)
    if all(a is b for a, b in zip(laid, args)):
        return []
    return [(f"{i}t", _laid_out(fn), laid)]


def _transpose(torch, t):
    """``t`` with its last two dims' strides swapped (same shape and values), or ``t`` where that changes
    nothing (a non-tensor, a sparse one, under two dims, a last dim or the one before it of size 0 or 1)."""
    if not isinstance(t, torch.Tensor) or t.layout != torch.strided or t.dim() < 2 or min(t.shape[-2:]) < 2:
        return t  # a sparse or nested tensor has no strides to lay out
    return t.transpose(-1, -2).contiguous().transpose(-1, -2)


def _laid_out(fn):
    """``fn`` with its tensor arguments given transposed strides first, inside whatever calls it (so
    inside a compiled graph); on arguments that already have them, a copy with the same layout."""

    def call(*args, **kwargs):
        import torch

        return fn(*(_transpose(torch, a) for a in args), **kwargs)

    call.__name__ = f"{getattr(fn, '__name__', 'op')}_transposed"
    return call


def _eager(torch, op, args, kwargs, i, bases, dtype: str, exact: bool = False) -> dict:
    """A case's eager CPU run, on copies of its inputs (with their strides where ``exact``: an input tier's):
    its reference value (``ref``), the overloads it dispatched that are the OpInfo's own, and how its values
    compare (``mode``, ``_family``, and ``_ref64``, the float64 reference made where the compiled value
    differs); or no_reference when eager refuses it. A layout variant's ``args`` come laid out already, so
    only the op's own calls are recorded."""
    calls = Calls()
    try:
        with recording(calls):
            ref = op.op(*_cloned(torch, args, exact=exact), **_cloned(torch, kwargs, exact=exact))
    except Exception as exc:  # noqa: BLE001 - eager itself refuses the sample
        return {"i": i, "status": "no_reference", "why": f"eager cpu: {_first(exc)}", "ops": []}
    every = sorted({(name, key, sig) for (name, key), sig in zip(calls.pairs(), calls.sig_list())})
    own = [c for c in every if base_name(c[0]) in bases]
    other = [c for c in every if base_name(c[0]) not in bases]
    mode = "not_comparable" if calls.seeded_random or any(b.startswith(RANDOM_OR_TIES) for b in bases) else "values"
    # ops: (name, dtype key) pairs; sigs: each one's signature class, so that a failure is held only
    # against a model's calls of that class (opcov.verdict.signature), as the eager probe's are; other:
    # the ops the sample ran beside its own (F.embedding's max_norm runs embedding_renorm_), see _blamed
    case = {
        "i": i,
        "ops": [[n, k] for n, k, _ in own],
        "sigs": [sig for _, _, sig in own],
        "other": [[n, k, sig] for n, k, sig in other],
        "ref": ref,
        "mode": mode,
        "_family": compare.family_of({base_name(n) for n, _ in calls.pairs()}, calls.tags_about(bases)),
    }
    if mode == "values" and dtype in WIDENED and torch.float64 in op.supported_dtypes("cpu"):

        def ref64():
            wide = compiled_grad.wide(torch, (_cloned(torch, args), _cloned(torch, kwargs)))
            return op.op(*wide[0], **wide[1])

        case["_ref64"] = ref64
    return case


def base_name(name: str) -> str:
    return name.split("::", 1)[1].split(".")[0]


def _compiled_together(torch, batch: list, timeout: float, backend: str = BACKEND) -> None:
    """Compile the eager-run cases of ``batch`` as one graph (one Inductor compile, one C++ build, where
    each case alone cost one: the C++ build was nine tenths of a case) and compare each output with its
    own eager value; backward cases (slot ``bwd``) as one forward graph differentiated through its compiled
    backward (``compiled_grad.run``). A graph that fails to compile or run is split in halves, down to a
    case compiled alone, so an error, graph break or timeout is filed under the case that has it and under
    no other. Sets each case's status (and why)."""
    import signal

    if not batch:
        return
    torch._dynamo.reset()
    compile_backend, device_type = TARGETS[backend]
    grad = batch[0].get("slot") == "bwd"
    fell = _fallbacks(device_type)
    # a case's limit, and a quarter per other case; twice that for a forward and backward graph
    signal.alarm(int(max(1, timeout * (1 + (len(batch) - 1) / 4) * (2 if grad else 1))))
    try:
        device = None if device_type == "cpu" else _device(torch, backend)
        if grad:
            got = compiled_grad.run(torch, batch, compile_backend, device)
        else:
            got = _run_forward(torch, batch, compile_backend, device)
        fallen = fell()
        if fallen and len(batch) > 1:  # which case fell back: split, as for an error
            raise _FellBack(fallen)
    except Exception as exc:  # noqa: BLE001 - every compile failure is data
        failure: dict | None = {}
        _failed(failure, exc, timeout)
    else:
        failure = None
    finally:
        signal.alarm(0)
    if failure is None:
        for case, value in zip(batch, got):
            _judge_case(torch, case, value, fallen, device_type)
        return
    if device_type != "cpu":
        # The failed graph's tensors, held by the exception's frames, keep the IR that failed: PyTorch/XLA
        # runs it again at every later graph's sync, and each then fails ("Check failed: tensor_data").
        import gc

        gc.collect()
    if len(batch) > 1:  # split only once the exception and its frames are gone
        half = len(batch) // 2
        _compiled_together(torch, batch[:half], timeout, backend)
        _compiled_together(torch, batch[half:], timeout, backend)
        return
    batch[0].update(failure)


def _run_forward(torch, batch: list, compile_backend: str, device) -> list:
    """The values of the forward cases of ``batch`` (on CPU), from one compiled graph of them all."""
    fns = [c["_run"][0] for c in batch]

    def together(inputs):
        return [f(*a, **k) for f, (a, k) in zip(fns, inputs)]

    compiled = torch.compile(together, backend=compile_backend, fullgraph=True, dynamic=False)
    # an input tier's inputs keep their strides on cpu; a sample the device cannot hold (a sparse
    # tensor) is its own case's error
    inputs = [
        (
            _cloned(torch, c["_run"][1], device, exact="slot" in c),
            _cloned(torch, c["_run"][2], device, exact="slot" in c),
        )
        for c in batch
    ]
    got = compiled(inputs)
    return got if device is None else _cloned(torch, got, torch.device("cpu"))  # runs the graph: its errors


# Inductor's LoweringException names the graph node it failed on: 'target: aten.cos.default'
_LOWERING = re.compile(r"\btarget: (aten|prims)\.(\w+)\.(\w+)")


def _failed(case: dict, exc: Exception, timeout: float) -> None:
    """A case compiled alone that raised: ``timeout``, ``fallback`` (a graph break) or ``error``, with why
    (and ``raised``, the overload Inductor failed to lower, where it names one)."""
    name = type(exc).__name__
    if isinstance(exc, TimeoutError) or "TimeoutError: over" in str(exc):  # Inductor wraps the alarm's
        case.update(status="timeout", why=f"over {timeout:g} s")
    elif name in ("Unsupported", "UserError") or "graph break" in str(exc).lower():
        case.update(status="fallback", why=f"graph break: {_first(exc)}; runs eagerly")
    else:
        case.update(status="error", why=f"{name}: {_first(exc)}")
        lowering = _LOWERING.search(str(exc))
        if lowering:  # Inductor names the node it failed to lower: the eager probe's 'raised_in'
            ns, base, overload = lowering.groups()
            case["raised"] = f"{ns}::{base}" + ("" if overload == "default" else f".{overload}")


def _judge_case(torch, case: dict, value, fallen: list, device_type: str) -> None:
    """A compiled value against the case's eager one: identical passes (``tol`` same); else judged against
    float64's where the case has it, as the eager probe judges (``compare.judge``); a layout tier's output
    must keep the memory format eager's keeps (cpu)."""
    dtype = _tolerance_dtype(torch, case["_run"][3] if "_run" in case else case["_dtype"], case["ref"])
    family = case.get("_family", "other")
    mode = case["mode"]
    if mode == "values" and compare.identical(value, case["ref"]):
        verdict = compare.judge(value, case["ref"], None, dtype=dtype, mode=mode, family=family, same=True)
    else:
        wide = None
        if "_ref64" in case:
            try:
                wide = case["_ref64"]()
            except Exception:  # noqa: BLE001 - no float64 reference: judged at the case's dtype
                wide = None
        verdict = compare.judge(value, case["ref"], wide, dtype=dtype, mode=mode, family=family)
    case["status"] = verdict.get("status", "pass")
    if verdict.get("why"):
        case["why"] = str(verdict["why"])[:200]
    if verdict.get("err") is not None:
        case["err"] = written_err(list(verdict["err"]))
    if verdict.get("tol"):
        case["tol"] = verdict["tol"]
    ran = case["status"] in lazy.RAN
    if ran and case.get("slot") in LAYOUT_TIERS and device_type == "cpu":
        problem = layout_problem(torch, case["ref"], value)
        if problem:
            case.update(status="mismatch", why=problem[:200])
    if fallen and ran:
        case.update(status="fallback", why=f"ran through the CPU fallback: {', '.join(fallen)}"[:200])
        case["fell"] = sorted(set(fallen))


def _tolerance_dtype(torch, dtype: str, ref) -> str:
    """The dtype whose tolerance a case is judged at: its own, but an integer or bool case's floating result
    (cosh of an int64 tensor is float32) at that result's dtype, not exactly: a compiler may round it
    otherwise than eager by one unit in the last place."""
    if dtype in compare.TOLERANCES:
        return dtype
    for t in leaves(ref):
        if isinstance(t, torch.Tensor) and (t.is_floating_point() or t.is_complex()):
            return str(t.dtype).rsplit(".", 1)[-1]
    return dtype


class _FellBack(Exception):
    """A graph of several cases in which some node ran through the CPU fallback: split to find whose."""


def _fallbacks(device_type: str):
    """A function giving the ops that ran through the device's CPU fallback since this call (read as the
    eager probe reads them: opcov.probe.lazy), or none off a lazy backend."""
    return lazy.fallback_reader(device_type)


def _cloned(torch, tree, device=None, exact: bool = False):
    """Fresh copies of the tensors in ``tree`` (on ``device`` where given; with their strides where
    ``exact``, on cpu: an input tier's layout is the point)."""
    if isinstance(tree, torch.Tensor):
        if device is None and exact:
            return copy_exact(torch, tree.detach(), "cpu")
        return tree.detach().clone() if device is None else tree.detach().to(device)
    if isinstance(tree, (list, tuple)):
        return type(tree)(_cloned(torch, t, device, exact) for t in tree)
    if isinstance(tree, dict):
        return {k: _cloned(torch, v, device, exact) for k, v in tree.items()}
    return tree


def _first(exc) -> str:
    return (cause_line(exc) or type(exc).__name__)[:200]
