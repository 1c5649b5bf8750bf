"""Probe depth (issue 18): no paying twice for a crash or hang, a reason for every overload, precision
tiers, and harder inputs as case tiers. End-to-end runs use the planted Python PrivateUse1 backend
(opcov.sources.pybackend) in child processes, on one or three OpInfos each."""

from __future__ import annotations

import json
import os
import time

import pytest
from conftest import ROOT, load_yaml, opcov_here, run_opcov

PB = ["--import", "opcov.sources.pybackend"]


def probe(tmp_path, name, spec, *args):
    out = str(tmp_path / f"{name}.yaml")
    proc = run_opcov("probe", "opcovtest", *PB, *args, "--out", out, timeout=600, OPCOV_PYBACKEND_SPEC=json.dumps(spec))
    assert proc.returncode == 0, proc.stderr[-3000:]
    return out, load_yaml(out), proc


# ---------------------------------------------------------------- no paying twice

HANG = {"kernels": {"aten::exp": "hang"}, "fallback": "cpu"}  # exp's OpInfo has 3 float32 samples
HANG_ARGS = ("--ops", "^exp$", "--dtypes", "float32", "--directions", "forward", "--timeout", "3", "--tiers", "none")


def test_a_hang_pays_the_timeout_once_and_a_rerun_runs_it_first(tmp_path):
    out, doc, proc = probe(tmp_path, "hang", HANG, *HANG_ARGS)
    exp = doc["ops"]["aten::exp"]["float32"]
    assert exp["fwd"] == "timeout" and exp["case"] == "exp|float32|0", exp
    assert exp["cases"] == 1 and exp["fails"] == 1 and exp["after_crash"] == 2, exp
    assert "(1 groups, 1 worker restarts)" in proc.stdout  # one timeout paid, not three
    assert doc["summary"]["opinfo"]["exp"]["float32"] == "timeout/-/1"
    ledger = json.load(open(out + ".ledger.json"))
    (entries,) = ledger.values()
    assert entries == {
        "exp|float32": {"case": "exp|float32|0", "status": "timeout", "why": "no result within 3s; worker killed"}
    }
    _, again, proc = probe(tmp_path, "hang", HANG, *HANG_ARGS)
    assert "1 group(s) known to crash or hang on this backend version run first" in proc.stderr
    assert again["ops"]["aten::exp"] == doc["ops"]["aten::exp"]
    _, every, proc = probe(tmp_path, "every", HANG, *HANG_ARGS, "--exhaustive")
    exp = every["ops"]["aten::exp"]["float32"]
    assert exp["fwd"] == "timeout" and exp["cases"] == 3 and "after_crash" not in exp, exp
    assert "(1 groups, 3 worker restarts)" in proc.stdout
    assert every["provenance"]["probe"]["exhaustive"] is True


def test_a_hang_after_other_cases_is_re_run_alone_and_hanging_again_is_a_real_hang(tmp_path):
    """neg hangs in a worker that ran exp's cases first: it may be their doing, so it is re-run alone in a
    fresh worker (one more timeout paid); it hangs there too, so it is a real hang, not flaky."""
    spec = {"kernels": {"aten::neg": "hang", "aten::exp": "pass"}, "fallback": "cpu"}
    args = ("--ops", "^(exp|neg)$", *HANG_ARGS[2:])
    out, doc, proc = probe(tmp_path, "after", spec, *args)
    neg = doc["ops"]["aten::neg"]["float32"]
    assert neg["fwd"] == "timeout" and "it did so again when re-run alone" in neg["why"], neg
    assert neg["case"] == "neg|float32|0", neg
    assert doc["ops"]["aten::exp"]["float32"]["fwd"] == "pass"
    assert "(2 groups, 2 worker restarts)" in proc.stdout, proc.stdout


def test_a_hang_the_worker_reaches_before_the_parent_notes_the_group_is_timed_by_the_case_timeout():
    """The parent noted when it gave a worker its group only after sending it: a worker that began its
    case first (the parent descheduled on a loaded machine) had its hang timed by the 120 s group deadline,
    not by --timeout (a hang test with --timeout 3 took 170 s)."""
    import multiprocessing as mp

    from opcov.probe.flight import Flight
    from opcov.probe.pool import Pool, _Slot

    pool = Pool({}, 1, timeout=3.0)
    pool.done_ids = {}
    slot = _Slot(0)
    slot.flight = Flight(ctx=mp.get_context("spawn"))

    class Worker:  # begins the group's first case as the message arrives, before the parent runs again
        def send(self, msg):
            slot.flight.write({"case": msg[1]["id"] + "|0", "phase": "fwd"}, pool.timeout)
            time.sleep(0.01)

    slot.conn = Worker()
    try:
        pool.assign(slot, {"id": "exp|float32", "source": "exp"})
        began, end = slot.flight.deadline()
        assert end == began + 3.0 and pool.deadline(slot) == end
    finally:
        pool.stop()


def test_a_ledger_forgets_a_group_that_runs_clean(tmp_path):
    from opcov.probe.caserecord import CaseRecord
    from opcov.probe.ledger import Ledger

    path = str(tmp_path / "p.yaml.ledger.json")
    crash = CaseRecord(
        "sin|float32|1",
        "sin|float32",
        "sin",
        "float32",
        ["aten::sin"],
        fwd={"ops": [], "status": "crash", "why": "worker died: signal SIGSEGV"},
    )
    led = Ledger(path, "v1")
    led.update([crash, crash.not_run_after("fwd", "sin|float32|2")], {"sin|float32", "cos|float32"})
    led.save()
    assert Ledger(path, "v1").first(["cos|float32", "sin|float32"]) == ["sin|float32"]
    assert Ledger(path, "v2").first(["sin|float32"]) == []  # another backend version knows nothing
    led = Ledger(path, "v1")
    led.update([], {"sin|float32"})  # ran clean
    led.save()
    assert not os.path.exists(path)


def test_a_cell_cut_short_by_a_crash_fails_outright():
    """A crash with later cases not run is a failure of the op at that dtype, not a partial one
    ('unknown'): the cases after it were never tried."""
    from opcov.probe import results
    from opcov.probe.caserecord import CaseRecord
    from opcov.verdict.judge import Coverage, judge_requirement

    ops = [["aten::sin", "float32"]]
    ok = CaseRecord("sin|float32|0", "sin|float32", "sin", "float32", ["aten::sin"], fwd={"ops": ops, "status": "pass"})
    crash = CaseRecord(
        "sin|float32|1",
        "sin|float32",
        "sin",
        "float32",
        ["aten::sin"],
        fwd={"ops": ops, "status": "crash", "why": "worker died: signal SIGSEGV"},
    )
    recs = [ok, crash] + [crash.not_run_after("fwd", f"sin|float32|{i}") for i in (2, 10)]
    cell = results.build_ops(recs, [], None)["aten::sin"]["float32"]
    assert cell["fwd"] == "crash" and cell["case"] == "sin|float32|1"  # never a case that did not run
    assert cell["cases"] == 2 and cell["fails"] == 1 and cell["after_crash"] == 2, cell
    doc = {"provenance": {"torch": "2.13.0+cpu"}, "ops": {"aten::sin": {"float32": cell}}}
    f = judge_requirement(Coverage("x", None, doc, ["p.yaml"]), "aten::sin", "float32", "forward", "2.13.0+cpu")
    assert f.outcome == "fails" and "2 later case(s) not run" in f.why, f
    cell.pop("after_crash")  # the same counts without the cut: partial, so unknown
    f = judge_requirement(Coverage("x", None, doc, ["p.yaml"]), "aten::sin", "float32", "forward", "2.13.0+cpu")
    assert f.outcome == "unknown"


# ---------------------------------------------------------------- a reason for every overload


def test_every_unprobed_overload_has_a_reason_and_summary_shows_them(tmp_path):
    from opcov.vocab import SKIP_REASONS

    out, doc, _ = probe(
        tmp_path,
        "reasons",
        {"kernels": {}, "fallback": "cpu"},
        "--ops",
        "^(add|bernoulli)$",
        "--dtypes",
        "float32",
        "--directions",
        "forward",
        "--tiers",
        "none",
    )
    ops = doc["ops"]
    for name, rec in ops.items():
        assert "skipped" not in rec or rec["skipped"] in SKIP_REASONS, (name, rec)
    assert "float32" in ops["aten::add.out"]  # the out= check probes it
    assert ops["aten::add_.Tensor"] == {"skipped": "variant", "of": "aten::add.Tensor"}
    assert ops["aten::sym_size.int"] == {"skipped": "host_only"}
    assert ops["_c10d_functional::all_reduce"] == {"skipped": "distributed"}
    assert ops["aten::_cudnn_rnn"] == {"skipped": "no_cpu_kernel"}
    assert ops["aten::is_vulkan_available"] == {"skipped": "not_tensor_op"}
    assert ops["aten::normal.Tensor_float"] == {"skipped": "random"}
    assert ops["aten::sin"] == {"skipped": "not_selected"}
    assert ops["aten::add.Scalar"] == {"skipped": "other_overload"}  # add's OpInfo ran, dispatched .Tensor
    assert ops["aten::__and__.Tensor"] == {"skipped": "no_source"}
    s = doc["summary"]["aten"]
    assert sum(s["skipped_by"].values()) == s["skipped"] == s["overloads"] - s["probed"]
    summ = opcov_here("summary", out)
    assert summ.returncode == 0, summ.stderr
    assert "  variant " in summ.stdout and SKIP_REASONS["variant"].label in summ.stdout
    rows = [ln.split()[2] for ln in summ.stdout.splitlines() if ln.startswith("aten overloads    ")]
    assert rows == [SKIP_REASONS[w].short.split()[0] for w in SKIP_REASONS if w in s["skipped_by"]]  # in order
    assert opcov_here("lint", out).returncode == 0


def test_merged_shards_keep_the_best_explained_reason():
    """Shards give an op the same facts; the shard that probed its functional form (or ran its
    OpInfo) explains it better, and the merge keeps that one, as the whole run would have."""
    from opcov.probe import results
    from opcov.probe.disposition import Dispositions
    from opcov.store.combine import pick

    assert pick({"skipped": "not_selected"}, {"skipped": "other_overload"}) == {"skipped": "other_overload"}
    assert pick({"skipped": "variant", "of": "aten::a"}, {"skipped": "no_source"})["skipped"] == "variant"
    assert pick({"skipped": "no case of this probe dispatched it"}, {"skipped": "no_source"}) == {
        "skipped": "no_source"
    }
    d = Dispositions({"aten::h": "host_only"}, {"aten::a.out": "aten::a"}, {"a": {"a"}, "b": {"b"}}, {"a"})
    assert d.record("aten::h", frozenset()) == {"skipped": "host_only"}
    assert d.record("aten::a.out", frozenset({"aten::a"})) == {"skipped": "variant", "of": "aten::a"}
    assert d.record("aten::a.out", frozenset()) == {"skipped": "other_overload"}
    assert d.record("aten::b", frozenset()) == {"skipped": "not_selected"}
    assert d.record("aten::c", frozenset()) == {"skipped": "no_source"}
    shard1 = {"aten::a.out": {"skipped": "variant", "of": "aten::a"}, "aten::b": {"skipped": "not_selected"}}
    shard2 = {"aten::a.out": {"skipped": "not_selected"}, "aten::b": {"skipped": "other_overload"}}
    merged = results.merge_ops([shard1, shard2])
    assert merged == {"aten::a.out": {"skipped": "variant", "of": "aten::a"}, "aten::b": {"skipped": "other_overload"}}


def test_functional_forms_and_facts_come_from_the_dispatcher():
    import torch

    from opcov.catalog import build_catalog
    from opcov.probe.disposition import functional_forms, intrinsic

    catalog = build_catalog()
    forms = functional_forms(torch, catalog)
    assert forms["aten::add.out"] == "aten::add.Tensor" and forms["aten::add_.Tensor"] == "aten::add.Tensor"
    assert forms["aten::sum.IntList_out"] == "aten::sum.dim_IntList"
    assert "aten::add.Tensor" not in forms
    facts = intrinsic(torch, catalog)
    assert facts["aten::sym_numel"] == "host_only" and facts["c10d::allreduce_"] == "distributed"
    assert facts["aten::bernoulli.p"] == "random" and "aten::add.Tensor" not in facts


# ---------------------------------------------------------------- precision tiers


def test_precision_tiers_per_family():
    import torch

    from opcov.probe.compare import family_of, judge

    torch.manual_seed(0)
    x = torch.rand(64) + 0.5
    ref = x.double().exp()
    cpu = x.exp()
    close = (ref * (1 + 5e-6)).float()  # misses float32's strict tier, within the pointwise usable tier
    far = (ref * (1 + 1e-3)).float()
    v = judge(close, cpu, ref, dtype="float32", mode="values", family="pointwise")
    assert v["status"] == "pass_low_precision" and v["tol"] == "usable:pointwise", v
    assert judge(cpu.clone(), cpu, ref, dtype="float32", mode="values", family="pointwise")["status"] == "pass"
    assert judge(far, cpu, ref, dtype="float32", mode="values", family="pointwise")["status"] == "mismatch"
    assert judge(far, cpu, ref, dtype="float32", mode="values", family="matmul")["status"] == "pass_low_precision"
    wide = x.double().exp()
    assert (
        judge(wide * (1 + 1e-6), wide, None, dtype="float64", mode="values", family="matmul")["status"] == "mismatch"
    )  # float64 has no usable tier: that is narrowing
    assert family_of({"mm", "t"}, [set()]) == "matmul"
    assert family_of({"sum"}, [{"reduction", "core"}]) == "reduction"
    assert family_of({"exp"}, [{"pointwise", "core"}]) == "pointwise"
    assert family_of({"cat"}, [{"core"}]) == "other"


def test_identical_results_pass_without_the_float64_reference():
    import torch

    from opcov.probe.compare import identical

    x = torch.tensor([1.0, float("nan"), -0.0, float("inf")])
    assert identical((x.clone(), 3, "no gradient"), (x, 3, "no gradient"))  # NaN where CPU has NaN
    assert not identical(x.clone(), x.double()) and not identical(x[:3], x)
    y = x.clone()
    y[0] = 1.0000001
    assert not identical(y, x)  # one ulp off: judged against the float64 reference
    z = x.clone()
    z[1] = 0.0
    assert not identical(z, x) and not identical(x, z)
    assert not identical((x, 3), (x, 4)) and not identical([x], [x, x])


def _probed_doc(status: str, tol: str) -> dict:
    return {
        "schema_version": 1,
        "evidence": "probed",
        "backend": {"name": "x", "device_type": "x", "dispatch_key": "PrivateUse1", "package": "x", "version": "1"},
        "provenance": {"torch": "2.13.0+cpu", "opcov": "0.2.0"},
        "ops": {
            "aten::exp": {"float32": {"fwd": status, "tol": tol, "cases": 1}},
            "aten::sin": {"float32": {"fwd": "pass", "cases": 1}},
        },
    }


def test_diff_reports_precision_changes_apart_from_regressions():
    from opcov.verdict.diff import diff_docs, render

    strict, usable = _probed_doc("pass", "float32+cpu"), _probed_doc("pass_low_precision", "usable:pointwise")
    res = diff_docs(strict, usable, "old.yaml", "new.yaml")
    assert not res.regressions and not res.improvements
    assert [(c.op, c.old, c.new) for c in res.precision] == [("aten::exp", "pass", "pass_low_precision")]
    text = render(res)
    assert "1 precision change(s)" in text and "precision degraded" in text and "aten::exp float32 fwd" in text
    back = diff_docs(usable, strict, "new.yaml", "old.yaml")
    assert "precision improved" in render(back) and not back.regressions
    assert json.loads(render(res, "json"))["precision"][0]["new"] == "pass_low_precision"


def test_a_usable_tier_pass_runs_with_a_note():
    from opcov.verdict.judge import Coverage, judge_requirement

    doc = _probed_doc("pass_low_precision", "usable:pointwise")
    f = judge_requirement(Coverage("x", None, doc, ["p.yaml"]), "aten::exp", "float32", "forward", "2.13.0+cpu")
    assert f.outcome == "ok" and "usable tier (usable:pointwise)" in f.fix, f


# ---------------------------------------------------------------- harder inputs

TIERED = {
    "kernels": {
        "aten::neg": "fails_on_nan",
        "aten::sin": "fails_on_noncontig",
        "aten::avg_pool2d": "fails_on_channels_last",
    },
    "fallback": "cpu",
}


@pytest.fixture(scope="module")
def tiered(tmp_path_factory):
    return probe(
        tmp_path_factory.mktemp("tiers"),
        "tiers",
        TIERED,
        "--ops",
        "^(neg|sin|nn.functional.avg_pool2d)$",
        "--dtypes",
        "float32",
        "--directions",
        "forward",
    )


def test_each_harder_input_failure_lands_in_its_own_tier(tiered):
    out, doc, _ = tiered
    neg, sin, pool = (doc["ops"][op]["float32"] for op in ("aten::neg", "aten::sin", "aten::avg_pool2d"))
    assert neg["fwd"] == "pass" and neg["special"] == "mismatch" and "NaN/inf positions" in neg["special_why"], neg
    assert neg["special_err"] == [1e308, 1e308]  # an infinite error, in its finite written form (docs/DATA.md)
    assert neg["noncontig"] == "pass" and neg["empty"] == "pass" and neg["special_case"] == "neg|float32|special"
    assert sin["fwd"] == "pass" and sin["noncontig"] == "mismatch" and "values differ" in sin["noncontig_why"], sin
    assert sin["special"] == "pass" and sin["empty"] == "pass"
    assert pool["fwd"] == "pass" and pool["channels_last"] == "error", pool
    assert "channels_last input" in pool["channels_last_why"] and pool["channels_last_blame"].startswith("raised_in")
    assert pool["noncontig"] == pool["special"] == "pass"
    assert "channels_last" not in neg and "channels_last" not in sin  # no 4-d input: the tier does not apply
    tiers = doc["summary"]["aten"]["cells_tiers"]
    assert tiers["channels_last"] == {"error": 1} and tiers["special"]["mismatch"] == 1
    assert doc["provenance"]["probe"]["tiers"] == ["special", "noncontig", "channels_last", "empty"]
    assert opcov_here("lint", out).returncode == 0


def test_tier_cells_read_back_as_extra_slots(tiered):
    from opcov.store import data
    from opcov.store.cells import record_cells

    cell = record_cells(data.load(tiered[0])["ops"]["aten::sin"])["float32"]
    assert cell.slot("noncontig").status == "mismatch" and cell.extra["special"].status == "pass"
    assert ("noncontig", "status", "mismatch") in cell.evidence()


def test_harder_samples_and_layout_judgement():
    import torch

    from opcov.probe.sample import Sample, case_ids
    from opcov.probe.tiers import harder, layout_problem, tier_samples

    x = torch.randn(2, 3, 4, 5)
    s = Sample(x, (torch.tensor([1, 2]),), {})
    sp = harder("special", s)
    assert torch.isnan(sp.input.view(-1)[0]) and sp.input.view(-1)[3] == 0 and sp.args[0].tolist() == [1, 2]
    nc = harder("noncontig", s)
    assert not nc.input.is_contiguous() and torch.equal(nc.input, x) and nc.keep_layout
    assert not nc.args[0].is_contiguous() and nc.args[0].tolist() == [1, 2]  # 1-d: every other element
    cl = harder("channels_last", s)
    assert cl.input.is_contiguous(memory_format=torch.channels_last) and not cl.input.is_contiguous()
    em = harder("empty", s)
    assert em.input.shape == (0, 3, 4, 5) and em.args[0].shape == (0,)  # both lead with 2
    assert harder("channels_last", Sample(torch.randn(3, 3), (), {})) is None
    made = tier_samples([Sample(torch.randn(3), (), {}), s], ("channels_last", "special"))
    assert [m.tier for m in made] == ["channels_last", "special"] and made[0].input.dim() == 4
    assert case_ids("g", [s, s] + made) == ["g|0", "g|1", "g|channels_last", "g|special"]
    every = tier_samples([Sample(torch.randn(3), (), {}), s, s], ("channels_last", "special"), every=True)
    assert [m.tier for m in every] == ["channels_last", "channels_last", "special", "special", "special"]
    assert case_ids("g", [s] + every)[1:] == [
        "g|channels_last",
        "g|channels_last.2",
        "g|special",
        "g|special.2",
        "g|special.3",
    ]
    cpu = torch.randn(2, 3, 4, 5).contiguous(memory_format=torch.channels_last)
    assert "channels_last on cpu" in layout_problem(torch, cpu, cpu.contiguous())
    assert layout_problem(torch, cpu, cpu.clone()) is None
    assert layout_problem(torch, cpu.contiguous(), cpu) is None  # a contiguous CPU result binds nothing


def test_tier_cells_merge_like_one_run():
    """Shards of a probe merged equal the whole run, tier slots too (a passing tier keeps its counts)."""
    from opcov.probe import results
    from opcov.probe.caserecord import CaseRecord

    def rec(source, tier, status, strides=False):
        return CaseRecord(
            f"{source}|float32|{tier or 0}",
            f"{source}|float32",
            source,
            "float32",
            ["aten::abs"],
            fwd={
                "ops": [["aten::abs", "float32"]],
                "status": status,
                "strides": strides,
                "err": [0.0, 0.0],
                "tol": "float32+cpu",
            },
            tier=tier,
        )

    recs = [
        rec("abs", None, "pass"),
        rec("abs", "noncontig", "pass", True),
        rec("abs", "special", "pass"),
        rec("nn.functional.l1", None, "pass"),
        rec("nn.functional.l1", "noncontig", "mismatch"),
    ]
    whole = results.build_ops(recs, [], None)
    cell = whole["aten::abs"]["float32"]
    assert cell["special"] == "pass" and cell["special_cases"] == 1 and "special_case" not in cell
    assert cell["noncontig"] == "mismatch" and cell["noncontig_cases"] == 2 and cell["noncontig_strides"] == 1
    halves = [results.build_ops(recs[:3], [], None), results.build_ops(recs[3:], [], None)]
    assert results.merge_ops(halves) == whole


# ---------------------------------------------------------------- schema cases and the manifest

SCHEMA = {"kernels": {"aten::add.Scalar": "large_error"}, "fallback": "cpu"}
MANIFEST = """manifest: 1
backend: opcovtest
claims:
  aten::add.Scalar: [float32]
  aten::zeros: all
excludes:
  aten::_fft_c2c: no FFT unit
"""


@pytest.fixture(scope="module")
def schema_run(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("schema")
    (tmp / "manifest.yaml").write_text(MANIFEST)
    # add.Scalar and _softmax have no OpInfo about their overload, zeros is a factory (device=),
    # adaptive_max_pool3d is one no candidate runs on CPU (its outputs need 5-d inputs and 3 sizes)
    return probe(
        tmp,
        "schema",
        SCHEMA,
        "--ops",
        r"^aten::(add\.Scalar|_softmax|zeros|adaptive_max_pool3d)$",
        "--dtypes",
        "float32",
        "--directions",
        "forward",
        "--tiers",
        "none",
        "--manifest",
        str(tmp / "manifest.yaml"),
    )


def test_schema_cases_reach_overloads_no_opinfo_is_about(schema_run):
    out, doc, _ = schema_run
    ops = doc["ops"]
    add = ops["aten::add.Scalar"]["float32"]
    assert add["fwd"] == "mismatch" and add["samples"][0].startswith("schema.") and "values differ" in add["why"], add
    assert ops["aten::_softmax"]["float32"]["fwd"] == "pass"
    assert ops["aten::zeros"]["float32"]["fwd"] == "pass"  # device= set to the device for the device run
    assert ops["aten::add.Scalar_out"] == {"skipped": "variant", "of": "aten::add.Scalar"}
    assert ops["aten::adaptive_max_pool3d"] == {"skipped": "schema_no_case"}
    assert ops["aten::_fft_c2c"] == {"skipped": "excluded"}
    assert doc["provenance"]["probe"]["case_source"]["schema_ops"] == 4
    claims = doc["summary"]["claims"]
    assert claims["claimed_failing"] == 1 and claims["claimed_ok"] >= 1 and claims["unclaimed_ok"] >= 1, claims
    assert doc["provenance"]["probe"]["manifest"]["claims"] == 2
    assert opcov_here("lint", out).returncode == 0


def test_schema_inputs_follow_argument_names():
    import torch

    from opcov.probe import schemacases as sc

    found = sc.first_case(torch, "aten::_softmax", torch.float32, 1)
    assert found is not None and found[1][1] in (0, -1) and found[1][2] is False  # dim, half_to_float
    found = sc.first_case(torch, "aten::bitwise_and.Tensor", torch.float32, 1)
    assert found[1][0].dtype == torch.int64  # no float kernel: made at int64, filed under int64
    assert sc.first_case(torch, "aten::adaptive_max_pool3d", torch.float32, 1) is None
    assert sc.chunks(["aten::a", "aten::b"]) == sc.chunks(["aten::b", "aten::a"])


def test_schema_cases_never_read_memory_the_kernel_left_unset():
    import torch

    from opcov.probe import schemacases as sc

    # g the shape of v: the kernel fills one norm per row of a (3, 4) output and leaves the rest
    func = sc._overload(torch, "aten::_weight_norm_interface")
    v, g = torch.randn(3, 4), torch.randn(3, 4)
    assert sc.reads_unset(torch, func, (v, g), {}, func(v, g), 1)
    v1, g1 = v[:, 0].contiguous(), g[:, 0].contiguous()
    assert not sc.reads_unset(torch, func, (v1, g1), {}, func(v1, g1), 1)
    for name in ("aten::_weight_norm_interface", "aten::_weight_norm_interface_backward"):
        func, args, kwargs, _, unset = sc.first_case(torch, name, torch.float32, 1)
        assert not unset and args[0].shape == args[1].shape == (4,)  # a norm per element: consistent
        assert sc._same(torch, func(*args, **kwargs), func(*args, **kwargs))
    # no candidate of empty's is filled: kept, its values marked as not compared
    assert sc.first_case(torch, "aten::empty.memory_format", torch.float32, 1)[4] is True
    assert sc.first_case(torch, "aten::rand_like", torch.float32, 1)[4] is False  # seeded: same each call


def test_manifest_tells_claimed_failures_from_gaps_and_gates_on_unclaimed(tmp_path):
    from opcov.errors import UsageError
    from opcov.probe.manifest import load
    from opcov.verdict.judge import BackendVerdict, Finding, OpResult, apply_manifest, fail_on, gate_failures

    path = tmp_path / "m.yaml"
    path.write_text(MANIFEST)
    m = load(str(path), "opcovtest")
    assert m.claimed("aten::add.Scalar", "float32") and not m.claimed("aten::add.Scalar", "bfloat16")
    assert m.claimed("aten::zeros.names", "int64") and not m.claimed("aten::zeros_like", "float32")
    assert m.excluded("aten::_fft_c2c") == "no FFT unit"

    def verdict():
        return BackendVerdict(
            "opcovtest",
            "inference",
            "fails",
            "probed",
            [
                OpResult("aten::add.Scalar", findings=[Finding("forward", "float32", "fails", "probed", "mismatch")]),
                OpResult("aten::mm", findings=[Finding("forward", "float32", "fails", "probed", "raises")]),
            ],
            [],
            [],
        )

    v = verdict()
    assert apply_manifest([v], m) == 1
    assert v.ops[0].findings[0].why.endswith("claimed by the manifest: a bug to report")
    assert v.ops[1].findings[0].why.endswith("not claimed by the manifest: a known gap")
    assert v.unclaimed == [("aten::mm", "float32")]
    lines = gate_failures([v], outcomes=fail_on(["unclaimed"]))
    assert any("1 needed op/dtype pair(s) not claimed by the manifest: aten::mm float32" in ln for ln in lines)
    assert any("needs the backend's manifest" in ln for ln in gate_failures([verdict()], outcomes={"unclaimed"}))
    for text, said in (
        ("manifest: 2\n", "manifest: 1"),
        ("manifest: 1\nbackend: tpu\n", "not 'opcovtest'"),
        ("manifest: 1\nbackend: opcovtest\nclaims: {aten::mm: float32}\n", "dtypes must be"),
    ):
        path.write_text(text)
        with pytest.raises(UsageError, match=said):
            load(str(path), "opcovtest")


def test_a_factory_opinfo_makes_its_result_on_the_probed_device(tmp_path):
    """A factory OpInfo's samples name the device to make on (triu_indices, eye, full, the signal windows): the
    case runs with the probed device there, not the CPU the samples were made for. A backend without a
    triu_indices kernel and no CPU fallback must fail it (it once 'passed', made on CPU: PyTorch/XLA's
    triu_indices, which falls back, read as running)."""
    spec = {"kernels": {}, "fallback": "raise"}
    out, doc, _ = probe(tmp_path, "factory", spec, "--ops", "^triu_indices$", "--dtypes", "int64", "--tiers", "none")
    cells = doc["ops"]["aten::triu_indices"]  # keyed by the dtype it made, or 'none' where it made nothing
    assert cells and all(c["fwd"] == "unsupported" for c in cells.values()), cells


FACTORY_MODEL = """
import torch

def pairs():
    torch.manual_seed(0)
    model = torch.nn.Linear(4, 4)
    x = torch.randn(4, 4)

    class Pairs(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.lin = model

        def forward(self, x):  # the upper triangle of a similarity matrix, as a DLRM-style interaction does
            i, j = torch.triu_indices(4, 4, 1, device=x.device)
            return self.lin(x)[i, j]

    return Pairs(), (x,)
"""


def test_a_models_own_factory_call_is_replayed_on_the_probed_device(tmp_path):
    """A model's factory call (``triu_indices(..., device=x.device)``; arange, full and eye alike) reaches the
    dispatcher with ``device=`` filled in; its replay makes the result on the probed device, as the model's
    run there does. A backend without the kernel fails the replayed call (it once passed, made on CPU: a
    DLRM-style model's triu_indices on PyTorch/XLA, which falls back there, read as running)."""
    (tmp_path / "pairsmodel.py").write_text(FACTORY_MODEL)
    spec = {"kernels": {}, "fallback": "raise"}
    out = str(tmp_path / "own.yaml")
    proc = run_opcov(
        "probe", "opcovtest", *PB, "--traces", "pairsmodel:pairs", "--ops", r"^trace\.", "--directions", "forward",
        "--tiers", "none", "--out", out, timeout=600, OPCOV_PYBACKEND_SPEC=json.dumps(spec),
        PYTHONPATH=os.pathsep.join([os.path.join(ROOT, "src"), str(tmp_path)]),
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-3000:]
    cells = load_yaml(out)["ops"]["aten::triu_indices"]
    assert cells and all(c["traced"] == {"pairsmodel.pairs": "unsupported"} for c in cells.values()), cells
