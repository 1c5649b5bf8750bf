"""The site's model: everything the pages show, gathered from coverage/ files (torch is never imported).

Kept apart from rendering (sitegen.py) so that the numbers the pages print can be
tested without HTML, and so that one place decides how registered and probed
evidence, snapshots and model op sets are joined.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass, field

from opcov.store import layout
from opcov.store import lineyaml
from opcov.store import opset
from opcov.store.cells import ProbedCell, record_cells
from opcov.verdict import judge
from opcov import vocab
from opcov.errors import DataError, UsageError

# Registered resolved statuses, best first (for display order).
REG_ORDER = vocab.REGISTERED_BEST_FIRST
# Probed statuses (docs/DATA.md), grouped for colour and summaries.
PROBE_GROUPS = {s: vocab.PROBED[s].css for s in (
    "pass", "pass_low_precision", "mismatch", "unsupported", "error", "crash", "timeout",
    "not_comparable", "no_reference", "skipped")}


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
    snapshots: list[Snapshot] = field(default_factory=list)  # oldest first

    def latest(self, evidence: str) -> Snapshot | None:
        found = [s for s in self.snapshots if s.evidence == evidence]
        return found[-1] if found else None

    @property
    def registered(self) -> Snapshot | None:
        return self.latest("registered")

    @property
    def probed(self) -> Snapshot | None:
        return self.latest("probed")


@dataclass
class Model:
    """One model name with its op sets per mode (inference, training)."""

    name: str
    modes: dict = field(default_factory=dict)  # mode -> (path, doc)


@dataclass
class Site:
    coverage_dir: str
    backends: list[Backend]
    models: list[Model]
    catalog: dict  # op name -> {"schema": str, "tags": [..]} where known
    catalog_note: str
    ops: list[str]  # every op name in any latest snapshot, sorted
    users: dict  # op name -> sorted list of (model, mode)


# ---------------------------------------------------------------- loading

def load_site(coverage_dir: str) -> Site:
    """Read every coverage and op-set file under ``coverage_dir``; DataError names the bad file."""
    if not os.path.isdir(coverage_dir):
        raise UsageError(f"{coverage_dir}: no such folder; pass --coverage DIR (the folder 'opcov scan' writes to)")
    backends: dict[str, Backend] = {}
    models: dict[str, Model] = {}
    for path in layout.yaml_files(coverage_dir):
        rel = os.path.relpath(path, coverage_dir).replace(os.sep, "/")
        if layout.in_models(rel):
            doc = opset.load(path)
            name = str(doc["model"]["name"])
            model = models.setdefault(name, Model(name))
            if doc["mode"] in model.modes:
                raise DataError(f"{path}: a second {doc['mode']} op set for model {name!r} "
                                f"(the other is {model.modes[doc['mode']][0]}); keep one file per model and mode")
            model.modes[doc["mode"]] = (rel, doc)
            continue
        snap = Snapshot(rel, lineyaml.load(path))  # data.load, faster on the layout data.dumps writes
        backends.setdefault(snap.backend, Backend(snap.backend)).snapshots.append(snap)
    for b in backends.values():
        b.snapshots.sort(key=lambda s: (s.created, s.path))
    if not backends:
        raise UsageError(f"{coverage_dir}: no coverage files; create one with 'opcov scan BACKEND'")
    names: set[str] = set()
    for b in backends.values():
        for snap in (b.registered, b.probed):
            if snap:
                names.update(snap.ops)
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
            catalog[name] = {"schema": catalog.get(name, {}).get("schema"),
                             "tags": sorted(data_tags.get(name, ()))}
    if tagged:
        note = f"op tags from the registered coverage files; {note}"
    elif catalog:
        note = f"op tags and {note}"
    return Site(coverage_dir=coverage_dir, backends=[backends[k] for k in sorted(backends)],
                models=[models[k] for k in sorted(models)], catalog=catalog, catalog_note=note,
                ops=sorted(names), users={k: sorted(v) for k, v in users.items()})


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
        return {}, (f"schemas are not shown: the installed torch is {version}, the data was made "
                    f"with {', '.join(torch_versions)}")
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
    parts, depth, cur = [], 0, []
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
    counts = {"ops": 0, "fwd_pass": 0, "bwd_pass": 0, "skipped": 0, "failing": 0}
    for name in snap.ops:
        if ops is not None and name not in ops:
            continue
        counts["ops"] += 1
        cells = snap.cells(name)
        if not cells:
            counts["skipped"] += 1
            continue
        fwd = [PROBE_GROUPS.get(str(c.forward.status), "unknown") for c in cells.values()]
        bwd = [PROBE_GROUPS.get(str(c.backward.status), "unknown") for c in cells.values() if c.backward.status]
        counts["fwd_pass"] += "ok" in fwd
        counts["bwd_pass"] += "ok" in bwd
        counts["failing"] += "fail" in fwd and "ok" not in fwd
    return counts


# ---------------------------------------------------------------- verdicts

def judge_models(site: Site) -> dict:
    """(model, mode, backend) -> opcov.verdict.judge.BackendVerdict, judged as 'opcov check' judges
    (judge.coverage_for, on the documents the site holds)."""
    held = {os.path.join(site.coverage_dir, *s.path.split("/")): s.doc for b in site.backends for s in b.snapshots}
    out = {}
    for m in site.models:
        for mode, (_, doc) in sorted(m.modes.items()):
            for b in site.backends:
                try:
                    cov = judge.coverage_for(doc, b.name, site.coverage_dir, read=lambda path, names: held[path])
                except UsageError:  # no data for this backend
                    continue
                cov.paths = [f"coverage/{os.path.relpath(p, site.coverage_dir).replace(os.sep, '/')}"
                             for p in cov.paths]
                out[(m.name, mode, b.name)] = judge.judge(doc, cov)
    return out
