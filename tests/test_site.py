"""opcov site: pages show what the data holds, render byte-identically, link only locally, and site/ is current."""

import html as html_mod
import json
import os
import re
import subprocess
import sys

import pytest
from conftest import ROOT, bundled_slice, child_env, run_opcov
from sitefixture import TORCH, make_coverage, make_paths_coverage, make_versioned_coverage, rendered

from opcov.site import render


def tree(folder):
    out = {}
    for root, _, files in os.walk(folder):
        for f in files:
            path = os.path.join(root, f)
            with open(path, "rb") as fh:
                out[os.path.relpath(path, folder)] = fh.read()
    return out


@pytest.fixture(scope="module")
def small(tmp_path_factory):
    """(coverage folder, rendered site folder) of the small fixture data."""
    return rendered(tmp_path_factory, "site", make_coverage)


def read(folder, rel):
    with open(os.path.join(folder, rel), encoding="utf-8") as f:
        return f.read()


def text_of(html):
    """Page text without tags, whitespace collapsed (for asserting what a reader sees)."""
    return html_mod.unescape(re.sub(r"\s+", " ", re.sub(r"<[^>]+>", " ", html)))


def said(html):
    """The page text as read aloud: tags dropped without leaving a space before punctuation."""
    return re.sub(r" ([:;,.)])", r"\1", text_of(html))


def test_the_bundled_site_renders_byte_identically(tmp_path):
    """site/ is not committed (CI renders and publishes it): two renders of the bundled data, in processes
    with different hash seeds (set and dict order must not leak into pages), give the same bytes."""
    code = (
        "import sys; from opcov.cli import main; sys.exit(main(['site', '--coverage', sys.argv[1], "
        "'--out', sys.argv[2]]))"
    )
    cov = bundled_slice(tmp_path)  # every backend's data, a slice of the zoo
    trees = []
    for seed in ("1", "2"):
        out = str(tmp_path / f"site{seed}")
        proc = subprocess.run(
            [sys.executable, "-c", code, cov, out], capture_output=True, text=True, env=child_env(PYTHONHASHSEED=seed)
        )
        assert proc.returncode == 0, proc.stderr
        trees.append(tree(out))
    assert len(trees[0]) > 1000 and "api/index.json" in trees[0]
    named = sorted(k for k, blob in trees[0].items() if cov.encode() in blob)  # a vendor's tests were, on llama's
    assert not named, f"{len(named)} pages name this machine's coverage folder, first {named[:3]}"
    differ = sorted(k for k in set(trees[0]) | set(trees[1]) if trees[0].get(k) != trees[1].get(k))
    assert not differ, f"{len(differ)} files differ between two renders, first {differ[:3]}"


def test_render_is_deterministic_and_rewrites_nothing_unchanged(small, tmp_path):
    cov, out = small
    other = str(tmp_path / "again")
    stats = render.render_site(cov, other)
    assert tree(other) == tree(out)
    assert stats["written"] == stats["files"]
    again = render.render_site(cov, other)
    assert again["written"] == 0 and again["removed"] == 0


def test_index_shares_by_evidence_kind_and_models(small):
    _, out = small
    page = text_of(read(out, "index.html"))
    # alpha: 6 ops, 1 host-only; registered: mm, alpha::custom -> 2 of 5
    assert "40.0% registered (2 of 5)" in page
    assert "50.0% registered (1 of 2)" in page  # core ATen from the scan's summary
    assert "disabled (ops on it raise)" in page
    assert "core ATen: 50.0% probed pass (1 of 2)" in page and "whole catalogue: 20.0% probed pass (1 of 5)" in page
    # models: runs on probed evidence, runs on a claim (apart), fallback, fails, unknown, verdicts by evidence
    # (columns: runs, runs unverified, runs with a value note, fallback, fails, unknown)
    assert re.search(r"alpha inference 0\.0% \(0 of 1\) 0 0 0 1 0 ○ 1 registered", page)
    assert re.search(r"beta training 0\.0% \(0 of 1\) ○ 1 registered, unverified 0 0 0 0 ○ 1 registered", page)
    assert "runs (● probed) runs, unverified (a claim) runs; values may differ runs with fallback" in page
    assert "2026-11-02T00:00:00+00:00" in page and "torch 2.13.0+cpu, alpha_pkg 1.0" in page
    # the probed count is of ops a sample reached, not every op in the file (aten::relu was skipped)
    assert re.search(r"; 1 op probed \(1 more in the file, skipped: no sample reaches them\)", page), page


def test_op_page_shows_registered_and_probed_evidence(small):
    _, out = small
    page = text_of(read(out, "ops/aten/mm.html"))
    assert "aten::mm(Tensor self, Tensor mat2) -> Tensor" in page  # schema from torch's native_functions.yaml
    assert "core" in page
    assert "kernel at alpha/kernels.cc:12" in page
    assert "float32 ✓ pass ✓ pass" in page and "bfloat16 ≠ mismatch ✗ error" in page
    # the probe's evidence where a dtype does not pass (why, error); a dtype that passes every check is named
    assert "alpha: every check passes in float32; dtype forward backward evidence bfloat16" in page
    assert "why: max error 0.5 > tol" in page and "max error (abs, rel): 1e-06" not in page
    # how each backend's data was made is said once, on its page, which the op page's answers link
    assert '<a href="../../backends/alpha.html">alpha</a>' in read(out, "ops/aten/mm.html")
    assert "each backend's page names its data" in page
    alpha = text_of(read(out, "backends/alpha.html"))
    assert "reproduce opcov scan alpha" in alpha and "reproduce with opcov probe alpha" in alpha
    assert "1 model (2 op sets), calling it in float32 ×8 tiny" in page  # tiny's calls: on its page, per mode
    relu = text_of(read(out, "ops/aten/relu.html"))
    assert "alpha: skipped: random op (values compared not at all, only shapes): no case reached it" in relu


def test_data_is_escaped(small):
    _, out = small
    html = read(out, "ops/aten/weird.html")
    assert "<script>alert(1)" not in html
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in html


def test_backend_page_ranks_gaps_and_charts_history(small):
    _, out = small
    html = read(out, "backends/alpha.html")
    page = text_of(html)
    gaps = page[page.index("The backend's gaps") : page.index("Core ATen ops without")]
    # add.Tensor blocks both modes of tiny, relu only training: ranked by models blocked
    assert gaps.index("aten::add.Tensor fails 2: tiny (inference), tiny (training)") < gaps.index("aten::relu fails 1")
    assert len(re.findall(r'<circle [^>]*class="core"', html)) == 2  # two registered snapshots
    # every op the probe did not reach is counted under its reason (issue 18: a reason for every overload)
    assert "whole catalogue, not probed, by reason: random 1." in page
    beta = read(out, "backends/beta.html")
    assert "<svg" not in beta and "a chart needs two" in text_of(beta)  # one snapshot: no chart
    hist = page[page.index("Snapshots of alpha, oldest first") :]
    assert re.search(
        r"2026-10-01T00:00:00\+00:00 registered torch 2\.12\.0, alpha_pkg 1\.0 core ATen 0\.0% .*"
        r"2026-11-02T00:00:00\+00:00 registered torch 2\.13\.0\+cpu, alpha_pkg 1\.0 core ATen 50\.0% .*"
        r"2026-11-03T00:00:00\+00:00 probed .* 1 of 2 ops \(50\.0%\) pass forward",
        hist,
    )


def test_model_page_gives_verdicts_with_reasons(small):
    _, out = small
    page = text_of(read(out, "models/tiny.html"))
    assert "alpha fails (○ registered evidence) fails (○ registered evidence)" in page
    assert "beta runs (○ registered, unverified) runs (○ registered, unverified)" in page
    assert "aten::relu fails ○ registered 1 forward float32, registered: no kernel" in page
    assert "● probed > ○ registered > ◌ declared" in page
    assert "fix: enable the CPU fallback" in page


def test_badges_name_their_evidence(small):
    """A backend's badges, and a model's badge (one SVG per model, a row per backend), name their evidence
    and take its colour: a claim's blue, never a probed pass's green."""
    _, out = small
    badges = {f: read(out, f"badges/{f}") for f in ("alpha.svg", "alpha-probed.svg", "beta.svg", "models/tiny.svg")}
    assert "<title>alpha: core ATen ○ 50.0% registered</title>" in badges["alpha.svg"]
    assert "<title>alpha: core ATen ● 50.0% probed pass</title>" in badges["alpha-probed.svg"]
    rows = re.findall(r'<g transform="translate\(0 \d+\)">(.*?)</g></g>', badges["models/tiny.svg"])
    beta = next(r for r in rows if ">tiny on beta<" in r)
    assert "○ inference runs (registered, unverified); training runs (registered, unverified)" in beta
    assert 'fill="#1565c0"' in beta and "#2e7d32" not in badges["models/tiny.svg"]
    assert len(rows) == 2 and 'fill="#b3261e"' in next(r for r in rows if ">tiny on alpha<" in r)  # fails: red
    assert 'fill="#1565c0"' in badges["beta.svg"]  # 100% registered is a claim too
    assert all(re.search(r"registered|probed", b) for b in badges.values())
    assert os.listdir(os.path.join(out, "badges", "models")) == ["tiny.svg"]
    assert "<code>badges/models/tiny.svg</code>" in read(out, "models/tiny.html")


def test_about_page_explains_the_ladder(small):
    _, out = small
    page = text_of(read(out, "about.html"))
    assert (
        "● probed executed on the device against a CPU reference" in page
        and "runs (registered, unverified)" in page
        and "◌ declared listed in native_functions.yaml" in page
    )


def test_matrix_data_encodes_every_op(small):
    _, out = small
    html = read(out, "matrix.html")
    blob = re.search(r'<script id="matrix-data" type="application/json">(.*?)</script>', html, re.S).group(1)
    d = json.loads(blob)
    assert [b["name"] for b in d["backends"]] == ["alpha", "beta"]
    rows = {r[0]: r for r in d["ops"]}
    assert len(rows) == 6
    assert rows["aten::mm"][2] == "rr" and rows["aten::add.Tensor"][2] == "fr"
    assert rows["alpha::custom"][2] == "r-"  # absent from beta's data
    assert d["dtypes"] == ["bfloat16", "float32"]
    assert rows["aten::mm"][4]["0"] == "ceaa"  # bfloat16: mismatch, error; float32: pass, pass
    assert rows["aten::relu"][4]["0"] == 0  # skipped by the probe
    assert d["tags"] and rows["aten::mm"][1] & (1 << d["tags"].index("core"))


def crawl(out) -> tuple[list[str], list[str], int]:
    """(non-local links, broken links, links checked) of every page of the site in ``out``: each href
    and src of its HTML pages (the guide's own pages under docs/ left to Sphinx) that names a relative
    path must name a file or folder that is there, and a link to an anchor ('#add.Tensor', on that page or
    another) an element of that id there. So must every op's place that the matrix and the search box
    link to (their JSON names the ops placed otherwise than render.default_op_href, which matrix.js and
    search.js follow)."""
    pages = {
        rel: blob.decode()
        for rel, blob in tree(out).items()
        if rel.endswith(".html") and rel.split(os.sep)[0] != "docs"
    }
    ids = {rel: {html_mod.unescape(i) for i in re.findall(r' id="([^"]*)"', text)} for rel, text in pages.items()}
    nonlocal_, broken, checked = [], [], 0

    def check(rel, link):
        target, _, anchor = html_mod.unescape(link.split("?", 1)[0]).partition("#")
        path = os.path.normpath(os.path.join(os.path.dirname(rel), target)) if target else rel
        state = "=" in anchor  # a page's state in its address (the matrix's filters), not an element
        if not os.path.exists(os.path.join(out, path)) or (anchor and not state and anchor not in ids.get(path, ())):
            broken.append(f"{rel}: {link}")

    for rel, text in pages.items():
        for link in re.findall(r'(?:href|src)="([^"]*)"', text):
            if link == "data:,":  # the empty favicon, so browsers do not ask for /favicon.ico
                continue
            if re.match(r"^[a-z]+:|^//", link):
                nonlocal_.append(f"{rel}: {link}")
                continue
            if link:
                check(rel, link)
                checked += 1
    if "matrix.html" in pages:
        matrix = json.loads(
            re.search(
                r'<script id="matrix-data" type="application/json">(.*?)</script>', pages["matrix.html"], re.S
            ).group(1)
        )
        for row in matrix["ops"]:
            check("matrix.html", matrix["hrefs"].get(row[0]) or render.default_op_href(row[0]))
            checked += 1
    return nonlocal_, broken, checked


def test_links_are_relative_and_resolve(small):
    _, out = small
    nonlocal_, broken, checked = crawl(out)
    assert nonlocal_ == [] and broken == []
    assert checked > 50


def test_a_site_made_by_opcov_site_out_has_no_broken_link(tmp_path):
    """'opcov site --out DIR' (as the docs say, no guide built) on a slice of the bundled data (one backend,
    every op page, a model): a crawl finds no broken link, and no "Docs" link to a guide that is not
    there (issue 44, item 5). With the guide built into DIR/docs first (scripts/run.sh), every page
    links to it, and still none is broken."""
    import shutil

    from opcov import cli

    src = os.path.join(ROOT, "coverage")
    cov = tmp_path / "coverage"
    shutil.copytree(os.path.join(src, "tpu"), cov / "tpu")
    shutil.copytree(os.path.join(src, "models", "nn-gru"), cov / "models" / "nn-gru")
    for name in os.listdir(src):
        if name.startswith("pynames-"):
            shutil.copy(os.path.join(src, name), cov)
    out = str(tmp_path / "web")
    assert cli.main(["site", "--coverage", str(cov), "--out", out]) == 0
    nonlocal_, broken, checked = crawl(out)
    assert nonlocal_ == [] and broken == [], broken[:5]
    assert checked > 1000
    assert "docs/index.html" not in read(out, "index.html")

    guided = str(tmp_path / "guided")
    os.makedirs(os.path.join(guided, "docs"))
    with open(os.path.join(guided, "docs", "index.html"), "w") as f:
        f.write("<html>the guide</html>")
    small_cov = make_coverage(tmp_path / "small")
    assert cli.main(["site", "--coverage", small_cov, "--out", guided]) == 0  # a folder holding only docs/: taken
    nonlocal_, broken, checked = crawl(guided)
    assert nonlocal_ == [] and broken == [] and checked > 50, broken[:5]
    assert '<a href="docs/index.html">Docs</a>' in read(guided, "index.html")
    assert '<a href="../docs/index.html">Docs</a>' in read(guided, "models/tiny.html")


def test_cli_renders_without_importing_torch(tmp_path):
    cov = make_coverage(tmp_path)
    out = str(tmp_path / "web")
    code = (
        "import sys; from opcov.cli import main; rc = main(['site', '--coverage', sys.argv[1], '--out', sys.argv[2]]);"
        "assert 'torch' not in sys.modules, 'torch imported'; sys.exit(rc)"
    )
    for seed, folder in (("1", out), ("2", out + "2")):  # set and dict order must not leak into pages
        proc = subprocess.run(
            [sys.executable, "-c", code, cov, folder],
            capture_output=True,
            text=True,
            env=child_env(PYTHONHASHSEED=seed),
        )
        assert proc.returncode == 0, proc.stderr
        assert "(6 ops, 2 backends, 1 models)" in proc.stdout
    assert os.path.exists(os.path.join(out, "ops", "alpha", "custom.html"))
    assert tree(out) == tree(out + "2")


def test_cli_refuses_a_folder_that_is_not_a_site(tmp_path):
    cov = make_coverage(tmp_path)
    (tmp_path / "mine").mkdir()
    (tmp_path / "mine" / "notes.txt").write_text("keep me")
    proc = run_opcov("site", "--coverage", cov, "--out", str(tmp_path / "mine"))
    assert proc.returncode == 2
    assert proc.stderr.count("\n") == 1 and "not an opcov site" in proc.stderr
    assert (tmp_path / "mine" / "notes.txt").read_text() == "keep me"


def test_cli_bad_data_is_one_line_with_file_and_line(tmp_path):
    cov = make_coverage(tmp_path)
    path = os.path.join(cov, "beta", "registered-torch-2.13.0+cpu.yaml")
    with open(path) as f:
        text = f.read()
    with open(path, "w") as f:
        f.write(text.replace("res: registered", "res: works", 1))
    proc = run_opcov("site", "--coverage", cov, "--out", str(tmp_path / "web"))
    assert proc.returncode == 2
    assert re.fullmatch(
        r"opcov: error: .*registered-torch-2\.13\.0\+cpu\.yaml:\d+: error: .*res is 'works'.*\n", proc.stderr
    )
    proc = run_opcov("site", "--coverage", str(tmp_path / "nowhere"))
    assert proc.returncode == 2 and "nowhere: no such" in proc.stderr


def test_stale_pages_are_removed(tmp_path):
    cov = make_coverage(tmp_path)
    out = str(tmp_path / "web")
    render.render_site(cov, out)
    os.remove(os.path.join(cov, "models", "tiny", "training.yaml"))
    os.remove(os.path.join(cov, "models", "tiny", "inference.yaml"))
    stats = render.render_site(cov, out)
    assert not os.path.exists(os.path.join(out, "models"))
    assert not os.path.exists(os.path.join(out, "badges", "models", "tiny.svg"))
    assert stats["removed"] == 2  # the model page and its badge
    assert "No model op sets" in read(out, "index.html")


def test_a_render_keeps_the_user_guide_and_links_to_it(tmp_path):
    """site/docs/ is the user guide (Sphinx builds it): a re-render removes none of it, and every page's
    navigation links to it once it is there (never before: no broken link)."""
    cov = make_coverage(tmp_path)
    out = str(tmp_path / "web")
    render.render_site(cov, out)
    assert "docs/index.html" not in read(out, "index.html")
    guide = os.path.join(out, "docs", "index.html")
    os.makedirs(os.path.dirname(guide))
    with open(guide, "w") as f:
        f.write("<html>the guide</html>")
    stats = render.render_site(cov, out)
    assert os.path.exists(guide) and stats["removed"] == 0
    assert '<a href="docs/index.html">Docs</a>' in read(out, "index.html")
    assert '<a href="../docs/index.html">Docs</a>' in read(out, "models/tiny.html")


def test_vocabulary_matches_the_data_contract():
    """Every probed and registered status the data may hold has an icon, a text and a colour group."""
    from opcov.site import model as sitemodel
    from opcov.store import data

    assert set(data.PROBED_STATUSES) == set(sitemodel.PROBE_GROUPS) == set(render.PROBE_STATUS)
    assert set(data.RESOLVED) == set(render.REG_STATUS) == set(render.REG_CODE) == set(sitemodel.SUPPORT_OF_RES)


def test_page_names_survive_case_insensitive_disks():
    paths = render.unique_paths(["aten::Int", "aten::int", "x::a/b"], "ops", render.op_stem)
    assert paths == {"aten::Int": "ops/aten/Int.html", "aten::int": "ops/aten/int~2.html", "x::a/b": "ops/x/a_b.html"}


def test_schemas_only_from_the_torch_the_data_was_made_with():
    from opcov.site import model as sitemodel

    catalog, note = sitemodel.native_catalog(["1.0.0"])
    assert catalog == {} and "the data was made with 1.0.0" in note
    tags = sitemodel.schema_tags
    assert tags("add.out(Tensor self, Tensor other, *, Scalar alpha=1, Tensor(a!) out) -> Tensor(a!)") == {"out"}
    assert tags("add_.Tensor(Tensor(a!) self, Tensor other, *, Scalar alpha=1) -> Tensor(a!)") == {"inplace"}
    assert tags("transpose.int(Tensor(a) self, int dim0, int dim1) -> Tensor(a)") == {"view"}
    assert tags("mm(Tensor self, Tensor mat2) -> Tensor") == set()


# ---------------------------------------------------------------- the answer first, search, evidence, JSON


def search_data(out):
    with open(os.path.join(out, "assets", "search-index.js"), encoding="utf-8") as f:
        text = f.read()
    assert text.startswith("window.OPCOV_INDEX=") and text.endswith(";\n")
    return json.loads(text[len("window.OPCOV_INDEX=") : -2])


def test_op_page_answers_per_backend_before_the_details(small):
    _, out = small
    page = said(read(out, "ops/aten/mm.html"))
    answer = page[page.index("Does it run?") : page.index("Registered evidence")]
    # each backend's answer (its torch named where it is not the zoo's); a backend with no probe at all says
    # so on its page, not in every answer
    assert (
        "alpha: ◑ passes in 1 of 2 dtypes probed (mismatch: bfloat16); backward: "
        "◑ passes in 1 of 2 dtypes probed (error: bfloat16)"
    ) in answer
    assert "beta: ○ registered own kernel, unverified; backward: ○ registered derivative formula, unverified " in answer
    # the grid: a backend's probed cells per dtype; beta's claims are its answer, the same in every dtype
    assert "dtype alpha fwd bwd float32 ✓ pass ✓ pass bfloat16 ≠ mismatch ✗ error" in answer
    assert "per dtype where probed (the other answers hold in every dtype)" in answer
    assert "beta torch" not in answer
    assert "Python: torch.Tensor.mm, torch.mm" in page[: page.index("Does it run?")]
    relu = said(read(out, "ops/aten/relu.html"))
    assert (
        "alpha: ✗ no kernel; backward: ✗ backward not implemented; the probe skipped it "
        "(random op (values compared not at all, only shapes): no case reached it)"
    ) in relu
    # no backend probed it: no dtype grid, the answers above are the claims, dtype-blind
    assert "No backend probed it: the answers above are registered claims only" in relu and "per dtype" not in relu
    weird = text_of(read(out, "ops/aten/weird.html"))
    assert "composite, but opcov could not resolve what it reaches" in weird
    assert (
        "opcov could not resolve it (the backend is not to blame): <script>alert(1)</script>; which kernels this "
        "composite op calls is unknown: none of the sample inputs the scan made could run it"
    ) in weird
    assert "RuntimeError" not in weird  # the scan's exception is the JSON's detail, not the page's words
    answer = json.loads(read(out, "api/ops/alpha.json"))["ops"]["aten::weird"]
    assert "RuntimeError: shape" in answer["detail"]["forward"]
    assert "which kernels this composite op calls" in answer["why"]["forward"]


def test_registered_claims_are_never_shown_as_probed_passes(small):
    _, out = small
    mm = read(out, "ops/aten/mm.html")
    assert '<span class="st registered">○ registered own kernel, unverified</span>' in mm
    assert '<td class="st ok">○' not in mm and not re.search(r'class="st ok"[^>]*>[^<]*registered', mm)
    d = json.loads(
        re.search(
            r'<script id="matrix-data" type="application/json">(.*?)</script>', read(out, "matrix.html"), re.S
        ).group(1)
    )
    assert d["ui"]["reg"]["registered"][:3] == ["○", "registered", "registered"]
    assert d["ui"]["probe"]["pass"][2] == "ok" and d["sup_of_probe"]["mismatch"] == "X"
    assert search_data(out)["codes"]["R"][2] == "registered"


def test_search_index_holds_ops_support_python_names_and_models(small):
    _, out = small
    d = search_data(out)
    assert d["backends"] == ["alpha", "beta"]
    ops = dict(d["ops"])
    assert list(ops) == sorted(ops) and len(ops) == 6
    # two letters per backend (forward, backward), as the op pages answer
    assert ops["aten::mm"] == "SSRR" and ops["aten::relu"] == "MMRR" and ops["alpha::custom"] == "RN--"
    assert ops["aten::add.Tensor"] == "FFRR" and ops["aten::sym_size.int"] == "NN--" and ops["aten::weird"] == "UU--"
    names = [n for n, _ in d["ops"]]
    py = {name: [names[i] for i in idx] for name, idx in d["py"]}
    assert py["torch.nn.ReLU"] == ["aten::relu"] and py["torch.mm"] == ["aten::mm"]
    assert ["F.", "torch.nn.functional."] in d["prefixes"] and "torch.nn" in d["homes"]
    assert d["models"] == [["tiny", "models/tiny.html"]]
    assert "search.js" in read(out, "index.html") and 'action="../../search.html"' in read(out, "ops/aten/mm.html")


def test_a_known_backend_without_data_has_a_row_a_page_and_a_search_entry(small):
    """Every backend opcov knows without data in the folder (neuron among them here) is named: a row on the
    index, a line on the matrix and on each model page, its own page with the commands that would fill it
    (the same as check's 'no data yet' row: suggest.fill_steps), its JSON, and an entry the search finds."""
    from opcov import suggest

    _, out = small
    steps = suggest.fill_steps("neuron")
    assert steps[0][0] == "opcov scan neuron --import torch_neuronx"  # the record's data_commands
    index = said(read(out, "index.html"))
    assert "neuron no data yet (TorchNeuron, AWS Trainium): fill it with opcov scan neuron --import" in index, index
    page = said(read(out, "backends/neuron.html"))
    assert "Backend neuron: no data yet" in page and "torch-neuronx 2.13.x" in page  # the record's setup
    for command, gives in steps:
        assert f"{command} ({gives})" in page, (command, page)
    assert 'href="../backends/neuron.html"' in read(out, "models/tiny.html")
    matrix = read(out, "matrix.html")
    assert "No data yet for " in said(matrix) and 'href="backends/neuron.html"' in matrix
    api = json.loads(read(out, "api/backends/neuron.json"))
    assert api["no_data"] is True and api["commands"][1]["command"] == steps[1][0]
    assert json.loads(read(out, "api/index.json"))["backends"]["neuron"] == "api/backends/neuron.json"
    pages = {name: (href, words) for name, href, words in search_data(out)["pages"]}
    assert pages["neuron"] == ("backends/neuron.html", "no data yet") and pages["alpha"][0] == "backends/alpha.html"
    assert set(pages) >= {"alpha", "beta", "neuron", "tpu", "cuda"}  # no data for the built-ins in this folder


def test_api_gives_the_numbers_the_pages_show(small):
    from opcov.site import judged
    from opcov.site import model as sitemodel

    cov, out = small
    index = json.loads(read(out, "api/index.json"))
    assert index["ops"] == "api/ops.json" and index["backends"]["alpha"] == "api/backends/alpha.json"
    assert index["op_answers"] == {"alpha": "api/ops/alpha.json", "beta": "api/ops/beta.json"}
    assert index["models"] == "api/models.json"
    assert set(index["shields"]) == {"alpha", "alpha-probed", "beta"}
    ops = json.loads(read(out, index["ops"]))
    mm = ops["ops"]["aten::mm"]
    assert mm["page"] == "ops/aten/mm.html#mm" and mm["python_names"] == ["torch.Tensor.mm", "torch.mm"]
    assert mm["models"] == {"tiny": ["inference", "training"]} and ops["answers"] == index["op_answers"]
    alpha = json.loads(read(out, index["op_answers"]["alpha"]))
    assert alpha["sources"] == [
        f"coverage/alpha/{kind}-torch-{TORCH}-alpha_pkg-1.0.yaml" for kind in ("registered", "probed")
    ]
    answer = alpha["ops"]["aten::mm"]  # the page's answer, as letters (site.model.SUPPORT) and statuses
    assert answer["support"] == "SS" and answer["evidence"] == "probed" and answer["probe"] == "probed"
    assert answer["dtypes"]["forward"] == {"float32": "pass", "bfloat16": "mismatch"}
    beta = json.loads(read(out, index["op_answers"]["beta"]))["ops"]["aten::mm"]
    assert beta == {"support": "RR", "evidence": "registered"}  # beta has no probe: no 'probe' word
    site = sitemodel.load_site(cov)
    verdicts = judged.judge_site(site).eager
    tiny = json.loads(read(out, index["models"]))["models"]["tiny"]
    assert tiny["page"] == "models/tiny.html"
    for mode, m in tiny["modes"].items():
        for b, v in m["backends"].items():
            assert (v["verdict"], v["evidence"]) == (
                verdicts[("tiny", mode, b)].verdict,
                verdicts[("tiny", mode, b)].evidence,
            )
    assert {p[0] for p in tiny["modes"]["training"]["backends"]["alpha"]["problems"]} >= {"aten::relu"}
    backend = json.loads(read(out, index["backends"]["alpha"]))
    assert backend["registered"]["core"]["forward"]["registered"] == 1
    assert [g["op"] for g in backend["gaps"]["backend"]][:1] == ["aten::add.Tensor"]
    shield = json.loads(read(out, "api/badges/beta.json"))
    assert shield == {
        "schemaVersion": 1,
        "label": "beta: core ATen",
        "message": "○ 100.0% registered",
        "color": "1565c0",
    }


def models_data(out):
    html = read(out, "models.html")
    return json.loads(
        re.search(r'<script id="models-data" type="application/json">(.*?)</script>', html, re.S).group(1)
    )


def test_model_index_lists_each_verdict_with_its_evidence(small):
    """The index is drawn in the browser from a compact JSON (models.js): one letter per backend and mode,
    each a verdict on its evidence in words; without JavaScript, a list of every model's page."""
    _, out = small
    d = models_data(out)
    assert [b["name"] for b in d["backends"]] == ["alpha", "beta"] and d["modes"] == ["inference", "training"]
    (row,) = d["models"]
    assert row[:2] == ["tiny", "models/tiny.html"]
    said = [d["codes"][c][1] for c in row[5]]
    assert said == ["fails (registered evidence)"] * 2 + ["runs (registered, unverified)"] * 2
    assert [d["codes"][c][2] for c in row[5]] == ["fail", "fail", "registered", "registered"]
    assert ["fails (registered evidence)", row[5][0]] in d["verdicts"] and ["no data", "-"] in d["verdicts"]
    html = read(out, "models.html")
    assert "<noscript>" in html and '<a href="models/tiny.html">tiny</a>' in html and "assets/models.js" in html


@pytest.fixture(scope="module")
def versioned(tmp_path_factory):
    """(coverage, site) of the fixture plus gamma, a backend whose data is of torch 2.9.0, and a second model."""
    return rendered(tmp_path_factory, "versioned", make_versioned_coverage)


def test_an_op_absent_from_a_backends_torch_reads_not_in_torch(versioned):
    """The op catalogue is the union over backends: an op the torch of a backend's data does not define
    reads "not in torch X" there, never "missing" or "no data"; an op absent from a backend's data of the
    same torch as the others is still "no data"."""
    _, out = versioned
    # an answer names the torch of a backend's data where it is not the zoo's (2.13.0+cpu here)
    relu = said(read(out, "ops/aten/relu.html"))
    assert "gamma (torch 2.9.0): ∅ not in torch 2.9.0 (the op does not exist in that release)" in relu
    assert "beta: ○ registered own kernel" in relu
    old = said(read(out, "ops/aten/old_op.html"))
    assert "alpha, beta: ∅ not in torch 2.13.0+cpu (the op does not exist in that release)" in old
    weird = said(read(out, "ops/aten/weird.html"))
    assert "beta: · not in this backend's data" in weird  # alpha's data of its torch has it
    assert "gamma (torch 2.9.0): ∅ not in torch 2.9.0" in weird
    sym = said(read(out, "ops/aten/sym_size.html"))  # in gamma's 2.9 data and alpha's: beta just lacks it
    assert "beta: · not in this backend's data" in sym and "not in torch" not in sym
    api = json.loads(read(out, "api/ops/gamma.json"))["ops"]["aten::relu"]
    assert api["support"] == "AA" and api["evidence"] == "none"
    html = read(out, "matrix.html")
    d = json.loads(re.search(r'<script id="matrix-data" type="application/json">(.*?)</script>', html, re.S).group(1))
    assert [(b["name"], b["torch"]) for b in d["backends"]] == [
        ("alpha", "2.13.0+cpu"),
        ("beta", "2.13.0+cpu"),
        ("gamma", "2.9.0"),
    ]
    rows = {r[0]: r for r in d["ops"]}
    assert rows["aten::relu"][2] == "mra" and rows["aten::old_op"][2] == "aar" and rows["aten::weird"][2] == "u-a"
    assert "gamma torch 2.9.0" in text_of(read(out, "models.html"))  # column headers name each backend's torch
    assert "Data of torch 2.9.0, gamma_pkg 2.9.0." in text_of(read(out, "backends/gamma.html"))


def test_compare_pages_give_what_opcov_compare_gives(versioned):
    """One page per pair of non-control backends, each direction ranked by models affected, per evidence
    level; its JSON is 'opcov compare A B --models zoo --format json' on the same data."""
    from opcov.verdict import compare

    cov, out = versioned
    index = text_of(read(out, "compare.html"))
    assert re.search(
        r"alpha torch 2\.13\.0\+cpu, alpha_pkg 1\.0 beta torch 2\.13\.0\+cpu, beta_pkg 1\.0 2 ops 0 ops "
        r"3 op sets, 2 models",
        index,
    )
    page = said(read(out, "compare/alpha-vs-beta.html"))
    lacks = page[page.index("alpha lacks what beta has: 2 ops") : page.index("beta lacks what alpha has")]
    # add.Tensor (alpha's disabled fallback) blocks both modes of tiny, relu (no kernel) only its training
    assert re.search(r"aten::add\.Tensor 1 ✗ fails ✓ runs tiny .*aten::relu 1 ✗ fails ✓ runs tiny \(training\)", lacks)
    assert "beta lacks what alpha has: 0 ops Nothing" in page
    gamma = said(read(out, "compare/beta-vs-gamma.html"))
    assert re.search(
        r"gamma lacks what beta has: 1 op .* aten::relu 1 ∅ not in torch 2\.9\.0 ✓ runs tiny \(training\)", gamma
    )
    for a, b in (("alpha", "beta"), ("alpha", "gamma"), ("beta", "gamma")):
        mine = json.loads(read(out, f"api/compare/{a}-vs-{b}.json"))
        cli = compare.as_dict(compare.compare(a, b, cov))
        assert mine["lacks"] == cli["lacks"] and mine["torch"] == cli["torch"] and mine["opsets"] == cli["opsets"]
    assert json.loads(read(out, "api/index.json"))["compare"]["beta gamma"] == "api/compare/beta-vs-gamma.json"
    assert 'href="../compare/alpha-vs-beta.html"' in read(out, "backends/beta.html")


# Characters that render as emoji by default (Emoji_Presentation=Yes in Unicode's emoji-data.txt) inside the
# BMP, and the variation selector that asks for emoji presentation: without an emoji font they show as empty
# boxes. Every character outside the BMP is refused too (all emoji planes are there).
_EMOJI_BMP = re.compile(
    "[\u231a\u231b\u23e9-\u23ec\u23f0\u23f3\u25fd\u25fe\u2614\u2615\u2648-\u2653\u267f\u2693\u26a1"
    "\u26aa\u26ab\u26bd\u26be\u26c4\u26c5\u26ce\u26d4\u26ea\u26f2\u26f3\u26f5\u26fa\u26fd\u2705"
    "\u270a\u270b\u2728\u274c\u274e\u2753-\u2755\u2757\u2795-\u2797\u27b0\u27bf\u2b1b\u2b1c\u2b50"
    "\u2b55\ufe0f\U00010000-\U0010ffff]"
)


def test_no_page_uses_emoji_that_need_an_emoji_font(versioned):
    """Compare and model pages once used emoji (a red cross, a turtle, a green box) that render as empty
    boxes where no emoji font is installed; every page, script and JSON file keeps to symbols that text
    fonts carry (check, cross, hook arrow, question mark), as the op pages do. The CLI's compare and
    markdown check report too."""
    cov, out = versioned
    found = {}
    for rel, raw in tree(out).items():
        if rel.endswith((".html", ".js", ".json", ".svg", ".css")):
            hits = _EMOJI_BMP.findall(raw.decode("utf-8"))
            if hits:
                found[rel] = sorted(set(hits))
    assert not found, found
    assert "\u2717 fails" in said(read(out, "compare/alpha-vs-beta.html"))
    for args in (("compare", "alpha", "beta"), ("check", "tiny", "-b", "alpha", "-b", "beta", "--format", "markdown")):
        proc = run_opcov(*args, "--coverage", cov)
        assert proc.stdout and not _EMOJI_BMP.findall(proc.stdout), (args, proc.stdout, proc.stderr)


def test_controls_are_not_compared(tmp_path):
    """cpu and meta are the references, not targets: no compare page pairs them."""
    from opcov.site import judged
    from opcov.site import model as sitemodel
    from opcov.store import data

    cov = make_coverage(tmp_path)
    os.rename(os.path.join(cov, "beta"), os.path.join(cov, "cpu"))
    for name in os.listdir(os.path.join(cov, "cpu")):
        path = os.path.join(cov, "cpu", name)
        doc = data.load(path)
        doc["backend"]["name"] = "cpu"
        data.save(doc, path)
    site = sitemodel.load_site(cov)
    assert [b.name for b in site.backends if b.control] == ["cpu"]
    assert render.comparisons(site, judged.judge_site(site)) == []
    files = render.build(site)
    assert (
        not [f for f in files if f.startswith("compare/")]
        and "Fewer than two backends" in files["compare.html"].decode()
    )


def test_model_index_facets(versioned):
    """family, task and modality of each model, read from its op sets (source prefix, the head and inputs
    the trace notes), for the index's filters; 'not said' where they do not tell."""
    _, out = versioned
    d = models_data(out)
    rows = {r[0]: r for r in d["models"]}
    facets = {
        name: [d["facets"][k][r[2 + i]] for i, k in enumerate(("family", "task", "modality"))]
        for name, r in rows.items()
    }
    assert facets == {"tiny": ["factory", "not said", "not said"], "tiny2": ["transformers", "causal_lm", "text"]}
    assert rows["tiny2"][5][1::2] == "---"  # no training op set: no data on any backend


def test_backend_page_tells_the_backends_gaps_from_opcovs(small):
    _, out = small
    page = text_of(read(out, "backends/alpha.html"))
    mine = page[page.index("The backend's gaps") : page.index("What opcov could not tell")]
    theirs = page[page.index("What opcov could not tell") : page.index("History")]
    assert "aten::add.Tensor" in mine and "aten::weird" not in mine
    assert "1 composites whose reach opcov could not record" in page
    assert "not by the backend" in theirs


def test_pages_fit_a_phone_and_follow_the_dark_scheme(small):
    """The CSS that keeps a 390 px screen from scrolling sideways and that switches to dark colours."""
    _, out = small
    css = read(out, "assets/site.css")
    assert "@media (prefers-color-scheme: dark)" in css and "overflow-wrap: anywhere" in css
    assert re.search(r"\.scroll \{ overflow-x: auto;", css)
    for rel in ("index.html", "ops/aten/mm.html", "backends/alpha.html", "models/tiny.html", "models.html"):
        html = read(out, rel)
        assert '<meta name="viewport" content="width=device-width, initial-scale=1">' in html
        # every table sits in a box that scrolls on its own
        assert html.count("<table") == len(re.findall(r'<div class="scroll[^"]*"[^>]*>\s*<table', html)), rel


def test_a_backend_with_data_of_two_torch_releases_shows_the_zoos(tmp_path):
    """cpu scanned again at torch 2.9 (for xla's fallback rules), later: its column still shows the data of
    the torch the zoo was traced with, which its verdicts rest on; the history lists both."""
    from opcov.site import model as sitemodel
    from opcov.store import data

    cov = make_coverage(tmp_path)
    path = os.path.join(cov, "alpha", "registered-torch-2.13.0+cpu-alpha_pkg-1.0.yaml")
    doc = data.load(path)
    doc["provenance"].update(torch="2.9.0", created="2026-12-01T00:00:00+00:00")
    data.save(doc, os.path.join(cov, "alpha", "registered-torch-2.9.0-alpha_pkg-1.0.yaml"))
    alpha = sitemodel.load_site(cov).backend("alpha")
    assert alpha.torch == "2.13.0+cpu" and alpha.registered.path.endswith(
        "registered-torch-2.13.0+cpu-alpha_pkg-1.0.yaml"
    )
    assert [s.prov["torch"] for s in alpha.snapshots if s.evidence == "registered"] == ["2.12.0", TORCH, "2.9.0"]


def test_a_build_split_with_a_forked_child_gives_the_serial_files(small):
    """load_site and build with parallel=True (half the files parsed, the op pages and half the model pages
    made in forked children) give the very files of a serial build, in the same order."""
    from opcov import forked
    from opcov.site import model as sitemodel

    cov, _ = small
    if not forked.can_fork():
        pytest.skip("no second core or no fork here: the build runs serially")
    serial = render.build(sitemodel.load_site(cov, parallel=False), parallel=False)
    split = render.build(sitemodel.load_site(cov, parallel=True), parallel=True)
    assert list(split) == list(serial) and split == serial


def test_a_split_render_writes_the_serial_site(small, tmp_path):
    """render_site split (the op pages written by the forked child that made them, the rest by the
    parent) writes the very tree a serial render writes, counts every file, and onto an up-to-date
    site writes nothing; a stale file of an earlier render is still removed."""
    from opcov import forked

    cov, _ = small
    if not forked.can_fork():
        pytest.skip("no second core or no fork here: the build runs serially")
    a, b = str(tmp_path / "serial"), str(tmp_path / "split")
    serial = render.render_site(cov, a, parallel=False)
    split = render.render_site(cov, b, parallel=True)
    assert tree(b) == tree(a) and split["written"] == serial["written"] == serial["files"] == len(tree(a))
    with open(os.path.join(b, "ops", "stale.html"), "w") as f:
        f.write("from an older render")
    again = render.render_site(cov, b, parallel=True)
    assert again["written"] == 0 and again["removed"] == 1 and tree(b) == tree(a)


def test_a_render_from_the_cache_is_the_render_without_it(tmp_path, monkeypatch):
    """opcov site keeps each data file's document and every verdict in the user's cache folder
    (opcov.site.kept): a second render of unchanged data judges nothing and writes the site a render
    without the cache writes; after a coverage file changes, the verdicts are judged again (and the site
    is again the uncached one), and an unchanged file's document is still reused."""
    from opcov.site import judged, kept
    from opcov.store import data

    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    cov = make_paths_coverage(tmp_path)
    plain = str(tmp_path / "plain")
    render.render_site(cov, plain, cache=False)
    assert not os.path.exists(tmp_path / "xdg")  # cache=False keeps nothing
    first, second = str(tmp_path / "first"), str(tmp_path / "second")
    render.render_site(cov, first)
    assert kept.Kept(cov).verdicts() is not None

    def judge_nothing(site):
        raise AssertionError("judged again")

    with monkeypatch.context() as m:
        m.setattr(judged, "judge_site", judge_nothing)
        render.render_site(cov, second)
    assert tree(first) == tree(second) == tree(plain)

    path = os.path.join(cov, "alpha", f"registered-torch-{TORCH}-alpha_pkg-1.0.yaml")
    doc = data.load(path)
    doc["ops"]["aten::relu"] = dict(doc["ops"]["aten::mm"])  # relu gets a kernel: tiny's verdicts change
    os.remove(path)
    data.save(doc, path)
    store = kept.Kept(cov)
    assert store.verdicts() is None and store.doc("models/tiny/training.yaml") is not None
    assert store.doc(os.path.relpath(path, cov)) is None
    render.render_site(cov, second)
    render.render_site(cov, plain, cache=False)
    assert tree(second) == tree(plain) != tree(first)


def test_a_first_build_reads_the_committed_answer_and_renders_the_same_site(tmp_path, monkeypatch):
    """With an empty cache folder (a fresh clone), opcov site reads the documents and verdicts committed
    with the data (opcov.site.committed, made by scripts/make_answers.py) instead of parsing and judging,
    and writes the site a build without them writes; once a data file changes the answer is stale, and the
    build parses and judges again, writing the site of the data as it is now."""
    from opcov.site import committed, judged
    from opcov.site import model as sitemodel
    from opcov.store import answers, data, output

    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    cov = make_paths_coverage(tmp_path)
    plain, first = str(tmp_path / "plain"), str(tmp_path / "first")
    render.render_site(cov, plain, cache=False)
    assert committed.read(cov) is None  # none made yet
    output.write_atomic(answers.path_for(cov, committed.QUESTION), committed.dumps(cov))

    def nothing(*args, **kwargs):
        raise AssertionError("parsed or judged again")

    with monkeypatch.context() as m:
        m.setattr(judged, "judge_site", nothing)
        m.setattr(sitemodel, "_read", nothing)
        render.render_site(cov, first)
    assert tree(first) == tree(plain)

    path = os.path.join(cov, "alpha", f"registered-torch-{TORCH}-alpha_pkg-1.0.yaml")
    doc = data.load(path)
    doc["ops"]["aten::relu"] = dict(doc["ops"]["aten::mm"])  # relu gets a kernel: tiny's verdicts change
    os.remove(path)
    data.save(doc, path)
    assert committed.read(cov) is None
    second, again = str(tmp_path / "second"), str(tmp_path / "again")
    render.render_site(cov, second)
    render.render_site(cov, again, cache=False)
    assert tree(second) == tree(again) != tree(first)


def test_a_build_splits_only_where_a_core_is_idle_now(monkeypatch):
    """forked.spare_core: by the cores idle over the last tenth of a second where the system says, so a
    build right after another (the load average still counting it) splits, and one beside other work
    does not; by the load average elsewhere."""
    from opcov import forked

    if not forked.can_fork():
        pytest.skip("no second core or no fork here")
    idle = forked._idle_cores()
    assert idle is None or 0 <= idle <= (os.cpu_count() or 1) + 0.01
    monkeypatch.setattr(os, "getloadavg", lambda: (9.0, 9.0, 9.0))
    monkeypatch.setattr(forked, "_idle_cores", lambda: 1.6)
    assert forked.spare_core()
    monkeypatch.setattr(forked, "_idle_cores", lambda: 0.3)
    assert not forked.spare_core()
    monkeypatch.setattr(forked, "_idle_cores", lambda: None)
    assert not forked.spare_core()
    monkeypatch.setattr(os, "getloadavg", lambda: (0.1, 0.1, 0.1))
    assert forked.spare_core()


def test_a_forked_childs_failure_leaves_the_work_to_the_parent():
    """forked.Later: a child that raises or dies gives no value, and the parent works it out itself (raising
    what the serial call raises); split_map keeps the items' order."""
    import threading

    from opcov import forked

    calls = []

    def boom():
        calls.append(os.getpid())
        raise ValueError("bad data")

    later = forked.Later(boom, fork=forked.can_fork())
    with pytest.raises(ValueError, match="bad data"):
        later.result()
    assert calls == [os.getpid()]  # the child's call left no trace here; the parent's raised
    parent = os.getpid()
    dies = forked.Later(lambda: os._exit(3) if os.getpid() != parent else "worked out here", fork=forked.can_fork())
    assert dies.result() == "worked out here"
    assert forked.split_map(lambda x: x * x, list(range(9))) == [x * x for x in range(9)]
    assert forked.split_map(str, [], fork=True) == []
    stop = threading.Event()
    thread = threading.Thread(target=stop.wait)
    thread.start()
    try:
        assert not forked.can_fork()  # another thread: never fork
    finally:
        stop.set()
        thread.join()


def test_a_split_shares_its_items_and_answers_as_the_serial_loop():
    """forked.Split hands items out one at a time from a pipe: slow items are worked out by both processes,
    a list longer than the pipe holds is whole and in order, the first failing item's error is the one
    raised (as the serial loop raises it), and items a dying child took are worked out by the parent."""
    import time

    from opcov import forked

    if not forked.can_fork():
        pytest.skip("no second core or no fork here")
    pids = forked.split_map(lambda x: (time.sleep(0.02), os.getpid())[1], list(range(40)))
    assert len(set(pids)) == 2 and os.getpid() in pids
    assert forked.split_map(lambda x: x + 1, list(range(50_000))) == list(range(1, 50_001))

    def fails(x):
        time.sleep(0.01)
        if x in (5, 30):
            raise ValueError(f"bad item {x}")
        return x

    with pytest.raises(ValueError, match="bad item 5"):
        forked.split_map(fails, list(range(40)))
    parent = os.getpid()

    def dies_in_child(x):
        time.sleep(0.01)
        if os.getpid() != parent and x > 3:
            os._exit(3)
        return x * 2

    assert forked.split_map(dies_in_child, list(range(30))) == [x * 2 for x in range(30)]


def test_op_page_rows_written_in_python_are_what_the_jinja_loops_wrote():
    # render.py writes the op page's three long loops itself (speed): the same bytes as op.html's loops were
    from types import SimpleNamespace as NS

    from markupsafe import Markup

    env, odd = render.environment(), "<a & 'b' \"c\">"
    rows = [
        NS(
            dtype=odd,
            cells=[
                NS(icon="\u2713", text=odd, css="ok", title=odd, span=1, note=""),
                NS(icon="x", text="t", css=odd, title="t", span=3, note=odd),
            ],
        ),
        NS(dtype=None, cells=[NS(icon="", text="", css="", title="", span=2, note="")]),
    ]
    grid = env.from_string(
        '{% for r in rows %}<tr><th scope="row">{{ r.dtype or "any dtype" }}</th>{% for c in r.cells %}<td class="st '
        '{{ c.css }}"{% if c.span > 1 %} rowspan="{{ c.span }}"{% endif %}>{{ c.icon }} '
        '{{ c.text }}{% if c.note %}<br><span class="muted">{{ c.note }}</span>{% endif %}</td>{% endfor %}</tr>\n'
        "{% endfor %}"
    )
    assert render._grid_html(rows) == grid.render(rows=rows)
    cells = [
        NS(
            dtype=odd,
            fwd=render.Cell(odd, odd, odd, odd),
            bwd=render.probe_cell("pass"),
            extra=Markup("a: <code>&lt;</code>"),
        ),
        NS(dtype="float32", fwd=render.probe_cell(None), bwd=render.probe_cell("error"), extra=Markup("")),
    ]
    probed = env.from_string(
        '{% for c in cells %}<tr><th scope="row">{{ c.dtype }}</th><td class="st {{ c.fwd.css }}">{{ c.fwd.icon }} '
        '{{ c.fwd.text }}</td><td class="st {{ c.bwd.css }}">{{ c.bwd.icon }} {{ c.bwd.text }}</td><td '
        'class="ev-detail">{{ c.extra }}</td></tr>\n{% endfor %}'
    )
    assert render._probed_rows_html(cells) == probed.render(cells=cells)
    user = env.from_string('<a href="{{ root }}{{ href }}">{{ model }}</a>')
    assert render._user_item("../../", f"models/{odd}.html", odd) == user.render(
        root="../../", href=f"models/{odd}.html", model=odd
    )


def test_op_page_answers_and_registered_facts_escape_and_group_backends():
    """An op section's answers and registered facts, written in Python (speed): what Jinja's autoescape would
    write of hostile names, and one line per distinct answer or fact naming every backend that gives it."""
    from types import SimpleNamespace as NS

    from markupsafe import escape

    odd = "<a & 'b' \"c\">"

    def view(name, probed=True, torch=""):
        return render._BackendView(
            NS(name=name), None, object() if probed else None, None, torch, f"../../backends/{escape(name)}.html"
        )

    def answer(name, css):
        return NS(backend=name, segments=lambda: [(NS(word=NS(css=css, icon=odd)), odd), (None, "; no probe")])

    views = [view(odd, torch=odd), view("b", probed=False), view("c", probed=False)]
    html = render._answers_html(views, [answer(odd, odd), answer("b", "ok"), answer("c", "ok")])
    e = escape(odd)
    assert html == (
        f'<li><a href="../../backends/{e}.html">{e}</a> <span class="muted">(torch {e})</span>: '
        f'<span class="st {e}">{e} {e}</span>; no probe</li>\n'  # a backend with a probe says what it did
        f'<li><a href="../../backends/b.html">b</a>, <a href="../../backends/c.html">c</a>: '
        f'<span class="st ok">{e} {e}</span></li>\n'
    )
    links = {"aten::mm": f"ops/aten/{odd}.html#mm"}
    rec = {"res": "unresolved", "bwd_res": "registered", "src": odd, "via": ["aten::mm", odd], "why": odd}
    facts = render._reg_rows_html(views, [rec, dict(rec, src="k.cc:1"), None], "../../", links, {})
    assert facts == (
        f"<li>{e}: kernel at <code>{e}</code></li>\n"
        f'<li>{e}, b: reaches <a href="../../ops/aten/{e}.html#mm">aten::mm</a>, {e}</li>\n'
        f'<li>{e}, b: <span class="muted">opcov could not resolve it (the backend is not to blame): {e}</span></li>\n'
        "<li>b: kernel at <code>k.cc:1</code></li>\n"
    )


def test_the_pages_escaping_is_markupsafes():
    # render.py's f-string HTML escapes with _esc (str, no Markup for a value with nothing to escape):
    # the same text as markupsafe's escape for every kind of value it meets
    from markupsafe import Markup, escape

    class Word(str):
        pass

    for value in [
        "aten::mm",
        "<a & 'b' \"c\">",
        "",
        "caf\u00e9 &amp;",
        3,
        0.5,
        None,
        True,
        Markup("<b>x</b>"),
        Word("x<y"),
        ("a", "<"),
    ]:
        assert render._esc(value) == str(escape(value)) and type(render._esc(value)) is str, value


def test_model_page_sections_written_in_python_are_what_model_html_wrote():
    # render.py writes a model page's verdict per backend and mode (speed): the bytes a model.html loop and
    # its said macro would write, escaping included, with and without data files, notes, problems and unjudged
    # ops (a count of 0 is left out, but ok's; the data files where they are not the backend's usual ones)
    from types import SimpleNamespace as NS

    env, odd = render.environment(), "<a & 'b' \"c\">"
    said = (
        '{% macro said(v) %}<span class="st {{ v.css }}">{{ v.verdict | replace("_", " ") }}</span> <span '
        'class="ev {{ v.ev.css }}">({{ v.ev.icon }} {{ v.ev_said }})</span>{% endmacro %}'
    )
    loop = env.from_string(
        said + '{% for pb in m.backends %}{% set v = pb.v %}\n<details class="verdict"><summary><h4 id="{{ m.mode }}-'
        '{{ pb.b.name }}">{{ pb.b.name }}: {{ said(v) }}</h4></summary>\n'
        "<p>{{ v.counts.ops }} ops judged ({{ v.counts.calls }} calls): "
        "{{ v.counts.ok }} ok ({{ v.counts.ok_probed }} probed, {{ v.counts.ok_registered }} registered), "
        "{{ v.counts.fallback }} on the fallback, {{ v.counts.fails }} fail, {{ v.counts.unknown }} unknown"
        "{% if v.counts.not_judged %}, {{ v.counts.not_judged }} not judged{% endif %}{% if v.sources %}; data: "
        "{% for s in v.sources %}<code>{{ s }}</code>{% if not loop.last %}, {% endif %}{% endfor %}{% endif %}.</p>\n"
        '{% if v.variants %}<ul class="variants">{% for o in v.variants %}<li>{{ said(o.said) }} with {{ o.label }}'
        '{{ o.rest }}</li>{% endfor %}</ul>\n{% endif %}{% if v.notes %}<ul class="notes">'
        '{% for n in v.notes %}<li>{{ n }}</li>{% endfor %}</ul>{% endif %}\n{% if v.problems %}\n<div class="scroll">'
        "<table>\n<caption>Problem ops of {{ model.name }} ({{ m.mode }}) on {{ pb.b.name }}, worst first</caption>\n"
        '<thead><tr><th scope="col">op</th><th scope="col">outcome</th><th scope="col">evidence</th><th scope="col">'
        'calls</th><th scope="col">why (direction, dtype, evidence)</th></tr></thead>\n<tbody>{{ pb.problems_html }}'
        "</tbody>\n</table></div>\n{% endif %}</details>\n{% endfor %}\n"
    )
    table = env.from_string(said + "{% for pb in m.backends %}[{{ said(pb.v) }}]{% endfor %}")
    counts = {k: 3 for k in ("ops", "calls", "ok", "ok_probed", "ok_registered", "fallback", "fails", "unknown")}
    word = NS(css=odd, icon=odd)
    backends = []
    for i in range(4):
        v = {
            "verdict": "runs_with_fallback",
            "css": odd,
            "ev": word,
            "ev_said": odd,
            "counts": {**counts, "not_judged": i % 2},
            "sources": [odd, "b.yaml"][: i % 3],
            "notes": [odd] * (i // 2),
            "problems": [1] if i in (1, 2) else [],
            "variant": "given",
            "variants": [
                {"label": odd, "said": {"verdict": "fails", "css": odd, "ev": word, "ev_said": odd}, "rest": odd}
            ]
            * (i % 3),
        }
        pb = {"b": NS(name=odd), "v": v, "problems_html": render.Markup("<tr>rows</tr>")}
        pb["said"] = render.Markup(render._said_html(v))
        pb["html"] = render._verdict_section_html("../", odd, odd, pb)
        backends.append(pb)
    m = {"mode": odd, "backends": backends}
    ctx = {"root": "../", "model": {"name": odd}, "m": m, "labels": {"given": "the given inputs"}}
    assert env.from_string("{% for pb in m.backends %}{{ pb.html }}{% endfor %}\n").render(**ctx) == loop.render(**ctx)
    assert "".join(f"[{pb['said']}]" for pb in backends) == table.render(**ctx)


def test_the_site_program_ends_with_its_summary_written_and_its_exit_code(tmp_path):
    """As a program, 'opcov site' ends its process without freeing the build (os._exit): its summary must
    still reach a pipe, its exit code must be 0, and a user mistake still exits 2 with its one line."""
    cov = make_coverage(tmp_path)
    out = str(tmp_path / "web")
    env = child_env()
    env.pop("PYTHONUNBUFFERED", None)  # a pipe's stdout is block-buffered, as for users

    def site(folder):
        return subprocess.run(
            [sys.executable, "-m", "opcov", "site", "--coverage", cov, "--out", folder],
            capture_output=True,
            text=True,
            env=env,
            cwd=ROOT,
            timeout=600,
        )

    proc = site(out)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.startswith(f"{out}: ") and "(6 ops, 2 backends, 1 models)" in proc.stdout
    assert os.path.exists(os.path.join(out, "index.html"))
    (tmp_path / "taken").mkdir()
    (tmp_path / "taken" / "notes.txt").write_text("mine\n")
    proc = site(str(tmp_path / "taken"))
    assert proc.returncode == 2 and proc.stderr.count("\n") == 1 and "not an opcov site" in proc.stderr


# ---------------------------------------------------------------- the compile path, input variants, observed runs


@pytest.fixture(scope="module")
def paths(tmp_path_factory):
    """(coverage folder, rendered site) of make_paths_coverage: xla with compile coverage, a compiled op set
    with a graph break, a model with input variants, an observed run, contributed probed data."""
    return rendered(tmp_path_factory, "paths", make_paths_coverage)


def section(html, start, end=None):
    """The text of ``html`` from the element with id ``start`` up to the one with id ``end``."""
    i = html.rfind("<", 0, html.index(f'id="{start}"'))
    return said(html[i : html.index(f'id="{end}"', i) if end else None]).strip()


def test_model_page_switches_between_eager_and_compiled_and_lists_graph_breaks_first(paths):
    _, out = paths
    page = read(out, "models/tiny.html")
    # the switch: two anchored sections, linked from a labelled nav (keyboard: plain links; no JavaScript)
    nav = re.search(r'<nav class="paths" aria-label="[^"]+">(.*?)</nav>', page).group(1)
    assert 'href="#eager"' in nav and 'href="#compile"' in nav and "<script" not in page.split("<main")[1]
    assert page.index('id="eager"') < page.index('id="compile"')
    compiled = section(page, "compile")
    # the table, then per mode and backend: graph breaks with file:line first, then the compiled graphs
    assert "Verdicts of tiny, compiled" in compiled and "xla fails (○ registered evidence)" in compiled
    assert "No compile coverage in the data for alpha, beta" in compiled
    xla = section(page, "compile-training-xla")
    breaks = xla.index("1 graph break(s); each runs eagerly: its ops are judged on eager coverage")
    assert xla.index("tiny/net.py:42: Data-dependent branching") > breaks
    assert xla.index("Compiled graphs on compile coverage: fails (○ registered evidence)") > breaks
    assert (
        "Eagerly at the breaks (eager coverage, the model's whole eager op set): runs (○ registered, unverified)" in xla
    )
    assert "coverage/xla/compile/registered-torch-2.13.0+cpu-torch_xla-2.9.0.yaml" in xla
    row = re.search(r"aten::relu fails ○ registered 1 forward float32, registered: no kernel", xla)
    assert row, xla
    assert "opcov check tiny -b xla --mode training --path compile" in xla
    # the eager verdicts are in their own section, as before
    assert "xla: runs (○ registered, unverified)" in section(page, "eager", "compile")
    api = json.loads(read(out, "api/models.json"))["models"]["tiny"]
    got = api["compile"]["training"]["backends"]["xla"]
    assert (got["verdict"], got["evidence"], got["compile_backend"]) == ("fails", "registered", "openxla")
    assert got["graph_breaks"][0]["where"] == "tiny/net.py:42" and got["problems"][0][:2] == ["aten::relu", "fails"]
    # a model without compiled op sets has no switch
    assert 'class="paths"' not in read(out, "models/masked.html")


def test_matrix_has_a_compile_column_per_backend_with_compile_coverage(paths):
    _, out = paths
    html = read(out, "matrix.html")
    blob = re.search(r'<script id="matrix-data" type="application/json">(.*?)</script>', html, re.S).group(1)
    d = json.loads(blob)
    (col,) = d["compile"]["backends"]
    assert (col["name"], col["compiler"], col["evidence"]) == ("xla", "openxla", "registered")
    assert d["backends"][col["i"]]["name"] == "xla"
    codes = dict(zip((r[0] for r in d["ops"]), d["compile"]["codes"]))
    assert codes["aten::mm"] == "r" and codes["aten::relu"] == "m" and codes["aten::add.Tensor"] == "-"
    assert '<select id="path" name="path">' in html and "compile coverage" in text_of(html)
    # and each op page says what the compilers accept, as a claim
    relu = said(read(out, "ops/aten/relu.html"))
    assert "Compile path" in relu and "xla: ✗ missing (registered evidence)" in relu
    mm = said(read(out, "ops/aten/mm.html"))
    assert "xla: ○ registered, unverified" in mm and "each backend's page names its data, its compile coverage" in mm
    assert "coverage/xla/compile/registered-torch-" in text_of(read(out, "backends/xla.html"))


def test_model_index_has_a_compile_column_per_backend_with_compile_coverage(paths):
    """The model index shows, beside the eager verdicts, the compile-path verdict per backend with compile
    coverage and mode, in 'opcov check --path compile's words with its evidence ('-' where the model has no
    compiled op set for that backend's compile backend), linked to the model page's compile section."""
    _, out = paths
    d = models_data(out)
    assert d["compile"]["backends"] == [{"name": "xla", "compiler": "openxla"}]
    rows = {r[0]: r for r in d["models"]}
    inference, training = rows["tiny"][6]
    assert inference == "-" and d["codes"][training][1] == "fails (registered evidence)"
    assert d["codes"][training][2] == "fail"
    assert rows["masked"][6] == "--"
    assert [d["codes"][c][1] for c in rows["tiny"][5] if c != "-"]  # the eager letters are still there
    assert 'id="compile-training-xla"' in read(out, "models/tiny.html")  # where models.js links the cell
    html = read(out, "models.html")
    assert "the torch.compile path (xla with openxla)" in text_of(html)
    js = read(out, "assets/models.js")
    assert '"#" + (compiled ? "compile-" : "")' in js and "D.compile" in js


def test_model_page_leads_with_the_given_inputs_and_judges_each_variant_apart(paths):
    _, out = paths
    page = read(out, "models/masked.html")
    table = text_of(page[page.index("<caption>Verdicts of masked, eager") : page.index("</table>")])
    # the given inputs' verdict first, the padded mask's apart (where it differs)
    assert "xla runs (○ registered, unverified) with a padded attention mask: fails (○ registered evidence)" in table
    xla = section(page, "inference-xla")
    assert xla.startswith("xla: runs (○ registered, unverified)")
    assert "each input variant opcov added (a padded attention mask) is judged apart below it" in text_of(page)
    assert "fails (○ registered evidence) with a padded attention mask: aten::bitwise_and.Tensor bool: no kernel" in xla
    api = json.loads(read(out, "api/models.json"))["models"]["masked"]["modes"]["inference"]["backends"]["xla"]
    assert api["verdict"] == "runs" and api["variant"] == "given"
    assert api["variants"]["padded_mask"]["verdict"] == "fails"
    assert api["variants"]["padded_mask"]["deciding"] == ["aten::bitwise_and.Tensor bool: no kernel"]
    # an op set that records no variants says so, as check does
    assert "input variants not recorded in this op set" in text_of(read(out, "models/tiny.html"))


def test_observed_runs_and_contributed_evidence_are_named_with_source_and_date(paths):
    _, out = paths
    page = read(out, "models/tiny.html")
    observed = section(page, "observed", "eager")
    assert "xla (training): ran, values match CPU, observed on xla, torch_xla 2.9.0, 2026-12-02" in observed
    assert "coverage/observed/xla/tiny.training.json" in observed
    assert "opcov run factory:tests:tiny -b xla --mode training" in observed
    # check's note, first among the verdict's notes, and the file among its data (never this machine's path)
    xla = section(page, "training-xla")
    assert "observed: this model's training step ran on xla:0" in xla and "does NOT agree" in xla
    assert "coverage/observed/xla/tiny.training.json" in xla and os.sep + "tmp" not in page
    add = said(read(out, "ops/aten/add.html"))
    assert "xla: dispatched by tiny (training), float32 ×2 ran through the CPU fallback; ran, values match CPU" in add
    assert "(observed on xla, torch_xla 2.9.0, 2026-12-02)" in add
    relu = text_of(read(out, "ops/aten/relu.html"))  # no observed run dispatched it: no section (the page says so)
    assert "Observed on the device" not in relu and "Observed on the device" in text_of(read(out, "ops/aten/add.html"))
    mm = text_of(read(out, "ops/aten/mm.html"))
    assert "alpha: contributed evidence: probed evidence contributed by Acme lab on 2026-12-01" in mm
    api = json.loads(read(out, "api/ops.json"))["ops"]["aten::add.Tensor"]
    assert api["observed"][0]["fallback"] is True and api["observed"][0]["source"].endswith("2026-12-02")
    assert json.loads(read(out, "api/ops/alpha.json"))["contributed"]
    assert json.loads(read(out, "api/models.json"))["models"]["tiny"]["observed"][0]["source"] == (
        "observed on xla, torch_xla 2.9.0, 2026-12-02"
    )


def test_a_compiled_run_on_the_device_decides_the_model_pages_compile_verdict(tmp_path):
    """An observed compiled run ('opcov run --path compile') of tiny on xla decides its compile verdict on the
    model page and in the API, says what the run saw and where it is filed, and leaves the eager verdict be."""
    from opcov.site import render
    from opcov.store import observed as files

    cov = make_paths_coverage(tmp_path)
    doc = {
        "schema_version": 1,
        "evidence": "observed",
        "backend": {"name": "xla", "package": "torch_xla", "version": "2.9.0", "device_type": "xla"},
        "model": {"name": "tiny", "mode": "training", "dtype": "float32", "source": "tiny"},
        "provenance": {
            "torch": TORCH,
            "created": "2026-12-05T10:00:00+00:00",
            "command": "opcov run tiny -b xla --path compile",
            "device": "xla:0",
        },
        "result": {"ran": False, "error": "RuntimeError: Expected XLA tensor"},
        "backend_record": {"fallback_ops": []},
        "ops": {},
        "compile": {"backend": "openxla", "graph_breaks": []},
    }
    target = files.path_for(cov, "xla", "tiny", "training", "compile")
    os.makedirs(os.path.dirname(target))
    with open(target, "w") as f:
        f.write(files.dumps(doc))
    out = str(tmp_path / "site")
    render.render_site(cov, out)
    page = read(out, "models/tiny.html")
    xla = section(page, "compile-training-xla")
    assert "observed: this model's training step compiled with openxla raised on xla:0" in xla
    assert "RuntimeError: Expected XLA tensor" in xla and "coverage/observed/xla/compile/tiny.training.json" in xla
    got = json.loads(read(out, "api/models.json"))["models"]["tiny"]["compile"]["training"]["backends"]["xla"]
    assert (got["verdict"], got["evidence"]) == ("fails", "observed") and got["observed"].startswith("observed: ")
    assert "xla: runs (○ registered, unverified)" in section(page, "eager", "compile")


def test_ruff_checks_every_file_of_the_site_package():
    """pyproject's extend-exclude names the rendered ./site only, never src/opcov/site (issue 44, item 10)."""
    ruff = os.path.join(os.path.dirname(sys.executable), "ruff")
    if not os.path.exists(ruff):
        pytest.skip("ruff is not installed beside this Python")
    proc = subprocess.run([ruff, "check", "--show-files", "src"], capture_output=True, text=True, cwd=ROOT)
    listed = {os.path.relpath(line.strip(), ROOT) for line in proc.stdout.splitlines() if line.strip()}
    package = os.path.join("src", "opcov", "site")
    files = {os.path.join(package, f) for f in os.listdir(os.path.join(ROOT, package)) if f.endswith(".py")}
    assert files and files <= listed, sorted(files - listed)
