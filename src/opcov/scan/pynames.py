"""The Python-name index: which aten overloads a Python callable dispatches.

People ask "does tpu support F.layer_norm?" or "nn.LayerNorm?", but coverage is kept per aten
overload, and a Python name does not say which overloads it reaches (``nn.LayerNorm`` reaches
``aten::layer_norm``, which decomposes into ``aten::native_layer_norm``; ``torch.softmax``
reaches ``aten::softmax.int`` and ``aten::_softmax``). Only running it tells, so the index is
built once with torch (``build``, ``python scripts/make_pynames.py``): every OpInfo of PyTorch's
test suite (its function, its aliases, its method and in-place variants) and every ``torch.nn``
module of its ModuleInfo list is run on its samples on meta tensors under a TorchDispatchMode
below autograd that also sees composite ops before they decompose (``_recorder``). The result is
committed as data (``layout.pynames_path``):

    # comment lines: what the file is, torch and opcov versions, the command that rebuilt it
    torch.nn.functional.layer_norm<TAB>aten::layer_norm aten::native_layer_norm
    torch.Tensor.add_<TAB>aten::add_.Tensor

one line per Python name, its overloads sorted and separated by spaces (none: the name ran and
dispatched nothing). ``read`` and ``Index.resolve`` never import torch, so ``opcov ops`` (and
the site) answer Python names without it.
"""

from __future__ import annotations

import datetime as _dt
import os

from opcov.errors import DataError

KIND = "opcov python-name index"
DTYPE = "float32"  # samples are drawn at this dtype where the op supports it, else its first
MAX_SAMPLES = 24  # per variant: enough to reach an op's argument-dependent paths
# Short spellings people write, and the module path they stand for (longest first).
PREFIXES = (
    ("torch.nn.functional.", "torch.nn.functional."),
    ("nn.functional.", "torch.nn.functional."),
    ("F.", "torch.nn.functional."),
    ("torch.nn.", "torch.nn."),
    ("nn.", "torch.nn."),
    ("torch.Tensor.", "torch.Tensor."),
    ("Tensor.", "torch.Tensor."),
    ("torch.", "torch."),
)
# Where a bare name is looked for: ``softmax`` is torch.softmax, torch.Tensor.softmax and F.softmax,
# not torch.special.softmax or torch.masked.softmax (those are asked for by their dotted names).
BARE_HOMES = ("torch", "torch.Tensor", "torch.nn.functional", "torch.nn")
# torch.nn classes that hold modules or parameters and compute nothing of their own.
CONTAINERS = frozenset(
    {"Module", "Sequential", "ModuleList", "ModuleDict", "ParameterList", "ParameterDict", "Container"}
)


# ---------------------------------------------------------------- reading (torch-free)


class Index:
    """Python name -> aten overloads, with the header the file carries."""

    def __init__(self, names: dict[str, tuple[str, ...]], header: dict[str, str], path: str = ""):
        self.names, self.header, self.path = names, header, path

    @property
    def torch(self) -> str:
        return self.header.get("torch", "?")

    def resolve(self, query: str) -> list[str]:
        """The indexed Python names ``query`` stands for: a dotted name itself once a short prefix is
        expanded (``F.gelu`` -> ``torch.nn.functional.gelu``, ``nn.LayerNorm``, ``Tensor.softmax``);
        a bare name, that name in each of BARE_HOMES (``softmax``: torch.softmax,
        torch.Tensor.softmax, torch.nn.functional.softmax; ``LayerNorm``: torch.nn.LayerNorm),
        case-insensitively when nothing matches as written. Sorted; [] when none."""
        if "." in query:
            full = expand(query)
            return [full] if full in self.names else []
        for fold in (False, True):
            key = query.lower() if fold else query
            found = sorted(
                n
                for n in self.names
                if n.rsplit(".", 1)[0] in BARE_HOMES
                and (n.rsplit(".", 1)[-1].lower() if fold else n.rsplit(".", 1)[-1]) == key
            )
            if found:
                return found
        return []


def expand(query: str) -> str:
    """``query`` with a short module prefix expanded (``F.x`` -> ``torch.nn.functional.x``,
    ``nn.X`` -> ``torch.nn.X``, ``Tensor.x`` -> ``torch.Tensor.x``); any other dotted name is
    taken under ``torch.`` (``special.expit``)."""
    for short, full in PREFIXES:
        if query.startswith(short):
            return full + query[len(short) :]
    return "torch." + query


def read(path: str) -> Index:
    """The index in ``path``; DataError naming the line when a line is not ``name<TAB>ops``."""
    names: dict[str, tuple[str, ...]] = {}
    header: dict[str, str] = {}
    try:
        with open(path, encoding="utf-8") as f:
            lines = f.read().splitlines()
    except (OSError, UnicodeDecodeError) as exc:
        raise DataError(f"{path}: cannot read the Python-name index ({exc})") from None
    for n, line in enumerate(lines, 1):
        if line.startswith("#"):
            key, sep, value = line[1:].strip().partition(": ")
            if sep and key.isidentifier():
                header[key] = value
            continue
        name, tab, ops = line.partition("\t")
        if not tab or not name or " " in name or any("::" not in op for op in ops.split()):
            raise DataError(f"{path}:{n}: expected 'python.name<TAB>ns::op ns::op...', got {line[:60]!r}")
        names[name] = tuple(ops.split())
    if header.get("kind") != KIND:
        raise DataError(f"{path}: not an {KIND} (no '# kind: {KIND}' line)")
    return Index(names, header, path)


def dumps(names: dict[str, tuple[str, ...]], header: dict[str, str]) -> str:
    """The file text: the header as comment lines, then one line per name, sorted."""
    head = [
        f"# {KIND}: each line is a Python name, a tab, and the aten overloads its forward dispatched",
        f"# kind: {KIND}",
    ] + [f"# {k}: {v}" for k, v in header.items()]
    return "\n".join(head + [f"{n}\t{' '.join(sorted(ops))}" for n, ops in sorted(names.items())]) + "\n"


# ---------------------------------------------------------------- building (needs torch)


def _recorder(torch, seen: set):
    """A dispatch mode that files every overload called into ``seen``, composites included.

    Run below autograd (``_AutoDispatchBelowAutograd``), a CompositeImplicitAutograd op such as
    ``aten::linear`` reaches the mode before it decomposes; the mode then runs its C++ composite
    kernel with itself pushed again, so the ops it decomposes into are filed too, exactly those a
    run with autograd reaches (``decompose()`` could take a Python decomposition instead). A
    backend may have its own kernel for such a parent (tpu's ``aten::linear``), so both count.
    """
    from torch.utils._python_dispatch import TorchDispatchMode

    from opcov.catalog import overload_name

    implicit = torch._C.DispatchKey.CompositeImplicitAutograd

    class Recorder(TorchDispatchMode):
        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            kwargs = kwargs or {}
            seen.add(overload_name(func))
            if torch._C._dispatch_has_kernel_for_dispatch_key(func.name(), "CompositeImplicitAutograd"):
                with self:
                    return func._op_dk(implicit, *args, **kwargs)
            return func(*args, **kwargs)

    return Recorder()


class _Runner:
    """Runs calls under the recorder; remembers which overloads each Python name reached."""

    def __init__(self, torch):
        from opcov.catalog import NO_KERNEL_NAMESPACES, NO_KERNEL_OPS

        self.torch = torch
        self.names: dict[str, set] = {}
        self.ran: set = set()  # names with at least one call that completed
        self.drop_ns, self.drop_ops = NO_KERNEL_NAMESPACES, NO_KERNEL_OPS

    def run(self, name: str, prepared) -> None:
        """For each ``prepare`` in ``prepared``: ``call = prepare()`` unrecorded (building a module,
        drawing a sample), then ``call()`` recorded, filing the overloads reached under ``name``.
        An overload that raised was still reached (no meta kernel, a data-dependent shape)."""
        reached = self.names.setdefault(name, set())
        for prepare in prepared:
            seen: set = set()
            try:
                call = prepare()
                with self.torch._C._AutoDispatchBelowAutograd(), _recorder(self.torch, seen):
                    call()
                self.ran.add(name)
            except Exception:  # noqa: BLE001 - a test suite's samples: some fail on meta; what ran counts
                pass
            for op in seen:
                ns, _, rest = op.partition("::")
                if ns not in self.drop_ns and op not in self.drop_ops and not rest.startswith("sym_"):
                    reached.add(op)

    def result(self) -> dict[str, tuple[str, ...]]:
        """Names that ran or reached an op (one whose every sample failed before any op is left out)."""
        return {n: tuple(sorted(ops)) for n, ops in self.names.items() if ops or n in self.ran}


def _resolve_attr(torch, dotted: str):
    """The object ``torch.<dotted>`` names, or None."""
    obj = torch
    for part in dotted.split("."):
        obj = getattr(obj, part, None)
        if obj is None:
            return None
    return obj


def _variants(torch, op) -> list[tuple[str, object]]:
    """(Python name, callable) for an OpInfo: its function, method and in-place variants and its
    aliases', each only where torch has that public name."""
    out = []
    for alias_name, fn, method, inplace in [(op.name, op.op, op.method_variant, op.inplace_variant)] + [
        (a.name, a.op, a.method_variant, a.inplace_variant) for a in getattr(op, "aliases", ()) or ()
    ]:
        if fn is not None and callable(_resolve_attr(torch, alias_name)):
            out.append(("torch." + alias_name, fn))
        for variant in (method, inplace):
            attr = getattr(variant, "__name__", "")
            if variant is not None and attr.isidentifier() and callable(getattr(torch.Tensor, attr, None)):
                out.append(("torch.Tensor." + attr, variant))
    return out


def _opinfo_dtype(torch, op):
    """DTYPE where the OpInfo supports it on cpu, else its first supported dtype by name."""
    supported = op.supported_dtypes("cpu")
    wanted = getattr(torch, DTYPE)
    return wanted if wanted in supported else (sorted(supported, key=str)[0] if supported else None)


def _opinfo_calls(op, fn, dtype, device) -> list:
    """Thunks preparing ``fn`` on each of the OpInfo's first MAX_SAMPLES samples, drawn afresh
    (an in-place variant changes them)."""
    from opcov.sources.opinfo import opinfo_samples

    samples = []
    for s in opinfo_samples(op, dtype, False, device=device):
        samples.append(s)
        if len(samples) >= MAX_SAMPLES:
            break
    return [lambda s=s: lambda: fn(s.input, *s.args, **s.kwargs) for s in samples]


def _build_opinfos(torch, runner: _Runner, progress) -> int:
    from opcov.sources.opinfo import opinfos

    ops = list(opinfos().values())
    for i, op in enumerate(ops):
        progress(f"OpInfo {i + 1}/{len(ops)}: {op.name}")
        dtype = _opinfo_dtype(torch, op)
        if dtype is None:
            continue
        for name, fn in _variants(torch, op):
            for device in ("meta", "cpu"):  # cpu only where nothing could run on meta
                try:
                    prepared = _opinfo_calls(op, fn, dtype, device)
                except Exception:  # noqa: BLE001 - sample code that cannot run on this device
                    continue
                runner.run(name, prepared)
                if name in runner.ran:
                    break
    return len(ops)


def _module_call(torch, cls, args, kwargs, forward_args, forward_kwargs, training: bool):
    """A thunk building ``cls`` on meta (unrecorded) and returning its forward call."""

    def prepare():
        with torch.device("meta"):
            module = cls(*args, **kwargs)
        module.train(training)
        return lambda: module(*forward_args, **forward_kwargs)

    return prepare


def _build_modules(torch, runner: _Runner, progress) -> tuple[int, int]:
    """torch.nn modules: those of ModuleInfo with its inputs (training and eval), then the other
    public modules that build without arguments, on a (2, 3, 8, 8), (2, 3, 8) or (2, 8) input."""
    from torch.testing._internal.common_modules import module_db

    dtype = getattr(torch, DTYPE)
    done = set()
    for i, info in enumerate(module_db):
        cls = info.module_cls
        if getattr(torch.nn, cls.__name__, None) is not cls:
            continue
        progress(f"ModuleInfo {i + 1}/{len(module_db)}: {cls.__name__}")
        done.add(cls.__name__)
        for training in (True, False):
            try:
                inputs = info.module_inputs_func(
                    info, device="meta", dtype=dtype, requires_grad=False, training=training
                )
            except Exception:  # noqa: BLE001
                continue
            runner.run(
                "torch.nn." + cls.__name__,
                [
                    _module_call(
                        torch,
                        cls,
                        mi.constructor_input.args,
                        mi.constructor_input.kwargs,
                        mi.forward_input.args,
                        mi.forward_input.kwargs,
                        training,
                    )
                    for mi in inputs[:MAX_SAMPLES]
                    if mi.forward_input is not None
                ],
            )
    others = 0
    for attr in sorted(dir(torch.nn)):
        cls = getattr(torch.nn, attr)
        if (
            attr in done
            or attr in CONTAINERS
            or attr.startswith(("Lazy", "_"))
            or not isinstance(cls, type)
            or not issubclass(cls, torch.nn.Module)
        ):
            continue
        progress(f"torch.nn.{attr}")
        name = "torch.nn." + attr
        for shape in ((2, 3, 8, 8), (2, 3, 8), (2, 8)):
            for training in (True, False):
                x = torch.empty(shape, device="meta", dtype=dtype)
                runner.run(name, [_module_call(torch, cls, (), {}, (x,), {}, training)])
            if name in runner.ran:
                others += 1
                break
    return len(done), others


def build(progress=None) -> tuple[dict[str, tuple[str, ...]], dict[str, str]]:
    """(Python name -> aten overloads, header) for the installed torch; ``progress(text)`` is told
    what runs. Imports torch and PyTorch's test-suite lists (the expecttest package)."""
    from opcov.sources.opinfo import OPINFO_LISTS
    from opcov.torchenv import import_torch
    from opcov.version import __version__

    torch = import_torch()
    progress = progress or (lambda text: None)
    import warnings

    runner = _Runner(torch)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        n_opinfos = _build_opinfos(torch, runner, progress)
        n_modules, n_others = _build_modules(torch, runner, progress)
    names = runner.result()
    header = {
        "torch": torch.__version__,
        "opcov": __version__,
        "created": _dt.datetime.now(_dt.timezone.utc).replace(microsecond=0).isoformat(),
        "command": COMMAND,
        "how": (
            f"the samples of {n_opinfos} OpInfos ({', '.join(OPINFO_LISTS)}: each function, alias, method "
            f"and in-place variant torch has a public name for) and of {n_modules} torch.nn modules "
            f"(ModuleInfo, training and eval), plus {n_others} other torch.nn modules built without "
            f"arguments, run on meta tensors (cpu where no sample runs on meta) in {DTYPE} (else the "
            f"op's first dtype), at most {MAX_SAMPLES} samples each, recorded by a TorchDispatchMode below "
            "autograd that also sees the CompositeImplicitAutograd ops before they decompose: the overloads "
            "a backend's kernels may receive, as on meta (device-dependent paths such as dropout's may "
            "differ on an accelerator); prim::, profiler::, aten::detach and aten::sym_* left out as in "
            "'opcov trace'"
        ),
        "names": str(len(names)),
    }
    return names, header


COMMAND = "python scripts/make_pynames.py"


def write(path: str, names, header) -> None:
    """Write the index atomically."""
    os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
    tmp = f"{path}.tmp{os.getpid()}"
    with open(tmp, "w", encoding="utf-8") as f:
        f.write(dumps(names, header))
    os.replace(tmp, path)
