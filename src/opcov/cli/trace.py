"""``opcov trace``: the ATen ops a model dispatches, recorded as an op set (opcov.tracing)."""

from __future__ import annotations

import argparse
import os
import sys

from opcov import children
from opcov.activity import activity
from opcov.backends import record as backend_record
from opcov.cli import common, options
from opcov.errors import EXIT_GATE, EXIT_OK, UsageError
from opcov.store import layout, output

EXIT_CODES = (
    "Exit codes: 0 the op set is written (with --path compile: each compile backend compiled the model to the "
    "end; graph breaks alone are not a failure, they are recorded); 1 only with --path compile: the op set is "
    "written, but a compile backend's run stopped before the end (the compiled run raised, or AOTAutograd "
    "failed): the op set records what was captured, where and why, the last line says which, and 'opcov check "
    "--path compile' judges it; 2 usage or data error, or the model could not be traced (one line says why)."
)


def add_parser(sub) -> None:
    tr = sub.add_parser(
        "trace",
        help="the ops a model dispatches (forward, backward, optimizer), no weights needed",
        epilog=EXIT_CODES,
    )
    tr.add_argument(
        "model",
        help="zoo name or transformers model type (llama, bert...), hf:TYPE, a config.json, "
        "package.module:function (returns (model, inputs)), nn:transformer|lstm|gru|convnet, "
        "or a saved op-set file",
    )
    options.add_mode(
        tr,
        default="training",
        help="training (default): forward, backward and an optimizer step; inference: the forward; serve: a "
        "text decoder's generate(), its prefill and decode steps with a static and a dynamic KV cache, greedy "
        "and sampling (real values; with --path compile, the compiled forward's prefill and decode graphs)",
    )
    tr.add_argument(
        "--dtype",
        choices=("float32", "bfloat16", "float16"),
        default=None,
        help="parameter and floating-input dtype (default: the zoo entry's, else float32)",
    )
    tr.add_argument("--autocast", action="store_true", help="run the forward under bfloat16 autocast")
    tr.add_argument(
        "--device",
        default="accelerator",
        help="target device type: cpu, or an accelerator (tpu, cuda, neuron...; default: %(default)s)",
    )
    tr.add_argument("--optimizer", choices=("adamw", "sgd", "none"), default="adamw")
    tr.add_argument(
        "--real",
        action="store_true",
        help="trace small real tensors (models with data-dependent ops) instead of fake ones: on a "
        "computing stand-in device in a child process for an accelerator target, on CPU for --device cpu",
    )
    _size_options(tr)
    _output_options(tr)
    options.add_parallel(
        tr,
        "a sharded training step as rank 0 of --world-size ranks on a fake process group: ddp "
        "(DistributedDataParallel), fsdp2 (fully_shard on each block and the root), tp (ColwiseParallel and "
        "RowwiseParallel from the model's own tensor-parallel plan); records the collectives, DTensor's ops and "
        "redistributions and the local ops (coverage/models/<model>/parallel/<style>-<N>.yaml)",
        "with --parallel: the world size (default: 8)",
    )


def _size_options(tr) -> None:
    """--batch, --seq, --image-size, --audio-length, --set and --input: the model's sizes and inputs."""
    tr.add_argument("--batch", type=options.at_least_one, default=2, help="input batch size (default: %(default)s)")
    tr.add_argument("--seq", type=options.at_least_one, default=16, help="input sequence length (default: %(default)s)")
    tr.add_argument("--image-size", type=options.at_least_one, help="input image size (default: the config's)")
    tr.add_argument(
        "--audio-length",
        type=options.at_least_one,
        help="audio input length: raw-audio samples or feature frames (default: from the config's strides)",
    )
    tr.add_argument(
        "--set",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="set a config attribute before building (num_hidden_layers=32; text_config.x=1)",
    )
    tr.add_argument(
        "--input",
        action="append",
        default=[],
        metavar="NAME",
        help="also make this forward input (pixel_values, input_ids, visual_feats...), for a model whose "
        "forward asks for one it does not require (repeatable)",
    )


def _output_options(tr) -> None:
    """--on, --out, --timeout, --path and --compile-backend: where it is recorded and written."""
    tr.add_argument(
        "--on",
        metavar="BACKEND",
        help="record the op set on BACKEND's own device, real values at the tiny size (cpu; xla from a Python "
        "with torch_xla): its own path, Python-level replacements and device-type branches included "
        "(default: the stand-in device; docs/variants.md)",
    )
    tr.add_argument("--out", help="op-set file to write (default: coverage/models/<model>/<mode>.yaml)")
    options.add_trace_timeout(
        tr,
        "seconds a package.module:function factory's child process may take to build and trace, "
        "then it is killed (default: %(default)s)",
    )
    options.add_compile_args(
        tr,
        "compiled op set: Dynamo's graphs and graph breaks, then the AOT forward and backward "
        "graphs after the compile backend's decompositions (coverage/models/<model>/compile/"
        "<backend>-<mode>.yaml; --out names the file when one backend is asked)",
    )
    tr.add_argument(
        "--verbose",
        action="store_true",
        help="with --path compile: keep Dynamo's and Inductor's own log on stderr (by default it is kept out; "
        "what it says of graph breaks, recompiles and failures is recorded in the op set either way)",
    )


def run(args) -> int:
    from opcov.tracing.spec import is_saved, trace_spec

    if args.mode == "serve":
        _serve_refusals(args)
    if args.parallel or args.world_size:
        return _parallel(args)
    if args.path == "compile":
        if args.verbose:  # read by tracing.compiled here and in a factory's child, which inherits it
            from opcov.tracing.compiled import VERBOSE_ENV

            os.environ[VERBOSE_ENV] = "1"
        return _compiled(args)
    if args.verbose:
        raise UsageError("--verbose goes with --path compile (the eager trace prints no log of its own)")
    if args.compile_backend:
        raise UsageError("--compile-backend goes with --path compile")

    sizes = _sizes(args)
    if args.out:
        output.check_output(args.out, kind=output.OPSET, inputs=[args.model])
    if args.on == "":  # '--on=': not the same as no --on
        raise UsageError("--on names the backend to record on, e.g. --on xla")
    if args.on:
        return _on(args, sizes)
    if _is_factory(args.model) and not os.environ.get(_ISOLATED):
        with activity(f"tracing {args.model} ({args.mode}) in a child process"):
            result = _in_child(args)
    else:
        with activity(f"tracing {args.model} ({args.mode})"):
            result = trace_spec(
                args.model,
                mode=args.mode,
                dtype=args.dtype,
                autocast=args.autocast,
                device=args.device,
                optimizer=args.optimizer,
                real=args.real,
                sizes=sizes,
                out=_recorded_out(args),
            )
    if is_saved(args.model):
        shown, out = args.model, args.out
    else:
        shown = out = args.out or layout.opset_path(layout.folder_name(result.doc["model"]["name"]), args.mode)
        output.check_output(
            out, kind=output.OPSET, inputs=[args.model], within=None if args.out else layout.models_dir()
        )
    if out:
        result.save(out)
    _print_opset(shown, result.doc)
    if out:
        print(f"wrote {out}")
    print(_next_check(out or shown, args.device))
    return EXIT_OK


def _parallel(args) -> int:
    """'opcov trace MODEL --parallel STYLE' (opcov.cli.parallel); a factory traced in a child process."""
    from opcov.cli import parallel

    if not args.parallel:
        raise UsageError("--world-size goes with --parallel ddp|fsdp2|tp")
    child = _in_child if _is_factory(args.model) and not os.environ.get(_ISOLATED) else None
    return parallel.trace(
        args, _sizes(args), in_child=child, print_opset=_print_opset, recorded_out=_recorded_out(args)
    )


def _serve_refusals(args) -> None:
    """What --mode serve does not record yet, in one line each (opcov.tracing.serve)."""
    if args.on:
        raise UsageError(f"--mode serve --on {args.on}: serving is not recorded on a backend itself yet")
    if args.optimizer != "adamw":
        raise UsageError("--mode serve runs no optimizer; leave out --optimizer")


def _on(args, sizes) -> int:
    """'opcov trace MODEL --on BACKEND': recorded on the backend itself (opcov.tracing.ondevice)."""
    from opcov.tracing import ondevice
    from opcov.tracing.spec import command_line, is_saved

    if is_saved(args.model):
        raise UsageError(
            f"--on {args.on}: {args.model} is a saved op set; --on records a model (a zoo name, a factory...)"
        )
    if args.real:
        raise UsageError(f"--on {args.on} records real values already; leave out --real")
    if args.autocast:
        raise UsageError(f"--on {args.on} records without autocast; leave out --autocast")
    if args.device not in ("accelerator", args.on):
        raise UsageError(f"--on {args.on} records for {args.on}; leave out --device {args.device}")
    ondevice.runnable(args.on)  # before building anything: one line when it cannot run here
    out = args.out
    command = command_line(
        args.model, mode=args.mode, dtype=args.dtype or "float32", optimizer=args.optimizer, sizes=sizes, out=out,
        on=args.on, device=args.on,
    )  # fmt: skip
    with activity(f"tracing {args.model} ({args.mode}) on {args.on}"):
        result = ondevice.trace_on(
            args.model,
            args.on,
            mode=args.mode,
            dtype=args.dtype,
            optimizer=args.optimizer,
            sizes=sizes,
            command=command,
        )
    if args.dtype is None and result.doc["dtype"] != "float32":  # the zoo entry's dtype: the command says it
        result.doc["provenance"]["command"] = command_line(
            args.model, mode=args.mode, dtype=result.doc["dtype"], optimizer=args.optimizer, sizes=sizes, out=out,
            on=args.on, device=args.on,
        )  # fmt: skip
    out = out or layout.ondevice_opset_path(layout.folder_name(result.doc["model"]["name"]), args.on, args.mode)
    output.check_output(out, kind=output.OPSET, inputs=[args.model], within=None if args.out else layout.models_dir())
    result.save(out)
    _print_opset(out, result.doc)
    print(f"wrote {out}")
    print(f"next: opcov check {out} -b {args.on}")
    return EXIT_OK


_SIZE_WORDS = ("num_", "n_")  # config keys that count something (layers, heads, experts...)
_SIZE_ENDS = ("_size", "_layers", "_heads", "_dim", "_length", "_experts", "_positions")


_ISOLATED = "OPCOV_TRACE_ISOLATED"  # set in the child that runs a user's factory
_RECORDED_OUT = "OPCOV_TRACE_RECORDED_OUT"  # the user's --out ("" for none), for the child's provenance command


def _is_factory(spec: str) -> bool:
    """Whether ``opcov trace SPEC`` runs user code (a package.module:function factory)."""
    if spec.startswith("factory:"):
        return True
    prefix = spec.split(":", 1)[0]
    return ":" in spec and "/" not in spec and prefix not in ("hf", "nn", "timm", "torchvision")


def _recorded_out(args):
    """The --out the op set's command records: in the factory's child, the user's own (the child writes
    a temporary file that the parent saves where the user asked), so the command reproduces the trace."""
    if os.environ.get(_ISOLATED) and _RECORDED_OUT in os.environ:
        return os.environ[_RECORDED_OUT] or None
    return args.out


def _in_child(args):
    """The op set of a user's factory, traced by 'opcov trace' in a child process (common.in_child). A child
    that aborts on the stand-in device (``_STAND_IN_ABORT``) is traced once more on CPU itself, with real
    values, and the op set says so."""
    from opcov.store import opset

    def traced(argv):
        return common.in_child(
            argparse.Namespace(**{**vars(args), "argv": argv}),
            "opset.yaml",
            lambda out: opset.OpSet(opset.load(out)),
            what=f"factory {args.model}",
            process="the tracing process",
            env={**os.environ, _ISOLATED: "1", _RECORDED_OUT: args.out or ""},
        )

    try:
        return traced(args.argv)
    except UsageError as exc:
        if args.device == "cpu" or args.autocast or _STAND_IN_ABORT not in str(exc):
            raise
    result = traced(children.with_option(args.argv, "--device", "cpu", "--real"))
    result.doc["provenance"].setdefault("notes", []).append(
        "traced on CPU itself, with real values: tracing on the stand-in device aborted the process (SIGABRT; "
        "torch 2.13 aborts where an error is raised inside a backward on a Python-defined device), so its "
        "device-type branches are CPU's"
    )
    return result


# How a factory's child ends when torch aborts it on the stand-in device (an error inside a backward there:
# a gradient-checkpointed block's recompute, a custom Function's hook), where CPU runs the same step.
_STAND_IN_ABORT = "crashed the tracing process (SIGABRT)"


def _next_check(opset_file: str, device: str) -> str:
    """The command to run next on a traced op set: check it on the target device's backend when it
    has data, else on every accelerator that does (cpu and meta are no target to ask about)."""
    try:
        have = layout.backends_with_data(layout.read_coverage(None))
    except UsageError:
        have = []
    targets = [device] if device in have else [b for b in have if not _is_control(b)] or ["BACKEND"]
    return f"next: opcov check {opset_file} " + " ".join(f"-b {b}" for b in targets)


def _is_control(name: str) -> bool:
    """A reference the others are judged against (cpu, meta): no target to suggest checking a model on."""
    rec = backend_record(name)
    return bool(rec and rec.control)


def _compiled(args) -> int:
    """'opcov trace MODEL --path compile': one compiled op set per compile backend (tracing.compiled)."""
    from opcov.tracing import compiled

    backends = compiled.parse_backends(args.compile_backend)
    if args.out and len(backends) > 1:
        raise UsageError("--out names one file: give one --compile-backend, or leave --out out")
    if args.autocast or args.optimizer != "adamw" or args.device != "accelerator":
        raise UsageError(
            "--path compile takes no --autocast, --optimizer or --device: the compile backend names the target, "
            "and the optimizer step is not compiled"
        )
    sizes = _sizes(args)
    if args.out:
        output.check_output(args.out, kind=output.OPSET, inputs=[args.model])
    if _is_factory(args.model) and not os.environ.get(_ISOLATED):
        with activity(f"compiling {args.model} ({args.mode}) for {', '.join(backends)} in a child process"):
            results = _compiled_in_child(args, backends)
    else:
        with activity(f"compiling {args.model} ({args.mode}) for {', '.join(backends)}"):
            results = compiled.trace_compiled_spec(
                args.model, backends=backends, mode=args.mode, dtype=args.dtype, real=args.real, sizes=sizes,
                out=args.out,
            )  # fmt: skip
        if os.environ.get(_ISOLATED) and os.environ.get(_COMPILED_DIR):  # the factory's child: its parent saves
            for backend, result in results.items():
                result.save(os.path.join(os.environ[_COMPILED_DIR], f"{backend}.yaml"))
            return EXIT_OK
    failed = False
    for backend, result in results.items():
        doc = result.doc
        out = args.out or layout.compiled_opset_path(layout.folder_name(doc["model"]["name"]), backend, args.mode)
        if not args.out:
            output.check_output(out, kind=output.OPSET, within=layout.models_dir())
        result.save(out)
        _print_opset(out, doc)
        print(compiled.describe(doc))
        print(f"wrote {out}")
        failed = failed or doc["compile"]["outcome"] != "compiled"
    return _compile_exit(results) if failed else EXIT_OK


def _compile_exit(results: dict) -> int:
    """Exit 1 after the op sets are written, when a compile backend's run did not reach the end: said in
    one last line, so that a non-zero exit after 'wrote FILE' is never a puzzle (EXIT_CODES)."""
    stopped = {b: r.doc["compile"]["outcome"] for b, r in results.items() if r.doc["compile"]["outcome"] != "compiled"}
    words = {"failed": "the compiled run stopped", "aot_failed": "AOTAutograd failed"}
    said = "; ".join(f"{b}: {words.get(o, o)}" for b, o in stopped.items())
    print(
        f"opcov trace: exit 1: the op set is written, but the compile did not reach the end ({said}); it records "
        "what was captured and why, and 'opcov check FILE -b BACKEND --path compile' judges it",
        file=sys.stderr,
    )
    return EXIT_GATE


_COMPILED_DIR = "OPCOV_TRACE_COMPILED_DIR"  # in a factory's child: the folder its compiled op sets go to


def _compiled_in_child(args, backends) -> dict:
    """A user's factory compiled by 'opcov trace --path compile' in a child process, as the eager trace
    runs it (children.opcov_child): one that crashes, exits, hangs or forks is one line, never this process.
    The child writes BACKEND.yaml per compile backend into a temporary folder, read back here."""
    from opcov import children
    from opcov.store import opset

    with children.temp_dir("trace") as tmp:
        env = {**os.environ, _ISOLATED: "1", _RECORDED_OUT: args.out or "", _COMPILED_DIR: tmp}
        children.opcov_child(
            args.argv, what=f"factory {args.model}", process="the tracing process", timeout=args.timeout, env=env,
            out=os.path.join(tmp, f"{backends[-1]}.yaml"),
        )  # fmt: skip
        return {b: opset.OpSet(opset.load(os.path.join(tmp, f"{b}.yaml"))) for b in backends}


def _sizes(args):
    """The model sizes and inputs 'opcov trace' was given (--batch, --seq, --image-size, --audio-length, --set, --input)."""
    from opcov.sources.models import Sizes

    return Sizes(
        batch=args.batch,
        seq=args.seq,
        image=args.image_size,
        audio=args.audio_length,
        overrides=overrides(args.set),
        inputs=tuple(dict.fromkeys(args.input)),
    )


def overrides(pairs) -> dict:
    """--set KEY=VALUE pairs: each VALUE one YAML value (a scalar, or a flat list or flat mapping of
    scalars, as configs such as rope_scaling need) with no anchor or alias; a count or size below 0 is
    refused. One-line UsageErrors."""
    import math

    import yaml

    from opcov.store import data

    out = {}
    for pair in pairs:
        key, eq, value = pair.partition("=")
        if not eq or not key:
            raise UsageError(f"--set {pair!r}: expected KEY=VALUE, e.g. --set num_hidden_layers=4")
        if data.anchor_line(value) is not None:
            raise UsageError(f"--set {pair!r}: {data.ANCHOR_MESSAGE}")
        try:
            parsed = yaml.load(value, Loader=data._loader())
        except (yaml.YAMLError, RecursionError) as exc:
            why = " ".join(str(getattr(exc, "problem", None) or exc).split())
            raise UsageError(f"--set {pair!r}: VALUE is not a YAML value ({why})") from None
        if isinstance(parsed, dict):  # a config that is a mapping (rope_scaling={type: linear, factor: 2.0})
            if not all(isinstance(k, str) for k in parsed):
                raise UsageError(f"--set {pair!r}: a {{mapping}} VALUE's keys must be words")
            items = list(parsed.values())
        else:
            items = parsed if isinstance(parsed, list) else [parsed]
        if not all(
            v is None or isinstance(v, (str, int)) or (isinstance(v, float) and math.isfinite(v)) for v in items
        ):
            raise UsageError(
                f"--set {pair!r}: VALUE must be a number, word, true/false/null, or a [list] or {{mapping}} of them"
            )
        name = key.rsplit(".", 1)[-1]
        counts = name.startswith(_SIZE_WORDS) or name.endswith(_SIZE_ENDS)
        if counts and any(isinstance(v, (int, float)) and not isinstance(v, bool) and v < 0 for v in items):
            raise UsageError(f"--set {pair!r}: {name} counts or sizes something; it cannot be negative")
        out[key] = parsed
    return out


def _print_opset(path, doc) -> None:
    m, s = doc["model"], doc.get("summary", {})
    calls = s.get("calls", {})
    print(
        f"{path}: {m.get('name')} ({m.get('source', '?')}), {doc['mode']}, {doc['dtype']}, "
        f"target {doc['provenance'].get('target_device', '?')}, {doc['provenance'].get('tracing', '?')} tensors: "
        f"{s.get('distinct_ops', len(doc['ops']))} distinct ops; calls "
        + ", ".join(f"{k} {v}" for k, v in calls.items() if v)
    )


COMMANDS = {"trace": (add_parser, run)}
