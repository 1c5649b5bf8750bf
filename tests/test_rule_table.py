"""The judge's rules as tables: each row is one rule of README's "Can my model run on X?" and docs/DATA.md,
with the outcome those texts give, checked through ``opcov check --format json`` (what a user and a CI gate
read). The expectations are written from the documented rules, not from opcov's output:

- a requirement is judged from probed evidence where a probe has the op at that dtype (it outranks
  everything), else from registered evidence (a claim), else it is unknown;
- a missing kernel fails, on registered evidence too; a path the scan could not resolve is unknown;
- a fallback counts as running only where the data records it enabled, and a CPU fallback only runs what
  CPU has a kernel for;
- a probed op failing some of its probe cases but not all is unknown, and so is one whose only failures
  could not be pinned on it; failing every case fails;
- the verdict is the worst outcome of its ops; plain ``runs`` only when every requirement was probed; the
  gate fails (exit 1) on ``fails`` only, unless ``--fail-on`` names more.

Rows about a probed value mismatch are kept apart (MISMATCH) so that the rule for it can change in one place.
"""

import json

import pytest
from conftest import opcov_here
from test_check import TORCH, kernel, probed, registered, save_model

from opcov.store import data

FWD_ONLY = {"bwd": "none", "bwd_res": "not_applicable"}


def _rec(fwd: str, res: str, **extra) -> dict:
    return {"fwd": fwd, "res": res, **FWD_ONLY, **extra}


def _check(path, cov, backends, *extra):
    args = ["check", str(path), "--coverage", str(cov), "--format", "json", *extra]
    for b in backends:
        args += ["--backend", b]
    r = opcov_here(*args)
    assert r.returncode in (0, 1), r.stdout + r.stderr
    return r, {v["backend"]: v for v in json.loads(r.stdout)["verdicts"]}


def _by_op(verdict: dict) -> dict:
    return {o["op"]: o for o in verdict["ops"]}


def _one_call(dtype="float32") -> dict:
    return {"forward": {dtype: {"calls": 1}}}


# ---------------------------------------------------------------- registered status (no fallback, no probe)

# what the registered scan says of an op's forward path -> the outcome the documented rules give
REGISTERED = {
    "own kernel": (kernel(), "ok"),
    "kernel via its .out variant": (_rec("out_variant", "registered"), "ok"),
    "composite of registered ops": (_rec("composite", "registered"), "ok"),
    "needs no kernel": (_rec("not_applicable", "not_applicable"), "ok"),
    "no kernel": (_rec("missing", "missing"), "fails"),
    "path the scan could not resolve": (_rec("composite", "unresolved", why="reach unresolved"), "unknown"),
    "not in the data at all": (None, "unknown"),
}


def _op_name(label: str) -> str:
    return "aten::" + "_".join(label.replace(".", "").split())


@pytest.fixture(scope="module")
def registered_run(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("registered")
    cov = tmp / "coverage"
    ops = {_op_name(k): rec for k, (rec, _) in REGISTERED.items() if rec is not None}
    data.save(registered(ops=ops), str(cov / "fake" / f"registered-torch-{TORCH}-fakepkg-1.0.yaml"))
    path = save_model(tmp, {_op_name(k): _one_call() for k in REGISTERED}, mode="inference")
    return _check(path, cov, ["fake"])


@pytest.mark.parametrize("label", REGISTERED)
def test_registered_status(registered_run, label):
    _, verdicts = registered_run
    op = _by_op(verdicts["fake"])[_op_name(label)]
    assert op["outcome"] == REGISTERED[label][1], op
    # judged from the registration (a claim), or from nothing where the data does not have the op
    assert op["evidence"] == ("none" if REGISTERED[label][0] is None else "registered"), op


def test_registered_counts_and_verdict(registered_run):
    """Counts add up per outcome; the verdict is the worst outcome, on registered evidence; the gate fails."""
    r, verdicts = registered_run
    v = verdicts["fake"]
    want = {"ok": 0, "fails": 0, "unknown": 0}
    for _, outcome in REGISTERED.values():
        want[outcome] += 1
    assert {k: v["counts"][k] for k in want} == want
    assert v["counts"]["ops"] == len(REGISTERED) and v["counts"]["calls"] == len(REGISTERED)
    assert v["counts"]["ok_registered"] == want["ok"] and v["counts"]["ok_probed"] == 0
    assert (v["verdict"], v["evidence"]) == ("fails", "registered")
    assert r.returncode == 1


# ---------------------------------------------------------------- fallback kind and state x CPU's kernel

# (backend's fallback kind, enabled, does CPU's registered scan have a kernel for the op) -> outcome of an
# op whose only path on the backend is its boxed fallback
FALLBACK = {
    ("cpu", True, True): "fallback",  # runs, on the CPU
    ("cpu", True, False): "fails",  # CPU has no kernel either
    ("cpu", False, True): "fails",  # disabled: counts as nothing
    ("cpu", False, False): "fails",
    ("error", False, True): "fails",  # a fallback that raises (meta's)
    ("unknown", False, True): "fails",
}
CPU_KERNEL, CPU_MISSING = "aten::cpu_has_it", "aten::cpu_lacks_it"


def _fallback_backend(kind, enabled) -> str:
    return f"fb{kind}{'on' if enabled else 'off'}"


@pytest.fixture(scope="module")
def fallback_run(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("fallback")
    cov = tmp / "coverage"
    only_fallback = _rec("fallback", "fallback")
    names = sorted({(kind, enabled) for kind, enabled, _ in FALLBACK})
    for kind, enabled in names:
        b = _fallback_backend(kind, enabled)
        doc = registered(b, ops={CPU_KERNEL: only_fallback, CPU_MISSING: only_fallback, "aten::own": kernel()})
        doc["provenance"]["fallback"] = {"kind": kind, "enabled": enabled, "present": True}
        doc["provenance"]["settings"] = {"cpu_fallback_enabled": enabled}
        data.save(doc, str(cov / b / f"registered-torch-{TORCH}-fakepkg-1.0.yaml"))
    cpu = registered("cpu", ops={CPU_KERNEL: kernel(), CPU_MISSING: _rec("missing", "missing"), "aten::own": kernel()})
    data.save(cpu, str(cov / "cpu" / f"registered-torch-{TORCH}.yaml"))
    path = save_model(tmp, {op: _one_call() for op in (CPU_KERNEL, CPU_MISSING, "aten::own")}, mode="inference")
    return _check(path, cov, [_fallback_backend(k, e) for k, e in names])


@pytest.mark.parametrize("row", FALLBACK, ids=lambda r: f"{r[0]}-{'on' if r[1] else 'off'}-cpu{'+' if r[2] else '-'}")
def test_fallback_kind_state_and_cpu_kernel(fallback_run, row):
    kind, enabled, cpu_has = row
    _, verdicts = fallback_run
    ops = _by_op(verdicts[_fallback_backend(kind, enabled)])
    op = ops[CPU_KERNEL if cpu_has else CPU_MISSING]
    assert (op["outcome"], op["evidence"]) == (FALLBACK[row], "registered"), op
    # an op with the backend's own kernel never depends on the fallback
    assert ops["aten::own"]["outcome"] == "ok"


def test_an_enabled_cpu_fallback_makes_the_verdict_runs_with_fallback_and_passes_the_gate_unless_asked(tmp_path):
    cov = tmp_path / "coverage"
    doc = registered(ops={CPU_KERNEL: _rec("fallback", "fallback"), "aten::own": kernel()}, fallback_enabled=True)
    data.save(doc, str(cov / "fake" / f"registered-torch-{TORCH}-fakepkg-1.0.yaml"))
    data.save(registered("cpu", ops={CPU_KERNEL: kernel()}), str(cov / "cpu" / f"registered-torch-{TORCH}.yaml"))
    path = save_model(tmp_path, {CPU_KERNEL: _one_call(), "aten::own": _one_call()}, mode="inference")
    r, verdicts = _check(path, cov, ["fake"])
    v = verdicts["fake"]
    assert (v["verdict"], v["evidence"], r.returncode) == ("runs_with_fallback", "registered", 0)
    assert (v["counts"]["fallback"], v["counts"]["ok"], v["counts"]["fails"]) == (1, 1, 0)
    assert _check(path, cov, ["fake"], "--fail-on", "fallback")[0].returncode == 1


# ---------------------------------------------------------------- probe outcome and counts

# a probe cell of the op at float32 (the registered scan gives every op its own kernel) -> (outcome, evidence)
PROBED = {
    "passes": ({"fwd": "pass", "cases": 3, "fails": 0}, ("ok", "probed")),
    "passes the usable tier": ({"fwd": "pass_low_precision", "cases": 3, "fails": 0}, ("ok", "probed")),
    "ran through the CPU fallback": ({"fwd": "fallback", "cases": 3, "fails": 0}, ("fallback", "probed")),
    "errors in every case": ({"fwd": "error", "cases": 3, "fails": 3, "why": "RuntimeError: no"}, ("fails", "probed")),
    "crashes in every case": ({"fwd": "crash", "cases": 2, "fails": 2, "why": "SIGSEGV"}, ("fails", "probed")),
    "errors in 1 of 3 cases": (
        {"fwd": "error", "cases": 3, "fails": 1, "why": "RuntimeError: no"},
        ("unknown", "probed"),
    ),
    "errors not pinned on it": (
        {"fwd": "error", "cases": 3, "fails": 3, "unpinned": 3, "why": "RuntimeError: no"},
        ("unknown", "probed"),
    ),
    "skipped by the probe at this dtype": ({"fwd": "skipped"}, ("ok", "registered")),
}
# The probe's word on values alone: a mismatch is a value note, not a failure (docs/accuracy.md, "How the
# verdict reads probe evidence").
MISMATCH = {
    "values differ in every case": (
        {"fwd": "mismatch", "cases": 2, "fails": 2, "why": "values differ"},
        ("value_note", "probed"),
    ),
}


@pytest.fixture(scope="module")
def probed_run(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("probed")
    cov = tmp / "coverage"
    rows = {**PROBED, **MISMATCH}
    ops = {_op_name(k): kernel() for k in rows}
    ops["aten::probed_elsewhere"] = kernel()
    ops["aten::claimed_missing"] = _rec("missing", "missing")
    data.save(registered(ops=ops), str(cov / "fake" / f"registered-torch-{TORCH}-fakepkg-1.0.yaml"))
    cells = {_op_name(k): {"float32": cell} for k, (cell, _) in rows.items()}
    cells["aten::probed_elsewhere"] = {"bfloat16": {"fwd": "error", "cases": 1, "fails": 1, "why": "no bf16"}}
    cells["aten::claimed_missing"] = {"float32": {"fwd": "pass", "cases": 2, "fails": 0}}
    data.save(probed(ops=cells), str(cov / "fake" / f"probed-torch-{TORCH}-fakepkg-1.0.yaml"))
    calls = {op: _one_call() for op in ops}
    return _check(save_model(tmp, calls, mode="inference"), cov, ["fake"])


@pytest.mark.parametrize("label", [*PROBED, *MISMATCH])
def test_probe_outcome(probed_run, label):
    _, verdicts = probed_run
    op = _by_op(verdicts["fake"])[_op_name(label)]
    want = {**PROBED, **MISMATCH}[label][1]
    assert (op["outcome"], op["evidence"]) == want, op


def test_a_probe_of_another_dtype_leaves_the_registered_claim(probed_run):
    op = _by_op(probed_run[1]["fake"])["aten::probed_elsewhere"]
    assert (op["outcome"], op["evidence"]) == ("ok", "registered"), op


def test_a_probe_outranks_the_registered_scan(probed_run):
    op = _by_op(probed_run[1]["fake"])["aten::claimed_missing"]
    assert (op["outcome"], op["evidence"]) == ("ok", "probed"), op


def test_probed_counts_and_the_failure_rests_on_probed_evidence(probed_run):
    r, verdicts = probed_run
    v = verdicts["fake"]
    rows = [want for _, want in {**PROBED, **MISMATCH}.values()] + [("ok", "registered"), ("ok", "probed")]
    for outcome in ("ok", "fails", "unknown", "fallback"):
        assert v["counts"][outcome] == sum(o == outcome for o, _ in rows), (outcome, v["counts"])
    assert v["counts"]["ok_probed"] == sum(o == "ok" and e == "probed" for o, e in rows)
    assert v["counts"]["ok_registered"] == sum(o == "ok" and e == "registered" for o, e in rows)
    assert (v["verdict"], v["evidence"], r.returncode) == ("fails", "probed", 1)


def test_plain_runs_only_when_every_requirement_was_probed(tmp_path):
    cov = tmp_path / "coverage"
    data.save(
        registered(ops={"aten::a": kernel(), "aten::b": kernel()}),
        str(cov / "fake" / f"registered-torch-{TORCH}-fakepkg-1.0.yaml"),
    )
    data.save(
        probed(ops={"aten::a": {"float32": {"fwd": "pass", "cases": 1, "fails": 0}}}),
        str(cov / "fake" / f"probed-torch-{TORCH}-fakepkg-1.0.yaml"),
    )
    both = save_model(tmp_path, {"aten::a": _one_call(), "aten::b": _one_call()}, mode="inference", name="both")
    only_a = save_model(tmp_path, {"aten::a": _one_call()}, mode="inference", name="onlya")
    # one requirement on a claim: the verdict rests on the weakest evidence
    assert (lambda v: (v["verdict"], v["evidence"]))(_check(both, cov, ["fake"])[1]["fake"]) == ("runs", "registered")
    assert (lambda v: (v["verdict"], v["evidence"]))(_check(only_a, cov, ["fake"])[1]["fake"]) == ("runs", "probed")
    assert "RUNS (registered, unverified)" in opcov_here("check", both, "-b", "fake", "--coverage", str(cov)).stdout


# ---------------------------------------------------------------- the backward, in training

# the registered scan's backward of an op with its own forward kernel -> outcome of a training call whose
# inputs required grad (the backward is needed); a call without grad needs the forward alone
BACKWARD = {
    "derivative formula": ({"bwd": "formula", "bwd_res": "registered"}, "ok"),
    "backend autograd kernel": ({"bwd": "backend_kernel", "bwd_res": "registered"}, "ok"),
    "not differentiable": ({"bwd": "none", "bwd_res": "not_applicable"}, "ok"),
    "derivative not implemented": ({"bwd": "not_implemented", "bwd_res": "missing"}, "fails"),
    "backward lost to an override": ({"bwd": "lost", "bwd_res": "missing"}, "unknown"),
}


@pytest.fixture(scope="module")
def backward_run(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("backward")
    cov = tmp / "coverage"
    ops = {_op_name(k): {"fwd": "kernel", "res": "registered", **bwd} for k, (bwd, _) in BACKWARD.items()}
    ops["aten::no_grad_needed"] = {"fwd": "kernel", "res": "registered", "bwd": "not_implemented", "bwd_res": "missing"}
    data.save(registered(ops=ops), str(cov / "fake" / f"registered-torch-{TORCH}-fakepkg-1.0.yaml"))
    calls = {_op_name(k): {"forward": {"float32": {"calls": 1, "grad": True}}} for k in BACKWARD}
    calls["aten::no_grad_needed"] = _one_call()
    training = _check(save_model(tmp, calls, mode="training"), cov, ["fake"])
    inference = _check(save_model(tmp, {op: _one_call() for op in calls}, mode="inference"), cov, ["fake"])
    return training, inference


@pytest.mark.parametrize("label", BACKWARD)
def test_backward_needed_by_a_training_call_with_grad(backward_run, label):
    (_, training), (_, inference) = backward_run
    op = _by_op(training["fake"])[_op_name(label)]
    assert op["outcome"] == BACKWARD[label][1], op
    assert "backward" in {f["direction"] for f in op["findings"]}
    # inference needs the forward alone
    assert _by_op(inference["fake"])[_op_name(label)]["outcome"] == "ok"


def test_a_training_call_without_grad_needs_no_backward(backward_run):
    (_, training), _ = backward_run
    op = _by_op(training["fake"])["aten::no_grad_needed"]
    assert op["outcome"] == "ok" and {f["direction"] for f in op["findings"]} == {"forward"}, op


# ---------------------------------------------------------------- torch versions and namespaces


def test_an_op_the_datas_torch_lacks_is_unknown_and_other_namespaces_are_not_judged(tmp_path):
    cov = tmp_path / "coverage"
    data.save(registered(ops={"aten::mm": kernel()}), str(cov / "fake" / f"registered-torch-{TORCH}-fakepkg-1.0.yaml"))
    ops = {"aten::mm": _one_call(), "aten::new_in_2_14": _one_call(), "mylib::fused": _one_call()}
    path = save_model(tmp_path, ops, mode="inference", torch="2.14.0")
    r, verdicts = _check(path, cov, ["fake"])
    v = verdicts["fake"]
    by = _by_op(v)
    assert by["aten::mm"]["outcome"] == "ok"  # the versions differ, the op is in both: judged
    assert by["aten::new_in_2_14"]["outcome"] == "unknown"
    assert "versions differ" in by["aten::new_in_2_14"]["findings"][0]["why"]
    assert by["mylib::fused"]["outcome"] == "not_judged"
    assert v["counts"]["not_judged"] == 1 and v["counts"]["unknown"] == 1
    assert v["verdict"] == "unknown" and r.returncode == 0  # unknown fails the gate only when asked
    assert _check(path, cov, ["fake"], "--fail-on", "unknown")[0].returncode == 1
    assert _check(path, cov, ["fake"], "--strict")[0].returncode == 1
