"""Coverage data files: vocabulary, validation, deterministic YAML, errors with file:line.

A coverage file is written once by a scan (or a probe) and read by everything
else. Writing is deterministic (sorted keys, one op per line) so a re-run gives a
minimal git diff; reading validates everything and names the file and line of
each problem, so a hand-edited or foreign file never reaches a report half-read.

Reading is also guarded against hostile files (``read_text``, ``anchor_line``): a file over
``MAX_FILE_BYTES`` is refused unread, bytes that are not UTF-8 or characters YAML forbids are
refused with their line, and so are YAML anchors and aliases, which opcov never writes and which
let a small file expand into billions of values ("billion laughs") once something walks it.

Every file opcov writes is self-checking: its first line, ``integrity: {ops: N, sha256: HEX}``, counts
the ops and holds the SHA-256 of every byte after that line (``stamped``), and every reader (this
module's ``load``, ``opcov.store.lineyaml``, ``lint``) verifies it (``integrity_problem``), so a file cut
short at a line end, which is still valid YAML, or edited by hand is refused rather than read as less
data. The stamp covers the header as well as the ops, costs one SHA-256 pass (~1 ms per MB), and keeps
the writer deterministic and one-pass. A file without the line (written before opcov stamped its
files) is read, with a lint warning.
"""

from __future__ import annotations

import functools
import hashlib
import math
import os
import re
import stat
from dataclasses import dataclass
from typing import Any

from opcov.errors import DataError
from opcov.store import output
from opcov.vocab import BWD_PATHS, EVIDENCE_KINDS, FWD_PATHS, INPUT_TIERS, PROBED_STATUSES, RESOLVED, SKIP_REASONS

SCHEMA_VERSION = 1

# The words (paths, resolved statuses, probed statuses) are opcov.vocab's.
# A probed cell: ``fwd`` (required) and ``bwd`` statuses, evidence beside them (bwd_* for the backward).
_PROBED_SLOT_KEYS = {
    "err": "err",
    "tol": str,
    "why": str,
    "blame": str,
    "case": str,
    "cases": int,
    "fails": int,
    "unpinned": int,
    "strides": int,
    "after_crash": int,
    "failed": list,  # 'STATUS CASE SIG' of failing cases (opcov.probe.results.failed_text)
    "ran": list,  # signature classes of cases that ran: see opcov.verdict.signature
    "ran_part": bool,  # ``ran`` merged with cases that kept no classes: it shows what ran, not what did not
    "classes_whole": bool,  # a ``failed`` list cut at its cap still names every failing class
    "traced": dict,  # zoo model -> the worst status of its own calls, replayed (trace.<model> cases)
}
# Each input tier (``<tier>``, ``<tier>_*``: the harder case of opcov.probe.tiers) is a slot like ``bwd``.
PROBED_CELL_KEYS: dict[str, Any] = {
    "fwd": PROBED_STATUSES,
    "bwd": PROBED_STATUSES,
    "samples": list,
    **_PROBED_SLOT_KEYS,
    **{f"bwd_{k}": v for k, v in _PROBED_SLOT_KEYS.items()},
    **{t: PROBED_STATUSES for t in INPUT_TIERS},
    **{f"{t}_{k}": v for t in INPUT_TIERS for k, v in _PROBED_SLOT_KEYS.items()},
}

OP_KEYS: dict[str, Any] = {
    "fwd": FWD_PATHS,
    "res": RESOLVED,
    "bwd": BWD_PATHS,
    "bwd_res": RESOLVED,
    "via": list,
    "bwd_via": list,
    "src": str,
    "bwd_src": str,
    "why": str,
    "tags": list,
    # dtype (or 'all') -> why, from the backend's own test suite (declared data, opcov.scan.declared):
    # ``xfail`` the forward is expected to fail there, ``doubt``/``bwd_doubt`` the forward/backward may.
    "xfail": dict,
    "doubt": dict,
    "bwd_doubt": dict,
    # family (sparse, sparse_csr, quantized) -> what the backend's key for tensors of that layout holds,
    # and ``only``: the families the op has its only CPU kernels for (opcov.scan.layouts)
    "layouts": "layouts",
}
LAYOUT_STATES = ("kernel", "out_variant", "composite", "fallback", "none")
LAYOUT_FAMILIES = ("sparse", "sparse_csr", "quantized")
# Catalogue tags kept in registered files, so that readers (check, site) need no torch import.
# Compiler-facing tags (pt2_compliant_tag, needs_*_strides, generated...) are left out.
DATA_TAGS = (
    "core",
    "pointwise",
    "reduction",
    "inplace",
    "out",
    "view",
    "view_copy",
    "inplace_view",
    "mutating",
    "maybe_aliasing_or_mutating",
    "nondeterministic_seeded",
    "dynamic_output_shape",
    "data_dependent_output",
    "host_only",
)
REQUIRED_OP_KEYS = ("fwd", "res", "bwd", "bwd_res")
INTEGRITY = "integrity"  # the first line of every file opcov writes (``stamped``); not part of the data
TOP_KEYS = {"schema_version", "evidence", "backend", "provenance", "summary", "ops", INTEGRITY}
BACKEND_KEYS = {"name", "device_type", "dispatch_key", "package", "version"}
# What each provenance value must be (see ``type_problem``): header values are read by reports and the
# site, so a list or a date where a string belongs is refused here rather than failing there.
HEADER_TYPES = {  # the header every file opcov writes has, coverage files and op sets alike
    "torch": str,
    "opcov": str,
    "created": str,
    "command": str,
    "host": "scalars",
}
PROVENANCE_TYPES = {
    **HEADER_TYPES,
    "device": str,
    "catalog_modules": "strings",
    "mode": str,
    "settings": "scalars",
    "fallback": "scalars",
    "reach": str,
    "notes": "strings",
    "kernel_sources": "counts",
    "probe": "data",
    "merged_from": "strings",
    "contributed": "data",  # ingested bundles: source, date, hash (opcov.store.bundle)
    "declared": "data",
    "sdpa": "data",  # the kernel scaled_dot_product_attention dispatches to (opcov.scan.sdpa)
    "layouts": "data",  # which Sparse*/Quantized* keys the scan read, and their kernels (opcov.scan.layouts)
    "device_module": "data",  # whether torch.<device> is registered, as checkpointing looks it up (opcov.scan.devicemodule)
}
PROVENANCE_KEYS = set(PROVENANCE_TYPES)

# A data file larger than this is refused before it is read. PyYAML holds ~40x a file's size in
# memory while loading it; the largest file opcov writes (a probed backend) is under 2 MB. So is a
# line longer than MAX_LINE_BYTES (the longest opcov writes is ~11 KB): the line readers' regular
# expressions hold ~140 bytes per character of one line. Together they keep any read under 1 GB.
MAX_FILE_BYTES = 16 << 20
MAX_LINE_BYTES = 256 << 10


_TYPE_WORDS = {
    str: "a string",
    "scalars": "a mapping of names to plain values",
    "strings": "a list of strings",
    "counts": "a mapping of names to counts",
    "data": "plain data (mappings, lists, strings, numbers, booleans)",
}
_ENTRY_WORDS = {"scalars": "a plain value (string, number, boolean or null)", "counts": "a count"}
_DATA_DEPTH = 12  # nesting allowed in free-form header data (opcov writes at most 5 levels)


def _is_data(value, depth: int = 0) -> bool:
    """Plain YAML data as opcov writes it: no dates, binary, sets, NaN or infinities, or deep nesting."""
    if value is None or isinstance(value, (str, int)):  # bool is an int
        return True
    if isinstance(value, float):
        return math.isfinite(value)
    if depth >= _DATA_DEPTH:
        return False
    if isinstance(value, list):
        return all(_is_data(v, depth + 1) for v in value)
    if isinstance(value, dict):
        return all(isinstance(k, str) and _is_data(v, depth + 1) for k, v in value.items())
    return False


MAX_COUNT = 10**15  # a count in a data file: far above any real one, and never an overflow as a float


def _entry_ok(value, kind) -> bool:
    if kind == "counts":
        return isinstance(value, int) and not isinstance(value, bool) and 0 <= value <= MAX_COUNT
    return value is None or isinstance(value, (str, int, float))


def type_problem(value, kind, where: str) -> tuple[tuple, str] | None:
    """When ``value`` (named ``where``) is not of ``kind`` (str, "scalars", "strings", "counts", "data"):
    (keys from it to the bad entry, for the line; the message)."""
    if kind in ("scalars", "counts") and isinstance(value, dict):
        for k, v in value.items():
            if not isinstance(k, str) or not _entry_ok(v, kind):
                return (k,), f"{where}.{k} must be {_ENTRY_WORDS[kind]}"
        return None
    if kind is str:
        ok = isinstance(value, str)
    elif kind == "strings":
        ok = isinstance(value, list) and all(isinstance(v, str) for v in value)
    else:
        ok = kind == "data" and _is_data(value)
    return None if ok else ((), f"{where} must be {_TYPE_WORDS[kind]}")


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
    severity: str = "error"  # or "warning", or "info" (expected; counted, not a problem to fix)

    def __str__(self) -> str:
        where = f"{self.path}:{self.line}" if self.line else self.path
        return " ".join(f"{where}: {self.severity}: {self.message}".splitlines())  # always one line


# ---------------------------------------------------------------- writing

_DUMPER = None


def _dumper():
    """SafeDumper without anchors: a list shared by two keys is written twice, never as &id001/*id001
    (anchors would break the one-op-per-line layout that fast readers rely on). libyaml's emitter
    when PyYAML has it (the same text, about 5x faster: a probe writes ~3,700 op lines)."""
    global _DUMPER
    if _DUMPER is None:
        import yaml

        class Dumper(getattr(yaml, "CSafeDumper", yaml.SafeDumper)):  # type: ignore[misc]
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


def _key(name) -> str:
    """An op name as a mapping key on its op's line. A name with a line break in it is written
    double-quoted, its breaks escaped (the plain style would fold it over lines, which YAML does not
    allow in a key)."""
    text = _flow(name)
    if "\n" not in text:
        return text
    import yaml

    return yaml.dump(name, Dumper=_dumper(), default_style='"', width=1 << 30).removesuffix("\n...\n").strip()


def body(doc: dict) -> str:
    """The YAML of ``doc`` without its integrity line: header block, then one line per op, sorted."""
    import yaml

    head = {k: v for k, v in doc.items() if k not in ("ops", INTEGRITY)}
    text = yaml.dump(head, Dumper=_dumper(), sort_keys=True, default_flow_style=False, width=100, allow_unicode=True)
    lines = [text.rstrip("\n"), "ops:" if doc.get("ops") else "ops: {}"]
    for name in sorted(doc.get("ops", {})):
        lines.append(f"  {_key(name)}: {_flow(doc['ops'][name])}")
    return "\n".join(lines) + "\n"


def stamped(text: str, ops: int) -> str:
    """``text`` (a data file's YAML) behind its integrity line: the number of ops, and the SHA-256 of
    the UTF-8 bytes of ``text``."""
    return f"{INTEGRITY}: {{ops: {ops}, sha256: {_sha256(text)}}}\n{text}"


def _sha256(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def dumps(doc: dict) -> str:
    """Deterministic YAML: the integrity line, the header block, then one line per op, sorted. An
    ``integrity`` key in ``doc`` (a document read with ``parse``) is not copied: the line is made anew."""
    return stamped(body(doc), len(doc.get("ops") or {}))


def save(doc: dict, path: str) -> None:
    """Write atomically (``output.write_atomic``), so an interrupted write never leaves half a file,
    a symbolic link at ``path`` is refused, and a full disk or a read-only folder is one line; a file
    there that is not a coverage file of the same evidence is never replaced (``output.check_output``).
    The check and the write are made under the folder's lock (``output.locked``): a probe, a merge and
    an ingest that write into one folder at once run one after the other."""
    output.save(path, dumps(doc), kind=output.COVERAGE, evidence=doc.get("evidence"))


# ---------------------------------------------------------------- reading

_LOADER = None


def _loader():
    """PyYAML's safe loader (libyaml's when present), where a value Python cannot make (an integer of
    5,000 digits, a 13th month) is a YAML error with its line rather than a ValueError."""
    global _LOADER
    if _LOADER is None:
        import yaml

        base = getattr(yaml, "CSafeLoader", yaml.SafeLoader)

        class Loader(base):  # type: ignore[misc,valid-type]
            pass

        def guarded(construct):
            def construct_checked(loader, node):
                try:
                    return construct(loader, node)
                except (ValueError, OverflowError) as exc:
                    raise yaml.constructor.ConstructorError(None, None, str(exc), node.start_mark) from None

            return construct_checked

        for tag in ("int", "float", "timestamp"):
            tag = f"tag:yaml.org,2002:{tag}"
            Loader.add_constructor(tag, guarded(base.yaml_constructors[tag]))
        Loader.construct_mapping = _construct_mapping
        _LOADER = Loader
    return _LOADER


def _construct_mapping(self, node, deep=False):
    """A mapping, refusing what YAML reads silently: a key given twice (the last would win, so a
    second ``ops:`` block or op line would replace the first) and merge keys (``<<``), which opcov
    never writes."""
    import yaml

    if not isinstance(node, yaml.MappingNode):
        raise yaml.constructor.ConstructorError(None, None, f"expected a mapping, found {node.id}", node.start_mark)
    mapping: dict = {}
    for key_node, value_node in node.value:
        if key_node.tag == "tag:yaml.org,2002:merge":
            raise yaml.constructor.ConstructorError(
                None, None, "a YAML merge key ('<<'): opcov's data files have none", key_node.start_mark
            )
        key = self.construct_object(key_node, deep=deep)
        try:
            taken = key in mapping
        except TypeError:
            raise yaml.constructor.ConstructorError(
                None, None, "a mapping key that is not a plain value", key_node.start_mark
            ) from None
        if taken:
            raise yaml.constructor.ConstructorError(
                None, None, f"key {key!r} given twice (a duplicate key or block)", key_node.start_mark
            )
        mapping[key] = self.construct_object(value_node, deep=deep)
    return mapping


_PRINTABLE_ASCII = b"\t\n\r" + bytes(range(0x20, 0x7F))
_HIGH_BYTES = bytes(range(0x80, 0x100))


@functools.cache
def _non_printable():
    """Characters YAML does not allow in a stream (PyYAML refuses them too, without a line); compiled
    on first need (~25 ms, a tenth of an 'opcov check'), as almost no file has a byte it is needed for."""
    return re.compile("[^\t\n\r\x20-\x7e\x85\xa0-\ud7ff\ue000-\ufffd\U00010000-\U0010ffff]")


def read_text(path: str):
    """(text, None), or (None, Problem) when the file cannot be read, is over MAX_FILE_BYTES (checked
    before reading), is not UTF-8, or holds a character YAML forbids (the problem names its line).
    Every data-file reader starts here; the checks cost ~1 ms per MB."""
    try:
        info = os.stat(path)
        if stat.S_ISDIR(info.st_mode):
            return None, Problem(path, None, "a folder, where a data file is expected; remove or rename it")
        if not stat.S_ISREG(info.st_mode):  # a FIFO or a device could block or never end
            return None, Problem(path, None, "not a regular file")
        if info.st_size > MAX_FILE_BYTES:
            return None, _too_large(path, info.st_size)
        with open(path, "rb") as f:
            raw = f.read(MAX_FILE_BYTES + 1)  # bounded even if the file grew since
    except OSError as exc:
        return None, Problem(path, None, f"cannot read: {exc.strerror or exc}")
    if len(raw) > MAX_FILE_BYTES:
        return None, _too_large(path, len(raw))
    long_line = _long_line(raw)
    if long_line is not None:
        return None, Problem(
            path,
            long_line,
            f"a line over {MAX_LINE_BYTES >> 10} KiB (opcov writes none over a few KB): not read; "
            "shorten the value on it",
        )
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        return None, Problem(
            path,
            raw.count(b"\n", 0, exc.start) + 1,
            f"not UTF-8 (byte 0x{raw[exc.start]:02x}); opcov's data files are UTF-8",
        )
    odd = raw.translate(None, _PRINTABLE_ASCII)  # usually empty: the search below runs only if needed
    if odd and (odd.translate(None, _HIGH_BYTES) or b"\xc2" in odd or b"\xef" in odd):
        m = _non_printable().search(text)
        if m:
            return None, Problem(
                path, text.count("\n", 0, m.start()) + 1, f"character U+{ord(m.group()):04X} is not allowed in YAML"
            )
    return text, None


def _long_line(raw: bytes) -> int | None:
    """1-based number of the first line of ``raw`` longer than MAX_LINE_BYTES, else None (one C
    find per line: ~1 ms for a probed file)."""
    if len(raw) <= MAX_LINE_BYTES:
        return None
    start = line = 0
    while True:
        line += 1
        end = raw.find(b"\n", start)
        if (end if end >= 0 else len(raw)) - start > MAX_LINE_BYTES:
            return line
        if end < 0:
            return None
        start = end + 1


def _too_large(path: str, size: int) -> Problem:
    return Problem(
        path,
        None,
        f"{size / (1 << 20):.1f} MiB ({size} bytes), over the "
        f"{MAX_FILE_BYTES >> 20} MiB limit for an opcov data file: not read",
    )


ANCHOR_MESSAGE = (
    "YAML anchor or alias (&name / *name): opcov's data files have none, and they can make "
    "a small file expand without bound"
)
_BLANK = " \t\r\n\x85\u2028\u2029"
_BEFORE_ANCHOR = _BLANK + "\ufeff[{,:"


def anchor_candidates(text: str) -> bool:
    """Whether ``text`` has a '&' or '*' where a YAML anchor or alias could start (after a blank or
    ``[{,:``, before a non-blank): a quick test, true also for '*' inside a quoted string."""
    for ch in "&*":
        i = text.find(ch)
        while i >= 0:
            if (i == 0 or text[i - 1] in _BEFORE_ANCHOR) and text[i + 1 : i + 2] not in ("", *_BLANK):
                return True
            i = text.find(ch, i + 1)
    return False


def anchor_line(text: str) -> int | None:
    """1-based line of the first YAML anchor or alias in ``text``, else None. libyaml's event stream
    decides, and only when ``anchor_candidates`` finds a place where one could be."""
    if not anchor_candidates(text):
        return None
    import yaml

    try:
        for event in yaml.parse(text, Loader=_loader()):
            if isinstance(event, yaml.AliasEvent) or getattr(event, "anchor", None) is not None:
                return event.start_mark.line + 1 if event.start_mark else 1
    except yaml.YAMLError:
        pass  # the load that follows reports it, with its line
    return None


def _compose(path: str):
    """The YAML node tree with line marks (parsed only when there is a problem to place)."""
    import yaml

    text, problem = read_text(path)
    if problem:
        return None
    try:
        return yaml.compose(text, Loader=_loader())
    except (yaml.YAMLError, RecursionError):
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
    if version != SCHEMA_VERSION or isinstance(version, bool):
        raw.append(
            (
                ("schema_version",),
                f"schema_version is {version!r}; this opcov reads {SCHEMA_VERSION} "
                "(re-create the file with this opcov's scan)",
            )
        )
    for key in doc:
        if key not in TOP_KEYS:
            raw.append(((key,), f"unknown key {key!r}; expected one of {sorted(TOP_KEYS)}"))
    for key in ("backend", "provenance", "ops"):
        if not isinstance(doc.get(key), dict):
            raw.append(((key,), f"missing or not a mapping: {key!r}"))
    if doc.get("evidence") not in EVIDENCE_KINDS:
        raw.append((("evidence",), f"evidence is {doc.get('evidence')!r}; expected one of {EVIDENCE_KINDS}"))
    backend = doc.get("backend")
    if isinstance(backend, dict) and not backend.get("name"):
        raw.append((("backend",), "backend lacks 'name'"))
    for section, types in (("backend", dict.fromkeys(BACKEND_KEYS, str)), ("provenance", PROVENANCE_TYPES)):
        for key, value in doc[section].items() if isinstance(doc.get(section), dict) else ():
            if key not in types:
                raw.append(((section, key), f"unknown {section} key {key!r}"))
            elif bad := type_problem(value, types[key], f"{section}.{key}"):
                raw.append(((section, key) + bad[0], bad[1]))
    if "summary" in doc and not (isinstance(doc["summary"], dict) and _is_data(doc["summary"])):
        raw.append((("summary",), "summary must be a mapping of plain data (counts and names)"))
    prov = doc["provenance"] if isinstance(doc.get("provenance"), dict) else {}
    for key in ("torch", "command", "created"):
        if not prov.get(key):
            raw.append((("provenance",), f"provenance lacks {key!r}: data without it cannot be reproduced"))
    ops = doc["ops"] if isinstance(doc.get("ops"), dict) else {}
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
        elif allowed is dict:
            if not isinstance(value, dict) or not all(
                isinstance(k, str) and isinstance(v, str) for k, v in value.items()
            ):
                yield (key,), f"{name}: {key} must be a mapping of dtype names to strings"
        elif allowed == "layouts":
            if bad := _layouts_problem(value):
                yield (key,), f"{name}: layouts {bad}"
        elif value not in allowed:
            yield (key,), f"{name}: {key} is {value!r}; expected one of {', '.join(allowed)}"


def _layouts_problem(value) -> str:
    """What is wrong with an op's ``layouts`` ('' when nothing): family -> state, ``only`` -> families."""
    if not isinstance(value, dict):
        return "must be a mapping of layout families to states"
    for k, v in value.items():
        if k == "only":
            if not isinstance(v, str) or not set(v.split(",")) <= set(LAYOUT_FAMILIES):
                return f"only is {v!r}; expected families among {', '.join(LAYOUT_FAMILIES)}"
        elif k not in LAYOUT_FAMILIES:
            return f"names {k!r}; expected one of {', '.join(LAYOUT_FAMILIES + ('only',))}"
        elif v not in LAYOUT_STATES:
            return f"{k} is {v!r}; expected one of {', '.join(LAYOUT_STATES)}"
    return ""


def _probed_op_problems(name, rec):
    """A probed op: ``{skipped: reason}``, or ``{dtype key: cell}`` (see docs/DATA.md)."""
    if not isinstance(name, str) or "::" not in name:
        yield (), f"op name {name!r} is not of the form namespace::op[.overload]"
    if not isinstance(rec, dict) or not rec:
        yield (), f"{name}: record must be a non-empty mapping of dtype -> cell, or {{skipped: reason}}"
        return
    if "skipped" in rec:
        reason = rec["skipped"].split(" (shard ")[0] if isinstance(rec["skipped"], str) else None  # old shards'
        if reason not in SKIP_REASONS and reason is not None and set(rec) <= {"skipped", "of"}:
            yield (
                ("skipped",),
                f"{name}: skipped is {rec['skipped']!r}; expected one of {', '.join(SKIP_REASONS)}",
            )
        elif (
            not isinstance(rec["skipped"], str)
            or set(rec) - {"skipped", "of"}
            or not isinstance(rec.get("of", ""), str)
            or ("of" in rec) != (rec["skipped"] == "variant")
        ):
            yield (
                ("skipped",),
                (
                    f"{name}: a skipped op is exactly {{skipped: <reason>}}, with "
                    "of: <functional op> when the reason is 'variant'"
                ),
            )
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
                if not (
                    isinstance(value, list)
                    and len(value) == 2
                    and all(isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v) for v in value)
                ):
                    yield where, f"{name}: {dkey}: {key} must be [max abs error, max rel error], finite numbers"
            elif allowed is list:
                if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
                    yield where, f"{name}: {dkey}: {key} must be a list of names"
            elif allowed is int:
                if not isinstance(value, int) or isinstance(value, bool) or not 0 <= value <= MAX_COUNT:
                    yield where, f"{name}: {dkey}: {key} must be a count (0 to {MAX_COUNT:.0e})"
            elif allowed is str:
                if not isinstance(value, str):
                    yield where, f"{name}: {dkey}: {key} must be a string"
            elif allowed is bool:
                if value is not True:
                    yield where, f"{name}: {dkey}: {key} must be true where written"
            elif allowed is dict:  # traced: model -> a probed status
                if not isinstance(value, dict) or not all(
                    isinstance(k, str) and v in PROBED_STATUSES for k, v in value.items()
                ):
                    yield where, f"{name}: {dkey}: {key} must map model names to probed statuses"
            elif value not in allowed:
                yield where, f"{name}: {dkey}: {key} is {value!r}; expected one of {', '.join(allowed)}"


def parse(path: str):
    """(document, None), or (None, Problem) when the file cannot be read (``read_text``), was cut short
    mid-line, has a YAML anchor or alias, or is not YAML. The document is as YAML gives it (an
    integrity line is its ``integrity`` key); ``load`` verifies it."""
    doc, problem, _ = read_doc(path)
    return doc, problem


def read_doc(path: str):
    """(document, problem, stamp): ``parse``'s two, and the file's ``Stamp`` (None when it has no
    integrity line) for ``integrity_problem``."""
    import yaml

    text, problem = read_text(path)
    if problem:
        return None, problem, None
    stamp = stamp_of(text)
    if not text.endswith("\n"):  # opcov ends every file with a line break: this one was cut mid-line
        ops = f" ({stamp.ops} ops were written)" if stamp else ""
        return None, _altered(path, f"it ends mid-line{ops}", _command_in(text)), stamp
    line = anchor_line(text)
    if line:
        return None, Problem(path, line, ANCHOR_MESSAGE), stamp
    try:
        return yaml.load(text, Loader=_loader()), None, stamp
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        return (
            None,
            Problem(path, mark.line + 1 if mark else None, f"not valid YAML: {getattr(exc, 'problem', None) or exc}"),
            stamp,
        )
    except RecursionError:
        return None, Problem(path, None, "not valid YAML: nested too deeply"), stamp


# ---------------------------------------------------------------- integrity

_STAMP = re.compile(r"integrity: \{ops: (0|[1-9][0-9]*), sha256: ([0-9a-f]{64})\}\n")


@dataclass(frozen=True)
class Stamp:
    """A file's integrity line as read: the op count it states, and whether the SHA-256 it states is
    that of the rest of the file."""

    ops: int
    intact: bool


def stamp_of(text: str) -> Stamp | None:
    """The integrity line at the start of ``text`` (exactly as ``stamped`` writes it), else None."""
    m = _STAMP.match(text)
    if m is None:
        return None
    return Stamp(int(m.group(1)), _sha256(text[m.end() :]) == m.group(2))


def integrity_problem(path: str, doc, stamp: Stamp | None) -> Problem | None:
    """The file (parsed into ``doc``, its ``Stamp`` read by ``read_doc``) against its integrity line:
    an error when it is not what opcov wrote (cut short or edited), a warning when it has no line."""
    ops = doc.get("ops") if isinstance(doc, dict) else None
    have = len(ops) if isinstance(ops, dict) else 0
    command = _command(doc)
    if stamp is None:
        counted = summary_count(doc)
        if counted is not None and counted != have:
            return _altered(path, f"{have} ops where its summary counts {counted}", command)
        if isinstance(doc, dict) and INTEGRITY in doc:
            return _altered(
                path,
                "its integrity line is not the first line as opcov writes it "
                "('integrity: {ops: N, sha256: <64 hex digits>}')",
                command,
            )
        return Problem(
            path,
            None,
            "no integrity line (written before opcov stamped its files), so a cut or an "
            "edit cannot be detected; re-save it with scripts/restamp_data.py, or "
            f"regenerate it with: {command}",
            "warning",
        )
    if stamp.intact and stamp.ops == have:
        return None
    what = [f"{have} ops where its integrity line says {stamp.ops}"] if stamp.ops != have else []
    what += [] if stamp.intact else ["its SHA-256 is not the one on its integrity line"]
    return _altered(path, ", and ".join(what), command)


def summary_count(doc) -> int | None:
    """How many ops the header's own summary says the file holds (a file without an integrity line
    is checked against it, so one cut at a line end is not read as whole), or None when it does
    not say: an op set's ``distinct_ops``, a coverage file's ``overloads`` of ``aten`` and
    ``other_namespaces`` (``core`` is a part of aten)."""
    summary = doc.get("summary") if isinstance(doc, dict) else None
    if not isinstance(summary, dict):
        return None
    if doc.get("kind") == "opset":
        count = summary.get("distinct_ops")
        return count if isinstance(count, int) and not isinstance(count, bool) else None
    counts = [
        (summary.get(group) or {}).get("overloads") if isinstance(summary.get(group), dict) else None
        for group in ("aten", "other_namespaces")
    ]
    if not all(isinstance(c, int) and not isinstance(c, bool) for c in counts):
        return None
    return sum(c for c in counts if isinstance(c, int))


def _altered(path: str, what: str, command: str) -> Problem:
    return Problem(
        path, None, f"not as opcov wrote it: {what}; the file was truncated or edited: regenerate it with: {command}"
    )


_UNKNOWN_COMMAND = "the command that made it (its provenance.command)"


def _command(doc) -> str:
    prov = doc.get("provenance") if isinstance(doc, dict) else None
    command = prov.get("command") if isinstance(prov, dict) else None
    return command if isinstance(command, str) and command else _UNKNOWN_COMMAND


_COMMAND_LINE = re.compile(r"^  command: (.+(?:\n    .+)*)$", re.M)  # a long value is folded over lines


def _command_in(text: str) -> str:
    """provenance.command read off the header of a file too damaged to parse, when it can be."""
    import yaml

    end = text.find("\nops:")
    m = _COMMAND_LINE.search(text, 0, end if end >= 0 else len(text))
    if m and text[m.end() : m.end() + 1] != "\n":  # the cut is in it
        m = None
    try:
        value = yaml.load(m.group(1), Loader=_loader()) if m else None
    except yaml.YAMLError:
        value = None
    return value if isinstance(value, str) and value else _UNKNOWN_COMMAND


def raise_first(problems, path: str) -> None:
    """DataError naming file:line of the first problem (and how many more), if there is any."""
    if problems:
        more = f" (and {len(problems) - 1} more; run 'opcov lint {path}')" if len(problems) > 1 else ""
        raise DataError(f"{problems[0]}{more}")


def load(path: str, validator=None) -> dict:
    """Parse and validate a data file (a coverage file unless another ``validator`` is given) and verify
    its integrity line; DataError names file:line of the first problem. The document has no
    ``integrity`` key: the line describes the file, not its data."""
    doc, problem, stamp = read_doc(path)
    if problem:
        raise_first([problem], path)
    problems = (validator or validate)(doc, path)
    altered = integrity_problem(path, doc, stamp)
    raise_first(problems + ([altered] if altered and altered.severity == "error" else []), path)
    doc.pop(INTEGRITY, None)
    return doc
