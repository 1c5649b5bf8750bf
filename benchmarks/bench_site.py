"""Site build speed and weight, and how fast the matrix is interactive in headless Chromium.

Usage: python benchmarks/bench_site.py [COVERAGE_DIR] [--worst-case] [--models N] [--runs N] [--parallel auto|yes|no]
       [--out-root DIR]
(default: the bundled coverage/, 3 runs)
--worst-case renders synthetic data at the size issue 14 sets its targets for: 6 backends (the bundled
registered scans plus copies), each with a probed file of 6 dtypes per op, and 800 models (copies of
the bundled op sets under new names; --models N for another count: the whole zoo is ~600
architectures, ~1,200 op sets). Prints figures and rewrites the 'site' section of docs/performance.md
('site-worst-case' with --worst-case); asserts nothing. The program is timed (CPU of the process and its
forked children): a first build from a fresh clone (an empty cache folder: the answer committed with the
data, coverage/answers/site.json.gz, where it is fresh), with --no-cache (every file parsed, every verdict
judged), and, after a build that fills the user's cache folder (opcov.site.kept), the median of N builds into new output
folders (goals: <= 10 s CPU; <= 60 MB on disk as du counts it). Targets: matrix
interactive <= 300 ms; index + matrix (with their CSS and JS) <= 150 KB gzipped at that size; the
search index is loaded on first use of the search box and is reported apart. The browser figures need
Playwright and the system's chromium (as scripts/test.sh installs); they are skipped otherwise.
"""

import gzip
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "src"))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
ARGS = [
    "--no-sandbox",
    "--headless",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--no-first-run",
    "--disable-dev-shm-usage",
]


def _program(coverage: str, target: str, *extra: str, cache_home: str | None = None) -> tuple:
    """(wall, user CPU, system CPU, its summary line) of 'opcov site' run as users run it: imports, the
    build, its forked children, its exit. ``cache_home``: the user's cache folder's parent (XDG_CACHE_HOME)."""
    env = {**os.environ, "PYTHONPATH": os.path.join(ROOT, "src")}
    if cache_home is not None:
        env["XDG_CACHE_HOME"] = cache_home
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    done = subprocess.run(
        [sys.executable, "-m", "opcov", "site", "--coverage", coverage, "--out", target, *extra],
        check=True,
        capture_output=True,
        text=True,
        env=env,
    )
    wall = time.perf_counter() - t0
    after = resource.getrusage(resource.RUSAGE_CHILDREN)  # the program and the children it waited for
    return wall, after.ru_utime - before.ru_utime, after.ru_stime - before.ru_stime, done.stdout


def build_figures(coverage: str, out: str, runs: int = 3, parallel: bool | None = None) -> list:
    """Prints the build's figures; returns the table rows for the docs page."""
    from opcov.site import committed, render
    from opcov.site import model as sitemodel

    with tempfile.TemporaryDirectory() as empty:  # a fresh clone: nothing in the user's cache folder
        fresh = _program(coverage, os.path.join(out, "fresh"), cache_home=empty)[:3]
    answer = "fresh" if committed.read(coverage) is not None else "stale or missing: parses and judges everything"
    print(
        f"first build from a fresh clone ('opcov site', empty cache folder; the committed answer "
        f"coverage/answers/site.json.gz {answer}): {fresh[0]:.2f} s wall, {fresh[1]:.2f} s user CPU and "
        f"{fresh[2]:.2f} s system CPU  (goal <= 10 s; load average now {os.getloadavg()[0]:.1f})"
    )
    first = _program(coverage, os.path.join(out, "first"), "--no-cache")[:3]
    print(
        f"first build ('opcov site --no-cache': parses and judges everything, as a first build of a coverage "
        f"folder does): {first[0]:.2f} s wall, {first[1]:.2f} s user CPU and {first[2]:.2f} s system CPU"
    )
    _program(coverage, os.path.join(out, "prime"))  # keeps what the next builds read back (opcov.site.kept)
    times = [_program(coverage, os.path.join(out, f"run{i}"))[:3] for i in range(runs)]
    total, user, system = (statistics.median(t[i] for t in times) for i in range(3))
    print(
        f"site build ('opcov site', the program, median of {runs}, new output folder, the user's cache of an "
        f"earlier build): {total:.2f} s wall, {user:.2f} s user CPU and {system:.2f} s system CPU, with its "
        f"forked children  (goal <= 10 s; load average now {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores)"
    )
    print(
        f"  output on {out} ({_fs_type(out)}). System time is mostly file creation: on ext4 it varies "
        "several-fold from run to run (after many recent deletions the kernel's inode allocator scans "
        "past recently deleted inodes); --out-root /dev/shm measures the build without the disk"
    )
    t0 = time.perf_counter()
    site = sitemodel.load_site(coverage, parallel=parallel)
    t1 = time.perf_counter()
    files = render.build(site, parallel=parallel)
    t2 = time.perf_counter()
    stats = render.write(files, os.path.join(out, "apart"))
    t3 = time.perf_counter()
    print(
        f"  a first build apart (no cache): load data {t1 - t0:.2f} s, judge and build every page in memory "
        f"{t2 - t1:.2f} s, write them "
        f"from one process {t3 - t2:.2f} s (file creation: its time varies with the disk, several-fold here)"
    )
    wall, _, _, said = _program(coverage, os.path.join(out, "run0"))
    written = said.split(" written")[0].rsplit(" ", 1)[-1]
    print(f"re-render onto an up-to-date site ('opcov site' again): {wall:.2f} s ({written} files written)")
    rows = [
        [
            f"`opcov site`, a first build from a fresh clone (empty cache folder; committed answer {answer})",
            f"{fresh[1] + fresh[2]:.2f} s CPU ({fresh[1]:.2f} s user, {fresh[2]:.2f} s system), {fresh[0]:.2f} s wall",
            "10 s CPU",
        ],
        [
            f"`opcov site`, new output folder, data and code as at its last build (median of {runs})",
            f"{user + system:.2f} s CPU ({user:.2f} s user, {system:.2f} s system), {total:.2f} s wall",
            "10 s CPU",
        ],
        [
            "`opcov site --no-cache` (parses and judges everything: a first build, or after any change to opcov)",
            f"{first[1] + first[2]:.2f} s CPU ({first[1]:.2f} s user, {first[2]:.2f} s system), {first[0]:.2f} s wall",
            "",
        ],
        ["`opcov site` again onto an up-to-date site", f"{wall:.2f} s wall", ""],
        [
            "what it renders",
            f"{stats['files']} files, {stats['bytes'] / 1e6:.1f} MB: {len(site.ops)} ops, "
            f"{len(site.backends)} backends, {len(site.models)} models",
            "",
        ],
    ]
    print(
        f"  {stats['files']} files, {stats['bytes'] / 1e6:.1f} MB; {len(site.ops)} ops, {len(site.backends)} backends, "
        f"{len(site.models)} models"
    )
    sizes = {}
    for name in ("index.html", "matrix.html", "assets/site.css", "assets/matrix.js", "assets/search.js"):
        with open(os.path.join(out, "run0", name), "rb") as f:
            blob = f.read()
        sizes[name] = (len(blob), len(gzip.compress(blob, 9)))
    for name, (raw, gz) in sizes.items():
        print(f"  {name}: {raw / 1024:.0f} KB, {gz / 1024:.1f} KB gzipped")
    page_gz = sum(gz for raw, gz in sizes.values())
    print(f"index + matrix with their CSS and JS: {page_gz / 1024:.1f} KB gzipped (goal <= 150 KB)")
    rows.append(["index + matrix with their CSS and JS, gzipped", f"{page_gz / 1024:.1f} KB", "150 KB"])
    for name in ("assets/search-index.js", "models.html", "compare.html"):
        with open(os.path.join(out, "run0", name), "rb") as f:
            blob = f.read()
        print(
            f"  {name} (loaded {'on first search' if 'index' in name else 'apart'}): {len(blob) / 1024:.0f} KB, "
            f"{len(gzip.compress(blob, 9)) / 1024:.1f} KB gzipped"
        )
    by_folder, weight, disk = {}, {}, 0
    for r, _, fs in os.walk(os.path.join(out, "run0")):
        top = os.path.relpath(r, os.path.join(out, "run0")).split(os.sep)[0]
        by_folder[top] = by_folder.get(top, 0) + len(fs)
        for f in fs:
            st = os.stat(os.path.join(r, f))
            weight[top] = weight.get(top, 0) + st.st_size
            disk += st.st_blocks * 512
    print("  files per folder: " + ", ".join(f"{k} {v}" for k, v in sorted(by_folder.items())))
    print(
        "  MB per folder: " + ", ".join(f"{k} {v / 1e6:.1f}" for k, v in sorted(weight.items(), key=lambda kv: -kv[1]))
    )
    print(f"  on disk (du): {disk / 1e6:.1f} MB")
    rows.append(
        [
            "on disk (as `du` counts it, whole blocks)",
            f"{disk / 1e6:.1f} MB; the most: "
            + ", ".join(f"{k}/ {v / 1e6:.1f} MB" for k, v in sorted(weight.items(), key=lambda kv: -kv[1])[:4]),
            "60 MB",
        ]
    )
    op_pages = [os.path.join(r, f) for r, _, fs in os.walk(os.path.join(out, "run0", "ops")) for f in fs]
    op_sizes = sorted(os.path.getsize(p) for p in op_pages)
    if op_sizes:
        print(
            f"op pages: {len(op_sizes)}, median {statistics.median(op_sizes) / 1024:.1f} KB, "
            f"largest {op_sizes[-1] / 1024:.1f} KB"
        )
    return rows


def _fs_type(path: str) -> str:
    """The file system type of the mount that holds ``path`` (/proc/mounts), or 'unknown'."""
    try:
        with open("/proc/mounts") as f:
            mounts = [line.split()[1:3] for line in f]
    except OSError:
        return "unknown"
    path = os.path.realpath(path)
    best = max(
        (m for m in mounts if path == m[0] or path.startswith(m[0].rstrip("/") + "/")),
        key=lambda m: len(m[0]),
        default=None,
    )
    return best[1] if best else "unknown"


def browser_figures(site: str) -> list:
    """Prints the browser's figures; returns the table rows for the docs page."""
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        print("matrix time-to-interactive: skipped (Playwright not installed)")
        return [["matrix interactive in headless Chromium", "not measured: Playwright not installed", "300 ms"]]
    chromium = os.environ.get("OPCOV_CHROMIUM") or shutil.which("chromium") or shutil.which("chromium-browser")
    if not chromium:
        print("matrix time-to-interactive: skipped (no chromium binary)")
        return [["matrix interactive in headless Chromium", "not measured: no chromium found", "300 ms"]]
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=chromium, args=ARGS)
        ready, wall, search = [], [], []
        for _ in range(5):
            page = browser.new_page()
            t = time.perf_counter()
            page.goto("file://" + os.path.join(site, "matrix.html"))
            page.wait_for_selector("html[data-matrix-ready]")
            wall.append(time.perf_counter() - t)
            ready.append(int(page.get_attribute("html", "data-matrix-ready")))
            search.append(
                page.evaluate("""() => {
                const q = document.getElementById('q'), t = performance.now();
                q.value = 'conv'; q.form.dispatchEvent(new Event('change'));
                return performance.now() - t; }""")
            )
            page.close()
        browser.close()
    print(
        f"matrix interactive (navigation start to rows rendered, median of 5): {statistics.median(ready):.0f} ms "
        f"(goal <= 300 ms); wall incl. page load {statistics.median(wall) * 1000:.0f} ms"
    )
    print(f"matrix search re-render ('conv'), median of 5: {statistics.median(search):.0f} ms")
    tall = page_heights(site, chromium)
    return tall + [
        ["matrix interactive in headless Chromium (median of 5)", f"{statistics.median(ready):.0f} ms", "300 ms"],
        ["matrix search re-render (median of 5)", f"{statistics.median(search):.0f} ms", ""],
    ]


def page_heights(site: str, chromium: str) -> list:
    """The height of llama's model page and of aten::mm's op page (the longest kinds) at 1400 px wide, as a
    reader scrolls them: table rows where the site has them."""
    from playwright.sync_api import sync_playwright

    rows = []
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=chromium, args=ARGS)
        page = browser.new_page(viewport={"width": 1400, "height": 900})
        for rel, what in (("models/llama.html", "llama's model page"), ("ops/aten/mm.html", "aten::mm's op page")):
            if os.path.isfile(os.path.join(site, rel)):
                page.goto("file://" + os.path.join(site, rel))
                px = page.evaluate("document.documentElement.scrollHeight")
                print(f"{what} at 1400 px wide: {px} px tall")
                rows.append([f"{what}, height at 1400 px wide", f"{px} px", ""])
        browser.close()
    return rows


def worst_case(coverage: str, folder: str, backends: int = 6, models: int = 800) -> str:
    """Synthetic data at the size of issue 14's targets: the bundled registered scans plus renamed copies
    (``backends`` in all), a probed file per backend (6 dtypes per op), and ``models`` models (the bundled
    op sets under new names).

    Probed statuses are drawn with a fixed seed, correlated as real ones are (an op's dtypes mostly share
    a status): the figures measure weight and speed, never coverage.
    """
    import glob
    import random

    from opcov.store import data, layout, opset

    out = os.path.join(folder, "coverage")
    sets = [opset.load(p) for p in layout.model_files(coverage)]
    names = sorted({d["model"]["name"] for d in sets})
    for i in range(models):
        base = names[i % len(names)]
        for doc in sets:
            if doc["model"]["name"] == base:
                copy = dict(doc, model=dict(doc["model"], name=f"{base}-{i:03d}"))
                opset.save(copy, os.path.join(out, "models", copy["model"]["name"], f"{doc['mode']}.yaml"))
    docs = [data.load(p) for p in sorted(glob.glob(os.path.join(coverage, "*", "registered-*.yaml")))]
    for k in range(backends - len(docs)):
        src = docs[k % len(docs)]
        docs.append(dict(src, backend=dict(src["backend"], name=f"{src['backend']['name']}{k + 2}")))
    rng = random.Random(0)
    statuses = ("pass",) * 15 + ("pass_low_precision", "mismatch", "error", "unsupported", "not_comparable")
    for doc in docs:
        name = doc["backend"]["name"]
        data.save(doc, os.path.join(out, name, "registered-torch-x.yaml"))
        ops = {}
        for op in sorted(doc["ops"]):
            if rng.random() < 0.1:
                ops[op] = {"skipped": "no OpInfo sample reaches it"}
                continue
            fwd, bwd = rng.choice(statuses), rng.choice(statuses)
            ops[op] = {
                d: {
                    "fwd": fwd if rng.random() < 0.9 else rng.choice(statuses),
                    "bwd": bwd if rng.random() < 0.9 else rng.choice(statuses),
                    "cases": rng.randint(1, 9),
                    "err": [rng.random(), rng.random()],
                    "case": f"{op}|{d}|{rng.randint(0, 9)}",
                }
                for d in ("float32", "bfloat16", "float16", "float64", "int64", "bool")
            }
        probed = {
            "schema_version": 1,
            "evidence": "probed",
            "backend": doc["backend"],
            "provenance": dict(doc["provenance"], command=f"opcov probe {name}"),
            "ops": ops,
        }
        data.save(probed, os.path.join(out, name, "probed-torch-x.yaml"))
    for f in os.listdir(coverage):
        if f.startswith("pynames-"):
            shutil.copy(os.path.join(coverage, f), out)
    return out


def main():
    import argparse

    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("coverage", nargs="?", default=os.path.join(ROOT, "coverage"))
    ap.add_argument("--worst-case", action="store_true")
    ap.add_argument("--models", type=int, default=800, help="models of the worst case (default 800)")
    ap.add_argument("--runs", type=int, default=3, help="builds to take the median of (default 3)")
    ap.add_argument(
        "--parallel",
        choices=("auto", "yes", "no"),
        default="auto",
        help="for the in-process figures (the program decides for itself): split the build with "
        "forked children as opcov site decides (auto), always, never",
    )
    ap.add_argument(
        "--out-root",
        default=None,
        help="folder to make the temporary output folders in (default: the system's; /dev/shm "
        "leaves the disk out of the figures)",
    )
    args = ap.parse_args()
    coverage = args.coverage
    with tempfile.TemporaryDirectory(dir=args.out_root) as out:
        if args.worst_case:
            coverage = worst_case(coverage, out, models=args.models)
            print(
                f"worst case: {coverage} (6 backends, each with a probed file of 6 dtypes per op; {args.models} models)"
            )
        rows = build_figures(coverage, out, args.runs, {"auto": None, "yes": True, "no": False}[args.parallel])
        rows += browser_figures(os.path.join(out, "run0"))
        where = _fs_type(out)
    from docs_page import PERFORMANCE, command_line, markdown_table, write_section

    note = f"Output folders on a file system of type {where} (file creation is most of the system CPU time)."
    name = "site-worst-case" if args.worst_case else "site"
    write_section(PERFORMANCE, name, markdown_table(["figure", "value", "goal"], rows), command_line(), note=note)


if __name__ == "__main__":
    main()
