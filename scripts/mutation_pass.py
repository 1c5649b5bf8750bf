"""Plant small bugs, one at a time, in the code that decides answers (src/opcov/verdict, src/opcov/store,
src/opcov/site), run the test files that ought to notice, and record which the suite catches.

Each mutation is (file, exact old text, new text, what it breaks, test files). The old text must stand in
its file exactly once, or the mutation is stale (the code moved on: update the list). The file is put back
byte for byte after each run, whatever happens (try/finally, and SIGTERM is turned into an interruption so
that the finally runs); a copy of it waits in the temporary folder while the bug is planted, and a later run
puts back any file a killed run left planted. At the end the tree is compared with what git said before the
first plant: any difference is an error.

    python scripts/mutation_pass.py [--only WORD] [--root DIR] [--write-docs] [--no-baseline]

--root runs the pass on another checkout of the project (a clone: nothing in this one is touched while
others work in it). The tests run with that checkout's src/ first on PYTHONPATH. --write-docs rewrites the
table between the mutation-pass markers of docs/CONTRIBUTING.md. Exit status 1 when a mutation is missed
or stale, 2 when the baseline fails (the tests fail with no bug planted: the figures would mean nothing).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import re
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "benchmarks"))

T = "tests/"
FIRST = (T + "test_planted_bugs.py", T + "test_mutation_gaps.py")  # quick, and aimed at these bugs: run first
SIGNATURE = (*FIRST, T + "test_sigclass.py", T + "test_judge_rules.py")
COMPILED = (*FIRST, T + "test_compile_verdict.py")
JUDGE = (*FIRST, T + "test_judge_rules.py", T + "test_rule_table.py")
OBSERVED = (*FIRST, T + "test_judge_rules.py", T + "test_observed.py")
BUNDLE = (*FIRST, T + "test_bundle.py", T + "test_data_safety_bounds.py")
DATA = (*FIRST, T + "test_integrity.py", T + "test_reads.py", T + "test_data_lint.py", T + "test_data_safety.py")
LAYOUT = (*FIRST, T + "test_layouts.py", T + "test_support.py")
SITE = (*FIRST, T + "test_site.py")

V, S, W = "src/opcov/verdict/", "src/opcov/store/", "src/opcov/site/"


@dataclass(frozen=True)
class Mutation:
    file: str
    old: str
    new: str
    breaks: str
    tests: tuple[str, ...]


M = Mutation
MUTATIONS = [
    # ---------------------------------------------------------------- verdict: the signature rule
    M(V + "signature.py", "    if case is None or call is None:\n        return True",
      "    if case is None or call is None:\n        return False",
      "a failing probe case with no signature class never matches a call (shape text)", SIGNATURE),
    M(V + "signature.py", "        return not sig or same_path(sig, shape)", "        return bool(sig) and same_path(sig, shape)",
      "a failing probe case with no signature class never matches a call (class)", SIGNATURE),
    M(S + "combine.py", 'return status, case, "" if sig == "?" else sig', "return status, case, sig",
      "a failing case recorded with '?' (no class) is read as a class, matching nothing", SIGNATURE),
    M(V + "signature.py", '    if cases > fails or status == "fallback":', '    if cases >= fails or status == "fallback":',
      "every probe case failed, none like the calls: pass instead of unknown", SIGNATURE),
    M(S + "combine.py", "_DTYPE_ONLY.fullmatch(str(why).strip())", "_DTYPE_ONLY.search(str(why).strip())",
      "a value difference whose text starts like a dtype-only one becomes a note", SIGNATURE),
    M(V + "signature.py", "all(failed_values_equal(t) for t in items)", "any(failed_values_equal(t) for t in items)",
      "one of a model's items a dtype-only difference makes all of them notes", (*FIRST, T + "test_reads.py")),
    # ---------------------------------------------------------------- verdict: the compile path
    M(V + "compiled.py", "        if (self.breaks and self.eager is None) or self.replaced:", "        if self.replaced:",
      "graph breaks with no eager op set are not judged unknown", COMPILED),
    M(V + "compiled.py", '        if self.outcome == "aot_failed":\n            return "fails"',
      '        if self.outcome == "aot_failed":\n            return "unknown"',
      "an AOTAutograd failure with the backend's recipe is unknown, not fails", COMPILED),
    M(V + "compiled.py", "        return min(parts, key=judge.VERDICT_ORDER.index)", "        return max(parts, key=judge.VERDICT_ORDER.index)",
      "the compile verdict is the best of graphs and breaks, not the worst", COMPILED),
    # ---------------------------------------------------------------- verdict: the judge
    M(V + "judge.py", '    if kind == "cpu" and enabled and cpu_rec and cpu_rec.get("res") == "missing":',
      '    if kind == "cpu" and enabled and cpu_rec and cpu_rec.get("res") == "missing" and not cpu_rec:',
      "an op only the CPU fallback catches, with no CPU kernel either, runs with fallback instead of failing", JUDGE),
    M(V + "judge.py", '        if o == "fails" and strong.get(e, n_strong) < failing_rank:',
      '        if o == "fails" and strong.get(e, n_strong) > failing_rank:',
      "a failure rests on the weakest evidence of all parts, not its best-evidenced failing part", JUDGE),
    M(V + "judge.py", '        said = f"{direction} {vocab.PROBED[status].label} in {dtype}{why_line}"\n        return Finding(direction, dtype, "fallback", "probed", said, src)',
      '        said = f"{direction} {vocab.PROBED[status].label} in {dtype}{why_line}"\n        return Finding(direction, dtype, "ok", "probed", said, src)',
      "a probe case that ran through the CPU fallback counts as running on the device", JUDGE),
    M(V + "judge.py", '    if status == "mismatch" and signature.dtype_only(slot.why):', '    if status == "mismatch":',
      "every value mismatch becomes a dtype note on a running op", JUDGE),
    # ---------------------------------------------------------------- verdict: observed runs
    M(V + "observed.py", '    if not (res.get("values") or {}).get("match", True):\n        return "runs_with_value_note"',
      '    if not (res.get("values") or {}).get("match", True):\n        return "runs"',
      "a run whose values differ from CPU's is a plain 'runs'", OBSERVED),
    M(V + "observed.py", "        return bool(ok) and not fb", "        return bool(ok)",
      "'runs' agrees with a run that went through the CPU fallback", OBSERVED),
    # ---------------------------------------------------------------- store: bundles
    M(S + "bundle.py", '    if got != b["sha256"]:', '    if got[:0] != b["sha256"][:0]:',
      "a bundle tampered with at the same length passes the content hash", BUNDLE),
    M(S + "bundle.py", 'if any(c.get("sha256") == b["sha256"] for c in old["provenance"].get("contributed") or []):',
      'if False and any(c.get("sha256") == b["sha256"] for c in old["provenance"].get("contributed") or []):',
      "the same bundle ingested twice counts twice", BUNDLE),
    # ---------------------------------------------------------------- store: data files
    M(S + "data.py", "    if stamp.intact and stamp.ops == have:", "    if stamp.intact or stamp.ops == have:",
      "an edited file that keeps its op count passes its integrity line", DATA),
    M(S + "data.py", '    if not text.endswith("\\n"):', '    if not text.endswith(("\\n", "")):',
      "a file cut mid-line is read", DATA),
    M(S + "data.py", "        if counted is not None and counted != have:", "        if counted is not None and counted < have:",
      "an unstamped file cut at a line end (fewer ops than its summary counts) is read", DATA),
    M(S + "data.py", "        if taken:\n            raise yaml.constructor.ConstructorError(",
      "        if taken and not taken:\n            raise yaml.constructor.ConstructorError(",
      "a key given twice: the last wins", DATA),
    M(S + "data.py", "not isinstance(value, bool) and 0 <= value <= MAX_COUNT", "not isinstance(value, bool) and 0 <= value",
      "a count above the limit (10^15) is read", DATA),
    # ---------------------------------------------------------------- store: layout
    M(S + "layout.py", "    return (exact or same or newest)[-1]", "    return (newest or exact)[-1]",
      "the snapshot of another torch release is judged when the op set's own is there", LAYOUT),
    # ---------------------------------------------------------------- site
    M(W + "render.py", "    worst = min((v.verdict for _, v in vs),", "    worst = max((v.verdict for _, v in vs),",
      "the model badge shows the best mode's verdict, not the worst", SITE),
    M(W + "render.py", "    level = vocab.worst([v.evidence for _, v in vs], vocab.EVIDENCE_WORST_FIRST)",
      "    level = vocab.worst([v.evidence for _, v in vs], vocab.EVIDENCE_LEVELS)",
      "the model badge claims the strongest evidence of its modes, not the weakest", SITE),
    M(W + "render.py", '    return good if pct >= 95 else BADGE_COLOUR["warn"]', '    return good if pct >= 90 else BADGE_COLOUR["warn"]',
      "a share badge is green from 90% instead of 95%", SITE),
    M(W + "render.py", '    if stem[0] == ".":  # ', '    if stem[:2] == "..":  # ',
      "a page name may start with a dot (a hidden file)", SITE),
    M(W + "render.py", "        key = base.lower()", "        key = base",
      "names that differ only in case share a page on a case-insensitive disk", SITE),
]  # fmt: skip


# ---------------------------------------------------------------- putting files back


def _restore_dir(root: str) -> str:
    """Where the copies of planted files wait: in the temporary folder, per checkout."""
    key = hashlib.sha256(os.path.realpath(root).encode()).hexdigest()[:12]
    return os.path.join(tempfile.gettempdir(), f"opcov-mutation-pass-{key}")


def _put_back_leftovers(root: str) -> list[str]:
    """Files a killed run left planted: put back from their copies (the copy names the file)."""
    folder = _restore_dir(root)
    if not os.path.isdir(folder):
        return []
    done = []
    for name in sorted(os.listdir(folder)):
        with open(os.path.join(folder, name), encoding="utf-8") as f:
            saved = json.load(f)
        _write(os.path.join(root, saved["file"]), saved["text"])
        os.unlink(os.path.join(folder, name))
        done.append(saved["file"])
    os.rmdir(folder)
    return done


def _write(path: str, text: str) -> None:
    with open(path, "w", encoding="utf-8", newline="") as f:
        f.write(text)


def _read(path: str) -> str:
    with open(path, encoding="utf-8", newline="") as f:
        return f.read()


def _git_state(root: str, files) -> str:
    """What git says of ``files`` in ``root`` (their diff against HEAD): compared before and after."""
    out = subprocess.run(["git", "-C", root, "diff", "--", *files], capture_output=True, text=True)
    return out.stdout if out.returncode == 0 else f"(git diff failed: {out.stderr.strip()})"


class Planted:
    """The mutation in its file for the ``with`` block; the file put back byte for byte after it."""

    def __init__(self, root: str, m: Mutation):
        self.path = os.path.join(root, m.file)
        self.root, self.m = root, m
        self.original = _read(self.path)
        self.copy = os.path.join(_restore_dir(root), hashlib.sha256(m.file.encode()).hexdigest()[:16] + ".json")

    def __enter__(self):
        os.makedirs(os.path.dirname(self.copy), exist_ok=True)
        with open(self.copy, "w", encoding="utf-8") as f:
            json.dump({"file": self.m.file, "text": self.original}, f)
        _write(self.path, self.original.replace(self.m.old, self.m.new, 1))
        return self

    def __exit__(self, *exc):
        _write(self.path, self.original)
        if _read(self.path) != self.original:
            raise SystemExit(f"mutation_pass: {self.m.file} could not be put back; its copy is {self.copy}")
        os.unlink(self.copy)
        return False


# ---------------------------------------------------------------- running the tests


def run_tests(root: str, tests, timeout: float, *, deselect=(), first_failure: bool = True) -> tuple[int, str, float]:
    """(pytest's exit status, the first failing test, seconds) for ``tests`` in ``root``, stopping at the
    first failure (unless not ``first_failure``), with ``root``'s src/ first on the path, less the tests
    ``deselect`` names."""
    env = dict(os.environ, TORCH_DEVICE_BACKEND_AUTOLOAD="0")
    env["PYTHONPATH"] = os.pathsep.join(p for p in (os.path.join(root, "src"), env.get("PYTHONPATH")) if p)
    t0 = time.monotonic()
    flags = ["-x"] if first_failure else ["-rfE"]
    flags += [f"--deselect={t}" for t in deselect]
    try:
        proc = subprocess.run(
            [sys.executable, "-m", "pytest", "-q", *flags, "-p", "no:cacheprovider", "-W", "ignore", *tests],
            cwd=root, env=env, capture_output=True, text=True, timeout=timeout, start_new_session=True,
        )  # fmt: skip
    except subprocess.TimeoutExpired:
        return -1, f"over {timeout:g} s", time.monotonic() - t0
    failed = re.findall(r"^(?:FAILED|ERROR) (.+?)(?: - .*)?$", proc.stdout, re.M)  # an id may hold spaces
    last = proc.stdout.strip().splitlines()[-1:] or [""]
    return (
        proc.returncode,
        "\n".join(failed) if failed and not first_failure else (failed[0] if failed else last[0]),
        (time.monotonic() - t0),
    )


def verdict_of(code: int) -> str:
    """pytest's exit status with a bug planted: 1 (a test failed) or 2 (a module failed to import: the
    bug broke it) is caught; 0 is missed; anything else (no tests, an internal error, a timeout) an error."""
    return {0: "missed", 1: "caught", 2: "caught"}.get(code, "error")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--only", help="only the mutations whose file or description contains this")
    ap.add_argument("--root", default=ROOT, help="the checkout to plant in (default: this one)")
    ap.add_argument("--write-docs", action="store_true", help="rewrite the table in docs/CONTRIBUTING.md")
    ap.add_argument("--no-baseline", action="store_true", help="skip the run with no bug planted")
    ap.add_argument("--timeout", type=float, default=1200.0, help="seconds for one run of the tests")
    args = ap.parse_args()
    root = os.path.abspath(args.root)
    signal.signal(signal.SIGTERM, lambda *_: (_ for _ in ()).throw(KeyboardInterrupt()))
    for f in _put_back_leftovers(root):
        print(f"put back {f}, left planted by a run that was killed", file=sys.stderr)
    chosen = [m for m in MUTATIONS if not args.only or args.only in m.file or args.only in m.breaks]
    files = sorted({m.file for m in chosen})
    before = _git_state(root, files)
    stale = [m for m in chosen if _read(os.path.join(root, m.file)).count(m.old) != 1]
    for m in stale:
        print(f"stale: {m.file}: the old text of '{m.breaks}' is not there exactly once", file=sys.stderr)
    broken: list[str] = []  # tests that fail with no bug planted: left out of every run, and named
    if not args.no_baseline:
        suites = sorted({t for m in chosen for t in m.tests})
        code, failing, secs = run_tests(root, suites, args.timeout * 4, first_failure=False)
        broken = [t for t in failing.split("\n") if "::" in t] if code == 1 else []
        print(f"baseline (no bug planted): {len(suites)} test files, exit {code} in {secs:.0f} s", flush=True)
        if code not in (0, 1) or (code == 1 and not broken):
            print(
                f"mutation_pass: the tests cannot run with no bug planted ({failing}): fix that first", file=sys.stderr
            )
            return 2
        for t in broken:
            print(f"failing with no bug planted, left out of every run: {t}", file=sys.stderr)
    rows = []
    t0 = time.monotonic()
    try:
        for i, m in enumerate(chosen, 1):
            if m in stale:
                rows.append([i, m.file.removeprefix("src/opcov/"), m.breaks, "stale", "", ""])
                continue
            with Planted(root, m):
                code, first, secs = run_tests(root, m.tests, args.timeout, deselect=broken)
            result = verdict_of(code)
            rows.append(
                [
                    i,
                    m.file.removeprefix("src/opcov/"),
                    m.breaks,
                    result,
                    first if result == "caught" else "",
                    f"{secs:.0f}",
                ]
            )
            print(
                f"{result:7} {i:2} {m.file.removeprefix('src/opcov/'):22} {m.breaks} [{first}] {secs:.0f} s", flush=True
            )
    finally:
        clean = _git_state(root, files) == before
        if not clean:
            print("mutation_pass: the tree differs from before the pass (git diff): look at " + ", ".join(files),
                  file=sys.stderr)  # fmt: skip
    if not clean:
        return 2
    counts = {k: sum(1 for r in rows if r[3] == k) for k in ("caught", "missed", "error", "stale")}
    print(
        f"\n{len(rows)} mutations: {counts['caught']} caught, {counts['missed']} missed, {counts['error']} errors, "
        f"{counts['stale']} stale; {time.monotonic() - t0:.0f} s; the tree is as it was (git diff)"
    )
    if args.write_docs and not args.only:
        from docs_page import command_line, markdown_table, write_section

        table = markdown_table(["#", "file", "the bug planted", "result", "caught by", "s"], rows)
        table += (
            f"\n\n{counts['caught']} of {len(rows)} caught, {counts['missed']} missed, {counts['error']} errors, "
            f"{counts['stale']} stale."
        )
        if broken:
            table += " Left out of every run, failing with no bug planted: " + ", ".join(f"`{t}`" for t in broken) + "."
        write_section(os.path.join(ROOT, "docs", "CONTRIBUTING.md"), "mutation-pass", table, command_line())
    return 1 if counts["missed"] or counts["error"] or counts["stale"] else 0


if __name__ == "__main__":
    try:
        raise SystemExit(main())
    except KeyboardInterrupt:  # the planted file was put back on the way out (Planted.__exit__)
        print("mutation_pass: interrupted", file=sys.stderr)
        raise SystemExit(130) from None
