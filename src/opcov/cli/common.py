"""What the commands share beyond their options: one-line messages, and a command run again in a child."""

from __future__ import annotations

import os
import re
import sys

from opcov import children

_UNPRINTABLE = re.compile("[\x00-\x1f\x7f\u202a-\u202e\u2066-\u2069]")


def one_line(text: str) -> str:
    """``text`` as one line that a terminal shows as it is: line breaks, other control characters and bidi
    overrides escaped ('\\n', '\\x1b'), so a name from data or the command line can neither break an error
    line in two nor drive the terminal."""
    return _UNPRINTABLE.sub(lambda m: m.group(0).encode("unicode_escape").decode("ascii"), text)


def say(line: str) -> None:
    print(line, file=sys.stderr)


def in_child(args, name: str, load, *, what: str, process: str, env: dict):
    """What this command writes when run again in a child process (children.opcov_child), with ``env``: a
    model or factory that crashes, aborts, exits, hangs or closes a stream ends that child and all it started,
    never this process, and is one line naming it. The child writes ``name`` in a temporary folder (its
    --out), read back here by ``load``."""
    with children.temp_dir(args.command) as tmp:
        out = os.path.join(tmp, name)
        children.opcov_child(
            children.with_option(args.argv, "--out", out),
            what=what,
            process=process,
            timeout=args.timeout,
            env=env,
            out=out,
        )
        return load(out)
