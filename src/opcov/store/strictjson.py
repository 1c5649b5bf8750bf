"""JSON from outside (a contributed bundle, an observed run, a times file), read strictly and within bounds.

``json.loads`` lets the last of two equal keys win, reads NaN and Infinity, recurses once per nesting
level (200,000 nested arrays end in a RecursionError) and builds whatever the text holds (a 30 MB
array of empty arrays is ten million lists). ``loads`` refuses each of these in one DataError line
naming the file: a key given twice (named), a NaN or infinite number, more than ``MAX_CONTAINERS``
arrays and objects (counted on the raw text before parsing, so memory stays bounded), and nesting
deeper than ``MAX_DEPTH`` levels. Torch-free.
"""

from __future__ import annotations

import json

from opcov.errors import DataError

MAX_DEPTH = 100  # levels of arrays and objects (the call-tree limit of the YAML data files)
MAX_CONTAINERS = 1_000_000  # '[' and '{' in the text, strings included: an upper bound on what it builds


class _Duplicate(Exception):
    def __init__(self, key: str) -> None:
        super().__init__(key)
        self.key = key


def _pairs(pairs: list) -> dict:
    out: dict = {}
    for key, value in pairs:
        if key in out:
            raise _Duplicate(key)
        out[key] = value
    return out


def _constant(word: str):
    raise ValueError(f"{word} is not a number JSON allows")


def depth(doc) -> int:
    """The nesting depth of arrays and objects in ``doc`` (a scalar is 0), walked without recursion."""
    deepest = 0
    stack = [(doc, 1)]
    while stack:
        node, level = stack.pop()
        if isinstance(node, dict):
            children = node.values()
        elif isinstance(node, list):
            children = node  # type: ignore[assignment]
        else:
            continue
        deepest = max(deepest, level)
        if level > MAX_DEPTH:
            break
        stack.extend((c, level + 1) for c in children if isinstance(c, (dict, list)))
    return deepest


def loads(blob, where: str):
    """The JSON value of ``blob`` (str or bytes), strictly; a one-line DataError starting with ``where``."""
    opens = blob.count(b"[") + blob.count(b"{") if isinstance(blob, bytes) else blob.count("[") + blob.count("{")
    if opens > MAX_CONTAINERS:
        raise DataError(f"{where}: over {MAX_CONTAINERS:,} JSON arrays and objects; opcov writes far fewer")
    try:
        text = blob.decode("utf-8") if isinstance(blob, bytes) else blob
        doc = json.loads(text, object_pairs_hook=_pairs, parse_constant=_constant)
    except _Duplicate as exc:
        raise DataError(f"{where}: key {exc.key[:80]!r} given twice in one JSON object (which one holds?)") from None
    except RecursionError:
        raise DataError(f"{where}: JSON nested deeper than {MAX_DEPTH} levels") from None
    except UnicodeDecodeError as exc:
        raise DataError(f"{where}: not UTF-8 text (byte {exc.start})") from None
    except ValueError as exc:
        raise DataError(f"{where}: not valid JSON ({str(exc).splitlines()[0][:200]})") from None
    if depth(doc) > MAX_DEPTH:
        raise DataError(f"{where}: JSON nested deeper than {MAX_DEPTH} levels")
    return doc


def dumps(doc) -> str:
    """JSON text as opcov writes its JSON files: keys sorted, one item a line (indent 1), a final newline."""
    return json.dumps(doc, indent=1, sort_keys=True) + "\n"


def load(path: str, *, limit: int, what: str):
    """``loads`` of the file at ``path``, refused before it is read when it is over ``limit`` bytes;
    ``what`` names the file's kind in the messages ('observed run')."""
    try:
        with open(path, "rb") as f:
            size = f.seek(0, 2)
            if size > limit:
                raise DataError(f"{path}: {size:,} bytes, over the {limit:,} opcov reads in one {what} file")
            f.seek(0)
            blob = f.read(limit + 1)
    except OSError as exc:
        raise DataError(f"{path}: cannot read the {what} ({exc.strerror or exc})") from None
    if len(blob) > limit:
        raise DataError(f"{path}: over the {limit:,} bytes opcov reads in one {what} file")
    return loads(blob, path)
