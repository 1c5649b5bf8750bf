"""The ``opcov`` command: parse, call, print. Exit codes: 0 ok, 1 a gate failed, 2 usage or data error.

One module per command or family of commands, each with its parser (``add_...(sub)``) and its run
(``run...(args)``) named in its ``COMMANDS``; the option groups several commands share are defined once in
``options``. torch is imported only by the commands that need the dispatcher (ops, scan), so
``backends``, ``lint`` and ``summary`` stay fast.
"""

from __future__ import annotations

import argparse
import errno
import os
import sys

from opcov import children
from opcov.cli import check, evidence, files, ops, probe, reports, scan, site, trace, zoo
from opcov.cli.common import one_line, say
from opcov.cli.options import Parser
from opcov.errors import EXIT_OK, EXIT_USAGE, OpcovError
from opcov.store import layout
from opcov.version import __version__

EPILOG = """examples:
  opcov check llama -b tpu -b cpu              can the zoo's llama run on tpu and on cpu? a verdict op by op
  opcov check my-model.yaml -b tpu --format junit -o opcov.xml
                                               a saved op set as a CI gate (exit 1 when it fails)
  opcov trace llama --mode training --dtype bfloat16 --out llama.yaml
                                               the ATen ops a model dispatches (no weights, no device)
  opcov trace hf:qwen3 --mode inference        any transformers model type, built offline from its config
  opcov ops F.layer_norm -b tpu -b cpu         does tpu support it? per op: forward, backward, evidence, dtypes

'opcov COMMAND --help' for each command's options."""

# every command, name -> (add its parser, run it), in the order --help lists them
_REGISTERED = {
    **check.COMMANDS,
    **trace.COMMANDS,
    **ops.COMMANDS,  # ops, backends
    **scan.COMMANDS,
    **files.COMMANDS,  # lint, summary
    **reports.COMMANDS,  # diff, gaps, compare
    **probe.COMMANDS,  # probe, merge
    **site.COMMANDS,
    **zoo.COMMANDS,
    **evidence.COMMANDS,  # plan, bundle, ingest, run, expect: evidence from where the hardware is
}
_COMMANDS = {name: run for name, (_add, run) in _REGISTERED.items()}


# read-only commands whose parser alone is built when one of them is run (``build_parser(only=...)``):
# building every command's parser took ~0.08 s of CPU here (a quarter of a check on a zoo model), most
# of it expect's choices, read from the backend records of every installed package's entry points
_ALONE = ("check", "gaps", "compare")


def build_parser(only: str | None = None) -> argparse.ArgumentParser:
    """The whole parser, or with ``only`` (one of _ALONE) the top level and that command's parser alone
    (parses that command's arguments as the whole one does)."""
    p = Parser(
        prog="opcov",
        description="Which ATen operators does a PyTorch backend support, and can my model run on it?",
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("--version", action="version", version=f"opcov {__version__}")
    sub = p.add_subparsers(dest="command", required=True, parser_class=Parser)
    for name, (add, _run) in _REGISTERED.items():
        if only is None or name == only:
            add(sub)
    return p


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
    try:
        given = sys.argv[1:] if argv is None else argv
        only = given[0] if given and given[0] in _ALONE else None
        parser = build_parser(only)  # reads the backend records (expect's choices): a bad records file is one line
    except OpcovError as exc:
        print(f"opcov: error: {one_line(str(exc))}", file=sys.stderr)
        return exc.exit_code
    args = parser.parse_args(argv)
    args.held = []
    args.argv = list(sys.argv[1:] if argv is None else argv)
    try:
        if hasattr(args, "coverage"):  # reading commands: check the folder before any work
            args.coverage = layout.read_coverage(args.coverage, say=say)
        code = _COMMANDS[args.command](args)
        if argv is None and args.held:
            sys.stdout.flush()
            sys.stderr.flush()
            os._exit(code)
        sys.stdout.flush()  # a full disk is an error here, not a message at the interpreter's exit
        return code
    except OpcovError as exc:
        print(f"opcov: error: {one_line(str(exc))}", file=sys.stderr)
        return exc.exit_code
    except KeyboardInterrupt as exc:
        print("opcov: interrupted", file=sys.stderr)
        return 143 if isinstance(exc, _Terminated) else 130
    except BrokenPipeError:
        return EXIT_OK
    except OSError as exc:  # standard output on a full disk or closed: what was read is safe, say why
        if exc.filename is not None:  # a file or folder no check caught: one line all the same
            print(f"opcov: error: {one_line(f'{exc.filename}: {exc.strerror or exc}')}", file=sys.stderr)
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
