"""One requirement judged: the record every verdict rule returns.

Why apart: the dense rules (opcov.verdict.judge) and the layout rules (opcov.verdict.layouts) both make
findings; the record sits below both so neither imports the other.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

# How a reason names the ops a backend's fallback counters saw (opcov.probe.lazy, the judge's own words):
# '... CPU fallback (aten::_cummin_helper, aten::_logcumsumexp) ...'.
_FELL = re.compile(r"CPU fallback \(((?:[A-Za-z_][\w]*::[\w.]+)(?:, [A-Za-z_][\w]*::[\w.]+)*)\)")


def fell_ops(why: str) -> tuple[str, ...]:
    """The ops a finding's reason names as run through the backend's CPU fallback, as its counters named them
    (cummin's kernel is aten::_cummin_helper there): () where it names none."""
    return tuple(dict.fromkeys(op for m in _FELL.finditer(str(why)) for op in m.group(1).split(", ")))


@dataclass(frozen=True)
class Finding:
    """One requirement judged: an op's forward or backward at one dtype."""

    direction: str  # forward | backward
    dtype: str
    outcome: str  # fails | unknown | fallback | ok | not_judged
    evidence: str  # a level of vocab.EVIDENCE (probed | registered | declared), or none
    why: str
    source: str = ""  # coverage file the evidence came from
    fix: str = ""
    detail: str = ""  # the raw text the reason was worded from (a scan's exception): the JSON keeps it, not the words
