"""Four bugs an outside review planted one at a time in the code that decides answers, and the suite let
through: each test here fails with its bug in place (scripts/mutation_pass.py plants them again, with the
rest of its list, and docs/CONTRIBUTING.md shows what the suite catches).

(a) a failing probe case with no signature class never matching a model's call (opcov.verdict.signature);
(b) graph breaks with no eager op set not judged 'unknown' (opcov.verdict.compiled);
(c) a bundle tampered with at the same length passing the content hash (opcov.store.bundle.read);
(d) the site's model badge showing the best mode's verdict instead of the worst (opcov.site.render)."""

from __future__ import annotations

import gzip
import hashlib
import json
import os
import shutil

import pytest
from conftest import ROOT, opcov_here
from test_compile_verdict import compiled_doc, cov  # noqa: F401 - cov: the fixture, used by name

from opcov import vocab
from opcov.errors import DataError
from opcov.store import bundle, cells, data
from opcov.verdict import compiled, judge, signature

# ---------------------------------------------------------------- (a) never drop a finding on a guess


def _slot(*failed, ran=("float32:2,float32:2;",), cases=4, fails=1, status="error"):
    return cells.ProbedSlot(status=status, failed=tuple(failed), ran=ran, cases=cases, fails=fails, case="mm|f|0")


@pytest.mark.parametrize(
    "call",
    [
        "float32:2,float32:2;",  # a call named by its signature class
        "[2, 3], [3, 4]",  # a call named by its shapes (an older op set)
    ],
)
def test_a_failing_case_with_no_signature_class_may_be_like_any_call(call):
    """A probe case that recorded no class ('?', or nothing: an older file) is not known to be unlike the
    model's call: it must match it, and its failure count against the call, unless a case of the call's own
    class ran clean (then the classless one was of another class; tests/test_sigclass.py)."""
    assert signature.matches("", call)
    for item in ("error mm|float32|3 ?", "error mm|float32|3"):
        for ran in ((), ("float32:3,float32:2;",)):  # none, or another class than the call's
            judged = signature.by_class(_slot(item, ran=ran), (call,))
            assert judged is not None and judged[0] == "error" and judged[1] == "mm|float32|3", (item, ran, judged)


def test_a_failing_case_of_another_class_does_not_count_against_the_call():
    """The other side of the rule: a case known to be unlike the call is a note, not the call's failure (so
    the test above tells the two apart)."""
    judged = signature.by_class(_slot("error mm|float32|3 float32:0d,float32:0d;"), ("float32:2,float32:2;",))
    assert judged is not None and judged[0] != "error"


def test_a_model_call_meets_a_classless_failure_in_the_verdict():
    """The same rule end to end: a probed file whose only failing case of aten::mm has no class fails a
    model that calls aten::mm (named by class), instead of running."""
    doc = {
        "model": {"name": "m"},
        "mode": "inference",
        "dtype": "float32",
        "provenance": {"torch": "2.13.0+cpu"},
        "calltree": ["1 forward kernel aten::mm float32 x1 | sig=float32:2,float32:2;"],
        "ops": {"aten::mm": {"forward": {"float32": {"calls": 1}}}},
    }
    probed = {
        "backend": {"name": "cpu"},
        "evidence": "probed",
        "provenance": {"torch": "2.13.0+cpu"},
        "ops": {
            "aten::mm": {
                "float32": {"fwd": "error", "case": "mm|float32|3", "cases": 4, "fails": 1, "why": "RuntimeError: x"}
                | {"failed": ["error mm|float32|3 ?"], "ran": ["float32:3,float32:2;"]}  # not the call's class
            }
        },
    }
    coverage = judge.Coverage("cpu", None, probed, ["probed.yaml"])
    verdict = judge.judge(doc, coverage)
    assert verdict.verdict == "fails", verdict


# ---------------------------------------------------------------- (b) graph breaks with no eager op set


def _compiled_mm(breaks: int) -> dict:
    """test_compile_verdict's compiled op set with aten::mm alone: its graphs run on tpu's compile coverage."""
    doc = compiled_doc(breaks=breaks)
    doc["ops"] = {"aten::mm": doc["ops"]["aten::mm"]}
    doc["calltree"] = [n for n in doc["calltree"] if "_aminmax" not in n and "dynamo.graph.1" not in n]
    return doc


def test_graph_breaks_with_no_eager_op_set_leave_the_verdict_unknown(cov):  # noqa: F811 - the fixture
    """The compiled graphs run; at the break the model runs eagerly, on ops no op set names: unknown."""
    doc = _compiled_mm(breaks=1)
    cv = compiled.judge_compiled("c.yaml", doc, "tpu", cov, None)
    assert cv.graphs is not None and cv.graphs.verdict == "runs"  # the graphs alone would run
    assert cv.verdict == "unknown", cv.verdict
    assert any("graph breaks are unknown" in n for n in cv.notes)


def test_no_breaks_and_no_eager_op_set_is_judged_on_the_graphs(cov):  # noqa: F811 - the fixture
    """With no break nothing runs eagerly: the graphs decide (so the test above tells the two apart)."""
    cv = compiled.judge_compiled("c.yaml", _compiled_mm(breaks=0), "tpu", cov, None)
    assert cv.verdict == "runs", cv.verdict


# ---------------------------------------------------------------- (c) a bundle tampered with at the same length

XLA = os.path.join(ROOT, "coverage", "xla")
PROBED = "probed-torch-2.9.0+cu128-torch_xla-2.9.0.yaml"


@pytest.fixture(scope="module")
def made(tmp_path_factory):
    out = str(tmp_path_factory.mktemp("bundle") / "xla.opcov-bundle.json.gz")
    proc = opcov_here("bundle", os.path.join(XLA, PROBED), "--source", "XLA team", "--out", out)
    assert proc.returncode == 0, proc.stderr
    return out


def _same_length_tamper(text: str) -> str:
    """Two cells' statuses swapped ('pass' for 'error' in one, 'error' for 'pass' in another): the same
    number of bytes, every value still valid, and the file's own integrity line made anew, so that only
    the bundle's content hash can tell."""
    body = text.split("\n", 1)[1]
    lines = body.splitlines(keepends=True)
    i = next(k for k, ln in enumerate(lines) if "fwd: pass," in ln)
    j = next(k for k, ln in enumerate(lines) if "fwd: error," in ln)
    lines[i] = lines[i].replace("fwd: pass,", "fwd: error,", 1)
    lines[j] = lines[j].replace("fwd: error,", "fwd: pass,", 1)
    changed = "".join(lines)
    return data.stamped(changed, text.split("\nops:\n", 1)[1].count("\n"))


def test_a_bundle_tampered_at_the_same_length_is_refused_at_the_hash(made, tmp_path):
    b = json.loads(gzip.decompress(open(made, "rb").read()))
    tampered = _same_length_tamper(b["text"])
    assert len(tampered.encode()) == b["bytes"] and tampered != b["text"]
    b["text"] = tampered
    bad = tmp_path / "bad.opcov-bundle.json.gz"
    bad.write_bytes(gzip.compress(json.dumps(b).encode()))
    with pytest.raises(DataError, match="tampered bundle: content hash"):
        bundle.read(str(bad))
    # and through the command: one line, the coverage folder as it was
    folder = tmp_path / "coverage"
    (folder / "xla").mkdir(parents=True)
    shutil.copy(os.path.join(XLA, "registered-torch-2.9.0+cu128-torch_xla-2.9.0.yaml"), folder / "xla")
    before = sorted(os.listdir(folder / "xla"))
    proc = opcov_here("ingest", str(bad), "--coverage", str(folder))
    assert proc.returncode == 2 and "content hash" in proc.stderr, proc.stderr
    assert sorted(os.listdir(folder / "xla")) == before


def test_the_same_tamper_with_the_hash_redone_is_accepted(made, tmp_path):
    """The tamper above is valid data: with the bundle's hash redone it ingests, so nothing but the hash
    comparison refuses it (the test above reaches that comparison itself)."""
    b = json.loads(gzip.decompress(open(made, "rb").read()))
    b["text"] = _same_length_tamper(b["text"])
    b["sha256"] = hashlib.sha256(b["text"].encode()).hexdigest()
    ok = tmp_path / "ok.opcov-bundle.json.gz"
    ok.write_bytes(gzip.compress(json.dumps(b).encode()))
    folder = tmp_path / "coverage"
    (folder / "xla").mkdir(parents=True)
    shutil.copy(os.path.join(XLA, "registered-torch-2.9.0+cu128-torch_xla-2.9.0.yaml"), folder / "xla")
    proc = opcov_here("ingest", str(ok), "--coverage", str(folder))
    assert proc.returncode == 0, proc.stderr


# ---------------------------------------------------------------- (d) the model badge: the worst mode


def _bv(mode: str, verdict: str, evidence: str = "probed") -> judge.BackendVerdict:
    return judge.BackendVerdict("cpu", mode, verdict, evidence, [], [], [])


@pytest.mark.parametrize("order", [("inference", "training"), ("training", "inference")])
def test_the_model_badge_takes_the_colour_of_its_worst_mode(order):
    from opcov.site import render

    verdicts = {"inference": "runs", "training": "fails"}
    vs = [(mode, _bv(mode, verdicts[mode])) for mode in order]
    value, colour = render.model_badge(vs)
    assert colour == render.BADGE_COLOUR["fail"], (value, colour)
    assert "training fails" in value and "inference runs" in value
    best = render.model_badge([("inference", _bv("inference", "runs"))])[1]
    assert best != colour  # a run alone is another colour: the badge tells the modes apart
    fallback = render.model_badge(
        [(m, _bv(m, {"inference": "runs", "training": "runs_with_fallback"}[m])) for m in order]
    )
    assert fallback[1] == render.BADGE_COLOUR[vocab.verdict_css("runs_with_fallback", "probed")]
