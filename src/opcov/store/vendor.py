"""Vendor-test expectations (``opcov expect``): what a backend's own op tests expect, per aten overload.

Read from the vendor's source checkout (opcov.scan.vendortests), mapped from OpInfo names to the aten
overloads each OpInfo reached in the bundled CPU probe (its cells' ``samples``: the OpInfos whose cases
dispatched the overload), and kept apart from coverage files, as JSON, under
``coverage/vendor/<backend>/<source>-tests.json``, with the repository and commit read. An
expectation, never a result: nothing judges from it; ``opcov ops OP -b B`` and ``check``'s notes show
it, worded as such. Torch-free.
"""

from __future__ import annotations

import datetime as _dt
import json
import os

from opcov.errors import DataError
from opcov.store import layout, lineyaml, output
from opcov.version import __version__

FOLDER = "vendor"
KIND = "vendor_expected"
WHO = {"tpu": "TorchTPU"}
WORDS = {
    "exclude_dtypes": "dtypes excluded: {dtypes}",
    "exclude_inplace_dtypes": "in-place form's dtypes excluded: {dtypes}",
    "check_grad": "gradient not checked",
    "check_dynamism": "left out of the bounded-dynamism run",
    "check_value": "values checked {mode}",
    "skipped": "not tested at all ({why})",
    "deny": "on the deny list {list}",
}


def path_for(coverage_dir: str, backend: str) -> str:
    return os.path.join(coverage_dir, FOLDER, backend, f"{WHO.get(backend, backend).lower()}-tests.json")


def _opinfo_map(coverage_dir: str) -> tuple[dict, str]:
    """(OpInfo name -> {aten overload: dtypes it reached}, the probed file read) from cpu's probe."""
    path = layout.pick(layout.snapshots(coverage_dir, "cpu")["probed"], "")
    if path is None:
        raise DataError(f"no cpu probe under {coverage_dir}/ to map OpInfo names to aten overloads ('opcov probe cpu')")
    doc = lineyaml.load(path, summary=False)
    out: dict[str, dict[str, set]] = {}
    for op, cells in doc["ops"].items():
        if not isinstance(cells, dict) or "skipped" in cells:
            continue
        for dtype, cell in cells.items():
            for sample in (cell.get("samples") or []) if isinstance(cell, dict) else []:
                out.setdefault(str(sample), {}).setdefault(op, set()).add(dtype)
    return out, path


def _overloads(name: str, reached: dict, ops: set) -> dict:
    """{aten overload: dtypes or None (all)} an OpInfo name stands for."""
    if name in reached:
        # the overloads its cases reached; those named as the OpInfo is, where there are any (floor's cases
        # reach unsqueeze too, for 0-d samples: not what its exclusions are about)
        base = name.split(".")[-1] if not name.startswith("nn.functional.") else name.split(".")[2]
        named = {op: d for op, d in reached[name].items() if op.split("::", 1)[1].split(".")[0].strip("_") == base}
        return {op: sorted(d) for op, d in (named or reached[name]).items()}
    if name.startswith("torch.ops.aten."):
        op = "aten::" + name.removeprefix("torch.ops.aten.").removesuffix(".default")
        return {op: None} if op in ops else {}
    return {f"aten::{name}": None} if f"aten::{name}" in ops else {}


def build(found: dict, source: dict, backend: str, coverage_dir: str, command: str) -> dict:
    """The expectations document: per aten overload, what the vendor's tests expect of it, each with the
    OpInfo, test method and line it came from."""
    reached, probe = _opinfo_map(coverage_dir)
    ops = set(lineyaml.load(probe, summary=False)["ops"])
    per_op: dict[str, list] = {}
    unmapped = []
    for name, rec in found["opinfos"].items():
        targets = _overloads(name, reached, ops)
        if not targets:
            unmapped.append(name)
            continue
        where = f"{rec['test']} (line {rec['line']})"
        items = []
        for arg in ("exclude_dtypes", "exclude_inplace_dtypes"):
            for against, dtypes in (rec.get(arg) or {}).items():
                items.append({"kind": arg, "dtypes": dtypes, "against": against})
        for arg in ("check_grad", "check_dynamism"):
            if rec.get(arg) is False:
                items.append({"kind": arg})
        if rec.get("check_value"):
            items.append({"kind": "check_value", "mode": rec["check_value"]})
        if "skipped" in rec:
            items.append({"kind": "skipped", "why": rec["skipped"]})
        for op in targets:
            per_op.setdefault(op, []).extend(dict(i, opinfo=name, test=where) for i in items)
    for list_name, deny in found["deny_lists"].items():
        for name in deny["names"]:
            for op in _overloads(name, reached, ops) or {}:
                per_op.setdefault(op, []).append(
                    {"kind": "deny", "list": list_name, "opinfo": name, "test": f"{deny['file']} (line {deny['line']})"}
                )
    return {
        "schema_version": 1,
        "evidence": KIND,
        "backend": backend,
        "source": source,
        "provenance": {
            "opcov": __version__,
            "created": _dt.datetime.now(_dt.timezone.utc).replace(microsecond=0).isoformat(),
            "command": command,
            "mapped_through": os.path.basename(probe),
        },
        "opinfos": found["opinfos"],
        "deny_lists": found["deny_lists"],
        "unmapped": sorted(unmapped),
        "ops": {op: per_op[op] for op in sorted(per_op) if per_op[op]},
    }


def dumps(doc: dict) -> str:
    return json.dumps(doc, indent=1, sort_keys=True) + "\n"


def save(doc: dict, path: str) -> None:
    output.check_writable_file(path)
    os.makedirs(os.path.dirname(path), exist_ok=True)
    output.write_atomic(path, dumps(doc).encode("utf-8"))


def load(path: str) -> dict:
    try:
        with open(path, encoding="utf-8") as f:
            doc = json.load(f)
    except (OSError, ValueError) as exc:
        raise DataError(f"{path}: cannot read the vendor-test expectations ({exc})") from None
    if not isinstance(doc, dict) or doc.get("evidence") != KIND or not isinstance(doc.get("ops"), dict):
        raise DataError(f"{path}: not a vendor-test expectations file (evidence {KIND!r})")
    if not (doc.get("source") or {}).get("commit"):
        raise DataError(f"{path}: names no commit of the tests it was read from")
    return doc


def find(coverage_dir: str, backend: str) -> dict | None:
    p = path_for(coverage_dir, backend)
    return load(p) if os.path.exists(p) else None


def said(doc: dict, item: dict) -> str:
    """One expectation in words: "TorchTPU's tests expect ... (an expectation, not a result)"."""
    who = WHO.get(doc["backend"], doc["backend"])
    kind = item["kind"]
    what = WORDS[kind].format(
        dtypes=", ".join(item.get("dtypes") or []),
        why=item.get("why", ""),
        list=item.get("list", ""),
        mode={"LOOSE": "loosely", "SKIP": "not at all (shapes and dtypes only)"}.get(item.get("mode", ""), ""),
    )
    against = f" (against {item['against']})" if item.get("against") not in (None, "any") else ""
    return (
        f"{who}'s tests expect: {what}{against} (OpInfo {item['opinfo']}, {item['test']}, "
        f"{doc['source'].get('repo')}@{str(doc['source'].get('commit'))[:12]}; an expectation, not a result)"
    )


def for_ops(coverage_dir: str, backend: str, ops) -> dict[str, list[str]]:
    """{op: expectation lines} for those of ``ops`` the backend's vendor tests say something about."""
    doc = find(coverage_dir, backend)
    if doc is None:
        return {}
    return {op: [said(doc, i) for i in doc["ops"][op]] for op in ops if op in doc["ops"]}
