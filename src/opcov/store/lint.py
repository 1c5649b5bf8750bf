"""``opcov lint``: every problem in a set of coverage files, each with file:line, in one run.

Schema problems come from data.validate (opset.validate for model op sets, ``kind: opset``). Op names are checked against the running
torch's catalogue when the file was made with the same torch version (an unknown
name is then an error); with another version an unknown name is only flagged,
since op sets change between releases.
"""

from __future__ import annotations

from opcov.store import data
from opcov.store import opset
from opcov.store.data import Problem


def lint_files(files, *, check_catalog: bool = True) -> list[Problem]:
    problems: list[Problem] = []
    catalog = None
    for path in files:
        doc, err = data.parse(path)
        if err:
            problems.append(err)
            continue
        problems.extend(opset.validate(doc, path) if opset.is_opset(doc) else data.validate(doc, path))
        if not check_catalog or not isinstance(doc, dict) or not isinstance(doc.get("ops"), dict):
            continue
        if catalog is None:
            from opcov.catalog import build_catalog

            catalog = build_catalog()
        problems.extend(_unknown_ops(doc, path, catalog))
    return problems


def _unknown_ops(doc, path, catalog) -> list[Problem]:
    file_torch = str((doc.get("provenance") or {}).get("torch", "?"))
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
            msg = (f"{name}: not an op of torch {catalog.torch_version} "
                   "(misspelt, or from another build: re-run the scan)")
            out.append(Problem(path, data._line_of(root, ("ops", name)), msg))
        else:
            foreign.setdefault(ns, []).append(name)
    for ns, names in sorted(foreign.items()):
        why = (f"file made with torch {file_torch}, this is torch {catalog.torch_version}" if not same
               else "registered by a backend that is not loaded here")
        out.append(Problem(path, data._line_of(root, ("ops", names[0])),
                           f"{len(names)} {ns}:: op(s) unknown to this torch, first {names[0]} ({why})",
                           "warning"))
    return out
