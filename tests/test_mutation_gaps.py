"""Tests for the bugs scripts/mutation_pass.py planted that the suite let through: each fails with its
mutation in place (the pass's table in docs/CONTRIBUTING.md names them)."""

from __future__ import annotations

import os

import pytest
from test_compile_verdict import cov  # noqa: F401 - the fixture, used by name
from test_planted_bugs import _compiled_mm

from opcov.errors import DataError
from opcov.store import data, layout
from opcov.verdict import compiled, signature


def test_a_difference_that_only_begins_like_a_dtype_note_is_not_one():
    """A mismatch text is a dtype-only note when it says that and nothing more: a value difference on
    another output after it keeps the mismatch (the pattern must match the whole text)."""
    note = "output: dtype int32, cpu gives int64; values equal"
    assert signature.dtype_only(note)
    assert signature.dtype_only("outputs 1: dtype int32, cpu gives int64; values equal")
    assert not signature.dtype_only(note + "; output 1: values differ at index (0,): 1.0, cpu gives 2.0")
    assert not signature.dtype_only("retried: " + note)
    assert not signature.dtype_only("output: dtype int32, cpu gives int64")  # an older text: values not compared


def test_an_aot_autograd_failure_with_the_backends_recipe_fails(cov):  # noqa: F811 - the fixture
    """Dynamo took the model to the end, but AOTAutograd failed with the backend's own decompositions and
    partitioner: the backend cannot compile it (fails), unlike a model Dynamo could not finish (unknown)."""
    doc = _compiled_mm(breaks=0)
    doc["compile"].update(outcome="aot_failed", aot_error="RuntimeError: no decomposition for aten::mm")
    cv = compiled.judge_compiled("c.yaml", doc, "tpu", cov, None)
    assert cv.verdict == "fails", cv.verdict
    assert "AOTAutograd failed" in cv.why and "no decomposition" in cv.why
    doc["compile"]["outcome"] = "failed"
    assert compiled.judge_compiled("c.yaml", doc, "tpu", cov, None).verdict == "unknown"


def test_the_snapshot_of_the_op_sets_own_torch_is_chosen_before_a_newer_release():
    """layout.pick: the op set's own build first, then another build of its release, and only then the newest
    release. Choosing the newest always judged a 2.9 op set on 2.13 data when both were there."""
    from opcov.store import layout

    files = [
        "cov/cpu/registered-torch-2.13.0+cpu.yaml",
        "cov/cpu/registered-torch-2.9.0+cpu.yaml",
        "cov/cpu/registered-torch-2.9.0+cu128.yaml",
    ]
    assert layout.pick(files, "2.9.0+cu128") == files[2]  # its own build, though +cpu is there too
    assert layout.pick(files, "2.9.0+cpu") == files[1]
    assert layout.pick(files[::2], "2.9.0+rocm") == files[2]  # another build of its release
    assert layout.pick(files, "2.13.0") == files[0]
    assert layout.pick(files, "2.10.0") == files[0]  # no snapshot of its release: the newest


def test_the_model_badge_rests_on_the_weakest_evidence_of_its_modes():
    """A model that runs in both modes, one probed and one on a registered claim: the badge is the claim's
    (its icon and colour), never the green of a probed pass."""
    from opcov import vocab
    from opcov.site import render
    from opcov.verdict import judge

    vs = [
        ("inference", judge.BackendVerdict("cpu", "inference", "runs", "probed", [], [], [])),
        ("training", judge.BackendVerdict("cpu", "training", "runs", "registered", [], [], [])),
    ]
    for order in (vs, vs[::-1]):
        value, colour = render.model_badge(order)
        assert colour == render.BADGE_COLOUR["registered"] != render.BADGE_COLOUR["probed"], colour
        assert value.startswith(vocab.evidence_word("registered").icon), value


def test_a_share_badge_is_green_from_95_percent_amber_from_75():
    from opcov.site import render

    green, amber, red = render.BADGE_COLOUR["probed"], render.BADGE_COLOUR["warn"], render.BADGE_COLOUR["fail"]
    assert [render.share_colour(n, 100) for n in (100, 95, 94, 75, 74, 0)] == [green, green, amber, amber, red, red]
    assert render.share_colour(0, 0) == red  # nothing to share: never green
    assert render.share_colour(96, 100, "registered") == render.BADGE_COLOUR["registered"]  # a claim's colour


TPU = os.path.join(layout.DEFAULT_COVERAGE, "tpu", "registered-torch-2.13.0+cpu-torch_tpu-0.2.0.yaml")


def _restamped(tmp_path, change) -> str:
    text = open(TPU, encoding="utf-8").read().split("\n", 1)[1]
    text = change(text)
    path = tmp_path / os.path.basename(TPU)
    path.write_text(data.stamped(text, text.split("\nops:\n", 1)[1].count("\n")))
    return str(path)


def test_a_count_over_the_limit_is_refused_with_its_line(tmp_path):
    """A count in a data file (provenance.kernel_sources) is 0 to 10^15: one over it is refused, not read."""
    path = _restamped(
        tmp_path, lambda t: t.replace("tpu_aten_kernels.cc:364: 673", "tpu_aten_kernels.cc:364: 10000000000000000", 1)
    )
    with pytest.raises(DataError, match="kernel_sources.* must be a count"):
        data.load(path)
    data.load(
        _restamped(
            tmp_path,
            lambda t: t.replace("tpu_aten_kernels.cc:364: 673", "tpu_aten_kernels.cc:364: 1000000000000000", 1),
        )
    )


@pytest.mark.parametrize(
    "change,key",
    [
        (lambda t: t.replace("evidence: registered\n", "evidence: registered\nevidence: probed\n", 1), "evidence"),
        (
            lambda t: t.replace(
                "  dispatch_key: PrivateUse1\n", "  dispatch_key: PrivateUse1\n  dispatch_key: XLA\n", 1
            ),
            "dispatch_key",
        ),
        (lambda t: t.replace("  host:\n", "  host:\n    python: '9'\n", 1), "python"),
    ],
)
def test_a_key_given_twice_in_the_header_is_refused_not_the_last_taken(tmp_path, change, key):
    """YAML keeps the last of a key given twice: opcov refuses it, naming the key (store.data's loader)."""
    with pytest.raises(DataError, match=f"{key}.* given twice"):
        data.load(_restamped(tmp_path, change))


@pytest.mark.parametrize("name,stem", [(".", "_"), ("..", "_."), (".hidden", "_hidden"), ("a.b", "a.b"), ("", "_")])
def test_a_page_name_never_starts_with_a_dot(name, stem):
    """A name is data, never a path: '.', '..' or a hidden file's name becomes a plain page name."""
    from opcov.site import render

    assert render._safe(name) == stem
    assert not render.op_stem(f"{name}::x").startswith(".")


def test_names_that_differ_only_in_case_get_their_own_pages():
    from opcov.site import render

    paths = render.unique_paths(["aten::Abs", "aten::abs", "aten::ABS", "aten::neg"], "ops", render.op_stem)
    assert len(set(paths.values())) == 4
    assert len({p.lower() for p in paths.values()}) == 4  # distinct on a disk that folds case too


def test_an_unstamped_file_cut_at_a_line_end_is_refused_by_its_summary(tmp_path):
    """With no integrity line, a file cut between two op lines parses: its summary's op count says it is
    short (fewer ops than counted), and it is refused."""
    text = open(TPU, encoding="utf-8").read().split("\n", 1)[1]
    lines = text.splitlines(keepends=True)
    path = tmp_path / os.path.basename(TPU)
    path.write_text("".join(lines[:-2]))
    with pytest.raises(DataError, match="summary counts"):
        data.load(str(path))
