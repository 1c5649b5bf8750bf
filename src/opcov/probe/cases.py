"""Case sources: OpInfo samples (and narrowing canaries) as groups of cases with stable ids.

A *group* is one OpInfo (or canary) at one dtype: ``"mul|float32"``. Its samples are generated
from a seed derived from the group id, so every process (a worker, a shard on another
machine, a resumed run) sees the same inputs. A *case* is one sample of a group:
``"mul|float32|3"``; each case is run with RNG state seeded from its own id. Shards split
by group id, since the number of samples is only known once a worker generates them.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from opcov.errors import UsageError
from opcov.probe import DEFAULT_DTYPES, DIRECTIONS, argsweep, composites, replay, schemacases
from opcov.probe.sample import Loaded, Sample, factory_device_kw
from opcov.probe.tiers import TIERS, tier_samples
from opcov.sources.opinfo import aten_names, opinfo_index, opinfo_samples, opinfos, seed_all, seed_of

CANARY_PREFIX = "canary."


@dataclass(frozen=True)
class Group:
    id: str  # "<source>|<dtype>"
    source: str  # OpInfo id ("mul", "nn.functional.conv2d", "max.reduction_with_dim") or canary id
    dtype: str
    backward: bool  # generate samples with requires_grad and run the backward
    tiers: tuple = ()  # input tiers (probe.tiers): one harder case each, after the samples
    ops: tuple = ()  # a schema group's ops (probe.schemacases): one case each
    all_samples: bool = False  # a harder case of every sample each tier changes, not only the first
    on: tuple = ()  # a trace group's steps run on the device too: ((mode, (op, ...)), ...) (replay.ondevice)
    device: str = ""  # the device type those steps run on
    spec: str = ""  # a replayed op set's model (replay.Target): what rebuilds it
    modes: tuple = ()  # and the modes of its op sets (the steps captured); () with spec: both
    known: str = ""  # a sweep group (probe.argsweep): the probed file whose classes it leaves out
    composites: tuple = ()  # a trace group's overridden composite ops (probe.composites): their calls kept too

    def as_dict(self) -> dict:
        d = {
            "id": self.id,
            "source": self.source,
            "dtype": self.dtype,
            "backward": self.backward,
            "tiers": list(self.tiers),
        }
        if self.ops:
            d["ops"] = list(self.ops)
        if self.all_samples:
            d["all_samples"] = True
        if self.on:
            d["on"] = {"device": self.device, "modes": {mode: list(ops) for mode, ops in self.on}}
        if self.spec:
            d["spec"], d["modes"] = self.spec, list(self.modes)
        if self.known:
            d["known"] = self.known
        if self.composites:
            d["composites"] = list(self.composites)
        return d


def named_bases() -> dict[str, set]:
    """aten base name ('mul') -> the ids of the OpInfos about it."""
    out: dict[str, set] = {}
    for oid, facts in opinfo_index()["ops"].items():
        for name in facts["aten_names"]:
            out.setdefault(name.split("::", 1)[1], set()).add(oid)
    return out


def list_counts() -> dict:
    return dict(opinfo_index()["lists"])


# ---------------------------------------------------------------- canaries (silent narrowing)


def _canaries():
    """Hand-made cases whose values a device that narrows int64 to int32 or float64 to float32
    gets visibly wrong: id -> (dtype, callable, list of (input, args, kwargs))."""
    import torch

    big = torch.tensor([2**31 + 7, -(2**33) - 5, 2**40 + 3, 5], dtype=torch.int64)
    small = torch.tensor([3, 2**31 - 1, -7, 2**32], dtype=torch.int64)
    fine = torch.tensor([1 + 2**-40, 2**25 + 0.5, -(1 + 2**-30), 1e-300], dtype=torch.float64)
    fine2 = torch.tensor([2**-45, 0.25, 2**-33, 3.0], dtype=torch.float64)
    mat = torch.arange(16, dtype=torch.float64).reshape(4, 4) * (1 + 2**-35)
    # integer division and shifts of values past float32's 2**24 (a hash bucket, an index's row): a device that
    # divides through float32 (PyTorch/XLA's int64 div, floor_divide and >>) rounds them; by a tensor and a scalar
    hashed = torch.tensor([2**31 + 7, -(2**33) - 5, 2**40 + 3, 218962583], dtype=torch.int64)
    by = torch.tensor([3, 7, 1000, 16], dtype=torch.int64)
    return {
        "canary.int64_div_floor": (
            "int64",
            torch.div,
            [(hashed, (by,), {"rounding_mode": "floor"}), (hashed, (16,), {"rounding_mode": "floor"})],
        ),
        "canary.int64_div_trunc": (
            "int64",
            torch.div,
            [(hashed, (by,), {"rounding_mode": "trunc"}), (hashed, (7,), {"rounding_mode": "trunc"})],
        ),
        "canary.int64_floor_divide": ("int64", torch.floor_divide, [(hashed, (by,), {}), (hashed, (16,), {})]),
        "canary.int64_rshift": ("int64", torch.bitwise_right_shift, [(hashed, (4,), {}), (hashed, (by % 8,), {})]),
        "canary.int64_add": ("int64", torch.add, [(big, (small,), {})]),
        "canary.int64_mul": ("int64", torch.mul, [(big, (torch.tensor([3, 2, -1, 2**20]),), {})]),
        "canary.int64_sum": ("int64", torch.sum, [(big, (), {})]),
        "canary.int64_cumsum": ("int64", torch.cumsum, [(big, (0,), {})]),
        "canary.int64_clone": ("int64", torch.clone, [(big, (), {})]),
        "canary.float64_add": ("float64", torch.add, [(fine, (fine2,), {})]),
        "canary.float64_mul": ("float64", torch.mul, [(fine, (fine2,), {})]),
        "canary.float64_sum": ("float64", torch.sum, [(fine, (), {})]),
        "canary.float64_cumsum": ("float64", torch.cumsum, [(fine, (0,), {})]),
        "canary.float64_mm": ("float64", torch.mm, [(mat, (mat,), {})]),
        "canary.float64_clone": ("float64", torch.clone, [(fine, (), {})]),
    }


_CANARY_ATEN = {
    "div_floor": "aten::div",
    "div_trunc": "aten::div",
    "floor_divide": "aten::floor_divide",
    "rshift": "aten::bitwise_right_shift",
    "add": "aten::add",
    "mul": "aten::mul",
    "sum": "aten::sum",
    "cumsum": "aten::cumsum",
    "clone": "aten::clone",
    "mm": "aten::mm",
}


def canary_ids() -> dict:
    """Canary id -> (dtype, aten base name), without building tensors."""
    out = {}
    for dt in ("int64", "float64"):
        division = ("div_floor", "div_trunc", "floor_divide", "rshift") if dt == "int64" else ()
        for name in ("add", "mul", "sum", "cumsum", "clone") + division + (("mm",) if dt == "float64" else ()):
            out[f"{CANARY_PREFIX}{dt}_{name}"] = (dt, _CANARY_ATEN[name])
    return out


def load_group(group: dict) -> Loaded:
    """Generate a group's samples (seeded from the group id). Raises what sample generation raises."""
    import torch

    source, dtype = group["source"], getattr(torch, group["dtype"])
    seed_all(group["id"])
    if source.startswith(replay.TRACE_PREFIX):
        return replay.load(group)
    if source.startswith(schemacases.SCHEMA_PREFIX):
        return schemacases.load(group)
    if source.startswith(composites.PREFIX):
        return composites.load(group)
    if source.startswith(argsweep.PREFIX):
        return argsweep.load(group)
    if source.startswith(CANARY_PREFIX):
        dt, fn, raw = _canaries()[source]
        return Loaded(fn, [Sample(i.clone(), a, k) for i, a, k in raw], (canary_ids()[source][1],), False, True, True)
    op = opinfos()[source]
    if group.get("host_free"):  # another worker found this OpInfo's samples keep nothing on CPU
        _HOST_FREE.add(source)
    samples = [
        Sample(s.input, s.args, s.kwargs, s.output_process_fn_grad)
        for s in opinfo_samples(op, dtype, group["backward"])
    ]
    for sample, leaves in zip(samples, host_leaves(source, op, dtype, group["backward"], len(samples))):
        sample.host_leaves = leaves
    samples += tier_samples(samples, group.get("tiers", ()), bool(group.get("all_samples")))
    for sample in samples:  # a factory OpInfo (full, eye, triu_indices, the windows) names the device it makes on
        sample.device_kw = factory_device_kw(sample.kwargs, "cpu")
    # has_nondeterministic_output: an OpInfo field that torch 2.9 (PyTorch/XLA's) does not have yet
    return Loaded(
        op.op,
        samples,
        aten_names(op),
        bool(getattr(op, "has_nondeterministic_output", False)),
        torch.float64 in op.supported_dtypes("cpu"),
        False,
        bool(getattr(op, "supports_out", False)),
    )


_HOST_FREE: set = set()  # OpInfos whose samples were found to keep nothing on CPU


def host_free(source: str) -> bool:
    """Whether this process found ``source``'s samples to keep nothing on CPU (the pool passes it on
    to the other workers as the group's ``host_free``, sparing them the meta generation)."""
    return source in _HOST_FREE


def host_leaves(source: str, op, dtype, requires_grad: bool, n: int) -> list:
    """Per sample, the leaves the OpInfo makes on CPU whatever device it is asked for (tensor_split's
    indices, which the op requires on CPU): generating the samples for "meta" shows them. The
    device run must leave those on CPU, as PyTorch's own device tests do. Cached per OpInfo when
    none are found, and passed on to the other workers (``host_free``): generating the samples a
    second time costs as much as the first, 5-20 ms a group; 4 OpInfos of torch 2.13 have such leaves."""
    import torch
    import torch.utils._pytree as pytree

    none = [frozenset()] * n
    if source in _HOST_FREE:
        return none
    try:
        metas = list(opinfo_samples(op, dtype, requires_grad, device="meta"))
    except Exception:  # noqa: BLE001 - value-dependent sample code cannot run on meta: move all
        return none
    if len(metas) != n:
        return none
    out = [
        frozenset(
            i
            for i, t in enumerate(pytree.tree_leaves((m.input, m.args, m.kwargs)))
            if isinstance(t, torch.Tensor) and t.device.type == "cpu"
        )
        for m in metas
    ]
    if not any(out):
        _HOST_FREE.add(source)
    return out


# ---------------------------------------------------------------- selection (parent side)


def parse_dtypes(text: str | None, known) -> tuple[str, ...]:
    if not text:
        return DEFAULT_DTYPES
    out = []
    for d in (x.strip() for x in text.split(",")):
        if d not in known:
            raise UsageError(f"unknown dtype {d!r} in --dtypes; choose from {', '.join(known)}")
        if d not in out:
            out.append(d)
    return tuple(out)


def parse_directions(text: str | None) -> tuple[str, ...]:
    if not text:
        return DIRECTIONS
    out = []
    for d in (x.strip() for x in text.split(",")):
        if d not in DIRECTIONS:
            raise UsageError(f"unknown direction {d!r} in --directions; choose from forward, backward")
        if d not in out:
            out.append(d)
    return tuple(sorted(out, key=DIRECTIONS.index))


def parse_shard(text: str | None) -> tuple[int, int] | None:
    if not text:
        return None
    m = re.fullmatch(r"\s*(\d+)\s*/\s*(\d+)\s*", text)
    if not m or not (1 <= int(m.group(1)) <= int(m.group(2))):
        raise UsageError(f"bad --shard {text!r}; expected I/N with 1 <= I <= N, e.g. 1/4")
    return int(m.group(1)), int(m.group(2))


def in_shard(group_id: str, shard) -> bool:
    return shard is None or seed_of(group_id) % shard[1] == shard[0] - 1


def parse_tiers(text: str | None) -> tuple[str, ...]:
    """--tiers: input tiers (probe.tiers) as a comma-separated list, 'all' (the default) or 'none'."""
    if text is None or text.strip() == "all":
        return TIERS
    if text.strip() == "none":
        return ()
    out = []
    for t in (x.strip() for x in text.split(",")):
        if t not in TIERS:
            raise UsageError(f"unknown input tier {t!r} in --tiers; choose from {', '.join(TIERS)}, all, none")
        if t not in out:
            out.append(t)
    return tuple(sorted(out, key=TIERS.index))


def parse_traces(text: str | None) -> tuple:
    """--traces: 'zoo' (every zoo model), or comma-separated zoo names and factories ('pkg.mod:fn', a
    replay.Target named as 'opcov trace' names the model it builds: 'pkg.mod.fn', float32, both modes)."""
    if not text:
        return ()
    names = replay.zoo_names()
    if text.strip() == "zoo":
        return tuple(sorted(names))
    out: list = []
    for n in (x.strip() for x in text.split(",")):
        if ":" in n and n.count(":") == 1 and all(n.split(":")):
            module, fn = n.split(":")
            out.append(replay.Target(f"{module}.{fn}", n, "float32", ("inference", "training")))
        elif n not in names:
            raise UsageError(
                f"--traces: {n!r} is neither a zoo model nor a factory (pkg.mod:fn); choose 'zoo' or from "
                f"{', '.join(sorted(names))}"
            )
        else:
            out.append(n)
    return tuple(out)


def select_groups(
    pattern: str | None,
    *,
    core_bases=None,
    dtypes,
    directions,
    shard=None,
    canaries: bool = True,
    traces=(),
    tiers=(),
    schema_ops=(),
    all_samples=False,
    ondevice=None,
    sweep_of: str = "",
    composite_ops=(),
) -> list[Group]:
    """The groups a probe runs, sorted by id. ``pattern`` is searched in the OpInfo id and in
    ``aten::<aten_name>`` (for a schema case, in the overload's name, ``aten::add.Scalar``);
    ``core_bases`` (a set of aten base names) keeps core ATen OpInfos and schema ops; ``ondevice`` maps a
    traced model to what its trace group also runs on the device (``replay.ondevice``); OpInfo groups
    get one harder case per input tier of ``tiers`` (forward only; with ``all_samples`` one per
    sample the tier changes); ``schema_ops`` (overload names,
    ``probe.schemacases.targets``) get one case each made from their schemas. ``sweep_of`` (a probed
    file): each selected OpInfo's group is its argument sweep instead (probe.argsweep), leaving out the
    classes that file holds. ``composite_ops`` (``probe.composites.overridden``): each selected OpInfo about
    one of them also gets a ``composite.<opinfo>`` group, its samples' calls of those overloads as cases."""
    rx = None
    if pattern:
        try:
            rx = re.compile(pattern)
        except re.error as exc:
            raise UsageError(f"bad --ops pattern {pattern!r}: {exc}") from None
    backward = "backward" in directions
    groups = []
    for oid, op in sorted(opinfo_index()["ops"].items()):  # not the database: the workers load that
        keys = (oid, f"aten::{op['aten_name']}")
        if rx and not any(rx.search(k) for k in keys):
            continue
        if core_bases is not None and op["aten_name"] not in core_bases and op["name"] not in core_bases:
            continue
        cpu = set(op["cpu"])
        bwd = set(op["cpu_backward"]) if backward else set()
        for dt in dtypes:
            if dt in cpu and sweep_of:
                sid = argsweep.PREFIX + oid
                groups.append(Group(f"{sid}|{dt}", sid, dt, dt in bwd, known=sweep_of))
            elif dt in cpu:
                groups.append(
                    Group(
                        f"{oid}|{dt}",
                        oid,
                        dt,
                        dt in bwd,
                        tuple(tiers) if "forward" in directions else (),
                        all_samples=bool(all_samples and tiers and "forward" in directions),
                    )
                )
            overloads = composites.of_opinfo(op["aten_names"], composite_ops) if dt in cpu and not sweep_of else ()
            if overloads and "forward" in directions:
                sid = composites.PREFIX + oid
                groups.append(Group(f"{sid}|{dt}", sid, dt, dt in bwd, (), overloads))
    if canaries:
        for cid, (dt, aten) in sorted(canary_ids().items()):
            if dt not in dtypes or "forward" not in directions:
                continue
            if rx and not (rx.search(cid) or rx.search(aten)):
                continue
            if core_bases is not None and aten.split("::")[1] not in core_bases:
                continue
            groups.append(Group(f"{cid}|{dt}", cid, dt, False))
    if traces and "forward" in directions:
        model_dtypes = replay.zoo_names()
        for trace in traces:
            target = trace if isinstance(trace, replay.Target) else None
            name = target.name if target else trace
            dtype = target.dtype if target else model_dtypes[name]
            sid = f"{replay.TRACE_PREFIX}{name}"
            if dtype in dtypes and core_bases is None:
                # the pattern names the trace ('^trace\.'): every call; else it selects the calls replayed
                only = () if not rx or rx.search(sid) else (pattern,)
                on = (ondevice or {}).get(name) or {}
                groups.append(
                    Group(
                        f"{sid}|{dtype}",
                        sid,
                        dtype,
                        "backward" in directions,  # a forward call whose inputs required grad: its backward too
                        (),
                        only,
                        on=tuple((mode, tuple(ops)) for mode, ops in sorted((on.get("modes") or {}).items())),
                        device=on.get("device", ""),
                        spec=target.spec if target else "",
                        modes=target.modes if target else (),
                        composites=tuple(composite_ops),
                    )
                )
    if schema_ops and "forward" in directions:
        keep = [
            n
            for n in schema_ops
            if not (rx and not rx.search(n))
            and (core_bases is None or n.split("::", 1)[1].split(".", 1)[0] in core_bases)
        ]
        for dt in schemacases.SCHEMA_DTYPES:
            if dt in dtypes:
                for sid, names in sorted(schemacases.chunks(keep).items()):
                    groups.append(Group(f"{sid}|{dt}", sid, dt, False, (), tuple(names)))
    if not groups:
        what = f"--ops {pattern!r}" if pattern else "the selection"
        raise UsageError(
            f"no OpInfo case matches {what} at dtypes {','.join(dtypes)} "
            "(the pattern is searched in OpInfo names such as 'mul' and 'nn.functional.relu', "
            "and in 'aten::<name>')"
        )
    return sorted((g for g in groups if in_shard(g.id, shard)), key=lambda g: g.id)
