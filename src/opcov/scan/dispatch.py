"""One op's dispatch table, read from ``torch._C._dispatch_dump_table``: which kernel each key resolves to.

Why apart: the dense scan (opcov.scan.registered) and the layout keys' scan (opcov.scan.layouts) both read
it, and neither should import the other to get it.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

_LINE = re.compile(r"^(\w+): (fallthrough )?registered at (.*) \[([^\]]+)\]$")


@dataclass(frozen=True)
class Entry:
    """One line of ``_dispatch_dump_table``: which kernel a key resolves to."""

    source: str
    tag: str  # kernel | default backend kernel | math kernel | backend fallback | autograd kernel
    fallthrough: bool = False


def dispatch_table(C, name: str) -> dict[str, Entry]:
    table = {}
    for line in C._dispatch_dump_table(name).splitlines():
        m = _LINE.match(line.strip())
        if m:
            table[m.group(1)] = Entry(_short_source(m.group(3)), m.group(4), bool(m.group(2)))
    return table


def _short_source(src: str) -> str:
    """Drop build-machine prefixes so data does not change with the build path."""
    for marker in ("/build/aten/", "/aten/src/", "/torch/csrc/", "site-packages/"):
        i = src.find(marker)
        if i >= 0:
            return src[i + 1 :] if marker != "site-packages/" else src[i + len(marker) :]
    return src
