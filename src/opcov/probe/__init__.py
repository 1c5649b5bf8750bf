"""Probed coverage: run OpInfo samples on a device against a CPU reference, per dtype, fwd and bwd.

``cases`` turns OpInfo samples into cases with stable ids and seeds (``replay``: calls captured
from zoo models; both build ``sample``'s Sample and Loaded), ``record`` notes which aten overloads
a case dispatches, ``compare`` judges a device result against the CPU reference, ``execute`` runs
one case and fills its ``caserecord.CaseRecord`` (the one record type the pipe, the flight
recorder, the journal and ``results`` share), ``worker`` is the spawned process around it, telling
the parent what it is doing through ``flight``, ``pool`` keeps the workers, deadlines and restarts,
``journal`` and ``progress`` what finished, ``ledger`` the groups known to crash or hang (run
first next time), ``runner`` ties them into a probe with resume and shards, ``tiers`` makes the
harder input cases, ``results`` folds case records into per-op cells, ``disposition`` gives every
op no case reached its reason, and ``merge`` combines files.
"""

from opcov.vocab import PROBED_FAILURES, PROBED_RANK, PROBED_STATUSES

# The probed vocabulary, worst first (opcov.vocab): a cell over several cases takes the first.
STATUSES = PROBED_STATUSES
FAILURES = PROBED_FAILURES
RANK = PROBED_RANK

DIRECTIONS = ("forward", "backward")
DEFAULT_DTYPES = ("float32", "bfloat16", "float16", "float64", "int64", "bool")
KNOWN_DTYPES = (
    "float64",
    "float32",
    "bfloat16",
    "float16",
    "complex128",
    "complex64",
    "int64",
    "int32",
    "int16",
    "int8",
    "uint8",
    "bool",
)
