"""Device backends opcov knows: how each is loaded, keyed and configured.

Listing backends never imports them: installed versions and out-of-tree
PrivateUse1 backends come from package metadata (``torch.backends`` entry points),
so ``opcov backends`` stays fast and cannot crash on a broken backend.
"""

from __future__ import annotations

import importlib
import os
import re
import sys
from dataclasses import dataclass, replace

from opcov.errors import BackendImportError, UsageError

ENTRY_POINT_GROUP = "torch.backends"  # torch's autoload group, used by torch-tpu
PLUGIN_GROUP = "opcov.backends"  # vendors may describe their backend to opcov here


@dataclass(frozen=True)
class Backend:
    """One device backend as the dispatcher sees it."""

    name: str
    device_type: str
    dispatch_key: str
    package: str | None = None  # distribution that provides it (None: part of torch)
    module: str | None = None  # what to import to register its kernels
    note: str = ""
    setup: str = ""  # what a contributor needs to make this backend's data where it is not installed

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
        """cuda and mps kernels exist only in builds that include them; read without importing torch."""
        if self.name == "mps":
            return sys.platform == "darwin"
        if self.name == "cuda":
            import importlib.util

            spec = importlib.util.find_spec("torch")
            try:
                with open(os.path.join(os.path.dirname(spec.origin), "version.py")) as f:  # type: ignore[union-attr,arg-type]  # caught below
                    text = f.read()
            except (OSError, AttributeError, TypeError):
                return True
            return not re.search(r"^cuda\b.*=\s*None\s*$", text, re.M)
        return True


# The torch.compile backend a device's users pass by default: ``opcov run --path compile`` compiles with
# it, and the compile verdict judges the op set traced for it (TorchNeuron documents backend="neuron",
# which no op set is traced for: opcov.verdict.compiled leaves it out).
COMPILE_BACKEND = {"tpu": "tpu", "cpu": "inductor", "cuda": "inductor", "xla": "openxla", "neuron": "neuron"}

BUILTIN = (
    Backend("cpu", "cpu", "CPU", note="the reference every probe compares with"),
    Backend("meta", "meta", "Meta", note="shape-only tensors; what fake-tensor tracing uses"),
    Backend(
        "cuda",
        "cuda",
        "CUDA",
        note="the control; kernels exist only in a CUDA build of torch",
        setup="a CUDA build of torch: in a fresh virtual environment, pip install opcov torch==2.13.0 (the "
        "package registry's Linux wheel is a CUDA build); it imports without a GPU, so the registered scan "
        "needs none; the probe runs on an NVIDIA GPU",
    ),
    Backend(
        "mps",
        "mps",
        "MPS",
        note="Apple GPUs; kernels exist only in a macOS build of torch",
        setup="torch on macOS (arm64): its wheels hold the MPS kernels; scan and probe on a Mac with "
        "Apple silicon. Anywhere: 'opcov scan mps --declared' makes declared data (weaker: read "
        "from native_functions.yaml and torch's MPS test lists)",
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
    ),
    Backend(
        "tpu",
        "tpu",
        "PrivateUse1",
        package="torch_tpu",
        module="torch_tpu",
        note="TorchTPU, native eager backend for Google TPUs",
        setup="pip install 'opcov[tpu]' (torch-tpu and libtpu); the scan needs no TPU, the probe runs on a TPU VM",
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
    ),
)
_BUILD_CHECKS = {"cuda": "cuda", "mps": "mps"}


def _dist_version(dist: str) -> str | None:
    import importlib.metadata as md  # here, not at import: it costs 'opcov check' a tenth of its time

    try:
        return md.version(dist)
    except md.PackageNotFoundError:
        return None


def _entry_point_backends() -> list[Backend]:
    """PrivateUse1 backends that announce themselves through entry points."""
    import importlib.metadata as md

    found = []
    for group, note in ((PLUGIN_GROUP, "opcov plugin entry point"), (ENTRY_POINT_GROUP, "torch.backends entry point")):
        for ep in md.entry_points(group=group):
            # value "module:Backend-spec" is not imported here; name is the device type
            dist = ep.dist.name if ep.dist else None
            module = ep.value.split(":", 1)[0]
            found.append(Backend(ep.name, ep.name, "PrivateUse1", package=dist, module=module, note=note))
    return found


def known_backends() -> list[Backend]:
    """Built-ins first, then entry-point backends not already known under another name."""
    out = list(BUILTIN)
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


def load(backend: Backend):
    """Import torch and the backend's module so its kernels are registered; return torch.

    Never touches the device: backends such as torch_tpu abort the process when their
    runtime starts without hardware.
    """
    from opcov.torchenv import import_torch

    torch = import_torch()
    if backend.name in _BUILD_CHECKS:
        built = getattr(torch.backends, _BUILD_CHECKS[backend.name]).is_built()
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
        except Exception as exc:  # noqa: BLE001 - a broken backend must not give a traceback
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
    """Settings that change what a backend does with an op, read without starting the device."""
    out = {"float32_matmul_precision": torch.get_float32_matmul_precision()}
    if backend.name == "tpu":
        try:
            from torch_tpu._internal.execution_mode import execution_mode_impl as em
            from torch_tpu._internal.precision import precision_impl

            out["cpu_fallback_enabled"] = bool(em._is_cpu_fallback_enabled())
            out["eager_mode"] = str(em._get_eager_mode()).split(".")[-1]
            out["tpu_matmul_precision"] = str(precision_impl._get_global_precision()).split(".")[-1]
        except Exception as exc:  # noqa: BLE001 - private API of one torch_tpu release
            out["settings_error"] = f"{type(exc).__name__}: {exc}"
    elif backend.name == "cuda":
        out["cuda_build"] = str(torch.version.cuda)  # the CUDA release the build targets (no driver asked)
        out["cuda_matmul_allow_tf32"] = bool(torch.backends.cuda.matmul.allow_tf32)
        out["cudnn_allow_tf32"] = bool(torch.backends.cudnn.allow_tf32)
    elif backend.name == "mps":
        out["cpu_fallback_enabled"] = os.environ.get("PYTORCH_ENABLE_MPS_FALLBACK") == "1"
    elif backend.name == "xla":
        # PJRT_DEVICE picks XLA's client (CPU here, TPU or CUDA elsewhere); its boxed fallback always
        # runs ops without a lowering on the CPU (XLA_FALLBACK_CUDA=1 sends them to CUDA instead).
        out["pjrt_device"] = os.environ.get("PJRT_DEVICE", "unset")
        out["fallback_kind"] = "cuda" if os.environ.get("XLA_FALLBACK_CUDA") in ("1", "true") else "cpu"
        out["cpu_fallback_enabled"] = True
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
    """What a boxed fallback on this key does, and whether it can be switched on, where opcov knows it.

    Returns (kind, enabled) with enabled None where only the backend's settings can tell.
    """
    if backend.name in ("tpu", "mps"):
        return "cpu", None
    if backend.name == "xla":
        return "cpu", True  # torch_xla's aten_fallback.cpp: no switch turns it off
    if backend.name == "meta":
        return "error", False  # MetaFallbackKernel: "no fake impl or Meta kernel registered"
    return "unknown", None
