"""Zoo-wide answers committed with the data, so that a first ``opcov gaps``/``compare`` judges nothing.

``gaps`` and ``compare`` judge every op set under coverage/models/ (~1,500 files, ~10 s of CPU here); the
user's cache folder (opcov.verdict.kept) makes a second run fast, not a first. So what each op set
contributes to each question ('gaps-tpu', 'compare-cuda-tpu') is made once from the bundled data by
``scripts/make_answers.py`` and kept in ``coverage/answers/<question>.json.gz``, with what it rests on:
the SHA-256 of every file under the coverage folder (but this folder) and of every opcov module
that was loaded while it was judged. A reader uses it only where all of these are the same bytes now
(~0.15 s to hash the bundled data), so an edited op set, coverage file or judge is judged again, never
answered from an old index; where it is stale, missing or unreadable the answer is judged as before.
Source paths are kept relative to the coverage folder and joined to the one read.
"""

from __future__ import annotations

import gzip
import hashlib
import json
import os

FOLDER = "answers"  # under the coverage folder
FORMAT = 1
PACKAGE = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))  # src/opcov (or the installed package)


def path_for(coverage_dir: str, question: str) -> str:
    return os.path.join(coverage_dir, FOLDER, f"{question}.json.gz")


def data_digest(coverage_dir: str) -> str:
    """SHA-256 over every file under the coverage folder but ``FOLDER``: each one's path from the folder
    and the SHA-256 of its bytes."""
    h = hashlib.sha256()
    for root, dirs, files in os.walk(coverage_dir):
        dirs.sort()
        if root == coverage_dir:
            dirs[:] = [d for d in dirs if d != FOLDER]
        for f in sorted(files):
            path = os.path.join(root, f)
            with open(path, "rb") as fh:
                h.update(os.path.relpath(path, coverage_dir).encode() + b"\0" + hashlib.sha256(fh.read()).digest())
    return h.hexdigest()


def code_digest(modules: list[str]) -> str | None:
    """SHA-256 over opcov's module files ``modules`` (paths from the package folder); None where one is missing."""
    h = hashlib.sha256()
    for rel in modules:
        try:
            with open(os.path.join(PACKAGE, rel), "rb") as fh:
                h.update(rel.encode() + b"\0" + hashlib.sha256(fh.read()).digest())
        except OSError:
            return None
    return h.hexdigest()


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


def read(coverage_dir: str, question: str) -> dict | None:
    """{op set path from the coverage folder: [mode, contribution]} of ``question``, where its index is
    there, readable and fresh (the same data and code bytes it was made from); else None."""
    try:
        with gzip.open(path_for(coverage_dir, question), "rt", encoding="utf-8") as f:
            doc = json.load(f)
        if not isinstance(doc, dict) or doc.get("format") != FORMAT or doc.get("question") != question:
            return None
        modules, opsets = doc["code"]["modules"], doc["opsets"]
        if not isinstance(opsets, dict) or code_digest(modules) != doc["code"]["sha256"]:
            return None
        if data_digest(coverage_dir) != doc["data"]:
            return None
    except (OSError, EOFError, ValueError, KeyError, TypeError):
        return None
    return opsets


def fresh(coverage_dir: str, question: str) -> bool:
    return read(coverage_dir, question) is not None


def dumps(coverage_dir: str, question: str, opsets: dict, modules: list[str]) -> bytes:
    """The index of ``question`` (``opsets`` as ``read`` gives them), resting on the coverage folder's
    files as they are now and on ``modules``; deterministic (gzip without a time stamp)."""
    doc = {
        "format": FORMAT,
        "question": question,
        "data": data_digest(coverage_dir),
        "code": {"modules": modules, "sha256": code_digest(modules)},
        "made_by": "python scripts/make_answers.py",
        "opsets": opsets,
    }
    text = json.dumps(doc, sort_keys=True, separators=(",", ":")).encode("utf-8")
    return gzip.compress(text, compresslevel=9, mtime=0)
