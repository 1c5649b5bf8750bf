"""Verdicts on the torch.compile path: a compiled op set judged on a backend's compile coverage.

Why apart from eager: under ``torch.compile`` the backend's compiler, not its dispatcher, takes each op
of the AOT graphs (``opcov.tracing.compiled``), and what it accepts is its compile coverage
(``opcov.scan.compiled``, the compile probe), under coverage/<backend>/compile/. The ops are judged
with judge.py's own rules and words (``judge.judge`` on a ``judge.Coverage`` of the compile data),
so "runs" still needs probed evidence and a registered claim says so.

Graph breaks come first: at each the model runs eagerly, so the ops it runs there are judged on eager
coverage. The compiled op set does not tell which ops those are, so the model's eager op set (a
superset of them) is judged on eager coverage in their place and the verdict is the worse of the two;
a model with breaks and no eager op set is unknown there. Where the compile backend runs each graph node through
the device's eager kernels (openxla, TorchTPU; not Inductor), the model's own calls replayed on the device
that bear on the graphs' nodes count too (opcov.verdict.replayed: slices past their dimension, and calls
the replay saw fail). A model Dynamo could not take to the end
(``compile.outcome: failed``) is unknown, with why; an AOTAutograd failure for the backend's recipe
is a compile error: fails. Torch-free.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field

from opcov import backends, suggest, vocab
from opcov.errors import UsageError
from opcov.store import layout, opset
from opcov.verdict import judge, observed, replayed

# The compile backend whose recipe (decompositions, partitioner) a device's torch.compile uses by default,
# where opcov traces op sets for it (opcov.tracing.compiled.RECIPES).
COMPILE_BACKEND = {b.name: b.compile.backend for b in backends.BUILTIN if b.compile and b.compile.traced}
_OUTCOME_OF = {verdict: outcome for outcome, verdict in vocab.VERDICT_OF.items()}


def _compile_probed(backend: str) -> bool:
    """Whether 'opcov probe BACKEND --path compile' runs it (its record's compile.probed)."""
    record = backends.record(backend)
    return bool(record and record.compile and record.compile.probed)


BREAKS_HEAD = "{n} graph break(s); each runs eagerly: its ops are judged on eager coverage"
REPLAYED_HEAD = "the compiled graphs' calls as {backend}'s eager kernels ran them (this model's calls, replayed)"


@dataclass
class CompiledVerdict:
    """One model, mode and backend on the compile path."""

    backend: str
    mode: str
    path: str  # the compiled op set
    compile_backend: str
    breaks: list  # the op set's graph_breaks records
    graphs: judge.BackendVerdict | None  # judge.BackendVerdict: the compiled graphs' ops on compile coverage
    eager: judge.BackendVerdict | None = None  # judge.BackendVerdict of the eager op set (graph breaks), if any
    # The model's own calls replayed on the device that bear on the compiled graphs' nodes (opcov.verdict.replayed):
    # those with a problem, judged on eager coverage, where the compile backend runs nodes through its eager kernels
    replayed: judge.BackendVerdict | None = None
    outcome: str = "compiled"  # the op set's compile.outcome
    why: str = ""  # why the outcome is not 'compiled', or why a compiled op set leaves the verdict unknown
    notes: list = field(default_factory=list)
    # Modules the backend replaces with its own Python ('torch.nn.GRU by torch_xla.experimental.gru.GRU') that
    # the compiled op set was traced without: what Dynamo makes of that Python is in no op set (unknown).
    replaced: list = field(default_factory=list)
    # An observed compiled run of this model on the backend ('opcov run --path compile'): its record
    # (opcov.verdict.observed.record, with the verdict from the data as ``predicted``), and its verdict,
    # which then decides (evidence 'observed').
    observed: dict | None = None
    observed_verdict: str = ""

    @property
    def verdict(self) -> str:
        if self.observed_verdict:
            return self.observed_verdict
        if self.outcome == "failed":
            return "unknown"
        if self.outcome == "aot_failed":
            return "fails"
        parts = [v.verdict for v in (self.graphs, self.eager, self.replayed) if v is not None]
        if (self.breaks and self.eager is None) or self.replaced:
            parts.append("unknown")
        return min(parts, key=judge.VERDICT_ORDER.index) if parts else "unknown"

    @property
    def evidence(self) -> str:
        if self.observed_verdict:
            return vocab.OBSERVED
        if self.outcome != "compiled":
            return vocab.NO_EVIDENCE.name
        parts = (self.graphs, self.eager, self.replayed)
        judged = [(_OUTCOME_OF.get(v.verdict, "unknown"), v.evidence) for v in parts if v]
        return judge.rests_on(judged)

    def says(self) -> str:
        return vocab.verdict_words(self.verdict, self.evidence)


def compiled_opsets(model: str, backend: str, modes, coverage_dir: str) -> list[tuple[str, dict]]:
    """The compiled op sets to judge ``model`` with on ``backend``: a file (a compiled op set), or the
    zoo's coverage/models/<model>/compile/<compile backend>-<mode>.yaml."""
    if layout.is_yaml(model) and os.path.isfile(model):
        doc = opset.load(model)
        if opset.path_of(doc) != opset.COMPILE:
            raise UsageError(f"{model}: an eager op set; --path compile needs one made by 'opcov trace --path compile'")
        return [(model, doc)] if not modes or doc["mode"] in modes else []
    cb = COMPILE_BACKEND.get(backend)
    if cb is None:
        raise UsageError(
            f"-b {backend}: opcov knows the compile path of {', '.join(COMPILE_BACKEND)} "
            "(its default torch.compile backend); judge an op set file traced for it"
        )
    from opcov.verdict.check import model_folder_of

    named = os.path.isdir(model)  # a folder: a model's, its compile/ subfolder, or one a user filled with --out
    folder = layout.model_folder(model_folder_of(model), coverage_dir)
    found = []
    for path in layout.compiled_opset_files(folder, cb) + (layout.opset_files(folder) if named else []):
        doc = opset.load(path)
        if opset.path_of(doc) != opset.COMPILE or (named and doc["compile"].get("backend") != cb):
            continue  # the model's eager op sets, or another compile backend's op set under any file name
        if not modes or doc["mode"] in modes:
            found.append((path, doc))
    if not found:
        name = os.path.basename(os.path.normpath(folder))
        asked = sorted(set(modes or ()))
        mode_option = f" --mode {asked[0]}" if len(asked) == 1 else ""  # trace's default mode is inference
        raise UsageError(
            f"no compiled op set for {cb} (the compile backend of {backend}) in {folder}/ or its compile/ folder"
            + (f" for mode {', '.join(modes)}" if modes else "")
            + f"; make one with 'opcov trace {name}{mode_option} --path compile --compile-backend {cb}'"
        )
    return found


def compile_coverage(doc: dict, backend: str, coverage_dir: str, *, read=judge.read_ops) -> judge.Coverage:
    """``backend``'s compile coverage for the ops of ``doc`` (coverage/<backend>/compile/); ``read(path,
    names)`` gives a file's document (the site passes the documents it holds)."""
    files = layout.compile_snapshots(coverage_dir, backend)
    torch_version = judge.opset_torch(doc)
    names = judge.needed_ops(doc)
    chosen = {k: layout.pick(files[k], torch_version) for k in ("registered", "probed")}
    if not any(chosen.values()):
        scanned = sorted(b.name for b in backends.known_backends() if b.compile and b.compile.scanned)
        if backend not in scanned:
            raise UsageError(
                f"{backend} has no compile coverage: opcov reads the compile path of {', '.join(scanned)} so far "
                f"(the {COMPILE_BACKEND.get(backend, '?')} op set is there to judge once it has)"
            )
        raise UsageError(
            f"{backend} has no compile coverage under {layout.compile_coverage_dir(backend, coverage_dir)}/; "
            f"make it with 'opcov scan {backend} --path compile'"
            + (f" or 'opcov probe {backend} --path compile'" if _compile_probed(backend) else "")
        )
    docs = {k: read(p, names) for k, p in chosen.items() if p}
    paths = [chosen[k] for k in ("registered", "probed") if chosen[k]]
    return judge.Coverage(backend, docs.get("registered"), docs.get("probed"), paths)


def judge_compiled(
    path: str, doc: dict, backend: str, coverage_dir: str, eager_doc: dict | None, *, read=judge.read_ops, pool=None
) -> CompiledVerdict:
    """One compiled op set on ``backend`` (see the module docstring). ``read`` as coverage_for's; ``pool``: a
    dict that lets Coverages of the same documents share judged requirements (judge.share: a site build)."""
    shared = (lambda cov: judge.share(cov, pool)) if pool is not None else (lambda cov: cov)
    rec = doc.get("compile") or {}
    breaks = list(doc.get("graph_breaks") or [])
    cv = CompiledVerdict(backend, doc["mode"], path, str(rec.get("backend")), breaks, None, outcome=rec["outcome"])
    cv.notes += [str(n) for n in rec.get("serve") or ()]  # a serve step: its recompilations, TorchTPU's rule
    if cv.outcome == "failed":
        cv.why = f"Dynamo could not take the model to the end: {rec.get('failure', '?')}"
        return cv
    if cv.outcome == "aot_failed":
        cv.why = f"AOTAutograd failed with {cv.compile_backend}'s recipe: {rec.get('aot_error', '?')}"
        return cv
    if doc.get("ops"):
        cov = shared(compile_coverage(doc, backend, coverage_dir, read=read))
        cv.graphs = _worded(judge.judge(doc, cov), cov)
        cv.graphs.notes = [n for n in cv.graphs.notes if not n.startswith("eager mode")]
        cv.graphs.notes.insert(0, f"compile path ({cv.compile_backend}): the ops of the AOT graphs on compile coverage")
    else:  # Dynamo compiled no graph: the whole model runs eagerly at its breaks
        cv.notes.append("no compiled graph: Dynamo ran the whole model eagerly (see the graph breaks)")
    on_device = bool(doc.get("ops")) and replayed.covers(backend)  # the graphs' nodes run the device's eager kernels
    eager_cov = None
    if eager_doc is not None and (breaks or on_device):
        eager_cov = shared(judge.coverage_for(eager_doc, backend, coverage_dir, read=read))
    if on_device and eager_doc is not None and eager_cov is not None:
        cv.replayed = replayed.judge_replayed(doc, eager_doc, eager_cov)
    cv.replaced = replaced_unseen(doc, eager_doc, backend)
    if cv.replaced:
        what = "; ".join(" with ".join(str(w).split(" by ", 1)) for w in cv.replaced)
        cv.why = REPLACED_NOTE.format(backend=backend, what=what)
    if breaks and eager_doc is not None and eager_cov is not None:
        cv.eager = judge.judge(eager_doc, eager_cov)
        from opcov.verdict import check  # a module replaced by the backend's Python: judged as eager check does

        check.python_replacements(cv.eager, eager_doc)
        recorded = (eager_doc.get("provenance") or {}).get("traced_on", "")
        on = "" if not str(recorded).startswith(backend) else f", recorded on {backend} itself"
        cv.notes.append(
            f"the ops run at the graph breaks are judged by the model's whole eager op set{on} (a superset of them)"
        )
    elif breaks:
        cv.notes.append("no eager op set of this model: the ops run at the graph breaks are unknown")
    return cv


REPLACED_NOTE = (
    "unknown: {backend} replaces {what} (its own Python), and under torch.compile Dynamo compiles that "
    "Python frame by frame (it skips torch's own modules at a graph break, not a package's); the compiled op "
    "set was traced with torch's module, so what the compiler gets there is in no op set"
)


def replaced_unseen(doc: dict, eager_doc: dict | None, backend: str) -> list:
    """The modules ``backend`` replaces with its own Python (``provenance.replaced_modules`` of the eager op
    set recorded on it) that the compiled op set ``doc`` was traced without.

    Why: at a graph break Dynamo runs torch.nn's own module eagerly, but a replacement's forward is a
    package's Python, which Dynamo compiles as a new frame: PyTorch/XLA's scan-based GRU, traced so, fails
    to compile on xla although it runs eagerly. Judging the break on eager coverage would say 'runs'."""
    from opcov.verdict.check import REPLACED

    if eager_doc is None or not str((eager_doc.get("provenance") or {}).get("traced_on", "")).startswith(backend):
        return []
    seen = set((doc.get("provenance") or {}).get(REPLACED) or [])
    return [str(w) for w in (eager_doc.get("provenance") or {}).get(REPLACED) or [] if str(w) not in seen]


def _worded(verdict, cov: judge.Coverage):
    """The verdict with each registered finding saying what the compiler does with the op (the compile
    record's why, else where it was read: "torch._inductor.lowering: lowering"), not only the path word."""
    from dataclasses import replace

    records = (cov.registered or {}).get("ops", {})
    for r in verdict.ops:
        rec = records.get(r.op) or {}
        raw = str(rec.get("why") or "")  # a scan's raw record (an exception) is worded; the JSON's detail keeps it
        text = vocab.reach_words(raw) or rec.get("src")
        if text and any(f.evidence != "probed" for f in r.findings):
            r.findings = [
                f
                if f.evidence == "probed" or text in f.why  # said once (an unresolved path's finding says it)
                else replace(f, why=f"{f.why}: {text}", detail=f.detail or raw)
                for f in r.findings
            ]
    return verdict


def eager_opset_for(doc: dict, coverage_dir: str, backend: str | None = None, near: str = "") -> dict | None:
    """The eager op set of the same model and mode that runs at the graph breaks on ``backend``: the one
    recorded on the backend itself where there is one (coverage/models/<model>/on/<backend>-<mode>.yaml,
    where 'opcov trace --on' writes it), since a composite that asks the
    device type (an RNN's fused cell) takes the backend's own branch there; else the stand-in op set. Looked
    for beside the compiled op set first (``near``: its path; a user's ``DIR/compile/`` sits in ``DIR``), then
    under ``coverage_dir``, then in the bundled data where ``coverage_dir`` is a user's folder without it."""
    name = str(doc["model"]["name"]).replace("/", "_")
    here = os.path.dirname(os.path.dirname(os.path.abspath(near))) if near else ""
    if here and os.path.basename(os.path.dirname(os.path.abspath(near))) != "compile":
        here = ""
    tops = [layout.models_dir(c) for c in (coverage_dir, layout.beside_bundled(coverage_dir)) if c]
    paths = []
    for folder, top in ([(here, "")] if here else []) + [(os.path.join(top, name), top) for top in tops]:
        if backend:
            paths.append(layout.break_opset_path(folder, backend, doc["mode"]))
        mode = layout.plain_name(doc["mode"], "mode")
        paths.append(layout.opset_path(name, mode, top) if top else os.path.join(here, f"{mode}.yaml"))
    path = next((p for p in paths if os.path.isfile(p)), None)
    return opset.load(path) if path else None


def check(model: str, backends, modes, coverage_dir: str) -> list[CompiledVerdict]:
    """``opcov check MODEL -b B --path compile``: a CompiledVerdict per backend and mode."""
    suggest.check_backends(list(backends), coverage_dir)
    out = []
    for backend in backends:
        for path, doc in compiled_opsets(model, backend, modes, coverage_dir):
            cv = judge_compiled(path, doc, backend, coverage_dir, eager_opset_for(doc, coverage_dir, backend, path))
            observed.annotate_compiled(cv, str(doc["model"]["name"]), coverage_dir)
            out.append(cv)
    return out


# ---------------------------------------------------------------- reports


def render(verdicts: list[CompiledVerdict], fmt: str = "text") -> str:
    if fmt == "json":
        import json

        return json.dumps([_as_json(v) for v in verdicts], indent=2, sort_keys=True) + "\n"
    lines = []
    for v in verdicts:
        lines.append(f"{v.backend} {v.mode} (compile path, {v.compile_backend}): {v.says()}  [{v.path}]")
        if v.observed:
            lines.append(f"  {v.observed['summary']}")
        if v.breaks:
            lines.append("  " + BREAKS_HEAD.format(n=len(v.breaks)))
            for b in v.breaks:
                times = f" (x{b['times']})" if b.get("times", 1) > 1 else ""
                lines.append(f"    {b['where']}: {b['reason']}{times}: {b['construct']}")
        if v.why:
            lines.append(f"  {v.why}")
        if v.eager is not None:
            lines.append(f"  eagerly at the breaks (eager coverage): {v.eager.says()}")
            lines += [f"    {r.op}: {r.outcome}: {r.findings[0].why}" for r in v.eager.ops if r.problems()][:10]
        if v.replayed is not None:
            lines.append(f"  {REPLAYED_HEAD.format(backend=v.backend)}: {v.replayed.says()}")
            lines += [f"    {r.op} [{f.dtype}]: {f.why}" for r in v.replayed.ops for f in r.problems()][:10]
        if v.graphs is not None:
            c = v.graphs.counts()
            lines.append(
                f"  compiled graphs (compile coverage): {v.graphs.says()}: {c['ops']} ops, "
                + ", ".join(f"{o} {c[o]}" for o in judge.OUTCOMES if c[o])
            )
            for r in v.graphs.ops:
                if r.problems():
                    f = r.problems()[0]
                    lines.append(
                        f"    {r.op} [{f.dtype}]: {vocab.verdict_words(judge.VERDICTS.get(r.outcome, 'runs'), r.evidence)}: {f.why}"
                    )
            lines += [f"  note: {n}" for n in v.graphs.notes]
        lines += [f"  note: {n}" for n in v.notes]
    return "\n".join(lines) + "\n"


def _as_json(v: CompiledVerdict) -> dict:
    out: dict = {
        "backend": v.backend,
        "mode": v.mode,
        "path": "compile",
        "compile_backend": v.compile_backend,
        "opset": v.path,
        "verdict": v.verdict,
        "evidence": v.evidence,
        "says": v.says(),
        "outcome": v.outcome,
        "graph_breaks": v.breaks,
        "notes": v.notes,
        "replaced_modules": v.replaced,
    }
    if v.observed:
        out["observed"] = v.observed
    if v.why:
        out["why"] = v.why
    for key, bv in (("graphs", v.graphs), ("eager_at_breaks", v.eager), ("replayed", v.replayed)):
        if bv is not None:
            out[key] = {
                "verdict": bv.verdict,
                "evidence": bv.evidence,
                "ops": [
                    {
                        "op": r.op,
                        "outcome": r.outcome,
                        "evidence": r.evidence,
                        "why": r.findings[0].why if r.findings else "",
                    }
                    for r in bv.ops
                ],
                "notes": bv.notes,
            }
    return out


# ---------------------------------------------------------------- gaps


def gaps(backend: str, coverage_dir: str, modes=None) -> dict:
    """``opcov gaps B --path compile``: over every compiled op set of B's compile backend, the ops that fail
    or are unknown on its compile coverage, ranked by models blocked, and the graph breaks, ranked by models."""
    cb = COMPILE_BACKEND.get(backend)
    if cb is None:
        raise UsageError(f"gaps --path compile: opcov knows the compile path of {', '.join(COMPILE_BACKEND)}")
    files = layout.compiled_model_files(coverage_dir, cb)
    if not files:
        raise UsageError(
            f"no compiled op sets for {cb} under {layout.models_dir(coverage_dir)}/*/compile/; "
            f"make them with 'opcov zoo trace --path compile --compile-backend {cb}'"
        )
    ops: dict = {}
    breaks: dict = {}
    failed = []
    for path in files:
        doc = opset.load(path)
        if modes and doc["mode"] not in modes:
            continue
        model = f"{doc['model']['name']} {doc['mode']}"
        for b in doc.get("graph_breaks") or []:
            breaks.setdefault(b["reason"], set()).add(model)
        if doc["compile"]["outcome"] != "compiled":
            failed.append((model, doc["compile"].get("failure") or doc["compile"].get("aot_error") or ""))
            continue
        if not doc.get("ops"):  # no compiled graph: its breaks are ranked above
            continue
        v = judge.judge(doc, compile_coverage(doc, backend, coverage_dir))
        for r in v.ops:
            if r.outcome in ("fails", "unknown"):
                row = ops.setdefault(r.op, {"op": r.op, "outcome": r.outcome, "models": set(), "why": ""})
                row["models"].add(model)
                row["why"] = row["why"] or (r.problems()[0].why if r.problems() else "")
                if r.outcome == "fails":
                    row["outcome"] = "fails"
    ranked = sorted(ops.values(), key=lambda r: (r["outcome"] != "fails", -len(r["models"]), r["op"]))
    return {
        "backend": backend,
        "compile_backend": cb,
        "ops": [dict(r, models=sorted(r["models"])) for r in ranked],
        "graph_breaks": sorted(
            ({"reason": k, "models": sorted(m)} for k, m in breaks.items()),
            key=lambda r: (-len(r["models"]), r["reason"]),
        ),
        "failed": failed,
    }


def render_gaps(result: dict, top: int, fmt: str = "text") -> str:
    if fmt == "json":
        import json

        return json.dumps(result, indent=2, sort_keys=True) + "\n"
    lines = [f"{result['backend']} compile path ({result['compile_backend']}): what blocks compiled models"]
    if result["graph_breaks"]:
        lines.append("graph breaks (each runs eagerly), by models:")
        lines += [
            f"  {len(r['models']):3}  {r['reason']}  ({', '.join(r['models'][:4])})" for r in result["graph_breaks"]
        ]
    if result["failed"]:
        lines.append("not compiled to the end:")
        lines += [f"  {m}: {why}" for m, why in result["failed"]]
    lines.append(f"ops failing or unknown on compile coverage, by models blocked (top {top}):")
    lines += [f"  {len(r['models']):3}  {r['op']}  {r['outcome']}: {r['why']}" for r in result["ops"][:top]] or [
        "  none"
    ]
    return "\n".join(lines) + "\n"
