r"""Print a regular expression of the ops whose probed cells on a backend say something other than a pass but
name no signature class (``failed``/``ran``): cells written before the probe recorded classes. Such a cell
counts against every call of its op, whatever the call's arguments (a 0-d input's failure against a 4-d
call), so scripts/envs/xla-data.sh's ``classes`` stage probes those ops again and replaces their cells.

Usage: python scripts/envs/xla_unclassed_ops.py PROBED.yaml   (prints '^(aten::a|aten::b)(\.OVERLOAD)?$', or
nothing: every overload of each such op's base, since an OpInfo is about a base overload and dispatches others)
"""

from __future__ import annotations

import os
import re
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))), "src"))

from opcov import vocab  # noqa: E402
from opcov.store import data  # noqa: E402


def unclassed(doc: dict) -> list[str]:
    """Ops with a cell whose forward status is not a plain run and that names no class of its cases."""
    out = []
    for op, rec in doc["ops"].items():
        cells = [c for c in rec.values() if isinstance(c, dict) and "fwd" in c] if isinstance(rec, dict) else []
        if any(c["fwd"] not in vocab.PROBED_RAN and not (c.get("failed") or c.get("ran")) for c in cells):
            out.append(op)
    return sorted(out)


def main(argv: list[str]) -> int:
    if len(argv) != 1:
        print(__doc__.strip().splitlines()[-1], file=sys.stderr)
        return 2
    ops = unclassed(data.load(argv[0]))
    if ops:  # every overload of each op's base: an OpInfo is about the base overload, and dispatches the others
        bases = sorted({op.split(".", 1)[0] for op in ops})
        print("^(" + "|".join(re.escape(b) for b in bases) + r")(\.[A-Za-z0-9_]+)?$")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
