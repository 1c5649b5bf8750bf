"""Contributed results: one file that carries a probe, or an observed run of a model (``opcov run``),
from the machine that has the hardware to the repository that does not, and the checks it must pass
there before it touches coverage/.

A bundle (``opcov bundle``) is gzip-compressed JSON::

    {"opcov_bundle": 1, "kind": "probed", "name": "<snapshot file name>", "backend": {...},
     "provenance": {opcov, torch, backend package and version, settings, host, device, command,
                    created, source, bundled}, "sha256": "<of text>", "bytes": N, "text": "<the file>",
     "times": {group: seconds}}

``ingest`` refuses, in one line naming what does not match and before anything is written: a file
that is not gzip JSON or is cut short (truncated), another format or version (foreign), a text whose
hash or size is not the recorded one, or whose own integrity line fails (tampered), provenance that
disagrees with the text (versions, backend), a host path (a home folder) anywhere in the text, and
ops outside the torch release's catalogue (read from a registered file of the same release here).
Then probed data is merged with the backend's probed snapshot of the same versions (worst status per
cell, as ``opcov merge``) or written as it; an observed run (kind ``observed``, name MODEL.MODE.json)
takes the place of the backend's observed run of that model and mode, since a run is one fact, not
cells to merge. Either way its provenance names the contribution (source, date, hash) so that
``check`` and the site can say whose evidence it is. Torch-free.
"""

from __future__ import annotations

import datetime as _dt
import gzip
import hashlib
import json
import os
import platform
import re
import stat
import zlib

from opcov.errors import DataError, UsageError
from opcov.store import data, layout, lineyaml, observed, output, strictjson
from opcov.version import __version__

FORMAT = 1
KINDS = ("probed", "observed")
SUFFIX = ".opcov-bundle.json.gz"
# a home folder (or a user's profile) names the contributor's machine and account: never committed
HOST_PATH = re.compile(r"(/home/[^/\s'\"]+|/Users/[^/\s'\"]+|[A-Za-z]:\\\\?Users\\\\?[^\\\s'\"]+|/root/)")


def _now() -> str:
    return _dt.datetime.now(_dt.timezone.utc).replace(microsecond=0).isoformat()


def _scrub(text: str) -> str:
    """The text with home folders replaced by '~' (a traceback in an error message names them)."""
    return HOST_PATH.sub("~", text)


def make(path: str, *, source: str, command: str) -> dict:
    """The bundle of the probed file (or observed-run file) ``path``, validated as any reader would,
    contributed by ``source``."""
    if path.endswith(".json"):
        return _make_observed(path, source=source, command=command)
    doc = data.load(path)  # schema, integrity line: a damaged file is refused before it is packed
    if doc.get("evidence") not in KINDS:
        raise UsageError(f"{path}: evidence is {doc.get('evidence')!r}; opcov bundle packs a probed file")
    with open(path, encoding="utf-8") as f:
        text = f.read()
    if HOST_PATH.search(text):
        # rewrite the data without the host's paths, restamped, so the bundle's text is a valid file
        doc = json.loads(_scrub(json.dumps(doc)))
        text = data.dumps(doc)
    times = {}
    tpath = path + ".times.json"
    if os.path.exists(tpath):
        try:
            with open(tpath) as f:
                times = {str(k): float(v) for k, v in json.load(f)["groups"].items()}
        except (OSError, ValueError, KeyError, TypeError, AttributeError):
            times = {}
    prov, b = doc["provenance"], doc["backend"]
    name = layout.snapshot_name(doc["evidence"], str(prov["torch"]), b.get("package"), b.get("version"), None)
    return dict(_envelope(doc["evidence"], name, b, prov, text, source, command), times=times)


def _envelope(kind: str, name: str, backend: dict, prov: dict, text: str, source: str, command: str) -> dict:
    return {
        "opcov_bundle": FORMAT,
        "kind": kind,
        "name": name,
        "backend": dict(backend),
        "provenance": {
            "opcov": str(prov.get("opcov")),
            "torch": str(prov["torch"]),
            "backend_package": backend.get("package"),
            "backend_version": backend.get("version"),
            "settings": prov.get("settings") or {},
            "host": prov.get("host") or {},
            "device": prov.get("device"),
            "command": prov.get("command"),
            "created": prov.get("created"),
            "source": source,
            "bundled": _now(),
            "bundled_by": f"opcov {__version__} on {platform.system()}",
            "bundle_command": command,
        },
        "sha256": hashlib.sha256(text.encode("utf-8")).hexdigest(),
        "bytes": len(text.encode("utf-8")),
        "text": text,
        "times": {},
    }


def _observed_name(doc: dict) -> str:
    return os.path.basename(observed.path_for("", doc["backend"]["name"], doc["model"]["name"], doc["model"]["mode"]))


def _make_observed(path: str, *, source: str, command: str) -> dict:
    """The bundle of an observed-run file (``opcov run``): its text with home folders scrubbed."""
    doc = observed.load(path)
    if not isinstance(doc.get("backend"), dict) or not isinstance(doc.get("model"), dict):
        raise UsageError(f"{path}: an observed run names its backend and model; record it again with 'opcov run'")
    observed.check_names(doc, path)  # what 'opcov ingest' refuses is refused here, not after it was sent
    doc = json.loads(_scrub(json.dumps(doc)))
    text = observed.dumps(doc)
    return _envelope("observed", _observed_name(doc), doc["backend"], doc["provenance"], text, source, command)


def write(bundle: dict, out: str, inputs=()) -> None:
    """Write the bundle to ``out`` through the output guard (never over one of ``inputs``)."""
    payload = json.dumps(bundle, sort_keys=True, indent=0).encode("utf-8")
    output.save(out, gzip.compress(payload, mtime=0), kind=output.BUNDLE, inputs=inputs)


# A bundle carries one data file (at most data.MAX_FILE_BYTES) as a JSON string, escaped: what it may
# take compressed and inflated, checked before and while it is decompressed (a 2 MB gzip can inflate to GBs).
MAX_BUNDLE_BYTES = 2 * data.MAX_FILE_BYTES + (1 << 20)
_CHUNK = 1 << 20
FIELDS = {
    "opcov_bundle": int,
    "kind": str,
    "name": str,
    "backend": dict,
    "provenance": dict,
    "sha256": str,
    "bytes": int,
    "text": str,
    "times": dict,
}
_PROVENANCE_TEXT = (
    "opcov", "torch", "backend_package", "backend_version", "device", "command", "created", "source",
    "bundled", "bundled_by", "bundle_command",
)  # fmt: skip
MAX_TIMES = 100_000  # group times a bundle may carry (a probe has thousands of groups)


def _inflate(path: str) -> bytes:
    """The bundle's JSON, decompressed in bounded steps: refused before reading when the file is over
    MAX_BUNDLE_BYTES, and as soon as what it inflates to passes MAX_BUNDLE_BYTES."""
    limit = MAX_BUNDLE_BYTES
    try:  # O_NONBLOCK: opening a pipe with no writer must not wait for one
        f = os.fdopen(os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_CLOEXEC", 0)), "rb")
    except OSError as exc:
        raise UsageError(f"{path}: cannot read the bundle ({exc.strerror})") from None
    with f:
        try:
            info = os.fstat(f.fileno())
        except OSError as exc:
            raise UsageError(f"{path}: cannot read the bundle ({exc.strerror})") from None
        if not stat.S_ISREG(info.st_mode):
            raise UsageError(f"{path}: not a regular file (a folder, device or pipe); a bundle is a file")
        size = info.st_size
        if size > limit:
            raise DataError(f"{path}: {size:,} bytes, over the {limit:,} bytes a bundle may take; not read")
        inflater = zlib.decompressobj(31)  # gzip
        out = bytearray()
        read = 0
        while not inflater.eof:
            chunk = f.read(_CHUNK)
            if not chunk:
                break
            read += len(chunk)
            if read > limit:
                raise DataError(f"{path}: over the {limit:,} bytes a bundle may take; not read further")
            try:
                while chunk and not inflater.eof:
                    out += inflater.decompress(chunk, limit - len(out) + 1)
                    if len(out) > limit:
                        raise DataError(
                            f"{path}: inflates to over {limit:,} bytes, more than any bundle opcov writes "
                            "(a compression bomb?); not read further"
                        )
                    chunk = inflater.unconsumed_tail
            except zlib.error:
                raise DataError(
                    f"{path}: not an opcov bundle (not gzip data); make one with 'opcov bundle FILE'"
                ) from None
        if not inflater.eof:
            if not out and read < 2:
                raise DataError(f"{path}: not an opcov bundle (an empty file); make one with 'opcov bundle FILE'")
            raise DataError(f"{path}: truncated bundle (the compressed stream ends early); copy it again")
        if inflater.unused_data or f.read(1):
            raise DataError(f"{path}: damaged bundle (bytes after the compressed data); copy it again")
    return bytes(out)


def _text_or_none(value) -> bool:
    return value is None or isinstance(value, str)


def _check_fields(b: dict, path: str) -> None:
    """Every field of the envelope of the type it must have, names checked as names, before any of it is
    used: a wrong type is one line here, never a traceback halfway through an ingest."""
    for key, kind in FIELDS.items():
        value = b.get(key)
        if not isinstance(value, kind) or (kind is int and isinstance(value, bool)):
            raise DataError(f"{path}: bundle field {key!r} missing or not {kind.__name__}")
    unknown = sorted(set(b) - set(FIELDS))
    if unknown:
        raise DataError(f"{path}: bundle field(s) {', '.join(repr(k)[:40] for k in unknown)} unknown to this opcov")
    if b["kind"] not in KINDS:
        raise DataError(f"{path}: bundle kind {b['kind'][:40]!r}; opcov ingests {', '.join(KINDS)} bundles")
    layout.check_name(b["name"], "bundle field 'name'", where=path)
    if not re.fullmatch(r"[0-9a-f]{64}", b["sha256"]):
        raise DataError(f"{path}: bundle field 'sha256' is not a SHA-256 (64 hex digits)")
    if b["bytes"] < 0 or b["bytes"] > data.MAX_FILE_BYTES:
        raise DataError(f"{path}: bundle field 'bytes' is {b['bytes']}; a data file has 0 to {data.MAX_FILE_BYTES}")
    backend = b["backend"]
    layout.check_name(backend.get("name"), "bundle field 'backend.name'", where=path, plain=True)
    for key, value in backend.items():
        if not _text_or_none(value):
            raise DataError(f"{path}: bundle field 'backend.{key[:40]}' is not text")
    prov = b["provenance"]
    for key in _PROVENANCE_TEXT:
        if not _text_or_none(prov.get(key)):
            raise DataError(f"{path}: bundle field 'provenance.{key}' is not text")
    for key in ("settings", "host"):
        if not isinstance(prov.get(key) or {}, dict):
            raise DataError(f"{path}: bundle field 'provenance.{key}' is not a mapping")
    times = b["times"]
    if len(times) > MAX_TIMES:
        raise DataError(f"{path}: bundle field 'times' has {len(times):,} groups, over {MAX_TIMES:,}")
    for group, seconds in times.items():
        if (
            isinstance(seconds, bool)
            or not isinstance(seconds, (int, float))
            or not 0 <= seconds < 1e9
            or len(group) > 1000
            or any(ord(c) < 32 for c in group)
        ):
            raise DataError(
                f"{path}: bundle field 'times': group {group[:60]!r} has {str(seconds)[:40]!r}; "
                "a group's time is a number of seconds"
            )


def read(path: str) -> dict:
    """The bundle at ``path``, its format, every field's type and its hash checked; a one-line DataError
    naming what does not match. Bounded: see ``_inflate`` and opcov.store.strictjson."""
    payload = _inflate(path)
    if not payload:
        raise DataError(f"{path}: truncated or damaged bundle (it holds nothing)")
    try:
        b = strictjson.loads(payload, path)
    except DataError as exc:
        if "not valid JSON" in str(exc):  # the reason after it, as strictjson names it
            raise DataError(
                str(exc).replace("not valid JSON", "truncated or damaged bundle: its JSON does not parse", 1)
            ) from None
        raise
    if not isinstance(b, dict) or "opcov_bundle" not in b:
        raise DataError(f"{path}: not an opcov bundle (no 'opcov_bundle' key)")
    if b["opcov_bundle"] != FORMAT:
        raise DataError(f"{path}: bundle format {ascii(b['opcov_bundle'])[:40]}; this opcov reads format {FORMAT}")
    b.setdefault("times", {})
    _check_fields(b, path)
    try:
        body = b["text"].encode("utf-8")
    except UnicodeEncodeError:
        raise DataError(f"{path}: the bundled data is not UTF-8 text (a lone surrogate)") from None
    if len(body) != b["bytes"]:
        raise DataError(f"{path}: tampered bundle: the data is {len(body)} bytes, the bundle records {b['bytes']}")
    got = hashlib.sha256(body).hexdigest()
    if got != b["sha256"]:
        raise DataError(f"{path}: tampered bundle: content hash {got[:16]}... != recorded {b['sha256'][:16]}...")
    return b


def validate(b: dict, path: str, coverage_dir: str) -> dict:
    """The bundle's data document, checked against its provenance, the host-path rule and the torch
    release's op catalogue here. A one-line DataError naming the first thing that does not match."""
    if b["kind"] == "observed":
        return _validate_observed(b, path, coverage_dir)
    why = layout.snapshot_name_problem(b["name"], "probed")
    if why is not None:
        raise DataError(f"{path}: bundle names the file {b['name'][:80]!r}, which {why}")
    if m := HOST_PATH.search(b["text"]):
        raise DataError(f"{path}: the data names a host path ({m.group(0)}...); bundle it again with this opcov")
    try:
        doc = _load_text(b["text"], b["name"])
    except DataError as exc:
        raise DataError(f"{path}: {exc}") from None
    prov, bp = doc["provenance"], b["provenance"]
    for what, have, want in (
        ("evidence", doc.get("evidence"), b["kind"]),
        ("backend", doc["backend"].get("name"), b["backend"].get("name")),
        ("backend version", doc["backend"].get("version"), bp.get("backend_version")),
        ("torch version", str(prov.get("torch")), bp.get("torch")),
        ("opcov version", str(prov.get("opcov")), bp.get("opcov")),
        ("command", prov.get("command"), bp.get("command")),
    ):
        if have != want:
            raise DataError(f"{path}: {what} in the data is {have!r}, the bundle says {want!r}")
    want_name = layout.snapshot_name(
        "probed", str(prov["torch"]), doc["backend"].get("package"), doc["backend"].get("version"), None
    )
    if want_name != b["name"]:
        raise DataError(f"{path}: the data's versions make the name {want_name!r}, the bundle says {b['name']!r}")
    _check_backend_and_ops(path, coverage_dir, doc["backend"]["name"], str(prov["torch"]), doc["ops"])
    return doc


def _check_backend_and_ops(path: str, coverage_dir: str, backend: str, torch_version: str, ops) -> None:
    """The backend is one opcov knows (or has data for) and every op is in the torch release's catalogue."""
    if backend not in layout.backends_with_data(coverage_dir) and not _known(backend):
        raise DataError(
            f"{path}: backend {backend!r} is neither one opcov knows nor one with data under {coverage_dir}/ "
            "(a foreign bundle?); scan it first ('opcov scan BACKEND --import MODULE')"
        )
    catalogue = _catalogue(coverage_dir, torch_version, backend)
    if catalogue is None:
        raise DataError(
            f"{path}: no registered file of torch {torch_version} under {coverage_dir}/ to check the ops "
            "against; scan a backend with that torch first ('opcov scan cpu')"
        )
    aten, own = catalogue
    for name in ops:
        if name.startswith("aten::") and name not in aten:
            raise DataError(f"{path}: op {name} is not in torch {torch_version}'s catalogue (a foreign bundle?)")
        if own is not None and not name.startswith("aten::") and name not in own and name not in aten:
            raise DataError(f"{path}: op {name} is not in {backend}'s catalogue here")


def _validate_observed(b: dict, path: str, coverage_dir: str) -> dict:
    """An observed run's bundle: the same checks, on the observed-run file's own validation."""
    if not b["name"].endswith(tuple(f".{m}.json" for m in observed.MODES)):
        raise DataError(f"{path}: bundle names the file {b['name'][:80]!r}, not an observed run's MODEL.MODE.json")
    if m := HOST_PATH.search(b["text"]):
        raise DataError(f"{path}: the data names a host path ({m.group(0)}...); bundle it again with this opcov")
    try:
        doc = strictjson.loads(b["text"], "the bundled observed run")
    except DataError as exc:
        raise DataError(f"{path}: {exc}") from None
    bad = observed.problems(doc, b["name"])
    if bad or not isinstance(doc.get("backend"), dict) or not isinstance(doc.get("model"), dict):
        raise DataError(f"{path}: the bundled data is not a valid observed run: {bad[0] if bad else 'no backend'}")
    observed.check_names(doc, f"{path}: the bundled run")
    prov, bp = doc["provenance"], b["provenance"]
    for what, have, want in (
        ("backend", doc["backend"].get("name"), b["backend"].get("name")),
        ("backend version", doc["backend"].get("version"), bp.get("backend_version")),
        ("torch version", str(prov.get("torch")), bp.get("torch")),
        ("opcov version", str(prov.get("opcov")), bp.get("opcov")),
        ("command", prov.get("command"), bp.get("command")),
        ("file name", _observed_name(doc), b["name"]),
    ):
        if have != want:
            raise DataError(f"{path}: {what} in the data is {have!r}, the bundle says {want!r}")
    _check_backend_and_ops(path, coverage_dir, doc["backend"]["name"], str(prov["torch"]), doc.get("ops") or {})
    return doc


def _known(name: str) -> bool:
    from opcov.backends import get_backend

    try:
        get_backend(name)
    except UsageError:
        return False
    return True


def _load_text(text: str, name: str) -> dict:
    """Parse bundled text with the same validating reader as a file on disk."""
    import tempfile

    with tempfile.TemporaryDirectory() as tmp:
        p = os.path.join(tmp, name)
        with open(p, "w", encoding="utf-8") as f:
            f.write(text)
        try:
            return data.load(p)
        except DataError as exc:
            raise DataError(f"the bundled data is not a valid file: {str(exc).replace(p, name)}") from None


def _catalogue(coverage_dir: str, torch_version: str, backend: str):
    """(aten op names of the torch release, the backend's own op names or None) from registered files
    of that release: the backend's own when there is one, any backend's for the aten catalogue."""
    aten = own = None
    names = [backend] + [n for n in layout.backends_with_data(coverage_dir) if n != backend]
    for name in names:
        reg = layout.pick(layout.snapshots(coverage_dir, name)["registered"], torch_version)
        if not reg:
            continue
        doc = lineyaml.load(reg, summary=False)
        if not layout.same_torch(str(doc["provenance"].get("torch")), torch_version):
            continue
        ops = set(doc["ops"])
        if name == backend:
            own = ops
        if aten is None:
            aten = {n for n in ops if n.startswith("aten::")}
        if own is not None:
            break
    return None if aten is None else (aten, own)


def _say(line: str) -> None:
    import sys

    print(line, file=sys.stderr)


def ingest(path: str, coverage_dir: str, *, command: str) -> tuple[str, dict | None, dict]:
    """Validate the bundle and merge it into ``coverage_dir``: (the snapshot written, the old document
    or None, the new document). Nothing is written unless every check passed: the whole bundle is read
    and checked, its target (inside ``coverage_dir``, through no link) and every file it writes pass the
    output guard, and what is already there is read, merged and replaced under the folder's lock, so
    that two ingests into one folder at once both land."""
    b = read(path)
    doc = validate(b, path, coverage_dir)
    if b["kind"] == "observed":
        target = observed.path_for(
            coverage_dir, doc["backend"]["name"], doc["model"]["name"], doc["model"]["mode"], observed.path_of(doc)
        )
    else:
        target = os.path.join(coverage_dir, layout.plain_name(doc["backend"]["name"]), b["name"])
    kind = output.OBSERVED if b["kind"] == "observed" else output.COVERAGE
    output.check_output(target, kind=kind, inputs=[path], flag="the target", within=coverage_dir)
    contribution = {
        "source": str(b["provenance"].get("source") or "unknown"),
        "date": str(b["provenance"].get("bundled") or "")[:10],
        "created": str(doc["provenance"].get("created")),
        "sha256": b["sha256"],
        "host": ", ".join(f"{k} {v}" for k, v in sorted((doc["provenance"].get("host") or {}).items())),
        "device": str(doc["provenance"].get("device")),
    }
    with output.locked(os.path.dirname(target), say=_say):
        output.check_inside(coverage_dir, target)  # again: the folder may have changed while this one waited
        if b["kind"] == "observed":
            return _ingest_observed(b, path, target, doc, contribution, coverage_dir)
        return _ingest_probed(b, path, target, doc, contribution, command)


def _ingest_probed(b: dict, path: str, target: str, doc: dict, contribution: dict, command: str):
    """Probed data merged with the snapshot of the same versions (worst status per cell), its group times
    with the snapshot's: both made and checked before either file is written."""
    from opcov.store.combine import merge_docs
    from opcov.store.times import load_times, save_times, times_path

    old = data.load(target) if os.path.exists(target) else None
    if old is not None:
        if any(c.get("sha256") == b["sha256"] for c in old["provenance"].get("contributed") or []):
            raise UsageError(f"{path}: this bundle is already in {target} (same content hash)")
        new = merge_docs([(target, old), (b["name"], doc)], command=command)
        new["provenance"]["contributed"] = list(old["provenance"].get("contributed") or []) + [contribution]
    else:
        new = dict(doc)
        new["provenance"] = dict(doc["provenance"], contributed=[contribution])
    times = None
    if b["times"]:  # the contributor's group times balance the next plan of this backend
        output.check_output(times_path(target), kind=None, within=os.path.dirname(target))
        times = load_times(times_path(target))
        times.update({str(k): float(v) for k, v in b["times"].items()})
    data.save(new, target)
    if times is not None:
        save_times(times_path(target), times, backend_key=doc["backend"]["name"], command=command)
    return target, old, new


def _ingest_observed(b: dict, path: str, target: str, doc: dict, contribution: dict, coverage_dir: str):
    """An observed run takes the place of the one on record for its backend, model and mode."""
    old = observed.load(target) if os.path.exists(target) else None
    if old is not None and any(c.get("sha256") == b["sha256"] for c in (old["provenance"].get("contributed") or [])):
        raise UsageError(f"{path}: this bundle is already in {target} (same content hash)")
    new = dict(doc, provenance=dict(doc["provenance"], contributed=[contribution]))
    output.save(target, observed.dumps(new).encode("utf-8"), kind=output.OBSERVED, inputs=[path], within=coverage_dir)
    return target, old, new


def observed_changes(old: dict, new: dict) -> list[str]:
    """What an ingested observed run changes against the one it replaced, a line each."""

    def said(doc):
        res = doc["result"]
        if not res["ran"]:
            return f"raised: {str(res.get('error'))[:120]}"
        values = res.get("values") or {}
        return "ran" + ("" if values.get("match", True) else ", values differ from CPU")

    def fell_back(doc):
        return set((doc.get("backend_record") or {}).get("executed_fallback_ops") or [])

    out = []
    if said(old) != said(new):
        out.append(f"result: {said(old)} -> {said(new)}")
    gone, came = (
        set(old.get("ops") or {}) - set(new.get("ops") or {}),
        set(new.get("ops") or {}) - set(old.get("ops") or {}),
    )
    out += [f"op no longer dispatched: {op}" for op in sorted(gone)]
    out += [f"op newly dispatched: {op}" for op in sorted(came)]
    out += [f"now falls back: {op}" for op in sorted(fell_back(new) - fell_back(old))]
    out += [f"no longer falls back: {op}" for op in sorted(fell_back(old) - fell_back(new))]
    for key in ("torch", "created"):
        if old["provenance"].get(key) != new["provenance"].get(key):
            out.append(f"{key}: {old['provenance'].get(key)} -> {new['provenance'].get(key)}")
    return out or ["no change in the result, the ops or the fallbacks"]
