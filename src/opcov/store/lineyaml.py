"""A fast reader for the one-record-per-line YAML that ``opcov.store.data.dumps`` writes.

The site reads every coverage file in full, and PyYAML spends seconds per probed
file building nodes. Every reader reads every line and checks the whole file (``opcov check``
keeps only the hundred-odd ops it needs, ``names``, afterwards), so each gives lint's answer. Each op line is a small flow mapping of plain or
single-quoted scalars: an op set's lines have one layout, read by a pattern; a
coverage file's are rewritten as JSON and read in one go; anything else, a line
at a time by a tokenizer, several times faster than PyYAML. Scalars are
typed with PyYAML's own implicit resolvers, so values come out as PyYAML would give
them; on anything outside that layout (anchors, tags, odd escapes, a hand-edited
file) the whole file is read by ``opcov.store.data.load`` instead, errors and all.
The text comes from ``data.read_text`` (size, encoding); the tokenizer takes no anchor or
alias, so a line that might hold one is tokenized even when its op is not asked for. The whole
text is hashed against its integrity line (``data.stamp_of``, ~1 ms per MB) and the op lines are
counted and their keys checked for duplicates: a file cut short, edited or without the line goes to
``data.load``, which checks it all and refuses what is wrong.
"""

from __future__ import annotations

import collections
import json
import marshal
import os
import re

from opcov.store import data, parsed

# A plain scalar in flow context (it ends at an indicator or at ': '), and the lookahead that ends it.
_PLAIN = (
    r"""[^\s,\[\]{}'"&*!|>%@`#?:-](?:[^,\[\]{}:]|:(?![\s,\[\]{}]|$))*?"""
    r"""|-(?:[^,\[\]{}:]|:(?![\s,\[\]{}]|$))+?"""
)
_PLAIN_END = r"(?=\s*(?:[,\[\]{}]|:(?:[\s,\[\]{}]|$)|$))"
_SQ = r"'((?:[^'\n]|'')*)'"
_DQ = r'"((?:[^"\\\n]|\\.)*)"'
# One token: a flow indicator, a ':' separator, a quoted scalar, or a plain scalar.
_TOKEN = re.compile(
    r"\s*(?:(?P<ind>[{}\[\],])|(?P<colon>:)(?=[\s,\[\]{}]|$)|"
    + _SQ.replace("(", "(?P<sq>", 1)
    + "|"
    + _DQ.replace("(", "(?P<dq>", 1)
    + "|(?P<plain>"
    + _PLAIN
    + ")"
    + _PLAIN_END
    + ")"
)
# A scalar alone (quoted, or plain), for _as_json.
_SCALAR = re.compile(_SQ + "|" + _DQ + "|(" + _PLAIN + ")" + _PLAIN_END)


# YAML double-quoted escapes (the emitter writes \xHH, \uHHHH, \UHHHHHHHH and the one-letter ones).
_DQ_ESCAPE = re.compile(r"\\(x[0-9A-Fa-f]{2}|u[0-9A-Fa-f]{4}|U[0-9A-Fa-f]{8}|.)")
_DQ_LETTERS = {
    "0": "\0",
    "a": "\a",
    "b": "\b",
    "t": "\t",
    "\t": "\t",
    "n": "\n",
    "v": "\v",
    "f": "\f",
    "r": "\r",
    "e": "\x1b",
    " ": " ",
    '"': '"',
    "/": "/",
    "\\": "\\",
    "N": "\x85",
    "_": "\xa0",
    "L": "\u2028",
    "P": "\u2029",
}


def _unescape(m) -> str:
    code = m.group(1)
    if len(code) > 1:
        return chr(int(code[1:], 16))
    if code not in _DQ_LETTERS:
        raise _Unusual("\\" + code)
    return _DQ_LETTERS[code]


class _Unusual(Exception):
    """The text is outside the simple layout: read the file with PyYAML instead."""


def _resolvers():
    import yaml

    loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
    return loader.yaml_implicit_resolvers


_FLOAT = re.compile(r"^[-+]?[0-9]+\.[0-9]*(?:[eE][-+][0-9]+)?$")
_INT = re.compile(r"^[-+]?(?:0|[1-9][0-9]*)$")
_WORDS: dict[str, dict] = {
    "tag:yaml.org,2002:null": {"~": None, "null": None, "Null": None, "NULL": None},
    "tag:yaml.org,2002:bool": {w: True for w in ("yes", "Yes", "YES", "true", "True", "TRUE", "on", "On", "ON")}
    | {w: False for w in ("no", "No", "NO", "false", "False", "FALSE", "off", "Off", "OFF")},
}


def _plain(text: str, resolvers):
    """A plain scalar typed as PyYAML types it (only the forms opcov writes; others are _Unusual)."""
    for tag, rx in resolvers.get(text[0], ()):  # noqa: B007 - tag is read after the loop
        if rx.match(text):
            break
    else:
        return text
    if tag in _WORDS and text in _WORDS[tag]:
        return _WORDS[tag][text]
    if tag == "tag:yaml.org,2002:int" and _INT.match(text):
        return int(text)
    if tag == "tag:yaml.org,2002:float" and _FLOAT.match(text):
        return float(text)
    raise _Unusual(text)


def _tokens(text: str, resolvers, memo: dict) -> list:
    """(kind, value) pairs: kind is an indicator ('{', '}', '[', ']', ',', ':') or 's' for a scalar."""
    pos, end, out, match = 0, len(text), [], _TOKEN.match
    while pos < end:
        m = match(text, pos)
        if m is None:
            if text[pos:].strip():
                raise _Unusual(text[pos : pos + 20])
            break
        pos = m.end()
        kind = m.lastgroup
        if kind == "ind":
            out.append((m.group(kind), None))
        elif kind == "colon":
            out.append((":", None))
        else:
            out.append(("s", _scalar(kind, m.group(kind), resolvers, memo)))  # type: ignore[arg-type]  # a named group matched
    return out


def parse_flow(text: str, resolvers=None, memo=None):
    """One flow value (mapping, sequence or scalar) as Python objects."""
    resolvers = resolvers if resolvers is not None else _resolvers()
    toks = _tokens(text, resolvers, {} if memo is None else memo)
    value, i = _value(toks, 0)
    if i != len(toks):
        raise _Unusual(text)
    return value


def _scalar(kind: str, text: str, resolvers, memo: dict):
    if kind == "sq":
        return text.replace("''", "'")
    if kind == "dq":
        return _DQ_ESCAPE.sub(_unescape, text)
    try:
        return memo[text]
    except KeyError:
        pass
    plain = text.rstrip()
    if " #" in plain or "\t#" in plain:  # a comment in YAML; opcov's writer never emits one
        raise _Unusual(plain)
    memo[text] = value = _plain(plain, resolvers)
    return value


def _value(toks, i):
    kind, value = toks[i]
    if kind == "s":
        return value, i + 1
    if kind == "{":
        out: dict = {}
        i += 1
        while True:
            if toks[i][0] == "}":
                return out, i + 1
            key, colon = toks[i], toks[i + 1]
            if key[0] != "s" or colon[0] != ":" or key[1] in out:  # a key twice: data.load names it
                raise _Unusual("mapping key")
            out[key[1]], i = _value(toks, i + 2)
            sep = toks[i][0]
            if sep == ",":
                i += 1
            elif sep != "}":
                raise _Unusual("mapping")
    if kind == "[":
        items: list = []
        i += 1
        while True:
            if toks[i][0] == "]":
                return items, i + 1
            item, i = _value(toks, i)
            items.append(item)
            sep = toks[i][0]
            if sep == ",":
                i += 1
            elif sep != "]":
                raise _Unusual("sequence")
    raise _Unusual(f"unexpected {kind!r}")


_LINES: dict = {}  # an op line's text -> its value, marshalled (see _op_line)
_LINES_KEPT = 100_000  # texts kept before the memo starts anew (~10 MB)
_LINE_CHARS = 300  # longer lines (a probed op's dozen dtypes) seldom repeat: not kept


# An op set's op line as ``opset.dumps`` writes it: phase to dtype to {calls[, grad][, seen][, shape]},
# keys sorted. One regex checks the whole line and another reads its cells, several times faster than
# the tokenizer; a dtype YAML would type (true, null, ...) or anything else takes the tokenizer.
_KEY = r"(?!(?:yes|no|on|off|true|false|null):)[a-z][a-z0-9_]*"
_PHASES = r"forward|backward|optimizer|prefill|decode"
_CELL = _KEY + r": \{calls: [1-9][0-9]*(?:, grad: true)?(?:, seen: (?:real|both))?(?:, shape: '(?:[^'\n]|'')*')?\}"
_BLOCK = r"(?:" + _PHASES + r"): \{" + _CELL + r"(?:, " + _CELL + r")*\}"
_OP_LINE = re.compile(r"\{" + _BLOCK + r"(?:, " + _BLOCK + r")*\}")
_OP_CELL = re.compile(
    r"(?:(" + _PHASES + r"): \{)?(" + _KEY + r"): \{calls: ([1-9][0-9]*)(, grad: true)?"
    r"(?:, seen: (real|both))?(, shape: '((?:[^'\n]|'')*)')?\}"
)


def _opset_line(text: str):
    """The value of an op line in the layout above (as PyYAML gives it), or None."""
    if _OP_LINE.fullmatch(text) is None:
        return None
    out: dict = {}
    cells: dict = {}
    for phase, dtype, calls, grad, seen, has_shape, shape in _OP_CELL.findall(text):
        if phase:
            if phase in out:
                return None  # a phase twice: the tokenizer refuses it
            cells = out[phase] = {}
        if dtype in cells:
            return None
        cell = cells[dtype] = {"calls": int(calls)}
        if grad:
            cell["grad"] = True
        if seen:
            cell["seen"] = seen
        if has_shape:
            cell["shape"] = shape.replace("''", "'") if "''" in shape else shape
    return out


def _op_line(text: str, resolvers, memo):
    """parse_flow of one op line. Over the zoo most lines are the same text in several files (56% of
    the op sets' lines, half the coverage files'): the value of a text seen before is unmarshalled
    from the bytes kept then, a fresh object (nothing handed out is shared, as a parse gives) made in
    C, several times faster than tokenizing the line again."""
    kept = _LINES.get(text)
    if kept is not None:
        return marshal.loads(kept)
    value = _opset_line(text)
    if value is None:
        value = parse_flow(text, resolvers, memo)
    if len(text) <= _LINE_CHARS:
        if len(_LINES) >= _LINES_KEPT:
            _LINES.clear()
        _LINES[text] = marshal.dumps(value)
    return value


def _as_json(values: list, resolvers, memo: dict) -> list | None:
    """The flow values ``values`` (texts, one per line) parsed in one go: every scalar rewritten as
    JSON, the rest left as it is, and the whole read by json.loads (C), ~2x faster than the tokenizer
    on the probed and registered files. None where the result could differ from the tokenizer's: JSON
    rejects whatever is not a flow value of scalars, mappings with string keys and sequences (a key
    YAML types, an anchor, a comment, a trailing comma), and each line must give exactly one value
    (quotes cannot span a line, plain scalars end at a comma)."""

    def scalar(m):
        sq, dq, plain = m.groups()
        if plain is not None:
            text = memo.get(plain)
            if text is None:
                text = memo[plain] = json.dumps(_scalar("plain", plain, resolvers, {}))
            return text
        return json.dumps(_scalar("sq", sq, resolvers, {}) if sq is not None else _scalar("dq", dq, resolvers, {}))

    def unique(pairs):
        out = dict(pairs)
        if len(out) != len(pairs):
            raise ValueError("a key twice")  # the tokenizer refuses it, and data.load names its line
        return out

    try:
        out = json.loads(_SCALAR.sub(scalar, "[" + ",\n".join(values) + "]"), object_pairs_hook=unique)
    except (ValueError, _Unusual, RecursionError):
        return None
    return out if len(out) == len(values) else None


_TREE_NODES = re.compile(r"^- '([^'\n]*(?:''[^'\n]*)*)'$", re.M)  # a line of one single-quoted scalar
_NOT_PRINTABLE = re.compile(r"[^\n -~]")  # node texts are printable ASCII, one per line


def _cut_tree(head: str) -> tuple[str, list | None]:
    """(the header less its ``calltree`` block, the block's node texts) where the block ends the
    header a node per line as opcov.store.opset.dumps writes it; else (``head``, None). PyYAML's
    constructor spent as long on a tree's ~100 quoted scalars as on the rest of the file. One scan
    of the block finds every node (a regex per line took three times as long over the zoo)."""
    at = head.find("\ncalltree:\n")
    if at < 0:
        return head, None
    block = head[at + len("\ncalltree:\n") :]
    if _NOT_PRINTABLE.search(block):
        return head, None
    tree = _TREE_NODES.findall(block)
    if len(tree) != block.count("\n"):  # a line that is not a node, or a block not ending in a newline
        return head, None
    return head[: at + 1], [t.replace("''", "'") if "''" in t else t for t in tree]


def parse(path: str):
    """The whole document, or None when the file is not in the one-op-per-line layout opcov writes,
    has no intact integrity line, or is not readable: ``data.load`` then reads it, and names any
    problem with its line. Every op line is read and every key counted, even where the caller wants
    a few ops: a fast path skips work, never a check (a file cut short, a key given twice)."""
    import yaml

    text, problem = data.read_text(path)  # size, UTF-8 and YAML's characters checked
    if problem:
        return None
    stamp = data.stamp_of(text)
    if stamp is None or not stamp.intact:  # unstamped, cut short or edited: data.load checks it all
        return None
    cut = text.find("\nops:\n")
    if cut < 0:
        return None
    if data.anchor_line(text[: cut + 1]):  # opcov writes no anchors or aliases: data.load names the line
        return None
    resolvers, memo = _resolvers(), dict[str, object]()
    head, tree = _cut_tree(text[: cut + 1])
    try:
        doc = yaml.load(head, Loader=data._loader())  # a key twice in the header is refused there
        if not isinstance(doc, dict) or "ops" in doc:
            return None
        if tree is not None:
            if "calltree" in doc:
                return None
            doc["calltree"] = tree  # the head's last key, where the file has it
        keys, rests = [], []
        for line in text[cut + 6 :].splitlines():
            if not line.startswith("  ") or line.startswith("   "):
                return None
            key, sep, rest = line[2:].partition(": ")
            if not sep or not key or key[0] in "'\"?&*!":
                return None
            keys.append(_plain(key, resolvers))
            rests.append(rest)
        if len(set(keys)) != len(keys) or stamp.ops != len(keys):  # an op twice, or not the ops written
            return None
        # An op set's lines take the op-line pattern (and the memo of lines seen); a coverage file's
        # lines are read in one go as JSON, or else by the tokenizer, a line at a time.
        values = None if not rests or _opset_line(rests[0]) is not None else _as_json(rests, resolvers, {})
        if values is None:
            values = [_op_line(rest, resolvers, memo) for rest in rests]
        doc["ops"] = dict(zip(keys, values))
    except (_Unusual, IndexError, ValueError, TypeError, RecursionError, yaml.YAMLError):
        return None
    return doc


_MEMO: collections.OrderedDict = collections.OrderedDict()
_MEMO_FILES = 8  # a command reads a handful of coverage files, each once per op set it judges


def _checked(path: str) -> dict:
    """The whole document of ``path``, read and checked once per process while the file is unchanged
    (same inode, size and modification time): ``check`` judges several op sets against one coverage
    file, and each would parse and validate it again. The few most recent files are kept."""
    try:
        st = os.stat(path)
        key = (os.path.realpath(path), st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns)
    except OSError:
        key = None
    if key is not None and key in _MEMO:
        _MEMO.move_to_end(key)
        return _MEMO[key]
    doc = parsed.read(path, "coverage", _parse_checked)
    if key is not None:
        _MEMO[key] = doc
        while len(_MEMO) > _MEMO_FILES:
            _MEMO.popitem(last=False)
    return doc


def _parse_checked(path: str) -> dict:
    doc = parse(path)
    if doc is None or data.validate(doc, path):
        doc = data.load(path)  # the full parse reports any problem with its line
    return doc


def load(path: str, names=None, summary: bool = True) -> dict:
    """As ``opcov.store.data.load`` (validated, integrity verified, DataError with file:line), read faster
    when the layout allows. The whole file is read and checked whatever is asked; then, with
    ``names``, only those ops are kept (ops the file lacks are simply absent), and without
    ``summary`` the summary is dropped."""
    doc = dict(_checked(path))  # a copy of the top level: what follows drops keys
    if names is not None:
        wanted = set(names)
        doc["ops"] = {k: v for k, v in doc["ops"].items() if k in wanted}
    if not summary:
        doc.pop("summary", None)
    doc.pop(data.INTEGRITY, None)
    return doc
