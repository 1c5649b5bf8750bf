"""Second case source: op calls captured from model traces, replayed one call at a time.

OpInfo reaches about 600 of the ~3,100 aten overloads; models reach others (index_put_,
_grouped_mm, the fused backward kernels). A ``trace.<model>`` group builds a zoo model (small
sizes, real CPU weights, seeded), runs it on CPU (an inference forward; a training step: forward,
loss, backward, AdamW; each with the input variants its op set holds) under a TorchDispatchMode that
copies the arguments of the first call of each distinct call signature (overload, dtype key and
signature class: ranks, 0-d/empty/non-contiguous, path-selecting scalars), and replays each copied
call as one case: the op alone, with the values the model gave it (valid indices, realistic
magnitudes), forward only. The verdict prefers these cases, a model's own calls, for that model.

The calls are CPU's: composite ops that pick a path per device (scaled-dot-product attention,
dropout) were decomposed the way CPU does, so CPU-only kernels (``*_for_cpu``, mkldnn) are left
out; a device would never receive them. Where the model has an op set recorded on the probed backend
itself (``opcov trace MODEL --on BACKEND``: ``coverage/models/MODEL/on/BACKEND-MODE.yaml``, the one
``opcov check`` judges that backend with), that mode's step is also run on the device, and each
distinct call of that op set's ops the CPU step did not make is copied to CPU and replayed the same
way: the ops the backend really runs (XLA's ``native_batch_norm`` for layer norm, its ``*_copy`` views,
``mm`` under a 3-d ``linear``) get the model's own calls as evidence too. An op with no CPU kernel
(``xla::max_pool2d_forward``) has no reference to compare with and is left out.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass

from opcov import backends
from opcov.dtypes import call_dtype, dtype_name
from opcov.errors import UsageError
from opcov.probe import composites as composite_calls
from opcov.probe.record import signature
from opcov.probe.sample import Loaded, factory_device_kw, op_call
from opcov.sources import generate, models, zoo
from opcov.sources.step import as_torch_modules, default_loss, input_variants
from opcov.store import layout, opset

TRACE_PREFIX = "trace."
MAX_SIGS_PER_KEY = 32  # distinct signature classes replayed per (overload, dtype key): a bound, rarely met
# CPU-only kernels and host-side metadata ops: a device never receives them.
EXCLUDE = re.compile(
    r"cpu|mkldnn|nnpack|^aten::sym_|^aten::_local_scalar_dense$|^aten::detach$|"
    r"^aten::lift_fresh$|^aten::_to_copy$|^aten::copy_$|^aten::empty"
)


def zoo_names() -> dict:
    """Zoo model name -> its dtype (without importing torch or transformers)."""
    return {e.name: e.dtype for e in zoo.ZOO}


@dataclass(frozen=True)
class Target:
    """A model whose own calls a probe replays, named by its saved op set (``opcov probe --opsets``): the
    cases are filed under the op set's model name (a cell's ``traced``), which the verdict looks for."""

    name: str  # the op set's model name
    spec: str  # what rebuilds the model (opcov.sources.models.build): a factory 'pkg.mod:fn', 'hf:...', 'nn:...'
    dtype: str
    modes: tuple  # the op sets' modes: the steps captured


def opset_targets(paths) -> list[Target]:
    """The replay targets of op-set files or folders (each model once, with the modes its files hold); a
    UsageError names a file whose model cannot be rebuilt (no factory or zoo source recorded)."""
    found: dict = {}
    for path in paths:
        files = (
            [os.path.join(path, f"{m}.yaml") for m in opset.MODES if os.path.isfile(os.path.join(path, f"{m}.yaml"))]
            if os.path.isdir(path)
            else [path]
        )
        if not files:
            raise UsageError(f"--opsets: {path} holds no inference.yaml or training.yaml op set")
        for file in files:
            doc = opset.load(file)
            if doc.get("path") == "compile":
                raise UsageError(f"--opsets: {file} is a compiled op set; replay takes eager ones")
            model = doc.get("model") or {}
            name, source = str(model.get("name") or ""), str(model.get("source") or "")
            entry = zoo.BY_NAME.get(name)
            spec = entry.spec if entry else source[len("factory:") :] if source.startswith("factory:") else source
            if not name or not spec or spec == "test" or ("config" in model and not entry and source.startswith("hf:")):
                raise UsageError(
                    f"--opsets: {file}: its model ({name or '?'}, source {source or '?'}) cannot be rebuilt "
                    "to replay its calls; trace it from a zoo name or a factory (opcov trace pkg.mod:fn)"
                )
            have = found.get(name)
            modes = tuple(sorted({*(have.modes if have else ()), str(doc.get("mode"))}))
            found[name] = Target(name, spec, str(doc.get("dtype") or "float32"), modes)
    return list(found.values())


def _coverage_dir() -> str | None:
    """Where op sets recorded on a backend are read from: ./coverage, as 'opcov check' reads by default,
    else the bundled data."""
    if os.path.isdir(os.path.join(layout.DEFAULT_COVERAGE, layout.MODELS)):
        return layout.DEFAULT_COVERAGE
    return layout.bundled_coverage()


def ondevice(name: str, backend: str, device_type: str, coverage_dir: str | None = None) -> dict:
    """What ``capture`` runs on the device for zoo model ``name``: ``{"device": device_type, "modes":
    {mode: [op, ...]}}`` for each mode with an op set recorded on ``backend`` itself at the zoo's dtype
    (the one ``opcov.verdict.check.own_path`` judges that backend with), its kernel ops; {} when none.
    Torch-free: the probe's parent picks this before any worker starts."""
    cov = coverage_dir if coverage_dir is not None else _coverage_dir()
    if not cov:
        return {}
    modes = {}
    for mode in ("inference", "training"):
        path = layout.ondevice_opset(os.path.join(layout.models_dir(cov), name), backend, mode)
        if path is None:
            continue
        doc = opset.load(path)
        if doc.get("dtype") == zoo.BY_NAME[name].dtype:
            modes[mode] = sorted(doc.get("ops") or {})
    return {"device": device_type, "modes": modes} if modes else {}


def capture(name: str, on: dict | None = None, only=None, *, spec: str = "", dtype: str = "", modes=(), composites=()):
    """[(OpOverload, args, kwargs, device_kw)] of one zoo model's steps on CPU (arguments copied): each
    distinct call signature (op, dtype key, signature class: opcov.probe.record.signature) once, over an
    inference forward and a training step (forward, loss, backward, one AdamW step), each with every
    input variant its op set was traced with (as built, and with a padded attention mask where the
    model takes one). With ``on`` (``ondevice``): then each of its modes run on the device the same way,
    adding the calls of that mode's op set's ops that no CPU step made (copied to CPU; ``device_kw``
    names a factory's device argument, which the replay sets to the device). ``only`` (a compiled
    pattern): keep only the calls of the ops it finds (on the device, nothing else is copied). ``composites``: the
    composite ops the backend overrides (probe.composites.overridden), whose calls CPU's steps decompose before the
    mode sees them: caught at CPU's autograd key and kept as calls of their own (the backend runs its kernel)."""
    import torch
    import torch.utils._pytree as pytree
    from torch.utils._python_dispatch import TorchDispatchMode

    entry = zoo.BY_NAME.get(name)
    if spec and entry is not None and spec != entry.spec:
        entry = None  # a factory or another model under a zoo name: built from its own spec alone
    # else the zoo entry's sizes and config, as its op set was traced (without them a zoo decoder was built at
    # its default config's full size: mistral's 7 B parameters, real-valued, on CPU)
    spec = spec or entry.spec  # type: ignore[union-attr]
    want = getattr(torch, dtype or entry.dtype)  # type: ignore[union-attr]
    seen: dict = {}
    calls = []

    def conv(x):
        return x.to(want) if isinstance(x, torch.Tensor) and x.is_floating_point() else x

    def dts(tree):
        return [dtype_name(t.dtype) for t in pytree.tree_leaves(tree) if isinstance(t, torch.Tensor)]

    def selected(op: str) -> bool:
        return only is None or bool(only.search(op) or only.search(op.split(".", 1)[0]))

    class Capture(TorchDispatchMode):
        """Copies the first call of each new signature; on the device (``dev``) only the calls of
        ``ops`` with a device tensor (or a factory making one), their arguments copied to CPU."""

        def __init__(self, dev=None, ops=frozenset()):
            super().__init__()
            self.dev, self.ops = dev, ops
            self.catch = None

        def __enter__(self):
            if self.dev is None and composites:  # CPU's step: the overridden composites' calls too
                self.catch = composite_calls.catching(torch, composites)
                self.caught = self.catch.__enter__()
            return super().__enter__()

        def __exit__(self, *exc):
            out = super().__exit__(*exc)
            if self.catch is not None:
                self.catch.__exit__(*exc)
                self.catch = None
                for func, a, k in self.caught:
                    if selected(func.name()):
                        self.keep(func, func.name(), a, k)
            return out

        def __torch_dispatch__(self, func, types, a=(), k=None):
            k = k or {}
            op = func.name()
            if not EXCLUDE.search(op) and selected(op) and (self.dev is None or self.wanted(func, op, a, k)):
                self.keep(func, op, a, k)
            return func(*a, **k)

        def wanted(self, func, op, a, k) -> bool:
            if op not in self.ops or not torch._C._dispatch_has_computed_kernel_for_dispatch_key(op, "CPU"):
                return False  # not the recorded op set's, or no CPU reference to compare with
            dev_type = self.dev.type
            on_dev = any(isinstance(t, torch.Tensor) and t.device.type == dev_type for t in pytree.tree_leaves((a, k)))
            return on_dev or str(k.get("device", "")).startswith(dev_type)

        def keep(self, func, op, a, k) -> None:
            key = (op, call_dtype(dts((a, k))))
            sigs = seen.setdefault(key, set())
            if len(sigs) >= MAX_SIGS_PER_KEY:
                return
            try:
                sig = signature(func, a, k)  # metadata only: no device sync
            except Exception:  # noqa: BLE001 - no class: one call of the key stands for all
                sig = ""
            if sig in sigs:
                return
            sigs.add(sig)
            device_kw = factory_device_kw(k, "cpu" if self.dev is None else self.dev.type)
            if device_kw:  # a factory: copied as made on CPU, made on the device by the replay
                k = dict(k, device=torch.device("cpu"))
            # a device tensor's copy is a CPU tensor (the replay moves it back), as a CPU step's would be;
            # a forward call keeps which inputs require grad, so the device runs it under its own autograd
            # (its checks, e.g. no complex abs, and the backward it takes: opcov.probe.execute's bwd)
            grad = torch.is_grad_enabled() and not func._schema.is_mutable

            def copy(t):
                c = t.detach().to("cpu", copy=True)
                return c.requires_grad_(True) if grad and t.requires_grad else c

            a, k = pytree.tree_map(lambda t: copy(t) if isinstance(t, torch.Tensor) else t, (a, k))
            calls.append((func, a, k, device_kw))

    runs = [(mode, None, frozenset()) for mode in (modes or ("inference", "training"))]
    if on:
        dev = torch.device(on["device"])
        record = backends.for_device(dev.type)
        if (
            record is not None and record.device_hook
        ):  # its runtime starts here (autograd's engine needs its device count)
            dev = record.device(torch)
        runs += [(mode, dev, frozenset(ops)) for mode, ops in sorted(on["modes"].items())]
    for mode, dev, ops in runs:
        torch.manual_seed(0)
        built = models.build(spec, models.Sizes(), mode=_build_mode(mode), real=True, zoo_entry=entry)
        model = built.model.to(want)
        if dev is not None:
            model = model.to(dev)
            if hasattr(model, "tie_weights"):  # moving a model may untie shared weights
                model.tie_weights()
        else:  # CPU's steps run torch's modules, where the backend's import replaced one (torch_xla's nn.GRU)
            as_torch_modules(torch, model)
        model.train(mode == "training")
        if mode == "serve":  # generate's runs, as serve mode traces them (opcov.sources.generate)
            with Capture(dev, ops):
                _serve(torch, model, built, conv, dev)
            continue
        for _, inputs in input_variants(torch, built):
            inputs = pytree.tree_map(conv, inputs)
            if dev is not None:
                inputs = pytree.tree_map(lambda t, d=dev: t.to(d) if isinstance(t, torch.Tensor) else t, inputs)
            if isinstance(inputs, dict):
                args, kwargs = (), inputs
            elif isinstance(inputs, (tuple, list)):
                args, kwargs = tuple(inputs), {}
            else:
                args, kwargs = (inputs,), {}
            with Capture(dev, ops):
                if mode == "inference":
                    with torch.no_grad():
                        model(*args, **kwargs)
                    continue
                out = model(*args, **kwargs)
                default_loss(torch, out).backward()
                params = [p for p in model.parameters() if p.grad is not None]
                torch.optim.AdamW(params, lr=1e-3, foreach=True).step()
            model.zero_grad(set_to_none=True)
    return calls


def _build_mode(mode: str) -> str:
    """The mode a model is built for: a served model is built as for inference (its prompt made from those inputs)."""
    return "inference" if mode == "serve" else mode


def _serve(torch, model, built, conv, dev) -> None:
    """A serve op set's step: transformers' ``generate`` on the prompt, once per run of serve mode (KV caches,
    greedy and sampling), each seeded as the tracer seeds it."""
    import torch.utils._pytree as pytree

    prompt = generate.prompt_inputs(torch, built.inputs, getattr(model, "config", None))
    prompt = pytree.tree_map(conv, prompt)
    if dev is not None:
        prompt = pytree.tree_map(lambda t: t.to(dev) if isinstance(t, torch.Tensor) else t, prompt)
    model.eval()
    with torch.no_grad():
        for i, run in enumerate(generate.RUNS):
            torch.manual_seed(i)
            model.generate(**prompt, **run.kwargs())


def load(group: dict):
    """The Loaded group of a ``trace.<model>`` source: one sample per captured call."""
    name = group["source"][len(TRACE_PREFIX) :]
    only = re.compile(group["ops"][0]) if group.get("ops") else None  # --ops: the calls of the ops it selects
    samples = []
    target = {
        "spec": group.get("spec", ""),
        "dtype": group["dtype"] if group.get("spec") else "",
        "modes": group.get("modes", ()),
    }
    found = capture(name, group.get("on"), only, composites=tuple(group.get("composites", ())), **target)
    for func, args, kwargs, device_kw in found:
        sample = op_call(func, args, kwargs)
        sample.device_kw = device_kw
        samples.append(sample)
    return Loaded(None, samples, (), False, True, False)
