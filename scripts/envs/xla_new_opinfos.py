r"""Print a regular expression of the aten ops whose OpInfos a lazy backend's probed file holds no case of: the
ops outside core ATen and the curated zoo's op sets, which the first probe left out (``elu``, ``celu``,
``cdist``, ``embedding_bag``, ``grid_sampler_2d``, ``affine_grid_generator``, ``nll_loss2d``...). A model
beyond the zoo calls them, and without a case its call can only be judged from the dispatch table, so
scripts/envs/xla-data.sh's ``opinfos`` stage probes them and merges the cases in.

With ``--dtypes D,D``: the OpInfos that hold no case at any of those dtypes though CPU runs them at one (the
``opinfos`` stage probed float32 only: ``cummax`` of int64, which a model's integer path calls, had no case).

Run in the backend's Python (its torch lists the OpInfos).

Usage: python scripts/envs/xla_new_opinfos.py PROBED.yaml [--dtypes D,D]   (prints '^(OPINFO|OPINFO...)$' of
OpInfo ids, or nothing)
"""

from __future__ import annotations

import os
import re
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))), "src"))

from xla_pick_ops import groups  # noqa: E402

from opcov.store import data  # noqa: E402


def main(argv: list[str]) -> int:
    dtypes: set = set()
    if len(argv) == 3 and argv[1] == "--dtypes":
        dtypes = set(argv[2].split(","))
    elif len(argv) != 1:
        print(__doc__.strip().splitlines()[-2], file=sys.stderr)
        return 2
    from opcov.probe.cases import aten_names
    from opcov.sources.opinfo import opinfo_index, opinfos

    found = groups(data.load(argv[0]))
    if dtypes:
        probed = {source for source, dt in found if dt in dtypes}
        runs = opinfo_index()["ops"]
        new = sorted(oid for oid in opinfos() if oid not in probed and dtypes & set(runs.get(oid, {}).get("cpu", ())))
    else:
        probed = {source for source, _ in found}
        new = sorted(oid for oid in opinfos() if oid not in probed)
    for oid in new:
        print(f"{oid}: {', '.join(aten_names(opinfos()[oid]))}", file=sys.stderr)
    if new:  # the ids themselves: --ops is searched in OpInfo ids ('nn.functional.elu', whose aten_name it is too)
        print("^(" + "|".join(re.escape(oid) for oid in new) + ")$")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
