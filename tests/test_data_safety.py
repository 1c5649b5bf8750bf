"""Data safety: no output may be an input or a file opcov did not write; every reader gives the same
answer as lint (whole or refused); names never become paths; bounded memory (docs/data-safety.md)."""

import hashlib
import os
import shutil

import pytest
from conftest import ROOT, run_opcov

from opcov.errors import UsageError
from opcov.store import output

LLAMA = os.path.join(ROOT, "coverage", "models", "llama", "training.yaml")
TPU = os.path.join(ROOT, "coverage", "tpu")
CPU_PROBED = os.path.join(ROOT, "coverage", "cpu", "probed-torch-2.13.0+cpu.yaml")


def digest(path):
    with open(path, "rb") as f:
        return hashlib.sha256(f.read()).hexdigest()


def one_line_error(proc, *words):
    """Exit 2 with one 'opcov: error:' line naming ``words``, and no traceback."""
    assert proc.returncode == 2, (proc.returncode, proc.stdout[-1000:], proc.stderr[-2000:])
    assert "Traceback" not in proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("opcov: error: "), proc.stderr
    for w in words:
        assert w in lines[0], (w, lines[0])


@pytest.fixture
def copies(tmp_path):
    """An op set, a coverage folder with tpu's registered file, and a probed file, copied."""
    opset = tmp_path / "llama.yaml"
    shutil.copy(LLAMA, opset)
    cov = tmp_path / "coverage"
    shutil.copytree(TPU, cov / "tpu")
    probed = tmp_path / "probed.yaml"
    shutil.copy(CPU_PROBED, probed)
    return tmp_path, opset, cov, probed


# ---------------------------------------------------------------- 1. no output may be an input


def test_check_output_is_not_its_op_set(copies):
    tmp, opset, cov, _ = copies
    before = digest(opset)
    proc = run_opcov("check", str(opset), "-b", "tpu", "--coverage", str(cov), "-o", str(opset))
    one_line_error(proc, "also an input")
    assert digest(opset) == before


def test_check_output_through_a_link_to_its_input_is_refused(copies):
    tmp, opset, cov, _ = copies
    os.symlink(opset, tmp / "alias.yaml")
    hard = tmp / "hard.yaml"
    os.link(opset, hard)
    before = digest(opset)
    one_line_error(
        run_opcov("check", str(tmp / "alias.yaml"), "-b", "tpu", "--coverage", str(cov), "-o", str(hard)),
        "also an input",
    )
    assert digest(opset) == before


def test_check_output_is_not_a_coverage_file_or_manifest(copies):
    tmp, opset, cov, _ = copies
    (registered,) = (cov / "tpu").iterdir()
    before = digest(registered)
    one_line_error(
        run_opcov("check", str(opset), "-b", "tpu", "--coverage", str(cov), "-o", str(registered)),
        "a coverage file is already there",
    )
    assert digest(registered) == before
    manifest = tmp / "manifest.yaml"
    manifest.write_text("backend: tpu\n")
    one_line_error(
        run_opcov(
            "check", str(opset), "-b", "tpu", "--coverage", str(cov), "--manifest", str(manifest), "-o", str(manifest)
        ),
        "manifest.yaml",
    )
    assert manifest.read_text() == "backend: tpu\n"


def test_check_output_over_a_foreign_file_is_refused_and_its_own_report_replaced(copies):
    tmp, opset, cov, _ = copies
    mine = tmp / "notes.md"
    mine.write_text("# my notes\n")
    one_line_error(
        run_opcov("check", str(opset), "-b", "tpu", "--coverage", str(cov), "-o", str(mine)),
        "a file opcov did not write",
    )
    assert mine.read_text() == "# my notes\n"
    for fmt in ("text", "markdown", "json", "junit", "github"):
        report = tmp / f"report.{fmt}"
        for _ in range(2):  # the second run replaces the first's report
            proc = run_opcov(
                "check", str(opset), "-b", "tpu", "--coverage", str(cov), "--format", fmt, "-o", str(report)
            )
            assert proc.returncode in (0, 1), (fmt, proc.stderr)
        assert output.what_is(report.read_bytes()) == output.REPORT, fmt


def test_merge_refuses_an_input_as_output_and_another_kind(copies):
    tmp, opset, cov, probed = copies
    before = digest(probed)
    one_line_error(run_opcov("merge", str(probed), "--out", str(probed)), "also an input")
    assert digest(probed) == before
    one_line_error(run_opcov("merge", str(probed), "--out", str(opset)), "an op-set file is already there")


def test_trace_of_a_saved_op_set_onto_itself_is_refused(copies):
    tmp, opset, cov, probed = copies
    before = digest(opset)
    one_line_error(run_opcov("trace", str(opset), "--out", str(opset)), "also an input")
    assert digest(opset) == before


def test_check_output_in_process(tmp_path):
    data_file = tmp_path / "a.yaml"
    shutil.copy(LLAMA, data_file)
    with pytest.raises(UsageError, match="also an input"):
        output.check_output(str(data_file), kind=output.OPSET, inputs=[str(data_file)])
    with pytest.raises(UsageError, match="an op-set file is already there"):
        output.check_output(str(data_file), kind=output.COVERAGE)
    output.check_output(str(data_file), kind=output.OPSET)  # its own kind: replaced
    shutil.copy(CPU_PROBED, data_file)
    with pytest.raises(UsageError, match="other evidence"):
        output.check_output(str(data_file), kind=output.COVERAGE, evidence="registered")
    (tmp_path / "empty").write_text("")
    output.check_output(str(tmp_path / "empty"), kind=output.REPORT)  # nothing to lose
