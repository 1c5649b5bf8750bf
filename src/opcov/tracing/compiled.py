"""Trace a model's compiled op set: what ``torch.compile`` hands a backend's compiler, graph by graph.

Why its own op set: under ``torch.compile`` a backend never sees the eager calls. Dynamo captures
the Python into FX graphs, breaking the graph where it cannot trace (data-dependent control flow,
unsupported Python; each break runs eagerly and recompiles after it); AOTAutograd then traces each
graph into a functional forward and backward graph (no in-place or view-mutating ops, composites
decomposed, the backend's decomposition table applied) and partitions them; only then does the
backend lower each node. So this records, for one inference call or one training step
(forward and loss compiled, backward through the compiled backward graph):

* Dynamo's graphs and each graph break with its reason, the user file:line and the construct
  (Dynamo's own ``graph_breaks`` log, the one ``TORCH_LOGS=graph_breaks`` prints);
* the ATen ops of the AOT forward and backward graphs after the named backend's decomposition
  table and partitioner (its record's recipe), per dtype key with shapes, as a call tree: one ``call`` node
  per Dynamo graph, its ops as ``kernel`` nodes below it.

No device and no weights: parameters and inputs are fake tensors (``FakeTensorMode``), Dynamo and
AOTAutograd trace them as they trace real ones, and the compiled graphs are run node by node
on the fake tensors (nothing is lowered). The tables are read from where each backend keeps them:
a backend package's own from its wheel (TorchTPU's ``torch_tpu._internal.compile._backend``, read in a child
process: see ``package_table``), Inductor's from ``torch._inductor.decomposition``; openxla (core torch's
``torch._dynamo.backends.torchxla``) and aot_eager decompose nothing beyond AOTAutograd's own. What
a recipe leaves out of the real backend (TorchTPU's and Inductor's own FX passes before and after
AOT, Inductor's pattern rewrites) is said in the op set's notes. Dynamo runs once for all the
backends asked; AOTAutograd once per backend.

The optimizer step is not compiled (``torch.compile(model)`` compiles the model): it runs eagerly,
and the eager op set holds its ops.
"""

from __future__ import annotations

import contextlib
import datetime as _dt
import functools
import logging
import os
import re
import warnings
from dataclasses import dataclass, field, replace

from opcov import backends, provenance
from opcov import dtypes as _dtypes
from opcov.errors import OpcovError, UsageError
from opcov.sources.step import default_loss
from opcov.store import opset
from opcov.store.opset import CALL, KIND, SCHEMA_VERSION, OpSet, node_text
from opcov.torchenv import import_torch
from opcov.tracing import calltree
from opcov.tracing.trace import Options, _move_inputs, _shape, _unique_params
from opcov.version import __version__

# A compile backend that is no device's own: AOTAutograd alone, what torch.compile's debugging backend runs.
GENERIC = {
    "aot_eager": backends.Compile(
        "aot_eager",
        source="torch._dynamo.backends.debugging: aot_autograd with no decomposition table, default partitioner",
    )
}
GRAPH_BREAKS_LOGGER = "torch._dynamo.symbolic_convert.__graph_breaks"  # TORCH_LOGS=graph_breaks


def recipe_names() -> tuple[str, ...]:
    """Every ``--compile-backend`` opcov traces for: each backend record's compile backend, then the generic ones."""
    return (*backends.compile_recipes(), *GENERIC)


@dataclass
class Recipe:
    """How one backend turns a Dynamo graph into the ATen graphs it lowers."""

    name: str
    decompositions: dict
    partition_fn: object
    keep_inference_input_mutations: bool
    source: str  # where the table was read
    version: str  # the package version the table comes from
    notes: tuple = ()
    # The device's scaled_dot_product_attention takes the math path (its _fused_sdp_choice is not CPU's:
    # the record says so), so AOTAutograd traces it so on cpu tensors.
    math_sdpa: bool = False
    # Its compile backend refuses dynamic=True and takes bounded dynamism only: the backend that says so
    bounded_dynamism_of: str = ""


def recipe(torch, name: str) -> Recipe:
    """The recipe of compile backend ``name``, as the backend record holding it says (opcov.backends.Compile);
    a one-line UsageError when unknown or not installed."""
    from torch._functorch.partitioners import default_partition, min_cut_rematerialization_partition

    holder = backends.compile_recipes().get(name)
    spec = holder.compile if holder is not None else GENERIC.get(name)
    if spec is None:
        raise UsageError(f"--compile-backend {name!r}: expected one of {', '.join(recipe_names())}")
    version, source = f"torch {torch.__version__}", spec.source
    if spec.table == "inductor":
        from torch._inductor.decomposition import select_decomp_table

        table = dict(select_decomp_table())
    elif spec.table:
        from torch._decomp import get_decompositions

        ops, pkg_version = package_table(holder)  # type: ignore[arg-type]  # a package's table: a record's
        table = dict(get_decompositions([_overload(torch, op) for op in ops]))
        version = f"{holder.package} {pkg_version}"  # type: ignore[union-attr]
        source = source.replace("{ops}", ", ".join(ops))
    else:
        table = {}
    return Recipe(
        name,
        table,
        min_cut_rematerialization_partition if spec.partitioner == "min_cut" else default_partition,
        spec.keep_input_mutations,
        source,
        version,
        spec.recipe_notes,
        math_sdpa=spec.math_sdpa,
        bounded_dynamism_of=holder.vendor or holder.name if holder is not None and spec.bounded_dynamism else "",
    )


_TABLE_SCRIPT = """
import importlib, json, sys, torch
from importlib.metadata import version
module, _, name = sys.argv[1].partition(":")
importlib.import_module(sys.argv[2])
table = getattr(importlib.import_module(module), name, None)
ops = sorted(op.name() for op in table) if isinstance(table, dict) else None
print("OPCOV-TABLE " + json.dumps({"ops": ops, "version": version(sys.argv[3])}))
"""


@functools.lru_cache(maxsize=4)
def package_table(holder: backends.Backend) -> tuple[tuple, str]:
    """The ops the decomposition table a backend's package keeps (its record's ``compile.table``,
    MODULE:NAME) decomposes, and the package's version, read from the installed wheel in a child process:
    importing a backend such as torch_tpu does not start its device, but a Dynamo run in a process that has
    it imported does (and that aborts the process), so the tracer never imports it. A UsageError when the
    package is not installed or keeps no such table."""
    import importlib.util
    import json
    import subprocess
    import sys

    spec = holder.compile
    if spec is None or not holder.module:
        raise UsageError(f"backend {holder.name!r}: a compile table is read from the module its record names")
    flag = f"--compile-backend {spec.backend}"
    if importlib.util.find_spec(holder.module.split(".")[0]) is None:
        others = [n for n in recipe_names() if n != spec.backend]
        raise UsageError(
            f"{flag}: {holder.module} is not installed here; install {holder.package or holder.module}, "
            f"or pick one of {', '.join(others)}"
        )
    env = {**os.environ, "TORCH_DEVICE_BACKEND_AUTOLOAD": "0"}
    argv = [sys.executable, "-c", _TABLE_SCRIPT, spec.table, holder.module, holder.package or holder.module]
    try:
        done = subprocess.run(argv, capture_output=True, text=True, timeout=300, env=env, check=False)
    except subprocess.TimeoutExpired:
        raise UsageError(f"{flag}: reading {holder.module}'s decomposition table took over 300 s") from None
    line = next((ln for ln in done.stdout.splitlines() if ln.startswith("OPCOV-TABLE ")), None)
    if line is None:
        tail = (done.stderr.strip().splitlines() or ["no output"])[-1][:200]
        raise UsageError(f"{flag}: cannot read {holder.module}'s decomposition table ({tail})")
    found = json.loads(line.split(" ", 1)[1])
    if found["ops"] is None:
        raise UsageError(
            f"{flag}: {holder.package} {found['version']} keeps no decomposition table where opcov reads it "
            f"({spec.table})"
        )
    return tuple(found["ops"]), found["version"]


def _overload(torch, name: str):
    from opcov.catalog import resolve_overload

    return resolve_overload(torch, name)


# ---------------------------------------------------------------- graph breaks


@dataclass(frozen=True)
class Break:
    """One graph break: why, where in the user's code, and what Dynamo stopped at."""

    reason: str
    where: str  # file:line
    construct: str  # the source line, or Dynamo's debug context
    code: str = ""  # Dynamo's graph-break id (gb0036), for its explanation page
    times: int = 1  # how many times the run hit it

    def record(self) -> dict:
        out = {"reason": self.reason, "where": self.where, "construct": self.construct}
        if self.code:
            out["code"] = self.code
        if self.times > 1:
            out["times"] = self.times
        return out


def parse_break(text: str) -> Break:
    """One ``graph_breaks`` log message as a Break (see tests/test_compiled.py for its shape)."""
    lines = text.splitlines()
    where = reason = construct = context = ""
    for i, line in enumerate(lines):
        if line.startswith("Graph break in user code at "):
            where = line.removeprefix("Graph break in user code at ").strip()
        elif line.startswith("Graph Break Reason:"):
            reason = line.removeprefix("Graph Break Reason:").strip()
            if reason.startswith("Encountered graph break when attempting to trace"):
                # the kind of break is the first line after it that says something
                following = [s.strip() for s in lines[i + 1 : i + 4] if s.strip()]
                reason = following[0] if following else reason
        elif line.strip().startswith("Developer debug context:"):
            context = line.split(":", 1)[1].strip()
    user = text.partition("User code traceback:")[2].rstrip().splitlines()
    code_lines = [s.strip() for s in user if s.strip() and not s.strip().startswith(("File ", "^", "~"))]
    construct = code_lines[-1] if code_lines else context
    if context and context not in construct:
        construct = f"{construct} ({context})" if construct != context else context
    where = _short(where)
    if where.rpartition(":")[0] == __file__:
        where = "the model's call"  # Dynamo stopped at the model itself (an nn.LSTM, say), called from here
    m = re.search(r"/gb/(gb\d+)\.html", text)
    return Break(reason[:200] or "unknown", where or "unknown", construct[:200], m.group(1) if m else "")


def _short(where: str) -> str:
    """An installed package's file as the package names it (transformers/modeling_utils.py:4778), not by
    where this machine keeps it; any other file as it is."""
    head, sep, tail = where.rpartition("site-packages" + os.sep)
    return tail if sep else where


class _BreakLog(logging.Handler):
    def __init__(self):
        super().__init__(logging.DEBUG)
        self.breaks: list[Break] = []

    def emit(self, record):
        try:
            self.breaks.append(parse_break(record.getMessage()))
        except Exception:  # noqa: BLE001 - a log line we cannot read must not stop the trace
            self.breaks.append(Break("unreadable graph-break log line", "unknown", ""))


@contextlib.contextmanager
def logged_breaks():
    log = logging.getLogger(GRAPH_BREAKS_LOGGER)
    handler = _BreakLog()
    saved = (log.level, log.propagate)
    log.setLevel(logging.DEBUG)
    log.propagate = False
    log.addHandler(handler)
    try:
        yield handler.breaks
    finally:
        log.removeHandler(handler)
        log.setLevel(saved[0])
        log.propagate = saved[1]


# ---------------------------------------------------------------- capture


@dataclass
class Capture:
    """What one compiled run saw: Dynamo's graphs and breaks, and per recipe the AOT graphs' calls."""

    graphs: list = field(default_factory=list)  # per Dynamo graph: {"id", "nodes", "ops"}
    breaks: list = field(default_factory=list)
    trees: dict = field(default_factory=dict)  # recipe name -> calltree.Builder
    errors: dict = field(default_factory=dict)  # recipe name -> why AOTAutograd failed on a graph
    failure: str = ""  # why the run stopped (the model could not be traced to the end)
    phase: str = "forward"  # serve: the phase (prefill, decode) of the call that made the graph
    label: str = ""  # serve: which run made the graph (its cache), said in the graph node's args
    recompiles: list = field(default_factory=list)  # serve: {"cache", "phase", "reason"} per recompilation
    refused: dict = field(default_factory=dict)  # serve: a dynamic cache's run Dynamo stopped -> why (a finding)


def _val_dtypes(torch, val) -> list[str]:
    if isinstance(val, torch.Tensor):
        return [_dtypes.dtype_name(val.dtype)]
    if isinstance(val, (list, tuple)):
        return [d for v in val for d in _val_dtypes(torch, v)]
    return []


def _val_shapes(torch, val) -> list:
    if isinstance(val, torch.Tensor):
        return [val.shape]
    if isinstance(val, (list, tuple)):
        return [s for v in val for s in _val_shapes(torch, v)]
    return []


def graph_calls(torch, gm) -> list[tuple[str, str, str]]:
    """(op, dtype key, shape text) of each ATen call in an FX graph, in graph order."""
    from opcov.catalog import overload_name

    out = []
    for node in gm.graph.nodes:
        if node.op != "call_function" or not isinstance(node.target, torch._ops.OpOverload):
            continue
        name = overload_name(node.target)
        if node.target._opname.startswith("sym_"):  # size queries the host answers: no kernel
            continue
        args = [a.meta.get("val") for a in node.all_input_nodes]
        ins = [d for v in args for d in _val_dtypes(torch, v)]
        outs = _val_dtypes(torch, node.meta.get("val"))
        shapes = [s for v in args for s in _val_shapes(torch, v)] or _val_shapes(torch, node.meta.get("val"))
        out.append((name, _dtypes.call_dtype(ins, outs), _shape(shapes[:4])))
    return out


def _make_backend(torch, cap: Capture, recipes: list[Recipe]):
    """The Dynamo backend: note the graph, run AOTAutograd with each recipe (forward and backward
    graphs recorded as they are made), and hand Dynamo the last recipe's compiled function (which
    runs the graph's nodes as they are)."""
    import torch._functorch.config as functorch_config

    # Lower the backward graph when the forward is traced (torch 2.10 and later; before, it is lowered
    # when the backward first runs, which the training step does): a config key older torch lacks
    eager_backward = (
        {"force_non_lazy_backward_lowering": True}
        if hasattr(functorch_config, "force_non_lazy_backward_lowering")
        else {}
    )
    from functorch.compile import make_boxed_func
    from torch._dynamo.backends.common import aot_autograd

    def recorder(rec: Recipe, graph_id: int, phase: str):
        phase = cap.phase if phase == "forward" else phase  # serve: prefill or decode
        label = cap.label

        def compile_graph(gm, example_inputs):
            tree = cap.trees[rec.name]
            idx = tree.open(f"dynamo.graph.{graph_id}", phase, CALL)
            calls = graph_calls(torch, gm)
            for name, key, shape in calls:
                tree.leaf(name, phase, key, shape=shape)
            args = f"{label}, {len(calls)} ops" if label else f"{len(calls)} ops"
            tree.close(idx, dtype=calls[0][1] if calls else "none", args=args, on_device=bool(calls))
            return make_boxed_func(gm.forward)

        return compile_graph

    def backend(gm, example_inputs):
        graph_id = len(cap.graphs)
        cap.graphs.append(
            {
                "id": graph_id,
                "nodes": sum(1 for n in gm.graph.nodes if n.op == "call_function" or n.op == "call_method"),
            }
        )
        from torch.nn.attention import SDPBackend, sdpa_kernel

        compiled = gm.forward
        for rec in recipes:
            try:
                sdpa = sdpa_kernel([SDPBackend.MATH]) if rec.math_sdpa else contextlib.nullcontext()
                with functorch_config.patch(**eager_backward), sdpa:
                    compiled = aot_autograd(
                        fw_compiler=recorder(rec, graph_id, "forward"),
                        bw_compiler=recorder(rec, graph_id, "backward"),
                        inference_compiler=recorder(rec, graph_id, "forward"),
                        decompositions=rec.decompositions,
                        partition_fn=rec.partition_fn,
                        keep_inference_input_mutations=rec.keep_inference_input_mutations,
                    )(gm, example_inputs)
            except Exception as exc:  # noqa: BLE001 - recorded per recipe; the others go on
                cap.errors.setdefault(rec.name, f"graph {graph_id}: {type(exc).__name__}: {_first_line(exc)}")
        return compiled

    return backend


def _first_line(exc) -> str:
    text = str(exc).strip()
    return text.splitlines()[0][:300] if text else ""


def _fake_copy(torch, module, opts: Options):
    """A copy of ``module`` whose parameters and buffers are (fake) cpu tensors in the trace's dtype, but
    for those a checkpoint in that dtype keeps in float32 (trace._kept_in_float32); parameters require
    grad in training only. A copy, so that Dynamo sees the model as a user compiles it (parameters as
    attributes, graph breaks at the model's own lines) and the caller's module is left as it was."""
    import copy

    from torch._subclasses.fake_tensor import FakeTensorMode

    from opcov.tracing.trace import _kept_in_float32

    want = getattr(torch, opts.dtype)
    kept = _kept_in_float32(torch, module, want)
    mod = copy.deepcopy(module)  # meta tensors copy for free; the fake ones are made below
    made: dict = {}  # id(old tensor) -> new: tied weights stay tied

    def convert(name, t, is_param):
        if id(t) not in made:
            dtype = (torch.float32 if kept(name) else want) if t.is_floating_point() else t.dtype
            if opts.real:
                if t.device.type == "meta":
                    raise UsageError("--real needs a model with real weights; this one was built on meta")
                new = t.detach().to(dtype=dtype, copy=True)
            else:
                new = torch.empty_strided(t.shape, t.stride(), dtype=dtype, device="cpu")
            if is_param:
                new = torch.nn.Parameter(new, requires_grad=opts.mode == "training" and t.requires_grad)
            made[id(t)] = new
        return made[id(t)]

    with contextlib.nullcontext() if opts.real else FakeTensorMode(allow_non_fake_inputs=True) as fake:
        for prefix, sub in mod.named_modules(remove_duplicate=False):
            dot = prefix + "." if prefix else ""
            for n, p in list(sub._parameters.items()):
                if p is not None:
                    setattr(sub, n, convert(dot + n, p, True))  # setattr: RNNs refresh their flat weights
            for n, b in list(sub._buffers.items()):
                if b is not None:
                    sub._buffers[n] = convert(dot + n, b, False)
    return mod, fake


VERBOSE_ENV = "OPCOV_VERBOSE"  # set by 'opcov trace --path compile --verbose'


def _quiet(*names: str) -> None:
    """Keep Dynamo's and Inductor's own log (a failed frame, a recompile) off stderr, unless ``--verbose``
    asked for it: what it says is recorded in the op set (graph breaks, outcome, failure) and said in one
    line by 'opcov trace'."""
    if not os.environ.get(VERBOSE_ENV):
        for name in names:
            logging.getLogger(name).setLevel(logging.CRITICAL)


def capture(torch, module, inputs, opts: Options, recipes: list[Recipe], loss=None) -> Capture:
    """Compile ``module``'s forward (and loss, in training) for every recipe at once and run it,
    with its backward in training, on fake tensors (real ones with ``opts.real``)."""
    import torch._dynamo

    cap = Capture(trees={r.name: calltree.Builder() for r in recipes})
    _quiet("torch._subclasses.fake_tensor", "torch._dynamo", "torch._inductor", "torch.fx.experimental.symbolic_shapes")
    mod, fake = _fake_copy(torch, module, opts)
    fake = fake or contextlib.nullcontext()
    with fake:
        args, kwargs = _move_inputs(torch, inputs, "cpu", opts)
    training = opts.mode == "training"
    mod.train(training)

    def step(args, kwargs):
        out = mod(*args, **kwargs)
        if not training:
            return out
        return loss(out) if loss else default_loss(torch, out)

    torch._dynamo.reset()
    compiled = torch.compile(step, backend=_make_backend(torch, cap, recipes), dynamic=False)
    try:
        with logged_breaks() as breaks, fake:
            try:
                with torch.enable_grad() if training else torch.no_grad():
                    out = compiled(args, kwargs)
                if training:
                    out.backward()
            except Exception as exc:  # noqa: BLE001 - a model Dynamo cannot take to the end: its reason
                cap.failure = _why(exc, breaks)
        cap.breaks = distinct_breaks(breaks)
    finally:
        torch._dynamo.reset()
    return cap


RECOMPILES_LOGGER = "torch._dynamo.guards.__recompiles"  # TORCH_LOGS=recompiles


def capture_serve(torch, module, inputs, opts: Options, recipes: list[Recipe]) -> Capture:
    """The compiled decode step, as transformers' compiled generation runs it: the model's forward under
    ``torch.compile`` (``dynamic=False``: TorchTPU's compile backend refuses ``dynamic=True``), called for
    the prompt (prefill) and then once per new token (decode), with a static KV cache and with a dynamic
    one, on fake tensors. Token selection stays eager (generate compiles the forward only). Each
    recompilation is kept with Dynamo's own reason (the guard that failed: which dimension changed)."""
    import torch._dynamo

    from opcov.tracing import serve

    serve.check_model(module)
    cap = Capture(trees={r.name: calltree.Builder() for r in recipes})
    _quiet("torch._subclasses.fake_tensor", "torch._dynamo", "torch._inductor")
    mod, fake = _fake_copy(torch, module, opts)
    mod.eval()
    fake = fake or contextlib.nullcontext()
    with fake:
        _, kwargs = _move_inputs(torch, inputs, "cpu", opts)
    ids = kwargs["input_ids"]
    torch._logging.set_logs(recompiles=True)  # first: it gives the logger torch's own handler, taken off below
    log = logging.getLogger(RECOMPILES_LOGGER)
    handler = _Lines()
    saved = (log.level, log.propagate, list(log.handlers))
    for other in saved[2]:
        log.removeHandler(other)
    log.setLevel(logging.DEBUG)
    log.propagate = False
    log.addHandler(handler)
    try:
        # Dynamo's own Python warnings (an lru_cache it traces through in MoE routing) stay off the terminal
        with logged_breaks() as breaks, fake, torch.no_grad(), warnings.catch_warnings():
            warnings.simplefilter("ignore", UserWarning)
            for cache_kind in SERVE_CACHES:
                if not _serve_run(torch, cap, mod, recipes, ids, cache_kind, handler.lines, breaks):
                    break
        cap.breaks = distinct_breaks(breaks)
    finally:
        torch._dynamo.reset()
        log.removeHandler(handler)
        for other in saved[2]:
            log.addHandler(other)
        log.setLevel(saved[0])
        log.propagate = saved[1]
        torch._logging.set_logs(recompiles=False)
    cap.phase, cap.label = "forward", ""
    return cap


# The compiled decode step's runs: a static KV cache; a dynamic one; a dynamic one whose length (dimension 2
# of each layer's keys and values) is marked dynamic with bounds before each decode step, as TorchTPU's
# bounded dynamism asks (torch._dynamo.mark_dynamic with min, the prompt's length, and max, the last length).
SERVE_CACHES = ("static", "dynamic", "dynamic-bounded")


def _serve_run(torch, cap: Capture, mod, recipes, ids, cache_kind: str, lines: list, breaks) -> bool:
    """One cache's run of ``capture_serve``: the prompt, then a decode step per new token; False where
    Dynamo could not take it to the end (``cap.failure`` says why)."""
    import torch._dynamo
    from transformers import DynamicCache, StaticCache

    from opcov.tracing import serve

    prompt = ids.shape[1]
    longest = prompt + serve.NEW_TOKENS
    torch._dynamo.reset()
    cap.label = f"cache={cache_kind}"
    forward = torch.compile(mod.forward, backend=_make_backend(torch, cap, recipes), dynamic=False)
    if cache_kind == "static":
        cache = StaticCache(config=mod.config, max_cache_len=longest)
    else:
        cache = DynamicCache(config=mod.config)
    step_ids, position = ids, torch.arange(prompt)
    for step in range(serve.NEW_TOKENS):
        cap.phase = serve.PREFILL if step == 0 else serve.DECODE
        if cache_kind == "dynamic-bounded" and step > 0:
            for layer in getattr(cache, "layers", ()):
                for t in (getattr(layer, "keys", None), getattr(layer, "values", None)):
                    if isinstance(t, torch.Tensor) and t.dim() == 4:
                        torch._dynamo.mark_dynamic(t, 2, min=prompt, max=longest)
        lines.clear()
        try:
            out = forward(input_ids=step_ids, past_key_values=cache, cache_position=position, use_cache=True)
        except Exception as exc:  # noqa: BLE001 - a model Dynamo cannot take to the end: its reason
            why = f"{cache_kind} cache, {cap.phase}: {_why(exc, breaks)}"
            if cache_kind == "static":  # the compiled serving recipe itself: the op set's outcome
                cap.failure = why
                return False
            cap.refused[cache_kind] = why  # a dynamic cache the model's code does not take: said, not fatal
            return True
        cap.recompiles += [
            {"cache": cache_kind, "phase": cap.phase, "step": step, "reason": _guard_line(line)} for line in lines
        ]
        step_ids = out.logits[:, -1].argmax(-1, keepdim=True)  # eager, as generate picks tokens
        position = position[-1:] + 1
    return True


class _Lines(logging.Handler):
    def __init__(self):
        super().__init__(logging.DEBUG)
        self.lines: list[str] = []

    def emit(self, record):
        try:
            self.lines.append(record.getMessage())
        except Exception:  # noqa: BLE001 - a log line we cannot read must not stop the trace
            self.lines.append("unreadable recompile log line")


def _guard_line(text: str) -> str:
    """The failed guard of Dynamo's recompile message ('tensor 'kwargs['input_ids']' size mismatch at index 1.
    expected 8, actual 1'): the first it lists, the latest graph's (the others are older graphs'), else the
    message's first line."""
    lines = [ln.strip() for ln in text.splitlines() if ln.strip()]
    guards = [ln.split(": ", 1)[-1] for ln in lines if ln.startswith("- ")]
    return guards[0] if guards else (lines[0] if lines else "")


def serve_notes(cap: Capture, rec: Recipe) -> list[str]:
    """What a compiled serve op set says of its recompilations per cache, and TorchTPU's rule on dynamic
    shapes where it applies (measured here: the dynamic cache's decode steps, with and without bounds)."""
    from opcov.tracing import serve

    notes = [
        f"serve: the model's forward compiled with dynamic=False and called for the prompt ({serve.PROMPT} tokens: "
        f"prefill) and {serve.NEW_TOKENS - 1} decode steps, with a static KV cache, a dynamic one, and a dynamic "
        "one whose length is marked dynamic with bounds (mark_dynamic(min=prompt, max=prompt + new tokens)); "
        "token selection is not compiled (generate runs it eagerly)"
    ]
    grown = {}  # cache -> recompilations past the first decode step (prefill to decode recompiles with any cache)
    for kind in SERVE_CACHES:
        mine = [r for r in cap.recompiles if r["cache"] == kind]
        grown[kind] = [r for r in mine if r["step"] > 1]
        reasons = list(dict.fromkeys(r["reason"] for r in mine))
        notes.append(
            f"serve, {kind} cache: {len(mine)} recompilation(s), {len(grown[kind])} after the first decode step"
            + (f" (guards that failed: {'; '.join(reasons)[:400]})" if reasons else "")
            + (f"; Dynamo stopped the run: {cap.refused[kind][:300]}" if kind in cap.refused else "")
        )
    if grown["static"]:
        notes.append(
            f"serve: even with a static cache a decode step recompiled ({len(grown['static'])} after the first): "
            "the model's code reads a length as a Python number, so each step is a new graph"
        )
    if rec.bounded_dynamism_of and grown["dynamic"]:
        if "dynamic-bounded" in cap.refused:
            bounded = (
                "marking its length dynamic with bounds was refused (the model's code specializes that length: "
                "see the dynamic-bounded cache's note)"
            )
        elif not grown["dynamic-bounded"]:
            bounded = (
                f"with its length marked dynamic with bounds, {len(grown['dynamic-bounded'])} after the first "
                "decode step: the decode steps share one graph"
            )
        else:
            bounded = f"with its length marked dynamic with bounds, still {len(grown['dynamic-bounded'])}"
        notes.append(
            f"{rec.name}: {rec.bounded_dynamism_of}'s compile backend refuses dynamic=True (NotImplementedError) and takes bounded "
            "dynamism only (torch._dynamo.mark_dynamic with min and max): a dynamic cache recompiled at every "
            f"decode step here ({len(grown['dynamic'])} after the first), as its length grows; {bounded}; a "
            f"static cache recompiled {len(grown['static'])} time(s) after the first decode step"
        )
    return notes


# Dynamo's lines that repeat the break just logged (for the frame it gives up on), not breaks of their own.
REPEATS = ("Failed to handle graph break gracefully", "Encountered graph break that we cannot resume from")


def distinct_breaks(breaks: list[Break]) -> list[Break]:
    """Each break once, with how many times it was hit (a break in every layer is one line of the model),
    leaving out Dynamo's lines that repeat the break before (``REPEATS``) and a break logged again with no
    location (the same reason or graph-break code) for an enclosing frame."""
    seen: dict[tuple, Break] = {}
    located = {(b.reason, b.code) for b in breaks if b.where != "unknown"}
    codes = {b.code for b in breaks if b.where != "unknown" and b.code}
    for b in breaks:
        if b.reason.startswith(REPEATS):
            continue
        if b.where == "unknown" and ((b.reason, b.code) in located or b.code in codes):
            continue
        key = (b.reason, b.where, b.construct)
        seen[key] = replace(seen[key], times=seen[key].times + 1) if key in seen else b
    return list(seen.values())


def _why(exc, breaks) -> str:
    """One line on why the compiled run stopped."""
    text = f"{type(exc).__name__}: {_first_line(exc)}"
    if isinstance(exc, OpcovError):
        return str(exc)
    if breaks and ("data-dependent" in text.lower() or "DataDependent" in text or "DynamicOutputShape" in text):
        where = next((b.where for b in reversed(breaks) if b.where != "unknown"), "")
        return (
            f"{text} (after the graph break{f' at {where}' if where else ''}, the eager code reads tensor values, "
            "which fake tensors do not have; trace with --real)"
        )
    return text


# ---------------------------------------------------------------- the op set


def document(torch, cap: Capture, rec: Recipe, opts: Options) -> dict:
    """The compiled op set of one recipe (``path: compile``), as ``opset`` reads it."""
    tree = cap.trees[rec.name].rows()
    ops: dict = {}
    for row in tree:
        if row["kind"] != CALL:
            cell = ops.setdefault(row["op"], {}).setdefault(row["phase"], {}).setdefault(row["dtype"], {"calls": 0})
            cell["calls"] += row["calls"]
            if row.get("shape") and "shape" not in cell:
                cell["shape"] = row["shape"]
    notes = list(rec.notes)
    if opts.mode == "training":
        notes.append("the optimizer step is not compiled (torch.compile(model) compiles the model): it runs eagerly")
    outcome = "compiled"
    if cap.failure:
        outcome = "failed"
    elif rec.name in cap.errors:
        outcome = "aot_failed"
    compile_rec = {
        "backend": rec.name,
        "recipe": rec.source,
        "version": rec.version,
        "decompositions": len(rec.decompositions),
        "graphs": len(cap.graphs),
        "outcome": outcome,
    }
    if cap.failure:
        compile_rec["failure"] = cap.failure
    if rec.name in cap.errors:
        compile_rec["aot_error"] = cap.errors[rec.name]
    if opts.mode == "serve":  # what was compiled, its recompilations, TorchTPU's rule: the verdict's notes too
        compile_rec["serve"] = serve_notes(cap, rec)
        compile_rec["recompiles"] = cap.recompiles
    return {
        "schema_version": SCHEMA_VERSION,
        "kind": KIND,
        "path": opset.COMPILE,
        "compile": compile_rec,
        "graph_breaks": [b.record() for b in cap.breaks],
        "mode": opts.mode,
        "dtype": opts.dtype,
        "autocast": None,
        "optimizer": "none",
        "provenance": {
            "torch": str(torch.__version__),
            "opcov": __version__,
            "host": provenance.host(),
            "tracing": "real" if opts.real else "fake",
            "target_device": rec.name,
            "traced_on": "cpu (Dynamo and AOTAutograd over cpu tensors; no graph is lowered)",
            "notes": notes,
        },
        "summary": {
            "distinct_ops": len(ops),
            "graphs": len(cap.graphs),
            "graph_breaks": len(cap.breaks),
            "calls": {
                p: sum(c["calls"] for r in ops.values() for c in r.get(p, {}).values())
                for p in (("forward", "backward") if opts.mode != "serve" else opset.SERVE_PHASES)
            },
        },
        "calltree": [node_text(row) for row in tree],
        "ops": ops,
    }


def trace_compiled(
    model,
    inputs=(),
    *,
    backends=("inductor",),
    mode="training",
    dtype="float32",
    real=False,
    loss=None,
    name=None,
    source=None,
    config=None,
    command=None,
    notes=(),
) -> dict[str, OpSet]:
    """The compiled op set of ``model`` for each compile backend in ``backends`` (one Dynamo run).

    A backend that is not installed is a UsageError before any work; a model Dynamo cannot take to
    the end is an op set whose ``compile.outcome`` is ``failed`` with the reason (what was captured
    before it is kept)."""
    opts = Options(mode, dtype, False, "cpu", "none", real)
    # the compiled serve step runs on fake tensors (no generate: nothing reads a token on the host)
    (replace(opts, mode="inference") if mode == "serve" else opts).check()
    torch = import_torch()
    if not real and torch.torch_version.TorchVersion(torch.__version__) < "2.10":
        # AOTAutograd before 2.10 asserts that the fake tensors made here share Dynamo's own fake mode,
        # so every graph would come out 'aot_failed': opcov's limit, not the compile backend's
        raise UsageError(
            f"the compile path on fake tensors needs torch 2.10 or later (this is torch {torch.__version__}): "
            "trace it with --real (small real tensors on the CPU)"
        )
    recipes = [recipe(torch, b) for b in dict.fromkeys(backends)]
    if mode == "serve":
        cap = capture_serve(torch, model, inputs, opts, recipes)
    else:
        cap = capture(torch, model, inputs, opts, recipes, loss)
    params = sum(p.numel() for p in _unique_params(model))
    created = _dt.datetime.now(_dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
    out = {}
    for rec in recipes:
        doc = document(torch, cap, rec, opts)
        doc["model"] = {
            "name": name or type(model).__name__,
            "source": source or f"python:{type(model).__qualname__}",
            "params": params,
        }
        if config:
            doc["model"]["config"] = config
        cmd = command(rec.name) if callable(command) else command
        doc["provenance"].update(
            command=cmd or "opcov.tracing.compiled.trace_compiled(...) from Python: no command reproduces it",
            created=created,
        )
        doc["provenance"]["notes"] = list(notes) + doc["provenance"]["notes"]
        out[rec.name] = OpSet(doc)
    return out


# ---------------------------------------------------------------- from what a user names


def parse_backends(text) -> tuple[str, ...]:
    """``--compile-backend`` values (repeatable, comma lists) as recipe names; UsageError on an unknown one."""
    names = [n.strip() for part in (text or ["inductor"]) for n in part.split(",") if n.strip()]
    known = recipe_names()
    for n in names:
        if n not in known:
            raise UsageError(f"--compile-backend {n!r}: expected one of {', '.join(known)} (comma-separated)")
    return tuple(dict.fromkeys(names)) or ("inductor",)


def command_line(model: str, backend: str, **options) -> str:
    """The ``opcov trace`` line that reproduces one compiled op set."""
    import shlex

    from opcov.tracing import spec

    line = spec.command_line(model, **options)
    return line + " " + shlex.join(["--path", "compile", "--compile-backend", backend])


def trace_compiled_spec(
    model: str,
    *,
    backends=("inductor",),
    mode: str = "training",
    dtype: str | None = None,
    real: bool = False,
    sizes=None,
    out: str | None = None,
) -> dict[str, OpSet]:
    """The compiled op sets (one per compile backend) of anything ``opcov trace MODEL`` builds: a zoo
    name, a transformers model type, a config.json, ``nn:NAME``, a factory. ``out`` is only named
    in the provenance command (where the caller saves it)."""
    from opcov.sources import models, zoo
    from opcov.tracing.spec import is_saved

    if is_saved(model):
        raise UsageError(
            f"{model}: a saved op set cannot be compiled; name the model (zoo name, hf:TYPE, a factory) to trace"
        )
    entry = zoo.BY_NAME.get(model)
    real = real or bool(entry and entry.real)
    sizes = sizes or models.Sizes()
    backends = tuple(dict.fromkeys(backends))
    torch = import_torch()
    for b in backends:  # a backend that is not installed: one line, before the (slow) build
        recipe(torch, b)
    build_mode = "inference" if mode == "serve" else mode  # serve: a prompt made from the inputs built
    built = models.build(entry.spec if entry else model, sizes, mode=build_mode, real=real, zoo_entry=entry)
    if mode == "serve":
        from opcov.tracing import serve

        serve.prepare(torch, built)
    dtype = dtype or (entry.dtype if entry else built.dtype or Options.dtype)
    result = trace_compiled(
        built.model,
        built.inputs,
        backends=backends,
        mode=mode,
        dtype=dtype,
        real=real,
        name=entry.name if entry else built.name,
        source=built.source,
        config=built.config,
        command=lambda b: command_line(model, b, mode=mode, dtype=dtype, real=real, sizes=sizes, out=out),
        notes=built.notes,
    )
    for one in result.values():
        one.doc["model"].update(built.facets)
    return result


def describe(doc: dict) -> str:
    """What a compiled op set says about the compile itself: graphs, graph breaks with where, outcome."""
    rec, breaks = doc["compile"], doc.get("graph_breaks") or []
    lines = [
        f"  compile ({rec['backend']}): {rec.get('graphs', 0)} graph(s), {len(breaks)} graph break(s); "
        + {
            "compiled": "compiled to the end",
            "aot_failed": f"AOTAutograd failed: {rec.get('aot_error', '')}",
            "failed": f"the compiled run stopped: {rec.get('failure', '')}",
        }[rec["outcome"]]
    ]
    lines += [f"    graph break at {b['where']}: {b['reason']} [{b['construct']}]" for b in breaks]
    return "\n".join(lines)


def trace_zoo(entries, modes, backends, root: str | None = None, out=None) -> list[tuple[str, str, str]]:
    """Compile every zoo entry in every mode for every backend into ROOT/<name>/compile/<backend>-<mode>.yaml
    (one Dynamo run per entry and mode), with a progress line; returns the failures (name, mode, why).
    A model whose compiled run stops is written (outcome failed, with why) and counted a failure."""
    import sys
    import time

    from opcov.store import layout
    from opcov.tracing.serve import ZOO as SERVED

    out = out or sys.stderr
    failures = []
    jobs = [(e, m) for e in entries for m in modes if m != "serve" or e.name in SERVED]  # serve: the decoders
    start = time.monotonic()
    for i, (entry, mode) in enumerate(jobs, 1):
        t0 = time.monotonic()
        print(f"{i - 1}/{len(jobs)} {entry.name} {mode}...", file=out, flush=True)
        try:
            paths = {b: layout.compiled_opset_path(entry.name, b, mode, root) for b in backends}
            results = trace_compiled_spec(entry.name, backends=backends, mode=mode)
            status = []
            for b, result in results.items():
                result.save(paths[b])
                rec = result.doc["compile"]
                status.append(f"{b}: {result.doc['summary']['distinct_ops']} ops, {rec['outcome']}")
                if rec["outcome"] != "compiled":
                    failures.append((entry.name, mode, f"{b}: {rec.get('failure') or rec.get('aot_error')}"))
            breaks = len(next(iter(results.values())).doc["graph_breaks"])
            status_text = f"{breaks} graph break(s); " + "; ".join(status)
        except Exception as exc:  # noqa: BLE001 - one model failing must not stop the zoo
            why = str(exc) if isinstance(exc, OpcovError) else f"{type(exc).__name__}: {_first_line(exc)}"
            failures.append((entry.name, mode, why))
            status_text = f"FAILED: {why}"
        print(
            f"{i}/{len(jobs)} {entry.name} {mode}: {status_text} ({time.monotonic() - t0:.1f} s)", file=out, flush=True
        )
    print(f"{len(jobs)} compiled in {time.monotonic() - start:.1f} s, {len(failures)} failure(s)", file=out)
    return failures
