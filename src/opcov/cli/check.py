"""``opcov check``: can a model run on a backend? A verdict op by op, and a CI gate (opcov.verdict)."""

from __future__ import annotations

import argparse
import os
import sys

from opcov import vocab
from opcov.cli import options
from opcov.errors import EXIT_GATE, EXIT_OK, UsageError
from opcov.store import layout, output


def add_parser(sub) -> None:
    ck = sub.add_parser(
        "check",
        help="can MODEL run on a backend? a verdict op by op; exit 1 when it fails",
        description="A verdict per backend and mode (runs, runs with fallback, unknown, fails), op by op, naming the "
        "evidence it rests on; it says plain 'runs' only when all of it was probed. Evidence, strongest first. "
        + f" observed: {vocab.OBSERVED_MEANING}."
        + " ".join(f"{level}: {meaning}." for level, meaning in vocab.EVIDENCE_MEANING.items())
        + " Exit codes: 0 the gate passed, 1 it failed (an op fails, or --fail-on, --require or --strict "
        "tripped), 2 usage or data error.",
    )
    ck.add_argument(
        "model",
        help="op-set file, folder of op sets, zoo model name (coverage/models/NAME), "
        "or anything 'opcov trace' accepts (traced now)",
    )
    ck.add_argument("--backend", "-b", action="append", required=True, help="backend to judge (repeatable)")
    options.add_mode(ck, action="append", help="only this mode (default: every mode the op sets hold)")
    options.add_coverage(ck)
    options.add_format(ck, "text", "json", "junit", "markdown", "github")
    ck.add_argument("--output", "-o", help="write the report to this file instead of stdout")
    _gate_options(ck)
    _model_options(ck)
    options.add_parallel(
        ck,
        "judge MODEL's sharded training step traced with this style (coverage/models/MODEL/parallel/): its local "
        "ops, its collectives against the backend's registrations and process group, DTensor's ops against its "
        "sharding strategies",
        "with --parallel: only this world size (default: every one traced)",
    )


def _gate_options(ck) -> None:
    """--fail-on, --require, --strict and --manifest: what else fails the gate."""
    ck.add_argument(
        "--fail-on",
        action="append",
        default=[],
        type=options.outcome_list,
        metavar="OUTCOMES",
        help="also fail the gate when any op has one of these outcomes, a comma list of "
        f"{', '.join(vocab.PROBLEMS)}, or unclaimed (needs --manifest) (repeatable; an op that "
        "fails always fails the gate)",
    )
    ck.add_argument(
        "--require",
        choices=vocab.VERDICT_LEVELS,
        metavar="LEVEL",
        help="also fail the gate when anything a verdict rests on was judged from evidence weaker "
        f"than LEVEL ({' > '.join(vocab.VERDICT_LEVELS)}), e.g. '--require probed' refuses "
        "registered claims",
    )
    ck.add_argument("--strict", action="store_true", help="the same as --fail-on fallback,unknown")
    ck.add_argument(
        "--manifest",
        action="append",
        default=[],
        metavar="FILE",
        help="a backend's manifest (docs/DATA.md): failing ops it claims are told apart from those it "
        "does not; '--fail-on unclaimed' fails the gate on an op or dtype it does not claim (repeatable)",
    )


def _model_options(ck) -> None:
    """--dtype, --timeout, --variants, --replay, --replay-dir and --path: how the model is traced and judged."""
    ck.add_argument("--dtype", help="dtype for tracing on the fly (saved op sets carry their own)")
    options.add_trace_timeout(
        ck, "seconds tracing on the fly may take per mode, then its process is killed (default: %(default)s)"
    )
    ck.add_argument(
        "--variants",
        metavar="NAMES",
        help="also gate on these input variants opcov adds, a comma list of "
        f"{', '.join(v for v in vocab.INPUT_VARIANTS if v != vocab.GIVEN)}, or all (default: the given "
        "inputs only; every variant is reported either way)",
    )
    ck.add_argument(
        "--replay",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="replay the model's own calls on the backend, one by one with the arguments the model gave them "
        "(forward and the backward's calls), against CPU: they decide each op they reach (default: where the "
        "backend runs in this Python, e.g. xla with torch_xla; --no-replay: never)",
    )
    ck.add_argument(
        "--replay-dir",
        metavar="DIR",
        help=f"where replayed calls are kept and reused, DIR/BACKEND/MODEL-MODE.yaml (default: ./{'replayed'})",
    )
    ck.add_argument(
        "--path",
        default="eager",
        metavar="eager|compile|eager,compile",
        help="which path to judge: eager (default), compile (the compiled op set on the backend's compile "
        "coverage, graph breaks first), or both",
    )


def run(args) -> int:
    """The check, with the files it reads kept parsed in the user's cache folder between runs
    (opcov.store.parsed): a check run again parses nothing that is unchanged."""
    from opcov.store import parsed

    with parsed.caching():
        return _run(args)


def _run(args) -> int:
    from opcov.verdict import check, judge, reports

    args.model = layout.zoo_model(args.model, args.coverage)  # a zoo name ./coverage lacks: the bundled zoo's
    paths = [p.strip() for p in args.path.split(",") if p.strip()]
    if not paths or set(paths) - {"eager", "compile"}:
        raise UsageError(f"--path {args.path!r}: expected eager, compile or eager,compile")
    if args.output:  # every path's report: never over the op set or a manifest it reads
        output.check_output(args.output, kind=output.REPORT, inputs=[args.model, *args.manifest], flag="--output")
    if "compile" in paths:
        return _compiled(args, with_eager="eager" in paths)

    outcomes = judge.fail_on(args.fail_on + ([",".join(judge.STRICT)] if args.strict else []))  # before any work
    _check_replay_dir(args, check.REPLAY_DIR)
    gated = check.variant_choice(args.variants)
    from opcov.probe.manifest import load as load_manifest

    manifests = [load_manifest(path) for path in args.manifest]
    verdicts, model = check.run(args.model, args.backend, args.mode, args.coverage, args)
    for manifest in manifests:
        if not judge.apply_manifest(verdicts + [o for v in verdicts for o in v.variants.values()], manifest):
            raise UsageError(
                f"--manifest {manifest.path} speaks for backend {manifest.backend!r}, which is not "
                f"among the backends checked ({', '.join(args.backend)})"
            )
    text = reports.render(args.format, verdicts, model)
    if args.output:
        output.write_atomic(args.output, text)
    else:
        sys.stdout.write(text)
    failed = check.gate_failures(verdicts, gated, outcomes=outcomes, require=args.require)
    for line in failed:
        print(f"opcov: gate failed: {line}", file=sys.stderr)
    return EXIT_GATE if failed else EXIT_OK


def _check_replay_dir(args, default: str) -> None:
    """Before any work: the folder replayed calls are written to (DIR/BACKEND/MODEL-MODE-KEY.yaml) is a
    writable folder, not the coverage folder it reads, with no symbolic link at DIR/BACKEND. Checked where
    replaying is asked for or the folder is there (a check that replays nothing writes nothing)."""
    folder = args.replay_dir or default
    if args.replay is False or not (args.replay_dir or args.replay or os.path.lexists(folder)):
        return
    output.check_writable_dir(folder)
    if output.same_file(folder, args.coverage):
        raise UsageError(
            f"--replay-dir {folder} is the coverage folder this command reads; replayed calls go in a folder "
            "of their own: choose another"
        )
    for backend in args.backend:
        output.check_inside(folder, os.path.join(folder, backend, "replayed.yaml"))


def _compiled(args, with_eager: bool) -> int:
    """'opcov check MODEL -b B --path compile' (and eager,compile): verdict.compiled, after the eager check."""
    from opcov.verdict import compiled

    if args.format not in ("text", "json") or args.manifest or args.require or args.fail_on or args.strict:
        raise UsageError("--path compile reports as text or json, with no --manifest, --require, --fail-on or --strict")
    code = EXIT_OK
    if with_eager:
        eager = argparse.Namespace(**{**vars(args), "path": "eager", "output": None})
        code = _run(eager)
    verdicts = compiled.check(args.model, args.backend, args.mode, args.coverage)
    text = compiled.render(verdicts, args.format)
    if args.output:
        output.write_atomic(args.output, text)
    else:
        sys.stdout.write(text)
    failed = [v for v in verdicts if v.verdict == "fails"]
    for v in failed:
        print(f"opcov: gate failed: {v.backend} {v.mode} (compile path): {v.says()}", file=sys.stderr)
    return EXIT_GATE if failed or code == EXIT_GATE else EXIT_OK


COMMANDS = {"check": (add_parser, run)}
