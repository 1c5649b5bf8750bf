"""``opcov run``: run a model for real on the backend's device and keep what happened (an observed run).

The strongest evidence a model can get: not whether each op passes on OpInfo samples, but whether
this model's step ran on the device. One run records

- every op call dispatched with a device tensor (a TorchDispatchMode, on a second step: a mode on the
  stack can change the path the backend takes, so the values and the backend's record come from a
  step run without one), per op and dtype key: calls, and the first exception an op raised (the step
  stops there);
- the backend's own record where it keeps one: PyTorch/XLA's metrics counters (an ``aten::*``
  counter is an op that ran through its CPU fallback) and ``_get_executed_fallback_ops``;
  TorchNeuron's ``torch_neuronx.get_fallback_ops()`` / ``get_executed_ops()`` (written from its
  documentation, not run here: marked so in the file);
- the step's values against CPU: the same weights and inputs, dropout off (an RNN's between layers
  too), outputs (and in training
  the loss and every gradient) compared per tensor with tolerance ``1e-3 + 1e-3 * max|cpu|``.

The model is the zoo's tiny config (``opcov zoo list``) built with real random weights, seeded, or
``module:function`` returning ``(model, inputs)``. The file is JSON (``opcov.verdict.observed``
reads and validates it) under ``coverage/observed/<backend>/<model>.<mode>.json``.

``path="compile"`` runs the device's step through ``torch.compile(model, backend=B)`` (B: the
device's default compile backend, ``backends.COMPILE_BACKEND``, or the one named): the model's forward
and loss compiled, its backward through the compiled backward graph, the optimizer eager, as a user's
compiled training step. It keeps Dynamo's graph breaks (reason and file:line, as ``opcov trace --path
compile`` records them) and the same values and backend record; the ops are not recorded one by one (a
dispatch mode on the stack would change what Dynamo compiles), so a compiled run's error names no op. It
goes under ``coverage/observed/<backend>/compile/``.

``mode="serve"`` runs what serve mode traces instead of a step: transformers' ``generate`` on the prompt,
once per KV cache kind and token choice (``opcov.sources.generate.RUNS``, ``run_values``), on CPU and on
the device, the model built as for inference. A greedy run's tokens must equal CPU's and each step's
logits be within tolerance; a sampling run's tokens must have CPU's shape (each device draws from its
own generator). With ``path="compile"`` the model's forward is compiled (dynamic=False, afresh per run)
and token selection stays eager, as compiled serve mode traces it.
"""

from __future__ import annotations

import contextlib
import copy
import datetime as _dt
import platform
import traceback

from opcov import backends as _backends
from opcov.errors import OpcovError, UsageError, cause_line
from opcov.sources import generate as serving
from opcov.sources.step import as_torch_modules
from opcov.version import __version__

TOLERANCE = (1e-3, 1e-3)
HOST_READS = {"aten::_local_scalar_dense"}  # atol, rtol (relative to the CPU tensor's largest magnitude)


def _first_line(exc) -> str:
    return (type(exc).__name__ + ": " + cause_line(exc))[:300]


def _where(exc) -> str:
    """The exception as Python prints its last line, without the user's traceback that Dynamo appends
    to its message (it names this machine's files)."""
    text = "".join(traceback.format_exception_only(type(exc), exc)).strip()
    return text.split("\nOriginal traceback:", 1)[0].split("\nSet TORCHDYNAMO_VERBOSE", 1)[0].strip()[:300]


def _build(torch, model: str, mode: str):
    """(name, model, inputs, dtype name) for a zoo name or ``module:function``; to serve, the model is
    built as for inference and its inputs are the prompt serve mode traces with (a model that cannot
    generate: one line)."""
    name, built, inputs, dtype = _build_step(torch, model, "inference" if mode == "serve" else mode)
    if mode == "serve":
        from opcov.tracing import serve

        serve.check_model(built)
        inputs = serving.prompt_inputs(torch, inputs, getattr(built, "config", None))
    return name, built, inputs, dtype


def _build_step(torch, model: str, mode: str):
    from opcov.sources import models, zoo

    if ":" in model and model.split(":", 1)[0].replace(".", "").replace("_", "").isalnum():
        # as 'opcov trace' builds it: a factory that raises (SystemExit too) or returns no (nn.Module,
        # inputs) is one line naming it
        built = models.build_factory(model, real=True)
        return model.partition(":")[2], built.model, built.inputs, "float32"
    entry = zoo.BY_NAME.get(model)
    if entry is None:
        raise UsageError(f"{model}: not a zoo model ('opcov zoo list') nor module:function returning (model, inputs)")
    torch.manual_seed(0)
    built = models.build(entry.spec, models.Sizes(), mode=mode, real=True, zoo_entry=entry)
    return entry.name, built.model.to(getattr(torch, entry.dtype)), built.inputs, entry.dtype


def _device(torch, backend):
    return backend.device(torch)


def _sync(torch, backend) -> None:
    if backend.sync:
        backend.sync(torch)


def _backend_record(backend) -> dict:
    """What the backend itself says ran on the CPU (and on the device, where it says so): its record's
    ``fallback_counts`` hook (PyTorch/XLA's metrics counters, TorchNeuron's fallback list)."""
    return backend.fallback_record(HOST_READS)


def _reset_record(backend) -> None:
    if backend.reset_counts:
        backend.reset_counts()


def observe(
    model: str,
    backend_name: str,
    *,
    mode: str,
    import_module=None,
    command: str = "",
    path: str = "eager",
    compile_backend: str | None = None,
) -> dict:
    """Run ``model`` one step on the backend's device (through torch.compile where ``path`` is
    'compile'); the observed-run document."""
    from torch.utils._python_dispatch import TorchDispatchMode

    from opcov.catalog import overload_name
    from opcov.dtypes import call_dtype, dtype_name
    from opcov.sources.step import default_loss, output_tensors

    backend = _backends.get_backend(backend_name, import_module)
    torch = _backends.load(backend)
    import torch.nn.functional as F
    from torch.utils._pytree import tree_flatten

    cb = None
    if path == "compile":
        cb = compile_backend or _backends.COMPILE_BACKEND.get(backend.name)
        if cb is None:
            raise UsageError(f"-b {backend.name}: name the torch.compile backend to run with (--compile-backend NAME)")
        if cb not in torch._dynamo.list_backends(exclude_tags=()):
            raise UsageError(
                f"--compile-backend {cb}: torch.compile has no such backend in this Python (torch "
                f"{torch.__version__}; it has {', '.join(torch._dynamo.list_backends())}): install the package "
                "that registers it"
            )
    name, orig, inputs, dtype = _build(torch, model, mode)
    for mod in orig.modules():
        # an RNN's dropout between layers runs inside aten::lstm / gru with the device's own random
        # stream, out of reach of the F.dropout patch below: off, or a training step never matches CPU
        if isinstance(mod, torch.nn.RNNBase):
            mod.dropout = 0.0
    dev = _device(torch, backend)
    ops: dict = {}

    class Record(TorchDispatchMode):
        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            kwargs = kwargs or {}
            flat = [a for a in tree_flatten((args, kwargs))[0] if isinstance(a, torch.Tensor)]
            on_device = any(t.device.type == dev.type for t in flat) or str(kwargs.get("device", "")).startswith(
                dev.type
            )
            key = None
            if on_device or not flat:
                key = (overload_name(func), call_dtype([dtype_name(t.dtype) for t in flat]))
            try:
                out = func(*args, **kwargs)
            except Exception as exc:
                if key:
                    cell = ops.setdefault(key[0], {}).setdefault(key[1], {"calls": 0})
                    cell["calls"] += 1
                    cell.setdefault("raised", _first_line(exc))
                raise
            if key and (
                on_device
                or any(isinstance(t, torch.Tensor) and t.device.type == dev.type for t in tree_flatten(out)[0])
            ):
                cell = ops.setdefault(key[0], {}).setdefault(key[1], {"calls": 0})
                cell["calls"] += 1
            return out

    def move(x, where):
        if isinstance(x, torch.Tensor):
            return x.to(where)
        if isinstance(x, dict):
            return {k: move(v, where) for k, v in x.items()}
        if isinstance(x, (list, tuple)):
            return type(x)(move(v, where) for v in x)
        return x

    def step(m, where, record: bool, compiled: bool = False):
        if mode == "serve":  # generate's runs; on the compile path, the device's with its forward compiled
            with Record() if record else contextlib.nullcontext():
                return serving.run_values(torch, m, move(inputs, where), compile_with=cb if compiled else None), None
        m.train(mode == "training")
        grad = torch.enable_grad() if mode == "training" else torch.no_grad()
        ctx = Record() if record else None
        with grad:
            if ctx:
                ctx.__enter__()
            try:
                x = move(inputs, where)
                out = m(**x) if isinstance(x, dict) else m(x) if isinstance(x, torch.Tensor) else m(*x)
                loss = None
                if mode == "training":
                    loss = default_loss(torch, out)
                    loss.backward()
                    params = [p for p in m.parameters() if p.grad is not None]
                    torch.optim.AdamW(params, lr=1e-3, foreach=False).step()
            finally:
                if ctx:
                    ctx.__exit__(None, None, None)
        return out, loss

    def compared(out, loss, m) -> dict:
        """label -> tensor: each output, and in training the loss and each parameter's gradient by name
        (matched by label, so the device's and CPU's lists pair up even if their orders differ; a compiled
        model's names are its original module's); to serve, generate's values (run_values)."""
        if mode == "serve":
            return dict(out)
        got = {f"output {i}": t for i, t in enumerate(output_tensors(out))}
        if mode == "training":
            got["loss"] = loss
            got.update((f"grad {n}", p.grad) for n, p in getattr(m, "_orig_mod", m).named_parameters())
        return got

    F_dropout, F_sdpa = F.dropout, F.scaled_dot_product_attention
    F.dropout = lambda input, p=0.5, training=True, inplace=False: input  # random streams differ

    def sdpa_no_dropout(query, key, value, attn_mask=None, dropout_p=0.0, *args, **kwargs):
        return F_sdpa(query, key, value, attn_mask, 0.0, *args, **kwargs)

    F.scaled_dot_product_attention = sdpa_no_dropout
    result: dict = {"ran": False}
    try:
        ref = copy.deepcopy(orig)
        replaced = as_torch_modules(torch, ref)
        if replaced:
            result["replaced_modules"] = replaced
        torch.manual_seed(2)
        try:
            want = compared(*step(ref, "cpu", False), ref)
        except Exception as exc:  # the reference, not the device: no observation to record
            raise OpcovError(
                f"{model}: its {mode} step fails on CPU, the reference ({_first_line(exc)}); nothing observed on "
                f"{backend.name}: check the model and its inputs"
            ) from None

        def on_device():
            m = copy.deepcopy(orig).to(dev)
            if hasattr(m, "tie_weights"):
                m.tie_weights()
            return m

        # The step as a user runs it, with no Python dispatch mode on it: a mode on the stack can change
        # the path XLA takes (t5's training step gave other logits under a pass-through mode). Its values
        # and the backend's own record are the observation; a second step under the recording mode
        # names the ops dispatched (and the op that raised).
        _reset_record(backend)
        torch.manual_seed(2)
        with _breaks_kept(torch, cb) as breaks:
            try:
                m = on_device()
                if cb and mode != "serve":  # serve compiles the forward generate calls (run_values)
                    m = torch.compile(m, backend=cb)
                got_out, got_loss = step(m, dev, False, compiled=True)
                got = compared(got_out, got_loss, m)
                _sync(torch, backend)
                got = {k: None if t is None else t.detach().to("cpu") for k, t in got.items()}
                result["ran"] = True
            except Exception as exc:  # the model's failure on the device is the observation
                result["error"] = _first_line(exc)
                result["where"] = _where(exc)
                got = None
        record = _backend_record(backend)
        torch.manual_seed(2)
        try:
            if not cb:  # a dispatch mode would change what Dynamo compiles: a compiled run names no ops
                step(on_device(), dev, True)
                _sync(torch, backend)
        except Exception:  # noqa: BLE001 - the recording names the op that raised; the result is the first step's
            pass
        if got is not None:
            result["values"] = _compare(torch, want, got, mode)
    finally:
        F.dropout, F.scaled_dot_product_attention = F_dropout, F_sdpa
    b = {
        "name": backend.name,
        "package": backend.package or "torch",
        "version": backend.installed_version() or "unknown",
        "device_type": backend.device_type,
    }
    doc = {
        "schema_version": 1,
        "evidence": "observed",
        "backend": b,
        "model": {"name": name, "mode": mode, "dtype": dtype, "source": model, **_serve_record(mode)},
        "provenance": {
            "torch": str(torch.__version__),
            "opcov": __version__,
            "created": _dt.datetime.now(_dt.timezone.utc).replace(microsecond=0).isoformat(),
            "command": command,
            "host": {"platform": platform.platform(terse=True), "machine": platform.machine()},
            "device": str(dev),
            "settings": _backends.settings(backend, torch),
        },
        "result": result,
        "backend_record": record,
        "ops": {op: dict(sorted(cells.items())) for op, cells in sorted(ops.items())},
    }
    if cb:
        doc["compile"] = {
            "backend": cb,
            "graph_breaks": breaks,
            "ops": "not recorded: a dispatch mode on the stack would change what Dynamo compiles",
        }
    return doc


@contextlib.contextmanager
def _breaks_kept(torch, compile_backend):
    """Dynamo's graph breaks during the block (a list of {where, reason, construct}, distinct, as
    ``opcov trace --path compile`` records them), with Dynamo's caches emptied first; nothing off the
    compile path."""
    kept: list = []
    if not compile_backend:
        yield kept
        return
    from opcov.tracing import compiled as ctrace

    torch._dynamo.reset()
    with ctrace.logged_breaks() as seen:
        try:
            yield kept
        finally:
            kept += [b.record() for b in ctrace.distinct_breaks(seen)]


def _serve_record(mode: str) -> dict:
    """A serve run's model record: what generate was run with (the runs of opcov.sources.generate)."""
    if mode != "serve":
        return {}
    runs = {run.name: run.args_text() for run in serving.RUNS}
    return {"serve": {"prompt": serving.PROMPT, "new_tokens": serving.NEW_TOKENS, "runs": runs}}


def _compare(torch, want: dict, got: dict, mode: str) -> dict:
    """The run's values against CPU's (label -> tensor each): a floating tensor within tolerance; in a
    serve run any other (tokens) equal. The worst in tolerances and where."""
    worst, n, at, off = 0.0, 0, "", ""
    for label, a in want.items():
        b = got.get(label)
        if a is None or not a.numel() or (mode != "serve" and not a.is_floating_point()):
            continue
        if b is None or a.shape != b.shape:
            worst, at, off = float("inf"), label, "shape differs"
            break
        if a.is_floating_point():
            a = a.detach().double()
            tol = TOLERANCE[0] + TOLERANCE[1] * a.abs().max().item()
            err = (a - b.double()).abs().nan_to_num(float("inf")).max().item() / tol
        else:
            err = 0.0 if torch.equal(a, b.to(a.dtype)) else float("inf")
        if err > worst:
            worst, at, off = err, label, "not equal"
        n += 1
    tol = f"tolerance {TOLERANCE[0]:g} + {TOLERANCE[1]:g} x max|cpu|"
    against = f"a CPU run of the same weights and inputs, dropout off; per tensor, {tol}"
    if mode == "serve":
        against = (
            "a CPU run of the same weights and prompt, generate's runs: a greedy run's tokens equal and each step's "
            f"logits within {tol}; a sampling run's tokens of the same shape (each device draws from its own "
            "generator)"
        )
    return {
        "compared_tensors": n,
        "max_error_x_tolerance": round(worst, 4) if worst != float("inf") else off,
        "worst_at": at,
        "match": worst <= 1.0,
        "against": against,
    }
