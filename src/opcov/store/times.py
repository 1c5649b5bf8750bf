"""The group-times file beside a probed file (``<out>.times.json``): the seconds each probe group took, which
``opcov plan`` and ``opcov probe --shard`` balance shards by (opcov.probe.plan). Read strictly, written
atomically; a contributed bundle's times join the backend's file when it is ingested (opcov.store.bundle)."""

from __future__ import annotations

import json
import os

from opcov.errors import DataError, UsageError

TIMES_SUFFIX = ".times.json"
MAX_TIMES_BYTES = 16 << 20  # a times file (a probe of every OpInfo writes about 1 MB)


def times_path(out: str) -> str:
    """The times sidecar of a probed file."""
    return out + TIMES_SUFFIX


def default_times(backend) -> str | None:
    """The times sidecar of the backend's default probed file (coverage/<backend>/probed-...yaml),
    when it exists: what a shard is balanced by unless --times names another."""
    from opcov.store import layout

    path = times_path(layout.probe_path(backend))
    return path if os.path.exists(path) else None


def load_times(path: str | None, required: bool = False) -> dict[str, float]:
    """Recorded seconds per group id; {} when there is no file (unless ``required``: a file the user
    named). A file that is not a times file is a one-line UsageError (a plan from a wrong file would
    be silently unbalanced)."""
    if required and not (path and os.path.exists(path)):
        raise UsageError(f"{path}: no such times file (a probe writes one beside its output: <out>{TIMES_SUFFIX})")
    if not path or not os.path.exists(path):
        return {}
    from opcov.store import strictjson

    try:
        doc = strictjson.load(path, limit=MAX_TIMES_BYTES, what="times")
    except DataError as exc:
        raise UsageError(f"{exc}: not a probe times file; pass another with --times or delete it") from None
    try:
        groups = doc["groups"]
        return {str(k): float(v) for k, v in groups.items()}
    except (ValueError, KeyError, TypeError, AttributeError) as exc:
        raise UsageError(
            f"{path}: not a probe times file ({type(exc).__name__}); pass another with --times or delete it"
        ) from None


def save_times(path: str, seconds: dict[str, float], *, backend_key: str, command: str) -> None:
    """Write the times sidecar (sorted, one group per line). Never fails a probe."""
    doc = {
        "about": "seconds each probe group took ('opcov probe'); 'opcov plan' and 'opcov probe --shard' "
        "balance shards by them",
        "backend": backend_key,
        "command": command,
        "groups": {k: round(v, 2) for k, v in sorted(seconds.items())},
        "total_s": round(sum(seconds.values()), 2),
    }
    from opcov.store import output, strictjson

    try:  # atomic, and never through a link planted where the sidecar goes
        output.write_atomic(path, strictjson.dumps(doc))
    except UsageError:
        pass


def merge_times(paths, out: str, *, command: str) -> str | None:
    """The times sidecars of merged files, joined beside the merged file (the later file wins a
    group both timed). None when no input has one."""
    seconds: dict[str, float] = {}
    key = None
    for p in paths:
        t = times_path(p)
        if os.path.exists(t):
            try:
                with open(t) as f:
                    key = key or json.load(f).get("backend")
            except (OSError, ValueError, AttributeError):
                pass
            seconds.update(load_times(t))
    if not seconds:
        return None
    save_times(times_path(out), seconds, backend_key=key or "unknown", command=command)
    return times_path(out)
