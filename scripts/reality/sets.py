"""The nn reality sets, one table for the script that runs them on PyTorch/XLA (scripts/envs/nn_reality.py, in the
xla venv) and the one that judges opcov's verdicts against those runs (scripts/nn_accuracy.py, in the main venv):
each set's module here and the file its real runs go to. Torch-free: both parents read a set's MODELS table
without importing its models."""

from __future__ import annotations

import ast
import os

HERE = os.path.dirname(os.path.abspath(__file__))

SETS = {
    "tuning": "nn_models",
    "heldout": "nn_heldout",
    "fresh": "nn_fresh",
    "unseen": "nn_unseen",
    "fifth": "nn_fifth",
    "sixth": "nn_sixth",
    "seventh": "nn_seventh",
    "eighth": "nn_eighth",
}
# where each set's real runs are recorded, relative to the repository root
REAL_RUNS = {name: f"docs/reality/nn-xla{'' if name == 'tuning' else '-' + name}.json" for name in SETS}


def models_of(set_name: str) -> dict:
    """The MODELS table of a set (name -> (family, description)), read without importing torch."""
    src = open(os.path.join(HERE, SETS[set_name] + ".py")).read()
    for node in ast.parse(src).body:
        if isinstance(node, ast.Assign) and any(getattr(t, "id", None) == "MODELS" for t in node.targets):
            return ast.literal_eval(node.value)
    raise SystemExit(f"{SETS[set_name]}.py has no MODELS table")
