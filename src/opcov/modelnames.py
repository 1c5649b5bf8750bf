"""Is a bare model name something opcov can trace? Answered without importing torch or transformers.

Why: ``opcov check NAME`` traces a name that is not a saved op set, and tracing imports torch and
transformers (5 to 15 s) only to say "unknown model type" for a misspelt zoo name. A name that is neither
a model folder under the coverage folder nor a word in transformers' own model-type tables (read as text
from the installed package: the tables move between its releases, a quoted word does not) cannot be
traced, so ``unknown`` says so at once, with the nearest names. A name it cannot rule out goes on to the
trace, whose own error stays the authority.
"""

from __future__ import annotations

import difflib
import importlib.util
import os
import re

from opcov.store import layout
from opcov.torchenv import install_command

# transformers' files that name every model type in quotes (5.x: auto_mappings.py; 4.x: configuration_auto.py)
_TABLES = ("auto_mappings.py", "configuration_auto.py")
_QUOTED = re.compile(r'"([A-Za-z0-9_\-]+)"')


def _transformers_auto() -> str | None:
    """transformers' models/auto folder, found without importing it; None when it is not installed."""
    try:
        spec = importlib.util.find_spec("transformers")
    except (ImportError, ValueError):
        return None
    if spec is None or not spec.origin:
        return None
    return os.path.join(os.path.dirname(spec.origin), "models", "auto")


def model_types() -> set[str] | None:
    """Every quoted word of transformers' model-type tables (a superset of its model types), or None
    where transformers is not installed or its tables are not where they were."""
    auto = _transformers_auto()
    if auto is None:
        return None
    words: set[str] = set()
    for name in _TABLES:
        try:
            with open(os.path.join(auto, name), encoding="utf-8") as f:
                words |= set(_QUOTED.findall(f.read(4 << 20)))
        except OSError:
            continue
    return words or None


def is_bare(model: str) -> bool:
    """A plain name: no path, file, factory (``pkg.mod:fn``) or ``nn:NAME``."""
    return bool(model) and not any(c in model for c in "/\\:") and not model.endswith((".yaml", ".json"))


def unknown(model: str, coverage_dir: str) -> str | None:
    """Why ``model`` (a bare name, no folder under ``coverage_dir/models``) cannot be traced, with the
    nearest names; None when it may be (a transformers model type, or transformers absent: the trace says)."""
    if not is_bare(model) or os.path.isdir(layout.model_folder(model, coverage_dir)):
        return None
    types = model_types()
    if types is not None and (model in types or model.replace("_", "-") in types):
        return None
    models = layout.models_dir(coverage_dir)
    zoo = set()
    for folder in (models, layout.models_dir(layout.beside_bundled(coverage_dir) or coverage_dir)):
        zoo |= set(layout.listdir(folder)) if os.path.isdir(folder) else set()  # a ./coverage hides no zoo name
    near = difflib.get_close_matches(model, sorted(zoo | (types or set())), n=3)
    hint = f"; did you mean {', '.join(near)}?" if near else ""
    if types is None:  # no transformers: a trace could not tell either; a near zoo name is worth saying now
        if not near:
            return None
        return (
            f"{model}: not an op-set file or a model under {models}/{hint} (tracing a transformers model "
            f"type needs torch and transformers: {install_command('trace')})"
        )
    return (
        f"{model}: not an op-set file, a model under {models}/ or a transformers model "
        f"type{hint} (or pass a config.json, a factory package.module:function, or nn:NAME)"
    )
