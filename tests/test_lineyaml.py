"""lineyaml reads opcov's one-op-per-line YAML exactly as PyYAML does, or hands the file to PyYAML."""

import glob
import os

import pytest
import yaml
from conftest import ROOT, SLICE

from opcov.errors import DataError
from opcov.store import data, lineyaml


def pyyaml(path, loader=yaml.SafeLoader):
    with open(path) as f:
        return yaml.load(f, Loader=loader)


TRICKY = [
    "no",
    "on",
    "OFF",
    "null",
    "~",
    "",
    "1e3",
    "1.0e-06",
    "0x1F",
    "1_000",
    "012",
    "12:30",
    "2026-01-01",
    ".5",
    ".inf",
    "-",
    "-1",
    "- x",
    "a: b",
    "a:b",
    "x #y",
    "#x",
    "a, b",
    "[x]",
    "{x}",
    "it's",
    '"q"',
    "tab\there",
    "caf\u00e9",
    "smile \U0001f600",
    "nel\x85",
    "bell\x07",
    "back\\slash",
    "\u2028",
    "aten::add.Tensor",
    "nn.functional.relu|float32|3",
    "?x",
    ":x",
    "&a",
    "*a",
    "!x",
    "%x",
    "@x",
    "`x",
    "|x",
    ">x",
    "trailing ",
    " leading",
    "a  b",
]


def write(tmp_path, ops):
    doc = {
        "schema_version": 1,
        "evidence": "registered",
        "backend": {"name": "x"},
        "provenance": {"torch": "2.13.0", "command": "c", "created": "t"},
        "ops": ops,
    }
    path = str(tmp_path / "f.yaml")
    with open(path, "w") as f:
        f.write(data.dumps(doc))
    return path


def test_every_bundled_file_reads_as_pyyaml_reads_it():
    # every backend's file, and the op sets of a slice of the zoo (~1,200 in all)
    models = os.path.join(ROOT, "coverage", "models")
    files = sorted(
        f
        for f in glob.glob(os.path.join(ROOT, "coverage", "**", "*.yaml"), recursive=True)
        if not f.startswith(models + os.sep) or os.path.basename(os.path.dirname(f)) in SLICE
    )
    fast = 0
    for path in files:
        doc = lineyaml.parse(path)
        if doc is not None:
            assert doc == pyyaml(path, getattr(yaml, "CSafeLoader", yaml.SafeLoader)), path  # libyaml: 5x faster
            fast += 1
    assert fast >= 3  # the registered scans take the fast path


def test_tricky_scalars_come_out_as_pyyaml_types_them(tmp_path):
    ops = {
        f"aten::op{i}": {
            "why": s,
            "via": [s, s + "z"],
            "n": i,
            "f": i / 7,
            "neg": -i,
            "b": bool(i % 2),
            "none": None,
            "nested": {"k": s, "e": []},
        }
        for i, s in enumerate(TRICKY)
    }
    path = write(tmp_path, ops)
    doc = lineyaml.parse(path)
    assert doc is not None  # none of these needs PyYAML
    assert doc == pyyaml(path)
    assert doc["ops"]["aten::op0"]["why"] == "no" and doc["ops"]["aten::op6"]["why"] == "1e3"


def test_a_record_over_several_lines_goes_to_pyyaml(tmp_path):
    rec = {"fwd": "kernel", "res": "registered", "bwd": "none", "bwd_res": "not_applicable"}
    path = write(tmp_path, {"aten::a": dict(rec, why="line\nbreak"), "aten::b": dict(rec, why="x")})
    assert len(open(path).read().splitlines()) > 11  # the writer folded the string over lines
    assert lineyaml.parse(path) is None
    assert lineyaml.load(path)["ops"]["aten::a"]["why"] == "line\nbreak"


def test_each_tricky_scalar_alone(tmp_path):
    for i, s in enumerate(TRICKY):
        path = write(tmp_path, {"aten::x": {"why": s}, f"aten::{i}": {"v": [s]}})
        assert lineyaml.parse(path) in (None, pyyaml(path)), repr(s)


def test_yaml_beyond_the_layout_goes_to_pyyaml_with_its_errors(tmp_path):
    path = write(tmp_path, {"aten::a": {"err": [1.0, 2.0]}})
    text = open(path).read()
    anchored = text.replace("{err: [1.0, 2.0]}", "{err: &id001 [1.0, 2.0]}") + "  aten::b: {err: &id001 [1.0, 2.0]}\n"
    with open(path, "w") as f:
        f.write(anchored)
    assert lineyaml.parse(path) is None
    line = anchored[: anchored.index("&id001")].count("\n") + 1
    with pytest.raises(DataError, match=rf"f\.yaml:{line}: error: YAML anchor or alias"):
        lineyaml.load(path)
    with open(path, "w") as f:  # the layout, but not YAML: PyYAML's error, with its line
        f.write(text.replace("{err: [1.0, 2.0]}", "{err: [1.0, 2.0]"))
    assert lineyaml.parse(path) is None
    with pytest.raises(DataError, match=r"f\.yaml:\d+: error: not valid YAML"):
        lineyaml.load(path)


def test_load_validates_like_data_load(tmp_path):
    path = write(
        tmp_path, {"aten::mm": {"fwd": "kernal", "res": "registered", "bwd": "formula", "bwd_res": "registered"}}
    )
    with pytest.raises(DataError, match=r"f\.yaml:\d+: error: aten::mm: fwd is 'kernal'"):
        lineyaml.load(path)


def test_random_strings_and_numbers_match_pyyaml(tmp_path):
    import random

    rng = random.Random(6)
    alphabet = "ab:_-.,#'\"[]{}|&*!?%@` \t\\/0123456789eE+xyYnN~=<\u00e9\u2028"
    ops = {}
    for i in range(1500):
        s = "".join(rng.choice(alphabet) for _ in range(rng.randint(0, 12)))
        ops[f"aten::r{i}"] = {
            "s": s,
            "l": [s, rng.choice(["no", "1.5", "-0", "007"])],
            "x": rng.uniform(-1e9, 1e9),
            "i": rng.randint(-(10**12), 10**12),
        }
    path = write(tmp_path, ops)
    doc = lineyaml.parse(path)
    assert doc is not None and doc == pyyaml(path)


def test_reading_a_few_ops_gives_their_records_and_the_header_without_summary():
    """What opcov check reads: the named ops only (absent ones simply missing), the same records
    as a full read, whether the file takes the fast path or the full parse (a multi-line record)."""
    path = os.path.join(ROOT, "coverage", "meta", "probed-torch-2.13.0+cpu.yaml")
    names = ["aten::mm", "aten::_to_copy", "aten::no_such_op"]
    few = lineyaml.load(path, names, summary=False)
    full = pyyaml(path, getattr(yaml, "CSafeLoader", yaml.SafeLoader))  # the whole file: libyaml, 5x faster
    assert set(few["ops"]) == {"aten::mm", "aten::_to_copy"}
    assert few["ops"]["aten::mm"] == full["ops"]["aten::mm"] and few["backend"] == full["backend"]
    assert "summary" not in few and "summary" in lineyaml.load(path, names)


def test_reading_a_few_ops_of_a_hand_edited_file(tmp_path):
    rec = {"fwd": "kernel", "res": "registered", "bwd": "none", "bwd_res": "not_applicable"}
    path = write(tmp_path, {"aten::a": dict(rec, why="line\nbreak"), "aten::b": dict(rec, why="x")})
    assert lineyaml.load(path, ["aten::a"])["ops"] == {"aten::a": dict(rec, why="line\nbreak")}


def test_op_set_lines_read_by_the_fast_pattern_are_what_pyyaml_reads():
    # an op set's op line has one layout (phase -> dtype -> {calls, grad, seen, shape}); lines in it are
    # read by a pattern, others by the tokenizer: either way as PyYAML reads them
    shapes = ["[2, 16]", "", "it's", "a: b", "#x", "x #y", "[1], [2, 3]", "''", "tab\there", "caf\u00e9"]
    dtypes = ["float32", "bfloat16", "null", "true", "on", "y", "no", "int64x", "Float32", "1"]
    resolvers = lineyaml._resolvers()
    fast = 0
    for i, (shape, dtype) in enumerate(zip(shapes * 2, dtypes + dtypes[::-1])):
        cell = {
            "calls": i + 1,
            **({"grad": True} if i % 2 else {}),
            **({"seen": "both"} if i % 3 else {}),
            **({"shape": shape} if i % 4 != 3 else {}),
        }
        value = {
            "forward": {dtype: cell, "int64": {"calls": 2}},
            **({"backward": {dtype: dict(cell)}} if i % 2 else {}),
        }
        text = yaml.safe_dump(value, default_flow_style=True, width=float("inf"), allow_unicode=True).strip()
        assert lineyaml._op_line(text, resolvers, {}) == yaml.safe_load(text), text
        fast += lineyaml._opset_line(text) is not None
    assert 5 <= fast < 20  # the usual layout took the pattern; the odd dtypes and quoting the tokenizer
    assert lineyaml._opset_line("{forward: {float32: {calls: 1}}}") == {"forward": {"float32": {"calls": 1}}}
    for odd in (
        "{forward: {null: {calls: 1}}}",
        "{forward: {float32: {calls: 0}}}",
        "{forward: {float32: {grad: true, calls: 1}}}",
        "{forward: {float32: {calls: 1, grad: false}}}",
    ):
        assert lineyaml._opset_line(odd) is None, odd


def test_coverage_lines_read_in_one_go_as_json_or_else_line_by_line():
    # a coverage file's op lines are read together through JSON; where JSON would read them otherwise
    # than YAML (a key YAML types, a trailing comma, a quote or a comma that would join or split lines)
    # the whole block goes line by line
    resolvers = lineyaml._resolvers()
    usual = [
        "{fwd: kernel, tags: [core, pointwise], via: ['aten::add.out']}",
        "{a: 1.0e-06, b: [0.0, -1], c: null}",
        "{x: 'it''s', y: \"caf\\xE9\", z: yes, w: ~}",
        "plain",
        "[]",
    ]
    assert lineyaml._as_json(usual, resolvers, {}) == [yaml.safe_load(t) for t in usual]
    for odd in (
        ["{a: 1}", "'b", "c'"],
        ["{a: 1}", "b, c", "'d", "e'"],
        ["{1: x}"],
        ["{true: x}"],
        ["{null: x}"],
        ["{a: b,}"],
        ["{a: &x b}"],
        ["{a: b #c}"],
        ["{a: [b, c], d}"],
        ["{a: b: c}"],
        [""],
    ):
        assert lineyaml._as_json(odd, resolvers, {}) is None, odd
