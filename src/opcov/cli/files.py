"""``opcov lint`` (validate coverage files) and ``opcov summary`` (per backend, how many ops on each path)."""

from __future__ import annotations

import json
import os
import sys

from opcov.cli import common, options
from opcov.errors import EXIT_GATE, EXIT_OK, UsageError
from opcov.store import layout


def add_lint(sub) -> None:
    li = sub.add_parser("lint", help="validate coverage files; every problem with file:line")
    li.add_argument("paths", nargs="*", help=f"files or folders (default: {layout.DEFAULT_COVERAGE}/)")
    li.add_argument(
        "--no-catalog",
        action="store_true",
        help="do not check op names against this torch's catalogue (no torch import; where torch is not "
        "installed, lint skips the check and says so)",
    )
    li.add_argument(
        "--notes",
        action="store_true",
        help="also list the informational notes: ops unknown to this torch in files made with another build",
    )


def run_lint(args) -> int:
    import importlib.util

    from opcov.store.lint import lint_paths
    from opcov.torchenv import install_command

    catalog = not args.no_catalog
    if catalog and importlib.util.find_spec("torch") is None:  # the base install: lint is one of its commands
        catalog = False
        print(
            "opcov: torch is not installed: op names are not checked against its catalogue "
            f"({install_command()} checks them; --no-catalog skips the check without this line)",
            file=sys.stderr,
        )
    files, problems = lint_paths(args.paths, check_catalog=catalog)
    notes = [p for p in problems if p.severity == "info"]
    for p in problems:
        if p.severity != "info" or args.notes:
            print(p)
    errors = sum(p.severity == "error" for p in problems)
    warnings = sum(p.severity == "warning" for p in problems)
    print(f"{len(files)} file(s) checked: {errors} error(s), {warnings} warning(s)")
    if notes and not args.notes:
        print(
            f"note: {len({p.path for p in notes})} file(s) made with another torch build, or by a backend package "
            "not loaded here, name ops this torch lacks: expected, not a problem (--notes lists them)"
        )
    return EXIT_GATE if errors else EXIT_OK


def add_summary(sub) -> None:
    su = sub.add_parser("summary", help="per backend, how many ops fall on each path (from coverage files)")
    su.add_argument(
        "paths",
        nargs="*",
        metavar="BACKEND|PATH",
        help=f"backend names (their files in the coverage folder), files or folders (default: {layout.DEFAULT_COVERAGE}/)",
    )
    options.add_coverage(su, dest="coverage_dir")
    options.add_format(su, "table", "json")


def run_summary(args) -> int:
    from opcov import formats
    from opcov.activity import activity
    from opcov.store import lineyaml

    files = _summary_files(args.paths, args.coverage_dir)
    docs = []
    with activity("reading coverage files") as say:
        for f in files:
            say(f)
            docs.append((f, lineyaml.load(f)))
    if not docs:
        raise UsageError("no coverage files found; create one with 'opcov scan BACKEND'")
    from opcov.scan.rereach import reasons  # torch-free: why a composite's reach stays unresolved

    why = {f: reasons(d.get("ops") or {}) for f, d in docs}
    if args.format == "json":
        print(
            json.dumps(
                {
                    f: {
                        "backend": d["backend"],
                        "provenance": d["provenance"],
                        "summary": d.get("summary", {}),
                        "unresolved_why": dict(why[f]),
                    }
                    for f, d in docs
                },
                indent=2,
                sort_keys=True,
            )
        )
    else:
        formats.print_summary(docs)
        for f, counts in why.items():
            if counts:
                print(f"\n{f}: aten overloads whose forward reach stays unresolved, {sum(counts.values())}, by why:")
                ranked = sorted(counts.items(), key=lambda kv: (-kv[1], kv[0]))
                for text, n in ranked[:_WHY_SHOWN]:
                    print(f"  {n:4d}  {text}")
                rest = ranked[_WHY_SHOWN:]
                if rest:
                    print(
                        f"  {sum(n for _, n in rest):4d}  {len(rest)} other reasons, each its own error "
                        "(--format json lists them; each op's why: opcov ops NAME)"
                    )
    return EXIT_OK


_WHY_SHOWN = 12  # reasons listed by summary for unresolved reach, most common first


def _summary_files(args_, coverage_dir) -> list[str]:
    """The coverage files of ``summary``'s arguments: a file or folder is itself, any other name is a
    backend (its snapshots in the coverage folder; did-you-mean when it has none)."""
    from opcov import suggest

    if not args_:
        return layout.coverage_files([coverage_dir] if coverage_dir else None)
    files = []
    for arg in args_:
        if os.path.exists(arg) or os.sep in arg or layout.is_yaml(arg):
            files.extend(layout.coverage_files([arg]))
            continue
        coverage = layout.read_coverage(coverage_dir, say=common.say)
        found = [f for kind in layout.EVIDENCE for f in layout.snapshots(coverage, arg)[kind]]
        if not found:
            raise suggest.no_backend_data(arg, coverage)
        files.extend(sorted(found))
    return files


COMMANDS = {"lint": (add_lint, run_lint), "summary": (add_summary, run_summary)}
