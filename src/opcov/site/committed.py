"""The site's documents and verdicts committed with the data (coverage/answers/site.json.gz), so that a first
``opcov site`` from a fresh clone parses and judges nothing.

Why: a build that reads and judges the bundled data spends ~25 s of CPU on it (~1,800 files parsed and
checked, ~10,000 verdicts), four fifths of the build; the user's cache folder (opcov.site.kept) helps only
a second build. ``scripts/make_answers.py`` makes this answer as it makes gaps' and compare's: each data
file's document as the pages read it (opcov.site.kept.as_shown) and every verdict the site shows
(opcov.site.judged), resting on the names and SHA-256 of every file under the coverage folder, of each
opcov module loaded to make them, and on the backends known (opcov.store.answers). A build uses it only
where all of these are the same now; where it is stale, missing or unreadable the site is read and judged
as before, so the pages are the same either way (a test renders both).
"""

from __future__ import annotations

import json
from typing import NamedTuple

from opcov.site import judged
from opcov.site.kept import as_shown
from opcov.store import answers

QUESTION = "site"
_TUPLE, _PAIRS = "(", "{"  # the verdicts' JSON marks a tuple, and a mapping with keys JSON cannot name


class Seed(NamedTuple):
    """What a fresh committed answer gives a build: ``docs`` (path from the coverage folder -> document as
    the pages read it) and ``verdicts`` (a judged.Judged). Handed to load_site as its ``kept``."""

    docs: dict
    verdicts: judged.Judged

    def doc(self, rel: str):
        return self.docs.get(rel)

    def keep_docs(self, docs: dict) -> None:
        """Nothing to keep: the next build reads the committed answer again."""


def read(coverage_dir: str) -> Seed | None:
    """The committed answer where it is there, readable and fresh for ``coverage_dir``; else None."""
    from opcov.verdict.kept import backends_key

    got = answers.read(coverage_dir, QUESTION, backends_key())
    if got is None:
        return None
    try:
        docs = json.loads(got["docs"])
        if not isinstance(docs, dict):
            return None
        return Seed(docs, judged.from_plain(json.loads(got["verdicts"], object_hook=_decoded)))
    except (KeyError, ValueError, TypeError):
        return None


class _Collect:
    """load_site's ``kept`` while making the answer: keeps each document as the pages read it, copied
    before judging touches anything."""

    def __init__(self):
        self.text = "{}"  # the documents, as JSON

    def doc(self, rel: str):
        return None

    def keep_docs(self, docs: dict) -> None:
        shown = {rel: as_shown(rel, doc) for rel, doc in docs.items()}
        self.text = json.dumps(shown, separators=(",", ":"))
        if not _same(json.loads(self.text), shown):  # a value JSON would change (a tuple, a number as a key)
            raise ValueError("a data file's document is not plain JSON")


def dumps(coverage_dir: str) -> bytes:
    """The committed answer for ``coverage_dir``: every data file read and every verdict judged in this
    process (never forked), resting on every file under the folder and the opcov modules loaded."""
    from opcov.site import model as sitemodel
    from opcov.verdict import judge
    from opcov.verdict.kept import backends_key

    collect = _Collect()
    with judge.bulk():
        site = sitemodel.load_site(coverage_dir, parallel=False, kept=collect)
        plain = judged.to_plain(judged.judge_site(site))
    text = json.dumps(_encoded(plain), separators=(",", ":"), allow_nan=False)
    if not _same(json.loads(text, object_hook=_decoded), plain):
        raise ValueError("the verdicts do not read back as they were made")
    # each part a JSON text of its own: the answers' file sorts its keys, and the pages read a file's
    # mappings in the file's order
    return answers.dumps(
        coverage_dir,
        QUESTION,
        {"docs": collect.text, "verdicts": text},
        answers.listing(coverage_dir),
        answers.loaded_modules(),
        backends_key(),
    )


def _encoded(x):
    """``x`` (str, int, float, bool, None, list, tuple, dict) as JSON that ``_decoded`` reads back exactly."""
    if x is None or type(x) in (str, int, float, bool):
        return x
    if type(x) is list:
        return [_encoded(v) for v in x]
    if type(x) is tuple:
        return {_TUPLE: [_encoded(v) for v in x]}
    if type(x) is dict:
        if all(type(k) is str for k in x) and _TUPLE not in x and _PAIRS not in x:
            return {k: _encoded(v) for k, v in x.items()}
        return {_PAIRS: [[_encoded(k), _encoded(v)] for k, v in x.items()]}
    raise TypeError(f"not plain data: {type(x).__name__}")


def _decoded(obj: dict):
    """json.loads' object_hook for ``_encoded``'s marks (inner values come decoded already)."""
    if len(obj) == 1:
        if _TUPLE in obj:
            return tuple(obj[_TUPLE])
        if _PAIRS in obj:
            return {k: v for k, v in obj[_PAIRS]}
    return obj


def _same(a, b) -> bool:
    """``a == b`` with the same types throughout (a list is no tuple, 1 is no 1.0 nor True) and the same order."""
    if type(a) is not type(b):
        return False
    if type(a) is dict:
        return list(a) == list(b) and all(_same(a[k], b[k]) for k in a)
    if type(a) in (list, tuple):
        return len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b))
    return a == b
