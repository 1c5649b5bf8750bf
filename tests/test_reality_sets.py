"""The nn reality sets keep the factory contract that `opcov trace` and scripts/envs/nn_reality.py rely on: every
name in a set's MODELS table (read without torch, as both scripts read it) is a factory that returns (model,
inputs) under torch.device("meta"), and the committed real runs (docs/reality/nn-xla*.json) hold each model in both
modes, so scripts/nn_accuracy.py never meets a model without its real outcome."""

import importlib
import json
import os
import sys

import pytest
import torch

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "scripts", "reality"))

from sets import REAL_RUNS, SETS, models_of  # noqa: E402


@pytest.mark.parametrize("set_name", sorted(SETS))
def test_every_model_of_a_set_is_a_factory_that_builds_on_meta(set_name):
    table = models_of(set_name)
    module = importlib.import_module(SETS[set_name])
    assert table == module.MODELS, "the torch-free reader disagrees with the module's own table"
    for name, (family, description) in table.items():
        assert family and description, f"{set_name}:{name} has no family or description"
        factory = getattr(module, name, None)
        assert callable(factory), f"{SETS[set_name]}.py names {name} in MODELS but defines no such factory"
        with torch.device("meta"):
            model, inputs = factory()
        assert isinstance(model, torch.nn.Module), name
        assert isinstance(inputs, (tuple, list, dict, torch.Tensor)), name


@pytest.mark.parametrize("set_name", sorted(SETS))
def test_the_committed_real_runs_hold_every_model_in_both_modes(set_name):
    with open(os.path.join(ROOT, REAL_RUNS[set_name])) as f:
        runs = json.load(f)["runs"]
    want = {f"{name}/{mode}" for name in models_of(set_name) for mode in ("inference", "training")}
    assert not want - set(runs), f"{REAL_RUNS[set_name]} lacks {sorted(want - set(runs))[:5]}"
    assert not [k for k in want if runs[k]["actual"] == "cpu_failed"], "a model whose CPU reference fails is a bug"
