"""``opcov ops PATTERN -b BACKEND``: does a backend support X?

The answer a backend user wants is per op: for each backend, the forward and backward status,
what kind of evidence it rests on (probed per dtype, or registered, unverified), and, where a
probe ran the op, its status per dtype. X may be an op name (``aten::add.Tensor``, ``add``), a
regular expression, or a Python name (``F.layer_norm``, ``nn.LayerNorm``, ``Tensor.softmax``),
mapped to the aten overloads it dispatches through the committed Python-name index
(``opcov.scan.pynames``). Matches are ranked: exact (the name, its base name, or reached by the
Python name) first, then by prefix, then by substring or regular expression.

Reads coverage data only: torch is never imported (schemas come from torchgen's
native_functions.yaml when the installed torch is the data's).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from opcov import backends, suggest, vocab
from opcov.errors import DataError, UsageError
from opcov.scan import pynames, sdpa
from opcov.store import layout, lineyaml, vendor
from opcov.store.cells import skip_reason
from opcov.verdict import judge

# How an op matched, best first.
HOW = ("exact", "Python name", "prefix", "substring")
DIRECTIONS = ("forward", "backward")
WHY_CHARS = 120  # a failure's first line is cut to this in the text answer (JSON keeps it whole)
_PYTHONISH = re.compile(r"[A-Za-z_][\w]*(?:\.[A-Za-z_]\w*)*")


@dataclass(frozen=True)
class Match:
    op: str
    how: str  # one of HOW
    via: tuple = ()  # the Python names that reach it


def _local(op: str) -> str:
    return op.split("::", 1)[-1]


def _base(op: str) -> str:
    return _local(op).split(".", 1)[0]


def python_names(pattern: str, index: pynames.Index | None) -> dict[str, tuple[str, ...]]:
    """Python name -> aten overloads for what ``pattern`` names in the index ({} when it names none)."""
    if index is None or not _PYTHONISH.fullmatch(pattern):
        return {}
    return {name: index.names[name] for name in index.resolve(pattern)}


def rank(pattern: str, names, python: dict) -> list[Match]:
    """The ops of ``names`` that ``pattern`` matches, best first: exact (the op's full name, its name
    without namespace or without overload, or its base name), then reached by a Python name, then by
    prefix, then by regular-expression search; within each, ops a Python name reaches first, then
    aten ops, then by name. ``names`` keep their order when no pattern is given."""
    if not pattern:
        return [Match(op, HOW[0]) for op in names]
    reached: dict[str, list] = {}
    for py, ops in python.items():
        for op in ops:
            reached.setdefault(op, []).append(py)
    rx = re.compile(pattern)
    out: dict[str, tuple[int, Match]] = {}
    for op in names:
        via = tuple(reached.get(op, ()))
        if pattern in (op, _local(op), op.split(".", 1)[0], _base(op)):
            out[op] = (0, Match(op, HOW[0], via))
        elif via:
            out[op] = (1, Match(op, HOW[1], via))
        elif _local(op).startswith(pattern) or op.startswith(pattern):
            out[op] = (2, Match(op, HOW[2]))
        elif rx.search(op):
            out[op] = (3, Match(op, HOW[3]))
    return [
        m
        for _, m in sorted(out.values(), key=lambda t: (t[0], not t[1].via, not t[1].op.startswith("aten::"), t[1].op))
    ]


def load_index(coverage_dir: str | None, torch_version: str) -> tuple[pynames.Index | None, str]:
    """The Python-name index for ``torch_version`` (else the newest), and a note when there is none."""
    path = layout.pick_pynames(coverage_dir, torch_version) if coverage_dir else None
    if path is None:
        return None, (
            f"no Python-name index under {coverage_dir}/ (build one with "
            f"'{pynames.COMMAND}'): Python names are not resolved"
        )
    return pynames.read(path), ""


# ---------------------------------------------------------------- one op on one backend


@dataclass
class Status:
    """One op's forward or backward on one backend, as the data has it."""

    evidence: str  # probed | registered | none
    status: str  # the worst probed status over dtypes, the registered resolved status, or 'absent'
    text: str  # the status in words (vocab labels)
    dtypes: dict = field(default_factory=dict)  # dtype key -> probed status (probed evidence only)
    path: str = ""  # the registered path (kernel, formula, composite...)
    why: str = ""  # the first line of the worst failing dtype's error
    note: str = ""  # what the probe says when its evidence is not used (skipped, not probed)
    detail: str = ""  # the raw record a worded reason came from (a scan's exception): JSON only

    def as_dict(self) -> dict:
        return {k: v for k, v in self.__dict__.items() if v not in ("", {}, None)}


def _probed_text(dtypes: dict) -> str:
    """'mismatch: float16; pass: bfloat16, float32' (statuses worst first, short labels)."""
    by: dict[str, list] = {}
    for dtype, status in dtypes.items():
        by.setdefault(status, []).append(dtype)
    return "; ".join(
        f"{vocab.PROBED[s].short if s in vocab.PROBED else s}: {', '.join(sorted(by[s]))}"
        for s in sorted(by, key=lambda s: vocab.PROBED_RANK.get(s, len(vocab.PROBED_RANK)))
    )


def status(cov: judge.Coverage, op: str, direction: str) -> Status:
    """What ``cov`` says of ``op``'s ``direction``: probed where the probe has a status for some dtype
    (it outranks a registration), else the registered path and its resolved status, else absent."""
    slots = {d: c.slot(direction) for d, c in cov.cells(op).items()}
    dtypes = {d: s.status for d, s in slots.items() if s.status and s.status != "skipped"}
    if dtypes:
        worst = vocab.worst(dtypes.values(), vocab.PROBED_STATUSES)
        failing = [d for d in sorted(dtypes) if dtypes[d] == worst and worst in vocab.PROBED_FAILURES]
        return Status(
            "probed",
            worst,
            _probed_text(dtypes),
            dtypes,
            why=f"{failing[0]}: {slots[failing[0]].why}" if failing and slots[failing[0]].why else "",
        )
    note = ""
    if cov.probed is not None:
        rec = cov.probed.get("ops", {}).get(op)
        note = (
            f"probe: {skip_reason(rec)}"
            if skip_reason(rec) is not None
            else "probe: not in the probed data"
            if rec is None
            else f"probe: no {direction} case"
        )
    rec = (cov.registered or {}).get("ops", {}).get(op)
    if rec is None:
        return Status(vocab.NO_EVIDENCE.name, "absent", f"not in the {cov.backend} data", note=note)
    key = "fwd" if direction == "forward" else "bwd"
    res, path = rec.get("res" if key == "fwd" else "bwd_res"), rec.get(key)
    word = vocab.REGISTERED.get(res)
    text = (word.short if res == "not_applicable" else word.label) if word else str(res)
    if res == "registered" and cov.static != "registered":  # declared: says so ("declared in ..., unverified")
        text = vocab.evidence_word(cov.static).label
    via = rec.get("via" if key == "fwd" else "bwd_via") or []
    if path == "composite" and via:
        text += f" ({path} of {', '.join(via[:3])}{', ...' if len(via) > 3 else ''})"
    elif path and path != res:
        text += f" ({path})"
    if res == "fallback":
        kind, enabled = cov.fallback()
        text += f"; {kind} fallback {'enabled: runs there, slowly' if enabled else 'disabled: raises'}"
    raw = str(rec.get("why") or "") if res == "unresolved" else ""
    if raw:
        text += f": {vocab.reach_words(raw)}"  # in words; the scan's raw record is the JSON's detail
    return Status(cov.static, str(res), text, path=str(path or ""), note=note, detail=raw)  # registered, or declared


# ---------------------------------------------------------------- the answer


@dataclass
class Answer:
    """What ``opcov ops PATTERN -b ...`` prints."""

    pattern: str
    backends: list
    python: dict  # Python name -> overloads, for a pattern that names Python callables
    index_note: str  # the index used, or why Python names are not resolved
    matches: list  # Match, shown
    more: dict  # how -> count of matches not shown
    statuses: dict  # op -> backend -> direction -> Status
    schemas: dict  # op -> schema line, where known
    schema_note: str
    sources: dict  # backend -> coverage files read
    # op -> backend -> what the backend's own tests expect of it (opcov.store.vendor): expectations, not results
    expected: dict = field(default_factory=dict)
    dispatch: dict = field(default_factory=dict)  # op -> backend -> the kernel it dispatches to (opcov.scan.sdpa)

    def as_dict(self) -> dict:
        return {
            "pattern": self.pattern,
            "backends": self.backends,
            "python_names": self.python,
            "notes": [n for n in (self.index_note, self.schema_note) if n],
            "sources": self.sources,
            "more": self.more,
            "ops": [
                {
                    "op": m.op,
                    "match": m.how,
                    "python_names": list(m.via),
                    "schema": self.schemas.get(m.op),
                    "backends": {b: {d: s.as_dict() for d, s in self.statuses[m.op][b].items()} for b in self.backends},
                    "vendor_expected": self.expected.get(m.op, {}),
                    **({"dispatches_to": self.dispatch[m.op]} if m.op in self.dispatch else {}),
                }
                for m in self.matches
            ],
        }


def _all_names(backend: str, coverage_dir: str) -> tuple[list[str], str]:
    """Every op name in a backend's newest snapshot, and that snapshot's torch version."""
    files = layout.snapshots(coverage_dir, backend)
    path = layout.pick(files["registered"] or files["declared"] or files["probed"], "")
    if path is None:  # check_backends ran first: not reached
        raise suggest.no_backend_data(backend, coverage_dir)
    doc = lineyaml.load(path, summary=False)
    return list(doc["ops"]), str(doc["provenance"].get("torch", "?"))


def answer(
    pattern: str,
    backends,
    coverage_dir: str,
    *,
    limit: int | None = 20,
    everything: bool = False,
    core: bool = False,
    tags=(),
    namespace: str | None = None,
) -> Answer:
    """Per backend and op matching ``pattern``: forward and backward status, evidence, dtypes.

    Without ``everything`` only the best kind of match found is shown (exact and Python-name
    matches, else prefix, else substring); ``limit`` caps the ops shown (None: no cap)."""
    backends = list(dict.fromkeys(backends))
    suggest.check_backends(backends, coverage_dir)
    names: dict[str, None] = {}
    torch_of = {}
    for b in backends:
        ops, torch_of[b] = _all_names(b, coverage_dir)
        names.update(dict.fromkeys(ops))
    first_torch = torch_of[backends[0]]
    index, index_note = load_index(coverage_dir, first_torch)
    python = python_names(pattern, index)
    if python and index is not None:  # python_names gives {} without an index
        index_note = f"Python-name index {index.path}: what each name dispatched on meta tensors, torch {index.torch}"
        if not layout.same_torch(index.torch, first_torch):
            index_note += f" (the data is for torch {first_torch}: there a name may reach other ops)"
        names.update(dict.fromkeys(op for ops in python.values() for op in ops))  # shown even where absent
    matched = rank(pattern, list(names), python)
    if core or tags or namespace:
        tags_of = _tags(backends, coverage_dir, torch_of) if core or tags else {}
        matched = [m for m in matched if _wanted(m.op, core, tags, namespace, tags_of)]
    if not matched:
        raise UsageError(_nothing(pattern, names, index))
    best = {m.how for m in matched if HOW.index(m.how) <= 1} or {matched[0].how}
    shown = matched if everything else [m for m in matched if m.how in best]
    if limit:
        shown = shown[:limit]
    more: dict[str, int] = {}
    for m in matched:
        if m not in shown:
            more[m.how] = more.get(m.how, 0) + 1
    wanted = [m.op for m in shown]
    statuses: dict = {op: {} for op in wanted}
    sources = {}
    dispatch: dict = {}
    for b in backends:
        doc = {"ops": dict.fromkeys(wanted), "provenance": {"torch": torch_of[b]}}
        cov = judge.coverage_for(doc, b, coverage_dir)
        sources[b] = list(cov.paths)
        for op in wanted:
            statuses[op][b] = {d: status(cov, op, d) for d in DIRECTIONS}
        block = ((cov.registered or {}).get("provenance") or {}).get("sdpa")
        if sdpa.OP in statuses and isinstance(block, dict):
            dispatch.setdefault(sdpa.OP, {})[b] = block
    schemas, schema_note = schema_lines(wanted, first_torch)
    expected: dict = {}
    for b in backends:
        for op, lines in vendor.for_ops(coverage_dir, b, wanted)[0].items():
            expected.setdefault(op, {})[b] = lines
            if vendor.path_for(coverage_dir, b) not in sources[b]:
                sources[b].append(vendor.path_for(coverage_dir, b))
    return Answer(
        pattern, backends, python, index_note, shown, more, statuses, schemas, schema_note, sources, expected, dispatch
    )


def _wanted(op, core, tags, namespace, tags_of) -> bool:
    """The --core / --tag / --namespace filters (tags as the registered data keeps them)."""
    if namespace and op.split("::", 1)[0] != namespace:
        return False
    have = tags_of.get(op, ())
    return (not core or "core" in have) and all(t in have for t in tags)


def _tags(backends, coverage_dir: str, torch_of: dict) -> dict[str, set]:
    """op -> tags, over the backends' registered files."""
    out: dict[str, set] = {}
    for b in backends:
        files = layout.snapshots(coverage_dir, b)
        path = layout.pick(files["registered"] or files["declared"], torch_of[b])
        for name, rec in (lineyaml.load(path, summary=False)["ops"] if path else {}).items():
            out.setdefault(name, set()).update(rec.get("tags") or ())
    return out


def _nothing(pattern: str, names, index) -> str:
    """The error for a pattern nothing matches, with the closest op base names and Python names."""
    choices = {_base(n) for n in names} | set(index.names if index else ())
    target = pynames.expand(pattern) if index and "." in pattern else pattern
    return (
        f"no op or Python name matches {pattern!r}{suggest.did_you_mean(target, choices)}; "
        "try a shorter name or a regular expression ('opcov ops softmax -b BACKEND')"
    )


def schema_lines(ops, data_torch: str) -> tuple[dict, str]:
    """aten schemas of ``ops`` from torchgen's native_functions.yaml (shipped in the torch wheel,
    read as text, torch not imported), when the installed torch is a build of the data's release."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        installed = version("torch")
    except PackageNotFoundError:
        return {}, "schemas are not shown: torch is not installed here (they come from its native_functions.yaml)"
    if not layout.same_torch(installed, data_torch):
        return {}, f"schemas are not shown: the installed torch is {installed}, the data's {data_torch}"
    from opcov.catalog import native_functions_path

    try:
        with open(native_functions_path(), encoding="utf-8") as f:
            text = f.read()
    except (ImportError, OSError) as exc:
        return {}, f"schemas are not shown: cannot read torchgen's native_functions.yaml ({exc})"
    wanted = set(ops)
    out = {}
    for m in re.finditer(r"^- func: ((\S+?)\(.*)$", text, re.M):
        name = "aten::" + m.group(2)
        if name in wanted:
            out[name] = "aten::" + m.group(1)
    return out, ""


# ---------------------------------------------------------------- text


def headline(ans: Answer) -> str:
    """The answer in one line, first, for the best match: 'answer: aten::mm | tpu: forward registered,
    unverified; backward registered, unverified | cpu: forward pass: float32; ...' (the tables below say why)."""
    op = ans.matches[0].op
    parts = []
    for b in ans.backends:
        dirs = ans.statuses[op][b]
        said = "; ".join(f"{d} {s.text.split(' (')[0]}" for d, s in dirs.items())
        block = ans.dispatch.get(op, {}).get(b)
        if block:  # the kernel the op reaches there, first of all
            said = f"dispatches to {', '.join(block.get('kernels') or ())} ({block.get('evidence')}); " + said
        parts.append(f"{b}: {said or 'no data'}")
    return f"answer: {op} | " + " | ".join(parts)


def render(ans: Answer) -> str:
    """The answer as text: the Python names resolved, then per op its schema and a row per backend
    and direction (evidence, status), then what was not shown and where the data came from."""
    from opcov.formats import table_lines

    lines = [headline(ans), ""] if ans.matches else []
    for py, ops in ans.python.items():
        lines.append(f"{py} -> {', '.join(ops) if ops else '(dispatches no aten op)'}")
    if ans.python:
        lines += [f"  ({ans.index_note})", ""]
    for m in ans.matches:
        how = f"{m.how} match" if m.how != HOW[1] else ""
        how += ("; " if how and m.via else "") + (f"Python name {', '.join(m.via)}" if m.via else "")
        lines.append(f"{m.op}  [{how}]")
        if m.op in ans.schemas:
            lines.append(f"  {ans.schemas[m.op]}")
        rows = []
        for b in ans.backends:
            for d, s in ans.statuses[m.op][b].items():
                rows.append((b, d, vocab.evidence_word(s.evidence).short, s.text))
                if s.why:
                    cut = s.why if len(s.why) <= WHY_CHARS else s.why[: WHY_CHARS - 3] + "..."
                    rows.append(("", "", "", f"  {cut}"))
                if s.note and s.evidence != "probed" and s.status != "not_applicable":
                    rows.append(("", "", "", f"  ({s.note})"))
        lines += table_lines(rows, ("backend", "direction", "evidence", "status"), indent="  ")
        for b, said in ans.expected.get(m.op, {}).items():
            lines += [f"  {b}: {line}" for line in said]
        if m.op in ans.dispatch:
            lines.append(
                "  dispatches to (the op picks a kernel per call and device; the composite above is its math path, "
                "as recorded on meta tensors):"
            )
            lines += [f"    {b}: {sdpa.said(block)}" for b, block in ans.dispatch[m.op].items()]
            lines += [f"    {b}: not recorded" for b in ans.backends if b not in ans.dispatch[m.op]]
        lines.append("")
    shown = f"{len(ans.matches)} op(s) shown"
    if ans.more:
        shown += "; not shown: " + ", ".join(f"{n} more by {how}" for how, n in ans.more.items())
        shown += " (--all, --limit N)"
    lines.append(shown)
    kinds = {s.evidence for per in ans.statuses.values() for dirs in per.values() for s in dirs.values()}
    for kind in vocab.EVIDENCE_LEVELS:
        if kind in kinds:
            lines.append(f"{vocab.evidence_name(kind)}: {vocab.EVIDENCE_MEANING[kind]}")
    for note in (ans.index_note if not ans.python else "", ans.schema_note):
        if note:
            lines.append(f"note: {note}")
    for b, paths in ans.sources.items():
        lines.append(f"{b}: {', '.join(paths)}")
    return "\n".join(lines) + "\n"


def data_catalog(coverage_dir: str):
    """A Catalog of the op names and tags in the registered data (cpu's, else the first backend's),
    for ``opcov ops`` where torch is not installed; (catalog, the file read)."""
    from opcov.catalog import Catalog, Op

    have = layout.backends_with_data(coverage_dir)
    for b in sorted(have, key=lambda b: b != backends.REFERENCE):
        path = layout.pick(layout.snapshots(coverage_dir, b)["registered"], "")
        if path:
            doc = lineyaml.load(path, summary=False)
            ops = {name: Op(name, "", tuple(rec.get("tags") or ())) for name, rec in doc["ops"].items()}
            prov = doc["provenance"]
            return Catalog(str(prov.get("torch", "?")), tuple(prov.get("catalog_modules") or ()), ops), path
    raise DataError(
        f"no registered coverage file under {coverage_dir}/ to list ops from (and torch is "
        "not installed to build the catalogue)"
    )


def is_torch_installed() -> bool:
    """Whether torch can be imported here (found, not imported)."""
    import importlib.util

    return importlib.util.find_spec("torch") is not None
