"""opcov probe / merge end to end, on the planted Python PrivateUse1 backend (in child processes).

Each test runs a small probe (a few OpInfos) so the whole file stays within a few minutes on
two cores. The planted behaviours come from opcov.sources.pybackend via OPCOV_PYBACKEND_SPEC.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time

import pytest
from conftest import ROOT, WORKING, WORKING_OPS, child_env, load_yaml, opcov_here, run_opcov

PB = ["--import", "opcov.sources.pybackend"]

PLANTED = {
    "kernels": {
        "aten::add.out": "pass",
        "aten::mul.out": "small_error",
        "aten::sub.out": "large_error",
        "aten::mm": "low_precision",
        "aten::neg": "raise",
        "aten::exp": "oom",
        "aten::sum.dim_IntList": "pass",
    },
    "fallback": "raise",  # ops without a kernel raise NotImplementedError: 'missing'
}
CRASHY = {
    "kernels": {
        "aten::neg": "pass",
        "aten::ceil": "pass",
        "aten::trunc": "pass",
        "aten::sin": "segfault",
        "aten::tan": "abort",
        "aten::sqrt": "hang",
    },
    "fallback": "raise",
}


def probe(tmp_path, name, spec, *args, timeout=300):
    out = str(tmp_path / f"{name}.yaml")
    proc = run_opcov(
        "probe", "opcovtest", *PB, *args, "--out", out, timeout=timeout, OPCOV_PYBACKEND_SPEC=json.dumps(spec)
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    return out, load_yaml(out), proc


def cell(doc, op, dtype="float32"):
    return doc["ops"][op][dtype]


@pytest.fixture(scope="module")
def planted(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("planted")
    return probe(tmp, "planted", PLANTED, "--ops", "^(mm|mul|sub|neg|abs|add|exp|empty_like)$", "--dtypes", "float32")


def test_each_planted_behaviour_lands_in_its_status(planted):
    out, doc, proc = planted
    assert cell(doc, "aten::add.Tensor")["fwd"] == "pass"
    assert cell(doc, "aten::add.Tensor")["tol"] == "same"  # CPU's result bit for bit: no float64 run needed
    mm = cell(doc, "aten::mm")
    assert mm["fwd"] == "pass_low_precision" and mm["tol"] == "usable:matmul"  # the usable tier
    assert 1e-4 < mm["err"][1] < 2e-2  # bfloat16-level relative error, kept as evidence
    mul = cell(doc, "aten::mul.Tensor")  # 1e-3 relative error on an elementwise op: wrong, not low precision
    assert mul["fwd"] == "mismatch" and "values differ" in mul["why"] and mul["blame"].startswith("opinfo")
    sub = cell(doc, "aten::sub.Tensor")
    assert sub["fwd"] == "mismatch" and sub["err"][0] >= 0.99
    neg = cell(doc, "aten::neg")
    assert neg["fwd"] == "error" and "planted error" in neg["why"] and neg["blame"].startswith("raised_in")
    abs_ = cell(doc, "aten::abs")
    assert abs_["fwd"] == "unsupported" and "NotImplementedError" in abs_["why"]
    exp = cell(doc, "aten::exp")
    assert exp["fwd"] == "error" and exp["why"].startswith("out of memory")
    assert cell(doc, "aten::empty_like")["fwd"] == "not_comparable"
    # the backward of mm runs mm again at reduced precision; add's backward is exact
    assert mm["bwd"] == "pass_low_precision"
    # ops no case reached are listed, each with its reason, and counted per reason
    assert doc["ops"]["aten::sin"] == {"skipped": "not_selected"}  # its OpInfo was not in --ops
    assert doc["ops"]["aten::_grouped_mm"] == {"skipped": "no_source"}  # no OpInfo (zoo traces reach it)
    assert doc["ops"]["aten::mm.out"] == {"skipped": "variant", "of": "aten::mm"}
    s = doc["summary"]["aten"]
    assert s["probed"] + s["skipped"] == s["overloads"] and s["probed"] >= 8
    assert sum(s["skipped_by"].values()) == s["skipped"] and s["skipped_by"]["host_only"] == 7
    assert doc["evidence"] == "probed" and doc["provenance"]["probe"]["dtypes"] == ["float32"]
    assert "opcov probe opcovtest" in doc["provenance"]["command"]


def test_probed_file_lints_clean_and_summarizes(planted):
    out, doc, _ = planted
    lint = opcov_here("lint", out)
    assert lint.returncode == 0, lint.stdout + lint.stderr
    assert "0 error(s)" in lint.stdout
    summ = opcov_here("summary", out)
    assert summ.returncode == 0, summ.stderr
    assert "probed evidence" in summ.stdout and "skipped (no case reached it)" in summ.stdout
    assert "pass_low_precision" in summ.stdout


def test_crash_and_hang_are_isolated(tmp_path):
    out, doc, proc = probe(
        tmp_path,
        "crashy",
        CRASHY,
        "--ops",
        "^(sin|tan|sqrt|neg|ceil|trunc)$",
        "--dtypes",
        "float32",
        "--directions",
        "forward",
        "--timeout",
        "3",
    )
    sin, tan, sqrt = cell(doc, "aten::sin"), cell(doc, "aten::tan"), cell(doc, "aten::sqrt")
    assert sin["fwd"] == "crash" and "SIGSEGV" in sin["why"]
    assert tan["fwd"] == "crash" and "SIGABRT" in tan["why"]
    assert sqrt["fwd"] == "timeout" and "3s" in sqrt["why"]
    # groups after the crashes ran in fresh workers and pass (trunc sorts after tan)
    assert cell(doc, "aten::trunc")["fwd"] == "pass"
    assert cell(doc, "aten::neg")["fwd"] == "pass"
    assert "worker restarts" in proc.stdout
    assert not os.path.exists(out + ".journal.jsonl")


def test_crash_in_backward_keeps_the_forward_result(tmp_path):
    """The worker reports its case's steps through shared memory, not messages: a crash in the
    backward is still filed under the backward, with the forward's result kept."""
    spec = {"kernels": {"aten::sin": "pass", "aten::cos": "segfault"}, "fallback": "cpu"}
    out, doc, proc = probe(tmp_path, "bwdcrash", spec, "--ops", "^sin$", "--dtypes", "float32")
    sin = cell(doc, "aten::sin")
    assert sin["fwd"] == "pass", sin
    assert sin["bwd"] == "crash" and "SIGSEGV" in sin["bwd_why"], sin
    assert sin["bwd_case"] == sin["case"] == "sin|float32|0"
    assert "worker restarts" in proc.stdout


# Planted wrongs that never meet (no OpInfo below dispatches another's op), all else through the CPU fallback,
# probed in one run: a wrong abs (softsign dispatches it), a copying unfold, a wrong mul(out=) beside a right
# mul, and a right sub(out=).
MIXED = {
    "kernels": {
        "aten::abs": "large_error",
        "aten::unfold": "pass",
        "aten::mul.Tensor": "pass",
        "aten::mul.out": "large_error",
        "aten::sub.Tensor": "pass",
        "aten::sub.out": "pass",
    },
    "fallback": "cpu",
}


@pytest.fixture(scope="module")
def mixed(tmp_path_factory):
    ops = "^(nn.functional.softsign|tensor_split|unfold|mul|sub)$"
    args = ("--ops", ops, "--dtypes", "float32", "--directions", "forward")
    return probe(tmp_path_factory.mktemp("mixed"), "mixed", MIXED, *args)[1]


def test_failures_are_pinned_by_replay_and_host_leaves_stay_on_cpu(mixed):
    """softsign (x / (1 + |x|)) dispatches abs, add and div; with a wrong abs only, replaying its
    calls one at a time pins the failure on abs, and add/div keep a clean record. tensor_split's
    index tensor stays on CPU as its OpInfo made it (ATen requires it there), so it passes."""
    doc = mixed
    abs_ = cell(doc, "aten::abs")
    assert abs_["fwd"] == "mismatch" and abs_["blame"].startswith("localized: of its 3 op calls"), abs_
    for op in ("aten::add.Tensor", "aten::div.Tensor"):
        assert cell(doc, op)["fwd"] == "pass" and "fails" not in cell(doc, op), (op, cell(doc, op))
    assert doc["summary"]["opinfo"]["nn.functional.softsign"]["float32"].startswith("mismatch/")
    assert doc["summary"]["opinfo"]["tensor_split"]["float32"].startswith("pass/")


def test_unpinned_failures_rank_below_passes():
    """A failure blamed on no single overload (ambiguous or composition) does not make an op that
    passes its own cases fail; it is counted (fails, unpinned) and the op keeps its status."""
    from opcov.probe import results
    from opcov.probe.caserecord import CaseRecord

    ops2 = [["aten::mul.Tensor", "float32"], ["aten::view", "float32"]]
    mk = lambda i, status, src, aten, loc=None: CaseRecord(  # noqa: E731
        f"{src}|float32|{i}",
        f"{src}|float32",
        src,
        "float32",
        aten,
        fwd=dict({"status": status, "ops": ops2}, **({"localized": loc} if loc else {})),
    )
    recs = [
        mk(0, "pass", "view", ["aten::view"]),
        mk(0, "mismatch", "composite", ["aten::composite"], {"replayed": 2, "failed": []}),
    ]
    view = results.build_ops(recs, [], UNREACHED)["aten::view"]["float32"]
    assert view["fwd"] == "pass" and view["fails"] == 1 and view["unpinned"] == 1 and view["cases"] == 2
    alone = results.build_ops(recs[1:], [], UNREACHED)["aten::view"]["float32"]  # nothing exonerates it
    assert alone["fwd"] == "mismatch" and alone["blame"].startswith("composition")


def UNREACHED(name, probed):  # noqa: N802 - a constant-like skip rule for build_ops
    return {"skipped": "no_source"}


def _comparable(doc):
    return {"ops": doc["ops"], "summary": doc["summary"]}


@pytest.fixture(scope="module")
def whole(whole_probe):
    return whole_probe, load_yaml(whole_probe)


def test_resume_after_sigkill_equals_uninterrupted(tmp_path, whole):
    out = str(tmp_path / "killed.yaml")
    journal = out + ".journal.jsonl"
    args = ["probe", "opcovtest", *PB, "--ops", WORKING_OPS, "--dtypes", "float32", "--out", out]
    env = child_env(OPCOV_PYBACKEND_SPEC=json.dumps(WORKING), OPCOV_PROBE_CASE_DELAY="0.05")
    parent = subprocess.Popen(
        [sys.executable, "-m", "opcov", *args], env=env, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
    )
    deadline = time.time() + 120
    while time.time() < deadline:
        if os.path.exists(journal) and sum(1 for _ in open(journal)) > 12:
            break
        time.sleep(0.05)
    parent.send_signal(signal.SIGKILL)
    parent.wait()
    assert os.path.exists(journal) and not os.path.exists(out), "the run was not interrupted mid-way"
    done = sum(1 for line in open(journal) if '"case"' in line)
    again = opcov_here(*args, OPCOV_PYBACKEND_SPEC=json.dumps(WORKING))  # refused before the backend is imported
    assert again.returncode != 0 and "--resume" in again.stderr  # a journal is never silently dropped
    resumed = run_opcov(*args, "--resume", OPCOV_PYBACKEND_SPEC=json.dumps(WORKING))
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    assert f"resuming: {done} cases" in resumed.stderr
    doc = load_yaml(out)
    assert _comparable(doc) == _comparable(whole[1])
    assert doc["provenance"]["command"] == whole[1]["provenance"]["command"].replace(whole[0], out)


def test_shards_merged_equal_the_whole_run(tmp_path, whole):
    parts = []
    for i in (1, 2):
        out, doc, _ = probe(
            tmp_path, f"shard{i}", WORKING, "--ops", WORKING_OPS, "--dtypes", "float32", "--shard", f"{i}/2"
        )
        assert doc["provenance"]["probe"]["shard"] == f"{i}/2"
        parts.append(out)
    merged = str(tmp_path / "merged.yaml")
    proc = opcov_here("merge", *parts, "--out", merged)
    assert proc.returncode == 0, proc.stderr
    doc = load_yaml(merged)
    assert _comparable(doc) == _comparable(whole[1])
    assert len(doc["provenance"]["merged_from"]) == 2
    assert opcov_here("lint", "--no-catalog", merged).returncode == 0


def test_merge_refuses_mismatched_inputs(tmp_path, whole):
    from opcov.store import data

    base = whole[1]
    for what, change in (
        ("backend", lambda d: d["backend"].update(name="other")),
        ("torch version", lambda d: d["provenance"].update(torch="2.99.0")),
        ("backend version", lambda d: d["backend"].update(version="9.9")),
    ):
        doc = json.loads(json.dumps(base))
        change(doc)
        other = str(tmp_path / "other.yaml")
        data.save(doc, other)
        proc = opcov_here("merge", whole[0], other, "--out", str(tmp_path / "m.yaml"))
        assert proc.returncode == 2, what
        assert f"cannot merge {other}" in proc.stderr and what in proc.stderr
        assert len(proc.stderr.strip().splitlines()) == 1
    reg = os.path.join(ROOT, "coverage", "cpu", "registered-torch-2.13.0+cpu.yaml")
    proc = opcov_here("merge", whole[0], reg, "--out", str(tmp_path / "m.yaml"))
    assert proc.returncode == 2 and "probed files only" in proc.stderr


def test_a_selective_reprobe_replaces_only_the_ops_it_selected(tmp_path, whole):
    """'opcov merge --replace' of a re-probe made with --ops: the selected ops' cells are the re-probe's,
    the other ops its cases dispatched keep the whole probe's cells (a few cases never replace them)."""
    from opcov.store import data

    base = whole[1]
    chosen, other = [op for op, rec in base["ops"].items() if "float32" in rec.get("skipped", {"float32": 0})][:2]
    later = json.loads(json.dumps(base))
    later["provenance"]["probe"]["ops"] = re.escape(chosen) + "$"
    for op in (chosen, other):
        later["ops"][op]["float32"]["cases"] = 777
    path = str(tmp_path / "later.yaml")
    data.save(later, path)
    merged = str(tmp_path / "merged.yaml")
    proc = opcov_here("merge", "--replace", whole[0], path, "--out", merged)
    assert proc.returncode == 0, proc.stderr
    ops = load_yaml(merged)["ops"]
    assert ops[chosen]["float32"]["cases"] == 777
    assert ops[other]["float32"]["cases"] == base["ops"][other]["float32"]["cases"] != 777


@pytest.mark.parametrize(
    "args, message",
    [
        (["--ops", "(mm"], "bad --ops pattern"),
        (["--dtypes", "float33"], "unknown dtype 'float33'"),
        (["--shard", "3/2"], "bad --shard"),
        (["--shard", "x"], "bad --shard"),
        (["--directions", "sideways"], "unknown direction"),
        (["--jobs", "0"], "argument --jobs: '0' must be at least 1"),
        (["--traces", "nosuchmodel"], "is neither a zoo model nor a factory"),
    ],
)
def test_bad_arguments_give_one_line_and_exit_2(args, message):
    proc = opcov_here("probe", "cpu", *args)
    assert proc.returncode == 2
    assert message in proc.stderr and len(proc.stderr.strip().splitlines()) == 1


def test_pattern_matching_nothing_is_a_usage_error(tmp_path):
    proc = opcov_here("probe", "cpu", "--ops", "^no_such_op_xyz$", "--out", str(tmp_path / "x.yaml"))
    assert proc.returncode == 2 and "no OpInfo case matches" in proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1


def test_the_parent_selects_groups_from_a_recording_of_the_opinfo_database(tmp_path, monkeypatch):
    """A probe's parent picks its groups from a recording of which OpInfos exist and the dtypes CPU runs
    them at (the database costs about 3 s of CPU per process; only the workers run its samples): the
    groups are those the database gives, a process that has the recording never imports the database,
    and a recording made from another torch install is made again."""
    import torch

    from opcov.probe import cases
    from opcov.sources import opinfo

    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    pattern, dtypes = "^(mul|masked.prod|nn.functional.softsign|_segment_reduce.lengths)$", ("float16", "int64")
    groups = cases.select_groups(pattern, dtypes=dtypes, directions=("forward", "backward"), canaries=False)
    want = []
    for oid, op in sorted(opinfo.opinfos().items()):
        if re.search(pattern, oid):
            fwd, bwd = op.supported_dtypes("cpu"), op.supported_backward_dtypes("cpu") if op.supports_autograd else ()
            want += [(oid, d, getattr(torch, d) in bwd) for d in dtypes if getattr(torch, d) in fwd]
    assert [(g.source, g.dtype, g.backward) for g in groups] == want and len(want) >= 5, want
    assert any(b for *_, b in want) and not all(b for *_, b in want)  # some groups run a backward, some not
    assert cases.named_bases()["prod"] >= {"masked.prod", "prod"}

    code = (
        "import sys\nfrom opcov.probe import cases\n"
        f"print(len(cases.select_groups({pattern!r}, dtypes={dtypes!r}, directions=('forward',), canaries=False)))\n"
        "print(sorted(cases.list_counts()), 'torch.testing._internal.common_methods_invocations' in sys.modules)\n"
    )
    child = subprocess.run(
        [sys.executable, "-c", code], env=child_env(), capture_output=True, text=True, timeout=300, cwd=ROOT
    )
    assert child.stdout.splitlines() == [str(len(want)), f"{sorted(opinfo.OPINFO_LISTS)} False"], child.stderr

    path = tmp_path / "opcov" / f"opinfo-index-torch{torch.__version__}.json"
    other = json.loads(path.read_text())
    other["key"], other["ops"]["mul"]["cpu"] = "another install", []
    path.write_text(json.dumps(other))
    again = cases.select_groups("^mul$", dtypes=("float32",), directions=("forward",), canaries=False)
    assert [g.id for g in again] == ["mul|float32"]


def test_replayed_model_calls_reach_ops_and_gaps_show(tmp_path):
    """--traces replays the op calls of a zoo model's training step: the backward kernels it reaches
    get evidence, and a backend gap (no kernel, fallback off) shows as unsupported."""
    spec = {"kernels": {"aten::convolution_backward": "raise"}, "fallback": "cpu"}
    out, doc, _ = probe(tmp_path, "traces", spec, "--traces", "nn-convnet", "--ops", r"^trace\.", "--dtypes", "float32")
    conv_bwd = cell(doc, "aten::convolution_backward")
    assert conv_bwd["fwd"] == "error" and "planted error" in conv_bwd["why"]
    assert conv_bwd["samples"] == ["trace.nn-convnet"] and conv_bwd["case"].startswith("trace.nn-convnet|")
    # no convolution kernel: the composite reaches convolution_overrideable, which raises
    conv = cell(doc, "aten::convolution")
    assert conv["fwd"] == "unsupported" and "overrideable" in conv["why"]
    assert cell(doc, "aten::native_batch_norm_backward")["fwd"] == "pass"  # only a backward reaches it
    assert doc["provenance"]["probe"]["case_source"]["traces"] == ["nn-convnet"]


def test_smoke_test_crash_fails_cleanly(tmp_path):
    """A backend whose device start aborts the process (as TorchTPU without a TPU) kills only the
    spawned worker: one line, exit 2, no journal left behind."""
    mod = tmp_path / "abortdev.py"
    mod.write_text(
        "import multiprocessing, os\n"
        "if multiprocessing.parent_process() is not None:\n"
        "    os.abort()  # the device start, in the worker only\n"
    )
    out = str(tmp_path / "x.yaml")
    env = {"PYTHONPATH": f"{tmp_path}{os.pathsep}{os.path.join(ROOT, 'src')}"}
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "opcov",
            "probe",
            "abortdev",
            "--import",
            "abortdev",
            "--ops",
            "^mm$",
            "--dtypes",
            "float32",
            "--out",
            out,
        ],
        env=child_env(**env),
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 2, proc.stderr
    assert "smoke test on abortdev crashed (signal SIGABRT)" in proc.stderr
    assert len([ln for ln in proc.stderr.splitlines() if ln.startswith("opcov:")]) == 1
    assert not os.path.exists(out + ".journal.jsonl")


# ---------------------------------------------------------------- in-process units (cpu only)


def test_judge_rules():
    import torch

    from opcov.probe.compare import judge

    torch.manual_seed(0)
    a, b = torch.randn(16, 16), torch.randn(16, 16)
    ref = a.double() @ b.double()
    cpu = a @ b
    low = cpu.to(torch.bfloat16).float()
    kw = {"dtype": "float32", "mode": "values"}
    assert judge(cpu.clone(), cpu, ref, family="matmul", **kw)["status"] == "pass"
    v = judge(low, cpu, ref, family="matmul", **kw)
    assert v["status"] == "pass_low_precision" and v["tol"] == "usable:matmul" and v["err"][0] > 0
    assert judge(low, cpu, ref, family="pointwise", **kw)["status"] == "mismatch"  # not a matmul: wrong
    # NaN positions must agree; a stride difference is recorded, not a mismatch
    x = torch.tensor([1.0, float("nan"), 3.0])
    assert judge(torch.tensor([1.0, 2.0, 3.0]), x, None, family="pointwise", **kw)["status"] == "mismatch"
    assert judge(x.clone(), x, None, family="pointwise", **kw)["status"] == "pass"
    t = cpu.t().contiguous().t()
    v = judge(t, cpu, ref, family="pointwise", **kw)
    assert v["status"] == "pass" and v["strides"] is True
    assert "shape" in judge(cpu[:3], cpu, ref, family="pointwise", **kw)["why"]
    assert "dtype" in judge(cpu.double(), cpu, ref, family="pointwise", **kw)["why"]
    # meta: layout only, and strides count there
    m = torch.empty(4, 4, device="meta")
    assert judge(m, torch.empty(4, 4), None, dtype="float32", mode="meta", family="pointwise")["status"] == "pass"
    assert (
        judge(m.t(), torch.empty(4, 4), None, dtype="float32", mode="meta", family="pointwise")["status"] == "mismatch"
    )


def test_canaries_catch_silent_narrowing():
    import torch

    from opcov.probe.cases import _canaries
    from opcov.probe.compare import judge

    for cid, (dt, fn, samples) in _canaries().items():
        inp, args, kwargs = samples[0]
        right = fn(inp, *args, **kwargs)
        narrow = torch.float32 if dt == "float64" else torch.int32
        wrong = fn(inp.to(narrow), *[a.to(narrow) if isinstance(a, torch.Tensor) else a for a in args], **kwargs).to(
            right.dtype
        )
        assert judge(right.clone(), right, None, dtype=dt, mode="canary", family="pointwise")["status"] == "pass"
        assert judge(wrong, right, None, dtype=dt, mode="canary", family="pointwise")["status"] == "mismatch", cid
    # a device that divides int64 through float32 (PyTorch/XLA's div with a rounding mode, floor_divide) rounds a
    # hash bucket's values past 2**24: the division canaries see it, by a tensor and by a scalar
    for cid in ("canary.int64_div_floor", "canary.int64_div_trunc", "canary.int64_floor_divide"):
        dt, fn, samples = _canaries()[cid]
        for inp, args, kwargs in samples:
            right = fn(inp, *args, **kwargs)
            via_float = fn(inp.float(), *[a.float() if isinstance(a, torch.Tensor) else a for a in args], **kwargs)
            status = judge(via_float.to(right.dtype), right, None, dtype=dt, mode="canary", family="pointwise")
            assert status["status"] == "mismatch", (cid, args)


def test_no_reference_when_cpu_fails_and_cells_take_the_worst():
    import torch

    from opcov.probe import results
    from opcov.probe.caserecord import CaseRecord
    from opcov.probe.execute import Executor
    from opcov.probe.sample import Loaded, Sample

    def broken(x):
        raise RuntimeError("no kernel here either")

    ex = Executor("cpu", "cpu")
    loaded = Loaded(broken, [Sample(torch.ones(2), (), {})], ("aten::broken",), False, True, False)
    rec = ex.run_case(
        loaded,
        loaded.samples[0],
        "x|float32|0",
        {"id": "x|float32", "source": "x", "dtype": "float32", "backward": False},
    )
    assert rec.fwd["status"] == "no_reference" and "cpu reference failed" in rec.fwd["why"]
    assert rec.aten == ["aten::broken"] and rec.out is None and rec.bwd is None

    def rec_of(i, status, ops, raised=None, err=None):
        part = {"status": status, "ops": ops}
        if raised:
            part["raised"] = raised
        if err:
            part["err"] = err
        return CaseRecord(f"mul|float32|{i}", "mul|float32", "mul", "float32", ["aten::mul"], fwd=part)

    ops2 = [["aten::mul.Tensor", "float32"], ["aten::view", "float32"]]
    recs = [
        rec_of(0, "pass", ops2, err=[1e-7, 1e-7]),
        rec_of(1, "not_comparable", ops2),
        rec_of(2, "mismatch", ops2, err=[0.5, 0.1]),
        rec_of(3, "error", ops2, raised=["aten::view", "float32"]),
    ]
    ops = results.build_ops(recs, ["aten::mul.Tensor", "aten::view", "aten::mm"], UNREACHED)
    mul, view = ops["aten::mul.Tensor"]["float32"], ops["aten::view"]["float32"]
    assert mul["fwd"] == "mismatch" and mul["blame"].startswith("opinfo") and mul["cases"] == 3
    assert mul["fails"] == 1  # of its 3 cases, one failed (the verdict tells partial from total)
    assert view["fwd"] == "error" and view["blame"].startswith("raised_in")
    assert view["cases"] == 3 and view["fails"] == 1
    assert "fails" not in results.build_ops(recs[:2], [], UNREACHED)["aten::mul.Tensor"]["float32"]
    assert ops["aten::mm"] == {"skipped": "no_source"}
    # combining is order-free: two halves merged equal the whole
    a = results.build_ops(recs[:2], [], UNREACHED)
    b = results.build_ops(recs[2:], [], UNREACHED)
    assert results.merge_ops([a, b]) == results.build_ops(recs, [], UNREACHED)


def test_bad_probed_cells_are_reported_with_file_and_line(tmp_path):
    from opcov.store import data

    doc = {
        "schema_version": 1,
        "evidence": "probed",
        "backend": {"name": "x", "device_type": "x", "dispatch_key": "PrivateUse1", "package": "x", "version": "1"},
        "provenance": {"torch": "2.13.0+cpu", "command": "opcov probe x", "created": "2026-01-01T00:00:00+00:00"},
        "summary": {},
        "ops": {
            "aten::mm": {"float32": {"fwd": "passed", "cases": 1}},
            "aten::add.Tensor": {"float32": {"bwd": "pass"}},
            "aten::sub.Tensor": {"skipped": "not_selected"},  # a reason is a vocabulary word (docs/DATA.md)
        },
    }
    path = str(tmp_path / "bad.yaml")
    data.save(doc, path)
    problems = [str(p) for p in data.validate(data.parse(path)[0], path)]
    lines = open(path).read().splitlines()
    mm_line = next(i for i, ln in enumerate(lines, 1) if ln.startswith("  aten::mm:"))
    assert any(f"{path}:{mm_line}:" in p and "'passed'" in p for p in problems), problems
    assert any("aten::add.Tensor: float32: missing 'fwd'" in p for p in problems), problems
    assert not any("sub.Tensor" in p for p in problems)


def test_a_view_op_that_copies_breaks_aliasing(mixed):
    """unfold must return a view of its input; a kernel computing a copy gives the right values but a
    wrong program (writes through the view are lost): a mismatch that names the aliasing."""
    c = cell(mixed, "aten::unfold")
    assert c["fwd"] == "mismatch" and "view aliasing differs" in c["why"]


def test_out_variant_is_probed_and_filed_under_the_out_overload(mixed):
    """mul works, mul(out=) writes wrong values: the .out overload gets the mismatch, mul keeps its pass;
    sub(out=), right, passes."""
    assert cell(mixed, "aten::mul.Tensor")["fwd"] == "pass"
    c = cell(mixed, "aten::mul.out")
    assert c["fwd"] == "mismatch" and c["why"].startswith("out=: ") and c["blame"].startswith("opinfo")
    assert cell(mixed, "aten::sub.out")["fwd"] == "pass"


def _merge_in(cwd, *args):
    """``opcov merge ARGS`` run from ``cwd`` in a child that reports whether torch got imported."""
    code = (
        "import sys\nfrom opcov.cli import main\nrc = main(sys.argv[1:])\n"
        "print('torch imported' if 'torch' in sys.modules else 'torch not imported')\nsys.exit(rc)\n"
    )
    return subprocess.run(
        [sys.executable, "-c", code, "merge", *args],
        env=child_env(),
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=300,
    )


def test_merge_never_imports_torch_and_reads_core_from_a_registered_file(tmp_path, whole):
    """Core ATen is the files' torch's: read from the per-op tags of a registered file of that torch
    version, next to the inputs or under coverage/<backend>/, never from an imported torch."""
    import shutil

    merged = str(tmp_path / "m.yaml")
    proc = _merge_in(ROOT, whole[0], "--out", merged)  # the registered file under ROOT/coverage/cpu/
    assert proc.returncode == 0 and "torch not imported" in proc.stdout, proc.stdout + proc.stderr
    assert _comparable(load_yaml(merged)) == _comparable(whole[1])
    alone = tmp_path / "alone"
    alone.mkdir()
    src = str(alone / "p.yaml")
    shutil.copy(whole[0], src)
    proc = _merge_in(str(alone), src, "--out", merged)  # no registered file anywhere near
    assert proc.returncode == 2 and "cannot tell which ops are core ATen" in proc.stderr, proc.stderr
    assert "torch not imported" in proc.stdout
    reg = os.path.join(ROOT, "coverage", "cpu", f"registered-torch-{whole[1]['provenance']['torch']}.yaml")
    shutil.copy(reg, str(alone / os.path.basename(reg)))
    proc = _merge_in(str(alone), src, "--out", merged)  # the one next to the input
    assert proc.returncode == 0 and "torch not imported" in proc.stdout, proc.stderr
    assert _comparable(load_yaml(merged)) == _comparable(whole[1])


def test_case_record_reads_journal_lines_as_written_before():
    """A journal line of opcov 0.2.0 reads back and writes out unchanged (a resumed run builds the
    same file); the flight recorder's state leaves out= out and names the phase; a crash is filed
    in the phase it happened in."""
    from opcov.probe.caserecord import CaseRecord

    line = (
        '{"case": {"aten": ["aten::mul"], "bwd": {"err": [0.0, 0.0], "ops": [["aten::mul.Tensor", '
        '"float32"]], "status": "pass", "strides": false, "tol": "float32+cpu"}, "case": "mul|float32|0", '
        '"dtype": "float32", "fwd": {"err": [0.0, 0.0], "ops": [["aten::mul.Tensor", "float32"]], '
        '"status": "pass", "strides": false, "tol": "float32+cpu"}, "group": "mul|float32", '
        '"out": {"ops": [["aten::mul.out", "float32"]], "status": "mismatch", "why": "out=: x"}, '
        '"source": "mul"}}'
    )
    item = json.loads(line)
    rec = CaseRecord.from_json(item["case"])
    assert json.dumps({"case": rec.to_json()}, sort_keys=True) == line
    assert rec.status("out") == "mismatch" and rec.status("bwd") == "pass"
    state = json.loads(json.dumps(rec.in_flight("bwd")))
    assert "out" not in state and state["phase"] == "bwd"
    back, phase = CaseRecord.from_flight(state)
    back.fail(phase, "crash", "worker died: signal SIGSEGV")
    assert back.fwd == rec.fwd and back.out is None
    assert back.bwd["status"] == "crash" and back.bwd["ops"] == [["aten::mul.Tensor", "float32"]]
    slim, phase = CaseRecord.from_flight({k: v for k, v in state.items() if not isinstance(v, dict)})
    slim.fail(phase, "timeout", "no result")  # a state too large for the recorder keeps no parts
    assert slim.fwd is None and slim.bwd == {"ops": [], "status": "timeout", "why": "no result"}


def test_probe_modules_import_each_other_without_cycles():
    """Within opcov.probe: no import cycle, and every import of a sibling module at module level
    (a function-local one would only hide a cycle)."""
    import ast

    folder = os.path.join(ROOT, "src", "opcov", "probe")
    mods = {f[:-3] for f in os.listdir(folder) if f.endswith(".py")}
    graph = {}
    for mod in mods:
        tree = ast.parse(open(os.path.join(folder, mod + ".py")).read())
        top = set(tree.body)
        deps = set()
        for node in ast.walk(tree):
            if not isinstance(node, ast.ImportFrom) or not (node.module or "").startswith("opcov.probe"):
                continue
            assert node in top, f"opcov.probe.{mod} imports {node.module} inside a function"
            names = (
                [node.module.split(".")[2]]
                if node.module != "opcov.probe"
                else [a.name for a in node.names if a.name in mods] + ["__init__"]
            )
            deps.update(n for n in names if n != mod)
        graph[mod] = deps
    done, path = set(), []

    def visit(mod):
        assert mod not in path, "import cycle: " + " -> ".join(path[path.index(mod) :] + [mod])
        if mod in done:
            return
        path.append(mod)
        for dep in sorted(graph[mod]):
            visit(dep)
        path.pop()
        done.add(mod)

    for mod in sorted(graph):
        visit(mod)


def test_judge_fast_path_gives_the_general_paths_answers():
    """The all-finite shortcut of the value judgement (no masks) keeps the answers of the general path:
    a device NaN or inf where CPU is finite is an infinite error at its index; without a float64
    reference the usable tier adds no CPU margin; a 0-d output and a non-finite CPU value still work."""
    import math

    import torch

    from opcov.probe.compare import judge

    kw = {"dtype": "float32", "mode": "values", "family": "pointwise"}
    c = torch.tensor([1.0, 2.0, 3.0])
    for bad in (float("nan"), float("inf")):
        v = judge(torch.tensor([1.0, bad, 3.0]), c, c.double(), **kw)
        assert v["status"] == "mismatch" and v["err"] == [math.inf, math.inf] and "index (1,)" in v["why"]
    torch.manual_seed(0)
    a, b = torch.randn(8, 8), torch.randn(8, 8)
    cpu = a @ b
    low = cpu.to(torch.bfloat16).float()
    v = judge(low, cpu, None, dtype="float32", mode="values", family="matmul")
    assert v["status"] == "pass_low_precision" and v["err"][0] > 0
    assert judge(torch.tensor(2.5), torch.tensor(2.5), torch.tensor(2.5, dtype=torch.float64), **kw)["status"] == "pass"
    v = judge(torch.tensor(2.0), torch.tensor(2.5), None, **kw)
    assert v["status"] == "mismatch" and "at index ()" in v["why"]
    x = torch.tensor([float("inf"), 1.0, 2.0])
    v = judge(torch.tensor([float("inf"), 1.0, 2.5]), x, x.double(), **kw)
    assert v["status"] == "mismatch" and "index (2,)" in v["why"] and v["err"][0] == 0.5


def test_probe_trees_walk_as_pytree_does():
    """probe.trees gives pytree's leaves, maps and leaf indices, also through node types it hands to
    pytree (namedtuple, torch.Size, return types, OrderedDict), and notices a node type registered
    after it took that type for a leaf."""
    import collections

    import torch
    import torch.utils._pytree as pytree

    from opcov import trees

    nt = collections.namedtuple("nt", "a b")
    samples = [
        (None, [1, (2,)], {"b": 3, "a": torch.Size([2, 4])}, torch.ones(1)),
        torch.ones(2),
        3,
        [],
        {},
        (nt(torch.ones(1), [2, 3]), collections.OrderedDict(x=1, y=[torch.zeros(2)])),
        torch.max(torch.ones(3, 2), 1),
        ([torch.ones(1)], {"k": (torch.float32, "s", 1.5, torch.device("cpu"))}),
    ]
    for tree in samples:
        got, want = trees.leaves(tree), pytree.tree_leaves(tree)
        assert len(got) == len(want) and all(g is w for g, w in zip(got, want))
        mapped = trees.map_leaves(lambda x: ("leaf", x), tree)
        assert pytree.tree_structure(mapped) == pytree.tree_structure(pytree.tree_map(lambda x: ("leaf", x), tree))
        flat, spec = pytree.tree_flatten(tree)
        assert trees.map_indexed(lambda i, x: i, tree) == pytree.tree_unflatten(list(range(len(flat))), spec)

    class Pair:
        def __init__(self, a, b):
            self.a, self.b = a, b

    p = Pair(torch.ones(1), 2)
    assert trees.leaves([p]) == [p]  # a leaf to pytree as well, until registered
    pytree.register_pytree_node(Pair, lambda q: ([q.a, q.b], None), lambda xs, _: Pair(*xs))
    assert trees.leaves([p]) == pytree.tree_leaves([p]) == [p.a, 2]


def test_a_gradient_is_judged_against_the_cpu_formula_the_device_runs(tmp_path):
    """PyTorch's own samples: masked.prod's float16 backward is finite on CPU under a Python mode
    (autograd's tensor-subclass formula) and inf without one, as a device runs it; the probe judges
    the device against the plain formula, so cpu probed against itself passes. The probe's parent runs in
    this process (cpu claims no device; its workers are spawned as ever), sparing a child's imports."""
    out = str(tmp_path / "prod.yaml")
    proc = opcov_here(
        "probe", "cpu", "--ops", "^masked.prod$", "--dtypes", "float16", "--tiers", "none", "--no-schema", "--out", out
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    prod = cell(load_yaml(out), "aten::prod.dim_int", "float16")
    assert prod["bwd"] == "pass" and prod["bwd_cases"] > 30, prod


def test_a_crash_of_cpus_own_reference_is_not_the_devices(tmp_path):
    """PyTorch's own samples: torch 2.13's CPU _segment_reduce segfaults on one empty-tier sample
    (--all-samples). On a device probe the worker dies before the device ran: that case has no
    reference; it is never a device crash (and the rest of its group is not run after it). The probe's
    parent runs in this process, as above; the worker that dies is its spawned child."""
    out = str(tmp_path / "seg.yaml")
    proc = opcov_here(
        "probe", "cpu", "--ops", "^_segment_reduce.lengths$", "--all-samples", "--tiers", "empty",
        "--dtypes", "float32", "--no-schema", "--directions", "forward", "--out", out,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "1 worker restarts" in proc.stdout + proc.stderr  # the segfault happened
    doc = load_yaml(out)
    seg = cell(doc, "aten::segment_reduce")
    assert seg["fwd"] == "pass" and seg["empty"] == "no_reference", seg
    statuses = {
        v
        for rec in doc["ops"].values()
        if isinstance(rec, dict)
        for c in rec.values()
        if isinstance(c, dict)
        for v in c.values()
        if isinstance(v, str)
    }
    assert "crash" not in statuses
    # before, the segfault was filed as the backend's crash, and its ledger isolated the group next time
    assert not os.path.exists(out + ".ledger.json")


def test_a_crash_that_does_not_repeat_alone_is_flaky_not_pinned(tmp_path):
    """sin segfaults the first time only: re-run alone in a fresh worker it passes, so the case is recorded
    flaky (with the first crash named), and the group's later cases, first left unrun after it, run."""
    spec = {"kernels": {"aten::sin": "segfault_once", "aten::neg": "pass"}, "fallback": "cpu"}
    out = str(tmp_path / "flaky.yaml")
    proc = run_opcov(
        "probe",
        "opcovtest",
        *PB,
        "--ops",
        "^(sin|neg)$",
        "--dtypes",
        "float32",
        "--directions",
        "forward",
        "--out",
        out,
        timeout=300,
        OPCOV_PYBACKEND_SPEC=json.dumps(spec),
        OPCOV_PYBACKEND_ONCE_DIR=str(tmp_path),
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    doc = load_yaml(out)
    sin = cell(doc, "aten::sin")
    assert sin["fwd"] == "flaky", sin
    assert "SIGSEGV" in sin["why"] and "passed when re-run alone" in sin["why"]
    assert not sin.get("after_crash"), sin  # the cases left unrun after the crash ran in the end
    assert cell(doc, "aten::neg")["fwd"] == "pass"


def test_attention_with_dropout_0_is_compared_by_value_not_classed_random():
    """scaled_dot_product_attention is tagged nondeterministic_seeded only for its dropout: with dropout_p=0
    a case is compared by value (once 'not comparable', and the op itself skipped as 'random'); with
    dropout it stays random. The bundled cpu data holds the real probe of it."""
    import torch

    from opcov.catalog import build_catalog
    from opcov.probe import disposition
    from opcov.probe.record import Calls, recording

    q = torch.randn(2, 2, 4, 8)
    for p, random in ((0.0, False), (0.5, True)):
        calls = Calls()
        with recording(calls):
            torch.nn.functional.scaled_dot_product_attention(q, q, q, dropout_p=p)
        assert calls.seeded_random is random, p
        fused = ("aten::_scaled_dot_product_flash_attention_for_cpu", "float32") in {tuple(c) for c in calls.pairs()}
        assert fused is not random  # CPU's fused kernel without dropout, the math path with it
    facts = disposition.intrinsic(torch, build_catalog())
    assert "aten::scaled_dot_product_attention" not in facts and facts["aten::bernoulli.p"] == "random"
    probed = load_yaml(os.path.join(ROOT, "coverage", "cpu", "probed-torch-2.13.0+cpu.yaml"))["ops"]
    assert probed["aten::scaled_dot_product_attention"]["float32"]["fwd"] == "pass"
    assert probed["aten::_scaled_dot_product_flash_attention_for_cpu"]["float32"]["fwd"] == "pass"
