"""The test suite's time on this machine: what `bash scripts/test.sh` costs a contributor and CI.

Usage: python benchmarks/bench_suite.py [PYTEST ARGS...]

Runs the suite as scripts/test.sh runs it (pytest, one worker per core, each file whole in one worker) with
pytest's own per-test durations, then prints and writes into the 'suite' section of docs/performance.md:
the wall time, the CPU time of the run and its children, the pass/skip/fail counts, and the test files
that cost the most (the sum of their tests' setup, call and teardown). Asserts nothing; a failing suite is
reported as such. Goal (issue 44): the whole suite under 15 minutes on this machine's 2 cores.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import tempfile
import time
from collections import defaultdict

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from docs_page import PERFORMANCE, ROOT, command_line, markdown_table, write_section  # noqa: E402

GOAL_S = 15 * 60
DURATION = re.compile(r"^(\d+\.\d+)s (setup|call|teardown)\s+(tests/[^:]+)::")


def run(extra: list[str]) -> tuple[float, float, str, str]:
    """(wall s, CPU s of the run and its children, pytest's last summary line, its output)."""
    env = dict(os.environ, TORCH_DEVICE_BACKEND_AUTOLOAD="0")
    # this checkout's opcov in the test process too (its children get it from tests/conftest.py), not an
    # editable install of another checkout
    env["PYTHONPATH"] = os.pathsep.join(p for p in (os.path.join(ROOT, "src"), env.get("PYTHONPATH")) if p)
    env.pop("PYTHONDONTWRITEBYTECODE", None)  # as a contributor's checkout runs it
    jobs = env.get("OPCOV_TEST_JOBS", "auto")
    with tempfile.TemporaryDirectory(prefix="opcov-bench-suite-") as tmp:
        log = os.path.join(tmp, "pytest.log")
        before, t0 = os.times(), time.perf_counter()
        with open(log, "w") as f:
            done = subprocess.run(
                [os.path.join(ROOT, ".venv", "bin", "python"), "-m", "pytest", "-q", "-n", jobs, "--dist", "loadfile"]
                + ["--no-loadscope-reorder", "--durations=0", "-p", "no:cacheprovider", *extra],
                cwd=ROOT,
                env=env,
                stdout=f,
                stderr=subprocess.STDOUT,
            )
        wall, after = time.perf_counter() - t0, os.times()
        text = open(log, encoding="utf-8", errors="replace").read()
    cpu = after.children_user - before.children_user + after.children_system - before.children_system
    summary = next((ln.strip("= ") for ln in reversed(text.splitlines()) if " in " in ln and "passed" in ln), "")
    return wall, cpu, f"{summary} (exit {done.returncode})", text


def by_file(text: str) -> list[tuple[str, float]]:
    """Each test file's summed durations, costliest first."""
    files: dict[str, float] = defaultdict(float)
    for line in text.splitlines():
        m = DURATION.match(line)
        if m:
            files[m[3]] += float(m[1])
    return sorted(files.items(), key=lambda kv: -kv[1])


def main(argv: list[str]) -> int:
    load = os.getloadavg()[0]  # other work on the machine stretches the wall time, not the CPU time
    wall, cpu, summary, text = run(argv)
    failed = [ln for ln in text.splitlines() if ln.startswith(("FAILED ", "ERROR "))]
    print("\n".join(failed) or "no test failed")  # which, for whoever reads a failing result in the table
    files = by_file(text)
    rows = [
        ["whole suite, wall", f"{wall / 60:.1f} min", f"{GOAL_S // 60} min"],
        ["CPU (pytest and its workers and children)", f"{cpu / 60:.1f} min", ""],
        ["result", summary, ""],
    ]
    rows += [[f"`{name}` (its tests' durations summed)", f"{secs:.0f} s", ""] for name, secs in files[:10]]
    table = markdown_table(["figure", "value", "goal"], rows)
    note = (
        f"{len(files)} test files; the ten costliest above hold {sum(s for _, s in files[:10]) / 60:.1f} of the "
        f"{sum(s for _, s in files) / 60:.1f} minutes the tests' durations sum to (two workers run at once). "
        "Browser tests run where chromium is installed (scripts/test.sh installs it as root). "
        f"Load average {load:.1f} at the start; other work stretches the wall time, not the CPU time (alone, the "
        "suite takes about its CPU time over the cores)."
        + (f" Failed: {'; '.join(f.split(' - ')[0] for f in failed)}." if failed else "")
    )
    print(table)
    print(note)
    write_section(PERFORMANCE, "suite", table, command_line(), note=note)
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
