"""Probed coverage: run OpInfo samples on a device against a CPU reference, per dtype, fwd and bwd.

``cases`` turns OpInfo samples into cases with stable ids and seeds (``replay``: calls captured
from zoo models), ``record`` notes which aten overloads a case dispatches, ``compare`` judges a
device result against the CPU reference, ``worker`` runs cases in a spawned process and tells the
parent what it is doing through ``flight``, ``pool`` keeps the workers, deadlines and restarts,
``journal`` and ``progress`` what finished, ``runner`` ties them into a probe with resume and
shards, ``results`` folds case records into per-op cells, and ``merge`` combines files.
"""

# The probed vocabulary, worst first: a cell over several cases takes the first in this order.
# pass outranks not_comparable / no_reference: a case that was judged says more than one that
# could not be, and neither can hide a failure.
STATUSES = ("crash", "timeout", "error", "unsupported", "mismatch", "pass_low_precision", "pass",
            "not_comparable", "no_reference", "skipped")
FAILURES = frozenset(STATUSES[:5])
RANK = {s: i for i, s in enumerate(STATUSES)}

DIRECTIONS = ("forward", "backward")
DEFAULT_DTYPES = ("float32", "bfloat16", "float16", "float64", "int64", "bool")
KNOWN_DTYPES = ("float64", "float32", "bfloat16", "float16", "complex128", "complex64", "int64",
                "int32", "int16", "int8", "uint8", "bool")
