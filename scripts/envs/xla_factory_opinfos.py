r"""Print a regular expression of the OpInfos whose samples name the device to make their result on (``full``,
``eye``, ``triu_indices``, the signal windows...): the factories. A probe before opcov set that argument to the
probed device made them on CPU and read them as passes, so scripts/envs/xla-data.sh's ``factories`` stage probes
them again and merges the cases in.

Run in the backend's Python (its torch lists the OpInfos).

Usage: python scripts/envs/xla_factory_opinfos.py   (prints '^(OPINFO|OPINFO...)$' of OpInfo ids, or nothing)
"""

from __future__ import annotations

import os
import re
import sys
import warnings

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))), "src"))


def factories() -> list[str]:
    """The ids of the OpInfos one of whose float32 or int64 samples has a ``device`` keyword."""
    import torch

    from opcov.sources.opinfo import opinfo_samples, opinfos

    out = []
    for oid, op in opinfos().items():
        for dtype in (torch.float32, torch.int64):
            try:
                if any("device" in s.kwargs for s in opinfo_samples(op, dtype, False)):
                    out.append(oid)
                    break
            except Exception:  # noqa: BLE001 - an OpInfo that makes no sample at this dtype here
                continue
    return out


def main(argv: list[str]) -> int:
    if argv:
        print(__doc__.strip().splitlines()[-1], file=sys.stderr)
        return 2
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        found = factories()
    if found:
        print("^(" + "|".join(re.escape(oid) for oid in found) + ")$")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
