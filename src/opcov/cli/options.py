"""The parser's pieces that several commands share: argument types, the parser class, and the option groups
defined once (--coverage, --mode, --format, --import, --path, --timeout)."""

from __future__ import annotations

import argparse
import math

from opcov import children
from opcov.cli.common import one_line
from opcov.errors import EXIT_USAGE

COVERAGE_HELP = "coverage data folder (default: ./coverage when it exists, else the data bundled with opcov)"
MODES = ("inference", "training", "serve")
PATHS = ("eager", "compile")
REGISTERS_HELP = "module that registers the backend's kernels (PrivateUse1 backends)"  # --import of scan, probe


def at_least_one(text: str) -> int:
    """A whole number of at least 1 (a count, a size): 0 or -1 is a usage error, not a silent default."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"{text!r} must be at least 1")
    return value


def seconds(text: str) -> float:
    """A positive, finite number of seconds."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number of seconds") from None
    if not (value > 0 and math.isfinite(value)):
        raise argparse.ArgumentTypeError(f"{text!r} must be a positive number of seconds")
    return value


def outcome_list(text: str) -> str:
    """A --fail-on value names at least one outcome ('' would quietly add nothing to the gate)."""
    if not any(w.strip() for w in text.split(",")):
        raise argparse.ArgumentTypeError("name at least one outcome, e.g. --fail-on fallback,unknown")
    return text


class Parser(argparse.ArgumentParser):
    def error(self, message):  # one line and exit 2, as for every usage error
        self.exit(EXIT_USAGE, f"opcov: error: {one_line(message)} (see 'opcov --help')\n")


def add_coverage(parser, dest: str = "coverage", help: str = COVERAGE_HELP) -> None:
    """--coverage: the coverage folder a reading command reads (None: layout.read_coverage decides)."""
    parser.add_argument("--coverage", dest=dest, default=None, help=help)


def add_into(parser) -> None:
    """--coverage for a command that writes into the coverage folder (args.into)."""
    parser.add_argument("--coverage", dest="into", default="coverage", help="coverage folder (default: coverage)")


def add_mode(parser, modes=MODES, **how) -> None:
    """--mode, one of ``modes`` (inference|training|serve); ``how``: action, default, help."""
    parser.add_argument("--mode", choices=modes, **how)


def add_format(parser, *choices: str, help: str | None = None) -> None:
    """--format, one of ``choices``, the first the default."""
    parser.add_argument("--format", choices=choices, default=choices[0], help=help)


def add_import(parser, help: str) -> None:
    """--import MODULE: a module that provides or registers a backend (args.import_module)."""
    parser.add_argument("--import", dest="import_module", metavar="MODULE", help=help)


def add_path(parser, help: str) -> None:
    """--path eager|compile, eager the default."""
    parser.add_argument("--path", choices=PATHS, default="eager", help=help)


def add_trace_timeout(parser, help: str) -> None:
    """--timeout for a model traced in a child process."""
    parser.add_argument("--timeout", type=seconds, default=children.TRACE_TIMEOUT_S, help=help)


def add_parallel(parser, parallel_help: str, world_help: str, world_default: int | None = None) -> None:
    """--parallel ddp|fsdp2|tp and --world-size N: a sharded training step (opcov.store.parallel)."""
    from opcov.store.parallel import STYLES

    parser.add_argument("--parallel", choices=STYLES, help=parallel_help)
    parser.add_argument("--world-size", type=at_least_one, default=world_default, metavar="N", help=world_help)


def add_compile_args(parser, what: str) -> None:
    """--path and --compile-backend (the torch.compile path: opcov.tracing.compiled)."""
    add_path(parser, f"eager (default): what eager mode dispatches; compile: the {what}")
    parser.add_argument(
        "--compile-backend",
        action="append",
        metavar="NAMES",
        help="with --path compile: whose decomposition table and partitioner, comma-separated: tpu, inductor "
        "(default), openxla, aot_eager (repeatable; one Dynamo run for all)",
    )
