"""One verdict everywhere: opcov check, opcov gaps and the site agree, model by model, backend by backend.

Each of the three judges through judge.coverage_for; these tests hold them to it on the bundled
data (every zoo model on every backend with data) and on a small folder made to show the two ways they
once parted: gaps not judging a parent the backend has its own kernel for, and the site not
knowing that a CPU fallback cannot run what CPU has no kernel for.
"""

import contextlib
import html
import io
import json
import os
import re

from conftest import ROOT, SLICE, bundled_slice, run_opcov
from test_check import TORCH, fwd, kernel, model, probed, registered

from opcov import cli
from opcov.site import model as sitemodel
from opcov.site import render
from opcov.store import cells, data, layout, lineyaml, opset, parallel

BUNDLED = os.path.join(ROOT, "coverage")
BACKENDS = tuple(layout.backends_with_data(BUNDLED))  # cpu, cuda, meta, tpu: every backend the site shows
BLOCKING = ("fails", "unknown")  # what gaps ranks
PROBLEMS = BLOCKING + (
    "fallback",
    "value_note",
)  # what a model page lists (a value note too: it runs, values may differ)


def opcov_json(*argv):
    """(exit code, parsed JSON stdout) of opcov ARGV run in this process."""
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        rc = cli.main(list(argv))
    return rc, json.loads(out.getvalue())


def check_views(coverage, backends):
    """(model, mode, backend) -> (verdict, {op: outcome} of its problem ops, {op: calls}), from
    'opcov check MODEL -b ... --format json' for every model folder under coverage/models/, and from
    'opcov check MODEL --parallel STYLE --world-size N' for each of its sharded steps (the site's mode
    'training-STYLE-xN')."""
    out = {}
    on = [a for b in backends for a in ("-b", b)]
    for folder in sorted(os.listdir(layout.models_dir(coverage))):
        runs = [((), None)]
        for path in layout.parallel_opset_files(layout.model_folder(folder, coverage)):
            style, size = parallel.parse_file_name(os.path.basename(path))
            runs.append((("--parallel", style, "--world-size", str(size)), f"training-{style}-x{size}"))
        for extra, key in runs:  # (check names a sharded step's mode "training, ddp x8")
            rc, doc = opcov_json("check", folder, *on, *extra, "--coverage", coverage, "--format", "json")
            assert rc in (0, 1), (folder, extra, rc)
            for v in doc["verdicts"]:
                out[(doc["model"]["name"], key or v["mode"], v["backend"])] = (
                    v["verdict"],
                    {r["op"]: r["outcome"] for r in v["ops"] if r["outcome"] in PROBLEMS},
                    {r["op"]: r["calls"] for r in v["ops"]},
                )
    return out


def expected_gaps(views, backend):
    """'opcov gaps BACKEND' as check's verdicts imply it: (op, outcome) -> models, calls; ranked."""
    blocked = {}
    for (name, mode, b), (_, problems, calls) in sorted(views.items()):
        if parallel.is_site_key(mode):
            continue  # gaps ranks single-device steps: a sharded one is judged when asked (check --parallel)
        for op, outcome in problems.items():
            if b == backend and outcome in BLOCKING:
                entry = blocked.setdefault((op, outcome), {"models": [], "calls": 0})
                entry["models"] = sorted(entry["models"] + [f"{name} ({mode})"])
                entry["calls"] += calls[op]
    return sorted(
        ((op, outcome, e["models"], e["calls"]) for (op, outcome), e in blocked.items()),
        key=lambda e: (e[1] != "fails", -len({m.rsplit(" (", 1)[0] for m in e[2]}), -len(e[2]), -e[3], e[0]),
    )


def gaps_ranking(coverage, backend):
    rc, ranked = opcov_json("gaps", backend, "--coverage", coverage, "--top", "1000000", "--format", "json")
    assert rc == 0
    return [(e["op"], e["outcome"], sorted(e["models"]), e["calls"]) for e in ranked]


def site_views(site):
    """(model, mode, backend) -> (verdict, {op: outcome} of its problem ops), from site.model.judge_models."""
    return {
        key: (v.verdict, {r.op: r.outcome for r in v.ops if r.outcome in PROBLEMS})
        for key, v in sitemodel.judge_models(site).items()
    }


_H4 = re.compile(  # a model page's eager section per mode (a sharded step's: training-ddp-x8) and backend
    # (the compiled side, #compile, comes after it)
    r'<h4 id="(?P<mode>[a-z]+(?:-(?:'
    + "|".join(parallel.STYLES)
    + r')-x\d+)?)-(?P<backend>[^"]+)">[^<]*<span class="st [^"]*">(?P<verdict>[^<]+)</span>'
    r"(?P<body>.*?)(?=<h4 |<h3 |<details>|<section)",
    re.S,
)
_ROW = re.compile(
    r'<tr><th scope="row">(?:<a [^>]*>)?(?P<op>[^<]+)(?:</a>)?</th><td class="st [^"]*">(?P<outcome>[^<]+)</td>'
)


def page_views(path, name):
    """(model, mode, backend) -> (verdict, {op: outcome}) as a rendered model page shows them."""
    with open(path, encoding="utf-8") as f:
        text = f.read()
    return {
        (name, m["mode"], html.unescape(m["backend"])): (
            m["verdict"].replace(" ", "_"),
            {html.unescape(r["op"]): r["outcome"] for r in _ROW.finditer(m["body"])},
        )
        for m in _H4.finditer(text.split('id="compile"')[0])
    }


def assert_agree(coverage, backends, page_dir):
    """check, gaps, the site's model data and its rendered model pages give the same verdicts;
    returns check's views."""
    checked = check_views(coverage, backends)
    assert checked
    for b in backends:
        assert gaps_ranking(coverage, b) == expected_gaps(checked, b), b
    site = sitemodel.load_site(coverage)
    assert site_views(site) == {k: v[:2] for k, v in checked.items()}
    render.write(render.build(site), str(page_dir))
    for m in site.models:
        shown = page_views(os.path.join(str(page_dir), "models", f"{m.name}.html"), m.name)
        assert shown == {k: v[:2] for k, v in checked.items() if k[0] == m.name}, m.name
    return checked


# ---------------------------------------------------------------- the bundled data


def test_bundled_data_one_verdict_everywhere(tmp_path):
    checked = assert_agree(bundled_slice(tmp_path), BACKENDS, tmp_path / "site")
    models = {name for name, _, _ in checked}
    modes = {(name, mode) for name, mode, _ in checked}
    assert len(checked) == len(modes) * len(BACKENDS) and len(modes) >= 2 * len(models)  # every mode, every backend
    plain = {mode for _, mode in modes if not parallel.is_site_key(mode)}
    assert plain == {"inference", "training", "serve"}  # the decoders' serve mode too
    assert {"training-ddp-x8", "training-fsdp2-x8", "training-tp-x8"} <= {mode for _, mode in modes}  # sharded
    assert models == set(SLICE)
    # the comparison is not vacuous: the bundled data has failing and unknown verdicts
    assert {"fails", "unknown", "runs"} <= {v for v, _, _ in checked.values()}


def test_the_real_cli_gives_the_same_json(tmp_path):
    args = ("check", "wav2vec2", "-b", "tpu", "-b", "cpu", "-b", "meta", "--format", "json")
    proc = run_opcov(*args)
    assert proc.returncode == 1, proc.stderr  # wav2vec2 training fails on tpu
    assert json.loads(proc.stdout) == opcov_json(*args)[1]


# ---------------------------------------------------------------- where they once parted


def _divergent(root) -> str:
    """A coverage folder where gaps and the site once judged otherwise than check: backend alpha has an
    enabled CPU fallback for aten::relu, which CPU has no kernel for either, and its own kernel for the
    parent aten::linear, which its probe saw fail."""
    cov = os.path.join(str(root), "coverage")
    missing = {"fwd": "missing", "res": "missing", "bwd": "none", "bwd_res": "not_applicable"}
    data.save(
        registered("cpu", {"aten::mm": kernel(), "aten::relu": missing, "aten::linear": kernel(fwd="composite")}),
        os.path.join(cov, "cpu", layout.snapshot_name("registered", TORCH)),
    )
    on_fallback = {"fwd": "fallback", "res": "fallback", "bwd": "formula", "bwd_res": "fallback"}
    data.save(
        registered(
            "alpha", {"aten::mm": kernel(), "aten::relu": on_fallback, "aten::linear": kernel()}, fallback_enabled=True
        ),
        os.path.join(cov, "alpha", layout.snapshot_name("registered", TORCH, "fakepkg", "1.0")),
    )
    data.save(
        probed("alpha", {"aten::linear": {"float32": {"fwd": "error", "why": "boom"}}}),
        os.path.join(cov, "alpha", layout.snapshot_name("probed", TORCH, "fakepkg", "1.0")),
    )
    for mode in ("inference", "training"):
        doc = model({"aten::mm": fwd(calls=2), "aten::relu": fwd()}, mode=mode)
        doc["parents"] = {"aten::linear": {"forward": {"float32": {"calls": 1, "traced_as": ["aten::mm"]}}}}
        opset.save(doc, layout.opset_path("tiny", mode, layout.models_dir(cov)))
    return cov


def test_parent_kernels_and_the_cpu_fallback_rule_are_judged_everywhere(tmp_path):
    cov = _divergent(tmp_path)
    checked = assert_agree(cov, ("alpha", "cpu"), tmp_path / "site")
    for mode in ("inference", "training"):
        verdict, problems, _ = checked[("tiny", mode, "alpha")]
        assert verdict == "fails"
        assert problems == {"aten::relu": "fails", "aten::linear": "fails"}
    _, ranked = opcov_json("gaps", "alpha", "--coverage", cov, "--format", "json")
    why = {e["op"]: " ".join(e["why"]) for e in ranked}
    assert sorted(why) == ["aten::linear", "aten::relu"]
    assert "CPU has no kernel for it either" in why["aten::relu"]
    assert "boom" in why["aten::linear"]


# ---------------------------------------------------------------- probed cells, parsed once


def _as_file(cell) -> dict:
    """A ProbedCell written back in the file's keys (the inverse of ProbedCell.from_dict)."""
    out = {key: status for key, status in cell.statuses()}
    for slot, key, value in cell.evidence():
        if key == "status":  # an input tier's status, already written under its own key by statuses()
            continue
        out[(cells.SLOTS[slot][1] if slot else "") + key] = value
    return out


def test_a_probed_cell_parses_every_key_the_data_allows():
    assert {key for key, _ in cells.SLOTS.values()} | {"samples"} | {
        prefix + k for _, prefix in cells.SLOTS.values() for k in cells.EVIDENCE_KEYS
    } == set(data.PROBED_CELL_KEYS)


def test_every_bundled_probed_cell_parses_without_loss():
    seen = 0
    for path in layout.coverage_files([BUNDLED]):
        doc = lineyaml.load(path)  # as data.load reads it (tests/test_lineyaml.py), faster
        if doc["evidence"] != "probed":
            continue
        for rec in doc["ops"].values():
            parsed = cells.record_cells(rec)
            assert bool(parsed) == (cells.skip_reason(rec) is None)
            for dtype, cell in parsed.items():
                assert _as_file(cell) == rec[dtype]
                hash(cell)  # frozen all the way down
                seen += 1
    assert seen > 1000
