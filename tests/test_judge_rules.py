"""The verdict's per-op rules against probe evidence: what a probe finding says about one model's calls.

Each test builds a tiny backend's data and an op set by hand and asserts what ``opcov check`` says, from the
rules (a value difference is not a failure; a failure counts only against calls of its signature class; a
model's own replayed calls outrank OpInfo's; a crash that does not repeat alone is flaky).
"""

import json

import pytest
from test_check import TORCH, check, kernel, probed, registered, save_model

from opcov.store import data


@pytest.fixture
def cov(tmp_path):
    """coverage/ with a backend 'fake' whose registered scan gives every op the tests use its own kernel."""
    ops = {op: kernel() for op in OPS}
    root = tmp_path / "coverage"
    data.save(registered(ops=ops), str(root / "fake" / f"registered-torch-{TORCH}-fakepkg-1.0.yaml"))
    return root


OPS = ("aten::mm", "aten::addmm", "aten::sum", "aten::mean.dim", "aten::cumsum", "aten::transpose.int")


def _probe(root, cells):
    data.save(probed(ops=cells), str(root / "fake" / f"probed-torch-{TORCH}-fakepkg-1.0.yaml"))


def _verdict(path, root, *extra):
    r = check(path, root, "--format", "json", *extra)
    return r, json.loads(r.stdout)["verdicts"][0]


def test_a_value_mismatch_is_a_value_note_not_a_failure(tmp_path, cov):
    """A probed mismatch (values differ) does not stop the model: the verdict says it runs and its values may
    differ, names the op, the gate passes unless asked; an error on the same op still fails."""
    _probe(
        cov,
        {
            "aten::mm": {
                "float32": {"fwd": "mismatch", "cases": 2, "fails": 2, "why": "output 1: values differ"},
                "bfloat16": {"fwd": "error", "cases": 2, "fails": 2, "why": "RuntimeError: no bf16"},
            }
        },
    )
    path = save_model(tmp_path, {"aten::mm": {"forward": {"float32": {"calls": 1}}}}, mode="inference")
    r, v = _verdict(path, cov)
    assert r.returncode == 0, r.stdout + r.stderr
    assert v["verdict"] == "runs_with_value_note"
    assert v["ops"][0]["outcome"] == "value_note"
    assert v["value_notes"] == [
        {"op": "aten::mm", "dtype": "float32", "direction": "forward", "why": v["value_notes"][0]["why"]}
    ]
    assert "output 1: values differ" in v["value_notes"][0]["why"]
    assert v["counts"]["value_note"] == 1 and v["counts"]["fails"] == 0
    text = check(path, cov).stdout
    assert "RUNS; VALUES MAY DIFFER" in text and "aten::mm float32" in text
    assert check(path, cov, "--fail-on", "value_note").returncode == 1
    bf = save_model(tmp_path, {"aten::mm": {"forward": {"bfloat16": {"calls": 1}}}}, mode="inference", name="bf")
    r, v = _verdict(bf, cov)
    assert r.returncode == 1 and v["verdict"] == "fails"


def test_reality_check_counts_a_value_note_as_agreeing_with_a_run_matched_or_not():
    from opcov.testing.reality import Outcome

    def agrees(actual):
        return Outcome("s", "m", "training", "runs_with_value_note", actual).agrees

    assert agrees("ran") and agrees("wrong")
    assert not agrees("raised") and not agrees("crashed")


def _call(dtype="float32", shape="[2, 16, 64]", grad=False):
    cell = {"calls": 1, "shape": shape}
    if grad:
        cell["grad"] = True
    return {"forward": {dtype: cell}}


def _one(path, root):
    r, v = _verdict(path, root)
    return r, v, v["ops"][0]["findings"][0]


def test_a_failure_counts_only_against_calls_of_its_signature_class(tmp_path, cov):
    """mean.dim raises on a 0-d input only: a model whose calls are 3-d runs (with a note naming the class that
    fails); a model that makes the 0-d call fails."""
    _probe(
        cov,
        {
            "aten::mean.dim": {
                "float32": {
                    "fwd": "error",
                    "cases": 17,
                    "fails": 2,
                    "case": "mean|float32|1",
                    "why": "RuntimeError: Value out of range",
                    "failed": ["error mean|float32|1 float32:0d"],
                }
            }
        },
    )
    three = save_model(tmp_path, {"aten::mean.dim": _call(shape="[2, 16, 64]")}, mode="inference", name="three")
    r, v, f = _one(three, cov)
    assert r.returncode == 0 and v["verdict"] == "runs" and f["outcome"] == "ok", f
    assert "float32:0d" in f["why"] and "[2, 16, 64]" in f["why"]
    zero = save_model(tmp_path, {"aten::mean.dim": _call(shape="[]")}, mode="inference", name="zero")
    r, v, f = _one(zero, cov)
    assert r.returncode == 1 and f["outcome"] == "fails" and "Value out of range" in f["why"]


def test_a_mismatch_of_the_calls_class_is_a_value_note_and_of_another_class_is_none(tmp_path, cov):
    _probe(
        cov,
        {
            "aten::cumsum": {
                "bool": {
                    "fwd": "mismatch",
                    "cases": 3,
                    "fails": 2,
                    "case": "trace.gpt2|float32|14",
                    "why": "output: dtype bool, cpu gives int64",
                    "failed": ["mismatch trace.gpt2|float32|14 bool:2"],
                }
            }
        },
    )
    two = save_model(tmp_path, {"aten::cumsum": _call("bool", "[2, 16]")}, mode="inference", name="two")
    r, v, f = _one(two, cov)
    assert v["verdict"] == "runs_with_value_note" and f["outcome"] == "value_note" and "int64" in f["why"]
    one = save_model(tmp_path, {"aten::cumsum": _call("bool", "[16]")}, mode="inference", name="one")
    r, v, f = _one(one, cov)
    assert v["verdict"] == "runs" and f["outcome"] == "ok"


def test_every_case_failing_none_like_the_calls_is_unknown(tmp_path, cov):
    _probe(
        cov,
        {
            "aten::sum": {
                "float32": {
                    "fwd": "error",
                    "cases": 2,
                    "fails": 2,
                    "case": "sum|float32|0",
                    "failed": ["error sum|float32|0 float32:0d"],
                }
            }
        },
    )
    path = save_model(tmp_path, {"aten::sum": _call(shape="[2, 10]")}, mode="inference")
    r, v, f = _one(path, cov)
    assert f["outcome"] == "unknown" and "none like this model's calls" in f["why"]


def test_a_models_own_replayed_calls_outrank_opinfo_cases(tmp_path, cov):
    """addmm fell back on an OpInfo case with alpha=2; gpt2's own calls, replayed, passed: for gpt2 it runs
    (on its own calls), for a model the probe did not replay the OpInfo finding stands (its calls' scalars
    are not recorded, so the case may be like them). A model whose own call failed fails, though OpInfo's
    cases passed."""
    _probe(
        cov,
        {
            "aten::addmm": {
                "float32": {
                    "fwd": "fallback",
                    "cases": 5,
                    "case": "addmm|float32|2",
                    "why": "ran through PyTorch/XLA's CPU fallback (aten::addmm); the values pass",
                    "failed": ["fallback addmm|float32|2 float32:1,float32:2,float32:2;alpha=2"],
                    "traced": {"gpt2": "pass"},
                }
            },
            "aten::mm": {
                "float32": {
                    "fwd": "error",
                    "cases": 6,
                    "fails": 1,
                    "case": "trace.llama|float32|3",
                    "why": "RuntimeError: boom",
                    "failed": ["error trace.llama|float32|3 float32:2,float32:2"],
                    "traced": {"llama": "error", "gpt2": "pass"},
                }
            },
        },
    )
    shape = "[192], [32, 64], [64, 192]"
    gpt2 = save_model(tmp_path, {"aten::addmm": _call(shape=shape)}, mode="inference", name="gpt2")
    r, v, f = _one(gpt2, cov)
    assert v["verdict"] == "runs" and "own calls" in f["why"], f
    other = save_model(tmp_path, {"aten::addmm": _call(shape=shape)}, mode="inference", name="other")
    r, v, f = _one(other, cov)
    assert v["verdict"] == "runs_with_fallback" and f["outcome"] == "fallback"
    llama = save_model(tmp_path, {"aten::mm": _call(shape="[32, 64], [64, 64]")}, mode="inference", name="llama")
    r, v, f = _one(llama, cov)
    assert r.returncode == 1 and f["outcome"] == "fails" and "own calls" in f["why"] and "boom" in f["why"]


def test_a_models_own_replayed_failure_counts_only_against_its_calls_of_that_class(tmp_path, cov):
    """A model's own calls replayed in one mode failed in a class its other op set never calls (gemma2's serve
    replay: a sliding-window cache's slice past its dimension, which its inference op set does not make; here
    cumsum on a 0-d tensor): the op set whose calls are of other classes is judged by them (it runs), the one
    that makes the failing call fails on the model's own call."""
    _probe(
        cov,
        {
            "aten::cumsum": {
                "float32": {
                    "fwd": "error",
                    "cases": 9,
                    "fails": 1,
                    "case": "trace.llama|float32|3",
                    "why": "RuntimeError: Value out of range",
                    "failed": ["error trace.llama|float32|3 float32:0d;"],
                    "ran": ["float32:2;"],
                    "traced": {"llama": "error"},
                }
            }
        },
    )
    two_d = save_model(tmp_path, {"aten::cumsum": _call(shape="[2, 16]")}, mode="inference", name="llama")
    r, v, f = _one(two_d, cov)
    assert r.returncode == 0 and f["outcome"] == "ok" and "own calls" not in f["why"], f
    zero_d = save_model(tmp_path, {"aten::cumsum": _call(shape="[]")}, mode="training", name="llama")
    r, v, f = _one(zero_d, cov)
    assert r.returncode == 1 and f["outcome"] == "fails" and "own calls" in f["why"], f


def test_probe_cells_keep_failing_cases_with_their_signature_class_and_traced_models():
    """Folding case records into cells keeps each failing case's signature class (of the call to the op it
    is filed under) and each replayed model's worst status; a fallback is filed under the op the backend's
    counters name (a backward's fallback under the forward op whose backward kernel fell back), not under
    every op of the case."""
    from opcov.probe.caserecord import CaseRecord
    from opcov.probe.results import build_ops

    recs = [
        CaseRecord(
            "mean|float32|1",
            "mean|float32",
            "mean",
            "float32",
            ["aten::mean"],
            fwd={"ops": [["aten::mean.dim", "float32"]], "sigs": ["float32:0d"], "status": "error", "why": "x"},
        ),
        CaseRecord(
            "mean|float32|0",
            "mean|float32",
            "mean",
            "float32",
            ["aten::mean"],
            fwd={"ops": [["aten::mean.dim", "float32"]], "sigs": ["float32:3"], "status": "pass"},
        ),
        CaseRecord(
            "trace.llama|float32|7",
            "trace.llama|float32",
            "trace.llama",
            "float32",
            ["aten::mean"],
            fwd={"ops": [["aten::mean.dim", "float32"]], "sigs": ["float32:3"], "status": "pass"},
        ),
        CaseRecord(
            "avg_pool1d|float32|0",
            "avg_pool1d|float32",
            "nn.functional.avg_pool1d",
            "float32",
            ["aten::avg_pool1d"],
            fwd={
                "ops": [
                    ["aten::unsqueeze", "float32"],
                    ["aten::avg_pool2d", "float32"],
                    ["aten::squeeze.dim", "float32"],
                ],
                "sigs": ["float32:3", "float32:4", "float32:4"],
                "status": "pass",
            },
            bwd={
                "ops": [["aten::avg_pool2d_backward", "float32"]],
                "status": "fallback",
                "fallback": ["aten::avg_pool2d_backward"],
            },
        ),
    ]
    ops = build_ops(recs, (), lambda name, probed: {"skipped": "no_source"})
    mean = ops["aten::mean.dim"]["float32"]
    assert mean["fwd"] == "error" and mean["failed"] == ["error mean|float32|1 float32:0d"]
    assert mean["traced"] == {"llama": "pass"}
    assert ops["aten::avg_pool2d"]["float32"]["bwd"] == "fallback"
    assert "bwd" not in ops["aten::unsqueeze"]["float32"] and "bwd" not in ops["aten::squeeze.dim"]["float32"]


def test_signature_class_names_dtype_rank_0d_empty_noncontiguous_and_path_scalars():
    import torch

    from opcov.probe.record import signature

    addmm = torch.ops.aten.addmm.default
    b, m1, m2 = torch.zeros(3), torch.zeros(2, 4), torch.zeros(4, 3)
    assert signature(addmm, (b, m1, m2), {}) == "float32:1,float32:2,float32:2;"
    assert signature(addmm, (b, m1, m2), {"alpha": 2}) == "float32:1,float32:2,float32:2;alpha=2"
    assert signature(addmm, (b, m1, m2), {"beta": 0.5, "alpha": 1}) == "float32:1,float32:2,float32:2;beta=0.5"
    mean = torch.ops.aten.mean.dim
    assert signature(mean, (torch.tensor(1.0), [0]), {}) == "float32:0d;"
    assert signature(mean, (torch.zeros(0, 3), [0]), {}) == "float32:2!empty;"
    assert signature(mean, (torch.zeros(3, 4).t(), [0], True), {}) == "float32:2!nc;keepdim=True"


def test_a_sum_is_judged_relative_to_the_magnitudes_it_adds_up():
    """A cancelling sum's result is near 0; an error small against what it added up passes, though it is
    large against the result."""
    import torch

    from opcov.probe.compare import judge

    cpu = torch.tensor([1e-6], dtype=torch.float32)
    ref = cpu.double()
    dev = cpu + 9.8e-5
    kw = {"dtype": "float32", "mode": "values", "family": "reduction"}
    assert judge(dev, cpu, ref, **kw)["status"] == "mismatch"
    summed = torch.tensor([100.0], dtype=torch.float64)  # sum |x| of the inputs
    assert judge(dev, cpu, ref, scale=summed, **kw)["status"] in ("pass", "pass_low_precision")
    assert judge(cpu + 1.0, cpu, ref, scale=summed, **kw)["status"] == "mismatch"  # still catches a real error


def test_merge_replace_takes_a_reprobed_cell_instead_of_combining_it():
    """A re-probe's cell (with its failing cases' classes) replaces the older cell of the same op and dtype;
    other cells and ops of the older file stay."""
    from opcov.probe.merge import replaced

    old = probed(
        ops={
            "aten::mean.dim": {"float32": {"fwd": "error", "cases": 17, "fails": 2}, "int64": {"fwd": "pass"}},
            "aten::mm": {"float32": {"fwd": "pass"}},
        }
    )
    new = probed(
        ops={"aten::mean.dim": {"float32": {"fwd": "pass", "cases": 3}}, "aten::gone": {"skipped": "no_source"}}
    )
    (_, a), (_, b) = replaced([("old", old), ("new", new)])
    assert a["ops"]["aten::mean.dim"] == {"int64": {"fwd": "pass"}}
    assert a["ops"]["aten::mm"] == {"float32": {"fwd": "pass"}}
    assert b["ops"] == new["ops"]
    (_, c), _ = replaced([("old", old), ("newer", probed(ops={"aten::mm": {"float32": {"fwd": "error"}}}))])
    assert c["ops"]["aten::mm"] == {}  # every cell replaced: the op is still named


def test_a_fallback_only_with_non_default_scalars_is_a_note_when_the_defaults_ran(tmp_path, cov):
    """openxla fell back on every OpInfo sample of addmm, all with alpha and beta not 1, while samples of
    the same tensor classes with the defaults ran (``ran``). An op set does not record a call's scalars
    (linear makes them 1): the fallback is named in a note, not held against the model. Without ``ran``
    the finding counts, as before."""
    failed = [f"fallback addmm|float32|{i} float32:1,float32:2,float32:2;beta=0.2,alpha=0.6" for i in range(2)]
    cell = {"fwd": "fallback", "cases": 4, "fails": 2, "case": "addmm|float32|0", "why": "ran through the CPU fallback"}
    model = save_model(tmp_path, {"aten::addmm": _call(shape="[16], [2, 8], [8, 16]")}, mode="inference")
    _probe(cov, {"aten::addmm": {"float32": dict(cell, failed=failed, ran=["float32:1,float32:2,float32:2"])}})
    r, v, f = _one(model, cov)
    assert r.returncode == 0 and f["outcome"] == "ok", f
    assert "only with beta=0.2,alpha=0.6" in f["why"] and "does not record this model's scalars" in f["why"], f
    _probe(cov, {"aten::addmm": {"float32": dict(cell, failed=failed)}})
    r, v, f = _one(model, cov)
    assert f["outcome"] == "fallback", f


def test_a_dtype_only_difference_with_equal_values_is_a_note_not_a_value_note(tmp_path, cov):
    """cumsum of bool gives int64 on CPU and another integer dtype on some backends: the probe says the
    values are equal, and the verdict words it apart (a note on a running op). Where the values were not
    compared (an older text), it stays a value note."""
    import torch

    from opcov.probe.compare import judge

    same = judge(
        torch.tensor([1, 2], dtype=torch.int32),
        torch.tensor([1, 2]),
        torch.tensor([1, 2]),
        dtype="int64",
        mode="values",
    )
    assert same["status"] == "mismatch" and same["why"].endswith("; values equal"), same
    other = judge(
        torch.tensor([1, 3], dtype=torch.int32),
        torch.tensor([1, 2]),
        torch.tensor([1, 2]),
        dtype="int64",
        mode="values",
    )
    assert "values equal" not in other["why"]
    cell = {"fwd": "mismatch", "cases": 2, "fails": 2, "case": "cumsum|bool|0", "why": same["why"]}
    model = save_model(tmp_path, {"aten::cumsum": _call(dtype="bool", shape="[2, 16]")}, mode="inference")
    _probe(cov, {"aten::cumsum": {"bool": cell}})
    r, v, f = _one(model, cov)
    assert f["outcome"] == "ok" and "dtype differs" in f["why"] and v["verdict"] == "runs", f
    _probe(cov, {"aten::cumsum": {"bool": dict(cell, why="output: dtype int32, cpu gives int64")}})
    r, v, f = _one(model, cov)
    assert f["outcome"] == "value_note", f


def test_a_reason_the_scan_could_not_decide_is_in_words_and_its_exception_only_in_the_json(tmp_path):
    """An unresolved composite's reason reads as what could not be decided and why (no exception text, only
    the direction judged), and the scan's raw record is the JSON finding's ``detail``."""
    raw = (
        "reach unresolved: RuntimeError: shape '[1, 1]' is invalid for input of size 9; "
        "backward reach unresolved: forward could not be called on meta"
    )
    ops = {"aten::maybe": {"fwd": "composite", "res": "unresolved", "bwd": "none", "bwd_res": "not_applicable"}}
    ops["aten::maybe"]["why"] = raw
    root = tmp_path / "coverage"
    data.save(registered(ops=ops), str(root / "fake" / f"registered-torch-{TORCH}-fakepkg-1.0.yaml"))
    path = save_model(tmp_path, {"aten::maybe": {"forward": {"float32": {"calls": 2}}}}, mode="inference")
    r = check(path, root)
    assert (
        "forward float32: forward path not resolved by the scan (which kernels this composite op calls is unknown: "
        "none of the sample inputs the scan made could run it)"
    ) in r.stdout, r.stdout
    assert "RuntimeError" not in r.stdout and "backward" not in r.stdout.split("UNKNOWN")[1].split("\n")[1]
    (v,) = json.loads(check(path, root, "--format", "json").stdout)["verdicts"]
    (f,) = v["ops"][0]["findings"]
    assert f["detail"] == raw and "RuntimeError" not in f["why"]


def test_reach_words_name_the_cause_and_keep_other_text():
    from opcov import vocab

    said = vocab.reach_words("reach unresolved: input synthesis: no value for Any argument 'group_name'")
    assert said == "which kernels this composite op calls is unknown: takes an argument no input can give " + (
        "(a Storage, a process group, a string)"
    )
    back = vocab.reach_words("backward reach unresolved: RuntimeError: a; b", "backward")
    assert back == "which kernels its backward calls is unknown: none of the sample inputs the scan made could run it"
    assert vocab.reach_words("backward reach unresolved: RuntimeError: x", "forward") == ""
    assert vocab.reach_words("torch._inductor.lowering: lowering") == "torch._inductor.lowering: lowering"
    assert vocab.reach_words(None) == ""


def _fell_back_slot(*failed, cases):
    from opcov.store import cells

    return cells.ProbedSlot(status="fallback", failed=tuple(failed), ran=(), cases=cases, fails=0, case="c|f|0")


@pytest.mark.parametrize(
    "failed,call",
    [
        # an upsampling fell back at a fractional scale; the model's call has a whole one (a resize op)
        (("fallback up|float32|0 float32:4;scale=frac",), "float32:4;scale=int"),
        # a reduction fell back on a 0-d input only; the model's call is 2-d (a 0-d case says nothing of ranks)
        (("fallback sum|float32|0 float32:0d;",), "float32:2;"),
    ],
)
def test_a_cell_whose_every_case_fell_back_on_other_classes_is_no_run_for_the_call(failed, call):
    """Every case of the cell went through the CPU fallback, none of them like the model's call: nothing ran
    on the device with any arguments, so the call is unknown, never a pass (a fallback is not counted in a
    cell's ``fails``); with one case more that ran clean, the other classes' fallbacks are a note."""
    from opcov.verdict import signature

    judged = signature.by_class(_fell_back_slot(*failed, cases=len(failed)), (call,))
    assert judged is not None and judged[0] == "unknown" and "fell back" in judged[2], judged
    judged = signature.by_class(_fell_back_slot(*failed, cases=len(failed) + 1), (call,))
    assert judged is not None and judged[0] == "pass", judged


@pytest.mark.parametrize(
    "failed,call",
    [
        # nonzero fell back on a 1-d input; a routing model's call is 2-d (a data-dependent op)
        (("fallback nonzero|int64|0 int64:0d;", "fallback nonzero|int64|1 int64:1;"), "int64:2!nc;"),
        # huber_loss fell back on 1-d inputs with every reduction; a regression head's call is 2-d (a loss)
        (("fallback huber|float32|0 float32:1!rg,float32:1!rg;reduction=0",), "float32:2,float32:2;reduction=0"),
    ],
)
def test_a_fallback_at_another_rank_with_the_calls_arguments_is_the_calls(failed, call):
    """Whether an op has a kernel of its own does not hang on the rank: a case of the call's arguments that fell
    back at another rank (of one dimension or more) decides the call, though another case ran clean; a case
    of the call's own class that ran clean still outranks it."""
    from opcov.verdict import signature

    for cases in (len(failed), len(failed) + 1):
        judged = signature.by_class(_fell_back_slot(*failed, cases=cases), (call,))
        assert judged is not None and judged[0] == "fallback", judged
    from opcov.store import cells

    own = cells.ProbedSlot(status="fallback", failed=tuple(failed), ran=(call,), cases=9, fails=0, case="c|f|0")
    assert signature.by_class(own, (call,))[0] == "pass"


def test_an_error_at_another_rank_is_not_the_calls():
    """Errors stay bound to their rank: a 1-d case that raised says nothing of a 2-d call of the same arguments."""
    from opcov.store import cells
    from opcov.verdict import signature

    slot = cells.ProbedSlot(
        status="error", failed=("error cummax|int64|0 int64:1;",), ran=(), cases=2, fails=1, case="cummax|int64|0"
    )
    assert signature.by_class(slot, ("int64:2;",))[0] == "pass"


def test_a_ran_list_merged_with_older_passes_shows_what_ran_not_what_did_not():
    """An older probe kept no classes for its passes; a newer one (an argument sweep) ran the model's class. The
    merged cell keeps the newer list as partial (``ran_part``): a pass of the call's own class outranks an older
    item that named no arguments (avg_pool2d's old value mismatch matched every call), while a class missing from
    the list says nothing (another family: a loss whose class the older passes may have run)."""
    from opcov.store import cells
    from opcov.store.combine import combine
    from opcov.verdict import signature

    old = {"status": "mismatch", "case": "pool|float32|0", "cases": 5, "fails": 1, "samples": ["pool"],
           "failed": ["mismatch pool|float32|0 float32:4"]}  # fmt: skip
    new = {"status": "pass", "case": "sweep.pool|float32|3", "cases": 2, "fails": 0, "samples": ["sweep.pool"],
           "ran": ["float32:4!rg;ceil_mode=True,kernel_size=1x3"]}  # fmt: skip
    merged = combine(old, new)
    assert merged["ran"] == new["ran"] and merged["ran_part"] is True
    slot = cells.ProbedSlot(**{k: tuple(v) if isinstance(v, list) else v for k, v in merged.items() if k != "samples"})
    call = "float32:4;ceil_mode=True,kernel_size=2x2"
    assert signature.by_class(slot, (call,))[0] == "pass"  # the call's own class ran: the old item is another's
    assert signature.uncovered(slot, ("float32:2,float32:2;reduction=0",)) == ()  # partial: no absence shown
    whole = cells.ProbedSlot(status="pass", ran=tuple(new["ran"]), cases=2, fails=0)
    assert signature.uncovered(whole, ("float32:2,float32:2;reduction=0",)) == ("float32:2,float32:2;reduction=0",)


@pytest.mark.parametrize(
    "failed,ran,call",
    [
        # a soft-target loss's summed 2-d NLL: its only case of the call's class differed in total_weight
        ("mismatch ce|float32|6 float32:4!rg,int64:3;absent=weight,reduction=2 out=1",
         "float32:4!rg,int64:3;absent=weight,reduction=1", "float32:4,int64:3;absent=weight,reduction=2"),
        # a max over a dimension whose indices (ties) differed: a pooling head reads the values only
        ("mismatch max|float32|2 float32:3;keepdim=True out=1", "float32:3;keepdim=False", "float32:3;keepdim=True"),
    ],
)  # fmt: skip
def test_a_case_that_differed_only_in_unread_outputs_ran_the_calls_class(failed, ran, call):
    """A case whose values differed only in outputs the model never reads ran the call's path: the call is not
    'unverified for these arguments' for want of a clean pass of its class. Where the model reads that output,
    or the case went through the CPU fallback, it still is."""
    from opcov.store import cells
    from opcov.verdict import signature

    slot = cells.ProbedSlot(status="mismatch", failed=(failed,), ran=(ran,), cases=2, fails=1, case="c|float32|0")
    assert signature.uncovered(slot, (call,), frozenset({0})) == ()
    assert signature.uncovered(slot, (call,), frozenset({0, 1})) == (call,)
    assert signature.uncovered(slot, (call,), None) == (call,)
    through = failed.replace(" out=1", " fell=aten::x out=1")  # the probe writes fell= before out=
    assert signature.unread(through, frozenset({0})) == frozenset({1})
    fell = cells.ProbedSlot(status="mismatch", failed=(through,), ran=(ran,), cases=2, fails=1)
    assert signature.uncovered(fell, (call,), frozenset({0})) == (call,)


@pytest.mark.parametrize(
    "op,call,ran",
    [
        # a CTC loss with concatenated (1-d) targets and its blank given: OpInfo's cases had 2-d targets
        ("aten::_ctc_loss.Tensor", "float32:3,int64:1,int64:1,int64:1;blank=4,zero_infinity=True",
         "float32:3,int64:1,int64:1,int64:1;blank=4,zero_infinity=True"),
        # a spatial transformer's sampler backward (another family: a sampler's gradient)
        ("aten::grid_sampler_2d_backward", "float32:4,float32:4,float32:4!rg;align_corners=False,interpolation_mode=0",
         "float32:4,float32:4,float32:4!rg;align_corners=False,interpolation_mode=0"),
    ],
)  # fmt: skip
def test_a_pass_of_no_shown_class_yields_to_a_registered_fallback(op, call, ran):
    """An overload the backend registers to its CPU fallback takes it on every call: a probe pass that no case of
    the call's own class shows (no ``ran`` list) is another path the probe counted under the overload, so the
    verdict is the fallback; a case of the call's class that ran clean outranks the registration."""
    from test_check import tree_opset

    from opcov.verdict import judge

    fell = {"fwd": "fallback", "res": "fallback", "bwd": "none", "bwd_res": "not_applicable", "src": "fallback.cpp:1"}
    reg = registered(ops={op: fell}, fallback_enabled=True)
    cell = {"fwd": "mismatch", "cases": 6, "fails": 1, "case": "o|float32|1",
            "failed": ["mismatch o|float32|1 float32:3!rg,int64:2,int64:1,int64:1; out=0"]}  # fmt: skip
    tree = [f"1 forward kernel {op} float32 x1 | shape=[2] | sig={call}"]

    def outcome(cell):
        cov = judge.Coverage("fake", reg, probed(ops={op: {"float32": cell}}), ["registered.yaml", "probed.yaml"])
        return judge.judge(tree_opset(tree), cov).ops[0].findings[0]

    found = outcome(cell)
    assert found.outcome == "fallback" and found.evidence == "registered", found
    assert outcome({**cell, "ran": [ran]}).outcome == "ok"


@pytest.mark.parametrize(
    "call",
    [
        "complex64:4!rg;",  # a spectral model's magnitude of an FFT (4-d spectrum)
        "complex64:2!rg;",  # a complex linear layer's polar output (another family: complex weights)
    ],
)
def test_a_complex_output_where_cpu_gives_a_real_one_fails_a_step_with_grad(call):
    """PyTorch/XLA's abs of a complex tensor returns complex64 where CPU returns float32: with grad, autograd raises at
    the forward ('abs does not support automatic differentiation for outputs with complex dtype'), so the training
    call fails; the same call without grad (inference) stays a value note, and a real-dtype mismatch is untouched."""
    from test_check import tree_opset

    from opcov.verdict import judge

    cell = {"fwd": "mismatch", "cases": 3, "fails": 3, "case": "trace.m|float32|2",
            "why": "output: dtype complex64, cpu gives float32", "failed": [f"mismatch trace.m|float32|2 {call}"]}  # fmt: skip

    def outcome(sig, cell=cell):
        tree = [f"1 forward kernel aten::abs complex64 x1 | shape=[3, 4] | sig={sig}"]
        cov = judge.Coverage(
            "fake", registered(ops={"aten::abs": kernel()}), probed(ops={"aten::abs": {"complex64": cell}}), ["r", "p"]
        )
        return judge.judge(tree_opset(tree), cov).ops[0].findings[0].outcome

    assert outcome(call) == "fails"
    assert outcome(call.replace("!rg", "")) == "value_note"
    assert outcome(call, {**cell, "why": "output: values differ"}) == "value_note"


@pytest.mark.parametrize(
    "op,dtype,why,kernel_ran",
    [
        # a scan head's cummin: PyTorch/XLA's counters name the kernel cummin runs there
        ("aten::cummin", "float32", "ran through PyTorch/XLA's CPU fallback (aten::_cummin_helper); the values pass",
         ["aten::_cummin_helper"]),
        # a log-spaced feature grid (another family: a factory), whose out= variant is what fell back
        ("aten::logspace", "float32", "ran through PyTorch/XLA's CPU fallback (aten::logspace.out); the values pass",
         ["aten::logspace.out"]),
    ],
)  # fmt: skip
def test_a_fallback_verdict_names_the_kernel_the_backend_ran(op, dtype, why, kernel_ran):
    """A fallback's JSON names, beside the op set's op, the ops the backend's fallback counters saw (``fell``): the
    kernel the backend runs, which a user looks for in its own counters, may be another than the op set names."""
    from test_check import tree_opset

    from opcov.verdict import judge
    from opcov.verdict.reports import as_json

    cell = {"fwd": "fallback", "cases": 2, "fails": 0, "case": "c|float32|0", "why": why}
    tree = [f"1 forward kernel {op} {dtype} x1 | shape=[3, 6]"]
    cov = judge.Coverage("fake", registered(ops={op: kernel()}), probed(ops={op: {dtype: cell}}), ["r", "p"])
    doc = tree_opset(tree)
    out = json.loads(as_json.report([judge.judge(doc, cov)], doc))
    (found,) = out["verdicts"][0]["ops"]
    assert found["outcome"] == "fallback" and found["fell"] == kernel_ran, found
    cell["why"] = "ran through the CPU fallback"  # an older text naming none: the op set's op stands alone
    cov = judge.Coverage("fake", registered(ops={op: kernel()}), probed(ops={op: {dtype: cell}}), ["r", "p"])
    assert json.loads(as_json.report([judge.judge(doc, cov)], doc))["verdicts"][0]["ops"][0]["fell"] == []


@pytest.mark.parametrize(
    "op,fell_case_why,call,kernel_ran",
    [
        # a distribution head's mvlgamma: PyTorch/XLA runs it as lgamma, which falls back
        ("aten::mvlgamma", "ran through PyTorch/XLA's CPU fallback (aten::lgamma); the values pass", "float32:2;p=2",
         ["aten::lgamma"]),
        # a Gaussian process's cholesky_solve (another family: linalg), through _cholesky_solve_helper
        ("aten::cholesky_solve", "ran through PyTorch/XLA's CPU fallback (aten::_cholesky_solve_helper); the values "
         "pass", "float32:2,float32:2;", ["aten::_cholesky_solve_helper"]),
        # the op fell back itself beside others of that sample's own calls (lu_solve's): the op set's op alone
        ("aten::linalg_solve_triangular", "ran through PyTorch/XLA's CPU fallback (aten::linalg_lu_solve, "
         "aten::linalg_solve_triangular, aten::lu_unpack); the values pass", "float32:2,float32:2;upper=True", []),
    ],
)  # fmt: skip
def test_a_fallback_on_a_sibling_case_names_what_the_cells_cases_fell_through(op, fell_case_why, call, kernel_ran):
    """The case of the model's class that fell back is not the cell's representative, whose text names what the
    fallback counters saw: where both are samples of one OpInfo and every failing case of the cell fell back, the
    verdict names those ops (``fell``), not only the op the model called."""
    from test_check import tree_opset

    from opcov.verdict import judge
    from opcov.verdict.reports import as_json

    cell = {"fwd": "fallback", "cases": 4, "fails": 2, "case": "o|float32|0", "why": fell_case_why,
            "failed": ["fallback o|float32|0 float32:0d;", f"fallback o|float32|1 {call}"]}  # fmt: skip
    tree = [f"1 forward kernel {op} float32 x1 | shape=[3, 3] | sig={call}"]
    doc = tree_opset(tree)

    def fell(cell):
        cov = judge.Coverage("fake", registered(ops={op: kernel()}), probed(ops={op: {"float32": cell}}), ["r", "p"])
        (found,) = json.loads(as_json.report([judge.judge(doc, cov)], doc))["verdicts"][0]["ops"]
        assert found["outcome"] == "fallback", found
        return found["fell"]

    assert fell(cell) == kernel_ran
    other = {**cell, "failed": ["mismatch o|float32|0 float32:0d;", f"fallback o|float32|1 {call}"]}
    assert fell(other) == []  # not every failing case fell back: the representative's text says nothing of this one
    assert fell({**cell, "case": "another|float32|0"}) == []  # another OpInfo's sample


@pytest.mark.parametrize(
    "op,call,canary",
    [
        # a hashed embedding's bucket: int64 floor division by a scalar
        ("aten::div.Tensor_mode", "int64:1;rounding_mode=floor", "canary.int64_div_floor|int64|1"),
        # an MoE router's expert id (another family): floor_divide of two int64 tensors
        ("aten::floor_divide", "int64:1,int64:1;", "canary.int64_floor_divide|int64|0"),
    ],
)
def test_an_int64_canary_mismatch_is_said_not_counted(op, call, canary):
    """PyTorch/XLA divides int64 through float32: values past 2**24 come out rounded, smaller ones exact. The
    canary of the call's class shows it, but no op set records how large a model's values are: the call runs,
    with a note naming the canary; a mismatch on an ordinary case of the class still counts."""
    from test_check import tree_opset

    from opcov.verdict import judge

    cell = {"fwd": "mismatch", "cases": 6, "fails": 1, "case": canary, "ran": [call],
            "why": "output: values differ at index (0,): 715827904, cpu gives 715827885 (exact)",
            "failed": [f"mismatch {canary} {call}"]}  # fmt: skip
    tree = [f"1 forward kernel {op} int64 x1 | shape=[11] | sig={call}"]

    def found(cell):
        cov = judge.Coverage("fake", registered(ops={op: kernel()}), probed(ops={op: {"int64": cell}}), ["r", "p"])
        return judge.judge(tree_opset(tree), cov).ops[0].findings[0]

    ok = found(cell)
    assert ok.outcome == "ok" and canary in ok.why and "past float32's exact integers" in ok.why, ok
    both = {**cell, "fails": 2, "failed": [*cell["failed"], f"mismatch o|int64|2 {call}"]}
    assert found(both).outcome == "value_note"


@pytest.mark.parametrize(
    "item, call",
    [
        # a selective scan's cumulative count of a 4-d mask; the probe replayed a transformer's 2-d one
        ("mismatch trace.gpt2|float32|0 bool:2; values=equal", "bool:4;"),
        # a segmentation head counting a 3-d mask's pixels per class; the probe's sample was 2-d
        ("mismatch sum|bool|3 bool:2;dim=1 values=equal", "bool:3;dim=1"),
    ],
)
def test_a_dtype_only_difference_at_another_rank_is_the_calls_and_a_note_not_a_value_note(item, call):
    """An output's dtype is type promotion's, not the shape's (PyTorch/XLA's cumsum of bool stays bool, CPU's
    is int64, at every rank): a mismatch of the dtype alone (values equal) at another rank decides a call of its
    arguments as it would at the call's own, a pass with a note that names the dtype difference (never a value
    note, never 'unknown' for want of a case of the call's rank); a mismatch of values stays bound to its rank."""
    from opcov.store import cells
    from opcov.verdict import signature

    slot = cells.ProbedSlot(status="mismatch", failed=(item,), ran=(), cases=1, fails=1, case=item.split()[1])
    status, _, note = signature.by_class(slot, (call,))
    assert status == "pass" and "dtype differs from CPU's, its values do not" in note, note
    same_rank = item.replace(item.split()[2], call, 1)
    slot = cells.ProbedSlot(status="mismatch", failed=(same_rank,), ran=(), cases=1, fails=1, case=item.split()[1])
    assert signature.by_class(slot, (call,))[0] == "pass"
    values = item.replace(" values=equal", "")
    slot = cells.ProbedSlot(status="mismatch", failed=(values,), ran=(), cases=1, fails=1, case=item.split()[1])
    assert signature.by_class(slot, (call,))[0] == "unknown"


@pytest.mark.parametrize(
    "item, mask_call, int_call",
    [
        # a detection loss keeping the scores a mask selects (x[mask], 2-d) vs gathering rows by index
        ("fallback sweep.__getitem__|float32|0 float32:3!rg,bool:1;", "float32:2,bool:2;", "float32:2,int64:1;"),
        # masked assignment (x[mask] = v) vs scattering by index: another family, index_put
        (
            "fallback sweep.index_put|float32|0 float32:2,bool:1,float32:1;",
            "float32:3,bool:3,float32:1;",
            "float32:3,int64:1,float32:1;",
        ),
    ],
)
def test_a_boolean_mask_index_is_a_path_apart_from_an_integer_index(item, mask_call, int_call):
    """A bool index is a mask: its result's size hangs on its values, and PyTorch/XLA sizes it through nonzero,
    which runs through its CPU fallback (docs/reality/nn-xla-seventh.json: a detection head's focal[valid]). A
    fallback of a mask case decides the model's mask calls at any rank, never its integer-index calls."""
    from opcov.store import cells
    from opcov.verdict import signature

    slot = cells.ProbedSlot(status="fallback", failed=(item,), ran=(), cases=2, fails=0, case=item.split()[1])
    assert signature.by_class(slot, (mask_call,))[0] == "fallback"
    assert signature.by_class(slot, (int_call,))[0] != "fallback"


@pytest.mark.parametrize(
    "failed,ran,call",
    [
        # PyTorch/XLA's selu backward (an activation) differed at ranks 1 and 0-d; an MLP's call is 2-d
        (("mismatch selu|float32|0 float32:1!rg;",), ("float32:3!empty!rg;",), "float32:2!rg;"),
        # a special function's values differed on a 1-d case; a distribution head's call is 3-d
        (("mismatch digamma|float32|0 float32:1;",), ("float32:0d;",), "float32:3;"),
    ],
)
def test_a_pointwise_ops_value_mismatch_at_another_rank_is_the_calls(failed, ran, call):
    """A pointwise op computes each element alike at every rank: a value mismatch on a case of the call's
    arguments at another rank (of one dimension or more) decides the call, though a 0-d or empty case ran
    clean; an op without the tag keeps value mismatches bound to their rank."""
    from opcov.store import cells
    from opcov.verdict import signature

    slot = cells.ProbedSlot(status="mismatch", failed=failed, ran=ran, cases=2, fails=1, case="c|float32|0")
    assert signature.by_class(slot, (call,), pointwise=True)[0] == "mismatch"
    assert signature.by_class(slot, (call,))[0] == "pass"
    own = cells.ProbedSlot(status="mismatch", failed=failed, ran=(call,), cases=2, fails=1, case="c|float32|0")
    assert signature.by_class(own, (call,), pointwise=True)[0] == "pass"  # a case of its own class ran clean
