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
from opcov.store import layout

DEFAULT_COVERAGE = layout.DEFAULT_COVERAGE


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

    ck = sub.add_parser("check", help="can MODEL run on a backend? a verdict op by op; exit 1 when it fails")
    ck.add_argument("model", help="op-set file, folder of op sets, zoo model name (coverage/models/NAME), "
                    "or anything 'opcov trace' accepts (traced now)")
    ck.add_argument("--backend", "-b", action="append", required=True, help="backend to judge (repeatable)")
    ck.add_argument("--mode", choices=("inference", "training"), action="append",
                    help="only this mode (default: every mode the op sets hold)")
    ck.add_argument("--coverage", default=DEFAULT_COVERAGE, help="coverage data folder (default: %(default)s)")
    ck.add_argument("--format", choices=("text", "json", "junit", "markdown", "github"), default="text")
    ck.add_argument("--output", "-o", help="write the report to this file instead of stdout")
    ck.add_argument("--strict", action="store_true", help="also fail on CPU fallbacks and unknown ops")
    ck.add_argument("--fail-on", choices=("unknown",), action="append", default=[],
                    help="also fail the gate on unknown ops")
    ck.add_argument("--dtype", help="dtype for tracing on the fly (saved op sets carry their own)")

    df = sub.add_parser("diff", help="what changed between two coverage snapshots of a backend")
    df.add_argument("old")
    df.add_argument("new")
    df.add_argument("--fail-on-regression", action="store_true", help="exit 1 on any real regression")
    df.add_argument("--format", choices=("text", "json", "markdown"), default="text")

    gp = sub.add_parser("gaps", help="a backend's failing or missing ops, ranked by zoo models blocked")
    gp.add_argument("backend")
    gp.add_argument("--coverage", default=DEFAULT_COVERAGE, help="coverage data folder (default: %(default)s)")
    gp.add_argument("--mode", choices=("inference", "training"), action="append")
    gp.add_argument("--top", type=int, default=30, help="show this many ops (default: %(default)s)")
    gp.add_argument("--format", choices=("text", "json"), default="text")

    pr = sub.add_parser("probe", help="run OpInfo samples on a backend against a CPU reference (probed coverage)")
    pr.add_argument("backend")
    pr.add_argument("--import", dest="import_module", metavar="MODULE",
                    help="module that registers the backend's kernels (PrivateUse1 backends)")
    pr.add_argument("--ops", metavar="PATTERN",
                    help="regular expression searched in OpInfo names ('mul', 'nn.functional.relu') and 'aten::<name>'")
    pr.add_argument("--core", action="store_true", help="only OpInfos of core ATen ops")
    pr.add_argument("--dtypes", help="comma-separated (default: float32,bfloat16,float16,float64,int64,bool)")
    pr.add_argument("--directions", help="forward,backward (default: both)")
    pr.add_argument("--jobs", type=int, default=1, help="worker processes (devices) (default: 1)")
    pr.add_argument("--timeout", type=float, default=60.0, help="seconds per case phase (default: 60)")
    pr.add_argument("--shard", metavar="I/N", help="run only shard I of N (split by case group id)")
    pr.add_argument("--traces", metavar="MODELS",
                    help="also replay op calls captured from zoo model traces ('zoo' or names: llama,mixtral)")
    pr.add_argument("--resume", action="store_true", help="continue an interrupted probe from its journal")
    pr.add_argument("--out", help="file to write (default: coverage/<backend>/probed-...yaml)")

    mg = sub.add_parser("merge", help="combine probed files (shards or runs) of one backend and torch version")
    mg.add_argument("files", nargs="+")
    mg.add_argument("--out", required=True, help="file to write")

    st = sub.add_parser("site", help="render the static coverage website from coverage/ data (no torch import)")
    st.add_argument("--coverage", default=DEFAULT_COVERAGE, help="coverage data folder (default: %(default)s)")
    st.add_argument("--out", default="site", help="output folder (default: %(default)s)")
    tr = sub.add_parser("trace", help="the ops a model dispatches (forward, backward, optimizer), no weights needed")
    tr.add_argument("model", help="zoo name or transformers model type (llama, bert...), hf:TYPE, a config.json, "
                    "package.module:function (returns (model, inputs)), nn:transformer|lstm|gru|convnet, "
                    "or a saved op-set file")
    tr.add_argument("--mode", choices=("inference", "training"), default="training")
    tr.add_argument("--dtype", choices=("float32", "bfloat16", "float16"), default=None,
                    help="parameter and floating-input dtype (default: the zoo entry's, else float32)")
    tr.add_argument("--autocast", action="store_true", help="run the forward under bfloat16 autocast")
    tr.add_argument("--device", default="accelerator",
                    help="target device type: cpu, or an accelerator (tpu, cuda, neuron...; default: %(default)s)")
    tr.add_argument("--optimizer", choices=("adamw", "sgd", "none"), default="adamw")
    tr.add_argument("--real", action="store_true",
                    help="trace small real CPU tensors (models with data-dependent ops) instead of fake ones")
    tr.add_argument("--batch", type=int, default=2, help="input batch size (default: %(default)s)")
    tr.add_argument("--seq", type=int, default=16, help="input sequence length (default: %(default)s)")
    tr.add_argument("--image-size", type=int, help="input image size (default: the config's)")
    tr.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                    help="set a config attribute before building (num_hidden_layers=32; text_config.x=1)")
    tr.add_argument("--out", help="op-set file to write (default: coverage/models/<model>/<mode>.yaml)")

    zo = sub.add_parser("zoo", help="the bundled model zoo: list it, or re-trace it into coverage/models/")
    zo.add_argument("action", choices=("list", "trace"))
    zo.add_argument("--only", action="append", default=[], metavar="NAMES",
                    help="comma-separated zoo names (repeatable; default: all)")
    zo.add_argument("--mode", choices=("inference", "training"), action="append",
                    help="only this mode (repeatable; default: both)")
    zo.add_argument("--root", default=layout.models_dir(),
                    help="folder of <model>/<mode>.yaml files (default: %(default)s)")
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
    from opcov import formats
    from opcov.store import data
    from opcov.backends import get_backend, load
    from opcov.scan.registered import command_line, scan

    backend = get_backend(args.backend, args.import_module)
    torch = load(backend)
    doc = scan(backend, torch, command=command_line(), reach=not args.no_reach)
    out = args.out or layout.scan_path(doc)
    data.save(doc, out)
    formats.print_summary([(out, doc)])
    print(f"wrote {out}")
    return EXIT_OK


def cmd_lint(args) -> int:
    from opcov.store.lint import lint_files

    files = layout.coverage_files(args.paths, models=True)
    problems = lint_files(files, check_catalog=not args.no_catalog)
    for p in problems:
        print(p)
    errors = sum(p.severity == "error" for p in problems)
    warnings = len(problems) - errors
    print(f"{len(files)} file(s) checked: {errors} error(s), {warnings} warning(s)")
    return EXIT_GATE if errors else EXIT_OK


def cmd_summary(args) -> int:
    from opcov import formats
    from opcov.store import data

    docs = [(f, data.load(f)) for f in layout.coverage_files(args.paths)]
    if not docs:
        raise UsageError("no coverage files found; create one with 'opcov scan BACKEND'")
    if args.format == "json":
        print(json.dumps({f: {"backend": d["backend"], "provenance": d["provenance"], "summary": d["summary"]}
                          for f, d in docs}, indent=2, sort_keys=True))
    else:
        formats.print_summary(docs)
    return EXIT_OK


def cmd_check(args) -> int:
    from opcov.verdict import check
    from opcov.verdict import reports
    from opcov.verdict import judge

    verdicts, model = check.run(args.model, args.backend, args.mode, args.coverage, args)
    text = reports.render(args.format, verdicts, model)
    if args.output:
        with open(args.output, "w") as f:
            f.write(text)
    else:
        sys.stdout.write(text)
    failed = judge.gate_failed(verdicts, strict=args.strict, fail_on_unknown="unknown" in args.fail_on)
    return EXIT_GATE if failed else EXIT_OK


def cmd_diff(args) -> int:
    from opcov.verdict import diff

    result = diff.diff_files(args.old, args.new)
    sys.stdout.write(diff.render(result, args.format))
    return EXIT_GATE if args.fail_on_regression and result.regressions else EXIT_OK


def cmd_gaps(args) -> int:
    from opcov.verdict import gaps

    ranked = gaps.rank(args.backend, args.coverage, args.mode)
    sys.stdout.write(gaps.render(ranked, args.backend, args.top, args.format))
    return EXIT_OK


def cmd_site(args) -> int:
    from opcov.site.render import render_site

    stats = render_site(args.coverage, args.out)
    print(f"{args.out}: {stats['files']} files ({stats['ops']} ops, {stats['backends']} backends, "
          f"{stats['models']} models), {stats['written']} written, {stats['removed']} removed; "
          f"{stats['catalog_note']}")
    return EXIT_OK


def cmd_probe(args) -> int:
    from opcov import formats
    from opcov.backends import get_backend
    from opcov.probe import KNOWN_DTYPES
    from opcov.probe.cases import parse_directions, parse_dtypes, parse_shard, parse_traces
    from opcov.probe.runner import probe
    from opcov.scan.registered import command_line

    dtypes = parse_dtypes(args.dtypes, KNOWN_DTYPES)
    directions = parse_directions(args.directions)
    shard = parse_shard(args.shard)
    traces = parse_traces(args.traces)
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
    backend = get_backend(args.backend, args.import_module)
    out = args.out or layout.probe_path(backend, shard)
    from opcov.probe.runner import journal_path

    if os.path.exists(journal_path(out)) and not args.resume:
        raise UsageError(f"{journal_path(out)} exists from an interrupted probe; add --resume to continue "
                         "it, or delete it to start over")
    doc, figures = probe(backend, out=out, pattern=args.ops, core=args.core, dtypes=dtypes,
                         directions=directions, jobs=args.jobs, timeout=args.timeout, shard=shard,
                         resume=args.resume, command=command_line(), traces=traces)
    formats.print_summary([(out, doc)])
    print(f"wrote {out}: {figures['cases_run']} cases run in {figures['wall_s']:.1f}s "
          f"({figures['groups']} groups, {figures['restarts']} worker restarts)")
    return EXIT_OK


def cmd_merge(args) -> int:
    from opcov import formats
    from opcov.store import data
    from opcov.probe.merge import merge_files
    from opcov.scan.registered import command_line

    doc = merge_files(args.files, command=command_line())
    data.save(doc, args.out)
    formats.print_summary([(args.out, doc)])
    print(f"wrote {args.out} from {len(args.files)} file(s)")
    return EXIT_OK


def cmd_trace(args) -> int:
    from opcov.tracing.models import Sizes
    from opcov.tracing.spec import is_saved, trace_spec

    sizes = Sizes(batch=args.batch, seq=args.seq, image=args.image_size, overrides=_overrides(args.set))
    result = trace_spec(args.model, mode=args.mode, dtype=args.dtype, autocast=args.autocast, device=args.device,
                        optimizer=args.optimizer, real=args.real, sizes=sizes, out=args.out)
    if is_saved(args.model):
        shown, out = args.model, args.out
    else:
        shown = out = args.out or layout.opset_path(result.doc["model"]["name"].replace("/", "_"), args.mode)
    if out:
        result.save(out)
    _print_opset(shown, result.doc)
    if out:
        print(f"wrote {out}")
    return EXIT_OK


def _overrides(pairs) -> dict:
    import yaml

    out = {}
    for pair in pairs:
        key, eq, value = pair.partition("=")
        if not eq or not key:
            raise UsageError(f"--set {pair!r}: expected KEY=VALUE, e.g. --set num_hidden_layers=4")
        out[key] = yaml.safe_load(value)
    return out


def _print_opset(path, doc) -> None:
    m, s = doc["model"], doc.get("summary", {})
    calls = s.get("calls", {})
    print(f"{path}: {m.get('name')} ({m.get('source', '?')}), {doc['mode']}, {doc['dtype']}, "
          f"target {doc['provenance'].get('target_device', '?')}, {doc['provenance'].get('tracing', '?')} tensors: "
          f"{s.get('distinct_ops', len(doc['ops']))} distinct ops; calls "
          + ", ".join(f"{k} {v}" for k, v in calls.items() if v))


def cmd_zoo(args) -> int:
    from opcov.tracing import zoo
    from opcov.tracing.spec import trace_zoo

    entries = zoo.select(args.only)
    if args.action == "list":
        for e in entries:
            print(f"{e.name:16} {e.spec:16} {e.dtype:9} {'real' if e.real else 'fake'}  "
                  + "; ".join(e.notes))
        return EXIT_OK
    modes = tuple(dict.fromkeys(args.mode or ("inference", "training")))
    failures = trace_zoo(entries, modes, root=args.root)
    for name, mode, why in failures:
        print(f"opcov: zoo: {name} {mode} failed: {why}", file=sys.stderr)
    return EXIT_GATE if failures else EXIT_OK


_COMMANDS = {"site": cmd_site, "check": cmd_check, "diff": cmd_diff, "gaps": cmd_gaps, "ops": cmd_ops, "backends": cmd_backends, "scan": cmd_scan, "lint": cmd_lint,
             "summary": cmd_summary, "probe": cmd_probe, "merge": cmd_merge, "trace": cmd_trace, "zoo": cmd_zoo}
