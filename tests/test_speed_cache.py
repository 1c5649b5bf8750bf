"""What makes check, gaps and compare fast gives the same answers as reading and judging everything.

Parsed files kept in the user's cache folder (opcov.store.parsed) and the zoo-wide answers committed with the
data (opcov.store.answers, scripts/make_answers.py) are used only while the bytes they rest on are the same;
a stale, corrupt or unwritable one is judged past, never a traceback, and errors still name file and line.
"""

from __future__ import annotations

import gzip
import os
import subprocess
import sys

import pytest
from conftest import ROOT, run_opcov
from test_backend_records import GOOD
from test_check import TORCH, fwd, model, probed
from test_compare import two as _two  # noqa: F401 - a fixture, here named '_two'

from opcov.errors import DataError
from opcov.store import answers, data, lineyaml, opset, parsed
from opcov.verdict import compare, gaps, kept

MAKE = os.path.join(ROOT, "scripts", "make_answers.py")
KEY = kept.backends_key()


@pytest.fixture(autouse=True)
def own_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    return tmp_path / "xdg" / "opcov" / parsed.FOLDER


@pytest.fixture
def two(request):
    """test_compare's coverage folder: backends 'one' and 'two', four op sets whose comparison is known."""
    return request.getfixturevalue("_two")


def saved(tmp_path, calls=1, name="m"):
    path = str(tmp_path / "models" / name / "training.yaml")
    opset.save(model({"aten::mm": fwd(calls=calls), "aten::add.Tensor": fwd()}, name=name), path)
    return path


def test_a_kept_document_equals_the_parsed_one_and_is_read_back(tmp_path, own_cache, monkeypatch):
    path = saved(tmp_path)
    fresh = opset.load(path)
    assert not own_cache.exists()  # off unless a command turns it on
    with parsed.caching():
        first = opset.load(path)
        assert len(os.listdir(own_cache)) == 1
        monkeypatch.setattr(opset.lineyaml, "parse", lambda p: pytest.fail("parsed again"))
        again = opset.load(path)
    assert first == again == fresh
    assert again is not first  # a fresh object each time, as a parse gives


def test_a_changed_file_is_parsed_again_even_with_its_old_size_and_time(tmp_path):
    path = saved(tmp_path, calls=1)
    with parsed.caching():
        assert opset.load(path)["ops"]["aten::mm"]["forward"]["float32"]["calls"] == 1
        st = os.stat(path)
        saved(tmp_path, calls=2)  # the same size: one digit for another
        os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns))
        assert os.path.getsize(path) == st.st_size
        assert opset.load(path)["ops"]["aten::mm"]["forward"]["float32"]["calls"] == 2


@pytest.mark.parametrize("damage", [b"", b"garbage", "cut", "flip"])
def test_a_corrupt_entry_is_rebuilt(tmp_path, own_cache, damage):
    path = saved(tmp_path)
    with parsed.caching():
        good = opset.load(path)
        (entry,) = own_cache.iterdir()
        blob = entry.read_bytes()
        if damage == "cut":
            damage = blob[: len(blob) // 2]
        elif damage == "flip":
            damage = blob[:-5] + bytes([blob[-5] ^ 1]) + blob[-4:]
        entry.write_bytes(damage)
        assert opset.load(path) == good
        assert entry.read_bytes() == blob  # rewritten whole


def test_an_error_still_names_its_line_after_a_good_version_was_kept(tmp_path):
    path = saved(tmp_path)
    with parsed.caching():
        opset.load(path)
        with open(path, "a") as f:
            f.write("  aten::bad: {forward: {float32: {calls: -1}}}\n")
        with pytest.raises(DataError, match=rf"{path}:\d+"):
            opset.load(path)


def test_a_coverage_file_kept_equals_the_parsed_one():
    path = os.path.join(ROOT, "coverage", "tpu", "registered-torch-2.13.0+cpu-torch_tpu-0.2.0.yaml")
    fresh = lineyaml.load(path, summary=False)
    with parsed.caching():
        lineyaml._MEMO.clear()
        lineyaml.load(path)
        lineyaml._MEMO.clear()
        assert lineyaml.load(path, summary=False) == fresh


def test_a_cache_folder_that_cannot_be_written_is_left_alone(tmp_path, monkeypatch):
    blocker = tmp_path / "not-a-folder"
    blocker.write_text("x")
    monkeypatch.setenv("XDG_CACHE_HOME", str(blocker))
    path = saved(tmp_path)
    with parsed.caching():
        assert opset.load(path) == opset.load(path)


def test_check_answers_the_same_from_kept_files_and_writes_only_the_cache(tmp_path):
    path = saved(tmp_path / "models-here")
    cache = tmp_path / "xdg-cli"
    before = sorted(os.walk(tmp_path / "models-here"))
    runs = [run_opcov("check", path, "-b", "tpu", "--format", "json", XDG_CACHE_HOME=str(cache)) for _ in range(2)]
    assert runs[0].returncode == runs[1].returncode == 0, runs[0].stderr
    assert runs[0].stdout == runs[1].stdout
    assert os.listdir(cache / "opcov" / parsed.FOLDER)
    assert sorted(os.walk(tmp_path / "models-here")) == before


def make_answers(coverage: str):
    proc = subprocess.run([sys.executable, MAKE, "--coverage", coverage], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    return proc


def test_committed_answers_give_the_judged_answer_without_reading_an_op_set(two, monkeypatch):
    make_answers(two)
    assert sorted(os.listdir(os.path.join(two, answers.FOLDER))) == [
        "compare-one-two.json.gz",
        "gaps-one.json.gz",
        "gaps-two.json.gz",
        "site.json.gz",
    ]
    judged = compare.as_dict(compare.compare("one", "two", two, cache=False))
    swapped = compare.as_dict(compare.compare("two", "one", two, cache=False))
    ranked = {b: gaps.rank(b, two, cache=False) for b in ("one", "two")}
    monkeypatch.setattr(opset, "load", lambda p: pytest.fail(f"read {p}"))
    assert compare.as_dict(compare.compare("one", "two", two)) == judged
    assert compare.as_dict(compare.compare("two", "one", two)) == swapped  # one answer serves both orders
    assert {b: gaps.rank(b, two) for b in ("one", "two")} == ranked


def test_stale_or_corrupt_answers_are_judged_past(two, tmp_path, monkeypatch):
    make_answers(two)
    assert subprocess.run([sys.executable, MAKE, "--coverage", two, "--check"]).returncode == 0
    probe = os.path.join(two, "two", f"probed-torch-{TORCH}-fakepkg-1.0.yaml")
    data.save(probed("two", {"aten::mm": {"float32": {"fwd": "error", "why": "RuntimeError: x"}}}), probe)
    assert answers.fresh(two, "gaps-one", KEY)  # backend two's data: never read to judge one
    assert not answers.fresh(two, "gaps-two", KEY) and not answers.fresh(two, "compare-one-two", KEY)
    make_answers(two)
    path = os.path.join(two, "models", "m2", "inference.yaml")
    opset.save(model({"aten::mm": fwd()}, mode="inference", name="m2"), path)  # m2 no longer needs aten::gone
    assert not answers.fresh(two, "compare-one-two", KEY)
    assert subprocess.run([sys.executable, MAKE, "--coverage", two, "--check"], capture_output=True).returncode == 1
    assert compare.as_dict(compare.compare("one", "two", two)) == compare.as_dict(
        compare.compare("one", "two", two, cache=False)
    )
    lacks = {d.op: d for d in compare.compare("one", "two", two).lacks["one"]}
    assert lacks["aten::gone"].models == {("m1", "training")}  # the op set as it is now
    with open(answers.path_for(two, "gaps-one"), "wb") as f:
        f.write(gzip.compress(b"{not json"))
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "another"))
    assert gaps.rank("one", two) == gaps.rank("one", two, cache=False)


def test_answers_rest_on_the_code_that_made_them(tmp_path, monkeypatch):
    package = tmp_path / "package"
    package.mkdir()
    (package / "judge.py").write_text("RULE = 1\n")
    monkeypatch.setattr(answers, "PACKAGE", str(package))
    cov = tmp_path / "coverage"
    (cov / answers.FOLDER).mkdir(parents=True)
    (cov / "data.txt").write_text("data")
    with open(answers.path_for(str(cov), "gaps-x"), "wb") as f:
        opsets = {"models/m/training.yaml": ["training", []]}
        f.write(answers.dumps(str(cov), "gaps-x", opsets, ["data.txt"], ["judge.py"], "backends"))
    assert answers.read(str(cov), "gaps-x", "backends") == opsets
    assert answers.read(str(cov), "gaps-x", "other backends") is None
    (package / "judge.py").write_text("RULE = 2\n")
    assert answers.read(str(cov), "gaps-x", "backends") is None
    (package / "judge.py").write_text("RULE = 1\n")
    (cov / "unread.txt").write_text("a file more: what a judgment reads may change")
    assert answers.read(str(cov), "gaps-x", "backends") is None
    (cov / "unread.txt").unlink()
    for working in ("probed.yaml.journal", "probed.journal.jsonl", "probed.yaml.tmp123"):  # a probe's, git-ignored
        (cov / working).write_text("an interrupted run's file")
        assert answers.read(str(cov), "gaps-x", "backends") == opsets, working
    (cov / "data.txt").write_text("Data")
    assert answers.read(str(cov), "gaps-x", "backends") is None


def test_answers_made_with_other_backends_known_are_judged_past(two, tmp_path, monkeypatch):
    """A backend record or an installed plugin is part of what a judgment rests on."""
    make_answers(two)
    records = tmp_path / "acme.toml"
    records.write_text(GOOD)
    monkeypatch.setenv("OPCOV_BACKEND_RECORDS", str(records))
    assert not answers.fresh(two, "gaps-one", kept.backends_key())
    read = []
    load = opset.load
    monkeypatch.setattr(opset, "load", lambda p: read.append(p) or load(p))
    assert gaps.rank("one", two) == gaps.rank("one", two, cache=False) and read


def test_the_bundled_answers_are_fresh():
    """The answers committed in coverage/answers/ rest on the data and code as committed; after changing
    either, run python scripts/make_answers.py (from a clean checkout) and commit coverage/answers/."""
    proc = subprocess.run([sys.executable, MAKE, "--check"], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stdout
