"""The model's own calls, replayed on the device, as evidence on the torch.compile path.

Why: a compiled op set records each AOT graph's calls with their shapes, and compile coverage judges an op
whatever its arguments, so a call that only some arguments break is missed there. The eager op set of the
same model and mode records the same calls with their signature classes, and the eager probe replays them on
the device one by one (a probe cell's ``traced``). Where the compile backend runs each node of its graphs
through the device's own eager kernels, that replay is evidence about the compiled graph's calls: mistral's
and gemma2's sliding-window KV cache slices ``keys[:, :, -4095:]`` on an 8-token prompt, and PyTorch/XLA
raises "Value out of range" on it both eagerly and under ``torch.compile(backend="openxla")``.

Which compile backends (their record's ``compile.lowering``):

* ``cpu_partition`` (openxla): PyTorch/XLA's Dynamo bridge runs each AOT graph once on XLA tensors to
  trace it into an XLA computation, so every node goes through the same lazy-tensor kernels, with the same
  arguments, that an eager call takes (a node with no XLA lowering is partitioned out to the CPU, as the
  eager fallback runs it).
* ``eager`` (TorchTPU): each node of the functional graph is compiled through the backend's eager kernels.
* ``inductor``: not covered. Inductor lowers each node to its own IR with the sizes known at compile time
  (a slice's bounds are clamped there, as CPU clamps them) and generates code; the device's eager kernel
  is not what runs the node. Its graph breaks are judged on eager coverage already (opcov.verdict.compiled).

Which calls: those of an op the compiled graphs hold (by overload name) that are

* slices past their dimension (``sigclass.SLICES`` with a ``bounds=`` selector: a start or end before
  ``-size`` or beyond ``size``), which Dynamo and AOTAutograd keep in the graph with the bounds as written
  and which a backend that checks its bounds raises on, or
* calls of a class the replay saw fail on the device (the cell's own-calls status is a failure:
  ``signature.own_calls``, matched by class, so a model's other calls of the op are not blamed).

Each is judged on eager coverage as the eager verdict judges it (``judge.judge_calls``: the model's own
replayed calls first, then probe cases of its class); only the calls with a problem are kept. The rest of
the graph stays with compile coverage: a functional graph's calls are not always the eager ones
(decompositions, in-place ops made functional), so an eager pass is no evidence that the compiled node runs.
Torch-free.
"""

from __future__ import annotations

from opcov import backends, sigclass, vocab
from opcov.store import opset
from opcov.verdict import judge, resolve, signature

COVERED_LOWERINGS = ("cpu_partition", "eager")  # backends.Compile.lowering: nodes through the device's kernels


# The phases whose calls the probe replays (forward calls; a backward or an optimizer step is judged apart).
FORWARD_PHASES = ("forward", *opset.SERVE_PHASES)


def covers(backend: str) -> bool:
    """Whether ``backend``'s torch.compile runs its graphs' nodes through its eager kernels."""
    record = backends.record(backend)
    return bool(record and record.compile and record.compile.lowering in COVERED_LOWERINGS)


def past_dimension(call) -> bool:
    """Whether ``call`` (an op set's call or node) is a slice whose start or end lies past its dimension."""
    if call.op.split("::", 1)[-1].split(".", 1)[0] not in sigclass.SLICES:
        return False
    return any("bounds" in sigclass.selectors(c) for c in signature.call_classes(call) if signature.is_class(c))


def failed_in_replay(cov: judge.Coverage, call, model: str) -> bool:
    """Whether the probe's replay of ``model``'s own calls of this class failed on the device."""
    cell = cov.cells(call.op).get(call.dtype)
    slot = cell.slot("forward") if cell else None
    own = signature.own_calls(slot, model, signature.call_classes(call)) if slot is not None else None
    return own is not None and own[0] in vocab.PROBED_FAILURES


def judge_replayed(doc: dict, eager_doc: dict, cov: judge.Coverage) -> judge.BackendVerdict | None:
    """The calls of eager op set ``eager_doc`` this module covers for compiled op set ``doc``, judged on
    ``cov`` (the backend's eager coverage) and kept where they have a problem; None where none has."""
    model = str((eager_doc.get("model") or {}).get("name") or "")
    compiled_ops = set(doc.get("ops") or ())
    calls = [
        c
        for c in resolve.resolve(eager_doc, cov).calls
        if c.op in compiled_ops and c.phase in FORWARD_PHASES and (past_dimension(c) or failed_in_replay(cov, c, model))
    ]
    if not calls:
        return None
    v = judge.judge_calls(calls, cov, str(doc.get("mode", "?")), judge.opset_torch(eager_doc), model)
    v.ops = [r for r in v.ops if r.problems()]
    if not v.ops:
        return None
    v.verdict, v.evidence = judge.VERDICTS.get(v.ops[0].outcome, "runs"), judge.rests_on([r.judged for r in v.ops])
    return v
