"""Op set x coverage -> "can this model run on backend X?", op by op, with reasons.

Torch-free: ``opcov check`` on a saved op set must be a fast CI gate.

Each call in the op set becomes requirements: its forward kernel at its dtype key
(in every phase), and for a forward call whose inputs required grad in training,
the op's backward too.  A requirement is judged from probed evidence when a probe
has a cell for that op and dtype (probes see dtypes and values), else from
registered evidence (a claim, dtype-blind), else it is unknown.  Outcomes, worst
first: fails, unknown, fallback, ok; ``not_judged`` (ops outside what the data
covers, e.g. a custom namespace) stays apart and never decides the verdict.

Each outcome also names the evidence it rests on (opcov.vocab's ladder: probed,
registered, declared): a verdict says plain "runs" only when all of it was probed,
and the gates can demand a level (``--require probed``).
"""

from __future__ import annotations

import contextlib
import functools
import gc
import re
from dataclasses import dataclass, field, replace

from opcov import backends, suggest, vocab
from opcov.errors import DataError, UsageError
from opcov.sigclass import CONVERSIONS, with_targets
from opcov.store import layout, lineyaml
from opcov.store.cells import ProbedCell, ProbedSlot, record_cells
from opcov.verdict import contributed, layouts, resolve, signature
from opcov.verdict.finding import Finding

OUTCOMES = tuple(vocab.OUTCOMES)  # worst first
NOT_JUDGED = vocab.NOT_JUDGED.name
VALUE_NOTE = "value_note"  # vocab.OUTCOMES: ran, values may differ from CPU's
VERDICTS = vocab.VERDICT_OF
VERDICT_ORDER = vocab.VERDICT_ORDER

PROBED_OK = {s: vocab.PROBED[s].label for s in vocab.PROBED_RAN}
PROBED_FAIL = {s: vocab.PROBED[s].label for s in vocab.PROBED_STATUSES if s in vocab.PROBED_FAILURES}
HOST_SYNC_TAGS = ("data_dependent_output", "dynamic_output_shape")
HOST_SYNC_OPS = ("aten::_local_scalar_dense", "aten::item", "aten::nonzero", "aten::is_nonzero")
_HOST_SYNC_TAGS = frozenset(HOST_SYNC_TAGS)
_ATTENTION = re.compile("scaled_dot_product|flash_attention|efficient_attention")  # ops whose fix may be another attn
NOT_IN_TORCH = "does not exist in torch "  # a finding's why, for an op the backend's torch lacks (compare marks it)


_OUTCOME_RANK = {o: i for i, o in enumerate(OUTCOMES)}
_EVIDENCE_RANK = {e: i for i, e in enumerate(vocab.EVIDENCE_LEVELS)}  # strongest first
_EVIDENCE_WEAK = {e: i for i, e in enumerate(vocab.EVIDENCE_WORST_FIRST)}


def rests_on(judged) -> str:
    """The evidence level an outcome rests on, from the (outcome, evidence) pairs it was judged from.

    One failure is enough to fail, so a failure rests on its best-evidenced failing part; any other
    outcome says something of every part (that it runs, or that nothing was seen to fail), so it
    rests on the weakest. Parts not judged do not count; with none left it is 'none'.
    """
    return _summarize(judged)[1]


def summarize(judged) -> tuple[str, str]:
    """(the worst outcome, the evidence it rests on) of (outcome, evidence) pairs: a verdict's two words."""
    return _summarize(judged)


def _summarize(judged) -> tuple[str, str]:
    """(the worst outcome, ``rests_on`` the pairs) in one pass over (outcome, evidence) pairs:
    asked for every op of every verdict, where two passes and their lists were a tenth of judging.
    Evidence ranks as vocab.worst ranks it: unranked last, ties keep the earliest."""
    rank, strong, weak = _OUTCOME_RANK, _EVIDENCE_RANK, _EVIDENCE_WEAK
    n_strong, n_weak = len(strong), len(weak)
    worst = len(rank)
    failing, failing_rank = None, n_strong + 1  # the best-evidenced failing part (strongest first)
    weakest, weakest_rank = None, n_weak + 1  # the weakest part of all
    for o, e in judged:
        r = rank.get(o)
        if r is None:  # not judged: does not count
            continue
        if r < worst:
            worst = r
        if o == "fails" and strong.get(e, n_strong) < failing_rank:
            failing, failing_rank = e, strong.get(e, n_strong)
        if weak.get(e, n_weak) < weakest_rank:
            weakest, weakest_rank = e, weak.get(e, n_weak)
    if worst == len(rank):
        return NOT_JUDGED, vocab.NO_EVIDENCE.name
    return OUTCOMES[worst], failing if failing_rank <= n_strong else weakest  # type: ignore[return-value]  # set by a judged part


@dataclass(slots=True)  # ~650k of them over the zoo on six backends: slots make and free them faster
class OpResult:
    op: str
    calls: int = 0
    phases: set | frozenset = field(default_factory=set)  # judge gives frozensets, shared between results
    dtypes: set | frozenset = field(default_factory=set)
    findings: list = field(default_factory=list)
    flags: list = field(default_factory=list)

    # outcome and evidence are read millions of times over a zoo (reports, the site, gaps), so each is
    # worked out once per findings list: assigning ``findings`` or appending to it makes them anew.
    # (Findings are frozen; replace one with a new list, never by assigning into the list.)
    # (the findings list, its length, outcome, evidence)
    _memo: tuple = field(default=(None, -1, "", ""), init=False, repr=False, compare=False)

    def _summary(self) -> tuple:
        findings = self.findings
        memo = self._memo
        if memo[0] is not findings or memo[1] != len(findings):
            if len(findings) == 1:  # most ops (every inference op at one dtype)
                f = findings[0]
                judged = f.outcome in _OUTCOME_RANK
                memo = (
                    findings,
                    1,
                    f.outcome if judged else NOT_JUDGED,
                    f.evidence if judged else vocab.NO_EVIDENCE.name,
                )
            else:
                memo = (findings, len(findings)) + _summarize((f.outcome, f.evidence) for f in findings)
            self._memo = memo
        return memo

    @property
    def outcome(self) -> str:
        memo = self._memo
        if memo[0] is self.findings and memo[1] == len(memo[0]):
            return memo[2]
        return self._summary()[2]

    @property
    def evidence(self) -> str:
        """The level the op's outcome rests on (``rests_on`` its findings)."""
        return self._summary()[3]

    @property
    def judged(self) -> tuple[str, str]:
        """(outcome, evidence) in one read, for passes over every op of a zoo's verdicts."""
        memo = self._memo
        if memo[0] is not self.findings or memo[1] != len(memo[0]):
            memo = self._summary()
        return memo[2], memo[3]

    def problems(self) -> list[Finding]:
        return [f for f in self.findings if f.outcome in vocab.PROBLEMS]


@dataclass
class BackendVerdict:
    backend: str
    mode: str
    verdict: str  # runs | runs_with_fallback | runs_with_value_note | unknown | fails
    evidence: str  # the level the verdict rests on (``rests_on`` its judged ops): see says()
    ops: list  # OpResult, worst first
    sources: list  # coverage files used
    notes: list
    unclaimed: list | None = None  # with a backend manifest (apply_manifest): (op, dtype) it does not claim
    variant: str = ""  # the input variant judged (vocab.INPUT_VARIANTS); '' where the op set records none
    variants: dict = field(default_factory=dict)  # the other input variants' verdicts, by name (verdict.check)
    # this model's step run on the device (opcov.verdict.observed.record): where one exists it decides
    # ``verdict`` and ``evidence`` ('observed'); the verdict from coverage data is kept in it ('predicted')
    observed: dict | None = None
    no_data: str = ""  # a backend with no data yet: the commands that would fill it (verdict 'unknown', no ops)

    def __repr__(self) -> str:
        """A line, not every op result (the dataclass's repr of a zoo model ran to 40 KB)."""
        return (
            f"BackendVerdict({self.backend!r}, {self.mode!r}, verdict={self.verdict!r}, evidence={self.evidence!r}, "
            f"{len(self.ops)} ops, sources={self.sources!r})"
        )

    def counts(self) -> dict:
        """The headline: distinct ops and calls, by outcome and by evidence kind."""
        ops = calls = 0
        n = dict.fromkeys(OUTCOMES, 0)
        n_calls = dict.fromkeys(OUTCOMES, 0)
        ok = dict.fromkeys(vocab.EVIDENCE_LEVELS, 0)
        for r in self.ops:  # one pass: a site reads this for every model, mode and backend
            outcome, evidence = r.judged
            if outcome == NOT_JUDGED:
                continue
            ops += 1
            calls += r.calls
            if outcome in n:
                n[outcome] += 1
                n_calls[outcome] += r.calls
            if outcome == "ok" and evidence in ok:
                ok[evidence] += 1
        out = {"ops": ops, "calls": calls, "not_judged": len(self.ops) - ops}
        for o in OUTCOMES:
            out[o] = n[o]
            out[f"{o}_calls"] = n_calls[o]
        for kind in vocab.EVIDENCE_LEVELS:
            out[f"ok_{kind}"] = ok[kind]
        return out

    def value_notes(self) -> list[tuple[str, str, str, str]]:
        """(op, dtype, direction, why) of every requirement that runs with values that may differ from CPU's,
        worst op first: what a ``runs_with_value_note`` verdict names."""
        return [(r.op, f.dtype, f.direction, f.why) for r in self.ops for f in r.findings if f.outcome == VALUE_NOTE]

    def value_note_text(self, limit: int = 3) -> str:
        """'aten::nll_loss_forward float32, aten::cumsum bool' (the ops whose values may differ), '' for none."""
        seen = list(dict.fromkeys(f"{op} {dtype}" for op, dtype, _, _ in self.value_notes()))
        return ", ".join(seen[:limit]) + (f" and {len(seen) - limit} more" if len(seen) > limit else "")

    def says(self) -> str:
        """The verdict in words on its evidence: 'runs' only when all of it was probed, else e.g.
        'runs (registered, unverified)' or 'fails (registered evidence)'."""
        return "no data yet" if self.no_data else vocab.verdict_words(self.verdict, self.evidence)


# ---------------------------------------------------------------- coverage for one backend


@dataclass
class Coverage:
    """The coverage data of one backend: a registered and/or a probed file, read only for the ops needed."""

    backend: str
    registered: dict | None
    probed: dict | None
    paths: list
    cpu: dict | None = None  # cpu's registered data: a CPU fallback can only run what CPU runs
    notes: list = field(default_factory=list)  # files passed over in the backend's folder (layout.strays)
    own: dict | None = None  # a probed document of this model's own calls replayed (opcov check --replay)
    _cells: dict = field(default_factory=dict, init=False, repr=False, compare=False)
    # (op, dtype, direction, torch) -> Finding, shared by the Coverages of the same documents (``share``);
    # None: not memoized (a lone check judges each requirement once anyway)
    _judged: dict | None = field(default=None, init=False, repr=False, compare=False)
    # (op, requirements) -> _relevant's answer, shared as ``_judged`` is (None: not kept)
    _relevant_memo: dict | None = field(default=None, init=False, repr=False, compare=False)

    def cells(self, op: str) -> dict[str, ProbedCell]:
        """The op's probed cells by dtype key, parsed once; {} when it was not probed or skipped."""
        if op not in self._cells:
            cells = record_cells((self.probed or {}).get("ops", {}).get(op))
            replayed = record_cells((self.own or {}).get("ops", {}).get(op))  # the model's own calls decide
            self._cells[op] = {**cells, **replayed} if replayed else cells
        return self._cells[op]

    @property
    def static(self) -> str:
        """The evidence level of the static document in ``registered``: a registered scan's, or declared
        data's (opcov.scan.declared) when the backend has no scan."""
        return str((self.registered or {}).get("evidence") or "registered")

    def unsupported_dtypes(self) -> tuple:
        """dtypes the backend has no tensors of, as its declared data says (mps: float64, complex128)."""
        declared = (self.registered or {}).get("provenance", {}).get("declared") or {}
        return tuple(declared.get("unsupported_dtypes") or ())

    @property
    def torch(self) -> str:
        for doc in (self.registered, self.probed):
            if doc:
                return str(doc["provenance"].get("torch", "?"))
        return "?"

    def fallback(self) -> tuple[str, bool]:
        fb = (self.registered or self.probed or {}).get("provenance", {}).get("fallback") or {}
        settings = (self.registered or {}).get("provenance", {}).get("settings") or {}
        enabled = fb.get("enabled")
        if enabled is None:
            enabled = settings.get("cpu_fallback_enabled", False)
        return str(fb.get("kind", "unknown")), bool(enabled)


def needed_ops(doc: dict) -> list[str]:
    """The ops to read to judge an op set: its own, and the composites of its call tree (a backend
    with its own kernel for one, such as tpu's aten::linear, runs that kernel: see verdict.resolve)."""
    return resolve.needed_ops(doc)


def opset_torch(doc: dict) -> str:
    """The torch version an op set was traced with."""
    return str(doc["provenance"].get("torch", "?"))


def read_ops(path: str, names) -> dict:
    """A coverage file with only the lines of ``names`` parsed (~100 ops of ~3,700)."""
    return lineyaml.load(path, names, summary=False)


def _listing(coverage_dir: str, backend: str, listings: dict | None) -> tuple[dict, list]:
    """(layout.snapshots, layout.strays) of a backend's folder; kept in ``listings`` when given (a zoo
    judged in one process lists each folder once, not once per op set)."""
    key = (coverage_dir, backend)
    if listings is not None and key in listings:
        return listings[key]
    found = (layout.snapshots(coverage_dir, backend), layout.strays(coverage_dir, backend))
    if listings is not None:
        listings[key] = found
    return found


def coverage_for(
    doc: dict,
    backend: str,
    coverage_dir: str,
    *,
    read=read_ops,
    scan=None,
    listings: dict | None = None,
    names: list | None = None,
) -> Coverage:
    """The Coverage that judges op set ``doc`` on ``backend``: what check, gaps and the site all use.

    It reads the ops the op set needs (``needed_ops``) from the backend's snapshots made with the op
    set's torch version (else the newest by name; declared data, opcov.scan.declared, stands in for a
    registered scan only where there is none), and, where the backend's CPU fallback is enabled,
    CPU's registered data for them (a CPU fallback can only run what CPU runs). ``read(path, names)``
    gives a file's document (the site passes the documents it holds). With no snapshot,
    ``scan(backend, names)`` may make a registered document now (check's live scan; None when it
    cannot); else it is a UsageError. ``listings``: a dict that keeps the folders' listings between calls.
    ``names``: ``needed_ops(doc)`` when the caller has it (the site judges each op set on every backend,
    and working it out walks the whole call tree).
    """
    names = needed_ops(doc) if names is None else names
    torch_version = opset_torch(doc)
    files, ignored = _listing(coverage_dir, backend, listings)
    chosen = {kind: layout.pick(files[kind], torch_version) for kind in layout.EVIDENCE}
    docs = {}
    for kind, path in chosen.items():
        if path:
            docs[kind] = read(path, names)
            if docs[kind].get("evidence") != kind:
                raise DataError(f"{path}: evidence is {docs[kind].get('evidence')!r}, expected {kind!r}")
    if "registered" in docs:
        docs.pop("declared", None)  # a registration read from a binary outranks a declaration
    elif "declared" in docs:
        docs["registered"] = docs.pop("declared")
        chosen["registered"] = chosen["declared"]
    paths = [chosen[kind] for kind in ("registered", "probed") if kind in docs]
    if not docs:
        if ignored:  # misnamed or misplaced data: never judge around it with a live scan
            raise DataError(
                f"{ignored[0][0]}: {ignored[0][1]}, so {backend} has no data opcov reads; "
                f"'opcov lint {coverage_dir}' says more"
            )
        live = scan(backend, names) if scan else None
        if live is None:
            raise suggest.no_backend_data(backend, coverage_dir)
        docs["registered"] = live
        paths = [f"live registered scan of {backend} (no data in coverage/)"]
    cov = Coverage(
        backend, docs.get("registered"), docs.get("probed"), paths, notes=[f"ignored {p}: {why}" for p, why in ignored]
    )
    cov.notes.extend(contributed.notes(docs.get("probed")))  # whose evidence, when it was contributed
    if backend != backends.REFERENCE and cov.fallback() == ("cpu", True):  # the only case that reads CPU's data
        cpu_path = layout.pick(_listing(coverage_dir, backends.REFERENCE, listings)[0]["registered"], torch_version)
        cov.cpu = read(cpu_path, names) if cpu_path else None
    return cov


@contextlib.contextmanager
def bulk(kept: bool = False):
    """Judge (or read) a whole zoo with Python's cyclic garbage collector paused, and restored as it was
    after. Judging every op set makes millions of small objects that live on (findings, op results),
    and each collection walks all of them again: over the bundled zoo that was a third of a site build.
    Nothing made here depends on cycles being collected early; they are collected once it is back on
    (the first collection then walks every object made meanwhile: ~0.3 s after loading the zoo, ~0.5 s
    after judging it). ``kept``: the caller keeps what was made until the process ends (the ``opcov
    site`` program): the outermost bulk freezes it (``gc.freeze``) so that no collection walks it."""
    was = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was:
            if kept:
                gc.freeze()
            gc.enable()


def share(cov: Coverage, pool: dict) -> Coverage:
    """Let ``cov`` share parsed cells and judged requirements with the Coverages in ``pool`` made from the
    same documents (by identity: the caller reads each coverage file once) with the same backend and
    source paths, which is all a requirement's judgment rests on. Judging a zoo judges the same
    (op, dtype, direction) on one backend hundreds of times; each is judged once. ``pool`` keeps the
    documents it was handed, so that their identities are never reused by other objects."""
    key = (cov.backend, id(cov.registered), id(cov.probed), id(cov.cpu), tuple(cov.paths))
    entry = pool.get(key)
    if entry is None:
        entry = pool[key] = ((cov.registered, cov.probed, cov.cpu), cov._cells, {}, {})
    cov._cells, cov._judged, cov._relevant_memo = entry[1], entry[2], entry[3]
    return cov


# ---------------------------------------------------------------- judging


def _fix_fallback(backend: str) -> str:
    """The fix for an op only a disabled CPU fallback catches, naming the backend's switch (its record's)."""
    record = backends.record(backend)
    hint = f" ({record.fallback.switch})" if record and record.fallback.switch else ""
    return f"enable the CPU fallback{hint}: the op then runs on the CPU, slowly"


def _err_text(err) -> str:
    """' (max error 0.003)' from a probe cell's err: a number, or (absolute, relative)."""
    if isinstance(err, bool) or err is None:
        return ""
    if isinstance(err, (int, float)):
        return f" (max error {err:.3g})"
    if isinstance(err, tuple) and len(err) == 2 and all(isinstance(e, (int, float)) for e in err):
        return f" (max error {err[0]:.3g} absolute, {err[1]:.3g} relative)"
    return ""


def judge_requirement(
    cov: Coverage,
    op: str,
    dtype: str,
    direction: str,
    torch_version: str,
    *,
    shapes: tuple = (),
    model: str = "",
    reads: frozenset | None = None,
    returns: frozenset | None = None,
) -> Finding:
    """One requirement judged: from the probe's cell when it has a status, else from the static
    document (a registered scan, or declared data with what the backend's test suite says of dtypes).
    ``shapes``: the shapes of the model's calls (an op set's ``shape``), against which a probe failure's
    signature class is matched; ``model``: the op set's model, whose own replayed calls are preferred;
    ``reads``: the outputs the model's calls read (None: not recorded), so that a value mismatch only on
    others is a note; ``returns``: the outputs the model returns to its caller (None: not recorded), so that
    a difference of an output's dtype alone is a value note only where the caller receives it. Pure in the
    Coverage's documents and paths: memoized where the Coverage was ``share``d."""
    args = (op, dtype, direction, torch_version, shapes, model, reads, returns)
    memo = cov._judged
    if memo is None:
        return _judge_with_declared_dtypes(cov, args)
    found = memo.get(args)
    if found is None:
        found = memo[args] = _judge_with_declared_dtypes(cov, args)
    return found


def _judge_with_declared_dtypes(cov: Coverage, args: tuple) -> Finding:
    return layouts.judged(cov, args, _judge_dense)  # sparse and quantized calls: their layouts' keys


def _judge_dense(cov: Coverage, args: tuple) -> Finding:
    finding = _ranked(cov, _requirement(cov, args))
    if finding.evidence != "declared":
        return finding
    return _declared_dtypes(cov, finding, (cov.registered or {}).get("ops", {}).get(args[0]) or {})


def _declared_dtypes(cov: Coverage, finding: Finding, rec: dict) -> Finding:
    """Declared data's dtype notes (opcov.scan.declared): a dtype the backend has no tensors of, or one
    its test suite expects every OpInfo about the op to fail in (``xfail``), fails; a ``doubt`` is named."""
    dtype, forward = finding.dtype, finding.direction == "forward"
    suite = f"torch's {cov.backend} test suite"
    if dtype in cov.unsupported_dtypes():
        return replace(
            finding,
            outcome="fails",
            fix=f"use float32 (or bfloat16): {cov.backend} has no {dtype}",
            why=f"{cov.backend} has no {dtype} tensors ({suite} expects every op to fail in {dtype})",
        )
    if finding.outcome not in ("ok", "fallback"):
        return finding
    notes = (rec.get("xfail") or {}) if forward else {}
    why = notes.get(dtype) or notes.get("all")
    if why:
        return replace(
            finding,
            outcome="fails",
            why=f"{suite} expects it to fail in {dtype} ({why}); declared kernel: {finding.why}",
        )
    doubt = rec.get("doubt" if forward else "bwd_doubt") or {}
    why = doubt.get(dtype) or doubt.get("all")
    return replace(finding, why=f"{finding.why}; {suite} lists it in {dtype}: {why}") if why else finding


@dataclass(frozen=True, slots=True)
class _Req:
    """One requirement with what every evidence source reads of it: the op's probe cells by dtype, the
    slot of this dtype and direction (None where the probe has none), and the probed file's path."""

    op: str
    dtype: str
    direction: str
    torch_version: str
    shapes: tuple
    model: str
    reads: frozenset | None
    returns: frozenset | None  # the outputs the model returns to its caller; None or empty: none known
    cells: dict
    slot: ProbedSlot | None
    src: str


def _requirement(cov: Coverage, args: tuple) -> _Req:
    """``args`` (op, dtype, direction, torch_version, shapes, model, reads: ``judge_requirement``'s) with
    the op's probe cells and the slot they hold for it."""
    op, dtype, direction = args[0], args[1], args[2]
    cells = cov.cells(op)
    cell = cells.get(dtype)
    slot = cell.slot(direction) if cell else None
    torch_version, shapes, model, reads, returns = args[3:]
    return _Req(
        op,
        dtype,
        direction,
        torch_version,
        shapes,
        model,
        reads,
        returns,
        cells,
        slot,
        cov.paths[-1] if cov.probed else "",
    )


def _ranked(cov: Coverage, req: _Req) -> Finding:
    """The finding of the strongest evidence source that has one (``SOURCES``, strongest first): the
    model's own calls replayed, probe cases of its calls' signature class, the probe cell's status, and
    last the static document (a registered scan or declared data), which always answers."""
    for source in SOURCES:
        found = source(cov, req)
        if found is not None:
            if found.evidence == "probed" and found.outcome == "unknown":
                return _no_kernel(cov, req, found)
            if found.evidence == "probed" and found.outcome == "ok" and source is not _from_own_calls:
                return _fallback_registered(cov, req, found)
            if found.outcome == VALUE_NOTE:
                return _complex_for_real(req, found)
            return found
    raise AssertionError("the static document always answers")  # pragma: no cover


# A probe's text for an output the device gives as complex where CPU gives a real dtype (opcov.probe.compare).
_COMPLEX_FOR_REAL = re.compile(r"outputs?(?: [0-9]+)?: dtype complex[0-9]+, cpu gives (?:float|bfloat)[0-9]+")


def _complex_for_real(req: _Req, found: Finding) -> Finding:
    """A value note where the device returns a complex output for a complex input and CPU a real one (PyTorch/XLA's
    ``abs`` of a spectrum), on a call whose input requires grad: autograd refuses an op's complex output where its
    formula is for a real one ('abs does not support automatic differentiation for outputs with complex dtype'),
    so the training step raises at that call. Without grad the consumer gets a complex tensor: a value note."""
    slot = req.slot
    grad = any(str(c).startswith("complex") and "!rg" in str(c).split(";")[0] for c in req.shapes)
    if req.direction != "forward" or slot is None or not grad or not _COMPLEX_FOR_REAL.match(str(slot.why or "")):
        return found
    why = (
        f"{req.direction} raises with grad in {req.dtype}: on a probe case like this model's calls the output is complex "
        f"where CPU's is real ({slot.why}; case {slot.case}), and autograd refuses a complex output for a real formula"
    )
    return replace(found, outcome="fails", why=why)


def _fallback_registered(cov: Coverage, req: _Req, found: Finding) -> Finding:
    """A probe pass that no case of the call's own class shows (the cell keeps no ``ran`` list, or one without
    the call's class) where the backend registers the overload itself to its CPU fallback (``fwd: fallback``,
    not a composite whose path depends on its arguments): the dispatcher sends every call there, so passes
    the probe counted under the overload ran another path (PyTorch/XLA's ``_ctc_loss.Tensor``, reached only
    through OpInfo's ``ctc_loss`` with list lengths; ``grid_sampler_2d_backward``). A case of the call's class
    that ran clean outranks the registration."""
    rec = (cov.registered or {}).get("ops", {}).get(req.op) or {}
    if rec.get("fwd") != "fallback" or signature.shown_ran(req.slot, req.shapes):
        return found
    static = _from_static(cov, req)
    if static.outcome != "fallback":
        return found
    return replace(static, why=f"{static.why}; no probe case of this model's arguments ran clean ({found.why})")


def _no_kernel(cov: Coverage, req: _Req, found: Finding) -> Finding:
    """A probe that left the call unknown (no case had its arguments) where the static document says the backend
    registers no kernel at all, only its CPU fallback: then every argument falls back, and that finding stands
    (PyTorch/XLA's multi_margin_loss, grid_sampler_3d: every probe case fell back, none with the model's
    arguments). A backend with a kernel stays unknown: which arguments it takes is what the probe found."""
    static = _from_static(cov, req)
    if static is None or static.outcome != "fallback":
        return found
    return replace(static, why=f"{static.why}; no probe case had this model's arguments ({found.why})")


def _ran(req: _Req) -> ProbedSlot | None:
    """The slot, where the probe has a status for it other than skipped."""
    slot = req.slot
    return slot if slot is not None and slot.status and slot.status != "skipped" else None


def _from_own_calls(cov: Coverage, req: _Req) -> Finding | None:
    """The model's own calls replayed on the device (the probe cell's ``trace.<model>`` cases).

    ======================================  ==========================================
    replayed calls                          finding
    ======================================  ==========================================
    none of this model's, or no status      None: a weaker source decides
    mismatch only on outputs never read     ok, with a note (``_unread_finding``); where this
                                            model's item was cut from a ``classes_whole`` list,
                                            every mismatch named must be on unread outputs
    mismatch of a dtype only (each of its   ok, with a note (values equal, the dtype differs)
    items tagged values=equal)
    any other                               ``_judge_own``: ok, value note, fallback, fails
    ======================================  ==========================================
    """
    slot = _ran(req)
    own = signature.own_calls(slot, req.model, req.shapes) if slot else None
    if slot is None or own is None:
        return None
    if own[0] == "mismatch":
        prefix = f"trace.{req.model}|"
        mine = lambda s, c: s == "mismatch" and c.startswith(prefix)  # noqa: E731
        if slot.classes_whole and not signature.listed(slot, mine):
            # this model's item was cut from the list, but its class is one of those named (classes_whole)
            mine = lambda s, c: s == "mismatch"  # noqa: E731
        off = signature.all_unread(slot, req.reads, mine)
        if off is not None:
            where, fell = "this model's own calls, replayed", signature.fell_back(slot, mine)
            return _unread_finding(req.direction, req.dtype, slot, off, where, req.src, fell)
        if signature.all_values_equal(slot, mine) and not signature.fell_back(slot, mine):
            if _returned(req):
                return _dtype_returned(req, f"{own[1]}, this model's own call replayed")
            return _judge_own(req.direction, req.dtype, own, slot, req.model, req.src, dtype_only=True)
    return _judge_own(req.direction, req.dtype, own, slot, req.model, req.src)


def _from_call_classes(cov: Coverage, req: _Req) -> Finding | None:
    """Probe cases that keep their signature class, matched with the classes of the model's calls
    (``signature.by_class``).

    ======================================  ==========================================
    cases of the calls' classes             finding
    ======================================  ==========================================
    none kept, or no status                 None: a weaker source decides
    pass, but a call's class never ran      unknown (other arguments than this model's)
    any other                               ``_judge_by_class``
    ======================================  ==========================================
    """
    slot = _ran(req)
    tags = ((cov.registered or {}).get("ops", {}).get(req.op) or {}).get("tags") or ()
    judged = (
        signature.by_class(slot, req.shapes, req.reads, dtype_note=not _returned(req), pointwise="pointwise" in tags)
        if slot
        else None
    )
    if slot is None or judged is None:
        return None
    if judged[0] == "mismatch" and _returned(req) and signature.all_values_equal(slot, lambda s, c: s == "mismatch"):
        return _dtype_returned(req, judged[1])
    if judged[0] == "pass" and _uncovered(slot, req):
        judged = ("unknown", "", f"{judged[2]}; the cases that ran had other arguments than this model's")
    return _judge_by_class(req.direction, req.dtype, slot, judged, req.op, req.src)


def _uncovered(slot, req: _Req) -> tuple:
    """The model's forward calls whose class no passing case of the slot ran with (signature.uncovered). Not for
    the backward: a backward slot's classes are its forward call's, a stand-in, while the backward kernels the
    call's backward runs are in the op set's backward phase with their own classes, judged there (an embedding's
    backward with a padding row is embedding_dense_backward's call, which the model's replay ran)."""
    return signature.uncovered(slot, req.shapes, req.reads) if req.direction == "forward" else ()


def _from_probe_status(cov: Coverage, req: _Req) -> Finding | None:
    """The probe cell's status (its worst case), where no case was matched with the model's calls.

    ======================================  ==========================================
    status                                  finding
    ======================================  ==========================================
    none, or skipped                        None: the static document decides
    mismatch only on outputs never read     ok, with a note (``_unread_finding``)
    ran, never with this model's arguments  unknown (unverified for these arguments)
    pass, pass_low_precision, ...           ok (low precision: the fix names the setting)
    fallback (an op ran through the CPU's)  fallback
    mismatch of an output's dtype only      ok, with a note
    mismatch                                value note (runs; values may differ)
    a failure                               ``_probe_failure``: fails, or unknown
    ======================================  ==========================================
    """
    slot = _ran(req)
    if slot is None:
        return None
    status, direction, dtype, src = str(slot.status), req.direction, req.dtype, req.src
    if status == "mismatch":
        off = signature.all_unread(slot, req.reads)
        if off is not None:
            fell = signature.fell_back(slot, lambda s, c: s == "mismatch")
            return _unread_finding(direction, dtype, slot, off, "every probe case that differs", src, fell)
    err, why_line = _err_text(slot.err), f": {slot.why}" if slot.why else ""
    case = "?" if slot.case is None else slot.case
    missed = _uncovered(slot, req) if status in PROBED_OK else ()
    if missed:  # passed, but never with this model's arguments: unverified for them
        return Finding(
            direction,
            dtype,
            "unknown",
            "probed",
            f"{direction} {PROBED_OK[status]} in {dtype} only with other arguments than this model's "
            f"({missed[0]}); unverified for these arguments: replay the model's own calls (opcov check --replay)",
            src,
        )
    if status in PROBED_OK:
        return Finding(direction, dtype, "ok", "probed", f"{PROBED_OK[status]}{err}", src, _low_precision_fix(slot))
    if status == "fallback":  # ran on the device, with an op through its CPU fallback (probe.xla)
        said = f"{direction} {vocab.PROBED[status].label} in {dtype}{why_line}"
        return Finding(direction, dtype, "fallback", "probed", said, src)
    if status == "mismatch" and signature.dtype_only(slot.why) and _returned(req):
        return _dtype_returned(req, case)
    if status == "mismatch" and signature.dtype_only(slot.why):  # same values, another dtype: a note
        return Finding(
            direction,
            dtype,
            "ok",
            "probed",
            f"{direction} runs in {dtype}; an output's dtype differs from CPU's, its values do not "
            f"({slot.why}; case {case}): only a consumer that relies on CPU's dtype would see it",
            src,
        )
    if status == "mismatch":  # ran, values (or shape or dtype) differ: the model runs, its results may differ
        cases, fails = slot.cases, slot.fails
        on = f" on {fails} of {cases} probe cases" if isinstance(cases, int) and isinstance(fails, int) else ""
        said = f"{direction} runs; values may differ from CPU in {dtype}{on}{err}{why_line}; case {case}"
        return Finding(direction, dtype, VALUE_NOTE, "probed", said, src)
    if status in PROBED_FAIL:
        return _probe_failure(req, slot, f"{err}{why_line}", case)
    return None


def _low_precision_fix(slot: ProbedSlot) -> str:
    """The fix of a pass: for ``pass_low_precision`` (the usable tier, not the strict one), the setting
    that makes matmuls exact, or a word that the error be checked; '' for any other pass."""
    if slot.status != "pass_low_precision":
        return ""
    if slot.tol in ("low_precision", "usable:matmul"):
        own = "".join(f" ({b.name}: {b.precision_setting})" for b in backends.BUILTIN if b.precision_setting)
        return f"set torch.set_float32_matmul_precision('highest'){own} if the error matters"
    return f"passes the usable tier ({slot.tol}), not CPU's own precision: check that the error is tolerable"


def _probe_failure(req: _Req, slot: ProbedSlot, detail: str, case) -> Finding:
    """A failing probe status (``PROBED_FAIL``) as a finding.

    ======================================  ==========================================
    failing cases                           finding
    ======================================  ==========================================
    every failure not pinned on this op     unknown (the case dispatches other ops too)
    some of the cases, none after a crash   unknown (the model's inputs may be like those)
    all of them                             fails (naming the cases a crash cut off)
    ======================================  ==========================================

    In float16, where bfloat16 passes, the fix says to use bfloat16."""
    direction, dtype, status, src = req.direction, req.dtype, str(slot.status), req.src
    fix = ""
    if dtype == "float16":
        other = req.cells.get("bfloat16")
        if other and other.slot(direction).status in ("pass", "pass_low_precision"):
            fix = "use bfloat16 instead of float16 (it passes; no GradScaler needed)"
    cases, fails = slot.cases, slot.fails
    if isinstance(fails, int) and fails and slot.unpinned == fails:
        return Finding(
            direction,
            dtype,
            "unknown",
            "probed",
            f"{direction} fails in {fails} probe case(s) in {dtype} that dispatch other ops "
            f"too, and the failure could not be pinned on this one ({PROBED_FAIL[status]}{detail}; case {case})",
            src,
            fix,
        )
    if isinstance(cases, int) and isinstance(fails, int) and 0 < fails < cases and not slot.after_crash:
        # Some probe inputs fail, others pass: whether this model's inputs are among the
        # failing ones is not something the op set tells (the case id names the input).
        return Finding(
            direction,
            dtype,
            "unknown",
            "probed",
            f"{direction} fails on {fails} of {cases} probe cases in {dtype} (worst: "
            f"{PROBED_FAIL[status]}{detail}; case {case}): the model's own inputs may or may not be like those",
            src,
            fix,
        )
    cut = f" ({slot.after_crash} later case(s) not run after it)" if slot.after_crash else ""
    return Finding(
        direction, dtype, "fails", "probed", f"{direction} {PROBED_FAIL[status]} in {dtype}{detail}{cut}", src, fix
    )


_REGISTERED_WHAT = {
    "kernel": "own kernel",
    "out_variant": "kernel via its .out variant",
    "composite": "composite of registered ops",
    "backend_kernel": "backend autograd kernel",
    "formula": "derivative formula over registered ops",
    "none": "not differentiable",
    "not_applicable": "needs no kernel",
}


def _from_static(cov: Coverage, req: _Req) -> Finding:
    """The static document: a registered scan (a claim, dtype-blind), or declared data in its place.

    ======================================  ==========================================
    the op's record (res)                   finding (at the document's evidence level)
    ======================================  ==========================================
    no record                               ``_not_in_data``: unknown, or not judged
    backward                                ``_judge_backward_path``
    registered, not_applicable              ok, naming the path
    fallback                                ``_static_fallback``: fallback, or fails
    missing                                 fails (no kernel, no derivative, backward lost)
    unresolved, or any other                unknown (path not resolved by the scan)
    ======================================  ==========================================

    Where the probe skipped the op or has no cell in the dtype, the finding says so."""
    op, dtype, direction = req.op, req.dtype, req.direction
    rec = (cov.registered or {}).get("ops", {}).get(op)
    reg_src = cov.paths[0] if cov.registered else ""
    level, claim = cov.static, vocab.evidence_word(cov.static).label  # registered, or declared
    note = ""
    in_probe = isinstance((cov.probed or {}).get("ops", {}).get(op), dict)  # probed, or skipped by the probe
    if (req.slot is not None and req.slot.status == "skipped") or (in_probe and dtype not in req.cells and cov.probed):
        note = f"; no probe evidence in {dtype}"
    if rec is None:
        return _not_in_data(cov, req, level, reg_src)
    key = "fwd" if direction == "forward" else "bwd"
    path = rec.get(key)
    if key == "bwd":
        return _judge_backward_path(cov, path, dtype, note, reg_src)
    res = rec.get("res")
    if res == "fallback" and level == "declared":  # a source's registration, not one read from a binary
        note += f"; the boxed fallback as {cov.backend}'s source registers it"
    if res == "registered" or res == "not_applicable":
        what = _REGISTERED_WHAT.get(path, path)
        return Finding(direction, dtype, "ok", level, f"{what} ({claim}){note}", reg_src)
    if res == "fallback":
        return _static_fallback(cov, req, level, note, reg_src)
    if res == "missing":
        why = (
            "derivative not implemented"
            if path == "not_implemented"
            else "backward lost: the backend overrides the op without an autograd kernel"
            if path == "lost"
            else "no kernel"
        )
        return Finding(direction, dtype, "fails", level, f"{why}{note}", reg_src)
    via = rec.get("via" if key == "fwd" else "bwd_via") or []
    raw = str(rec.get("why") or "")  # the scan's own record: its exception stays in the JSON's detail
    reason = vocab.reach_words(raw, direction) or (f"reaches {', '.join(via[:3])}" if via else "path not resolved")
    said = f"{direction} path not resolved by the scan ({reason}){note}"
    return Finding(direction, dtype, "unknown", level, said, reg_src, detail=raw)


def _not_in_data(cov: Coverage, req: _Req, level: str, reg_src: str) -> Finding:
    """An op the static document has no record of.

    ======================================  ==========================================
    why                                     finding
    ======================================  ==========================================
    no static document at all               unknown (no data)
    outside aten::                          not judged (no torch version covers it)
    the data's torch is another             unknown (versions differ; the op may not exist)
    declared data                           unknown (nothing declares it)
    any other                               unknown (not in the coverage data)
    ======================================  ==========================================
    """
    op, dtype, direction, torch_version = req.op, req.dtype, req.direction, req.torch_version
    if cov.registered is None:
        return Finding(direction, dtype, "unknown", "none", f"no registered data and no probe of this op in {dtype}")
    if not op.startswith("aten::"):  # no torch version covers them: not judged, whatever the versions
        said = f"{op.split('::')[0]}:: ops are not covered by the {cov.backend} data"
        return Finding(direction, dtype, NOT_JUDGED, "none", said, reg_src)
    if not layout.same_torch(cov.torch, torch_version):
        where = (
            f"{NOT_IN_TORCH}{cov.torch}, the torch of the {cov.backend} data (a registered scan covers "
            "every op its torch defines)"
            if level == "registered" and op.startswith("aten::")
            else f"not in the {cov.backend} data for torch {cov.torch}"
        )
        said = f"{where}; the op set was traced with torch {torch_version}: versions differ"
        return Finding(direction, dtype, "unknown", "none", said, reg_src)
    if level == "declared":
        return Finding(
            direction,
            dtype,
            "unknown",
            "none",
            f"not in the declared {cov.backend} data: outside native_functions.yaml with no "
            f"composite kernel, nothing declares what {cov.backend} does with it",
            reg_src,
        )
    return Finding(direction, dtype, "unknown", "none", "not in the coverage data", reg_src)


def _static_fallback(cov: Coverage, req: _Req, level: str, note: str, reg_src: str) -> Finding:
    """An op only the backend's boxed fallback catches (``Coverage.fallback``: its kind, and whether enabled).

    ======================================  ==========================================
    fallback                                finding
    ======================================  ==========================================
    CPU, enabled, and CPU has no kernel     fails
    CPU, enabled                            fallback (runs on the CPU, slowly)
    any other                               fails (CPU, disabled: the fix switches it on)
    ======================================  ==========================================
    """
    direction, dtype = req.direction, req.dtype
    kind, enabled = cov.fallback()
    cpu_rec = (cov.cpu or {}).get("ops", {}).get(req.op)
    if kind == "cpu" and enabled and cpu_rec and cpu_rec.get("res") == "missing":
        said = f"only the CPU fallback catches it, and CPU has no kernel for it either{note}"
        return Finding(direction, dtype, "fails", level, said, reg_src)
    if kind == "cpu" and enabled:
        said = f"only the CPU fallback runs it (enabled: runs on the CPU, slowly){note}"
        return Finding(direction, dtype, "fallback", level, said, reg_src)
    return Finding(
        direction,
        dtype,
        "fails",
        level,
        f"no kernel; only the backend fallback ({kind}, {'enabled' if enabled else 'disabled'}) catches it{note}",
        reg_src,
        _fix_fallback(cov.backend) if kind == "cpu" and not enabled else "",
    )


def _from_patch_above(cov: Coverage, req: _Req) -> Finding | None:
    """A call the backend's Python patch takes before the dispatcher and raises on (its record's
    ``raises_above``, resolve.raised_above: torch_xla's nn.GRU on a PackedSequence): fails, at the declared
    level (read from the backend's source, not run), whatever the dispatcher's kernels would do. Else None."""
    why = resolve.raised_above(cov.backend, req.op)
    if not why:
        return None
    src = f"opcov.backends: the {cov.backend} record's raises_above"
    return Finding(req.direction, req.dtype, "fails", "declared", f"raises above the dispatcher: {why}", src)


SOURCES = (_from_patch_above, _from_own_calls, _from_call_classes, _from_probe_status, _from_static)  # strongest first


def _unread_finding(
    direction: str, dtype: str, slot, outs: frozenset, where: str, src: str, fell: tuple = ()
) -> Finding:
    """A value mismatch only on outputs that no call of the model reads: the model runs, and what it uses
    is not what differs, so it is a note in an ``ok`` finding, not a value note; where those cases ran
    ops through the CPU fallback (``fell``: CTC loss, an embedding bag), a ``fallback`` finding naming them."""
    why = f": {slot.why}" if slot.why else ""
    unread = (
        f"values differ from CPU only in {signature.unread_text(outs)} ({where}{why}), which this model never reads"
    )
    if fell:
        said = f"{direction} runs only through the CPU fallback ({', '.join(fell)}); its {unread}"
        return Finding(direction, dtype, "fallback", "probed", said, src)
    return Finding(direction, dtype, "ok", "probed", f"{direction} runs; {unread}", src)


def _returned(req: _Req) -> bool:
    """Whether the model returns some output of the call to its caller (False where the op set does not
    record it: a difference of a dtype alone is then a note, as where only the model's own ops consume it)."""
    return bool(req.returns)


def _dtype_returned(req: _Req, case: str) -> Finding:
    """A difference of an output's dtype alone on a call whose output the model returns: its caller receives
    another dtype than CPU's (a value note; where only the model's own ops consume it, a note)."""
    said = f"values equal CPU's but an output's dtype differs (case {case}), and this model returns that output to its caller"
    return Finding(req.direction, req.dtype, VALUE_NOTE, "probed", f"{req.direction} runs; {said}", req.src)


def _judge_own(
    direction: str, dtype: str, own: tuple, slot, model: str, src: str, *, dtype_only: bool = False
) -> Finding:
    """A requirement judged from the model's own calls, replayed on the device (``trace.<model>`` cases):
    the strongest probed evidence for that model, preferred over OpInfo's cases. ``dtype_only``: each of
    its mismatching items is tagged a dtype-only difference (``signature.all_values_equal``)."""
    status, case, why = own
    said = f"{direction} on this model's own calls, replayed"
    detail = f"{': ' + why if why else ''}{'; case ' + case if case else ''}"
    if status in PROBED_OK:
        return Finding(direction, dtype, "ok", "probed", f"{PROBED_OK[status]} ({said})", src)
    if status == "mismatch" and (dtype_only or signature.dtype_only(why)):  # the same values, another dtype
        return Finding(
            direction,
            dtype,
            "ok",
            "probed",
            f"runs; an output's dtype differs from CPU's, its values do not ({said}){detail}: only a "
            "consumer that relies on CPU's dtype would see it",
            src,
        )
    if status == "mismatch":
        return Finding(
            direction, dtype, VALUE_NOTE, "probed", f"runs; values may differ from CPU in {dtype} ({said}){detail}", src
        )
    if status == "fallback":
        return Finding(
            direction, dtype, "fallback", "probed", f"runs only through the CPU fallback ({said}){detail}", src
        )
    return Finding(direction, dtype, "fails", "probed", f"{PROBED_FAIL.get(status, status)} ({said}){detail}", src)


def _fell_alike(status: str, slot, case: str, op: str) -> str:
    """For a fallback found on a case other than the cell's representative: the ops the backend's fallback
    counters named for that one, where it is a sample of the same source (OpInfo) and every failing case of the
    cell fell back (``mvlgamma`` falls back through ``lgamma``, ``cholesky_solve`` through
    ``_cholesky_solve_helper``), so that a verdict names the ops that fall back, not only the op the model called.
    Where they include the op itself, the others are that sample's own other calls: nothing is added."""
    failed = slot.failed or ()
    if status != "fallback" or slot.status != "fallback" or not slot.why or not failed or not slot.case:
        return ""
    if slot.case.split("|")[0] != str(case).split("|")[0]:
        return ""
    if not all(str(item).startswith("fallback ") for item in failed):
        return ""
    if f"{op}," in slot.why or f"{op})" in slot.why:  # the op fell back itself: the others are that case's own calls
        return ""
    return f" (as every failing case of this op here: case {slot.case} {slot.why})"


def _judge_by_class(direction: str, dtype: str, slot, judged: tuple, op: str, src: str) -> Finding:
    """A probe cell whose failing cases keep their signature class: only those of the class of the model's
    calls count against it (``signature.by_class``)."""
    status, case, note = judged
    if status in PROBED_OK:
        return Finding(direction, dtype, "ok", "probed", f"{PROBED_OK[status]}; {note}", src)
    if status == "unknown":
        return Finding(direction, dtype, "unknown", "probed", note, src)
    why = f": {slot.why}" if slot.why and case == slot.case else _fell_alike(status, slot, case, op)
    if status == "mismatch":
        return Finding(
            direction,
            dtype,
            VALUE_NOTE,
            "probed",
            f"{direction} runs; values may differ from CPU in {dtype} on a probe case like this model's calls"
            f"{why}; case {case}",
            src,
        )
    if status == "fallback":
        return Finding(
            direction,
            dtype,
            "fallback",
            "probed",
            f"{direction} {vocab.PROBED[status].label} in {dtype} on a probe case like this model's calls{why}; "
            f"case {case}{'; ' + note if note else ''}",
            src,
        )
    if slot.unpinned and slot.unpinned == slot.fails:
        return Finding(
            direction,
            dtype,
            "unknown",
            "probed",
            f"{direction} fails on a probe case in {dtype} like this model's calls that dispatches other ops too, "
            f"and the failure could not be pinned on this one ({PROBED_FAIL.get(status, status)}{why}; case {case})",
            src,
        )
    return Finding(
        direction,
        dtype,
        "fails",
        "probed",
        f"{direction} {PROBED_FAIL.get(status, status)} in {dtype} on a probe case like this model's calls{why}; "
        f"case {case}",
        src,
    )


# A composite op the backend overrides without an autograd kernel ('lost'): PyTorch's autograd fallback (mode
# 'warn') differentiates through whatever differentiable ops the backend's kernel calls, so its backward may run,
# give wrong values or raise, which no registration shows. Measured on PyTorch/XLA 2.9's CPU client: kl_div,
# std, cross, diag and inverse gave CPU's gradients; selu's gradient differed; logdet's backward raised.
LOST = (
    "backward not shown by the registrations: the backend overrides this composite op without an autograd "
    "kernel, so its gradient is whatever the ops its kernel calls give (it may run, differ or raise); "
    "a probe of the backward decides"
)


def _judge_backward_path(cov: Coverage, path: str, dtype: str, note: str, src: str) -> Finding:
    """Whether autograd has a way back through the op on this backend.

    The ops that way runs are not judged here: a traced op set lists them in its
    backward phase, where each is judged as a forward kernel like any other call.
    """
    level, claim = cov.static, vocab.evidence_word(cov.static).label
    if path == "not_implemented":
        return Finding("backward", dtype, "fails", level, f"derivative not implemented{note}", src)
    if path == "lost":
        return Finding("backward", dtype, "unknown", level, LOST + note, src)
    what = {
        "backend_kernel": "the backend's autograd kernel",
        "formula": "derivative formula",
        "composite": "differentiated through its composite",
        "none": "not differentiable",
        "not_applicable": "needs no kernel",
    }.get(path, str(path))
    return Finding(
        "backward", dtype, "ok", level, f"{what} ({claim}; the ops it runs are judged in the backward phase){note}", src
    )


def requirements(calls, training: bool) -> list[tuple]:
    """Per op, in the order the calls first name it: (op, calls, phases, dtypes (frozensets, as an OpResult
    holds them), [(dtype, direction, shapes, reads, returns)]): what ``judge`` judges of resolved ``calls``,
    each requirement once, in call order, with the shapes of its calls (their signature class: a probe finding
    counts only against calls of its class) and, for the forward, the outputs any of them had read (``reads=``;
    None where a call did not record it: a value mismatch on an output no call reads is a note) and those the
    model returns to its caller (``returns=``; none where the op set does not record them: a dtype-only
    difference is then a note). Backends that resolve an op set alike share this (resolve.Resolved.shared): only the findings differ."""
    out: dict = {}
    seen: dict = {}  # (op, direction, dtype) -> the calls' shapes, as an ordered set
    read: dict = {}  # (op, dtype) -> the outputs the forward calls read (None: one did not record it)
    back: dict = {}  # (op, dtype) -> the outputs the model returns
    calls = tuple(calls)
    held = frozenset(call.dtype for call in calls)  # a conversion's target is one of these (sigclass.to=)
    for call in calls:
        op, phase, dtype = call.op, call.phase, call.dtype
        classes = signature.call_classes(call)
        if op.split("::", 1)[-1].split(".", 1)[0] in CONVERSIONS:
            classes = tuple(with_targets(c, held) if signature.is_class(c) else c for c in classes)
        entry = out.get(op)
        if entry is None:
            entry = out[op] = [op, 0, {}, {}, []]
        entry[1] += call.calls
        entry[2][phase] = None  # dicts as ordered sets: the sets judge makes from them fill alike
        entry[3][dtype] = None
        key = (op, "forward", dtype)
        shapes = seen.get(key)
        if shapes is None:
            shapes = seen[key] = {}
            entry[4].append(key)
            read[op, dtype] = frozenset()
            back[op, dtype] = frozenset()
        shapes.update(dict.fromkeys(classes))
        if getattr(call, "returns", None):
            back[op, dtype] = back[op, dtype].union(call.returns)
        reads = getattr(call, "reads", None)  # a schema 1 op set's opset.Call records none
        was = read[op, dtype]
        read[op, dtype] = None if reads is None or was is None else was.union(reads)
        if training and phase == "forward" and call.grad:
            key = (op, "backward", dtype)
            shapes = seen.get(key)
            if shapes is None:
                shapes = seen[key] = {}
                entry[4].append(key)
            shapes.update(dict.fromkeys(classes))
    return [
        (
            op,
            n,
            _frozen(tuple(phases)),
            _frozen(tuple(dtypes)),
            tuple(
                [
                    (
                        k[2],
                        k[1],
                        tuple(seen[k]),
                        *((read[op, k[2]], back[op, k[2]]) if k[1] == "forward" else (None, None)),
                    )
                    for k in reqs
                ]
            ),
        )
        for op, n, phases, dtypes, reqs in out.values()
    ]


HOST_SYNC_FLAG = (
    "may force a host sync (tagged dynamic_output_shape or data_dependent_output, "
    "or reads a value to the host): stalls a deferred-execution device"
)


def _judge_op(cov: Coverage, op: str, reqs: tuple, fake: bool, torch_version: str, model: str = "") -> tuple:
    """(findings, flags, outcome, evidence, outcome's rank) of one op's requirements ``reqs`` on ``cov``:
    pure in the Coverage's documents and paths and in the arguments, so memoized with the requirements
    where the Coverage was ``share``d (an op of a zoo is judged alike in hundreds of op sets)."""
    r = OpResult(
        op,
        findings=[
            judge_requirement(
                cov, op, dtype, direction, torch_version, shapes=shapes, model=model, reads=reads, returns=returns
            )
            for dtype, direction, shapes, reads, returns in reqs
        ],
    )
    rec = (cov.registered or {}).get("ops", {}).get(op) or {}
    if op in HOST_SYNC_OPS or (not fake and not _HOST_SYNC_TAGS.isdisjoint(rec.get("tags", ()))):
        r.flags.append(HOST_SYNC_FLAG)
    if _ATTENTION.search(op):
        r.findings = [
            replace(f, fix="try another attn_implementation (e.g. 'eager')")
            if f.outcome in ("fails", "unknown") and not f.fix
            else f
            for f in r.findings
        ]
    return tuple(r.findings), tuple(r.flags), r.outcome, r.evidence, _OUTCOME_RANK.get(r.outcome, len(OUTCOMES))


def _relevant(cov: Coverage, op: str, reqs: tuple, model: str) -> tuple:
    """(reqs, model) with the calls' shapes kept only where the op's probe cell keeps failing cases with
    their classes, the outputs they read only where a failing case names the outputs it differs on, and
    the model only where the cell has its own replayed calls: what else judges a
    requirement does not depend on them, so an op is judged once for all the op sets that need it alike
    (a zoo judged on every backend shares most judgments). Worked out once per op and requirements
    where the Coverage was ``share``d (the zoo's op sets need most ops alike)."""
    kept = cov._relevant_memo
    found = kept.get((op, reqs)) if kept is not None else None
    if found is None:
        found = _reduced(cov.cells(op), reqs)
        if kept is not None:
            kept[(op, reqs)] = found
    out, replayed = found
    return out, model if model and model in replayed else ""


def _reduced(cells: dict, reqs: tuple) -> tuple:
    """(_relevant's reqs, the models with their own replayed calls in a cell that ``reqs`` reach)."""
    if not cells:
        return tuple(
            (dtype, direction, layouts.special(shapes), None, None) for dtype, direction, shapes, _, _ in reqs
        ), ()
    out: list = []
    replayed: set[str] = set()
    for dtype, direction, shapes, reads, returns in reqs:
        cell = cells.get(dtype)
        slot = cell.slot(direction) if cell else None
        if slot is None or not (slot.failed or slot.ran):
            shapes = layouts.special(shapes)  # a sparse or quantized call is judged by its layout's key
        if slot is None or not any(" out=" in str(t) for t in slot.failed or ()):
            reads = None  # no mismatch names its outputs: what the calls read changes nothing
        if slot is None or not (
            any(signature.failed_values_equal(t) for t in slot.failed or ())
            or signature.dtype_only(str(slot.why or ""))
        ):
            returns = None  # no difference of a dtype alone: what the caller receives changes nothing
        if slot is not None and isinstance(slot.traced, dict):
            replayed.update(slot.traced)
        out.append((dtype, direction, shapes, reads, returns))
    return tuple(out), frozenset(replayed)


@functools.lru_cache(maxsize=4096)
def _frozen(names: tuple) -> frozenset:
    """The frozenset of a requirement's phases or dtypes, one object per tuple: a zoo's ~650k op
    results share a few hundred, where a set each was a third of the objects judging made."""
    return frozenset(names)


def judge(doc: dict, cov: Coverage) -> BackendVerdict:
    """The verdict of one op set (one mode) on one backend."""
    torch_version = opset_torch(doc)
    training = doc.get("mode") == "training"
    resolved = resolve.resolve(doc, cov)  # the calls the backend's dispatcher really makes
    wanted = resolved.shared.get(training) if resolved.shared is not None else None
    if wanted is None:
        wanted = requirements(resolved.calls, training)
        if resolved.shared is not None:
            resolved.shared[training] = wanted
    # A fake-tensor trace (no ShapeEnv) raises on a data-dependent shape or value, so an op it
    # recorded ran with static shapes there (index.Tensor with integer indices, not a bool mask):
    # its tag alone is no reason to flag it. Real-tensor traces can hide either.
    fake = (doc.get("provenance") or {}).get("tracing") == "fake"
    memo = cov._judged
    model = str((doc.get("model") or {}).get("name") or "")
    ops: list = []  # (sort key, OpResult, outcome, evidence) rows, then the OpResults in order
    for op, calls, phases, dtypes, reqs in wanted:
        reqs, who = _relevant(cov, op, reqs, model)
        key = (op, reqs, fake, torch_version, who)  # never a requirement's key: reqs is a tuple, a dtype a str
        judged = memo.get(key) if memo is not None else None
        if judged is None:
            judged = _judge_op(cov, op, reqs, fake, torch_version, who)
            if memo is not None:
                memo[key] = judged
        findings, flags, outcome, evidence, rank = judged
        r = OpResult(op, calls, phases, dtypes, list(findings), list(flags))
        r._memo = (r.findings, len(findings), outcome, evidence)  # _judge_op summarized these findings
        ops.append(((rank, -calls, op), r, outcome, evidence))
    ops.sort(key=lambda row: row[0])
    worst, evidence = _summarize([(o, e) for _, _, o, e in ops])
    ops = [r for _, r, _, _ in ops]
    notes = ["eager mode: the torch.compile path is not judged"]
    if not layout.same_torch(cov.torch, torch_version):
        notes.append(
            f"the {cov.backend} data is for torch {cov.torch}; the op set was traced with torch "
            f"{torch_version}: ops that differ between versions come out unknown"
        )
    if cov.probed is None and cov.static == "declared":
        notes.append(
            f"no probe data and no registered scan for {cov.backend}: declared evidence only (what "
            f"native_functions.yaml and torch's test lists say; no {cov.backend} build was read)"
        )
    elif cov.probed is None:
        notes.append(f"no probe data for {cov.backend}: registered evidence only (a claim, dtype-blind)")
    else:
        notes.extend(n for n in cov.probed["provenance"].get("notes", ()) if "self-test" in n)
    notes.extend(resolved.notes + cov.notes)
    return BackendVerdict(
        cov.backend, doc.get("mode", "?"), VERDICTS.get(worst, "runs"), evidence, ops, cov.paths, notes
    )


def judge_calls(calls, cov: Coverage, mode: str, torch_version: str, model: str = "") -> BackendVerdict:
    """Resolved ``calls`` (some of an op set's, as ``resolve.resolve`` gives them) judged as forward
    requirements on ``cov``, worst op first, with no notes: evidence a verdict takes beside its own op set's
    (the compile verdict's calls replayed on the device, opcov.verdict.replayed). ``model``: whose own
    replayed calls are preferred."""
    rows = []
    for op, n, phases, dtypes, reqs in requirements(calls, False):
        findings = [
            judge_requirement(
                cov, op, dtype, direction, torch_version, shapes=shapes, model=model, reads=reads, returns=returns
            )
            for dtype, direction, shapes, reads, returns in reqs
        ]
        r = OpResult(op, n, phases, dtypes, findings)
        rows.append(((_OUTCOME_RANK.get(r.outcome, len(OUTCOMES)), -n, op), r))
    rows.sort(key=lambda row: row[0])
    ops = [r for _, r in rows]
    worst, evidence = _summarize([r.judged for r in ops])
    return BackendVerdict(cov.backend, mode, VERDICTS.get(worst, "runs"), evidence, ops, cov.paths, [])


STRICT = ("fallback", "unknown", VALUE_NOTE)  # --strict: --fail-on these
UNCLAIMED = "unclaimed"  # --fail-on unclaimed: an op or dtype needed that the backend's manifest does not claim


def apply_manifest(verdicts, manifest) -> int:
    """Mark the verdicts of ``manifest``'s backend (opcov.probe.manifest): each failing finding says
    whether the backend claims that op and dtype (a bug) or not (a known gap), and ``unclaimed``
    lists every judged (op, dtype) it does not claim; a note counts both. Returns how many verdicts
    were the manifest's backend's."""
    n = 0
    for v in verdicts:
        if v.backend != manifest.backend:
            continue
        n += 1
        v.unclaimed, bugs = [], 0
        for r in v.ops:
            marked = []
            for f in r.findings:
                if f.outcome == NOT_JUDGED:
                    marked.append(f)
                    continue
                claimed = manifest.claimed(r.op, f.dtype)
                if not claimed and (r.op, f.dtype) not in v.unclaimed:
                    v.unclaimed.append((r.op, f.dtype))
                if f.outcome == "fails":
                    bugs += claimed
                    f = replace(
                        f,
                        why=f.why
                        + (
                            "; claimed by the manifest: a bug to report"
                            if claimed
                            else "; not claimed by the manifest: a known gap"
                        ),
                    )
                marked.append(f)
            r.findings = marked
        v.notes.append(
            f"manifest {manifest.path}: {len(v.unclaimed)} needed op/dtype pair(s) not claimed; "
            f"{bugs} failing requirement(s) claimed"
        )
    return n


def fail_on(values) -> set[str]:
    """The outcomes of ``--fail-on`` values, each a comma list ('fallback,unknown') of vocab.PROBLEMS;
    'fails' always. An unknown word is a UsageError."""
    out = {"fails"}
    for value in values:
        for word in filter(None, (w.strip() for w in value.split(","))):
            if word not in vocab.PROBLEMS + (UNCLAIMED,):
                raise UsageError(
                    f"--fail-on: {word!r} is not an outcome; choose from {', '.join(vocab.PROBLEMS + (UNCLAIMED,))}"
                )
            out.add(word)
    return out


_OBSERVED_OUTCOME = {verdict: outcome for outcome, verdict in vocab.VERDICT_OF.items()}


def gate_failures(verdicts, *, outcomes=("fails",), require: str | None = None) -> list[str]:
    """Why the gate fails, one line per verdict that fails it ([] when it passes): an op whose outcome
    is in ``outcomes`` (failing ops always count), or a verdict resting on evidence weaker than
    ``require`` (a level of vocab.EVIDENCE_LEVELS)."""
    bad = {"fails", *outcomes}
    out = []
    for v in verdicts:
        if UNCLAIMED in bad and v.unclaimed is None:
            out.append(f"{v.backend} ({v.mode}): --fail-on unclaimed needs the backend's manifest (--manifest FILE)")
        elif UNCLAIMED in bad and v.unclaimed:
            shown = ", ".join(f"{op} {dt}" for op, dt in v.unclaimed[:5])
            out.append(
                f"{v.backend} ({v.mode}): {len(v.unclaimed)} needed op/dtype pair(s) not claimed by the "
                f"manifest: {shown}" + (", ..." if len(v.unclaimed) > 5 else "")
            )
        if v.no_data:  # nothing to judge from: a gate that asks for evidence or fails on unknown fails here
            if "unknown" in bad or require:
                out.append(f"{v.backend} ({v.mode}): no data yet: {v.no_data}")
            continue
        if v.observed is not None:  # the run decides: the ops' outcomes were a prediction of it
            if _OBSERVED_OUTCOME[v.verdict] in bad:
                out.append(f"{v.backend} ({v.mode}): {v.says()}: {v.observed['saw']}")
            continue
        hit = [(o, sum(r.outcome == o for r in v.ops)) for o in OUTCOMES if o in bad]
        if any(n for _, n in hit):
            out.append(f"{v.backend} ({v.mode}): {v.says()}: " + ", ".join(f"{o} on {n} op(s)" for o, n in hit if n))
        elif require and vocab.weaker(v.evidence, require):
            out.append(
                f"{v.backend} ({v.mode}): {v.says()}: rests on {vocab.evidence_word(v.evidence).short}, "
                f"weaker than the {require} evidence required"
            )
    return out
