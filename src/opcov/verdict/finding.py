"""One requirement judged: the record every verdict rule returns.

Why apart: the dense rules (opcov.verdict.judge) and the layout rules (opcov.verdict.layouts) both make
findings; the record sits below both so neither imports the other.
"""

from __future__ import annotations

from dataclasses import dataclass


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
