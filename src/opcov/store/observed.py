"""Observed-run files (``opcov run``, opcov.tracing.observe): where they live, how they are
written, and the validation that reading them and ``opcov lint`` share. JSON, under
``coverage/observed/<backend>/<model>.<mode>.json`` (eager) and
``coverage/observed/<backend>/compile/<model>.<mode>.json`` (``opcov run --path compile``: the step
run through ``torch.compile``; its document has a ``compile`` record), apart from the YAML coverage
files. Torch-free.
"""

from __future__ import annotations

import os

from opcov.errors import DataError, UsageError
from opcov.store import layout, strictjson

FOLDER = "observed"
KEYS = {"schema_version", "evidence", "backend", "model", "provenance", "result", "backend_record", "ops"}
OPTIONAL = {"compile"}  # a compiled run's record: {"backend", "graph_breaks", ...}
COMPILE = "compile"


MODES = ("inference", "training", "serve")  # serve: generate's runs (opcov run --mode serve)


def path_for(coverage_dir: str, backend: str, model: str, mode: str, path: str = "eager") -> str:
    """coverage/observed/<backend>/<model>.<mode>.json; a compiled run's under <backend>/compile/. The
    backend is a plain name and the mode one of MODES (else a one-line UsageError); the model's name is
    encoded as a folder name ('org/model' -> 'org_model'): names are data, and never lead elsewhere."""
    if mode not in MODES:
        raise UsageError(f"mode {str(mode)[:40]!r}: an observed run is of {' or '.join(MODES)}")
    folder = os.path.join(coverage_dir, FOLDER, layout.plain_name(backend), *((COMPILE,) if path == COMPILE else ()))
    return layout.backend_file(coverage_dir, backend, os.path.join(folder, f"{layout.folder_name(model)}.{mode}.json"))


def path_of(doc: dict) -> str:
    """'compile' for a run through torch.compile, else 'eager'."""
    return COMPILE if doc.get(COMPILE) else "eager"


def dumps(doc: dict) -> str:
    return strictjson.dumps(doc)


def problems(doc, path: str) -> list[str]:
    """What is wrong with an observed-run document (empty when nothing)."""
    if not isinstance(doc, dict):
        return [f"{path}: not a JSON object"]
    out = []
    missing = sorted(KEYS - set(doc))
    if missing:
        out.append(f"{path}: missing {', '.join(missing)}")
    unknown = sorted(set(doc) - KEYS - OPTIONAL)
    if unknown:
        out.append(f"{path}: unknown key(s) {', '.join(unknown)}")
    if doc.get("evidence") != "observed" or doc.get("schema_version") != 1:
        out.append(
            f"{path}: not an observed run (evidence {doc.get('evidence')!r}, schema {doc.get('schema_version')!r})"
        )
    res = doc.get("result")
    if not isinstance(res, dict) or not isinstance(res.get("ran"), bool):
        out.append(f"{path}: result.ran must be true or false")
    elif not res["ran"] and not res.get("error"):
        out.append(f"{path}: a run that did not run must say why (result.error)")
    rec = doc.get(COMPILE)
    if rec is not None and not (
        isinstance(rec, dict) and rec.get("backend") and isinstance(rec.get("graph_breaks"), list)
    ):
        out.append(f"{path}: compile must name its backend and list its graph_breaks")
    for key in ("torch", "created", "command"):
        if not (doc.get("provenance") or {}).get(key):
            out.append(f"{path}: provenance lacks {key!r}")
    for op, cells in (doc.get("ops") or {}).items():
        if "::" not in op or not isinstance(cells, dict):
            out.append(f"{path}: ops.{op}: not an op name with a mapping of dtype -> calls")
            continue
        for dt, cell in cells.items():
            if not (isinstance(cell, dict) and isinstance(cell.get("calls"), int) and cell["calls"] >= 0):
                out.append(f"{path}: ops.{op}.{dt}: needs a call count")
    return out


def check_names(doc: dict, where: str) -> None:
    """The names an observed run's file is named by (backend, model, mode): plain names and a known mode,
    else a one-line DataError naming ``where``. A name is data, never a path."""
    layout.check_name(doc["backend"].get("name"), "backend.name", where=where, plain=True)
    layout.check_name(doc["model"].get("name"), "model.name", where=where, plain=True)
    if doc["model"].get("mode") not in MODES:
        raise DataError(f"{where}: model.mode {str(doc['model'].get('mode'))[:40]!r} is not {' or '.join(MODES)}")


MAX_BYTES = 16 << 20  # an observed run file (the largest opcov writes is about 100 kB)


def load(path: str) -> dict:
    """The observed run at ``path``, read strictly (opcov.store.strictjson) and validated."""
    doc = strictjson.load(path, limit=MAX_BYTES, what="observed run")
    bad = problems(doc, path)
    if bad:
        raise DataError(bad[0])
    return doc


def files(folder: str) -> list[str]:
    """Observed-run files under a folder (what 'opcov lint' checks)."""
    out = []
    for root, dirs, names in os.walk(folder):
        dirs.sort()
        if FOLDER in os.path.abspath(root).split(os.sep):
            out += [os.path.join(root, n) for n in sorted(names) if n.endswith(".json")]
    return out


def find(coverage_dir: str, backend: str, model: str, mode: str, path: str = "eager") -> dict | None:
    p = path_for(coverage_dir, backend, model, mode, path)
    return load(p) if os.path.exists(p) else None
