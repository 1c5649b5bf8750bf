"""The compile probe: PyTorch's OpInfo samples compiled for a backend and compared with eager CPU.

Why: a compiler's tables (opcov.scan.compiled) say which ops it lowers, not that the code it generates is
right. So each OpInfo sample of the chosen ops is run eagerly on CPU (recording the ATen overloads it
dispatches) and then through ``torch.compile(..., backend=B, fullgraph=True, dynamic=False)``, where
B is Inductor on this CPU (backend ``cpu``) or ``openxla`` on PyTorch/XLA's device (backend ``xla``,
run in a Python with torch_xla; PJRT_DEVICE=CPU is its CPU client), its inputs on that device:

* ``pass`` / ``pass_low_precision``: the compiled values match eager's (``probe.compare.judge``);
* ``mismatch``: they do not (shape, dtype or values);
* on xla, ``fallback`` also where a node of the compiled graph ran through PyTorch/XLA's CPU fallback
  (its counters, as the eager probe reads them: opcov.probe.lazy), with the ops' names;
* ``fallback``: Dynamo broke the graph (``fullgraph=True`` raises): the op runs eagerly there, with why;
* ``error``: compiling or running the compiled code raised; ``timeout``: a sample took over ``timeout`` s;
* ``not_comparable``: random or tie-breaking ops (their values differ legitimately), shape and dtype checked;
* ``flaky``: it raised in a worker that had compiled other graphs, and ran when compiled again alone
  in a fresh process (``_again_alone``).

A case's status is filed under the recorded overloads of the OpInfo's own op (its aten names), per
dtype key, forward only: the compiled backward graph's ops are judged by these forward probes. Cases
run in worker processes (``jobs``), several OpInfo x dtype groups at a time compiled as one graph
(``TOGETHER``; the C++ build of Inductor's kernels was nine tenths of a sample's time, one build per
sample), each output compared with its own eager value and a failing graph split down to the sample
that fails; each finished group is appended to a journal beside the output, so an interrupted probe
continues with ``resume``. The file is a probed
snapshot (docs/DATA.md) under coverage/cpu/compile/, read by ``opcov check --path compile``.
"""

from __future__ import annotations

import datetime as _dt
import json
import os
import platform
import re
import time

from opcov import backends, provenance, vocab
from opcov.catalog import build_catalog
from opcov.errors import UsageError, cause_line
from opcov.probe import cases, compare, lazy
from opcov.probe.record import Calls, recording
from opcov.probe.results import NOTED, failed_text
from opcov.sources import opinfo
from opcov.store.cells import MAX_FAILED
from opcov.version import __version__

BACKEND = backends.REFERENCE
# backend -> (torch.compile backend, device type of the compiled run's inputs): the records' compile.probed
TARGETS = {b.name: (b.compile.backend, b.device_type) for b in backends.BUILTIN if b.compile and b.compile.probed}
TOGETHER = 8  # OpInfo x dtype groups compiled as one graph: one C++ build where each sample cost one
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


def journal_path(out: str) -> str:
    return out + ".journal"


def _groups(core: bool, pattern: str | None, dtypes) -> list[tuple[str, str]]:
    """(OpInfo id, dtype) to run, sorted."""
    rx = re.compile(pattern) if pattern else None
    core_bases = {op.base for op in build_catalog().core} if core else None
    out = []
    for oid, op in sorted(opinfo.opinfos().items()):
        names = cases.aten_names(op)
        if core_bases is not None and not any(n.split("::", 1)[1] in core_bases for n in names):
            continue
        if rx and not (rx.search(oid) or any(rx.search(n) for n in names)):
            continue
        supported = {str(d).removeprefix("torch.") for d in op.supported_dtypes("cpu")}
        out += [(oid, d) for d in dtypes if d in supported]
    return out


def _device(torch, backend: str):
    return backends.get_backend(backend).device(torch)


def _worker_init(backend: str = BACKEND):
    """Each worker compiles one thing at a time (the probe's workers, --jobs, are its parallelism; Inductor's
    own pool of compile subprocesses, one per core, in each worker only adds processes to start and feed),
    and pays Inductor's imports and first compile here, before any case: charged to a worker's first sample,
    they made its 60 s limit a false timeout ('add', 'InductorError: TimeoutError: over 60 s')."""
    os.environ.setdefault("TORCH_DEVICE_BACKEND_AUTOLOAD", "0")
    os.environ.setdefault("TORCHINDUCTOR_COMPILE_THREADS", "1")
    import logging

    import torch

    logging.getLogger("torch._dynamo").setLevel(logging.CRITICAL)
    logging.getLogger("torch._inductor").setLevel(logging.CRITICAL)
    compile_backend, _ = TARGETS[backend]
    x = torch.ones(2, device=_device(torch, backend))
    torch.compile(lambda x: x + 1, backend=compile_backend, fullgraph=True, dynamic=False)(x)
    torch._dynamo.reset()


def run_group(task) -> dict:
    """One OpInfo at one dtype: up to ``samples`` samples, each eager then compiled (in a worker)."""
    oid, dtype, samples, timeout, *backend = task
    return run_batch(([(oid, dtype)], samples, timeout, *backend))[0]


def run_batch(task) -> list[dict]:
    """Several OpInfo x dtype groups (in a worker): each sample run eagerly, then every sample that ran
    compiled together as one graph (``_compiled_together``); a record per group, as ``run_group``'s."""
    import signal

    import torch

    groups, samples, timeout, *rest = task
    backend = rest[0] if rest else BACKEND

    def alarm(signum, frame):
        raise TimeoutError(f"over {timeout:g} s")

    signal.signal(signal.SIGALRM, alarm)
    records, ready = [], []
    try:
        for oid, dtype in groups:
            op = opinfo.opinfos()[oid]
            bases = {n.split("::", 1)[1] for n in cases.aten_names(op)}
            rec = {"group": oid, "dtype": dtype, "cases": []}
            records.append(rec)
            it = opinfo.opinfo_samples(op, getattr(torch, dtype), False)
            for i in range(samples):
                try:
                    sample = next(it)
                except StopIteration:
                    break
                except Exception as exc:  # noqa: BLE001 - the OpInfo cannot make samples here
                    rec["cases"].append({"i": i, "status": "no_reference", "why": f"samples: {_first(exc)}", "ops": []})
                    break
                given = (sample.input, *sample.args)
                for i_, fn, args in [(i, op.op, given), *_transposed(torch, op.op, given, i)]:
                    case = _eager(torch, op, args, sample.kwargs, i_, bases)
                    rec["cases"].append(case)
                    if "ref" in case:
                        case["_run"] = (fn, args, sample.kwargs, dtype)
                        ready.append(case)
        _compiled_together(torch, ready, timeout, backend)
    finally:
        signal.alarm(0)
    for rec in records:
        for case in rec["cases"]:
            case.pop("ref", None), case.pop("_run", None), case.pop("mode", None)
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


def _eager(torch, op, args, kwargs, i, bases) -> dict:
    """A case's eager CPU run: its reference value (``ref``), the overloads it dispatched that are the
    OpInfo's own, and how its values compare (``mode``); or no_reference when eager refuses it. A layout
    variant's ``args`` come laid out already, so only the op's own calls are recorded."""
    calls = Calls()
    try:
        with recording(calls):
            ref = op.op(*args, **kwargs)
    except Exception as exc:  # noqa: BLE001 - eager itself refuses the sample
        return {"i": i, "status": "no_reference", "why": f"eager cpu: {_first(exc)}", "ops": []}
    every = sorted({(name, key, sig) for (name, key), sig in zip(calls.pairs(), calls.sig_list())})
    own = [c for c in every if _base(c[0]) in bases]
    other = [c for c in every if _base(c[0]) not in bases]
    mode = "not_comparable" if calls.seeded_random or any(b.startswith(RANDOM_OR_TIES) for b in bases) else "values"
    # ops: (name, dtype key) pairs; sigs: each one's signature class, so that a failure is held only
    # against a model's calls of that class (opcov.verdict.signature), as the eager probe's are; other:
    # the ops the sample ran beside its own (F.embedding's max_norm runs embedding_renorm_), see _blamed
    return {
        "i": i,
        "ops": [[n, k] for n, k, _ in own],
        "sigs": [sig for _, _, sig in own],
        "other": [[n, k, sig] for n, k, sig in other],
        "ref": ref,
        "mode": mode,
    }


def _base(name: str) -> str:
    return name.split("::", 1)[1].split(".")[0]


def _compiled_together(torch, batch: list, timeout: float, backend: str = BACKEND) -> None:
    """Compile the eager-run cases of ``batch`` as one graph (one Inductor compile, one C++ build, where
    each case alone cost one: the C++ build was nine tenths of a case) and compare each output with its
    own eager value. A graph that fails to compile or run is split in halves, down to a case compiled
    alone, so an error, graph break or timeout is filed under the case that has it and under no other.
    Sets each case's status (and why)."""
    import signal

    if not batch:
        return
    fns = [c["_run"][0] for c in batch]

    def together(inputs):
        return [f(*a, **k) for f, (a, k) in zip(fns, inputs)]

    torch._dynamo.reset()
    compile_backend, device_type = TARGETS[backend]
    compiled = torch.compile(together, backend=compile_backend, fullgraph=True, dynamic=False)
    fell = _fallbacks(device_type)
    signal.alarm(int(max(1, timeout * (1 + (len(batch) - 1) / 4))))  # a case's limit, and a quarter per other case
    try:
        if device_type == "cpu":
            inputs = [(_cloned(torch, c["_run"][1]), c["_run"][2]) for c in batch]
        else:  # a sample the device cannot hold (a sparse tensor) is its own case's error
            device = _device(torch, backend)
            inputs = [(_cloned(torch, c["_run"][1], device), _cloned(torch, c["_run"][2], device)) for c in batch]
        got = compiled(inputs)
        if device_type != "cpu":
            got = _cloned(torch, got, torch.device("cpu"))  # runs the graph: its errors are the compile's
        fallen = fell()
        if fallen and len(batch) > 1:  # which case fell back: split, as for an error
            raise _FellBack(fallen)
    except Exception as exc:  # noqa: BLE001 - every compile failure is data
        signal.alarm(0)
        if len(batch) > 1:
            half = len(batch) // 2
            _compiled_together(torch, batch[:half], timeout, backend)
            _compiled_together(torch, batch[half:], timeout, backend)
            return
        (case,) = batch
        name = type(exc).__name__
        if isinstance(exc, TimeoutError) or "TimeoutError: over" in str(exc):  # Inductor wraps the alarm's
            case.update(status="timeout", why=f"over {timeout:g} s")
        elif name in ("Unsupported", "UserError") or "graph break" in str(exc).lower():
            case.update(status="fallback", why=f"graph break: {_first(exc)}; runs eagerly")
        else:
            case.update(status="error", why=f"{name}: {_first(exc)}")
        return
    finally:
        signal.alarm(0)
    for case, value in zip(batch, got):
        verdict = compare.judge(value, case["ref"], None, dtype=case["_run"][3], mode=case["mode"])
        case["status"] = verdict.get("status", "pass")
        if verdict.get("why"):
            case["why"] = str(verdict["why"])[:200]
        if fallen and case["status"] in lazy.RAN:
            case.update(status="fallback", why=f"ran through the CPU fallback: {', '.join(fallen)}"[:200])


class _FellBack(Exception):
    """A graph of several cases in which some node ran through the CPU fallback: split to find whose."""


def _fallbacks(device_type: str):
    """A function giving the ops that ran through the device's CPU fallback since this call (read as the
    eager probe reads them: opcov.probe.lazy), or none off a lazy backend."""
    return lazy.fallback_reader(device_type)


def _cloned(torch, tree, device=None):
    """Fresh copies of the tensors in ``tree`` (on ``device`` where given)."""
    if isinstance(tree, torch.Tensor):
        return tree.detach().clone() if device is None else tree.detach().to(device)
    if isinstance(tree, (list, tuple)):
        return type(tree)(_cloned(torch, t, device) for t in tree)
    if isinstance(tree, dict):
        return {k: _cloned(torch, v, device) for k, v in tree.items()}
    return tree


def _first(exc) -> str:
    return (cause_line(exc) or type(exc).__name__)[:200]


def probe(
    *,
    out: str,
    core: bool = True,
    pattern: str | None = None,
    dtypes=("float32",),
    samples: int = 2,
    jobs: int = 1,
    timeout: float = 120.0,
    resume: bool = False,
    command: str = "",
    limit: float | None = None,
    together: int = TOGETHER,
    backend: str = BACKEND,
) -> tuple[dict, dict]:
    """Run the compile probe and return (the probed document, figures); the journal keeps finished groups.
    ``limit``: stop starting groups after this many seconds (what was run is written, and --resume goes on).
    ``together``: OpInfo x dtype groups a worker compiles as one graph (``_compiled_together``)."""
    import multiprocessing

    from opcov.store import data, layout

    groups = _groups(core, pattern, dtypes)
    if not groups:
        raise UsageError("no OpInfo matches: check --ops and --dtypes")
    journal = journal_path(out)
    done: dict = {}
    if resume and os.path.exists(journal):
        with open(journal) as f:
            for line in f:
                rec = json.loads(line)
                done[rec["group"], rec["dtype"]] = rec
    todo = [(g, d) for g, d in groups if (g, d) not in done]
    batches = [(todo[i : i + together], samples, timeout, backend) for i in range(0, len(todo), max(1, together))]
    start = time.monotonic()
    os.makedirs(os.path.dirname(os.path.abspath(out)), exist_ok=True)
    stopped = 0
    worker_cpu = 0.0
    if todo:
        ctx = multiprocessing.get_context("spawn")
        with (
            ctx.Pool(jobs, initializer=_worker_init, initargs=(backend,), maxtasksperchild=20) as pool,
            open(journal, "a") as jf,
        ):
            n = 0
            for spent, recs in pool.imap_unordered(_timed_batch, batches):
                worker_cpu += spent
                for rec in recs:
                    n += 1
                    done[rec["group"], rec["dtype"]] = rec
                    jf.write(json.dumps(rec) + "\n")
                    worst = max((c["status"] for c in rec["cases"]), key=_badness, default="-")
                    print(f"[{n}/{len(todo)}] {rec['group']} {rec['dtype']}: {worst}", flush=True)
                jf.flush()
                if limit and time.monotonic() - start > limit:
                    stopped = len(todo) - n
                    pool.terminate()
                    break
    if not stopped:
        _again_alone(done, samples, timeout, backend, jobs, journal)
    wall = time.monotonic() - start
    import torch

    eager = layout.pick(layout.snapshots(layout.DEFAULT_COVERAGE, backend)["registered"], str(torch.__version__))
    backend_rec = data.load(eager)["backend"] if eager else {"name": backend, "device_type": TARGETS[backend][1]}
    doc = _document(done, backend_rec, command, samples, stopped, str(torch.__version__), together, backend)
    cases_run = sum(len(r["cases"]) for r in done.values())
    figures = {"wall_s": wall, "groups": len(done), "cases_run": cases_run, "not_started": stopped}
    figures.update(groups_run=len(done) - (len(groups) - len(todo)), worker_cpu_s=worker_cpu)
    return doc, figures


AGAIN = ("error", "timeout")  # statuses whose group is compiled again alone, in a fresh worker


def _again_alone(done: dict, samples: int, timeout: float, backend: str, jobs: int, journal: str) -> None:
    """Compile each group that had an error or timeout again, alone in a fresh worker process: a worker
    that has compiled many graphs can fail on the next for reasons of its own (PyTorch/XLA's computation
    cache: "Failed to get computation by hash", "Execution supplied 5 buffers but compiled program
    expected 4"). A case that then runs is ``flaky`` (the first error is kept in its why); one that fails
    again keeps the second run's status. Each group is compiled alone once (``alone`` in its record)."""
    import multiprocessing

    again = [
        key
        for key, rec in sorted(done.items())
        if not rec.get("alone") and any(c["status"] in AGAIN for c in rec["cases"])
    ]
    if not again:
        return
    print(f"compiling {len(again)} group(s) with an error or timeout again, each alone in a fresh process", flush=True)
    ctx = multiprocessing.get_context("spawn")
    tasks = [([key], samples, timeout, backend) for key in again]
    with (
        ctx.Pool(jobs, initializer=_worker_init, initargs=(backend,), maxtasksperchild=1) as pool,
        open(journal, "a") as jf,
    ):
        for _spent, recs in pool.imap_unordered(_timed_batch, tasks):
            for alone in recs:
                rec = done[alone["group"], alone["dtype"]]
                merge_alone(rec, alone)
                jf.write(json.dumps(rec) + "\n")
            jf.flush()


def merge_alone(rec: dict, alone: dict) -> None:
    """Fold a group's run alone into its first record: each case that raised or timed out the first time
    is ``flaky`` where it ran alone (the first error kept in its why), else takes the second run's status."""
    by_i = {c["i"]: c for c in alone["cases"]}
    for case in rec["cases"]:
        second = by_i.get(case["i"])
        if case["status"] not in AGAIN or second is None:
            continue
        if second["status"] in vocab.PROBED_RAN:
            first = case.get("why", "")
            case.update(status="flaky", why=f"passed compiled alone; with other samples: {first}"[:200])
        else:
            case["status"] = second["status"]
            case.pop("why", None)
            if second.get("why"):
                case["why"] = second["why"]
    rec["alone"] = True


def _blamed(case: dict, cases: list) -> list[tuple[str, str, str]]:
    """The (op, dtype key, signature class) a case is filed under: its OpInfo's own ops; but a case that
    failed while running ops that no case of its group that ran did (embedding's samples with max_norm
    also run embedding_renorm_, in place on the weight, which openxla compiles wrongly now and then) is
    filed under those ops alone (the in-place ones among them where there are: max_norm's samples also
    run detach, which every case of other groups runs): the plain calls of the OpInfo's op ran, so the
    failure is not theirs. An in-place op is filed under its functional overload too: a compiled graph
    is functional (AOTAutograd turns ``as_strided_`` into ``as_strided``), so a compiled op set names only
    that one, and the finding would reach no model under the in-place name alone."""
    sigs = case.get("sigs") or [""] * len(case["ops"])  # a journal of an older probe: no classes
    own = [(n, k, sig) for (n, k), sig in zip(case["ops"], sigs)]
    if case.get("status") in vocab.PROBED_RAN:
        return own
    ran = {
        (n, k)
        for c in cases
        if c.get("status") in vocab.PROBED_RAN
        for n, k, *_ in list(c["ops"]) + list(c.get("other") or [])
    }
    if not ran:
        return own
    beyond = [(n, k, sig) for n, k, sig in own + [tuple(o) for o in case.get("other") or []] if (n, k) not in ran]
    in_place = [c for c in beyond if _in_place(c[0])]  # ATen's in-place ops: embedding_renorm_
    return in_place + [(_functional(n), k, sig) for n, k, sig in in_place] or beyond or own


def _in_place(name: str) -> bool:
    base = _base(name)
    return base.endswith("_") and not base.startswith("__")


def _functional(name: str) -> str:
    """An in-place overload's functional one: 'aten::as_strided_' -> 'aten::as_strided',
    'aten::add_.Tensor' -> 'aten::add.Tensor'."""
    ns, _, rest = name.partition("::")
    base, dot, overload = rest.partition(".")
    return f"{ns}::{base[:-1]}{dot}{overload}"


def _device_text(device_type: str) -> str:
    """What the provenance says the probe ran on: the machine, and the settings the backend's record reads."""
    if device_type == "cpu":
        return f"cpu: {platform.machine()}"
    rec = backends.for_device(device_type)
    said = ""
    if rec is not None and rec.read_settings is not None:
        from opcov.torchenv import import_torch

        said = ", ".join(f"{k}={v}" for k, v in rec.read_settings(import_torch()).items())
    return f"{device_type}: on {platform.machine()}" + (f" ({said})" if said else "")


def _badness(status: str) -> int:
    return -vocab.PROBED_RANK.get(status, len(vocab.PROBED_RANK))


def _document(
    done: dict,
    backend_rec: dict,
    command: str,
    samples: int,
    stopped: int,
    torch_version: str,
    together: int = 1,
    backend: str = BACKEND,
) -> dict:
    cells: dict = {}
    for (group, dtype), rec in sorted(done.items()):
        for case in rec["cases"]:
            for name, key, sig in _blamed(case, rec["cases"]):
                cell = cells.setdefault(name, {}).setdefault(key, {"cases": 0, "fails": 0, "samples": set()})
                cell["cases"] += 1
                cell["samples"].add(group)
                status = case["status"]
                if status in vocab.PROBED_FAILURES or status == "fallback":
                    cell["fails"] += 1
                if status in NOTED and len(cell.setdefault("failed", [])) < MAX_FAILED:
                    cell["failed"].append(failed_text(status, f"{group}|{dtype}|{case['i']}", sig))
                ran = cell.setdefault("ran", [])
                if status in vocab.PROBED_RAN and sig and sig not in ran and len(ran) < MAX_FAILED:
                    ran.append(sig)
                if "fwd" not in cell or _badness(status) > _badness(cell["fwd"]):
                    cell["fwd"] = status
                    cell["case"] = f"{group}|{dtype}|{case['i']}"
                    if case.get("why"):
                        cell["why"] = case["why"]
                    else:
                        cell.pop("why", None)
    ops = {}
    for name, by_key in sorted(cells.items()):
        ops[name] = {}
        for key, cell in sorted(by_key.items()):
            cell["samples"] = sorted(cell["samples"])[:5]
            if not cell["fails"]:
                cell.pop("fails")
            for k in ("failed", "ran"):
                if not cell.get(k):
                    cell.pop(k, None)
            ops[name][key] = cell
    counts: dict = {}
    for by_key in ops.values():
        for cell in by_key.values():
            counts[cell["fwd"]] = counts.get(cell["fwd"], 0) + 1
    compile_backend, device_type = TARGETS[backend]
    where = "on CPU" if device_type == "cpu" else f"on {device_type} (inputs there, outputs read back)"
    notes = [
        f"compile path: OpInfo samples compiled with {compile_backend} (fullgraph=True, dynamic=False) {where} "
        "and compared with eager CPU; forward only; a graph break is recorded as 'fallback' (the op runs eagerly "
        "there)",
        f"up to {samples} sample(s) per OpInfo and dtype; a case is filed under the OpInfo's own recorded overloads",
    ]
    if together > 1:
        notes.append(
            f"the samples of up to {together} OpInfo x dtype groups are compiled as one graph, each output compared "
            "with its own eager value; a graph that fails is split in halves down to a sample compiled alone, so "
            "an error, graph break or timeout is its own sample's"
        )
    rec = lazy.record_for(device_type)
    if rec is not None and rec.lazy is not None:
        notes.append(
            f"a case whose compiled graph ran a node through {rec.lazy.what}'s CPU fallback (its counters) is "
            "'fallback', with the ops' names"
        )
    if stopped:
        notes.append(f"{stopped} OpInfo x dtype group(s) not run (time limit): continue with --resume")
    return {
        "schema_version": 1,
        "evidence": "probed",
        "backend": backend_rec,
        "provenance": {
            "torch": torch_version,
            "opcov": __version__,
            "created": _dt.datetime.now(_dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%S+00:00"),
            "command": command or f"opcov probe {backend} --path compile",
            "host": provenance.host(),
            "device": _device_text(device_type),
            "mode": f"compile ({compile_backend})",
            "notes": notes,
        },
        "summary": {"groups": len(done), "cells": dict(sorted(counts.items()))},
        "ops": ops,
    }
