"""Checked documents of data files, kept in the user's cache folder so that a command run again skips the parse.

``opcov check`` on a zoo model parses and validates a few coverage files, op sets and vendor-test
expectations every run (~0.4 s of its ~0.7 s). Where a command turns this on (``caching``), each
document that read without error is kept, marshalled, in ``<cache folder>/opcov/parsed/``, under the
file's real path, with the SHA-256 of the file's bytes, of opcov's source and the Python version: a file
changed in any byte, another opcov or another Python parses it again. Only a document that read
cleanly is kept, so every error still comes from the parse, naming its file and line. An entry that
is corrupt, cut short or of another format is parsed again and replaced (its bytes are checked
against their own SHA-256 before they are unmarshalled); a cache folder that cannot be written is
left alone. Off by default: the site reads every file once, and tracing reads what it just wrote.
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import marshal
import os
import sys

from opcov import torchenv

FOLDER = "parsed"
KEEP = 256  # entries kept; past it the least recently written are removed (a test run checks many temp files)
_MAGIC = b"opcov-parsed-1\n"
_on = False


@contextlib.contextmanager
def caching():
    """Within: ``read`` keeps and reuses documents in the user's cache folder."""
    global _on
    before, _on = _on, True
    try:
        yield
    finally:
        _on = before


def read(path: str, kind: str, build):
    """``build(path)``: the checked document of ``path``, a fresh object each call. While ``caching``, from
    the entry kept for the file's current bytes where there is one, else built and kept; ``kind`` (one per
    ``build``) keeps the documents of different readers apart. A file that cannot be read is built, which
    raises as it always did."""
    if not _on:
        return build(path)
    try:
        with open(path, "rb") as f:
            digest = hashlib.sha256(f.read()).hexdigest()
        real = os.path.realpath(path)
    except OSError:
        return build(path)
    key = [kind, real, digest, code_hash(), list(sys.version_info[:2])]
    entry = os.path.join(torchenv.cache_dir(), FOLDER, f"{kind}-{hashlib.sha256(real.encode()).hexdigest()[:24]}")
    found = _load(entry, key)
    if found is not None:
        return found[0]
    doc = build(path)
    _save(entry, key, doc)
    return doc


def _load(entry: str, key: list) -> tuple | None:
    """(document,) from ``entry`` where it is intact and kept for ``key``; else None."""
    try:
        with open(entry, "rb") as f:
            blob = f.read()
    except OSError:
        return None
    head = len(_MAGIC) + 32
    if not blob.startswith(_MAGIC) or hashlib.sha256(blob[head:]).digest() != blob[len(_MAGIC) : head]:
        return None
    try:
        kept_key, doc = marshal.loads(blob[head:])
    except (ValueError, EOFError, TypeError):
        return None
    return (doc,) if kept_key == key else None


def _save(entry: str, key: list, doc) -> None:
    """Keep ``doc`` for ``key`` at ``entry``; nothing where it is not plain data or cannot be written."""
    from opcov.errors import UsageError
    from opcov.store import output

    try:
        payload = marshal.dumps([key, doc])
    except ValueError:  # not marshallable: nothing to keep
        return
    try:
        output.write_atomic(entry, _MAGIC + hashlib.sha256(payload).digest() + payload, durable=False)
    except UsageError:
        return  # no cache folder to write to: the next run parses again
    _prune(os.path.dirname(entry))


def _prune(folder: str) -> None:
    """Remove the least recently written entries past ``KEEP`` (to three quarters of it)."""
    try:
        found = [(e.stat().st_mtime_ns, e.path) for e in os.scandir(folder) if e.is_file()]
    except OSError:
        return
    if len(found) <= KEEP:
        return
    for _mtime, path in sorted(found)[: len(found) - KEEP * 3 // 4]:
        with contextlib.suppress(OSError):
            os.remove(path)


@functools.cache
def code_hash() -> str:
    """opcov's own source: a changed reader or validator reads again (and a changed judge judges again)."""
    h = hashlib.sha256()
    top = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))  # src/opcov
    for root, dirs, files in os.walk(top):
        dirs.sort()
        for f in sorted(files):
            if f.endswith(".py"):
                with open(os.path.join(root, f), "rb") as fh:
                    h.update(f.encode() + b"\0" + fh.read())
    return h.hexdigest()
