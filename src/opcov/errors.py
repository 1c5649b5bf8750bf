"""Errors a user can cause; the CLI turns them into one line and an exit code."""

EXIT_OK = 0
EXIT_GATE = 1
EXIT_USAGE = 2


class OpcovError(Exception):
    """A user mistake or bad data: reported as one line, never a traceback."""

    exit_code = EXIT_USAGE


class UsageError(OpcovError):
    """Bad command-line input (unknown backend, bad pattern...)."""


class DataError(OpcovError):
    """A coverage file that cannot be read; the message names file:line."""


class BackendImportError(OpcovError):
    """The backend's Python package is missing or fails to import."""


class ArgumentError(UsageError, TypeError):
    """A Python API call with an argument the function does not take (or without one it needs):
    a TypeError, as Python's own, whose one line names the arguments it takes."""


def checked_arguments(fn):
    """``fn`` whose calls with an unknown or missing argument raise ArgumentError naming the arguments
    it takes and the nearest name (``opcov.check(..., covrage=...)``), instead of Python's bare message."""
    import difflib
    import functools
    import inspect

    sig = inspect.signature(fn)
    names = list(sig.parameters)

    @functools.wraps(fn)
    def call(*args, **kwargs):
        try:
            sig.bind(*args, **kwargs)
        except TypeError as exc:
            unknown = [k for k in kwargs if k not in sig.parameters]
            hint = ""
            if unknown:
                near = difflib.get_close_matches(unknown[0], names, n=1)
                hint = f" (did you mean {near[0]!r}?)" if near else ""
            raise ArgumentError(f"{fn.__name__}(): {exc}{hint}; it takes {', '.join(names)}") from None
        return fn(*args, **kwargs)

    return call


def cause_line(exc: BaseException) -> str:
    """An exception's message in one line: its first line, joined with the next where the first only
    introduces it (Dynamo's "backend='openxla' raised:" names no cause; the line after it does)."""
    lines = [line.strip() for line in str(exc).strip().splitlines() if line.strip()]
    if not lines:
        return ""
    return " ".join(lines[:2]) if lines[0].endswith(":") and len(lines) > 1 else lines[0]
