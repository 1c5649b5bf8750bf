"""What a sharded step needs beyond a device's kernels, read once and kept as JSON under
``coverage/distributed/``: DTensor's sharding strategies per torch release, and the process-group backend
each device uses. Written by opcov.scan.sharding, read by opcov.verdict.distributed. Torch-free.

``dtensor-torch-<torch>.json`` (kind ``dtensor_sharding``): for every aten overload of that torch, how
DTensor handles a call with a DTensor argument, read from its op dispatcher and sharding propagator
(``DTensor._op_dispatcher``): ``handler`` (a custom handler in the dispatcher), ``strategy``
(``op_strategy_funcs``), ``single_dim`` (``op_single_dim_strategy_funcs``), ``rule`` (``op_to_rules``),
``decomposition`` (none of those, but DTensor propagates through the op's decomposition: it is in
torch._decomp's table or CompositeImplicitAutograd; the decomposition's own ops need strategies, decided at
run time), or ``none``: DTensor raises "does not have a sharding strategy registered", on every device.
Device-independent: a backend is judged with the file of its own torch release.

``process-group-<backend>.json`` (kind ``process_group``): which process-group backend the device uses
(``name``), where that was read (``read``), and per c10d op (``collectives``) what that backend does with it:
``runs`` (a call ran), ``raises`` (a call raised, or the method only raises), ``implemented`` (the backend's
Python class defines the method), ``not_defined`` (it does not: the C++ base's default raises), each with
``why``; per reduce op too where calls were made (``reduce_ops``). ``implementation``: ``run`` (the group
was run here: its states are probed), ``python`` (a Python class whose methods torch.distributed calls
directly, bypassing the c10d ops' kernels: its states decide the collectives). ``readable: false`` with
``why`` where it cannot be read here (a compiled backend on hardware opcov does not have).
"""

from __future__ import annotations

import os
import re

from opcov.errors import DataError
from opcov.store import layout, output, strictjson

FOLDER = layout.DISTRIBUTED
SHARDING_KIND = "dtensor_sharding"
GROUP_KIND = "process_group"
MAX_BYTES = 8 << 20
HOW = ("handler", "strategy", "single_dim", "rule", "decomposition", "none")
HANDLED = HOW[:4]  # DTensor has its own answer for the op
GROUP_STATES = ("runs", "implemented", "raises", "not_defined")
# The process-group method each c10d op's kernel calls (torch/csrc/distributed/c10d/Ops.cpp: every
# ``IMPL_*`` kernel calls ``process_group->getBackend(device)->METHOD``).
METHODS = {
    "c10d::allreduce_": "allreduce",
    "c10d::allreduce_coalesced_": "allreduce_coalesced",
    "c10d::allgather_": "allgather",
    "c10d::_allgather_base_": "_allgather_base",
    "c10d::allgather_coalesced_": "allgather_coalesced",
    "c10d::allgather_into_tensor_coalesced_": "allgather_into_tensor_coalesced",
    "c10d::reduce_scatter_": "reduce_scatter",
    "c10d::_reduce_scatter_base_": "_reduce_scatter_base",
    "c10d::reduce_scatter_tensor_coalesced_": "reduce_scatter_tensor_coalesced",
    "c10d::alltoall_": "alltoall",
    "c10d::alltoall_base_": "alltoall_base",
    "c10d::broadcast_": "broadcast",
    "c10d::reduce_": "reduce",
    "c10d::gather_": "gather",
    "c10d::scatter_": "scatter",
    "c10d::send": "send",
    "c10d::recv_": "recv",
    "c10d::recv_any_source_": "recv_anysource",
    "c10d::barrier": "barrier",
    "c10d::monitored_barrier_": "monitored_barrier",
}
_SHARDING_NAME = re.compile(r"^dtensor-torch-(?P<torch>.+)\.json$")


def sharding_path(torch_version: str, coverage_dir: str) -> str:
    return os.path.join(coverage_dir, FOLDER, f"dtensor-torch-{torch_version}.json")


def group_path(backend: str, coverage_dir: str) -> str:
    return os.path.join(coverage_dir, FOLDER, f"process-group-{layout.plain_name(backend)}.json")


def pick_sharding(coverage_dir: str, torch_version: str) -> str | None:
    """The DTensor file of ``torch_version`` (that build, else another build of the release), else None:
    another release's strategies differ, so none is taken in its place."""
    folder = os.path.join(coverage_dir, FOLDER)
    found = sorted(f for f in layout.listdir(folder) if _SHARDING_NAME.match(f)) if os.path.isdir(folder) else []
    made = {f: _SHARDING_NAME.match(f).group("torch") for f in found}  # type: ignore[union-attr]
    exact = [f for f in found if made[f] == torch_version]
    same = [f for f in found if layout.same_torch(made[f], torch_version)]
    chosen = (exact or same)[-1:]
    return os.path.join(folder, chosen[0]) if chosen else None


def load(path: str, kind: str) -> dict:
    """A file of ``kind`` (SHARDING_KIND or GROUP_KIND), checked; a one-line DataError naming it otherwise."""
    doc = strictjson.load(path, limit=MAX_BYTES, what=kind.replace("_", " "))
    bad = problems(doc, kind)
    if bad:
        raise DataError(f"{path}: {bad[0]} (regenerate it: {_command(doc)})")
    return doc


def _command(doc) -> str:
    prov = doc.get("provenance") if isinstance(doc, dict) else None
    return str((prov or {}).get("command") or "python -m opcov.scan.sharding")


def problems(doc, kind: str) -> list[str]:
    """What is wrong with a document of ``kind``, [] when nothing."""
    if not isinstance(doc, dict) or doc.get("kind") != kind:
        return [f"not a {kind} file: its 'kind' must be {kind!r}"]
    prov = doc.get("provenance")
    if not isinstance(prov, dict) or not all(isinstance(prov.get(k), str) for k in ("torch", "command", "created")):
        return ["provenance must name torch, command and created"]
    if kind == SHARDING_KIND:
        ops = doc.get("ops")
        if not isinstance(ops, dict) or any(not isinstance(k, str) or v not in HOW for k, v in ops.items()):
            return [f"ops must map op names to one of {', '.join(HOW)}"]
        return []
    calls = doc.get("collectives")
    if not isinstance(doc.get("backend"), str) or not isinstance(doc.get("readable"), bool):
        return ["a process-group file names its backend and says whether it could be read (readable)"]
    if not isinstance(calls, dict):
        return ["collectives must be a mapping of c10d op to {state, why}"]
    for op, rec in calls.items():
        if not isinstance(rec, dict) or rec.get("state") not in GROUP_STATES or not isinstance(rec.get("why"), str):
            return [f"collectives.{op} must be {{state: one of {', '.join(GROUP_STATES)}, why: text}}"]
        reduce_ops = rec.get("reduce_ops", {})
        if not isinstance(reduce_ops, dict) or any(v not in GROUP_STATES for v in reduce_ops.values()):
            return [f"collectives.{op}.reduce_ops must map reduce ops to one of {', '.join(GROUP_STATES)}"]
    return []


def save(doc: dict, path: str) -> None:
    """Write a checked document (keys sorted, one item a line), through the output guard: a file already at
    ``path`` must be one of these. Its ``evidence`` key says what it is, as the other JSON data's does."""
    bad = problems(doc, doc.get("kind", ""))
    if bad:
        raise DataError(f"{path}: refusing to write: {bad[0]}")
    doc = {**doc, "evidence": doc["kind"]}
    output.check_output(path, kind=output.DISTRIBUTED)
    os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
    output.write_atomic(path, strictjson.dumps(doc))


def group_for(coverage_dir: str, backend: str) -> dict | None:
    """The process-group file of ``backend`` under coverage_dir (or the bundled data), None when there is none."""
    for folder in (coverage_dir, layout.beside_bundled(coverage_dir)):
        if folder and os.path.isfile(group_path(backend, folder)):
            return load(group_path(backend, folder), GROUP_KIND) | {"_path": group_path(backend, folder)}
    return None


def sharding_for(coverage_dir: str, torch_version: str) -> dict | None:
    """The DTensor file of ``torch_version`` under coverage_dir (or the bundled data), None when there is none."""
    for folder in (coverage_dir, layout.beside_bundled(coverage_dir)):
        path = pick_sharding(folder, torch_version) if folder else None
        if path:
            return load(path, SHARDING_KIND) | {"_path": path}
    return None
