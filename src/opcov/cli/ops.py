"""``opcov ops`` (does a backend support X? else the op catalogue) and ``opcov backends`` (the known backends)."""

from __future__ import annotations

import sys

from opcov.cli import common, options
from opcov.errors import EXIT_OK, UsageError
from opcov.store import layout


def add_ops(sub) -> None:
    ops = sub.add_parser(
        "ops",
        help="does a backend support X? per op, forward and backward, evidence and dtypes (with -b); "
        "else the op catalogue",
        description="With -b: for each op PATTERN matches (exact names first, then Python names, prefixes, "
        "substrings), each backend's forward and backward status, the evidence it rests on (probed, per dtype; "
        "or registered, unverified) and the op's schema, read from the coverage data (no torch import). "
        "Without -b: the op catalogue of the installed torch (or, without torch, the op names of the "
        "registered data).",
    )
    ops.add_argument(
        "pattern",
        nargs="?",
        help="op name (aten::add.Tensor, add), regular expression, or Python name (F.layer_norm, "
        "torch.nn.functional.gelu, nn.LayerNorm, LayerNorm, torch.softmax, Tensor.softmax, softmax)",
    )
    ops.add_argument(
        "--backend", "-b", action="append", default=[], help="answer from this backend's coverage data (repeatable)"
    )
    options.add_coverage(ops, dest="coverage_dir")
    ops.add_argument(
        "--all",
        action="store_true",
        dest="every_match",
        help="with -b: also show prefix and substring matches when there are exact ones",
    )
    ops.add_argument(
        "--limit",
        type=int,
        default=None,
        help="show at most this many ops, 0 for all (default: 20 with -b, else all)",
    )
    ops.add_argument("--core", action="store_true", help="only core ATen IR ops")
    ops.add_argument("--tag", action="append", default=[], help="only ops with this tag (repeatable)")
    ops.add_argument("--namespace", help="only this namespace (aten, prims, c10d, tpu...)")
    options.add_import(ops, "import a backend module first, so its namespaces are listed")
    options.add_format(ops, "table", "json", "yaml")


def run_ops(args) -> int:
    import re

    from opcov import formats, support

    if args.pattern:
        try:
            re.compile(args.pattern)
        except re.error as exc:
            raise UsageError(f"bad pattern {args.pattern!r}: {exc}") from None
    filters = {"core": args.core, "tags": tuple(args.tag), "namespace": args.namespace}
    if args.backend:  # "does tpu support X?", from the coverage data
        if args.import_module:
            raise UsageError(
                "--import lists a module's ops from the dispatcher; -b answers from the coverage "
                "data: use one or the other"
            )
        if not args.pattern:
            raise UsageError("-b answers for the ops a PATTERN names, e.g. 'opcov ops F.layer_norm -b tpu'")
        coverage = layout.read_coverage(args.coverage_dir, say=common.say)
        answer = support.answer(
            args.pattern,
            args.backend,
            coverage,
            limit=20 if args.limit is None else args.limit or None,
            everything=args.every_match,
            **filters,
        )
        if args.format == "table":
            sys.stdout.write(support.render(answer))
        else:
            formats.print_data(answer.as_dict(), args.format)
        return EXIT_OK
    catalog, note = _catalog(args)
    ops = catalog.select(None, **filters)
    if args.pattern:
        data_dir: str | None
        try:
            data_dir = layout.read_coverage(args.coverage_dir)
        except UsageError:
            data_dir = None  # no data here: op names only, no Python names
        index, _ = support.load_index(data_dir, catalog.torch_version)
        ranked = support.rank(args.pattern, [op.name for op in ops], support.python_names(args.pattern, index))
        ops = [catalog.get(m.op) for m in ranked]
    if args.limit and len(ops) > args.limit:  # best first: the cap keeps the best matches
        note = "; ".join(filter(None, [note, f"{len(ops) - args.limit} more op(s) not shown (--limit 0 for all)"]))
        ops = ops[: args.limit]
    formats.print_ops(ops, catalog, args.format)
    if note:
        print(f"opcov: {note}", file=sys.stderr)
    return EXIT_OK


def _catalog(args):
    """(the op catalogue, a note): built from the dispatcher where torch is installed (with a
    spinner: it takes seconds), else the op names and tags of the registered coverage data."""
    from opcov import support
    from opcov.activity import activity

    if args.import_module or support.is_torch_installed():
        from opcov.backends import added_ops, get_backend, load
        from opcov.catalog import build_catalog

        with activity("building the op catalogue (imports torch)"):
            if args.import_module:
                backend = get_backend(args.import_module.split(".")[0], args.import_module)
                load(backend)
                return build_catalog((args.import_module,), added_ops(backend)), ""
            return build_catalog(), ""
    from opcov.torchenv import install_command

    catalog, path = support.data_catalog(layout.read_coverage(args.coverage_dir, say=common.say))
    return catalog, (
        f"torch is not installed: op names and tags from {path} (schemas, composite kinds and "
        f"structured delegates need torch: {install_command()})"
    )


def add_backends(sub) -> None:
    be = sub.add_parser("backends", help="known backends and which are installed (imports none)")
    options.add_import(be, "also list a PrivateUse1 backend provided by MODULE")
    options.add_format(be, "table", "json")


def run_backends(args) -> int:
    from opcov import formats
    from opcov.backends import get_backend, known_backends

    rows = known_backends()
    if args.import_module and all(b.module != args.import_module for b in rows):
        rows.append(get_backend(args.import_module.split(".")[0], args.import_module))
    formats.print_backends(rows, args.format)
    return EXIT_OK


COMMANDS = {"ops": (add_ops, run_ops), "backends": (add_backends, run_backends)}
