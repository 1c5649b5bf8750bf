"""Every status, outcome and verdict word opcov writes or shows, defined once, worst first.

Data files, the verdict, the CLI reports and the site all print these words; when each kept its
own table the copies drifted apart. Everything else imports its words (and their labels, icons
and colours) from here, so a new status is added in one place. Torch-free, import-free.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache


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


# --- Evidence: one ladder, strongest first --------------------------------------------------------
# What a judgement rests on. Every output (the check reports, the site, the badges) words, marks and
# colours evidence from this table, so that a claim is never shown as proof. ``label`` qualifies a
# verdict that says something runs ("runs (registered, unverified)"), ``short`` names the level;
# ``css`` is the level's class on the site (and the colour of a run resting on it).
EVIDENCE = _table(
    Word("probed", "probed", "probed", "\u25cf", "probed"),
    Word("registered", "registered, unverified", "registered", "\u25cb", "registered"),
    Word("declared", "declared in native_functions.yaml, unverified", "declared", "\u25cc", "declared"),
)
EVIDENCE_LEVELS = tuple(EVIDENCE)  # strongest first: probed evidence outranks a registration
EVIDENCE_MEANING = {
    "probed": "executed on the device against a CPU reference, per dtype, forward and backward; proof "
    "for the inputs the probe tried",
    "registered": "read from the dispatcher of the installed build, which registers a kernel for the op "
    "(dtype-blind); a claim, not proof that it runs",
    "declared": "listed in native_functions.yaml for a dispatch key whose build cannot be loaded here "
    "(mps); a claim one step further removed: no binary was read",
}
# Above the ladder, for a whole verdict only (opcov.verdict.observed): this model's own step ran on the device.
# Kept out of EVIDENCE (the per-op ladder the reports and the site lay out) and ranked above it by weaker().
OBSERVED_WORD = Word("observed", "observed on the device", "observed", "\u25c9", "observed")
VERDICT_LEVELS = (OBSERVED_WORD.name, *EVIDENCE_LEVELS)  # what a verdict may rest on, strongest first (--require)
# Below the ladder: an op the data does not hold (a requirement judged from nothing is unknown).
NO_EVIDENCE = Word("none", "no evidence", "no evidence", "\u00b7", "none")
EVIDENCE_WORST_FIRST = (NO_EVIDENCE.name,) + EVIDENCE_LEVELS[::-1]
VERDICT_EVIDENCE_WORST_FIRST = EVIDENCE_WORST_FIRST + (OBSERVED_WORD.name,)  # a whole verdict's, observed on top
PROVEN = ("observed", "probed")  # levels a plain 'runs' may rest on: something was executed on the device
EVIDENCE_KINDS = ("registered", "probed", "declared")  # as written in a coverage file's ``evidence`` field
STATIC_KINDS = ("registered", "declared")  # a file of paths per op (opcov.scan), strongest first

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
    # Ran, but only because an op fell back to the CPU (a backend that counts its fallback: PyTorch/XLA);
    # its group is "warn", as a registered fallback's: neither ok nor a failure.
    Word("fallback", "runs only through the CPU fallback", "fallback", "\u21aa", "warn"),
    # A crash or timeout that did not happen again when its case was re-run alone: the op ran there; not
    # pinned on it (a worker's earlier cases, the machine, ...), recorded so that it is not lost.
    Word("flaky", "crashed or hung once, passed when re-run alone", "flaky", "~", "warn"),
    Word("pass_low_precision", "passes only at reduced precision", "low precision", "\u2248", "ok"),
    Word("pass", "probed pass", "pass", "\u2713", "ok"),
    Word("not_comparable", "ran (values not comparable)", "not comparable", "~", "unknown"),
    Word("no_reference", "ran (the CPU reference failed, so the values are unchecked)", "no reference", "?", "unknown"),
    Word("skipped", "skipped (no case reached it)", "skipped", "\u2013", "unknown"),
)
PROBED_STATUSES = tuple(PROBED)
PROBED_FAILURES = frozenset(s for s, w in PROBED.items() if w.css == "fail")
PROBED_RANK = {s: i for i, s in enumerate(PROBED_STATUSES)}
# Probed statuses that say a call ran (the verdict's "ok"), and those that say it did not.
PROBED_RAN = ("pass", "pass_low_precision", "flaky", "not_comparable", "no_reference")
# Why the probe has no cell for an op (a probed file's ``{skipped: <word>}``): every catalogue op the
# probe did not reach gets one, the first that applies in this order (opcov.probe.disposition).
SKIP_REASONS = _table(
    Word("host_only", "host-only metadata op; no device kernel to probe", "host-only"),
    Word("distributed", "needs a distributed process group (collectives)", "distributed"),
    Word("not_tensor_op", "no tensor among its arguments or results", "not a tensor op"),
    Word("no_cpu_kernel", "CPU itself has no kernel for it: no reference to compare with", "no CPU kernel"),
    Word("random", "random op (values compared not at all, only shapes): no case reached it", "random"),
    Word("excluded", "the backend's manifest rules it out (opcov probe --manifest)", "excluded by manifest"),
    Word("variant", "out= or in-place variant: its functional form is probed, this overload is not", "variant"),
    Word(
        "schema_no_case",
        "no OpInfo reached it, and CPU accepted none of the inputs made from its schema",
        "schema: no case",
    ),
    Word("other_overload", "the OpInfo about it ran but dispatched other overloads", "other overload"),
    Word(
        "not_selected", "its OpInfo was not in this run's selection (--ops, --core, --shard, --dtypes)", "not selected"
    ),
    Word("no_source", "no OpInfo is about it and no replayed zoo call reached it", "no case source"),
)

# Harder inputs: each tier is one more case per OpInfo x dtype (its first sample the tier applies to,
# made harder), forward only, its status in a cell key of its own (``<tier>``, evidence ``<tier>_*``),
# so that a backend failing only on channels_last inputs says exactly that (opcov.probe.tiers).
INPUT_TIERS = _table(
    Word(
        "special",
        "NaN, +-inf, -0.0 and the dtype's extremes (largest finite, smallest normal) among the floating inputs",
        "NaN/inf",
    ),
    Word("noncontig", "non-contiguous inputs (transposed, or every other element)", "non-contiguous"),
    Word("channels_last", "4-d (5-d) inputs in channels_last (channels_last_3d) memory format", "channels_last"),
    Word("empty", "zero-size inputs (the leading dimension cut to 0)", "empty"),
)

# A case not run because an earlier case of its group (one OpInfo at one dtype) crashed or timed out:
# counted in its cell (``after_crash``), which then fails outright; ``opcov probe --exhaustive`` runs it.
AFTER_CRASH = Word(
    "after_crash", "not run: an earlier case of its group crashed or timed out", "not run", "\u2013", "fail"
)

# --- The verdict: one outcome per op, one verdict per backend and mode ----------------------------
# ``value_note``: the op ran on the device and its values (or output shape or dtype) differed from CPU's on
# a probe case (probed ``mismatch``). That does not stop a model: it runs, and its results may differ from
# CPU's; it is worded and counted apart from an error that stops the model.
OUTCOMES = _table(  # worst first
    Word("fails", "fails", "FAIL", "\u2717", "fail"),
    Word("unknown", "unknown", "UNKNOWN", "?", "unknown"),
    Word("value_note", "runs; values may differ", "VALUES", "\u2260", "warn"),
    Word("fallback", "runs with fallback", "SLOW", "\u21aa", "warn"),
    Word("ok", "runs", "", "\u2713", "ok"),
)
PROBLEMS = tuple(o for o in OUTCOMES if o != "ok")  # what a report lists per op, and a gate may fail on
NOT_JUDGED = Word("not_judged", "not judged", "----", "", "na")
VERDICT_OF = {
    "fails": "fails",
    "unknown": "unknown",
    "value_note": "runs_with_value_note",
    "fallback": "runs_with_fallback",
    "ok": "runs",
}
VERDICTS = _table(  # worst first
    Word("fails", "fails", "FAIL", "\u2717", "fail"),
    Word("unknown", "unknown", "UNKNOWN", "?", "unknown"),
    Word("runs_with_value_note", "runs; values may differ", "VALUES", "\u2260", "warn"),
    Word("runs_with_fallback", "runs with fallback", "SLOW", "\u21aa", "warn"),
    Word("runs", "runs", "RUNS", "\u2713", "ok"),
)
VERDICT_ORDER = tuple(VERDICTS)

# --- Input variants: which inputs made a call (an op set's node word ``variant=``) -------------------
# ``given``: the inputs as the factory or the zoo gives them (what ``opcov check`` judges); every other
# word is a variant opcov adds itself, judged and reported apart. ``label`` completes "runs with ...".
INPUT_VARIANTS = _table(
    Word("given", "the given inputs", "given"),
    Word("padded_mask", "a padded attention mask", "padded mask"),
)
GIVEN = "given"

# --- The whole zoo: what became of one architecture in one mode (opcov.tracing.zoorun) ------------
ZOO_OUTCOMES = _table(  # worst first
    Word("cannot_build", "cannot build", "BUILD", "\u2717", "fail"),
    Word("cannot_trace", "cannot trace", "TRACE", "\u2717", "fail"),
    Word("traced", "traced", "OK", "\u2713", "ok"),
)


def worst(statuses, order) -> str:
    """The worst of ``statuses`` in ``order`` (a worst-first sequence of words)."""
    rank = {s: i for i, s in enumerate(order)}
    return min(statuses, key=lambda s: rank.get(s, len(order)))


def evidence_word(level: str) -> Word:
    """The ladder's word for ``level`` (or the observed word); NO_EVIDENCE for 'none' (or anything off it)."""
    return EVIDENCE.get(level) or (OBSERVED_WORD if level == OBSERVED_WORD.name else NO_EVIDENCE)


def evidence_name(level: str) -> str:
    """The level named in a sentence: 'probed evidence', 'registered evidence', 'no evidence'."""
    word = evidence_word(level)
    return word.label if word is NO_EVIDENCE else f"{word.short} evidence"


def weaker(level: str, than: str) -> bool:
    """Whether evidence ``level`` is weaker than ``than`` (anything off the ladder is weakest)."""
    rank = {s: i for i, s in enumerate(VERDICT_EVIDENCE_WORST_FIRST)}
    return rank.get(level, -1) < rank.get(than, -1)


# Verdicts and outcomes that say something runs: only these take an "unverified" qualifier.
RUNS = ("runs", "runs_with_value_note", "runs_with_fallback", "ok", "value_note", "fallback")


def _said(verdict: str) -> Word:
    """The word of a verdict ('runs_with_fallback') or of an op outcome ('fallback')."""
    return VERDICTS.get(verdict) or OUTCOMES.get(verdict) or NOT_JUDGED


def evidence_said(verdict: str, evidence: str) -> str:
    """How a verdict (or op outcome) names its evidence: 'probed'; 'registered, unverified' for one that
    says something runs; 'registered evidence' / 'no evidence' for one that does not (a missing kernel
    is still missing)."""
    word = evidence_word(evidence)
    return word.label if verdict in RUNS or word.name in (*PROVEN, NO_EVIDENCE.name) else evidence_name(evidence)


def verdict_qualifier(verdict: str, evidence: str) -> str:
    """'' on probed evidence (and for ops not judged), else ' (evidence_said)': an observed verdict says
    ' (observed on the device)', so that a model's run is told from op-by-op proof."""
    if evidence == "probed" or verdict == NOT_JUDGED.name:
        return ""
    return f" ({evidence_said(verdict, evidence)})"


def verdict_words(verdict: str, evidence: str) -> str:
    """What a verdict (or op outcome) says on its evidence: 'runs' only on probed evidence, else e.g.
    'runs (registered, unverified)', 'fails (registered evidence)'."""
    return _said(verdict).label + verdict_qualifier(verdict, evidence)


def verdict_icon(verdict: str, evidence: str) -> str:
    """The verdict's icon; a run resting on weaker evidence than probed takes its level's icon, never
    the check mark of proof."""
    if verdict in ("runs", "ok") and evidence not in PROVEN:
        return evidence_word(evidence).icon
    return _said(verdict).icon


def verdict_css(verdict: str, evidence: str) -> str:
    """The verdict's css class; a run resting on weaker evidence than probed takes its level's class."""
    if verdict in ("runs", "ok") and evidence not in PROVEN:
        return evidence_word(evidence).css
    return _said(verdict).css


# Evidence beyond the per-op levels above (opcov.verdict.observed, opcov.store.bundle): a model's own
# step run on the device outranks every op-level kind, and contributed data names its source.
OBSERVED = "observed"
OBSERVED_MEANING = (
    "this model's own step really ran on the backend's device ('opcov run'): what it dispatched, what the "
    "backend ran through its CPU fallback, and its values against CPU; the strongest evidence for that model"
)
CONTRIBUTED = "contributed"
CONTRIBUTED_MEANING = (
    "probed on someone else's hardware and ingested from a bundle ('opcov ingest'), with its source and date"
)

# Why a registered scan could not work out what a composite op (or its backward) reaches. The scan keeps
# its raw record in the data's ``why`` ("reach unresolved: RuntimeError: shape '[1, 1]' is invalid for
# input of size 9"): the exception it met calling the op on sample inputs. A user is told what could not be
# decided and why in words (reach_words); the raw text stays in the data and the JSON's ``detail``.
REACH_MARKS = ("backward reach unresolved: ", "reach unresolved: ")
# What the recording's error says, by a needle in it (first match), in words; else "no sample input fitted".
REACH_REASONS = (
    ("recording crashed the process", "every call of it crashed the process"),
    ("input synthesis: no value for", "takes an argument no input can give (a Storage, a process group, a string)"),
    ("sparse", "an op of sparse tensors (the dense kernel only raises)"),
    ("quantiz", "an op of quantized tensors"),
    ("nested", "an op of nested tensors"),
    ("mkldnn", "an op of mkldnn tensors"),
    ("InferenceMode", "forward-mode AD internals (dual tensors)"),
    ("reached no op through the dispatcher", "no kernel on meta, and its cpu kernel computes alone (reaches no op)"),
    ("attempted to run this operator with Meta tensors", "no kernel on meta, and no cpu call fits"),
)
_NO_FIT = "none of the sample inputs the scan made could run it"
_REACH_WORDS = {
    "reach unresolved: ": "which kernels this composite op calls is unknown",
    "backward reach unresolved: ": "which kernels its backward calls is unknown",
}
_BACKWARD_CAUSES = {
    "forward could not be called on meta": "its forward could not be run, so there was no backward to follow",
    "not recorded": "the scan made no record of it",
}


def reach_cause(error: str) -> str:
    """Why a recording failed, in a few words, from its raw error (REACH_REASONS; else no input fitted)."""
    for needle, words in REACH_REASONS:
        if needle.lower() in error.lower():
            return words
    return _BACKWARD_CAUSES.get(error.strip(), _NO_FIT)


def reach_words(why, direction: str = "") -> str:
    """A scan's ``why`` in words for a user: each 'reach unresolved: <raw error>' part (forward or backward;
    only ``direction``'s where one is given) as what could not be decided and why, any other text as it is;
    '' for none. The raw error is what the data and the JSON's ``detail`` keep."""
    text = str(why or "")
    if "reach unresolved: " not in text:  # most records: nothing to word
        return text
    return _reach_words(text, direction)


@lru_cache(maxsize=1 << 13)
def _reach_words(text: str, direction: str) -> str:
    """reach_words of a text that holds a reach record (the same records recur on many pages)."""
    cuts = sorted({(i, mark) for mark in REACH_MARKS for i in _starts(text, mark) if not _inside_longer(text, i, mark)})
    if not cuts:
        return text
    out = [text[: cuts[0][0]].rstrip("; ")] if cuts[0][0] else []
    for k, (i, mark) in enumerate(cuts):
        error = text[i + len(mark) : cuts[k + 1][0] if k + 1 < len(cuts) else len(text)].rstrip("; ")
        if not direction or (mark == REACH_MARKS[0]) == (direction == "backward"):
            out.append(f"{_REACH_WORDS[mark]}: {reach_cause(error)}")
    return "; ".join(dict.fromkeys(p for p in out if p))


def _starts(text: str, mark: str):
    """Where ``mark`` begins in ``text``: at its start or after '; '."""
    at = text.find(mark)
    while at >= 0:
        if at == 0 or text[:at].endswith("; "):
            yield at
        at = text.find(mark, at + 1)


def _inside_longer(text: str, at: int, mark: str) -> bool:
    """Whether 'reach unresolved: ' at ``at`` is the tail of 'backward reach unresolved: '."""
    return mark == REACH_MARKS[1] and text[:at].endswith("backward ")
