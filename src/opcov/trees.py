"""Leaves of (input, args, kwargs) trees, as ``torch.utils._pytree`` gives them, faster.

Every case walks its inputs and outputs a dozen times (copies, the dtype key of each dispatched
call, aliasing, comparison), and pytree's general walk costs about 10 µs a node: a fifth of a
small case's time. Samples are tuples, lists and dicts of tensors and numbers; those are walked
here directly, and any other node type pytree knows (a namedtuple, ``torch.Size``,
``torch.return_types``, an OrderedDict) is handed to pytree itself, so the leaves and their order
are pytree's exactly.
"""

from __future__ import annotations

_pytree = None  # torch.utils._pytree, imported on first use (this module is imported without torch)


def _pt():
    global _pytree
    if _pytree is None:
        import torch.utils._pytree as pytree

        _pytree = pytree
    return _pytree


_LEAF_TYPES: dict = {}  # type -> whether pytree takes its objects as leaves (asked once per type)


def _is_leaf(t) -> bool:
    """Whether pytree takes an object of type ``t`` (not a plain tuple, list or dict) as a leaf."""
    known = _LEAF_TYPES.get(t)
    if known is None:
        known = _LEAF_TYPES[t] = t not in _pt().SUPPORTED_NODES and not issubclass(t, tuple)
    return known


def _collect(tree, out: list) -> None:
    t = type(tree)
    if t is tuple or t is list:
        items = tree
    elif t is dict:
        items = tree.values()  # pytree flattens a dict in insertion order
    elif _is_leaf(t):
        out.append(tree)
        return
    else:
        out.extend(_pt().tree_leaves(tree))
        return
    known = _LEAF_TYPES
    for x in items:
        if known.get(type(x)) is True:  # a tensor or a number: the common case, no call
            out.append(x)
        else:
            _collect(x, out)


def _fresh() -> None:
    """Forget the leaf types when pytree has learnt node types since they were asked."""
    global _NODES_SEEN
    n = len(_pt().SUPPORTED_NODES)
    if n != _NODES_SEEN:
        _LEAF_TYPES.clear()
        _NODES_SEEN = n


_NODES_SEEN = -1


def leaves(tree) -> list:
    """``pytree.tree_leaves(tree)``."""
    _fresh()
    out: list = []
    _collect(tree, out)
    return out


def map_leaves(fn, tree):
    """``pytree.tree_map(fn, tree)``."""
    _fresh()
    return _map(fn, tree)


def _map(fn, tree):
    t = type(tree)
    if t is tuple:
        return tuple([_map(fn, x) for x in tree])
    if t is list:
        return [_map(fn, x) for x in tree]
    if t is dict:
        return {k: _map(fn, v) for k, v in tree.items()}
    if _is_leaf(t):
        return fn(tree)
    return _pt().tree_map(fn, tree)


def map_indexed(fn, tree):
    """``pytree.tree_unflatten([fn(i, leaf) for i, leaf in enumerate(leaves)], spec)``: ``fn`` gets
    each leaf's index in ``leaves(tree)`` order."""
    counter = [0]

    def one(x):
        i = counter[0]
        counter[0] += 1
        return fn(i, x)

    return map_leaves(one, tree)
