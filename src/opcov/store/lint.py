"""``opcov lint``: every problem in a set of coverage files, each with file:line, in one run.

Schema problems come from data.validate (opset.validate for model op sets, ``kind: opset``). Op names are checked against the running
torch's catalogue when the file was made with the same torch version (an unknown
aten name is then an error, another namespace a warning); with another torch build, or ops of a
backend package not loaded here, unknown names are an informational count (severity ``info``, not a
warning): op sets change between builds, so the bundled data made elsewhere is expected to name them.

Each file is also checked against its integrity line (``data.integrity_problem``: cut short or
edited is an error, no line a warning) and against where it lies, since ``check`` and the site
find data by place and name (``opcov.store.layout``) and silently pass over what lies elsewhere:
an op set in a backend's folder or a coverage file under models/, a snapshot whose backend or
evidence is not its folder's or its name's, a coverage file off the snapshot naming pattern, and,
in a folder lint is given, a folder named like a data file.
"""

from __future__ import annotations

import os
import sys

from opcov.errors import DataError
from opcov.store import data, distributed, layout, observed, opset, parallel, strictjson
from opcov.store.data import Problem


def lint_paths(paths, *, check_catalog: bool = True) -> tuple[list[str], list[Problem]]:
    """(files checked, problems) for files and folders as ``opcov lint`` takes them (default: the
    coverage folder): ``lint_files`` on every YAML file, and the folders named like data files."""
    folders = list(paths) if paths else [layout.read_coverage(None, say=_say)]
    files = layout.coverage_files(folders, models=True)
    files += [f for folder in folders if os.path.isdir(folder) for f in layout.ondevice_files(folder)]
    sharded = [f for folder in folders if os.path.isdir(folder) for f in layout.parallel_files(folder)]
    files += sharded
    problems = lint_files(files, check_catalog=check_catalog) + _parallel_name_problems(sharded)
    for folder in folders:  # observed runs ('opcov run'): JSON files of their own schema
        for path in observed.files(folder) if os.path.isdir(folder) else ():
            try:
                bad = observed.problems(strictjson.load(path, limit=observed.MAX_BYTES, what="observed run"), path)
            except DataError as exc:
                bad = [str(exc)]
            problems += [Problem(path, None, m.split(": ", 1)[1]) for m in bad]
            files.append(path)
    for folder in folders:  # DTensor's strategies and process groups (opcov.store.distributed): JSON of their own
        for path in _distributed_files(folder):
            dtensor = os.path.basename(path).startswith("dtensor-")
            kind = distributed.SHARDING_KIND if dtensor else distributed.GROUP_KIND
            try:
                distributed.load(path, kind)
            except DataError as exc:
                problems.append(Problem(path, None, str(exc).split(": ", 1)[1]))
            files.append(path)
    for folder in folders:
        for root, dirs, names in layout.walk(folder) if os.path.isdir(folder) else ():
            problems += [
                Problem(os.path.join(root, d), None, layout.A_FOLDER) for d in sorted(dirs) if layout.is_yaml(d)
            ]
            problems += _name_problems(root, sorted(dirs) + sorted(names))
            dirs[:] = sorted(d for d in dirs if not layout.is_yaml(d))
    return files, problems


def _distributed_files(folder: str) -> list[str]:
    """The JSON files of coverage/distributed/ in a folder lint is given (the folder itself, or one holding it)."""
    here = os.path.basename(os.path.normpath(folder)) == layout.DISTRIBUTED
    sub = folder if here else os.path.join(folder, layout.DISTRIBUTED)
    if not os.path.isdir(sub):
        return []
    return sorted(os.path.join(sub, f) for f in layout.listdir(sub) if f.endswith(".json"))


def _parallel_name_problems(paths: list[str]) -> list[Problem]:
    """A sharded training step (models/<model>/parallel/) whose name is not its header's <style>-<world size>.yaml:
    check finds it by that name (``--parallel STYLE --world-size N``)."""
    out = []
    for path in paths:
        named = parallel.parse_file_name(os.path.basename(path))
        try:
            rec = parallel.header(opset.load(path)) or {}
        except DataError:
            continue  # lint_files has said what is wrong with it
        want = parallel.file_name(str(rec.get("style")), rec.get("world_size") or 0) if rec else None
        if want is None:
            out.append(Problem(path, None, "an op set in a parallel/ folder has no 'parallel' header; move it out"))
        elif named is None or os.path.basename(path) != want:
            out.append(Problem(path, None, f"its header says {want}: rename it so that check finds it"))
    return out


def _name_problems(root: str, names: list[str]) -> list[Problem]:
    """The entries of a folder of data whose names opcov would never write (``layout.name_problem``: a
    line break, a control character, a path part) or that are symbolic links (opcov's writers refuse to
    write through one: a linked backend folder would take an ingest elsewhere)."""
    out = []
    for name in names:
        path = os.path.join(root, ascii(name)[1:-1])  # shown escaped: a line break stays one line
        why = layout.name_problem(name)
        if why is not None:
            out.append(Problem(path, None, f"file name {why}: rename it"))
        elif os.path.islink(os.path.join(root, name)):
            out.append(
                Problem(
                    path, None, "a symbolic link; opcov never writes through links: put the real file or folder here"
                )
            )
    return out


def _say(line: str) -> None:
    print(line, file=sys.stderr)


def lint_files(files, *, check_catalog: bool = True) -> list[Problem]:
    problems: list[Problem] = []
    catalog = None
    for path in files:
        doc, err, stamp = data.read_doc(path)
        if err:
            problems.append(err)
            continue
        problems.extend(opset.validate(doc, path) if opset.is_opset(doc) else data.validate(doc, path))
        altered = data.integrity_problem(path, doc, stamp)
        problems.extend([altered] if altered else [])
        problems.extend(Problem(path, None, msg) for msg in place_problems(path, doc))
        if not check_catalog or not isinstance(doc, dict) or not isinstance(doc.get("ops"), dict):
            continue
        if catalog is None:
            from opcov.catalog import build_catalog

            catalog = build_catalog()
        problems.extend(_unknown_ops(doc, path, catalog))
    return problems


def place_problems(path: str, doc) -> list[str]:
    """Why a data file is not where, or not named as, opcov's readers look for it (see the module
    docstring); [] for a file outside a coverage folder's layout, such as one named on a command line."""
    if not isinstance(doc, dict):
        return []
    here = os.path.dirname(os.path.abspath(path))
    folder = os.path.basename(here)
    in_models = os.path.basename(os.path.dirname(here)) == layout.MODELS
    named = layout.snapshot_evidence(path)
    if folder == layout.COMPILE and named and not opset.is_opset(doc):  # compile coverage: <backend>/compile/
        owner = os.path.basename(os.path.dirname(here))
        name = (doc.get("backend") or {}).get("name") if isinstance(doc.get("backend"), dict) else None
        return [] if name == owner else [f"backend.name is {name!r} but the file is in {owner}/compile/"]
    if layout.is_coverage_folder(here):
        return [f"{layout.AT_THE_TOP}; opcov does not read it here"]
    if opset.is_opset(doc):
        if in_models or not (named or layout.in_coverage_folder(path)):
            return []
        return [
            f"an op set in a backend's folder ({folder}/): check and the site read op sets only from "
            f"models/<model>/<mode>.yaml (move it to models/{_model(doc)}/{doc.get('mode')}.yaml)"
        ]
    backend = doc["backend"] if isinstance(doc.get("backend"), dict) else {}
    name = str(backend.get("name"))
    where = f"{name}/{_snapshot_name(doc)}"
    if in_models:
        return [
            f"a coverage file under models/, where only op sets are read: opcov reads {name}'s data from "
            f"<coverage>/{where}"
        ]
    if named:
        out = []
        if name != folder:
            out.append(
                f"backend.name is {name!r} but the file is in {folder}/: opcov reads a backend's snapshots "
                f"only from the folder named after it (move it to <coverage>/{where})"
            )
        if doc.get("evidence") != named:
            out.append(
                f"evidence is {doc.get('evidence')!r} but the name says {named!r} (rename it {_snapshot_name(doc)})"
            )
        return out
    if name == folder or layout.in_coverage_folder(path):
        return [
            f"{layout.NOT_A_SNAPSHOT}, so opcov does not read it as {name}'s data (rename it {_snapshot_name(doc)})"
        ]
    return []


def _model(doc) -> str:
    model = doc.get("model")
    return str(model.get("name")) if isinstance(model, dict) else "<model>"


def _snapshot_name(doc) -> str:
    """The name opcov gives a coverage document's file."""
    backend = doc.get("backend") if isinstance(doc.get("backend"), dict) else {}
    prov = doc.get("provenance") if isinstance(doc.get("provenance"), dict) else {}
    evidence = doc.get("evidence") if doc.get("evidence") in layout.EVIDENCE else "registered"
    return layout.snapshot_name(evidence, str(prov.get("torch")), backend.get("package"), backend.get("version"))


def _unknown_ops(doc, path, catalog) -> list[Problem]:
    prov = doc.get("provenance") if isinstance(doc.get("provenance"), dict) else {}
    file_torch = str(prov.get("torch", "?"))
    same = file_torch == catalog.torch_version
    unknown = [n for n in doc["ops"] if isinstance(n, str) and n not in catalog]
    if not unknown:
        return []
    root = data._compose(path)
    out = []
    foreign: dict[str, list[str]] = {}
    for name in unknown:
        ns = name.split("::")[0]
        if same and ns == "aten":
            msg = (
                f"{name}: not an op of torch {catalog.torch_version} (misspelt, or from another build: re-run the scan)"
            )
            out.append(Problem(path, data._line_of(root, ("ops", name)), msg))
        else:
            foreign.setdefault(ns, []).append(name)
    pkg = (doc.get("backend") or {}).get("package") if isinstance(doc.get("backend"), dict) else None
    unloaded = bool(pkg) and pkg not in sys.modules
    for ns, names in sorted(foreign.items()):
        if not same:
            why, severity = f"file made with torch {file_torch}, this is torch {catalog.torch_version}", "info"
        elif unloaded and ns != "aten":
            why, severity = f"registered by {pkg}, which is not loaded here", "info"
        else:
            why, severity = "registered by a backend that is not loaded here", "warning"
        out.append(
            Problem(
                path,
                data._line_of(root, ("ops", names[0])),
                f"{len(names)} {ns}:: op(s) unknown to this torch, first {names[0]} ({why})",
                severity,
            )
        )
    return out
