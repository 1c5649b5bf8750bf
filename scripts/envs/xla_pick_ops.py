r"""Print a regular expression of the ops whose probed OpInfo groups on a capped (lazy) backend would keep other
samples now that the cap keeps one per signature class, the common path first (opcov.probe.pick), than the
first ones it kept before. Their cells hold only what the first samples showed (all 0-d for amax, argmin and
the other reductions), so scripts/envs/xla-data.sh's ``picked`` stage probes those ops again and merges the
new cases into the cells (combined, not replaced: the old cases stay true of the arguments they had).

With ``--lost REGISTERED.yaml`` it also lists the ops whose registered cell says their backward is lost (the
backend overrides a CompositeImplicitAutograd op with no autograd kernel) and that the probe never ran: a
claim from the dispatch table alone, and PyTorch's autograd fallback keeps the gradient where the backend's
kernel calls differentiable ops (PyTorch/XLA's kl_div does, with a warning), so the probe checks it.

Run in the backend's Python (its torch makes the OpInfo samples the probe made).

Usage: python scripts/envs/xla_pick_ops.py PROBED.yaml [--lost REGISTERED.yaml] [N]   (N: samples kept per
group, default 3; prints '^(aten::a|aten::b)(\.OVERLOAD)?$', or nothing)
"""

from __future__ import annotations

import os
import re
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))), "src"))

from opcov.store import data  # noqa: E402

NOT_OPINFO = ("trace.", "schema.", "canary")


def groups(doc: dict) -> dict[tuple[str, str], set[str]]:
    """{(OpInfo name, dtype): ops whose cells at that dtype hold its cases} from a probed file's ``samples``
    (a case is filed under every op it dispatched, so a cell names OpInfos about other ops too)."""
    out: dict[tuple[str, str], set[str]] = {}
    for op, rec in doc["ops"].items():
        if not isinstance(rec, dict):
            continue
        for dtype, cell in rec.items():
            if not isinstance(cell, dict):
                continue
            for source in cell.get("samples") or ():
                if not str(source).startswith(NOT_OPINFO):
                    out.setdefault((str(source), dtype), set()).add(op)
    return out


def changed(source: str, dtype: str, n: int) -> tuple[str, ...]:
    """The aten ops the OpInfo is about (what ``opcov probe --ops`` selects it by) where the group keeps other
    samples under ``pick.keep`` than its first ``n``; else ()."""
    import torch

    from opcov.probe import pick
    from opcov.probe.cases import load_group

    try:
        loaded = load_group({"source": source, "dtype": dtype, "id": f"{source}|{dtype}", "backward": True})
    except Exception:  # noqa: BLE001 - an OpInfo gone or that cannot make samples here: nothing to redo
        return ()
    plain = [s for s in loaded.samples if s.tier is None]
    if len(plain) <= n:
        return ()
    kept = pick.keep(plain, n, loaded.fn, loaded.aten_of, torch)
    return tuple(loaded.aten) if [id(s) for s in kept] != [id(s) for s in plain[:n]] else ()


def unchecked_lost(probed: dict, registered: dict) -> set[str]:
    """Ops whose registered cell says ``bwd: lost`` and whose probed cell is a skip (no case ran)."""
    cells = probed["ops"]
    return {
        op
        for op, rec in registered["ops"].items()
        if isinstance(rec, dict) and rec.get("bwd") == "lost" and "skipped" in (cells.get(op) or {"skipped": 1})
    }


def main(argv: list[str]) -> int:
    lost = ""
    if "--lost" in argv:
        at = argv.index("--lost")
        lost = argv[at + 1] if at + 1 < len(argv) else ""
        argv = argv[:at] + argv[at + 2 :]
    if len(argv) not in (1, 2) or ("--lost" in sys.argv and not lost):
        print(__doc__.strip().splitlines()[-1], file=sys.stderr)
        return 2
    n = int(argv[1]) if len(argv) == 2 else 3
    probed = data.load(argv[0])
    ops: set[str] = unchecked_lost(probed, data.load(lost)) if lost else set()
    done: set[str] = set()
    for source, dtype in sorted(groups(probed)):
        if source in done:
            continue
        about = changed(source, dtype, n)
        if about:
            done.add(source)
            ops.update(about)
            print(f"{source} {dtype}: {', '.join(about)}", file=sys.stderr)
    if ops:  # every overload of each op's base: an OpInfo is about the base overload, and dispatches the others
        bases = sorted({op.split(".", 1)[0] for op in ops})
        print("^(" + "|".join(re.escape(b) for b in bases) + r")(\.[A-Za-z0-9_]+)?$")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
