"""Judging a device result against the CPU reference: tolerances and classification.

The reference is the op run on CPU in float64 where the op allows it. The device is judged
"no worse than CPU at the same dtype": an element passes when its error against the float64
reference is within the dtype's tolerance plus twice the error CPU itself makes at that dtype.
Without a float64 reference (integer ops, ops without float64), the reference is CPU at the
case's dtype and the dtype's tolerance alone decides (integers and bool: exact).

Two precision tiers. The strict tier is the rule above: ``pass``. A case that misses it but
agrees within the usable tier of its op family at its dtype (``USABLE``: one table, documented in
docs/DATA.md) is ``pass_low_precision``, with ``tol`` naming the tier (``usable:<family>``); beyond
that it is a ``mismatch``. The tiers differ most for matmuls and convolutions, which backends may
run at reduced precision by default (TorchTPU does; ``torch.set_float32_matmul_precision`` is the
knob): bfloat16-level there, far tighter for an elementwise op. float64 (and complex128) has no
usable tier: a float64 result at float32 precision is a narrowing, not a usable pass.

A result bit-for-bit identical to CPU's (``identical``) is no worse than CPU by construction: it
passes the strict tier without the float64 reference being run (``tol`` ``same``), which the probe
then skips; the reference is made only for results that differ.

Values are compared where CPU's result is finite; where it is NaN or infinite the device must
give the same (NaN positions, infinities with sign). Shape and dtype must match; a stride
difference is recorded, never a mismatch (except on meta, where layout is all there is).
"""

from __future__ import annotations

import math

from opcov.trees import leaves

# (rtol, atol) per dtype: torch.testing's defaults.
TOLERANCES = {
    "float64": (1e-7, 1e-7),
    "float32": (1.3e-6, 1e-5),
    "bfloat16": (1.6e-2, 1e-5),
    "float16": (1e-3, 1e-5),
    "complex128": (1e-7, 1e-7),
    "complex64": (1.3e-6, 1e-5),
}
CPU_MARGIN = 2.0  # the device may be this many times as far from float64 as CPU is
CANARY = (1e-12, 0.0)  # narrowing canaries: any rounding to float32 shows
# The usable tier, per op family and dtype: (rtol, atol). An element passes it when
# |device - ref| <= atol * scale + rtol * |ref| + CPU_MARGIN * |cpu - ref|, where scale is
# max(1, max |ref|) for the families that accumulate (SCALED_FAMILIES) and 1 for the others.
USABLE = {
    "matmul": {
        "float32": (1.6e-2, 1e-2),
        "complex64": (1.6e-2, 1e-2),
        "bfloat16": (3.2e-2, 1e-2),
        "float16": (4e-3, 1e-3),
    },
    "reduction": {
        "float32": (1e-4, 1e-5),
        "complex64": (1e-4, 1e-5),
        "bfloat16": (3.2e-2, 1e-3),
        "float16": (4e-3, 1e-4),
    },
    "pointwise": {
        "float32": (1e-5, 1e-6),
        "complex64": (1e-5, 1e-6),
        "bfloat16": (3.2e-2, 1e-5),
        "float16": (2e-3, 1e-5),
    },
    "other": {"float32": (1e-4, 1e-5), "complex64": (1e-4, 1e-5), "bfloat16": (3.2e-2, 1e-3), "float16": (4e-3, 1e-4)},
}
SCALED_FAMILIES = ("matmul", "reduction", "other")
FAMILIES = tuple(USABLE)
# Ops a backend may legitimately run at reduced precision by default (matmul precision).
REDUCED_PRECISION_BASES = frozenset(
    {
        "mm",
        "bmm",
        "addmm",
        "addbmm",
        "baddbmm",
        "matmul",
        "mv",
        "addmv",
        "dot",
        "vdot",
        "inner",
        "linear",
        "addr",
        "outer",
        "einsum",
        "tensordot",
        "_convolution",
        "convolution",
        "conv1d",
        "conv2d",
        "conv3d",
        "conv_transpose1d",
        "conv_transpose2d",
        "conv_transpose3d",
        "convolution_backward",
        "_scaled_dot_product_attention_math",
        "_grouped_mm",
        "_addmm_activation",
        "linalg_matmul",
        "linalg_multi_dot",
        "chain_matmul",
        "bilinear",
        "_trilinear",
        "cdist",
        "_cdist_forward",
        "_cdist_backward",
    }
)


def family_of(bases, call_tags) -> str:
    """The op family whose usable tolerances a case gets: ``matmul`` when it dispatched a matmul or
    convolution (``bases``: aten base names), else by the Tags of the calls of the op it is about
    (``call_tags``: one set of tag names per call): ``reduction`` when one is tagged so,
    ``pointwise`` when all are, else ``other``."""
    if set(bases) & REDUCED_PRECISION_BASES:
        return "matmul"
    if any("reduction" in t for t in call_tags):
        return "reduction"
    if call_tags and all("pointwise" in t for t in call_tags):
        return "pointwise"
    return "other"


def _sig(x: float) -> float:
    """3 significant digits, so files stay readable and stable."""
    return float(f"{x:.3g}")


class Verdict(dict):
    """status plus evidence: err [abs, rel], tol, why, strides (bool)."""


SAME = "same"  # the tol of a result bit-for-bit identical to CPU's


def identical(dev, cpu) -> bool:
    """Whether the device's outputs are CPU's, bit for bit: the same tree of leaves, tensors of one
    shape, dtype and layout with equal values (NaN where CPU has NaN), other leaves equal."""
    import torch

    d_leaves, c_leaves = leaves(dev), leaves(cpu)
    if len(d_leaves) != len(c_leaves):
        return False
    for d, c in zip(d_leaves, c_leaves):
        if isinstance(c, torch.Tensor) != isinstance(d, torch.Tensor):
            return False
        if not isinstance(c, torch.Tensor):
            if type(c) is not type(d) or not (c == d or (c != c and d != d)):
                return False
            continue
        if d.shape != c.shape or d.dtype != c.dtype or d.layout != torch.strided or c.layout != torch.strided:
            return False
        d = d.detach().to("cpu")
        c = c.detach()
        if torch.equal(d, c):
            continue
        if not (c.is_floating_point() or c.is_complex()):
            return False
        nan = torch.isnan(c)
        if not bool(nan.any()) or not torch.equal(nan, torch.isnan(d)) or not torch.equal(d[~nan], c[~nan]):
            return False
    return True


def judge(dev, cpu, ref, *, dtype: str, mode: str, family: str = "other", same: bool = False, scale=None) -> Verdict:
    """``judge_outputs``, with ``outputs`` on a mismatch of several outputs: the index (among the leaves
    of ``dev``, in order) of every output that differs, each judged alone, when the outputs are as many
    as CPU's. A model's call that never reads those outputs is not affected by the difference
    (``opcov.verdict.signature``)."""
    v = judge_outputs(dev, cpu, ref, dtype=dtype, mode=mode, family=family, same=same, scale=scale)
    if v.get("status") != "mismatch":
        return v
    d_leaves, c_leaves = leaves(dev), leaves(cpu)
    r_leaves = leaves(ref) if ref is not None else c_leaves
    s_leaves = leaves(scale) if scale is not None else []
    if len(c_leaves) < 2 or len(d_leaves) != len(c_leaves) or len(r_leaves) != len(c_leaves):
        return v
    if len(s_leaves) != len(c_leaves):
        s_leaves = [None] * len(c_leaves)
    v["outputs"] = [
        i
        for i, (d, c, r, sc) in enumerate(zip(d_leaves, c_leaves, r_leaves, s_leaves))
        if judge_outputs((d,), (c,), (r,), dtype=dtype, mode=mode, family=family, scale=None if sc is None else (sc,))[
            "status"
        ]
        == "mismatch"
    ]
    if not v["outputs"]:  # the whole differs, no one output does (never seen): unattributed
        del v["outputs"]
    return v


def judge_outputs(
    dev, cpu, ref, *, dtype: str, mode: str, family: str = "other", same: bool = False, scale=None
) -> Verdict:
    """Compare device output ``dev`` with CPU ``cpu`` (same dtype) and reference ``ref``.

    mode: "values", "canary", "meta" (shape, dtype, stride) or "not_comparable" (shape and
    dtype only; values are not comparable). ``family``: the op family (``family_of``), whose
    usable tier a value that misses the strict one is judged by. ``same``: the caller found ``dev``
    ``identical`` to ``cpu``, so values need no comparison (``tol`` ``same``, err [0, 0]). ``scale``:
    outputs like ``cpu`` whose magnitudes a relative tolerance is taken of where larger than the
    result's (a sum's: the sum of its inputs' magnitudes, so that a cancelling sum near 0 is judged
    by what it added up, not by its tiny result); None: the result's own."""
    import torch

    d_leaves, c_leaves = leaves(dev), leaves(cpu)
    s_leaves = leaves(scale) if scale is not None else []
    if len(s_leaves) != len(c_leaves):
        s_leaves = [None] * len(c_leaves)
    r_leaves = leaves(ref) if ref is not None else c_leaves
    if len(d_leaves) != len(c_leaves) or len(r_leaves) != len(c_leaves):
        return Verdict(status="mismatch", why=f"{len(d_leaves)} outputs, cpu gives {len(c_leaves)}")
    v = Verdict(status="pass")
    abs_err = rel_err = 0.0
    low = False
    strides = False
    tol_name = {"meta": "meta", "not_comparable": "none"}.get(mode)
    for i, (d, c, r, sc) in enumerate(zip(d_leaves, c_leaves, r_leaves, s_leaves)):
        where = f"output {i}" if len(c_leaves) > 1 else "output"
        if isinstance(c, torch.Tensor) != isinstance(d, torch.Tensor):
            return Verdict(status="mismatch", why=f"{where}: {type(d).__name__}, cpu gives {type(c).__name__}")
        if not isinstance(c, torch.Tensor):
            if mode in ("meta", "not_comparable"):
                continue
            if isinstance(c, (int, float, complex, bool)) and isinstance(d, (int, float, complex, bool)):
                c, d, r = (torch.tensor(x) for x in (c, d, r if isinstance(r, (int, float, complex, bool)) else c))
            elif c != d:
                return Verdict(status="mismatch", why=f"{where}: {d!r}, cpu gives {c!r}")
            else:
                continue
        if tuple(d.shape) != tuple(c.shape):
            return Verdict(status="mismatch", why=f"{where}: shape {tuple(d.shape)}, cpu gives {tuple(c.shape)}")
        if d.dtype != c.dtype:  # the values too, in CPU's dtype: a dtype-only difference is worded apart
            try:
                equal = torch.equal(d.detach().cpu().to(c.dtype), c.detach().cpu())
            except (RuntimeError, TypeError):
                equal = False
            more = "; values equal" if equal else ""
            return Verdict(
                status="mismatch", why=f"{where}: dtype {str(d.dtype)[6:]}, cpu gives {str(c.dtype)[6:]}{more}"
            )
        if d.layout == torch.strided and c.layout == torch.strided and d.numel() > 1 and d.stride() != c.stride():
            if mode == "meta":
                return Verdict(status="mismatch", why=f"{where}: stride {d.stride()}, cpu gives {c.stride()}")
            strides = True
        if mode in ("meta", "not_comparable") or c.numel() == 0 or same:
            continue
        if not (isinstance(sc, torch.Tensor) and tuple(sc.shape) == tuple(c.shape)):
            sc = None
        res = _values(d, c, r, dtype=dtype, mode=mode, family=family, scale=sc)
        abs_err, rel_err = max(abs_err, res["abs"]), max(rel_err, res["rel"])
        tol_name = res["tol"]
        if res["status"] == "mismatch":
            return Verdict(
                status="mismatch",
                err=[_sig(abs_err), _sig(rel_err)],
                tol=res["tol"],
                why=f"{where}: {res['why']}",
                strides=strides,
            )
        low = low or res["status"] == "pass_low_precision"
    if mode == "not_comparable":
        v["status"] = "not_comparable"
    elif low:
        v["status"] = "pass_low_precision"
    if mode in ("values", "canary"):
        v["err"] = [_sig(abs_err), _sig(rel_err)]
    v["tol"] = usable_label(family) if low else (tol_name or _tol_label(dtype, mode, False))
    if same and mode in ("values", "canary"):
        v["tol"] = SAME
    v["strides"] = strides
    return v


def _tol_label(dtype: str, mode: str, bar: bool) -> str:
    if mode == "canary":
        return "canary"
    if dtype not in TOLERANCES:
        return "exact"
    return f"{dtype}+cpu" if bar else dtype


def usable_label(family: str) -> str:
    """The ``tol`` of a pass at the usable tier: 'usable:matmul'."""
    return f"usable:{family}"


def _values(d, c, r, *, dtype: str, mode: str, family: str, scale=None) -> dict:
    import torch

    d = d.detach().to("cpu")
    c = c.detach()
    r = r.detach()
    if (
        torch.strided not in (d.layout, c.layout, r.layout)
        or d.layout != torch.strided
        or c.layout != torch.strided
        or r.layout != torch.strided
    ):
        d, c, r = (x.to_dense() if x.layout != torch.strided else x for x in (d, c, r))
    if not (c.is_floating_point() or c.is_complex()):
        if torch.equal(d, c):
            return {"status": "pass", "abs": 0.0, "rel": 0.0, "tol": "exact"}
        diff = (d.to(torch.float64) - c.to(torch.float64)).abs() if c.dtype != torch.bool else (d != c).double()
        bad = (d != c).nonzero()[0].tolist()
        return {
            "status": "mismatch",
            "abs": float(diff.max()),
            "rel": float(diff.max()),
            "tol": "exact",
            "why": f"values differ at index {tuple(bad)}: {d[tuple(bad)].item()!r}, cpu gives "
            f"{c[tuple(bad)].item()!r} (exact)",
        }
    wide = torch.complex128 if c.is_complex() else torch.float64
    d64, c64 = d.to(wide), c.to(wide)
    r64 = r.to(wide) if r.dtype != c.dtype or r is not c else c64
    bar = r is not c and r.dtype != c.dtype  # a float64 reference distinct from the CPU run
    finite = torch.isfinite(c64) & torch.isfinite(r64) if r64 is not c64 else torch.isfinite(c64)
    s64 = None
    if scale is not None and not c.is_complex():
        s64 = scale.detach().to(torch.float64).abs()
        finite = finite & torch.isfinite(s64)
    if r64.shape == c64.shape and bool(finite.all()):  # the common case: no NaN/inf to place, every position compared
        return _finite(d, c, r, d64, c64, r64, finite, dtype=dtype, mode=mode, family=family, bar=bar, scale=s64)
    special = ~finite
    if bool(special.any()):
        dn, cn = d64[special], c64[special]
        same = (dn == cn) | (torch.isnan(dn) & torch.isnan(cn))
        if not bool(same.all()):
            idx = special.nonzero()[int((~same).nonzero()[0])].tolist()
            return {
                "status": "mismatch",
                "abs": float("inf"),
                "rel": float("inf"),
                "tol": _tol_label(dtype, mode, bar),
                "why": f"NaN/inf positions differ at index {tuple(idx)}: {d[tuple(idx)].item()!r}, "
                f"cpu gives {c[tuple(idx)].item()!r}",
            }
    if not bool(finite.any()):
        return {"status": "pass", "abs": 0.0, "rel": 0.0, "tol": _tol_label(dtype, mode, bar)}
    return _finite(
        d,
        c,
        r,
        d64[finite],
        c64[finite],
        r64[finite],
        finite,
        dtype=dtype,
        mode=mode,
        family=family,
        bar=bar,
        scale=None if s64 is None else s64[finite],
    )


def _finite(d, c, r, dv, cv, rv, finite, *, dtype: str, mode: str, family: str, bar: bool, scale=None) -> dict:
    """The value judgement of the positions where CPU and the reference are finite: ``dv``, ``cv``,
    ``rv`` (widened), in the order of ``finite.nonzero()``; ``scale`` (widened, same order): magnitudes
    the relative tolerance is taken of where larger than the reference's (``judge``)."""
    import torch

    diff = (dv - rv).abs()
    diff = diff.real if diff.is_complex() else diff
    abs_err = float(diff.max())  # NaN or inf when the device gave a non-finite value (or d - r overflowed)
    if not math.isfinite(abs_err):
        diff = torch.where(torch.isfinite(diff), diff, torch.full_like(diff, float("inf")))
        abs_err = float(diff.max())
    mag = rv.abs()
    mag = mag.real if mag.is_complex() else mag
    if scale is not None and scale.shape == mag.shape:
        mag = torch.maximum(mag, scale)
    # |c - r|: only a float64 reference adds it to the strict bar; the usable tier computes it when needed
    cpu_err = None
    if bar:
        cpu_err = (cv - rv).abs()
        cpu_err = cpu_err.real if cpu_err.is_complex() else cpu_err
    rtol, atol = CANARY if mode == "canary" else TOLERANCES.get(dtype, TOLERANCES["float64"])
    allowed = atol + rtol * mag + CPU_MARGIN * cpu_err if bar else atol + rtol * mag
    rel_err = float((diff / mag.clamp_min(max(atol, 1e-30))).max())
    tol = _tol_label(dtype, mode, bar)
    if bool((diff <= allowed).all()):
        return {"status": "pass", "abs": abs_err, "rel": rel_err, "tol": tol}
    usable = USABLE.get(family, USABLE["other"]).get(dtype)
    if usable is not None and mode == "values":
        urtol, uatol = usable
        scale = max(1.0, float(mag.max())) if family in SCALED_FAMILIES else 1.0
        if cpu_err is None:
            cpu_err = (cv - rv).abs()
            cpu_err = cpu_err.real if cpu_err.is_complex() else cpu_err
        margin = CPU_MARGIN * cpu_err
        if bool((diff <= uatol * scale + urtol * mag + margin).all()):
            return {"status": "pass_low_precision", "abs": abs_err, "rel": rel_err, "tol": usable_label(family)}
    k = int((diff - allowed).argmax())
    idx = finite.nonzero()[k].tolist()
    return {
        "status": "mismatch",
        "abs": abs_err,
        "rel": rel_err,
        "tol": tol,
        "why": f"values differ: max abs err {abs_err:.3g} (rel {rel_err:.3g}); at index {tuple(idx)} "
        f"{_num(d, idx)}, cpu gives {_num(c, idx)}"
        + (f", float64 reference {_num(r, idx)}" if bar else "")
        + f" (tolerance {tol})",
    }


def _num(t, idx) -> str:
    v = t[tuple(idx)].item() if t.dim() else t.item()
    return f"{v:.6g}" if isinstance(v, float) else repr(v)
