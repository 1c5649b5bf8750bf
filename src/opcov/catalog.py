"""The op universe: one typed ``Op`` record per dispatcher overload.

Which names the dispatcher knows depends on what has been imported, so the
catalogue imports a fixed list of modules (``CATALOG_MODULES``) and drops test-only
namespaces; the torch version and that list travel with every data file.
Core ATen comes from ``torch.Tag.core`` of the running torch, never a frozen list.
"""

from __future__ import annotations

import importlib
import os
import re
from dataclasses import dataclass, field
from functools import cached_property

from opcov.torchenv import AUTOLOAD_ENV, import_torch, read_cache, write_cache

# Imported before listing ops, so the op set does not depend on what else ran.
CATALOG_MODULES = (
    "torch._prims",
    "torch.distributed._functional_collectives",
    "torch.distributed.fsdp",
)
# Namespaces that only test suites register (OpInfo adds ``_test::``).
TEST_NAMESPACES = frozenset({"_test", "_inductor_test"})
# Ops that read tensor metadata on the host; no device kernel is involved.
_HOST_ONLY = re.compile(r"^aten::sym_")

COMPOSITE_KEYS = (
    ("implicit", "CompositeImplicitAutograd"),
    ("explicit", "CompositeExplicitAutograd"),
    ("explicit_nonfunctional", "CompositeExplicitAutogradNonFunctional"),
)


@dataclass(frozen=True)
class Op:
    """One overload, e.g. ``aten::add.Tensor``."""

    name: str
    schema: str
    tags: tuple[str, ...]
    structured_delegate: str | None = None
    composite: str | None = None

    @property
    def namespace(self) -> str:
        return self.name.split("::", 1)[0]

    @property
    def base(self) -> str:
        return self.name.split("::", 1)[1].split(".", 1)[0]

    @property
    def is_core(self) -> bool:
        return "core" in self.tags

    @property
    def applicable(self) -> bool:
        """False for host-only ops (``sym_*``) that never need a device kernel."""
        return "host_only" not in self.tags

    def as_dict(self) -> dict:
        return {
            "name": self.name,
            "schema": self.schema,
            "tags": list(self.tags),
            "structured_delegate": self.structured_delegate,
            "composite": self.composite,
        }


@dataclass(frozen=True)
class Catalog:
    """All ops the dispatcher knows after importing ``modules``."""

    torch_version: str
    modules: tuple[str, ...]
    ops: dict[str, Op] = field(repr=False)

    def __iter__(self):
        return iter(self.ops.values())

    def __len__(self):
        return len(self.ops)

    def __contains__(self, name: str) -> bool:
        return name in self.ops

    def get(self, name: str) -> Op | None:
        return self.ops.get(name)

    @cached_property
    def core(self) -> tuple[Op, ...]:
        return tuple(op for op in self if op.is_core)

    def select(
        self,
        pattern: str | None = None,
        *,
        core: bool = False,
        tags: tuple[str, ...] = (),
        namespace: str | None = None,
    ) -> list[Op]:
        """Ops matching a regular expression (searched in the name) and filters."""
        rx = re.compile(pattern) if pattern else None
        out = []
        for op in self:
            if rx and not rx.search(op.name):
                continue
            if core and not op.is_core:
                continue
            if namespace and op.namespace != namespace:
                continue
            if any(t not in op.tags for t in tags):
                continue
            out.append(op)
        return out


def native_functions_path() -> str:
    import torchgen

    return os.path.join(os.path.dirname(torchgen.__file__), "packaged", "ATen", "native", "native_functions.yaml")


def structured_delegates() -> dict[str, str]:
    """``aten::add.Tensor -> aten::add.out`` from torchgen's packaged native_functions.yaml.

    Read with plain YAML (not torchgen's parser), and only two keys are needed; kept in the cache
    folder, keyed by the file's size and time, since reading its 3 MB of YAML costs 0.3 s of CPU in
    every process that builds the catalogue (each probe, scan and lint).
    """
    import yaml

    path = native_functions_path()
    if not os.path.exists(path):
        return {}
    st = os.stat(path)
    key = f"{path}:{st.st_size}:{st.st_mtime_ns}"
    kept = read_cache("structured-delegates.json", {})
    if kept.get("key") == key:
        return kept["delegates"]
    loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
    with open(path) as f:
        entries = yaml.load(f, Loader=loader)
    out = {}
    for entry in entries:
        delegate = entry.get("structured_delegate")
        if delegate:
            out["aten::" + entry["func"].split("(", 1)[0]] = "aten::" + delegate
    write_cache("structured-delegates.json", {"key": key, "delegates": out})
    return out


def _derived_tags(op) -> set[str]:
    """Tags read off the schema: inplace, out, view (aliasing return)."""
    schema = op._schema
    tags = set()
    mutated = [a for a in schema.arguments if a.alias_info is not None and a.alias_info.is_write]
    if mutated:
        if any(a.kwarg_only for a in mutated):
            tags.add("out")
        elif schema.arguments and mutated[0] is schema.arguments[0]:
            tags.add("inplace")
        else:
            tags.add("mutating")
    elif any(r.alias_info is not None for r in schema.returns):
        tags.add("view")
    return tags


def overload_name(op) -> str:
    """opcov's name of a dispatcher overload (an ``OpOverload`` or its ``FunctionSchema``):
    ``aten::add.Tensor``, and ``aten::mm`` for the default overload. The inverse of ``resolve_overload``."""
    if hasattr(op, "_schema"):  # an OpOverload: torch computed this very name once, name() is cheap
        return op.name()
    return op.name + ("." + op.overload_name if op.overload_name else "")


def resolve_overload(torch, name: str):
    """The ``OpOverload`` for a dispatcher name such as ``aten::add.Tensor``."""
    ns, rest = name.split("::", 1)
    base, _, overload = rest.partition(".")
    packet = getattr(getattr(torch.ops, ns), base)
    return getattr(packet, overload or "default")


def import_catalog_modules(modules=CATALOG_MODULES) -> tuple[str, ...]:
    """Import the fixed module list; return the ones that imported."""
    done = []
    for mod in modules:
        try:
            importlib.import_module(mod)
        except Exception:  # distributed may be absent from a build
            continue
        done.append(mod)
    return tuple(done)


def canonical_names(torch_version: str) -> frozenset[str]:
    """Op names of a clean interpreter after ``CATALOG_MODULES`` (cached per torch version).

    Taken in a child process, so whatever this process imported before (OpInfo adds
    ``_test::``, dynamo adds ``streams::`` and ``onnx::``) cannot change the catalogue.
    """
    import json
    import subprocess
    import sys

    cache_name = f"ops-torch{torch_version}.json"
    names = read_cache(cache_name, None)
    if names is None:
        code = (
            "import json, sys, torch; from opcov.catalog import import_catalog_modules; "
            "import_catalog_modules(); json.dump(sorted(torch._C._dispatch_get_all_op_names()), sys.stdout)"
        )
        env = dict(os.environ, **{AUTOLOAD_ENV: "0"})
        proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, check=True)
        names = json.loads(proc.stdout)
        write_cache(cache_name, names)
    return frozenset(names)


def build_catalog(extra_modules: tuple[str, ...] = (), backend_ops: frozenset[str] = frozenset()) -> Catalog:
    """Every overload of the canonical set, plus the ops a loaded backend registered.

    ``extra_modules`` names the backend modules imported, for provenance;
    ``backend_ops`` the names that appeared when they were imported.
    """
    torch = import_torch()
    C = torch._C
    modules = import_catalog_modules() + tuple(extra_modules)
    delegates = structured_delegates()
    wanted = canonical_names(str(torch.__version__)) | backend_ops
    ops = {}
    for name in sorted(n for n in C._dispatch_get_all_op_names() if n in wanted):
        ns = name.split("::", 1)[0]
        if ns in TEST_NAMESPACES:
            continue
        try:
            overload = resolve_overload(torch, name)
        except (AttributeError, RuntimeError):
            continue  # registered name without a schema (def pending): not callable
        tags = {t.name for t in overload.tags} | _derived_tags(overload)
        if _HOST_ONLY.match(name):
            tags.add("host_only")
        composite = next(
            (kind for kind, key in COMPOSITE_KEYS if C._dispatch_has_kernel_for_dispatch_key(name, key)), None
        )
        ops[name] = Op(
            name=name,
            schema=str(overload._schema),
            tags=tuple(sorted(tags)),
            structured_delegate=delegates.get(name),
            composite=composite,
        )
    return Catalog(torch_version=str(torch.__version__), modules=modules, ops=ops)


# Calls no backend kernel runs: metadata queries and record_function markers (what a trace leaves out,
# and a scan of Python names drops).
NO_KERNEL_OPS = frozenset({"aten::detach"})
NO_KERNEL_NAMESPACES = frozenset({"prim", "profiler"})  # metadata queries; record_function markers
