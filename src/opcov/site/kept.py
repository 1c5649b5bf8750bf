"""What a site build keeps in the user's cache folder for the next: each data file's parsed document and
every verdict the site shows (opcov.site.judged), so that rendering unchanged data again parses and judges
nothing.

Why: reading the bundled data (~1,800 files) and judging the zoo on every backend is ~30 s of CPU, four
fifths of a build; the pages themselves are a few seconds. One file per coverage folder,
``<cache folder>/opcov/site/<digest of the folder's real path>``, holds both (marshalled, with the SHA-256
of its bytes: an entry cut short or corrupt is read as none):

* a document is reused while its file's size, modification time and inode are those it was parsed from
  (as opcov.verdict.kept keeps compare's and gaps' judgments); a file that failed to parse is never kept,
  so every error still comes from the parse, naming its file and line. What only judging reads of an op set
  (its call tree, its calls' shapes and classes: most of its bytes) is kept apart, read only to judge;
* the verdicts are reused only while every data file under the coverage folder (YAML, JSON, TSV: not
  ``answers/``, which the site never reads, nor a probe's journal of a run in progress), opcov's own
  source, the Python version and the backends known (records, plugins) are those they were judged with;
  else all are judged again.

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
from opcov.store import answers, layout

FOLDER = "site"
DATA_SUFFIXES = (".yaml", ".json", ".tsv")  # what coverage data is kept in (docs/DATA.md): the files a build reads
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
            if root == coverage_dir:  # the answers committed for gaps and compare: the site never reads them
                dirs[:] = [d for d in dirs if d != answers.FOLDER]
            dirs.sort()
            for n in sorted(names):
                if not n.endswith(DATA_SUFFIXES):  # a probe's journal of a run in progress, a file being written
                    continue
                p = os.path.join(root, n)
                with contextlib.suppress(OSError):
                    files[os.path.relpath(p, coverage_dir).replace(os.sep, "/")] = _stat(p)
        self.files = files
        key = json.dumps([self.code, backends_key(), sorted(files.items())])
        self.key = hashlib.sha256(key.encode()).hexdigest()
        self._docs: dict = {}  # rel -> [stat, document], as kept, op sets without their call trees
        self._docs_blob = b""  # the documents to keep, marshalled
        self._trees_blob = b""  # rel -> what judging reads of an op set (_judging), marshalled: read only to judge
        self._trees: dict | None = None
        self._judged = None  # the plain verdicts kept for self.key
        self._dirty = False
        self._verdicts = None  # self._judged as a judged.Judged
        held = self._read()
        if held is not None and held[0] == self.code:
            with contextlib.suppress(ValueError, EOFError, TypeError):
                self._docs_blob, self._trees_blob = held[1]
                self._docs = marshal.loads(self._docs_blob)
            if held[2] == self.key:
                with contextlib.suppress(ValueError, TypeError):  # another layout of the records: judged again
                    self._verdicts = judged.from_plain(held[3])
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
        file is as it was parsed; else None. Where the verdicts are kept too (nothing will judge), an op set
        comes as the pages read it: no call tree, and of each call record its count alone."""
        entry = self._docs.get(rel)
        if entry is None or entry[0] != self.files.get(rel):
            return None
        if self._judged is None and rel in self._judging():
            return {**entry[1], **self._judging()[rel]}
        return entry[1]

    def _judging(self) -> dict:
        """rel -> what judging reads of an op set beyond what the pages do (its call tree, its whole ops)."""
        if self._trees is None:
            try:
                self._trees = marshal.loads(self._trees_blob) if self._trees_blob else {}
            except (ValueError, EOFError, TypeError):
                self._trees = {}
        return self._trees

    def keep_docs(self, docs: dict) -> None:
        """Keep ``docs`` (rel -> document, each read without error) for the next build, marshalled now (before
        anything changes them); any document kept before and not in ``docs`` is dropped."""
        fresh = {rel: [self.files[rel], doc] for rel, doc in docs.items() if rel in self.files}
        if fresh.keys() == self._docs.keys() and all(self._docs[r][0] == fresh[r][0] for r in fresh):
            return  # every one came from here
        light, judging = {}, {}
        for rel, (st, doc) in fresh.items():
            if layout.in_models(rel) and isinstance(doc.get("ops"), dict):  # an op set
                judging[rel] = {k: doc[k] for k in ("calltree", "ops") if k in doc}
            light[rel] = [st, as_shown(rel, doc)]
        try:
            self._docs_blob, self._trees_blob = marshal.dumps(light), marshal.dumps(judging)
        except ValueError:  # not plain data: nothing kept
            self._docs_blob = self._trees_blob = b""
            return
        self._dirty = True

    def verdicts(self) -> judged.Judged | None:
        """The verdicts kept for the folder as it is now, or None."""
        return self._verdicts

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
            payload = marshal.dumps([self.code, [self._docs_blob, self._trees_blob], self.key, self._judged])
        except ValueError:
            return
        try:
            output.write_atomic(self.path, _MAGIC + hashlib.sha256(payload).digest() + payload, durable=False)
        except (UsageError, OSError):
            return
        self._dirty = False
        _prune(os.path.dirname(self.path))


def as_shown(rel: str, doc: dict) -> dict:
    """Data file ``rel``'s document as the pages read it once its verdicts are made: an op set without its
    call tree, and of each call record its count alone (opcov.site.committed keeps the same)."""
    if layout.in_models(rel) and isinstance(doc.get("ops"), dict):
        return {k: v for k, v in doc.items() if k != "calltree"} | {"ops": _counts_only(doc["ops"])}
    return doc


def _counts_only(ops: dict) -> dict:
    """An op set's ``ops`` as the pages read them: op -> phase -> dtype -> {calls} (not shapes, classes, reads)."""
    return {
        op: {
            phase: {d: {"calls": c["calls"]} for d, c in cells.items() if isinstance(c, dict) and "calls" in c}
            if isinstance(cells, dict)
            else cells
            for phase, cells in rec.items()
        }
        if isinstance(rec, dict)
        else rec
        for op, rec in ops.items()
    }


def _prune(folder: str) -> None:
    """Remove the least recently written entries past ``KEEP``."""
    try:
        found = sorted((e.stat().st_mtime_ns, e.path) for e in os.scandir(folder) if e.is_file())
    except OSError:
        return
    for _mtime, path in found[: max(0, len(found) - KEEP)]:
        with contextlib.suppress(OSError):
            os.remove(path)
