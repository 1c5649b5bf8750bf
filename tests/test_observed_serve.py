"""Observed serve runs ('opcov run MODEL --mode serve', opcov.tracing.observe): serve mode's generate runs
(opcov.sources.generate.RUNS) really run on a device, compared with CPU, saved, and taken by 'opcov check
--mode serve' as it takes an observed inference or training run. On cpu with the zoo's tiny llama; on
PyTorch/XLA's CPU client where its Python is installed."""

from __future__ import annotations

import json
import os
import shutil

import pytest
from conftest import ROOT, XLA_QUICK_COMPILE, needs_xla, opcov_here, run_opcov, run_xla

from opcov.sources import generate
from opcov.store import observed as files
from opcov.tracing import observe
from opcov.verdict import observed as verdicts

MODEL = "llama"
# a greedy run: its tokens and each step's logits; a sampling run: its tokens' shape
VALUES = sum(1 + generate.NEW_TOKENS if not r.sample else 1 for r in generate.RUNS)


def _coverage(tmp_path, backend="cpu", model=MODEL):
    """A coverage folder with ``backend``'s data and ``model``'s op sets (serve.yaml among them)."""
    cov = tmp_path / "coverage"
    shutil.copytree(os.path.join(ROOT, "coverage", backend), cov / backend)
    shutil.copytree(os.path.join(ROOT, "coverage", "models", model), cov / "models" / model)
    return cov


@pytest.fixture(scope="module")
def cpu_run(tmp_path_factory):
    """llama's serve runs on cpu, written where 'opcov check' finds them: (coverage folder, file, stdout)."""
    cov = _coverage(tmp_path_factory.mktemp("serve"))
    proc = run_opcov("run", MODEL, "-b", "cpu", "--mode", "serve", "--coverage", str(cov), timeout=900)
    assert proc.returncode == 0, proc.stderr[-3000:]
    path = files.path_for(str(cov), "cpu", MODEL, "serve")
    return cov, path, proc.stdout


def _check(cov, backend="cpu", model=MODEL):
    proc = opcov_here("check", model, "-b", backend, "--mode", "serve", "--coverage", str(cov), "--format", "json")
    assert proc.returncode in (0, 1), proc.stderr[-2000:]
    return proc.returncode, json.loads(proc.stdout)["verdicts"][0]


def test_a_serve_run_records_generates_runs_against_cpu(cpu_run):
    cov, path, stdout = cpu_run
    doc = files.load(path)  # where check looks, and valid
    assert doc["model"]["mode"] == "serve" and set(doc["model"]["serve"]["runs"]) == {r.name for r in generate.RUNS}
    values = doc["result"]["values"]
    assert doc["result"]["ran"] is True and values["match"] is True and values["compared_tensors"] == VALUES
    assert "tokens equal" in values["against"]
    # prefill and decode's ops were dispatched: the static cache's update, greedy and sampled token choice
    assert {"aten::index_copy_", "aten::argmax", "aten::topk", "aten::multinomial"} <= set(doc["ops"])
    prov = doc["provenance"]
    assert prov["torch"] and prov["created"] and prov["host"]["machine"] and "--mode serve" in prov["command"]
    assert "serve run (generate's prefill and decode steps) ran on cpu" in stdout and f"wrote {path}" in stdout


def test_check_takes_a_serve_run_as_the_verdicts_evidence(cpu_run):
    cov, path, _ = cpu_run
    rc, v = _check(cov)
    assert (v["verdict"], v["evidence"], rc) == ("runs", "observed", 0)
    assert v["says"].startswith("runs (observed on the device)") and path in v["sources"]
    assert v["notes"][0].startswith("observed: this model's serve run") and "values match CPU" in v["notes"][0]
    assert v["observed"]["predicted"]["verdict"] and "agrees with it" in v["notes"][0]
    assert any(n.startswith("serve: prefill needs") for n in v["notes"])  # the op set's serve notes stay


@pytest.mark.parametrize(
    "change,verdict,said",
    [
        (
            lambda r: r["result"]["values"].update(
                match=False, max_error_x_tolerance="not equal", worst_at="static-greedy: tokens"
            ),
            "runs_with_value_note",
            "values differ from CPU (not equal: static-greedy: tokens)",
        ),
        (lambda r: r.update(result={"ran": False, "error": "RuntimeError: planted"}), "fails", "raised RuntimeError"),
    ],
)
def test_a_serve_run_that_differed_or_raised_decides_so_and_says_the_data_disagrees(
    tmp_path, cpu_run, change, verdict, said
):
    run = files.load(cpu_run[1])
    change(run)
    cov = _coverage(tmp_path)
    target = files.path_for(str(cov), "cpu", MODEL, "serve")
    os.makedirs(os.path.dirname(target))
    open(target, "w").write(files.dumps(run))
    _, v = _check(cov)
    assert (v["verdict"], v["evidence"]) == (verdict, "observed")
    assert said in v["observed"]["saw"] and "does NOT agree with it" in v["notes"][0]


def test_tokens_are_compared_exactly_and_logits_within_tolerance():
    import torch

    want = {"static-greedy: tokens": torch.tensor([[1, 2, 3]]), "static-greedy: logits of step 0": torch.ones(2, 4)}
    same = observe._compare(torch, want, {k: v.clone() for k, v in want.items()}, "serve")
    assert same["match"] and same["compared_tensors"] == 2
    off = dict(want, **{"static-greedy: tokens": torch.tensor([[1, 2, 4]])})
    got = observe._compare(torch, want, off, "serve")
    assert not got["match"] and (got["max_error_x_tolerance"], got["worst_at"]) == (
        "not equal",
        "static-greedy: tokens",
    )
    near = dict(want, **{"static-greedy: logits of step 0": torch.ones(2, 4) + 1e-4})
    assert observe._compare(torch, want, near, "serve")["match"]
    # a step's integer outputs are not compared, as before
    assert observe._compare(torch, want, off, "inference")["compared_tensors"] == 1


def test_a_compiled_serve_run_decides_the_compile_paths_verdict(tmp_path):
    """--path compile: generate's runs with the model's forward compiled (Inductor on this CPU), filed under
    observed/cpu/compile/, deciding 'check --mode serve --path compile' and not the eager verdict."""
    cov = _coverage(tmp_path)
    proc = run_opcov("run", MODEL, "-b", "cpu", "--mode", "serve", "--path", "compile", "--coverage", str(cov))
    assert proc.returncode == 0, proc.stderr[-3000:]
    path = files.path_for(str(cov), "cpu", MODEL, "serve", "compile")
    doc = files.load(path)
    assert files.path_of(doc) == "compile" and doc["compile"]["backend"] == "inductor"
    assert isinstance(doc["compile"]["graph_breaks"], list)
    assert doc["result"]["values"]["match"] is True and doc["result"]["values"]["compared_tensors"] == VALUES
    assert "serve run (generate's prefill and decode steps) compiled with inductor ran on cpu" in proc.stdout
    text = opcov_here("check", MODEL, "-b", "cpu", "--mode", "serve", "--path", "compile", "--coverage", str(cov))
    assert text.returncode == 0, text.stderr[-2000:]
    head, said = text.stdout.splitlines()[:2]
    assert head.startswith("cpu serve (compile path, inductor): runs (observed on the device)")
    assert said.strip().startswith("observed: this model's serve run") and "agrees with it" in said
    assert _check(cov)[1]["evidence"] != "observed"  # no eager run: the eager verdict is the data's


def test_a_model_without_a_serve_op_set_is_one_line(tmp_path):
    proc = opcov_here("run", "bert", "-b", "cpu", "--mode", "serve", "--out", str(tmp_path / "x.json"))
    err = proc.stderr.strip()
    assert proc.returncode == 2 and len(err.splitlines()) == 1, err
    assert "bert: no serve op set" in err and "'opcov trace bert --mode serve'" in err and "llama" in err
    assert not (tmp_path / "x.json").exists()


def test_a_factory_that_cannot_generate_is_one_line(tmp_path):
    (tmp_path / "servefactories.py").write_text(
        "import torch\n\ndef linear():\n    return torch.nn.Linear(4, 4), (torch.randn(2, 4),)\n"
    )
    env = {"PYTHONPATH": os.path.join(ROOT, "src") + os.pathsep + str(tmp_path)}
    out = tmp_path / "x.json"
    proc = run_opcov("run", "servefactories:linear", "-b", "cpu", "--mode", "serve", "--out", str(out), **env)
    err = proc.stderr.strip()
    assert proc.returncode == 2 and "Linear cannot generate" in err and "Traceback" not in err, err
    assert not out.exists()


@needs_xla
def test_an_xla_serve_run_counts_its_fallbacks_and_decides_check(tmp_path):
    """gpt2's generate runs on PyTorch/XLA's CPU client (a second decoder family; the quickest here): values
    against CPU, and XLA's own counters name what went through its CPU fallback; check -b xla takes the run."""
    cov = _coverage(tmp_path, "xla", "gpt2")
    r = run_xla("run", "gpt2", "-b", "xla", "--mode", "serve", "--coverage", str(cov), timeout=900, **XLA_QUICK_COMPILE)
    assert r.returncode == 0, r.stderr[-3000:]
    doc = files.load(files.path_for(str(cov), "xla", "gpt2", "serve"))
    assert doc["result"]["ran"] is True and doc["result"]["values"]["compared_tensors"] == VALUES
    rec = doc["backend_record"]
    assert isinstance(rec["fallback_ops"], list) and "metrics" in rec["source"]
    _, v = _check(cov, "xla", "gpt2")
    assert v["evidence"] == "observed" and v["verdict"] == verdicts.verdict_of(doc)
