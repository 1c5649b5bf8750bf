"""Contributed results: 'opcov bundle' on one machine, 'opcov ingest' on another (opcov.store.bundle).
A bundle that is tampered with, cut short or foreign is refused in one line, and coverage/ is left as it was."""

from __future__ import annotations

import gzip
import hashlib
import json
import os
import shutil

import pytest
from conftest import ROOT, load_yaml, opcov_here

XLA = os.path.join(ROOT, "coverage", "xla")
PROBED = "probed-torch-2.9.0+cu128-torch_xla-2.9.0.yaml"


def _tree(folder) -> dict:
    """Every file under folder with its hash: what 'nothing changed' means."""
    out = {}
    for root, _dirs, files in os.walk(folder):
        for f in files:
            p = os.path.join(root, f)
            out[os.path.relpath(p, folder)] = hashlib.sha256(open(p, "rb").read()).hexdigest()
    return out


@pytest.fixture(scope="module")
def made(tmp_path_factory):
    """A bundle of the bundled xla probe, made 'on the contributor's machine'."""
    tmp = tmp_path_factory.mktemp("bundle")
    out = str(tmp / "xla.opcov-bundle.json.gz")
    proc = opcov_here("bundle", os.path.join(XLA, PROBED), "--source", "XLA team", "--out", out)
    assert proc.returncode == 0, proc.stderr
    return out


def xla_coverage(tmp_path) -> str:
    """A coverage folder 'on the receiving machine': the xla registered scan, no probe yet."""
    folder = tmp_path / "coverage"
    (folder / "xla").mkdir(parents=True)
    for f in os.listdir(XLA):
        if f.startswith("registered-"):
            shutil.copy(os.path.join(XLA, f), folder / "xla" / f)
    return str(folder)


@pytest.fixture
def cov(tmp_path):
    return xla_coverage(tmp_path)


def test_a_bundle_ingests_with_its_source_and_date(made, cov):
    proc = opcov_here("ingest", made, "--coverage", cov)
    assert proc.returncode == 0, proc.stderr
    assert "contributed by XLA team on " in proc.stdout
    target = os.path.join(cov, "xla", PROBED)
    new, orig = load_yaml(target), load_yaml(os.path.join(XLA, PROBED))
    assert new["ops"] == orig["ops"] and new["summary"] == orig["summary"]  # the data arrived whole
    (c,) = new["provenance"]["contributed"]
    assert c["source"] == "XLA team" and len(c["date"]) == 10 and len(c["sha256"]) == 64
    assert opcov_here("lint", "--no-catalog", target).returncode == 0
    again = opcov_here("ingest", made, "--coverage", cov)  # the same bundle twice is refused
    assert again.returncode == 2 and "already in" in again.stderr


def _rewrite(src, dst, change):
    b = json.loads(gzip.decompress(open(src, "rb").read()))
    change(b)
    open(dst, "wb").write(gzip.compress(json.dumps(b).encode()))


def _rehash(b):
    b["sha256"] = hashlib.sha256(b["text"].encode()).hexdigest()
    b["bytes"] = len(b["text"].encode())


@pytest.mark.parametrize(
    "name,make,says",
    [
        ("truncated", lambda src, dst: open(dst, "wb").write(open(src, "rb").read()[:-200]), "truncated"),
        ("not gzip", lambda src, dst: open(dst, "w").write("hello"), "not an opcov bundle"),
        (
            "foreign",
            lambda src, dst: open(dst, "wb").write(gzip.compress(b'{"name": "x"}')),
            "not an opcov bundle",
        ),
        (
            "edited cell",
            lambda src, dst: _rewrite(
                src, dst, lambda b: b.update(text=b["text"].replace("fwd: pass", "fwd: mismatch", 1))
            ),
            "tampered bundle: the data is",
        ),
        (
            "edited, hash redone",  # the bundle's hash agrees, the file's own integrity line does not
            lambda src, dst: _rewrite(
                src, dst, lambda b: (b.update(text=b["text"].replace("fwd: pass", "fwd: mismatch", 1)), _rehash(b))
            ),
            "integrity",
        ),
        (
            "other backend",
            lambda src, dst: _rewrite(src, dst, lambda b: b["backend"].update(name="tpu")),
            "backend in the data is 'xla', the bundle says 'tpu'",
        ),
        (
            "host path",
            lambda src, dst: _rewrite(
                src, dst, lambda b: (b.update(text=b["text"].replace("Linux", "/home/alice/x", 1)), _rehash(b))
            ),
            "host path",
        ),
        (
            "newer format",
            lambda src, dst: _rewrite(src, dst, lambda b: b.update(opcov_bundle=2)),
            "bundle format 2",
        ),
    ],
)
def test_a_bad_bundle_is_one_line_and_changes_nothing(made, cov, tmp_path, name, make, says):
    bad = str(tmp_path / "bad.json.gz")
    make(made, bad)
    before = _tree(cov)
    proc = opcov_here("ingest", bad, "--coverage", cov)
    assert proc.returncode == 2, (name, proc.stdout, proc.stderr)
    assert says in proc.stderr, (name, proc.stderr)
    assert len(proc.stderr.strip().splitlines()) == 1, proc.stderr
    assert _tree(cov) == before


def test_a_second_contribution_merges_and_prints_the_diff(made, cov, tmp_path):
    assert opcov_here("ingest", made, "--coverage", cov).returncode == 0
    target = os.path.join(cov, "xla", PROBED)
    # a second machine's run of the same versions, where one cell failed
    doc = load_yaml(target)
    op = next(
        n
        for n, r in sorted(doc["ops"].items())
        if isinstance(r.get("float32"), dict) and r["float32"].get("fwd") == "pass"
    )
    other = str(tmp_path / "other.yaml")
    src = open(os.path.join(XLA, PROBED)).read()
    from opcov.store import data

    odoc = data.load(os.path.join(XLA, PROBED))
    odoc["ops"][op]["float32"]["fwd"] = "mismatch"
    odoc["ops"][op]["float32"]["why"] = "values differ on the other machine"
    data.save(odoc, other)
    assert src  # the bundled file itself is untouched
    b2 = str(tmp_path / "b2.json.gz")
    assert opcov_here("bundle", other, "--source", "lab B", "--out", b2).returncode == 0
    proc = opcov_here("ingest", b2, "--coverage", cov)
    assert proc.returncode == 0, proc.stderr
    assert op in proc.stdout  # the diff names the cell that changed
    merged = load_yaml(target)
    assert merged["ops"][op]["float32"]["fwd"] == "mismatch"  # worst of the runs, as opcov merge
    assert [c["source"] for c in merged["provenance"]["contributed"]] == ["XLA team", "lab B"]


def _restamped(text, old, new):
    """The data text with ``old`` replaced by ``new`` and its integrity line redone: what a careful
    forger sends (every hash agrees)."""
    from opcov.store import data

    body = text.split("\n", 1)[1].replace(old, new, 1)
    return data.stamped(body, int(text.split("ops: ", 1)[1].split(",", 1)[0]) + new.count("\n  aten::"))


def _retarget(b, backend):
    """The bundle rewritten, every hash redone, to claim another backend in its data and its envelope."""
    b["text"] = _restamped(b["text"], "\n  name: xla\n", f"\n  name: '{backend}'\n")
    b["backend"]["name"] = backend
    _rehash(b)


@pytest.mark.parametrize(
    "backend,says",
    [
        ("../outside", "'backend.name' '../outside' holds a path separator '/'"),  # would write beside coverage/
        ("nosuchbackend", "backend 'nosuchbackend' is neither one opcov knows nor one with data"),
    ],
)
def test_a_bundle_for_a_backend_that_is_no_backend_here_writes_nothing(made, cov, tmp_path, backend, says):
    """A bundle whose hashes all agree but whose backend is a path or unknown here is foreign: refused
    before anything is written, inside coverage/ or beside it."""
    bad = str(tmp_path / "bad.json.gz")
    _rewrite(made, bad, lambda b: _retarget(b, backend))
    before, beside = _tree(cov), sorted(os.listdir(os.path.dirname(cov)))
    proc = opcov_here("ingest", bad, "--coverage", cov)
    assert proc.returncode == 2 and says in proc.stderr, proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1, proc.stderr
    assert _tree(cov) == before and sorted(os.listdir(os.path.dirname(cov))) == beside


def test_a_bundle_with_an_op_outside_the_release_is_foreign(made, cov, tmp_path):
    bad = str(tmp_path / "bad.json.gz")

    def change(b):
        from opcov.store import data

        p = str(tmp_path / "probed-torch-2.9.0+cu128-torch_xla-2.9.0.yaml")
        open(p, "w").write(b["text"])
        doc = data.load(p)
        doc["ops"]["aten::not_an_op_in_torch"] = doc["ops"]["aten::abs"]
        b["text"] = data.dumps(doc)  # written by opcov's own writer: every hash agrees
        _rehash(b)

    _rewrite(made, bad, change)
    before = _tree(cov)
    proc = opcov_here("ingest", bad, "--coverage", cov)
    assert proc.returncode == 2, proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1 and _tree(cov) == before
    assert "op aten::not_an_op_in_torch is not in torch 2.9.0+cu128's catalogue" in proc.stderr


OBSERVED = os.path.join(ROOT, "coverage", "observed", "xla", "gpt2.inference.json")


@pytest.fixture(scope="module")
def made_observed(tmp_path_factory):
    """A bundle of a committed observed run ('opcov run gpt2 -b xla'), made on the contributor's machine."""
    out = str(tmp_path_factory.mktemp("obundle") / "gpt2.opcov-bundle.json.gz")
    proc = opcov_here("bundle", OBSERVED, "--source", "TPU lab", "--out", out)
    assert proc.returncode == 0, proc.stderr
    return out


def test_an_observed_run_bundle_ingests_where_check_reads_it(made_observed, cov):
    """The run arrives whole at coverage/observed/BACKEND/MODEL.MODE.json, names its contributor, and
    check's observed evidence names the source."""
    proc = opcov_here("ingest", made_observed, "--coverage", cov)
    assert proc.returncode == 0, proc.stderr
    target = os.path.join(cov, "observed", "xla", "gpt2.inference.json")
    assert f"into {target}" in proc.stdout and "is new: ran" in proc.stdout
    new, orig = json.load(open(target)), json.load(open(OBSERVED))
    assert new["ops"] == orig["ops"] and new["result"] == orig["result"]
    (c,) = new["provenance"]["contributed"]
    assert c["source"] == "TPU lab" and len(c["sha256"]) == 64
    from opcov.verdict import observed

    assert observed.record(new, target)["source"] == "TPU lab"
    again = opcov_here("ingest", made_observed, "--coverage", cov)
    assert again.returncode == 2 and "already in" in again.stderr


def test_a_second_observed_run_replaces_the_first_and_says_what_changed(made_observed, cov, tmp_path):
    assert opcov_here("ingest", made_observed, "--coverage", cov).returncode == 0
    doc = json.load(open(OBSERVED))
    doc["result"] = {"ran": False, "error": "aten::addmm: no kernel"}
    doc["provenance"]["created"] = "2026-12-04T00:00:00+00:00"
    other = str(tmp_path / "gpt2.inference.json")
    open(other, "w").write(json.dumps(doc))
    b2 = str(tmp_path / "b2.json.gz")
    assert opcov_here("bundle", other, "--source", "lab B", "--out", b2).returncode == 0
    proc = opcov_here("ingest", b2, "--coverage", cov)
    assert proc.returncode == 0, proc.stderr
    assert "result: ran -> raised: aten::addmm: no kernel" in proc.stdout
    target = os.path.join(cov, "observed", "xla", "gpt2.inference.json")
    assert json.load(open(target))["provenance"]["contributed"][-1]["source"] == "lab B"


@pytest.mark.parametrize(
    "change,says",
    [
        (
            lambda b: b.update(name="../../x.inference.json"),
            "field 'name' '../../x.inference.json' holds a path separator",
        ),
        (lambda b: b.update(name="x.json"), "not an observed run's MODEL.MODE.json"),
        (lambda b: b.update(name="llama.inference.json"), "file name in the data is 'gpt2.inference.json'"),
        (
            lambda b: b.update(text=b["text"].replace('"evidence": "observed"', '"evidence": "probed"')) or _rehash(b),
            "not a valid observed run",
        ),
        (
            lambda b: b.update(text=b["text"].replace('"aten::addmm"', '"aten::no_such_op"')) or _rehash(b),
            "op aten::no_such_op is not in torch 2.9.0+cu128's catalogue",
        ),
        (lambda b: b.update(text=b["text"][:-40]), "tampered bundle"),
    ],
)
def test_a_bad_observed_bundle_is_one_line_and_changes_nothing(made_observed, cov, tmp_path, change, says):
    bad = str(tmp_path / "bad.json.gz")
    _rewrite(made_observed, bad, change)
    before = _tree(cov)
    proc = opcov_here("ingest", bad, "--coverage", cov)
    assert proc.returncode == 2 and says in proc.stderr, proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1, proc.stderr
    assert _tree(cov) == before
