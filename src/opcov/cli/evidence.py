"""The commands that bring evidence from where the hardware is: ``plan`` (a probe fanned out over GitHub
Actions or a Kubernetes Indexed Job), ``bundle`` and ``ingest`` (a probed file or an observed run contributed
and merged), ``run`` (a model's step run for real on a device: an observed run) and ``expect`` (what a
backend's own op tests expect)."""

from __future__ import annotations

import json
import shlex
import sys

from opcov.backends import known_backends
from opcov.cli import common, options
from opcov.errors import EXIT_OK, UsageError
from opcov.store import output

# probe options that decide which groups a probe has: 'opcov plan' must be given the shards' own
_SELECTION = (
    ("--import", "import_module", "MODULE", "module that registers the backend's kernels (as for probe)"),
    ("--ops", "ops", "PATTERN", "as for probe"),
    ("--dtypes", "dtypes", "LIST", "as for probe"),
    ("--directions", "directions", "LIST", "as for probe"),
    ("--traces", "traces", "MODELS", "as for probe"),
    ("--tiers", "tiers", "TIERS", "as for probe"),
    ("--times", "times", "FILE", "recorded group times (default: the .times.json beside the backend's probed file)"),
    ("--jobs", "jobs", "N", "worker processes each shard runs (passed to its probe command)"),
)
RUN_TIMEOUT_S = 1800.0  # 'opcov run': a step on a device, compiled perhaps, may take minutes; a hang does not
_RUN_CHILD = "OPCOV_RUN_CHILD"  # set in the child of 'opcov run' that builds the model and runs its step
_FLAGS = (("--core", "core", True), ("--no-schema", "schema", False), ("--all-samples", "all_samples", True))


def add_plan(sub) -> None:
    pl = sub.add_parser(
        "plan",
        help="split a probe into N shards balanced by recorded group times; write a GitHub Actions "
        "matrix or a Kubernetes Indexed Job",
        description="Deals the probe's groups out longest first, each to the least loaded shard, by the "
        "times the last probe recorded (<probed file>.times.json). 'opcov probe B --shard I/N' with the same "
        "options and times file runs part I of this same plan. Give plan the options the shards' probe gets.",
    )
    pl.add_argument("backend")
    pl.add_argument("--shards", type=int, required=True, metavar="N", help="number of shards")
    options.add_format(
        pl,
        "text",
        "json",
        "github",
        "k8s",
        help="text/json: the plan's predicted load per shard; github: $GITHUB_OUTPUT lines (matrix1.., "
        "slices of at most 256 jobs); k8s: an Indexed Job manifest (default: text)",
    )
    pl.add_argument("--runner", default="ubuntu-latest", help="github: the runner label the shards run on")
    pl.add_argument("--max-slices", type=int, default=2, help="github: matrices the workflow has (default: 2)")
    pl.add_argument("--image", default="opcov:latest", help="k8s: container image with opcov and the backend")
    pl.add_argument("--name", default=None, help="k8s: the Job's name (default: opcov-probe-<backend>)")
    pl.add_argument("--claim", default="opcov-results", help="k8s: PersistentVolumeClaim mounted at /results")
    pl.add_argument("--parallelism", type=int, default=None, help="k8s: pods at once (default: all shards)")
    pl.add_argument("--workdir", default="/opcov", help="k8s: the checkout (holding coverage/) in the image")
    pl.add_argument("--resources", metavar="KEY=COUNT", help="k8s: a device limit per pod, e.g. google.com/tpu=4")
    for flag, dest, metavar, text in _SELECTION:
        pl.add_argument(flag, dest=dest, metavar=metavar, help=text, type=int if dest == "jobs" else None)
    for flag, dest, value in _FLAGS:
        pl.add_argument(flag, dest=dest, action="store_false" if value is False else "store_true", help="as for probe")
    pl.add_argument("--out", help="write the output to this file instead of stdout")


def add_bundle(sub) -> None:
    bu = sub.add_parser(
        "bundle",
        help="pack a probed file or an observed run with its provenance and content hash into one file to contribute",
    )
    bu.add_argument(
        "file",
        help="the probed file (coverage/<backend>/probed-...yaml, or a merged one) or an observed run "
        "(coverage/observed/<backend>/<model>.<mode>.json, from 'opcov run')",
    )
    bu.add_argument(
        "--source", required=True, help="who contributed it, as it should be credited (a name, team or URL)"
    )
    bu.add_argument("--out", help="bundle to write (default: <file name>.opcov-bundle.json.gz here)")


def add_ingest(sub) -> None:
    ig = sub.add_parser(
        "ingest",
        help="validate a contributed bundle and merge it into coverage/, printing the diff",
    )
    ig.add_argument("bundle")
    options.add_into(ig)
    options.add_format(ig, "text", "markdown", help="the diff's format")


def add_run(sub) -> None:
    rn = sub.add_parser(
        "run",
        help="run a model's step (or, to serve, generate's runs) for real on a backend's device and save what "
        "happened (an observed run)",
    )
    rn.add_argument(
        "model", help="a zoo name ('opcov zoo list'; its tiny config) or module:function returning (model, inputs)"
    )
    rn.add_argument("-b", "--backend", required=True)
    options.add_mode(
        rn,
        default="training",
        help="training (default): forward, backward and an AdamW step; inference: the forward; serve: "
        "transformers' generate as serve mode traces it (static and dynamic KV cache, greedy and sampling), "
        "for a decoder with a serve op set",
    )
    options.add_import(rn, "module that registers the backend")
    options.add_into(rn)
    options.add_path(
        rn,
        "eager (default), or compile: the step through torch.compile with the device's compile backend "
        "(serve: the model's forward, compiled afresh for each generate run)",
    )
    rn.add_argument(
        "--compile-backend",
        metavar="NAME",
        help="the torch.compile backend for --path compile (default: the device's: inductor for cpu and cuda, "
        "openxla for xla, tpu for tpu, neuron for neuron)",
    )
    rn.add_argument(
        "--out",
        help="file to write (default: coverage/observed/<backend>/<model>.<mode>.json; "
        "with --path compile, coverage/observed/<backend>/compile/<model>.<mode>.json)",
    )
    rn.add_argument(
        "--timeout",
        type=float,
        default=RUN_TIMEOUT_S,
        metavar="SECONDS",
        help=f"the model's build and step run in a child process, killed (with all it started) after this "
        f"(default: {RUN_TIMEOUT_S:g})",
    )


def add_expect(sub) -> None:
    ex = sub.add_parser(
        "expect",
        help="read what a backend's own op tests expect (dtype exclusions, unchecked gradients, deny lists) "
        "from its source checkout, without running it: an expectation, not a result",
    )
    readable = tuple(b.name for b in known_backends() if b.vendor_tests)  # the backends whose tests opcov reads
    ex.add_argument("backend", choices=readable, help="the backend whose tests are read (TorchTPU's: tpu)")
    ex.add_argument(
        "--vendor-tests", required=True, metavar="PATH", help="a source checkout of the backend (its tests/ folder)"
    )
    ex.add_argument("--repo", help="the repository the checkout is of, recorded with the data")
    ex.add_argument("--commit", help="the commit of the checkout (default: its git HEAD)")
    ex.add_argument(
        "--vendor-source",
        action="append",
        metavar="[FILE=]REPO@COMMIT",
        help="where a checkout without .git came from, recorded with the data: REPO@COMMIT, or per file "
        "(tests/ops_test.py=REPO@COMMIT) for a copy put together file by file; repeatable",
    )
    ex.add_argument(
        "--vendor-note",
        metavar="TEXT",
        help="a note on the source shown with every expectation, e.g. 'a public copy, not verified as the release'",
    )
    options.add_into(ex)
    ex.add_argument("--out", help="file to write (default: coverage/vendor/<backend>/<vendor>-tests.json)")


def _probe_args(args) -> str:
    """The shards' probe options, as the plan was given them."""
    parts = []
    for flag, dest, _m, _t in _SELECTION:
        value = getattr(args, dest)
        if value is not None:
            parts += [flag, str(value)]
    for flag, dest, value in _FLAGS:
        if getattr(args, dest) != (not value):
            parts.append(flag)
    return " ".join(shlex.quote(p) for p in parts)


def run_plan(args) -> int:
    from opcov.backends import get_backend
    from opcov.probe import KNOWN_DTYPES, plan
    from opcov.probe.cases import parse_directions, parse_dtypes, parse_tiers, parse_traces
    from opcov.probe.runner import select

    if args.shards < 1:
        raise UsageError(f"--shards must be at least 1, not {args.shards}")
    if args.out:
        output.check_output(args.out, kind=output.PLAN, inputs=[args.times])
    backend = get_backend(args.backend, args.import_module)
    times_file = args.times if args.times is not None else plan.default_times(backend)
    if args.out:
        output.check_output(args.out, kind=output.PLAN, inputs=[times_file])
    times = plan.load_times(times_file, required=args.times is not None)
    _torch, _catalog, _facts, groups = select(
        backend,
        pattern=args.ops,
        core=args.core,
        dtypes=parse_dtypes(args.dtypes, KNOWN_DTYPES),
        directions=parse_directions(args.directions),
        traces=parse_traces(args.traces),
        tiers=parse_tiers(args.tiers),
        schema=args.schema,
        all_samples=args.all_samples,
    )
    if args.shards > max(1, len(groups)):  # no shard without a group: the work is bounded by the groups
        print(
            f"opcov: --shards {args.shards} is more than the {len(groups)} group(s) this probe has; "
            f"planned {max(1, len(groups))} shard(s)",
            file=sys.stderr,
        )
        args.shards = max(1, len(groups))
    fig = plan.figures([g.id for g in groups], times, args.shards)
    fig["times"] = times_file or "none (every group counts as 1 s)"
    if args.format == "github":
        text = plan.github_outputs(args.shards, fig, args.runner, args.max_slices)
    elif args.format == "k8s":
        text = plan.k8s_manifest(
            backend.name,
            args.shards,
            image=args.image,
            probe_args=_probe_args(args),
            name=args.name or f"opcov-probe-{backend.name}",
            claim=args.claim,
            parallelism=args.parallelism,
            workdir=args.workdir,
            resources=args.resources,
        )
    elif args.format == "json":
        text = json.dumps(fig, indent=1, sort_keys=True) + "\n"
    else:
        lines = [
            f"plan {fig['plan']}: {fig['groups']} groups ({fig['timed']} with a recorded time, from {fig['times']}) "
            f"in {args.shards} shards; predicted {fig['total_s']:.1f} s in all, slowest shard "
            f"{fig['max_over_mean']:.3f}x the mean"
        ]
        for s in fig["shards"]:
            lines.append(f"  shard {s['shard']}: {s['groups']} groups, {s['seconds']:.1f} s")
        lines.append(
            f"run part I with: opcov probe {backend.name} --shard I/{args.shards} {_probe_args(args)}".rstrip()
        )
        text = "\n".join(lines) + "\n"
    if args.out:
        output.save(args.out, text, kind=output.PLAN, inputs=[times_file])
        print(f"wrote {args.out}")
    else:
        print(text, end="")
    return EXIT_OK


def run_bundle(args) -> int:
    import os

    from opcov.probe.plan import times_path
    from opcov.scan.registered import command_line
    from opcov.store import bundle

    out = args.out or os.path.basename(args.file) + bundle.SUFFIX
    inputs = [args.file, times_path(args.file)]
    output.check_output(out, kind=output.BUNDLE, inputs=inputs)
    b = bundle.make(args.file, source=args.source, command=command_line())
    bundle.write(b, out, inputs=inputs)
    print(
        f"wrote {out}: {b['backend']['name']} {b['backend'].get('package')} {b['backend'].get('version')}, "
        f"torch {b['provenance']['torch']}, sha256 {b['sha256'][:16]}...; "
        "open a pull request adding it, or send it to be ingested with 'opcov ingest'"
    )
    return EXIT_OK


def run_ingest(args) -> int:
    import sys

    from opcov.scan.registered import command_line
    from opcov.store import bundle
    from opcov.verdict import diff

    target, old, new = bundle.ingest(args.bundle, args.into, command=command_line())
    c = new["provenance"]["contributed"][-1]
    print(
        f"ingested {args.bundle} into {target}: contributed by {c['source']} on {c['date']} (sha256 {c['sha256'][:16]}...)"
    )
    if new.get("evidence") == "observed":
        if old is None:
            print(f"{target} is new: {'ran' if new['result']['ran'] else 'raised'}, {len(new.get('ops') or {})} ops")
        else:
            print("\n".join(f"  {line}" for line in bundle.observed_changes(old, new)))
    elif old is not None:
        sys.stdout.write(diff.render(diff.diff_docs(old, new, target + " (before)", target), args.format))
    else:
        print(f"{target} is new: {len(new['ops'])} ops")
    return EXIT_OK


def run_step(args) -> int:
    import math
    import os

    from opcov.scan.registered import command_line
    from opcov.store import observed as observed_files
    from opcov.verdict import observed

    if not (args.timeout > 0 and math.isfinite(args.timeout)):
        raise UsageError(f"--timeout must be a positive number of seconds, not {args.timeout:g}")
    if os.environ.pop(_RUN_CHILD, None):
        return _run_here(args)
    if args.out:
        output.check_output(args.out, kind=output.OBSERVED)
    if args.compile_backend and args.path != "compile":
        raise UsageError("--compile-backend goes with --path compile")
    from opcov.backends import get_backend

    get_backend(args.backend, args.import_module)  # an unknown name: one line now, not after a child's start
    if args.mode == "serve":
        _check_servable(args.model, args.into)
    doc = _run_in_child(args)
    doc["provenance"]["command"] = command_line()
    out = args.out or observed_files.path_for(
        args.into, doc["backend"]["name"], doc["model"]["name"], args.mode, args.path
    )
    output.save(out, observed_files.dumps(doc), kind=output.OBSERVED, within=None if args.out else args.into)
    print(observed.summary(doc))
    print(f"wrote {out}")
    return EXIT_OK


def _check_servable(model: str, coverage_dir: str) -> None:
    """A zoo model without a serve op set (in the coverage folder or the bundled data) has no serve verdict
    to hold a run against: one line, before the child builds it. A factory's model is checked there: it
    must be a decoder that can generate."""
    import glob
    import os

    from opcov.sources import zoo
    from opcov.store import layout

    if model not in zoo.BY_NAME:
        return
    folders = [layout.models_dir(c) for c in dict.fromkeys((coverage_dir, layout.bundled_coverage())) if c]
    if any(os.path.exists(os.path.join(f, model, "serve.yaml")) for f in folders):
        return
    served = sorted({os.path.basename(os.path.dirname(p)) for f in folders for p in glob.glob(f"{f}/*/serve.yaml")})
    raise UsageError(
        f"{model}: no serve op set ({os.path.join(folders[0], model, 'serve.yaml')}): serve runs a text decoder "
        + (f"with one ({', '.join(served)}); " if served else "; ")
        + f"for another decoder, 'opcov trace {model} --mode serve' first"
    )


def _run_in_child(args) -> dict:
    """The observed-run document of 'opcov run', made by 'opcov run' in a child process (common.in_child)."""
    import os

    from opcov.store import observed as observed_files

    return common.in_child(
        args,
        "observed.json",
        observed_files.load,
        what=f"factory {args.model}" if ":" in args.model else args.model,
        process="the run's process",
        env={**os.environ, _RUN_CHILD: "1"},
    )


def _run_here(args) -> int:
    """In the child (``_run_in_child``): build the model, run its step, write the document to --out."""
    from opcov.scan.registered import command_line
    from opcov.store import observed as observed_files
    from opcov.tracing.observe import observe

    doc = observe(
        args.model,
        args.backend,
        mode=args.mode,
        import_module=args.import_module,
        command=command_line(),  # the child's; the parent records the user's
        path=args.path,
        compile_backend=args.compile_backend,
    )
    output.write_atomic(args.out, observed_files.dumps(doc))
    return EXIT_OK


def run_expect(args) -> int:
    from opcov.scan import vendortests
    from opcov.scan.registered import command_line
    from opcov.store import vendor

    out = args.out or vendor.path_for(args.into, args.backend)
    inputs = vendortests.inputs(args.vendor_tests)
    within = None if args.out else args.into
    output.check_output(out, kind=output.VENDOR, inputs=inputs, within=within)
    found = vendortests.read(args.vendor_tests, args.backend)  # first: it says which files a checkout lacks
    source = vendortests.source_of(
        args.vendor_tests, args.repo, args.commit, args.vendor_source or (), args.vendor_note
    )
    doc = vendor.build(found, source, args.backend, args.into, command_line())
    vendor.save(doc, out, inputs=inputs, within=within)
    hows: dict[str, int] = {}
    for how in doc["mapped"].values():
        hows[how] = hows.get(how, 0) + 1
    deny = ", ".join(
        f"{d['variable']} ({d['applies'] or 'unclassified'}, {len(d['names'])})" for d in found["deny_lists"].values()
    )
    print(
        f"{len(found['opinfos'])} OpInfo tests and {len(found['deny_lists'])} deny list(s) read from "
        f"{vendor.source_label(doc, 'tests/ops_test.py')}; expectations for {len(doc['ops'])} aten overload(s); "
        "an expectation, not a result"
    )
    print(f"deny lists: {deny or 'none'}")
    print(
        f"OpInfo names mapped to aten overloads: {len(doc['mapped'])} ("
        + ", ".join(f"{n} by {h}" for h, n in sorted(hows.items()))
        + ")"
    )
    for name, why in doc["unmapped"].items():
        print(f"  not mapped: {name}: {why}")
    ran = {c["collective"] for c in found["collectives"]}
    print(
        f"models the model-coverage tests run: {len({(m['provider'], m['module']) for m in found['models']})} "
        f"({len(found['models'])} test entries); collectives the distributed tests call: {len(ran)} "
        f"({len(found['collectives'])} calls{': ' + ', '.join(sorted(ran)) if ran else ''})"
    )
    print(f"not understood: {len(found['not_understood'])}")
    for n in found["not_understood"]:
        print(f"  {n.get('file')}:{n['line']}: {n.get('test', '')} {n['what']}")
    print(f"wrote {out}")
    return EXIT_OK


COMMANDS = {
    "plan": (add_plan, run_plan),
    "bundle": (add_bundle, run_bundle),
    "ingest": (add_ingest, run_ingest),
    "run": (add_run, run_step),
    "expect": (add_expect, run_expect),
}
