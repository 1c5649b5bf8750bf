"""Coverage data files: vocabulary, validation, deterministic YAML, errors with file:line.

A coverage file is written once by a scan (or a probe) and read by everything
else. Writing is deterministic (sorted keys, one op per line) so a re-run gives a
minimal git diff; reading validates everything and names the file and line of
each problem, so a hand-edited or foreign file never reaches a report half-read.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

from opcov.errors import DataError
from opcov.vocab import BWD_PATHS, EVIDENCE_KINDS, FWD_PATHS, PROBED_STATUSES, RESOLVED

SCHEMA_VERSION = 1

# The words (paths, resolved statuses, probed statuses) are opcov.vocab's.
# A probed cell: ``fwd`` (required) and ``bwd`` statuses, evidence beside them (bwd_* for the backward).
_PROBED_SLOT_KEYS = {"err": "err", "tol": str, "why": str, "blame": str, "case": str, "cases": int,
                     "fails": int, "unpinned": int, "strides": int}
PROBED_CELL_KEYS = {"fwd": PROBED_STATUSES, "bwd": PROBED_STATUSES, "samples": list,
                    **_PROBED_SLOT_KEYS, **{f"bwd_{k}": v for k, v in _PROBED_SLOT_KEYS.items()}}

OP_KEYS = {
    "fwd": FWD_PATHS, "res": RESOLVED, "bwd": BWD_PATHS, "bwd_res": RESOLVED,
    "via": list, "bwd_via": list, "src": str, "bwd_src": str, "why": str, "tags": list,
}
# Catalogue tags kept in registered files, so that readers (check, site) need no torch import.
# Compiler-facing tags (pt2_compliant_tag, needs_*_strides, generated...) are left out.
DATA_TAGS = ("core", "pointwise", "reduction", "inplace", "out", "view", "view_copy", "inplace_view",
             "mutating", "maybe_aliasing_or_mutating", "nondeterministic_seeded",
             "dynamic_output_shape", "data_dependent_output", "host_only")
REQUIRED_OP_KEYS = ("fwd", "res", "bwd", "bwd_res")
TOP_KEYS = {"schema_version", "evidence", "backend", "provenance", "summary", "ops"}
BACKEND_KEYS = {"name", "device_type", "dispatch_key", "package", "version"}
PROVENANCE_KEYS = {"torch", "opcov", "created", "command", "host", "device", "catalog_modules",
                   "mode", "settings", "fallback", "reach", "notes", "kernel_sources",
                   "probe", "merged_from"}


def worst(statuses) -> str:
    """The worst resolved status; ``not_applicable`` only when there is nothing else."""
    rank = {s: i for i, s in enumerate(RESOLVED)}
    found = [s for s in statuses if s != "not_applicable"]
    return min(found, key=rank.__getitem__) if found else "registered"


@dataclass(frozen=True)
class Problem:
    path: str  # file
    line: int | None
    message: str
    severity: str = "error"  # or "warning"

    def __str__(self) -> str:
        where = f"{self.path}:{self.line}" if self.line else self.path
        return f"{where}: {self.severity}: {self.message}"


# ---------------------------------------------------------------- writing

_DUMPER = None


def _dumper():
    """SafeDumper without anchors: a list shared by two keys is written twice, never as &id001/*id001
    (anchors would break the one-op-per-line layout that fast readers rely on). libyaml's emitter
    when PyYAML has it (the same text, about 5x faster: a probe writes ~3,700 op lines)."""
    global _DUMPER
    if _DUMPER is None:
        import yaml

        class Dumper(getattr(yaml, "CSafeDumper", yaml.SafeDumper)):
            def ignore_aliases(self, data):
                return True

        _DUMPER = Dumper
    return _DUMPER


def _flow(value) -> str:
    """One op record as a single flow-style YAML line."""
    import yaml

    text = yaml.dump(value, Dumper=_dumper(), default_flow_style=True, sort_keys=True, width=1 << 30)
    if text.endswith("\n...\n"):  # a plain scalar gets a document-end marker
        text = text[:-4]
    return text.strip()


def dumps(doc: dict) -> str:
    """Deterministic YAML: header block, then one line per op, sorted."""
    import yaml

    head = {k: v for k, v in doc.items() if k != "ops"}
    text = yaml.dump(head, Dumper=_dumper(), sort_keys=True, default_flow_style=False, width=100,
                          allow_unicode=True)
    lines = [text.rstrip("\n"), "ops:" if doc.get("ops") else "ops: {}"]
    for name in sorted(doc.get("ops", {})):
        lines.append(f"  {_flow(name)}: {_flow(doc['ops'][name])}")
    return "\n".join(lines) + "\n"


def save(doc: dict, path: str) -> None:
    """Write atomically, so an interrupted write never leaves half a file."""
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    tmp = f"{path}.tmp{os.getpid()}"
    with open(tmp, "w") as f:
        f.write(dumps(doc))
    os.replace(tmp, path)


# ---------------------------------------------------------------- reading

def _loader():
    import yaml

    return getattr(yaml, "CSafeLoader", yaml.SafeLoader)


def _compose(path: str):
    """The YAML node tree with line marks (parsed only when there is a problem to place)."""
    import yaml

    try:
        with open(path) as f:
            return yaml.compose(f, Loader=_loader())
    except (OSError, yaml.YAMLError):
        return None


def _line_of(node, keys: tuple) -> int | None:
    """1-based line of the node at ``keys`` under ``node``."""
    import yaml

    line = node.start_mark.line + 1 if node is not None else None
    for key in keys:
        if node is None or not isinstance(node, yaml.MappingNode):
            break
        for k, v in node.value:
            if k.value == key:
                line, node = k.start_mark.line + 1, v
                break
        else:
            break
    return line


def validate(doc, path: str) -> list[Problem]:
    """Every schema problem in a parsed coverage document, with file:line."""
    raw: list[tuple[tuple, str]] = []
    if not isinstance(doc, dict):
        return [Problem(path, 1, "not a coverage file: the top level must be a mapping")]
    version = doc.get("schema_version")
    if version != SCHEMA_VERSION:
        raw.append((("schema_version",),
                    f"schema_version is {version!r}; this opcov reads {SCHEMA_VERSION} "
                    "(re-create the file with this opcov's scan)"))
    for key in doc:
        if key not in TOP_KEYS:
            raw.append(((key,), f"unknown key {key!r}; expected one of {sorted(TOP_KEYS)}"))
    for key in ("backend", "provenance", "ops"):
        if not isinstance(doc.get(key), dict):
            raw.append(((key,), f"missing or not a mapping: {key!r}"))
    if doc.get("evidence") not in EVIDENCE_KINDS:
        raw.append((("evidence",), f"evidence is {doc.get('evidence')!r}; expected one of {EVIDENCE_KINDS}"))
    for section, allowed in (("backend", BACKEND_KEYS), ("provenance", PROVENANCE_KEYS)):
        for key in doc.get(section) or {} if isinstance(doc.get(section), dict) else {}:
            if key not in allowed:
                raw.append(((section, key), f"unknown {section} key {key!r}"))
    prov = doc.get("provenance") if isinstance(doc.get("provenance"), dict) else {}
    for key in ("torch", "command", "created"):
        if not prov.get(key):
            raw.append((("provenance",), f"provenance lacks {key!r}: data without it cannot be reproduced"))
    ops = doc.get("ops") if isinstance(doc.get("ops"), dict) else {}
    check = _probed_op_problems if doc.get("evidence") == "probed" else _op_problems
    for name, rec in ops.items():
        raw.extend(((("ops", name) + k), m) for k, m in check(name, rec))
    root = _compose(path) if raw else None
    return [Problem(path, _line_of(root, keys), msg) for keys, msg in raw]


def _op_problems(name, rec):
    if not isinstance(name, str) or "::" not in name:
        yield (), f"op name {name!r} is not of the form namespace::op[.overload]"
    if not isinstance(rec, dict):
        yield (), f"{name}: record must be a mapping"
        return
    for key in REQUIRED_OP_KEYS:
        if key not in rec:
            yield (), f"{name}: missing {key!r}"
    for key, value in rec.items():
        allowed = OP_KEYS.get(key)
        if allowed is None:
            yield (key,), f"{name}: unknown key {key!r}; expected one of {sorted(OP_KEYS)}"
        elif allowed is list:
            if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
                yield (key,), f"{name}: {key} must be a list of strings"
        elif allowed is str:
            if not isinstance(value, str):
                yield (key,), f"{name}: {key} must be a string"
        elif value not in allowed:
            yield (key,), f"{name}: {key} is {value!r}; expected one of {', '.join(allowed)}"


def _probed_op_problems(name, rec):
    """A probed op: ``{skipped: reason}``, or ``{dtype key: cell}`` (see docs/DATA.md)."""
    if not isinstance(name, str) or "::" not in name:
        yield (), f"op name {name!r} is not of the form namespace::op[.overload]"
    if not isinstance(rec, dict) or not rec:
        yield (), f"{name}: record must be a non-empty mapping of dtype -> cell, or {{skipped: reason}}"
        return
    if "skipped" in rec:
        if len(rec) != 1 or not isinstance(rec["skipped"], str):
            yield ("skipped",), f"{name}: a skipped op is exactly {{skipped: <reason>}}"
        return
    for dkey, cell in rec.items():
        if not isinstance(dkey, str) or not dkey.isidentifier():
            yield (dkey,), f"{name}: dtype key {dkey!r} is not a dtype name (float32, int64, none...)"
            continue
        if not isinstance(cell, dict):
            yield (dkey,), f"{name}: {dkey}: cell must be a mapping with 'fwd'"
            continue
        if "fwd" not in cell:
            yield (dkey,), f"{name}: {dkey}: missing 'fwd'"
        for key, value in cell.items():
            allowed = PROBED_CELL_KEYS.get(key)
            where = (dkey, key)
            if allowed is None:
                yield where, f"{name}: {dkey}: unknown key {key!r}; expected one of {sorted(PROBED_CELL_KEYS)}"
            elif allowed == "err":
                if not (isinstance(value, list) and len(value) == 2
                        and all(isinstance(v, (int, float)) for v in value)):
                    yield where, f"{name}: {dkey}: {key} must be [max abs error, max rel error]"
            elif allowed is list:
                if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
                    yield where, f"{name}: {dkey}: {key} must be a list of names"
            elif allowed is int:
                if not isinstance(value, int) or isinstance(value, bool) or value < 0:
                    yield where, f"{name}: {dkey}: {key} must be a count"
            elif allowed is str:
                if not isinstance(value, str):
                    yield where, f"{name}: {dkey}: {key} must be a string"
            elif value not in allowed:
                yield where, f"{name}: {dkey}: {key} is {value!r}; expected one of {', '.join(allowed)}"


def parse(path: str):
    """(document, None), or (None, Problem) when the file cannot be read or is not YAML."""
    import yaml

    try:
        with open(path) as f:
            return yaml.load(f, Loader=_loader()), None
    except OSError as exc:
        return None, Problem(path, None, f"cannot read: {exc.strerror}")
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        return None, Problem(path, mark.line + 1 if mark else None,
                             f"not valid YAML: {getattr(exc, 'problem', exc)}")


def raise_first(problems, path: str) -> None:
    """DataError naming file:line of the first problem (and how many more), if there is any."""
    if problems:
        more = f" (and {len(problems) - 1} more; run 'opcov lint {path}')" if len(problems) > 1 else ""
        raise DataError(f"{problems[0]}{more}")


def load(path: str, validator=None) -> dict:
    """Parse and validate a data file (a coverage file unless another ``validator`` is given);
    DataError names file:line of the first problem."""
    doc, problem = parse(path)
    raise_first([problem] if problem else (validator or validate)(doc, path), path)
    return doc
