"""Make the zoo-wide answers committed with the data (coverage/answers/, see opcov.store.answers): what each
op set under coverage/models/ contributes to ``opcov gaps BACKEND`` for every backend with data, and to
``opcov compare A B`` for every pair of them, so that a first run of either judges nothing; and, for ``opcov
site``, every data file's document as its pages read it and every verdict they show ('site',
opcov.site.committed), so that a first build parses and judges nothing.

Each answer holds the names of the data files, the SHA-256 of each one its judging opened and of each opcov
module it loaded, and is read only where those are the same, so run this after changing the data or opcov's
judging code and commit coverage/answers/ with the change (from a clean checkout: the hashes are of the
files as they are; ``--check`` says which are stale). ``--check`` judges nothing: it lists the answers that are stale or missing and exits 1 if any are.

Usage: python scripts/make_answers.py [--coverage DIR] [--check] [--only QUESTION ...]
"""

from __future__ import annotations

import argparse
import itertools
import os
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "src"))

from opcov.site import committed  # noqa: E402
from opcov.store import answers, layout, output  # noqa: E402
from opcov.verdict import compare, gaps, kept  # noqa: E402


def questions(coverage_dir: str) -> list[tuple[str, tuple]]:
    """(question, backends) for gaps on each backend with data and compare on each pair of them."""
    backends = [b for b in layout.backends_with_data(coverage_dir) if os.path.isdir(os.path.join(coverage_dir, b))]
    out = [(gaps.question(b), (b,)) for b in backends]
    out += [(compare.question(a, b), (a, b)) for a, b in itertools.combinations(backends, 2)]
    return out + [(committed.QUESTION, ())] if backends else out  # the site's documents and verdicts


def make(coverage_dir: str, only=None) -> int:
    """Each answer made in a process of its own (``one``), so that every file its judging opens is seen
    (an earlier question's in-process memos would hide the reads); obsolete answers removed."""
    names = [name for name, _ in questions(coverage_dir) if not only or name in only]
    for name in names:
        proc = subprocess.run([sys.executable, __file__, "--coverage", coverage_dir, "--one", name])
        if proc.returncode:
            return proc.returncode
    folder = os.path.join(coverage_dir, answers.FOLDER)
    wanted = {name for name, _ in questions(coverage_dir)}
    for old in sorted(os.listdir(folder)) if os.path.isdir(folder) else []:
        if old.endswith(".json.gz") and old[: -len(".json.gz")] not in wanted:
            os.remove(os.path.join(folder, old))
            print(f"removed {old}: no longer made")
    return 0


def one(coverage_dir: str, name: str) -> int:
    """Judge every op set for the question ``name`` in this process and write its answers, resting on the
    files the judging opened (every op set among them) and the opcov modules it loaded."""
    backends = dict(questions(coverage_dir))[name]
    if name == committed.QUESTION:
        output.write_atomic(answers.path_for(coverage_dir, name), committed.dumps(coverage_dir))
        print(f"{name}: every data file's document and every verdict the site shows")
        return 0
    files = layout.model_files(coverage_dir)
    with answers.opened(coverage_dir) as seen:
        if len(backends) == 1:
            done, module = gaps.judged(backends[0], coverage_dir, files), gaps
        else:  # never forked: a child's reads would go unseen
            done, module = compare.judged(*backends, coverage_dir, files, fork=False), compare
    opsets = kept.to_commit(done, coverage_dir, module.relocate, module.sources)
    if opsets is None:
        print(f"{name}: rests on data outside {coverage_dir}; not kept")
        return 0
    inputs = sorted(seen | {os.path.relpath(p, coverage_dir) for p in files})
    modules = answers.loaded_modules()
    blob = answers.dumps(coverage_dir, name, opsets, inputs, modules, kept.backends_key())
    output.write_atomic(answers.path_for(coverage_dir, name), blob)
    print(f"{name}: {len(opsets)} op sets, resting on {len(inputs)} data files and {len(modules)} opcov modules")
    return 0


def check(coverage_dir: str) -> int:
    key = kept.backends_key()
    stale = [name for name, _ in questions(coverage_dir) if not answers.fresh(coverage_dir, name, key)]
    for name in stale:
        print(f"{answers.path_for(coverage_dir, name)}: stale or missing; run python scripts/make_answers.py")
    return 1 if stale else 0


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--coverage", default=os.path.join(ROOT, "coverage"))
    ap.add_argument("--check", action="store_true", help="judge nothing; exit 1 where an answer is stale or missing")
    ap.add_argument(
        "--only", action="append", metavar="QUESTION", help="make only this answer (gaps-tpu, compare-cuda-tpu)"
    )
    ap.add_argument("--one", metavar="QUESTION", help=argparse.SUPPRESS)  # make() runs each answer so
    args = ap.parse_args()
    if args.one:
        return one(args.coverage, args.one)
    return check(args.coverage) if args.check else make(args.coverage, args.only)


if __name__ == "__main__":
    sys.exit(main())
