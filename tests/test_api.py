"""opcov for CI users: opcov.check (the Python API), assert_runs_on (the test helper), the GitHub
Action's script and the pre-commit hooks, against the bundled data and small hand-made data."""

import json
import os
import pathlib
import re
import subprocess
import sys

import pytest
import yaml
from conftest import ROOT, child_env, opcov_here, run_opcov
from test_check import TORCH, fwd, kernel, model, registered

import opcov
from opcov import api
from opcov.errors import DataError, OpcovError, UsageError
from opcov.store import data, opset
from opcov.testing.assertions import assert_runs_on
from opcov.verdict import reports
from opcov.verdict.judge import BackendVerdict

COVERAGE = os.path.join(ROOT, "coverage")
WAV2VEC2 = os.path.join(COVERAGE, "models", "wav2vec2")  # tpu: training fails (one op), inference runs


def as_json(verdicts, model_description):
    return reports.render("json", verdicts, model_description)


# ---------------------------------------------------------------- opcov.check


def test_check_answers_what_check_json_prints():
    r = opcov_here("check", "wav2vec2", "-b", "tpu", "-b", "cpu", "--coverage", COVERAGE, "--format", "json")
    assert r.returncode == 1, r.stderr
    verdicts, described = api.check_model("wav2vec2", ["tpu", "cpu"], coverage=COVERAGE)
    assert as_json(verdicts, described) == r.stdout
    assert all(isinstance(v, BackendVerdict) for v in verdicts)
    assert [(v.backend, v.mode, v.verdict) for v in opcov.check("wav2vec2", ["tpu", "cpu"], coverage=COVERAGE)] == [
        ("tpu", "inference", "runs"),
        ("cpu", "inference", "runs"),
        ("tpu", "training", "fails"),
        ("cpu", "training", "runs"),
    ]


def test_check_takes_a_name_a_file_a_folder_a_document_or_an_opset():
    path = os.path.join(WAV2VEC2, "training.yaml")
    doc = opset.load(path)
    answers = [
        opcov.check(m, "tpu", mode="training", coverage=COVERAGE)
        for m in ("wav2vec2", path, pathlib.Path(path), WAV2VEC2, doc, opset.OpSet(doc))
    ]
    reference = as_json(answers[0], {})
    assert [as_json(a, {}) for a in answers] == [reference] * len(answers)
    assert answers[0][0].verdict == "fails"
    assert opcov.check(doc, ["tpu"], mode=["training", "inference"], coverage=COVERAGE)[0].verdict == "fails"


@pytest.mark.parametrize(
    "kwargs, error, words",
    [
        (dict(model_or_opset=42, backends="tpu"), UsageError, "expected a zoo model name"),
        (dict(model_or_opset="wav2vec2", backends=[]), UsageError, "no backends given"),
        (dict(model_or_opset="wav2vec2", backends=5), UsageError, "backends is of type int"),
        (dict(model_or_opset="wav2vec2", backends="tpu", mode="train"), UsageError, "mode 'train'"),
        (dict(model_or_opset="wav2vec2", backends="nodata"), UsageError, "opcov scan nodata"),
        (dict(model_or_opset="nowhere.yaml", backends="tpu"), UsageError, "no such op-set file"),
        (
            dict(model_or_opset="wav2vec2", backends="tpu", coverage="/no/such/folder"),
            UsageError,
            "no such coverage folder",
        ),
        (dict(model_or_opset={"kind": "opset"}, backends="tpu"), DataError, "<op set>: error: schema_version"),
    ],
)
def test_bad_input_is_one_opcov_error_in_one_line(kwargs, error, words):
    with pytest.raises(error) as caught:
        opcov.check(**{"coverage": COVERAGE, **kwargs})
    assert isinstance(caught.value, OpcovError)
    assert words in str(caught.value) and "\n" not in str(caught.value)


def test_an_opset_of_another_mode_is_a_usage_error():
    doc = opset.load(os.path.join(WAV2VEC2, "training.yaml"))
    with pytest.raises(UsageError, match="is for mode training, not inference"):
        opcov.check(doc, "tpu", mode="inference", coverage=COVERAGE)


def test_importing_opcov_is_cheap_and_checking_a_saved_opset_imports_no_torch():
    code = (
        "import sys; import opcov\n"
        "assert [m for m in sys.modules if m.startswith('opcov')] == ['opcov'], sorted(sys.modules)\n"
        "from opcov.testing.assertions import assert_runs_on\n"
        f"v = opcov.check('llama', 'tpu', coverage={COVERAGE!r})\n"
        f"opcov.check({os.path.join(WAV2VEC2, 'inference.yaml')!r}, ['tpu', 'cpu'], coverage={COVERAGE!r})\n"
        f"assert_runs_on('llama', 'tpu', coverage={COVERAGE!r})\n"
        "assert 'torch' not in sys.modules, 'torch imported'\n"
        "print(v[0].verdict)"
    )
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=child_env(), cwd=ROOT)
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == "runs"


# ---------------------------------------------------------------- assert_runs_on


def test_assert_runs_on_passes_and_returns_the_verdicts():
    verdicts = assert_runs_on("wav2vec2", "tpu", mode="inference", coverage=COVERAGE)
    assert [(v.backend, v.mode, v.verdict) for v in verdicts] == [("tpu", "inference", "runs")]


def test_assert_runs_on_names_the_problem_ops_with_reasons_and_fixes():
    with pytest.raises(AssertionError) as caught:
        assert_runs_on("wav2vec2", ["tpu", "cpu"], coverage=COVERAGE)
    lines = str(caught.value).splitlines()
    assert lines[0] == "wav2vec2 on tpu (training): fails (allowed: runs)"
    assert lines[1].startswith("  aten::_weight_norm_interface_backward fails (")
    assert "no kernel; only the backend fallback (cpu, disabled)" in lines[2]
    assert lines[3].startswith("    fix: enable the CPU fallback")
    assert len(lines) == 4  # the verdicts that pass (cpu, tpu inference) are not in it


@pytest.fixture
def fallback_cov(tmp_path):
    """Backend 'fake' with its CPU fallback enabled: aten::cholesky runs only on it; 'maybe' is unknown."""
    ops = {
        "aten::mm": kernel(),
        "aten::cholesky": {"fwd": "fallback", "res": "fallback", "bwd": "formula", "bwd_res": "fallback"},
        "aten::maybe": {
            "fwd": "composite",
            "res": "unresolved",
            "bwd": "none",
            "bwd_res": "not_applicable",
            "why": "reach unresolved",
        },
    }
    root = tmp_path / "coverage"
    data.save(registered(ops=ops, fallback_enabled=True), str(root / "fake" / f"registered-torch-{TORCH}.yaml"))
    return root


def test_allow_accepts_the_verdicts_named_and_only_those(fallback_cov):
    slow = model({"aten::mm": fwd(), "aten::cholesky": fwd()}, mode="inference")
    with pytest.raises(AssertionError, match=r"runs_with_fallback \(allowed: runs\)\n  aten::cholesky fallback"):
        assert_runs_on(slow, "fake", coverage=fallback_cov)
    assert assert_runs_on(slow, "fake", allow=("runs", "runs_with_fallback"), coverage=fallback_cov)
    both = model({"aten::mm": fwd(), "aten::cholesky": fwd(), "aten::maybe": fwd()}, mode="inference")
    with pytest.raises(AssertionError) as caught:
        assert_runs_on(both, "fake", allow=("runs", "runs_with_fallback"), coverage=fallback_cov)
    message = str(caught.value)
    assert "aten::maybe unknown" in message and "aten::cholesky" not in message  # allowed ops not named
    with pytest.raises(UsageError, match="allow 'slow'"):
        assert_runs_on(slow, "fake", allow="slow", coverage=fallback_cov)


# ---------------------------------------------------------------- the GitHub Action


@pytest.fixture
def gate(tmp_path):
    """Run scripts/ci_gate.sh as the action does: fake GITHUB_* variables, 'opcov' on PATH (this checkout)."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    shim = bin_dir / "opcov"
    shim.write_text(f'#!/bin/sh\nexec "{sys.executable}" -m opcov "$@"\n')
    shim.chmod(0o755)
    summary = tmp_path / "step-summary.md"
    summary.write_text("earlier step\n")

    def run(model_, backends, mode="", args=""):
        env = child_env(
            PATH=f"{bin_dir}{os.pathsep}{os.environ['PATH']}",
            GITHUB_ACTIONS="true",
            GITHUB_STEP_SUMMARY=str(summary),
            OPCOV_MODEL=model_,
            OPCOV_BACKENDS=backends,
            OPCOV_MODE=mode,
            OPCOV_ARGS=args,
        )
        r = subprocess.run(
            ["bash", os.path.join(ROOT, "scripts", "ci_gate.sh")],
            capture_output=True,
            text=True,
            env=env,
            cwd=ROOT,
            timeout=300,
        )
        return r, summary.read_text()

    return run


def test_action_script_writes_the_summary_and_exits_with_the_gate(gate):
    r, summary = gate("wav2vec2", "tpu, cpu", mode="training")
    assert r.returncode == 1, r.stderr
    assert summary.startswith("earlier step\n### opcov check: `wav2vec2` (training float32)")  # appended
    assert re.search(r"^\| tpu \| training \| ✗ fails", summary, re.M)
    assert re.search(r"^\| cpu \| training \| \S+ runs", summary, re.M)
    assert "`aten::_weight_norm_interface_backward` | fails |" in summary
    errors = [line for line in r.stdout.splitlines() if line.startswith("::error ")]
    assert len(errors) == 1 and "aten::_weight_norm_interface_backward (1 calls" in errors[0]

    r, summary = gate("llama", "tpu")
    assert r.returncode == 0, r.stderr
    assert re.search(r"^\| tpu \| inference \| \S+ runs", summary, re.M)
    assert re.search(r"^\| tpu \| training \| \S+ runs", summary, re.M)
    assert re.search(r"^\| tpu \| serve \| \S+ runs", summary, re.M)  # every mode llama has, serve included
    assert "::error" not in r.stdout and r.stdout.count("::notice") == 3


def test_action_script_passes_extra_args_and_refuses_bad_input(gate):
    assert gate("nn-convnet", "meta", mode="inference")[0].returncode == 0  # unknown: not a failure...
    assert gate("nn-convnet", "meta", mode="inference", args="--strict")[0].returncode == 1  # ...unless --strict
    r, _ = gate("llama", "nodata")
    assert r.returncode == 2 and "opcov scan nodata" in r.stderr
    r, _ = gate("llama", " ")
    assert r.returncode == 2 and "no backend given" in r.stderr


def test_action_yml_runs_the_script_with_every_input():
    with open(os.path.join(ROOT, "action.yml")) as f:
        action = yaml.safe_load(f)
    assert set(action["inputs"]) == {"model", "backends", "mode", "args", "python-version"}
    assert action["runs"]["using"] == "composite"
    steps = action["runs"]["steps"]
    text = json.dumps(steps)
    for name in action["inputs"]:
        assert f"inputs.{name} }}}}" in text, f"input {name} is not used"
    install = [s for s in steps if "pip install" in s.get("run", "")]
    assert install and '"$GITHUB_ACTION_PATH"' in install[0]["run"]
    (gate_step,) = [s for s in steps if "ci_gate.sh" in s.get("run", "")]
    assert gate_step["run"] == 'bash "$GITHUB_ACTION_PATH/scripts/ci_gate.sh"'
    with open(os.path.join(ROOT, "scripts", "ci_gate.sh")) as f:
        script = f.read()
    assert set(gate_step["env"]) == set(re.findall(r"\$\{(OPCOV_[A-Z]+)", script))


# ---------------------------------------------------------------- pre-commit


def test_pre_commit_hooks_name_real_commands_and_run():
    with open(os.path.join(ROOT, ".pre-commit-hooks.yaml")) as f:
        hooks = {h["id"]: h for h in yaml.safe_load(f)}
    assert set(hooks) == {"opcov-lint", "opcov-check"}
    top = run_opcov("--help").stdout
    for hook in hooks.values():
        assert hook["language"] == "python"
        exe, sub, *flags = hook["entry"].split()
        assert exe == "opcov" and re.search(rf"\b{sub}\b", top.split("{", 1)[1]), hook["entry"]
        sub_help = run_opcov(sub, "--help").stdout
        assert all(flag in sub_help for flag in flags), hook["entry"]
    lint = hooks["opcov-lint"]
    files = re.compile(lint["files"])
    assert files.search("coverage/tpu/registered.yaml") and files.search("x/coverage/models/m/training.yml")
    assert not files.search("a.py") and not files.search(".github/workflows/ci.yml")  # not every YAML is opcov data
    # what pre-commit runs: the entry, then the staged files (here bundled ones); and the gate with args
    staged = [os.path.join(WAV2VEC2, "training.yaml"), os.path.join(COVERAGE, "tpu")]
    r = run_opcov(*lint["entry"].split()[1:], *staged)
    assert r.returncode == 0 and "0 error(s)" in r.stdout, r.stdout
    assert hooks["opcov-check"]["stages"] == ["manual"] and hooks["opcov-check"]["pass_filenames"] is False
    r = run_opcov(*hooks["opcov-check"]["entry"].split()[1:], "wav2vec2", "-b", "tpu")
    assert r.returncode == 1 and "aten::_weight_norm_interface_backward" in r.stdout
