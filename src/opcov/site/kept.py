"""What a site build keeps in the user's cache folder for the next: each data file's parsed document and
every verdict the site shows (opcov.site.judged), so that rendering unchanged data again parses and judges
nothing.

Why: reading the bundled data (~1,800 files) and judging the zoo on every backend is ~30 s of CPU, four
fifths of a build; the pages themselves are a few seconds. One file per coverage folder,
``<cache folder>/opcov/site/<digest of the folder's real path>``, holds both (marshalled, with the SHA-256
of its bytes: an entry cut short or corrupt is read as none):

* a document is reused while its file's size, modification time and inode are those it was parsed from
  (as opcov.verdict.kept keeps compare's and gaps' judgments); a file that failed to parse is never kept,
  so every error still comes from the parse, naming its file and line;
* the verdicts are reused only while every file under the coverage folder, opcov's own source, the Python
  version and the backends known (records, plugins) are those they were judged with; else all are judged
  again.

The site is the same either way (a test renders both). ``opcov site --no-cache`` reads and keeps nothing.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import marshal
import os
import sys

from opcov.site import judged

FOLDER = "site"
KEEP = 8  # coverage folders kept; past it the least recently written go (a test run renders many)
_MAGIC = b"opcov-site-1\n"


def _stat(path: str) -> list:
    st = os.stat(path)
    return [st.st_size, st.st_mtime_ns, st.st_ino]


class Kept:
    """One coverage folder's entry: read once when made, written by ``save`` where something new was made."""

    def __init__(self, coverage_dir: str):
        from opcov.store.parsed import code_hash
        from opcov.torchenv import cache_dir
        from opcov.verdict.kept import backends_key

        real = os.path.realpath(coverage_dir)
        self.path = os.path.join(cache_dir(), FOLDER, hashlib.sha256(real.encode()).hexdigest()[:24])
        self.coverage_dir = coverage_dir
        self.code = [code_hash(), list(sys.version_info[:2])]
        files = {}
        for root, dirs, names in os.walk(coverage_dir):
            dirs.sort()
            for n in sorted(names):
                p = os.path.join(root, n)
                with contextlib.suppress(OSError):
                    files[os.path.relpath(p, coverage_dir).replace(os.sep, "/")] = _stat(p)
        self.files = files
        key = json.dumps([self.code, backends_key(), sorted(files.items())])
        self.key = hashlib.sha256(key.encode()).hexdigest()
        self._docs: dict = {}  # rel -> [stat, document], as kept
        self._docs_blob = b""  # the documents to keep, marshalled
        self._judged = None  # the plain verdicts kept for self.key
        self._dirty = False
        held = self._read()
        if held is not None and held[0] == self.code:
            self._docs_blob = held[1]
            with contextlib.suppress(ValueError, EOFError, TypeError):
                self._docs = marshal.loads(held[1])
            if held[2] == self.key:
                self._judged = held[3]

    def _read(self):
        """The entry's [code, documents, key, verdicts], or None where it is missing, corrupt or another layout."""
        try:
            with open(self.path, "rb") as f:
                blob = f.read()
            head, payload = blob[: len(_MAGIC) + 32], blob[len(_MAGIC) + 32 :]
            held = marshal.loads(payload) if head == _MAGIC + hashlib.sha256(payload).digest() else None
        except (OSError, ValueError, EOFError, TypeError):
            return None
        return held if isinstance(held, list) and len(held) == 4 else None

    def doc(self, rel: str):
        """The document kept for data file ``rel`` (a path from the coverage folder, with '/') while the
        file is as it was parsed; else None."""
        entry = self._docs.get(rel)
        return entry[1] if entry is not None and entry[0] == self.files.get(rel) else None

    def keep_docs(self, docs: dict) -> None:
        """Keep ``docs`` (rel -> document, each read without error) for the next build, marshalled now (before
        anything changes them); any document kept before and not in ``docs`` is dropped."""
        fresh = {rel: [self.files[rel], doc] for rel, doc in docs.items() if rel in self.files}
        if fresh.keys() == self._docs.keys() and all(self._docs[r][0] == fresh[r][0] for r in fresh):
            return  # every one came from here
        try:
            self._docs_blob = marshal.dumps(fresh)
        except ValueError:  # not plain data: nothing kept
            return
        self._dirty = True

    def verdicts(self) -> judged.Judged | None:
        """The verdicts kept for the folder as it is now, or None."""
        if self._judged is None:
            return None
        try:
            return judged.from_plain(self._judged)
        except (TypeError, ValueError):  # another layout of the records
            return None

    def keep_verdicts(self, verdicts: judged.Judged) -> None:
        if self._judged is None:
            self._judged = judged.to_plain(verdicts)
            self._dirty = True

    def save(self) -> None:
        """Write the entry where something new was kept; a cache folder that cannot be written is left alone."""
        if not self._dirty:
            return
        from opcov.errors import UsageError
        from opcov.store import output

        try:
            payload = marshal.dumps([self.code, self._docs_blob, self.key, self._judged])
        except ValueError:
            return
        try:
            output.write_atomic(self.path, _MAGIC + hashlib.sha256(payload).digest() + payload, durable=False)
        except (UsageError, OSError):
            return
        self._dirty = False
        _prune(os.path.dirname(self.path))


def _prune(folder: str) -> None:
    """Remove the least recently written entries past ``KEEP``."""
    try:
        found = sorted((e.stat().st_mtime_ns, e.path) for e in os.scandir(folder) if e.is_file())
    except OSError:
        return
    for _mtime, path in found[: max(0, len(found) - KEEP)]:
        with contextlib.suppress(OSError):
            os.remove(path)
