"""The ``opcov`` command: parse, call, print. Exit codes: 0 ok, 1 a gate failed, 2 usage or data error.

torch is imported only by the commands that need the dispatcher (ops, scan), so
``backends``, ``lint`` and ``summary`` stay fast.
"""

from __future__ import annotations

import argparse
import errno
import json
import os
import re
import sys

from opcov import children, cli_evidence, vocab
from opcov.activity import activity
from opcov.errors import EXIT_GATE, EXIT_OK, EXIT_USAGE, OpcovError, UsageError
from opcov.store import layout, output
from opcov.version import __version__

DEFAULT_COVERAGE = layout.DEFAULT_COVERAGE
COVERAGE_HELP = "coverage data folder (default: ./coverage when it exists, else the data bundled with opcov)"


EPILOG = """examples:
  opcov check llama -b tpu -b cpu              can the zoo's llama run on tpu and on cpu? a verdict op by op
  opcov check my-model.yaml -b tpu --format junit -o opcov.xml
                                               a saved op set as a CI gate (exit 1 when it fails)
  opcov trace llama --mode training --dtype bfloat16 --out llama.yaml
                                               the ATen ops a model dispatches (no weights, no device)
  opcov trace hf:qwen3 --mode inference        any transformers model type, built offline from its config
  opcov ops F.layer_norm -b tpu -b cpu         does tpu support it? per op: forward, backward, evidence, dtypes

'opcov COMMAND --help' for each command's options."""


def _at_least_one(text: str) -> int:
    """A whole number of at least 1 (a count, a size): 0 or -1 is a usage error, not a silent default."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"{text!r} must be at least 1")
    return value


def _seconds(text: str) -> float:
    """A positive, finite number of seconds."""
    import math

    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number of seconds") from None
    if not (value > 0 and math.isfinite(value)):
        raise argparse.ArgumentTypeError(f"{text!r} must be a positive number of seconds")
    return value


def _outcome_list(text: str) -> str:
    """A --fail-on value names at least one outcome ('' would quietly add nothing to the gate)."""
    if not any(w.strip() for w in text.split(",")):
        raise argparse.ArgumentTypeError("name at least one outcome, e.g. --fail-on fallback,unknown")
    return text


_UNPRINTABLE = re.compile("[\x00-\x1f\x7f\u202a-\u202e\u2066-\u2069]")


def _one_line(text: str) -> str:
    """``text`` as one line that a terminal shows as it is: line breaks, other control characters and bidi
    overrides escaped ('\\n', '\\x1b'), so a name from data or the command line can neither break an error
    line in two nor drive the terminal."""
    return _UNPRINTABLE.sub(lambda m: m.group(0).encode("unicode_escape").decode("ascii"), text)


class _Parser(argparse.ArgumentParser):
    def error(self, message):  # one line and exit 2, as for every usage error
        self.exit(EXIT_USAGE, f"opcov: error: {_one_line(message)} (see 'opcov --help')\n")


def build_parser() -> argparse.ArgumentParser:
    p = _Parser(
        prog="opcov",
        description="Which ATen operators does a PyTorch backend support, and can my model run on it?",
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("--version", action="version", version=f"opcov {__version__}")
    sub = p.add_subparsers(dest="command", required=True, parser_class=_Parser)

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
    ck.add_argument(
        "--mode",
        choices=("inference", "training"),
        action="append",
        help="only this mode (default: every mode the op sets hold)",
    )
    ck.add_argument("--coverage", default=None, help=COVERAGE_HELP)
    ck.add_argument("--format", choices=("text", "json", "junit", "markdown", "github"), default="text")
    ck.add_argument("--output", "-o", help="write the report to this file instead of stdout")
    ck.add_argument(
        "--fail-on",
        action="append",
        default=[],
        type=_outcome_list,
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
    ck.add_argument("--dtype", help="dtype for tracing on the fly (saved op sets carry their own)")
    ck.add_argument(
        "--timeout",
        type=_seconds,
        default=children.TRACE_TIMEOUT_S,
        help="seconds tracing on the fly may take per mode, then its process is killed (default: %(default)s)",
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

    tr = sub.add_parser("trace", help="the ops a model dispatches (forward, backward, optimizer), no weights needed")
    tr.add_argument(
        "model",
        help="zoo name or transformers model type (llama, bert...), hf:TYPE, a config.json, "
        "package.module:function (returns (model, inputs)), nn:transformer|lstm|gru|convnet, "
        "or a saved op-set file",
    )
    tr.add_argument("--mode", choices=("inference", "training"), default="training")
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
    tr.add_argument("--batch", type=_at_least_one, default=2, help="input batch size (default: %(default)s)")
    tr.add_argument("--seq", type=_at_least_one, default=16, help="input sequence length (default: %(default)s)")
    tr.add_argument("--image-size", type=_at_least_one, help="input image size (default: the config's)")
    tr.add_argument(
        "--audio-length",
        type=_at_least_one,
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
    tr.add_argument(
        "--on",
        metavar="BACKEND",
        help="record the op set on BACKEND's own device, real values at the tiny size (cpu; xla from a Python "
        "with torch_xla): its own path, Python-level replacements and device-type branches included "
        "(default: the stand-in device; docs/variants.md)",
    )
    tr.add_argument("--out", help="op-set file to write (default: coverage/models/<model>/<mode>.yaml)")
    tr.add_argument(
        "--timeout",
        type=_seconds,
        default=children.TRACE_TIMEOUT_S,
        help="seconds a package.module:function factory's child process may take to build and trace, "
        "then it is killed (default: %(default)s)",
    )
    _add_compile_args(
        tr,
        "compiled op set: Dynamo's graphs and graph breaks, then the AOT forward and backward "
        "graphs after the compile backend's decompositions (coverage/models/<model>/compile/"
        "<backend>-<mode>.yaml; --out names the file when one backend is asked)",
    )

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
    ops.add_argument("--coverage", dest="coverage_dir", default=None, help=COVERAGE_HELP)
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
    ops.add_argument(
        "--import",
        dest="import_module",
        metavar="MODULE",
        help="import a backend module first, so its namespaces are listed",
    )
    ops.add_argument("--format", choices=("table", "json", "yaml"), default="table")

    be = sub.add_parser("backends", help="known backends and which are installed (imports none)")
    be.add_argument(
        "--import", dest="import_module", metavar="MODULE", help="also list a PrivateUse1 backend provided by MODULE"
    )
    be.add_argument("--format", choices=("table", "json"), default="table")

    sc = sub.add_parser("scan", help="registered coverage of every op for a backend (no device needed)")
    sc.add_argument("backend")
    sc.add_argument(
        "--import",
        dest="import_module",
        metavar="MODULE",
        help="module that registers the backend's kernels (PrivateUse1 backends)",
    )
    sc.add_argument("--out", help="coverage file to write (default: coverage/<backend>/registered-...yaml)")
    sc.add_argument(
        "--path",
        choices=("eager", "compile"),
        default="eager",
        help="compile: what the backend's torch.compile compiler accepts (Inductor's lowerings and fallbacks for "
        "cpu and cuda, TorchTPU's eager kernels on functional ops for tpu), built on the eager registered data "
        "(coverage/<backend>/compile/)",
    )
    sc.add_argument("--coverage", dest="coverage_dir", default=None, help="with --path compile: " + COVERAGE_HELP)
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

    li = sub.add_parser("lint", help="validate coverage files; every problem with file:line")
    li.add_argument("paths", nargs="*", help=f"files or folders (default: {DEFAULT_COVERAGE}/)")
    li.add_argument(
        "--no-catalog",
        action="store_true",
        help="do not check op names against this torch's catalogue (no torch import)",
    )
    li.add_argument(
        "--notes",
        action="store_true",
        help="also list the informational notes: ops unknown to this torch in files made with another build",
    )

    su = sub.add_parser("summary", help="per backend, how many ops fall on each path (from coverage files)")
    su.add_argument(
        "paths",
        nargs="*",
        metavar="BACKEND|PATH",
        help=f"backend names (their files in the coverage folder), files or folders (default: {DEFAULT_COVERAGE}/)",
    )
    su.add_argument("--coverage", dest="coverage_dir", default=None, help=COVERAGE_HELP)
    su.add_argument("--format", choices=("table", "json"), default="table")

    df = sub.add_parser("diff", help="what changed between two coverage snapshots of a backend")
    df.add_argument("old")
    df.add_argument("new")
    df.add_argument("--fail-on-regression", action="store_true", help="exit 1 on any real regression")
    df.add_argument("--format", choices=("text", "json", "markdown"), default="text")

    gp = sub.add_parser("gaps", help="a backend's failing or missing ops, ranked by zoo models blocked")
    gp.add_argument("backend")
    gp.add_argument("--coverage", default=None, help=COVERAGE_HELP)
    gp.add_argument("--mode", choices=("inference", "training"), action="append")
    gp.add_argument("--top", type=_at_least_one, default=30, help="show this many ops (default: %(default)s)")
    gp.add_argument("--format", choices=("text", "json"), default="text")
    gp.add_argument(
        "--path",
        choices=("eager", "compile"),
        default="eager",
        help="compile: what blocks the zoo's compiled op sets on the backend's compile coverage, graph breaks too",
    )

    cp = sub.add_parser(
        "compare",
        help="what backend A lacks that B has, and the reverse, ranked by zoo "
        "models affected (from coverage data, no torch import)",
    )
    cp.add_argument("a", help="a backend with data under the coverage folder")
    cp.add_argument("b", help="the backend to compare it with")
    cp.add_argument(
        "--models",
        default="zoo",
        metavar="zoo|NAMES",
        help="judge on every op set under coverage/models/ ('zoo', the default) or on these comma-separated models",
    )
    cp.add_argument("--mode", choices=("inference", "training"), action="append")
    cp.add_argument("--coverage", default=None, help=COVERAGE_HELP)
    cp.add_argument("--format", choices=("text", "json"), default="text")

    pr = sub.add_parser("probe", help="run OpInfo samples on a backend against a CPU reference (probed coverage)")
    pr.add_argument("backend")
    pr.add_argument(
        "--import",
        dest="import_module",
        metavar="MODULE",
        help="module that registers the backend's kernels (PrivateUse1 backends)",
    )
    pr.add_argument(
        "--ops",
        metavar="PATTERN",
        help="regular expression searched in OpInfo names ('mul', 'nn.functional.relu') and 'aten::<name>'",
    )
    pr.add_argument("--core", action="store_true", help="only OpInfos of core ATen ops")
    pr.add_argument("--dtypes", help="comma-separated (default: float32,bfloat16,float16,float64,int64,bool)")
    pr.add_argument("--directions", help="forward,backward (default: both)")
    pr.add_argument("--jobs", type=_at_least_one, default=1, help="worker processes (devices) (default: 1)")
    pr.add_argument("--timeout", type=_seconds, default=60.0, help="seconds per case phase (default: 60)")
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
        type=_seconds,
        metavar="SECONDS",
        help="start no group after this long (with --resume: this run's time); the file names the groups not run",
    )
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
        "--no-schema",
        dest="schema",
        action="store_false",
        help="no cases made from op schemas (default: one per functional aten overload at float32, "
        "--ops searched in its overload name 'aten::add.Scalar')",
    )
    pr.add_argument(
        "--manifest",
        metavar="FILE",
        help="the backend's manifest (ops and dtypes it claims, ops it excludes; docs/DATA.md): cells "
        "counted as claimed or not, excluded ops skipped as such",
    )
    pr.add_argument("--out", help="file to write (default: coverage/<backend>/probed-...yaml)")
    pr.add_argument(
        "--path",
        choices=("eager", "compile"),
        default="eager",
        help="compile (cpu, xla): compile OpInfo samples with Inductor on this CPU (cpu) or openxla on PyTorch/XLA "
        "(xla, in a Python with torch_xla) and compare with eager CPU, recording compile errors, graph breaks, CPU "
        "fallbacks and value mismatches (coverage/<backend>/compile/probed-...yaml; --core, --ops, --dtypes, --jobs, "
        "--timeout, --resume, --out apply)",
    )
    pr.add_argument(
        "--samples", type=int, default=2, help="with --path compile: samples per OpInfo and dtype (default: 2)"
    )
    pr.add_argument(
        "--time-limit", type=float, default=None, help="with --path compile: start no group after this many seconds"
    )

    mg = sub.add_parser("merge", help="combine probed files (shards or runs) of one backend and torch version")
    mg.add_argument("files", nargs="+")
    mg.add_argument("--out", required=True, help="file to write")
    mg.add_argument(
        "--replace",
        action="store_true",
        help="a cell (op and dtype) a later file probed replaces the earlier files' cell instead of being "
        "combined with it (a re-probe of some ops over a whole probe)",
    )

    st = sub.add_parser("site", help="render the static coverage website from coverage/ data (no torch import)")
    st.add_argument("--coverage", default=None, help=COVERAGE_HELP)
    st.add_argument("--out", default="site", help="output folder (default: %(default)s)")

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
    zo.add_argument("--jobs", type=_at_least_one, default=None, help="worker processes for --all (default: 1)")
    zo.add_argument(
        "--shard",
        help="with --all: trace only shard I/N of the architectures (a CI matrix; join the "
        "tables with 'opcov zoo merge')",
    )
    zo.add_argument("--resume", action="store_true", help="continue an interrupted --all run from its journal")
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
        type=_seconds,
        default=300.0,
        help="seconds one model may take in one mode with --all (default: %(default)s)",
    )
    zo.add_argument(
        "--table",
        help="the outcome table of --all, --sample or --only in workers (default: "
        "coverage/zoo/outcomes.tsv; a table made by another selection is never replaced); "
        "merge: the table to write",
    )
    zo.add_argument(
        "--mode", choices=("inference", "training"), action="append", help="only this mode (repeatable; default: both)"
    )
    zo.add_argument(
        "--root", default=layout.models_dir(), help="folder of <model>/<mode>.yaml files (default: %(default)s)"
    )
    _add_compile_args(zo, "compiled op sets of the curated zoo into <root>/<model>/compile/<backend>-<mode>.yaml")
    cli_evidence.add_parsers(sub)  # plan, bundle, ingest, run: evidence from where the hardware is
    return p


def _add_compile_args(parser, what: str) -> None:
    """--path and --compile-backend (the torch.compile path: opcov.tracing.compiled)."""
    parser.add_argument(
        "--path",
        choices=("eager", "compile"),
        default="eager",
        help=f"eager (default): what eager mode dispatches; compile: the {what}",
    )
    parser.add_argument(
        "--compile-backend",
        action="append",
        metavar="NAMES",
        help="with --path compile: whose decomposition table and partitioner, comma-separated: tpu, inductor "
        "(default), openxla, aot_eager (repeatable; one Dynamo run for all)",
    )


class _Terminated(KeyboardInterrupt):
    """SIGTERM, raised where the program is, as SIGINT's KeyboardInterrupt is: its workers and forked
    helpers are stopped and its temporary files removed on the way out (the default action ends the
    process at once, leaving them)."""


def _terminated(signum, frame):
    raise _Terminated()


def main(argv=None) -> int:
    """Run one command. As the ``opcov`` program (``argv`` None), a command that leaves a large build in
    ``args.held`` (site) ends the process once its output is flushed, as mypy does, leaving its objects
    to the exit rather than freeing them one by one; called from Python, it returns."""
    if sys.stdout is None:  # started with standard output closed: writing it is an error, said once
        sys.stdout = _ClosedStream()
    if argv is None:  # as a program: a child of another opcov ends with it; SIGTERM cleans up as SIGINT does
        children.from_environment()
        children.sweep()  # the temporary folders of opcov processes killed outright
        import signal

        signal.signal(signal.SIGTERM, _terminated)
    args = build_parser().parse_args(argv)
    args.held = []
    args.argv = list(sys.argv[1:] if argv is None else argv)
    try:
        if hasattr(args, "coverage"):  # reading commands: check the folder before any work
            args.coverage = layout.read_coverage(args.coverage, say=lambda line: print(line, file=sys.stderr))
        code = _COMMANDS[args.command](args)
        if argv is None and args.held:
            sys.stdout.flush()
            sys.stderr.flush()
            os._exit(code)
        sys.stdout.flush()  # a full disk is an error here, not a message at the interpreter's exit
        return code
    except OpcovError as exc:
        print(f"opcov: error: {_one_line(str(exc))}", file=sys.stderr)
        return exc.exit_code
    except KeyboardInterrupt as exc:
        print("opcov: interrupted", file=sys.stderr)
        return 143 if isinstance(exc, _Terminated) else 130
    except BrokenPipeError:
        return EXIT_OK
    except OSError as exc:  # standard output on a full disk or closed: what was read is safe, say why
        if exc.filename is not None:  # a file or folder no check caught: one line all the same
            print(f"opcov: error: {_one_line(f'{exc.filename}: {exc.strerror or exc}')}", file=sys.stderr)
            return EXIT_USAGE
        _drop_stdout()
        print(f"opcov: error: cannot write the output: {exc.strerror or exc}", file=sys.stderr)
        return EXIT_USAGE


class _ClosedStream:
    """Standard output when the process started without one."""

    def write(self, _text):
        raise OSError(errno.EBADF, "standard output is closed")

    def flush(self):
        pass


def _drop_stdout() -> None:
    """Nothing more goes to a standard output that failed (the exit's flush would fail again)."""
    try:
        sys.stdout = open(os.devnull, "w")  # noqa: SIM115 - held until exit
    except OSError:
        pass


# ---------------------------------------------------------------- commands


def cmd_ops(args) -> int:
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
        coverage = layout.read_coverage(args.coverage_dir, say=_say)
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

    catalog, path = support.data_catalog(layout.read_coverage(args.coverage_dir, say=_say))
    return catalog, (
        f"torch is not installed: op names and tags from {path} (schemas, composite kinds and "
        f"structured delegates need torch: {install_command()})"
    )


def _say(line: str) -> None:
    print(line, file=sys.stderr)


def _next_check(opset_file: str, device: str) -> str:
    """The command to run next on a traced op set: check it on the target device's backend when it
    has data, else on every accelerator that does (cpu and meta are no target to ask about)."""
    try:
        have = layout.backends_with_data(layout.read_coverage(None))
    except UsageError:
        have = []
    targets = [device] if device in have else [b for b in have if b not in ("cpu", "meta")] or ["BACKEND"]
    return f"next: opcov check {opset_file} " + " ".join(f"-b {b}" for b in targets)


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
    from opcov.backends import get_backend, load
    from opcov.scan.registered import command_line, scan
    from opcov.store import data

    if args.no_test_lists and not args.declared:
        raise UsageError("--no-test-lists goes with --declared")
    if args.path == "compile":
        from opcov.scan import compiled

        coverage_dir = layout.read_coverage(args.coverage_dir, say=_say)
        path, doc = compiled.scan(args.backend, coverage_dir, command=command_line())
        out = args.out or path
        output.check_output(out, kind=output.COVERAGE)
        data.save(doc, out)
        s = doc["summary"]["res"]
        print(f"wrote {out}: {doc['summary']['ops']} ops, " + ", ".join(f"{k} {v}" for k, v in s.items()))
        return EXIT_OK
    evidence = "declared" if args.declared else "registered"
    if args.out:
        output.check_output(args.out, kind=output.COVERAGE, evidence=evidence)
    backend = get_backend(args.backend, args.import_module)
    if args.declared:  # the key's build is not loaded (it cannot be): torch's sources are read instead
        from opcov.scan import declared
        from opcov.torchenv import import_torch

        doc = declared.scan(
            backend, import_torch(), command=command_line(), reach=not args.no_reach, test_lists=not args.no_test_lists
        )
    else:
        doc = scan(backend, load(backend), command=command_line(), reach=not args.no_reach)
    out = args.out or layout.scan_path(doc)
    output.check_output(out, kind=output.COVERAGE, evidence=doc["evidence"])
    data.save(doc, out)
    formats.print_summary([(out, doc)])
    print(f"wrote {out}")
    return EXIT_OK


def cmd_lint(args) -> int:
    from opcov.store.lint import lint_paths

    files, problems = lint_paths(args.paths, check_catalog=not args.no_catalog)
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


def cmd_summary(args) -> int:
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
        coverage = layout.read_coverage(coverage_dir, say=_say)
        found = [f for kind in layout.EVIDENCE for f in layout.snapshots(coverage, arg)[kind]]
        if not found:
            raise suggest.no_backend_data(arg, coverage)
        files.extend(sorted(found))
    return files


def cmd_check(args) -> int:
    from opcov.verdict import check, judge, reports

    paths = [p.strip() for p in args.path.split(",") if p.strip()]
    if not paths or set(paths) - {"eager", "compile"}:
        raise UsageError(f"--path {args.path!r}: expected eager, compile or eager,compile")
    if "compile" in paths:
        return _check_compiled(args, with_eager="eager" in paths)

    if args.output:
        output.check_output(args.output, kind=output.REPORT, inputs=[args.model, *args.manifest], flag="--output")
    outcomes = judge.fail_on(args.fail_on + ([",".join(judge.STRICT)] if args.strict else []))  # before any work
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


def _check_compiled(args, with_eager: bool) -> int:
    """'opcov check MODEL -b B --path compile' (and eager,compile): verdict.compiled, after the eager check."""
    from opcov.verdict import compiled

    if args.format not in ("text", "json") or args.manifest or args.require or args.fail_on or args.strict:
        raise UsageError("--path compile reports as text or json, with no --manifest, --require, --fail-on or --strict")
    code = EXIT_OK
    if with_eager:
        eager = argparse.Namespace(**{**vars(args), "path": "eager", "output": None})
        code = cmd_check(eager)
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


def cmd_diff(args) -> int:
    from opcov.verdict import diff

    result = diff.diff_files(args.old, args.new)
    sys.stdout.write(diff.render(result, args.format))
    return EXIT_GATE if args.fail_on_regression and result.regressions else EXIT_OK


def cmd_gaps(args) -> int:
    from opcov import suggest
    from opcov.verdict import gaps

    suggest.check_backends([args.backend], args.coverage)  # did you mean, before judging any model
    if args.path == "compile":
        from opcov.verdict import compiled

        result = compiled.gaps(args.backend, args.coverage, args.mode)
        sys.stdout.write(compiled.render_gaps(result, args.top, args.format))
        return EXIT_OK
    ranked = gaps.rank(args.backend, args.coverage, args.mode)
    sys.stdout.write(gaps.render(ranked, args.backend, args.top, args.format))
    return EXIT_OK


def cmd_compare(args) -> int:
    from opcov.verdict import compare

    result = compare.compare(args.a, args.b, args.coverage, models=compare.parse_models(args.models), modes=args.mode)
    sys.stdout.write(compare.render(result, args.format))
    return EXIT_OK


def cmd_site(args) -> int:
    from opcov.site.render import render_site

    with activity(f"rendering {args.out}/ from {args.coverage}/"):
        stats = render_site(args.coverage, args.out, hold=args.held)
    print(
        f"{args.out}: {stats['files']} files ({stats['ops']} ops, {stats['backends']} backends, "
        f"{stats['models']} models), {stats['written']} written, {stats['removed']} removed; "
        f"{stats['catalog_note']}"
    )
    return EXIT_OK


def cmd_probe(args) -> int:
    from opcov import formats
    from opcov.backends import get_backend
    from opcov.probe import KNOWN_DTYPES
    from opcov.probe.cases import parse_directions, parse_dtypes, parse_shard, parse_tiers, parse_traces
    from opcov.probe.runner import probe
    from opcov.scan.registered import command_line

    if args.path == "compile":
        return _probe_compiled(args)
    dtypes = parse_dtypes(args.dtypes, KNOWN_DTYPES)
    directions = parse_directions(args.directions)
    shard = parse_shard(args.shard)
    traces: tuple = parse_traces(args.traces)
    if args.opsets:
        from opcov.probe.replay import opset_targets

        traces += tuple(opset_targets([p for text in args.opsets for p in text.split(",") if p]))
    tiers = parse_tiers(args.tiers)
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
    from opcov.probe.manifest import load as load_manifest

    manifest = load_manifest(args.manifest, backend.name) if args.manifest else None
    out = args.out or layout.probe_path(backend, shard)
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
        manifest=manifest,
        all_samples=args.all_samples,
        times=args.times,
        max_time=args.max_time,
    )
    formats.print_summary([(out, doc)])
    print(
        f"wrote {out}: {figures['cases_run']} cases run in {figures['wall_s']:.1f}s "
        f"({figures['groups']} groups, {figures['restarts']} worker restarts)"
    )
    return EXIT_OK


def _probe_compiled(args) -> int:
    """'opcov probe cpu|xla --path compile': probe.compiled (Inductor on CPU, openxla on xla; against eager CPU)."""
    from opcov.probe import KNOWN_DTYPES
    from opcov.probe import compiled as cprobe
    from opcov.probe.cases import parse_dtypes
    from opcov.scan.registered import command_line
    from opcov.store import data

    if args.backend not in cprobe.TARGETS:
        raise UsageError(
            f"probe --path compile runs Inductor on this CPU (cpu) or openxla on PyTorch/XLA (xla), not {args.backend!r}"
        )
    if args.jobs < 1 or args.samples < 1:
        raise UsageError("--jobs and --samples must be at least 1")
    dtypes = parse_dtypes(args.dtypes, KNOWN_DTYPES) if args.dtypes else ("float32",)
    import torch

    package = None
    if args.backend == "xla":
        try:
            import torch_xla
        except ImportError:
            raise UsageError(
                "probe xla --path compile needs torch_xla in this Python (scripts/envs/xla.sh makes one)"
            ) from None
        package = ("torch_xla", torch_xla.__version__)
    out = args.out or os.path.join(
        layout.compile_coverage_dir(args.backend),
        layout.snapshot_name("probed", torch.__version__, *(package or (None, None))),
    )
    output.check_writable_file(out)
    if os.path.exists(cprobe.journal_path(out)) and not args.resume:
        raise UsageError(f"{cprobe.journal_path(out)} exists from an interrupted probe; add --resume, or delete it")
    doc, figures = cprobe.probe(
        out=out,
        core=args.core,
        pattern=args.ops,
        dtypes=dtypes,
        samples=args.samples,
        jobs=args.jobs,
        timeout=args.timeout,
        resume=args.resume,
        command=command_line(),
        limit=args.time_limit,
        backend=args.backend,
    )
    data.save(doc, out)
    print(
        f"wrote {out}: {figures['cases_run']} cases in {figures['groups']} groups, {figures['wall_s']:.0f} s this run "
        f"({figures['worker_cpu_s']:.0f} CPU s in workers on {figures['groups_run']} groups); "
        + ", ".join(f"{k} {v}" for k, v in doc["summary"]["cells"].items())
        + (f"; {figures['not_started']} groups not started (--resume goes on)" if figures["not_started"] else "")
    )
    return EXIT_OK


def cmd_merge(args) -> int:
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


def cmd_trace(args) -> int:
    from opcov.tracing.spec import is_saved, trace_spec

    if args.path == "compile":
        return _trace_compiled(args)
    if args.compile_backend:
        raise UsageError("--compile-backend goes with --path compile")

    sizes = _sizes(args)
    if args.out:
        output.check_output(args.out, kind=output.OPSET, inputs=[args.model])
    if args.on == "":  # '--on=': not the same as no --on
        raise UsageError("--on names the backend to record on, e.g. --on xla")
    if args.on:
        return _trace_on(args, sizes)
    if _is_factory(args.model) and not os.environ.get(_ISOLATED):
        with activity(f"tracing {args.model} ({args.mode}) in a child process"):
            result = _trace_in_child(args)
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
        output.check_output(out, kind=output.OPSET, inputs=[args.model])
    if out:
        result.save(out)
    _print_opset(shown, result.doc)
    if out:
        print(f"wrote {out}")
    print(_next_check(out or shown, args.device))
    return EXIT_OK


def _trace_on(args, sizes) -> int:
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
    out = out or layout.ondevice_opset_path(result.doc["model"]["name"].replace("/", "_"), args.on, args.mode)
    output.check_output(out, kind=output.OPSET, inputs=[args.model])
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


def _trace_in_child(args):
    """The op set of a user's factory, traced by 'opcov trace' in a child process (children.opcov_child):
    a factory that crashes, aborts, exits, hangs or closes a stream ends the child and all it started,
    never this process, and is one line naming it. The child writes a temporary op set, read back here."""
    from opcov.store import opset

    with children.temp_dir("trace") as tmp:
        out = os.path.join(tmp, "opset.yaml")
        env = {**os.environ, _ISOLATED: "1", _RECORDED_OUT: args.out or ""}
        children.opcov_child(
            children.with_option(args.argv, "--out", out),
            what=f"factory {args.model}",
            process="the tracing process",
            timeout=args.timeout,
            env=env,
            out=out,
        )
        return opset.OpSet(opset.load(out))


def _trace_compiled(args) -> int:
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
    with activity(f"compiling {args.model} ({args.mode}) for {', '.join(backends)}"):
        results = compiled.trace_compiled_spec(
            args.model, backends=backends, mode=args.mode, dtype=args.dtype, real=args.real, sizes=sizes, out=args.out
        )
    failed = False
    for backend, result in results.items():
        doc = result.doc
        out = args.out or layout.compiled_opset_path(doc["model"]["name"].replace("/", "_"), backend, args.mode)
        if not args.out:
            output.check_output(out, kind=output.OPSET)
        result.save(out)
        _print_opset(out, doc)
        print(compiled.describe(doc))
        print(f"wrote {out}")
        failed = failed or doc["compile"]["outcome"] != "compiled"
    return EXIT_GATE if failed else EXIT_OK


def _sizes(args):
    """The model sizes and inputs 'opcov trace' was given (--batch, --seq, --image-size, --audio-length, --set, --input)."""
    from opcov.tracing.models import Sizes

    return Sizes(
        batch=args.batch,
        seq=args.seq,
        image=args.image_size,
        audio=args.audio_length,
        overrides=_overrides(args.set),
        inputs=tuple(dict.fromkeys(args.input)),
    )


def _overrides(pairs) -> dict:
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


def cmd_zoo(args) -> int:
    from opcov.tracing import zoo
    from opcov.tracing.spec import trace_zoo

    if args.action == "merge":
        return _zoo_merge(args)
    if args.path == "compile" or args.compile_backend:
        return _zoo_compiled(args)
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
        return _zoo_all(args, modes)
    entries = zoo.select(args.only)
    if args.action == "list":
        for e in entries:
            print(f"{e.name:16} {e.spec:16} {e.dtype:9} {'real' if e.real else 'fake'}  " + "; ".join(e.notes))
        return EXIT_OK
    for e in entries:  # every file it will write, before the first (slow) trace
        for mode in modes:
            output.check_output(zoo.path_for(e.name, mode, args.root), kind=output.OPSET)
    failures = trace_zoo(entries, modes, root=args.root)
    for name, mode, why in failures:
        print(f"opcov: zoo: {name} {mode} failed: {why}", file=sys.stderr)
    return EXIT_GATE if failures else EXIT_OK


def _zoo_compiled(args) -> int:
    """'opcov zoo trace --path compile': the curated zoo's compiled op sets (tracing.compiled)."""
    from opcov.tracing import compiled, zoo

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
                output.check_writable_file(layout.compiled_opset_path(e.name, b, mode, args.root))
    failures = compiled.trace_zoo(entries, modes, backends, root=args.root)
    for name, mode, why in failures:
        print(f"opcov: zoo: {name} {mode} failed: {why}", file=sys.stderr)
    return EXIT_GATE if failures else EXIT_OK


def _zoo_all(args, modes) -> int:
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


def _zoo_merge(args) -> int:
    from opcov.tracing import zoorun

    if not args.tables or not args.table:
        raise UsageError("zoo merge TABLE... --table OUT: the shard tables to join and the table to write")
    output.check_output(args.table, kind=output.TABLE, inputs=args.tables, flag="--table")
    output.write_atomic(args.table, zoorun.merge_tables(args.tables))
    print(f"wrote {args.table} from {len(args.tables)} table(s)")
    return EXIT_OK


_COMMANDS = {
    "site": cmd_site,
    "check": cmd_check,
    "diff": cmd_diff,
    "gaps": cmd_gaps,
    "compare": cmd_compare,
    "ops": cmd_ops,
    "backends": cmd_backends,
    "scan": cmd_scan,
    "lint": cmd_lint,
    "summary": cmd_summary,
    "probe": cmd_probe,
    "merge": cmd_merge,
    "trace": cmd_trace,
    "zoo": cmd_zoo,
}
_COMMANDS.update(cli_evidence.COMMANDS)  # plan, bundle, ingest, run
