"""One provenance block added to registered files made before opcov recorded it, for each ``python -m
opcov.scan.X FILE...`` that does so (layouts, the device module): the same usage line, load, stamp with the
command that added it, save, and a line per file; nothing else in a file changes."""

from __future__ import annotations

import sys

from opcov.errors import DataError, OpcovError


def amend(argv, *, command: str, key: str, make, said) -> int:
    """``make(doc)`` -> the block for ``provenance[key]`` of each file in ``argv``; ``said(doc, block)`` the
        line printed for it. No file, or -h: the usage line. A file that cannot be read or is not registered or
    declared data: one line naming it, exit 2, nothing written."""
    from opcov.store import data

    argv = list(sys.argv[1:] if argv is None else argv)
    if not argv or argv[0] in ("-h", "--help"):
        print(f"usage: {command} REGISTERED_FILE...  (each made with the torch build and backend installed here)")
        return 0 if argv else 2
    for path in argv:
        try:
            doc = data.load(path)
            if doc.get("evidence") not in ("registered", "declared"):
                raise DataError(f"{path}: not a registered (or declared) data file; {command} adds to those only")
            block = make(doc, path)
        except OpcovError as exc:  # a user's wrong file: one line, nothing written
            print(f"opcov: {str(exc).splitlines()[0]}", file=sys.stderr)
            return 2
        block["command"] = f"{command} {path}"
        doc["provenance"][key] = block
        data.save(doc, path)
        print(f"{path}: {said(doc, block)}")
    return 0
