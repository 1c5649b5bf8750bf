"""The compile probe (opcov.probe.compiled): OpInfo samples compiled with Inductor against eager CPU."""

import os

import pytest

from opcov.probe import compiled, compiled_run
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
    rec = compiled_run.run_group(("mm", "float32", 1, 300))
    given, transposed = rec["cases"]
    assert given["i"] == 0 and transposed["i"] == "0t"
    for case in (given, transposed):
        assert case["status"] in ("pass", "pass_low_precision"), case
        assert ["aten::mm", "float32"] in [list(o) for o in case["ops"]]
    assert given["sigs"] == ["float32:2,float32:2;"] and transposed["sigs"] == ["float32:2!nc,float32:2!nc;"]


def test_a_layout_variant_keeps_the_values_and_is_made_only_where_strides_can_differ():
    import torch

    x = torch.arange(24.0).reshape(2, 3, 4)
    ((i, fn, (laid, scalar)),) = compiled_run._transposed(torch, torch.mul, (x, 2.0), 3)
    assert i == "3t" and scalar == 2.0 and torch.equal(laid, x) and not laid.is_contiguous()
    assert torch.equal(fn(x, 2.0), x * 2)  # the compiled function makes the layout itself, from any input
    sparse = torch.eye(3).to_sparse_csr()
    for nothing in [(torch.ones(5),), (torch.ones(4, 1),), (torch.ones(0, 3),), (1.0,), (sparse,)]:
        assert compiled_run._transposed(torch, torch.mul, nothing, 0) == []


def test_a_worker_pays_inductors_start_before_its_first_case_and_compiles_in_process(tmp_path):
    """Run as a probe worker is (a fresh process): after the worker's start, Inductor is imported and has
    compiled once, so a first sample's limit covers its own compile only, and no compile subprocess pool."""
    import json
    import os
    import subprocess
    import sys

    code = (
        "import sys, json, time; from opcov.probe import compiled_run; compiled_run._worker_init(); "
        "import torch; from torch._inductor import config; warmed = 'torch._inductor.codecache' in sys.modules; "
        "t = time.time(); rec = compiled_run.run_group(('mul', 'float32', 1, 300)); "
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
    spent, recs = compiled_run._timed_batch(([("mul", "float32"), ("item", "float32")], 1, 300))
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


def test_a_dtype_can_run_more_samples_than_the_others_in_one_run():
    """`--samples 1,float32=2`: the float32 group runs two samples (each also laid out transposed), the
    float64 group one; the probed file's notes say which dtype had how many."""
    samples = compiled.parse_samples("1,float32=2", ("float32", "float64"))
    assert samples.at("float32") == 2 and samples.at("float64") == 1 and str(samples) == "1,float32=2"
    recs = compiled_run.run_batch(([("mm", "float32"), ("mm", "float64")], samples, 300))
    ids = {rec["dtype"]: [c["i"] for c in rec["cases"]] for rec in recs}
    assert ids == {"float32": [0, "0t", 1, "1t"], "float64": [0, "0t"]}
    done = {(r["group"], r["dtype"]): r for r in recs}
    doc = compiled._document(done, {"name": "cpu", "device_type": "cpu"}, "c", samples, 0, "2.13.0+cpu")
    assert "up to 1 (2 at float32) sample(s) per OpInfo and dtype (float32, float64)" in doc["provenance"]["notes"][1]


def test_a_bad_samples_option_is_one_line():
    from opcov.errors import UsageError

    for text, said in [("0", "whole numbers from 1"), ("2,floa32=4", "unknown dtype 'floa32'"), ("2,3", "one count")]:
        with pytest.raises(UsageError, match=said):
            compiled.parse_samples(text, ("float32",))
    assert compiled.parse_samples(None, ("float32",)) == compiled.Samples(2)


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


def test_past_the_time_limit_no_group_is_compiled_again_alone_and_the_count_is_returned(tmp_path):
    """On xla hundreds of groups have an error (bool lowerings) and each compiled again alone pays a fresh
    worker: --time-limit bounds that pass too, and the probe says how many were left for --resume."""
    import time

    op = ("aten::cat", "float32")
    done = _groups(cat=[_case(0, "error", [op], why="x")], add=[_case(0, "pass", [op])])
    journal = tmp_path / "p.yaml.journal"
    left = compiled._again_alone(done, (2, 60, "cpu", compiled.FORWARD_ONLY), 1, str(journal), time.monotonic() - 1)
    assert left == 1 and not journal.exists() and not done["cat", "float32"].get("alone")


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
    ops = "^(add|acos|nonzero|nn.functional.adaptive_avg_pool1d)$"
    args = ("--ops", ops, "--samples", "5", "--dtypes", "float32,bool", "--out", str(out))
    r = run_xla("probe", "xla", "--path", "compile", *args, timeout=600)
    assert r.returncode == 0, r.stderr[-2000:]
    doc = load_yaml(str(out))
    assert doc["provenance"]["mode"] == "compile (openxla)" and doc["backend"]["name"] == "xla"
    add = doc["ops"]["aten::add.Tensor"]["float32"]
    assert add["fwd"] == "pass" and add["bwd"] == "pass", add  # its gradients through openxla's backward graph
    assert add["special"] == "pass" and "noncontig" not in add  # an XLA tensor has no strides: no layout tier
    # openxla cannot lower acos of a bool tensor; that failed graph must not fail the graphs after it in
    # the worker (PyTorch/XLA ran the failed IR again at each later sync: "Check failed: tensor_data")
    acos = doc["ops"]["aten::acos"]
    assert acos["bool"]["fwd"] == "error" and "Error while lowering" in acos["bool"]["why"], acos["bool"]
    assert acos["float32"]["fwd"] == "pass" and doc["ops"]["aten::add.Tensor"]["bool"]["fwd"] == "pass"
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


# ---------------------------------------------------------------- backward and input tiers

BACKWARD = compiled_run.Depth(backward=True, tiers=("special", "noncontig", "empty"))
CPU = {"name": "cpu", "device_type": "cpu"}


@pytest.fixture(scope="module")
def sin_run():
    """sin at float32, one sample, with its backward and input tiers, compiled by Inductor in this process
    (one forward graph and one forward-and-backward graph): its record, and the probed document of it."""
    (rec,) = compiled_run.run_batch(([("sin", "float32")], 1, 300, "cpu", BACKWARD))
    doc = compiled._document({("sin", "float32"): rec}, CPU, "c", 1, 0, "2.13.0+cpu", depth=BACKWARD)
    return rec, doc


def _slot(rec, slot):
    return [c for c in rec["cases"] if c.get("slot") == slot]


def test_a_samples_backward_is_compiled_and_filed_as_the_eager_probe_files_it(sin_run):
    """sin's gradient through Inductor's compiled backward graph, against eager CPU's: filed under sin's
    bwd, and under the fwd of the ops eager's backward dispatched (cos, mul), which a compiled training op
    set's backward graph names and 'check --path compile' judges as ops."""
    rec, doc = sin_run
    (back,) = _slot(rec, "bwd")
    assert back["i"] == 0 and back["status"] in ("pass", "pass_low_precision"), back
    assert {"aten::cos", "aten::mul.Tensor"} <= {b[0] for b in back["bops"]}
    sin = doc["ops"]["aten::sin"]["float32"]
    assert sin["fwd"] == "pass" and sin["bwd"] == back["status"] and sin["bwd_case"] == "sin|float32|0"
    cos = doc["ops"]["aten::cos"]["float32"]
    assert cos["fwd"] == back["status"] and cos["case"] == "sin|float32|0" and "bwd" not in cos
    assert doc["summary"]["cases"]["backward"] == 1 and doc["summary"]["cells_bwd"] == {back["status"]: 1}
    assert any(n.startswith("backward: where the OpInfo differentiates") for n in doc["provenance"]["notes"])
    assert not data.validate(doc, "probed.yaml")
    assert not {"ref", "_run", "_grad", "mode"} & set(back)  # journal records hold JSON only


def test_input_tiers_are_compiled_and_filed_under_their_keys(sin_run):
    """One harder case per tier (NaN/inf, strides from outside the graph, an empty input), each compiled with
    its inputs as made and filed under the tier's key of the plain cases' cell, as the eager probe's are."""
    from opcov.store.cells import ProbedCell

    rec, doc = sin_run
    assert {c["i"] for c in rec["cases"] if c.get("slot") not in (None, "bwd")} == {"special", "noncontig", "empty"}
    cell = doc["ops"]["aten::sin"]["float32"]
    for tier in ("special", "noncontig", "empty"):
        assert cell[tier] == "pass" and cell[f"{tier}_cases"] == 1, (tier, cell)
        assert f"{tier}_case" not in cell  # a passing tier keeps its counts alone
    assert ProbedCell.from_dict(cell).extra["special"].status == "pass"
    assert doc["summary"]["cells_tiers"]["special"] == {"pass": 1}


def test_a_real_compiled_backward_that_differs_from_eager_is_a_backward_mismatch():
    """native_group_norm's gradient in float16 through Inductor's compiled backward graph (torch 2.13) is 1%
    off eager CPU's, which is within 1e-4 of float64's: a backward mismatch filed under bwd, its forward
    (compiled for inference, and the training graph's forward) a pass."""
    import torch

    if not torch.__version__.startswith("2.13."):
        pytest.skip(f"measured on torch 2.13's Inductor; this is torch {torch.__version__}")
    depth = compiled_run.Depth(backward=True)
    (rec,) = compiled_run.run_batch(([("native_group_norm", "float16")], 1, 300, "cpu", depth))
    fwd = rec["cases"][0]  # as given (eager CPU refuses its transposed layout: no reference)
    (back,) = _slot(rec, "bwd")
    assert fwd["i"] == 0 and fwd["status"] == "pass" and back["status"] == "mismatch", rec
    assert "values differ" in back["why"] and "float64 reference" in back["why"]
    doc = compiled._document({("native_group_norm", "float16"): rec}, CPU, "c", 1, 0, "2.13.0+cpu", depth=depth)
    cell = doc["ops"]["aten::native_group_norm"]["float16"]
    assert cell["fwd"] == "pass" and cell["bwd"] == "mismatch" and cell["bwd_case"] == "native_group_norm|float16|0"
    assert all(c.get("fwd") != "mismatch" for by in doc["ops"].values() for c in by.values())  # nothing else


def _wrong_backward():
    """A planted compiler bug: AOTAutograd's graphs run as traced, every gradient of the backward graph
    made 1.5 times too large."""
    import torch
    from functorch.compile import make_boxed_func
    from torch._dynamo.backends.common import aot_autograd

    def backward(gm, example):
        def run(*args):
            return [g * 1.5 if isinstance(g, torch.Tensor) else g for g in gm(*args)]

        return make_boxed_func(run)

    return aot_autograd(fw_compiler=lambda gm, example: make_boxed_func(gm), bw_compiler=backward)


def test_a_wrong_compiled_backward_is_a_backward_mismatch_and_not_the_backward_ops_fault(monkeypatch):
    """The forward graph is right and the backward graph wrong: sin's forward passes, its backward is a
    mismatch under bwd, and the ops eager's backward ran (cos, mul) get nothing from it."""
    monkeypatch.setitem(compiled_run.TARGETS, "cpu", (_wrong_backward(), "cpu"))
    depth = compiled_run.Depth(backward=True)
    (rec,) = compiled_run.run_batch(([("sin", "float32")], 1, 300, "cpu", depth))
    (back,) = _slot(rec, "bwd")
    assert back["status"] == "mismatch" and "values differ" in back["why"], back
    monkeypatch.undo()
    doc = compiled._document({("sin", "float32"): rec}, CPU, "c", 1, 0, "2.13.0+cpu", depth=depth)
    sin = doc["ops"]["aten::sin"]["float32"]
    assert sin["fwd"] == "pass" and sin["bwd"] == "mismatch" and sin["bwd_fails"] == 1
    assert sin["bwd_failed"] == [f"mismatch sin|float32|0 {back['sigs'][0]}"] and back["sigs"][0].startswith(
        "float32:2"
    )
    assert "aten::cos" not in doc["ops"] and doc["summary"]["cells_bwd"] == {"mismatch": 1}


def test_a_lowering_error_in_the_backward_is_also_the_lowered_ops_own():
    """Inductor names the node it could not lower ('target: aten.cos.default'): as the eager probe's
    'raised_in', that backward op's fwd gets the error beside the forward op's bwd; another failure is
    the forward op's backward alone."""
    case = {"i": 0, "slot": "bwd", "ops": [["aten::sin", "float32"]], "sigs": ["float32:2"]}
    case["bops"] = [["aten::cos", "float32", "float32:2"], ["aten::mul.Tensor", "float32", "float32:2,float32:2"]]
    exc = RuntimeError("LoweringException: AssertionError: \n  target: aten.cos.default\n  args[0]: TensorBox")
    compiled_run._failed(case, exc, 60)
    assert case["status"] == "error" and case["raised"] == "aten::cos"
    ops = _doc(_groups(sin=[_case(0, "pass", [("aten::sin", "float32")], ["float32:2"]), case]))["ops"]
    assert ops["aten::sin"]["float32"]["bwd"] == "error" and ops["aten::cos"]["float32"]["fwd"] == "error"
    assert "aten::mul.Tensor" not in ops


def test_a_case_compiled_again_alone_is_matched_by_its_slot():
    """A group's forward and backward cases share their sample's index: the run alone folds each into its
    own slot's case."""
    op = [("aten::sin", "float32")]
    back = dict(_case(0, "error", op, why="RuntimeError: first"), slot="bwd")
    rec = {"group": "sin", "dtype": "float32", "cases": [_case(0, "pass", op), back]}
    alone = {
        "group": "sin",
        "dtype": "float32",
        "cases": [_case(0, "error", op), dict(_case(0, "pass", op), slot="bwd")],
    }
    compiled.merge_alone(rec, alone)
    assert [c["status"] for c in rec["cases"]] == ["pass", "flaky"]


def test_check_on_the_compile_path_judges_a_backward_graphs_op_by_the_backward_cases(sin_run, tmp_path):
    """A compiled training op set's backward graph runs cos (sin's derivative): 'opcov check --path compile'
    judges it on the probed cell sin's backward case filed, not only on the compiler's registration."""
    import shutil

    from test_compile_verdict import compiled_doc

    from opcov.store import layout, opset
    from opcov.verdict import compiled as verdict

    _, doc = sin_run
    folder = tmp_path / "cpu" / "compile"
    folder.mkdir(parents=True)
    name = "registered-torch-2.13.0+cpu.yaml"
    shutil.copy(os.path.join(layout.DEFAULT_COVERAGE, "cpu", "compile", name), folder / name)
    data.save(doc, str(folder / "probed-torch-2.13.0+cpu.yaml"))
    rows = [
        {"id": 1, "phase": "forward", "kind": "call", "op": "dynamo.graph.0", "dtype": "float32", "calls": 1},
        {"id": 2, "parent": 1, "phase": "forward", "kind": "kernel", "op": "aten::sin", "dtype": "float32", "calls": 1},
        {"id": 3, "phase": "backward", "kind": "call", "op": "dynamo.graph.0", "dtype": "float32", "calls": 1},
        {
            "id": 4,
            "parent": 3,
            "phase": "backward",
            "kind": "kernel",
            "op": "aten::cos",
            "dtype": "float32",
            "calls": 1,
        },
    ]
    model = compiled_doc("sin-net", breaks=0)  # a compiled training op set: a forward and a backward graph
    model["compile"]["backend"] = "inductor"
    model["calltree"] = [opset.node_text(r) for r in rows]
    model["ops"] = {
        "aten::sin": {"forward": {"float32": {"calls": 1}}},
        "aten::cos": {"backward": {"float32": {"calls": 1}}},
    }
    path = tmp_path / "sin-net.yaml"
    opset.save(model, str(path))
    cv = verdict.judge_compiled(str(path), opset.load(str(path)), "cpu", str(tmp_path), None)
    found = {r.op: r for r in cv.graphs.ops}
    (cos,) = found["aten::cos"].findings
    assert cos.evidence == "probed" and cos.outcome == "ok", cos
    assert cv.verdict == "runs" and cv.evidence == "probed"


def test_a_failing_input_tier_is_the_opinfos_op_even_where_its_sample_ran_more():
    """Batch norm's NaN/inf tier was made from a sample with running stats, which it updates in place
    (copy_), unlike the plain samples that ran: the mismatch of its output is batch norm's, not copy_'s."""
    bn = ("aten::_native_batch_norm_legit", "float32")
    copy = ("aten::copy_", "float32", "float32:1,float32:1")
    why = "output 0: NaN/inf positions differ at index (0, 4, 0): 2.63e+38, cpu gives inf"
    tier = dict(_case("special", "mismatch", [bn], ["float32:3"], [copy], why), slot="special")
    ops = _doc(_groups(_native_batch_norm_legit=[_case(0, "pass", [bn], ["float32:3"]), tier]))["ops"]
    cell = ops["aten::_native_batch_norm_legit"]["float32"]
    assert cell["fwd"] == "pass" and cell["special"] == "mismatch" and cell["special_why"] == why
    assert "aten::copy_" not in ops


def test_an_integer_cases_floating_result_is_judged_at_that_results_dtype():
    """cosh of an int64 tensor is float32, and Inductor rounds a value one unit in the last place otherwise
    than eager (74.2099 for 74.21): judged at float32's tolerance, not as an exact integer result."""
    import torch

    ref = torch.tensor([74.21, 1.0])
    case = {"ref": ref, "mode": "values", "_dtype": "int64"}
    compiled_run._judge_case(torch, case, torch.nextafter(ref, torch.zeros(2)), [], "cpu")
    assert case["status"] == "pass" and case["tol"] == "float32", case
    assert compiled_run._tolerance_dtype(torch, "int64", (torch.ones(2, dtype=torch.int64),)) == "int64"
    wrong = {"ref": ref, "mode": "values", "_dtype": "int64"}
    compiled_run._judge_case(torch, wrong, ref + 0.01, [], "cpu")
    assert wrong["status"] == "mismatch"


def test_a_tier_of_an_opinfo_that_dispatched_none_of_its_own_ops_is_filed_as_its_forward_is():
    """sparse.mm.reduce breaks the graph in every case (a sparse tensor): its tiers' breaks are not put on
    the dense ops its samples also ran (zeros, copy_), as its plain cases' are not."""
    zeros = ("aten::zeros", "float32", "")
    tier = dict(_case("special", "fallback", [], other=[zeros], why="graph break: Attempted to wrap sparse Tensor"))
    plain = _case(0, "fallback", [], other=[zeros], why="graph break: Attempted to wrap sparse Tensor")
    assert _doc(_groups(sparse__mm__reduce=[plain, dict(tier, slot="special")]))["ops"] == {}
