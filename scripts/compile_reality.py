"""Compile the curated zoo for real and compare with `opcov check -b cpu|xla --path compile`.

Usage: python scripts/compile_reality.py [--backend inductor|openxla] [--models m1,m2|all]
           [--modes inference,training|serve] [--timeout S] [--results FILE.jsonl] [--saved-only] [--doc PAGE]

``--backend inductor`` (default) compiles on this CPU and is judged against ``-b cpu``; ``--backend openxla``
runs in a Python with torch_xla (``PJRT_DEVICE=CPU``) and is judged against ``-b xla``. Each model and mode
runs in a child process: random weights (tiny zoo configs, dropout set to 0 so that values compare), eager
CPU first, then ``torch.compile(model, backend=...)`` on a copy (on the xla device for openxla). The real
outcome is ``compiled`` (matched eager), ``graph_breaks`` (matched eager, with breaks), ``compile_error``
or ``wrong_values`` (outputs, and in training the loss and every gradient, beyond tolerance of eager, and
on inductor also farther from eager run in float64 than eager float32 is, ARBITER_SLACK times over), or
``harness`` (the run itself could not be made: a timeout, a crash). The verdict is opcov's on the committed
compiled op set (coverage/models/<model>/compile/<backend>-<mode>.yaml). A verdict that runs (in any
evidence words) agrees with compiled and graph_breaks, one that says values may differ also with
wrong_values; fails agrees with compile_error; unknown agrees with nothing.

``--modes serve`` (alone; ``all`` models are then the curated decoders) runs transformers' ``generate`` as
serve mode does (opcov.sources.generate.RUNS), eagerly and then with the model's forward compiled
(``dynamic=False``, afresh for each run): a greedy run's tokens must equal eager's and each step's logits be
within tolerance, a sampling run's tokens have eager's shape. It is judged with ``opcov check MODEL -b DEVICE
--mode serve --path compile`` on the compiled serve op set (<backend>-serve.yaml), and written to the
``compile-serve-reality-BACKEND`` section.

``--results`` keeps the real outcomes (JSON lines), so a rerun after new coverage data recomputes the
verdicts alone; ``--saved-only`` runs nothing. ``--doc`` rewrites that backend's section of the page
(``<!-- begin compile-reality-BACKEND -->``), and nothing else of it.
"""

import argparse
import json
import os
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "src"))
sys.path.insert(0, os.path.join(ROOT, "benchmarks"))
os.environ.setdefault("TORCH_DEVICE_BACKEND_AUTOLOAD", "0")

ACTUAL = ("compiled", "graph_breaks", "compile_error", "wrong_values", "harness")
TOLERANCE = {"float32": 1e-3, "bfloat16": 5e-2}  # max |compiled - eager| / scale, per tensor (see compare)
ARBITER_SLACK = 4.0  # compiled may be this many times farther from float64 eager than eager float32 is
DEVICE_OF = {"inductor": "cpu", "openxla": "xla"}  # the device whose compile verdict each backend checks


def compare(got: list, ref: list, scales: dict | None = None) -> tuple[float, str] | str:
    """(worst relative difference, the tensor it is in), or why the two cannot be compared.

    ``got``/``ref`` are (name, kind, tensor) lists; a tensor is compared on its own scale (its largest
    magnitude), but never a finer one than a hundredth of the largest tensor of its kind (a gradient that
    is zero in exact arithmetic, a conv bias before batch norm, is rounding noise on both sides) nor than
    ``scales[name]``: a loss that sums outputs is judged on the sum of their magnitudes, since a sum whose
    terms cancel (a layer norm's output, summed) is rounding noise on that scale."""
    if [n for n, _, _ in got] != [n for n, _, _ in ref]:
        missing = sorted({n for n, _, _ in ref} ^ {n for n, _, _ in got})
        return f"different values returned: {', '.join(missing[:3])}"
    floors: dict = {}
    for _, kind, b in ref:
        if b.numel() and kind != "tokens":
            floors[kind] = max(floors.get(kind, 0.0), 1e-2 * float(b.abs().max()))
    worst, where = 0.0, ""
    for (name, kind, a), (_, _, b) in zip(got, ref):
        if a.shape != b.shape:
            return f"{name}: shape {list(a.shape)} vs eager {list(b.shape)}"
        if kind == "tokens":  # generated token ids (or a sampling run's shape): equal, or wrong
            if not bool((a == b).all()):
                return f"{name}: {a.tolist()} vs eager {b.tolist()}"[:200]
            continue
        if not b.numel():
            continue
        scale = max(float(b.abs().max()), floors.get(kind, 0.0), (scales or {}).get(name, 0.0), 1e-12)
        diff = float((a - b).abs().max()) / scale
        if diff != diff or diff > worst:  # NaN is the worst there is
            worst, where = (float("inf") if diff != diff else diff), name
    return worst, where


def run_one(name: str, mode: str, backend: str, store: str = "") -> dict:
    """The real outcome of compiling one zoo model in one mode (runs in a child process)."""
    import copy

    import torch

    from opcov.sources import generate as serve
    from opcov.sources import models, zoo
    from opcov.sources.step import default_loss, output_tensors
    from opcov.tracing import compiled as ctrace

    entry = zoo.BY_NAME[name]
    dtype = getattr(torch, entry.dtype)
    serving = mode == "serve"

    def build():
        torch.manual_seed(0)
        built = models.build(
            entry.spec, models.Sizes(), mode="inference" if serving else mode, real=True, zoo_entry=entry
        )
        model = built.model.to(dtype)
        config = getattr(model, "config", None)
        for key, value in config.to_dict().items() if hasattr(config, "to_dict") else ():
            if "drop" in key and isinstance(value, float):  # read at run time (falcon's hidden_dropout)
                setattr(config, key, 0.0)
        for m in model.modules():
            if isinstance(m, torch.nn.modules.dropout._DropoutNd):  # Dropout, Dropout2d, ...: values compare
                m.p = 0.0
            # a rate kept as a float: bart's dropout, swin's drop_prob, MultiheadAttention's and an RNN's
            # (between layers, inside ATen's kernel)
            for key, value in list(vars(m).items()):
                if "drop" in key.lower() and isinstance(value, float):
                    setattr(m, key, 0.0)
        model.train(mode == "training")
        if serving:  # the prompt serve mode traces with
            return model, serve.prompt_inputs(torch, built.inputs, getattr(model, "config", None))
        return model, built.inputs

    def move(x, where, to):
        if isinstance(x, torch.Tensor):
            return x.to(where).to(to) if x.is_floating_point() else x.to(where)
        if isinstance(x, dict):
            return {k: move(v, where, to) for k, v in x.items()}
        if isinstance(x, (list, tuple)):
            return type(x)(move(v, where, to) for v in x)
        return x

    def generate(m, inputs, where, compile_with=None):
        """(named values, no scales) of serve mode's generate runs, as 'opcov run --mode serve' compares them
        (opcov.sources.generate.run_values: a greedy run's tokens and each step's logits, a sampling run's tokens'
        shape; with ``compile_with`` the model's forward compiled with dynamic=False afresh for each run)."""
        got = serve.run_values(torch, m, move(inputs, where, dtype), compile_with=compile_with)
        return [(n, "tokens", t) if "tokens" in n else (n, "output", t.float()) for n, t in got], {}

    def step(m, inputs, where, to=dtype, compile_with=None):
        """(named values, their scales): outputs, and in training the loss and every gradient."""
        if serving:
            return generate(m, inputs, where, compile_with)
        x = move(inputs, where, to)
        with torch.enable_grad() if mode == "training" else torch.no_grad():
            out = m(**x) if isinstance(x, dict) else m(x) if isinstance(x, torch.Tensor) else m(*x)
            outs = output_tensors(out)
            got = [(f"output {i}", "output", t) for i, t in enumerate(outs)]
            scales = {}
            if mode == "training":
                loss = default_loss(torch, out)
                loss.backward()
                got.append(("loss", "loss", loss))
                own = out.get("loss") if isinstance(out, dict) else getattr(out, "loss", None)
                if not isinstance(own, torch.Tensor):  # the sum of the outputs: judged on their magnitudes
                    scales["loss"] = sum(float(t.detach().float().abs().sum()) for t in outs if t.requires_grad)
                params = getattr(m, "_orig_mod", m).named_parameters()  # the compiled wrapper's names, unprefixed
                got += [(f"grad {n}", "grad", p.grad) for n, p in params if p.grad is not None]
        return [(n, k, t.detach().float().cpu()) for n, k, t in got if t.is_floating_point()], scales

    if backend == "reference":  # the eager CPU run alone, for a child that compiles elsewhere
        model, inputs = build()
        torch.manual_seed(1)
        ref, scales = step(copy.deepcopy(model), inputs, "cpu")
        torch.save({"state": model.state_dict(), "inputs": inputs, "ref": ref, "scales": scales}, store)
        return {"actual": "reference"}
    where = "cpu"
    if backend == "openxla":
        # The CPU reference runs in a process of its own that never imports torch_xla: the import replaces
        # nn.GRU with a GRU that refuses CPU tensors, and a backward run before it leaves the autograd engine
        # without a queue for the xla device (an INTERNAL ASSERT in the compiled backward, not the backend's).
        import tempfile

        with tempfile.TemporaryDirectory() as tmp:
            store = os.path.join(tmp, "reference.pt")
            proc = subprocess.run(
                [sys.executable, os.path.abspath(__file__), "--one", name, mode, "reference", store],
                capture_output=True,
                text=True,
            )
            if not os.path.exists(store):
                tail = (proc.stderr.strip().splitlines() or ["no output"])[-1][:200]
                return {"actual": "harness", "detail": f"the eager CPU reference failed: {tail}"}
            saved = torch.load(store, weights_only=False)
        ref, scales, inputs = saved["ref"], saved["scales"], saved["inputs"]
        import torch_xla

        where = torch_xla.device()
        model, _ = build()  # as a user's script builds it, after the import, with the CPU model's weights
        model.load_state_dict(saved["state"])
        model = model.to(where)
        if hasattr(model, "tie_weights"):  # moving to xla unties shared weights; transformers' Trainer ties them again
            model.tie_weights()
    else:
        model, inputs = build()
        torch.manual_seed(1)
        ref, scales = step(copy.deepcopy(model), inputs, "cpu")
        model = copy.deepcopy(model)
    torch._dynamo.reset()
    compiled_model = model if serving else torch.compile(model, backend=backend)  # serve: its forward, per run
    t0 = time.time()
    with ctrace.logged_breaks() as breaks:
        try:
            torch.manual_seed(1)
            got, _ = step(compiled_model, inputs, where, compile_with=backend if serving else None)
        except Exception as exc:  # noqa: BLE001 - the compile error is the outcome
            return {"actual": "compile_error", "detail": f"{type(exc).__name__}: {ctrace._first_line(exc)}"[:300]}
    breaks = ctrace.distinct_breaks(breaks)
    said = f"; breaks: {'; '.join(ctrace._short(b.where) + ' ' + b.reason for b in breaks)[:200]}" if breaks else ""
    result = compare(got, ref, scales)
    if isinstance(result, str):
        return {"actual": "wrong_values", "detail": result + said, "breaks": len(breaks)}
    worst, in_ = result
    took = time.time() - t0
    if worst > TOLERANCE[entry.dtype] and backend != "openxla":
        # Which side is off? Eager in float64 is the arbiter: a compiled value as close to it as eager's own
        # is rounding (a gradient summed from terms that cancel), not a wrong kernel.
        model64, inputs64 = build()
        torch.manual_seed(1)
        try:
            exact, _ = step(model64.double(), inputs64, "cpu", to=torch.float64)
            off, eager_off = compare(got, exact, scales), compare(ref, exact, scales)
        except Exception as exc:  # noqa: BLE001 - no arbiter: the difference from float32 eager stands
            off = eager_off = f"float64 eager raised {type(exc).__name__}"
            said += f"; {off}"
        if not isinstance(off, str) and not isinstance(eager_off, str):
            said += f"; against float64 eager: compiled {off[0]:.1e}, eager float32 {eager_off[0]:.1e} ({off[1]})"
            if off[0] <= max(TOLERANCE[entry.dtype], ARBITER_SLACK * eager_off[0]):
                worst = off[0]
    if worst > TOLERANCE[entry.dtype]:
        return {
            "actual": "wrong_values",
            "detail": f"max relative difference {worst:.2e} ({in_}); compiled in {took:.0f} s" + said,
            "breaks": len(breaks),
        }
    return {
        "actual": "graph_breaks" if breaks else "compiled",
        "detail": f"max relative difference {worst:.1e}; compiled in {took:.0f} s" + said,
        "breaks": len(breaks),
    }


def verdict(name: str, mode: str, device: str = "cpu") -> tuple[str, str, int]:
    """(verdict word, what it says, graph breaks) of opcov's compile verdict for ``device``, or ('none', why, 0):
    from coverage data, as predicted before any observed compiled run of the model decides it (the run is
    the real outcome this measures the prediction against)."""
    from opcov.errors import OpcovError
    from opcov.verdict import compiled

    try:
        (v,) = compiled.check(name, [device], [mode], os.path.join(ROOT, "coverage"))
    except OpcovError as exc:
        return "none", str(exc), 0
    if v.observed:
        p = v.observed["predicted"]
        return p["verdict"], p["says"], len(v.breaks)
    return v.verdict, v.says(), len(v.breaks)


def agrees(predicted: str, actual: str):
    if actual == "harness" or predicted in ("unknown", "none"):
        return None
    if predicted == "runs_with_value_note":
        return actual in ("compiled", "graph_breaks", "wrong_values")
    if predicted in ("runs", "runs_with_fallback"):
        return actual in ("compiled", "graph_breaks")
    return actual == "compile_error"


def backend_ready(backend: str) -> str | None:
    """Why ``backend`` cannot compile in this Python, or None."""
    import importlib.util

    if backend == "openxla" and importlib.util.find_spec("torch_xla") is None:
        return (
            "--backend openxla needs torch_xla in this Python (run it with PJRT_DEVICE=CPU in a torch-xla environment)"
        )
    if importlib.util.find_spec("torch") is None:
        return "torch is not installed in this Python"
    return None


def main():
    from opcov.sources import zoo

    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--backend", default="inductor", choices=sorted(DEVICE_OF), help="compile backend")
    p.add_argument("--models", default="all", help="comma-separated zoo names, or 'all' (default)")
    p.add_argument("--modes", default="inference,training")
    p.add_argument("--timeout", type=float, default=600.0, help="seconds per model and mode (default: 600)")
    p.add_argument("--doc", help="rewrite this page's compile-reality-BACKEND section (docs/accuracy-compile.md)")
    p.add_argument(
        "--results",
        help="JSON lines of the real outcomes: appended as each model ends, and those already in it are not run "
        "again (resume; or recompute the verdicts alone)",
    )
    p.add_argument("--saved-only", action="store_true", help="run nothing: judge the pairs --results holds")
    p.add_argument("--one", nargs="+", metavar="MODEL MODE [BACKEND]", help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.one:
        print("RESULT " + json.dumps(run_one(*args.one[:2], *(args.one[2:] or ["inductor"]))), flush=True)
        return
    from opcov.tracing.serve import ZOO as SERVED

    modes = args.modes.split(",")
    if "serve" in modes and len(modes) > 1:
        sys.exit("compile_reality: --modes serve goes alone (its figures have a section of their own)")
    names = [e.name for e in zoo.ZOO] if args.models == "all" else args.models.split(",")
    unknown = [n for n in names if n not in zoo.BY_NAME]
    if unknown:
        sys.exit(f"compile_reality: not in the curated zoo: {', '.join(unknown)}")
    if modes == ["serve"]:
        if args.models == "all":
            names = [n for n in names if n in SERVED]
        elif not_served := [n for n in names if n not in SERVED]:
            sys.exit(f"compile_reality: no serve mode (not a curated decoder): {', '.join(not_served)}")
    done = {}
    if args.results and os.path.exists(args.results):
        with open(args.results) as f:
            for ln in f:
                r = json.loads(ln)
                if r.get("backend", "inductor") == args.backend:
                    done[r["model"], r["mode"]] = r
    todo = [(n, m) for n in names for m in modes if (n, m) not in done]
    if args.saved_only:
        todo = []
    elif todo and (why := backend_ready(args.backend)):
        sys.exit(f"compile_reality: {why}")
    for name, mode in todo:
        t0 = time.time()
        try:
            proc = subprocess.run(
                [sys.executable, __file__, "--one", name, mode, args.backend],
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
        real.update(model=name, mode=mode, backend=args.backend, seconds=round(time.time() - t0))
        done[name, mode] = real
        if args.results:
            with open(args.results, "a") as f:
                f.write(json.dumps(real) + "\n")
        print(f"{name:15s} {mode:9s} {real['actual']:13s} ({real['seconds']} s) {real['detail'][:100]}", flush=True)
    device = DEVICE_OF[args.backend]
    rows = []
    for name in names:
        for mode in modes:
            if (name, mode) not in done:
                continue
            real = done[name, mode]
            word, says, predicted_breaks = verdict(name, mode, device)
            row = dict(real, predicted=word, says=says, predicted_breaks=predicted_breaks)
            row["agrees"] = agrees(word, real["actual"])
            row["breaks_agree"] = real["actual"] not in ("compiled", "graph_breaks") or (predicted_breaks > 0) == (
                real["actual"] == "graph_breaks"
            )
            rows.append(row)
            mark = {True: "agree", False: "DISAGREE", None: "n/a"}[row["agrees"]]
            print(f"{name:15s} {mode:9s} predicted {says[:40]:40s} actual {real['actual']:13s} {mark}", flush=True)
    print(summary_line(rows))
    if args.doc:
        from docs_page import command_line, write_section

        packages = ("torch", "torch_xla", "transformers") if args.backend == "openxla" else ("torch", "transformers")
        wall = sum(r.get("seconds", 0) for r in rows)  # every child, resumed ones too
        write_section(
            args.doc,
            f"compile-{'serve-' if modes == ['serve'] else ''}reality-{args.backend}",
            section(rows, args.backend, wall),
            command_line(),
            packages=packages,
        )


def summary_line(rows: list) -> str:
    judged = [r for r in rows if r["agrees"] is not None]
    agree = sum(1 for r in judged if r["agrees"])
    false_runs = sum(1 for r in rows if r["predicted"].startswith("runs") and r["agrees"] is False)
    return (
        f"Verdicts that agree: {agree} of {len(judged)} judged"
        + (f" ({100 * agree / len(judged):.0f}%)" if judged else "")
        + f", {agree} of all {len(rows)} pairs run; {len(rows) - len(judged)} not judged (verdict unknown or none, "
        f"or a harness failure); 'runs' for a model that failed to compile or gave wrong values: {false_runs}."
    )


def section(rows: list, backend: str, wall: float) -> str:
    """The section's Markdown: the summary, the confusion table and one line per model and mode."""
    import collections

    table = collections.Counter((r["predicted"], r["actual"]) for r in rows)
    models = sorted({r["model"] for r in rows})
    serving = {r["mode"] for r in rows} == {"serve"}
    what = (
        "generate runs (the forward compiled, 4 runs each: static and dynamic KV cache, greedy and sampling)"
        if serving
        else "(model, mode) pairs"
    )
    lines = [
        f"{len(models)} curated zoo models, {len(rows)} {what} compiled with `{backend}` and judged "
        f"with `opcov check MODEL -b {DEVICE_OF[backend]}{' --mode serve' if serving else ''} --path compile`; "
        f"the real runs took {wall:.0f} s in all"
        + (f" ({untimed} runs have no recorded time)." if (untimed := sum("seconds" not in r for r in rows)) else "."),
        "",
        summary_line(rows),
        f"Graph breaks predicted where the real compile broke (and only there): "
        f"{sum(1 for r in rows if r['breaks_agree'])} of {len(rows)}.",
        "",
        "| verdict \\ real | " + " | ".join(ACTUAL) + " |",
        "| --- | " + " | ".join("---:" for _ in ACTUAL) + " |",
    ]
    for p in sorted({r["predicted"] for r in rows}):
        lines.append(f"| {p} | " + " | ".join(str(table.get((p, a), 0)) for a in ACTUAL) + " |")
    lines += ["", "| model | mode | verdict | real | agrees | detail |", "| --- | --- | --- | --- | --- | --- |"]
    for r in rows:
        mark = {True: "yes", False: "**no**", None: "n/a"}[r["agrees"]]
        detail = r["detail"].replace("|", "\\|")
        lines.append(f"| {r['model']} | {r['mode']} | {r['says']} | {r['actual']} | {mark} | {detail} |")
    return "\n".join(lines)


if __name__ == "__main__":
    main()
