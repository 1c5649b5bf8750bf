"""Adding a backend is its record plus its data (docs/adding-a-backend.md): a backend opcov does not ship,
described by a record in a temporary folder (a TOML file named by OPCOV_BACKEND_RECORDS) with a small
registered file beside it, is listed by ``opcov backends``, judged by ``opcov check`` and shown by the site,
and what its record says (its CPU fallback's switch) reaches the verdict's fix on both."""

import json
import os

import pytest
from conftest import opcov_here, run_opcov
from test_check import TORCH, kernel, model, registered

from opcov import backends
from opcov.store import data, opset

RECORD = """
[[backend]]
name = "acme"
device_type = "acme"
dispatch_key = "PrivateUse1"
package = "acme-torch"
module = "acme_torch"
note = "Acme NPU, described by a record in a test's folder"
setup = "pip install acme-torch: the scan needs no NPU, the probe runs on one"
vendor = "Acme"

[backend.fallback]
kind = "cpu"
switch = "ACME_CPU_FALLBACK=1"
"""
FIX = "enable the CPU fallback (ACME_CPU_FALLBACK=1)"


@pytest.fixture
def added(tmp_path):
    """(records file, coverage folder, op set path): acme's record, its registered data (a kernel for mm, only
    the CPU fallback, disabled, for cholesky) and a model calling both."""
    records = tmp_path / "backends.toml"
    records.write_text(RECORD)
    cov = tmp_path / "coverage"
    ops = {
        "aten::mm": kernel(),
        "aten::cholesky": {"fwd": "fallback", "res": "fallback", "bwd": "formula", "bwd_res": "fallback"},
    }
    data.save(registered("acme", ops=ops), str(cov / "acme" / f"registered-torch-{TORCH}-fakepkg-1.0.yaml"))
    doc = model(
        {"aten::mm": {"forward": {"float32": {"calls": 1}}}, "aten::cholesky": {"forward": {"float32": {"calls": 2}}}},
        mode="inference",
    )
    path = cov / "models" / "tiny" / "inference.yaml"
    opset.save(doc, str(path))
    return str(records), str(cov), str(path)


def test_the_record_is_read_from_the_file(added, monkeypatch):
    monkeypatch.setenv(backends.RECORDS_ENV, added[0])
    acme = backends.get_backend("acme")
    assert (acme.dispatch_key, acme.module, acme.fallback) == (
        "PrivateUse1",
        "acme_torch",
        backends.Fallback("cpu", None, "ACME_CPU_FALLBACK=1"),
    )
    assert [b.name for b in backends.known_backends()][-1] == "acme"
    assert backends.fallback_kind(acme) == ("cpu", None)


def test_a_bad_record_is_one_line_naming_the_file(tmp_path, monkeypatch):
    bad = tmp_path / "bad.toml"
    bad.write_text('[[backend]]\nname = "x"\ndevice_type = "x"\ndispatch_key = "PrivateUse1"\ncolour = "red"\n')
    monkeypatch.setenv(backends.RECORDS_ENV, str(bad))
    with pytest.raises(Exception, match=r"bad\.toml: backend 1: unknown field\(s\) colour"):
        backends.known_backends()


def test_opcov_backends_lists_it(added):
    r = opcov_here("backends", "--format", "json", OPCOV_BACKEND_RECORDS=added[0])
    assert r.returncode == 0, r.stderr
    row = {b["name"]: b for b in json.loads(r.stdout)}["acme"]
    assert row["note"] == "Acme NPU, described by a record in a test's folder"
    assert row["commands"] == ["opcov scan acme --import acme_torch", "opcov probe acme --import acme_torch"]
    r = opcov_here("backends", OPCOV_BACKEND_RECORDS=added[0])
    assert "acme" in r.stdout and "pip install acme-torch" in r.stdout  # not installed here: how to make its data


def test_check_judges_it_with_its_record(added):
    records, cov, path = added
    r = opcov_here("check", path, "-b", "acme", "--coverage", cov, OPCOV_BACKEND_RECORDS=records)
    assert r.returncode == 1, r.stdout + r.stderr  # cholesky reaches only a disabled fallback
    assert "FAIL     aten::cholesky" in r.stdout and f"fix: {FIX}" in r.stdout
    bare = opcov_here("check", path, "-b", "acme", "--coverage", cov)  # its data alone: judged, no switch to name
    assert bare.returncode == 1 and FIX not in bare.stdout and "fix: enable the CPU fallback: " in bare.stdout


def test_the_site_shows_it(added, tmp_path):
    records, cov, _ = added
    out = str(tmp_path / "site")
    r = run_opcov("site", "--coverage", cov, "--out", out, OPCOV_BACKEND_RECORDS=records)
    assert r.returncode == 0, r.stderr
    assert os.path.exists(os.path.join(out, "backends", "acme.html"))  # its page, from its data
    with open(os.path.join(out, "models", "tiny.html"), encoding="utf-8") as f:
        page = f.read()
    assert "acme" in page and "ACME_CPU_FALLBACK=1" in page  # the model's verdict on it, with its record's fix
