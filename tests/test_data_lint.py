"""Coverage files: deterministic writing, validation with file:line, lint, summary, exit codes."""

import os

import pytest

from conftest import ROOT, run_opcov
from opcov.store import data
from opcov.errors import DataError

BUNDLED = os.path.join(ROOT, "coverage")


def small_doc():
    return {
        "schema_version": data.SCHEMA_VERSION,
        "evidence": "registered",
        "backend": {"name": "x", "device_type": "x", "dispatch_key": "PrivateUse1",
                    "package": "x", "version": "1"},
        "provenance": {"torch": "2.13.0+cpu", "command": "opcov scan x", "created": "2026-01-01T00:00:00+00:00"},
        "summary": {},
        "ops": {
            "aten::mm": {"fwd": "kernel", "res": "registered", "bwd": "formula", "bwd_res": "registered",
                         "bwd_via": ["aten::mm"]},
            "aten::add.Tensor": {"fwd": "out_variant", "via": ["aten::add.out"], "res": "fallback",
                                 "bwd": "formula", "bwd_res": "fallback"},
        },
    }


def test_write_is_deterministic_and_round_trips(tmp_path):
    a, b = tmp_path / "a.yaml", tmp_path / "b.yaml"
    data.save(small_doc(), str(a))
    doc = small_doc()
    doc["ops"] = dict(reversed(list(doc["ops"].items())))  # insertion order must not matter
    data.save(doc, str(b))
    assert a.read_bytes() == b.read_bytes()
    assert data.load(str(a)) == small_doc()
    lines = a.read_text().splitlines()
    assert lines[-2].startswith("  aten::add.Tensor: {") and lines[-1].startswith("  aten::mm: {")


def test_bad_status_names_file_and_line(tmp_path):
    path = tmp_path / "bad.yaml"
    data.save(small_doc(), str(path))
    text = path.read_text().replace(" res: registered", " res: works", 1)
    path.write_text(text)
    line = next(i for i, l in enumerate(text.splitlines(), 1) if "works" in l)
    with pytest.raises(DataError, match=rf"bad.yaml:{line}: error: aten::mm: res is 'works'"):
        data.load(str(path))


def test_wrong_schema_and_broken_yaml(tmp_path):
    path = tmp_path / "old.yaml"
    doc = small_doc()
    doc["schema_version"] = 99
    data.save(doc, str(path))
    with pytest.raises(DataError, match="schema_version is 99; this opcov reads 1"):
        data.load(str(path))
    broken = tmp_path / "broken.yaml"
    broken.write_text("ops:\n  aten::mm: {fwd: kernel\n")
    with pytest.raises(DataError, match=r"broken.yaml:\d+: error: not valid YAML"):
        data.load(str(broken))


def test_lint_reports_every_problem_in_one_run(tmp_path):
    path = tmp_path / "many.yaml"
    data.save(small_doc(), str(path))
    text = path.read_text().replace("fwd: kernel", "fwd: kernal").replace("res: fallback", "res: maybe")
    text = text.replace("aten::mm:", "aten::not_an_op:")
    path.write_text(text)
    proc = run_opcov("lint", str(path))
    assert proc.returncode == 1
    out = proc.stdout
    assert "fwd is 'kernal'" in out and "res is 'maybe'" in out
    assert "aten::not_an_op: not an op of torch" in out
    assert all(":" in l.split(" ")[0] for l in out.splitlines()[:-1])  # every problem has file:line
    assert "4 error(s)" in out  # fwd, res, bwd_res, unknown op


def test_bundled_coverage_lints_clean():
    proc = run_opcov("lint", BUNDLED)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert " 0 error(s)" in proc.stdout


def test_summary_of_bundled_data_says_unverified_and_eager():
    proc = run_opcov("summary", BUNDLED)
    assert proc.returncode == 0, proc.stderr
    assert "registered, unverified" in proc.stdout
    assert "eager mode only" in proc.stdout
    assert "reproduce: opcov scan tpu" in proc.stdout


def test_usage_errors_are_one_line_with_exit_2(tmp_path):
    proc = run_opcov("summary", str(tmp_path / "nope"))
    assert proc.returncode == 2 and proc.stderr.count("\n") == 1 and "no such file" in proc.stderr
    bad = tmp_path / "bad.yaml"
    bad.write_text("- just\n- a list\n")
    proc = run_opcov("summary", str(bad))
    assert proc.returncode == 2 and "top level must be a mapping" in proc.stderr
    assert "Traceback" not in proc.stderr
