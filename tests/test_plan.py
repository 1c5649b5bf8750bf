"""Shards balanced by recorded group times (opcov.probe.plan, 'opcov plan', 'opcov probe --shard'):
the deal, the job files, and shards of a balanced plan merged into the file one run writes."""

from __future__ import annotations

import json
import os

import conftest
import pytest
import yaml
from conftest import load_yaml, opcov_here, run_opcov

from opcov.errors import UsageError
from opcov.probe import plan

PB = ["--import", "opcov.sources.pybackend"]
WORKING = json.dumps(conftest.WORKING)
OPS = conftest.WORKING_OPS


def test_longest_first_to_the_least_loaded_shard():
    times = {"a": 10.0, "b": 6.0, "c": 5.0, "d": 4.0, "e": 1.0}
    shards = plan.partition(list(times), times, 2)
    assert sorted(sum(shards, [])) == sorted(times)  # every group exactly once
    loads = [sum(times[g] for g in s) for s in shards]
    assert sorted(loads) == [12.0, 14.0]  # the best split; every Nth by id gives a,c,e = 16 against b,d = 10
    assert shards == plan.partition(list(reversed(times)), times, 2)  # depends on ids, not their order


def test_untimed_groups_count_as_the_median():
    times = {"a": 1.0, "b": 3.0, "c": 100.0}
    assert plan.costs(["a", "b", "c", "new"], times)["new"] == 3.0
    assert set(plan.costs(["x", "y"], {}).values()) == {plan.DEFAULT_COST}  # no times: equal shares


def test_github_matrix_slices_stay_under_the_job_limit():
    out = dict(line.split("=", 1) for line in plan.github_outputs(300, None, "tpu-v5e", 2).splitlines())
    assert out["slices"] == "2" and out["runner"] == "tpu-v5e"
    first, second = json.loads(out["matrix1"])["include"], json.loads(out["matrix2"])["include"]
    assert len(first) == 256 and len(second) == 44
    assert [e["shard"] for e in first + second] == [f"{i}/300" for i in range(1, 301)]
    small = dict(line.split("=", 1) for line in plan.github_outputs(8, None, "x", 2).splitlines())
    assert json.loads(small["matrix2"]) == {"include": []}
    with pytest.raises(UsageError, match="at most 512 shards"):
        plan.github_outputs(513, None, "x", 2)


def test_k8s_indexed_job_picks_the_shard_by_completion_index():
    text = plan.k8s_manifest(
        "tpu",
        8,
        image="ghcr.io/me/opcov-tpu:1",
        probe_args="--traces zoo --jobs 4",
        name="opcov-probe-tpu",
        claim="results",
        parallelism=4,
        workdir="/opcov",
        resources="google.com/tpu=4",
    )
    job = yaml.safe_load(text)
    spec = job["spec"]
    assert job["kind"] == "Job" and spec["completionMode"] == "Indexed"
    assert spec["completions"] == 8 and spec["parallelism"] == 4 and spec["backoffLimitPerIndex"] >= 1
    pod = spec["template"]["spec"]
    script = pod["containers"][0]["command"][-1]
    assert "JOB_COMPLETION_INDEX + 1" in script and '--shard "$I/8"' in script
    assert "--resume" in script  # a retried pod continues its own shard's journal on the volume
    assert "--traces zoo --jobs 4" in script
    assert pod["containers"][0]["resources"]["limits"] == {"google.com/tpu": "4"}
    assert pod["volumes"][0]["persistentVolumeClaim"]["claimName"] == "results"


def test_a_bad_times_file_is_one_line(tmp_path):
    bad = tmp_path / "t.json"
    bad.write_text("[1, 2]")
    with pytest.raises(UsageError, match="not a probe times file"):
        plan.load_times(str(bad))
    with pytest.raises(UsageError, match="no such times file"):
        plan.load_times(str(tmp_path / "missing.json"), required=True)


def _after_provenance(path: str) -> str:
    """The file from its summary on: what a merge of shards must reproduce byte for byte."""
    text = open(path).read()
    return text[text.index("\nsummary:") :]


def test_shards_of_a_balanced_plan_merge_into_the_whole_run(tmp_path, whole_probe):
    whole = whole_probe
    times = json.load(open(plan.times_path(whole)))["groups"]
    assert set(times) and all(v >= 0 for v in times.values())  # the run recorded every group's time
    # make one group dominate: the balanced plan gives it a shard of its own
    heavy = sorted(times)[0]
    skewed = dict(times, **{heavy: 1000.0})
    tfile = tmp_path / "times.json"
    tfile.write_text(json.dumps({"groups": skewed}))
    planned = run_opcov(
        "plan",
        "opcovtest",
        *PB,
        "--ops",
        OPS,
        "--dtypes",
        "float32",
        "--shards",
        "2",
        "--times",
        str(tfile),
        "--format",
        "json",
        OPCOV_PYBACKEND_SPEC=WORKING,
    )
    assert planned.returncode == 0, planned.stderr[-3000:]
    fig = json.loads(planned.stdout)
    assert fig["groups"] == len(times) and fig["shards"][0]["groups"] == 1  # the heavy one, alone
    parts = []
    for i in (1, 2):
        out = str(tmp_path / f"part{i}.yaml")
        proc = run_opcov(
            "probe",
            "opcovtest",
            *PB,
            "--ops",
            OPS,
            "--dtypes",
            "float32",
            "--shard",
            f"{i}/2",
            "--times",
            str(tfile),
            "--out",
            out,
            OPCOV_PYBACKEND_SPEC=WORKING,
        )
        assert proc.returncode == 0, proc.stderr[-3000:]
        assert load_yaml(out)["provenance"]["probe"]["plan"] == fig["shards"][i - 1]["plan"]  # the same plan
        assert set(json.load(open(plan.times_path(out)))["groups"]) <= set(times)
        parts.append(out)
    assert set(json.load(open(plan.times_path(parts[0])))["groups"]) == {heavy}
    merged = str(tmp_path / "merged.yaml")
    proc = opcov_here("merge", *parts, "--out", merged)
    assert proc.returncode == 0, proc.stderr
    assert _after_provenance(merged) == _after_provenance(whole)  # byte-identical summary and ops
    assert set(json.load(open(plan.times_path(merged)))["groups"]) == set(times)  # times for the next plan
    assert "plan" not in load_yaml(merged)["provenance"]["probe"]
    assert os.path.exists(merged)
