"""Coverage files: deterministic writing, validation with file:line, lint, summary, exit codes."""

import json
import os

import pytest
from conftest import ROOT, opcov_here, run_opcov

from opcov.errors import DataError
from opcov.store import data

BUNDLED = os.path.join(ROOT, "coverage")


def small_doc():
    return {
        "schema_version": data.SCHEMA_VERSION,
        "evidence": "registered",
        "backend": {"name": "x", "device_type": "x", "dispatch_key": "PrivateUse1", "package": "x", "version": "1"},
        "provenance": {"torch": "2.13.0+cpu", "command": "opcov scan x", "created": "2026-01-01T00:00:00+00:00"},
        "summary": {},
        "ops": {
            "aten::mm": {
                "fwd": "kernel",
                "res": "registered",
                "bwd": "formula",
                "bwd_res": "registered",
                "bwd_via": ["aten::mm"],
            },
            "aten::add.Tensor": {
                "fwd": "out_variant",
                "via": ["aten::add.out"],
                "res": "fallback",
                "bwd": "formula",
                "bwd_res": "fallback",
            },
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
    line = next(i for i, ln in enumerate(text.splitlines(), 1) if "works" in ln)
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


def loose(tmp_path):
    """A folder for files named on a command line: lint judges a file's place by its grandparent, which for
    tmp_path itself is the worker's folder of every test's tmp_path (a coverage folder's look-alike once
    another test left a snapshot there)."""
    (tmp_path / "loose").mkdir(exist_ok=True)
    return tmp_path / "loose"


def test_lint_reports_every_problem_in_one_run(tmp_path):
    path = loose(tmp_path) / "many.yaml"
    data.save(small_doc(), str(path))
    text = path.read_text().replace("fwd: kernel", "fwd: kernal").replace("res: fallback", "res: maybe")
    text = text.replace("aten::mm:", "aten::not_an_op:")
    path.write_text(text)
    proc = opcov_here("lint", str(path))
    assert proc.returncode == 1
    out = proc.stdout
    assert "fwd is 'kernal'" in out and "res is 'maybe'" in out
    assert "aten::not_an_op: not an op of torch" in out
    assert all(":" in ln.split(" ")[0] for ln in out.splitlines()[:-1])  # every problem has file:line
    assert "not as opcov wrote it" in out  # edited after opcov wrote it
    assert "5 error(s)" in out  # fwd, res, bwd_res, unknown op, integrity


def test_lint_counts_ops_of_another_torch_as_a_note_but_warns_on_the_same_torch(tmp_path):
    """Ops unknown to the installed torch are expected in a file made with another torch build (the bundled
    xla and cuda data): a note, not a warning. With the same torch and nothing unloaded to explain them,
    they stay a warning."""
    import torch

    def write(name, torch_version):
        doc = small_doc()
        doc["backend"]["package"] = "torch"  # loaded here: nothing but the torch build can explain the op
        doc["provenance"]["torch"] = torch_version
        doc["ops"]["myext::fused_thing"] = dict(doc["ops"]["aten::mm"])
        path = tmp_path / name / "registered.yaml"
        path.parent.mkdir()
        data.save(doc, str(path))
        return str(path)

    other = opcov_here("lint", write("other", "2.9.0+cu128"))
    assert other.returncode == 0, other.stdout + other.stderr
    assert "0 warning(s)" in other.stdout and "myext::" not in other.stdout
    assert "note: 1 file(s) made with another torch build" in other.stdout
    listed = opcov_here("lint", "--notes", write("listed", "2.9.0+cu128"))
    assert "info: 1 myext:: op(s) unknown to this torch" in listed.stdout and "0 warning(s)" in listed.stdout
    same = opcov_here("lint", write("same", str(torch.__version__)))
    assert "warning: 1 myext:: op(s) unknown to this torch" in same.stdout and "1 warning(s)" in same.stdout


def test_bundled_coverage_lints_clean():
    """Every backend's data and a slice of the zoo's op sets (the whole zoo, ~1,200 op sets, is linted
    by scripts/run.sh, the main job: a minute of CPU)."""
    backends = [
        os.path.join(BUNDLED, d)
        for d in sorted(os.listdir(BUNDLED))
        if d != "models" and os.path.isdir(os.path.join(BUNDLED, d))
    ]
    models = [os.path.join(BUNDLED, "models", m) for m in ("bert", "llama", "mixtral", "nn-lstm", "whisper")]
    proc = opcov_here("lint", *backends, *models)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert " 0 error(s), 0 warning(s)" in proc.stdout


def test_summary_of_bundled_data_says_unverified_and_eager():
    proc = opcov_here("summary", BUNDLED)
    assert proc.returncode == 0, proc.stderr
    assert "registered, unverified" in proc.stdout
    assert "eager mode only" in proc.stdout
    assert "reproduce: opcov scan tpu" in proc.stdout


def test_usage_errors_are_one_line_with_exit_2(tmp_path):
    proc = opcov_here("summary", str(tmp_path / "nope"))
    assert proc.returncode == 2 and proc.stderr.count("\n") == 1 and "no such file" in proc.stderr
    bad = tmp_path / "bad.yaml"
    bad.write_text("- just\n- a list\n")
    proc = opcov_here("summary", str(bad))
    assert proc.returncode == 2 and "top level must be a mapping" in proc.stderr
    assert "Traceback" not in proc.stderr


# ---------------------------------------------------------------- where files lie (issue 15, silent loss)


def placed_folder(tmp_path):
    """A coverage folder laid out as opcov's: cpu's registered file, one op set using aten::mm."""
    from opcov.store import opset

    root = tmp_path / "cov"
    doc = small_doc()
    doc["backend"]["name"] = "cpu"
    data.save(doc, str(root / "cpu" / "registered-torch-2.13.0+cpu.yaml"))
    opset.save(
        {
            "schema_version": 1,
            "kind": "opset",
            "model": {"name": "tiny"},
            "mode": "inference",
            "dtype": "float32",
            "provenance": {"torch": "2.13.0+cpu", "created": "t", "command": "opcov trace tiny"},
            "ops": {"aten::mm": {"forward": {"float32": {"calls": 1}}}},
        },
        str(root / "models" / "tiny" / "inference.yaml"),
    )
    return root, doc


def test_lint_on_a_folder_finds_misplaced_files(tmp_path):
    root, doc = placed_folder(tmp_path)
    opset_file = root / "models" / "tiny" / "inference.yaml"
    (root / "cpu" / "llama.yaml").write_bytes(opset_file.read_bytes())  # an op set under a backend's folder
    (root / "cpu" / "probed-torch-2.13.0+cpu.yaml").write_bytes(opset_file.read_bytes())  # ... named as coverage
    data.save(doc, str(root / "models" / "x" / "training.yaml"))  # coverage under models/
    data.save(dict(doc, backend=dict(doc["backend"], name="tpu")), str(root / "cpu" / "registered-torch-2.12.0.yaml"))
    data.save(dict(doc, backend=dict(doc["backend"], name="tpu")), str(root / "tpu" / "tpu-data.yaml"))  # renamed
    data.save(doc, str(root / "cpu.yaml"))  # directly in the coverage folder
    (root / "meta" / "registered-torch-2.13.0.yaml").mkdir(parents=True)  # a folder where a file belongs
    proc = opcov_here("lint", "--no-catalog", str(root))
    assert proc.returncode == 1 and "Traceback" not in proc.stderr, proc.stderr
    found = {
        line.split(": error: ")[0].removeprefix(str(root) + "/"): line
        for line in proc.stdout.splitlines()
        if ": error: " in line
    }
    assert "an op set in a backend's folder (cpu/)" in found["cpu/llama.yaml"]
    assert "move it to models/tiny/inference.yaml" in found["cpu/probed-torch-2.13.0+cpu.yaml"]
    assert "a coverage file under models/" in found["models/x/training.yaml"]
    assert "backend.name is 'tpu' but the file is in cpu/" in found["cpu/registered-torch-2.12.0.yaml"]
    assert (
        "not a snapshot name; opcov reads only registered-torch-<torch>" in found["tpu/tpu-data.yaml"]
        and "rename it registered-torch-2.13.0+cpu-x-1.yaml" in found["tpu/tpu-data.yaml"]
    )
    assert "opcov reads no data file directly in a coverage folder" in found["cpu.yaml"]
    assert "a folder, where a data file is expected" in found["meta/registered-torch-2.13.0.yaml"]
    assert len(found) == 7 and "7 error(s)" in proc.stdout, proc.stdout


def test_a_folder_of_runs_is_not_taken_for_a_coverage_folder(tmp_path):
    """A snapshot-named file in one run's folder does not make a file of another run misplaced
    (pytest's base temp folder is such a folder of runs, as is a user's ~/runs)."""
    _, doc = placed_folder(tmp_path / "placed")
    runs = tmp_path / "runs"
    data.save(doc, str(runs / "a" / "registered-torch-2.13.0+cpu.yaml"))
    data.save(doc, str(runs / "b" / "mine.yaml"))
    proc = opcov_here("lint", "--no-catalog", str(runs / "b" / "mine.yaml"))
    assert proc.returncode == 0 and "0 error(s)" in proc.stdout, proc.stdout + proc.stderr
    (runs / "models").mkdir()  # now it is laid out as a coverage folder, and mine.yaml is not read there
    proc = opcov_here("lint", "--no-catalog", str(runs / "b" / "mine.yaml"))
    assert proc.returncode == 1 and "not a snapshot name" in proc.stdout, proc.stdout


def test_a_folder_where_a_file_is_expected_stops_site_and_check(tmp_path):
    root, _ = placed_folder(tmp_path)
    folder = root / "tpu" / "registered-torch-2.13.0+cpu.yaml"
    folder.mkdir(parents=True)
    site = run_opcov("site", "--coverage", str(root), "--out", str(tmp_path / "site"))
    assert site.returncode == 2 and site.stderr.count("\n") == 1, site.stderr
    assert f"{folder}: a folder, where a data file is expected" in site.stderr
    check = opcov_here("check", str(root / "models" / "tiny"), "-b", "tpu", "--coverage", str(root))
    assert check.returncode == 2 and check.stderr.count("\n") == 1, check.stderr
    assert f"{folder}: error: a folder, where a data file is expected" in check.stderr


def test_check_says_it_ignored_a_renamed_coverage_file(tmp_path):
    """Never a silent live scan: a note beside other data, else one line naming the file."""
    root, doc = placed_folder(tmp_path)
    renamed = root / "cpu" / "cpu-data.yaml"
    (root / "cpu" / "registered-torch-2.13.0+cpu.yaml").rename(renamed)
    model = str(root / "models" / "tiny")
    alone = opcov_here("check", model, "-b", "cpu", "--coverage", str(root))
    assert alone.returncode == 2 and alone.stderr.count("\n") == 1 and "scanning" not in alone.stderr, alone.stderr
    assert f"{renamed}: not a snapshot name" in alone.stderr and "so cpu has no data opcov reads" in alone.stderr
    data.save(doc, str(root / "cpu" / "registered-torch-2.13.0+cpu.yaml"))
    beside = opcov_here("check", model, "-b", "cpu", "--coverage", str(root))
    assert beside.returncode == 0, beside.stderr
    assert f"ignored {renamed}: not a snapshot name" in beside.stdout, beside.stdout
    site = run_opcov("site", "--coverage", str(root), "--out", str(tmp_path / "site"))
    assert site.returncode == 2 and f"{renamed}: not a snapshot name" in site.stderr, site.stderr


def test_summary_of_a_file_with_an_empty_or_no_summary(tmp_path):
    """lint accepts both (summary is optional plain data): summary must print them, in both formats."""
    empty, missing = loose(tmp_path) / "empty.yaml", loose(tmp_path) / "missing.yaml"
    data.save(small_doc(), str(empty))
    data.save({k: v for k, v in small_doc().items() if k != "summary"}, str(missing))
    assert opcov_here("lint", "--no-catalog", str(empty), str(missing)).returncode == 0
    for path in (empty, missing):
        table = opcov_here("summary", str(path))
        assert table.returncode == 0 and "no summary counts in this file" in table.stdout, table.stderr
        as_json = opcov_here("summary", "--format", "json", str(path))
        assert as_json.returncode == 0 and json.loads(as_json.stdout)[str(path)]["summary"] == {}, as_json.stderr
