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
