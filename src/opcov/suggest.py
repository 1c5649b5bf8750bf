"""'Did you mean': one-line errors for a backend name the data does not have, naming the closest.

``opcov check llama -b tpuu`` used to say only that coverage/tpuu/ holds no data. Every command
that resolves a backend name against the coverage folder (check, gaps, summary, ops) raises
``no_backend_data`` instead: the closest names and the backends that do have data, in one line.
"""

from __future__ import annotations

import difflib

from opcov.backends import get_backend, known_backends
from opcov.errors import UsageError
from opcov.store import layout


def check_backends(backends, coverage_dir: str) -> None:
    """Raise ``no_backend_data`` for the first of ``backends`` without data under ``coverage_dir``."""
    have = set(layout.backends_with_data(coverage_dir))
    for backend in backends:
        if backend not in have:
            raise no_backend_data(backend, coverage_dir)


def did_you_mean(word: str, choices, n: int = 3) -> str:
    """`` (did you mean 'tpu'?)`` for the closest of ``choices`` (difflib), else ''."""
    lower = {c.lower(): c for c in sorted(set(choices))}
    close = [lower[c] for c in difflib.get_close_matches(word.lower(), list(lower), n=n, cutoff=0.6)]
    return f" (did you mean {' or '.join(repr(c) for c in close)}?)" if close else ""


class NoData(UsageError):
    """A backend opcov knows (``opcov backends``) with no data here: ``check`` shows it as a row, "no data
    yet", with the commands that fill it; elsewhere it is the one-line error it is."""

    def __init__(self, message: str, backend: str):
        super().__init__(message)
        self.backend = backend

    def fill(self) -> str:
        """The commands that make the backend's data, in words (``fill_steps``)."""
        (scan, got), (probe, where), (ingest, bundle) = fill_steps(self.backend)
        return f"'{scan}' ({got}) and '{probe}' ({where}), or {bundle} ('{ingest}')"


def fill_steps(backend: str) -> list[tuple[str, str]]:
    """[(command, what it gives)] that make a known backend's data: its record's registered scan (no
    device) and probe (on it), then a contributed bundle. check's 'no data yet' row and the site's page
    for a backend without data both say these."""
    scan, probe = get_backend(backend).data_commands()
    return [
        (scan, "registered evidence, no device needed: where its package imports"),
        (probe, "on the device"),
        ("opcov ingest FILE", "ingest a contributed bundle"),
    ]


def no_backend_data(backend: str, coverage_dir: str) -> UsageError:
    """The error for a backend without data under ``coverage_dir``: for a backend opcov knows
    (``opcov backends``), how to make its data; for any other name, the closest names; both list
    the backends that have data."""
    have = layout.backends_with_data(coverage_dir)
    known = [b.name for b in known_backends()]
    also = " or the bundled data" if layout.beside_bundled(coverage_dir) else ""
    listed = f"backends with data under {coverage_dir}/{also}: {', '.join(have) if have else 'none'}"
    if backend in known:
        return NoData(
            f"no coverage data for backend {backend!r} under {coverage_dir}/{backend}/: create it with "
            f"'opcov scan {backend}' (registered, no device needed) or 'opcov probe {backend}' (on the device); "
            f"{listed}",
            backend,
        )
    return UsageError(
        f"unknown backend {backend!r}{did_you_mean(backend, list(have) + list(known))}; {listed} "
        f"(a new PrivateUse1 backend: 'opcov scan {backend} --import MODULE')"
    )
