"""The site's model: everything the pages show, gathered from coverage/ files (torch is never imported).

Kept apart from rendering (sitegen.py) so that the numbers the pages print can be
tested without HTML, and so that one place decides how registered and probed
evidence, snapshots and model op sets are joined.
"""

from __future__ import annotations

import operator
import os
import re
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from opcov import backends, vocab
from opcov import dtypes as dtypes_mod
from opcov.errors import DataError, UsageError
from opcov.scan import pynames as pynames_mod
from opcov.scan import sdpa
from opcov.store import layout, lineyaml, opset
from opcov.store import observed as observed_store
from opcov.store.cells import ProbedCell, record_cells, skip_reason
from opcov.store.parallel import site_key
from opcov.verdict import judge

CONTROLS = tuple(b.name for b in backends.BUILTIN if b.control)  # the built-in ones; added records may add more
# Registered resolved statuses, best first (for display order).
REG_ORDER = vocab.REGISTERED_BEST_FIRST
# Probed statuses (docs/DATA.md), grouped for colour and summaries; in a fixed order (the matrix codes a status
# by its place here), statuses vocab adds later (fallback) after the first ten.
_PROBED_FIRST = (
    "pass",
    "pass_low_precision",
    "mismatch",
    "unsupported",
    "error",
    "crash",
    "timeout",
    "not_comparable",
    "no_reference",
    "skipped",
)
PROBE_GROUPS = {
    s: vocab.PROBED[s].css for s in _PROBED_FIRST + tuple(s for s in vocab.PROBED if s not in _PROBED_FIRST)
}


@dataclass
class Snapshot:
    """One coverage file: one backend, one evidence kind, one set of versions."""

    path: str  # relative to the coverage folder, with '/'
    doc: dict
    _cells: dict = field(default_factory=dict, init=False, repr=False, compare=False)

    @property
    def backend(self) -> str:
        return self.doc["backend"]["name"]

    @property
    def evidence(self) -> str:
        return self.doc["evidence"]

    @property
    def prov(self) -> dict:
        return self.doc.get("provenance") or {}

    @property
    def created(self) -> str:
        return str(self.prov.get("created", ""))

    @property
    def versions(self) -> str:
        b = self.doc["backend"]
        text = f"torch {self.prov.get('torch', '?')}"
        if b.get("package") and b.get("package") != "torch":
            text += f", {b['package']} {b.get('version', '?')}"
        return text

    @property
    def ops(self) -> dict:
        return self.doc.get("ops") or {}

    def cells(self, op: str) -> dict[str, ProbedCell]:
        """dtype key -> probed cell of one op, parsed once; {} for an op skipped or not in the file."""
        if op not in self._cells:
            self._cells[op] = record_cells(self.ops.get(op))
        return self._cells[op]


@dataclass
class Backend:
    name: str
    snapshots: list[Snapshot] | tuple[Snapshot, ...] = field(
        default_factory=list
    )  # oldest first; a tuple once load_site has them all
    prefer: str = ""  # the torch the zoo's op sets were traced with: its snapshots are shown first
    # its compile coverage (coverage/<backend>/compile/) as a Backend of its own: what its compiler accepts
    compile: Backend | None = None
    _latest: dict = field(default_factory=dict, init=False, repr=False, compare=False)

    def latest(self, evidence: str) -> Snapshot | None:
        """The newest snapshot of ``evidence`` made with the preferred torch (another build of its release
        counts), else the newest: a backend with data of several torch releases (cpu scanned at 2.13 and at
        2.9 for xla's fallback rules) is shown with the data its verdicts rest on."""
        memo = self._latest.get((evidence, self.prefer))  # asked ~a million times by a site build
        if memo is not None and memo[0] is self.snapshots:  # load_site leaves a tuple: nothing to compare
            return memo[1]
        snaps = tuple(self.snapshots)  # a list may have changed since: worked out once per its contents
        if memo is not None and len(memo[0]) == len(snaps) and all(map(operator.is_, memo[0], snaps)):
            return memo[1]
        found = [s for s in snaps if s.evidence == evidence]
        same = [s for s in found if self.prefer and layout.same_torch(s.prov.get("torch"), self.prefer)]
        out = (same or found)[-1] if found else None
        self._latest[(evidence, self.prefer)] = (snaps, out)  # tuple() of a tuple is that tuple: the fast path above
        return out

    @property
    def registered(self) -> Snapshot | None:
        """The static snapshot: the newest registered scan, else the newest declared data (its
        ``evidence`` says which; opcov.verdict.judge.coverage_for chooses the same way)."""
        return self.latest("registered") or self.latest("declared")

    @property
    def probed(self) -> Snapshot | None:
        return self.latest("probed")

    @property
    def newest(self) -> Snapshot | None:
        """The snapshot whose versions the pages show: the static one, else the probed one."""
        return self.registered or self.probed

    @property
    def torch(self) -> str:
        """The torch version of the backend's data as the pages show it ('2.9.0', '2.13.0+cpu'); '' for none."""
        snap = self.newest
        return str(snap.prov.get("torch", "")) if snap else ""

    @property
    def versions(self) -> str:
        """'torch 2.9.0, torch_xla 2.9.0': what a column header or a backend page names."""
        return self.newest.versions if self.newest else "no data"

    @property
    def control(self) -> bool:
        """cpu and meta are controls (their records say so): the references the others are judged against,
        no target to compare."""
        record = backends.record(self.name)
        return bool(record and record.control)


@dataclass
class Model:
    """One model name with its op sets per mode (inference, training)."""

    name: str
    modes: dict = field(default_factory=dict)  # mode -> (path, doc)
    # (compile backend, mode) -> (path, doc): its compiled op sets (coverage/models/<model>/compile/)
    compiled: dict = field(default_factory=dict)


@dataclass
class Site:
    coverage_dir: str
    backends: list[Backend]
    models: list[Model]
    catalog: dict  # op name -> {"schema": str, "tags": [..]} where known
    catalog_note: str
    ops: list[str]  # every op name in any latest snapshot, sorted
    users: dict  # op name -> sorted list of (model, mode)
    pynames: pynames_mod.Index | None = None  # the Python-name index of the data's torch, when committed
    pynames_note: str = ""  # which index the pages use, or why Python names are not shown
    python_of: dict = field(default_factory=dict)  # op name -> sorted Python names that dispatch it
    # backend name -> ops of the site's catalogue (the union over backends) that do not exist in that backend's
    # torch: aten ops its registered scan (which covers every op its torch defines) lacks, held by the data of
    # a backend on another torch release (see not_in_torch)
    absent: dict = field(default_factory=dict)
    # (model, mode, backend) -> the torch version of the data its verdict rests on (judge_models fills it)
    data_torch: dict = field(default_factory=dict)
    # (backend, model, mode) -> (path relative to the coverage folder, document): observed runs ('opcov run')
    observed: dict = field(default_factory=dict)
    # backends opcov knows ('opcov backends') with no data in this folder (TorchNeuron today): each has a
    # 'no data yet' row and page saying what would fill it, as check's row does
    no_data: list = field(default_factory=list)
    _models: tuple = field(default=(None, 0, {}), init=False, repr=False, compare=False)  # (list, length, by name)

    def backend(self, name: str) -> Backend:
        return next(b for b in self.backends if b.name == name)

    def model(self, name: str) -> Model:
        """The model of that name (every op page looks up its users' models)."""
        held, n, by_name = self._models
        if held is not self.models or n != len(self.models):
            by_name = {}
            for m in self.models:
                by_name.setdefault(m.name, m)  # the first of a name, as a search would find
            self._models = (self.models, len(self.models), by_name)
        return by_name[name]


# ---------------------------------------------------------------- loading

PARALLEL_FILES = 200  # data files from which load_site parses half of them in a forked child (auto)


def _read(path: str, rel: str):
    """The document of one data file (an op set, or a coverage file: data.load, faster on the layout
    data.dumps writes), or the exception its reading raised (load_site raises it in file order)."""
    try:
        return opset.load(path) if layout.in_models(rel) else lineyaml.load(path)
    except Exception as exc:  # noqa: BLE001 - handed back, raised where the serial read would have
        return exc


@judge.bulk()  # every coverage and op-set file held at once: see judge.bulk
def load_site(coverage_dir: str, parallel: bool | None = None, kept=None) -> Site:
    """Read every coverage and op-set file under ``coverage_dir``; DataError names the bad file.

    ``parallel``: share the files with a forked child, item by item (opcov.forked; documents are quick to
    pickle back, parsing is not). None: where there are PARALLEL_FILES or more and forked.spare_core();
    False: never. The site is the same either way, and so is the error raised. ``kept``: an
    opcov.site.kept.Kept, whose documents are used where their files are unchanged, and which keeps
    those read now."""
    from opcov import forked

    coverage_dir = str(coverage_dir)  # the site shows this folder's data alone (no layout.FoundCoverage fallback)
    if not os.path.isdir(coverage_dir):
        raise UsageError(f"{coverage_dir}: no such folder; pass --coverage DIR (the folder 'opcov scan' writes to)")
    stray = layout.strays(coverage_dir)  # what check passes over: never publish a site that differs from it
    if stray:
        more = f" (and {len(stray) - 1} more)" if len(stray) > 1 else ""
        raise DataError(f"{stray[0][0]}: {stray[0][1]}{more}; run 'opcov lint {coverage_dir}'")
    backends: dict[str, Backend] = {}
    models: dict[str, Model] = {}
    files = layout.yaml_files(coverage_dir) + layout.compiled_model_files(coverage_dir)
    files += layout.parallel_model_files(coverage_dir)  # sharded steps: a mode of their own per style and size
    files += [
        p
        for b in sorted(layout.listdir(coverage_dir))
        if os.path.isdir(layout.compile_coverage_dir(b, coverage_dir))
        for kind in layout.compile_snapshots(coverage_dir, b).values()
        for p in kind
    ]
    paths = [(p, os.path.relpath(p, coverage_dir).replace(os.sep, "/")) for p in files]
    compile_snaps: dict[str, list] = {}
    read = {rel: kept.doc(rel) for _, rel in paths} if kept is not None else {}
    todo = [(p, rel) for p, rel in paths if read.get(rel) is None]
    if parallel is None:
        parallel = len(todo) >= PARALLEL_FILES and forked.spare_core()
    read.update(
        zip((rel for _, rel in todo), forked.split_map(lambda p: _read(*p), todo, fork=parallel and forked.can_fork()))
    )
    if kept is not None:
        kept.keep_docs({rel: doc for rel, doc in read.items() if not isinstance(doc, Exception)})
    docs = [read[rel] for _, rel in paths]
    compiled_sets = []  # (folder, (compile backend, mode), (rel, document or the DataError reading it))
    for (path, rel), doc in zip(paths, docs):
        folder, sub, stem = (rel.split("/") + ["", "", ""])[1:4]
        if layout.in_models(rel) and sub == layout.COMPILE:  # models/<model>/compile/<compile backend>-<mode>.yaml
            if isinstance(doc, DataError):  # shown on the model's page; the rest of the site stands
                compiled_sets.append((folder, tuple(stem.rsplit(".", 1)[0].rsplit("-", 1)), (rel, doc)))
                continue
            if isinstance(doc, Exception):
                raise doc
            compiled_sets.append((folder, (str((doc.get("compile") or {}).get("backend")), doc["mode"]), (rel, doc)))
            continue
        if isinstance(doc, Exception):
            raise doc
        if layout.in_models(rel):
            name = str(doc["model"]["name"])
            model = models.setdefault(name, Model(name))
            mode = site_key(doc) if sub == layout.PARALLEL else doc["mode"]
            if mode in model.modes:
                raise DataError(
                    f"{path}: a second {mode} op set for model {name!r} "
                    f"(the other is {model.modes[mode][0]}); keep one file per model and mode"
                )
            model.modes[mode] = (rel, doc)
            continue
        snap = Snapshot(rel, doc)
        if f"/{layout.COMPILE}/" in rel:  # <backend>/compile/: compile coverage
            compile_snaps.setdefault(snap.backend, []).append(snap)
            continue
        backends.setdefault(snap.backend, Backend(snap.backend)).snapshots.append(snap)  # type: ignore[union-attr]  # a list until sorted below
    named = {rel.split("/")[1]: m for m in models.values() for rel, _ in m.modes.values()}  # folder -> model
    for folder, key, found in compiled_sets:
        model = named.get(folder) or models.setdefault(folder, Model(folder))
        model.compiled.setdefault(key, found)
    traced = Counter(
        str((doc.get("provenance") or {}).get("torch")) for m in models.values() for _, doc in m.modes.values()
    )
    for b in backends.values():
        b.snapshots = tuple(sorted(b.snapshots, key=lambda s: (s.created, s.path)))  # fixed from here on
        b.prefer = min(traced, key=lambda t: (-traced[t], t)) if traced else ""
        if b.name in compile_snaps:
            b.compile = Backend(
                b.name, tuple(sorted(compile_snaps[b.name], key=lambda s: (s.created, s.path))), b.prefer
            )
    if not backends:
        raise UsageError(f"{coverage_dir}: no coverage files; create one with 'opcov scan BACKEND'")
    names: set[str] = set()
    for b in backends.values():
        for newest in (b.registered, b.probed):
            if newest:
                names.update(newest.ops)
    users: dict[str, set] = {}
    for m in models.values():
        for mode, (_, doc) in m.modes.items():
            for op in doc.get("ops") or {}:
                users.setdefault(op, set()).add((m.name, mode))
    torch_versions = sorted({str(s.prov.get("torch")) for b in backends.values() for s in b.snapshots})
    catalog, note = native_catalog(torch_versions)
    data_tags: dict[str, set] = {}
    for b in backends.values():  # tags kept in registered files outrank those read off native_functions.yaml
        for name, rec in (b.registered.ops if b.registered else {}).items():
            if isinstance(rec.get("tags"), list):
                data_tags.setdefault(name, set()).update(rec["tags"])
    tagged = len(data_tags)
    if tagged:  # the data holds tags: an op without them has none
        for name in names:
            catalog[name] = {"schema": catalog.get(name, {}).get("schema"), "tags": sorted(data_tags.get(name, ()))}
    if tagged:
        note = f"op tags from the registered coverage files; {note}"
    elif catalog:
        note = f"op tags and {note}"
    index, index_note = python_index(coverage_dir, backends)
    python_of: dict[str, list] = {}
    for py, reached in sorted((index.names if index else {}).items()):
        for op in reached:
            python_of.setdefault(op, []).append(py)
    ordered = [backends[k] for k in sorted(backends)]
    return Site(
        coverage_dir=coverage_dir,
        backends=ordered,
        models=[models[k] for k in sorted(models)],
        catalog=catalog,
        catalog_note=note,
        ops=sorted(names),
        users={k: sorted(v) for k, v in users.items()},
        pynames=index,
        pynames_note=index_note,
        python_of=python_of,
        absent=not_in_torch(ordered),
        observed=observed_runs(coverage_dir),
        no_data=without_data(ordered),
    )


def without_data(have: list[Backend]) -> list[backends.Backend]:
    """The records of the backends opcov knows that have no data among ``have``, in opcov's order."""
    names = {b.name for b in have}
    return [b for b in backends.known_backends() if b.name not in names]


def observed_runs(coverage_dir: str) -> dict:
    """(backend, model, mode) -> (path relative to the coverage folder, document) of every eager observed
    run under coverage/observed/ (opcov.store.observed reads and validates them; a bad one is a DataError);
    the compiled runs are read where compile verdicts are made (judge_compiled_models)."""
    out = {}
    for path in observed_store.files(os.path.join(coverage_dir, observed_store.FOLDER)):
        doc = observed_store.load(path)
        if observed_store.path_of(doc) != "eager":
            continue
        key = (str(doc["backend"].get("name")), str(doc["model"].get("name")), str(doc["model"].get("mode")))
        out[key] = (os.path.relpath(path, coverage_dir).replace(os.sep, "/"), doc)
    return out


def not_in_torch(backends: list[Backend]) -> dict:
    """backend name -> the aten ops that do not exist in its torch: ops its registered scan lacks (a registered
    scan lists every op its torch defines; declared data does not, so it never says an op is absent) that the
    data of a backend on another torch release holds and no data of its own release does. The site's op catalogue is the union over backends: such
    an op reads "not in torch X" on that backend, never "missing"."""
    held: dict[str, set] = {}  # torch version -> ops some backend's data of that version holds
    for b in backends:
        for snap in (b.registered, b.probed):
            if snap:
                held.setdefault(b.torch, set()).update(snap.ops)
    out = {}
    for b in backends:
        snap = b.registered
        if snap is None or snap.evidence != "registered":
            continue
        others = set().union(*(ops for torch, ops in held.items() if not layout.same_torch(torch, b.torch)))
        others -= set().union(*(ops for torch, ops in held.items() if layout.same_torch(torch, b.torch)))
        gone = {
            op
            for op in others
            if op.startswith("aten::") and op not in snap.ops and not (b.probed and op in b.probed.ops)
        }
        if gone:
            out[b.name] = gone
    return out


def python_index(coverage_dir: str, backends: dict) -> tuple[pynames_mod.Index | None, str]:
    """The committed Python-name index made with the data's torch (that of the first backend's newest
    registered scan), and a note saying which, or why Python names are not shown."""
    snaps = [b.registered or b.probed for _, b in sorted(backends.items())]
    torch = next((str(s.prov.get("torch")) for s in snaps if s), "")
    path = layout.pick_pynames(coverage_dir, torch)
    if path is None:
        return None, (
            "Python names are not shown: no Python-name index in the data (python scripts/make_pynames.py writes one)"
        )
    index = pynames_mod.read(path)
    note = f"Python names from {os.path.basename(path)}: what each name dispatched on meta tensors"
    if not layout.same_torch(index.torch, torch):
        note += f" with torch {index.torch} (the data is for torch {torch}: there a name may reach other ops)"
    return index, note


# ---------------------------------------------------------------- schemas and tags


def _installed_torch_version() -> str | None:
    """The installed torch's version, read from torch/version.py without importing torch."""
    import importlib.util

    try:
        spec = importlib.util.find_spec("torch")
    except (ImportError, ValueError):
        return None
    if not spec or not spec.origin:
        return None
    try:
        with open(os.path.join(os.path.dirname(spec.origin), "version.py")) as f:
            match = re.search(r"^__version__\s*=\s*['\"]([^'\"]+)['\"]", f.read(), re.M)
    except OSError:
        return None
    return match.group(1) if match else None


def native_catalog(torch_versions) -> tuple[dict, str]:
    """Schema and tags of aten ops from torchgen's packaged native_functions.yaml.

    Coverage files do not store schemas; torch ships them as a YAML file (torchgen is
    part of the torch wheel, and importing it does not import torch). It is read only
    when the installed torch is a version the data was made with, so the pages never
    mix one release's schemas with another's coverage.
    """
    import yaml

    from opcov.catalog import native_functions_path

    version = _installed_torch_version()
    if not version:
        return {}, "schemas are not shown: torch is not installed here (they come from its native_functions.yaml)"
    if version not in torch_versions:
        return {}, (
            f"schemas are not shown: the installed torch is {version}, the data was made "
            f"with {', '.join(torch_versions)}"
        )
    try:
        path = native_functions_path()
        with open(path) as f:
            entries = yaml.load(f, Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader))
    except (ImportError, OSError, yaml.YAMLError) as exc:
        return {}, f"schemas are not shown: cannot read torchgen's native_functions.yaml ({exc})"
    out = {}
    for entry in entries or []:
        func = str(entry.get("func", ""))
        head = func.split("(", 1)[0]
        if not head:
            continue
        tags = entry.get("tags") or []
        tags = set([tags] if isinstance(tags, str) else tags) | schema_tags(func)
        out["aten::" + head] = {"schema": "aten::" + func, "tags": sorted(tags)}
    return out, f"aten schemas from torch {version}'s native_functions.yaml"


def _split_args(text: str) -> list[str]:
    parts: list[str] = []
    cur: list[str] = []
    depth = 0
    for ch in text:
        if ch in "([":
            depth += 1
        elif ch in ")]":
            depth -= 1
        if ch == "," and depth == 0:
            parts.append("".join(cur).strip())
            cur = []
        else:
            cur.append(ch)
    if "".join(cur).strip():
        parts.append("".join(cur).strip())
    return parts


def schema_tags(func: str) -> set[str]:
    """inplace / out / mutating / view read off a schema string, as opcov.catalog does from the live schema."""
    try:
        args_text, returns = func.split("(", 1)[1].rsplit(") ->", 1)
    except (IndexError, ValueError):
        return set()
    args = _split_args(args_text)
    kwarg_only, mutated = False, []
    for i, arg in enumerate(args):
        if arg == "*":
            kwarg_only = True
            continue
        if re.search(r"\([a-z0-9]+!\)", arg.split(" ", 1)[0]):
            mutated.append((i, kwarg_only))
    if mutated:
        if any(kw for _, kw in mutated):
            return {"out"}
        return {"inplace"} if mutated[0][0] == 0 else {"mutating"}
    return {"view"} if re.search(r"\([a-z0-9]+\)", returns) else set()


# ---------------------------------------------------------------- figures


def share(n: int, total: int) -> str:
    return f"{100 * n / total:.1f}%" if total else "-"


def applicable(section: dict) -> int:
    return int(section.get("overloads", 0)) - int((section.get("res") or {}).get("not_applicable", 0))


def registered_share(snap: Snapshot, section: str) -> tuple[int, int]:
    """(ops resolving to 'registered', applicable ops) in a summary section: aten, core, other_namespaces."""
    s = (snap.doc.get("summary") or {}).get(section) or {}
    return int((s.get("res") or {}).get("registered", 0)), applicable(s)


def probed_counts(snap: Snapshot, ops=None) -> dict:
    """Over ops (all of the snapshot by default): how many have a passing forward in some dtype, etc."""
    counts: dict[str, Any] = {"ops": 0, "fwd_pass": 0, "bwd_pass": 0, "skipped": 0, "failing": 0}
    for name in snap.ops:
        if ops is not None and name not in ops:
            continue
        counts["ops"] += 1
        cells = snap.cells(name)
        if not cells:
            counts["skipped"] += 1
            rec = snap.ops.get(name) if isinstance(snap.ops, dict) else None
            word = str(rec.get("skipped")) if isinstance(rec, dict) and "skipped" in rec else "no reason recorded"
            counts.setdefault("skipped_by", {})
            counts["skipped_by"][word] = counts["skipped_by"].get(word, 0) + 1
            continue
        fwd = [PROBE_GROUPS.get(str(c.forward.status), "unknown") for c in cells.values()]
        bwd = [PROBE_GROUPS.get(str(c.backward.status), "unknown") for c in cells.values() if c.backward.status]
        counts["fwd_pass"] += "ok" in fwd
        counts["bwd_pass"] += "ok" in bwd
        counts["failing"] += "fail" in fwd and "ok" not in fwd
    return counts


# ---------------------------------------------------------------- verdicts


@judge.bulk()
def judge_models(site: Site) -> dict:
    """(model, mode, backend) -> opcov.verdict.judge.BackendVerdict, judged as 'opcov check' judges
    (judge.coverage_for, on the documents the site holds): the given inputs lead, each other input variant
    judged apart in its ``variants`` (check.judge_variants), and an observed run of the model on the backend
    named first among its notes (verdict.observed.annotate)."""
    from opcov.verdict import check, observed

    held = {os.path.join(site.coverage_dir, *s.path.split("/")): s for b in site.backends for s in b.snapshots}
    out = {}
    pool: dict = {}  # each requirement judged once per backend's documents (judge.share)
    listings: dict = {}  # each backend's folder listed once
    shown_paths: dict = {}  # a verdict's data files as the pages name them, worked out once per set of files
    observed_at = {(b, m, md) for b, m, md in site.observed}
    for m in site.models:
        for mode, (_, doc) in sorted(m.modes.items()):
            names = judge.needed_ops(doc)  # once per op set, not once per backend
            parts = check.variant_parts(doc)  # the given inputs' calls, as 'opcov check' leads with, and the others
            for b in site.backends:
                # where the model was also recorded on the backend itself (check.own_path), it is judged on that
                own = check.own_path(doc, b.name, site.coverage_dir)
                bdoc, bparts, bnames = (own[1], check.variant_parts(own[1]), None) if own else (doc, parts, names)
                try:
                    cov = judge.coverage_for(
                        bdoc,
                        b.name,
                        site.coverage_dir,
                        read=lambda path, names: held[path].doc,
                        listings=listings,
                        names=bnames or judge.needed_ops(bdoc),
                    )
                except UsageError:  # no data for this backend
                    continue
                for snap in b.snapshots:  # the same document: its cells are parsed once, for every page
                    if cov.probed is snap.doc:
                        cov._cells = snap._cells
                key = tuple(cov.paths)
                shown = shown_paths.get(key)
                if shown is None:
                    shown = shown_paths[key] = [
                        f"coverage/{os.path.relpath(p, site.coverage_dir).replace(os.sep, '/')}" for p in key
                    ]
                cov.paths = list(shown)
                v = out[(m.name, mode, b.name)] = check.judge_variants(
                    bdoc, bparts, judge.share(cov, pool), site.coverage_dir
                )
                if own:
                    v.notes.insert(0, f"{check.path_note(bdoc, b.name)} ({shown_path(site, own[0])})")
                    check.python_replacements(v, bdoc)
                if (b.name, m.name, mode) in observed_at:  # this model really run on the device
                    observed.annotate(v, bdoc, site.coverage_dir)
                # as the pages name them (a vendor's test results were named by this machine's path)
                v.sources = [shown_path(site, p) for p in v.sources]
                site.data_torch[(m.name, mode, b.name)] = cov.torch
    return out


def shown_path(site: Site, path: str) -> str:
    """A data file as the pages name it: 'coverage/<path in the coverage folder>' (never this machine's path)."""
    if not path.startswith(os.path.join(site.coverage_dir, "")):
        return path
    return f"coverage/{os.path.relpath(path, site.coverage_dir).replace(os.sep, '/')}"


@judge.bulk()
def judge_compiled_models(site: Site, eager: dict | None = None) -> dict:
    """(model, mode, backend) -> opcov.verdict.compiled.CompiledVerdict; None where the backend has compile
    coverage but the model has no compiled op set for its compile backend; a str (the DataError) where that
    op set cannot be read. As 'opcov check MODEL -b B
    --path compile' judges (its graph breaks' ops on eager coverage, the compiled graphs' on compile
    coverage), on the documents the site holds. Backends without compile coverage are left out."""
    from opcov.verdict import compiled, observed

    held = {
        os.path.join(site.coverage_dir, *s.path.split("/")): s
        for b in site.backends
        for s in (b.snapshots + (b.compile.snapshots if b.compile else ()))  # type: ignore[operator]
    }
    pool: dict = {}
    out: dict = {}
    for m in site.models:
        if not m.compiled:
            continue
        for mode in sorted({md for _, md in m.compiled}):
            eager_doc = m.modes[mode][1] if mode in m.modes else None
            for b in site.backends:
                cb = compiled.COMPILE_BACKEND.get(b.name)
                if b.compile is None or cb is None:
                    continue
                found = m.compiled.get((cb, mode))
                if found is None:
                    out[(m.name, mode, b.name)] = None
                    continue
                path, doc = found
                if isinstance(doc, DataError):
                    out[(m.name, mode, b.name)] = str(doc).replace(os.path.join(site.coverage_dir, ""), "coverage/")
                    continue
                # the eager op set recorded on the backend itself where there is one, as 'opcov check' takes it
                folder = os.path.join(layout.models_dir(site.coverage_dir), str(doc["model"]["name"]).replace("/", "_"))
                on = layout.break_opset_path(folder, b.name, mode)
                here = compiled.eager_opset_for(doc, site.coverage_dir, b.name) if os.path.isfile(on) else eager_doc
                cv = compiled.judge_compiled(
                    f"coverage/{path}",
                    doc,
                    b.name,
                    site.coverage_dir,
                    here,
                    read=lambda p, names: held[p].doc,
                    pool=pool,
                )
                observed.annotate_compiled(cv, str(doc["model"]["name"]), site.coverage_dir)
                if cv.observed:
                    cv.observed["file"] = shown_path(site, cv.observed["file"])
                for v in (cv.graphs, cv.eager):
                    if v is not None:
                        v.sources = [shown_path(site, p) for p in v.sources]
                out[(m.name, mode, b.name)] = cv
    return out


# ---------------------------------------------------------------- one op on one backend: the answer

DIRECTIONS = ("forward", "backward")
# How one op's forward or backward fares on one backend, in one letter (the search index, the matrix's
# "differs" filter and sorting, and the API share them), best first. Built from vocab's words: a registered claim
# takes the registered level's icon and colour, never the probed pass's.
_REG = vocab.REGISTERED
SUPPORT = {
    w.name: w
    for w in (
        vocab.Word("P", "passes in every dtype probed", "probed pass", vocab.PROBED["pass"].icon, "ok"),
        vocab.Word(
            "S", "passes in some dtypes probed, fails or is unchecked in others", "some dtypes", "\u25d1", "warn"
        ),
        vocab.Word(
            "R",
            vocab.EVIDENCE["registered"].label,
            vocab.EVIDENCE["registered"].short,
            vocab.EVIDENCE["registered"].icon,
            vocab.EVIDENCE["registered"].css,
        ),
        vocab.Word(
            "D",
            vocab.EVIDENCE["declared"].label,
            vocab.EVIDENCE["declared"].short,
            vocab.EVIDENCE["declared"].icon,
            vocab.EVIDENCE["declared"].css,
        ),
        vocab.Word(
            "C", "ran on the probe, values unchecked", "unchecked", vocab.PROBED["not_comparable"].icon, "unknown"
        ),
        vocab.Word(
            "U",
            "opcov could not resolve what it reaches",
            "unresolved",
            _REG["unresolved"].icon,
            _REG["unresolved"].css,
        ),
        vocab.Word("F", _REG["fallback"].label, _REG["fallback"].short, _REG["fallback"].icon, _REG["fallback"].css),
        vocab.Word("X", "fails: no dtype probed passes", "probed fail", vocab.PROBED["error"].icon, "fail"),
        vocab.Word("M", _REG["missing"].label, _REG["missing"].short, _REG["missing"].icon, _REG["missing"].css),
        vocab.Word(
            "N",
            _REG["not_applicable"].label,
            _REG["not_applicable"].short,
            _REG["not_applicable"].icon,
            _REG["not_applicable"].css,
        ),
        vocab.Word(
            "A", "not in this backend's torch: the op does not exist in that release", "not in torch", "\u2205", "na"
        ),
        vocab.Word("-", "not in this backend's data", "no data", vocab.NO_EVIDENCE.icon, "none"),
    )
}
SUPPORT_OF_RES = {"registered": "R", "fallback": "F", "unresolved": "U", "missing": "M", "not_applicable": "N"}
# The registered path in words, for the answer line.
PATH_WORDS = {
    "kernel": "own kernel",
    "out_variant": "through its .out kernel",
    "composite": "composite",
    "fallback": "boxed fallback only",
    "missing": "no kernel",
    "not_applicable": "host-only",
    "backend_kernel": "own backward kernel",
    "formula": "derivative formula",
    "lost": "backward lost",
    "not_implemented": "backward not implemented",
    "none": "no backward",
}


def dtype_order(keys) -> list[str]:
    """Dtype keys in reading order: floating and complex types as opcov.dtypes lists them, then the rest by name."""
    rank = {d: i for i, d in enumerate(("float32", "bfloat16", "float16") + dtypes_mod.FLOATING)}
    return sorted(set(keys), key=lambda d: (rank.get(d, len(rank)), d))


@dataclass
class Direction:
    """One op's forward or backward on one backend: probed where the probe has a status for some dtype
    (probed evidence outranks a registration), else what the registered scan claims, else nothing."""

    direction: str
    code: str  # a key of SUPPORT
    evidence: str  # probed | registered | declared | none
    dtypes: dict = field(default_factory=dict)  # dtype -> probed status (probed evidence only)
    res: str = ""  # registered resolved status
    path: str = ""  # registered path (kernel, formula, composite...)
    via: list = field(default_factory=list)
    why: str = ""  # why a registration is unresolved, or the first failing dtype's error
    fallback_enabled: bool | None = None
    torch: str = ""  # the backend's torch, for an op that does not exist in it (code A)
    _phrase: str | None = field(default=None, init=False, repr=False, compare=False)  # phrase(), once made

    @property
    def word(self) -> vocab.Word:
        return SUPPORT[self.code]

    def phrase(self) -> str:
        """'passes in 6 of 6 dtypes', 'registered own kernel, unverified', 'no kernel'... (worded once: an
        op page, its JSON and the search index each ask)."""
        if self._phrase is None:
            self._phrase = self._words()
        return self._phrase

    def _words(self) -> str:
        if self.evidence == "probed":
            ok = [d for d, s in self.dtypes.items() if s in ("pass", "pass_low_precision")]
            low = [d for d, s in self.dtypes.items() if s == "pass_low_precision"]
            n = len(self.dtypes)
            if self.code == "C":
                return f"ran in {n} dtype{'s' * (n != 1)} probed, values unchecked"
            text = f"passes in {len(ok)} of {n} dtype{'s' * (n != 1)} probed"
            others: dict[str, list[str]] = {}
            for d, s in self.dtypes.items():
                if d not in ok:
                    others.setdefault(s, []).append(d)
            if low:
                text += f" ({', '.join(dtype_order(low))} only at reduced precision)"
            if others:
                text += (
                    " ("
                    + "; ".join(
                        f"{vocab.PROBED[s].short if s in vocab.PROBED else s}: {', '.join(dtype_order(ds))}"
                        for s, ds in sorted(others.items(), key=lambda kv: vocab.PROBED_RANK.get(kv[0], 99))
                    )
                    + ")"
                )
            return text
        if self.code == "-":
            return SUPPORT["-"].label
        if self.code == "A":
            return f"not in torch {self.torch} (the op does not exist in that release)"
        path = PATH_WORDS.get(self.path, self.path)
        if self.code in ("R", "D"):
            via = (
                f" of {', '.join(self.via[:2])}{', ...' if len(self.via) > 2 else ''}"
                if self.path == "composite" and self.via
                else ""
            )
            if self.code == "D":  # listed in native_functions.yaml; no binary was read
                return f"declared {path}{via} in native_functions.yaml, unverified"
            return f"registered {path}{via}, unverified"
        if self.code == "F":
            return (
                "CPU fallback only ("
                + ("enabled: runs, slowly" if self.fallback_enabled else "disabled: the call raises")
                + ")"
            )
        if self.code == "U":
            return f"{path}, but opcov could not resolve what it reaches"
        if self.code == "M":
            return path if self.path in ("missing", "lost", "not_implemented", "none") else f"{path}: no kernel"
        return SUPPORT[self.code].label

    def as_dict(self) -> dict:
        out: dict[str, Any] = {"support": self.code, "evidence": self.evidence, "says": self.phrase()}
        out.update(
            {
                k: v
                for k, v in (
                    ("dtypes", self.dtypes),
                    ("res", self.res),
                    ("path", self.path),
                    ("via", self.via),
                    ("why", vocab.reach_words(self.why)),  # in words; the scan's raw record is the detail
                    ("detail", self.why),
                )
                if v
            }
        )
        return out


@dataclass
class OpAnswer:
    """What one backend's data says of one op: both directions and what the probe said of it."""

    backend: str
    forward: Direction
    backward: Direction
    probe: str  # 'probed', 'no probe', 'probe skipped it: ...', 'not in the probed data'
    dispatch: str = ""  # the kernel the op dispatches to there, in words (opcov.scan.sdpa), where recorded

    @property
    def directions(self) -> tuple[Direction, Direction]:
        return self.forward, self.backward

    @property
    def evidence(self) -> str:
        """The weakest evidence of the two directions that have any (for the line's mark)."""
        levels = [d.evidence for d in self.directions if d.code not in ("-", "N", "A")] or [self.forward.evidence]
        return vocab.worst(levels, vocab.EVIDENCE_WORST_FIRST)

    def segments(self) -> list[tuple[Direction | None, str]]:
        """The sentence in parts, each with the direction whose support it words (None: a joint)."""
        fwd, bwd = self.forward, self.backward
        said = fwd.phrase()
        if fwd.code == "A":
            return [(fwd, said)]
        out: list[tuple[Direction | None, str]]
        if said == bwd.phrase() and fwd.code not in ("-", "N"):
            out = [(fwd, f"{said}, forward and backward")]
        elif bwd.code == "N":
            out = [(fwd, said)] + ([] if fwd.code == "N" else [(None, "; no backward")])
        else:
            out = [(fwd, said), (None, "; backward: "), (bwd, bwd.phrase())]
        if self.probe != "probed":
            out.append((None, f"; {self.probe}"))
        if self.dispatch:
            out.append((None, f"; dispatches to {self.dispatch}"))
        return out

    def sentence(self) -> str:
        """One line: 'passes in 6 of 6 dtypes probed, forward and backward' or 'registered own kernel,
        unverified; backward: derivative formula, but opcov could not resolve what it reaches; no probe'."""
        return "".join(text for _, text in self.segments())

    def as_dict(self) -> dict:
        return {
            "says": self.sentence(),
            "evidence": self.evidence,
            "probe": self.probe,
            "forward": self.forward.as_dict(),
            "backward": self.backward.as_dict(),
            **({"dispatches_to": self.dispatch} if self.dispatch else {}),
        }


def probed_support(statuses) -> str:
    """The support letter of probed statuses over dtypes: P all pass, S some, X none pass and some fail,
    F ran only through the CPU fallback (a backend that counts it: PyTorch/XLA), C only unchecked runs; '-' for
    none (skipped)."""
    statuses = [s for s in statuses if s and s != "skipped"]
    ok = [s for s in statuses if s in ("pass", "pass_low_precision")]
    if not statuses:
        return "-"
    if len(ok) == len(statuses):
        return "P"
    if ok:
        return "S"
    if set(statuses) & vocab.PROBED_FAILURES:
        return "X"
    return "F" if "fallback" in statuses else "C"


def _direction(backend: Backend, op: str, direction: str) -> Direction:
    cells = backend.probed.cells(op) if backend.probed else {}
    slots = {d: c.slot(direction) for d, c in cells.items()}
    dtypes = {d: str(s.status) for d, s in slots.items() if s.status and s.status != "skipped"}
    if dtypes:
        bad = [d for d, s in dtypes.items() if s in vocab.PROBED_FAILURES]
        code = probed_support(dtypes.values())
        why = next((f"{d}: {slots[d].why}" for d in dtype_order(bad) if slots[d].why), "")
        return Direction(direction, code, "probed", {d: dtypes[d] for d in dtype_order(dtypes)}, why=why)
    registered = backend.registered
    rec = registered.ops.get(op) if registered else None
    if registered is None or rec is None:
        return Direction(direction, "-", vocab.NO_EVIDENCE.name)
    fwd = direction == "forward"
    res = str(rec.get("res" if fwd else "bwd_res"))
    fb = registered.prov.get("fallback") or {}
    code = SUPPORT_OF_RES.get(res, "U")
    if code == "R" and registered.evidence == "declared":  # a declaration, not a registration
        code = "D"
    return Direction(
        direction,
        code,
        registered.evidence,
        res=res,
        path=str(rec.get("fwd" if fwd else "bwd") or ""),
        via=list(rec.get("via" if fwd else "bwd_via") or []),
        why=str(rec.get("why") or "") if res == "unresolved" else "",
        fallback_enabled=fb.get("enabled") if fb.get("present", True) else None,
    )


def op_answer(backend: Backend, op: str, absent: bool = False) -> OpAnswer:
    """The answer of ``backend``'s newest snapshots for ``op`` (the op pages, the search index, the API);
    ``absent``: the op does not exist in the backend's torch (Site.absent)."""
    if absent:
        gone = [Direction(d, "A", vocab.NO_EVIDENCE.name, torch=backend.torch) for d in DIRECTIONS]
        return OpAnswer(backend.name, gone[0], gone[1], f"not in torch {backend.torch}")
    if backend.probed is None:
        probe = "no probe"
    elif op not in backend.probed.ops:
        probe = "not in the probed data"
    elif skip_reason(backend.probed.ops[op]) is not None:
        probe = f"the probe skipped it ({skip_reason(backend.probed.ops[op])})"
    else:
        probe = "probed"
    block = (backend.registered.prov.get("sdpa") if backend.registered else None) if op == sdpa.OP else None
    return OpAnswer(
        backend.name,
        _direction(backend, op, "forward"),
        _direction(backend, op, "backward"),
        probe,
        sdpa.said(block) if isinstance(block, dict) else "",
    )


# ---------------------------------------------------------------- the model index's facets

FACETS = ("family", "task", "modality")
# op-set source prefix (opcov trace SPEC) -> the family of models it names
FAMILIES = {
    "hf": "transformers",
    "config": "transformers",
    "nn": "torch.nn",
    "timm": "timm",
    "tv": "torchvision",
    "torchvision": "torchvision",
    "diffusers": "diffusers",
    "factory": "factory",
}
# model input name -> the modality it carries (opcov.sources.inputs makes them from the forward signature)
MODALITY_OF_INPUT = {
    "input_ids": "text",
    "decoder_input_ids": "text",
    "inputs_embeds": "text",
    "pixel_values": "vision",
    "pixel_values_videos": "video",
    "pixel_mask": "vision",
    "input_values": "audio",
    "input_features": "audio",
    "audio_values": "audio",
}
NOT_SAID = "not said"
_BUILT = re.compile(r"^\S+ \((\w+)\) built from ")
_INPUTS = "inputs made from the forward signature and config: "


def model_facets(model: Model) -> dict:
    """family, task and modality of a model, for the model index's filters: from its op sets' ``model``
    fields where they hold them (``family``, ``task``, ``modality``), else read off what the trace recorded
    (the source's prefix: hf: is transformers; the head's task and the inputs made, in the op set's notes).
    NOT_SAID where the op sets do not tell."""
    out = {k: NOT_SAID for k in FACETS}
    for _, (_, doc) in sorted(model.modes.items()):
        info = doc.get("model") or {}
        notes = [str(n) for n in (doc.get("provenance") or {}).get("notes") or ()]
        source = str(info.get("source") or "")
        prefix = source.split(":", 1)[0] if ":" in source else ""
        found = {
            "family": info.get("family") or FAMILIES.get(prefix, prefix or None),
            "task": info.get("task"),
            "modality": info.get("modality"),
        }
        for note in notes:
            built = _BUILT.match(note)
            if built and not found["task"]:
                found["task"] = built.group(1)
            if note.startswith(_INPUTS) and not found["modality"]:
                kinds = {
                    MODALITY_OF_INPUT[k]
                    for n in note[len(_INPUTS) :].split(",")
                    if (k := n.strip()) in MODALITY_OF_INPUT
                }
                found["modality"] = "+".join(sorted(kinds)) or None
        if prefix == "nn" and not found["task"]:
            found["task"] = "block"
        for k, v in found.items():
            if v and out[k] == NOT_SAID:
                out[k] = str(v)
    return out
