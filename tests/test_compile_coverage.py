"""Compile coverage (opcov.scan.compiled): what each backend's torch.compile compiler accepts, as registered data."""

import pytest

from opcov import backends
from opcov.scan import compiled
from opcov.store import data, layout


def test_inductor_lowers_or_falls_back_to_the_devices_kernel():
    eager = {
        "aten::mm": {"fwd": "kernel", "res": "registered", "bwd": "formula", "bwd_res": "registered"},
        "aten::sort": {"fwd": "kernel", "res": "registered", "bwd": "formula", "bwd_res": "registered"},
        "aten::weird": {"fwd": "missing", "res": "missing", "bwd": "none", "bwd_res": "not_applicable"},
    }
    ops = compiled.inductor_records(eager, {"aten::mm", "prims::iota"}, {"aten::sort"}, "cpu")
    assert ops["aten::mm"]["res"] == "registered" and "lowering" in ops["aten::mm"]["src"]
    assert ops["prims::iota"]["res"] == "registered"  # lowered though eager has no record of it
    assert ops["aten::sort"]["res"] == "registered" and "make_fallback" in ops["aten::sort"]["src"]
    # no lowering, and no cpu kernel for the implicit fallback to call: it cannot run compiled either
    assert ops["aten::weird"]["res"] == "missing" and "implicit fallback" in ops["aten::weird"]["src"]
    assert all(r["bwd_res"] == "not_applicable" for r in ops.values())  # backward ops are in the AOT graph


def test_tpu_compile_has_no_cpu_fallback_and_flags_its_tests_deny_list():
    eager = {
        "aten::mm": {"fwd": "kernel", "res": "registered", "bwd": "formula", "bwd_res": "registered"},
        "aten::cummax": {"fwd": "fallback", "res": "fallback", "bwd": "formula", "bwd_res": "fallback"},
        "aten::nonzero": {"fwd": "kernel", "res": "registered", "bwd": "none", "bwd_res": "not_applicable"},
    }
    ops = compiled.eager_kernel_records(eager, backends.get_backend("tpu"))
    assert ops["aten::mm"]["res"] == "registered"
    assert ops["aten::cummax"]["res"] == "missing" and "compile error" in ops["aten::cummax"]["why"]
    assert ops["aten::nonzero"]["res"] == "unresolved" and "vendor expectation" in ops["aten::nonzero"]["why"]


@pytest.mark.parametrize("backend", ["cpu", "tpu"])
def test_committed_compile_coverage_is_valid_registered_data(backend):
    files = layout.compile_snapshots(layout.DEFAULT_COVERAGE, backend)["registered"]
    assert files, f"no compile coverage for {backend}: run 'opcov scan {backend} --path compile'"
    doc = data.load(files[-1])
    assert doc["evidence"] == "registered" and doc["provenance"]["mode"].startswith("compile")
    assert doc["ops"]["aten::mm"]["res"] == "registered"


def test_compile_coverage_is_not_read_as_eager_data():
    # eager readers (check, site, lint) never enter a compile/ folder: it is neither a snapshot nor a stray
    eager = [f for f in layout.coverage_files([layout.DEFAULT_COVERAGE]) if "/compile/" in f]
    assert eager == []
    assert not [p for p, _ in layout.strays(layout.DEFAULT_COVERAGE) if "compile" in p]


def test_compiled_op_sets_stay_out_of_the_eager_zoo(tmp_path):
    folder = tmp_path / "models" / "m"
    (folder / "compile").mkdir(parents=True)
    (folder / "training.yaml").write_text("x: 1\n")
    (folder / "compile" / "tpu-training.yaml").write_text("x: 1\n")
    assert layout.model_files(str(tmp_path)) == [str(folder / "training.yaml")]  # gaps, compare, the site
    assert layout.compiled_model_files(str(tmp_path), "tpu") == [str(folder / "compile" / "tpu-training.yaml")]
    assert layout.compiled_model_files(str(tmp_path), "inductor") == []


def test_an_unresolved_fallback_whose_kernel_ran_in_the_eager_probe_is_registered():
    eager = {"aten::convolution_backward": {"fwd": "composite", "res": "unresolved", "bwd": "none", "bwd_res": "none"}}
    ops = compiled.inductor_records(eager, set(), {"aten::convolution_backward"}, "cpu", {"aten::convolution_backward"})
    assert ops["aten::convolution_backward"]["res"] == "registered"
    assert "eager probe" in ops["aten::convolution_backward"]["why"]
    assert compiled.inductor_records(eager, set(), set(), "cpu")["aten::convolution_backward"]["res"] == "unresolved"
