"""opcov check / diff / gaps on small hand-made data: the verdict a user reads and the exit code CI reads."""

import json
import os
from xml.etree import ElementTree as ET

import pytest
from conftest import opcov_here

from opcov.store import data, opset

TORCH = "2.13.0+cpu"


def registered(backend="fake", ops=None, fallback_enabled=False, torch=TORCH):
    return {
        "schema_version": 1,
        "evidence": "registered",
        "backend": {
            "name": backend,
            "device_type": backend,
            "dispatch_key": "PrivateUse1",
            "package": "fakepkg",
            "version": "1.0",
        },
        "provenance": {
            "torch": torch,
            "opcov": "0.1.0",
            "created": "2026-11-30T00:00:00+00:00",
            "command": f"opcov scan {backend}",
            "fallback": {"kind": "cpu", "enabled": fallback_enabled, "present": True},
            "settings": {"cpu_fallback_enabled": fallback_enabled},
        },
        "summary": {},
        "ops": ops or {},
    }


def probed(backend="fake", ops=None, torch=TORCH):
    doc = registered(backend, torch=torch)
    doc.update(evidence="probed", ops=ops or {})
    doc["provenance"]["command"] = f"opcov probe {backend}"
    return doc


def kernel(**extra):
    return {"fwd": "kernel", "res": "registered", "bwd": "formula", "bwd_res": "registered", **extra}


def tree_opset(tree, mode="inference", name="tiny"):
    """A schema 2 op set from call-tree node texts; ``ops`` summed from its kernel nodes (with their shapes)."""
    ops: dict = {}
    for node in map(opset.parse_node, tree):
        if node.kind == "kernel":
            cell = ops.setdefault(node.op, {}).setdefault(node.phase, {}).setdefault(node.dtype, {"calls": 0})
            cell["calls"] += node.calls
            if node.shape is not None:
                cell["shape"] = node.shape
    return dict(model(ops, mode, name=name), schema_version=2, calltree=list(tree))


def model(ops, mode="training", torch=TORCH, name="tiny"):
    return {
        "schema_version": 1,
        "kind": "opset",
        "model": {"name": name, "source": "test"},
        "mode": mode,
        "dtype": "float32",
        "provenance": {"torch": torch, "opcov": "0.1.0", "created": "2026-11-30", "command": "opcov trace x"},
        "ops": ops,
    }


def fwd(dtype="float32", calls=1, grad=False):
    cell = {"calls": calls}
    if grad:
        cell["grad"] = True
    return {"forward": {dtype: cell}}


@pytest.fixture
def cov(tmp_path):
    """coverage/ with a backend 'fake': a kernel, a fallback-only op, a missing op, an unresolved composite."""
    ops = {
        "aten::mm": kernel(tags=["core"]),
        "aten::cholesky": {"fwd": "fallback", "res": "fallback", "bwd": "formula", "bwd_res": "fallback"},
        "aten::gone": {"fwd": "missing", "res": "missing", "bwd": "none", "bwd_res": "not_applicable"},
        "aten::maybe": {
            "fwd": "composite",
            "res": "unresolved",
            "bwd": "none",
            "bwd_res": "not_applicable",
            "why": "reach unresolved",
        },
        "aten::nodiff": {"fwd": "kernel", "res": "registered", "bwd": "not_implemented", "bwd_res": "missing"},
        "aten::nonzero": kernel(tags=["core", "dynamic_output_shape"]),
        "aten::index.Tensor": kernel(tags=["core", "dynamic_output_shape"]),
    }
    root = tmp_path / "coverage"
    data.save(registered(ops=ops), str(root / "fake" / f"registered-torch-{TORCH}-fakepkg-1.0.yaml"))
    return root


def save_model(tmp_path, ops, **kw):
    path = tmp_path / f"{kw.get('name', 'tiny')}-{kw.get('mode', 'training')}.yaml"
    opset.save(model(ops, **kw), str(path))
    return str(path)


def check(path, cov, *extra):
    return opcov_here("check", path, "--backend", "fake", "--coverage", str(cov), *extra)


def test_registered_kernels_run_and_report_registered_only(tmp_path, cov):
    path = save_model(tmp_path, {"aten::mm": {**fwd(calls=3, grad=True), "backward": {"float32": {"calls": 6}}}})
    r = check(path, cov)
    assert r.returncode == 0, r.stdout + r.stderr
    assert (
        "fake (training): RUNS (registered, unverified): 1 ops, 1 supported (100.0%; 100.0% of 9 calls): "
        "0 probed, 1 registered-only"
    ) in r.stdout
    assert "no probe data for fake" in r.stdout


def test_disabled_fallback_fails_with_the_fix_and_enabled_runs_slowly(tmp_path, cov):
    path = save_model(tmp_path, {"aten::mm": fwd(), "aten::cholesky": fwd(calls=2)})
    r = check(path, cov)
    assert r.returncode == 1
    assert "FAIL     aten::cholesky  x2 (forward; registered evidence)" in r.stdout
    assert "only the backend fallback (cpu, disabled)" in r.stdout
    assert "fix: enable the CPU fallback" in r.stdout
    data.save(
        registered(
            ops={
                "aten::mm": kernel(),
                "aten::cholesky": {"fwd": "fallback", "res": "fallback", "bwd": "none", "bwd_res": "not_applicable"},
            },
            fallback_enabled=True,
        ),
        str(cov / "fake" / f"registered-torch-{TORCH}-fakepkg-1.0.yaml"),
    )
    r = check(path, cov)
    assert r.returncode == 0 and "runs_with_fallback" in r.stdout
    assert check(path, cov, "--strict").returncode == 1


def test_missing_unknown_and_lost_backward(tmp_path, cov):
    path = save_model(tmp_path, {"aten::gone": fwd(), "aten::maybe": fwd(), "aten::nodiff": fwd(grad=True)})
    r = check(path, cov, "--format", "json")
    assert r.returncode == 1
    ops = {o["op"]: o for o in json.loads(r.stdout)["verdicts"][0]["ops"]}
    assert ops["aten::gone"]["outcome"] == "fails"
    assert ops["aten::maybe"]["outcome"] == "unknown"
    assert ops["aten::nodiff"]["outcome"] == "fails"
    assert any("derivative not implemented" in f["why"] for f in ops["aten::nodiff"]["findings"])
    # unknown alone passes the gate unless asked
    only_unknown = save_model(tmp_path, {"aten::maybe": fwd()}, name="u")
    assert check(only_unknown, cov).returncode == 0
    assert check(only_unknown, cov, "--fail-on", "unknown").returncode == 1


def test_inference_needs_no_backward(tmp_path, cov):
    path = save_model(tmp_path, {"aten::nodiff": fwd(grad=True)}, mode="inference")
    assert check(path, cov).returncode == 0


def test_probe_evidence_outranks_registered_per_dtype(tmp_path, cov):
    cells = {
        "aten::mm": {
            "float32": {"fwd": "mismatch", "err": [0.5, 0.25]},
            "bfloat16": {"fwd": "pass"},
            "float16": {"fwd": "error", "why": "RuntimeError: float16 unsupported"},
        },
        "aten::cholesky": {"float32": {"fwd": "pass"}},
    }
    data.save(probed(ops=cells), str(cov / "fake" / f"probed-torch-{TORCH}-fakepkg-1.0.yaml"))
    path = save_model(
        tmp_path,
        {
            "aten::mm": {"forward": {"float32": {"calls": 1}, "bfloat16": {"calls": 1}, "float16": {"calls": 1}}},
            "aten::cholesky": fwd(),
        },
    )
    r = check(path, cov, "--format", "json")
    v = json.loads(r.stdout)["verdicts"][0]
    ops = {o["op"]: o for o in v["ops"]}
    mm = {f["dtype"]: f for f in ops["aten::mm"]["findings"]}
    assert mm["float32"]["outcome"] == "value_note" and "values may differ" in mm["float32"]["why"]
    assert mm["bfloat16"]["outcome"] == "ok" and mm["bfloat16"]["evidence"] == "probed"
    assert "use bfloat16 instead of float16" in mm["float16"]["fix"]
    # the fallback op passed its probe: probed evidence wins over the registered fallback
    assert ops["aten::cholesky"]["outcome"] == "ok" and ops["aten::cholesky"]["evidence"] == "probed"
    assert v["counts"]["ok_probed"] == 1


def test_op_failing_on_some_probe_cases_is_unknown_not_fails(tmp_path, cov):
    """A probe cell wrong on 1 of 12 inputs does not say the model's inputs are wrong: the verdict is
    unknown (gate passes unless --fail-on unknown) and names the count and the failing case."""
    cells = {
        "aten::native_layer_norm": {
            "float32": {
                "fwd": "error",
                "why": "RuntimeError: bad input",
                "case": "layer_norm|float32|3",
                "cases": 12,
                "fails": 1,
            },
            "bfloat16": {"fwd": "error", "cases": 12, "fails": 12},
        }
    }
    data.save(probed(ops=cells), str(cov / "fake" / f"probed-torch-{TORCH}-fakepkg-1.0.yaml"))
    some = save_model(tmp_path, {"aten::native_layer_norm": fwd()})
    r = check(some, cov, "--format", "json")
    assert r.returncode == 0, r.stdout + r.stderr
    v = json.loads(r.stdout)["verdicts"][0]
    f = v["ops"][0]["findings"][0]
    assert v["verdict"] == "unknown" and f["outcome"] == "unknown" and f["evidence"] == "probed"
    assert "fails on 1 of 12 probe cases in float32" in f["why"] and "layer_norm|float32|3" in f["why"]
    assert check(some, cov, "--fail-on", "unknown").returncode == 1
    every = save_model(tmp_path, {"aten::native_layer_norm": {"forward": {"bfloat16": {"calls": 1}}}}, name="bf")
    assert check(every, cov).returncode == 1  # wrong on every case: fails


def test_other_torch_and_other_namespace_are_not_called_missing(tmp_path, cov):
    path = save_model(
        tmp_path, {"aten::brand_new_op": fwd(), "flash_attn::fwd": fwd(), "aten::mm": fwd()}, torch="2.99.0"
    )
    r = check(path, cov)
    assert "aten::brand_new_op" in r.stdout and "versions differ" in r.stdout
    assert "not judged" in r.stdout and "flash_attn::fwd" in r.stdout
    assert "data is for torch 2.13.0+cpu; the op set was traced with torch 2.99.0" in r.stdout


def test_host_sync_ops_are_flagged(tmp_path, cov):
    r = check(save_model(tmp_path, {"aten::nonzero": fwd(), "aten::index.Tensor": fwd()}), cov)
    assert "may force a host sync (data-dependent shape or value): aten::index.Tensor, aten::nonzero" in r.stdout
    # a fake-tensor trace cannot record a data-dependent shape: index.Tensor ran with integer indices
    doc = model({"aten::nonzero": fwd(), "aten::index.Tensor": fwd()}, name="faked")
    doc["provenance"]["tracing"] = "fake"
    path = str(tmp_path / "faked-training.yaml")
    opset.save(doc, path)
    r = check(path, cov)
    assert "may force a host sync (data-dependent shape or value): aten::nonzero\n" in r.stdout


def test_report_formats_for_ci(tmp_path, cov):
    path = save_model(tmp_path, {"aten::mm": fwd(), "aten::gone": fwd(calls=4), "aten::maybe": fwd()})
    junit = ET.fromstring(check(path, cov, "--format", "junit").stdout)
    suite = junit.find("testsuite")
    assert suite.get("tests") == "3" and suite.get("failures") == "1"
    failing = [c.get("name") for c in suite.iter("testcase") if c.find("failure") is not None]
    assert failing == ["aten::gone"]
    gh = check(path, cov, "--format", "github").stdout.splitlines()
    # a property value escapes ':' and ',' (an op name's '::' would end the title)
    assert gh[0].startswith(
        "::error title=opcov fake training%3A aten%3A%3Agone fails (registered evidence)::"
        "aten::gone (4 calls, registered evidence): "
    )
    assert any(line.startswith("::warning") and "aten::maybe" in line for line in gh)
    md = check(path, cov, "--format", "markdown").stdout
    assert "| fake | training | ✗ fails (registered evidence) | ○ registered |" in md and "`aten::gone`" in md
    assert "| `aten::gone` | fails | ○ registered | 4 |" in md
    out = tmp_path / "report.xml"
    r = check(path, cov, "--format", "junit", "--output", str(out))
    assert r.returncode == 1 and r.stdout == "" and ET.parse(out).getroot().tag == "testsuites"


def test_several_backends_side_by_side(tmp_path, cov):
    data.save(
        registered("other", ops={"aten::mm": kernel(), "aten::gone": kernel()}),
        str(cov / "other" / f"registered-torch-{TORCH}.yaml"),
    )
    path = save_model(tmp_path, {"aten::mm": fwd(), "aten::gone": fwd()})
    r = opcov_here("check", path, "-b", "fake", "-b", "other", "--coverage", str(cov))
    assert r.returncode == 1  # one backend failing fails the gate
    rows = [line.split() for line in r.stdout.splitlines()[2:5]]
    assert rows[1][:3] == ["fake", "training", "fails"] and rows[2][:3] == ["other", "training", "runs"]


def test_bad_input_is_one_line(tmp_path, cov):
    path = save_model(tmp_path, {"aten::mm": fwd()})
    r = opcov_here("check", path, "--backend", "nodata", "--coverage", str(cov))
    assert r.returncode == 2 and "opcov scan nodata" in r.stderr and "Traceback" not in r.stderr
    bad = tmp_path / "bad.yaml"
    bad.write_text(open(path).read().replace("schema_version: 1", "schema_version: 7"))
    r = check(str(bad), cov)
    assert r.returncode == 2 and "bad.yaml:" in r.stderr and "schema_version is 7" in r.stderr
    r = check(str(tmp_path / "nowhere.yaml"), cov)
    assert r.returncode == 2 and "Traceback" not in r.stderr


def test_check_on_a_saved_op_set_does_not_import_torch(tmp_path, cov):
    import subprocess
    import sys

    from conftest import child_env

    path = save_model(tmp_path, {"aten::mm": fwd()})
    code = (
        f"import sys; from opcov.cli import main; rc = main(['check', {path!r}, '-b', 'fake', '--coverage', "
        f"{str(cov)!r}]); assert 'torch' not in sys.modules, 'torch imported'; sys.exit(rc)"
    )
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=child_env())
    assert r.returncode == 0, r.stderr


def test_check_reads_the_bundled_tpu_data(tmp_path):
    """The real registered tpu scan: a CPU-only op reaches only the disabled fallback."""
    path = save_model(
        tmp_path,
        {"aten::mm": fwd(dtype="bfloat16"), "aten::_scaled_dot_product_flash_attention_for_cpu": fwd(dtype="bfloat16")},
    )
    r = opcov_here("check", path, "-b", "tpu", "--format", "json")
    assert r.returncode == 1
    v = json.loads(r.stdout)["verdicts"][0]
    ops = {o["op"]: o["outcome"] for o in v["ops"]}
    assert ops == {"aten::mm": "ok", "aten::_scaled_dot_product_flash_attention_for_cpu": "fails"}


# ---------------------------------------------------------------- diff


def test_diff_finds_regressions_and_keeps_evidence_changes_apart(tmp_path):
    old = registered(ops={"aten::mm": kernel(), "aten::add": kernel(), "aten::x": kernel()})
    new = registered(
        ops={
            "aten::mm": {**kernel(), "fwd": "fallback", "res": "fallback"},
            "aten::add": kernel(),
            "aten::x": {**kernel(), "res": "unresolved", "fwd": "composite"},
        }
    )
    a, b = tmp_path / "old.yaml", tmp_path / "new.yaml"
    data.save(old, str(a))
    data.save(new, str(b))
    r = opcov_here("diff", str(a), str(b), "--fail-on-regression")
    assert r.returncode == 1
    assert "aten::mm fwd: registered -> fallback" in r.stdout
    assert "1 regression(s)" in r.stdout and "aten::x fwd: registered -> unresolved (not a quality change)" in r.stdout
    assert opcov_here("diff", str(b), str(a), "--fail-on-regression").returncode == 0
    p = tmp_path / "probed.yaml"
    data.save(probed(ops={"aten::mm": {"float32": {"fwd": "pass"}}}), str(p))
    r = opcov_here("diff", str(a), str(p), "--fail-on-regression")
    assert r.returncode == 0 and "evidence kind changed" in r.stdout


def test_diff_keeps_ops_of_one_torch_release_apart(tmp_path):
    """An op the newer torch no longer defines is the op set's change, not the backend's regression; an op
    removed from a snapshot of the same torch still is one."""
    old = registered(ops={"aten::mm": kernel(), "aten::empty.names": kernel()}, torch="2.9.0")
    new = registered(ops={"aten::mm": kernel(), "aten::new_op": kernel()}, torch="2.13.0")
    a, b = tmp_path / "old.yaml", tmp_path / "new.yaml"
    data.save(old, str(a))
    data.save(new, str(b))
    r = opcov_here("diff", str(a), str(b), "--fail-on-regression", "--format", "json")
    assert r.returncode == 0, r.stdout
    out = json.loads(r.stdout)
    assert out["regressions"] == [] and out["removed"] == [] and out["added"] == []
    assert "aten::empty.names: only in torch 2.9.0's op set" in out["apart"]
    assert "aten::new_op: only in torch 2.13.0's op set" in out["apart"]
    data.save(registered(ops={"aten::mm": kernel()}, torch="2.9.0"), str(b))
    r = opcov_here("diff", str(a), str(b), "--fail-on-regression")
    assert r.returncode == 1 and "aten::empty.names fwd: registered -> absent" in r.stdout


def test_diff_probed_cells_per_dtype(tmp_path):
    a, b = tmp_path / "a.yaml", tmp_path / "b.yaml"
    data.save(
        probed(ops={"aten::mm": {"float32": {"fwd": "pass", "bwd": "pass"}, "bfloat16": {"fwd": "pass"}}}), str(a)
    )
    data.save(
        probed(ops={"aten::mm": {"float32": {"fwd": "pass", "bwd": "mismatch"}, "bfloat16": {"fwd": "pass"}}}), str(b)
    )
    r = opcov_here("diff", str(a), str(b), "--fail-on-regression", "--format", "json")
    assert r.returncode == 1
    assert json.loads(r.stdout)["regressions"] == [
        {"op": "aten::mm", "where": "float32 bwd", "old": "pass", "new": "mismatch"}
    ]
    newer = probed(ops={"aten::mm": {"float32": {"fwd": "pass", "bwd": "mismatch"}}})
    newer["provenance"]["opcov"] = "9.9.9"
    data.save(newer, str(b))
    r = opcov_here("diff", str(a), str(b))
    assert "made by opcov" in r.stdout and "9.9.9" in r.stdout  # a method change is named, not hidden


def test_diff_refuses_another_backend(tmp_path):
    a, b = tmp_path / "a.yaml", tmp_path / "b.yaml"
    data.save(registered("one"), str(a))
    data.save(registered("two"), str(b))
    r = opcov_here("diff", str(a), str(b))
    assert r.returncode == 2 and "diff compares snapshots of one backend" in r.stderr


# ---------------------------------------------------------------- gaps


def test_gaps_keeps_each_op_sets_answer_between_runs_until_something_changes(tmp_path, cov, monkeypatch):
    """A second 'gaps' over an unchanged coverage folder reads no op set (each op set's blocking ops are kept
    in the user's cache folder, as compare keeps its own) and ranks the same; a changed op set is read again,
    and only it."""
    from opcov.verdict import gaps

    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    for name, ops in (("m1", {"aten::gone": fwd(), "aten::cholesky": fwd()}), ("m2", {"aten::gone": fwd()})):
        opset.save(model(ops, name=name), str(cov / "models" / name / "training.yaml"))
    first = gaps.rank("fake", str(cov))
    read = []
    load = opset.load
    monkeypatch.setattr(gaps.opset, "load", lambda path: read.append(path) or load(path))
    assert gaps.rank("fake", str(cov)) == first and read == []
    opset.save(model({"aten::mm": fwd()}, name="m2"), str(cov / "models" / "m2" / "training.yaml"))
    again = gaps.rank("fake", str(cov))
    assert read == [str(cov / "models" / "m2" / "training.yaml")]
    assert sorted((e["op"], e["models"]) for e in again) == [
        ("aten::cholesky", ["m1 (training)"]),
        ("aten::gone", ["m1 (training)"]),
    ]
    assert gaps.rank("fake", str(cov), cache=False) == again


def test_gaps_rank_ops_by_models_blocked(tmp_path, cov):
    for name, ops in (
        ("m1", {"aten::gone": fwd(), "aten::cholesky": fwd()}),
        ("m2", {"aten::gone": fwd()}),
        ("m3", {"aten::mm": fwd()}),
    ):
        opset.save(model(ops, name=name), str(cov / "models" / name / "training.yaml"))
    r = opcov_here("gaps", "fake", "--coverage", str(cov), "--format", "json")
    assert r.returncode == 0, r.stderr
    ranked = json.loads(r.stdout)
    assert [(e["op"], len(e["models"])) for e in ranked] == [("aten::gone", 2), ("aten::cholesky", 1)]
    assert ranked[0]["models"] == ["m1 (training)", "m2 (training)"] and ranked[0]["model_count"] == 2
    # check finds a zoo model by name under coverage/models/
    assert opcov_here("check", "m3", "-b", "fake", "--coverage", str(cov)).returncode == 0
    assert os.path.isdir(cov / "models" / "m1")
