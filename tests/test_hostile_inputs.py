"""Hostile data files (issue 15): every reader refuses them with one line naming file (and line).

Classes: YAML anchors and aliases ("billion laughs"), values of the wrong type where plain scalars
belong, files over the size limit, bytes that are not UTF-8 (and characters YAML forbids). Each bad
file goes through the real CLI: lint reports it as a problem (exit 1, as for any invalid file);
summary, check, diff and site stop with one line on stderr and exit 2, never a traceback.
"""

import datetime
import os
import re
import shutil

import pytest
from conftest import ROOT, opcov_here, run_opcov

from opcov.errors import DataError, OpcovError
from opcov.store import data, lineyaml, opset
from opcov.store.lint import lint_files

COV = "cpu/registered-torch-2.13.0+cpu.yaml"
MODEL = "models/tiny/inference.yaml"
LAUGHS = 6  # levels of 9x aliases: 9**6 values once expanded (harmless here, refused anyway)


def coverage_doc():
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
        "provenance": {
            "torch": "2.13.0+cpu",
            "command": "opcov scan cpu",
            "created": "2026-01-01T00:00:00+00:00",
            "settings": {"mode": "eager"},
        },
        "summary": {},
        "ops": {
            "aten::mm": {
                "fwd": "kernel",
                "res": "registered",
                "bwd": "formula",
                "bwd_res": "registered",
                "bwd_via": ["aten::mm"],
                "why": "layout.has_value() && *layout == kSparse",
            },
            "aten::add.Tensor": {"fwd": "kernel", "res": "registered", "bwd": "formula", "bwd_res": "registered"},
        },
    }


def opset_doc():
    return {
        "schema_version": 1,
        "kind": "opset",
        "model": {"name": "tiny", "config": {"hidden": 8}},
        "mode": "inference",
        "dtype": "float32",
        "provenance": {
            "torch": "2.13.0+cpu",
            "opcov": "0.2.0",
            "created": "2026-01-01T00:00:00+00:00",
            "command": "opcov trace tiny",
        },
        "ops": {"aten::mm": {"forward": {"float32": {"calls": 2}}}},
    }


@pytest.fixture(scope="module")
def base(tmp_path_factory):
    """A coverage folder every command accepts: one registered file for cpu, one op set."""
    root = tmp_path_factory.mktemp("cov")
    data.save(coverage_doc(), str(root / COV))
    opset.save(opset_doc(), str(root / MODEL))
    return root


def laughs(indent: str) -> str:
    """A "billion laughs" block of mapping entries, one level of aliases per line."""
    lines = [f"{indent}l0: &l0 [x, x, x, x, x, x, x, x, x]"]
    for i in range(1, LAUGHS + 1):
        lines.append(f"{indent}l{i}: &l{i} [" + ", ".join([f"*l{i - 1}"] * 9) + "]")
    return "\n".join(lines) + "\n"


def line_of(raw: bytes, marker: bytes) -> int:
    return raw[: raw.index(marker)].count(b"\n") + 1


# Each case: (file, edit(raw bytes) -> bad bytes, marker of the bad line or None, words in the message).
def _sub(old: bytes, new: bytes):
    def edit(raw):
        assert old in raw
        return raw.replace(old, new, 1)

    return edit


def _too_large(raw):
    return None  # written as a sparse file, below


CASES = {
    "laughs in settings": (
        COV,
        _sub(b"  settings:\n    mode: eager\n", b"  settings:\n" + laughs("    ").encode()),
        b"l0: &l0",
        "YAML anchor or alias",
    ),
    "alias in an op line": (
        COV,
        _sub(b"bwd_via: ['aten::mm']", b"bwd_via: *v"),
        b"bwd_via: *v",
        "YAML anchor or alias",
    ),
    "anchor in another op": (
        COV,
        _sub(
            b"{bwd: formula, bwd_res: registered, fwd: kernel, res: registered}",
            b"{bwd: formula, bwd_res: registered, fwd: &k kernel, res: registered}",
        ),
        b"&k kernel",
        "YAML anchor or alias",
    ),
    "anchor on a scalar": (COV, _sub(b"  command: opcov", b"  command: &c opcov"), b"&c opcov", "YAML anchor or alias"),
    "list in settings": (
        COV,
        _sub(b"    mode: eager\n", b"    mode: [eager, lazy]\n"),
        b"mode: [eager",
        "provenance.settings.mode must be a plain value",
    ),
    "date for created": (
        COV,
        _sub(b"created: '2026-01-01T00:00:00+00:00'", b"created: 2026-01-01"),
        b"created: 2026",
        "provenance.created must be a string",
    ),
    "mapping for a note": (
        COV,
        _sub(b"  command: opcov scan cpu\n", b"  command: opcov scan cpu\n  notes: [{a: b}]\n"),
        b"notes:",
        "provenance.notes must be a list of strings",
    ),
    "integer of 5,000 digits": (
        COV,
        _sub(b"'aten::mm'], fwd: kernel", b"'aten::mm'], fwd: " + b"9" * 5000),
        b"9999",
        "digits",
    ),
    "not UTF-8 in an op line": (
        COV,
        _sub(b"aten::mm: {", b"aten::mm: {why2: caf\xe9, "),
        b"caf\xe9",
        "not UTF-8 (byte 0xe9)",
    ),
    "not UTF-8 in the header": (COV, _sub(b"name: cpu", b"name: c\xffpu"), b"c\xffpu", "not UTF-8 (byte 0xff)"),
    "NUL character": (COV, _sub(b"package: torch", b"package: to\x00rch"), b"to\x00rch", "U+0000 is not allowed"),
    "too large": (COV, _too_large, None, f"over the {data.MAX_FILE_BYTES >> 20} MiB limit"),
    "op set: laughs in model config": (
        MODEL,
        _sub(b"  config:\n    hidden: 8\n", b"  config:\n" + laughs("    ").encode()),
        b"l0: &l0",
        "YAML anchor or alias",
    ),
    "op set: not UTF-8": (MODEL, _sub(b"aten::mm", b"aten::m\xc3m"), b"aten::m\xc3m", "not UTF-8 (byte 0xc3)"),
    "op set: number for torch": (
        MODEL,
        _sub(b"torch: 2.13.0+cpu", b"torch: 2.13"),
        b"torch: 2.13",
        "provenance.torch must be a string",
    ),
    "op set: too large": (MODEL, _too_large, None, "MiB limit for an opcov data file"),
}


def make_bad(base, tmp_path, case):
    """A copy of the base folder with one file made bad; (folder, bad file, expected 'file:line' or 'file')."""
    rel, edit, marker, _ = CASES[case]
    root = tmp_path / "cov"
    shutil.copytree(base, root)
    path = root / rel
    raw = path.read_bytes()
    if edit is _too_large:
        with open(path, "r+b") as f:  # sparse: no disk used, and a reader that checks first reads none of it
            f.truncate(data.MAX_FILE_BYTES + 1)
        return root, path, f"{path}: error: "
    bad = edit(raw)
    path.write_bytes(bad)
    return root, path, f"{path}:{line_of(bad, marker)}: error: "


def assert_refused(proc, where, words):
    """Exit 2 and one line on stderr naming the file (and line) and the problem; no traceback."""
    assert "Traceback" not in proc.stderr + proc.stdout, proc.stderr[-2000:]
    assert proc.returncode == 2, (proc.returncode, proc.stdout[-500:], proc.stderr[-500:])
    assert proc.stderr.count("\n") == 1, proc.stderr
    assert where in proc.stderr and words in proc.stderr, proc.stderr


def assert_linted(proc, where, words):
    """lint lists the problem (file:line) among its findings and exits 1; no traceback."""
    assert "Traceback" not in proc.stderr + proc.stdout, proc.stderr[-2000:]
    assert proc.returncode == 1, (proc.returncode, proc.stdout[-500:], proc.stderr[-500:])
    assert any(line.startswith(where) and words in line for line in proc.stdout.splitlines()), proc.stdout


def test_the_base_folder_passes_every_command(base, tmp_path):
    cov, model = str(base / COV), str(base / MODEL)
    assert opcov_here("lint", "--no-catalog", cov, model).returncode == 0
    assert opcov_here("summary", "--format", "json", cov).returncode == 0
    assert opcov_here("check", model, "-b", "cpu", "--coverage", str(base)).returncode == 0
    assert opcov_here("diff", cov, cov).returncode == 0
    proc = run_opcov("site", "--coverage", str(base), "--out", str(tmp_path / "site"))
    assert proc.returncode == 0, proc.stderr


@pytest.mark.parametrize("case", [c for c in CASES if CASES[c][0] == COV])
def test_bad_coverage_file_through_every_command(base, tmp_path, case):
    root, path, where = make_bad(base, tmp_path, case)
    words = CASES[case][3]
    good, model = str(base / COV), str(root / MODEL)
    assert_linted(opcov_here("lint", "--no-catalog", str(path)), where, words)
    assert_refused(opcov_here("summary", str(path)), where, words)
    assert_refused(opcov_here("check", model, "-b", "cpu", "--coverage", str(root)), where, words)
    assert_refused(opcov_here("diff", str(path), good), where, words)
    assert_refused(run_opcov("site", "--coverage", str(root), "--out", str(tmp_path / "site")), where, words)


@pytest.mark.parametrize("case", [c for c in CASES if CASES[c][0] == MODEL])
def test_bad_op_set_through_every_command(base, tmp_path, case):
    root, path, where = make_bad(base, tmp_path, case)
    words = CASES[case][3]
    assert_linted(opcov_here("lint", "--no-catalog", str(path)), where, words)
    assert_refused(opcov_here("check", str(path), "-b", "cpu", "--coverage", str(root)), where, words)
    assert_refused(run_opcov("site", "--coverage", str(root), "--out", str(tmp_path / "site")), where, words)


# ---------------------------------------------------------------- the readers, in process


def write_bytes(tmp_path, raw: bytes) -> str:
    path = tmp_path / "f.yaml"
    path.write_bytes(raw)
    return str(path)


def saved(tmp_path, doc=None) -> bytes:
    path = tmp_path / "saved.yaml"
    data.save(doc or coverage_doc(), str(path))
    return path.read_bytes()


def test_every_reader_refuses_anchors_and_aliases_with_their_line(tmp_path):
    raw = saved(tmp_path)
    for old, new, marker in (
        (b"bwd_via: ['aten::mm']", b"bwd_via: *v", b"*v"),
        (b"  command: opcov", b"  command: &c opcov", b"&c"),
        (b"    mode: eager\n", laughs("    ").encode(), b"&l0"),
    ):
        bad = raw.replace(old, new, 1)
        path = write_bytes(tmp_path, bad)
        line = line_of(bad, marker)
        for read in (
            data.load,
            lineyaml.load,
            lambda p: lineyaml.load(p, ["aten::mm"], summary=False),
            lambda p: lineyaml.load(p, ["aten::add.Tensor"], summary=False),
        ):
            with pytest.raises(DataError, match=rf"f\.yaml:{line}: error: YAML anchor or alias"):
                read(path)
        assert lineyaml.parse(path) is None
        problems = [str(p) for p in lint_files([path], check_catalog=False)]
        assert len(problems) == 1 and f"f.yaml:{line}: error: YAML anchor or alias" in problems[0]


def test_anchor_look_alikes_are_data_and_keep_the_fast_path(tmp_path):
    """'&&', '*layout' in quoted or plain scalars are not anchors: read as before, by the fast reader."""
    doc = coverage_doc()
    doc["ops"]["aten::add.Tensor"]["why"] = "a *b & c, [&x] {*y}"
    doc["ops"]["aten::add.Tensor"]["via"] = ["*star", "&amp", "x &y"]
    doc["provenance"]["notes"] = ["&first", "*also", "plain &middle"]
    path = write_bytes(tmp_path, saved(tmp_path, doc))
    assert data.anchor_candidates(open(path).read())  # the quick test cannot tell: libyaml decides
    assert data.anchor_line(open(path).read()) is None
    fast = lineyaml.parse(path)  # as YAML gives it: with the integrity line, which load drops
    assert fast.pop(data.INTEGRITY)["ops"] == 2 and fast == data.load(path) == doc
    assert lineyaml.load(path, ["aten::mm"], summary=False)["ops"] == {"aten::mm": doc["ops"]["aten::mm"]}


def test_bundled_registered_files_take_the_fast_path_despite_look_alikes():
    path = os.path.join(ROOT, "coverage", "tpu", "registered-torch-2.13.0+cpu-torch_tpu-0.2.0.yaml")
    text, problem = data.read_text(path)
    assert problem is None and data.anchor_candidates(text) and data.anchor_line(text) is None
    assert lineyaml.parse(path) is not None


def test_size_is_checked_before_reading(tmp_path, monkeypatch):
    raw = saved(tmp_path)
    path = write_bytes(tmp_path, raw)
    monkeypatch.setattr(data, "MAX_FILE_BYTES", len(raw) - 1)
    for read in (data.load, lineyaml.load, opset.load):
        with pytest.raises(DataError, match=rf"f\.yaml: error: 0\.0 MiB \({len(raw)} bytes\), over the 0 MiB limit"):
            read(path)
    monkeypatch.setattr(data, "MAX_FILE_BYTES", len(raw))
    assert data.load(path) == coverage_doc()


def test_not_a_regular_file_is_refused_without_reading(tmp_path):
    fifo = tmp_path / "f.yaml"
    os.mkfifo(fifo)  # reading it would block for ever
    with pytest.raises(DataError, match="f.yaml: error: not a regular file"):
        data.load(str(fifo))


def test_a_bundle_that_is_no_regular_file_is_refused_without_waiting(tmp_path):
    """'opcov ingest FIFO' waited for a writer for ever (the corpus killed it after 60 s)."""
    from opcov.store import bundle

    fifo = tmp_path / "b.opcov-bundle.json.gz"
    os.mkfifo(fifo)
    for path in (str(fifo), "/dev/zero"):
        with pytest.raises(OpcovError, match="not a regular file"):
            bundle.read(path)


def test_bad_bytes_name_their_line(tmp_path):
    raw = saved(tmp_path)
    for old, new, words in (
        (b"name: cpu", b"name: c\xffpu", "not UTF-8 (byte 0xff)"),
        (b"fwd: kernel", b"fwd: ker\xed\xa0\x80nel", "not UTF-8 (byte 0xed)"),  # a surrogate
        (b"package: torch", b"package: to\x07rch", "character U+0007 is not allowed"),
        (b"fwd: kernel", b"fwd: ker\xc2\x9fnel", "character U+009F is not allowed"),
        (b"name: cpu", b"name: c\xef\xbf\xbepu", "character U+FFFE is not allowed"),
    ):
        bad = raw.replace(old, new, 1)
        path = write_bytes(tmp_path, bad)
        for read in (data.load, lineyaml.load, opset.load):
            with pytest.raises(DataError, match=rf"f\.yaml:{line_of(bad, new)}: error: {re.escape(words)}"):
                read(path)
    doc = coverage_doc()
    doc["provenance"]["settings"]["mode"] = "caf\u00e9 \u2028 \U0001f600 \ufeff \x85"
    path = write_bytes(tmp_path, saved(tmp_path, doc))
    assert "caf\u00e9" in open(path, encoding="utf-8").read()
    assert data.load(path) == lineyaml.load(path) == doc


def test_values_python_cannot_make_are_yaml_errors_with_their_line(tmp_path):
    raw = saved(tmp_path)
    for old, new, words in (
        (b"'aten::mm'], fwd: kernel", b"'aten::mm'], fwd: " + b"1" * 5000, "digits"),
        (b"created: '2026-01-01T00:00:00+00:00'", b"created: 2026-13-45", "month must be in 1..12"),
    ):
        bad = raw.replace(old, new, 1)
        path = write_bytes(tmp_path, bad)
        for read in (data.load, lineyaml.load, lambda p: lineyaml.load(p, ["aten::mm"], summary=False)):
            with pytest.raises(DataError, match=rf"f\.yaml:{line_of(bad, new)}: error: not valid YAML: .*{words}"):
                read(path)


def test_header_values_are_typed(tmp_path):
    cases = [
        ("provenance", "settings", {"a": [1]}, "provenance.settings.a must be a plain value"),
        ("provenance", "settings", ["a"], "provenance.settings must be a mapping of names to plain values"),
        ("provenance", "host", "x", "provenance.host must be a mapping"),
        ("provenance", "kernel_sources", {"a.cc:1": True}, "provenance.kernel_sources.a.cc:1 must be a count"),
        ("provenance", "probe", {"when": datetime.date(2026, 1, 1)}, "provenance.probe must be plain data"),
        ("provenance", "opcov", 0.2, "provenance.opcov must be a string"),
        ("backend", "version", 2, "backend.version must be a string"),
        ("backend", "name", None, "backend lacks 'name'"),
    ]
    for section, key, value, words in cases:
        doc = coverage_doc()
        doc[section][key] = value
        assert any(words in str(p) for p in data.validate(doc, "f.yaml")), (key, value)
    doc = coverage_doc()
    doc["summary"] = {"aten": {"x": {"y": {"z": {"w": {"v": {"u": {"t": {"s": {"r": {"q": {"p": {"o": 1}}}}}}}}}}}}}
    assert any("summary must be a mapping of plain data" in str(p) for p in data.validate(doc, "f.yaml"))
    assert data.validate(coverage_doc(), "f.yaml") == []


def test_op_set_values_are_typed(tmp_path):
    cases = [
        (("model", "name"), ["tiny"], "model.name must be a string"),
        (("model", "config"), {"when": {1, 2}}, "model.config must be plain data"),
        (("provenance", "notes"), "one note", "provenance.notes must be a list of strings"),
        (("provenance", "traced_on"), 3, "provenance.traced_on must be a string"),
        (("dtype",), 16, "dtype must be a name"),
        (("autocast",), ["bfloat16"], "autocast must be a name, or null"),
        (("ops", "aten::mm", "forward"), {1: {"calls": 2}}, "dtype key 1 is not a dtype name"),
        (("parents",), {7: {"forward": {"float32": {"calls": 1}}}}, "parent name 7 is not"),
    ]
    for keys, value, words in cases:
        doc = opset_doc()
        at = doc
        for k in keys[:-1]:
            at = at[k]
        at[keys[-1]] = value
        problems = [str(p) for p in opset.validate(doc, "f.yaml")]
        assert any(words in p for p in problems), (keys, problems)
    assert opset.validate(opset_doc(), "f.yaml") == []


def test_problems_are_one_line_even_when_the_file_holds_line_breaks(tmp_path):
    path = write_bytes(tmp_path, saved(tmp_path) + b'  "aten::m\\nm": {fwd: kernel}\n')
    with pytest.raises(DataError) as info:
        data.load(path)
    assert "\n" not in str(info.value) and "aten::m m: missing 'res'" in str(info.value)
    assert str(data.Problem("a\nb.yaml", 3, "x\ny")) == "a b.yaml:3: error: x y"
