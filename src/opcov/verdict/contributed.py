"""Whose evidence a verdict rests on, when it came as a contributed bundle (opcov.store.bundle):
the note that check, its reports and the site show beside the verdict."""

from __future__ import annotations


def notes(probed: dict | None) -> list[str]:
    """One note per contribution merged into the probed snapshot: source, date, device, hash."""
    if not probed:
        return []
    out = []
    for c in (probed.get("provenance") or {}).get("contributed") or []:
        if isinstance(c, dict):
            out.append(
                f"probed evidence contributed by {c.get('source', 'unknown')} on {c.get('date', '?')} "
                f"(device {c.get('device', '?')}; bundle sha256 {str(c.get('sha256', ''))[:12]})"
            )
    return out
