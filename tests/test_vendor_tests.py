"""Vendor-test expectations ('opcov expect tpu --vendor-tests PATH', opcov.scan.vendortests and
opcov.store.vendor): read from a checkout's op tests with ast, never imported; mapped to aten
overloads; shown by 'opcov ops' and 'check' as expectations, not results.

The checkout here is a fixture written for these tests in the shape of TorchTPU's tests/ops_test.py and
tests/op_testing.py (do_test_op calls with exclude_dtypes / check_grad / check_dynamism, dtype groups);
it imports a module that does not exist, so a reader that imported it would fail."""

from __future__ import annotations

import html
import json
import os
import shutil

import pytest
from conftest import ROOT, opcov_here, run_opcov

from opcov.errors import UsageError
from opcov.scan import vendortests
from opcov.store import vendor

CHECKOUT = os.path.join(ROOT, "tests", "data", "vendortests")
# a few lines in the shapes TorchTPU's real tests have (read from a public copy of its source)
REAL_SHAPES = os.path.join(ROOT, "tests", "data", "vendortests_real")
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
    assert found["deny_lists"]["op_testing.COMPILE_DENYLIST"]["names"] == ["masked_select", "nonzero"]
    assert found["deny_lists"]["op_testing.COMPILE_DENYLIST"]["applies"] == "compile"
    assert found["deny_lists"]["op_testing.BOUNDED_DYNAMISM_DENYLIST"]["names"] == ["topk"]
    assert found["deny_lists"]["op_testing.BOUNDED_DYNAMISM_DENYLIST"]["applies"] == "bounded dynamism"
    with pytest.raises(UsageError, match="no tests/ops_test.py"):
        vendortests.read(os.path.join(ROOT, "tests"))


@pytest.fixture(scope="module")
def cov(tmp_path_factory):
    folder = tmp_path_factory.mktemp("vendor") / "coverage"
    for b in ("cpu", "tpu"):
        shutil.copytree(os.path.join(ROOT, "coverage", b), folder / b)
    shutil.copytree(os.path.join(ROOT, "coverage", "models", "nn-convnet"), folder / "models" / "nn-convnet")
    proc = opcov_here(
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
    assert any(i["kind"] == "deny_compile" for i in doc["ops"]["aten::nonzero"])
    assert doc["ops"]["aten::reflection_pad2d"][0]["dtypes"] == ["float16"]


def test_ops_and_check_show_them_as_expectations(cov):
    proc = opcov_here("ops", "aten::addmm", "-b", "tpu", "--coverage", str(cov))
    assert proc.returncode == 0, proc.stderr
    assert "TorchTPU's tests expect: gradient not checked" in proc.stdout
    assert "an expectation, not a result" in proc.stdout and f"fixture@{COMMIT[:12]}" in proc.stdout
    proc = opcov_here("check", "nn-convnet", "-b", "tpu", "--coverage", str(cov), "--format", "json")
    assert proc.returncode in (0, 1), proc.stderr
    (training,) = [v for v in json.loads(proc.stdout)["verdicts"] if v["mode"] == "training"]
    said = [n for n in training["notes"] if "TorchTPU's tests expect" in n]
    assert said and all(f"fixture@{COMMIT[:12]})" in n for n in said)  # each line names its source, short
    # that they are expectations, and the source's own note, said once before them (not on each of them)
    (once,) = [n for n in training["notes"] if n.startswith("TorchTPU's test expectations below are read from")]
    assert once.endswith("expectations, not results") and training["notes"].index(once) < training["notes"].index(
        said[0]
    )
    assert training["evidence"] != "vendor_expected"  # never judged from


def test_a_verdict_shows_only_the_expectations_that_bear_on_the_run():
    """The bundled TorchTPU expectations against llama: kron's test reaching aten::mul.Tensor, values
    checked loosely, and the bounded-dynamism deny list say nothing of whether llama runs eagerly; arange
    with int64 excluded does (llama calls arange at int64). The rest is counted and 'opcov ops' has it."""
    proc = opcov_here("check", "llama", "-b", "tpu", "--mode", "inference", "--format", "json")
    assert proc.returncode in (0, 1), proc.stderr
    notes = json.loads(proc.stdout)["verdicts"][0]["notes"]
    said = [n for n in notes if "tests expect" in n]
    assert any(n.startswith("aten::arange: TorchTPU's tests expect: dtypes excluded:") for n in said), said
    assert not any("OpInfo kron" in n or "checked loosely" in n or "dynamism" in n for n in said), said
    (more,) = [n for n in notes if n.startswith("vendor-test expectations: ")]
    assert "do not bear on this run" in more and more.endswith("opcov ops OP -b tpu")
    # the bundled data's model tests: a model named like llama, said with where it was read
    (model,) = [n for n in notes if "own model tests run" in n]
    assert "meta-llama/Llama-3.2-1B, named like llama (matched by name, not by config)" in model
    assert "tests/compile/model_coverage_hf_test.py:" in model and "github.com/jonathan1920/torch_tpu@" in model
    assert vendor.bears({"kind": "exclude_dtypes", "dtypes": ["int64"]}, {"int64"}, False, "eager")
    assert not vendor.bears({"kind": "exclude_dtypes", "dtypes": ["int64"]}, {"float32"}, True, "eager")
    assert vendor.bears({"kind": "check_grad"}, {"float32"}, True, "eager")
    assert not vendor.bears({"kind": "check_grad"}, {"float32"}, False, "eager")
    assert vendor.bears({"kind": "deny_dynamism"}, (), False, "compile")
    assert not vendor.own_test("aten::mul.Tensor", {"opinfo": "kron"})
    assert vendor.own_test("aten::gelu", {"opinfo": "nn.functional.gelu"})


def test_a_sharded_step_says_which_collectives_the_backends_own_tests_call():
    """tpu's process group cannot be read without the device: beside that, the bundled data says which of
    the step's collectives TorchTPU's distributed tests call, with where, as expectations."""
    proc = opcov_here("check", "llama", "-b", "tpu", "--parallel", "ddp", "--format", "json")
    assert proc.returncode in (0, 1), proc.stderr
    notes = json.loads(proc.stdout)["verdicts"][0]["notes"]
    (group,) = [n for n in notes if n.startswith("process group:")]
    assert "cannot be read without the device" in group
    called = [n for n in notes if "own distributed tests call torch.distributed." in n]
    assert any("all_reduce (c10d::allreduce_" in n and "tests/distributed/collective_ops_test.py:" in n for n in called)
    assert all(n.endswith("an expectation, not a result)") for n in called)


def test_a_checkout_that_is_not_git_needs_its_commit(tmp_path):
    proc = opcov_here("expect", "tpu", "--vendor-tests", CHECKOUT, "--coverage", str(tmp_path / "c"))
    assert proc.returncode == 2 and "--commit" in proc.stderr and len(proc.stderr.strip().splitlines()) == 1


def test_the_shapes_the_real_tests_have_are_read():
    found = vendortests.read(REAL_SHAPES)
    o = found["opinfos"]
    # skipped only off a TPU, tested on one: its exclusions still count
    assert o["linalg.lu"]["skipped_when"] == [
        {
            "when": "op_testing._TORCH_TPU_DEVICE.value != 'tpu'",
            "why": "linalg.lu is not implemented on {op_testing._TORCH_TPU_DEVICE.value}.",
        }
    ]
    assert "skipped" not in o["linalg.lu"] and o["linalg.lu"]["check_grad"] is False
    assert o["linalg.lu"]["exclude_dtypes"]["any"] == [
        "bfloat16",
        "bool",
        "float16",
        "int16",
        "int32",
        "int64",
        "int8",
        "uint8",
    ]  # torch.half read as float16
    # a conditional expression: the public build excludes the integers
    assert o["nn.functional.nll_loss"]["exclude_dtypes"] == {
        "any": ["bool", "int16", "int32", "int64", "int8", "uint8"]
    }
    assert o["nn.functional.nll_loss"]["exclude_dtypes_when"] == "not (env.IS_INTERNAL_TORCH_TPU)"
    assert o["sort"]["check_value_outputs"] == ["STRICT", "SKIP"] and o["sort"]["check_out_variant"] is False
    assert o["sort"]["other"] == {"check_device": ["False"]}  # kept, named
    assert o["topk"]["skip_output_indices"] == [1]
    sdpa = o["nn.functional.scaled_dot_product_attention"]  # inside a `with`, under a skip decorator
    assert sdpa["check_value"] == "LOOSE" and sdpa["decorators"] == ["op_testing.skip_if_torch_tpu_vs_gpu_mode"]
    assert o["_foreach_max"]["skipped"].startswith("_foreach_log2")  # named by its method: the message names another
    assert o["clamp"]["skip_if"] == ["op_testing.some_filter"] and o["clamp"]["check_dynamism"] is False
    deny = found["deny_lists"]
    compiled = deny["op_testing._compiled_supports_op.compiled_deny_list"]
    assert compiled["applies"] == "compile" and compiled["names"] == ["nonzero", "normal.out"]
    untriaged = deny["dynamism_test_utils.verify_op_supports_dynamism.untriaged_ops_deny_list"]
    assert untriaged["applies"] == "bounded dynamism" and untriaged["why"] == "Op {op.name} is not supported."
    assert deny["dynamism_test_utils.verify_op_supports_dynamism.require_mark_dynamic_support"]["names"] == ["addmm"]
    inline = [d for d in deny.values() if d["names"] == ["max", "min"]]
    assert len(inline) == 1 and inline[0]["when"] == "op.name in ['min', 'max'] and args"
    assert not any("ternary" in k for k in deny)  # a list with no reason returned is no deny list
    assert found["not_understood"] == []


def test_the_models_and_collectives_the_real_tests_run_are_read():
    """The model-coverage and distributed tests, in the shapes the real files have: the models a test
    method is parameterized with (a commented-out entry is no model the tests run), and each collective
    call with the test methods that hand its function to the launcher, and the reduce ops they give it; the
    backend's own namespace of ops (torch.ops.torch_tpu) is the one its record names."""
    found = vendortests.read(REAL_SHAPES, "tpu")
    models = {(m["module"], m["test"]): m for m in found["models"]}
    llama = models[("meta-llama/Llama-3.2-1B", "test_hf_transformers_training")]
    assert (llama["provider"], llama["size"], llama["mode"]) == ("transformers", "SMALL", "training")
    assert llama["compiled"] is True and llama["dynamic"] is False
    assert (llama["file"], llama["line"]) == ("tests/compile/model_coverage_hf_test.py", 31)
    assert models[("meta-llama/Llama-3.2-1B", "test_hf_transformers_inference")]["mode"] == "inference"
    assert len(found["models"]) == 3 and not any("gemma" in m["module"] for m in found["models"])
    calls = {(c["collective"], c["function"]): c for c in found["collectives"]}
    reduce = calls[("all_reduce", "run_all_reduce")]
    assert reduce["c10d"] == "c10d::allreduce_" and reduce["tests"] == ["test_all_reduce_max", "test_all_reduce_sum"]
    assert reduce["reduce_ops"] == ["MAX", "SUM"]  # given as a variable: the reduce ops its tests pass
    assert calls[("reduce_scatter_tensor", "run_reduce_scatter_tensor_avg")]["reduce_ops"] == ["AVG"]
    assert len(calls[("barrier", "_test_wrapper")]["tests"]) == 3  # dist.barrier, through the alias
    assert calls[("barrier", "run_barrier_blocking")]["tests"] == []  # defined, run by no test method
    send = calls[("experimental_send", "run_send_recv")]
    assert (send["api"], send["c10d"], send["tests"]) == ("torch.ops.torch_tpu", None, ["test_send_recv"])
    assert not any(name == "init_process_group" for name, _ in calls)  # set-up, not a collective
    # the gradient is unchecked in one of the OpInfo's tests only: said so, not dropped, not overstated
    sdpa = found["opinfos"]["nn.functional.scaled_dot_product_attention"]
    assert "check_grad" not in sdpa
    assert sdpa["check_grad_off_in"] == ["test_nn_functional_scaled_dot_product_attention_flash"]
    assert found["not_understood"] == []


def test_what_is_not_understood_is_named(tmp_path):
    shutil.copytree(REAL_SHAPES, tmp_path / "c")
    path = tmp_path / "c" / "tests" / "ops_test.py"
    path.write_text(
        path.read_text()
        + """
    def test_odd(self):
        self.do_test_op("abs", exclude_dtypes=some_function(), new_keyword=3)

    def test_helper(self):
        pass
"""
    )
    models = tmp_path / "c" / "tests" / "compile" / "model_coverage_hf_test.py"
    models.write_text(
        models.read_text()
        + """
    @parameterized.named_parameters(dict(testcase_name="no_name", provider="timm"), MODELS)
    def test_odd_models(self, provider):
        pass
"""
    )
    found = vendortests.read(str(tmp_path / "c"))
    said = {(n["test"], n["what"]) for n in found["not_understood"]}
    assert ("test_odd_models", "a parameter set with no module_name") in said
    assert sum(n["test"] == "test_odd_models" for n in found["not_understood"]) == 2  # the name MODELS too
    assert ("test_odd", "exclude_dtypes=some_function()") in said
    assert ("test_odd", "keyword new_keyword=3") in said
    assert ("test_helper", "calls neither do_test_op nor skipTest") in said


def test_real_shapes_map_and_show_as_expectations(tmp_path):
    folder = tmp_path / "coverage"
    for b in ("cpu", "tpu"):
        shutil.copytree(os.path.join(ROOT, "coverage", b), folder / b)
    proc = opcov_here(
        "expect",
        "tpu",
        "--vendor-tests",
        REAL_SHAPES,
        "--vendor-source",
        f"tests/ops_test.py=example.org/copy@{'a' * 40}",
        "--vendor-source",
        f"tests/op_testing.py=example.org/copy@{'b' * 40}",
        "--vendor-source",
        f"tests/dynamism_test_utils.py=example.org/copy@{'c' * 40}",
        "--vendor-note",
        "a public copy, not verified as the release",
        "--coverage",
        str(folder),
    )
    assert proc.returncode == 0, proc.stderr
    assert "not mapped: torch.nn.functional.conv_transpose1d" in proc.stdout  # named, not dropped
    assert "not understood: 0" in proc.stdout
    doc = json.load(open(folder / "vendor" / "tpu" / "torchtpu-tests.json"))
    assert doc["source"]["file_commits"]["tests/op_testing.py"] == "b" * 40
    assert doc["mapped"]["div"] == "variants"  # the probe names div's OpInfos by variant only
    assert any(i["kind"] == "check_value" for i in doc["ops"]["aten::div.Tensor"])
    normal = [i for op in doc["ops"] for i in doc["ops"][op] if i["opinfo"] == "normal.out"]
    assert normal and all(i["kind"] == "deny_compile" and i["variant"] == "out" for i in normal)
    proc = opcov_here("ops", "aten::nonzero", "-b", "tpu", "--coverage", str(folder))
    assert proc.returncode == 0, proc.stderr
    line = next(x for x in proc.stdout.splitlines() if "not tested under torch.compile" in x)
    assert f"example.org/copy@{'b' * 12} (a public copy, not verified as the release)" in line
    assert line.endswith("an expectation, not a result)")
    proc = opcov_here("ops", "aten::addmm", "-b", "tpu", "--coverage", str(folder))
    assert "left out of the bounded-dynamism run (on require_mark_dynamic_support: addmm op may work" in proc.stdout
    # the models and collectives, each said with its file, line, repository and commit, as expectations
    assert doc["source"]["file_commits"]["tests/compile/model_coverage_hf_test.py"] == "a" * 40  # --vendor-source's
    (llama,) = vendor.model_notes(str(folder), "tpu", "llama")
    assert "TorchTPU's own model tests run transformers meta-llama/Llama-3.2-1B, named like llama" in llama
    assert "tests/compile/model_coverage_hf_test.py:31, 42 at example.org/copy@aaaaaaaaaaaa" in llama
    assert llama.endswith("an expectation, not a result)") and not vendor.model_notes(str(folder), "tpu", "bert")
    said = vendor.collectives_said(doc, c10d={"c10d::allreduce_"})
    assert len(said) == 1 and "torch.distributed.all_reduce (c10d::allreduce_, reduce ops MAX, SUM" in said[0]
    assert "tests/distributed/collective_ops_test.py:23 at example.org/copy@aaaaaaaaaaaa" in said[0]
    (barrier,) = vendor.collectives_said(doc, c10d={"c10d::barrier"})
    assert "also in a function no test method runs: tests/distributed/collective_ops_test.py:40" in barrier
    grad = [i for i in doc["ops"]["aten::_safe_softmax"] if i["kind"] == "check_grad_off_in"]
    assert "gradient not checked in test_nn_functional_scaled_dot_product_attention_flash" in vendor.said(doc, grad[0])
    # the site: the backend page says what was read, from where, as expectations; an op page says its own
    proc = run_opcov("site", "--coverage", str(folder), "--out", str(tmp_path / "site"))
    assert proc.returncode == 0, proc.stderr
    page = html.unescape((tmp_path / "site" / "backends" / "tpu.html").read_text())
    assert "What TorchTPU's own tests expect" in page and "Expectations, not results" in page
    assert f"<td><code>tests/distributed/collective_ops_test.py</code></td><td><code>{'a' * 40}</code>" in page
    assert "deny list <code>compiled_deny_list</code> (compile): 2 name(s), <code>tests/op_testing.py:" in page
    assert "TorchTPU's own model tests run transformers meta-llama/Llama-3.2-1B (inference and training" in page
    assert "torch.distributed.all_reduce (c10d::allreduce_" in page
    op = html.unescape((tmp_path / "site" / "ops" / "aten" / "nonzero.html").read_text())
    assert f"tests/op_testing.py (line 15, _compiled_supports_op), example.org/copy@{'b' * 12}" in op


def test_a_bad_vendor_source_is_refused_in_one_line(tmp_path):
    for spec, said in (("github.com/x", "expected REPO@COMMIT"), ("tests/x.py=r@abc1234", "not tests/x.py")):
        proc = opcov_here(
            "expect", "tpu", "--vendor-tests", REAL_SHAPES, "--vendor-source", spec, "--coverage", str(tmp_path / "c")
        )
        assert proc.returncode == 2 and said in proc.stderr and len(proc.stderr.strip().splitlines()) == 1
    assert not (tmp_path / "c").exists()  # nothing written
    proc = opcov_here("expect", "tpu", "--vendor-tests", str(tmp_path / "none"), "--commit", "abc1234")
    assert proc.returncode == 2 and "no tests/ops_test.py" in proc.stderr
