"""OpInfo's samples: PyTorch's own per-op sample inputs (torch.testing._internal), read the same way by
every producer that uses them. probe runs them as cases (opcov.probe.cases), scan reads which ops and
Python names they reach (opcov.scan.declared, opcov.scan.pynames).

Samples are drawn from seeds derived from an id (``seed_of``: crc32, the same in every process), so a
worker, a shard on another machine and a resumed run see the same inputs.
"""

from __future__ import annotations

import hashlib
import os
import random
import zlib

from opcov.errors import UsageError
from opcov.torchenv import cache_lock, import_torch, read_cache, write_cache

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


def aten_names(op) -> tuple[str, ...]:
    """The aten base names an OpInfo is about ('aten::mul', its aliases'), for blame."""
    names = {f"aten::{op.aten_name}", f"aten::{op.name.split('.')[-1]}"}
    names |= {f"aten::{a.name}" for a in getattr(op, "aliases", ()) or ()}
    return tuple(sorted(names))


def _dtype_names(dtypes) -> list[str]:
    return sorted(str(d).rsplit(".", 1)[-1] for d in dtypes)


def _index_entry(op) -> dict:
    return {
        "name": op.name,
        "aten_name": op.aten_name,
        "aten_names": list(aten_names(op)),
        "cpu": _dtype_names(op.supported_dtypes("cpu")),
        # the dtypes a backward runs at on CPU, where the OpInfo differentiates at all
        "cpu_backward": _dtype_names(op.supported_backward_dtypes("cpu")) if op.supports_autograd else [],
    }


def _database_key(torch) -> str:
    """The torch version and the size and time of every file the OpInfo database is read from (found
    without importing it): a reinstalled or edited torch makes a new key."""
    import importlib.util

    spec = importlib.util.find_spec("torch.testing._internal.common_methods_invocations")
    paths = [spec.origin] if spec and spec.origin else []
    folder = os.path.join(os.path.dirname(paths[0]), "opinfo") if paths else ""
    for root, _, files in sorted(os.walk(folder)):
        paths += [os.path.join(root, f) for f in sorted(files) if f.endswith(".py")]
    h = hashlib.sha256(str(torch.__version__).encode())
    for path in paths:
        st = os.stat(path)
        h.update(f"\0{path}\0{st.st_size}\0{st.st_mtime_ns}".encode())
    return h.hexdigest()[:16]


def opinfo_index() -> dict:
    """What a probe's parent selects its groups by, without the OpInfo database: {"ops": OpInfo id ->
    its name, aten_name, aten names (``aten_names``) and the dtypes CPU supports forward and backward;
    "lists": each OPINFO_LISTS list's length}. Importing the database costs about 3 s of CPU, and only the
    workers, which run the samples, need it; so this is recorded once per torch install (the cache
    folder, keyed by the database's files) and read back after."""
    torch = import_torch()
    name = f"opinfo-index-torch{torch.__version__}.json"
    key = _database_key(torch)
    index = read_cache(name, {})
    if index.get("key") != key:
        with cache_lock(name):  # another process may be recording it: wait, then read what it wrote
            index = read_cache(name, {})
            if index.get("key") != key:
                ops = {oid: _index_entry(op) for oid, op in opinfos().items()}  # or says what to install
                from torch.testing._internal import common_methods_invocations as cmi

                index = {"key": key, "ops": ops, "lists": {lst: len(getattr(cmi, lst, ())) for lst in OPINFO_LISTS}}
                write_cache(name, index)
    return index


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
