"""Self-checking data files (issue 15, silent loss): the integrity line, its readers, and restamping.

Every file opcov writes starts with ``integrity: {ops: N, sha256: ...}`` over the rest of the file;
every reader (data.load, lineyaml's fast path that reads only some op lines, lint) verifies it, so a
file cut short or edited is refused with one line naming the file and the command that regenerates
it, and ``check`` judges nothing rather than calling the lost ops "not in the coverage data".
"""

import os
import shutil
import subprocess
import sys

import pytest
from conftest import ROOT, child_env, opcov_here, run_opcov

from opcov.errors import DataError
from opcov.store import data, lineyaml, opset
from opcov.store.lint import lint_files

COV = "cpu/registered-torch-2.13.0+cpu.yaml"
MODEL = "models/tiny/inference.yaml"
OPS = ["aten::add.Tensor", "aten::mm", "aten::relu", "aten::sum", "aten::t", "aten::zeros"]
USED = ["aten::mm", "aten::relu", "aten::t", "aten::zeros"]  # the op set's: the last ones in the file
RESTAMP = os.path.join(ROOT, "scripts", "restamp_data.py")


def coverage_doc():
    rec = {"fwd": "kernel", "res": "registered", "bwd": "formula", "bwd_res": "registered"}
    return {
        "schema_version": 1,
        "evidence": "registered",
        "backend": {
            "name": "cpu",
            "device_type": "cpu",
            "dispatch_key": "CPU",
            "package": "torch",
            "version": "2.13.0+cpu",
        },
        "provenance": {"torch": "2.13.0+cpu", "command": "opcov scan cpu", "created": "2026-01-01T00:00:00+00:00"},
        "summary": {},
        "ops": {name: dict(rec) for name in OPS},
    }


def opset_doc(version=1):
    doc = {
        "schema_version": version,
        "kind": "opset",
        "model": {"name": "tiny"},
        "mode": "inference",
        "dtype": "float32",
        "provenance": {
            "torch": "2.13.0+cpu",
            "opcov": "0.2.0",
            "created": "2026-01-01T00:00:00+00:00",
            "command": "opcov trace tiny",
        },
        "ops": {name: {"forward": {"float32": {"calls": 1}}} for name in USED},
    }
    if version == 2:
        doc["calltree"] = [f"{i} forward kernel {name} float32 x1" for i, name in enumerate(USED, 1)]
    return doc


def write_folder(root):
    """A coverage folder every command accepts, under root: a registered file for cpu, an op set
    using 4 of its ops."""
    data.save(coverage_doc(), str(root / COV))
    opset.save(opset_doc(), str(root / MODEL))


@pytest.fixture(scope="module")
def base(tmp_path_factory):
    root = tmp_path_factory.mktemp("cov")
    write_folder(root)
    return root


def copy_with(base, tmp_path, edit, rel=COV):
    """A copy of the base folder whose file ``rel`` has had ``edit(bytes) -> bytes`` done to it."""
    root = tmp_path / "cov"
    shutil.copytree(base, root)
    path = root / rel
    path.write_bytes(edit(path.read_bytes()))
    return root, path


def cut_lines(n):
    return lambda raw: b"".join(raw.splitlines(keepends=True)[:-n])


def cut_bytes(n):
    return lambda raw: raw[:-n]


def replace(old, new):
    def edit(raw):
        assert old in raw
        return raw.replace(old, new, 1)

    return edit


def refused(proc, path, words="the file was truncated or edited: regenerate it with: opcov scan cpu"):
    """Exit 2, one line on stderr naming the file and saying it was altered, no traceback."""
    assert "Traceback" not in proc.stderr + proc.stdout, proc.stderr[-2000:]
    assert proc.returncode == 2, (proc.returncode, proc.stdout[-800:], proc.stderr[-800:])
    assert proc.stderr.count("\n") == 1 and str(path) in proc.stderr and words in proc.stderr, proc.stderr


# ---------------------------------------------------------------- the writer


def test_every_file_opcov_writes_starts_with_its_integrity_line(tmp_path):
    text = data.dumps(coverage_doc())
    first, rest = text.split("\n", 1)
    assert first.startswith("integrity: {ops: 6, sha256: ") and data.stamp_of(text) == data.Stamp(6, True)
    assert data.dumps(coverage_doc()) == text  # deterministic
    assert rest == data.body(coverage_doc())  # one pass: the body, then its digest
    for version in (1, 2):
        written = opset.dumps(opset_doc(version))
        assert data.stamp_of(written) == data.Stamp(len(USED), True)
        assert ("calltree:" in written) == (version == 2)  # the digest covers the call tree too
    path = tmp_path / "again.yaml"
    data.save(coverage_doc(), str(path))
    doc = data.load(str(path))  # the line describes the file, not the data: never copied twice
    assert data.INTEGRITY not in doc and data.dumps({**doc, data.INTEGRITY: {"ops": 1}}) == text


def test_an_op_name_with_a_line_break_round_trips(tmp_path):
    doc = coverage_doc()
    doc["ops"]["aten::m\nm"] = doc["ops"].pop("aten::mm")
    doc["ops"]["aten::two\n\nbreaks"] = doc["ops"].pop("aten::sum")
    path = tmp_path / "f.yaml"
    data.save(doc, str(path))
    assert data.load(str(path)) == doc == lineyaml.load(str(path))
    assert lineyaml.load(str(path), ["aten::m\nm"], summary=False)["ops"] == {"aten::m\nm": doc["ops"]["aten::m\nm"]}
    assert sum(line.startswith("  ") for line in path.read_text().split("\nops:\n")[1].splitlines()) == len(OPS)


# ---------------------------------------------------------------- the readers, in process

READERS = {
    "data.load": data.load,
    "lineyaml.load": lineyaml.load,
    "lineyaml.load, ops that are intact": lambda p: lineyaml.load(p, ["aten::add.Tensor"], summary=False),
    "lineyaml.load, ops lost": lambda p: lineyaml.load(p, USED, summary=False),
}
ALTERED = {
    "cut at a line end": (cut_lines(2), "4 ops where its integrity line says 6, and its SHA-256"),
    "cut mid-line": (cut_bytes(20), "it ends mid-line (6 ops were written)"),
    "a value edited": (
        replace(
            b"aten::t: {bwd: formula, bwd_res: registered, fwd: kernel, res: registered}",
            b"aten::t: {bwd: formula, bwd_res: registered, fwd: kernel, res: fallback}",
        ),
        "its SHA-256 is not the one on its integrity line",
    ),
    "the header edited": (replace(b"created: '2026", b"created: '2025"), "its SHA-256 is not the one"),
    "an op added": (
        lambda raw: raw + b"  aten::t_: {bwd: formula, bwd_res: registered, fwd: kernel, res: registered}\n",
        "7 ops where its integrity line says 6",
    ),
    "the count edited": (replace(b"{ops: 6,", b"{ops: 5,"), "6 ops where its integrity line says 5"),
    "the line moved": (
        lambda raw: raw.split(b"\n", 1)[1] + raw.split(b"\n", 1)[0] + b"\n",
        "its integrity line is not the first line as opcov writes it",
    ),
    "the line mangled": (replace(b"{ops: 6, sha256: ", b"{ops: 6, sha: "), "its integrity line is not the first line"),
}


@pytest.mark.parametrize("case", ALTERED)
def test_every_reader_refuses_an_altered_file(base, tmp_path, case):
    edit, words = ALTERED[case]
    _, path = copy_with(base, tmp_path, edit)
    for name, read in READERS.items():
        with pytest.raises(DataError) as info:
            read(str(path))
        message = str(info.value)
        assert message.startswith(f"{path}: error: not as opcov wrote it: ") and words in message, (name, message)
        assert message.endswith("the file was truncated or edited: regenerate it with: opcov scan cpu"), message
        assert "\n" not in message
    assert lineyaml.parse(str(path)) is None  # the fast reader never judges around it
    problems = [str(p) for p in lint_files([str(path)], check_catalog=False)]
    assert problems == [f"{path}: error: not as opcov wrote it: {message.split('not as opcov wrote it: ', 1)[1]}"]


def test_schema_problems_come_before_the_integrity_problem(base, tmp_path):
    """A hand edit that breaks the schema is named with its line first; lint lists both."""
    _, path = copy_with(base, tmp_path, replace(b"res: registered}\n  aten::relu", b"res: works}\n  aten::relu"))
    with pytest.raises(
        DataError,
        match=r"registered-torch-2\.13\.0\+cpu\.yaml:\d+: error: aten::mm: res is 'works'.* \(and 1 more; run 'opcov lint",
    ):
        data.load(str(path))
    problems = [str(p) for p in lint_files([str(path)], check_catalog=False)]
    assert len(problems) == 2 and "res is 'works'" in problems[0] and "not as opcov wrote it" in problems[1]


def test_an_op_set_is_checked_too(tmp_path):
    path = tmp_path / "inference.yaml"
    opset.save(opset_doc(2), str(path))
    assert opset.load(str(path)) == opset_doc(2)
    path.write_text(path.read_text().replace(" x1'\n", " x1 grad'\n", 1))
    with pytest.raises(DataError, match="not as opcov wrote it: its SHA-256 .* regenerate it with: opcov trace tiny$"):
        opset.load(str(path))


def test_a_file_without_the_line_is_read_with_a_lint_warning(tmp_path):
    """Data written before opcov stamped its files stays usable; lint says how to stamp it."""
    path = tmp_path / "old.yaml"
    path.write_text(data.body(coverage_doc()))
    assert data.load(str(path)) == lineyaml.load(str(path)) == coverage_doc()
    assert lineyaml.parse(str(path)) is None  # the full reader checks it all: no line to trust
    problems = lint_files([str(path)], check_catalog=False)
    assert [p.severity for p in problems] == ["warning"]
    assert "no integrity line" in str(problems[0]) and "scripts/restamp_data.py" in str(problems[0])


def test_the_fast_reader_hashes_the_file_cheaply():
    """check reads a few ops of 0.7-1 MB files: the whole-file SHA-256 must stay a few ms."""
    import time

    text = data.stamped("x" * (4 << 20), 0)  # 4 MiB
    best = min(_timed(time, lambda: data.stamp_of(text)) for _ in range(5))
    assert best < 0.1, best


def _timed(time, fn):
    t = time.perf_counter()
    fn()
    return time.perf_counter() - t


# ---------------------------------------------------------------- the commands


@pytest.mark.parametrize("case", ["cut at a line end", "cut mid-line", "a value edited"])
def test_every_command_refuses_an_altered_coverage_file(base, tmp_path, case):
    root, path = copy_with(base, tmp_path, ALTERED[case][0])
    model = str(root / MODEL)
    lint = opcov_here("lint", "--no-catalog", str(path))
    assert lint.returncode == 1 and f"{path}: error: not as opcov wrote it" in lint.stdout, lint.stdout
    refused(opcov_here("summary", str(path)), path)
    refused(opcov_here("check", model, "-b", "cpu", "--coverage", str(root)), path)
    refused(opcov_here("diff", str(path), str(base / COV)), path)
    refused(run_opcov("site", "--coverage", str(root), "--out", str(tmp_path / "site")), path)


def test_check_refuses_an_altered_op_set(base, tmp_path):
    root, path = copy_with(base, tmp_path, cut_lines(1), MODEL)
    refused(
        opcov_here("check", str(path), "-b", "cpu", "--coverage", str(root)),
        path,
        "regenerate it with: opcov trace tiny",
    )


def test_intact_files_pass_every_command(base, tmp_path):
    cov, model = str(base / COV), str(base / MODEL)
    lint = opcov_here("lint", "--no-catalog", cov, model)
    assert lint.returncode == 0 and "0 error(s), 0 warning(s)" in lint.stdout, lint.stdout
    check = opcov_here("check", model, "-b", "cpu", "--coverage", str(base))
    assert check.returncode == 0 and "not in the coverage data" not in check.stdout, check.stdout


# ---------------------------------------------------------------- restamping old data


def restamp(*paths):
    return subprocess.run(
        [sys.executable, RESTAMP, *map(str, paths)], capture_output=True, text=True, env=child_env(), timeout=600
    )


def test_restamp_gives_old_files_the_line_and_keeps_their_data(tmp_path):
    old_cov, old_set = (
        tmp_path / "cpu" / "registered-torch-2.13.0+cpu.yaml",
        tmp_path / "models" / "t" / "inference.yaml",
    )
    old_cov.parent.mkdir()
    old_set.parent.mkdir(parents=True)
    old_cov.write_text(data.body(coverage_doc()))  # as opcov wrote it before the integrity line
    old_set.write_text(opset.dumps(opset_doc(2)).split("\n", 1)[1])
    before = {p: p.read_text() for p in (old_cov, old_set)}
    loaded = {old_cov: data.load(str(old_cov)), old_set: opset.load(str(old_set))}
    proc = restamp(tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.count("stamped; the rest byte-identical") == 2, proc.stdout
    for p, text in before.items():
        new = p.read_text()
        assert new.split("\n", 1)[1] == text and data.stamp_of(new).intact
    assert data.load(str(old_cov)) == loaded[old_cov] and opset.load(str(old_set)) == loaded[old_set]
    again = restamp(old_cov, old_set)
    assert again.returncode == 0 and again.stdout.count("already stamped; unchanged") == 2, again.stdout
    assert sorted(os.listdir(old_cov.parent)) == [old_cov.name]  # no temporary left


def test_restamp_leaves_an_altered_or_invalid_file_alone(base, tmp_path):
    _, cut = copy_with(base, tmp_path, cut_lines(1))
    bad = tmp_path / "bad.yaml"
    bad.write_text(data.body(coverage_doc()).replace("res: registered", "res: works", 1))
    before = {p: p.read_bytes() for p in (cut, bad)}
    proc = restamp(cut, bad)
    assert proc.returncode == 1 and "Traceback" not in proc.stderr, proc.stderr
    assert "not as opcov wrote it" in proc.stderr and "res is 'works'" in proc.stderr
    assert all(p.read_bytes() == raw for p, raw in before.items())
