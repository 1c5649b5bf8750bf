"""The compile probe (opcov.probe.compiled): OpInfo samples compiled with Inductor against eager CPU."""

import os

from opcov.probe import compiled
from opcov.store import data


def test_cells_take_the_worst_case_and_graph_breaks_are_fallbacks():
    done = {
        ("add", "float32"): {
            "group": "add",
            "dtype": "float32",
            "cases": [
                {"i": 0, "status": "pass", "ops": [["aten::add.Tensor", "float32"]]},
                {"i": 1, "status": "mismatch", "why": "values differ", "ops": [["aten::add.Tensor", "float32"]]},
            ],
        },
        ("item", "float32"): {
            "group": "item",
            "dtype": "float32",
            "cases": [{"i": 0, "status": "fallback", "why": "graph break: ...", "ops": [["aten::item", "float32"]]}],
        },
    }
    doc = compiled._document(
        done, {"name": "cpu", "device_type": "cpu"}, "opcov probe cpu --path compile", 2, 0, "2.13.0+cpu"
    )
    add = doc["ops"]["aten::add.Tensor"]["float32"]
    assert add["fwd"] == "mismatch" and add["cases"] == 2 and add["fails"] == 1 and add["case"] == "add|float32|1"
    assert doc["ops"]["aten::item"]["float32"]["fwd"] == "fallback"
    assert not data.validate(doc, "probed.yaml")  # a probed snapshot check reads as it reads the eager ones


def test_a_real_opinfo_compiles_and_matches_eager_as_given_and_with_transposed_strides():
    """Each sample is compiled as given and again with its tensors' last two dims laid out transposed
    (the same values): a compiled graph sees the strides its own ops make, and composites pick their path
    by them. The variant's class says non-contiguous ('!nc'), so the verdict can tell them apart."""
    rec = compiled.run_group(("mm", "float32", 1, 300))
    given, transposed = rec["cases"]
    assert given["i"] == 0 and transposed["i"] == "0t"
    for case in (given, transposed):
        assert case["status"] in ("pass", "pass_low_precision"), case
        assert ["aten::mm", "float32"] in [list(o) for o in case["ops"]]
    assert given["sigs"] == ["float32:2,float32:2;"] and transposed["sigs"] == ["float32:2!nc,float32:2!nc;"]


def test_a_layout_variant_keeps_the_values_and_is_made_only_where_strides_can_differ():
    import torch

    x = torch.arange(24.0).reshape(2, 3, 4)
    ((i, fn, (laid, scalar)),) = compiled._transposed(torch, torch.mul, (x, 2.0), 3)
    assert i == "3t" and scalar == 2.0 and torch.equal(laid, x) and not laid.is_contiguous()
    assert torch.equal(fn(x, 2.0), x * 2)  # the compiled function makes the layout itself, from any input
    sparse = torch.eye(3).to_sparse_csr()
    for nothing in [(torch.ones(5),), (torch.ones(4, 1),), (torch.ones(0, 3),), (1.0,), (sparse,)]:
        assert compiled._transposed(torch, torch.mul, nothing, 0) == []


def test_a_worker_pays_inductors_start_before_its_first_case_and_compiles_in_process(tmp_path):
    """Run as a probe worker is (a fresh process): after the worker's start, Inductor is imported and has
    compiled once, so a first sample's limit covers its own compile only, and no compile subprocess pool."""
    import json
    import os
    import subprocess
    import sys

    code = (
        "import sys, json, time; from opcov.probe import compiled; compiled._worker_init(); "
        "import torch; from torch._inductor import config; warmed = 'torch._inductor.codecache' in sys.modules; "
        "t = time.time(); rec = compiled.run_group(('mul', 'float32', 1, 300)); "
        "print(json.dumps([config.compile_threads, warmed, rec['cases'][0]['status'], time.time() - t]))"
    )
    env = {k: v for k, v in os.environ.items() if k != "TORCHINDUCTOR_COMPILE_THREADS"}
    env["TORCHINDUCTOR_CACHE_DIR"] = str(tmp_path / "cache")  # cold: nothing compiled on this machine before
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=600, env=env)
    assert proc.returncode == 0, proc.stderr[-2000:]
    threads, warmed, status, _ = json.loads(proc.stdout.strip().splitlines()[-1])
    assert threads == 1 and warmed and status in ("pass", "pass_low_precision")


def test_groups_compiled_together_file_a_graph_break_under_its_own_sample_only():
    """Several groups are compiled as one graph (one C++ build); item's graph break fails that graph, which
    is split until item is compiled alone: mul still passes, and item alone is the fallback."""
    spent, recs = compiled._timed_batch(([("mul", "float32"), ("item", "float32")], 1, 300))
    assert spent > 0  # the CPU seconds the benchmark extrapolates per group (the C++ build's included)
    assert [r["group"] for r in recs] == ["mul", "item"]
    (mul,), (item,) = (r["cases"] for r in recs)  # their first samples are 0-d: no layout variant
    assert mul["status"] in ("pass", "pass_low_precision"), mul
    assert item["status"] == "fallback" and item["why"].startswith("graph break"), item
    assert not {"ref", "_run", "mode"} & (set(mul) | set(item))  # journal records hold JSON only


def test_the_probed_file_says_groups_were_compiled_together():
    done = {("add", "float32"): {"group": "add", "dtype": "float32", "cases": []}}
    doc = compiled._document(done, {"name": "cpu", "device_type": "cpu"}, "c", 2, 0, "2.13.0+cpu", together=8)
    assert any("up to 8 OpInfo x dtype groups are compiled as one graph" in n for n in doc["provenance"]["notes"])


def _case(i, status, ops, sigs=None, other=(), why=None):
    case = {"i": i, "status": status, "ops": [list(o) for o in ops], "sigs": sigs or [""] * len(ops)}
    case["other"] = [list(o) for o in other]
    if why:
        case["why"] = why
    return case


def _groups(**by_group):
    """The probe's finished groups, float32, from {group: [cases]} (a group name's dots as '__')."""
    return {
        (g.replace("__", "."), "float32"): {"group": g.replace("__", "."), "dtype": "float32", "cases": cases}
        for g, cases in by_group.items()
    }


def _doc(done):
    return compiled._document(
        done, {"name": "xla", "device_type": "xla"}, "opcov probe xla --path compile", 10, 0, "2.9"
    )


def test_a_failure_of_an_op_only_the_failing_sample_ran_is_filed_under_that_op():
    """F.embedding with max_norm also runs embedding_renorm_ (in place on the weight), which openxla
    compiled wrongly; the plain embedding samples ran. Filed under embedding, the failure made every
    transformer's compile verdict on xla 'fails'."""
    emb = ("aten::embedding", "float32")
    renorm = ("aten::embedding_renorm_", "float32", "float32:2,int64:2")
    detach = ("aten::detach", "float32", "float32:2")
    doc = _doc(
        _groups(
            nn__functional__embedding=[
                _case(0, "pass", [emb], ["float32:2,int64:2"]),
                _case(5, "error", [emb], ["float32:2,int64:2"], [detach, renorm], "RuntimeError: Check failed"),
            ]
        )
    )
    assert doc["ops"]["aten::embedding"]["float32"]["fwd"] == "pass"
    cell = doc["ops"]["aten::embedding_renorm_"]["float32"]
    assert cell["fwd"] == "error" and cell["case"] == "nn.functional.embedding|float32|5"
    assert "aten::detach" not in doc["ops"]  # run beside it, by every model: not what failed


def test_a_failing_in_place_op_is_filed_under_its_functional_overload_too():
    """adaptive_avg_pool1d of a transposed input, output 1, runs as_strided_ (ATen's channels-last path),
    which openxla cannot compile; a compiled op set is functional and names it as_strided (Swin's head)."""
    mean = ("aten::mean.dim", "float32", "float32:4")
    strided = ("aten::as_strided_", "float32", "float32:4")
    doc = _doc(
        _groups(
            nn__functional__adaptive_avg_pool1d=[
                _case(4, "pass", [], other=[mean]),
                _case("4t", "error", [], other=[mean, strided], why="RuntimeError: Expected XLA tensor"),
            ]
        )
    )
    for name in ("aten::as_strided_", "aten::as_strided"):
        cell = doc["ops"][name]["float32"]
        assert cell["fwd"] == "error" and cell["failed"] == [
            "error nn.functional.adaptive_avg_pool1d|float32|4t float32:4"
        ]
    assert "aten::mean.dim" not in doc  # the given layout ran it too: not what failed
    assert compiled._functional("aten::add_.Tensor") == "aten::add.Tensor"


def test_a_failing_case_keeps_its_signature_class_for_the_verdict():
    """mean.dim raising on a 0-d input says nothing of a model's 3-d calls: the failure is kept with its
    class, as the eager probe keeps it (opcov.verdict.signature), and a 3-d call does not match it."""
    from opcov.verdict.signature import matches

    op = ("aten::mean.dim", "float32")
    done = _groups(
        mean=[
            _case(0, "pass", [op], ["float32:3"]),
            _case(1, "error", [op], ["float32:0d"], why="RuntimeError: Value out of range"),
        ]
    )
    cell = _doc(done)["ops"]["aten::mean.dim"]["float32"]
    assert cell["fwd"] == "error" and cell["failed"] == ["error mean|float32|1 float32:0d"]
    assert not matches("float32:0d", "[2, 16, 64]") and matches("float32:0d", "[]")


def test_an_error_that_does_not_repeat_alone_is_flaky_and_one_that_does_is_kept():
    """A worker that has compiled many graphs failed on the next for reasons of its own (PyTorch/XLA's
    computation cache); each such group is compiled again alone in a fresh process."""
    op = [("aten::cat", "float32")]
    rec = {
        "group": "cat",
        "dtype": "float32",
        "cases": [
            _case(0, "error", op, why="RuntimeError: Execution supplied 5 buffers but compiled program expected 4"),
            _case(1, "error", op, why="RuntimeError: Value out of range"),
            _case(2, "pass", op),
        ],
    }
    alone = {"group": "cat", "dtype": "float32", "cases": [_case(0, "pass", op), _case(1, "error", op, why="again")]}
    compiled.merge_alone(rec, alone)
    first, second, third = rec["cases"]
    assert first["status"] == "flaky" and "Execution supplied 5 buffers" in first["why"]
    assert second["status"] == "error" and second["why"] == "again"
    assert third["status"] == "pass" and rec["alone"] is True


def test_probing_xla_compile_without_torch_xla_is_one_line(tmp_path):
    from conftest import run_opcov

    r = run_opcov("probe", "xla", "--path", "compile", "--ops", "^add$", "--out", str(tmp_path / "x.yaml"))
    assert r.returncode != 0 and "Traceback" not in r.stderr
    assert "needs torch_xla in this Python" in r.stderr and not (tmp_path / "x.yaml").exists()


def test_openxla_compiles_opinfo_samples_on_the_xla_device(tmp_path):
    """`opcov probe xla --path compile` in a Python with PyTorch/XLA (scripts/envs/xla.sh): each sample
    compiled with openxla, its inputs on the xla device, compared with eager CPU; nonzero's data-dependent
    shape breaks the graph. Skipped, saying so, where there is no such Python."""
    import pytest
    from conftest import XLA_PYTHON, load_yaml, run_xla

    if not os.path.exists(XLA_PYTHON):
        pytest.skip(f"no Python with PyTorch/XLA at {XLA_PYTHON} (OPCOV_XLA_PYTHON)")
    out = tmp_path / "compile-xla.yaml"
    ops = "^(add|nonzero|nn.functional.adaptive_avg_pool1d)$"
    r = run_xla("probe", "xla", "--path", "compile", "--ops", ops, "--samples", "5", "--out", str(out), timeout=600)
    assert r.returncode == 0, r.stderr[-2000:]
    doc = load_yaml(str(out))
    assert doc["provenance"]["mode"] == "compile (openxla)" and doc["backend"]["name"] == "xla"
    assert doc["ops"]["aten::add.Tensor"]["float32"]["fwd"] == "pass"
    nonzero = doc["ops"]["aten::nonzero"]["float32"]
    assert nonzero["fwd"] == "fallback" and "graph break" in nonzero["why"]
    # the fifth sample pools to size 1; laid out transposed, ATen runs as_strided_ there, which openxla
    # cannot compile (Swin's classifier head, a false 'runs' before the layout variant)
    strided = doc["ops"]["aten::as_strided"]["float32"]
    assert strided["fwd"] == "error" and "Expected XLA tensor" in strided["why"], strided
    assert strided["failed"] == ["error nn.functional.adaptive_avg_pool1d|float32|4t float32:4;"]


def test_the_classes_of_cases_that_ran_are_kept_beside_the_failing_ones():
    """addmm.decomposed's samples ran with the default scalars where addmm's, with alpha and beta not 1,
    fell back: the cell keeps both, so the verdict can tell that the fallback hangs on the scalars."""
    op = ("aten::addmm", "float32")
    done = _groups(
        addmm=[_case(0, "fallback", [op], ["float32:2,float32:2,float32:2;beta=0.2,alpha=0.6"])],
        addmm__decomposed=[_case(0, "pass", [op], ["float32:2,float32:2,float32:2"])],
    )
    cell = _doc(done)["ops"]["aten::addmm"]["float32"]
    assert cell["ran"] == ["float32:2,float32:2,float32:2"]
    assert cell["failed"] == ["fallback addmm|float32|0 float32:2,float32:2,float32:2;beta=0.2,alpha=0.6"]
