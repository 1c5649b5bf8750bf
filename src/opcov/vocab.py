"""Every status, outcome and verdict word opcov writes or shows, defined once, worst first.

Data files, the verdict, the CLI reports and the site all print these words; when each kept its
own table the copies drifted apart. Everything else imports its words (and their labels, icons
and colours) from here, so a new status is added in one place. Torch-free, import-free.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Word:
    """One status word: ``label`` for sentences, ``short`` for table cells, ``icon`` + ``css`` for
    the site (icon and text together, never colour alone)."""

    name: str
    label: str
    short: str = ""
    icon: str = ""
    css: str = ""


def _table(*words: Word) -> dict[str, Word]:
    return {w.name: w for w in words}


# --- Evidence kinds, strongest first -------------------------------------------------------------
EVIDENCE_KINDS = ("registered", "probed")  # as written in a coverage file's ``evidence`` field
EVIDENCE_LEVELS = ("probed", "registered")  # strongest first: probed evidence outranks a registration

# --- Registered evidence (static, from the dispatcher) -------------------------------------------
FWD_PATHS = ("kernel", "out_variant", "composite", "fallback", "missing", "not_applicable")
BWD_PATHS = ("backend_kernel", "formula", "composite", "lost", "not_implemented", "none", "not_applicable")
# What a path resolves to once the ops it reaches are followed; worst first.
REGISTERED = _table(
    Word("missing", "missing", "missing", "\u2717", "fail"),
    Word("fallback", "fallback only", "fallback", "\u21aa", "warn"),
    Word("unresolved", "composite, reach unresolved", "unresolved", "?", "unknown"),
    Word("registered", "registered, unverified", "registered", "\u2713", "ok"),
    Word("not_applicable", "host-only (n/a)", "n/a", "\u2013", "na"),
)
RESOLVED = tuple(REGISTERED)
REGISTERED_BEST_FIRST = ("registered", "unresolved", "fallback", "missing", "not_applicable")

# --- Probed evidence (executed on a device against a CPU reference) ------------------------------
# Worst first: a cell over several cases takes the first in this order. pass outranks
# not_comparable / no_reference: a case that was judged says more than one that could not be,
# and neither can hide a failure. ``css`` is the status's group: ok, fail or unknown.
PROBED = _table(
    Word("crash", "crashes the process", "crash", "\u2717", "fail"),
    Word("timeout", "times out", "timeout", "\u29d6", "fail"),
    Word("error", "raises", "error", "\u2717", "fail"),
    Word("unsupported", "no kernel", "unsupported", "\u2717", "fail"),
    Word("mismatch", "wrong results", "mismatch", "\u2260", "fail"),
    Word("pass_low_precision", "passes only at reduced precision", "low precision", "\u2248", "ok"),
    Word("pass", "probed pass", "pass", "\u2713", "ok"),
    Word("not_comparable", "ran (values not comparable)", "not comparable", "~", "unknown"),
    Word("no_reference", "ran (the CPU reference failed, so the values are unchecked)", "no reference", "?",
         "unknown"),
    Word("skipped", "skipped (no case reached it)", "skipped", "\u2013", "unknown"),
)
PROBED_STATUSES = tuple(PROBED)
PROBED_FAILURES = frozenset(s for s, w in PROBED.items() if w.css == "fail")
PROBED_RANK = {s: i for i, s in enumerate(PROBED_STATUSES)}
# Probed statuses that say a call ran (the verdict's "ok"), and those that say it did not.
PROBED_RAN = ("pass", "pass_low_precision", "not_comparable", "no_reference")

# --- The verdict: one outcome per op, one verdict per backend and mode ----------------------------
OUTCOMES = _table(  # worst first
    Word("fails", "fails", "FAIL", "\u274c", "fail"),
    Word("unknown", "unknown", "????", "\u2754", "unknown"),
    Word("fallback", "runs with fallback", "SLOW", "\U0001f422", "warn"),
    Word("ok", "runs", "", "\u2705", "ok"),
)
NOT_JUDGED = Word("not_judged", "not judged", "----", "", "na")
VERDICT_OF = {"fails": "fails", "unknown": "unknown", "fallback": "runs_with_fallback", "ok": "runs"}
VERDICTS = _table(  # worst first
    Word("fails", "fails", "FAIL", "\u274c", "fail"),
    Word("unknown", "unknown", "UNKNOWN", "\u2754", "unknown"),
    Word("runs_with_fallback", "runs with fallback", "SLOW", "\U0001f422", "warn"),
    Word("runs", "runs", "RUNS", "\u2705", "ok"),
)
VERDICT_ORDER = tuple(VERDICTS)


def worst(statuses, order) -> str:
    """The worst of ``statuses`` in ``order`` (a worst-first sequence of words)."""
    rank = {s: i for i, s in enumerate(order)}
    return min(statuses, key=lambda s: rank.get(s, len(order)))
