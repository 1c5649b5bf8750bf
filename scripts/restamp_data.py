#!/usr/bin/env python
"""Give data files written before opcov stamped its files their integrity line, data unchanged.

Each file (coverage file or op set; a folder stands for the YAML files under it) is loaded with
full validation, written again through opcov's own writer (``data.dumps`` / ``opset.dumps``, which
put ``integrity: {ops: N, sha256: ...}`` first), and the new file is loaded back: only when it
reads exactly as the old one does it replace the old one (atomically); otherwise the old file is
left as it was. A file that is already stamped and intact comes out byte-identical. A file that
fails to load (including one whose integrity line does not match: cut short or edited) is left
alone and reported; regenerate it instead.

    .venv/bin/python scripts/restamp_data.py coverage/cpu/registered-torch-2.13.0+cpu.yaml coverage/models

Prints one line per file (whether the text after the new line is byte-identical to the old file,
as it is for a file the current writer made); exit code 1 when any file could not be restamped.
"""

from __future__ import annotations

import argparse
import os
import sys

from opcov.errors import DataError, UsageError
from opcov.store import data, layout, opset, output


def restamp(path: str) -> str:
    """Restamp one file; what was done, in words. DataError when it does not load, or would not load
    back the same."""
    doc, problem = data.parse(path)
    if problem:
        raise DataError(str(problem))
    fmt = opset if opset.is_opset(doc) else data
    old = fmt.load(path)
    text = fmt.dumps(old)
    before, _ = data.read_text(path)
    if text == before:
        return "already stamped; unchanged"
    tmp = f"{path}.restamp-{os.getpid()}"
    try:
        output.write_atomic(tmp, text)
        if fmt.load(tmp) != old:
            raise DataError(f"{path}: written again, it would not read as before; left as it was")
        os.replace(tmp, path)
    finally:
        if os.path.lexists(tmp):
            os.remove(tmp)
    rest = text.split("\n", 1)[1]
    if data.stamp_of(before):
        before = before.split("\n", 1)[1]
    if rest == before:
        return "stamped; the rest byte-identical"
    differ = sum(a != b for a, b in zip(rest.splitlines(), before.splitlines()))
    differ += abs(len(rest.splitlines()) - len(before.splitlines()))
    return f"stamped; the writer reformatted {differ} line(s), the data reads the same"


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("paths", nargs="+", help="data files, or folders of them")
    args = parser.parse_args(argv)
    failed = 0
    try:
        files = layout.coverage_files(args.paths, models=True)
    except UsageError as exc:
        print(f"restamp_data: error: {exc}", file=sys.stderr)
        return 2
    for path in files:
        try:
            print(f"{path}: {restamp(path)}")
        except (DataError, UsageError) as exc:
            failed += 1
            print(f"restamp_data: error: {exc}", file=sys.stderr)
    print(f"{len(files) - failed} of {len(files)} file(s) restamped or already stamped")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
