"""Run zoo models for real on planted Python PrivateUse1 backends and compare with `opcov check`.

Usage: python scripts/reality_check.py [--specs a,b] [--models m1,m2|all] [--modes inference,training]
                                       [--no-probe] [--workdir DIR] [--jobs N] [--no-docs]
Prints one line per (backend, model, mode), then per backend and in all the confusion table (verdict
runs / fails / unknown against what the real run did: ran / raised / wrong / crashed), the agreement
rate and the wall time, and rewrites the 'reality-planted' section of docs/accuracy.md with them
(--no-docs: leave the page alone). --models all: the whole curated zoo. See opcov.testing.reality.
"""

import argparse
import os
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "src"))
sys.path.insert(0, os.path.join(ROOT, "benchmarks"))
os.environ.setdefault("TORCH_DEVICE_BACKEND_AUTOLOAD", "0")

DEFAULT_MODELS = "nn-convnet,nn-lstm,nn-gru,nn-transformer,bert,gpt2,llama,vit"


def main():
    from opcov.testing import reality

    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--specs", default=",".join(reality.SPECS))
    p.add_argument("--models", default=DEFAULT_MODELS, help="comma-separated zoo names, or 'all'")
    p.add_argument("--modes", default="inference,training")
    p.add_argument("--no-probe", action="store_true", help="registered evidence only")
    p.add_argument("--jobs", type=int, default=1, help="real runs (child processes) at a time (default: 1)")
    p.add_argument("--workdir", default=None)
    p.add_argument("--no-docs", action="store_true", help="do not rewrite docs/accuracy.md's section")
    p.add_argument(
        "--models-dir",
        default=os.path.join(ROOT, "coverage", "models"),
        help="where the op sets are (default: the bundled coverage/models)",
    )
    args = p.parse_args()
    import torch

    start = time.time()
    workdir = args.workdir or tempfile.mkdtemp(prefix="opcov-reality-")

    def show(o):
        mark = {True: "agree", False: "DISAGREE", None: "harness" if o.actual == "harness" else "unknown"}[o.agrees]
        print(
            f"{o.spec:20s} {o.model:15s} {o.mode:9s} predicted {o.predicted:18s} actual {o.actual:7s} "
            f"{mark:8s} {o.detail[:90]}" + (f"  [{', '.join(o.problems[:3])}]" if o.problems else ""),
            flush=True,
        )

    from opcov.sources import zoo

    models = [e.name for e in zoo.ZOO] if args.models == "all" else args.models.split(",")
    outcomes = reality.reality_check(
        args.specs.split(","),
        models,
        args.modes.split(","),
        workdir,
        probe=not args.no_probe,
        torch_version=torch.__version__,
        models_dir=args.models_dir,
        progress=show,
        jobs=args.jobs,
    )
    print()
    for spec in dict.fromkeys(o.spec for o in outcomes):
        print(reality.confusion([o for o in outcomes if o.spec == spec], spec))
    if len({o.spec for o in outcomes}) > 1:
        print(reality.confusion(outcomes, "all backends"))
    judged = [o for o in outcomes if o.agrees is not None]
    agree = sum(o.agrees for o in judged)
    unknown = sum(o.predicted == "unknown" for o in outcomes)
    harness = sum(o.actual == "harness" and o.predicted != "unknown" for o in outcomes)
    runs_but_not = sum(
        o.predicted in ("runs", "runs_with_fallback") and o.actual not in ("ran", "harness") for o in outcomes
    )
    print(
        f"{agree} of {len(judged)} verdicts that claim something agree with reality "
        f"({100.0 * agree / max(len(judged), 1):.1f}%); {unknown} unknown "
        f"({100.0 * unknown / max(len(outcomes), 1):.1f}% of {len(outcomes)}); {harness} untested (harness: the "
        f"test backend could not compute a kernel it plants); {runs_but_not} say runs for a model that did not "
        f"run; {time.time() - start:.0f} s; data in {workdir}"
    )
    if not args.no_docs:
        _write_docs(outcomes, agree, judged, unknown, runs_but_not, time.time() - start)


def _write_docs(outcomes, agree, judged, unknown, runs_but_not, seconds):
    """The confusion table over every planted backend, with the agreement line, into docs/accuracy.md."""
    from docs_page import ACCURACY, command_line, markdown_table, write_section

    from opcov import vocab
    from opcov.testing import reality

    verdicts = tuple(reversed(vocab.VERDICT_ORDER))  # every verdict word (runs_with_value_note was left out)
    rows = [
        [v, *(sum(o.predicted == v and o.actual == a for o in outcomes) for a in reality.ACTUALS)]
        for v in verdicts
        if any(o.predicted == v for o in outcomes)
    ]
    table = markdown_table(["verdict \\ real run", *reality.ACTUALS], rows)
    specs = ", ".join(dict.fromkeys(o.spec for o in outcomes))
    models = len({o.model for o in outcomes})
    note = (
        f"{len(outcomes)} (backend, model, mode) runs: planted backends {specs}; {models} models. "
        f"**{agree} of {len(judged)}** verdicts that claim something agree with the real run; {unknown} "
        f"`unknown`; {runs_but_not} say `runs` for a model that did not run. {seconds:.0f} s."
    )
    write_section(ACCURACY, "reality-planted", table, command_line(), note=note)


if __name__ == "__main__":
    main()
