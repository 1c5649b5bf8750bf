"""Evidence levels in every verdict (issue 13): a registered claim is never shown as proof.

The bundled tpu data is registered only (a scan of the dispatcher, no probe); cpu is probed. The
same model must read 'runs' on cpu and 'runs (registered, unverified)' on tpu, in every format, on
the site and in the gates.
"""

import json
import os
import re
from xml.etree import ElementTree as ET

import pytest
from conftest import bundled_slice, opcov_here
from test_check import TORCH, check, cov, fwd, kernel, probed, registered, save_model  # noqa: F401 (cov: a fixture)

from opcov import vocab
from opcov.store import data
from opcov.verdict import judge


def verdicts(*argv):
    r = opcov_here("check", *argv, "--format", "json")
    assert r.returncode in (0, 1), r.stderr
    return {(v["backend"], v["mode"]): v for v in json.loads(r.stdout)["verdicts"]}


# ---------------------------------------------------------------- the ladder


def test_one_ladder_strongest_first_with_words_icons_and_classes():
    assert vocab.EVIDENCE_LEVELS == ("probed", "registered", "declared")
    assert vocab.VERDICT_LEVELS == ("observed",) + vocab.EVIDENCE_LEVELS  # a whole verdict's level only
    words = list(vocab.EVIDENCE.values()) + [vocab.NO_EVIDENCE]
    for w in words:
        assert w.label and w.short and w.icon and w.css
    assert len({w.icon for w in words}) == len(words) and len({w.css for w in words}) == len(words)
    assert set(vocab.EVIDENCE_MEANING) == set(vocab.EVIDENCE_LEVELS)
    assert vocab.weaker("registered", "probed") and vocab.weaker("declared", "registered")
    assert vocab.weaker("none", "declared") and not vocab.weaker("probed", "probed")
    assert not vocab.weaker("probed", "registered") and vocab.weaker("probed", "observed")


@pytest.mark.parametrize(
    "verdict, evidence, says",
    [
        ("runs", "probed", "runs"),
        ("runs", "registered", "runs (registered, unverified)"),
        ("runs", "declared", "runs (declared in native_functions.yaml, unverified)"),
        ("runs_with_fallback", "registered", "runs with fallback (registered, unverified)"),
        ("fails", "probed", "fails"),
        ("fails", "registered", "fails (registered evidence)"),
        ("unknown", "registered", "unknown (registered evidence)"),
        ("unknown", "none", "unknown (no evidence)"),
        ("ok", "registered", "runs (registered, unverified)"),  # an op's outcome words the same way
        ("fallback", "probed", "runs with fallback"),
        ("runs", "observed", "runs (observed on the device)"),  # a model's run, told from op-by-op proof
        ("fails", "observed", "fails (observed on the device)"),
    ],
)
def test_a_verdict_says_plain_runs_only_on_probed_evidence(verdict, evidence, says):
    assert vocab.verdict_words(verdict, evidence) == says


def test_a_run_on_a_claim_never_gets_the_icon_or_class_of_proof():
    assert vocab.verdict_icon("runs", "probed") == "\u2713" and vocab.verdict_css("runs", "probed") == "ok"
    for level in ("registered", "declared"):
        assert vocab.verdict_icon("runs", level) == vocab.EVIDENCE[level].icon != "\u2713"
        assert vocab.verdict_css("runs", level) == vocab.EVIDENCE[level].css != "ok"
    assert vocab.verdict_icon("fails", "registered") == vocab.VERDICTS["fails"].icon  # a missing kernel is missing


def test_a_failure_rests_on_its_best_evidenced_failing_part_anything_else_on_its_weakest():
    assert judge.rests_on([("ok", "probed"), ("ok", "registered")]) == "registered"
    assert judge.rests_on([("ok", "probed"), ("ok", "probed")]) == "probed"
    assert judge.rests_on([("fails", "registered"), ("fails", "probed"), ("ok", "registered")]) == "probed"
    assert judge.rests_on([("fails", "registered"), ("ok", "probed")]) == "registered"
    assert judge.rests_on([("unknown", "none"), ("ok", "probed")]) == "none"
    assert judge.rests_on([("not_judged", "none"), ("ok", "probed")]) == "probed"
    assert judge.rests_on([]) == "none"


def test_a_probed_failure_beside_registered_claims_is_a_probed_failure(tmp_path, cov):  # noqa: F811
    data.save(
        probed(ops={"aten::mm": {"float32": {"fwd": "error", "why": "boom"}}}),
        str(cov / "fake" / f"probed-torch-{TORCH}-fakepkg-1.0.yaml"),
    )
    path = save_model(tmp_path, {"aten::mm": fwd(grad=True), "aten::nonzero": fwd()})
    v = json.loads(check(path, cov, "--format", "json").stdout)["verdicts"][0]
    ops = {o["op"]: o for o in v["ops"]}
    assert (v["verdict"], v["evidence"]) == ("fails", "probed")
    # aten::mm: forward probed (fails), backward registered (ok): the op fails on probed evidence
    assert (ops["aten::mm"]["outcome"], ops["aten::mm"]["evidence"]) == ("fails", "probed")
    assert (ops["aten::nonzero"]["outcome"], ops["aten::nonzero"]["evidence"]) == ("ok", "registered")


# ---------------------------------------------------------------- check on the bundled data


def test_bundled_tpu_is_registered_only_and_cpu_probed():
    got = verdicts("nn-convnet", "-b", "tpu", "-b", "cpu", "--mode", "inference")
    tpu, cpu = got[("tpu", "inference")], got[("cpu", "inference")]
    assert (tpu["verdict"], tpu["evidence"]) == ("runs", "registered")
    assert (cpu["verdict"], cpu["evidence"]) == ("runs", "probed")
    assert {o["evidence"] for o in tpu["ops"]} == {"registered"}
    assert {o["evidence"] for o in cpu["ops"]} == {"probed"}
    assert tpu["counts"]["ok_probed"] == 0 and tpu["counts"]["ok_registered"] == tpu["counts"]["ops"]


def test_text_says_the_level():
    r = opcov_here("check", "nn-convnet", "-b", "tpu", "-b", "cpu", "--mode", "inference")
    assert r.returncode == 0, r.stderr
    assert "tpu (inference): RUNS (registered, unverified): " in r.stdout
    assert "cpu (inference): RUNS: " in r.stdout
    table = [line.split() for line in r.stdout.splitlines()[2:5]]
    assert table[0][2:4] == ["verdict", "evidence"]
    assert table[1][:4] == ["tpu", "inference", "runs", "registered"]
    assert table[2][:4] == ["cpu", "inference", "runs", "probed"]
    meta = opcov_here("check", "llama", "-b", "meta", "--mode", "inference").stdout
    assert "????" not in meta and re.search(
        r"^  UNKNOWN  aten::_to_copy  x\d+ \(forward; probed evidence\)$", meta, re.M
    )


def test_a_missing_kernel_on_registered_evidence_still_fails_and_names_it():
    r = opcov_here("check", "wav2vec2", "-b", "tpu", "--mode", "training", "--format", "json")
    assert r.returncode == 1
    v = json.loads(r.stdout)["verdicts"][0]
    assert (v["verdict"], v["evidence"]) == ("fails", "registered")
    text = opcov_here("check", "wav2vec2", "-b", "tpu", "--mode", "training").stdout
    assert "tpu (training): FAILS (registered evidence): " in text


def test_markdown_gives_a_registered_run_its_own_icon():
    md = opcov_here(
        "check", "nn-convnet", "-b", "tpu", "-b", "cpu", "--mode", "inference", "--format", "markdown"
    ).stdout
    rows = {
        line.split("|")[1].strip(): line
        for line in md.splitlines()
        if line.startswith("| tpu") or line.startswith("| cpu")
    }
    assert "| \u2713 runs | \u25cf probed |" in rows["cpu"]
    assert "| \u25cb runs (registered, unverified) | \u25cb registered |" in rows["tpu"]
    assert "\u2713" not in rows["tpu"]
    assert f"- \u25cb registered: {vocab.EVIDENCE_MEANING['registered']}" in md


def test_junit_and_github_show_the_level():
    args = ("nn-convnet", "-b", "tpu", "-b", "cpu", "--mode", "inference")
    root = ET.fromstring(opcov_here("check", *args, "--format", "junit").stdout)
    suites = {s.get("name"): s for s in root.iter("testsuite")}
    tpu = suites["nn-convnet.tpu.inference"]
    props = {p.get("name"): p.get("value") for p in tpu.iter("property")}
    assert props["verdict"] == "runs" and props["evidence"] == "registered"
    assert props["says"] == "runs (registered, unverified)"
    assert {c.find("system-out").text for c in tpu.iter("testcase")} == {"evidence: registered"}
    assert {c.find("system-out").text for c in suites["nn-convnet.cpu.inference"].iter("testcase")} == {
        "evidence: probed"
    }
    gh = opcov_here("check", *args, "--format", "github").stdout
    assert "::notice title=opcov nn-convnet on tpu (inference)%3A runs (registered%2C unverified)::" in gh
    assert "::notice title=opcov nn-convnet on cpu (inference)%3A runs::" in gh


# ---------------------------------------------------------------- the gates


def test_require_probed_fails_on_registered_claims_and_passes_on_probed_runs():
    r = opcov_here("check", "llama", "-b", "tpu", "--mode", "inference", "--require", "probed")
    assert r.returncode == 1
    assert (
        "opcov: gate failed: tpu (inference): runs (registered, unverified): rests on registered, weaker "
        "than the probed evidence required"
    ) in r.stderr
    assert opcov_here("check", "llama", "-b", "tpu", "--mode", "inference", "--require", "registered").returncode == 0
    assert opcov_here("check", "llama", "-b", "tpu", "--mode", "inference").returncode == 0  # no level asked
    r = opcov_here("check", "nn-convnet", "-b", "cpu", "--mode", "inference", "--require", "probed")
    assert r.returncode == 0 and r.stderr == ""
    # cpu training rests partly on registered claims (ops its probe has no cell for)
    assert opcov_here("check", "llama", "-b", "cpu", "--mode", "training", "--require", "probed").returncode == 1


def test_fail_on_takes_a_comma_list_and_strict_is_its_alias(tmp_path, cov):  # noqa: F811
    unknown = save_model(tmp_path, {"aten::mm": fwd(), "aten::maybe": fwd()}, name="u")
    assert check(unknown, cov).returncode == 0
    for flags in (
        ("--fail-on", "unknown"),
        ("--fail-on", "fallback,unknown"),
        ("--fail-on", "fallback", "--fail-on", "unknown"),
        ("--strict",),
    ):
        r = check(unknown, cov, *flags)
        assert r.returncode == 1, flags
        assert "gate failed: fake (training): unknown (registered evidence): unknown on 1 op(s)" in r.stderr
    assert check(unknown, cov, "--fail-on", "fallback").returncode == 0
    assert check(unknown, cov, "--fail-on", "fails").returncode == 0  # fails always fails; nothing fails here


def test_strict_fails_on_a_fallback_like_fail_on_fallback(tmp_path, cov):  # noqa: F811
    ops = {
        "aten::mm": kernel(),
        "aten::cholesky": {"fwd": "fallback", "res": "fallback", "bwd": "none", "bwd_res": "not_applicable"},
    }
    data.save(
        registered(ops=ops, fallback_enabled=True), str(cov / "fake" / f"registered-torch-{TORCH}-fakepkg-1.0.yaml")
    )
    path = save_model(tmp_path, {"aten::cholesky": fwd()})
    assert check(path, cov).returncode == 0
    assert check(path, cov, "--strict").returncode == 1
    assert check(path, cov, "--fail-on", "fallback").returncode == 1
    assert check(path, cov, "--fail-on", "unknown").returncode == 0


@pytest.mark.parametrize(
    "flags, said",
    [
        (("--require", "proven"), "argument --require: invalid choice: 'proven'"),
        (
            ("--fail-on", "fallback,slow"),
            "--fail-on: 'slow' is not an outcome; choose from fails, unknown, value_note, fallback, unclaimed",
        ),
    ],
)
def test_an_unknown_level_or_outcome_is_a_one_line_usage_error(tmp_path, cov, flags, said):  # noqa: F811
    r = check(save_model(tmp_path, {"aten::mm": fwd()}), cov, *flags)
    assert r.returncode == 2 and r.stdout == ""
    assert said in r.stderr and len(r.stderr.strip().splitlines()) == 1 and "Traceback" not in r.stderr


def test_help_says_what_each_gate_does():
    out = " ".join(opcov_here("check", "--help").stdout.split())
    assert (
        "--require LEVEL also fail the gate when anything a verdict rests on was judged from evidence "
        "weaker than LEVEL (observed > probed > registered > declared)" in out
    )
    assert "--fail-on OUTCOMES also fail the gate when any op has one of these outcomes" in out
    assert "--strict the same as --fail-on fallback,unknown" in out
    assert "Exit codes: 0 the gate passed, 1 it failed" in out and "2 usage or data error" in out


# ---------------------------------------------------------------- the site of the bundled data


@pytest.fixture(scope="module")
def bundled_site(tmp_path_factory):
    """The site rendered from the bundled coverage/ (site/ is not committed)."""
    from opcov.site import render

    root = tmp_path_factory.mktemp("bundled")
    out = str(root / "site")
    render.render_site(bundled_slice(root), out)
    return out


def test_the_site_shows_registered_runs_as_claims(bundled_site):
    def _site(rel):
        with open(os.path.join(bundled_site, rel), encoding="utf-8") as f:
            return f.read()

    page = _site("models/llama.html")
    assert (
        '<h4 id="inference-tpu">tpu: <span class="st registered">runs</span> <span class="ev registered">'
        "(\u25cb registered, unverified)</span></h4>" in page
    )
    convnet = _site("models/nn-convnet.html")  # every op of its cpu inference is probed
    assert (
        '<h4 id="inference-cpu">cpu: <span class="st ok">runs</span> <span class="ev probed">'
        "(\u25cf probed)</span></h4>" in convnet
    )
    badge = _site("badges/models/llama.svg")  # a row per backend
    tpu = re.search(r'<g transform="translate\(0 \d+\)">((?:(?!</g></g>).)*>llama on tpu<.*?)</g></g>', badge).group(1)
    assert 'fill="#1565c0"' in tpu and "#2e7d32" not in tpu  # the claim's blue, not the probed green
    assert "\u25cb inference runs (registered, unverified); training runs (registered, unverified)" in tpu
    index = re.sub(r"<[^>]+>", " ", _site("index.html"))
    # tpu's model runs are all claims: none counts as shown to run
    assert re.search(r"tpu\s+inference\s+0\.0%\s+\(0 of (\d+)\)\s+\u25cb \1 registered, unverified", index)
    about = _site("about.html")
    for level in vocab.EVIDENCE_LEVELS:
        assert vocab.EVIDENCE_MEANING[level] in about
