"""Trace-vs-eager recall over the zoo (issue 17, part 3): each architecture's op set (as the zoo
made it: coverage/models) against the same architecture run eager with real values, per phase.

Usage: python scripts/zoo_recall.py (--sample N [--seed S] | --only a,b | --all) [--jobs N]
                                    [--traced coverage/models] [--workdir DIR] [--out coverage/zoo/recall.tsv]
Step 1: ``opcov zoo trace ... --real``: every architecture eager on the computing stand-in
(real values, composites on an accelerator's path, every dispatched op recorded), at narrow widths.
Step 2: ``opcov.tracing.recall.compare`` per architecture, mode and phase against the op set under
``--traced``; writes the table (one row per architecture, mode and phase: the ops the op set missed,
those its fake part alone missed, those only it has) and prints the share of architecture-modes at
recall >= 0.95 per phase. Op sets made with real values (fake tensors cannot trace the model) and
architectures either side could not trace are counted apart, not compared. The op sets' fake traces
are at the zoo's tiny widths, the eager runs at narrower ones: an op that only one width reaches
shows as a difference. Outside CI: minutes per dozen architectures.
"""

import argparse
import datetime
import os
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "src"))
os.environ.setdefault("TORCH_DEVICE_BACKEND_AUTOLOAD", "0")


def main():
    from opcov.store import layout, opset, output
    from opcov.tracing import recall, zoorun

    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--sample", type=int, default=0)
    p.add_argument("--seed", type=int, default=zoorun.SAMPLE_SEED)
    p.add_argument("--only", default="")
    p.add_argument("--all", action="store_true")
    p.add_argument("--jobs", type=int, default=2)
    p.add_argument("--modes", default="inference,training")
    p.add_argument("--traced", default=os.path.join(ROOT, "coverage", "models"),
                   help="the op sets to check (default: the bundled coverage/models)")
    p.add_argument("--workdir", default=None, help="where the eager runs' op sets go (default: a temporary folder)")
    p.add_argument("--out", default=os.path.join(ROOT, "coverage", "zoo", "recall.tsv"))
    args = p.parse_args()
    if not (args.sample or args.only or args.all):
        p.error("say which architectures: --sample N, --only NAMES or --all")
    archs = zoorun.architectures(every=args.all, only=[args.only] if args.only else (), sample=args.sample,
                                 seed=args.seed)
    modes = tuple(args.modes.split(","))
    work = args.workdir or tempfile.mkdtemp(prefix="opcov-recall-")
    selection = ("--all" if args.all else f"--sample {args.sample} --seed {args.seed}" if args.sample
                 else f"--only {args.only}")
    t0 = time.monotonic()
    table = os.path.join(work, "eager.tsv")
    rows = zoorun.run(archs, modes=modes, jobs=args.jobs, root=os.path.join(work, "eager"), table=table,
                      resume=os.path.exists(zoorun.journal_path(table)), real=True,
                      selection=f"opcov zoo trace {selection} --real")
    eager_rows = {(r["model"], r["mode"]): r for r in rows}
    compared, apart = [], []
    for a in archs:
        for mode in modes:
            path = layout.opset_path(a.name, mode, args.traced)
            real = eager_rows.get((a.name, mode)) or {}
            if not os.path.isfile(path):
                apart.append((a.name, mode, "no op set under --traced"))
                continue
            traced = opset.load(path)
            if traced["provenance"].get("tracing") != "fake":
                apart.append((a.name, mode, "data-dependent: its op set was traced with real values"))
            elif real.get("outcome") != "traced":
                apart.append((a.name, mode, f"the eager run failed: {real.get('reason', 'no row')[:200]}"))
            else:
                eager = opset.load(layout.opset_path(a.name, mode, os.path.join(work, "eager")))
                compared += [(a.name, mode, r) for r in recall.compare(traced, eager)]
    lines = [f"# command: python scripts/zoo_recall.py {selection} --modes {args.modes}",
             f"# created: {datetime.datetime.now(datetime.timezone.utc).strftime('%Y-%m-%dT%H:%M:%SZ')}",
             f"# torch: {_version('torch')}", f"# transformers: {_version('transformers')}",
             f"# traced: {os.path.relpath(args.traced, ROOT)}; eager: real values on the computing PrivateUse1 "
             "stand-in at tiny.overrides(width=True)",
             "\t".join(recall.COLUMNS)]
    lines += [recall.row_text(m, mode, r) for m, mode, r in compared]
    lines += [f"# apart\t{m}\t{mode}\t{why}" for m, mode, why in apart]
    output.write_atomic(args.out, "\n".join(lines) + "\n")
    pairs = {(m, mode) for m, mode, _ in compared}
    print(f"recall: {len(pairs)} architecture-modes compared, {len(apart)} apart; {time.monotonic() - t0:.0f} s; "
          f"table {args.out}")
    for fake, what in ((False, "op set as saved"), (True, "its fake-tensor part alone")):
        print(f" {what}:")
        for phase, (ok, n, mean) in recall.summary(compared, fake=fake).items():
            print(f"  {phase:9} recall >= {recall.TARGET}: {ok}/{n} ({100 * ok / n:.1f}%), mean {mean:.3f}")


def _version(name):
    from importlib.metadata import version

    return version(name)


if __name__ == "__main__":
    main()
