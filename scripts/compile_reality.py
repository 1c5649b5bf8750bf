"""Compile the curated zoo for real with Inductor on CPU and compare with `opcov check -b cpu --path compile`.

Usage: python scripts/compile_reality.py [--models m1,m2|all] [--modes inference,training] [--timeout S]
                                         [--results FILE.jsonl] [--doc docs/accuracy-compile.md]
Each model and mode runs in a child process: random weights (tiny zoo configs, dropout set to 0 so that
values compare), eager CPU first, then ``torch.compile(model, backend="inductor")`` on a copy; the real
outcome is ``compiled`` (matched eager), ``graph_breaks`` (matched eager, with breaks), ``compile_error``
or ``wrong_values`` (loss or outputs, and in training the gradients, beyond tolerance). The verdict is
opcov's on the committed compiled op set (coverage/models/<model>/compile/inductor-<mode>.yaml). A
verdict that runs (in any evidence words) agrees with compiled and graph_breaks; fails agrees with
compile_error; unknown agrees with nothing. The page named by --doc is replaced wholesale.
"""

import argparse
import datetime
import json
import os
import platform
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "src"))
os.environ.setdefault("TORCH_DEVICE_BACKEND_AUTOLOAD", "0")

ACTUAL = ("compiled", "graph_breaks", "compile_error", "wrong_values", "harness")
TOLERANCE = {"float32": 1e-3, "bfloat16": 5e-2}  # max |compiled - eager| / scale, per tensor (see run_one)


def run_one(name: str, mode: str) -> dict:
    """The real outcome of compiling one zoo model in one mode (runs in a child process)."""
    import copy

    import torch

    from opcov.tracing import compiled as ctrace
    from opcov.tracing import models, zoo

    torch.manual_seed(0)
    entry = zoo.BY_NAME[name]
    built = models.build(entry.spec, models.Sizes(), mode=mode, real=True, zoo_entry=entry)
    model = built.model.to(getattr(torch, entry.dtype))
    for m in model.modules():
        if isinstance(m, torch.nn.modules.dropout._DropoutNd):  # Dropout, Dropout2d, ...: values compare
            m.p = 0.0
        if isinstance(m, torch.nn.MultiheadAttention):  # its attention dropout is a float, not a module
            m.dropout = 0.0
    model.train(mode == "training")
    args, kwargs = ((), built.inputs) if isinstance(built.inputs, dict) else (tuple(built.inputs), {})
    if isinstance(built.inputs, torch.Tensor):
        args = (built.inputs,)
    args = tuple(a.to(getattr(torch, entry.dtype)) if torch.is_tensor(a) and a.is_floating_point() else a for a in args)
    kwargs = {
        k: v.to(getattr(torch, entry.dtype)) if torch.is_tensor(v) and v.is_floating_point() else v
        for k, v in kwargs.items()
    }
    from opcov.tracing.trace import _default_loss, _tensors

    def step(m):
        if mode == "inference":
            with torch.no_grad():
                out = m(*args, **kwargs)
            return [t.float() for t in _tensors(out if not hasattr(out, "to_tuple") else out.to_tuple(), torch)], []
        out = m(*args, **kwargs)
        loss = _default_loss(torch, out)
        loss.backward()
        grads = [p.grad.float() for p in m.parameters() if p.grad is not None]
        return [loss.detach().float()], grads

    eager_model = copy.deepcopy(model)
    torch.manual_seed(1)
    ref_out, ref_grads = step(eager_model)
    torch._dynamo.reset()
    compiled_model = torch.compile(copy.deepcopy(model), backend="inductor")
    t0 = time.time()
    with ctrace._graph_breaks() as breaks:
        try:
            torch.manual_seed(1)
            out, grads = step(compiled_model)
        except Exception as exc:  # noqa: BLE001 - the compile error is the outcome
            return {"actual": "compile_error", "detail": f"{type(exc).__name__}: {ctrace._first_line(exc)}"[:300]}
    breaks = ctrace._distinct(breaks)
    worst = 0.0
    # A tensor is compared on its own scale, but never a finer one than a hundredth of the largest of its kind:
    # a gradient that is zero in exact arithmetic (a conv bias before batch norm) is rounding noise on both sides.
    for got, ref in ((out, ref_out), (grads, ref_grads)):
        floor = 1e-2 * max((float(b.abs().max()) for b in ref if b.numel()), default=0.0)
        for a, b in zip(got, ref):
            if a.shape != b.shape:
                return {"actual": "wrong_values", "detail": f"shape {list(a.shape)} vs eager {list(b.shape)}"}
            if b.numel():
                scale = max(float(b.abs().max()), floor, 1e-12)
                worst = max(worst, float((a - b).abs().max()) / scale)
    if len(out + grads) != len(ref_out + ref_grads) or worst > TOLERANCE[entry.dtype] or worst != worst:
        return {"actual": "wrong_values", "detail": f"max relative difference {worst:.2e}", "breaks": len(breaks)}
    return {
        "actual": "graph_breaks" if breaks else "compiled",
        "detail": f"max relative difference {worst:.1e}; compiled in {time.time() - t0:.0f} s"
        + (f"; breaks: {'; '.join(ctrace._short(b.where) + ' ' + b.reason for b in breaks)[:200]}" if breaks else ""),
        "breaks": len(breaks),
    }


def verdict(name: str, mode: str) -> tuple[str, str, int]:
    """(verdict word, what it says, graph breaks) of opcov's compile verdict for cpu, or ('none', why, 0)."""
    from opcov.errors import OpcovError
    from opcov.verdict import compiled

    try:
        (v,) = compiled.check(name, ["cpu"], [mode], os.path.join(ROOT, "coverage"))
    except OpcovError as exc:
        return "none", str(exc), 0
    return v.verdict, v.says(), len(v.breaks)


def agrees(predicted: str, actual: str):
    if actual == "harness" or predicted in ("unknown", "none"):
        return None
    if predicted in ("runs", "runs_with_fallback"):
        return actual in ("compiled", "graph_breaks")
    return actual == "compile_error"


def main():
    from opcov.tracing import zoo

    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--models", default="all", help="comma-separated zoo names, or 'all' (default)")
    p.add_argument("--modes", default="inference,training")
    p.add_argument("--timeout", type=float, default=600.0, help="seconds per model and mode (default: 600)")
    p.add_argument("--doc", default=os.path.join(ROOT, "docs", "accuracy-compile.md"))
    p.add_argument(
        "--results",
        help="JSON lines of the real outcomes: appended as each model ends, and those already in it are not run "
        "again (resume; or recompute the verdicts alone)",
    )
    p.add_argument("--one", nargs=2, metavar=("MODEL", "MODE"), help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.one:
        print("RESULT " + json.dumps(run_one(*args.one)), flush=True)
        return
    import torch

    names = [e.name for e in zoo.ZOO] if args.models == "all" else args.models.split(",")
    done = {}
    if args.results and os.path.exists(args.results):
        with open(args.results) as f:
            for ln in f:
                r = json.loads(ln)
                done[r["model"], r["mode"]] = r
    for name in names:
        for mode in args.modes.split(","):
            if (name, mode) in done:
                continue
            t0 = time.time()
            try:
                proc = subprocess.run(
                    [sys.executable, __file__, "--one", name, mode],
                    capture_output=True,
                    text=True,
                    timeout=args.timeout,
                    env={**os.environ, "PYTHONPATH": os.path.join(ROOT, "src")},
                )
                line = next((ln for ln in proc.stdout.splitlines() if ln.startswith("RESULT ")), None)
                real = (
                    json.loads(line[7:])
                    if line
                    else {"actual": "harness", "detail": (proc.stderr.strip().splitlines() or ["no output"])[-1][:200]}
                )
            except subprocess.TimeoutExpired:
                real = {"actual": "harness", "detail": f"timed out after {args.timeout:.0f} s"}
            real.update(model=name, mode=mode, seconds=round(time.time() - t0))
            done[name, mode] = real
            if args.results:
                with open(args.results, "a") as f:
                    f.write(json.dumps(real) + "\n")
            print(f"{name:15s} {mode:9s} {real['actual']:13s} ({real['seconds']} s) {real['detail'][:100]}", flush=True)
    rows = []
    for name in names:
        for mode in args.modes.split(","):
            real = done[name, mode]
            word, says, predicted_breaks = verdict(name, mode)
            row = dict(real, predicted=word, says=says, predicted_breaks=predicted_breaks)
            row["agrees"] = agrees(word, real["actual"])
            row["breaks_agree"] = real["actual"] not in ("compiled", "graph_breaks") or (predicted_breaks > 0) == (
                real["actual"] == "graph_breaks"
            )
            rows.append(row)
            mark = {True: "agree", False: "DISAGREE", None: "n/a"}[row["agrees"]]
            print(f"{name:15s} {mode:9s} predicted {says[:40]:40s} actual {real['actual']:13s} {mark}", flush=True)
    wall = sum(done[n, m].get("seconds", 0) for n in names for m in args.modes.split(","))  # every child, resumed too
    write_doc(args, rows, wall, torch.__version__)
    print(f"wrote {args.doc}")


def write_doc(args, rows, wall, torch_version):
    import collections

    judged = [r for r in rows if r["agrees"] is not None]
    agree = sum(1 for r in judged if r["agrees"])
    table = collections.Counter((r["predicted"], r["actual"]) for r in rows)
    predicted = sorted({r["predicted"] for r in rows})
    lines = [
        "# Compile-path accuracy: verdicts against real compiles",
        "",
        "What `opcov check MODEL -b cpu --path compile` says of each curated zoo model, against compiling it for",
        "real with Inductor on this CPU (random weights, tiny configs, dropout off) and comparing with eager.",
        "Replaced wholesale by the script; do not edit by hand.",
        "",
        f"- command: `python scripts/compile_reality.py --models {args.models} --modes {args.modes}`",
        f"- date: {datetime.datetime.now(datetime.timezone.utc).strftime('%Y-%m-%d %H:%M UTC')}",
        f"- versions: torch {torch_version}, Python {platform.python_version()}",
        f"- machine: {platform.platform(terse=True)}, {os.cpu_count()} CPUs, shared; the real runs took {wall:.0f} s in all",
        "",
        f"Verdicts that agree: {agree} of {len(judged)} judged"
        + (f" ({100 * agree / len(judged):.0f}%)" if judged else "")
        + f"; {len(rows) - len(judged)} not judged (verdict unknown or none, or a harness failure).",
        f"Graph breaks predicted where the real compile broke (and only there): "
        f"{sum(1 for r in rows if r['breaks_agree'])} of {len(rows)}.",
        "",
        "| verdict \\ real | " + " | ".join(ACTUAL) + " |",
        "| --- | " + " | ".join("---:" for _ in ACTUAL) + " |",
    ]
    for p in predicted:
        lines.append(f"| {p} | " + " | ".join(str(table.get((p, a), 0)) for a in ACTUAL) + " |")
    lines += ["", "| model | mode | verdict | real | agrees | detail |", "| --- | --- | --- | --- | --- | --- |"]
    for r in rows:
        mark = {True: "yes", False: "**no**", None: "n/a"}[r["agrees"]]
        detail = r["detail"].replace("|", "\\|")
        lines.append(f"| {r['model']} | {r['mode']} | {r['says']} | {r['actual']} | {mark} | {detail} |")
    os.makedirs(os.path.dirname(args.doc), exist_ok=True)
    with open(args.doc, "w") as f:
        f.write("\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
