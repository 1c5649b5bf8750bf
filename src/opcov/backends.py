"""Device backends opcov knows: one record each, which every module reads.

A backend is one ``Backend`` record: its device type, what to import, its dispatch key, what its
fallback does, its torch.compile backend, its own tests, what it patches above the dispatcher, the
live hooks it brings (settings, device, sync, fallback counters) and how to make its data. No module
outside this one names a backend: each asks the record (docs/adding-a-backend.md).

Listing backends never imports them: installed versions and out-of-tree
PrivateUse1 backends come from package metadata (``torch.backends`` entry points),
so ``opcov backends`` stays fast and cannot crash on a broken backend. A backend opcov does not ship
is added by its record: ``register(Backend(...))`` in Python, or a TOML file of records named by
``OPCOV_BACKEND_RECORDS`` (``records_from``).
"""

from __future__ import annotations

import functools
import importlib
import operator
import os
import re
import stat
import sys
from collections.abc import Callable
from dataclasses import dataclass, field, fields, replace

from opcov.errors import BackendImportError, DataError, UsageError

ENTRY_POINT_GROUP = "torch.backends"  # torch's autoload group, used by torch-tpu
PLUGIN_GROUP = "opcov.backends"  # vendors may describe their backend to opcov here
RECORDS_ENV = "OPCOV_BACKEND_RECORDS"  # TOML files of backend records, os.pathsep-separated


@dataclass(frozen=True)
class Fallback:
    """What the backend's boxed fallback does with an op it has no kernel for, where opcov knows it.

    ``kind``: cpu (runs the op on the CPU), error (raises) or unknown; ``enabled``: None where only the
    backend's settings tell (the scan records them); ``switch``: how a user turns a disabled CPU
    fallback on, as a fix names it."""

    kind: str = "unknown"
    enabled: bool | None = None
    switch: str = ""


@dataclass(frozen=True)
class Compile:
    """The backend on the torch.compile path.

    ``backend``: the torch.compile backend its users pass by default (``opcov run --path compile``);
    ``traced``: opcov traces op sets with its recipe (opcov.tracing.compiled.RECIPES), so the compile
    verdict judges them; ``scanned``: ``opcov scan B --path compile`` reads its compile coverage;
    ``probed``: ``opcov probe B --path compile`` compiles OpInfo samples on it here; ``deny``: (op, why)
    of the ops its own tests keep off compile (an expectation, not a result)."""

    backend: str
    traced: bool = True
    scanned: bool = True
    probed: bool = False
    deny: tuple[tuple[str, str], ...] = ()
    # Its recipe, as opcov traces a compiled op set for it (opcov.tracing.compiled): the decomposition table
    # AOTAutograd applies ('' none; 'inductor' Inductor's; 'MODULE:NAME' a table the backend's package keeps,
    # read in a child process), its partitioner ('default' or 'min_cut'), whether inference input mutations
    # stay in the graph, whether its attention takes SDPA's math path, where the compile backend lives, and
    # what the recipe leaves out of the real compiler.
    table: str = ""
    partitioner: str = "default"
    keep_input_mutations: bool = True
    math_sdpa: bool = False
    source: str = ""  # '{ops}' in it: the table's ops
    recipe_notes: tuple[str, ...] = ()
    # What its compiler does with an AOT graph's node (opcov.scan.compiled): 'inductor' (Inductor's lowerings
    # and fallbacks), 'cpu_partition' (a node without a lowering is partitioned out to run on the CPU, as its
    # eager fallback runs it), 'eager' (each node through the backend's eager kernels); ``lowering_note`` says so.
    lowering: str = "eager"
    lowering_note: str = ""
    # Refuses dynamic=True and takes bounded dynamism only (mark_dynamic with min and max): a serve trace says
    # what that does to a dynamic KV cache's decode steps.
    bounded_dynamism: bool = False


@dataclass(frozen=True)
class Lazy:
    """A backend that records ops into a graph and runs them only when the graph is synchronised, its CPU
    fallback counted per op (PyTorch/XLA). The probe (opcov.probe.lazy) ends every device step with the
    record's ``sync``, so that a lowering or compile error is the step's own, and reads what fell back there
    with ``fell_back``; a new graph compiles, so a group keeps at most ``samples`` samples (the environment
    variable OPCOV_<NAME>_MAX_SAMPLES overrides it); ``host_reads``: overloads that read a value to the host
    through the fallback's kernel (a sync, not a missing lowering); ``storage``: False where its tensors have
    none (aliasing is then judged by views); ``what``: its name in notes."""

    what: str
    samples: int = 3
    host_reads: tuple[str, ...] = ()
    storage: bool = True
    clear: Callable[[], None] | None = field(default=None, repr=False)  # forget what fell back so far
    fell_back: Callable[[], list] | None = field(default=None, repr=False)  # overloads through the fallback since


@dataclass(frozen=True)
class RunsHere:
    """How opcov runs the backend in this Python (``opcov trace --on``, ``check --replay``):
    ``module``: what gives the device (None: torch itself), ``device``: the device to put tensors on,
    ``what``: what it is, ``hint``: how to get a Python where it runs."""

    module: str | None
    device: str
    what: str
    hint: str = ""


@dataclass(frozen=True)
class Declared:
    """What torch's source says of a dispatch key whose build cannot be loaded here (opcov.scan.declared):
    its boxed fallback as the source registers it, and its test-suite file, relative to the torch package."""

    fallback: tuple[tuple[str, object], ...] = ()
    test_list: str = ""

    def fallback_record(self) -> dict | None:
        return dict(self.fallback) if self.fallback else None


@dataclass(frozen=True)
class Backend:
    """One device backend as the dispatcher sees it, and everything opcov does differently for it."""

    name: str
    device_type: str
    dispatch_key: str
    package: str | None = None  # distribution that provides it (None: part of torch)
    module: str | None = None  # what to import to register its kernels
    note: str = ""
    setup: str = ""  # how to contribute: what making this backend's data needs where it is not installed
    fallback: Fallback = Fallback()
    compile: Compile | None = None
    runs_here: RunsHere | None = None
    declared: Declared | None = None
    reference: bool = False  # the reference every probe compares with; a CPU fallback runs what it runs
    control: bool = False  # a reference the others are judged against, no target to compare (site)
    probe_note: str = ""  # the first note of its probed files
    vendor: str = ""  # who makes it, as its own tests' expectations are credited ('TorchTPU')
    vendor_tests: str = ""  # where its own op tests live (read by 'opcov vendor-tests')
    python_patches: str = ""  # what importing it changes above the dispatcher, which no scan sees
    # (op, why) of each call its Python patch takes before the dispatcher and raises on (opcov.verdict.resolve)
    raises_above: tuple[tuple[str, str], ...] = ()
    precision_setting: str = ""  # its own matmul precision setting, as a low-precision pass's fix names it
    # (kernel, generic op) of the ATen kernels made for this device type, which ATen's composites call only there
    # (opcov.branches.foreign): another device's graph holding one is judged as the generic op it stands for
    own_kernels: tuple[tuple[str, str], ...] = ()
    lazy: Lazy | None = field(default=None, repr=False)  # runs ops when a graph is synchronised (probe.lazy)
    build_flag: str = ""  # torch.backends.<flag>.is_built(): its kernels exist only in builds with them
    # Live code the backend brings; each is given torch (never called where the backend is not loaded).
    in_build: Callable[[], bool] | None = field(default=None, repr=False)  # without importing torch
    read_settings: Callable[..., dict] | None = field(default=None, repr=False)  # (torch) -> settings
    device_hook: Callable | None = field(default=None, repr=False)  # (torch) -> its device, where torch's is not
    sync: Callable | None = field(default=None, repr=False)  # (torch) -> None: run what it deferred
    fallback_counts: Callable[..., dict] | None = field(default=None, repr=False)  # (host_reads) -> its record
    reset_counts: Callable[[], None] | None = field(default=None, repr=False)

    def data_commands(self) -> tuple[str, str]:
        """The commands that make this backend's data: a registered scan (no device) and a probe (on it).
        A PrivateUse1 backend names its module: the key is claimed by whichever module registers first."""
        imp = f" --import {self.module}" if self.module and self.dispatch_key == "PrivateUse1" else ""
        return f"opcov scan {self.name}{imp}", f"opcov probe {self.name}{imp}"

    @property
    def autograd_key(self) -> str:
        return "Autograd" + self.dispatch_key

    def installed_version(self) -> str | None:
        """The providing distribution's version, read from metadata (no import)."""
        return _dist_version(self.package or "torch")

    def available_in_build(self) -> bool:
        """Whether this torch build holds its kernels (cuda and mps kernels exist only in builds that
        include them); read without importing torch."""
        return self.in_build() if self.in_build else True

    def device(self, torch):
        """The device to put tensors on (its runtime starts here where it has one of its own)."""
        return self.device_hook(torch) if self.device_hook else torch.device(self.device_type)

    def fallback_record(self, host_reads=frozenset()) -> dict:
        """What the backend itself says ran through its fallback (and on the device, where it says so)."""
        if self.fallback_counts is None:
            return {"source": "none: this backend keeps no record of fallbacks", "tested": True}
        return self.fallback_counts(host_reads)


# ---------------------------------------------------------------- the hooks of the built-in backends


def _on_macos() -> bool:
    return sys.platform == "darwin"


def _cuda_in_build() -> bool:
    """Whether the installed torch is a CUDA build, read from its version.py (torch not imported)."""
    import importlib.util

    spec = importlib.util.find_spec("torch")
    try:
        with open(os.path.join(os.path.dirname(spec.origin), "version.py")) as f:  # type: ignore[union-attr,arg-type]  # caught below
            text = f.read()
    except (OSError, AttributeError, TypeError):
        return True
    return not re.search(r"^cuda\b.*=\s*None\s*$", text, re.M)


def _tpu_settings(torch) -> dict:
    out: dict = {}
    try:
        from torch_tpu._internal.execution_mode import execution_mode_impl as em
        from torch_tpu._internal.precision import precision_impl

        out["cpu_fallback_enabled"] = bool(em._is_cpu_fallback_enabled())
        out["eager_mode"] = str(em._get_eager_mode()).split(".")[-1]
        out["tpu_matmul_precision"] = str(precision_impl._get_global_precision()).split(".")[-1]
    except Exception as exc:  # noqa: BLE001 - private API of one torch_tpu release
        out["settings_error"] = f"{type(exc).__name__}: {exc}"
    return out


def _cuda_settings(torch) -> dict:
    return {
        "cuda_build": str(torch.version.cuda),  # the CUDA release the build targets (no driver asked)
        "cuda_matmul_allow_tf32": bool(torch.backends.cuda.matmul.allow_tf32),
        "cudnn_allow_tf32": bool(torch.backends.cudnn.allow_tf32),
    }


def _mps_settings(torch) -> dict:
    return {"cpu_fallback_enabled": os.environ.get("PYTORCH_ENABLE_MPS_FALLBACK") == "1"}


def _xla_settings(torch) -> dict:
    # PJRT_DEVICE picks XLA's client (CPU here, TPU or CUDA elsewhere); its boxed fallback always
    # runs ops without a lowering on the CPU (XLA_FALLBACK_CUDA=1 sends them to CUDA instead).
    return {
        "pjrt_device": os.environ.get("PJRT_DEVICE", "unset"),
        "fallback_kind": "cuda" if os.environ.get("XLA_FALLBACK_CUDA") in ("1", "true") else "cpu",
        "cpu_fallback_enabled": True,
    }


def _xla_device(torch):
    import torch_xla

    return torch_xla.device()


def _xla_sync(torch) -> None:
    import torch_xla

    torch_xla.sync()


def _xla_counts(host_reads) -> dict:
    import torch_xla
    import torch_xla.debug.metrics as met

    counted = sorted(n for n in met.counter_names() if n.startswith("aten::"))
    # item() and the like read a value to the host through the fallback's kernel: a host sync,
    # not an op that fell back (kept apart, as the xla reality check does)
    executed = None
    getter = getattr(torch_xla._XLAC, "_get_executed_fallback_ops", None)
    if getter is not None:
        executed = sorted(str(x) for x in getter())
    return {
        "source": "torch_xla.debug.metrics counters (aten::* = ran through the CPU fallback)"
        + ("; torch_xla._XLAC._get_executed_fallback_ops()" if getter else ""),
        "fallback_ops": [n for n in counted if n not in host_reads],
        "host_reads": [n for n in counted if n in host_reads],
        "executed_fallback_ops": executed,
        "tested": True,
    }


def _xla_reset() -> None:
    import torch_xla.debug.metrics as met

    met.clear_all()


def _xla_clear_counters() -> None:
    import torch_xla.debug.metrics as met

    met.clear_counters()


def _xla_fell_back() -> list:
    import torch_xla.debug.metrics as met

    return [str(op) for op in met.executed_fallback_ops()]


def _neuron_counts(host_reads) -> dict:
    torch_neuronx = importlib.import_module("torch_neuronx")  # TorchNeuron's API, from its documentation

    return {
        "source": "torch_neuronx.get_fallback_ops() / get_executed_ops() (from TorchNeuron's docs; "
        "untested here: no Trainium)",
        "fallback_ops": sorted(str(x) for x in torch_neuronx.get_fallback_ops()),
        "executed_ops": sorted(str(x) for x in torch_neuronx.get_executed_ops()),
        "tested": False,
    }


# TorchTPU's op tests (tests/ops_test.py, its source repository) skip these under compile: expected not to
# compile there (data-dependent output shapes, random ops, resizing), an expectation rather than a result.
_TPU_COMPILE_DENY = (
    ("aten::nonzero", "data-dependent output shape"),
    ("aten::masked_select", "data-dependent output shape"),
    ("aten::topk", "kept off compile by its tests"),
    ("aten::prod", "kept off compile by its tests"),
    ("aten::prod.dim_int", "kept off compile by its tests"),
    ("aten::resize_", "resizes its input"),
    ("aten::bernoulli", "random op"),
    ("aten::bernoulli.p", "random op"),
    ("aten::rand", "random op"),
    ("aten::randn", "random op"),
    ("aten::randint", "random op"),
    ("aten::randint.low", "random op"),
    ("aten::randperm", "random op"),
    ("aten::normal.Tensor_float", "random op"),
    ("aten::uniform", "random op"),
    ("aten::multinomial", "random op"),
    ("aten::native_dropout", "random op"),
)
# Inductor, torch's own compiler (cpu's and cuda's torch.compile backend).
_INDUCTOR = Compile(
    "inductor",
    table="inductor",
    partitioner="min_cut",
    source="torch._inductor.decomposition.select_decomp_table(), min_cut_rematerialization_partition",
    recipe_notes=(
        "Inductor's own graph passes (pattern rewrites such as fused attention, joint-graph "
        "passes) are not applied: the graphs are AOTAutograd's with Inductor's decomposition table",
    ),
    lowering="inductor",
)
_MPS_FALLBACK = (
    ("present", True),
    ("kind", "cpu"),
    ("source", "aten/src/ATen/mps/MPSFallback.mm"),
    (
        "note",
        "MPS's boxed fallback (aten/src/ATen/mps/MPSFallback.mm, as torch's source registers it) "
        "raises for every op without an MPS kernel unless PYTORCH_ENABLE_MPS_FALLBACK=1, which "
        "runs it on the CPU; a few ops go to the CPU always (that file's list is not read)",
    ),
)

BUILTIN = (
    Backend(
        "cpu",
        "cpu",
        "CPU",
        note="the reference every probe compares with",
        compile=replace(_INDUCTOR, probed=True),
        runs_here=RunsHere(None, "cpu", "CPU itself (eager)"),
        # CPU's flash kernel, which scaled_dot_product_attention picks per device at run time (_fused_sdp_choice)
        own_kernels=(
            ("aten::_scaled_dot_product_flash_attention_for_cpu", "aten::scaled_dot_product_attention"),
            ("aten::_scaled_dot_product_flash_attention_for_cpu_backward", "aten::scaled_dot_product_attention"),
        ),
        reference=True,
        control=True,
        probe_note="harness self-test: a cpu probe runs the device side on CPU too, so it tests opcov's "
        "probe and shows CPU's dtype support; it is not a rival backend's score",
    ),
    Backend(
        "meta",
        "meta",
        "Meta",
        note="shape-only tensors; what fake-tensor tracing uses",
        fallback=Fallback("error", False),  # MetaFallbackKernel: "no fake impl or Meta kernel registered"
        control=True,
        probe_note="meta tensors have no values: shape, dtype and stride are compared, nothing else",
    ),
    Backend(
        "cuda",
        "cuda",
        "CUDA",
        note="the control; kernels exist only in a CUDA build of torch",
        setup="a CUDA build of torch: in a fresh virtual environment, pip install opcov torch==2.13.0 (the "
        "package registry's Linux wheel is a CUDA build); it imports without a GPU, so the registered scan "
        "needs none; the probe runs on an NVIDIA GPU",
        compile=_INDUCTOR,
        build_flag="cuda",
        in_build=_cuda_in_build,
        read_settings=_cuda_settings,
    ),
    Backend(
        "mps",
        "mps",
        "MPS",
        note="Apple GPUs; kernels exist only in a macOS build of torch",
        setup="torch on macOS (arm64): its wheels hold the MPS kernels; scan and probe on a Mac with "
        "Apple silicon. Anywhere: 'opcov scan mps --declared' makes declared data (weaker: read "
        "from native_functions.yaml and torch's MPS test lists)",
        fallback=Fallback("cpu", None, "PYTORCH_ENABLE_MPS_FALLBACK=1"),
        declared=Declared(_MPS_FALLBACK, os.path.join("testing", "_internal", "common_mps.py")),
        build_flag="mps",
        own_kernels=(("aten::_scaled_dot_product_attention_math_for_mps", "aten::scaled_dot_product_attention"),),
        in_build=_on_macos,
        read_settings=_mps_settings,
    ),
    Backend(
        "xla",
        "xla",
        "XLA",
        package="torch_xla",
        module="torch_xla",
        note="PyTorch/XLA (legacy, lazy tensors)",
        setup="torch-xla built for the installed torch (same version): in a fresh virtual environment, "
        "pip install opcov torch==2.9.0 torch-xla==2.9.0; PJRT_DEVICE=CPU runs it on the CPU, so both the "
        "scan and the probe work without an accelerator",
        fallback=Fallback("cpu", True),  # torch_xla's aten_fallback.cpp: no switch turns it off
        compile=Compile(
            "openxla",
            probed=True,
            math_sdpa=True,
            source="torch._dynamo.backends.torchxla.openxla: aot_autograd with no decomposition table, default "
            "partitioner",
            recipe_notes=("scaled_dot_product_attention traced on its math path, which xla takes",),
            lowering="cpu_partition",
            lowering_note="openxla: the Dynamo bridge traces the graph on XLA tensors; ops with no XLA lowering are "
            "partitioned out to run on CPU, as the eager CPU fallback runs them",
        ),
        lazy=Lazy(
            "PyTorch/XLA",
            samples=3,
            host_reads=("aten::_local_scalar_dense",),
            storage=False,
            clear=_xla_clear_counters,
            fell_back=_xla_fell_back,
        ),
        runs_here=RunsHere(
            "torch_xla",
            "xla",
            "PyTorch/XLA (its PJRT client: PJRT_DEVICE picks CPU, TPU...)",
            "PJRT_DEVICE=CPU with torch_xla installed",
        ),
        python_patches="torch_xla also patches Python above the dispatcher: importing it replaces torch.nn.GRU "
        "with its scan-based GRU (torch_xla/_patched_functions.py), so a GRU never reaches "
        "aten::gru or _thnn_fused_gru_cell there; no dispatcher scan can see that",
        raises_above=(
            (
                "aten::gru.data",  # the overload nn.GRU dispatches for a PackedSequence
                "torch_xla replaces torch.nn.GRU with its scan-based GRU, which refuses a PackedSequence "
                "(AssertionError: PackedSequence is not supported; torch_xla/experimental/gru.py): pad the "
                "sequences and pass a plain tensor",
            ),
        ),
        read_settings=_xla_settings,
        device_hook=_xla_device,
        sync=_xla_sync,
        fallback_counts=_xla_counts,
        reset_counts=_xla_reset,
    ),
    Backend(
        "tpu",
        "tpu",
        "PrivateUse1",
        package="torch_tpu",
        module="torch_tpu",
        note="TorchTPU, native eager backend for Google TPUs",
        setup="pip install 'opcov[tpu]' (torch-tpu and libtpu); the scan needs no TPU, the probe runs on a TPU VM",
        fallback=Fallback("cpu", None, "torch_tpu: its CPU fallback setting"),
        compile=Compile(
            "tpu",
            deny=_TPU_COMPILE_DENY,
            table="torch_tpu._internal.compile._backend:_TPU_DECOMPOSITIONS",
            partitioner="min_cut",
            keep_input_mutations=False,
            math_sdpa=True,
            source="torch_tpu._internal.compile._backend: aot_autograd(decompositions=_TPU_DECOMPOSITIONS ({ops}), "
            "partition_fn=min_cut_rematerialization_partition, keep_inference_input_mutations=False)",
            recipe_notes=(
                "TorchTPU's own FX passes before AOTAutograd (fold_gqa, detect_causal_mask, ...) are not "
                "applied: the graphs are what AOTAutograd makes of Dynamo's graph with its table",
                "scaled_dot_product_attention traced on its math path, which TorchTPU takes (no fused kernel of its own)",
            ),
            lowering_note="TorchTPU compiles each node of the functional graph through its eager kernels: eager "
            "coverage, with CPU-fallback ops as compile errors and its tests' compile-only deny list as expected "
            "failures",
            bounded_dynamism=True,
        ),
        vendor="TorchTPU",
        vendor_tests="tests/ops_test.py of a TorchTPU source checkout",
        python_patches="torch_tpu also patches Python above the dispatcher (F.max_pool*d routed to tpu:: "
        "ops, optimizers, torch.compile): no dispatcher scan can see that",
        precision_setting="tpu_matmul_precision",
        read_settings=_tpu_settings,
    ),
    Backend(
        "neuron",
        "neuron",
        "PrivateUse1",
        package="torch-neuronx",
        module="torch_neuronx",
        note="TorchNeuron, AWS Trainium",
        setup="TorchNeuron, the native PrivateUse1 backend: torch-neuronx 2.13.x or 2.14.x (earlier "
        "releases are the XLA-based library, device 'xla') for the installed torch, from AWS's "
        "index (pip install torch-neuronx --extra-index-url https://pip.repos.neuron.amazonaws.com); "
        "the scan reads the dispatcher and never starts the device, the probe runs on a Trn2 or "
        "Trn3 instance (device 'neuron'); see README, 'Backends'",
        # TorchNeuron documents backend="neuron", which no op set is traced for: the compile verdict leaves it out
        compile=Compile("neuron", traced=False, scanned=False),
        fallback_counts=_neuron_counts,
    ),
)
REFERENCE = next(b.name for b in BUILTIN if b.reference)  # the backend every probe compares with
# The torch.compile backend a device's users pass by default: ``opcov run --path compile`` compiles with it.
COMPILE_BACKEND = {b.name: b.compile.backend for b in BUILTIN if b.compile}


_REGISTERED: list[Backend] = []  # records added in this process (``register``)


def register(backend: Backend) -> Backend:
    """Add a backend record to those opcov knows in this process (the Python API a plugin or a test
    uses; a record of the same name is replaced). Returns it."""
    _REGISTERED[:] = [b for b in _REGISTERED if b.name != backend.name] + [backend]
    return backend


_SECTIONS = {"fallback": Fallback, "compile": Compile, "runs_here": RunsHere, "declared": Declared}
_DATA_FIELDS = {f.name for f in fields(Backend) if f.repr}  # the fields a records file may set (no hooks)
RECORDS_MAX_BYTES = 1 << 20  # a records file holds a few records of a few hundred bytes each
_RECORDS_DEPTH = 8  # levels of tables and lists: a record's deepest value (compile.deny's pairs) is at 5
_TEXT_MAX = 4096  # characters in one text field (the longest built-in, a setup line, is under 600)
_MODULE = re.compile(r"[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*")  # what importlib imports
_PACKAGE = re.compile(r"[A-Za-z0-9][A-Za-z0-9._\-]*")  # a distribution's name, as package metadata has it
_FALLBACK_KINDS = ("cpu", "error", "unknown")
_CHOICES = {"partitioner": ("default", "min_cut"), "lowering": ("inductor", "cpu_partition", "eager")}  # compile's


def _value_problem(key: str, value, annotation: str) -> str | None:
    """Why ``value`` cannot be the record field ``key`` of type ``annotation`` (as the dataclass writes it),
    or None. Text is one line of at most _TEXT_MAX characters: it is shown in reports and on the site."""
    if annotation.startswith("bool"):
        return None if isinstance(value, bool) else f"{key} must be true or false, not {type(value).__name__}"
    if not annotation.startswith("str"):
        return None  # sections and pairs: checked by _section
    if not isinstance(value, str):
        return f"{key} must be text, not {type(value).__name__}"
    if len(value) > _TEXT_MAX:
        return f"{key} is longer than {_TEXT_MAX:,} characters"
    bad = next((c for c in value if ord(c) < 32 or ord(c) == 127), None)
    if bad is not None:
        return f"{key} holds a control character {bad!r}; a record's text is one line"
    if key == "module" and not _MODULE.fullmatch(value):
        return f"module {value[:80]!r} is not a Python module name (package.module)"
    if key == "package" and not _PACKAGE.fullmatch(value):
        return f"package {value[:80]!r} is not a distribution name"
    return None


def _checked(where: str, cls, table: dict, only=None) -> dict:
    """``table``'s values, each of the type ``cls`` gives its field; a one-line DataError naming the first
    that is not (``only``: the fields a records file may set)."""
    types = {f.name: str(f.type) for f in fields(cls) if only is None or f.name in only}
    for key, value in table.items():
        why = _value_problem(key, value, types.get(key, "str"))
        if why is not None:
            raise DataError(f"{where}: {why}")
    return table


def _section(where: str, key: str, value):
    """A record's section (fallback, compile, runs_here, declared) from its table, every value typed."""
    cls = _SECTIONS[key]
    if not isinstance(value, dict):
        raise DataError(f"{where}: {key} is a table of its fields")
    unknown = sorted(set(value) - {f.name for f in fields(cls)})
    if unknown:
        raise DataError(f"{where}: {key}: unknown field(s) {', '.join(map(str, unknown))[:200]}")
    values = dict(_checked(f"{where}: {key}", cls, value))
    if key == "fallback" and values.get("kind", "unknown") not in _FALLBACK_KINDS:
        raise DataError(f"{where}: fallback.kind {values['kind']!r} is not one of {', '.join(_FALLBACK_KINDS)}")
    for name, allowed in _CHOICES.items():
        if key == "compile" and name in values and values[name] not in allowed:
            raise DataError(f"{where}: compile.{name} {values[name]!r} is not one of {', '.join(allowed)}")
    if key == "compile" and "deny" in values:
        deny = values["deny"]
        if not (isinstance(deny, list) and all(_is_pair(p) for p in deny)):
            raise DataError(f"{where}: compile.deny is a list of [op, why] pairs of text")
        values["deny"] = tuple(tuple(p) for p in deny)
    if key == "compile" and "recipe_notes" in values:
        notes = values["recipe_notes"]
        if not (isinstance(notes, list) and all(isinstance(n, str) for n in notes)):
            raise DataError(f"{where}: compile.recipe_notes is a list of text")
        values["recipe_notes"] = tuple(notes)
    if key == "declared" and "fallback" in values:  # a table in the file, (key, value) pairs in the record
        fb = values["fallback"]
        if not (isinstance(fb, dict) and all(isinstance(v, (str, bool, int, float)) for v in fb.values())):
            raise DataError(f"{where}: declared.fallback is a table of text, numbers or true/false")
        values["fallback"] = tuple(sorted(fb.items()))
    try:
        return cls(**values)
    except TypeError as exc:  # a required field left out
        raise DataError(f"{where}: {key}: {exc}") from None


def _is_pair(p) -> bool:
    return isinstance(p, list) and len(p) == 2 and all(isinstance(x, str) for x in p)


def _record(where: str, entry) -> Backend:
    """One backend record from a records file's table, every key and value checked: its name is a plain
    name (opcov keeps its data in a folder of that name), text is one line, true/false is a boolean."""
    if not isinstance(entry, dict):
        raise DataError(f"{where}: a backend record is a table")
    unknown = sorted(map(str, set(entry) - _DATA_FIELDS))
    if unknown:
        raise DataError(
            f"{where}: unknown field(s) {', '.join(unknown)[:200]}; known: {', '.join(sorted(_DATA_FIELDS))}"
        )
    missing = [k for k in ("name", "device_type", "dispatch_key") if not isinstance(entry.get(k), str) or not entry[k]]
    if missing:
        raise DataError(f"{where}: {', '.join(missing)} must be given, as text")
    from opcov.store import layout

    layout.check_name(entry["name"], "name", where=where, plain=True)
    layout.check_name(entry["device_type"], "device_type", where=where, plain=True)
    values = dict(_checked(where, Backend, entry, only=_DATA_FIELDS))
    if values["dispatch_key"] == "PrivateUse1" and not values.get("module"):  # else torch's own key is judged
        raise DataError(f"{where}: a PrivateUse1 backend names the module that registers it (module = ...)")
    for key in _SECTIONS:
        if key in values:
            values[key] = _section(where, key, values[key])
    for key, pair in (("raises_above", "[op, why]"), ("own_kernels", "[kernel, generic op]")):
        if key in values:
            pairs = values[key]
            if not (isinstance(pairs, list) and all(_is_pair(p) for p in pairs)):
                raise DataError(f"{where}: {key} is a list of {pair} pairs of text")
            values[key] = tuple(tuple(p) for p in pairs)
    return Backend(**values)


def _read_records(path: str) -> bytes:
    """The bytes of one records file: a regular file of at most RECORDS_MAX_BYTES (a folder, a device such
    as /dev/zero or a pipe is refused without reading it, and a pipe with no writer is never waited on)."""
    try:
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_CLOEXEC", 0))
        with os.fdopen(fd, "rb") as f:
            if not stat.S_ISREG(os.fstat(f.fileno()).st_mode):
                raise UsageError(f"{RECORDS_ENV}: {path} is not a regular file (a folder, device or pipe); name a file")
            raw = f.read(RECORDS_MAX_BYTES + 1)
    except OSError as exc:
        raise UsageError(f"{RECORDS_ENV}: cannot read {path} ({exc.strerror or exc})") from None
    if len(raw) > RECORDS_MAX_BYTES:
        raise DataError(f"{path}: over {RECORDS_MAX_BYTES >> 20} MiB; a records file holds a few backend records")
    return raw


@functools.lru_cache(maxsize=16)
def _records_file(path: str, mtime: float) -> tuple[Backend, ...]:
    """The records in one file: JSON where its name ends in .json (read strictly: a key given twice is
    refused), else TOML (Python 3.11's tomllib, or the tomli package before it)."""
    from opcov.store import strictjson

    raw = _read_records(path)
    if path.endswith(".json"):
        doc = strictjson.loads(raw, path)
    else:
        try:
            doc = _toml().loads(raw.decode("utf-8"))
        except RecursionError:
            raise DataError(
                f"{path}: nested too deeply; a records file is at most {_RECORDS_DEPTH} levels deep"
            ) from None
        except (ValueError, UnicodeDecodeError) as exc:  # tomllib's decode errors are ValueErrors
            raise DataError(f"{path}: {str(exc).splitlines()[0][:200] if str(exc) else type(exc).__name__}") from None
    entries = doc.get("backend", []) if isinstance(doc, dict) else None
    if not isinstance(entries, list):
        raise DataError(f"{path}: 'backend' is a list of records ([[backend]] tables in TOML)")
    if strictjson.depth(doc) > _RECORDS_DEPTH:
        raise DataError(f"{path}: nested too deeply; a records file is at most {_RECORDS_DEPTH} levels deep")
    return tuple(_record(f"{path}: backend {i + 1}", e) for i, e in enumerate(entries))


def _toml():
    for name in ("tomllib", "tomli"):
        try:
            return importlib.import_module(name)
        except ImportError:
            continue
    raise UsageError(f"{RECORDS_ENV}: a TOML records file needs Python 3.11 or the tomli package; or write it as JSON")


def records_from(paths: str | None = None) -> list[Backend]:
    """The records in the TOML files ``paths`` names (os.pathsep-separated; default: ``OPCOV_BACKEND_RECORDS``),
    each a ``[[backend]]`` table of the record's data fields (docs/adding-a-backend.md)."""
    out: list[Backend] = []
    where: dict[str, str] = {b.name: "built in" for b in BUILTIN}
    for path, mtime in _records_files(os.environ.get(RECORDS_ENV, "") if paths is None else paths):
        for i, b in enumerate(_records_file(path, mtime)):
            if b.name in where:  # a record never changes opcov's own (cpu is the reference every verdict uses)
                raise DataError(
                    f"{path}: backend {i + 1}: a backend named {b.name!r} is already known ({where[b.name]}); a "
                    "records file adds backends opcov does not know: give this one another name"
                )
            where[b.name] = f"{path}, backend {i + 1}"
            out.append(b)
    return out


def _records_files(text: str) -> tuple[tuple[str, float], ...]:
    """(path, modification time) of each records file ``text`` names (os.pathsep-separated)."""
    out = []
    for path in filter(None, text.split(os.pathsep)):
        try:
            out.append((path, os.stat(path).st_mtime))
        except OSError as exc:
            raise UsageError(f"{RECORDS_ENV}: cannot read {path} ({exc.strerror or exc})") from None
    return tuple(out)


def _dist_version(dist: str) -> str | None:
    import importlib.metadata as md  # here, not at import: it costs 'opcov check' a tenth of its time

    try:
        return md.version(dist)
    except md.PackageNotFoundError:
        return None


@functools.lru_cache(maxsize=1)
def _entry_point_backends() -> tuple[Backend, ...]:
    """PrivateUse1 backends that announce themselves through entry points (read once a process: the
    installed packages do not change under it)."""
    import importlib.metadata as md

    found = []
    for group, note in ((PLUGIN_GROUP, "opcov plugin entry point"), (ENTRY_POINT_GROUP, "torch.backends entry point")):
        for ep in md.entry_points(group=group):
            # value "module:Backend-spec" is not imported here; name is the device type
            dist = ep.dist.name if ep.dist else None
            module = ep.value.split(":", 1)[0]
            found.append(Backend(ep.name, ep.name, "PrivateUse1", package=dist, module=module, note=note))
    return tuple(found)


_KNOWN: list = []  # [(the records registered, the records files and their times, known_backends' list)]


def known_backends() -> list[Backend]:
    """Built-ins first, then records added (``register``, then ``OPCOV_BACKEND_RECORDS``) and entry-point
    backends, each not already known under its name (an entry point: nor under its module). Worked out
    again only when what can change it has changed (judging a zoo asks for it per op set and backend)."""
    registered, files = tuple(_REGISTERED), _records_files(os.environ.get(RECORDS_ENV, ""))
    if _KNOWN:
        was, was_files, known = _KNOWN[0]
        if was_files == files and len(was) == len(registered) and all(map(operator.is_, was, registered)):
            return list(known)
    known = tuple(_known_backends())
    _KNOWN[:] = [(registered, files, known)]
    return list(known)


def _known_backends() -> list[Backend]:
    out = list(BUILTIN)
    for b in [*_REGISTERED, *records_from()]:
        out = [k for k in out if k.name != b.name] + [b]  # register() may replace a built-in; a file may not
    known_modules = {b.module.split(".")[0] for b in out if b.module}
    for b in _entry_point_backends():
        if b.module and b.module.split(".")[0] in known_modules:
            continue
        if b.name in {k.name for k in out}:
            continue
        out.append(b)
    return out


def get_backend(name: str, import_module: str | None = None) -> Backend:
    """The backend called ``name``; with ``--import`` an unknown name is a PrivateUse1 backend."""
    for b in known_backends():
        if b.name == name:
            if import_module:
                return replace(b, module=import_module)
            return b
    if import_module:
        return Backend(
            name,
            name,
            "PrivateUse1",
            package=import_module.split(".")[0],
            module=import_module,
            note="loaded with --import",
        )
    names = ", ".join(b.name for b in known_backends())
    raise UsageError(f"unknown backend {name!r}; known: {names} (or name a PrivateUse1 module with --import MODULE)")


def record(name: str) -> Backend | None:
    """The record of backend ``name``, or None for a name opcov does not know (data may still be there:
    a backend whose folder is all the coverage data has is judged with no special case)."""
    for b in [*_REGISTERED, *records_from()]:
        if b.name == name:
            return b
    for b in BUILTIN:
        if b.name == name:
            return b
    return next((b for b in _entry_point_backends() if b.name == name), None)


def with_record(attribute: str) -> list[Backend]:
    """The known backends whose record sets ``attribute`` (a field or hook that is not empty)."""
    return [b for b in known_backends() if getattr(b, attribute)]


def compile_recipes() -> dict[str, Backend]:
    """Each torch.compile backend opcov traces op sets for (its ``--compile-backend`` name), with the first
    known backend whose record holds its recipe."""
    out: dict[str, Backend] = {}
    for b in known_backends():
        if b.compile and b.compile.traced:
            out.setdefault(b.compile.backend, b)
    return out


def own_kernels() -> dict[str, tuple[str, str]]:
    """Each ATen kernel made for one device type: (that device type, the generic op it stands for)."""
    return {k: (b.device_type, op) for b in known_backends() for k, op in b.own_kernels}


def for_device(device_type: str) -> Backend | None:
    """The backend whose tensors live on ``device_type`` (a device type several share: the first known)."""
    return next((b for b in known_backends() if b.device_type == device_type), None)


def load(backend: Backend):
    """Import torch and the backend's module so its kernels are registered; return torch.

    Never touches the device: backends such as torch_tpu abort the process when their
    runtime starts without hardware.
    """
    from opcov.torchenv import import_torch

    torch = import_torch()
    if backend.build_flag:
        built = getattr(torch.backends, backend.build_flag).is_built()
        if not built:
            raise UsageError(
                f"backend {backend.name!r}: this torch {torch.__version__} build has no "
                f"{backend.dispatch_key} kernels; scan it with a torch build that includes them"
            )
    if backend.module:
        before = set(torch._C._dispatch_get_all_op_names())
        try:
            importlib.import_module(backend.module)
        except ImportError as exc:
            pkg = backend.package or backend.module
            raise BackendImportError(
                f"backend {backend.name!r}: cannot import {backend.module!r} ({exc}); install the "
                f"{pkg!r} package built for torch {torch.__version__}"
            ) from None
        except (Exception, SystemExit) as exc:  # noqa: BLE001 - a broken backend (one that exits too): one line
            raise BackendImportError(
                f"backend {backend.name!r}: importing {backend.module!r} failed: "
                f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}"
            ) from None
        _ADDED_OPS[backend.name] = frozenset(set(torch._C._dispatch_get_all_op_names()) - before)
    return torch


_ADDED_OPS: dict[str, frozenset] = {}


def added_ops(backend: Backend) -> frozenset:
    """Op names that appeared when ``load`` imported the backend (its own namespaces)."""
    return _ADDED_OPS.get(backend.name, frozenset())


def settings(backend: Backend, torch) -> dict:
    """Settings that change what a backend does with an op, read without starting the device: its
    record's ``read_settings`` hook, then what its module says of itself."""
    out = {"float32_matmul_precision": torch.get_float32_matmul_precision()}
    if backend.read_settings:
        out.update(backend.read_settings(torch))
    if backend.module:
        # A backend may describe itself: module attribute ``__opcov_settings__`` (dict or callable).
        mod = importlib.import_module(backend.module)
        extra = getattr(mod, "__opcov_settings__", None)
        if callable(extra):
            extra = extra()
        if isinstance(extra, dict):
            out.update(extra)
    return dict(sorted(out.items()))


def fallback_kind(backend: Backend) -> tuple[str, bool | None]:
    """What a boxed fallback on this key does, and whether it can be switched on, where opcov knows it
    (the record's ``fallback``). Returns (kind, enabled) with enabled None where only the backend's
    settings can tell."""
    return backend.fallback.kind, backend.fallback.enabled
