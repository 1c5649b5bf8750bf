"""Figures pages that the measuring scripts rewrite (docs/performance.md, docs/accuracy.md).

Each script owns one section of a page, between the lines ``<!-- begin NAME -->`` and
``<!-- end NAME -->``, and replaces it whole on every run, stamped with the command, the date, the
versions and the machine, so the page always shows the last measurement and how to repeat it; nothing
is ever appended. A page without the section's two marker lines is an error: where figures belong is
decided in the page, not by the script.

    from docs_page import markdown_table, write_section   # sys.path: the benchmarks/ folder
    write_section("docs/performance.md", "check", markdown_table(["figure", "value"], rows), "python benchmarks/bench_check.py")
"""

from __future__ import annotations

import datetime
import os
import platform
import re
import shlex
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PERFORMANCE = os.path.join(ROOT, "docs", "performance.md")
ACCURACY = os.path.join(ROOT, "docs", "accuracy.md")
if os.path.join(ROOT, "src") not in sys.path:
    sys.path.insert(0, os.path.join(ROOT, "src"))


def markdown_table(header: list[str], rows: list[list]) -> str:
    """A Markdown table; '|' inside a cell is escaped."""

    def cells(values):
        return "| " + " | ".join(str(v).replace("|", "\\|") for v in values) + " |"

    return "\n".join([cells(header), cells(["---"] * len(header)), *(cells(r) for r in rows)])


def command_line(script: str | None = None) -> str:
    """How this process was started, as a user would type it: 'python benchmarks/x.py --flag'."""
    path = os.path.relpath(os.path.abspath(script or sys.argv[0]), ROOT)
    return " ".join(["python", path, *(shlex.quote(a) for a in sys.argv[1:])])


def _version(dist: str) -> str | None:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version(dist)
    except PackageNotFoundError:
        return None


def stamp(command: str, packages: tuple[str, ...] = ("torch",), versions: dict | None = None) -> str:
    """One line: the command, the date (UTC), opcov's and the packages' versions, Python, the machine and
    its load (other work on it slows every figure). ``versions``: the packages' versions where another
    Python than this one ran the measured work (a venv with torch_xla; 'Python' its version), else read here."""
    from opcov.version import __version__

    said = [f"opcov {__version__}"]
    said += [f"{p} {v}" for p in packages if (v := versions.get(p) if versions is not None else _version(p))]
    said.append(f"Python {(versions or {}).get('Python') or platform.python_version()}")
    today = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d")
    return (
        f"Measured {today} by `{command}`; {', '.join(said)}; "
        f"{platform.system()} {platform.machine()}, {os.cpu_count()} CPUs ({platform.platform()}), "
        f"load average {os.getloadavg()[0]:.1f} when written."
    )


def write_section(
    page: str,
    name: str,
    table_markdown: str,
    command: str,
    *,
    packages=("torch",),
    note: str = "",
    stamp_text: str | None = None,
) -> None:
    """Replace the section ``name`` of ``page`` with ``table_markdown``, an optional note and the stamp
    (``stamp_text`` where the figures were measured earlier by another run, which it names)."""
    with open(page, encoding="utf-8") as f:
        text = f.read()
    begin, end = f"<!-- begin {name} -->", f"<!-- end {name} -->"
    pattern = re.compile(rf"^{re.escape(begin)}\n.*?^{re.escape(end)}$", re.S | re.M)
    if len(pattern.findall(text)) != 1:
        raise SystemExit(
            f"{os.path.relpath(page, ROOT)}: no single section '{begin}' ... '{end}' (each on a line of its "
            "own): add the two lines where these figures belong"
        )
    body = [table_markdown.rstrip(), ""]
    if note:
        body += [note.rstrip(), ""]
    body.append(stamp_text or stamp(command, tuple(packages)))
    block = "\n".join([begin, *body, end])
    from opcov.store.output import write_atomic  # no half-written page, never through a planted link

    write_atomic(page, pattern.sub(lambda _: block, text))
    print(f"{os.path.relpath(page, ROOT)}: section '{name}' rewritten", file=sys.stderr)
