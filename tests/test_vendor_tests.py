"""Vendor-test expectations ('opcov expect tpu --vendor-tests PATH', opcov.scan.vendortests and
opcov.store.vendor): read from a checkout's op tests with ast, never imported; mapped to aten
overloads; shown by 'opcov ops' and 'check' as expectations, not results.

The checkout here is a fixture written for these tests in the shape of TorchTPU's tests/ops_test.py and
tests/op_testing.py (do_test_op calls with exclude_dtypes / check_grad / check_dynamism, dtype groups);
it imports a module that does not exist, so a reader that imported it would fail."""

from __future__ import annotations

import json
import os
import shutil

import pytest
from conftest import ROOT, run_opcov

from opcov.errors import UsageError
from opcov.scan import vendortests

CHECKOUT = os.path.join(ROOT, "tests", "data", "vendortests")
COMMIT = "0" * 40


def test_the_tests_are_read_without_running_them():
    found = vendortests.read(CHECKOUT)
    o = found["opinfos"]
    assert o["floor"]["exclude_dtypes"] == {"any": ["bool", "int16", "int32", "int64", "int8", "uint8"]}
    assert o["floor"]["exclude_inplace_dtypes"]["any"] == o["floor"]["exclude_dtypes"]["any"]
    assert o["addmm"]["check_grad"] is False  # its gradient is not checked
    assert o["addmm"]["exclude_dtypes"] == {"cpu": ["complex64"], "gpu": ["bool", "complex64"]}  # per golden device
    assert o["split_with_sizes_copy"]["check_dynamism"] is False
    assert o["nn.functional.pad.reflect"]["exclude_dtypes"] == {"any": ["float16"]}  # variant_test_name
    assert o["erfc"]["skipped"] == "not ready yet"
    assert o["_foreach_frac"]["skipped"].startswith("_foreach_frac is not ready")  # named as its message names it
    # tested twice, the second time on shapes only: float16 is tested, integers in neither call
    assert o["histc"]["exclude_dtypes"] == {"cpu": ["bool", "int16", "int32", "int64", "int8", "uint8"]}
    assert "check_value" not in o["histc"] and o["sigmoid"]["check_value"] == "LOOSE"
    assert found["deny_lists"]["COMPILE_DENYLIST"]["names"] == ["masked_select", "nonzero"]
    assert found["deny_lists"]["BOUNDED_DYNAMISM_DENYLIST"]["names"] == ["topk"]
    with pytest.raises(UsageError, match="no tests/ops_test.py"):
        vendortests.read(os.path.join(ROOT, "tests"))


@pytest.fixture(scope="module")
def cov(tmp_path_factory):
    folder = tmp_path_factory.mktemp("vendor") / "coverage"
    for b in ("cpu", "tpu"):
        shutil.copytree(os.path.join(ROOT, "coverage", b), folder / b)
    shutil.copytree(os.path.join(ROOT, "coverage", "models", "nn-convnet"), folder / "models" / "nn-convnet")
    proc = run_opcov(
        "expect", "tpu", "--vendor-tests", CHECKOUT, "--commit", COMMIT, "--repo", "fixture", "--coverage", str(folder)
    )
    assert proc.returncode == 0, proc.stderr
    assert "an expectation, not a result" in proc.stdout
    return folder


def test_expectations_are_stored_per_aten_overload_with_their_source(cov):
    doc = json.load(open(cov / "vendor" / "tpu" / "torchtpu-tests.json"))
    assert doc["evidence"] == "vendor_expected" and doc["source"]["commit"] == COMMIT
    assert set(doc["source"]["files"]) == {"tests/ops_test.py", "tests/op_testing.py"}
    kinds = {i["kind"] for i in doc["ops"]["aten::addmm"]}
    assert kinds == {"exclude_dtypes", "check_grad"}
    assert "aten::unsqueeze" not in doc["ops"]  # floor's cases reach it for 0-d samples: not what they are about
    assert any(i["kind"] == "deny" for i in doc["ops"]["aten::nonzero"])
    assert doc["ops"]["aten::reflection_pad2d"][0]["dtypes"] == ["float16"]


def test_ops_and_check_show_them_as_expectations(cov):
    proc = run_opcov("ops", "aten::addmm", "-b", "tpu", "--coverage", str(cov))
    assert proc.returncode == 0, proc.stderr
    assert "TorchTPU's tests expect: gradient not checked" in proc.stdout
    assert "an expectation, not a result" in proc.stdout and f"fixture@{COMMIT[:12]}" in proc.stdout
    proc = run_opcov("check", "nn-convnet", "-b", "tpu", "--coverage", str(cov), "--format", "json")
    assert proc.returncode in (0, 1), proc.stderr
    notes = json.loads(proc.stdout)["verdicts"][0]["notes"]
    said = [n for n in notes if "TorchTPU's tests expect" in n]
    assert said and all(n.endswith("an expectation, not a result)") for n in said)
    assert json.loads(proc.stdout)["verdicts"][0]["evidence"] != "vendor_expected"  # never judged from


def test_a_checkout_that_is_not_git_needs_its_commit(tmp_path):
    proc = run_opcov("expect", "tpu", "--vendor-tests", CHECKOUT, "--coverage", str(tmp_path / "c"))
    assert proc.returncode == 2 and "--commit" in proc.stderr and len(proc.stderr.strip().splitlines()) == 1
