"""Declared coverage: what torch's own sources say an in-tree dispatch key has, for a key whose build
cannot be loaded here (mps: its kernels exist only in macOS builds).

A third, weaker evidence kind than a registered scan: nothing is read from a binary. The forward path
of each op comes from torchgen's parsed native_functions.yaml (shipped with torch, identical to
``aten/src/ATen/native/native_functions.yaml``): an op with a kernel for the key, or a functional or
in-place op of a structured group whose ``.out`` has one (the codegen wraps the out kernel for every
variant), is ``fwd: kernel``. Everything else is read from the installed build's dispatcher as the
registered scan reads it (``opcov.scan.registered``, same reach on meta tensors, same derivatives):
CompositeImplicitAutograd and CompositeExplicitAutograd kernels are registered under alias keys, so
this build's table for the key already holds them, and so does the autograd key (AutogradMPS), whose
kernels are device-independent. An op with neither falls to the key's boxed fallback where torch's
source registers one (mps: ``aten/src/ATen/mps/MPSFallback.mm``, CPU fallback off unless
PYTORCH_ENABLE_MPS_FALLBACK=1). Ops outside native_functions.yaml with no composite kernel are left
out: nothing declares them (kernels registered by hand in MPS sources cannot be seen either).

For mps, what torch's test suite says about dtypes is added per op, read statically (the file is
parsed, never imported: it would ask for the device): ``torch/testing/_internal/common_mps.py``
expects every OpInfo to fail in float64 and complex128 (MPS has no 64-bit floating tensors), and
lists OpInfos and dtypes expected to fail. Each OpInfo is mapped to the aten ops it is about: every
overload of its ``aten_name``. See docs/DATA.md, "Declared coverage".
"""

from __future__ import annotations

import ast
import os
from dataclasses import dataclass, field
from functools import partial

from opcov.catalog import Catalog, build_catalog
from opcov.dtypes import dtype_name
from opcov.errors import UsageError
from opcov.scan import registered
from opcov.scan.registered import Scanner
from opcov.sources.opinfo import opinfos

YAML_SOURCE = "aten/src/ATen/native/native_functions.yaml"  # where torchgen's packaged copy comes from

# What torch's source registers as the key's boxed fallback (not read here: no build holds it) and the
# key's test-suite file, relative to the torch package: the backend record's ``declared``.


# ---------------------------------------------------------------- native_functions.yaml


@dataclass(frozen=True)
class Declarations:
    """torchgen's view of one dispatch key: ops with a kernel for it (name -> the yaml line declaring
    it), every aten op the yaml holds, and the yaml read."""

    key: str
    kernels: dict
    ops: frozenset
    path: str


def torchgen_kernels(key: str, yaml_dir: str | None = None) -> Declarations:
    """The aten ops native_functions.yaml gives a ``key`` kernel, structured groups included (a
    functional or in-place op whose ``structured_delegate`` has one counts, pointing at the .out's line)."""
    import torchgen
    from torchgen.gen import parse_native_yaml
    from torchgen.model import DispatchKey

    folder = yaml_dir or os.path.join(os.path.dirname(torchgen.__file__), "packaged", "ATen", "native")
    native = os.path.join(folder, "native_functions.yaml")
    try:
        dispatch_key = DispatchKey.parse(key)
    except (AssertionError, KeyError, AttributeError):
        raise UsageError(
            f"dispatch key {key!r} is not one torchgen knows: native_functions.yaml declares "
            "nothing for it (an out-of-tree PrivateUse1 backend needs a registered scan)"
        ) from None
    parsed = parse_native_yaml(native, os.path.join(folder, "tags.yaml"))
    index = parsed.backend_indices.get(dispatch_key)
    if index is None:
        raise UsageError(f"native_functions.yaml has no kernels for dispatch key {key!r}")
    line = {str(f.func.name): f.loc.line for f in parsed.native_functions if index.has_kernel(f)}
    kernels = {}
    for f in parsed.native_functions:
        name = str(f.func.name)
        own = line.get(name) or (line.get(str(f.structured_delegate)) if f.structured_delegate else None)
        if own:
            kernels[f"aten::{name}"] = f"{YAML_SOURCE}:{own}"
    return Declarations(key, kernels, frozenset(f"aten::{f.func.name}" for f in parsed.native_functions), native)


class DeclaredScanner(Scanner):
    """A registered Scanner whose forward kernels for the key come from native_functions.yaml."""

    def __init__(self, torch, backend, catalog, derivatives, *, declared: Declarations, fallback: str | None):
        super().__init__(torch, backend, catalog, derivatives)
        self.declared, self.fallback_src = declared, fallback

    def forward_path(self, name: str) -> dict:
        op = self.catalog.get(name)
        if name in self.declared.kernels and (op is None or op.applicable):
            return {"fwd": "kernel", "src": self.declared.kernels[name]}
        rec = super().forward_path(name)
        if rec["fwd"] == "missing" and self.fallback_src and "why" not in rec:
            return {"fwd": "fallback", "src": self.fallback_src}
        return rec

    def backward_path(self, name: str, fwd: str) -> dict:
        """As the registered scan, except where the key's own kernel overrides a CompositeImplicitAutograd
        op: this build's table shows the decomposition's autograd (no kernel for the key here), a build
        with the kernel runs the op's own autograd kernel (a derivative formula), else none: lost."""
        op = self.catalog.get(name)
        if fwd == "kernel" and op is not None and op.composite == "implicit":
            kind = self.derivatives.kind(name)
            if kind in ("formula", "not_implemented"):
                return {"bwd": kind}
            return {
                "bwd": "lost",
                "why_bwd": (
                    "native_functions.yaml gives the key its own kernel for a CompositeImplicitAutograd op with no "
                    "derivative formula: the decomposition's derivative no longer applies"
                ),
            }
        return super().backward_path(name, fwd)

    def resolve_forward(self, name: str, stack=()) -> str:
        if name not in self.catalog:  # reached, but nothing declares what the key does with it
            return "unresolved"
        return super().resolve_forward(name, stack)


# ---------------------------------------------------------------- the test suite's dtype lists

FORWARD_FAILS = ("UNIMPLEMENTED_XFAILLIST",)  # "Those ops are not expected to work"
FORWARD_DOUBTS = ("ON_MPS_XFAILLIST", "SKIPLIST")  # fail or are skipped on MPS, for reasons not all MPS's
BACKWARD_DOUBTS = ("XFAILLIST_GRAD", "SKIPLIST_GRAD", "ON_MPS_XFAILLIST")
NOT_READ = ("UNDEFINED_XFAILLIST", "EMPTY_OPS_SKIPLIST")  # undefined comparisons, CPU-side errors: not MPS's
COMPLEX_LIST = "SUPPORTED_COMPLEX_OPS"
ALL = "all"  # a list entry of None: every dtype


@dataclass
class TestLists:
    """What common_mps.py says, by list: OpInfo key (name + variant_test_name) -> dtype names or None."""

    forward: dict = field(default_factory=dict)
    backward: dict = field(default_factory=dict)
    every_op: tuple = ()  # dtypes every OpInfo is expected to fail in (float64, complex128)
    complex_dtypes: tuple = ()  # expected to fail for an OpInfo outside SUPPORTED_COMPLEX_OPS
    supported_complex: frozenset = frozenset()
    path: str = ""


def _dtype_of(node, name_of) -> str:
    if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id == "torch":
        return name_of(node.attr)
    raise ValueError(f"line {node.lineno}: not a torch dtype")


def _literal(node, name_of):
    """A list's value: {key: [dtype names] or None}, or a set of keys."""
    if isinstance(node, ast.Set):
        return frozenset(ast.literal_eval(node))
    if not isinstance(node, ast.Dict):
        raise ValueError(f"line {node.lineno}: not a literal dict or set")
    out = {}
    for k, v in zip(node.keys, node.values):
        key = ast.literal_eval(k)
        if isinstance(v, ast.Constant) and v.value is None:
            out[key] = None
        elif isinstance(v, (ast.List, ast.Tuple)):
            out[key] = sorted({_dtype_of(e, name_of) for e in v.elts})
        else:
            raise ValueError(f"line {v.lineno}: {key}: not None or a list of dtypes")
    return out


def _decorated_dtypes(stmts, name_of) -> list:
    """dtypes= of each DecorateInfo(unittest.expectedFailure, dtypes=[...]) directly in ``stmts``."""
    found = []
    for stmt in stmts:
        for node in ast.walk(stmt) if isinstance(stmt, ast.Expr) else ():
            if isinstance(node, ast.Call) and getattr(node.func, "id", "") == "DecorateInfo":
                for kw in node.keywords:
                    if kw.arg == "dtypes" and isinstance(kw.value, (ast.List, ast.Tuple)):
                        found.append(tuple(sorted(_dtype_of(e, name_of) for e in kw.value.elts)))
    return found


def read_test_lists(path: str, name_of) -> TestLists:
    """common_mps.py's lists, parsed without importing it (``name_of('double')`` -> 'float64')."""
    with open(path, encoding="utf-8") as f:
        tree = ast.parse(f.read(), path)
    lists = TestLists(path=path)
    funcs = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.FunctionDef) and node.name not in funcs and len(node.body) > 2:
            funcs[node.name] = node  # the first, real definition (the other branch returns ops unchanged)
    fwd, bwd = funcs.get("mps_ops_modifier"), funcs.get("mps_ops_grad_modifier")
    if fwd is None or bwd is None:
        raise ValueError("no mps_ops_modifier / mps_ops_grad_modifier with lists in it")
    for func, into, names in (
        (fwd, lists.forward, FORWARD_FAILS + FORWARD_DOUBTS + (COMPLEX_LIST,)),
        (bwd, lists.backward, BACKWARD_DOUBTS),
    ):
        for stmt in func.body:
            target = stmt.targets[0] if isinstance(stmt, ast.Assign) else getattr(stmt, "target", None)
            if isinstance(target, ast.Name) and target.id in names and stmt.value is not None:
                into[target.id] = _literal(stmt.value, name_of)
        missing = [n for n in names if n not in into]
        if missing:
            raise ValueError(f"{func.name} has no {', '.join(missing)}")
    lists.supported_complex = lists.forward.pop(COMPLEX_LIST)
    loop = next(n for n in fwd.body if isinstance(n, ast.For))
    blanket = _decorated_dtypes(loop.body, name_of)
    lists.every_op = blanket[0] if blanket else ()
    for stmt in loop.body:
        if isinstance(stmt, ast.If) and COMPLEX_LIST in ast.unparse(stmt.test):
            lists.complex_dtypes = (_decorated_dtypes(stmt.body, name_of) or [()])[0]
    return lists


def opinfo_bases(opinfos) -> dict:
    """common_mps key (name + variant_test_name) -> (OpInfo id, the aten base name it is about, CPU dtypes).

    Only the OpInfo's ``aten_name``: its name's last part or aliases would tie 'sparse.mm' to aten::mm."""
    out = {}
    for oid, op in opinfos.items():
        dtypes = frozenset(str(d).rsplit(".", 1)[-1] for d in getattr(op, "dtypes", ()) or ())
        out.setdefault(op.name + op.variant_test_name, (oid, (op.aten_name,), dtypes))
    return out


def dtype_notes(lists: TestLists, index: dict, catalog_ops) -> dict:
    """op -> {'xfail'|'doubt'|'bwd_doubt': {dtype or 'all': why}} over ``catalog_ops`` (aten names).

    An expected failure of UNIMPLEMENTED_XFAILLIST (or complex outside SUPPORTED_COMPLEX_OPS) is an
    ``xfail`` of every overload of a base name when every OpInfo about that name is listed for the dtype;
    when only some are, and for the lists of failures that are not all MPS's, it is a ``doubt`` (the
    verdict names it, and does not change for it)."""
    about: dict[str, list] = {}  # base -> common_mps keys of the OpInfos about it
    for key, (_, bases, _) in index.items():
        for base in bases:
            about.setdefault(base, []).append(key)
    by_base: dict[str, dict] = {}

    def note(base, kind, dtype, why):
        slot = by_base.setdefault(base, {}).setdefault(kind, {})
        slot.setdefault(dtype, why)

    for base, keys in sorted(about.items()):
        for list_name, entries in lists.forward.items():
            listed = [k for k in keys if k in entries]
            for dtype in sorted({d for k in listed for d in (entries[k] or [ALL])}):
                hit = [k for k in listed if entries[k] is None or dtype in entries[k]]
                every = len(hit) == len(keys)
                kind = "xfail" if list_name in FORWARD_FAILS and every else "doubt"
                note(
                    base,
                    kind,
                    dtype,
                    f"{list_name}: {', '.join(index[k][0] for k in hit)}"
                    + ("" if every else f" ({len(hit)} of {len(keys)} OpInfos about it)"),
                )
        for list_name, entries in lists.backward.items():
            for k in (k for k in keys if k in entries):
                for dtype in entries[k] or [ALL]:
                    note(base, "bwd_doubt", dtype, f"{list_name}: {index[k][0]}")
        unsupported = [k for k in keys if k not in lists.supported_complex]
        for dtype in lists.complex_dtypes:
            tested = [k for k in keys if dtype in index[k][2]]  # OpInfos that run this dtype on CPU
            if tested and all(k in unsupported for k in tested):
                note(base, "xfail", dtype, f"complex: not in {COMPLEX_LIST} ({', '.join(index[k][0] for k in tested)})")
    out = {}
    for name in catalog_ops:
        if name.startswith("aten::"):
            notes = by_base.get(name.split("::", 1)[1].split(".", 1)[0])
            if notes:
                out[name] = {kind: dict(sorted(v.items())) for kind, v in sorted(notes.items())}
    return out


# ---------------------------------------------------------------- the document


def scan(
    backend, torch, *, command: str = "", yaml_dir: str | None = None, reach: bool = True, test_lists: bool = True
) -> dict:
    """The declared-coverage document for an in-tree ``backend`` (its dispatch key in native_functions.yaml)."""
    if backend.dispatch_key == "PrivateUse1":
        raise UsageError(
            f"backend {backend.name!r} is out of tree (PrivateUse1): native_functions.yaml declares "
            f"nothing for it; make a registered scan instead ({backend.data_commands()[0]})"
        )
    declared = torchgen_kernels(backend.dispatch_key, yaml_dir)
    full = build_catalog()
    # The ops something declares for the key: those in the yaml, and composites registered under alias keys.
    kept = {n: op for n, op in full.ops.items() if n in declared.ops or op.composite}
    catalog = Catalog(full.torch_version, full.modules, kept)
    fallback = backend.declared.fallback_record() if backend.declared else None
    test_list = backend.declared.test_list if backend.declared else ""
    doc = registered.scan(
        backend,
        torch,
        command=command,
        catalog=catalog,
        reach=reach,
        scanner=partial(DeclaredScanner, declared=declared, fallback=fallback["source"] if fallback else None),
    )
    doc["evidence"] = "declared"
    prov = doc["provenance"]
    lists_path = os.path.join(os.path.dirname(torch.__file__), test_list) if test_lists and test_list else None
    about = {
        "native_functions": YAML_SOURCE + " (torchgen's packaged copy of torch "
        f"{torch.__version__}, parsed by torchgen)",
        "key": backend.dispatch_key,
        "kernels": sum(1 for n in declared.kernels if n in kept),
        "ops_left_out": len(full) - len(kept),
    }
    notes = [
        "eager mode only: the torch.compile path is not covered",
        f"declared, not registered: no {backend.dispatch_key} build was loaded; a kernel named in "
        "native_functions.yaml is a claim one step weaker than a registration read from a binary "
        "('declared in native_functions.yaml, unverified')",
        f"forward kernels from native_functions.yaml (structured groups through their .out); "
        f"composites, their reach and every backward path from this torch {torch.__version__} build's "
        f"dispatcher for {backend.dispatch_key} and {backend.autograd_key} (alias-key registrations, "
        "the same in every build) and derivatives.yaml",
        f"{len(full) - len(kept)} catalogue ops are left out: outside native_functions.yaml with no "
        "composite kernel, nothing declares them (kernels registered by hand in the backend's sources "
        "are not seen either)",
    ]
    prov["fallback"] = {"present": False}
    if fallback:
        prov["fallback"] = {
            "present": True,
            "kind": fallback["kind"],
            "enabled": bool(prov["settings"].get("cpu_fallback_enabled", False)),
            "source": fallback["source"],
        }
        notes.append(fallback["note"])
    if lists_path:
        try:
            lists = read_test_lists(lists_path, lambda attr: dtype_name(getattr(torch, attr)))
        except (OSError, SyntaxError, ValueError, StopIteration) as exc:
            raise UsageError(
                f"{lists_path}: cannot read the test suite's lists ({exc}); "
                "pass --no-test-lists to leave dtype notes out"
            ) from None
        notes_by_op = dtype_notes(lists, opinfo_bases(opinfos()), doc["ops"])
        for name, notes_of in notes_by_op.items():
            doc["ops"][name].update(notes_of)
        about.update(
            {
                "test_lists": os.path.join("torch", test_list) + " (parsed, not imported)",
                "unsupported_dtypes": list(lists.every_op),
                "ops_with_dtype_notes": len(notes_by_op),
            }
        )
        notes.append(
            f"dtype notes per op from {os.path.basename(lists_path)}: every OpInfo is expected to fail "
            f"in {', '.join(lists.every_op)} ({backend.name} has no such tensors); xfail: "
            f"{', '.join(FORWARD_FAILS)} (or complex outside {COMPLEX_LIST}) for every OpInfo about the op; "
            f"doubt: the rest of those, {', '.join(FORWARD_DOUBTS)}; bwd_doubt: "
            f"{', '.join(BACKWARD_DOUBTS)} of the grad tests; not read: {', '.join(NOT_READ)}"
        )
    prov["declared"] = about
    prov["device"] = (
        f"none: declared data reads torch's sources for the {backend.dispatch_key} key; no "
        f"{backend.name} build was loaded and no device touched"
    )
    prov["kernel_sources"] = {YAML_SOURCE: about["kernels"]}
    prov["notes"] = notes
    return doc
