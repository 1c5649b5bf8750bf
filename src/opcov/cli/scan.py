"""``opcov scan``: a backend's registered coverage of every op, read from the dispatcher (opcov.scan)."""

from __future__ import annotations

import os

from opcov.cli import common, options
from opcov.errors import EXIT_OK, UsageError
from opcov.store import layout, output


def add_parser(sub) -> None:
    sc = sub.add_parser("scan", help="registered coverage of every op for a backend (no device needed)")
    sc.add_argument("backend")
    options.add_import(sc, options.REGISTERS_HELP)
    sc.add_argument("--out", help="coverage file to write (default: coverage/<backend>/registered-...yaml)")
    options.add_path(
        sc,
        "compile: what the backend's torch.compile compiler accepts (Inductor's lowerings and fallbacks for "
        "cpu and cuda, TorchTPU's eager kernels on functional ops for tpu), built on the eager registered data "
        "(coverage/<backend>/compile/)",
    )
    options.add_coverage(sc, dest="coverage_dir", help="with --path compile: " + options.COVERAGE_HELP)
    sc.add_argument(
        "--no-reach",
        action="store_true",
        help="skip recording what composites reach (faster; composites stay unresolved)",
    )
    sc.add_argument(
        "--declared",
        action="store_true",
        help="for an in-tree key whose build cannot be loaded here (mps): declared coverage from "
        "native_functions.yaml and the test suite's dtype lists, a weaker evidence kind "
        "(default out: coverage/<backend>/declared-...yaml)",
    )
    sc.add_argument(
        "--no-test-lists",
        action="store_true",
        help="with --declared: leave out the dtype notes read from torch's MPS test lists",
    )


def run(args) -> int:
    from opcov import formats
    from opcov.backends import get_backend, load
    from opcov.scan.registered import command_line, scan
    from opcov.store import data

    if args.no_test_lists and not args.declared:
        raise UsageError("--no-test-lists goes with --declared")
    if args.path == "compile":
        return _compiled(args)
    evidence = "declared" if args.declared else "registered"
    if args.out:
        output.check_output(args.out, kind=output.COVERAGE, evidence=evidence)
    backend = get_backend(args.backend, args.import_module)
    if not args.out:  # the default folder, coverage/BACKEND, refused before the scan's minutes, not after
        output.check_inside(layout.DEFAULT_COVERAGE, os.path.join(layout.DEFAULT_COVERAGE, backend.name, evidence))
    if args.declared:  # the key's build is not loaded (it cannot be): torch's sources are read instead
        from opcov.scan import declared
        from opcov.torchenv import import_torch

        doc = declared.scan(
            backend, import_torch(), command=command_line(), reach=not args.no_reach, test_lists=not args.no_test_lists
        )
    else:
        doc = scan(backend, load(backend), command=command_line(), reach=not args.no_reach)
    out = args.out or layout.scan_path(doc)  # built from the backend's name: inside coverage/, through no link
    output.check_output(
        out, kind=output.COVERAGE, evidence=doc["evidence"], within=None if args.out else layout.DEFAULT_COVERAGE
    )
    data.save(doc, out)
    formats.print_summary([(out, doc)])
    print(f"wrote {out}")
    return EXIT_OK


def _compiled(args) -> int:
    """'opcov scan BACKEND --path compile': what its compiler accepts (opcov.scan.compiled)."""
    from opcov.scan import compiled
    from opcov.scan.registered import command_line
    from opcov.store import data

    coverage_dir = layout.read_coverage(args.coverage_dir, say=common.say)
    path, doc = compiled.scan(args.backend, coverage_dir, command=command_line())
    out = args.out or path
    output.check_output(out, kind=output.COVERAGE, within=None if args.out else coverage_dir)
    data.save(doc, out)
    s = doc["summary"]["res"]
    print(f"wrote {out}: {doc['summary']['ops']} ops, " + ", ".join(f"{k} {v}" for k, v in s.items()))
    return EXIT_OK


COMMANDS = {"scan": (add_parser, run)}
