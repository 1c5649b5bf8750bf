"""Vendor-test expectations (``opcov expect``): what a backend's own op tests expect, per aten overload.

Read from the vendor's source checkout (opcov.scan.vendortests), mapped from OpInfo names to the aten
overloads each OpInfo reached in the bundled CPU probe (its cells' ``samples``: the OpInfos whose cases
dispatched the overload), and kept apart from coverage files, as JSON, under
``coverage/vendor/<backend>/<source>-tests.json``, with the repository and commit(s) read. An
expectation, never a result: nothing judges from it; ``opcov ops OP -b B``, ``check``'s notes and the
site's op pages show it, worded as such. Torch-free.
"""

from __future__ import annotations

import datetime as _dt
import os
import re

from opcov import backends
from opcov.errors import DataError
from opcov.store import layout, lineyaml, output, parsed, strictjson
from opcov.version import __version__

FOLDER = "vendor"
KIND = "vendor_expected"
MAX_BYTES = 64 << 20  # a vendor-test expectations file (TorchTPU's is about 270 kB)
WORDS = {
    "exclude_dtypes": "dtypes excluded: {dtypes}",
    "exclude_inplace_dtypes": "in-place form's dtypes excluded: {dtypes}",
    "check_grad": "gradient not checked",
    "check_dynamism": "left out of the bounded-dynamism run",
    "check_value": "values checked {mode}",
    "check_value_outputs": "values checked per output: {modes}",
    "skip_output_indices": "output(s) {indices} not compared",
    "check_out_variant": "out= form not tested",
    "check_grad_off_in": "gradient not checked in {tests} (checked in its other tests)",
    "check_dynamism_off_in": "left out of the bounded-dynamism run in {tests} (not in its other tests)",
    "check_out_variant_off_in": "out= form not tested in {tests} (tested in its other tests)",
    "skip_if": "some samples skipped ({fn})",
    "skipped": "not tested at all ({why})",
    "skipped_when": "not tested when {when} ({why})",
    "decorator": "test wrapped in {fn}",
    "deny": "on the deny list {list}",
    "deny_compile": "not tested under torch.compile (on {list}{why})",
    "deny_dynamism": "left out of the bounded-dynamism run (on {list}{why})",
}


def _who(backend: str) -> str:
    """Whose tests a backend's expectations come from: its record's ``vendor`` ('TorchTPU'), else its name."""
    record = backends.record(backend)
    return record.vendor if record and record.vendor else backend


def path_for(coverage_dir: str, backend: str) -> str:
    """coverage/vendor/<backend>/<who>-tests.json (the bundled data's for a ./coverage without the backend's data)."""
    return layout.backend_file(
        coverage_dir, backend, os.path.join(coverage_dir, FOLDER, backend, f"{_who(backend).lower()}-tests.json")
    )


def _opinfo_map(coverage_dir: str) -> tuple[dict, str]:
    """(OpInfo name -> {aten overload: dtypes it reached}, the probed file read) from cpu's probe."""
    path = layout.pick(layout.snapshots(coverage_dir, backends.REFERENCE)["probed"], "")
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


def _packet(op: str) -> str:
    return op.split("::", 1)[1].split(".")[0]


def _overloads(name: str, reached: dict, ops: set) -> tuple[dict, str]:
    """({aten overload: dtypes or None (all)} an OpInfo name stands for, how it was mapped): 'samples' (the
    overloads its cases reached in the cpu probe), 'variants' (a name without a variant, whose named variants
    the probe recorded: the test runs the first OpInfo of that name, opcov maps all of them), 'aten' (a
    torch.ops.aten name), 'name' (no cpu-probe cell lists it among its first samples: the overloads of the
    aten op of that name), or '' with nothing (unmapped)."""
    if name in reached:
        # the overloads its cases reached; those named as the OpInfo is, where there are any (floor's cases
        # reach unsqueeze too, for 0-d samples: not what its exclusions are about)
        parts = name.split(".")
        bases = {parts[-1], name.replace(".", "_")} | ({parts[2]} if name.startswith("nn.functional.") else set())
        bases = {b.strip("_") for b in bases}
        named = {op: d for op, d in reached[name].items() if _packet(op).strip("_") in bases}
        return {op: sorted(d) for op, d in (named or reached[name]).items()}, "samples"
    if name.startswith("torch.ops.aten."):
        op = "aten::" + name.removeprefix("torch.ops.aten.").removesuffix(".default")
        got = (
            {o: None for o in ops if o == op or o.startswith(op + ".")}
            if "." not in op.split("::")[1]
            else ({op: None} if op in ops else {})
        )
        return got, "aten" if got else ""
    variants = {k for k in reached if k.startswith(name + ".") and "." not in k[len(name) + 1 :]}
    if variants:
        out: dict = {}
        for k in sorted(variants):
            got, _how = _overloads(k, reached, ops)
            for op, d in got.items():
                out[op] = sorted(set(out.get(op) or []) | set(d or []))
        return out, "variants"
    packet = name.replace(".", "_") if name.startswith(("linalg.", "fft.", "special.")) else name
    got = {o: None for o in ops if _packet(o) == packet}
    return got, "name" if got else ""


def _items(rec: dict) -> list[dict]:
    """The expectations one OpInfo's test record holds, one item each."""
    items = []
    for arg in ("exclude_dtypes", "exclude_inplace_dtypes"):
        for against, dtypes in (rec.get(arg) or {}).items():
            item = {"kind": arg, "dtypes": dtypes, "against": against}
            if rec.get(f"{arg}_when"):
                item["when"] = rec[f"{arg}_when"]
            items.append(item)
    for arg in ("check_grad", "check_dynamism", "check_out_variant"):
        if rec.get(arg) is False:
            items.append({"kind": arg})
        if rec.get(f"{arg}_off_in"):
            items.append({"kind": f"{arg}_off_in", "tests": rec[f"{arg}_off_in"]})
    if rec.get("check_value"):
        items.append({"kind": "check_value", "mode": rec["check_value"]})
    if rec.get("check_value_outputs"):
        items.append({"kind": "check_value_outputs", "modes": rec["check_value_outputs"]})
    if rec.get("skip_output_indices"):
        items.append({"kind": "skip_output_indices", "indices": rec["skip_output_indices"]})
    for fn in rec.get("skip_if", []):
        items.append({"kind": "skip_if", "fn": fn})
    for fn in rec.get("decorators", []):
        items.append({"kind": "decorator", "fn": fn})
    if "skipped" in rec:
        items.append({"kind": "skipped", "why": rec["skipped"]})
    for w in rec.get("skipped_when", []):
        items.append({"kind": "skipped_when", "when": w["when"], "why": w["why"]})
    return items


def build(found: dict, source: dict, backend: str, coverage_dir: str, command: str) -> dict:
    """The expectations document: per aten overload, what the vendor's tests expect of it, each with the
    OpInfo, test method and line it came from; how each OpInfo name was mapped, and which were not, why."""
    reached, probe = _opinfo_map(coverage_dir)
    ops = set(lineyaml.load(probe, summary=False)["ops"])
    per_op: dict[str, list] = {}
    mapped: dict[str, str] = {}
    unmapped: dict[str, str] = {}
    nowhere = "no cpu-probe cell lists it among its first OpInfo samples, and no aten op is named so"
    for name, rec in found["opinfos"].items():
        targets, how = _overloads(name, reached, ops)
        if not targets:
            unmapped[name] = nowhere
            continue
        mapped[name] = how
        where = f"{rec['test']} (line {rec['line']})"
        for op in targets:
            per_op.setdefault(op, []).extend(
                dict(i, opinfo=name, test=where, file="tests/ops_test.py") for i in _items(rec)
            )
    for list_key, deny in found["deny_lists"].items():
        kind = {"compile": "deny_compile", "bounded dynamism": "deny_dynamism"}.get(deny.get("applies"), "deny")
        for name in deny["names"]:
            base, variant = (name.removesuffix(".out"), "out") if name.endswith(".out") else (name, None)
            targets, how = _overloads(base, reached, ops)
            if not targets:
                unmapped[f"{name} ({list_key})"] = nowhere
                continue
            mapped.setdefault(base, how)
            item = {
                "kind": kind,
                "list": deny["variable"],
                "opinfo": name,
                "file": deny["file"],
                "test": f"{deny['file']} (line {deny['line']}{', ' + deny['function'] if deny.get('function') else ''})",
            }
            for k in ("why", "when"):
                if deny.get(k):
                    item[k] = deny[k]
            if variant:
                item["variant"] = variant
            for op in targets:
                per_op.setdefault(op, []).append(item)
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
        "models": found.get("models", []),
        "collectives": found.get("collectives", []),
        "not_understood": found.get("not_understood", []),
        "mapped": dict(sorted(mapped.items())),
        "unmapped": dict(sorted(unmapped.items())),
        "ops": {op: per_op[op] for op in sorted(per_op) if per_op[op]},
    }


def dumps(doc: dict) -> str:
    return strictjson.dumps(doc)


def save(doc: dict, path: str, inputs=(), within: str | None = None) -> None:
    """Write the expectations through the output guard: never over one of ``inputs`` (the test files
    read), inside ``within`` where the path was built from the coverage folder."""
    output.save(path, dumps(doc).encode("utf-8"), kind=output.VENDOR, inputs=inputs, within=within)


def load(path: str) -> dict:
    """The expectations at ``path``, read strictly (opcov.store.strictjson), as an observed run is; kept
    between runs where a command asks (opcov.store.parsed)."""
    return parsed.read(path, "vendor", _load)


def _load(path: str) -> dict:
    doc = strictjson.load(path, limit=MAX_BYTES, what="vendor-test expectations")
    if not isinstance(doc, dict) or doc.get("evidence") != KIND or not isinstance(doc.get("ops"), dict):
        raise DataError(f"{path}: not a vendor-test expectations file (evidence {KIND!r})")
    if not (doc.get("source") or {}).get("commit"):
        raise DataError(f"{path}: names no commit of the tests it was read from")
    return doc


def find(coverage_dir: str, backend: str) -> dict | None:
    """The backend's expectations document, or None where there is none."""
    p = path_for(coverage_dir, backend)
    return load(p) if os.path.exists(p) else None


def source_label(doc: dict, file: str | None = None, note: bool = True) -> str:
    """'REPO@COMMIT12' of the file an expectation was read from (its own commit where the copy names one per
    file), with the source's note ('a public copy, not verified as the release') where it has one and ``note``."""
    src = doc["source"]
    commit = (src.get("file_commits") or {}).get(file or "", src.get("commit"))
    said = f" ({src['note']})" if src.get("note") and note else ""
    return f"{src.get('repo')}@{str(commit)[:12]}{said}"


def source_said(coverage_dir: str, backend: str) -> str:
    """Once per report, where its expectation lines are short (``short``): where they were read, the source's
    note, and that they are expectations; '' where the backend has no expectations document."""
    doc = find(coverage_dir, backend)
    if doc is None:
        return ""
    src = doc["source"]
    note = f" ({src['note']})" if src.get("note") else ""
    return (
        f"{_who(doc['backend'])}'s test expectations below are read from its test sources at {src.get('repo')}{note}, "
        "without running them: expectations, not results"
    )


def _named(why: str, item: dict) -> str:
    """A deny list's reason with the OpInfo's name where the test's f-string has {op.name}."""
    return why.replace("{op.name}", item["opinfo"]).replace("{op_info.name}", item["opinfo"])


def said(doc: dict, item: dict, short: bool = False) -> str:
    """One expectation in words: "TorchTPU's tests expect ... (an expectation, not a result)"; ``short``: without
    the source's note and that last phrase, for a report that says them once (``source_said``)."""
    who = _who(doc["backend"])
    kind = item["kind"]
    deny = kind.startswith("deny")
    what = WORDS.get(kind, kind + " {why}").format(
        dtypes=", ".join(item.get("dtypes") or []),
        why=(f": {_named(item['why'], item)}" if item.get("why") else "") if deny else item.get("why", ""),
        list=item.get("list", ""),
        mode={"LOOSE": "loosely", "SKIP": "not at all (shapes and dtypes only)"}.get(item.get("mode", ""), ""),
        modes=", ".join(item.get("modes") or []),
        indices=", ".join(str(i) for i in item.get("indices") or []),
        fn=item.get("fn", ""),
        when=item.get("when", ""),
        tests=", ".join(item.get("tests") or []),
    )
    against = f" (against {item['against']})" if item.get("against") not in (None, "any") else ""
    if item.get("when") and kind != "skipped_when":
        against += f" when {item['when']}"
    if item.get("variant"):
        against += f" ({item['variant']}= form only)"
    test = (
        item["test"] if str(item["test"]).startswith(str(item.get("file"))) else f"{item.get('file')}, {item['test']}"
    )
    tail = "" if short else "; an expectation, not a result"
    return (
        f"{who}'s tests expect: {what}{against} (OpInfo {item['opinfo']}, {test}, "
        f"{source_label(doc, item.get('file'), note=not short)}{tail})"
    )


COMPILE_KINDS = frozenset({"check_dynamism", "deny_compile", "deny_dynamism"})  # about torch.compile runs only


def own_test(op: str, item: dict) -> bool:
    """Whether the expectation comes from the op's own OpInfo (``add`` for aten::add.Tensor,
    ``nn.functional.gelu`` for aten::gelu), not from another OpInfo whose samples reach the op on the way
    (``kron``'s test says nothing of the ``mul`` a model calls)."""
    base = op.split("::")[-1].split(".")[0].lstrip("_")
    name = str(item.get("opinfo", ""))
    return base in (name.split(".")[-1].lstrip("_"), name.replace(".", "_"))


def bears(item: dict, dtypes, backward: bool, path: str) -> bool:
    """Whether an expectation of the op's own tests bears on a model calling it at ``dtypes``: a dtype it
    calls is excluded, its gradient is used and not checked, it is skipped or denied, its values are not
    compared; the compile and dynamism lists only on the compile path. Looser checks and untested out=
    forms say nothing of whether the model runs."""
    kind = item["kind"]
    if kind in COMPILE_KINDS:
        return path == "compile"
    if kind in ("exclude_dtypes", "exclude_inplace_dtypes"):
        return bool(set(item.get("dtypes") or ()) & set(dtypes))
    if kind == "check_grad":
        return backward
    if kind == "check_value":
        return item.get("mode") == "SKIP"
    return kind in ("skipped", "skipped_when", "deny")


def for_ops(
    coverage_dir: str, backend: str, ops, path: str | None = None, short: bool = False
) -> tuple[dict[str, list[str]], int]:
    """({op: expectation lines}, how many were left out) for those of ``ops`` the backend's vendor tests say
    something about. ``ops`` is a list of op names (every expectation of each), or, with ``path`` (eager |
    compile), {op: (dtypes called, whether its backward runs)}: only what bears on a verdict there (``bears``)
    from the op's own OpInfo's tests; ``opcov ops OP -b B`` lists all."""
    doc = find(coverage_dir, backend)
    if doc is None:
        return {}, 0
    out: dict[str, list[str]] = {}
    left = 0
    for op in ops:
        for item in doc["ops"].get(op, ()):
            if path is None or (own_test(op, item) and bears(item, ops[op][0], ops[op][1], path)):
                out.setdefault(op, []).append(said(doc, item, short))
            else:
                left += 1
    return out, left


def _where(doc: dict, entries: list, note: bool = True) -> str:
    """'FILE:L1, L2 at REPO@COMMIT; FILE2:L3 at REPO@COMMIT (note)' for entries with file and line: each
    file with the commit it was read at, the source's note once."""
    by: dict[str, list] = {}
    for e in entries:
        by.setdefault(e["file"], []).append(str(e["line"]))
    src = doc["source"]
    said = f" ({src['note']})" if src.get("note") and note else ""
    commits = src.get("file_commits") or {}
    return (
        "; ".join(
            f"{f}:{', '.join(ls)} at {src.get('repo')}@{str(commits.get(f, src.get('commit')))[:12]}"
            for f, ls in sorted(by.items())
        )
        + said
    )


def _model_groups(entries) -> dict:
    out: dict = {}
    for m in entries:
        out.setdefault((str(m.get("provider")), str(m["module"])), []).append(m)
    return dict(sorted(out.items()))


def models_said(doc: dict, entries=None, like: str = "", short: bool = False) -> list[str]:
    """One line per model the vendor's model-coverage tests run (``entries``: those of ``doc["models"]``
    to say; ``like``: said after the name), with how (training / inference, through torch.compile), the size the test tags it with, and
    where: file, lines, repository and commit."""
    who = _who(doc["backend"])
    out = []
    for (provider, module), ms in _model_groups(doc.get("models") or [] if entries is None else entries).items():
        modes = " and ".join(sorted({m["mode"] for m in ms if m.get("mode")})) or "run"
        how = (
            "under torch.compile" + (f" (dynamic={ms[0]['dynamic']})" if "dynamic" in ms[0] else "")
            if ms[0].get("compiled")
            else "without torch.compile"
        )
        size = f", tagged {ms[0]['size']}" if ms[0].get("size") else ""
        tail = ")" if short else "; an expectation, not a result)"
        out.append(
            f"{who}'s own model tests run {provider} {module}{like} ({modes}, {how}{size}; {_where(doc, ms, not short)}{tail}"
        )
    return out


def models_like(doc: dict, name: str) -> list[dict]:
    """The vendor's model entries named like opcov's model ``name``, by name only (not by config): a timm
    model by its own name (``timm-resnet50d``: timm resnet50d, and resnet50d.ra2_in1k), a transformers one
    where ``name`` (opcov's model type, 'llama') is a word of its repository id ('meta-llama/Llama-3.2-1B')."""
    base = name.lower()
    out = []
    for m in doc.get("models") or []:
        module = str(m["module"]).lower()
        if m.get("provider") == "timm":
            if base.startswith("timm-") and base.removeprefix("timm-") == module.split(".")[0]:
                out.append(m)
        elif base in re.split(r"[^a-z0-9_]+", module):
            out.append(m)
    return out


def model_notes(coverage_dir: str, backend: str, name: str, short: bool = False) -> list[str]:
    """check's notes on a model named like one the backend's own model tests run (``models_like``)."""
    doc = find(coverage_dir, backend)
    if doc is None or not models_like(doc, name):
        return []
    return models_said(doc, models_like(doc, name), f", named like {name} (matched by name, not by config)", short)


def collectives_by_name(doc: dict) -> dict:
    """collective -> {c10d, api, calls (entries), tests, reduce_ops, unrun (entries no test runs)}."""
    out: dict = {}
    for c in doc.get("collectives") or []:
        rec = out.setdefault(
            c["collective"],
            {"c10d": c.get("c10d"), "api": c["api"], "calls": [], "tests": set(), "reduce_ops": set(), "unrun": []},
        )
        rec["calls"].append(c)
        rec["tests"] |= {f"{c['file']}::{t}" for t in c.get("tests") or []}
        rec["reduce_ops"] |= set(c.get("reduce_ops") or [])
        if not c.get("tests"):
            rec["unrun"].append(c)
    return dict(sorted(out.items()))


def collectives_said(doc: dict, c10d=None) -> list[str]:
    """One line per collective the vendor's distributed tests call (``c10d``: only those dispatching one of
    these c10d ops): the c10d op, reduce ops, how many test methods run it, where; and calls no test runs."""
    who = _who(doc["backend"])
    out = []
    for name, rec in collectives_by_name(doc).items():
        if c10d is not None and rec["c10d"] not in c10d:
            continue
        op = f"{rec['c10d']}, " if rec["c10d"] else ""
        ops = f"reduce ops {', '.join(sorted(rec['reduce_ops']))}, " if rec["reduce_ops"] else ""
        unrun = f"; also in a function no test method runs: {_where(doc, rec['unrun'])}" if rec["unrun"] else ""
        run = [c for c in rec["calls"] if c.get("tests")]
        out.append(
            f"{who}'s own distributed tests call {rec['api']}.{name} ({op}{ops}run by {len(rec['tests'])} test "
            f"method(s): {_where(doc, run) if run else 'none'}{unrun}; an expectation, not a result)"
        )
    return out


def uncalled_said(doc: dict, c10d: list) -> str:
    """That the vendor's distributed tests, as far as they were read, call none of these c10d ops."""
    files = sorted({c["file"] for c in doc.get("collectives") or []})
    return (
        f"{_who(doc['backend'])}'s own distributed tests call none of: {', '.join(c10d)} (of the files read: "
        f"{', '.join(files)}; an expectation, not a result)"
    )


def summary(doc: dict) -> dict:
    """What a backend page says of the vendor's tests: the files read (each with its commit and SHA-256),
    counts of the op tests' facts, each deny list (where, how many names), and the lines of
    ``models_said`` and ``collectives_said``."""
    src, ops = doc["source"], doc.get("opinfos") or {}
    commits = src.get("file_commits") or {}
    counts = {
        "OpInfo tests": len(ops),
        "with dtypes excluded": sum(
            1 for r in ops.values() if r.get("exclude_dtypes") or r.get("exclude_inplace_dtypes")
        ),
        "gradient not checked": sum(1 for r in ops.values() if r.get("check_grad") is False),
        "gradient not checked in some of its tests": sum(1 for r in ops.values() if r.get("check_grad_off_in")),
        "values checked loosely or not at all": sum(1 for r in ops.values() if r.get("check_value")),
        "not tested at all": sum(1 for r in ops.values() if "skipped" in r),
        "skipped in some runs": sum(1 for r in ops.values() if r.get("skipped_when")),
        "left out of the bounded-dynamism run": sum(1 for r in ops.values() if r.get("check_dynamism") is False),
    }
    deny = [
        {
            "list": d["variable"],
            "applies": d.get("applies") or "unclassified",
            "names": len(d["names"]),
            "where": f"{d['file']}:{d['line']}",
        }
        for d in (doc.get("deny_lists") or {}).values()
    ]
    return {
        "who": _who(doc["backend"]),
        "repo": src.get("repo"),
        "note": src.get("note"),
        "files": [
            {"file": f, "commit": str(commits.get(f, src.get("commit"))), "sha256": h}
            for f, h in sorted(src["files"].items())
        ],
        "counts": counts,
        "deny_lists": deny,
        "models": models_said(doc),
        "collectives": collectives_said(doc),
        "not_understood": len(doc.get("not_understood") or []),
        "command": (doc.get("provenance") or {}).get("command", ""),
    }
