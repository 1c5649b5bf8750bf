"""Run zoo models for real on PyTorch/XLA (PJRT_DEVICE=CPU) and compare with `opcov check MODEL -b xla`.

Usage, in the venv scripts/envs/xla.sh makes (torch 2.9 + torch-xla 2.9 + transformers):

    PJRT_DEVICE=CPU .envs/xla/bin/python scripts/envs/xla_reality.py [--models a,b] [--modes inference,training]

Each (model, mode) runs in a child process: the zoo entry built as its op set was traced (tiny config,
real random weights, seeded), on the xla device: forward, and in training the loss's backward and one
AdamW step, then torch_xla.sync(); then, dropout off, outputs (and loss and gradients) against a CPU
run of the same weights. PyTorch/XLA's CPU fallback counters (torch_xla.debug.metrics) say which ops
ran on the CPU. A verdict agrees when

    runs                <->  ran and matched CPU, no op through the CPU fallback
    runs_with_fallback  <->  ran and matched CPU (the fallback is named either way)
    fails               <->  raised, crashed or gave wrong results

and ``unknown`` claims nothing (counted apart). One line per (model, mode), then the agreement.
"""

import argparse
import json
import os
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
DEFAULT_MODELS = "nn-convnet,nn-lstm,nn-transformer,gpt2,llama"
HOST_READS = {"aten::_local_scalar_dense"}  # item(): a host read through the fallback's kernel

CHILD = r"""
import copy, json, sys
import torch, torch_xla
import torch.nn.functional as F
import torch_xla.debug.metrics as met
from opcov.tracing import models, zoo
from opcov.tracing.realtrace import input_variants
from opcov.tracing.trace import _default_loss

name, mode = sys.argv[1], sys.argv[2]
HOST_READS = set(json.loads(sys.argv[3]))
entry = next(e for e in zoo.ZOO if e.name == name)
torch.manual_seed(0)
built = models.build(entry.spec, models.Sizes(), mode=mode, real=True, zoo_entry=entry)
dtype = getattr(torch, entry.dtype)
orig = built.model.to(dtype)
dev = torch_xla.device()

def move(x, where):
    if isinstance(x, torch.Tensor):
        return x.to(where).to(dtype) if x.is_floating_point() else x.to(where)
    if isinstance(x, dict):
        return {k: move(v, where) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return type(x)(move(v, where) for v in x)
    return x

from opcov.testing.reality import output_tensors as tensors

def on(where, model):
    if where == "cpu":
        return copy.deepcopy(model)
    model = copy.deepcopy(model).to(where)
    if hasattr(model, "tie_weights"):  # .to(xla) replaces parameters, untying tied weights: re-tie
        model.tie_weights()
    return model

def step(model, where, inputs):
    model.train(mode == "training")
    grad = torch.enable_grad() if mode == "training" else torch.no_grad()
    with grad:
        x = move(inputs, where)
        out = model(**x) if isinstance(x, dict) else model(x) if isinstance(x, torch.Tensor) else model(*x)
        loss = None
        if mode == "training":
            loss = _default_loss(torch, out)
            loss.backward()
            params = [p for p in model.parameters() if p.grad is not None]
            torch.optim.AdamW(params, lr=1e-3).step()
    if where != "cpu":
        torch_xla.sync()
    return out, loss

def line(exc):
    return (type(exc).__name__ + ": " + (str(exc).strip().splitlines() or [""])[0])[:300]

def fell():
    return sorted(set(met.executed_fallback_ops()) - HOST_READS)

variants = input_variants(torch, built)
met.clear_counters()
for variant, inputs in variants:
    try:
        torch.manual_seed(1)
        step(on(dev, orig), dev, inputs)
    except Exception as exc:
        print(json.dumps({"actual": "raised", "detail": line(exc), "fallback": fell()}))
        sys.exit(0)
fallback = fell()
F.dropout = lambda input, p=0.5, training=True, inplace=False: input
for m in orig.modules():  # nn.LSTM/GRU drop out between layers inside ATen's kernel, past F.dropout
    if isinstance(m, torch.nn.RNNBase):
        m.dropout = 0.0
_sdpa = F.scaled_dot_product_attention
F.scaled_dot_product_attention = lambda q, k, v, attn_mask=None, dropout_p=0.0, *a, **kw: _sdpa(q, k, v, attn_mask, 0.0, *a, **kw)
pairs = []
for variant, inputs in variants:
    ref, got_model = on("cpu", orig), on(dev, orig)
    torch.manual_seed(2)
    try:
        want, want_loss = step(ref, "cpu", inputs)
    except Exception as exc:  # torch_xla replaces nn.GRU with its scan version, which refuses CPU tensors
        print(json.dumps({"actual": "ran", "fallback": fallback,
                          "detail": "ran; values unchecked: the CPU reference failed with torch_xla imported: " + line(exc)}))
        sys.exit(0)
    try:
        torch.manual_seed(2)
        got, loss = step(got_model, dev, inputs)
    except Exception as exc:
        print(json.dumps({"actual": "raised", "detail": "with dropout off: " + line(exc), "fallback": fallback}))
        sys.exit(0)
    pairs += list(zip(tensors(want), tensors(got)))
    if mode == "training":
        pairs.append((want_loss, loss))
        pairs += [(a.grad, b.grad) for a, b in zip(ref.parameters(), got_model.parameters())]
worst = 0.0
for a, b in pairs:
    if a is None or b is None:
        continue
    b = b.detach().cpu().to(a.dtype)
    if a.shape != b.shape:
        print(json.dumps({"actual": "wrong", "detail": f"shape {tuple(b.shape)} != {tuple(a.shape)}",
                          "fallback": fallback}))
        sys.exit(0)
    if a.is_floating_point() and a.numel():
        tol = 1e-3 + 1e-3 * a.detach().abs().max().item()
        worst = max(worst, (a.detach() - b).abs().nan_to_num(0).max().item() / tol)
print(json.dumps({"actual": "ran" if worst <= 1 else "wrong", "fallback": fallback,
                  "detail": f"max error {worst:.3g} x tolerance vs a CPU run of the same weights"}))
"""


def run_for_real(model: str, mode: str, timeout: int) -> dict:
    env = dict(
        os.environ,
        PJRT_DEVICE=os.environ.get("PJRT_DEVICE", "CPU"),
        TORCH_DEVICE_BACKEND_AUTOLOAD="0",
        PYTHONPATH=os.path.join(ROOT, "src") + os.pathsep + os.environ.get("PYTHONPATH", ""),
    )
    try:
        r = subprocess.run(
            [sys.executable, "-c", CHILD, model, mode, json.dumps(sorted(HOST_READS))],
            capture_output=True,
            text=True,
            env=env,
            timeout=timeout,
            cwd=ROOT,
        )
    except subprocess.TimeoutExpired:
        return {"actual": "crashed", "detail": f"timed out after {timeout} s", "fallback": []}
    lines = [ln for ln in r.stdout.splitlines() if ln.startswith("{")]
    if r.returncode != 0 or not lines:
        tail = (r.stderr.strip().splitlines() or ["no output"])[-1]
        return {"actual": "crashed", "detail": f"exit {r.returncode}: {tail[:300]}", "fallback": []}
    return json.loads(lines[-1])


def verdict(model: str, mode: str, coverage: str) -> tuple[str, str]:
    r = subprocess.run(
        [
            sys.executable,
            "-m",
            "opcov",
            "check",
            model,
            "-b",
            "xla",
            "--mode",
            mode,
            "--coverage",
            coverage,
            "--format",
            "json",
        ],
        capture_output=True,
        text=True,
        cwd=ROOT,
        env=dict(os.environ, PYTHONPATH=os.path.join(ROOT, "src")),
    )
    try:
        doc = json.loads(r.stdout)
    except ValueError:
        return "error", (r.stderr or r.stdout).strip().splitlines()[-1:][0] if (r.stderr or r.stdout).strip() else "?"
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
    return v["verdict"], str(v.get("evidence", ""))


def agrees(v: str, real: dict) -> str:
    if v == "unknown":
        return "unknown"
    ran = real["actual"] == "ran"
    if v == "runs":
        return "agree" if ran and not real["fallback"] else "DISAGREE"
    if v == "runs_with_fallback":
        return "agree" if ran else "DISAGREE"
    if v == "fails":
        return "agree" if not ran else "DISAGREE"
    return "DISAGREE"


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--models", default=DEFAULT_MODELS, help="comma-separated zoo names")
    p.add_argument("--modes", default="inference,training")
    p.add_argument("--coverage", default=os.path.join(ROOT, "coverage"))
    p.add_argument("--timeout", type=int, default=900, help="seconds per real run (default: %(default)s)")
    p.add_argument(
        "--results",
        help="JSON file of real runs: those in it are not run again, new ones are added "
        "(the verdicts are always read anew, so a rerun after new coverage data costs no real run)",
    )
    args = p.parse_args()
    saved = {}
    if args.results and os.path.exists(args.results):
        with open(args.results) as f:
            saved = json.load(f)
    counts: dict = {}
    start = time.time()
    for model in [m for m in args.models.split(",") if m]:
        for mode in [m for m in args.modes.split(",") if m]:
            t0 = time.time()
            key = f"{model}/{mode}"
            real = saved.get(key) or run_for_real(model, mode, args.timeout)
            if args.results and key not in saved:
                saved[key] = real
                with open(args.results, "w") as f:
                    json.dump(saved, f, indent=1, sort_keys=True)
            v, evidence = verdict(model, mode, args.coverage)
            a = agrees(v, real)
            counts[a] = counts.get(a, 0) + 1
            fb = f"; fell back: {', '.join(real['fallback'])}" if real.get("fallback") else ""
            print(
                f"{model:16} {mode:9} check: {v} ({evidence}) | real: {real['actual']}: {real['detail']}{fb} "
                f"| {a} [{time.time() - t0:.0f} s]",
                flush=True,
            )
    judged = counts.get("agree", 0) + counts.get("DISAGREE", 0)
    print(
        f"agreement: {counts.get('agree', 0)} of {judged} judged ({counts.get('unknown', 0)} unknown) "
        f"in {time.time() - start:.0f} s"
    )


if __name__ == "__main__":
    main()
