"""Make the zoo-wide answers committed with the data (coverage/answers/, see opcov.store.answers): what each
op set under coverage/models/ contributes to ``opcov gaps BACKEND`` for every backend with data, and to
``opcov compare A B`` for every pair of them, so that a first run of either judges nothing.

Each answer holds the SHA-256 of every data file and of every opcov module loaded while it was judged, and
is read only where those are the same bytes, so run this after changing the data or opcov's judging code
and commit coverage/answers/ with the change (from a clean checkout: the hashes are of the files as they
are). ``--check`` judges nothing: it lists the answers that are stale or missing and exits 1 if any are.

Usage: python scripts/make_answers.py [--coverage DIR] [--check] [--only QUESTION ...]
"""

from __future__ import annotations

import argparse
import itertools
import os
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "src"))

from opcov.store import answers, layout, output  # noqa: E402
from opcov.verdict import compare, gaps, kept  # noqa: E402


def questions(coverage_dir: str) -> list[tuple[str, tuple]]:
    """(question, backends) for gaps on each backend with data and compare on each pair of them."""
    backends = [b for b in layout.backends_with_data(coverage_dir) if os.path.isdir(os.path.join(coverage_dir, b))]
    out = [(gaps.question(b), (b,)) for b in backends]
    out += [(compare.question(a, b), (a, b)) for a, b in itertools.combinations(backends, 2)]
    return out


def make(coverage_dir: str, only=None) -> int:
    files = layout.model_files(coverage_dir)
    made: dict[str, dict] = {}
    for name, backends in questions(coverage_dir):
        if only and name not in only:
            continue
        if len(backends) == 1:
            done, module = gaps.judged(backends[0], coverage_dir, files), gaps
        else:
            done, module = compare.judged(*backends, coverage_dir, files), compare
        opsets = kept.to_commit(done, coverage_dir, module.relocate, module.sources)
        if opsets is None:
            print(f"{name}: rests on data outside {coverage_dir}; not kept")
            continue
        made[name] = opsets
        print(f"{name}: {len(opsets)} op sets")
    modules = answers.loaded_modules()  # every opcov module the judging above loaded
    folder = os.path.join(coverage_dir, answers.FOLDER)
    for old in sorted(os.listdir(folder)) if os.path.isdir(folder) and not only else []:
        if old.endswith(".json.gz") and old[: -len(".json.gz")] not in made:
            os.remove(os.path.join(folder, old))
            print(f"removed {old}: no longer made")
    for name, opsets in made.items():
        output.write_atomic(answers.path_for(coverage_dir, name), answers.dumps(coverage_dir, name, opsets, modules))
    print(f"wrote {len(made)} answers to {folder}/ (resting on {len(modules)} opcov modules)")
    return 0


def check(coverage_dir: str) -> int:
    stale = [name for name, _ in questions(coverage_dir) if not answers.fresh(coverage_dir, name)]
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
    args = ap.parse_args()
    return check(args.coverage) if args.check else make(args.coverage, args.only)


if __name__ == "__main__":
    sys.exit(main())
