"""A backend records file (OPCOV_BACKEND_RECORDS) is read as untrusted input (docs/data-safety.md): a key
given twice, nesting past a record's depth, a file over 1 MiB, a device or pipe, a name that is no name, a
built-in's name, a value of the wrong type and a module that exits on import are each one line naming the
file, never a traceback, a hang or a record that quietly changes a backend opcov ships."""

import os

import pytest
from conftest import ROOT, opcov_here, run_opcov
from test_data_safety import one_line_error

from opcov import backends
from opcov.errors import OpcovError

GOOD = '[[backend]]\nname = "acme"\ndevice_type = "acme"\ndispatch_key = "PrivateUse1"\nmodule = "acme_torch"\n'


@pytest.mark.parametrize(
    "name,text,says",
    [
        ("dup.json", '{"backend": [{"name": "acme", "device_type": "acme", "name": "cpu"}]}', "given twice"),
        ("deep.json", '{"backend": ' + "[" * 200_000 + "]" * 200_000 + "}", "nested"),
        ("deep.toml", "x = " + "[" * 5000 + "]" * 5000 + "\n", "nested too deeply"),
        ("tables.toml", "x = " + "{a = " * 5000 + "1" + "}" * 5000 + "\n", "nested too deeply"),
        ("big.toml", "# " + "x" * (2 << 20) + "\n" + GOOD, "over 1 MiB"),
        ("slash.toml", GOOD.replace('name = "acme"', 'name = "x/../../cpu"'), "path separator"),
        ("dots.toml", GOOD.replace('name = "acme"', 'name = ".."'), "path part"),
        ("newline.toml", GOOD.replace('name = "acme"', 'name = "ac\\nme"'), "line break"),
        ("cpu.toml", GOOD.replace('name = "acme"', 'name = "cpu"') + "reference = false\n", "already known (built in)"),
        ("twice.toml", GOOD + GOOD, "already known"),
        ("note.toml", GOOD + "note = 3\n", "note must be text, not int"),
        ("flag.toml", GOOD + 'reference = "yes"\n', "reference must be true or false"),
        ("setup.toml", GOOD + 'setup = "one\\n::error::x"\n', "control character"),
        ("module.toml", GOOD.replace('"acme_torch"', '"../evil"'), "not a Python module name"),
        ("nomodule.toml", GOOD.replace('module = "acme_torch"\n', ""), "names the module that registers it"),
        ("kind.toml", GOOD + '[backend.fallback]\nkind = "sometimes"\n', "fallback.kind"),
        ("deny.toml", GOOD + '[backend.compile]\nbackend = "x"\ndeny = "abc"\n', "compile.deny"),
        ("part.toml", GOOD + '[backend.compile]\nbackend = "x"\npartitioner = "mine"\n', "compile.partitioner"),
        ("lower.toml", GOOD + '[backend.compile]\nbackend = "x"\nlowering = "magic"\n', "compile.lowering"),
        ("rnotes.toml", GOOD + '[backend.compile]\nbackend = "x"\nrecipe_notes = "a"\n', "compile.recipe_notes"),
        ("own.toml", GOOD + 'own_kernels = [["aten::k"]]\n', "own_kernels is a list of [kernel, generic op]"),
        ("lazy.toml", GOOD + '[backend.lazy]\nwhat = "x"\n', "unknown field(s) lazy"),
    ],
)
def test_a_hostile_records_file_is_one_line_naming_it(tmp_path, monkeypatch, name, text, says):
    path = tmp_path / name
    path.write_text(text)
    monkeypatch.setenv(backends.RECORDS_ENV, str(path))
    with pytest.raises(OpcovError) as err:
        backends.known_backends()
    assert str(path) in str(err.value) and says in str(err.value) and "\n" not in str(err.value)


def test_a_records_file_that_is_a_device_a_pipe_or_a_folder_is_never_read(tmp_path, monkeypatch):
    """/dev/zero was read without end, and a pipe with no writer waited for ever."""
    fifo = tmp_path / "records.toml"
    os.mkfifo(fifo)
    for path in ("/dev/zero", str(fifo)):
        monkeypatch.setenv(backends.RECORDS_ENV, path)
        with pytest.raises(OpcovError, match="not a regular file"):
            backends.known_backends()
    monkeypatch.setenv(backends.RECORDS_ENV, str(tmp_path))
    with pytest.raises(OpcovError, match="cannot read"):
        backends.known_backends()


def test_the_known_backends_follow_a_records_file_and_register_between_calls(tmp_path, monkeypatch):
    """known_backends is worked out once and kept (a zoo's judging asks for it per op set and backend):
    a records file named, edited or no longer named, and a record registered, are each seen by the next call."""

    def names():
        return {b.name for b in backends.known_backends()}

    records = tmp_path / "acme.toml"
    records.write_text(GOOD)
    monkeypatch.setattr(backends, "_REGISTERED", [])
    monkeypatch.setenv(backends.RECORDS_ENV, str(records))
    assert "acme" in names()
    records.write_text(GOOD.replace('name = "acme"', 'name = "acme2"'))
    later = os.stat(records).st_mtime_ns + 1_000_000_000  # a new time, however coarse the file system's clock
    os.utime(records, ns=(later, later))
    assert "acme2" in names() and "acme" not in names()
    monkeypatch.delenv(backends.RECORDS_ENV)
    assert not {"acme", "acme2"} & names()
    backends.register(backends.Backend("zeta", "zeta", "PrivateUse1", module="zeta_torch"))
    assert "zeta" in names() and backends.get_backend("zeta").module == "zeta_torch"


def test_every_command_refuses_a_bad_records_file_in_one_line(tmp_path):
    """The parser reads the records (expect's backends): a bad file gave every command a traceback."""
    bad = tmp_path / "bad.toml"
    bad.write_text(GOOD + 'read_settings = "os:system"\n')
    for argv in (["backends"], ["lint", "--no-catalog", str(tmp_path)], ["--version"]):
        one_line_error(run_opcov(*argv, OPCOV_BACKEND_RECORDS=str(bad)), "bad.toml: backend 1: unknown field")


def test_a_good_record_with_no_data_is_a_row_in_check(tmp_path):
    records = tmp_path / "acme.toml"
    records.write_text(GOOD + 'package = "acme-torch"\nsetup = "pip install acme-torch"\n')
    llama = os.path.join(ROOT, "coverage", "models", "llama", "training.yaml")
    proc = opcov_here("check", llama, "-b", "acme", "--strict", OPCOV_BACKEND_RECORDS=str(records))
    assert proc.returncode == 1, proc.stderr
    assert "no data yet" in proc.stdout and "pip install acme-torch" in proc.stdout
    assert "opcov: gate failed: acme (training): no data yet" in proc.stderr


def test_a_backend_module_that_exits_on_import_is_one_line(tmp_path):
    """sys.exit() in a backend's module ended 'opcov scan' with its status and no word."""
    (tmp_path / "exits_on_import.py").write_text("import sys\nsys.exit(3)\n")
    records = tmp_path / "acme.toml"
    records.write_text(GOOD.replace('"acme_torch"', '"exits_on_import"'))
    out = tmp_path / "s.yaml"
    proc = run_opcov(
        "scan",
        "acme",
        "--out",
        str(out),
        OPCOV_BACKEND_RECORDS=str(records),
        PYTHONPATH=os.path.join(ROOT, "src") + os.pathsep + str(tmp_path),
    )
    one_line_error(proc, "importing 'exits_on_import' failed: SystemExit: 3")
    assert not out.exists()
