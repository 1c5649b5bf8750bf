"""Importing torch under opcov's control.

Once an out-of-tree backend such as torch-tpu is installed, every ``import torch``
autoloads it through the ``torch.backends`` entry point: that takes seconds, prints
noise and claims PrivateUse1. opcov imports backends explicitly instead, so that a
cpu or meta scan never carries another backend's registrations.
"""

from __future__ import annotations

import contextlib
import os

AUTOLOAD_ENV = "TORCH_DEVICE_BACKEND_AUTOLOAD"
DATA_TORCH = "2.13.0"  # the torch release of the bundled coverage data: installs pin it, so traces pair with it


def install_command(extra: str = "torch") -> str:
    """The one command that installs what is missing, torch pinned to the bundled data's release (pip
    would otherwise take the newest torch, whose ops the data does not describe)."""
    return f"pip install 'opcov[{extra}]' torch=={DATA_TORCH}"


def import_torch():
    """Import torch with backend autoload off unless the caller set it.

    torch is an optional dependency (``pip install 'opcov[torch]'``): a command that needs it and
    does not find it says so in one line instead of a traceback.
    """
    os.environ.setdefault(AUTOLOAD_ENV, "0")
    try:
        import torch
    except ModuleNotFoundError as e:
        if e.name != "torch":
            raise
        from opcov.errors import UsageError

        raise UsageError(
            f"this command needs torch, which is not installed: {install_command('trace')} "
            "(the trace extra also brings transformers, for tracing models)"
        ) from None
    return torch


def cache_dir() -> str:
    """Where recordings that depend only on the torch version are kept."""
    root = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return os.path.join(root, "opcov")


def read_cache(name: str, default):
    """A JSON recording from the cache folder, or ``default`` when absent or unreadable."""
    import json

    try:
        with open(os.path.join(cache_dir(), name)) as f:
            return json.load(f)
    except (OSError, ValueError):
        return default


@contextlib.contextmanager
def cache_lock(name: str):
    """Held while a recording is made, so that processes wanting the same recording at once (a
    sharded scan, parallel test workers) make it once: the others wait, then read it. Where there
    is no ``fcntl`` (Windows) each records for itself, as before."""
    try:
        import fcntl
    except ImportError:
        yield
        return
    os.makedirs(cache_dir(), exist_ok=True)
    with open(os.path.join(cache_dir(), name + ".lock"), "w") as f:
        fcntl.flock(f, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(f, fcntl.LOCK_UN)


def write_cache(name: str, value) -> None:
    """Write a JSON recording atomically, so concurrent runs never read half a file."""
    import json

    path = os.path.join(cache_dir(), name)
    os.makedirs(os.path.dirname(path), exist_ok=True)
    tmp = f"{path}.{os.getpid()}"
    with open(tmp, "w") as f:
        json.dump(value, f, sort_keys=True)
    os.replace(tmp, path)
