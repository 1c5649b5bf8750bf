"""The op catalogue: what users filter and read with `opcov ops`."""

import json

import pytest
from conftest import opcov_here


@pytest.fixture(scope="module")
def catalog():
    from opcov.catalog import build_catalog

    return build_catalog()


def test_core_aten_follows_the_running_torch(catalog):
    import torch

    from opcov.catalog import resolve_overload

    expected = {
        n
        for n in torch._C._dispatch_get_all_op_names()
        if n.startswith("aten::") and torch.Tag.core in resolve_overload(torch, n).tags
    }
    assert {op.name for op in catalog.core} == expected
    assert len(expected) > 150


def test_structured_delegate_and_composite_kind(catalog):
    assert catalog.get("aten::add.Tensor").structured_delegate == "aten::add.out"
    assert catalog.get("aten::add_.Tensor").structured_delegate == "aten::add.out"
    assert catalog.get("aten::mm").structured_delegate == "aten::mm.out"
    assert catalog.get("aten::matmul").composite == "implicit"
    assert catalog.get("aten::mm").composite == "explicit_nonfunctional"


def test_tags_read_off_schema(catalog):
    assert "inplace" in catalog.get("aten::add_.Tensor").tags
    assert "out" in catalog.get("aten::add.out").tags
    assert "view" in catalog.get("aten::transpose.int").tags
    assert "pointwise" in catalog.get("aten::add.Tensor").tags
    sym = catalog.get("aten::sym_size.int")
    assert "host_only" in sym.tags and not sym.applicable


def test_overload_name_is_the_catalogue_name_of_every_overload_and_schema(catalog):
    """One naming for the tracer, the reach recorder and the probe: the inverse of resolve_overload."""
    import torch

    from opcov.catalog import overload_name, resolve_overload

    for op in catalog:
        overload = resolve_overload(torch, op.name)
        assert overload_name(overload) == op.name == overload_name(overload._schema)
    assert overload_name(torch.ops.aten.mm.default) == "aten::mm"  # the default overload has no suffix


def test_collective_and_prims_namespaces_are_listed(catalog):
    namespaces = {op.namespace for op in catalog}
    assert {"aten", "prims", "_c10d_functional"} <= namespaces
    assert "_test" not in namespaces  # OpInfo's test ops never enter the catalogue


def test_catalogue_is_reproducible_after_other_imports(catalog):
    import torch.testing._internal.common_methods_invocations  # noqa: F401 - adds _test:: ops

    from opcov.catalog import build_catalog

    assert set(build_catalog().ops) == set(catalog.ops)


def test_ops_command_filters_and_formats():
    proc = opcov_here("ops", "^aten::add", "--core", "--format", "json")
    assert proc.returncode == 0, proc.stderr
    doc = json.loads(proc.stdout)
    names = [o["name"] for o in doc["ops"]]
    assert "aten::add.Tensor" in names
    assert all(n.startswith("aten::add") and "core" in o["tags"] for n, o in zip(names, doc["ops"]))
    proc = opcov_here("ops", "--namespace", "prims", "--tag", "pointwise")
    assert proc.returncode == 0 and "prims::abs " in proc.stdout


def test_ops_bad_pattern_is_one_line():
    proc = opcov_here("ops", "add(")
    assert proc.returncode == 2
    assert proc.stderr.count("\n") == 1 and "bad pattern" in proc.stderr
