"""Trace-vs-eager recall over the zoo (issue 17, part 3), per phase: on the computing stand-in, each
architecture's op set (as the zoo made it: coverage/models) against the same architecture run eager
with real values; on CPU (``--device cpu``), a fake-tensor CPU trace against an eager CPU run.

Usage: python scripts/zoo_recall.py (--sample N [--seed S] | --only a,b [--update] | --all) [--jobs N]
                                    [--device accelerator|cpu] [--traced coverage/models]
                                    [--workdir DIR] [--out coverage/zoo/recall.tsv]

The stand-in half (the default):
Step 1: ``opcov zoo trace ... --real``: every architecture eager on the computing stand-in
(real values, composites on an accelerator's path, every dispatched op recorded), at narrow widths.
Step 2: ``opcov.tracing.recall.compare`` per architecture, mode and phase against the op set under
``--traced``; writes the table (one row per architecture, mode and phase: the ops the op set missed,
those its fake part alone missed, those only it has) and prints the share of architecture-modes at
recall >= 0.95 per phase. Op sets made with real values (fake tensors cannot trace the model) and
architectures either side could not trace are counted apart, not compared. The op sets' fake traces
are at the zoo's tiny widths, the eager runs at narrower ones: an op that only one width reaches
shows as a difference. Outside CI: minutes per dozen architectures.

The CPU half (``--device cpu``; default table coverage/zoo/recall-cpu.tsv): the issue's other
comparison, which an accelerator trace cannot be part of (CPU has its own kernels, such as
``_scaled_dot_product_flash_attention_for_cpu``, and its own composite paths). Per architecture and
mode, in the zoo's workers (journal, timeouts, memory limit) with no stand-in device: (a) ``opcov
trace --device cpu`` with fake tensors and (b) ``opcov trace --device cpu --real`` (eager, real
weights, seeded), both into the work folder, never into coverage/models. Both at the same sizes: the
real-valued trace's (``ladder.narrow``: the zoo's tiny config with narrow widths,
``tiny.overrides(width=True)``, and the zoo's repairs; its full widths with as few layers where the
narrow ones do not fit together; a curated entry's own config). Why those: the eager side holds real
weights and AdamW state, which at the zoo's full widths (hidden sizes in the thousands, vocabularies
of 100k+) would cost gigabytes and minutes per model on two cores, while fake tensors cost the same
at any width; and with one set of sizes on both sides an op that one width reaches and the other
does not cannot show as a miss, so what differs is fake-vs-real alone. A pair whose ``opcov trace``
lines still differ (beyond --real) or whose models differ in parameters (a head the fake build fell
back from) is counted apart (``recall.unlike``), as are fake traces that cannot be made (data-
dependent models, curated entries traced with real values) and failures on either side. A CPU op set,
like an accelerator's, has its real-valued branch run merged in (eager on CPU itself, with the inputs
as built and with a padded mask), so both recalls are reported: as saved, and of its fake part alone.

Writing the bundled table (no --out) also rewrites its section of docs/accuracy.md ('zoo-recall', or
'zoo-recall-cpu' with --device cpu): the summary of the whole table, with this command.
"""

import argparse
import datetime
import os
import re
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "src"))
sys.path.insert(0, os.path.join(ROOT, "benchmarks"))
os.environ.setdefault("TORCH_DEVICE_BACKEND_AUTOLOAD", "0")
PHASES = ("forward", "backward", "optimizer")  # opcov.store.opset.PHASES, the table's order
# A fake trace's failure that no size changes: an op whose output depends on values (trace.py's hints)
DATA_DEPENDENT = re.compile(r"DataDependent|DynamicOutputShape|data-dependent|data dependent")


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
    p.add_argument(
        "--device",
        choices=("accelerator", "cpu"),
        default="accelerator",
        help="accelerator: the op sets under --traced against eager runs on the computing stand-in; "
        "cpu: --device cpu fake traces against eager CPU runs, both made here",
    )
    p.add_argument(
        "--traced",
        default=None,
        help="the op sets to check (default: the bundled coverage/models; not with --device cpu)",
    )
    p.add_argument("--workdir", default=None, help="where the eager runs' op sets go (default: a temporary folder)")
    p.add_argument(
        "--out", default=None, help="the table (default: coverage/zoo/recall.tsv, with --device cpu recall-cpu.tsv)"
    )
    p.add_argument(
        "--update",
        action="store_true",
        help="with --only: the selection's rows replace theirs in the existing table, the rest stay "
        "(after a zoo refresh re-traced some architectures); the header says so",
    )
    p.add_argument(
        "--docs-only",
        action="store_true",
        help="run nothing: rewrite docs/accuracy.md's section from the table as it is (--out, else the bundled "
        "one), stamped with the table's own command and dates",
    )
    args = p.parse_args()
    cpu = args.device == "cpu"
    if args.docs_only:
        return _docs_from_table(
            args.out or os.path.join(ROOT, "coverage", "zoo", "recall-cpu.tsv" if cpu else "recall.tsv"), cpu
        )
    if not (args.sample or args.only or args.all):
        p.error("say which architectures: --sample N, --only NAMES or --all")
    if args.update and not args.only:
        p.error("--update replaces the rows of the architectures --only names: give --only")
    if cpu and args.traced:
        p.error("--traced: with --device cpu both sides are traced here (fake and eager, on CPU); leave --traced out")
    traced_dir = args.traced or os.path.join(ROOT, "coverage", "models")
    out = args.out or os.path.join(ROOT, "coverage", "zoo", "recall-cpu.tsv" if cpu else "recall.tsv")
    archs = zoorun.architectures(
        every=args.all, only=[args.only] if args.only else (), sample=args.sample, seed=args.seed
    )
    modes = tuple(args.modes.split(","))
    work = args.workdir or tempfile.mkdtemp(prefix="opcov-recall-")
    selection = (
        "--all" if args.all else f"--sample {args.sample} --seed {args.seed}" if args.sample else f"--only {args.only}"
    )
    t0 = time.monotonic()
    if cpu:
        compared, apart = _cpu_pairs(archs, modes, args.jobs, work, selection)
    else:
        table = os.path.join(work, "eager.tsv")
        rows = zoorun.run(
            archs,
            modes=modes,
            jobs=args.jobs,
            root=os.path.join(work, "eager"),
            table=table,
            resume=os.path.exists(zoorun.journal_path(table)),
            real=True,
            selection=f"opcov zoo trace {selection} --real",
        )
        eager_rows = {(r["model"], r["mode"]): r for r in rows}
        compared, apart = [], []
        for a in archs:
            for mode in modes:
                path = layout.opset_path(a.name, mode, traced_dir)
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
    lines = [
        f"# command: python scripts/zoo_recall.py {selection}{' --device cpu' if cpu else ''} --modes {args.modes}",
        f"# created: {datetime.datetime.now(datetime.timezone.utc).strftime('%Y-%m-%dT%H:%M:%SZ')}",
        f"# torch: {_version('torch')}",
        f"# transformers: {_version('transformers')}",
        (
            "# device: cpu; traced: opcov trace --device cpu (fake tensors, its branch run eager on CPU merged); eager: opcov trace --device cpu "
            "--real (real values on CPU, seeded); both at ladder.narrow's sizes (tiny.overrides(width=True), "
            "repaired)"
        )
        if cpu
        else (
            f"# traced: {os.path.relpath(traced_dir, ROOT)}; eager: real values on the computing PrivateUse1 "
            "stand-in at tiny.overrides(width=True)"
        ),
        "\t".join(recall.COLUMNS),
    ]
    rows = [recall.row_text(m, mode, r) for m, mode, r in compared]
    rows += [f"# apart\t{m}\t{mode}\t{why}" for m, mode, why in apart]
    if args.update:
        lines, rows = _updated(out, lines, rows, {(a.name, mode) for a in archs for mode in modes})
    output.write_atomic(out, "\n".join(lines + rows) + "\n")
    print(
        f"recall: {len({(m, mode) for m, mode, _ in compared})} architecture-modes compared, {len(apart)} apart; "
        f"{time.monotonic() - t0:.0f} s; table {out}"
    )
    if args.update:
        print(f" the whole table after the update ({out}):")
    for fake, what in ((False, "op set as saved"), (True, "its fake-tensor part alone")):
        print(f" {what}:")
        for phase, (ok, n, mean) in _summary(rows, fake).items():
            print(f"  {phase:9} recall >= {recall.TARGET}: {ok}/{n} ({100 * ok / n:.1f}%), mean {mean:.3f}")
    if args.out is None:  # the bundled table: its summary is the docs page's
        _write_docs(out, rows, cpu)


def _docs_from_table(table: str, cpu: bool) -> None:
    """The docs section from a table made earlier: its rows, and a stamp naming the run that made them."""
    if not os.path.isfile(table):
        raise SystemExit(f"zoo_recall: --docs-only: no table at {table}")
    with open(table, encoding="utf-8") as f:
        lines = f.read().splitlines()
    head = {}
    for line in lines:
        if line.startswith("# ") and not line.startswith("# apart\t") and ": " in line:
            key, value = line[2:].split(": ", 1)
            head.setdefault(key, []).append(value)
    rows = [ln for ln in lines if ln.startswith("# apart\t") or not (ln.startswith("#") or ln.startswith("model\t"))]
    updates = head.get("updated", [])
    stamp = (
        f"From `{os.path.relpath(table, ROOT)}` as made by `{head.get('command', ['?'])[0]}` at "
        f"{head.get('created', ['?'])[0]}"
        + (f", updated {len(updates)} time(s) with `--only ... --update` since" if updates else "")
        + f"; torch {head.get('torch', ['?'])[0]}, transformers {head.get('transformers', ['?'])[0]}. "
        f"Written into this page by `{_command_line()}`."
    )
    _write_docs(table, rows, cpu, stamp=stamp)


def _command_line() -> str:
    from docs_page import command_line

    return command_line()


def _write_docs(table: str, rows: list, cpu: bool, stamp: str | None = None) -> None:
    """The whole table's summary per phase into docs/accuracy.md, with this command."""
    from docs_page import ACCURACY, command_line, markdown_table, write_section

    from opcov.tracing import recall

    saved, fake = _summary(rows, False), _summary(rows, True)

    def share(figures):
        ok, n, mean = figures
        return f"{ok}/{n} ({100 * ok / n:.1f}%), mean {mean:.3f}"

    body = markdown_table(
        ["phase", f"op set as saved: recall >= {recall.TARGET}", "its fake-tensor part alone"],
        [[phase, share(saved[phase]), share(fake[phase]) if phase in fake else ""] for phase in saved],
    )
    apart = sum(r.startswith("# apart\t") for r in rows)
    note = f"Per architecture and mode; {apart} architecture-modes counted apart (reasons in `{os.path.relpath(table, ROOT)}`)."
    write_section(
        ACCURACY,
        "zoo-recall-cpu" if cpu else "zoo-recall",
        body,
        command_line(),
        packages=("torch", "transformers"),
        note=note,
        stamp_text=stamp,
    )


def _updated(out: str, header: list, rows: list, selected: set) -> tuple[list, list]:
    """The existing table at ``out`` with the rows (and apart lines) of the ``selected`` (model, mode)
    pairs replaced by ``rows``: its own header first, then this run's command and time as an update."""
    if not os.path.isfile(out):
        raise SystemExit(f"zoo_recall: --update: no table at {out} to update; run without --update first")
    with open(out, encoding="utf-8") as f:
        old = f.read().splitlines()
    head = [line for line in old if line.startswith("# ") and not line.startswith("# apart\t")]
    columns = next(line for line in old if line.startswith("model\t"))
    kept = [
        line
        for line in old
        if line != columns
        and line not in head
        and tuple(line.removeprefix("# apart\t").split("\t")[:2]) not in selected
    ]
    command = next(line for line in header if line.startswith("# command:")).removeprefix("# command: ")
    created = next(line for line in header if line.startswith("# created:")).removeprefix("# created: ")
    update = [f"# updated: {command} (at {created})"]

    def order(line):
        apart = line.startswith("# apart\t")
        model, mode, phase = (line.removeprefix("# apart\t").split("\t") + ["", ""])[:3]
        return apart, model, mode, "" if apart else PHASES.index(phase)

    return head + update + [columns], sorted(kept + rows, key=order)


def _summary(rows: list, fake: bool) -> dict:
    """recall.summary's figures, read from the table's rows (recall or fake_recall column)."""
    from opcov.tracing import recall

    column = recall.COLUMNS.index("fake_recall" if fake else "recall")
    out = {}
    for phase in PHASES:
        these = [float(r.split("\t")[column]) for r in rows if not r.startswith("#") and r.split("\t")[2] == phase]
        if these:
            out[phase] = (sum(x >= recall.TARGET for x in these), len(these), sum(these) / len(these))
    return out


def _cpu_pairs(archs, modes, jobs, work, selection):
    """(compared rows, apart rows) of the CPU half: fake CPU traces and eager CPU runs made under ``work``
    (each pass resumable from its journal), paired per architecture and mode (see the docstring)."""
    from opcov.store import layout, opset
    from opcov.tracing import recall, zoorun

    rows = {}
    for side, real in (("fake", False), ("eager", True)):
        table = os.path.join(work, f"{side}.tsv")
        done = zoorun.run(
            archs,
            modes=modes,
            jobs=jobs,
            root=os.path.join(work, side),
            table=table,
            resume=os.path.exists(zoorun.journal_path(table)),
            real=real,
            device="cpu",
            selection=f"python scripts/zoo_recall.py {selection} --device cpu: {side}",
        )
        rows[side] = {(r["model"], r["mode"]): r for r in done}
    compared, apart = [], []
    for a in archs:
        for mode in modes:
            fake, eager = (rows[side].get((a.name, mode)) or {} for side in ("fake", "eager"))
            if fake.get("outcome") != "traced":
                why, also = fake.get("reason", "no row"), eager.get("outcome") != "traced"
                what = (
                    "data-dependent: fake tensors cannot trace it"
                    if DATA_DEPENDENT.search(why)
                    else "the fake CPU trace failed"
                )
                apart.append(
                    (
                        a.name,
                        mode,
                        f"{what} ({'the eager run failed too' if also else 'the eager run ran'}): {why[:200]}",
                    )
                )
                continue
            if eager.get("outcome") != "traced":
                apart.append((a.name, mode, f"the eager run failed: {eager.get('reason', 'no row')[:200]}"))
                continue
            traced, real = (
                opset.load(layout.opset_path(a.name, mode, os.path.join(work, side))) for side in ("fake", "eager")
            )
            why = (
                "data-dependent: its zoo entry traces real values"
                if traced["provenance"].get("tracing") != "fake"
                else recall.unlike(traced, real)
            )
            if why:
                apart.append((a.name, mode, why))
            else:
                compared += [(a.name, mode, r) for r in recall.compare(traced, real)]
    return compared, apart


def _version(name):
    from importlib.metadata import version

    return version(name)


if __name__ == "__main__":
    from opcov.errors import OpcovError

    try:
        main()
    except OpcovError as exc:  # a user's mistake (an unknown name, a journal of other settings): one line
        sys.exit(f"zoo_recall.py: {exc}")
