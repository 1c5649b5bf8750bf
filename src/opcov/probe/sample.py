"""What a worker runs: one ``Sample`` per case, and a ``Loaded`` group of them.

Both case sources build these (``cases`` for OpInfo samples and canaries, ``replay`` for calls
captured from model traces), so they live apart from either source.
"""

from __future__ import annotations

from dataclasses import dataclass


class Sample:
    """What a case runs: ``fn(input, *args, **kwargs)``, plus OpInfo's grad post-processing."""

    __slots__ = (
        "input",
        "args",
        "kwargs",
        "output_process_fn_grad",
        "fn",
        "aten",
        "host_leaves",
        "tier",
        "keep_layout",
        "device_kw",
        "no_wide",
        "unset",
        "index",
    )

    def __init__(self, input, args, kwargs, output_process_fn_grad=None):
        self.input, self.args, self.kwargs = input, args, kwargs
        self.output_process_fn_grad = output_process_fn_grad or (lambda x: x)
        self.fn = None  # a per-sample callable (replayed calls); else the group's
        self.aten = None  # a per-sample op the case is about (for blame); else the group's
        self.host_leaves = frozenset()  # leaves (pytree order) the OpInfo keeps on CPU for any device
        self.tier = None  # the input tier this sample was made harder for (probe.tiers); None: as given
        self.keep_layout = False  # copies keep the inputs' strides (a tier's layout is the point)
        self.device_kw = None  # a factory's device argument: set to the device for the device run
        self.no_wide = False  # no float64 reference: widened inputs would change what the call means
        self.unset = False  # CPU's result depends on memory the kernel never wrote: values not compared
        self.index = None  # its place among the group's samples as made, where a cap kept some (opcov.probe.lazy)


def factory_device_kw(kwargs: dict, device_type: str) -> str | None:
    """``"device"`` where a call is a factory that makes its result on ``device_type``, else None.

    A model's factory (``torch.arange(n, device=x.device)``, ``triu_indices``, ``full``) reaches the
    dispatcher with ``device=`` filled in, whether the user wrote it or not; a case or replayed call
    made on the host is made on the device for the device run, as the model run there would make it
    (a factory the device lacks then shows, rather than passing on CPU)."""
    return "device" if str(kwargs.get("device") or "").startswith(device_type) else None


def op_call(func, args, kwargs) -> Sample:
    """A sample that calls one op overload ``func(*args, **kwargs)`` (a replayed or schema-made call),
    about that op's base name."""
    s = Sample(tuple(args), (), dict(kwargs))
    s.fn = _Call(func)
    s.aten = (func.name().split(".")[0],)
    return s


class _Call:
    def __init__(self, func):
        self.func = func

    def __call__(self, args, **kwargs):
        return self.func(*args, **kwargs)


def case_ids(group_id: str, samples) -> list[str]:
    """The ids of a group's cases: ``<group>|<index>`` for a sample as given (its place among the samples as
    made, also where a cap kept only some: an id names one sample whatever was kept), ``<group>|<tier>``
    for the first made harder for a tier, ``<group>|<tier>.<n>`` for its n-th (``--all-samples``)."""
    ids, seen = [], {}
    for i, s in enumerate(samples):
        if s.tier:
            n = seen[s.tier] = seen.get(s.tier, 0) + 1
            ids.append(f"{group_id}|{s.tier}" if n == 1 else f"{group_id}|{s.tier}.{n}")
        else:
            ids.append(f"{group_id}|{i if s.index is None else s.index}")
    return ids


@dataclass
class Loaded:
    """A group ready to run in a worker."""

    fn: object
    samples: list
    aten: tuple  # aten base names the source is about ("aten::mul", ...), for blame
    nondeterministic: bool  # OpInfo says the output is not deterministic
    float64_ok: bool  # the op supports float64 on cpu (a float64 reference can be taken)
    canary: bool
    supports_out: bool = False  # OpInfo says the op takes out=: its .out overload is probed too

    def aten_of(self, sample) -> list:
        """The aten base names a case of this group is about: the sample's own, else the group's."""
        return list(sample.aten or self.aten)
