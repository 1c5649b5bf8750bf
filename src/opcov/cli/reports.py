"""Reports read from coverage data (no torch import): ``opcov diff`` (what changed between two snapshots),
``opcov gaps`` (a backend's failing or missing ops) and ``opcov compare`` (what one backend lacks that another has)."""

from __future__ import annotations

import os
import sys

from opcov.cli import options
from opcov.errors import EXIT_GATE, EXIT_OK, UsageError
from opcov.store import layout


def add_diff(sub) -> None:
    df = sub.add_parser("diff", help="what changed between two coverage snapshots of a backend")
    df.add_argument("old")
    df.add_argument("new")
    df.add_argument("--fail-on-regression", action="store_true", help="exit 1 on any real regression")
    options.add_format(df, "text", "json", "markdown")


def run_diff(args) -> int:
    from opcov.verdict import diff

    for path in (args.old, args.new):  # 'opcov diff tpu cuda' said "tpu: error: cannot read: No such file..."
        if not os.path.exists(path):
            names = not any(os.path.exists(p) or os.sep in p or layout.is_yaml(p) for p in (args.old, args.new))
            also = f"; to compare two backends: 'opcov compare {args.old} {args.new}'" if names else ""
            raise UsageError(
                f"{path}: no such file; diff compares two snapshot files of one backend (coverage/BACKEND/*.yaml){also}"
            )
    result = diff.diff_files(args.old, args.new)
    sys.stdout.write(diff.render(result, args.format))
    return EXIT_GATE if args.fail_on_regression and result.regressions else EXIT_OK


def add_gaps(sub) -> None:
    gp = sub.add_parser("gaps", help="a backend's failing or missing ops, ranked by zoo models blocked")
    gp.add_argument("backend")
    options.add_coverage(gp)
    options.add_mode(gp, action="append")
    gp.add_argument("--top", type=options.at_least_one, default=30, help="show this many ops (default: %(default)s)")
    options.add_format(gp, "text", "json")
    options.add_path(
        gp, "compile: what blocks the zoo's compiled op sets on the backend's compile coverage, graph breaks too"
    )


def run_gaps(args) -> int:
    from opcov import suggest
    from opcov.verdict import gaps

    suggest.check_backends([args.backend], args.coverage)  # did you mean, before judging any model
    args.coverage = layout.zoo_coverage(args.coverage)
    if args.path == "compile":
        from opcov.verdict import compiled

        result = compiled.gaps(args.backend, args.coverage, args.mode)
        sys.stdout.write(compiled.render_gaps(result, args.top, args.format))
        return EXIT_OK
    ranked = gaps.rank(args.backend, args.coverage, args.mode)
    sys.stdout.write(gaps.render(ranked, args.backend, args.top, args.format))
    return EXIT_OK


def add_compare(sub) -> None:
    cp = sub.add_parser(
        "compare",
        help="what backend A lacks that B has, and the reverse, ranked by zoo "
        "models affected (from coverage data, no torch import)",
    )
    cp.add_argument("a", help="a backend with data under the coverage folder")
    cp.add_argument("b", help="the backend to compare it with")
    cp.add_argument(
        "--models",
        default="zoo",
        metavar="zoo|NAMES",
        help="judge on every op set under coverage/models/ ('zoo', the default) or on these comma-separated models",
    )
    options.add_mode(cp, action="append")
    options.add_coverage(cp)
    options.add_format(cp, "text", "json")


def run_compare(args) -> int:
    from opcov.verdict import compare

    args.coverage = layout.zoo_coverage(args.coverage)
    result = compare.compare(args.a, args.b, args.coverage, models=compare.parse_models(args.models), modes=args.mode)
    sys.stdout.write(compare.render(result, args.format))
    return EXIT_OK


COMMANDS = {"diff": (add_diff, run_diff), "gaps": (add_gaps, run_gaps), "compare": (add_compare, run_compare)}
