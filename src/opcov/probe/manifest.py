"""A backend manifest: the ops and dtypes a backend team states it supports, and those it rules out.

Optional. ``opcov probe --manifest FILE`` and ``opcov check --manifest FILE`` read it; the probe then
counts its cells as claimed or not (``summary.aten.claims``) and gives an unprobed op the manifest
rules out the disposition ``excluded``; check says, for each failing op, whether the backend claims
it (a bug to file) or not (a known gap), and ``--fail-on unclaimed`` fails the gate when a model
needs an op or dtype the manifest does not claim. Torch-free. Format (docs/DATA.md, "Backend
manifest")::

    manifest: 1
    backend: tpu                     # the backend it speaks for
    claims:                          # op -> dtypes ('all', or a list)
      aten::add.Tensor: [float32, bfloat16]
      aten::mm: all                  # a name without an overload: every overload of it
      aten::native_layer_norm*: [float32]   # '*' and '?' match as in shell patterns
    excludes:                        # op -> why it is out of scope (stated, not probed)
      aten::_fft_c2c: no FFT unit on this chip
"""

from __future__ import annotations

import fnmatch
import hashlib
import re

from opcov.errors import UsageError

ALL = "all"
_DTYPE_SPLIT = re.compile(r"[,+/ ]+")


class Manifest:
    """A parsed manifest: ``claimed(op, dtype)``, ``excluded(op)``."""

    def __init__(self, path: str, backend: str, claims: dict, excludes: dict, sha256: str):
        self.path, self.backend, self.sha256 = path, backend, sha256
        self.claims = claims  # pattern -> frozenset of dtypes, or ALL
        self.excludes = excludes  # pattern -> why

    @staticmethod
    def _matches(pattern: str, op: str) -> bool:
        if any(c in pattern for c in "*?["):
            return fnmatch.fnmatchcase(op, pattern)
        return op == pattern or ("." not in pattern.split("::", 1)[-1] and op.startswith(pattern + "."))

    def claimed(self, op: str, dtype: str | None = None) -> bool:
        """Whether the manifest claims ``op`` (at ``dtype``, a dtype key: every dtype named in a mixed
        key such as 'bfloat16,int64' must be claimed)."""
        for pattern, dtypes in self.claims.items():
            if not self._matches(pattern, op):
                continue
            if dtype is None or dtypes == ALL:
                return True
            if all(d in dtypes for d in _DTYPE_SPLIT.split(dtype) if d):
                return True
        return False

    def excluded(self, op: str) -> str | None:
        """Why the manifest rules ``op`` out, or None."""
        for pattern, why in self.excludes.items():
            if self._matches(pattern, op):
                return why
        return None

    def provenance(self) -> dict:
        return {
            "path": self.path,
            "backend": self.backend,
            "sha256": self.sha256,
            "claims": len(self.claims),
            "excludes": len(self.excludes),
        }


def load(path: str, backend: str | None = None) -> Manifest:
    """Read and check a manifest; any problem is a one-line UsageError naming the file."""
    import yaml

    from opcov.store import data

    text, problem = data.read_text(path)  # the size, line length and characters of every data file
    if problem:
        raise UsageError(f"--manifest {problem}")
    anchor = data.anchor_line(text)
    if anchor:
        raise UsageError(f"--manifest {path}:{anchor}: {data.ANCHOR_MESSAGE}")
    try:
        doc = yaml.load(text, Loader=data._loader())  # a key given twice is refused, with its line
    except (yaml.YAMLError, RecursionError) as exc:
        line = getattr(getattr(exc, "problem_mark", None), "line", None)
        where = f" (line {line + 1})" if line is not None else ""
        why = " ".join(str(getattr(exc, "problem", None) or "").split())
        why = f": {why}" if why else ""
        raise UsageError(
            f"--manifest {path}: not valid YAML{where}{why}; see docs/DATA.md, 'Backend manifest'"
        ) from None

    def bad(what: str):
        return UsageError(f"--manifest {path}: {what}; see docs/DATA.md, 'Backend manifest'")

    if not isinstance(doc, dict) or doc.get("manifest") != 1:
        raise bad("expected a mapping with 'manifest: 1'")
    unknown = set(doc) - {"manifest", "backend", "claims", "excludes"}
    if unknown:
        raise bad(f"unknown key(s) {', '.join(sorted(map(str, unknown)))}")
    name = doc.get("backend")
    if not isinstance(name, str) or not name:
        raise bad("'backend' must name the backend it speaks for")
    if backend is not None and name != backend:
        raise bad(f"it speaks for backend {name!r}, not {backend!r}")
    claims: dict = {}
    for op, dtypes in (doc.get("claims") or {}).items():
        if not isinstance(op, str) or "::" not in op:
            raise bad(f"claim {op!r} is not an op name such as 'aten::add.Tensor'")
        if dtypes == ALL:
            claims[op] = ALL
        elif isinstance(dtypes, list) and dtypes and all(isinstance(d, str) for d in dtypes):
            claims[op] = frozenset(dtypes)
        else:
            raise bad(f"claim {op}: dtypes must be 'all' or a list such as [float32, bfloat16]")
    excludes: dict = {}
    for op, why in (doc.get("excludes") or {}).items():
        if not isinstance(op, str) or "::" not in op or not isinstance(why, str) or not why.strip():
            raise bad(f"exclude {op!r}: give an op name and why it is out of scope")
        excludes[op] = why.strip()
    return Manifest(path, name, claims, excludes, hashlib.sha256(text.encode("utf-8")).hexdigest())


def claim_counts(ops: dict, manifest: Manifest) -> dict:
    """Cells of a probed ops mapping by claim and result: ``claimed_ok``, ``claimed_failing``
    (what the backend claims and the probe saw fail: bugs), ``unclaimed_failing`` (known gaps),
    ``unclaimed_ok``, and ``claimed_not_probed`` (claimed ops no case reached)."""
    from opcov.vocab import PROBED_FAILURES

    out = {"claimed_ok": 0, "claimed_failing": 0, "unclaimed_failing": 0, "unclaimed_ok": 0, "claimed_not_probed": 0}
    for op, rec in ops.items():
        if not isinstance(rec, dict):
            continue
        if "skipped" in rec:
            out["claimed_not_probed"] += manifest.claimed(op)
            continue
        for dk, cell in rec.items():
            if not isinstance(cell, dict):
                continue
            failing = any(cell.get(k) in PROBED_FAILURES for k in ("fwd", "bwd"))
            claimed = manifest.claimed(op, str(dk))
            out[("claimed_" if claimed else "unclaimed_") + ("failing" if failing else "ok")] += 1
    return out
