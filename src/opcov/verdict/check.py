"""``opcov check``: find the model's op sets, the backends' coverage, and judge each pair.

MODEL may be an op-set file, a folder of them (one per mode), the name of a model
under coverage/models/, or anything ``opcov trace`` accepts (traced on the fly,
which imports torch). Only the last needs torch: a saved op set keeps the gate fast.

A verdict is about the inputs the user gave: where an op set records which input variant made each
call (``opset.variants``), the lead verdict judges the given inputs' calls alone, and every variant
opcov added (a padded attention mask) is judged apart, in the lead verdict's ``variants``. An op set
that records none is judged as one set, and says so.
"""

from __future__ import annotations

import os
import re

from opcov import children, modelnames, suggest, vocab
from opcov.activity import activity
from opcov.backends import get_backend
from opcov.errors import UsageError
from opcov.store import data, layout, opset, parallel, vendor
from opcov.verdict import devicemodule, distributed, judge, observed, reports, serve


def load_opsets(paths, modes) -> list[tuple[str, dict]]:
    """(path, op-set document) for each op-set file whose mode is wanted (every mode when none given)."""
    return list(iter_opsets(paths, modes))


def iter_opsets(paths, modes):
    """``load_opsets`` one at a time (gaps judges each as it is read, while its parsed tree is at hand)."""
    for path in paths:
        doc = opset.load(path)
        if not modes or doc["mode"] in modes:
            yield path, doc


def find_opsets(model: str, modes, coverage_dir: str) -> list[tuple[str, dict]]:
    """(path, op-set document) for each wanted mode of MODEL; [] when MODEL is no saved op set."""
    candidates = []
    if layout.is_yaml(model) and not os.path.exists(model):
        raise UsageError(f"{model}: no such op-set file (trace one with 'opcov trace MODEL --out {model}')")
    if os.path.isfile(model):
        candidates = [model]
    else:
        folder = layout.model_folder(model_folder_of(model), coverage_dir)
        if os.path.isdir(folder):
            candidates = layout.opset_files(folder)
            if not candidates:
                raise UsageError(f"{folder}: no op-set files (*.yaml) in this folder")
            candidates = _eager_only(folder, candidates)
    found = load_opsets(candidates, modes)
    if candidates and not found:
        have = sorted({opset.load(p)["mode"] for p in candidates})
        raise UsageError(
            f"{model}: no op set for mode {', '.join(modes)} (there is: {', '.join(have)}); "
            f"trace it with 'opcov trace {model} --mode {modes[0]}'"
        )
    return found


def model_folder_of(model: str) -> str:
    """A folder MODEL names, as the model folder it belongs to: a model's compile/ subfolder (its compiled op
    sets) or on/ subfolder (those recorded on a device) named directly reads as that model's folder, so that
    'check DIR/compile --path compile' judges DIR's compiled op sets, not a model called 'compile'; any other
    name as it is."""
    if os.path.isdir(model) and os.path.basename(os.path.normpath(model)) in (layout.COMPILE, layout.ON_DEVICE):
        return os.path.dirname(os.path.normpath(model)) or "."
    return model


def _eager_only(folder: str, paths: list[str]) -> list[str]:
    """The eager op sets among a folder's files: a compiled one ('opcov trace --path compile --out' put it
    there) is judged on the compile path, never on eager coverage; one line where the folder has no other."""
    eager = [p for p in paths if opset.path_of(opset.load(p)) == opset.EAGER]
    if not eager:
        raise UsageError(
            f"{folder}: holds compiled op sets only (made by 'opcov trace --path compile'): judge them with "
            "--path compile"
        )
    return eager


def trace_on_the_fly(model: str, modes, args) -> list[tuple[str, dict]]:
    """Trace MODEL now, in a child process (``opcov trace``), for each mode; used when it names
    no saved op set. A child, because tracing claims PrivateUse1 for its stand-in accelerator and a
    live scan may need to import a real PrivateUse1 backend: never two backends in one process."""
    out = []
    dtype = getattr(args, "dtype", None)
    timeout = getattr(args, "timeout", None) or children.TRACE_TIMEOUT_S
    with children.temp_dir("check") as tmp:
        for mode in modes or ("inference",):
            path = os.path.join(tmp, f"{mode}.yaml")
            cmd = ["trace", model, "--mode", mode, "--out", path, "--timeout", f"{timeout:g}"]
            cmd += ["--dtype", dtype] if dtype else []
            with activity(f"tracing {model} ({mode})"):
                _child(cmd, f"{model}: not an op-set file or zoo model, and tracing it failed", timeout)
            out.append((f"<traced {model} {mode}>", opset.load(path)))
    return out


GRACE_S = 30.0  # beyond a child trace's own --timeout: its interpreter start and its own one-line error


def _child(args: list[str], what: str, timeout: float | None = None) -> None:
    """Run ``opcov ARGS`` in a child process that ends with this one (children.opcov_child); its one-line
    error becomes ours. A child past ``timeout`` (and a grace for its own timeout's message) is killed."""
    try:
        children.opcov_child(args, what=f"'opcov {args[0]}'", process="its process", timeout=timeout, grace=GRACE_S)
    except UsageError as exc:
        raise UsageError(f"{what}: {exc}") from None


def live_scan(backend: str, names) -> dict | None:
    """A registered scan now (``opcov scan`` in a child process, never in this one), kept to
    ``names``, for an installed backend that has no data in the coverage folder; None when the
    backend is not installed here."""
    if not _installed(backend):
        return None
    with children.temp_dir("scan") as tmp:
        path = os.path.join(tmp, "scan.yaml")
        with activity(f"scanning {backend} (no data for it in the coverage folder)"):
            _child(["scan", backend, "--out", path], f"{backend}: live registered scan failed")
        doc = data.load(path)
    wanted = set(names)
    doc["ops"] = {k: v for k, v in doc["ops"].items() if k in wanted}
    return doc


def run(model: str, backends_, modes, coverage_dir: str, args=None) -> tuple[list, dict]:
    """(verdicts, model description) for MODEL on each backend and mode (a sharded step's with --parallel)."""
    style = getattr(args, "parallel", None)
    if style or getattr(args, "world_size", None):
        return _sharded(model, backends_, modes, coverage_dir, style, getattr(args, "world_size", None))
    opsets = find_opsets(model, modes, coverage_dir)
    replay = replayer(args) if args is not None else None
    if not opsets:
        have = set(layout.backends_with_data(coverage_dir))
        for backend in backends_:  # a mistyped name fails now, not after a minute of tracing
            if backend not in have and not _installed(backend):
                err = suggest.no_backend_data(backend, coverage_dir)
                if not isinstance(err, suggest.NoData):  # a known backend without data is a row: no data yet
                    raise err
        why = modelnames.unknown(model, coverage_dir)  # a misspelt name: said now, not after importing torch
        if why:
            raise UsageError(why)
        opsets = trace_on_the_fly(model, modes, args)
        return judge_opsets(opsets, backends_, coverage_dir, replay=replay)
    # a named model (or its folder): where it was also recorded on a backend itself, that backend is judged on it
    folder = None if os.path.isfile(model) else model
    return judge_opsets(opsets, backends_, coverage_dir, folder=folder, replay=replay)


def _sharded(model: str, backends_, modes, coverage_dir: str, style: str | None, world_size: int | None):
    """'opcov check MODEL --parallel STYLE [--world-size N]': its sharded op sets (opcov.verdict.distributed)."""
    if not style:
        raise UsageError("--world-size goes with --parallel ddp|fsdp2|tp")
    if modes and set(modes) != {"training"}:
        raise UsageError(f"--parallel judges a training step; leave out --mode {', '.join(modes)}")
    paths = distributed.find(model, style, world_size, coverage_dir)
    return judge_opsets(load_opsets(paths, None), backends_, coverage_dir)


# ---------------------------------------------------------------- the model's own calls, replayed on the device

REPLAY_DIR = "replayed"  # default --replay-dir: BACKEND/MODEL-MODE.yaml under it, in the working folder


def replay_here(backend: str, asked: bool = False) -> bool:
    """Whether ``backend`` runs in this Python (its record's ``runs_here``, its module importable), so
    that a model's own calls can be replayed on it now; one that needs no module (the reference itself)
    only when ``asked``."""
    import importlib.util

    from opcov import backends

    record = backends.record(backend)
    runs = record.runs_here if record else None
    if runs is None:
        return False
    if runs.module is None:
        return asked
    return importlib.util.find_spec(runs.module) is not None


def _runs_in_another_python(backend: str) -> bool:
    """A backend opcov runs in a Python that has its module (PyTorch/XLA's), where this one has not."""
    from opcov import backends

    record = backends.record(backend)
    return bool(record and record.runs_here and record.runs_here.module) and not replay_here(backend)


def _where_it_runs() -> str:
    """' (for B: how to get a Python where B runs)' of each backend whose record says, else ''."""
    from opcov import backends

    runs = [(b.name, b.runs_here) for b in backends.known_backends()]
    hints = [f"for {name}: {how.hint}" for name, how in runs if how and how.hint]
    return f" ({'; '.join(hints)})" if hints else ""


def replayer(args):
    """What ``judge_opsets`` calls to replay one op set's own calls on one backend (``replay_calls``), as
    ``--replay`` / ``--no-replay`` choose: by default where the backend runs here; None when never."""
    choice = getattr(args, "replay", None)
    if choice is False:
        return None
    folder = getattr(args, "replay_dir", None) or REPLAY_DIR
    timeout = getattr(args, "timeout", None) or children.TRACE_TIMEOUT_S

    def replay(doc: dict, backend: str):
        if not replay_here(backend, asked=bool(choice)):
            if choice:
                raise UsageError(
                    f"--replay: {backend} does not run in this Python{_where_it_runs()}; "
                    f"replay where it does: opcov probe {backend} --opsets OPSET --ops '^trace\\.' --out FILE"
                )
            return None
        return replay_calls(doc, backend, folder, timeout)

    return replay


def replay_calls(doc: dict, backend: str, folder: str, timeout: float) -> tuple[str, dict] | None:
    """(path, probed document) of ``doc``'s model's own calls replayed on ``backend`` (``opcov probe
    BACKEND --opsets``, in a child process): each distinct call, with the arguments the model gave it,
    forward (a forward call whose inputs required grad also backward, under the device's own autograd) and
    the backward's calls, against CPU. Kept at FOLDER/BACKEND/MODEL-MODE-KEY.yaml (KEY: the
    op set's identity) and reused for the same op set; None when the model cannot be rebuilt (no factory or zoo
    source: the verdict then says its calls were not replayed)."""
    import hashlib

    model = str(doc["model"]["name"])
    # the op set's own identity in the name: a re-traced model is replayed again, never judged on stale calls
    key = hashlib.sha256(repr((doc.get("integrity"), doc["provenance"].get("created"))).encode()).hexdigest()[:10]
    path = os.path.join(folder, backend, f"{re.sub(r'[^A-Za-z0-9._-]', '_', model)}-{doc['mode']}-{key}.yaml")
    if os.path.exists(path):
        return path, data.load(path)
    with children.temp_dir("replay") as tmp:
        saved = os.path.join(tmp, f"{doc['mode']}.yaml")
        opset.save(doc, saved)
        os.makedirs(os.path.dirname(path), exist_ok=True)
        cmd = ["probe", backend, "--opsets", saved, "--ops", r"^trace\.", "--directions", "forward,backward"]
        cmd += ["--dtypes", str(doc.get("dtype") or "float32"), "--tiers", "none", "--out", path]
        with activity(f"replaying {model}'s own calls on {backend}"):
            try:
                _child(cmd, f"{model}: replaying its calls on {backend} failed", timeout)
            except UsageError as exc:
                if "cannot be rebuilt" in str(exc):  # no factory or zoo source: not replayed, and said so
                    return None
                raise
    return path, data.load(path)


NOT_RECORDED = (
    "input variants not recorded in this op set; judged as one set (re-trace it to judge the given inputs apart)"
)


def own_path(doc: dict, backend: str, coverage_dir: str, folder: str | None = None) -> tuple[str, dict] | None:
    """(path, op set) of this model and mode recorded on ``backend`` itself (``opcov trace MODEL --on
    BACKEND``: FOLDER/on/BACKEND-MODE.yaml, FOLDER the model's folder, by default coverage/models/MODEL),
    or None. Why: a stand-in trace takes PrivateUse1's branch in composites that ask the device type (an
    LSTM's fused cell), a path xla never takes; the op set recorded on the backend holds what its
    dispatcher really received, and the Python-level replacements its package made."""
    if (doc.get("provenance") or {}).get("path") == "backend" or parallel.header(doc):
        return None  # (a sharded step: one device's op set is no stand-in for it)
    folder = layout.model_folder(folder or str(doc["model"]["name"]).replace("/", "_"), coverage_dir)
    path = layout.ondevice_opset(folder, backend, doc["mode"])
    if path is None:
        return None
    other = opset.load(path)
    return (path, other) if other.get("dtype") == doc.get("dtype") else None


def judge_opsets(opsets, backends_, coverage_dir: str, folder: str | None = None, replay=None) -> tuple[list, dict]:
    """(verdicts, model description) for (path, op-set document) pairs on each backend; opcov.api
    passes an op set it was handed here. Each verdict judges the given inputs, with the other input
    variants' verdicts in its ``variants`` (see the module docstring). With ``folder`` (a model's name or
    folder), a backend that recorded this model itself (``own_path``) is judged on that op set instead.
    ``replay`` (``replayer``): the model's own calls replayed on the backend, judged before OpInfo's."""
    verdicts = []
    for stand_in_path, given in opsets:
        for backend in backends_:
            own = own_path(given, backend, coverage_dir, folder) if folder else None
            own_at = f"{own[0]}, in place of {stand_in_path}" if own else None
            try:
                replayed = replay(given, backend) if replay and not parallel.header(given) else None
                verdicts.append(
                    _judge_one(
                        own[1] if own else given, backend, coverage_dir, own_at, own[0] if own else None, replayed
                    )
                )
            except suggest.NoData as none:
                verdicts.append(no_data_verdict(given, none))
    first = opsets[0][1]
    describe = ", ".join(
        f"{d['mode']} {d.get('dtype', '?')}" + (f" autocast {d['autocast']}" if d.get("autocast") else "")
        for _, d in opsets
    )
    return verdicts, {
        "name": first["model"]["name"],
        "describe": describe,
        "opsets": [p for p, _ in opsets],
        "torch": str(first["provenance"].get("torch")),
    }


def no_data_verdict(doc: dict, none: suggest.NoData) -> judge.BackendVerdict:
    """The row of a backend opcov knows but has no data for: 'unknown', no ops, what would fill it."""
    b = none.backend
    try:
        setup = get_backend(b).setup
    except UsageError:
        setup = ""
    notes = [f"no data yet: opcov has no coverage data for {b}; fill it with {none.fill()}"]
    notes += [f"what making {b}'s data needs: {setup}"] if setup else []
    return judge.BackendVerdict(
        b, doc.get("mode", "?"), "unknown", vocab.NO_EVIDENCE.name, [], [], notes, no_data=none.fill()
    )


def variant_parts(doc: dict) -> dict:
    """Input variant -> the op set as if only it had been traced (opset.for_variant), the lead (the given
    inputs) first; {} where the op set records no variants. Worked out once per op set, not per backend."""
    names = opset.variants(doc)
    lead = vocab.GIVEN if vocab.GIVEN in names else names[0] if names else ""
    return {name: opset.for_variant(doc, name) for name in sorted(names, key=lambda n: n != lead)}


def judge_variants(doc: dict, parts: dict, cov, coverage_dir: str | None = None) -> judge.BackendVerdict:
    """The verdict of the lead input variant (the given inputs) with every other variant's verdict in its
    ``variants``; where ``parts`` (variant_parts) is empty, the whole set's, saying so. check and the site
    both judge this way. A sharded step's (opcov.verdict.distributed) also judges its DTensor ops and
    collectives, with the data under ``coverage_dir``."""
    doc = distributed.prepare(doc)
    parts = {name: distributed.prepare(part) for name, part in parts.items()}
    if not parts:
        v = judge.judge(doc, cov)
        v.notes[0:0] = [NOT_RECORDED, *serve.notes(v, doc)]
        distributed.judge_sharded(v, doc, cov, coverage_dir)
        devicemodule.judge_lookups(v, doc, cov)
        return v
    names = list(parts)
    v = judge.judge(parts[names[0]], cov)
    v.variant = names[0]
    v.notes[0:0] = serve.notes(v, parts[names[0]])  # prefill and decode: what each needs, first
    distributed.judge_sharded(v, parts[names[0]], cov, coverage_dir)
    for name in names[1:]:
        v.variants[name] = judge.judge(parts[name], cov)
        v.variants[name].variant = name
        distributed.judge_sharded(v.variants[name], parts[name], cov, coverage_dir)
    devicemodule.judge_lookups(v, doc, cov)  # the model's, whichever inputs: every variant's verdict
    return v


def _judge_one(doc: dict, backend: str, coverage_dir: str, own_at: str | None, own: str | None, replayed=None):
    """One backend's verdict on one op set (``own``: its path, when it was recorded on that backend;
    ``own_at`` says so in the first note; ``replayed``: (path, probed document) of its own calls replayed
    on the backend)."""
    cov = judge.coverage_for(doc, backend, coverage_dir, scan=live_scan)  # the whole set's ops: every variant's
    if replayed:
        cov.own = replayed[1]
        cov.paths.append(replayed[0])
    v = judge_variants(doc, variant_parts(doc), cov, coverage_dir)
    v.notes.insert(0, path_note(doc, backend) + (f" ({own_at})" if own_at else ""))
    if replayed:
        v.notes.insert(
            1,
            f"this model's own calls were replayed on {backend} one by one ({replayed[0]}): they decide each op they reach",
        )
    elif _runs_in_another_python(backend):
        v.notes.insert(
            1,
            f"this model's own calls were not replayed on {backend} (it does not run in this Python): "
            "'opcov check ... --replay' where it does decides each call from the device",
        )
    if own:
        v.sources.insert(0, own)
    python_replacements(v, doc)
    observed.annotate(v, doc, coverage_dir)  # this model really run on the device, where it was
    # what the backend's own tests expect of this model's ops: never judged from, only said; in the eager
    # verdict only what the op's own tests say outside torch.compile (another op's test reaching it is noise)
    expected, left = vendor.for_ops(
        coverage_dir,
        backend,
        {r.op: (r.dtypes, any(f.direction == "backward" for f in r.findings)) for r in v.ops},
        path="eager",
        short=True,
    )
    models = vendor.model_notes(coverage_dir, backend, str((doc.get("model") or {}).get("name") or ""), short=True)
    if expected or models:  # where the short lines below were read, said once
        v.notes.append(vendor.source_said(coverage_dir, backend))
    if expected or left:
        shown = [f"{op}: {line}" for op, lines in expected.items() for line in lines]
        v.notes += shown[:5]
        said = [f"{len(shown) - 5} more like these"] if len(shown) > 5 else []
        said += [f"{left} that do not bear on this run (looser checks, other ops' tests, torch.compile lists)"] * bool(
            left
        )
        if said:
            v.notes.append(f"vendor-test expectations: {' and '.join(said)}: opcov ops OP -b {backend}")
        v.sources.append(vendor.path_for(coverage_dir, backend))
    v.notes += models
    return v


def path_note(doc: dict, backend: str) -> str:
    """Which path the op set recorded: the backend's own (``opcov trace --on``), or a stand-in's."""
    prov = doc.get("provenance") or {}
    target = prov.get("target_device") or "?"
    if prov.get("path") == "backend":
        return f"recorded on {target} itself (opcov trace --on {target}): {target}'s own path" + (
            "" if target == backend else f", which {backend}'s may not be"
        )
    traced = str(prov.get("traced_on") or "")
    if "stand-in" in traced or "computing" in traced:
        return (
            "recorded on a stand-in device, resolved per backend: a backend's own device-type branches and "
            "Python-level replacements are not in it ('opcov trace --on' records them where the backend runs here)"
        )
    return f"recorded on {traced or 'an unnamed device'} for target {target}"


REPLACED = "replaced_modules"  # provenance key written by opcov.tracing.ondevice (a torch-free reader here)


def python_replacements(v, doc: dict) -> None:
    """Where the backend replaced torch modules with its own Python (``provenance.replaced_modules`` of an
    op set recorded on it), the ops recorded are real but what they compute together (its own autograd,
    a scan) is checked by no op-level probe: each replacement is a value note of its own, and a verdict
    that would say the model runs says its values may differ."""
    replaced = (doc.get("provenance") or {}).get(REPLACED) or []
    if not replaced:
        return
    dtype = str(doc.get("dtype") or "float32")
    for what in replaced:
        torch_name, _, by = str(what).partition(" by ")
        why = (
            f"{by or what} replaces {torch_name} above the dispatcher: its ops are judged one by one, but "
            "no op-level probe checks what they compute together (its forward and its own gradients)"
        )
        finding = judge.Finding("forward", dtype, judge.VALUE_NOTE, v.evidence, why)
        for each in [v, *v.variants.values()]:  # after the ops that fail or are unknown: worst first
            at = next((i for i, r in enumerate(each.ops) if r.outcome not in ("fails", "unknown")), len(each.ops))
            each.ops.insert(at, judge.OpResult(f"python:{by or what}", 1, {"forward"}, {dtype}, [finding]))
    order = vocab.VERDICT_ORDER
    for each in [v, *v.variants.values()]:
        if order.index(each.verdict) > order.index("runs_with_value_note"):
            each.verdict = "runs_with_value_note"
    v.notes.append(
        f"Python-level replacement(s) by the backend, not covered by op-level evidence: {', '.join(replaced)}"
    )


def variant_choice(value: str | None) -> tuple[str, ...]:
    """The input variants ``--variants`` gates on (a comma list of vocab.INPUT_VARIANTS, or 'all'; the
    given inputs always); an unknown name is a UsageError naming those that exist."""
    if not value:
        return (vocab.GIVEN,)
    words = [w.strip() for w in value.split(",") if w.strip()]
    if "all" in words:
        return tuple(vocab.INPUT_VARIANTS)
    for word in words:
        if word not in vocab.INPUT_VARIANTS:
            raise UsageError(
                f"--variants: {word!r} is not an input variant; choose from {', '.join(vocab.INPUT_VARIANTS)}, or all"
            )
    return tuple(dict.fromkeys([vocab.GIVEN, *words]))


def gate_failures(verdicts, gated=(vocab.GIVEN,), **how) -> list[str]:
    """judge.gate_failures of each lead verdict (the given inputs', or the whole set's where variants are
    not recorded) and of the other variants named in ``gated``, each line naming its variant."""
    out = []
    for v in verdicts:
        out += judge.gate_failures([v], **how)
        for name, other in v.variants.items():
            if name in gated:
                label = reports.variant_label(name)
                out += [f"{line} (with {label})" for line in judge.gate_failures([other], **how)]
    return out


def _installed(backend: str) -> bool:
    from opcov import backends

    try:
        b = backends.get_backend(backend)
    except UsageError:
        return False
    return bool(b.installed_version()) and b.available_in_build() and (b.package is None or b.module is not None)
