"""The hand-written calls (opcov.scan.recipes) that record the reach of composites no synthesized,
OpInfo or zoo call fits: each still names an op of this torch and still fits it, and an out= overload
of a factory finds its functional overload, so that its outs are made to fit."""

import pytest

from opcov.scan import reach, recipes
from opcov.torchenv import import_torch

torch = import_torch()


@pytest.fixture(scope="module")
def catalog():
    """The op catalogue, built once for the module (each test built it again: ~1 s of CPU a time)."""
    from opcov.catalog import build_catalog

    return build_catalog()


def test_every_recipe_names_an_op_of_this_torch(catalog):
    stale = sorted(name for name in recipes.RECIPES if catalog.get(name) is None)
    assert not stale, f"recipes for ops this torch does not have: {stale}"


@pytest.mark.parametrize("name", sorted(recipes.RECIPES))
def test_each_recipe_fits_its_op_and_records_its_reach(name, catalog):
    """Without its recipe each of these ops stayed 'reach unresolved' on every backend's file."""
    op = catalog.get(name)
    fwd, _ = reach._record_one(torch, reach._recorder(torch), name, op.composite)
    assert fwd.ops is not None, (name, fwd.error)
    assert fwd.source in ("recipe", "recipe on cpu"), (name, fwd.source)


def test_an_lstm_cell_reaches_the_ops_its_gates_are_computed_with():
    """Synthesized inputs gave lstm_cell weights of 3 rows, where 4 gates x hidden size are needed."""
    fwd, bwd = reach._record_one(torch, reach._recorder(torch), "aten::lstm_cell", "implicit")
    assert fwd.source == "recipe" and {"aten::addmm", "aten::sigmoid_", "aten::tanh"} <= set(fwd.ops), fwd
    assert bwd is not None and bwd.ops, bwd


@pytest.mark.parametrize(
    "out,functional",
    [
        ("aten::linspace.Tensor_Tensor_out", "aten::linspace.Tensor_Tensor"),  # takes dtype, layout, ...
        ("aten::randint_like.Tensor_out", "aten::randint_like.Tensor"),  # memory_format in both
        ("aten::linalg_norm.ord_str_out", "aten::linalg_norm.ord_str"),  # dtype in both
        ("aten::add.out", "aten::add.Tensor"),
    ],
)
def test_an_out_overload_finds_its_functional_overload(out, functional):
    from opcov.catalog import overload_name, resolve_overload

    got = reach._functional(resolve_overload(torch, out))
    assert got is not None and overload_name(got) == functional


def test_a_factorys_out_overload_is_recorded_with_outs_made_to_fit(catalog):
    """linspace's Tensor out= overloads were 'missing value for argument out': no functional overload
    was found for them, so no out tensor was made."""
    name = "aten::linspace.Tensor_Tensor_out"
    fwd, _ = reach._record_one(torch, reach._recorder(torch), name, catalog.get(name).composite)
    assert fwd.ops, fwd


def test_a_changed_recipe_records_the_reach_again():
    """The reach cache is keyed by the recorder's source and the recipes': a changed recipe is used."""
    import hashlib

    name = reach.cache_name("9.9.9")
    h = hashlib.sha256()
    for source in (reach.__file__, recipes.__file__):
        with open(source, "rb") as f:
            h.update(f.read())
    assert h.hexdigest()[:12] in name
