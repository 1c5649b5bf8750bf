"""Run the curated zoo for real on PyTorch/XLA (PJRT_DEVICE=CPU) and hold `opcov check MODEL -b xla` against it.

Usage, in the venv scripts/envs/xla.sh makes (torch 2.9 + torch-xla 2.9 + transformers):

    PJRT_DEVICE=CPU .envs/xla/bin/python scripts/envs/xla_reality.py [--models a,b] [--modes inference,training]
        [--results FILE] [--write-docs docs/accuracy.md]

Each (model, mode) runs in a child process. First, before torch_xla is imported (it replaces nn.GRU with
its own scan-based GRU, which refuses CPU tensors), the zoo entry is built as its op set was traced (tiny
config, real random weights, seeded) and stepped on the CPU with dropout off: the outputs, and in training
the loss, every gradient and every parameter after one AdamW step. Then torch_xla is imported, the model
is built again (as a user's script builds it, after the import) with the CPU model's weights, and each input
variant the op set was traced with is stepped on the xla device with dropout off, every value compared
with the CPU's (a step that raises there raised; --as-is steps it first as a user runs it, dropout on). PyTorch/XLA's own fallback counters
(torch_xla.debug.metrics) name the ops that ran on the CPU.

With --device cpu the second run is this Python's CPU again (the main venv will do: no torch_xla), judged
with ``-b cpu``: CPU is the reference, so that measures whether the cpu verdicts claim what a real run does.

The real outcome is one of

    ran      every value within tolerance of CPU (|xla - cpu| <= 1e-3 + 1e-3 * max|cpu| per tensor)
    wrong    it ran, and some value (or shape) differs
    raised   an exception, a crash or a timeout

and the verdict one of runs, runs_with_fallback, runs_with_value_note (runs; values may differ), unknown,
fails. A verdict agrees when

    runs                  <->  ran, no op through the CPU fallback
    runs_with_fallback    <->  ran (the fallback is named either way)
    runs_with_value_note  <->  ran or wrong (it says the model runs and its values may differ)
    fails                 <->  raised

and ``unknown`` agrees with nothing (it claims nothing). The confusion table (verdict x real outcome) is
printed, and with --write-docs written into that page between this script's markers, replacing what a
previous run wrote there and nothing else.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
HOST_READS = {"aten::_local_scalar_dense"}  # item(): a host read through the fallback's kernel
REAL = ("ran", "wrong", "raised")
REAL_LABEL = {"ran": "ran, matched CPU", "wrong": "ran, wrong values", "raised": "raised"}
VERDICTS = ("runs", "runs_with_fallback", "runs_with_value_note", "unknown", "fails")
BEGIN = "<!-- xla-reality: begin (written by scripts/envs/xla_reality.py; edits here are replaced) -->"
END = "<!-- xla-reality: end -->"
# --modes serve has a section of its own
SERVE_BEGIN = (
    "<!-- xla-serve-reality: begin (written by scripts/envs/xla_reality.py --modes serve; edits here are replaced) -->"
)
SERVE_END = "<!-- xla-serve-reality: end -->"


def markers(device: str, serve: bool) -> tuple[str, str]:
    """The begin and end markers of the section a run writes (each device and serve apart)."""
    if device == "xla":
        return (SERVE_BEGIN, SERVE_END) if serve else (BEGIN, END)
    what = f"{device}-serve-reality" if serve else f"{device}-reality"
    how = f"--device {device}" + (" --modes serve" if serve else "")
    return (
        f"<!-- {what}: begin (written by scripts/envs/xla_reality.py {how}; edits here are replaced) -->",
        f"<!-- {what}: end -->",
    )


SERVE_INTRO = (
    "Each curated decoder with a serve op set ran transformers' `generate` on the xla device as serve mode traces "
    "it (`opcov.sources.generate.RUNS`: a static and a dynamic KV cache, greedy and sampling, an 8-token prompt, 4 "
    "new tokens), with the weights of a CPU run of the same calls: a greedy run's tokens must equal CPU's and each "
    "step's logits be within tolerance, a sampling run (its draws come from each device's own generator) must give "
    "tokens of the same shape. The verdict is `opcov check MODEL -b xla --mode serve` from coverage data, and "
    "agrees as below."
)

CHILD = r"""
import copy, json, sys
import torch
import torch.nn.functional as F
from opcov.sources import models, zoo
from opcov.sources.step import default_loss, input_variants
from opcov.sources.step import output_tensors as tensors

name, mode, phase, store = sys.argv[1], sys.argv[2], sys.argv[4], sys.argv[5]
AS_IS = sys.argv[6] == "1"
HOST_READS = set(json.loads(sys.argv[3]))
training = mode == "training"
serving = mode == "serve"
LR = 1e-3
entry = next(e for e in zoo.ZOO if e.name == name)
dtype = getattr(torch, entry.dtype)

def build():
    torch.manual_seed(0)
    return models.build(entry.spec, models.Sizes(), mode="inference" if serving else mode, real=True, zoo_entry=entry)

def move(x, where):
    if isinstance(x, torch.Tensor):
        return x.to(where).to(dtype) if x.is_floating_point() else x.to(where)
    if isinstance(x, dict):
        return {k: move(v, where) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return type(x)(move(v, where) for v in x)
    return x

def step(model, where, inputs, sync=None):
    # (named values): outputs, and in training the loss, each gradient and each parameter after AdamW
    model.train(training)
    with torch.enable_grad() if training else torch.no_grad():
        x = move(inputs, where)
        out = model(**x) if isinstance(x, dict) else model(x) if isinstance(x, torch.Tensor) else model(*x)
        got = [(f"output {i}", t) for i, t in enumerate(tensors(out))]
        if training:
            loss = default_loss(torch, out)
            loss.backward()
            got.append(("loss", loss))
            named = [(n, p) for n, p in model.named_parameters() if p.grad is not None]
            got += [(f"grad {n}", p.grad) for n, p in named]
            torch.optim.AdamW([p for _, p in named], lr=LR).step()
            got += [(f"param {n} after AdamW", p) for n, p in named]
    if sync:
        sync()
    return [(n, t.detach().cpu().clone()) for n, t in got]

def generate(model, where, inputs, sync=None):
    # (named values) of serve mode's generate runs, as 'opcov run --mode serve' compares them
    # (opcov.sources.generate.run_values: greedy runs' tokens and logits, sampling runs' tokens' shape)
    from opcov.sources import generate as serve
    return serve.run_values(torch, model, move(inputs, where), sync=sync)

if serving:
    step = generate

def line(exc):
    return (type(exc).__name__ + ": " + (str(exc).strip().splitlines() or [""])[0])[:300]

def dropout_off():
    F.dropout = lambda input, p=0.5, training=True, inplace=False: input
    sdpa = F.scaled_dot_product_attention
    F.scaled_dot_product_attention = lambda q, k, v, attn_mask=None, dropout_p=0.0, *a, **kw: sdpa(q, k, v, attn_mask, 0.0, *a, **kw)

def no_rnn_dropout(model):  # nn.LSTM/GRU drop out between layers inside ATen's kernel, past F.dropout
    for m in model.modules():
        if isinstance(m, torch.nn.RNNBase):
            m.dropout = 0.0

if phase == "cpu":  # 1. The CPU reference, in a process that never imports torch_xla.
    built = build()
    orig = built.model.to(dtype)
    no_rnn_dropout(orig)
    if serving:  # the prompt serve mode traces with (opcov.sources.generate.prompt_inputs)
        from opcov.sources import generate as serve
        variants = [("given", serve.prompt_inputs(torch, built.inputs, getattr(built.model, "config", None)))]
    else:
        variants = input_variants(torch, built)
    dropout_off()
    want = []
    for variant, inputs in variants:
        torch.manual_seed(2)
        want.append(step(copy.deepcopy(orig), "cpu", inputs))
    torch.save({"state": orig.state_dict(), "variants": variants, "want": want}, store)
    sys.exit(0)

# 2. The device's run, with a model built as a user's script builds it (after the import), the CPU's weights.
if phase == "xla":
    import torch_xla
    import torch_xla.debug.metrics as met
    dev, sync = torch_xla.device(), torch_xla.sync

    def fell():
        return sorted(set(met.executed_fallback_ops()) - HOST_READS)

    met.clear_counters()
else:  # --device cpu: the reference device itself, in a second process (no fallback to count)
    dev, sync = torch.device("cpu"), None

    def fell():
        return []
ref = torch.load(store, weights_only=False)
variants, want = ref["variants"], ref["want"]
model = build().model.to(dtype)
model.load_state_dict(ref["state"], strict=False)

def on_xla():
    m = copy.deepcopy(model).to(dev)
    if hasattr(m, "tie_weights"):  # .to(xla) replaces parameters, untying tied weights: re-tie
        m.tie_weights()
    return m

def report(**kw):
    kw.setdefault("fallback", fell())
    print(json.dumps(kw))
    sys.exit(0)

if AS_IS:  # first as the user runs it, dropout on: does it raise?
    for variant, inputs in variants:
        try:
            torch.manual_seed(1)
            step(on_xla(), dev, inputs, sync)
        except Exception as exc:
            report(actual="raised", detail=f"{variant}: {line(exc)}")
dropout_off()
no_rnn_dropout(model)
worst, where, got_all = 0.0, "", []
for variant, inputs in variants:
    try:
        torch.manual_seed(2)
        got_all.append(step(on_xla(), dev, inputs, sync))
    except Exception as exc:
        report(actual="raised", detail=f"{variant}, dropout off: {line(exc)}")
fallback = fell()
for (variant, inputs), ref, got in zip(variants, want, got_all):
    if [n for n, _ in got] != [n for n, _ in ref]:
        report(actual="wrong", detail=f"{variant}: {len(got)} values where CPU gives {len(ref)}", fallback=fallback)
    grads = {label[len("grad ") :]: a.double() for label, a in ref if label.startswith("grad ")}
    for (label, a), (_, b) in zip(ref, got):
        if a.shape != b.shape or a.dtype != b.dtype:
            report(actual="wrong", fallback=fallback,
                   detail=f"{variant}: {label}: {b.dtype} {tuple(b.shape)}, CPU gives {a.dtype} {tuple(a.shape)}")
        if a.is_floating_point() and a.numel():
            a64, b64 = a.double(), b.double()
            tol = 1e-3 + 1e-3 * a64.abs().max().item()
            if label.startswith("param "):  # AdamW's first step moves each element by lr * sign(grad): where
                # CPU's gradient is within its tolerance of 0 the sign is not settled, so allow 2 * lr there
                g = grads[label[len("param ") : -len(" after AdamW")]]
                tol = tol + 2 * LR * (g.abs() <= 1e-3 + 1e-3 * g.abs().max()).double()
            bad = ((a64 - b64).abs().nan_to_num(float("inf")) / tol).max().item()
            if (a64.isnan() != b64.isnan()).any():
                bad = float("inf")
        elif a.numel():
            bad = 0.0 if torch.equal(a, b) else float("inf")
        else:
            bad = 0.0
        if bad > worst:
            worst, where = bad, f"{variant}: {label}"
n = sum(len(r) for r in want)
actual = "ran" if worst <= 1 else "wrong"
report(actual=actual, fallback=fallback, values=n,
       detail=f"{n} values compared; worst {worst:.3g} x tolerance" + (f" ({where})" if where else ""))
"""


def run_for_real(model: str, mode: str, timeout: int, as_is: bool = False, device: str = "xla") -> dict:
    """The real outcome of one (model, mode): the CPU reference in one child, the device's run in another."""
    env = dict(
        os.environ,
        PJRT_DEVICE=os.environ.get("PJRT_DEVICE", "CPU"),
        TORCH_DEVICE_BACKEND_AUTOLOAD="0",
        PYTHONPATH=os.path.join(ROOT, "src") + os.pathsep + os.environ.get("PYTHONPATH", ""),
    )
    t0 = time.time()
    with tempfile.TemporaryDirectory() as tmp:
        store = os.path.join(tmp, "cpu.pt")
        for phase in ("cpu", "xla" if device == "xla" else "again"):
            try:
                r = subprocess.run(
                    [sys.executable, "-c", CHILD, model, mode, json.dumps(sorted(HOST_READS)), phase, store]
                    + ["1" if as_is else "0"],
                    capture_output=True,
                    text=True,
                    env=env,
                    timeout=timeout,
                    cwd=ROOT,
                )
            except subprocess.TimeoutExpired:
                return {"actual": "raised", "detail": f"{phase} run timed out after {timeout} s", "fallback": []}
            tail = (r.stderr.strip().splitlines() or ["no output"])[-1]
            if phase == "cpu" and r.returncode != 0:
                return {"actual": "cpu_failed", "detail": f"the CPU reference failed: {tail[:300]}", "fallback": []}
    lines = [ln for ln in r.stdout.splitlines() if ln.startswith("{")]
    if r.returncode != 0 or not lines:
        out = {"actual": "raised", "detail": f"crashed: exit {r.returncode}: {tail[:300]}", "fallback": []}
    else:
        out = json.loads(lines[-1])
    out["seconds"] = round(time.time() - t0, 1)
    return out


def verdict(model: str, mode: str, coverage: str, backend: str = "xla") -> tuple[str, str]:
    """(verdict word, what it says) of ``opcov check MODEL -b BACKEND --mode MODE --format json``."""
    r = subprocess.run(
        # --no-replay: the verdict from the committed data (the zoo's own calls are in it, replayed by the
        # probe's --traces); a replay here would judge the model by a second run on the device
        [
            sys.executable,
            "-m",
            "opcov",
            "check",
            model,
            "-b",
            backend,
            "--mode",
            mode,
            "--coverage",
            coverage,
            "--no-replay",
        ]
        + ["--format", "json"],
        capture_output=True,
        text=True,
        cwd=ROOT,
        env=dict(os.environ, PYTHONPATH=os.path.join(ROOT, "src"), TORCH_DEVICE_BACKEND_AUTOLOAD="0"),
    )
    try:
        doc = json.loads(r.stdout)
    except ValueError:
        text = (r.stderr or r.stdout).strip().splitlines()
        return "error", text[-1] if text else "?"
    found = []

    def walk(x):
        if isinstance(x, dict):
            if "verdict" in x and isinstance(x["verdict"], str):
                found.append(x)
            for v in x.values():
                walk(v)
        elif isinstance(x, list):
            for v in x:
                walk(v)

    walk(doc)
    if not found:
        return "error", "no verdict in opcov check's JSON"
    v = found[0]
    predicted = (v.get("observed") or {}).get("predicted")
    if isinstance(predicted, dict) and predicted.get("verdict"):
        # a committed observed run (opcov run) decides check's verdict; judging that against a real run would
        # only compare two runs: the verdict measured here is the one from coverage data, which it predicted
        return str(predicted["verdict"]), str(predicted.get("says") or predicted.get("evidence", ""))
    return v["verdict"], str(v.get("says") or v.get("evidence", ""))


def agrees(v: str, real: dict) -> bool:
    """Whether verdict ``v`` says what the real run did (see the module docstring)."""
    actual = real["actual"]
    if v == "runs":
        return actual == "ran" and not real.get("fallback")
    if v == "runs_with_fallback":
        return actual == "ran"
    if v == "runs_with_value_note":
        return actual in ("ran", "wrong")
    if v == "fails":
        return actual == "raised"
    return False


def table(rows: list) -> list[str]:
    """The confusion table in Markdown: verdict x real outcome, counts of (model, mode)."""
    out = ["| verdict \\ real run | " + " | ".join(REAL_LABEL[r] for r in REAL) + " | total |", "|---" * 5 + "|"]
    for v in VERDICTS + tuple(sorted({r["verdict"] for r in rows} - set(VERDICTS))):
        n = [sum(1 for r in rows if r["verdict"] == v and r["real"]["actual"] == a) for a in REAL]
        out.append(f"| {v} | " + " | ".join(str(x) for x in n) + f" | {sum(n)} |")
    n = [sum(1 for r in rows if r["real"]["actual"] == a) for a in REAL]
    out.append("| total | " + " | ".join(str(x) for x in n) + f" | {len(rows)} |")
    return out


def summary(rows: list) -> dict:
    total = len(rows)
    agree = sum(r["agree"] for r in rows)
    unknown = sum(r["verdict"] == "unknown" for r in rows)
    false_runs = sum(r["verdict"] in ("runs", "runs_with_fallback") and r["real"]["actual"] != "ran" for r in rows)
    return {"total": total, "agree": agree, "unknown": unknown, "false_runs": false_runs}


CPU_INTRO = (
    "CPU is opcov's reference device: the second run is this Python's CPU again, in a process of its own, with "
    "the first run's weights, so this measures whether the verdicts on cpu claim what a real run does (no "
    "`fails` or `unknown` for a model that runs, no `runs` for one that raises), not a device's values."
)


def section(rows: list, command: str, seconds: float, skipped=(), serve: bool = False, device: str = "xla") -> str:
    sys.path.insert(0, os.path.join(ROOT, "benchmarks"))
    from docs_page import stamp

    s = summary(rows)
    pct = (lambda n: f"{100 * n / s['total']:.0f}%") if s["total"] else (lambda n: "-")
    intro = (
        "Each curated zoo model in each mode ran on the xla device (forward; in training also the loss's "
        "backward and one AdamW step) and every value it produced (outputs, loss, gradients, parameters after "
        "the step) was compared with a CPU run of the same weights; the verdict is `opcov check MODEL -b xla "
        "--mode MODE` from coverage data (where a committed observed run decides check's verdict, the verdict "
        "from coverage data it keeps as `predicted`)."
    )
    begin, end = markers(device, serve)
    title = "PyTorch/XLA" if device == "xla" else device.upper() if device == "cpu" else device
    where = (
        f"PJRT_DEVICE={os.environ.get('PJRT_DEVICE', 'CPU')} (XLA's CPU client); "
        if device == "xla"
        else "This machine's CPU (no torch_xla); "
    )
    body = SERVE_INTRO if serve else intro
    if device != "xla":
        body = body.replace("the xla device", "the CPU").replace("-b xla", f"-b {device}") + " " + CPU_INTRO
    lines = [
        begin,
        f"## {title}: serve verdicts against real generate runs"
        if serve
        else f"## {title}: verdicts against real runs",
        "",
        # the stamp every measuring script writes (benchmarks/docs_page.py: command, date, versions, machine)
        stamp(command, ("torch", "torch_xla", "transformers") if device == "xla" else ("torch", "transformers")) + "  ",
        f"{where}real runs "
        f"{sum(float(r['real'].get('seconds') or 0) for r in rows):.0f} s in all (this pass {seconds:.0f} s)",
        "",
        body + " A verdict agrees when `runs` meets a run that matched CPU with no op through the CPU "
        "fallback, `runs_with_fallback` one that matched CPU, `runs_with_value_note` one that ran (matched or "
        "not), `fails` one that raised; `unknown` agrees with nothing.",
        "",
        *table(rows),
        "",
        *(
            [
                f"Not run (--saved-only: no real run saved): {len(skipped)} of {len(rows) + len(skipped)} "
                f"(model, mode) pairs: {', '.join(skipped)}.",
                "",
            ]
            if skipped
            else []
        ),
        f"Agree: {s['agree']} of {s['total']} ({pct(s['agree'])}); unknown: {s['unknown']} ({pct(s['unknown'])}); "
        f"`runs` for a model that raised or gave wrong values: {s['false_runs']}.",
        "",
        "| model | mode | verdict | real run | agrees |",
        "|---|---|---|---|---|",
    ]
    for r in rows:
        real = r["real"]
        fb = f"; fell back: {', '.join(real['fallback'])}" if real.get("fallback") else ""
        detail = f"{real['actual']}: {real['detail']}{fb}".replace("|", "\\|")
        lines.append(f"| {r['model']} | {r['mode']} | {r['verdict']} | {detail} | {'yes' if r['agree'] else 'no'} |")
    lines.append(end)
    return "\n".join(lines) + "\n"


def write_docs(path: str, text: str, begin: str = BEGIN, end: str = END) -> None:
    """Replace this script's section of ``path`` (between its markers) with ``text``; append it when the
    page has none; other sections are left as they are."""
    old = open(path).read() if os.path.exists(path) else "# Accuracy\n\n"
    if begin in old and end in old:
        head, rest = old.split(begin, 1)
        tail = rest.split(end, 1)[1].lstrip("\n")
        new = head + text.rstrip("\n") + "\n" + ("\n" + tail if tail else "")
    else:
        new = old.rstrip("\n") + "\n\n" + text
    with open(path, "w") as f:
        f.write(new)


def curated() -> list[str]:
    sys.path.insert(0, os.path.join(ROOT, "src"))
    from opcov.sources import zoo

    return [e.name for e in zoo.ZOO]


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--models", default="", help="comma-separated zoo names (default: the curated zoo)")
    p.add_argument(
        "--modes",
        default="inference,training",
        help="inference, training, or serve alone (generate's runs; the decoders with a serve op set, a section "
        "of its own)",
    )
    p.add_argument("--coverage", default=os.path.join(ROOT, "coverage"))
    p.add_argument(
        "--device",
        choices=("xla", "cpu"),
        default="xla",
        help="where the second run goes: xla (PyTorch/XLA, judged -b xla) or cpu (this Python's CPU again, "
        "judged -b cpu; runs without torch_xla)",
    )
    p.add_argument("--timeout", type=int, default=900, help="seconds per real run (default: %(default)s)")
    p.add_argument(
        "--results",
        help="JSON file of real runs: those in it are not run again, new ones are added "
        "(the verdicts are always read anew, so a rerun after new coverage data costs no real run)",
    )
    p.add_argument(
        "--as-is",
        action="store_true",
        help="step each model once more first, dropout on as a user runs it, to see whether that raises "
        "(default: the dropout-off steps that are compared decide whether it raises too; half the compiles)",
    )
    p.add_argument(
        "--saved-only",
        action="store_true",
        help="judge only the (model, mode) pairs --results already holds; run nothing (the table says how many "
        "of the selection that is)",
    )
    p.add_argument("--write-docs", metavar="PAGE", help="write the confusion table into PAGE (its own section)")
    args = p.parse_args()
    saved = {}
    if args.results and os.path.exists(args.results):
        with open(args.results) as f:
            saved = json.load(f)
    rows, skipped = [], []
    start = time.time()
    models = [m for m in args.models.split(",") if m] or curated()
    if args.modes == "serve":  # the decoders serve mode traced
        models = [m for m in models if os.path.exists(os.path.join(args.coverage, "models", m, "serve.yaml"))]
    elif "serve" in args.modes.split(","):
        p.error("--modes serve is a run of its own (its section and results file apart)")
    for model in models:
        for mode in [m for m in args.modes.split(",") if m]:
            t0 = time.time()
            key = f"{model}/{mode}"
            if args.saved_only and key not in saved:
                skipped.append(key)
                continue
            real = saved.get(key) or run_for_real(model, mode, args.timeout, args.as_is, args.device)
            if args.results and key not in saved:
                saved[key] = real
                with open(args.results, "w") as f:
                    json.dump(saved, f, indent=1, sort_keys=True)
            v, says = verdict(model, mode, args.coverage, args.device)
            row = {"model": model, "mode": mode, "verdict": v, "says": says, "real": real, "agree": agrees(v, real)}
            rows.append(row)
            fb = f"; fell back: {', '.join(real['fallback'])}" if real.get("fallback") else ""
            print(
                f"{model:16} {mode:9} check: {v} ({says}) | real: {real['actual']}: {real['detail']}{fb} "
                f"| {'agree' if row['agree'] else 'DISAGREE'} [{time.time() - t0:.0f} s]",
                flush=True,
            )
    s = summary(rows)
    print("\n".join(table(rows)))
    if skipped:
        print(f"not run (--saved-only): {len(skipped)}: {', '.join(skipped)}")
    print(f"agree: {s['agree']} of {s['total']}; unknown {s['unknown']}; false runs {s['false_runs']}")
    if args.write_docs:
        command = "python scripts/envs/xla_reality.py " + " ".join(
            a if not a.startswith(ROOT) else os.path.relpath(a, ROOT) for a in sys.argv[1:]
        )
        serve = args.modes == "serve"
        text = section(rows, command, time.time() - start, skipped, serve=serve, device=args.device)
        write_docs(args.write_docs, text, *markers(args.device, serve))


if __name__ == "__main__":
    main()
