"""OpInfo's samples: PyTorch's own per-op sample inputs (torch.testing._internal), read the same way by
every producer that uses them. probe runs them as cases (opcov.probe.cases), scan reads which ops and
Python names they reach (opcov.scan.declared, opcov.scan.pynames).

Samples are drawn from seeds derived from an id (``seed_of``: crc32, the same in every process), so a
worker, a shard on another machine and a resumed run see the same inputs.
"""

from __future__ import annotations

import random
import zlib

from opcov.errors import UsageError

# The OpInfo lists of torch.testing._internal.common_methods_invocations read.
OPINFO_LISTS = (
    "op_db",
    "foreach_unary_op_db",
    "foreach_binary_op_db",
    "foreach_pointwise_op_db",
    "foreach_reduce_op_db",
    "foreach_other_op_db",
)


def seed_of(ident: str) -> int:
    """A stable 31-bit seed from an id (crc32; Python's hash() is salted per process)."""
    return zlib.crc32(ident.encode()) & 0x7FFFFFFF


def seed_all(ident: str) -> None:
    seed_host(seed_of(ident))


def seed_host(s: int) -> None:
    """Seed the host RNGs samples are drawn from (torch's CPU generator, random, numpy).

    Not ``torch.manual_seed``: on a machine where CUDA/XPU/MTIA are present but not initialised
    it queues a callback with a formatted stack per accelerator, about 0.2 ms a call, paid
    several times per case."""
    import torch

    torch.default_generator.manual_seed(s)
    random.seed(s)
    try:
        import numpy

        numpy.random.seed(s)
    except ImportError:
        pass


def opinfo_id(op) -> str:
    return op.name + (f".{op.variant_test_name}" if op.variant_test_name else "")


_INDEX: dict | None = None


def opinfos() -> dict:
    """OpInfo id -> OpInfo over OPINFO_LISTS (needs the expecttest package)."""
    global _INDEX
    if _INDEX is None:
        try:
            from torch.testing._internal import common_methods_invocations as cmi
        except ImportError as exc:
            raise UsageError(
                f"cannot load PyTorch's OpInfo database ({exc}); install the 'expecttest' package"
            ) from None
        index = {}
        for lst in OPINFO_LISTS:
            for op in getattr(cmi, lst, ()):
                index.setdefault(opinfo_id(op), op)
        _INDEX = index
    return _INDEX


def opinfo_samples(op, dtype, requires_grad: bool, device: str = "cpu"):
    """The samples ``op.sample_inputs(device, dtype, requires_grad)`` yields, the same values.

    OpInfo's iterator re-seeds the RNGs with the test suite's SEED before each sample, and calls
    ``inspect.stack()`` twice per call to find a running unittest (it reads the source of every
    frame: 10 ms per group in a worker). This does the re-seeding and skips the stack walk; the
    probe never runs inside a unittest."""
    from torch.testing._internal.common_utils import SEED

    it = iter(op.sample_inputs_func(op, device, dtype, requires_grad))
    while True:
        seed_host(SEED)
        try:
            yield next(it)
        except StopIteration:
            return
