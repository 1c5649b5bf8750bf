"""Write docs/cli.md, the command reference, from opcov's own parser: ``opcov --help`` and every
command's ``--help``, pasted as the CLI prints them (coverage.py keeps its command docs this way), so
the reference cannot drift from the CLI. tests/test_docs.py fails when docs/cli.md differs from what
this script writes now, and when a command line written in the docs or the README names a command or
flag the parser does not have.

    python scripts/make_cli_docs.py                  # rewrite docs/cli.md
    python scripts/make_cli_docs.py --check          # exit 1 when docs/cli.md is stale
    python scripts/make_cli_docs.py --mentions FILE  # list 'opcov CMD --flag' lines naming what does not exist
"""

from __future__ import annotations

import argparse
import os
import re
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "src"))
PAGE = os.path.join(ROOT, "docs", "cli.md")
WIDTH = 100  # fixed, so the page does not depend on the terminal it was made in

HEADER = """# Command reference

This page is generated from opcov's argument parser by `python scripts/make_cli_docs.py`; do not edit it
by hand. `tests/test_docs.py` fails when it differs from what the script writes now.
Exit codes for every command: 0 ok; 1 a gate failed (`check`, `diff --fail-on-regression`, `lint`
finding an error, `zoo trace` with a model that did not trace); 2 a usage or data error, told in one line.
"""


class _StableFormatter(argparse.HelpFormatter):
    """argparse's help layout at a fixed width, with one spelling of an option and its argument on
    every Python (3.13 shortened '-b BACKEND, --backend BACKEND' to '-b, --backend BACKEND')."""

    def __init__(self, prog):
        super().__init__(prog, width=WIDTH)

    def _format_action_invocation(self, action):
        if not action.option_strings:
            return super()._format_action_invocation(action)
        if action.nargs == 0:
            return ", ".join(action.option_strings)
        args = self._format_args(action, self._get_default_metavar_for_optional(action))
        return ", ".join(f"{option} {args}" for option in action.option_strings)


def _subcommands(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            return dict(action.choices)
    return {}


def _help(parser: argparse.ArgumentParser) -> str:
    # the parser's own formatter class decides raw or filled descriptions; ours fixes width and spelling
    parser.formatter_class = type("Formatter", (_StableFormatter, parser.formatter_class), {})
    if hasattr(parser, "color"):  # Python 3.14 colours help for a terminal
        parser.color = False
    return parser.format_help().rstrip() + "\n"


def render() -> str:
    """The whole page, as this script writes it."""
    from opcov.cli import build_parser

    parser = build_parser()
    parts = [HEADER, "## opcov\n", "```text\n" + _help(parser) + "```\n"]
    for name, sub in _subcommands(parser).items():
        parts += [f"## opcov {name}\n", "```text\n" + _help(sub) + "```\n"]
    return "\n".join(parts)


# --- command lines written in Markdown -------------------------------------------------------------

_FENCE = re.compile(r"^(```|~~~)")
_SPAN = re.compile(r"(`+)(.+?)\1", re.S)
# what may stand before 'opcov' in a command line: a prompt, VAR=value, python -m, a path; in a fenced
# block also a YAML key ('run: opcov site')
_SHELL = r"\$\s+|[A-Z_][A-Z0-9_]*=\S*\s+|python3?\s+-m\s+|timeout\s+\S+\s+|\S*/"
_PREFIX = {False: re.compile(rf"^(?:{_SHELL})*opcov\s"), True: re.compile(rf"^(?:{_SHELL}|[\w-]+:\s+)*opcov\s")}
_SPLIT = re.compile(r"\s(?:;|&&|\|\|)\s|;\s")
_TOKEN = re.compile(r"'[^']*'|\"[^\"]*\"|\S+")
_FLAG = re.compile(r"^(--[A-Za-z0-9][\w-]*|-[A-Za-z])$")
_ENDS = {"|", ">", ">>", "2>&1", "<"}


def _code_regions(text: str):
    """(line number, code, fenced) for each line of a fenced block (continued lines joined) and each
    inline code span elsewhere (a span may cross a line break). In a ``console`` block only the command
    lines (after a ``$`` prompt) are code: the rest is what they printed."""
    fenced = console = False
    pending, start = "", 0
    prose: list[str] = []
    prose_start = 1
    for n, line in enumerate(text.splitlines(), 1):
        if _FENCE.match(line.strip()):
            if not fenced:
                yield from _spans("\n".join(prose), prose_start)
            fenced, prose, prose_start = not fenced, [], n + 1
            console = fenced and line.strip().endswith("console")
            continue
        if not fenced:
            prose.append(line)
            continue
        if console and not pending and not line.startswith("$ "):
            continue
        if not pending:
            start = n
        if line.rstrip().endswith("\\"):
            pending += line.rstrip()[:-1] + " "
            continue
        yield start, pending + line, True
        pending = ""
    yield from _spans("\n".join(prose), prose_start)


def _spans(text: str, first_line: int):
    for span in _SPAN.finditer(text):
        code = span.group(2).replace("\\|", "|").replace("\n", " ")
        yield first_line + text.count("\n", 0, span.start()), code, False


def mentions(text: str):
    """(line, command words, flags) for each 'opcov ...' command line in the code of a Markdown text:
    a code span or a fenced line that starts with one (after a prompt, VAR=value, python -m or a path;
    in a fenced block also a YAML key), or a part of a fenced line after ';', '&&' or '||'."""
    for n, code, fenced in _code_regions(text):
        for part in _SPLIT.split(code) if fenced else [code]:
            m = _PREFIX[fenced].match(part.strip())
            if not m:
                continue
            words, flags = [], []
            for tok in _TOKEN.findall(part.strip()[m.end() :]):
                if (tok in _ENDS and (fenced or tok != "|")) or tok.startswith("#"):
                    break  # in prose, '|' separates alternatives: '--all | --sample N'
                if not flags and not words and re.fullmatch(r"[a-z][a-z-]*", tok):
                    words.append(tok)
                    continue
                if tok[0] in "'\"":
                    continue
                for piece in tok.split("|"):
                    piece = piece.strip("[](){},.:").split("=", 1)[0]
                    if _FLAG.match(piece):
                        flags.append(piece)
            yield n, words, flags


def problems(text: str, where: str) -> list[str]:
    """Each command or flag written in ``text`` (a Markdown file called ``where``) that the parser lacks."""
    from opcov.cli import build_parser

    top = build_parser()
    commands = _subcommands(top)
    out = []
    for n, words, flags in mentions(text):
        if words and words[0] not in commands:
            out.append(f"{where}:{n}: 'opcov {words[0]}': no such command")
            continue
        parser = commands[words[0]] if words else top
        name = f"opcov {words[0]}" if words else "opcov"
        for flag in flags:
            if flag not in parser._option_string_actions:
                out.append(f"{where}:{n}: '{name} {flag}': {name} has no option {flag}")
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--check", action="store_true", help="exit 1 when docs/cli.md differs from what would be written")
    ap.add_argument("--mentions", nargs="+", metavar="FILE", help="check the opcov command lines in these files")
    args = ap.parse_args()
    if args.mentions:
        found = []
        for path in args.mentions:
            with open(path, encoding="utf-8") as f:
                found += problems(f.read(), os.path.relpath(path))
        print("\n".join(found) or "every opcov command and flag named exists")
        return 1 if found else 0
    page = render()
    if args.check:
        with open(PAGE, encoding="utf-8") as f:
            if f.read() != page:
                print("docs/cli.md is stale: run python scripts/make_cli_docs.py", file=sys.stderr)
                return 1
        return 0
    with open(PAGE, "w", encoding="utf-8") as f:
        f.write(page)
    print(f"wrote {os.path.relpath(PAGE)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
