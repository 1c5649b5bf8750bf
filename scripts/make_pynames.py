"""Build the Python-name index (Python callable -> aten overloads) for the installed torch.

Usage: python scripts/make_pynames.py [--out PATH]
Writes coverage/pynames-torch-<torch>.tsv by default (about 3 minutes on 2 cores). Needs torch and
expecttest; 'opcov ops NAME' and the site read the file without torch. See opcov.scan.pynames.
"""

import argparse
import os
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "src"))
os.environ.setdefault("TORCH_DEVICE_BACKEND_AUTOLOAD", "0")


def main() -> int:
    from opcov.activity import activity
    from opcov.scan import pynames
    from opcov.store import layout

    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out", help="file to write (default: coverage/pynames-torch-<torch>.tsv)")
    args = p.parse_args()
    t0 = time.monotonic()
    with activity("building the Python-name index") as say:
        names, header = pynames.build(progress=say)
    out = args.out or layout.pynames_path(header["torch"], os.path.join(ROOT, layout.DEFAULT_COVERAGE))
    pynames.write(out, names, header)
    print(f"wrote {out}: {len(names)} Python names in {time.monotonic() - t0:.0f}s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
