"""opcov as a library: ``opcov.check(...)`` gives the verdicts ``opcov check`` prints.

For Python code (a notebook, a test, a CI script) that wants typed answers rather than a report
to parse. The verdicts are the same ``BackendVerdict`` objects, made by the same functions
(verdict.check) as the command's, so ``--format json`` of them is what the command prints.
Torch-free for a saved op set, an op-set folder, a zoo name or an op set already in memory; only
a model that must be traced now imports torch (in a child process, as the command does).
"""

from __future__ import annotations

import os

from opcov.errors import DataError, UsageError, checked_arguments
from opcov.store import layout, opset
from opcov.verdict import check as _check
from opcov.verdict.judge import BackendVerdict

IN_MEMORY = "<op set>"  # the path the model description names for an op set passed as a dict


@checked_arguments
def check(model_or_opset, backends, mode=None, coverage=None) -> list[BackendVerdict]:
    """The verdict of a model on each backend and mode, as ``opcov check`` judges it.

    ``model_or_opset``: a zoo model name (``"llama"``), an op-set file or folder (str or path),
    an op-set document (dict) or an ``OpSet`` (what ``opcov.trace`` returns), or anything
    ``opcov trace`` accepts (traced now). ``backends``: a name or a list of names. ``mode``:
    ``"inference"``, ``"training"``, a list of them, or None for every mode the op sets hold.
    ``coverage``: the coverage folder; None is ./coverage when it exists, else the bundled data.
    Bad input raises an ``opcov.errors.OpcovError`` with a one-line message.
    """
    return check_model(model_or_opset, backends, mode, coverage)[0]


def check_model(model_or_opset, backends, mode=None, coverage=None) -> tuple[list[BackendVerdict], dict]:
    """``check`` and the model description the reports print (name, modes and dtypes, op-set paths)."""
    names = _names(backends, "backends", "a backend name or a list of them", required=True)
    modes = _names(mode, "mode", f"one of {', '.join(opset.MODES)} or a list of them")
    for m in modes:
        if m not in opset.MODES:
            raise UsageError(f"mode {m!r}: expected one of {', '.join(opset.MODES)}")
    if coverage is not None and not (isinstance(coverage, (str, os.PathLike)) and isinstance(os.fspath(coverage), str)):
        raise UsageError(f"coverage is of type {type(coverage).__name__}: expected a folder path (str) or None")
    for name in names:
        layout.plain_name(name)  # a backend name is a folder's, never a path
    coverage_dir = layout.read_coverage(None if coverage is None else _text(os.fspath(coverage), "coverage"))
    if isinstance(model_or_opset, opset.OpSet):
        model_or_opset = model_or_opset.doc
    if isinstance(model_or_opset, dict):
        return _check.judge_opsets([(IN_MEMORY, _in_memory(model_or_opset, modes))], names, coverage_dir)
    if isinstance(model_or_opset, (str, os.PathLike)) and isinstance(os.fspath(model_or_opset), str):
        return _check.run(_text(os.fspath(model_or_opset), "model_or_opset"), names, list(modes), coverage_dir)
    raise UsageError(
        f"model_or_opset is of type {type(model_or_opset).__name__}: expected a zoo model name, "
        f"an op-set file or folder, or an op-set document (dict)"
    )


def _text(value: str, what: str) -> str:
    """A path or name handed in, refused when the file system could not take it (a NUL byte)."""
    if "\0" in value:
        raise UsageError(f"{what} {value[:60]!r} holds a NUL byte: not a name or path")
    return value


def _names(value, what: str, expected: str, *, required: bool = False) -> tuple[str, ...]:
    """A name or a list of names as a tuple, without repeats; UsageError for anything else."""
    if value is None:
        value = ()
    items = (value,) if isinstance(value, str) else value
    try:
        items = tuple(dict.fromkeys(items))
    except TypeError:
        raise UsageError(f"{what} is of type {type(value).__name__}: expected {expected}") from None
    if not all(isinstance(i, str) and i for i in items):
        raise UsageError(f"{what} {value!r}: expected {expected}")
    if required and not items:
        raise UsageError(f"no {what} given: expected {expected}")
    return items


def _in_memory(doc: dict, modes) -> dict:
    """An op-set document handed in, validated as a file would be; UsageError if not of a wanted mode."""
    problems = opset.validate(doc, IN_MEMORY)
    if problems:
        more = f" (and {len(problems) - 1} more problem(s))" if len(problems) > 1 else ""
        raise DataError(f"{problems[0]}{more}")
    if modes and doc["mode"] not in modes:
        raise UsageError(f"the op set ({doc['model']['name']}) is for mode {doc['mode']}, not {', '.join(modes)}")
    return doc
