"""Which ops have a derivative formula, from torchgen's packaged derivatives.yaml.

The generic autograd kernel (VariableType) is registered for nearly every op,
differentiable or not; the formula file says which ones can actually be
differentiated, which are ``not_implemented``, and which have no differentiable
output.
"""

from __future__ import annotations

import os
from dataclasses import dataclass


def derivatives_path() -> str:
    import torchgen

    return os.path.join(os.path.dirname(torchgen.__file__), "packaged", "autograd", "derivatives.yaml")


@dataclass(frozen=True)
class Derivatives:
    """``aten::name.overload -> formula | not_implemented | none``."""

    kinds: dict

    @classmethod
    def load(cls) -> Derivatives:
        import yaml

        path = derivatives_path()
        if not os.path.exists(path):
            return cls({})
        loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
        with open(path) as f:
            entries = yaml.load(f, Loader=loader) or []
        kinds = {}
        for entry in entries:
            name = "aten::" + entry["name"].split("(", 1)[0]
            formulas = [
                v
                for k, v in entry.items()
                if k not in ("name", "output_differentiability", "dispatch", "result") and isinstance(v, str)
            ]
            diff = entry.get("output_differentiability")
            if diff is not None and not any(diff):
                kinds[name] = "none"
            elif formulas and all("not_implemented" in f for f in formulas):
                kinds[name] = "not_implemented"
            else:
                kinds[name] = "formula"
        return cls(kinds)

    def kind(self, name: str) -> str:
        """Formula kind; an in-place op shares its functional variant's formula."""
        if name in self.kinds:
            return self.kinds[name]
        base, dot, overload = name.partition(".")
        if base.endswith("_") and not base.endswith("__"):
            functional = base[:-1] + dot + overload
            if functional in self.kinds:
                return self.kinds[functional]
        return "none"
