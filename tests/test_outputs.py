"""Unwritable outputs are one line and exit 2, never a traceback; no write follows a symbolic link,
leaves a temporary file, or clobbers a file outside the output (opcov.store.output)."""

import errno
import json
import os
import subprocess
import sys
import time

import pytest
from conftest import ROOT, child_env, opcov_here, run_opcov
from sitefixture import make_coverage

from opcov.errors import UsageError
from opcov.site import render
from opcov.store import opset, output

SECRET = "outside the output: must not change\n"
LLAMA = os.path.join(ROOT, "coverage", "models", "llama")


def one_line_error(proc, *words):
    """Exit 2 with one 'opcov: error:' line naming ``words``, and no traceback."""
    assert proc.returncode == 2, (proc.returncode, proc.stderr[-2000:])
    assert "Traceback" not in proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("opcov: error: "), proc.stderr
    for w in words:
        assert w in lines[0], (w, lines[0])


@pytest.fixture
def spot(tmp_path):
    """A folder with a regular file ('afile'), a folder ('adir') and a link ('link') to a file
    outside it ('outside/target', holding SECRET)."""
    (tmp_path / "outside").mkdir()
    target = tmp_path / "outside" / "target"
    target.write_text(SECRET)
    work = tmp_path / "work"
    work.mkdir()
    (work / "afile").write_text("x")
    (work / "adir").mkdir()
    os.symlink(target, work / "link")
    return work, target


def bad_outputs(work):
    """(output path, words its error names) for each kind of unwritable output."""
    return [
        ("/proc/x.yaml", "/proc"),
        (str(work / "afile" / "x.yaml"), "not a folder"),
        (str(work / "adir"), "is a folder"),
        (str(work / "link"), "symbolic link"),
        ("/dev/null", "not a regular file"),
    ]


def listing(folder):
    return sorted(os.listdir(folder))


# ---------------------------------------------------------------- the checks, in process


def test_check_writable_file_refuses_each_kind(spot):
    work, target = spot
    for path, words in bad_outputs(work) + [(str(work) + "/", "name a file"), (str(work / ("n" * 300)), "255")]:
        with pytest.raises(UsageError) as exc:
            output.check_writable_file(path)
        assert words in str(exc.value) and "\n" not in str(exc.value), path
    output.check_writable_file(str(work / "new" / "deeper" / "x.yaml"))  # can be made: fine
    output.check_writable_file(str(work / "afile"))  # a regular file is replaced
    assert listing(work) == ["adir", "afile", "link"]  # checking made nothing
    assert target.read_text() == SECRET


@pytest.mark.skipif(hasattr(os, "geteuid") and os.geteuid() == 0, reason="root writes through chmod")
def test_read_only_folder_is_refused(tmp_path):
    ro = tmp_path / "ro"
    ro.mkdir()
    ro.chmod(0o500)
    try:
        with pytest.raises(UsageError, match="not writable"):
            output.check_writable_file(str(ro / "x.yaml"))
        with pytest.raises(UsageError, match="permission denied"):
            output.write_atomic(str(ro / "x.yaml"), "x")
        assert listing(ro) == []
    finally:
        ro.chmod(0o700)


def test_write_atomic_writes_and_refuses_links(spot):
    work, target = spot
    path = work / "out.yaml"
    output.write_atomic(str(path), "one\n")
    output.write_atomic(str(path), b"two\n")
    assert path.read_text() == "two\n"
    with open(work / "plain", "w") as f:  # the mode a plain open gives (umask applies)
        f.write("x")
    assert os.stat(path).st_mode == os.stat(work / "plain").st_mode
    with pytest.raises(UsageError, match="symbolic link"):
        output.write_atomic(str(work / "link"), "clobber")
    with pytest.raises(UsageError, match="not a file"):
        output.write_atomic(str(work / "adir"), "clobber")
    assert target.read_text() == SECRET and os.path.islink(work / "link")
    assert listing(work) == ["adir", "afile", "link", "out.yaml", "plain"]


@pytest.mark.parametrize(
    "error, words",
    [
        (OSError(errno.ENOSPC, "No space left on device"), "no space left"),
        (OSError(errno.EROFS, "Read-only file system"), "read-only"),
        (KeyboardInterrupt(), None),
    ],
)
def test_a_failed_write_leaves_the_old_file_and_no_temporary(tmp_path, monkeypatch, error, words):
    path = tmp_path / "x.yaml"
    path.write_text("old\n")
    real_write = os.write

    def failing(fd, data):
        real_write(fd, data[:3])  # part of it reached the temporary file
        raise error

    monkeypatch.setattr(os, "write", failing)
    with pytest.raises(UsageError if words else KeyboardInterrupt) as exc:
        output.write_atomic(str(path), "new content\n")
    monkeypatch.undo()
    if words:
        assert words in str(exc.value) and str(path) in str(exc.value) and "\n" not in str(exc.value)
    assert path.read_text() == "old\n" and listing(tmp_path) == ["x.yaml"]


def test_check_writable_dir_refuses_links_inside_and_keeps_the_marker_rule(tmp_path):
    site = tmp_path / "site"
    (site / "ops").mkdir(parents=True)
    (site / render.MARKER).write_text("x")
    files = {"index.html": b"", "ops/a.html": b"", render.MARKER: b""}
    output.check_writable_dir(str(site), marker=render.MARKER, files=files)
    os.symlink(tmp_path, site / "index.html")
    with pytest.raises(UsageError, match="symbolic link"):
        output.check_writable_dir(str(site), marker=render.MARKER, files=files)
    os.remove(site / "index.html")
    os.rename(site / "ops", tmp_path / "elsewhere")
    os.symlink(tmp_path / "elsewhere", site / "ops")  # a linked folder: its pages would land outside
    with pytest.raises(UsageError, match="symbolic link"):
        output.check_writable_dir(str(site), marker=render.MARKER, files=files)
    os.symlink(site, tmp_path / "linked")
    with pytest.raises(UsageError, match="symbolic link"):
        output.check_writable_dir(str(tmp_path / "linked"), marker=render.MARKER)
    (tmp_path / "mine").mkdir()
    (tmp_path / "mine" / "notes.txt").write_text("keep")
    with pytest.raises(UsageError, match="not an opcov site"):
        output.check_writable_dir(str(tmp_path / "mine"), marker=render.MARKER)


# ---------------------------------------------------------------- the commands, in child processes


def test_merge_check_trace_and_zoo_refuse_unwritable_outputs_at_once(spot):
    """Each command checks its output before it reads or traces anything (the inputs here do not
    even exist): one line, exit 2, and nothing written anywhere."""
    work, target = spot
    for path, words in bad_outputs(work):
        one_line_error(opcov_here("merge", str(work / "missing.yaml"), "--out", path), words)
        one_line_error(opcov_here("check", LLAMA, "-b", "cpu", "-o", path), words)
        one_line_error(run_opcov("trace", "nn:convnet", "--out", path), words)
    one_line_error(run_opcov("zoo", "trace", "--only", "llama", "--root", str(work / "afile")), "not a folder")
    assert listing(work) == ["adir", "afile", "link"] and listing(work / "adir") == []
    assert target.read_text() == SECRET


def test_check_output_is_written_atomically(tmp_path):
    out = tmp_path / "report.json"
    proc = opcov_here("check", LLAMA, "-b", "cpu", "--format", "json", "-o", str(out))
    assert proc.returncode in (0, 1), proc.stderr
    json.loads(out.read_text())
    assert listing(tmp_path) == ["report.json"]


def _abortdev(tmp_path):
    """A backend module that, in a probe worker only, records that the worker started and aborts."""
    mark = tmp_path / "worker-started"
    (tmp_path / "abortdev.py").write_text(
        "import multiprocessing, os\n"
        "if multiprocessing.parent_process() is not None:\n"
        f"    open({str(mark)!r}, 'w').close()\n"
        "    os.abort()\n"
    )
    return mark


def test_probe_checks_its_output_before_any_worker_starts(tmp_path, spot):
    work, target = spot
    mark = _abortdev(tmp_path)
    env = child_env(PYTHONPATH=f"{tmp_path}{os.pathsep}{os.path.join(ROOT, 'src')}")
    for path, words in bad_outputs(work):
        t0 = time.monotonic()
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
                "^abs$",
                "--dtypes",
                "float32",
                "--out",
                path,
            ],
            env=env,
            cwd=ROOT,
            capture_output=True,
            text=True,
            timeout=120,
        )
        one_line_error(proc, words)
        assert time.monotonic() - t0 < 30
        assert not mark.exists(), "a worker started before the output was checked"
    assert listing(work) == ["adir", "afile", "link"] and target.read_text() == SECRET


def test_probe_refuses_a_linked_journal_and_leaves_nothing(spot):
    """The planted backend, one op: a link where the journal goes is refused before the run, with
    --resume too; nothing is written (no output, no temporary, no journal) and the target is unchanged."""
    work, target = spot
    out = work / "p.yaml"
    os.symlink(target, str(out) + ".journal.jsonl")
    args = [
        "probe",
        "opcovtest",
        "--import",
        "opcov.sources.pybackend",
        "--ops",
        "^abs$",
        "--dtypes",
        "float32",
        "--out",
        str(out),
    ]
    spec = json.dumps({"kernels": {}, "fallback": "cpu"})
    one_line_error(run_opcov(*args, "--resume", timeout=120, OPCOV_PYBACKEND_SPEC=spec), "symbolic link", "journal")
    proc = run_opcov(*args, timeout=120, OPCOV_PYBACKEND_SPEC=spec)  # no --resume: the journal is named
    one_line_error(proc, "journal")
    os.remove(str(out) + ".journal.jsonl")
    one_line_error(
        run_opcov(*args[:-1], str(work / "afile" / "p.yaml"), timeout=120, OPCOV_PYBACKEND_SPEC=spec), "not a folder"
    )
    assert listing(work) == ["adir", "afile", "link"] and target.read_text() == SECRET


def test_site_refuses_links_inside_an_existing_site(tmp_path):
    cov = make_coverage(tmp_path)
    out = tmp_path / "web"
    proc = run_opcov("site", "--coverage", cov, "--out", str(out))
    assert proc.returncode == 0, proc.stderr
    target = tmp_path / "target.html"
    target.write_text(SECRET)
    os.remove(out / "index.html")
    os.symlink(target, out / "index.html")
    page = next(os.path.join(r, n) for r, _, names in sorted(os.walk(out / "ops")) for n in sorted(names))
    os.remove(page)  # an op page: written as it is made, long before index.html
    one_line_error(run_opcov("site", "--coverage", cov, "--out", str(out)), "symbolic link", "index.html")
    assert target.read_text() == SECRET and os.path.islink(out / "index.html")
    assert not os.path.exists(page)  # refused before any page was written
    os.remove(out / "index.html")
    os.symlink(out, tmp_path / "linked")
    one_line_error(run_opcov("site", "--coverage", cov, "--out", str(tmp_path / "linked")), "symbolic link")
    for path, words in (("/proc/site", "/proc"), (str(target), "not a folder"), (str(target / "site"), "not a folder")):
        one_line_error(run_opcov("site", "--coverage", cov, "--out", path), words)
    assert target.read_text() == SECRET
    proc = run_opcov("site", "--coverage", cov, "--out", str(out))  # the link removed: renders again
    assert proc.returncode == 0, proc.stderr
    assert not [n for _, _, names in os.walk(out) for n in names if ".tmp" in n]


def test_a_300_character_model_name_renders(tmp_path):
    cov = make_coverage(tmp_path)
    long_name = "org/" + "a-very-long-model-name-" * 13  # 303 characters
    for mode in ("inference", "training"):
        path = os.path.join(cov, "models", "tiny", f"{mode}.yaml")
        doc = opset.load(path)
        doc["model"]["name"] = long_name
        opset.save(doc, path)
    out = tmp_path / "web"
    proc = run_opcov("site", "--coverage", cov, "--out", str(out))
    assert proc.returncode == 0, proc.stderr
    names = [n for _, _, files in os.walk(out) for n in files]
    assert max(len(n.encode()) for n in names) <= render.MAX_STEM + len(".html")
    pages = os.listdir(out / "models")
    assert len(pages) == 1 and len(pages[0]) == render.MAX_STEM + len(".html")
    assert long_name in (out / "models" / pages[0]).read_text(encoding="utf-8")
    assert os.listdir(out / "badges" / "models") == [pages[0][: -len(".html")] + ".svg"]  # one per model


def test_long_page_names_stay_unique_and_deterministic():
    a, b = "x" * 400, "x" * 399 + "y"
    assert render._safe(a) == render._safe(a) != render._safe(b)
    assert len(render._safe(a)) == render.MAX_STEM and render._safe("short.name") == "short.name"
