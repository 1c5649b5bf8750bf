"""``opcov probe`` (OpInfo samples and a model's own calls run on a backend against a CPU reference) and
``opcov merge`` (probed files of one backend combined) (opcov.probe)."""

from __future__ import annotations

import os

from opcov import backends
from opcov.cli import options
from opcov.errors import EXIT_OK, UsageError
from opcov.store import layout, output


def add_probe(sub) -> None:
    pr = sub.add_parser("probe", help="run OpInfo samples on a backend against a CPU reference (probed coverage)")
    pr.add_argument("backend")
    options.add_import(pr, options.REGISTERS_HELP)
    pr.add_argument(
        "--ops",
        metavar="PATTERN",
        help="regular expression searched in OpInfo names ('mul', 'nn.functional.relu') and 'aten::<name>'",
    )
    pr.add_argument("--core", action="store_true", help="only OpInfos of core ATen ops")
    pr.add_argument("--dtypes", help="comma-separated (default: float32,bfloat16,float16,float64,int64,bool)")
    pr.add_argument("--directions", help="forward,backward (default: both)")
    pr.add_argument("--jobs", type=options.at_least_one, default=1, help="worker processes (devices) (default: 1)")
    pr.add_argument("--timeout", type=options.seconds, default=60.0, help="seconds per case phase (default: 60)")
    pr.add_argument(
        "--shard",
        metavar="I/N",
        help="run only shard I of N of the plan balanced by recorded group times ('opcov plan')",
    )
    pr.add_argument(
        "--times",
        metavar="FILE",
        help="recorded group times to balance --shard by (default: the .times.json beside "
        "coverage/<backend>/probed-...yaml; none: every group counts the same)",
    )
    pr.add_argument(
        "--max-time",
        type=options.seconds,
        metavar="SECONDS",
        help="start no group after this long (with --resume: this run's time); the file names the groups not run",
    )
    _case_options(pr)
    _compile_options(pr)


def _case_options(pr) -> None:
    """--traces, --opsets, --resume, --tiers, --all-samples, --exhaustive, --calls-only, --composites-only,
    --no-schema, --sweep,
    --manifest and --out."""
    pr.add_argument(
        "--traces",
        metavar="MODELS",
        help="also replay op calls captured from models' steps ('zoo', zoo names: llama,mixtral, or factories: "
        "pkg.mod:fn)",
    )
    pr.add_argument(
        "--opsets",
        metavar="PATHS",
        action="append",
        help="also replay a model's own calls: op-set files or folders (comma-separated, repeatable) of models "
        "traced from a zoo name or a factory; each distinct call (arguments as the model gave them) is one case, "
        "filed under the model's name for 'opcov check' (forward; the backward's calls are cases too)",
    )
    pr.add_argument("--resume", action="store_true", help="continue an interrupted probe from its journal")
    pr.add_argument(
        "--tiers",
        metavar="TIERS",
        help="input tiers, one harder case per OpInfo x dtype each: special (NaN/inf/-0.0), "
        "noncontig, channels_last, empty; comma-separated, 'all' (default) or 'none'",
    )
    pr.add_argument(
        "--all-samples",
        action="store_true",
        help="each input tier makes a harder case of every OpInfo sample it changes, not only "
        "of the first (case ids <group>|<tier>.<n>)",
    )
    pr.add_argument(
        "--exhaustive",
        action="store_true",
        help="run every case of a group (OpInfo x dtype) even after one crashed or timed out "
        "(default: the rest are recorded as not run after it)",
    )
    pr.add_argument(
        "--calls-only",
        action="store_true",
        help="with --traces or --opsets: run the replayed calls alone, no OpInfo, canary or schema case (--ops then "
        "selects which calls), so that merging the file adds no second count of cases already merged",
    )
    pr.add_argument(
        "--composites-only",
        action="store_true",
        help="run only the cases of the composite ops the backend overrides with its own kernel, each called as "
        "itself with the arguments its OpInfo's samples give it, forward and backward (groups 'composite.<opinfo>'; "
        "--ops selects the OpInfos)",
    )
    pr.add_argument(
        "--no-schema",
        dest="schema",
        action="store_false",
        help="no cases made from op schemas (default: one per functional aten overload at float32, "
        "--ops searched in its overload name 'aten::add.Scalar')",
    )
    pr.add_argument(
        "--sweep",
        metavar="PROBED",
        help="instead of each selected OpInfo's samples, the calls they make with one path-selecting argument "
        "changed at a time (a bool flipped, an optional argument left out or given, a number of another kind, "
        "another reduction or output size), one case per class the probed file PROBED holds no case of "
        "(groups 'sweep.<opinfo>'); no canary or schema case",
    )
    pr.add_argument(
        "--manifest",
        metavar="FILE",
        help="the backend's manifest (ops and dtypes it claims, ops it excludes; docs/DATA.md): cells "
        "counted as claimed or not, excluded ops skipped as such",
    )
    pr.add_argument("--out", help="file to write (default: coverage/<backend>/probed-...yaml)")


def _compile_options(pr) -> None:
    """--path, --samples and --time-limit: the compile path's probe."""
    options.add_path(
        pr,
        "compile (cpu, xla): compile OpInfo samples with Inductor on this CPU (cpu) or openxla on PyTorch/XLA "
        "(xla, in a Python with torch_xla) and compare with eager CPU, recording compile errors, graph breaks, CPU "
        "fallbacks and value mismatches, forward and backward, with the input tiers "
        "(coverage/<backend>/compile/probed-...yaml; --core, --ops, --dtypes, --directions, --tiers, --jobs, "
        "--timeout, --resume, --out apply)",
    )
    pr.add_argument(
        "--samples",
        default="2",
        help="with --path compile: samples per OpInfo and dtype, N or N,DTYPE=M,... (M at DTYPE; default: 2)",
    )
    pr.add_argument(
        "--time-limit",
        type=float,
        default=None,
        help="with --path compile: start no group, nor compile one again alone, after this many seconds",
    )


def _check_options(args, traces) -> None:
    """One-line errors for options that cannot run, before any worker starts."""
    if args.jobs < 1:
        raise UsageError(f"--jobs must be at least 1, not {args.jobs}")
    if not args.timeout > 0:
        raise UsageError(f"--timeout must be positive, not {args.timeout:g}")
    if args.ops:
        import re

        try:
            re.compile(args.ops)
        except re.error as exc:
            raise UsageError(f"bad --ops pattern {args.ops!r}: {exc}") from None
    if args.calls_only and not traces:
        raise UsageError("--calls-only runs replayed calls alone: name them with --traces or --opsets")
    if args.sweep and not os.path.isfile(args.sweep):
        raise UsageError(f"--sweep: {args.sweep} is not a file; name the probed file whose classes to leave out")
    if args.sweep:
        from opcov.store import data

        if data.load(args.sweep).get("evidence") != "probed":  # a bad file: data.load's one-line error
            raise UsageError(f"--sweep: {args.sweep} is not a probed file; name one 'opcov probe' wrote")


def run_probe(args) -> int:
    from opcov import formats
    from opcov.backends import get_backend
    from opcov.probe import KNOWN_DTYPES
    from opcov.probe.cases import parse_directions, parse_dtypes, parse_shard, parse_tiers, parse_traces
    from opcov.probe.runner import probe
    from opcov.scan.registered import command_line

    if args.path == "compile":
        return _compiled(args)
    dtypes = parse_dtypes(args.dtypes, KNOWN_DTYPES)
    directions = parse_directions(args.directions)
    shard = parse_shard(args.shard)
    traces: tuple = parse_traces(args.traces)
    if args.opsets:
        from opcov.probe.replay import opset_targets

        traces += tuple(opset_targets([p for text in args.opsets for p in text.split(",") if p]))
    tiers = parse_tiers(args.tiers)
    _check_options(args, traces)
    backend = get_backend(args.backend, args.import_module)
    from opcov.probe.manifest import load as load_manifest

    manifest = load_manifest(args.manifest, backend.name) if args.manifest else None
    out = args.out or layout.probe_path(backend, shard)
    if not args.out:  # built from the backend's name: inside coverage/, through no link (as 'ingest' writes)
        output.check_inside(layout.DEFAULT_COVERAGE, out)
    from opcov.probe.runner import journal_path

    if args.resume and not os.path.exists(journal_path(out)):
        raise UsageError(
            f"--resume: no journal {journal_path(out)} to continue; run without --resume to start a new probe"
        )
    if os.path.exists(journal_path(out)) and not args.resume:
        raise UsageError(
            f"{journal_path(out)} exists from an interrupted probe; add --resume to continue "
            "it, or delete it to start over"
        )
    doc, figures = probe(
        backend,
        out=out,
        pattern=args.ops,
        core=args.core,
        dtypes=dtypes,
        directions=directions,
        jobs=args.jobs,
        timeout=args.timeout,
        shard=shard,
        resume=args.resume,
        command=command_line(),
        traces=traces,
        exhaustive=args.exhaustive,
        tiers=tiers,
        schema=args.schema,
        calls_only=args.calls_only,
        composites_only=args.composites_only,
        manifest=manifest,
        all_samples=args.all_samples,
        sweep_of=os.path.abspath(args.sweep) if args.sweep else "",
        times=args.times,
        max_time=args.max_time,
    )
    formats.print_summary([(out, doc)])
    print(
        f"wrote {out}: {figures['cases_run']} cases run in {figures['wall_s']:.1f}s "
        f"({figures['groups']} groups, {figures['restarts']} worker restarts)"
    )
    return EXIT_OK


def _compiled(args) -> int:
    """'opcov probe cpu|xla --path compile': probe.compiled (Inductor on CPU, openxla on xla; against eager CPU)."""
    from opcov.probe import KNOWN_DTYPES
    from opcov.probe import compiled as cprobe
    from opcov.probe.cases import parse_directions, parse_dtypes, parse_tiers
    from opcov.scan.registered import command_line
    from opcov.store import data

    if args.backend not in cprobe.TARGETS:
        raise UsageError(
            f"probe --path compile runs Inductor on this CPU (cpu) or openxla on PyTorch/XLA (xla), not {args.backend!r}"
        )
    if args.jobs < 1:
        raise UsageError("--jobs must be at least 1")
    samples = cprobe.parse_samples(args.samples, KNOWN_DTYPES)
    dtypes = parse_dtypes(args.dtypes, KNOWN_DTYPES)
    # as the eager probe: the backward where the OpInfo differentiates at the dtype, the tiers with the forward
    directions = parse_directions(args.directions)
    depth = cprobe.Depth("backward" in directions, parse_tiers(args.tiers) if "forward" in directions else ())
    import torch

    package = None
    record = backends.record(args.backend)
    if record and record.module:  # the device's own package (torch_xla), not torch itself (cpu)
        import importlib

        try:
            module = importlib.import_module(record.module)
        except ImportError:
            raise UsageError(
                f"probe {args.backend} --path compile needs {record.module} in this Python: {record.setup}"
            ) from None
        package = (record.package or record.module, str(getattr(module, "__version__", "?")))
    out = args.out or os.path.join(
        layout.compile_coverage_dir(args.backend),
        layout.snapshot_name("probed", torch.__version__, *(package or (None, None))),
    )
    output.check_output(out, kind=output.COVERAGE, within=None if args.out else layout.DEFAULT_COVERAGE)
    if os.path.exists(cprobe.journal_path(out)) and not args.resume:
        raise UsageError(f"{cprobe.journal_path(out)} exists from an interrupted probe; add --resume, or delete it")
    doc, figures = cprobe.probe(
        out=out,
        core=args.core,
        pattern=args.ops,
        dtypes=dtypes,
        samples=samples,
        jobs=args.jobs,
        timeout=args.timeout,
        resume=args.resume,
        command=command_line(),
        limit=args.time_limit,
        backend=args.backend,
        depth=depth,
    )
    data.save(doc, out)
    summary = doc["summary"]
    print(
        f"wrote {out}: {figures['cases_run']} cases in {figures['groups']} groups, {figures['wall_s']:.0f} s this run "
        f"({figures['worker_cpu_s']:.0f} CPU s in workers on {figures['groups_run']} groups); "
        + ", ".join(f"{k} {v}" for k, v in figures["cases"].items())
        + " cases; forward cells: "
        + ", ".join(f"{k} {v}" for k, v in summary["cells"].items())
        + (
            "; backward cells: " + ", ".join(f"{k} {v}" for k, v in summary["cells_bwd"].items())
            if "cells_bwd" in summary
            else ""
        )
        + (f"; {figures['not_started']} groups not started (--resume goes on)" if figures["not_started"] else "")
        + (
            f"; {figures['not_again']} groups with an error not yet compiled again alone (--resume goes on)"
            if figures.get("not_again")
            else ""
        )
    )
    return EXIT_OK


def add_merge(sub) -> None:
    mg = sub.add_parser("merge", help="combine probed files (shards or runs) of one backend and torch version")
    mg.add_argument("files", nargs="+")
    mg.add_argument("--out", required=True, help="file to write")
    mg.add_argument(
        "--replace",
        action="store_true",
        help="a cell (op and dtype) a later file probed replaces the earlier files' cell instead of being "
        "combined with it (a re-probe of some ops over a whole probe)",
    )


def run_merge(args) -> int:
    from opcov import formats
    from opcov.probe.merge import merge_files
    from opcov.scan.registered import command_line
    from opcov.store import data

    output.check_output(args.out, kind=output.COVERAGE, inputs=args.files, evidence="probed")
    doc = merge_files(args.files, command=command_line(), replace=args.replace)
    data.save(doc, args.out)
    from opcov.probe.plan import merge_times

    merge_times(args.files, args.out, command=command_line())  # the shards' group times, for the next plan
    formats.print_summary([(args.out, doc)])
    print(f"wrote {args.out} from {len(args.files)} file(s)")
    return EXIT_OK


COMMANDS = {"probe": (add_probe, run_probe), "merge": (add_merge, run_merge)}
