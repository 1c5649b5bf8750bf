"""A sharded training step's op set (``opcov trace MODEL --mode training --parallel STYLE --world-size N``):
the ``parallel`` header, the call-tree names the distributed tracer writes, and their checks.

Why apart from opset.py: one header and a few node names that only a distributed op set has, read by the
tracer (opcov.tracing.distributed), the verdict (opcov.verdict.distributed), lint and the site. Torch-free.

An op set is an ordinary training op set (phases forward, backward, optimizer) plus::

    parallel:
      style: fsdp2           # ddp | fsdp2 | tp
      world_size: 8          # ranks of the (fake) process group the step was traced on
      rank: 0                # the rank recorded
      ranks: symmetric ...   # why one rank stands for all (text)
      mesh: [8]              # the DeviceMesh's shape
      process_group: ...     # what the trace ran on (text): torch's fake backend, no communication
      plan: {...}            # what was sharded and how (module or parameter group -> text)

In its call tree a collective is a ``kernel`` node of its own namespace (``c10d::allreduce_``,
``_c10d_functional::wait_tensor``, ``fsdp::all_gather_copy_in``); a functional collective
(``_c10d_functional::all_reduce``) is a ``composite`` node over the ``c10d::`` op its kernel calls on the
process group. Collective nodes carry ``args=`` (reduce op, group size) and ``sig=`` with them. Two kinds
of ``call`` node say what DTensor did (a verdict replaces a call node by its children, so they change no
local verdict): ``dtensor:OP`` (an aten op a DTensor argument sent through DTensor's dispatch: the local
ops it ran are its children; its ``args=`` the input placements) and ``dtensor.redistribute:FROM->TO``
(a redistribution, the collectives it ran as its children).
"""

from __future__ import annotations

import re

STYLES = ("ddp", "fsdp2", "tp")
FOLDER = "parallel"  # models/<model>/parallel/<style>-<world size>.yaml (opcov.store.layout)
DTENSOR = "dtensor:"  # a call node: an aten op DTensor dispatched (its sharding strategy is judged)
REDISTRIBUTE = "dtensor.redistribute:"  # a call node: DTensor moved a tensor between placements
# The namespaces of collective ops (and FSDP2's copy-in/out ops around them), as torch 2.13 names them.
COLLECTIVE_NAMESPACES = ("c10d", "_c10d_functional", "_c10d_functional_autograd", "c10d_functional", "_dtensor")
FSDP_NAMESPACE = "fsdp"
KEYS = {"style": str, "world_size": int, "rank": int, "ranks": str, "mesh": list, "process_group": str, "plan": dict}
REQUIRED = ("style", "world_size", "rank", "ranks", "mesh", "process_group")
MAX_WORLD = 1 << 20
_FILE = re.compile(r"^(?P<style>[a-z0-9]+)-(?P<world>[1-9][0-9]*)\.ya?ml$")


def header(doc: dict) -> dict | None:
    """The op set's ``parallel`` header, None for an op set of one device."""
    rec = doc.get("parallel")
    return rec if isinstance(rec, dict) else None


def label(doc: dict) -> str:
    """How a report names the mode of an op set: 'training' or 'training, fsdp2 x8'."""
    rec = header(doc)
    mode = str(doc.get("mode", "?"))
    return f"{mode}, {rec.get('style')} x{rec.get('world_size')}" if rec else mode


def site_key(doc: dict) -> str:
    """The key a sharded op set has among a model's modes on the site: 'training-fsdp2-x8' (one word: it
    names the page's sections and anchors)."""
    rec = header(doc) or {}
    return f"{doc.get('mode', '?')}-{rec.get('style')}-x{rec.get('world_size')}"


def is_site_key(mode: str) -> bool:
    """Whether a model's mode key on the site is a sharded step's (``site_key``)."""
    parts = mode.split("-")
    return len(parts) == 3 and parts[1] in STYLES and parts[2].startswith("x")


def file_name(style: str, world_size: int) -> str:
    """<style>-<world size>.yaml, a distributed op set's name in models/<model>/parallel/."""
    return f"{style}-{int(world_size)}.yaml"


def parse_file_name(name: str) -> tuple[str, int] | None:
    """(style, world size) of a file named by ``file_name``, else None."""
    m = _FILE.match(name)
    return (m.group("style"), int(m.group("world"))) if m else None


def is_collective(op: str) -> bool:
    """Whether an op name is a collective (or FSDP2's copy-in/out around one)."""
    return op.split("::", 1)[0] in COLLECTIVE_NAMESPACES + (FSDP_NAMESPACE,)


def dtensor_op(node_op: str) -> str | None:
    """The aten op of a ``dtensor:OP`` call node, else None."""
    return node_op[len(DTENSOR) :] if node_op.startswith(DTENSOR) else None


def problems(doc: dict):
    """(keys, message) for each problem of the ``parallel`` header; nothing for an op set without one."""
    if "parallel" not in doc:
        return
    rec = doc["parallel"]
    if not isinstance(rec, dict):
        yield ("parallel",), "parallel must be a mapping: {style, world_size, rank, ranks, mesh, process_group}"
        return
    if doc.get("mode") != "training":
        yield ("parallel",), f"parallel is a sharded training step's; this op set's mode is {doc.get('mode')!r}"
    for key in REQUIRED:
        if key not in rec:
            yield ("parallel",), f"parallel lacks {key!r}"
    for key, value in rec.items():
        want = KEYS.get(key)
        if want is None:
            yield ("parallel", key), f"parallel: unknown key {key!r}; expected one of {sorted(KEYS)}"
        elif not isinstance(value, want) or isinstance(value, bool):
            yield ("parallel", key), f"parallel.{key} must be {_WORDS[want]}"
    yield from _value_problems(rec)


_WORDS = {str: "text", int: "a whole number", list: "a list of whole numbers", dict: "a mapping of text to text"}


def _value_problems(rec: dict):
    style, world, rank = rec.get("style"), rec.get("world_size"), rec.get("rank")
    if isinstance(style, str) and style not in STYLES:
        yield ("parallel", "style"), f"parallel.style is {style!r}; expected one of {', '.join(STYLES)}"
    good_world = isinstance(world, int) and not isinstance(world, bool) and 1 <= world <= MAX_WORLD
    if isinstance(world, int) and not isinstance(world, bool) and not good_world:
        yield ("parallel", "world_size"), f"parallel.world_size is {world}; expected 1 to {MAX_WORLD}"
    if (
        good_world
        and isinstance(world, int)
        and isinstance(rank, int)
        and not isinstance(rank, bool)
        and not 0 <= rank < world
    ):
        yield ("parallel", "rank"), f"parallel.rank is {rank}; expected 0 to {world - 1} (world_size {world})"
    mesh = rec.get("mesh")
    if isinstance(mesh, list) and (
        not mesh or any(not isinstance(n, int) or isinstance(n, bool) or n < 1 for n in mesh)
    ):
        yield ("parallel", "mesh"), "parallel.mesh must be a non-empty list of whole numbers of at least 1"
    elif isinstance(mesh, list) and good_world and _product(mesh) != world:
        yield ("parallel", "mesh"), f"parallel.mesh {mesh} holds {_product(mesh)} ranks; world_size is {world}"
    plan = rec.get("plan")
    if isinstance(plan, dict) and any(not isinstance(k, str) or not isinstance(v, str) for k, v in plan.items()):
        yield ("parallel", "plan"), "parallel.plan must map text (a module or group) to text (how it is sharded)"


def _product(values) -> int:
    out = 1
    for v in values:
        out *= v
    return out
