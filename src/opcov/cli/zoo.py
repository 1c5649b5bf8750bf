"""``opcov zoo``: the model zoo listed, re-traced into coverage/models/ (the curated zoo, or every architecture
of a library in workers), or its shard outcome tables merged (opcov.sources.zoo, opcov.tracing.zoorun)."""

from __future__ import annotations

import sys

from opcov.cli import options
from opcov.errors import EXIT_GATE, EXIT_OK, UsageError
from opcov.store import layout, output


def add_parser(sub) -> None:
    zo = sub.add_parser(
        "zoo",
        help="the model zoo: list it, re-trace it into coverage/models/ (the curated zoo, or "
        "every transformers architecture with --all), or merge shard outcome tables",
    )
    zo.add_argument("action", choices=("list", "trace", "merge"))
    zo.add_argument("tables", nargs="*", metavar="TABLE", help="merge: the shard outcome tables to join")
    zo.add_argument(
        "--only",
        action="append",
        default=[],
        metavar="NAMES",
        help="comma-separated zoo names (repeatable; default: all); with --jobs, --shard or --resume "
        "also transformers model types",
    )
    zo.add_argument(
        "--all",
        action="store_true",
        dest="every",
        help="every transformers architecture with a base model class and the curated zoo, in worker "
        "processes, with an outcome table (traced / cannot build / cannot trace, and why)",
    )
    zo.add_argument(
        "--sample",
        type=int,
        default=0,
        metavar="N",
        help="like --all, on a seeded random sample of N transformers architectures",
    )
    zo.add_argument("--seed", type=int, default=17, help="the --sample seed (default: %(default)s)")
    zo.add_argument("--jobs", type=options.at_least_one, default=None, help="worker processes for --all (default: 1)")
    zo.add_argument(
        "--shard",
        help="with --all: trace only shard I/N of the architectures (a CI matrix; join the "
        "tables with 'opcov zoo merge')",
    )
    zo.add_argument("--resume", action="store_true", help="continue an interrupted --all run from its journal")
    _run_options(zo)


def _run_options(zo) -> None:
    """--real, --library, --retry-failed, --timeout, --table, --mode, --root, --path and --compile-backend."""
    zo.add_argument(
        "--real",
        action="store_true",
        help="with --all/--sample/--only: trace every architecture with real values on the computing "
        "stand-in (narrow widths), not only those fake tensors cannot trace (scripts/zoo_recall.py)",
    )
    zo.add_argument(
        "--library",
        action="append",
        default=[],
        metavar="NAME",
        help="with --all: the models of transformers (default; with the curated zoo), timm "
        "(one per family) or torchvision (every one but the quantized), repeatable; timm and "
        "torchvision import only in the CUDA torch environment (scripts/envs/vision.sh)",
    )
    zo.add_argument(
        "--retry-failed",
        action="store_true",
        help="keep what the outcome table says was traced and trace the rest again, with "
        "the op sets whose real-valued branch run failed",
    )
    zo.add_argument(
        "--timeout",
        type=options.seconds,
        default=300.0,
        help="seconds one model may take in one mode with --all (default: %(default)s)",
    )
    zo.add_argument(
        "--table",
        help="the outcome table of --all, --sample or --only in workers (default: "
        "coverage/zoo/outcomes.tsv; a table made by another selection is never replaced); "
        "merge: the table to write",
    )
    options.add_mode(
        zo,
        action="append",
        help="only this mode (repeatable; default: inference and training); serve traces the curated decoders "
        "(opcov.tracing.serve.ZOO) only",
    )
    zo.add_argument(
        "--root", default=layout.models_dir(), help="folder of <model>/<mode>.yaml files (default: %(default)s)"
    )
    options.add_compile_args(
        zo, "compiled op sets of the curated zoo into <root>/<model>/compile/<backend>-<mode>.yaml"
    )


def run(args) -> int:
    from opcov.sources import zoo
    from opcov.tracing.spec import trace_zoo

    if args.action == "merge":
        return _merge(args)
    if "serve" in (args.mode or ()):
        _serve_alone(args)
    if args.path == "compile" or args.compile_backend:
        return _compiled(args)
    if args.tables:
        raise UsageError(f"zoo {args.action} takes no TABLE arguments (only 'zoo merge' does)")
    modes = tuple(dict.fromkeys(args.mode or ("inference", "training")))
    if (
        args.every
        or args.sample
        or args.jobs
        or args.shard
        or args.resume
        or args.retry_failed
        or args.real
        or args.table
    ):
        return _in_workers(args, modes)
    entries = zoo.select(args.only)
    if args.action == "list":
        for e in entries:
            print(f"{e.name:16} {e.spec:16} {e.dtype:9} {'real' if e.real else 'fake'}  " + "; ".join(e.notes))
        return EXIT_OK
    for e in entries:  # every file it will write, before the first (slow) trace
        for mode in modes:
            output.check_output(zoo.path_for(e.name, mode, args.root), kind=output.OPSET, within=args.root)
    failures = trace_zoo(entries, modes, root=args.root)
    for name, mode, why in failures:
        print(f"opcov: zoo: {name} {mode} failed: {why}", file=sys.stderr)
    return EXIT_GATE if failures else EXIT_OK


def _serve_alone(args) -> None:
    """'zoo trace --mode serve' traces the curated decoders one by one, eager: one line for what it does not take."""
    taken = [
        flag
        for flag, given in (
            ("--all", args.every),
            ("--sample", args.sample),
            ("--jobs", args.jobs),
            ("--shard", args.shard),
            ("--resume", args.resume),
            ("--retry-failed", args.retry_failed),
            ("--real", args.real),
            ("--table", args.table),
        )
        if given
    ]
    if taken:
        raise UsageError(
            f"zoo trace --mode serve traces the curated decoders one by one (eager serve op sets are always "
            f"real-valued); it takes no {', '.join(taken)}"
        )


def _compiled(args) -> int:
    """'opcov zoo trace --path compile': the curated zoo's compiled op sets (tracing.compiled)."""
    from opcov.sources import zoo
    from opcov.tracing import compiled

    if args.action != "trace" or args.path != "compile":
        raise UsageError("--path compile and --compile-backend go with 'zoo trace --path compile'")
    if args.every or args.sample or args.jobs or args.shard or args.resume or args.real or args.table:
        raise UsageError("zoo trace --path compile traces the curated zoo (with --only, --mode); no --all options")
    backends = compiled.parse_backends(args.compile_backend)
    modes = tuple(dict.fromkeys(args.mode or ("inference", "training")))
    entries = zoo.select(args.only)
    for e in entries:
        for mode in modes:
            for b in backends:
                path = layout.compiled_opset_path(e.name, b, mode, args.root)
                output.check_output(path, kind=output.OPSET, within=args.root)
    failures = compiled.trace_zoo(entries, modes, backends, root=args.root)
    for name, mode, why in failures:
        print(f"opcov: zoo: {name} {mode} failed: {why}", file=sys.stderr)
    return EXIT_GATE if failures else EXIT_OK


def _in_workers(args, modes) -> int:
    """'opcov zoo list|trace --all' (or --sample, --only with --jobs...): every architecture, in workers."""
    from opcov.probe.cases import parse_shard
    from opcov.tracing import zoorun

    if args.sample < 0:
        raise UsageError(f"--sample must be positive, not {args.sample}")
    if not (args.every or args.sample or args.only):
        raise UsageError("say which architectures: --all, --sample N or --only NAMES")
    shard = parse_shard(args.shard)
    libraries = tuple(
        dict.fromkeys(lib for part in args.library or ("transformers",) for lib in part.split(",") if lib)
    )
    archs = zoorun.architectures(
        every=args.every, only=args.only, sample=args.sample, seed=args.seed, libraries=libraries
    )
    if args.action == "list":
        for i, a in enumerate(archs):
            if zoorun.in_shard(i, shard):
                print(f"{a.name:32} {a.spec}")
        return EXIT_OK
    selection = (
        "opcov zoo trace "
        + (
            "--all" + "".join(f" --library {lib}" for lib in args.library or ())
            if args.every
            else f"--sample {args.sample} --seed {args.seed}"
            if args.sample
            else "--only " + ",".join(a.name for a in archs)
        )
        + "".join(f" --mode {m}" for m in args.mode or ())
        + (" --real" if args.real else "")
    )
    rows = zoorun.run(
        archs,
        modes=modes,
        jobs=args.jobs or 1,
        shard=shard,
        root=args.root,
        table=args.table,
        resume=args.resume,
        retry=args.retry_failed,
        timeout=args.timeout,
        selection=selection,
        real=args.real,
    )
    return EXIT_OK if all(r["outcome"] == "traced" for r in rows) else EXIT_GATE


def _merge(args) -> int:
    from opcov.tracing import zoorun

    if not args.tables or not args.table:
        raise UsageError("zoo merge TABLE... --table OUT: the shard tables to join and the table to write")
    output.check_output(args.table, kind=output.TABLE, inputs=args.tables, flag="--table")
    output.write_atomic(args.table, zoorun.merge_tables(args.tables))
    print(f"wrote {args.table} from {len(args.tables)} table(s)")
    return EXIT_OK


COMMANDS = {"zoo": (add_parser, run)}
