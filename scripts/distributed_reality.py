"""Sharded training steps against real runs: does 'opcov check OPSET -b cpu' agree with a real N-process
gloo step on CPU (N = 2 and 4)?

For each world size N, model and style (DDP, FSDP2, TP) this script
1. traces the step as rank 0 of N on torch's fake process group ('opcov trace MODEL --parallel STYLE
   --world-size N'), and judges it on cpu ('opcov check OPSET -b cpu --format json');
2. runs the same step for real: N processes on a gloo group (a file store), the model built with real
   weights (the same seed on every rank, so every rank starts from the same parameters), wrapped as the
   tracer wraps it (DDP with its built-in hook, fully_shard on every block and the root, the model's own
   tensor-parallel plan, with the head counts the trace set so that the heads divide by N), the same
   inputs on every rank, forward, loss, backward and AdamW(foreach=True); a dispatch mode on rank 0 names
   every c10d op it dispatched with its reduce op;
3. compares: the step ran or raised; rank 0's parameters after the step against one single-process step
   on the same batch (every rank sees the same batch, so the averaged gradients are that batch's); the
   collectives (c10d op, reduce op) the real run dispatched against those the op set records.

A verdict agrees when it says the step runs (on any evidence) and the real step ran with parameters
within 1e-5 of the single-process step, or it says fails and the real step raised. A step that cannot be
traced at a world size (say, a dimension tensor parallelism cannot split) is a row that says why, never
left out. With --write-docs the tables replace their own section of docs/accuracy.md. On a machine with
fewer cores than N the ranks share them: gloo's collectives still run, only slower (2 and 4 ranks took
about 12 minutes on 2 cores). Run from the repository root:

    TORCH_DEVICE_BACKEND_AUTOLOAD=0 .venv/bin/python scripts/distributed_reality.py --write-docs
"""

from __future__ import annotations

import argparse
import datetime as _dt
import json
import os
import shlex
import subprocess
import sys
import tempfile
import textwrap
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PAGE = os.path.join(ROOT, "docs", "accuracy.md")
BEGIN = "<!-- distributed-reality: begin (written by scripts/distributed_reality.py; edits here are replaced) -->"
END = "<!-- distributed-reality: end -->"
MODELS = ("llama", "gemma")
STYLES = ("ddp", "fsdp2", "tp")
# (factory, style): a step that must fail on every device (scripts/reality/sharded_models.py)
FACTORIES = (("sharded_models:bucketed", "tp"),)
WORLD_SIZES = (2, 4)
TOLERANCE = 1e-5
COMMAND = "TORCH_DEVICE_BACKEND_AUTOLOAD=0 .venv/bin/python scripts/distributed_reality.py --write-docs"

# One rank of the real step (run as 'python -c RANK_STEP ...'): writes rank 0's result as JSON.
RANK_STEP = r"""
import json, sys, torch, torch.distributed as dist
from torch.utils._python_dispatch import TorchDispatchMode
from opcov.sources import models, zoo
from opcov.sources.step import default_loss
from opcov.tracing import distributed as sharded

rank, world, store, name, style, out = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3], sys.argv[4], sys.argv[5], sys.argv[6]
dist.init_process_group("gloo", store=dist.FileStore(store, world), rank=rank, world_size=world)
entry = zoo.BY_NAME.get(name)

def build():
    torch.manual_seed(0)
    sizes = models.Sizes(overrides=json.loads(sys.argv[7]))
    return models.build(entry.spec if entry else name, sizes, mode="training", real=True, zoo_entry=entry)

def step(module, inputs):
    module.train(True)
    out = module(**inputs) if isinstance(inputs, dict) else module(*inputs)
    loss = default_loss(torch, out)
    loss.backward()
    params = [p for p in module.parameters() if p.grad is not None]
    from torch.distributed.tensor import DTensor
    groups = [{"params": g} for g in ([p for p in params if isinstance(p, DTensor)], [p for p in params if not isinstance(p, DTensor)]) if g]
    torch.optim.AdamW(groups, lr=1e-3, foreach=True).step()
    return float(loss.detach().full_tensor() if hasattr(loss, "full_tensor") else loss.detach())

class Seen(TorchDispatchMode):
    def __init__(self):
        super().__init__(); self.calls = set()
    def __torch_dispatch__(self, f, types, a=(), kw=None):
        if f.namespace == "c10d":
            ops = [sharded._reduce_text(x) for x in a if isinstance(x, torch.ScriptObject) and "ReduceOp" in str(x._type())]
            self.calls.add((f"c10d::{f._opname}", ops[0] if ops else ""))
        if f.namespace == "_c10d_functional" and f._opname != "wait_tensor":  # its kernel's c10d call, seen too
            with self:
                return f._op_dk(torch._C.DispatchKey.CompositeExplicitAutograd, *a, **(kw or {}))
        return f(*a, **(kw or {}))

result = {"rank": rank}
try:
    built = build()
    module, inputs = built.model, built.inputs
    if style == "ddp":
        module = torch.nn.parallel.DistributedDataParallel(module)
    elif style == "fsdp2":
        from torch.distributed.fsdp import fully_shard
        for _, block in sharded._blocks(torch, module):
            fully_shard(block)
        fully_shard(module)
    else:
        from torch.distributed.device_mesh import init_device_mesh
        sharded._tensor_parallel(torch, module, init_device_mesh("cpu", (world,)), [])
    seen = Seen()
    with seen:
        loss = step(module, inputs)
    full = {}
    for n, p in (module.module if style == "ddp" else module).named_parameters():
        full[n] = p.full_tensor().detach() if hasattr(p, "full_tensor") else p.detach()
    result.update(ran=True, loss=loss, collectives=sorted(seen.calls))
    if rank == 0:
        ref = build()
        before = {n: p.detach().clone() for n, p in ref.model.named_parameters()}
        ref_loss = step(ref.model, ref.inputs)
        diff = max(float((full[n] - p.detach()).abs().max()) for n, p in ref.model.named_parameters() if n in full)
        moved = max(float((before[n] - p.detach()).abs().max()) for n, p in ref.model.named_parameters())
        result.update(max_param_diff=diff, step_moved=moved, single_process_loss=ref_loss)
except Exception as exc:
    result.update(ran=False, error=(type(exc).__name__ + ": " + " ".join(str(exc).split()))[:300])
if rank == 0:
    json.dump(result, open(out, "w"))
dist.destroy_process_group()
"""


def _env() -> dict:
    paths = (os.path.join(ROOT, "src"), os.path.join(ROOT, "scripts", "reality"))  # the factory of FACTORIES
    return {**os.environ, "TORCH_DEVICE_BACKEND_AUTOLOAD": "0", "PYTHONPATH": os.pathsep.join(paths)}


def opcov(*args) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "opcov", *args], capture_output=True, text=True, env=_env(), cwd=ROOT)


def _last_line(text: str) -> str:
    lines = text.strip().splitlines()
    return lines[-1][:300] if lines else "(no message)"


def trace_and_check(name: str, style: str, world: int, folder: str) -> tuple[dict, dict] | str:
    """(op set, cpu's verdict as JSON) of the step traced as rank 0 of ``world``, or why it could not be traced."""
    path = os.path.join(folder, f"{name.replace(':', '_')}-{style}-{world}.yaml")
    r = opcov("trace", name, "--parallel", style, "--world-size", str(world), "--out", path)
    if r.returncode:
        return f"not traced: {_last_line(r.stderr)}"
    r = opcov("check", path, "-b", "cpu", "--format", "json")
    if r.returncode not in (0, 1):
        raise SystemExit(f"checking {name} {style} x{world} failed: {_last_line(r.stderr)}")
    sys.path.insert(0, os.path.join(ROOT, "src"))
    from opcov.store import opset

    return opset.load(path), json.loads(r.stdout)["verdicts"][0]


def overrides(doc: dict) -> dict:
    """The config a trace set (--set), read back from its command, so the real run builds the same model."""
    words = shlex.split(doc["provenance"]["command"])
    out = {}
    for i, w in enumerate(words):
        if w == "--set":
            key, _, value = words[i + 1].partition("=")
            out[key] = int(value) if value.isdigit() else value
    return out


def real_step(name: str, style: str, world: int, folder: str, config: dict) -> dict:
    """Rank 0's result of the real ``world``-process gloo step (RANK_STEP)."""
    stem = os.path.join(folder, f"{name.replace(':', '_')}-{style}-{world}")
    store, out = f"{stem}.store", f"{stem}.json"
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", RANK_STEP, str(r), str(world), store, name, style, out, json.dumps(config)],
            env=_env(),
            cwd=ROOT,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
        )
        for r in range(world)
    ]
    errs = [p.communicate(timeout=600)[1] for p in procs]
    if not os.path.exists(out):
        return {"ran": False, "error": _last_line((errs[0] or b"").decode(errors="replace"))}
    return json.load(open(out))


def collectives(doc: dict) -> set:
    from opcov.store import opset

    out = set()
    for n in opset.nodes(doc):
        if n.op.startswith("c10d::") and n.kind == opset.KERNEL:
            reduce = [w.split("=", 1)[1] for w in n.args.replace(",", " ").split() if w.startswith("reduce_op=")]
            out.add((n.op, reduce[0] if reduce else ""))
    return out


def row(name: str, style: str, world: int, folder: str) -> dict:
    base = {"model": name, "style": style, "world": world}
    traced_pair = trace_and_check(name, style, world, folder)
    if isinstance(traced_pair, str):  # cannot be traced at this world size: a row that says why
        return {**base, "config": {}, "verdict": traced_pair, "real": "not run", "diff": None, "moved": None,
                "agrees": None, "collectives_match": None, "traced_only": [], "real_only": []}  # fmt: skip
    doc, verdict = traced_pair
    config = overrides(doc)
    real = real_step(name, style, world, folder, config)
    traced, ran = collectives(doc), {tuple(c) for c in real.get("collectives", [])}
    runs = verdict["verdict"] != "fails"
    ok = real.get("ran") and real.get("max_param_diff", 1.0) <= TOLERANCE < real.get("step_moved", 0.0)
    return {
        **base,
        "config": config,
        "verdict": f"{verdict['verdict']} ({verdict['evidence']})",
        "real": "ran" if real.get("ran") else f"raised: {real.get('error')}",
        "diff": real.get("max_param_diff"),
        "moved": real.get("step_moved"),
        "agrees": bool(ok) if runs else not real.get("ran"),
        "collectives_match": traced == ran,
        "traced_only": sorted(traced - ran),
        "real_only": sorted(ran - traced),
    }


def summary(rows: list, world: int) -> str:
    """One world size's figures: verdicts that agree, collectives that match, steps that could not be traced."""
    mine = [r for r in rows if r["world"] == world]
    judged = [r for r in mine if r["agrees"] is not None]
    ran = [r for r in judged if r["real"] == "ran"]
    untraced = len(mine) - len(judged)
    return (
        f"**{world} ranks: {sum(r['agrees'] for r in judged)} of {len(judged)} verdicts agree with the real runs; "
        f"the collectives match in {sum(r['collectives_match'] for r in ran)} of the {len(ran)} steps that ran"
        + (f"; {untraced} step(s) could not be traced at this world size (in the table, with why)" if untraced else "")
        + ".**"
    )


def _cells(r: dict) -> str:
    style = r["style"] + (f" ({', '.join(f'{k}={v}' for k, v in r['config'].items())})" if r["config"] else "")
    diff = "-" if r["diff"] is None else f"{r['diff']:.1e} ({r['moved']:.1e})"
    agrees = "not measured" if r["agrees"] is None else "yes" if r["agrees"] else "no"
    coll = "-" if r["collectives_match"] is None else "- (the step raised)" if r["real"] != "ran" else "same" if r["collectives_match"] else (
        f"traced only: {', '.join(f'{o} {x}'.strip() for o, x in r['traced_only']) or '-'}; "
        f"real only: {', '.join(f'{o} {x}'.strip() for o, x in r['real_only']) or '-'}"
    )  # fmt: skip
    return f"| {r['world']} | {r['model']} | {style} | {r['verdict']} | {r['real']} | {diff} | {agrees} | {coll} |"


def _wrap(text: str) -> str:
    return textwrap.fill(text, width=110, break_long_words=False, break_on_hyphens=False)


def table(rows: list, started: str, command: str = COMMAND, seconds: float | None = None) -> str:
    import torch

    worlds = sorted({r["world"] for r in rows})
    sizes = " and ".join(str(w) for w in worlds)
    tolerance = f"{TOLERANCE:.0e}".replace("e-0", "e-")
    took = f" ({seconds:.0f} s wall-clock, traces and real runs)" if seconds else ""
    intro = (
        f"Measured {started} with torch {torch.__version__} on this machine's CPU ({os.cpu_count()} cores), by "
        f"`{command}`{took}. Each model's step is traced as rank 0 of N (N = {sizes}) on torch's fake process "
        "group and judged on cpu, then run for real by N processes on a gloo group (same weights and batch on "
        "every rank; with more ranks than cores they share the cores), its parameters after the step compared "
        f"with one single-process step on that batch (a verdict of runs agrees when they are within {tolerance}), "
        "and the collectives (c10d op, reduce op) it dispatched compared with the op set's. For tp the tracer "
        "sets the attention head counts to N where the model's own do not divide by N (shown beside the style); "
        "the real run builds the model with the same config."
    )
    if any(r["model"].startswith("sharded_models:") for r in rows):
        intro += (
            " `sharded_models:bucketed` (scripts/reality/sharded_models.py) is a step that must fail: its forward"
            " sends a sharded weight to searchsorted, which DTensor has no sharding strategy for."
        )
    limits = (
        "What this does not measure: a device other than CPU (TorchTPU's process group cannot be run here; "
        "PyTorch/XLA's CPU client, the only xla device here, has no collectives: they hang or raise, "
        f"github.com/pytorch/xla/issues/5005 and /9089), world sizes other than {sizes} (among them 8, the "
        "world size of the op sets in coverage/models/*/parallel/: those are traced, not run for real here), "
        "data-parallel ranks that see different batches, and TorchTPU's own collectives: those verdicts rest "
        "on registrations and are said so."
    )
    lines = [
        "## Sharded training steps against real gloo runs",
        "",
        _wrap(intro),
        "",
        *[summary(rows, w) + "\n" for w in worlds],
        "| ranks | model | style | verdict on cpu | real N-process gloo step | max parameter difference (the step moved them up to) | agrees | collectives |",
        "| --- | --- | --- | --- | --- | --- | --- | --- |",
        *[_cells(r) for r in rows],
        "",
        _wrap(limits),
    ]
    return "\n".join(lines)


def write_docs(text: str, page: str = PAGE) -> None:
    old = open(page, encoding="utf-8").read()
    block = f"{BEGIN}\n{text}\n{END}"
    if BEGIN in old and END in old:
        head, rest = old.split(BEGIN, 1)
        new = head + block + rest.split(END, 1)[1]
    else:
        new = old.rstrip("\n") + "\n\n" + block + "\n"
    with open(page, "w", encoding="utf-8") as f:
        f.write(new)


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--models", default=",".join(MODELS))
    p.add_argument("--styles", default=",".join(STYLES))
    p.add_argument(
        "--world-size",
        default=",".join(map(str, WORLD_SIZES)),
        help="ranks of each real gloo step, comma-separated (default %(default)s)",
    )
    p.add_argument("--write-docs", action="store_true", help="rewrite its section of docs/accuracy.md")
    args = p.parse_args()
    try:
        worlds = [int(w) for w in args.world_size.split(",")]
    except ValueError:
        p.error(f"--world-size {args.world_size!r}: expected whole numbers, comma-separated, such as 2,4")
    if any(w < 2 for w in worlds):
        p.error(f"--world-size {args.world_size}: a sharded step needs at least 2 ranks")
    started = _dt.datetime.now(_dt.timezone.utc).strftime("%Y-%m-%d")
    clock = time.monotonic()
    rows = []
    with tempfile.TemporaryDirectory(prefix="opcov-dist-") as folder:
        jobs = [(n, s) for n in args.models.split(",") for s in args.styles.split(",")]
        jobs += list(FACTORIES) if args.models == ",".join(MODELS) else []
        for world in worlds:
            for name, style in jobs:
                rows.append(row(name, style, world, folder))
                print(json.dumps(rows[-1]), flush=True)
    command = COMMAND.split(" --")[0] + "".join(f" {shlex.quote(w)}" for w in sys.argv[1:])  # as it was run
    text = table(rows, started, command, time.monotonic() - clock)
    print(text)
    if args.write_docs:
        write_docs(text)
        print("wrote the distributed-reality section of docs/accuracy.md")
    return 0


if __name__ == "__main__":
    sys.exit(main())
