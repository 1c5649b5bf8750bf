"""Write the sample outputs shown in README.md and the docs from real runs, so that no sample drifts.

Usage: python scripts/make_doc_samples.py [--check]

A sample is a block between ``<!-- begin sample: ARGS | N -->`` and ``<!-- end sample -->`` in README.md or
docs/*.md: the script runs ``opcov ARGS`` here (the bundled data, no device), and writes a console block of the
command and the first N lines of its output, then ``...`` where it printed more. With --check it writes
nothing and exits 1 naming each stale sample (tests/test_docs.py runs it). Commands that read saved data
only (check, ops -b, gaps, compare) give the same output on every machine.
"""

from __future__ import annotations

import glob
import os
import re
import shlex
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PAGES = [os.path.join(ROOT, "README.md"), *sorted(glob.glob(os.path.join(ROOT, "docs", "*.md")))]
BLOCK = re.compile(r"^<!-- begin sample: (?P<args>.+?) \| (?P<lines>\d+) -->\n.*?^<!-- end sample -->$", re.S | re.M)


def output(args: str) -> list[str]:
    """The lines ``opcov ARGS`` prints here, from this checkout's source, with a cache folder of its own."""
    env = dict(os.environ, PYTHONPATH=os.path.join(ROOT, "src"), TORCH_DEVICE_BACKEND_AUTOLOAD="0", COLUMNS="100")
    env["XDG_CACHE_HOME"] = tempfile.mkdtemp(prefix="opcov-samples-")
    done = subprocess.run(
        [sys.executable, "-m", "opcov", *shlex.split(args)], capture_output=True, text=True, env=env, cwd=ROOT
    )
    return [line.rstrip() for line in (done.stdout + done.stderr).rstrip("\n").splitlines()]


def block(args: str, lines: int, printed: list[str]) -> str:
    shown = printed[:lines] + (["..."] if len(printed) > lines else [])
    return "\n".join(
        [
            f"<!-- begin sample: {args} | {lines} -->",
            "```console",
            f"$ opcov {args}",
            *shown,
            "```",
            "<!-- end sample -->",
        ]
    )


def refreshed(text: str) -> str:
    """``text`` with every sample block rewritten from a run now."""
    return BLOCK.sub(lambda m: block(m["args"], int(m["lines"]), output(m["args"])), text)


def main(argv: list[str]) -> int:
    check = "--check" in argv
    stale = []
    for page in PAGES:
        with open(page, encoding="utf-8") as f:
            text = f.read()
        if not BLOCK.search(text):
            continue
        fresh = refreshed(text)
        if fresh == text:
            continue
        stale.append(os.path.relpath(page, ROOT))
        if not check:
            with open(page, "w", encoding="utf-8") as f:
                f.write(fresh)
    for page in stale:
        print(
            f"{page}: {'a sample is stale: run python scripts/make_doc_samples.py' if check else 'samples rewritten'}"
        )
    return 1 if check and stale else 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
