"""Zoo-wide answers committed with the data, so that a first ``opcov gaps``/``compare`` judges nothing.

``gaps`` and ``compare`` judge every op set under coverage/models/ (~1,500 files, ~10 s of CPU here); the
user's cache folder (opcov.verdict.kept) makes a second run fast, not a first. So what each op set
contributes to each question ('gaps-tpu', 'compare-cuda-tpu') is made once from the bundled data by
``scripts/make_answers.py`` and kept in ``coverage/answers/<question>.json.gz``, with what it rests on:
the names of every file under the coverage folder (but this folder: a file added or removed may change
what a judgment reads), the SHA-256 of each file the judging opened (``opened``: op sets, the
backends' coverage files, whatever else it read) and of each opcov module it loaded. A reader uses it
only where all of these are the same now (~0.1 s to hash the files), and the backends known to the
process (built-ins, records, installed plugins) are those it was made with, so an edited op set, coverage file
or judge is judged again, never answered from an old index, while another backend's new data leaves
it fresh; where it is stale, missing or unreadable the answer is judged as before. Source paths are
kept relative to the coverage folder and joined to the one read.
"""

from __future__ import annotations

import contextlib
import gzip
import hashlib
import json
import os

FOLDER = "answers"  # under the coverage folder
FORMAT = 1
PACKAGE = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))  # src/opcov (or the installed package)


def path_for(coverage_dir: str, question: str) -> str:
    return os.path.join(coverage_dir, FOLDER, f"{question}.json.gz")


# A run's working files, which git ignores and no reader opens: an interrupted probe's journal, a file being
# written. Listing them would make the committed answers stale in the folder of whoever ran a probe there.
WORKING = (".journal", ".journal.jsonl")


def working(name: str) -> bool:
    return name.endswith(WORKING) or ".tmp" in name


def listing(coverage_dir: str) -> list[str]:
    """Every file under the coverage folder but ``FOLDER`` and a run's working files, as paths from it, sorted."""
    out = []
    for root, dirs, files in os.walk(coverage_dir):
        if root == coverage_dir:
            dirs[:] = [d for d in dirs if d != FOLDER]
        out += [os.path.relpath(os.path.join(root, f), coverage_dir) for f in files if not working(f)]
    return sorted(out)


def _digest(top: str, rels: list[str]) -> str | None:
    """SHA-256 over each file ``rels`` under ``top``: its path and the SHA-256 of its bytes; None where one
    cannot be read."""
    h = hashlib.sha256()
    for rel in rels:
        if not isinstance(rel, str) or os.path.isabs(rel) or ".." in rel.replace("\\", "/").split("/"):
            return None  # never a file outside ``top``
        try:
            with open(os.path.join(top, rel), "rb") as fh:
                h.update(rel.encode() + b"\0" + hashlib.sha256(fh.read()).digest())
        except OSError:
            return None
    return h.hexdigest()


def data_digest(coverage_dir: str, read: list[str]) -> str | None:
    """SHA-256 over the coverage folder's file names and the bytes of the files ``read`` (paths from it)."""
    inner = _digest(coverage_dir, read)
    names = hashlib.sha256("\0".join(listing(coverage_dir)).encode()).hexdigest()
    return None if inner is None else hashlib.sha256(f"{names} {inner}".encode()).hexdigest()


@contextlib.contextmanager
def opened(coverage_dir: str):
    """Within: the set it yields gathers every file under ``coverage_dir`` this process opens (Python's
    audit events see every open, os.open included), as paths from it. An audit hook stays for the life
    of the process: a process that makes answers, not one that answers."""
    import sys

    root = os.path.realpath(coverage_dir) + os.sep
    seen: set[str] = set()
    state = {"on": True}

    def hook(event, args):
        if state["on"] and event == "open" and isinstance(args[0], (str, bytes, os.PathLike)):
            real = os.path.realpath(os.fsdecode(args[0]))
            if real.startswith(root) and os.path.isfile(real):
                seen.add(os.path.relpath(real, root))

    sys.addaudithook(hook)
    try:
        yield seen
    finally:
        state["on"] = False


def code_digest(modules: list[str]) -> str | None:
    """SHA-256 over opcov's module files ``modules`` (paths from the package folder); None where one is missing."""
    return _digest(PACKAGE, modules)


def loaded_modules() -> list[str]:
    """The files of opcov's modules loaded in this process, from the package folder, sorted: the code an
    answer made here may rest on."""
    import sys

    out = set()
    for module in list(sys.modules.values()):
        path = getattr(module, "__file__", None)
        if path and os.path.abspath(path).startswith(PACKAGE + os.sep):
            out.add(os.path.relpath(os.path.abspath(path), PACKAGE))
    return sorted(out)


def read(coverage_dir: str, question: str, backends: str) -> dict | None:
    """{op set path from the coverage folder: [mode, contribution]} of ``question``, where its index is
    there, readable and fresh (the same data and code bytes it was made from, and the same ``backends``:
    a digest of the backends known to this process); else None."""
    try:
        with gzip.open(path_for(coverage_dir, question), "rt", encoding="utf-8") as f:
            doc = json.load(f)
        if not isinstance(doc, dict) or doc.get("format") != FORMAT or doc.get("question") != question:
            return None
        if doc.get("backends") != backends:
            return None
        modules, opsets = doc["code"]["modules"], doc["opsets"]
        if not isinstance(opsets, dict) or code_digest(modules) != doc["code"]["sha256"]:
            return None
        if data_digest(coverage_dir, doc["data"]["read"]) != doc["data"]["sha256"]:
            return None
    except (OSError, EOFError, ValueError, KeyError, TypeError):
        return None
    return opsets


def fresh(coverage_dir: str, question: str, backends: str) -> bool:
    return read(coverage_dir, question, backends) is not None


def dumps(
    coverage_dir: str, question: str, opsets: dict, inputs: list[str], modules: list[str], backends: str
) -> bytes:
    """The index of ``question`` (``opsets`` as ``read`` gives them), resting on the coverage folder's file
    names and the files ``inputs`` (paths from it) as they are now, on ``modules`` and on ``backends``;
    deterministic (gzip without a time stamp)."""
    doc = {
        "format": FORMAT,
        "question": question,
        "backends": backends,
        "data": {"read": sorted(inputs), "sha256": data_digest(coverage_dir, sorted(inputs))},
        "code": {"modules": modules, "sha256": code_digest(modules)},
        "made_by": "python scripts/make_answers.py",
        "opsets": opsets,
    }
    text = json.dumps(doc, sort_keys=True, separators=(",", ":")).encode("utf-8")
    return gzip.compress(text, compresslevel=9, mtime=0)
