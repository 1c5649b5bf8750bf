"""Run the nn reality sets (scripts/reality/nn_models.py, nn_heldout.py, nn_fresh.py, nn_unseen.py, nn_fifth.py, nn_sixth.py, nn_seventh.py, nn_eighth.py) on PyTorch/XLA's CPU client.

Usage, in the venv scripts/envs/xla.sh makes (torch 2.9 + torch-xla 2.9):

    PJRT_DEVICE=CPU .envs/xla/bin/python scripts/envs/nn_reality.py --set tuning|heldout|fresh|unseen|fifth|sixth|seventh|eighth
        [--models a,b] [--modes inference,training] [--results FILE] [--rerun] [--timeout S]

Each (model, mode) runs in two child processes. First on the CPU, in a process that never imports torch_xla
(it replaces nn.GRU with its own): the factory builds the model and its inputs (seeded), and one step runs:

    inference  model.eval() and torch.no_grad(), parameters left as they are (requiring grad)
    training   model.train(), forward, a scalar loss (the model's own, else the sum of its floating outputs
               as 'opcov trace' takes it, else the real part's sum of complex ones), backward, one SGD step

recording the outputs, and in training the loss, every gradient and every parameter after the step. Then
torch_xla is imported, the model is built again from the same factory (as a user's script builds it,
after the import), given the CPU model's initial weights (state_dict), moved to the xla device with the
same inputs, and the same step runs; every value is compared with the CPU's (shape, dtype and
|xla - cpu| <= 1e-3 + 1e-3 * max|cpu|, as scripts/envs/xla_reality.py). PyTorch/XLA's fallback counters
(torch_xla.debug.metrics.executed_fallback_ops, cleared before the step) name the ops that ran through its
CPU fallback; aten::_local_scalar_dense (item(), a host read) is kept apart. The real outcome is one of

    ran       every value matches CPU, no op through the CPU fallback
    fallback  every value matches CPU, some ops through the CPU fallback (named)
    wrong     it ran, and some value, shape or dtype differs (named; fallbacks named too)
    raised    an exception (its type and first line, and the stage: forward, loss, backward, step, sync),
              a crash or a timeout

(cpu_failed: the CPU reference itself failed, a bug of the model, not of the backend). Records go to
docs/reality/nn-xla.json (tuning), docs/reality/nn-xla-heldout.json (heldout), docs/reality/nn-xla-fresh.json
(fresh), docs/reality/nn-xla-unseen.json (unseen), docs/reality/nn-xla-fifth.json (fifth),
docs/reality/nn-xla-sixth.json (sixth), docs/reality/nn-xla-seventh.json (seventh) or
docs/reality/nn-xla-eighth.json (eighth), with the versions, the host and the date; a (model, mode) already there
is not run again unless --rerun. scripts/nn_accuracy.py reads these files to judge opcov's verdicts; it never
runs the models.
"""

from __future__ import annotations

import argparse
import datetime
import importlib.metadata as md
import json
import os
import platform
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
REALITY = os.path.join(ROOT, "scripts", "reality")
sys.path.insert(0, HERE)
from xla_reality import HOST_READS  # noqa: E402 - the one list of host reads both scripts keep apart

sys.path.insert(0, REALITY)
from sets import REAL_RUNS, SETS, models_of  # noqa: E402 - the sets' one table (scripts/reality/sets.py)

RESULTS = {name: os.path.join(ROOT, path) for name, path in REAL_RUNS.items()}
OUTCOMES = ("ran", "fallback", "wrong", "raised", "cpu_failed")
LR = 0.01  # the SGD step's learning rate


# ---------------------------------------------------------------- the child (one phase of one run)


def _line(exc) -> str:
    text = str(exc).strip().splitlines()
    return (text[0] if text else "")[:300]


def _child(phase: str, module: str, name: str, mode: str, store: str) -> None:
    """One phase: 'cpu' writes the reference to ``store``; 'xla' prints one JSON line with the outcome."""
    import copy

    import torch

    sys.path.insert(0, REALITY)
    factory = getattr(__import__(module), name)
    training = mode == "training"
    stage = ["build"]

    def loss_of(out):
        from opcov.sources.step import output_tensors

        own = out.get("loss") if isinstance(out, dict) else getattr(out, "loss", None)
        if isinstance(own, torch.Tensor):
            return own if own.dim() == 0 else own.sum()
        ts = [t for t in output_tensors(out) if t.requires_grad]
        parts = [t.sum() for t in ts if t.is_floating_point()] or [t.real.sum() for t in ts if t.is_complex()]
        if not parts:
            raise RuntimeError("no output depends on the parameters: training has nothing to backprop")
        return sum(parts[1:], parts[0])

    def step(model, dev, inputs, sync=None):
        from opcov.sources.step import output_tensors

        model.train(training)
        stage[0] = "move"
        x = tuple(t.to(dev) if isinstance(t, torch.Tensor) else t for t in inputs)
        got = []
        stage[0] = "forward"
        if training:
            out = model(*x)
            got += [(f"output {i}", t.detach().clone()) for i, t in enumerate(output_tensors(out))]
            stage[0] = "loss"
            loss = loss_of(out)
            stage[0] = "backward"
            loss.backward()
            got.append(("loss", loss.detach()))
            named = [(n, p) for n, p in model.named_parameters() if p.grad is not None]
            got += [(f"grad {n}", p.grad.clone()) for n, p in named]
            stage[0] = "step"
            torch.optim.SGD([p for _, p in named], lr=LR).step()
            got += [(f"param {n} after SGD", p.detach()) for n, p in named]
        else:
            with torch.no_grad():
                out = model(*x)
            got += [(f"output {i}", t) for i, t in enumerate(output_tensors(out))]
        stage[0] = "sync"
        if sync:
            sync()
        stage[0] = "to cpu"
        return [(n, t.detach().cpu()) for n, t in got]

    if phase == "cpu":
        torch.manual_seed(0)
        model, inputs = factory()
        inputs = tuple(inputs) if isinstance(inputs, (tuple, list)) else (inputs,)
        state = copy.deepcopy(model.state_dict())
        torch.manual_seed(1)
        want = step(model, "cpu", inputs)
        torch.save({"state": state, "inputs": inputs, "want": want}, store)
        return

    import torch_xla
    import torch_xla.debug.metrics as met

    ref = torch.load(store, weights_only=False)
    want = ref["want"]
    notes = []

    def report(**kw):
        fell = sorted(set(met.executed_fallback_ops()))
        kw.setdefault("fallback", [op for op in fell if op not in HOST_READS])
        kw["host_reads"] = [op for op in fell if op in HOST_READS]
        if notes:
            kw["notes"] = notes
        print(json.dumps(kw))
        sys.exit(0)

    dev = torch_xla.device()
    try:
        torch.manual_seed(0)
        model, _ = factory()
        missing, unexpected = model.load_state_dict(ref["state"], strict=False)
        if missing or unexpected:
            notes.append(f"weights: missing {list(missing)}, unexpected {list(unexpected)} in the CPU state_dict")
        model = model.to(dev)
    except Exception as exc:  # noqa: BLE001 - whatever the device does is the outcome
        met.clear_counters()
        report(actual="raised", stage="build", exception=type(exc).__name__, message=_line(exc))
    met.clear_counters()
    try:
        torch.manual_seed(1)
        got = step(model, dev, ref["inputs"], torch_xla.sync)
    except Exception as exc:  # noqa: BLE001
        report(actual="raised", stage=stage[0], exception=type(exc).__name__, message=_line(exc))
    fallback = sorted(set(met.executed_fallback_ops()) - HOST_READS)
    differ, worst, where = [], 0.0, ""
    if [n for n, _ in got] != [n for n, _ in want]:
        names_got, names_want = [n for n, _ in got], [n for n, _ in want]
        differ.append(
            {
                "value": "the values themselves",
                "why": f"{len(got)} values where CPU gives {len(want)}: "
                f"only on xla {sorted(set(names_got) - set(names_want))[:5]}, "
                f"only on CPU {sorted(set(names_want) - set(names_got))[:5]}",
            }
        )
    by_name = dict(got)
    for label, a in want:
        if label not in by_name:
            continue
        b = by_name[label]
        if a.layout != b.layout:
            differ.append({"value": label, "why": f"layout {b.layout}, CPU gives {a.layout}"})
            continue
        if a.is_sparse:
            a, b = a.coalesce().to_dense(), b.coalesce().to_dense()
        if a.shape != b.shape or a.dtype != b.dtype:
            differ.append({"value": label, "why": f"{b.dtype} {tuple(b.shape)}, CPU gives {a.dtype} {tuple(a.shape)}"})
            continue
        if not a.numel():
            continue
        if a.is_complex():
            a, b = torch.view_as_real(a), torch.view_as_real(b)
        if a.is_floating_point():
            a64, b64 = a.double(), b.double()
            tol = 1e-3 + 1e-3 * a64.abs().nan_to_num(0.0).max().item()
            bad = ((a64 - b64).abs().nan_to_num(float("inf")) / tol).max().item()
            same_nan = (a64.isnan() == b64.isnan()).all().item()
            both_nan = (a64.isnan() & b64.isnan()).any().item()
            if both_nan and same_nan:  # NaN where CPU has NaN is the same value
                diff = (a64 - b64).abs()
                bad = (diff[~a64.isnan()] / tol).max().item() if (~a64.isnan()).any() else 0.0
            if not same_nan:
                bad = float("inf")
        else:
            bad = 0.0 if torch.equal(a, b) else float("inf")
        if bad > worst:
            worst, where = bad, label
        if bad > 1:
            differ.append({"value": label, "why": f"{bad:.3g} x tolerance"})
    n = len(want)
    detail = f"{n} values compared; worst {worst:.3g} x tolerance" + (f" ({where})" if where else "")
    if differ:
        report(actual="wrong", fallback=fallback, values=n, worst=worst, differ=differ, detail=detail)
    report(actual="fallback" if fallback else "ran", fallback=fallback, values=n, worst=worst, detail=detail)


# ---------------------------------------------------------------- the parent


def versions() -> dict:
    out = {"python": platform.python_version()}
    for dist in ("torch", "torch-xla", "opcov"):
        try:
            out[dist] = md.version(dist)
        except md.PackageNotFoundError:
            out[dist] = None
    return out


def host() -> str:
    return f"{platform.node() or '?'}: {platform.platform()}, {os.cpu_count()} CPUs"


def run_one(set_name: str, name: str, mode: str, timeout: int) -> dict:
    """The real outcome of one (model, mode): the CPU reference in one child, the xla run in another."""
    env = dict(
        os.environ,
        PJRT_DEVICE=os.environ.get("PJRT_DEVICE", "CPU"),
        TORCH_DEVICE_BACKEND_AUTOLOAD="0",
        PYTHONWARNINGS="ignore",
    )
    module = SETS[set_name]
    t0 = time.time()
    out: dict = {}
    with tempfile.TemporaryDirectory() as tmp:
        store = os.path.join(tmp, "cpu.pt")
        for phase in ("cpu", "xla"):
            cmd = [sys.executable, os.path.abspath(__file__), "--child", phase, module, name, mode, store]
            try:
                r = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=timeout, cwd=ROOT)
            except subprocess.TimeoutExpired:
                out = {"actual": "raised", "stage": phase, "exception": "Timeout"}
                out["message"] = f"the {phase} run timed out after {timeout} s"
                break
            errs = [ln for ln in r.stderr.strip().splitlines() if ln.strip()]
            tail = errs[-1][:300] if errs else "no output"
            if phase == "cpu" and r.returncode != 0:
                out = {"actual": "cpu_failed", "message": f"the CPU reference failed: {tail}"}
                break
            if phase == "xla":
                lines = [ln for ln in r.stdout.splitlines() if ln.startswith("{")]
                if r.returncode != 0 or not lines:
                    out = {"actual": "raised", "stage": "process", "exception": "Crash"}
                    out["message"] = f"exit {r.returncode}: {tail}"
                else:
                    out = json.loads(lines[-1])
    out.setdefault("fallback", [])
    out["seconds"] = round(time.time() - t0, 1)
    out["date"] = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
    return out


def load(path: str) -> dict:
    if os.path.exists(path):
        with open(path) as f:
            return json.load(f)
    return {}


def save(path: str, doc: dict) -> None:
    tmp = path + ".tmp-write"
    with open(tmp, "w") as f:
        json.dump(doc, f, indent=1, sort_keys=True)
        f.write("\n")
    os.replace(tmp, path)


def describe(rec: dict) -> str:
    a = rec["actual"]
    fb = f"; fell back: {', '.join(rec['fallback'])}" if rec.get("fallback") else ""
    if a == "raised":
        return f"raised at {rec.get('stage')}: {rec.get('exception')}: {rec.get('message')}{fb}"
    if a == "wrong":
        vals = ", ".join(d["value"] for d in rec.get("differ", [])[:4])
        more = len(rec.get("differ", [])) - 4
        return f"wrong: {vals}{f' (+{more})' if more > 0 else ''}; {rec.get('detail')}{fb}"
    if a == "cpu_failed":
        return f"cpu_failed: {rec.get('message')}"
    return f"{a}: {rec.get('detail')}{fb}"


def names_of(set_name: str) -> list[str]:
    return list(models_of(set_name))


def main() -> None:
    if len(sys.argv) > 1 and sys.argv[1] == "--child":
        _child(*sys.argv[2:7])
        return
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--set", choices=sorted(SETS), default="tuning")
    p.add_argument("--models", default="", help="comma-separated model names (default: the whole set)")
    p.add_argument("--modes", default="inference,training")
    p.add_argument(
        "--results",
        help="the JSON file of real runs (default: docs/reality/nn-xla[-heldout|-fresh|-unseen|-fifth|-sixth|-seventh|-eighth].json)",
    )
    p.add_argument("--rerun", action="store_true", help="run again (model, mode) pairs the file already holds")
    p.add_argument("--timeout", type=int, default=300, help="seconds per phase of one run (default: %(default)s)")
    args = p.parse_args()
    path = args.results or RESULTS[args.set]
    doc = load(path)
    runs = doc.setdefault("runs", {})
    every = names_of(args.set)
    models = [m for m in args.models.split(",") if m] or every
    unknown = sorted(set(models) - set(every))
    if unknown:
        raise SystemExit(f"not in the {args.set} set: {', '.join(unknown)}")
    doc["about"] = (
        f"Real runs of the nn {args.set} set ({SETS[args.set]}.py) on PyTorch/XLA's CPU client against CPU, "
        "one record per model/mode; written by scripts/envs/nn_reality.py (its docstring says what each field means)"
    )
    start = time.time()
    for name in models:
        for mode in [m for m in args.modes.split(",") if m]:
            key = f"{name}/{mode}"
            if key in runs and not args.rerun:
                continue
            rec = run_one(args.set, name, mode, args.timeout)
            rec["versions"] = versions()
            rec["host"] = host()
            runs[key] = rec
            doc["versions"], doc["host"] = rec["versions"], rec["host"]
            doc["updated"] = rec["date"]
            doc["command"] = "PJRT_DEVICE=CPU .envs/xla/bin/python scripts/envs/nn_reality.py " + " ".join(
                os.path.relpath(a, ROOT) if a.startswith(ROOT) else a for a in sys.argv[1:]
            )
            doc["runs"] = dict(sorted(runs.items()))
            save(path, doc)
            print(f"{key:36} {describe(rec)} [{rec['seconds']:.0f} s]", flush=True)
    sel = [runs[k] for k in runs if k.split("/")[0] in models]
    counts = {o: sum(r["actual"] == o for r in sel) for o in OUTCOMES}
    print(
        f"{len(sel)} runs: " + ", ".join(f"{o} {n}" for o, n in counts.items() if n) + f" ({time.time() - start:.0f} s)"
    )


if __name__ == "__main__":
    main()
