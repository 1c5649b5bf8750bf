"""Checking verdicts against reality: run zoo models for real on a device and compare with ``opcov check``.

cpu and meta are weak judges (cpu runs everything; meta is what tracing uses), so
the judge that counts is the pure-Python PrivateUse1 test backend
(``opcov.sources.pybackend``) planted with deliberate gaps.  For each planted
backend: opcov's own ``scan`` (and, where asked, ``probe``) makes its coverage
data; each model's committed op set gets a verdict; then the model actually runs
on that device (tiny config, real random weights, seeded), with the inputs its op set was traced
with (as built, and with a padded attention mask where the model takes one), and its outputs
are compared with a CPU run of the same weights.  A verdict agrees when

    runs / runs_with_fallback  <->  the model ran and matched CPU
    runs_with_value_note       <->  the model ran (its values may differ: matched CPU or not)
    fails                      <->  the model raised, crashed, or gave wrong results

and ``unknown`` is counted apart (it claims nothing), as is a run that raised inside the CPU
computation of a kernel the test backend plants as working (``harness``: CPU lacks that dtype,
say int ``histc``, so the backend could not be what it claims; the run tested nothing).  Each real run is a child
process, since PrivateUse1 can be claimed once per process.

The vendor-shaped backends plant kernels for exactly the overloads a real PrivateUse1 backend registers
(the first whose registered data is bundled: TorchTPU's, ``coverage/tpu/``), the CompositeImplicitAutograd ones it overrides (``linear``,
``silu_backward``, ``cross_entropy_loss``...) included, with autograd kernels where TorchTPU has
them and its CPU fallback off, less what the test backend cannot compute (ops CPU lacks, views:
see ``_kernels_for``). They test that a verdict judges what the backend's dispatcher really runs:
its own kernel, not the decomposition the stand-in traced (``opcov.verdict.resolve``).
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from dataclasses import dataclass, field

from opcov import vocab
from opcov.errors import UsageError
from opcov.store import layout, opset
from opcov.verdict import check, resolve

BACKEND = "opcovtest"
IMPORT = "opcov.sources.pybackend"
ROOT = os.path.dirname(
    os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
)  # src/opcov/testing/ -> the checkout
BUNDLED = os.path.join(ROOT, layout.DEFAULT_COVERAGE)


def _kernels_for(ops, behaviour="pass"):
    """Kernels for ``ops`` that the test backend can plant faithfully: it computes each kernel on CPU
    copies, so not ops CPU cannot run, and not view ops (a copy is not a view: the probe's aliasing
    check rightly fails such a kernel); views reach the backend's as_strided plumbing instead."""
    from opcov.sources.pybackend import PLUMBING_OPS

    skip = _unplantable()
    return {op: behaviour for op in ops if op.startswith("aten::") and op not in PLUMBING_OPS and op not in skip}


def _unplantable() -> set:
    from opcov.store import data

    files = layout.snapshots(BUNDLED, "cpu")["registered"]
    if not files:
        return set()
    return {
        n for n, r in data.load(files[-1])["ops"].items() if r.get("res") == "missing" or "view" in r.get("tags", ())
    }


def _shape_source() -> tuple[str, dict]:
    """(name, ops) of the backend the vendor-shaped test backends copy: the first PrivateUse1 backend opcov
    knows whose registered data is bundled (its newest snapshot)."""
    from opcov import backends
    from opcov.store import data

    for b in backends.known_backends():
        files = layout.snapshots(BUNDLED, b.name)["registered"] if b.dispatch_key == "PrivateUse1" else []
        if files:
            return b.name, data.load(files[-1])["ops"]
    raise UsageError(f"no PrivateUse1 backend's registered data under {BUNDLED}/ to shape a backend after")


def _vendor_shaped(raising=(), missing=()) -> dict:
    """A backend shaped like a real PrivateUse1 backend (the bundled one: TorchTPU): its own kernels, its autograd
    kernels, its CPU fallback off; ``raising`` kernels raise, ``missing`` ones are not registered."""
    _, reg = _shape_source()
    kernels = _kernels_for(op for op, r in reg.items() if r.get("fwd") == "kernel" and op not in missing)
    kernels.update({op: "raise" for op in raising})
    autograd = sorted(
        op for op, r in reg.items() if r.get("bwd") == "backend_kernel" and op in kernels and ".out" not in op
    )  # the test backend's autograd kernels are functional only
    return {"name": BACKEND, "kernels": kernels, "autograd": autograd, "fallback": "raise"}


#: Planted backends, each a function of the aten ops the chosen models use.
SPECS = {
    # every op through a working CPU fallback: all should run, slowly
    "cpu-fallback": lambda ops: {"name": BACKEND, "kernels": {}, "fallback": "cpu"},
    # own kernels for exactly what the op sets list, no fallback: runs iff the trace saw every op
    "exact-kernels": lambda ops: {"name": BACKEND, "kernels": _kernels_for(ops), "fallback": "raise"},
    # the same without softmax kernels: attention models must fail, convnets and RNNs run
    "no-softmax": lambda ops: {
        "name": BACKEND,
        "fallback": "raise",
        "kernels": _kernels_for(o for o in ops if "softmax" not in o),
    },
    # a kernel registered but raising (registration claims it; only a probe can tell)
    "raising-layer-norm": lambda ops: {
        "name": BACKEND,
        "fallback": "cpu",
        "kernels": {"aten::native_layer_norm": "raise"},
    },
    # a kernel registered but wrong (the model runs and gives wrong numbers)
    "wrong-addmm": lambda ops: {"name": BACKEND, "fallback": "cpu", "kernels": {"aten::addmm": "large_error"}},
    # a real PrivateUse1 backend's shape (see the module docstring): runs its own linear, silu_backward, ... never
    # their decompositions
    "vendor-shaped": lambda ops: _vendor_shaped(),
    # the same with its overriding linear raising: only judging linear itself can see it
    "vendor-raising-linear": lambda ops: _vendor_shaped(raising=("aten::linear",)),
    # the same without aten::all, which only transformers' host-side "is the mask all ones?" check calls
    "vendor-no-mask-check": lambda ops: _vendor_shaped(missing=("aten::all", "aten::all.all_out")),
}


@dataclass
class Outcome:
    spec: str
    model: str
    mode: str
    predicted: str  # the verdict
    actual: str  # one of ACTUALS
    detail: str = ""
    problems: list = field(default_factory=list)  # the verdict's problem ops

    @property
    def agrees(self) -> bool | None:
        if self.predicted == "unknown" or self.actual == "harness":
            return None
        if self.predicted == "runs_with_value_note":  # it runs; its values may differ: ran, matched or not
            return self.actual in ("ran", "wrong")
        return (self.predicted in ("runs", "runs_with_fallback")) == (self.actual == "ran")


ACTUALS = ("ran", "raised", "wrong", "crashed", "harness")


def confusion(outcomes, title: str) -> str:
    """The confusion table of ``outcomes``: verdict (rows) against what the real run did (columns)."""
    verdicts = ("runs", "runs_with_fallback", "runs_with_value_note", "fails", "unknown")
    width = max(len(v) for v in verdicts) + 2
    lines = [f"{title}: {len(outcomes)} (model, mode) runs", " " * width + "".join(f"{a:>9}" for a in ACTUALS)]
    for v in verdicts:
        row = [sum(o.predicted == v and o.actual == a for o in outcomes) for a in ACTUALS]
        if any(row):
            lines.append(f"{v:<{width}}" + "".join(f"{n:>9}" for n in row))
    return "\n".join(lines)


def _env(spec: dict) -> dict:
    from opcov.sources.pybackend import ENV_VAR, spec_json

    src = os.path.join(ROOT, "src")
    env = dict(
        os.environ, TORCH_DEVICE_BACKEND_AUTOLOAD="0", PYTHONPATH=src + os.pathsep + os.environ.get("PYTHONPATH", "")
    )
    env[ENV_VAR] = spec_json(spec)
    return env


def _opcov(args, spec, timeout=1800):
    r = subprocess.run(
        [sys.executable, "-m", "opcov", *args], capture_output=True, text=True, env=_env(spec), timeout=timeout
    )
    if r.returncode != 0:
        raise UsageError(
            f"opcov {' '.join(args[:2])} failed for the test backend: "
            f"{(r.stderr or r.stdout).strip().splitlines()[-1:]}"
        )
    return r


def make_coverage(
    spec: dict,
    coverage_dir: str,
    *,
    probe_ops: list[str] | None = None,
    torch_version: str,
    models=(),
    dtypes=("float32",),
) -> None:
    """opcov's own registered scan (and optionally a probe of ``probe_ops`` in ``dtypes``) of the
    planted backend."""
    import shutil

    folder = os.path.join(coverage_dir, BACKEND)
    for path in layout.snapshots(BUNDLED, "cpu")["registered"]:  # what a CPU fallback can run
        os.makedirs(os.path.join(coverage_dir, "cpu"), exist_ok=True)
        shutil.copy(path, os.path.join(coverage_dir, "cpu"))
    _opcov(
        [
            "scan",
            BACKEND,
            "--import",
            IMPORT,
            "--out",
            os.path.join(folder, layout.snapshot_name("registered", torch_version)),
        ],
        spec,
    )
    if probe_ops:
        bases = sorted({o.split("::", 1)[1].split(".")[0] for o in probe_ops})
        pattern = "^aten::(" + "|".join(re.escape(b) for b in bases) + ")$"
        _opcov(
            [
                "probe",
                BACKEND,
                "--import",
                IMPORT,
                "--ops",
                pattern,
                "--dtypes",
                ",".join(dtypes),
                "--traces",
                ",".join(models),
                "--timeout",
                "30",
                "--out",
                os.path.join(folder, layout.snapshot_name("probed", torch_version)),
            ],
            spec,
        )


RUNNER = r"""
import copy, json, sys, traceback
import torch
import torch.nn.functional as F
import opcov.sources.pybackend as pb
from opcov.sources import models
from opcov.sources import zoo
from opcov.sources.step import default_loss, input_variants
from opcov.tracing.realtrace import label

name, mode = sys.argv[1], sys.argv[2]
entry = next(e for e in zoo.ZOO if e.name == name)
torch.manual_seed(0)
built = models.build(entry.spec, models.Sizes(), mode=mode, real=True, zoo_entry=entry)
dtype = getattr(torch, entry.dtype)
orig = built.model.to(dtype)

def move(x, where, dt=None):
    if isinstance(x, torch.Tensor):
        return x.to(where).to(dt or dtype) if x.is_floating_point() else x.to(where)
    if isinstance(x, dict):
        return {k: move(v, where, dt) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return type(x)(move(v, where, dt) for v in x)
    return x

def call(model, inputs):
    model.train(mode == "training")
    if isinstance(inputs, dict):
        return model(**inputs)
    if isinstance(inputs, torch.Tensor):
        return model(inputs)
    return model(*inputs)

from opcov.sources.step import output_tensors as tensors

def to_device(model):
    # Module.to() replaces parameters on a device whose tensors cannot shallow-copy CPU ones (this
    # test backend, like XLA), which unties tied weights (BERT/GPT-2 LM heads): re-tie, as XLA users do.
    model = copy.deepcopy(model).to(pb.device())
    if hasattr(model, "tie_weights"):
        model.tie_weights()
    return model

def first_line(exc):
    return (type(exc).__name__ + ": " + (str(exc).strip().splitlines() or [""])[0])[:300]

def actual_of(exc):
    # raised inside the CPU computation of a kernel planted as working: the test backend's limit
    names = [f.name for f in traceback.extract_tb(exc.__traceback__)]
    last = len(names) - 1 - names[::-1].index("_run_on_cpu") if "_run_on_cpu" in names else -1
    return "harness" if last > 0 and names[last - 1] == "kernel" else "raised"

def step(model, where, inputs, dt=None):
    grad = torch.enable_grad() if mode == "training" else torch.no_grad()
    with grad:
        out = call(model, move(inputs, where, dt))
        loss = None
        if mode == "training":
            loss = default_loss(torch, out)
            loss.backward()
            params = [p for p in model.parameters() if p.grad is not None]
            torch.optim.AdamW(params, lr=1e-3, foreach=where != "cpu").step()
    return out, loss

# The inputs the op set was traced with (opcov.tracing.realtrace): as built, and for a model that takes
# an attention mask, a padded one too (the mask decides a host-side branch). It runs if it runs with each.
variants = input_variants(torch, built)

def where_it(variant):
    return "" if variant == variants[0][0] else f"with {label(variant)}: "

# 1. Does it run? The model as it is (dropout on in training), forward, backward, AdamW step.
for variant, inputs in variants:
    try:
        torch.manual_seed(1)
        step(to_device(orig), pb.device(), inputs)
    except Exception as exc:
        print(json.dumps({"actual": actual_of(exc), "detail": where_it(variant) + first_line(exc)}))
        pb.end_process(0)

def compared(out, loss, model):
    # what a run is judged by: its outputs, and in training its loss and its parameters' gradients
    return tensors(out) + ([loss] + [p.grad for p in model.parameters()] if mode == "training" else [])

# 2. Are the numbers right? Dropout off on both sides (random streams differ), outputs, loss and
# gradients compared with a CPU run of the same weights.
# Discrete decisions are replayed from the CPU run: an MoE router's top-k on logits that differ in the
# last bfloat16 bit (a backend's own linear rounds otherwise than CPU's decomposition) may pick
# another expert for a near-tie token, after which the values are not comparable though every kernel
# is right. The device still runs its topk; its logits (the values gathered at CPU's indices) flow on,
# so a wrong router kernel still shows in the outputs. Flips are counted and reported.
_topk = torch.topk
decisions = {"mode": None, "log": [], "at": 0, "flips": 0, "of": 0}

def topk(input, k, dim=-1, largest=True, sorted=True):
    r = _topk(input, k, dim, largest, sorted)
    if decisions["mode"] == "record":
        decisions["log"].append(r.indices.detach().cpu())
    elif decisions["mode"] == "replay" and decisions["at"] < len(decisions["log"]):
        want = decisions["log"][decisions["at"]]
        decisions["at"] += 1
        if want.shape == r.indices.shape:
            flipped = (want.sort(dim).values != r.indices.detach().cpu().sort(dim).values).any(dim)
            decisions["flips"] += int(flipped.sum())
            decisions["of"] += flipped.numel()
            idx = want.to(input.device)
            return torch.return_types.topk((input.gather(dim, idx), idx))
    return r

torch.topk = topk
torch.Tensor.topk = lambda self, *args, **kwargs: topk(self, *args, **kwargs)
F.dropout = lambda input, p=0.5, training=True, inplace=False: input
_sdpa = F.scaled_dot_product_attention
def _sdpa_no_dropout(query, key, value, attn_mask=None, dropout_p=0.0, *args, **kwargs):
    return _sdpa(query, key, value, attn_mask, 0.0, *args, **kwargs)
F.scaled_dot_product_attention = _sdpa_no_dropout
pairs = []
for variant, inputs in variants:
    ref, dev = copy.deepcopy(orig), to_device(orig)
    # the same seed before each: other random draws (Swin's stochastic depth, torch.rand on the device)
    # then come from the same CPU generator stream, which the test backend's kernels draw from too
    torch.manual_seed(2)
    decisions.update(mode="record", log=[])
    want, want_loss = step(ref, "cpu", inputs)
    try:
        torch.manual_seed(2)
        decisions.update(mode="replay", at=0)
        got, loss = step(dev, pb.device(), inputs)
    except Exception as exc:
        print(json.dumps({"actual": actual_of(exc), "detail": where_it(variant) + "with dropout off: "
                          + first_line(exc)}))
        pb.end_process(0)
    # A 16-bit model: CPU and the device may take different paths (a backend's own kernel for a
    # composite, CPU's decomposition of it), which round differently at a resolution (bfloat16: 2**-8) coarser than the
    # tolerance, so both are measured against a float32 CPU run (float64 has no grouped_mm), as the probe
    # judges one op: the device may be at most twice as far from it as CPU at the model's dtype, plus
    # the tolerance.
    want_t, got_t = compared(want, want_loss, ref), compared(got, loss, dev)
    exact = [None] * len(want_t)
    if dtype in (torch.bfloat16, torch.float16):
        try:
            ref32 = copy.deepcopy(orig).float()
            torch.manual_seed(2)
            decisions.update(mode="replay", at=0)
            flips = decisions["flips"], decisions["of"]
            exact = compared(*step(ref32, "cpu", inputs, torch.float32), ref32)
            decisions.update(flips=flips[0], of=flips[1])  # the device's flips are reported, not float32's
        except Exception:
            pass  # no float32 run: compared with CPU at the model's dtype alone
    decisions["mode"] = None
    pairs += list(zip(want_t, got_t, exact if len(exact) == len(want_t) else [None] * len(want_t)))
# Per tensor, not per element: after a whole model's worth of ops, two correct 16-bit paths round
# differently element by element, and CPU lands exactly on the float32 value at some element where the
# device is a few bfloat16 steps off (mixtral: the device's largest error 0.0027 against CPU's 0.0039,
# yet 1.16x over an element-wise rule). A wrong kernel (the planted addmm + 1.0) is far over either.
from opcov.probe.compare import CPU_MARGIN
worst = 0.0
against = "a CPU run of the same weights"
for a, b, e in pairs:
    if a is None or b is None:
        continue
    b = b.detach().cpu().to(a.dtype)
    if a.shape != b.shape:
        print(json.dumps({"actual": "wrong", "detail": f"shape {tuple(b.shape)} != {tuple(a.shape)}"}))
        pb.end_process(0)
    if a.is_floating_point() and a.numel():
        if e is not None and e.shape == a.shape:
            e = e.detach()
            tol = 1e-3 + 1e-3 * e.abs().max().item()
            dev_err = (b.double() - e).abs().nan_to_num(float("inf")).max().item()
            cpu_err = (a.detach().double() - e).abs().nan_to_num(0).max().item()
            worst = max(worst, max(0.0, dev_err - CPU_MARGIN * cpu_err) / tol)
            against = ("twice CPU's own largest error at this dtype (per tensor) against a float32 CPU run of "
                       "the same weights")
        else:
            tol = 1e-3 + 1e-3 * a.detach().abs().max().item()
            worst = max(worst, (a.detach() - b).abs().nan_to_num(0).max().item() / tol)
replayed = (f"; top-k decisions replayed from the CPU run: {decisions['flips']} of {decisions['of']} differed on "
            "the device" if decisions["of"] else "")
print(json.dumps({"actual": "ran" if worst <= 1 else "wrong",
                  "detail": f"max error {worst:.3g} x tolerance vs {against}{replayed}"}))
pb.end_process(0)
"""


def run_for_real(spec: dict, model: str, mode: str, timeout: int = 600) -> tuple[str, str]:
    """(ran | raised | wrong | crashed | harness, detail) for one model on the planted backend."""
    try:
        r = subprocess.run(
            [sys.executable, "-c", RUNNER, model, mode], capture_output=True, text=True, env=_env(spec), timeout=timeout
        )
    except subprocess.TimeoutExpired:
        return "crashed", f"timed out after {timeout} s"
    lines = [ln for ln in r.stdout.splitlines() if ln.startswith("{")]
    if r.returncode != 0 or not lines:
        tail = (r.stderr.strip().splitlines() or ["no output"])[-1]
        return "crashed", f"exit {r.returncode}: {tail[:300]}"
    result = json.loads(lines[-1])
    return result["actual"], result["detail"]


def reality_check(
    spec_names,
    model_names,
    modes,
    workdir: str,
    *,
    probe: bool = True,
    torch_version: str,
    models_dir: str,
    progress=None,
    jobs: int = 1,
) -> list[Outcome]:
    """Outcomes in (spec, model, mode) order; ``jobs`` real runs (child processes) at a time."""
    from concurrent.futures import ThreadPoolExecutor

    outcomes = []
    for spec_name in spec_names:
        cov = os.path.join(workdir, spec_name)
        opsets = {(m, mode): layout.opset_path(m, mode, models_dir) for m in model_names for mode in modes}
        docs = [opset.load(p) for p in opsets.values()]
        ops = sorted({op for doc in docs for op in doc["ops"] if op.startswith("aten::")})
        # probed: the calls and the composites a backend may run itself (resolve.needed_ops)
        needed = sorted({op for doc in docs for op in resolve.needed_ops(doc) if op.startswith("aten::")})
        spec = SPECS[spec_name](ops)
        # the models' own dtypes too: a bfloat16 model's calls are judged from bfloat16 cells
        dtypes = sorted({"float32"} | {doc["dtype"] for doc in docs})
        make_coverage(
            spec,
            cov,
            probe_ops=needed if probe else None,
            torch_version=torch_version,
            models=model_names,
            dtypes=dtypes,
        )

        def one(item, cov=cov, spec=spec, spec_name=spec_name):
            (model, mode), path = item
            v = check.run(path, [BACKEND], None, cov)[0][0]
            # the real run makes every input variant the op set records: its verdict is the worst of them
            judged = [v, *v.variants.values()]
            actual, detail = run_for_real(spec, model, mode)
            o = Outcome(
                spec_name,
                model,
                mode,
                vocab.worst([j.verdict for j in judged], vocab.VERDICT_ORDER),
                actual,
                detail,
                list(dict.fromkeys(r.op for j in judged for r in j.ops if r.outcome in ("fails", "unknown"))),
            )
            if progress:
                progress(o)
            return o

        with ThreadPoolExecutor(max(1, jobs)) as pool:
            outcomes += list(pool.map(one, opsets.items()))
    return outcomes
