"""The ``opcov`` command: parse, call, print. Exit codes: 0 ok, 1 a gate failed, 2 usage or data error.

torch is imported only by the commands that need the dispatcher (ops, scan), so
``backends``, ``lint`` and ``summary`` stay fast.
"""

from __future__ import annotations

import argparse
import json
import os
import sys

from opcov import __version__
from opcov.errors import EXIT_GATE, EXIT_OK, EXIT_USAGE, OpcovError, UsageError

DEFAULT_COVERAGE = "coverage"


class _Parser(argparse.ArgumentParser):
    def error(self, message):  # one line and exit 2, as for every usage error
        self.exit(EXIT_USAGE, f"opcov: error: {message} (see 'opcov --help')\n")


def build_parser() -> argparse.ArgumentParser:
    p = _Parser(prog="opcov", description="Which ATen operators does a PyTorch backend support?")
    p.add_argument("--version", action="version", version=f"opcov {__version__}")
    sub = p.add_subparsers(dest="command", required=True, parser_class=_Parser)

    ops = sub.add_parser("ops", help="the op catalogue: every overload the dispatcher knows")
    ops.add_argument("pattern", nargs="?", help="regular expression searched in op names")
    ops.add_argument("--core", action="store_true", help="only core ATen IR ops")
    ops.add_argument("--tag", action="append", default=[], help="only ops with this tag (repeatable)")
    ops.add_argument("--namespace", help="only this namespace (aten, prims, c10d, tpu...)")
    ops.add_argument("--import", dest="import_module", metavar="MODULE",
                     help="import a backend module first, so its namespaces are listed")
    ops.add_argument("--format", choices=("table", "json", "yaml"), default="table")

    be = sub.add_parser("backends", help="known backends and which are installed (imports none)")
    be.add_argument("--import", dest="import_module", metavar="MODULE",
                    help="also list a PrivateUse1 backend provided by MODULE")
    be.add_argument("--format", choices=("table", "json"), default="table")

    sc = sub.add_parser("scan", help="registered coverage of every op for a backend (no device needed)")
    sc.add_argument("backend")
    sc.add_argument("--import", dest="import_module", metavar="MODULE",
                    help="module that registers the backend's kernels (PrivateUse1 backends)")
    sc.add_argument("--out", help="coverage file to write (default: coverage/<backend>/registered-...yaml)")
    sc.add_argument("--no-reach", action="store_true",
                    help="skip recording what composites reach (faster; composites stay unresolved)")

    li = sub.add_parser("lint", help="validate coverage files; every problem with file:line")
    li.add_argument("paths", nargs="*", help=f"files or folders (default: {DEFAULT_COVERAGE}/)")
    li.add_argument("--no-catalog", action="store_true",
                    help="do not check op names against this torch's catalogue (no torch import)")

    su = sub.add_parser("summary", help="per backend, how many ops fall on each path (from coverage files)")
    su.add_argument("paths", nargs="*", help=f"files or folders (default: {DEFAULT_COVERAGE}/)")
    su.add_argument("--format", choices=("table", "json"), default="table")
    return p


def main(argv=None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return _COMMANDS[args.command](args)
    except OpcovError as exc:
        print(f"opcov: error: {exc}", file=sys.stderr)
        return exc.exit_code
    except KeyboardInterrupt:
        print("opcov: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:
        return EXIT_OK


# ---------------------------------------------------------------- commands

def cmd_ops(args) -> int:
    import re

    from opcov import formats
    from opcov.backends import added_ops, get_backend, load
    from opcov.catalog import build_catalog

    if args.pattern:
        try:
            re.compile(args.pattern)
        except re.error as exc:
            raise UsageError(f"bad pattern {args.pattern!r}: {exc}") from None
    if args.import_module:
        backend = get_backend(args.import_module.split(".")[0], args.import_module)
        load(backend)
        catalog = build_catalog((args.import_module,), added_ops(backend))
    else:
        catalog = build_catalog()
    ops = catalog.select(args.pattern, core=args.core, tags=tuple(args.tag), namespace=args.namespace)
    formats.print_ops(ops, catalog, args.format)
    return EXIT_OK


def cmd_backends(args) -> int:
    from opcov import formats
    from opcov.backends import get_backend, known_backends

    rows = known_backends()
    if args.import_module and all(b.module != args.import_module for b in rows):
        rows.append(get_backend(args.import_module.split(".")[0], args.import_module))
    formats.print_backends(rows, args.format)
    return EXIT_OK


def cmd_scan(args) -> int:
    from opcov import data, formats
    from opcov.backends import get_backend, load
    from opcov.scan import command_line, scan

    backend = get_backend(args.backend, args.import_module)
    torch = load(backend)
    doc = scan(backend, torch, command=command_line(), reach=not args.no_reach)
    out = args.out or default_scan_path(doc)
    data.save(doc, out)
    formats.print_summary([(out, doc)])
    print(f"wrote {out}")
    return EXIT_OK


def default_scan_path(doc) -> str:
    b = doc["backend"]
    name = f"registered-torch-{doc['provenance']['torch']}"
    if b["package"] != "torch":
        name += f"-{b['package']}-{b['version']}"
    return os.path.join(DEFAULT_COVERAGE, b["name"], name + ".yaml")


def coverage_files(paths) -> list[str]:
    """Coverage YAML files under the given files or folders, sorted."""
    paths = paths or [DEFAULT_COVERAGE]
    found = []
    for path in paths:
        if os.path.isdir(path):
            for root, dirs, files in os.walk(path):
                dirs[:] = sorted(d for d in dirs if d != "models")  # model op sets have their own schema
                found.extend(os.path.join(root, f) for f in sorted(files) if f.endswith((".yaml", ".yml")))
        elif os.path.exists(path):
            found.append(path)
        else:
            raise UsageError(f"{path}: no such file or folder")
    return found


def cmd_lint(args) -> int:
    from opcov.lint import lint_files

    files = coverage_files(args.paths)
    problems = lint_files(files, check_catalog=not args.no_catalog)
    for p in problems:
        print(p)
    errors = sum(p.severity == "error" for p in problems)
    warnings = len(problems) - errors
    print(f"{len(files)} file(s) checked: {errors} error(s), {warnings} warning(s)")
    return EXIT_GATE if errors else EXIT_OK


def cmd_summary(args) -> int:
    from opcov import data, formats

    docs = [(f, data.load(f)) for f in coverage_files(args.paths)]
    if not docs:
        raise UsageError("no coverage files found; create one with 'opcov scan BACKEND'")
    if args.format == "json":
        print(json.dumps({f: {"backend": d["backend"], "provenance": d["provenance"], "summary": d["summary"]}
                          for f, d in docs}, indent=2, sort_keys=True))
    else:
        formats.print_summary(docs)
    return EXIT_OK


_COMMANDS = {"ops": cmd_ops, "backends": cmd_backends, "scan": cmd_scan, "lint": cmd_lint,
             "summary": cmd_summary}
