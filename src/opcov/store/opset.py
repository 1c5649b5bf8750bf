"""Model op sets: which ops (per phase and dtype key) a model dispatches; the file format and its reader.

Written by ``opcov trace`` / ``opcov zoo trace``, read by ``opcov check``, ``gaps`` and the site.
Torch-free on purpose: ``opcov check`` on a saved op set must not import torch.
One file holds one model in one mode (see docs/DATA.md):

    schema_version: 2
    kind: opset
    model: {name: llama, source: 'hf:llama', ...}
    mode: training            # or inference
    dtype: bfloat16           # the model's parameter dtype
    autocast: null            # or the autocast dtype
    optimizer: adamw          # or sgd / none (training only)
    provenance: {torch: ..., opcov: ..., created: ..., command: ..., host: ..., tracing: fake, target_device: ...,
                 traced_on: ..., notes: [...]}
    summary: {distinct_ops: 61, calls: {forward: 266, backward: 345, optimizer: 50}}
    calltree:                 # one node per line, a parent before its children
    - '1 forward composite aten::linear bfloat16 x15 grad | shape=[2, 16, 64], [64, 64]'
    - '2 forward kernel aten::mm bfloat16 x15 parent=1 grad | shape=[32, 64], [64, 64]'
    - '9 backward kernel aten::mm bfloat16 x30 issued_by=2 | shape=[32, 64], [64, 64]'
    ops:
      aten::mm: {backward: {bfloat16: {calls: 30}}, forward: {bfloat16: {calls: 15, grad: true, shape: '...'}}}

``ops`` is what a backend's kernels receive on the stand-in device the model was traced on (the
calltree's ``kernel`` nodes, summed per op, phase and dtype key). ``calltree`` says where each
call came from: a ``composite`` node is an op the stand-in ran as its decomposition
(CompositeImplicitAutograd), its children the calls it made; a ``call`` node is a Python-level
call (the optimizer step); a backward root's ``issued_by`` is the forward kernel node whose
autograd node made the call. Calls with the same ancestors, op, phase, kind and dtype key are
one node with their count. The verdict resolves the tree per backend (``opcov.verdict.resolve``).

A node is one quoted string (``node_text`` / ``parse_node``): ``ID PHASE KIND OP DTYPE xCALLS``, then
any of ``parent=ID``, ``issued_by=ID``, ``grad``, ``seen=WHERE``, ``variant=NAMES``, ``reads=OUTPUTS``,
``returns=OUTPUTS``, then
``| args=TEXT``, ``| shape=TEXT`` and ``| sig=CLASSES``.
A string, not a mapping, because YAML builds a mapping's dozen scalars ~25x slower than one quoted
scalar, and ``opcov check`` reads the whole tree of a saved op set on every run.

``seen`` (on nodes and on ``ops`` cells) says what a real-valued run saw (``tracing.realtrace``):
``real`` only it, ``both`` it and the fake trace; absent, the fake trace alone.

``variant`` (a sorted comma list of ``opcov.vocab.INPUT_VARIANTS``) says which inputs made the node's
calls: ``given`` (the inputs as the factory or the zoo gives them) and each variant opcov adds
(``padded_mask``). ``opcov check`` judges the given inputs' nodes and each other variant apart. Absent
on every node: not recorded (op sets traced before it was), and the tree is judged as one set.

``reads`` (a sorted comma list of output indices, or ``none``) says which of the node's outputs something
later read: another op (a backward op reading what autograd saved included), the model's return value,
the loss, or the state the step leaves (parameters, their gradients, buffers, the optimizer's state). An
index counts the op's returned values in order, a list's items one by one, as the probe numbers
"output N". A probe value mismatch only on outputs no call of the model reads is a note, not a value
note (``opcov.verdict.signature``). Absent: not recorded (op sets traced before it was): every output
counts as read.

``returns`` (a sorted comma list of output indices) says which of the node's outputs the model's return
value holds (its storage: through views and in-place ops too): what the model's caller receives. An output
whose dtype alone differs from CPU's on a backend (values equal) is a note where only the model's own ops
consume it, a value note where the caller receives it. Recorded where ``provenance.returns`` says
``recorded``; a node without the word returns none of its outputs there.

``sig`` (space-separated signature classes, opcov.sigclass; ``...`` last where more were left out) says
which paths the node's calls take: tensor dtypes, ranks, layouts, emptiness, contiguity, which require
grad, and every argument that selects behaviour (alpha/beta, kernel, stride, padding, dilation,
ceil_mode, reduction, modes, uneven adaptive bins, fractional scale factors). A probe finding counts
against the node only when its case's class takes the same path. Absent: not recorded (then the
``shape`` stands in, and a finding's scalars are taken as matching).

A compiled op set (``opcov trace --path compile``, opcov.tracing.compiled) has the same layout plus
``path: compile``, ``compile: {backend, recipe, graphs, outcome, ...}`` and ``graph_breaks`` (each
``{reason, where, construct}``); its calltree has one ``call`` node per Dynamo graph over the ops of its
AOT forward and backward graphs. An op set without ``path`` is eager.

Schema 1 files have no calltree; they may have ``parents`` (device-dependent parent calls with
what they were ``traced_as``) and are still read.
"""

from __future__ import annotations

import functools
import itertools
import re
from dataclasses import dataclass
from typing import Any, NamedTuple

from opcov import vocab
from opcov.store import data, lineyaml, output, parallel, parsed
from opcov.store.data import Problem

KIND = "opset"
SCHEMA_VERSION = 2  # 2: calltree; 1: flat ops (and parents), still read
READS = (1, SCHEMA_VERSION)
MODES = ("inference", "training", "serve")
# A step's phases; a serve op set (transformers' generate with a KV cache, opcov.tracing.serve) records its
# calls in the two serving phases instead of forward: ``prefill`` (up to and including the first new
# token) and ``decode`` (every later token's step), each judged as a forward.
SERVE_PHASES = ("prefill", "decode")
PHASES = ("forward", "backward", "optimizer", *SERVE_PHASES)
TOP_KEYS = {
    "schema_version",
    "kind",
    "model",
    "mode",
    "dtype",
    "autocast",
    "optimizer",
    "provenance",
    "parents",
    "summary",
    "calltree",
    "ops",
    "path",
    "compile",
    "graph_breaks",
    "serve",
    "parallel",
    "device_module",
    data.INTEGRITY,
}
# Each lookup of the device's own module (torch.<device>) the run made through a torch API, such as gradient
# checkpointing: [{via: API module, at: the model's file:line, calls: N}] (opcov.tracing.devicemodule).
DEVICE_MODULE = "device_module"
DEVICE_MODULE_KEYS = {"via": str, "at": str, "calls": int}
# Which path an op set records (``path``; absent: eager): what eager dispatches, or what torch.compile hands
# a backend's compiler (opcov.tracing.compiled: ``compile`` says which backend's recipe, ``graph_breaks``
# where Dynamo broke the graph).
EAGER = "eager"
COMPILE = "compile"
PATHS = (EAGER, COMPILE)
BREAK_KEYS = ("reason", "where", "construct")  # each graph break's (and an optional "code")
COMPILE_OUTCOMES = ("compiled", "aot_failed", "failed")
CALL_KEYS: dict[str, Any] = {"calls": int, "shape": str, "grad": bool, "seen": str}
# Call-tree node kinds: what the stand-in device did with the call.
KERNEL = "kernel"  # a backend kernel received it (it is in ops)
COMPOSITE = "composite"  # the stand-in ran the op's decomposition (CompositeImplicitAutograd): its children
CALL = "call"  # a Python-level call, not an op (torch.optim.AdamW.step)
NODE_KINDS = (KERNEL, COMPOSITE, CALL)
NODE_FIELDS = ("id", "phase", "kind", "op", "dtype", "calls")  # a node's leading words, in order
NODE_IDS = ("parent", "issued_by")  # optional word=ID
NODE_TEXTS = ("args", "shape", "sig")  # optional trailing "| word=text"
SEEN = ("real", "both")  # a node or call seen by a real-valued run only, or by it and the fake trace
# A node's variant= word, as node_text writes it: a sorted, non-empty set of vocab.INPUT_VARIANTS; () unrecorded.
_KNOWN_VARIANTS = frozenset(
    {()}
    | {
        tuple(sorted(names))
        for n in range(1, len(vocab.INPUT_VARIANTS) + 1)
        for names in itertools.combinations(vocab.INPUT_VARIANTS, n)
    }
)
PARENT_KEYS: dict[str, Any] = {"calls": int, "shape": str, "args": str, "traced_as": list}
# Limits a real op set is far within (the zoo's deepest tree has 5 levels, its largest count 5 digits):
# a deeper tree or a longer count is refused with its line, never walked into a RecursionError or
# turned into a float that overflows.
MAX_DEPTH = 100
MAX_CALLS = 10**15
# What header values must be (data.type_problem's kinds); other provenance and model keys: plain data.
RETURNS_RECORDED = "recorded"  # provenance.returns: the nodes say which outputs the model returns (returns=)
PROVENANCE_TYPES = {
    **data.HEADER_TYPES,
    "returns": str,
    "tracing": str,
    "target_device": str,
    "traced_on": str,
    "notes": "strings",
}


@dataclass(frozen=True)
class Call:
    """All calls of one op in one phase with one dtype key."""

    op: str
    phase: str
    dtype: str
    calls: int
    grad: bool = False  # some input required grad: training also needs this op's backward
    shape: str = ""


def calls(doc: dict) -> list[Call]:
    """The op set's calls, flattened, in file order (op, then phase, then dtype)."""
    out = []
    for op, rec in sorted(doc.get("ops", {}).items()):
        for phase in PHASES:
            for dtype, cell in sorted((rec.get(phase) or {}).items()):
                out.append(
                    Call(
                        op,
                        phase,
                        dtype,
                        int(cell.get("calls", 1)),
                        bool(cell.get("grad", False)),
                        str(cell.get("shape", "")),
                    )
                )
    return out


class Node(NamedTuple):
    """One call-tree node: the calls of one op (or Python-level call) with the same ancestors. A named
    tuple, not a frozen dataclass: a zoo's trees hold ~170k nodes, made three times faster so."""

    id: int
    op: str
    phase: str
    kind: str  # kernel | composite | call
    dtype: str
    calls: int
    parent: int | None = None
    issued_by: int | None = None  # backward roots: the forward kernel node whose autograd node made the call
    grad: bool = False
    shape: str = ""
    args: str = ""
    seen: str = ""
    variants: tuple[str, ...] = ()  # input variants that made it (vocab.INPUT_VARIANTS); () = not recorded
    reads: tuple[int, ...] | None = None  # indices of its outputs something later read; None = not recorded
    sig: str = ""  # its calls' distinct signature classes (opcov.sigclass), space-separated; "" = not recorded
    returns: tuple[
        int, ...
    ] = ()  # indices of its outputs the model's return value holds (provenance.returns)  # its calls' distinct signature classes (opcov.sigclass), space-separated; "" = not recorded


def node_text(row: dict) -> str:
    """One node as the file holds it (see the module docstring), from a mapping of Node's fields."""
    words = [str(row["id"]), row["phase"], row["kind"], row["op"], row["dtype"], f"x{row['calls']}"]
    words += [f"{k}={row[k]}" for k in NODE_IDS if row.get(k) is not None]
    if row.get("grad"):
        words.append("grad")
    if row.get("seen"):
        words.append(f"seen={row['seen']}")
    if row.get("variants"):
        words.append(f"variant={','.join(sorted(set(row['variants'])))}")
    if row.get("reads") is not None:
        words.append(f"reads={reads_text(row['reads'])}")
    if row.get("returns"):
        words.append(f"returns={reads_text(row['returns'])}")
    return " | ".join([" ".join(words)] + [f"{k}={row[k]}" for k in NODE_TEXTS if row.get(k)])


def reads_text(reads) -> str:
    """A node's ``reads=`` value: '0,2', or 'none' where no output was read."""
    return ",".join(str(i) for i in sorted(set(reads))) or "none"


@functools.lru_cache(maxsize=1024)
def parse_reads(word: str) -> tuple[int, ...]:
    """``reads_text`` back to sorted output indices; ValueError says what is wrong."""
    if word == "none":
        return ()
    parts = word.split(",")
    if not all(p.isdigit() for p in parts) or [int(p) for p in parts] != sorted({int(p) for p in parts}):
        raise ValueError(f"reads={word} must be 'none' or a sorted comma list of output indices such as 0,2")
    return tuple(int(p) for p in parts)


def parse_node(text) -> Node:
    """A node's text back to a Node; ValueError says what is wrong with it."""
    if not isinstance(text, str):
        raise ValueError("must be a string such as '3 forward kernel aten::mm float32 x2 parent=1'")
    return _parse_node(text)


# A node's head as node_text writes it (its optional words in that order); other spellings take the
# general reader below, which says what is wrong.
_HEAD = re.compile(
    r"([1-9][0-9]*) (\S+) (\S+) (\S+) (\S+) x([1-9][0-9]*)(?: parent=([1-9][0-9]*))?"
    r"(?: issued_by=([1-9][0-9]*))?( grad)?(?: seen=(\S+))?(?: variant=(\S+))?"
    r"(?: reads=(none|(?:0|[1-9][0-9]*)(?:,(?:0|[1-9][0-9]*))*))?"
    r"(?: returns=((?:0|[1-9][0-9]*)(?:,(?:0|[1-9][0-9]*))*))?"
)


@functools.lru_cache(maxsize=8192)
def _parse_node(text: str) -> Node:
    """parse_node's work, once per text (texts recur across a zoo's op sets)."""
    head, *tail = text.split(" | ")
    m = _HEAD.fullmatch(head)
    if m is not None and len(tail) <= 3:
        nid, phase, kind, op, dtype, calls, parent, issued, grad, seen, variant, reads, returns = m.groups()
        args = shape = sig = ""
        if tail and tail[0].startswith("args="):
            args = tail.pop(0)[5:]
        if tail and tail[0].startswith("shape="):
            shape = tail.pop(0)[6:]
        if tail and tail[0].startswith("sig="):
            sig = tail.pop(0)[4:]
        if not tail:
            return _node(
                nid,
                phase,
                kind,
                op,
                dtype,
                calls,
                parent,
                issued,
                grad,
                seen,
                variant,
                reads,
                returns,
                args,
                shape,
                sig,
            )
    return _parse_node_words(text)


# A whole tree's nodes as node_text writes them, one per line of the texts joined by newlines: the
# head (_HEAD) and then ``| args=`` and ``| shape=`` parts, none holding " | " (parse_node splits there).
_NODE_LINE = re.compile(
    r"^([1-9][0-9]*) (\S+) (\S+) (\S+) (\S+) x([1-9][0-9]*)(?: parent=([1-9][0-9]*))?"
    r"(?: issued_by=([1-9][0-9]*))?( grad)?(?: seen=(\S+))?(?: variant=(\S+))?"
    r"(?: reads=(none|(?:0|[1-9][0-9]*)(?:,(?:0|[1-9][0-9]*))*))?"
    r"(?: returns=((?:0|[1-9][0-9]*)(?:,(?:0|[1-9][0-9]*))*))?"
    r"(?: \| args=((?:(?! \| )[^\n])*))?(?: \| shape=((?:(?! \| )[^\n])*))?(?: \| sig=((?:(?! \| )[^\n])*))?$",
    re.M,
)


def _parse_tree(tree: list) -> list[Node] | None:
    """parse_node of every text of ``tree``, or None where any is not in node_text's layout (the
    caller then parses text by text, and names what is wrong). One scan of the joined texts reads
    every node's fields (C); a node at a time, the zoo's ~170k nodes were a third of loading it."""
    try:
        joined = "\n".join(tree)
    except TypeError:  # a node that is not a string
        return None
    rows = _NODE_LINE.findall(joined)
    if len(rows) != len(tree) or joined.count("\n") != len(tree) - 1:  # a line unmatched, or a text of two
        return None
    try:
        return _nodes_of(rows)
    except ValueError:  # a reads= list out of order: parse_node names it
        return None


def _nodes_of(rows: list) -> list[Node]:
    """The Nodes of _NODE_LINE's matches."""
    return [_node(*row) for row in rows]


def _node(
    nid, phase, kind, op, dtype, calls, parent, issued, grad, seen, variant, reads, returns, args, shape, sig
) -> Node:
    """The Node of the fields node_text writes, as _HEAD or _NODE_LINE matched them: an optional field that is
    absent is None in a match and '' in findall's rows, and reads as absent either way."""
    return Node(
        int(nid),
        op,
        phase,
        kind,
        dtype,
        int(calls),
        int(parent) if parent else None,
        int(issued) if issued else None,
        bool(grad),
        shape,
        args,
        seen or "",
        tuple(variant.split(",")) if variant else (),
        parse_reads(reads) if reads else None,
        sig,
        parse_reads(returns) if returns else (),
    )


def _parse_node_words(text: str) -> Node:
    """A node's text read word by word: any order of the optional words, and a ValueError naming the
    word that is wrong."""
    head, *tail = text.split(" | ")
    words = head.split()
    if len(words) < len(NODE_FIELDS):
        raise ValueError(f"needs {' '.join(w.upper() for w in NODE_FIELDS)} first")
    nid, phase, kind, op, dtype, calls = words[: len(NODE_FIELDS)]
    if not calls.startswith("x"):
        raise ValueError(f"calls {calls!r} must read xN")
    fields: dict[str, Any] = {
        "id": _count(nid, "id"),
        "phase": phase,
        "kind": kind,
        "op": op,
        "dtype": dtype,
        "calls": _count(calls[1:], "calls"),
    }
    for word in words[len(NODE_FIELDS) :]:
        key, eq, value = word.partition("=")
        if key == "grad" and not eq:
            fields["grad"] = True
        elif key in NODE_IDS and eq:
            fields[key] = _count(value, key)
        elif key == "seen" and eq:
            fields["seen"] = value
        elif key == "variant" and eq:
            fields["variants"] = tuple(value.split(","))
        elif key == "reads" and eq:
            fields["reads"] = parse_reads(value)
        elif key == "returns" and eq and value != "none":
            fields["returns"] = parse_reads(value)
        else:
            raise ValueError(
                f"unknown word {word!r}; expected {', '.join(k + '=ID' for k in NODE_IDS)}, grad, seen=WHERE, "
                "variant=NAMES, reads=OUTPUTS, returns=OUTPUTS"
            )
    for part in tail:
        key, eq, value = part.partition("=")
        if key not in NODE_TEXTS or not eq:
            raise ValueError(f"unknown part {part!r}; expected {' or '.join('| ' + k + '=TEXT' for k in NODE_TEXTS)}")
        fields[key] = value
    return Node(**fields)


def _count(word: str, what: str) -> int:
    if not word.isdigit() or int(word) < 1:
        raise ValueError(f"{what} {word!r} must be a whole number of at least 1")
    return int(word)


_TREES: dict = {}  # id(a calltree list) -> (a copy of the list, its nodes): nodes' memo, oldest first
_TREES_KEPT = 4096  # trees kept (a zoo's, ~25 MB of nodes) before the oldest are let go


def nodes(doc: dict) -> list[Node]:
    """The op set's call tree in file order (a parent before its children); [] for a schema 1 op set.

    Each tree is parsed once: loading a file validates its tree (``validate`` keeps what it parsed),
    and judging it on every backend (check, gaps, the site) asks for it a dozen times more. A kept
    tree is the same when its texts are (a list compare, quick as a parsed document's strings are
    the same objects)."""
    tree = doc.get("calltree") or ()
    if not tree:
        return []
    kept = _TREES.get(id(tree))
    if kept is not None and kept[0] == tree:
        return list(kept[1])
    parsed = _parse_tree(tree)
    if parsed is None:
        parsed = [parse_node(text) for text in tree]
    _keep(tree, parsed)
    return list(parsed)


def _keep(tree: list, parsed: list) -> None:
    _TREES.pop(id(tree), None)
    _TREES[id(tree)] = (list(tree), parsed)
    while len(_TREES) > _TREES_KEPT:
        del _TREES[next(iter(_TREES))]


def variants(doc: dict) -> tuple[str, ...]:
    """The input variants the op set's call tree records, the given inputs first, then in
    vocab.INPUT_VARIANTS order; () where it records none (an older op set, or a schema 1 one)."""
    named = {v for node in nodes(doc) for v in node.variants}
    return tuple(v for v in vocab.INPUT_VARIANTS if v in named) + tuple(sorted(named - set(vocab.INPUT_VARIANTS)))


def for_variant(doc: dict, variant: str) -> dict:
    """``doc`` as if only input variant ``variant`` had been traced: the call-tree nodes it made (their
    texts, the same strings) and the flat ``ops`` summed from their kernel nodes (each cell's shape and
    grad as the whole op set has them). A node's parent and issuing node were made by the same run, so
    the tree stays whole."""
    kept = [(text, node) for text, node in zip(doc.get("calltree") or (), nodes(doc)) if variant in node.variants]
    sums: dict = {}
    for _, node in kept:
        if node.kind == KERNEL:
            key = (node.op, node.phase, node.dtype)
            sums[key] = sums.get(key, 0) + node.calls
    ops: dict = {}
    for (op, phase, dtype), n in sorted(sums.items()):
        cell = dict(((doc["ops"].get(op) or {}).get(phase) or {}).get(dtype) or {})
        cell["calls"] = n
        ops.setdefault(op, {}).setdefault(phase, {})[dtype] = cell
    out = {k: v for k, v in doc.items() if k not in ("calltree", "ops", "summary")}
    out["calltree"] = [text for text, _ in kept]
    _keep(out["calltree"], [node for _, node in kept])  # its nodes are parsed already: nodes() need not again
    out["ops"] = ops
    out["summary"] = {
        "distinct_ops": len(ops),
        "calls": phase_calls({p: sum(n for (_, ph, _), n in sums.items() if ph == p) for p in PHASES}),
    }
    return out


def phase_calls(counts: dict) -> dict:
    """``summary.calls`` from calls per phase: forward, backward and optimizer always (0 where none, as
    every op set has said), the serving phases only where called (a serve op set)."""
    return {p: counts.get(p, 0) for p in PHASES if p not in SERVE_PHASES or counts.get(p)}


def as_given(doc: dict) -> dict:
    """The op set a verdict leads with (check, gaps and the site alike): the given inputs' calls where it
    records input variants (``for_variant``), else the whole set."""
    named = variants(doc)
    if not named:
        return doc
    return for_variant(doc, vocab.GIVEN if vocab.GIVEN in named else named[0])


def _model_name_problem(name) -> str | None:
    """Why a model's name cannot be shown as one line of a report, or None: it is printed in every report and
    page, so a line break, NUL or terminal escape in it would forge lines (a CI annotation) or hide text."""
    bad = next((c for c in name if ord(c) < 32 or ord(c) == 127), None) if isinstance(name, str) else None
    if bad is None:
        return None
    what = {"\0": "a NUL byte", "\n": "a line break", "\r": "a line break"}.get(bad, f"a control character {bad!r}")
    return f"model.name holds {what}; a model's name is one line of text: re-trace it under another name"


def validate(doc, path: str) -> list[Problem]:
    """Every problem in a parsed op-set document, with file:line."""
    if not isinstance(doc, dict):
        return [Problem(path, 1, "not an op-set file: the top level must be a mapping")]
    raw: list[tuple[tuple, str]] = []
    if doc.get("kind") != KIND:
        raw.append((("kind",), f"kind is {doc.get('kind')!r}; an op-set file says 'kind: {KIND}'"))
    version = doc.get("schema_version")
    if version not in READS or isinstance(version, bool):
        raw.append(
            (
                ("schema_version",),
                f"schema_version is {version!r}; this opcov reads "
                f"{' or '.join(map(str, READS))} (re-trace the model with this opcov)",
            )
        )
    for key in doc:
        if key not in TOP_KEYS:
            raw.append(((key,), f"unknown key {key!r}; expected one of {sorted(TOP_KEYS)}"))
    if doc.get("mode") not in MODES:
        raw.append((("mode",), f"mode is {doc.get('mode')!r}; expected one of {', '.join(MODES)}"))
    for key in ("model", "provenance", "ops"):
        if not isinstance(doc.get(key), dict):
            raw.append(((key,), f"missing or not a mapping: {key!r}"))
    model = doc["model"] if isinstance(doc.get("model"), dict) else {}
    if not model.get("name"):
        raw.append((("model",), "model lacks 'name'"))
    for key, value in model.items():
        if bad := data.type_problem(value, str if key == "name" else "data", f"model.{key}"):
            raw.append((("model", key) + bad[0], bad[1]))
    if why := _model_name_problem(model.get("name")):
        raw.append((("model", "name"), why))
    for key in ("dtype", "autocast", "optimizer"):
        if key in doc and not (doc[key] is None and key != "dtype" or isinstance(doc[key], str)):
            raw.append(((key,), f"{key} must be a name" + (", or null" if key != "dtype" else "")))
    if "summary" in doc and data.type_problem(doc["summary"], "data", "summary"):
        raw.append((("summary",), "summary must be plain data (counts)"))
    prov = doc["provenance"] if isinstance(doc.get("provenance"), dict) else {}
    for key in ("torch", "command", "created"):
        if not prov.get(key):
            raw.append((("provenance",), f"provenance lacks {key!r}: an op set without it cannot be reproduced"))
    for key, value in prov.items():
        if bad := data.type_problem(value, PROVENANCE_TYPES.get(key, "data"), f"provenance.{key}"):
            raw.append((("provenance", key) + bad[0], bad[1]))
    raw.extend(_compile_problems(doc))
    raw.extend(parallel.problems(doc))
    raw.extend(_device_module_problems(doc))
    if "parents" in doc and not isinstance(doc["parents"], dict):
        raw.append((("parents",), "parents must be a mapping of op name to record"))
    elif isinstance(doc.get("parents"), dict):
        for name, rec in doc["parents"].items():
            raw.extend(((("parents", name) + k), m) for k, m in _parent_problems(name, rec))
    ops = doc["ops"] if isinstance(doc.get("ops"), dict) else {}
    crec = doc["compile"] if isinstance(doc.get("compile"), dict) else {}
    all_eager = doc.get("path") == COMPILE and (doc.get("graph_breaks") or crec.get("outcome") != "compiled")
    if isinstance(doc.get("ops"), dict) and not ops and not all_eager:  # nothing to judge must never read 'runs'
        raw.append((("ops",), "no ops: the model dispatched nothing this op set records, so there is nothing to judge"))
    for name, rec in ops.items():
        if not _op_fine(name, rec):
            raw.extend(((("ops", name) + k), m) for k, m in _op_problems(name, rec))
    if version == SCHEMA_VERSION and "calltree" not in doc:
        raw.append((("schema_version",), f"a schema {SCHEMA_VERSION} op set has a calltree; this one has none"))
    elif "calltree" in doc and version != SCHEMA_VERSION:
        raw.append((("calltree",), f"calltree is schema {SCHEMA_VERSION}'s; this file says schema_version {version!r}"))
    elif "calltree" in doc:
        if "parents" in doc:
            raw.append((("parents",), f"parents is schema 1's; schema {SCHEMA_VERSION} records them in calltree"))
        raw.extend((("calltree",) + k, m) for k, m in _tree_problems(doc["calltree"], ops))
    root = data._compose(path) if raw else None
    return [Problem(path, _line_of(root, keys), msg) for keys, msg in raw]


def path_of(doc: dict) -> str:
    """The path an op set records: eager (no ``path`` key) or compile."""
    return doc.get("path") or EAGER


def _device_module_problems(doc: dict):
    """Problems of the ``device_module`` list: each entry names its API (``via``) and may give a line and a count."""
    entries = doc.get(DEVICE_MODULE)
    if entries is None:
        return
    if not isinstance(entries, list):
        yield (DEVICE_MODULE,), f"{DEVICE_MODULE} must be a list of {{via: API, at: FILE:LINE, calls: N}}"
        return
    for i, e in enumerate(entries):
        if not isinstance(e, dict) or not isinstance(e.get("via"), str) or not e["via"]:
            yield (DEVICE_MODULE,), f"{DEVICE_MODULE} entry {i + 1} must be a mapping naming its API: {{via: API, ...}}"
        elif bad := [k for k, v in e.items() if not isinstance(v, DEVICE_MODULE_KEYS.get(k, type(None))) or v is True]:
            yield (
                (DEVICE_MODULE,),
                f"{DEVICE_MODULE} entry {i + 1}: {', '.join(map(repr, bad))} unknown or of the wrong type; "
                f"expected {', '.join(DEVICE_MODULE_KEYS)}",
            )


def _compile_problems(doc: dict):
    """Problems of a compiled op set's header (``path``, ``compile``, ``graph_breaks``)."""
    path = doc.get("path", EAGER)
    if path not in PATHS:
        yield ("path",), f"path is {path!r}; expected one of {', '.join(PATHS)}"
        return
    if path == EAGER:
        for key in ("compile", "graph_breaks"):
            if key in doc:
                yield (key,), f"{key} belongs to a compiled op set (path: {COMPILE}); this one is eager"
        return
    rec = doc.get("compile")
    if not isinstance(rec, dict) or not isinstance(rec.get("backend"), str) or not rec.get("backend"):
        yield ("compile",), "a compiled op set names its compile backend: compile: {backend: NAME, ...}"
    elif rec.get("outcome") not in COMPILE_OUTCOMES:
        yield ("compile",), f"compile.outcome is {rec.get('outcome')!r}; expected one of {', '.join(COMPILE_OUTCOMES)}"
    breaks = doc.get("graph_breaks", [])
    if not isinstance(breaks, list):
        yield ("graph_breaks",), "graph_breaks must be a list of {reason, where, construct}"
        return
    for i, b in enumerate(breaks):
        if not isinstance(b, dict) or any(not isinstance(b.get(k), str) for k in BREAK_KEYS):
            yield ("graph_breaks",), f"graph break {i + 1} must be a mapping of {', '.join(BREAK_KEYS)} to text"
        elif set(b) - set(BREAK_KEYS) - {"code", "times"}:
            yield (
                ("graph_breaks",),
                f"graph break {i + 1}: unknown key(s) {sorted(set(b) - set(BREAK_KEYS) - {'code', 'times'})}",
            )
        elif "times" in b and (not isinstance(b["times"], int) or isinstance(b["times"], bool) or b["times"] < 1):
            yield ("graph_breaks",), f"graph break {i + 1}: times must be a whole number of at least 1"


def _line_of(root, keys: tuple) -> int | None:
    """data._line_of, and the line of node ``i`` for keys ("calltree", i)."""
    if len(keys) >= 2 and keys[0] == "calltree" and isinstance(keys[1], int) and root is not None:
        for k, v in root.value if hasattr(root, "value") and isinstance(root.value, list) else ():
            if getattr(k, "value", None) == "calltree" and isinstance(v.value, list) and keys[1] < len(v.value):
                return v.value[keys[1]].start_mark.line + 1
    return data._line_of(root, keys)


def _tree_problems(tree, ops):
    """Problems of a calltree: node text, ids in order, parents and issuing nodes that exist and fit,
    and kernel nodes that add up to ``ops`` (the flat view is the tree's kernel calls)."""
    if not isinstance(tree, list):
        yield (), "calltree must be a list of nodes, one per line"
        return
    known: dict[int, tuple] = {}  # id -> (phase, kind)
    depth: dict[int, int] = {}  # id -> levels from its root
    last = 0
    sums: dict[tuple, int] = {}
    parsed: list | None = []  # kept for nodes() when every node parses
    with_variants = 0
    bulk = _parse_tree(tree) if tree else None
    for i, text in enumerate(tree):
        try:
            node = bulk[i] if bulk is not None else parse_node(text)
        except ValueError as exc:
            parsed = None
            yield (i,), f"calltree node {i + 1}: {exc}"
            continue
        if parsed is not None:
            parsed.append(node)
        nid, op, phase, kind, dtype, calls, parent, issued, _, _, _, seen, variants, _, _, _ = node
        with_variants += bool(variants)
        depth[nid] = level = depth.get(parent, 0) + 1 if parent is not None else 1
        if level > MAX_DEPTH or calls > MAX_CALLS:
            parsed = None
            if calls > MAX_CALLS:
                yield (
                    (i,),
                    f"calltree node {nid} ({op}): {str(calls)[:20]}... calls, over the {MAX_CALLS:.0e} a count may be",
                )
            elif level == MAX_DEPTH + 1:  # said once, at the first node too deep (those below it are deeper)
                yield (i,), f"calltree node {nid} ({op}): {level} levels deep, over the {MAX_DEPTH} an op set may have"
            known[nid] = (phase, kind)
            last = max(last, nid)
            if kind == KERNEL:
                sums[(op, phase, dtype)] = sums.get((op, phase, dtype), 0) + calls
            continue
        if (
            last < nid
            and phase in PHASES
            and (kind == KERNEL or kind == COMPOSITE)
            and "::" in op
            and (not seen or seen in SEEN)
            and issued is None
            and variants in _KNOWN_VARIANTS
            and (parent is None or (parent in known and known[parent] == (phase, COMPOSITE)))
        ):
            last = nid  # the usual node, checked in one go (~170k over a zoo); any doubt: word by word
            known[nid] = (phase, kind)
            if kind == KERNEL:
                key = (op, phase, dtype)
                sums[key] = sums.get(key, 0) + calls
            continue
        yield from (((i,), why) for why in _node_problems(node, known, last))
        last = max(last, node.id)
        known[node.id] = (node.phase, node.kind)
        if node.kind == KERNEL:
            key = (node.op, node.phase, node.dtype)
            sums[key] = sums.get(key, 0) + node.calls
    if parsed is not None:
        _keep(tree, parsed)
    if 0 < with_variants < len(tree):
        yield (
            (),
            f"calltree: {with_variants} of {len(tree)} nodes say which input variant made them; an op set "
            "records variant= on every node or on none (re-trace it)",
        )
    yield from _sum_problems(ops, sums)


def _node_problems(node, known: dict, last: int):
    """What is wrong with one call-tree node, word by word (``_tree_problems`` checks the usual node in
    one go): its id after ``last``, its phase, kind, op, seen and variants, and a parent and an issuing
    node among ``known`` (id -> (phase, kind)) that fit it."""
    where = f"calltree node {node.id} ({node.op})"
    if node.id <= last:
        yield f"{where}: ids must increase down the file (a parent before its children)"
    if node.phase not in PHASES:
        yield f"{where}: unknown phase {node.phase!r}; expected one of {', '.join(PHASES)}"
    if node.kind not in NODE_KINDS:
        yield f"{where}: unknown kind {node.kind!r}; expected one of {', '.join(NODE_KINDS)}"
    elif node.kind != CALL and "::" not in node.op:
        yield f"{where}: a {node.kind} node's op is of the form namespace::op[.overload]"
    if node.seen and node.seen not in SEEN:
        yield f"{where}: seen must be one of {', '.join(SEEN)}"
    if node.variants and node.variants not in _KNOWN_VARIANTS:
        yield (
            f"{where}: variant={','.join(node.variants)} must be a sorted comma list of "
            f"{', '.join(vocab.INPUT_VARIANTS)} (the input variants that made the call)"
        )
    if node.parent is not None:
        if node.parent not in known:
            yield f"{where}: parent {node.parent} is not a node above it"
        elif known[node.parent][0] != node.phase or known[node.parent][1] == KERNEL:
            yield f"{where}: parent {node.parent} must be a composite or call node of the same phase"
    if node.issued_by is not None:
        if node.parent is not None or node.phase != "backward":
            yield f"{where}: only a backward root has issued_by"
        elif node.issued_by not in known or known[node.issued_by][0] != "forward":
            yield f"{where}: issued_by {node.issued_by} is not a forward node above it"


def _sum_problems(ops: dict, sums: dict):
    """Whether the tree's kernel nodes (``sums``: (op, phase, dtype) -> calls) add up to the flat ``ops``."""
    flat = {
        (op, phase, dtype): cell.get("calls")
        for op, rec in ops.items()
        if isinstance(rec, dict)
        for phase, cells in rec.items()
        if isinstance(cells, dict)
        for dtype, cell in cells.items()
        if isinstance(cell, dict)
    }
    if flat != sums:
        differ = sorted(k for k in set(flat) | set(sums) if flat.get(k) != sums.get(k))
        yield (
            (),
            (
                "calltree's kernel nodes do not add up to ops (the flat view is the tree's kernel calls): "
                + "; ".join(
                    f"{op} {phase} {dtype}: {flat.get((op, phase, dtype), 0)} calls in ops, "
                    f"{sums.get((op, phase, dtype), 0)} in the tree"
                    for op, phase, dtype in differ[:3]
                )
            ),
        )


def _op_fine(name, rec) -> bool:
    """True where _op_problems finds nothing (most ops): the same checks in one loop, without a
    generator per op; False on any doubt, and _op_problems says what is wrong."""
    if type(name) is not str or "::" not in name or type(rec) is not dict or not rec:
        return False
    for phase, cells in rec.items():
        if phase not in PHASES or type(cells) is not dict:
            return False
        for dtype, cell in cells.items():
            if type(dtype) is not str or type(cell) is not dict:
                return False
            for key, value in cell.items():
                want = CALL_KEYS.get(key)
                if want is None or type(value) is not want:  # exact: a subclass (bool for int) takes the long way
                    return False
                if want is int and not 1 <= value <= MAX_CALLS:
                    return False
                if key == "seen" and value not in SEEN:
                    return False
    return True


def _cells(label: str, rec, shape: str):
    """Walk a phase -> dtype -> cell record: yields ((phase,), problem) for each bad level and
    (phase, dtype, cell) for each cell that is a mapping. ``label`` starts each problem (an op's name,
    or 'parent NAME'); ``shape`` says what the record should be."""
    if not isinstance(rec, dict) or not rec:
        yield (), f"{label}: record must be a non-empty mapping of {shape}"
        return
    for phase, cells in rec.items():
        if phase not in PHASES or not isinstance(cells, dict):
            yield (phase,), f"{label}: {phase!r} must be one of {', '.join(PHASES)} mapping dtype to a record"
            continue
        for dtype, cell in cells.items():
            if not isinstance(dtype, str):
                yield (phase,), f"{label}: {phase}: dtype key {dtype!r} is not a dtype name"
            elif not isinstance(cell, dict):
                yield (phase,), f"{label}: {phase}.{dtype} must be a mapping such as {{calls: 3}}"
            else:
                yield phase, dtype, cell


def _op_problems(name, rec):
    if not isinstance(name, str) or "::" not in name:
        yield (), f"op name {name!r} is not of the form namespace::op[.overload]"
    for found in _cells(str(name), rec, "phase to dtype to calls"):
        if len(found) == 2:
            yield found
            continue
        phase, dtype, cell = found
        for key, value in cell.items():
            want = CALL_KEYS.get(key)
            if want is None:
                yield (phase,), f"{name}: {phase}.{dtype}: unknown key {key!r}"
            elif not isinstance(value, want) or (
                want is int and (isinstance(value, bool) or not 1 <= value <= MAX_CALLS)
            ):
                yield (
                    (phase,),
                    f"{name}: {phase}.{dtype}.{key} must be a {want.__name__}"
                    + (f" from 1 to {MAX_CALLS:.0e}" if want is int else ""),
                )
            elif key == "seen" and value not in SEEN:
                yield (phase,), f"{name}: {phase}.{dtype}.seen must be one of {', '.join(SEEN)}"


def _parent_problems(name, rec):
    if not isinstance(name, str):
        yield (), f"parent name {name!r} is not an op or call name"
    for found in _cells(f"parent {name}", rec, "phase to dtype to {calls, traced_as, ...}"):
        if len(found) == 2:
            yield found
            continue
        phase, dtype, cell = found
        for key, value in cell.items():
            want = PARENT_KEYS.get(key)
            if want is None:
                yield (phase,), f"parent {name}: {phase}.{dtype}: unknown key {key!r}"
            elif not isinstance(value, want) or (want is list and not all(isinstance(v, str) for v in value)):
                yield (
                    (phase,),
                    f"parent {name}: {phase}.{dtype}.{key} must be a {want.__name__}"
                    + (" of op names" if want is list else ""),
                )


def is_opset(doc) -> bool:
    return isinstance(doc, dict) and doc.get("kind") == KIND


def load(path: str) -> dict:
    """Parse and validate an op-set file; DataError names file:line of the first problem.

    Read by ``lineyaml.parse`` (the same document, several times faster than PyYAML's constructor:
    the site and ``gaps`` read every op set of the zoo), which verifies the integrity line and takes
    only the layout ``dumps`` writes; anything else, and any file with a problem, is read by
    ``data.load``, which names the problem and its line. Kept between runs where a command asks
    (opcov.store.parsed)."""
    return parsed.read(path, "opset", _load)


def _load(path: str) -> dict:
    doc = lineyaml.parse(path)
    if doc is not None:
        doc.pop(data.INTEGRITY, None)
        if not validate(doc, path):
            return doc
    return data.load(path, validate)


def save(doc: dict, path: str) -> None:
    """Deterministic, atomic write (the same writer as coverage files: one op per line, and one
    call-tree node per line)."""
    problems = validate(doc, path)
    if problems:  # never write a file that could not be read back
        raise data.DataError(f"refusing to write an op set that could not be read back: {problems[0]}")
    output.check_output(path, kind=output.OPSET)  # never over a file that is not an op set
    output.write_atomic(path, dumps(doc))


def dumps(doc: dict) -> str:
    """``data.dumps``, with the calltree (when there is one) just before ``ops``, a node per line, under
    the same integrity line (``data.stamped``)."""
    tree = doc.get("calltree")
    text = data.body({k: v for k, v in doc.items() if k != "calltree"})
    if tree is not None:
        head, sep, rest = text.partition("\nops:")
        lines = ["calltree:" if tree else "calltree: []"] + [f"- {_quoted(t)}" for t in tree]
        text = head + "\n" + "\n".join(lines) + sep + rest
    return data.stamped(text, len(doc.get("ops") or {}))


def _quoted(text: str) -> str:
    """A single-quoted YAML scalar on one line (read back without YAML's type guessing)."""
    import yaml

    out = yaml.dump(text, Dumper=data._dumper(), default_style="'", width=1 << 30)
    return out.removesuffix("\n...\n").strip()


class OpSet:
    """An op-set document with the questions a notebook asks of it (``opcov.trace`` returns one)."""

    def __init__(self, doc: dict):
        self.doc = doc

    @property
    def ops(self) -> dict:
        return self.doc["ops"]

    @property
    def parents(self) -> dict:
        """Schema 1's parent calls ({} for schema 2, whose calltree holds them)."""
        return self.doc.get("parents", {})

    def tree(self) -> list[Node]:
        """The call tree's nodes, a parent before its children ([] for a schema 1 op set)."""
        return nodes(self.doc)

    def calls(self) -> list[Call]:
        return calls(self.doc)

    def names(self, phase: str | None = None) -> set[str]:
        """Op names, optionally only those called in one phase."""
        return {op for op, rec in self.ops.items() if phase is None or phase in rec}

    def save(self, path: str) -> None:
        save(self.doc, path)

    def __repr__(self) -> str:
        s = self.doc.get("summary", {})
        return (
            f"<OpSet {self.doc.get('model', {}).get('name')} {self.doc.get('mode')} {self.doc.get('dtype')}: "
            f"{s.get('distinct_ops')} ops, calls {s.get('calls')}>"
        )
