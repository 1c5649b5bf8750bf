"""The site in a real browser: headless Chromium (the system's, via Playwright) loads pages from file://.

Skipped only when Playwright or a Chromium binary is missing; scripts/test.sh installs both. The
accessibility check runs axe-core (the npm package's axe.min.js, installed beside the repository with
'npm install --no-save axe-core', or named by OPCOV_AXE) and is skipped without it: nothing is fetched at
test time. Screenshots of the main pages at 1400 and 390 px, light and dark, are written to
$OPCOV_SCREENSHOTS (default: the test's temporary folder) for a reviewer to look at; they are not committed.
"""

import json
import os
import re
import shutil

import pytest
from conftest import ROOT, bundled_slice
from sitefixture import make_coverage, make_paths_coverage, make_versioned_coverage, rendered

from opcov.site import render

ARGS = [
    "--no-sandbox",
    "--headless",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--no-first-run",
    "--disable-dev-shm-usage",
]
CHROMIUM = os.environ.get("OPCOV_CHROMIUM") or shutil.which("chromium") or shutil.which("chromium-browser")
AXE = os.environ.get("OPCOV_AXE") or os.path.join(ROOT, "node_modules", "axe-core", "axe.min.js")
PHONE, DESKTOP = 390, 1400


@pytest.fixture(scope="module")
def browser():
    sync_api = pytest.importorskip(
        "playwright.sync_api", reason="Playwright is not installed (pip install -e '.[test]'; scripts/test.sh does it)"
    )
    if not CHROMIUM:
        pytest.skip(
            "no Chromium binary (scripts/test.sh installs Debian's chromium with apt-get; "
            "or set OPCOV_CHROMIUM=/path/to/chromium)"
        )
    with sync_api.sync_playwright() as p:
        b = p.chromium.launch(executable_path=CHROMIUM, args=ARGS)
        yield b
        b.close()


@pytest.fixture(scope="module")
def small(tmp_path_factory):
    return rendered(tmp_path_factory, "browser", make_coverage)[1]


@pytest.fixture(scope="module")
def full(tmp_path_factory):
    """The site of the bundled coverage/ data (~3,700 ops; a slice of the zoo's models)."""
    root = tmp_path_factory.mktemp("full")
    out = str(root / "site")
    render.render_site(bundled_slice(root), out)
    return out


@pytest.fixture(scope="module")
def versioned(tmp_path_factory):
    """The small site plus gamma (data of torch 2.9.0) and a second model, tiny2."""
    return rendered(tmp_path_factory, "versioned", make_versioned_coverage)[1]


def url(folder, rel):
    return "file://" + os.path.join(folder, rel)


class Watched:
    """A page that records console errors, page errors and every request it makes."""

    def __init__(self, browser):
        self.page = browser.new_page()
        self.errors, self.requests = [], []
        self.page.on("console", lambda m: self.errors.append(m.text) if m.type == "error" else None)
        self.page.on("pageerror", lambda e: self.errors.append(str(e)))
        self.page.on("request", lambda r: self.requests.append(r.url))

    def __enter__(self):
        return self.page

    def __exit__(self, *exc):
        self.page.close()


def matrix_ready(page):
    page.wait_for_selector("html[data-matrix-ready]", timeout=10000)


def shown(page):
    return page.eval_on_selector_all("#matrix tbody th", "els => els.map(e => e.textContent)")


def cells(page, op):
    return page.evaluate(
        """op => {
        const row = [...document.querySelectorAll('#matrix tbody tr')].find(r => r.cells[0].textContent === op);
        return row ? [...row.querySelectorAll('td')].map(td => td.textContent.trim()) : null;
    }""",
        op,
    )


def test_pages_load_with_no_console_error_and_no_foreign_request(browser, small):
    for rel in (
        "index.html",
        "matrix.html",
        "about.html",
        "backends/alpha.html",
        "models/tiny.html",
        "models.html",
        "compare.html",
        "compare/alpha-vs-beta.html",
        "ops/aten/mm.html",
        "search.html?q=relu",
        "badges/alpha.svg",
    ):
        w = Watched(browser)
        with w as page:
            page.goto(url(small, rel))
            page.wait_for_load_state("load")
            if rel == "matrix.html":
                matrix_ready(page)
            if rel.startswith("search.html"):
                page.wait_for_selector("html[data-search-ready]", timeout=10000)
            assert page.title() or rel.endswith(".svg")
        assert w.errors == [], f"{rel}: console errors {w.errors}"
        foreign = [u for u in w.requests if not u.startswith(("file://", "data:"))]
        assert foreign == [], f"{rel}: requests to other hosts {foreign}"


def test_matrix_filters_status_dtype_direction_and_keeps_state_in_the_url(browser, small):
    with Watched(browser) as page:
        page.goto(url(small, "matrix.html"))
        matrix_ready(page)
        assert shown(page) == ["aten::add.Tensor", "aten::mm", "aten::relu", "aten::sym_size.int", "aten::weird"]
        assert cells(page, "aten::add.Tensor")[0] == "↪ fallback"  # icon and text, not colour alone
        page.select_option("#status", "fallback")
        page.select_option("#backend", "alpha")
        assert shown(page) == ["aten::add.Tensor"]
        page.select_option("#status", "")
        page.select_option("#backend", "")
        assert cells(page, "aten::mm")[0] == "◑ 1/2 dtypes"  # probed, all dtypes: 1 of 2 pass
        page.select_option("#dtype", "bfloat16")
        assert cells(page, "aten::mm") == ["≠ mismatch", "○ registered, any dtype"]  # a claim, dtype-blind
        page.select_option("#dir", "bwd")
        assert cells(page, "aten::mm")[0] == "✗ error"
        page.select_option("#ns", "")
        assert "alpha::custom" in shown(page)
        page.check("#core")
        core = shown(page)
        assert "aten::mm" in core and "alpha::custom" not in core and "aten::weird" not in core
        page.reload()
        matrix_ready(page)
        assert page.input_value("#dtype") == "bfloat16" and page.input_value("#dir") == "bwd"
        assert page.is_checked("#core") and page.input_value("#ns") == ""


def test_matrix_search_at_full_size(browser, full):
    with open(os.path.join(full, "matrix.html"), encoding="utf-8") as f:
        blob = re.search(r'<script id="matrix-data" type="application/json">(.*?)</script>', f.read(), re.S).group(1)
    names = [r[0] for r in json.loads(blob)["ops"]]
    aten = [n for n in names if n.startswith("aten::")]
    with Watched(browser) as page:
        page.goto(url(full, "matrix.html"))
        matrix_ready(page)
        # aten by default: all counted, the first 200 drawn, more as the reader scrolls to the end of the box
        assert page.text_content("#count").startswith(f"{len(aten)} of {len(names)} ops shown") and len(aten) > 3000
        assert len(shown(page)) == 200
        page.eval_on_selector(".matrix-wrap", "el => { el.scrollTop = el.scrollHeight; }")
        page.wait_for_function("document.querySelectorAll('#matrix tbody tr').length >= 400")
        page.click("#more")
        assert len(shown(page)) >= 600
        page.focus("#q")
        page.keyboard.type("conv")  # typed, as a keyboard user would
        page.wait_for_function(
            f"document.querySelectorAll('#matrix tbody tr').length === {sum('conv' in n for n in aten)}"
        )
        assert all("conv" in n for n in shown(page))
        assert page.text_content("#count").startswith(f"{sum('conv' in n for n in aten)} of {len(names)} ops shown")


def test_links_resolve_when_followed(browser, small):
    with Watched(browser) as page:
        page.goto(url(small, "matrix.html"))
        matrix_ready(page)
        hrefs = page.eval_on_selector_all("#matrix tbody th a", "as => as.map(a => a.href)")
        for href in hrefs:  # matrix.js's places of ops: each page has the op's section
            path, _, anchor = href[len("file://") :].partition("#")
            with open(path, encoding="utf-8") as f:
                assert f' id="{anchor}"' in f.read(), href
        assert any(h.endswith("ops/aten/add.html#add.Tensor") for h in hrefs)  # overloads share a page
        page.click('#matrix tbody a:text-is("aten::mm")')
        page.wait_for_load_state("load")
        assert page.title() == "aten::mm · opcov" and page.url.endswith("ops/aten/mm.html#mm")
        page.click('main a:text-is("beta")')
        assert page.title() == "Backend beta · opcov"
        page.click('a:text-is("Op matrix")')
        matrix_ready(page)
        page.goto(url(small, "backends/alpha.html"))
        page.click('main a:text-is("fallback")')  # a permalink to a filtered matrix
        matrix_ready(page)
        assert shown(page) == ["aten::add.Tensor"] and page.input_value("#backend") == "alpha"
        page.goto(url(small, "models/tiny.html"))
        page.click("summary:has(#training-alpha)")  # a backend's section opens under its heading
        page.click('main details[open] a:text-is("aten::relu")')
        assert page.title() == "aten::relu · opcov"


def test_skip_link_is_first_in_keyboard_order(browser, small):
    with Watched(browser) as page:
        page.goto(url(small, "index.html"))
        page.keyboard.press("Tab")
        assert page.evaluate("document.activeElement.textContent") == "Skip to content"
        page.keyboard.press("Enter")
        assert page.evaluate("location.hash") == "#main"


def test_site_works_from_a_static_http_server(browser, small):
    """The same files served over HTTP (as GitHub Pages would): no request leaves the server."""
    import functools
    import http.server
    import threading

    class Quiet(http.server.SimpleHTTPRequestHandler):
        def log_message(self, *args):
            pass

    handler = functools.partial(Quiet, directory=small)
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    base = f"http://127.0.0.1:{server.server_address[1]}/"
    try:
        w = Watched(browser)
        with w as page:
            page.goto(base + "matrix.html#q=mm")
            matrix_ready(page)
            assert shown(page) == ["aten::mm"]
            with page.expect_navigation():  # aten::mm's page is large: its title comes once it has loaded
                page.click('#matrix tbody a:text-is("aten::mm")')
            assert page.title() == "aten::mm · opcov"
        assert w.errors == []
        assert all(u.startswith((base, "data:")) for u in w.requests), w.requests
    finally:
        server.shutdown()
        server.server_close()


# ---------------------------------------------------------------- search first, the answer first


def search_box_results(page, text):
    """Type into the header's search box as a keyboard user would; the listed results' texts."""
    page.fill("#site-q", "")
    page.focus("#site-q")
    page.keyboard.type(text)
    page.wait_for_function(
        "q => document.getElementById('site-q-results').getAttribute('data-q') === q", arg=text, timeout=10000
    )
    return page.eval_on_selector_all(
        "#site-q-results [role=option] code, #site-q-results [role=option] strong", "els => els.map(e => e.textContent)"
    )


def test_does_tpu_support_native_layer_norm_backward_in_bfloat16_in_three_interactions(browser, full):
    """From the index: type the op (1), press Enter (2), read the answer at the top of the op page."""
    interactions = 0
    with Watched(browser) as page:
        page.goto(url(full, "index.html"))
        page.fill("#site-q", "native_layer_norm_backward")
        interactions += 1
        page.wait_for_selector("#site-q-results [role=option]")
        page.press("#site-q", "Enter")
        interactions += 1
        page.wait_for_load_state("load")
        assert page.title() == "aten::native_layer_norm_backward · opcov"
        assert page.url.endswith("#native_layer_norm_backward")  # its section on its family's page
        answer = " ".join(page.text_content("#native_layer_norm_backward ul.answers").split())
        assert "tpu: ○ registered own kernel, unverified" in answer  # perhaps with others that answer alike
        # the grid has the backends that probed it; tpu's claim is its answer, said to hold in every dtype
        grid = page.evaluate("""() => {
            const t = document.querySelector('#native_layer_norm_backward table.grid');
            return {heads: [...t.tHead.rows[0].cells].map(c => c.textContent.split(' ')[0]),
                    caption: t.caption.textContent,
                    bf16: [...t.tBodies[0].rows].some(r => r.cells[0].textContent === 'bfloat16')};
        }""")
    assert interactions <= 3
    assert "tpu" not in grid["heads"] and grid["bf16"]
    assert "the other answers hold in every dtype" in grid["caption"]


def test_search_ranks_exact_names_and_python_names_first(browser, full):
    with Watched(browser) as page:
        page.goto(url(full, "index.html"))
        found = search_box_results(page, "softmax")
        assert found[0] == "aten::softmax.int", found  # exact (and what torch.softmax dispatches) first
        found = search_box_results(page, "LayerNorm")
        assert found[:2] == ["aten::layer_norm", "aten::native_layer_norm"], found  # nn.LayerNorm
        found = search_box_results(page, "F.gelu")
        assert "aten::gelu" in found[:2], found
        found = search_box_results(page, "torch.nn.functional.layer_norm")
        assert found[0] == "aten::layer_norm", found
        found = search_box_results(page, "llama")
        assert "llama" in found, found  # models too
        page.click("form.search .all a")
        page.wait_for_selector("html[data-search-ready]")
        assert "llama" in page.text_content("#search-page")


def test_searching_a_backend_without_data_finds_its_page(browser, full):
    """'neuron' (a backend the README names, with no data bundled): the box lists its page first, Enter opens
    it, and it says 'no data yet' with the commands that would fill it; the search page lists it rather
    than saying no op matches."""
    with Watched(browser) as page:
        page.goto(url(full, "index.html"))
        found = search_box_results(page, "neuron")
        assert found[0] == "neuron", found
        page.press("#site-q", "Enter")
        page.wait_for_load_state("load")
        assert page.url.endswith("/backends/neuron.html"), page.url
        text = " ".join(page.text_content("main").split())
        assert "no data yet" in text and "opcov scan neuron --import torch_neuronx" in text, text
        assert "opcov probe neuron --import torch_neuronx" in text, text
        page.goto(url(full, "search.html?q=neuron"))
        page.wait_for_selector("html[data-search-ready]")
        result = " ".join(page.text_content("#search-page").split())
        assert "neuron (no data yet)" in result and "No op matches" not in result, result
        page.click("#search-page ul.found-backends a")
        page.wait_for_load_state("load")
        assert page.url.endswith("/backends/neuron.html"), page.url


def test_search_page_works_without_the_box(browser, small):
    with Watched(browser) as page:
        page.goto(url(small, "search.html?q=nn.ReLU"))
        page.wait_for_selector("html[data-search-ready]")
        text = " ".join(page.text_content("#search-page").split())
        assert "torch.nn.ReLU dispatches aten::relu" in text
        assert (
            page.eval_on_selector_all("#search-page tbody th", "els => els.map(e => e.textContent)")[0] == "aten::relu"
        )
        assert page.input_value("#site-q") == "nn.ReLU"


def test_matrix_follows_the_hash_sorts_and_shows_where_backends_differ(browser, small):
    with Watched(browser) as page:
        page.goto(url(small, "matrix.html"))
        matrix_ready(page)
        page.evaluate("location.hash = '#q=mm'")
        page.wait_for_function("document.querySelectorAll('#matrix tbody tr').length === 1")
        assert shown(page) == ["aten::mm"] and page.input_value("#q") == "mm"
        page.evaluate("location.hash = '#ns=&a=alpha&b=beta'")
        page.wait_for_function("document.getElementById('a').value === 'alpha'")
        # forward, all dtypes: the ops whose support letter differs (beta has no data for sym_size.int)
        differs = shown(page)
        assert "aten::add.Tensor" in differs and "aten::mm" in differs and "aten::relu" in differs
        assert page.text_content("#count").endswith("where alpha and beta differ)")
        page.evaluate("location.hash = '#ns='")
        page.wait_for_function("document.getElementById('a').value === ''")
        page.click("#matrix thead button[data-sort='0']")  # alpha, best first
        first = shown(page)
        assert page.get_attribute("#matrix thead th:nth-child(2)", "aria-sort") == "ascending"
        assert first[0] == "aten::mm" and cells(page, first[0])[0] == "◑ 1/2 dtypes"  # probed, some dtypes, first
        page.click("#matrix thead button[data-sort='0']")
        assert page.get_attribute("#matrix thead th:nth-child(2)", "aria-sort") == "descending"
        assert shown(page) != first and "sort=0%3Adesc" in page.evaluate("location.hash")
        page.select_option("#view", "dtypes")
        page.select_option("#backend", "alpha")
        heads = page.eval_on_selector_all("#matrix thead th", "els => els.map(e => e.textContent)")
        assert heads[1].startswith("alpha bfloat16 fwd") and heads[2].startswith("alpha bfloat16 bwd")
        assert cells(page, "aten::mm")[:4] == ["≠ mismatch", "✗ error", "✓ pass", "✓ pass"]


def test_matrix_search_ranks_python_names(browser, full):
    with Watched(browser) as page:
        page.goto(url(full, "matrix.html#q=softmax"))
        matrix_ready(page)
        page.wait_for_function("document.getElementById('count').textContent.indexOf('exact matches first') >= 0")
        assert shown(page)[0] == "aten::softmax.int"


# ---------------------------------------------------------------- every screen

PAGES = (
    "index.html",
    "matrix.html",
    "ops/aten/native_layer_norm_backward.html",
    "models/llama.html",
    "backends/tpu.html",
    "models.html",
    "search.html?q=layer_norm",
    "compare.html",
    "compare/cuda-vs-tpu.html",
)


def test_no_page_scrolls_sideways_on_a_phone_and_dark_mode_follows_the_system(browser, full, tmp_path_factory):
    shots = os.environ.get("OPCOV_SCREENSHOTS") or str(tmp_path_factory.mktemp("screenshots"))
    os.makedirs(shots, exist_ok=True)
    for width in (DESKTOP, PHONE):
        for scheme in ("light", "dark"):
            ctx = browser.new_context(viewport={"width": width, "height": 900}, color_scheme=scheme)
            page = ctx.new_page()
            for rel in PAGES:
                page.goto(url(full, rel))
                page.wait_for_load_state("load")
                if rel == "matrix.html":
                    matrix_ready(page)
                wide = page.evaluate("document.documentElement.scrollWidth")
                assert wide <= width, f"{rel} at {width} px ({scheme}): the page scrolls sideways ({wide} px)"
                background = page.evaluate("getComputedStyle(document.body).backgroundColor")
                assert (background == "rgb(255, 255, 255)") == (scheme == "light"), (rel, scheme, background)
                if rel in PAGES[:4]:
                    name = rel.split("?")[0].replace("/", "_").replace(".html", "")
                    page.screenshot(path=os.path.join(shots, f"{name}-{width}-{scheme}.png"))
            ctx.close()


def test_no_serious_accessibility_violations(browser, full, small, paths):
    """axe-core (WCAG 2 A/AA rules) on the main pages, light and dark: no serious or critical violation."""
    if not os.path.exists(AXE):
        pytest.skip(f"no axe-core at {AXE} (npm install --no-save axe-core, or set OPCOV_AXE)")
    with open(AXE, encoding="utf-8") as f:
        axe = f.read()
    problems = []
    for scheme in ("light", "dark"):
        ctx = browser.new_context(viewport={"width": DESKTOP, "height": 900}, color_scheme=scheme)
        page = ctx.new_page()
        for folder, rel in (
            [(full, r) for r in PAGES]
            + [(small, "about.html"), (small, "ops/aten/mm.html")]
            + [
                (paths, "models/tiny.html#compile"),  # the compiled section, shown
                (paths, "models/masked.html"),
                (paths, "ops/aten/add.html"),  # add.Tensor's section on its base op's page
            ]
        ):
            page.goto(url(folder, rel))
            page.wait_for_load_state("load")
            if rel == "matrix.html":
                matrix_ready(page)
            if rel.startswith("index"):  # the search box open, with its results
                page.fill("#site-q", "layer_norm")
                page.wait_for_selector("#site-q-results [role=option]")
            page.add_script_tag(content=axe)
            result = page.evaluate("""() => axe.run(document, {runOnly: {type: 'tag', values: ['wcag2a', 'wcag2aa']},
                                                             resultTypes: ['violations']})""")
            for v in result["violations"]:
                if v["impact"] in ("serious", "critical"):
                    problems.append(
                        f"{rel} ({scheme}): {v['id']} x{len(v['nodes'])}: "
                        f"{v['nodes'][0]['target']} {v['nodes'][0].get('failureSummary', '')[:200]}"
                    )
        ctx.close()
    assert not problems, "\n".join(problems)


def model_rows(page):
    page.wait_for_selector("html[data-models-ready]", timeout=10000)
    return page.eval_on_selector_all("#models-table tbody th", "els => els.map(e => e.textContent)")


def test_model_index_filters_by_family_and_backend_verdict_and_keeps_state_in_the_url(browser, versioned):
    with Watched(browser) as page:
        page.goto(url(versioned, "models.html"))
        assert model_rows(page) == ["tiny", "tiny2"]
        assert page.inner_text("#model-count").startswith("2 of 2 models shown")
        page.select_option("#mbackend", label="alpha (torch 2.13.0+cpu)")
        page.select_option("#verdict", label="fails (registered evidence)")
        assert model_rows(page) == ["tiny"]  # tiny2 runs on alpha (probed)
        heads = page.eval_on_selector_all("#models-table thead th", "els => els.map(e => e.textContent)")
        assert heads[4:] == ["alpha inferencetorch 2.13.0+cpu", "alpha trainingtorch 2.13.0+cpu"]  # one backend
        page.select_option("#verdict", label="runs")
        assert model_rows(page) == ["tiny2"]
        page.select_option("#mbackend", label="gamma (torch 2.9.0)")
        page.select_option("#verdict", label="unknown (no evidence)")  # tiny's training needs relu, not in 2.9
        page.select_option("#mmode", "training")
        assert model_rows(page) == ["tiny"]
        cell = page.inner_text("#models-table tbody td.st")
        assert cell.endswith("unknown (no evidence)")
        linked = page.url
        page.select_option("#mmode", "inference")
        assert model_rows(page) == []
        assert page.inner_text("#model-count").startswith("0 of 2 models shown")
        page.goto(url(versioned, "matrix.html"))  # leave, then open the linked state afresh
        page.goto(linked)
        assert model_rows(page) == ["tiny"] and page.input_value("#mmode") == "training"
        page.goto(url(versioned, "models.html"))
        page.select_option("#family", label="transformers (1)")
        assert model_rows(page) == ["tiny2"]
        page.fill("#mq", "TINY")
        page.select_option("#family", "")
        page.wait_for_function("document.querySelectorAll('#models-table tbody tr').length === 2")


def test_matrix_and_compare_pages_say_not_in_torch(browser, versioned):
    with Watched(browser) as page:
        page.goto(url(versioned, "matrix.html#q=relu"))
        matrix_ready(page)
        assert cells(page, "aten::relu")[2] == "∅ not in torch 2.9.0"
        heads = page.eval_on_selector_all("#matrix thead th", "els => els.map(e => e.innerText)")
        assert any(h.startswith("gamma") and "torch 2.9.0" in h for h in heads)
        page.select_option("#status", "not_in_torch")
        page.fill("#q", "")
        page.wait_for_function("document.querySelectorAll('#matrix tbody tr').length === 3")
        assert shown(page) == [
            "aten::old_op",
            "aten::relu",
            "aten::weird",
        ]  # alpha and beta lack old_op; gamma the others
        page.goto(url(versioned, "compare.html"))
        page.click("tbody th a[href='compare/beta-vs-gamma.html']")
        assert page.url.endswith("compare/beta-vs-gamma.html")
        text = page.inner_text("#main")
        assert "gamma lacks what beta has: 1 op" in text and "aten::relu" in text and "not in torch 2.9.0" in text


def _zoo_names(root) -> str:
    """make_coverage's folder with models whose names contain one another (as the zoo's do)."""
    from opcov.store import opset

    cov = make_coverage(root)
    tiny = opset.load(os.path.join(cov, "models", "tiny", "inference.yaml"))
    for name in ("llama", "diffllama", "llama4", "bert", "albert", "t5", "longt5", "mt5"):
        tiny["model"]["name"] = name
        opset.save(tiny, os.path.join(cov, "models", name, "inference.yaml"))
    return cov


@pytest.fixture(scope="module")
def zoo_names(tmp_path_factory):
    return rendered(tmp_path_factory, "zoo-names", _zoo_names)[1]


def test_enter_on_a_model_name_opens_that_model(browser, zoo_names):
    """Typing a model's exact name and pressing Enter opens that model, not one whose name contains it
    (diffllama for llama, albert for bert, longt5 for t5); the list shows it first."""
    with Watched(browser) as page:
        for name in ("llama", "bert", "t5"):
            page.goto(url(zoo_names, "index.html"))
            found = search_box_results(page, name)
            assert found[0] == name, found
            page.press("#site-q", "Enter")
            page.wait_for_load_state("load")
            assert page.url.endswith(f"/models/{name}.html"), (name, page.url)
        page.goto(url(zoo_names, "search.html?q=llama"))
        page.wait_for_selector("html[data-search-ready]")
        listed = page.eval_on_selector_all("#search-page ul li a", "els => els.map(e => e.textContent)")
        assert listed == ["llama", "llama4", "diffllama"], listed


@pytest.fixture(scope="module")
def paths(tmp_path_factory):
    """The small site plus xla's compile path, a model with input variants and an observed run."""
    return rendered(tmp_path_factory, "browser-paths", make_paths_coverage)[1]


def test_the_eager_compiled_switch_works_without_javascript_by_keyboard_and_on_a_phone(browser, paths):
    ctx = browser.new_context(java_script_enabled=False, viewport={"width": PHONE, "height": 900})
    page = ctx.new_page()
    page.goto(url(paths, "models/tiny.html"))
    assert page.is_visible("#eager") and not page.is_visible("#compile")
    for _ in range(60):  # Tab to the switch's "Compiled" link, then Enter
        page.keyboard.press("Tab")
        if page.evaluate("document.activeElement.getAttribute('href')") == "#compile":
            break
    else:
        raise AssertionError("the switch's link to the compiled section is not in the keyboard order")
    page.keyboard.press("Enter")
    assert page.is_visible("#compile") and not page.is_visible("#eager")
    assert page.is_visible("ol.breaks >> text=tiny/net.py:42")
    assert page.evaluate("document.documentElement.scrollWidth") <= PHONE
    page.click('nav.paths a[href="#eager"]')
    assert page.is_visible("#eager") and not page.is_visible("#compile")
    page.goto(url(paths, "models/tiny.html#compile-training-xla"))  # a link to one backend's compiled verdict
    assert page.is_visible("#compile-training-xla") and not page.is_visible("#eager")
    ctx.close()


def test_matrix_shows_the_compile_column_family_and_can_hide_it(browser, paths):
    with Watched(browser) as page:
        page.goto(url(paths, "matrix.html"))
        matrix_ready(page)
        heads = page.eval_on_selector_all("#matrix thead th", "els => els.map(e => e.textContent)")
        assert any(h.startswith("xla compile") and "openxla" in h for h in heads), heads
        assert cells(page, "aten::relu")[-1] == "\u2717 missing"  # xla's compiler lacks it
        page.select_option("#path", "eager")
        page.wait_for_function("!location.hash || location.hash.includes('path=eager')")
        heads = page.eval_on_selector_all("#matrix thead th", "els => els.map(e => e.textContent)")
        assert not any("compile" in h for h in heads), heads


def test_model_index_shows_the_compile_verdict_and_filters_on_it(browser, paths):
    with Watched(browser) as page:
        page.goto(url(paths, "models.html"))
        assert "tiny" in model_rows(page)
        heads = page.eval_on_selector_all("#models-table thead th", "els => els.map(e => e.textContent)")
        assert "xla training, compiledtorch.compile, openxla" in heads
        page.select_option(
            "#mbackend",
            label=next(
                o
                for o in page.eval_on_selector_all("#mbackend option", "els => els.map(e => e.textContent)")
                if o.startswith("xla")
            ),
        )
        page.select_option("#mmode", "training")
        page.select_option("#verdict", label="fails (registered evidence)")
        assert model_rows(page) == ["tiny"]  # its eager verdict on xla runs: the compiled one fails
        link = page.get_attribute("#models-table tbody td.st.fail a", "href")
        assert link.endswith("models/tiny.html#compile-training-xla")
        page.click("#models-table tbody td.st.fail a")
        assert page.url.endswith("#compile-training-xla")
