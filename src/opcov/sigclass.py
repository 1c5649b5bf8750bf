"""A call's signature class: everything about one op call that selects a backend's behaviour.

Why: a probe finding (or a replayed call) says something about a model's call only when both took the
same path through the backend. ``addmm`` on PyTorch/XLA falls back to the CPU only when ``alpha`` or
``beta`` is not 1; nearest upsampling gives wrong values only with a scale factor that is not an
integer; adaptive pooling falls back only when its bins are uneven; a dilated max pool's backward
raises. So the tracer (an op set's ``sig=``), the probe (a case's class) and the replay write one
class text per call, made here, and the verdict compares them with ``same_path``.

The text is ``TENSORS;SELECTORS``:

- TENSORS: each tensor argument in order (the first ``SIG_TENSORS``), ``dtype:rank`` ('0d' for a 0-d
  tensor), then flags: ``!empty`` (no elements), ``!nc`` (not contiguous), ``!sparse`` (a sparse
  layout), ``!q`` (quantized), ``!rg`` (requires grad).
- SELECTORS: the non-tensor arguments whose value differs from the schema's default, as
  ``name=value`` (lists as ``2x2``, ``()`` when empty), sorted, plus two derived from sizes:
  ``bins=uneven`` (adaptive pooling whose input does not divide into its output) and
  ``scale=frac`` / ``scale=int`` (resizing by a ratio that is not / is a whole number; for adaptive
  pooling's backward, read from its gradient's and input's sizes), and
  ``bounds=under`` / ``bounds=over`` / ``bounds=over/under`` (a slice whose start or end lies before
  ``-size`` or beyond ``size`` of its dimension: CPU clamps it, a backend that checks its bounds raises;
  an end of ``sys.maxsize``, Python's ``x[a:]``, is no bound), ``sizes=zero`` (a size or repeat
  count of 0 that empties the result of a tensor with elements), and ``to=DTYPE`` (a conversion's target
  dtype, ``CONVERSIONS``: PyTorch/XLA's ``_to_copy`` raises converting to complex32 and runs every other
  target). Arguments that only size or place the result (``size``, ``dtype``, ``device``, ...) are left out.

A class also names which optional tensor arguments are absent (``absent=bias/weight``, ``absent=-`` for
none) for ops that have any: the tensors are listed by position, so a batch norm given weight and bias and
one given only running statistics both read ``float32:4,float32:1,float32:1``, and they take different
paths (PyTorch/XLA's batch-norm backward raised on one of them).

``to`` and ``absent`` are compared only where both sides name them (texts written before them do not), and
``to`` may name several targets (``to=bfloat16|float32``): an op set traced before ``to`` existed does not
know its conversions' targets, so the judge names the dtypes the model holds
(opcov.verdict.judge.requirements): a conversion into a dtype no call of the model has is not one of its
conversions.

An older text has no ';' or only ``alpha``/``beta`` after it: then only those two are known, and every
other selector is unknown on that side (a finding is never dropped on a guess). A text written here
always has the ';', so a class with every selector at its default reads ``float32:2,float32:2;``; one
naming only alpha/beta is read as an older one (the other selectors unknown: the safe side).

Torch-free but for ``of_call``, which reads a live call (torch imported by the caller).
"""

from __future__ import annotations

import functools
import math

SIG_TENSORS = 4  # tensor arguments a class names, as an op set's ``shape`` does
OLD_SCALARS = ("alpha", "beta")  # the only selectors a class written before ';' was always added knows
# Arguments that size, type or place a result, or name an out= tensor: not a path through the backend.
NOT_SELECTORS = frozenset(
    {
        "size",
        "sizes",
        "shape",
        "stride",
        "storage_offset",
        "dtype",
        "layout",
        "device",
        "pin_memory",
        "memory_format",
        "non_blocking",
        "copy",
        "names",
        "generator",
        "out",
        "output_size",
        "input_size",
        "start",
        "end",
        "step",
        "fill_value",
        "value",
        "other",
        "dim",
        "dims",
        "split_size",
        "split_sizes",
        "indices",
        "chunks",
        "sections",
        "repeats",
        "pad",
        "scale_factors",
        "scales_h",
        "scales_w",
        "scales_d",
        "scales",
        "offset",
        "length",
        "index",
        "src",
        "self",
        "seed",
        "num_samples",
        "k",
        "n",
        "N",
        "bins",
        "min",
        "max",
        "minlength",
        "scalar",
        "scalars",
        "eps",
        "momentum",
        "lr",
        "bias_sizes",
    }
)
_SAFE = str.maketrans({",": "_", ";": "_", " ": "_", "|": "_", "=": "_", "\n": "_"})


# ---------------------------------------------------------------- making a class from a live call


def tensor_class(t) -> str:
    """One tensor argument's class ('float32:3!nc'), as the module docstring says."""
    text = f"{str(t.dtype).rsplit('.', 1)[-1]}:{t.dim() or '0d'}"
    layout = str(t.layout)
    if layout != "torch.strided":
        text += "!sparse" if "sparse" in layout else "!" + layout.rsplit(".", 1)[-1].replace("_", "")
        return text + ("!rg" if t.requires_grad else "")
    if t.is_quantized:
        text += "!q"
    if t.numel() == 0:
        text += "!empty"
    elif not t.is_contiguous():
        text += "!nc"
    if t.requires_grad:
        text += "!rg"
    return text


def _value_text(value) -> str | None:
    """A selector's value as text, or None where it is not a plain value (a tensor, an object)."""
    if isinstance(value, bool) or value is None:
        return str(value)
    if isinstance(value, (int, float)):
        return f"{value:g}"
    if isinstance(value, str):
        return value.translate(_SAFE)[:24]
    if isinstance(value, (list, tuple)):
        parts = [_value_text(v) for v in value]
        if any(p is None for p in parts):
            return None
        return "x".join(parts) if parts else "()"  # type: ignore[arg-type]
    return None


def _is_default(value, default) -> bool:
    if isinstance(value, (list, tuple)) and isinstance(default, (list, tuple)):
        return list(value) == list(default)
    if isinstance(value, (list, tuple)) and len(value) > 0 and all(v == default for v in value):
        return True  # dilation=[1, 1] against an int default of 1
    try:
        return bool(value == default)
    except Exception:  # noqa: BLE001 - a value that does not compare: not the default
        return False


def _spatial(tensor, n: int) -> list[int]:
    return [int(s) for s in tensor.shape[-n:]] if n and tensor.dim() >= n else []


SLICES = frozenset({"slice", "slice_copy", "slice_scatter"})  # ops that clamp start/end to the dimension
_NO_END = 2**62  # an end at or above this is 'to the end' (torch passes sys.maxsize for x[a:])


def _slice_bounds(first, named: dict) -> str | None:
    """``over``, ``under`` or ``over/under`` where a slice's start or end lies past its dimension."""
    dim = named.get("dim", 0)
    if not isinstance(dim, int) or first.dim() == 0 or not -first.dim() <= dim < first.dim():
        return None
    size = int(first.shape[dim])
    sides = set()
    for key in ("start", "end"):
        bound = named.get(key)
        if not isinstance(bound, int) or isinstance(bound, bool) or bound >= _NO_END:
            continue
        if bound < -size:
            sides.add("under")
        elif bound > size:
            sides.add("over")
    return "/".join(sorted(sides)) or None


def derived(op_name: str, tensors: list, named: dict) -> list[str]:
    """Selectors that hang on sizes: ``bins=uneven`` for adaptive pooling, ``scale=frac|int`` for
    resizing, ``bounds=...`` for a slice past its dimension, ``sizes=zero`` for an empty result sized from a
    tensor with elements. ``named``: the call's arguments by schema name."""
    base = op_name.split("::", 1)[-1].split(".", 1)[0]
    out: list[str] = []
    first = tensors[0] if tensors else None
    if first is None:
        return out
    if base in SLICES:
        bounds = _slice_bounds(first, named)
        if bounds:
            out.append(f"bounds={bounds}")
    elif "adaptive_" in base and "backward" not in base:
        size = named.get("output_size")
        if isinstance(size, (list, tuple)) and size:
            ins = _spatial(first, len(size))
            if len(ins) == len(size) and any(int(o) and i % int(o) for i, o in zip(ins, size)):
                out.append("bins=uneven")
    elif "adaptive_" in base and len(tensors) > 1:  # backward: (grad_output, self, ...), sized as the output
        n = 3 if "3d" in base else 2
        outs, ins = _spatial(first, n), _spatial(tensors[1], n)
        if len(ins) == len(outs) == n and any(o and i % o for i, o in zip(ins, outs)):
            out.append("bins=uneven")
    elif base.startswith("upsample_") and "backward" not in base:
        size = named.get("output_size")
        scales = named.get("scale_factors")
        if scales is None:
            scales = [named.get(k) for k in ("scales_d", "scales_h", "scales_w", "scales") if k in named]
            scales = [s for s in scales if s is not None] or None
        ratios: list[float] = []
        if isinstance(scales, (list, tuple)) and scales:
            ratios = [float(s) for s in scales]
        elif isinstance(size, (list, tuple)) and size:
            ins = _spatial(first, len(size))
            ratios = [o / i for o, i in zip(size, ins) if i]
        if ratios:
            whole = all(math.isclose(r, round(r)) and r >= 1 for r in ratios)
            out.append("scale=int" if whole else "scale=frac")
    if first.numel() and any(_has_zero(named.get(k)) for k in SIZING):
        out.append("sizes=zero")
    if base in CONVERSIONS and named.get("dtype") is not None:
        out.append(f"to={str(named['dtype']).rsplit('.', 1)[-1]}")
    return out


# Ops whose ``dtype`` argument is the dtype they convert to: the target selects the backend's path.
CONVERSIONS = frozenset({"_to_copy", "to", "_to_dtype"})


# Arguments that size a result: a 0 among them makes an empty result of a tensor with elements (repeat by 0,
# new_zeros((0, 3))), which a backend may refuse (PyTorch/XLA's repeat raises 'Concatenate expects at least
# one argument') where every other count runs.
SIZING = ("repeats", "size", "sizes", "shape")


def _has_zero(value) -> bool:
    if isinstance(value, bool):
        return False
    if isinstance(value, int):
        return value == 0
    return isinstance(value, (list, tuple)) and any(_has_zero(v) for v in value)


def of_call(func, args, kwargs, tensor_type, both_know: bool = True) -> str:
    """The class of one live call of OpOverload ``func`` (``tensor_type``: torch.Tensor). ``both_know``: name
    ``BOTH_KNOW``'s selectors too. The probe names them; the tracer does not yet, so that the committed op sets
    stay what tracing again makes (opcov zoo trace reproduces them): the judge takes a conversion's targets
    from the model's dtypes, and ``absent`` picks the probe's samples (opcov.probe.pick) and tells its cases
    apart until op sets name it."""
    tensors: list = []

    def walk(x):
        if isinstance(x, tensor_type):
            tensors.append(x)
        elif isinstance(x, (list, tuple)):
            for v in x:
                walk(v)
        elif isinstance(x, dict):
            for v in x.values():
                walk(v)

    walk(args)
    walk(kwargs)
    text = ",".join(tensor_class(t) for t in tensors[:SIG_TENSORS])
    selectors = []
    named: dict = {}
    optional: list[str] = []  # the op's Tensor? arguments
    schema = getattr(func, "_schema", None)
    for i, arg in enumerate(getattr(schema, "arguments", ())):
        if str(arg.type) in ("Tensor?", "Optional[Tensor]"):
            optional.append(arg.name)
        if i < len(args) and not arg.kwarg_only:
            value = args[i]
        elif arg.name in kwargs:
            value = kwargs[arg.name]
        else:
            continue
        named[arg.name] = value
        if arg.name in NOT_SELECTORS or isinstance(value, tensor_type):
            continue
        if value is None or (arg.has_default_value() and _is_default(value, arg.default_value)):
            continue
        shown = _value_text(value)
        if shown is not None:
            selectors.append(f"{arg.name}={shown}")
    selectors += [d for d in derived(func.name(), tensors, named) if both_know or not d.startswith("to=")]
    if optional and both_know:
        selectors.append("absent=" + ("/".join(sorted(a for a in optional if named.get(a) is None)) or "-"))
    return text + ";" + ",".join(sorted(selectors))


# ---------------------------------------------------------------- reading and comparing classes


@functools.lru_cache(maxsize=8192)
def parse(sig: str) -> tuple[tuple, dict | None]:
    """(tensor classes as ((dtype, rank, flags), ...), selectors {name: value} or None where only
    ``OLD_SCALARS`` are known: an older text)."""
    tensors, sep, rest = str(sig).partition(";")
    out: list = []
    for t in filter(None, tensors.split(",")):
        dtype, _, more = t.partition(":")
        rank, *flags = more.split("!")
        out.append((dtype, 0 if rank == "0d" else int(rank) if rank.isdigit() else -1, frozenset(flags)))
    scalars = dict(p.partition("=")[::2] for p in filter(None, rest.split(",")))
    # An older text (no ';', or only alpha/beta after it) knows alpha and beta alone; a text that
    # names only those is read so too, which keeps a finding where in doubt.
    old = not sep or (scalars and set(scalars) <= set(OLD_SCALARS))
    return tuple(out), ({"__old__": "1", **scalars} if old else scalars)


# Size arguments whose amount does not pick a path, only whether there is any: a padding of 1 and of 4 take
# the same kernel, a padding of 0 may not (stride and dilation are not here: 1 and 2 differ).
AMOUNTS = frozenset({"padding", "output_padding", "kernel_size"})


# Arguments that name an index: which one does not pick a path, only whether one is given (an embedding's
# padding row 0 and row 5 take the same kernel; its default, none, another).
INDICES = frozenset({"padding_idx", "ignore_index", "blank"})


def abstract(name: str, value: str | None) -> str:
    """The kind of a selector's value that decides a path: 'default', a bool or word as is, and for
    numbers 0 / 1 / -1 / int / frac (per element for lists); for an amount (``AMOUNTS``) 0 (none on any side),
    n (some) or -n (a crop); for an
    index (``INDICES``) 'given'."""
    if value is None:
        return "default"
    if name in INDICES:
        return "given"
    if name == "equation":
        return _equation_kind(value)
    if name in AMOUNTS:  # none, some (whatever sides), or a crop (a negative padding): three paths
        try:
            amounts = [float(p) for p in value.split("x")]
        except ValueError:
            return value
        return "-n" if any(a < 0 for a in amounts) else "n" if any(amounts) else "0"
    parts = value.split("x") if value not in ("()",) else ["()"]
    kinds = []
    for p in parts:
        try:
            f = float(p)
        except ValueError:
            return value
        kinds.append("0" if f == 0 else "1" if f == 1 else "-1" if f == -1 else "int" if f.is_integer() else "frac")
    return "/".join(sorted(set(kinds)))


def _equation_kind(text: str) -> str:
    """The path an einsum equation selects, by its structure rather than its letters: a broadcast ('...'), a
    diagonal (a letter twice in one operand), else a plain contraction. PyTorch/XLA lowers a plain one as
    XLA's einsum and decomposes the others (its kernel calls at::native::einsum); CPU's path differs the same
    way. The text is as a class keeps it: ',' and ' ' written '_'."""
    if "." in text:
        return "einsum:broadcast"
    operands = text.split("->", 1)[0].replace(" ", "").split("_")
    if any(len(set(o)) < len(o) for o in operands if o):
        return "einsum:diagonal"
    return "einsum:plain"


def same_path(case_sig: str, call_sig: str) -> bool:
    """Whether a probe case of class ``case_sig`` took the path a call of class ``call_sig`` takes: the
    same number of tensors, each of the same rank, emptiness and layout, bool or not (``_mask_apart``), and
    every selector known on both sides of the same kind (``abstract``); what one side does not know matches."""
    case_t, case_s = parse(case_sig)
    call_t, call_s = parse(call_sig)
    if len(case_t) != len(call_t):
        return False
    for (d1, r1, f1), (d2, r2, f2) in zip(case_t, call_t):
        if r1 != r2 or ("empty" in f1) != ("empty" in f2) or ("sparse" in f1) != ("sparse" in f2):
            return False
        if _mask_apart(d1, d2):
            return False
    return _same_selectors(case_s, call_s)


def _mask_apart(d1: str, d2: str) -> bool:
    """Whether one tensor is bool and the other another known dtype: a bool index is a mask, whose result's
    size hangs on its values (``x[mask]``: PyTorch/XLA sizes it through nonzero on the host), an integer one
    is not; what one side does not name matches."""
    return bool(d1) and bool(d2) and (d1 == "bool") != (d2 == "bool")


def covers(ran_sig: str, call_sig: str) -> bool:
    """Whether a case that ran with class ``ran_sig`` exercised the path a call of ``call_sig`` takes, as far
    as the arguments go: as many tensors, the same layouts, bool or not, and every selector of the same kind. Ranks and
    sizes are left to the probe's own spread of samples; the arguments are what a pass on others misses."""
    ran_t, ran_s = parse(ran_sig)
    call_t, call_s = parse(call_sig)
    if len(ran_t) != len(call_t):
        return False
    if any(
        ("sparse" in f1) != ("sparse" in f2) or ("q" in f1) != ("q" in f2) or _mask_apart(d1, d2)
        for (d1, _, f1), (d2, _, f2) in zip(ran_t, call_t)
    ):
        return False
    return _same_selectors(ran_s, call_s)


BOTH_KNOW = ("to", "absent")  # selectors compared only where both sides name them (older texts do not)
# Scalars that only shape an activation's values (its slope, threshold, bounds, scales) or are the values written in
# place of others (nan_to_num's nan, posinf, neginf): every value runs the same kernel, so they are not compared
# (softshrink's lambd of 0.2 and OpInfo's default 0.5; leaky_relu's slopes; a NaN replaced by 0 or by -1).
VALUES_ONLY = frozenset(
    {"lambd", "negative_slope", "threshold", "min_val", "max_val", "input_scale", "nan", "posinf", "neginf"}
)
# Arguments that name a dimension, as ``dim`` does (never a selector): which dimensions a transpose swaps
# picks no kernel. Compared nowhere, so that op sets that name them stay as traced.
DIMENSIONS = frozenset({"dim0", "dim1"})
# Arguments that only name the caller in an error message (linalg's ``_linalg_check_errors(info, api_name,
# is_matrix)``, called by every linalg op with its own name): no path. Compared nowhere, as DIMENSIONS.
LABELS = frozenset({"api_name"})


def _same_selectors(a: dict | None, b: dict | None) -> bool:
    if a is None or b is None:
        return True
    if "to" in a and "to" in b and not set(a["to"].split("|")) & set(b["to"].split("|")):
        return False  # conversions to different dtypes
    if "absent" in a and "absent" in b and a["absent"] != b["absent"]:
        return False  # other optional tensors given
    known = set(OLD_SCALARS) if "__old__" in a or "__old__" in b else (set(a) | set(b)) - {"__old__", *BOTH_KNOW}
    known -= VALUES_ONLY | DIMENSIONS | LABELS
    return all(abstract(k, a.get(k)) == abstract(k, b.get(k)) for k in known)


def with_targets(sig: str, dtypes) -> str:
    """A conversion's class ``sig`` naming ``dtypes`` as its possible targets (``to=a|b``) where it names
    none: what the judge knows of an op set's conversions when the trace did not record their target."""
    tensors, sep, rest = str(sig).partition(";")
    if not sep or "to" in dict(p.partition("=")[::2] for p in filter(None, rest.split(","))) or not dtypes:
        return sig
    return tensors + ";" + ",".join(sorted([*filter(None, rest.split(",")), "to=" + "|".join(sorted(dtypes))]))


def selectors(sig: str) -> dict:
    """The selectors a class names that are not at their defaults (none for an older text's unknowns)."""
    return {k: v for k, v in (parse(sig)[1] or {}).items() if k != "__old__" and (k, v) != ("absent", "-")}
