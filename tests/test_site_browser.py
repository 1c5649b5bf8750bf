"""The site in a real browser: headless Chromium (the system's, via Playwright) loads pages from file://.

Skipped only when Playwright or a Chromium binary is missing; scripts/test.sh installs both.
"""

import json
import os
import re
import shutil

import pytest

from conftest import ROOT
from opcov.site import render
from sitefixture import make_coverage

ARGS = ["--no-sandbox", "--headless", "--disable-gpu", "--disable-background-networking",
        "--disable-component-update", "--no-first-run", "--disable-dev-shm-usage"]
CHROMIUM = os.environ.get("OPCOV_CHROMIUM") or shutil.which("chromium") or shutil.which("chromium-browser")


@pytest.fixture(scope="module")
def browser():
    sync_api = pytest.importorskip("playwright.sync_api", reason="Playwright is not installed "
                                   "(pip install -e '.[test]'; scripts/test.sh does it)")
    if not CHROMIUM:
        pytest.skip("no Chromium binary (scripts/test.sh installs Debian's chromium with apt-get; "
                    "or set OPCOV_CHROMIUM=/path/to/chromium)")
    with sync_api.sync_playwright() as p:
        b = p.chromium.launch(executable_path=CHROMIUM, args=ARGS)
        yield b
        b.close()


@pytest.fixture(scope="module")
def small(tmp_path_factory):
    root = tmp_path_factory.mktemp("browser")
    out = str(root / "site")
    render.render_site(make_coverage(root), out)
    return out


@pytest.fixture(scope="module")
def full(tmp_path_factory):
    """The site of the bundled coverage/ data (~3,700 ops)."""
    out = str(tmp_path_factory.mktemp("full") / "site")
    render.render_site(os.path.join(ROOT, "coverage"), out)
    return out


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
    return page.evaluate("""op => {
        const row = [...document.querySelectorAll('#matrix tbody tr')].find(r => r.cells[0].textContent === op);
        return row ? [...row.querySelectorAll('td')].map(td => td.textContent.trim()) : null;
    }""", op)


def test_pages_load_with_no_console_error_and_no_foreign_request(browser, small):
    for rel in ("index.html", "matrix.html", "about.html", "backends/alpha.html", "models/tiny.html",
                "ops/aten/mm.html", "badges/alpha.svg"):
        w = Watched(browser)
        with w as page:
            page.goto(url(small, rel))
            page.wait_for_load_state("load")
            if rel == "matrix.html":
                matrix_ready(page)
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
        assert cells(page, "aten::mm") == ["≠ mismatch", "✓ registered"]
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
        assert len(shown(page)) == len(aten) > 3000  # aten by default
        page.focus("#q")
        page.keyboard.type("conv")  # typed, as a keyboard user would
        page.wait_for_function(f"document.querySelectorAll('#matrix tbody tr').length === "
                               f"{sum('conv' in n for n in aten)}")
        assert all("conv" in n for n in shown(page))
        assert page.text_content("#count").startswith(f"{sum('conv' in n for n in aten)} of {len(names)} ops shown")


def test_links_resolve_when_followed(browser, small):
    with Watched(browser) as page:
        page.goto(url(small, "matrix.html"))
        matrix_ready(page)
        page.click('#matrix tbody a:text-is("aten::mm")')
        page.wait_for_load_state("load")
        assert page.title() == "aten::mm · opcov"
        page.click('main a:text-is("beta")')
        assert page.title() == "Backend beta · opcov"
        page.click('a:text-is("Op matrix")')
        matrix_ready(page)
        page.goto(url(small, "backends/alpha.html"))
        page.click('main a:text-is("fallback")')  # a permalink to a filtered matrix
        matrix_ready(page)
        assert shown(page) == ["aten::add.Tensor"] and page.input_value("#backend") == "alpha"
        page.goto(url(small, "models/tiny.html"))
        page.click('main a:text-is("aten::relu")')
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
            page.click('#matrix tbody a:text-is("aten::mm")')
            assert page.title() == "aten::mm · opcov"
        assert w.errors == []
        assert all(u.startswith((base, "data:")) for u in w.requests), w.requests
    finally:
        server.shutdown()
        server.server_close()
