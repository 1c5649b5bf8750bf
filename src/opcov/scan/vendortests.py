"""What a backend's own op tests expect, read from its source checkout without importing anything from it.

TorchTPU's op tests (``tests/ops_test.py``, with dtype groups in ``tests/op_testing.py``) test each OpInfo
with ``self.do_test_op(NAME, ...)``: ``exclude_dtypes`` / ``exclude_inplace_dtypes`` (a tuple of
``torch.<dtype>`` and dtype groups joined with ``+``, or a mapping from the golden device, ``cpu`` or
``gpu``, to one), ``check_grad=False`` (the gradient is not checked), ``check_dynamism=False`` (left out
of the bounded-dynamism run), ``check_value=CheckValueMode.LOOSE`` or ``SKIP``, ``variant_test_name``; a test method that calls ``self.skipTest(...)``
tests nothing. Module-level collections of op names whose variable names say compile or dynamism are
read as the compile-only and bounded-dynamism deny lists. All of it is read with ``ast``: the
checkout's code never runs (it imports torch_tpu and absl, and would start a device).

These are expectations, not results: what the backend's developers chose not to test, or to test
loosely. opcov keeps them as their own evidence kind (opcov.store.vendor) and never judges from them.
Torch-free.
"""

from __future__ import annotations

import ast
import hashlib
import os
import re
import subprocess

from opcov.errors import UsageError

TEST_FILES = ("tests/ops_test.py", "tests/op_testing.py")
DTYPES = {
    "float64": "float64",
    "double": "float64",
    "float32": "float32",
    "float": "float32",
    "float16": "float16",
    "half": "float16",
    "bfloat16": "bfloat16",
    "complex64": "complex64",
    "complex128": "complex128",
    "uint8": "uint8",
    "int8": "int8",
    "int16": "int16",
    "int32": "int32",
    "int64": "int64",
    "long": "int64",
    "bool": "bool",
    "float8_e4m3fn": "float8_e4m3fn",
    "float8_e5m2": "float8_e5m2",
}
_DENY_NAME = re.compile(r"(COMPILE|DYNAMI)", re.I)


class _Eval:
    """Evaluates the few expression shapes the tests use for dtypes, from the module's own constants."""

    def __init__(self) -> None:
        self.names: dict[str, object] = {}

    def __call__(self, node):
        if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id == "torch":
            return (DTYPES[node.attr],) if node.attr in DTYPES else None
        if isinstance(node, ast.Attribute):  # op_testing.COMPLEX_DTYPES
            return self.names.get(node.attr)
        if isinstance(node, ast.Name):
            return self.names.get(node.id)
        if isinstance(node, ast.Constant) and isinstance(node.value, str):
            return node.value
        if isinstance(node, (ast.Tuple, ast.List, ast.Set)):
            out: list = []
            for elt in node.elts:
                v = self(elt.value if isinstance(elt, ast.Starred) else elt)
                if v is None:
                    return None
                out += list(v) if isinstance(v, tuple) else [v]
            return tuple(out)
        if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Add):
            a, b = self(node.left), self(node.right)
            return a + b if isinstance(a, tuple) and isinstance(b, tuple) else None
        if isinstance(node, ast.Dict):
            keys = [self(k) if k is not None else None for k in node.keys]
            vals = [self(v) for v in node.values]
            if any(not isinstance(k, str) for k in keys) or any(v is None for v in vals):
                return None
            return dict(zip(keys, vals))
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in ("frozenset", "set"):
            return self(node.args[0]) if node.args else ()
        return None

    def assign(self, tree: ast.Module) -> None:
        for stmt in tree.body:
            target, value = None, None
            if isinstance(stmt, ast.Assign) and len(stmt.targets) == 1 and isinstance(stmt.targets[0], ast.Name):
                target, value = stmt.targets[0].id, stmt.value
            elif isinstance(stmt, ast.AnnAssign) and isinstance(stmt.target, ast.Name) and stmt.value is not None:
                target, value = stmt.target.id, stmt.value
            if target is not None:
                v = self(value)
                if v is not None:
                    self.names[target] = v


def _parse(path: str) -> ast.Module:
    try:
        with open(path, encoding="utf-8") as f:
            return ast.parse(f.read(), filename=path)
    except OSError as exc:
        raise UsageError(f"{path}: cannot read ({exc.strerror}); is this a TorchTPU source checkout?") from None
    except SyntaxError as exc:
        raise UsageError(f"{path}:{exc.lineno}: not Python this opcov can parse ({exc.msg})") from None


def _dtypes(value) -> dict:
    """{'any': [...]} for a tuple, {'cpu': [...], 'gpu': [...]} for a mapping by golden device."""
    if isinstance(value, tuple):
        return {"any": sorted(set(value))}
    if isinstance(value, dict):
        return {k: sorted(set(v)) for k, v in value.items() if isinstance(v, tuple)}
    return {}


def _combined(recs: list) -> dict:
    """One OpInfo tested by several calls (histc: once excluding some dtypes, once more checking only their
    shapes): a dtype is untested only where every call excludes it, a gradient unchecked only where no call
    checks it, values loose or unchecked only where every call says so."""
    out = {"test": recs[0]["test"], "line": recs[0]["line"]}
    for arg in ("exclude_dtypes", "exclude_inplace_dtypes"):
        if all(arg in r for r in recs):
            keys = set.intersection(*(set(r[arg]) for r in recs))
            got = {k: sorted(set.intersection(*(set(r[arg][k]) for r in recs))) for k in keys}
            got = {k: v for k, v in got.items() if v}
            if got:
                out[arg] = got
    for arg in ("check_grad", "check_dynamism"):
        if all(r.get(arg) is False for r in recs):
            out[arg] = False
    modes = [r.get("check_value") for r in recs]
    if all(modes):
        out["check_value"] = "LOOSE" if "LOOSE" in modes else "SKIP"
    return out


def read(checkout: str) -> dict:
    """The expectations in a TorchTPU checkout: per OpInfo (name, with '.variant'), its test method and
    line, excluded dtypes, whether its gradient and bounded dynamism are checked, whether it is skipped;
    and the deny lists. A UsageError (one line) when the files are not there or not parseable."""
    for rel in TEST_FILES:
        if not os.path.isfile(os.path.join(checkout, rel)):
            raise UsageError(
                f"{checkout}: no {rel}; give a TorchTPU source checkout (its tests/ folder holds the op tests)"
            )
    ev = _Eval()
    trees = {rel: _parse(os.path.join(checkout, rel)) for rel in reversed(TEST_FILES)}  # op_testing first
    deny: dict[str, dict] = {}
    for rel, tree in trees.items():
        ev.assign(tree)
        for stmt in tree.body:
            if isinstance(stmt, (ast.Assign, ast.AnnAssign)):
                target = stmt.targets[0] if isinstance(stmt, ast.Assign) else stmt.target
                if isinstance(target, ast.Name) and _DENY_NAME.search(target.id):
                    v = ev(stmt.value)
                    if isinstance(v, tuple) and v and all(isinstance(x, str) for x in v) and not set(v) & set(DTYPES):
                        deny[target.id] = {"file": rel, "line": stmt.lineno, "names": sorted(set(v))}
    calls: dict[str, list] = {}  # OpInfo -> one record per do_test_op call
    opinfos: dict[str, dict] = {}
    for node in ast.walk(trees["tests/ops_test.py"]):
        if not (isinstance(node, ast.FunctionDef) and node.name.startswith("test_")):
            continue
        found_calls = [c for c in ast.walk(node) if isinstance(c, ast.Call) and isinstance(c.func, ast.Attribute)]
        skipped = next((c for c in found_calls if c.func.attr == "skipTest"), None)  # type: ignore[attr-defined]
        tested = [c for c in found_calls if c.func.attr == "do_test_op" and c.args]  # type: ignore[attr-defined]
        if skipped is not None and not tested:
            why = str((ev(skipped.args[0]) if skipped.args else "") or "skipTest")
            name = node.name.removeprefix("test_")
            first = why.split(" ", 1)[0].rstrip(":,")  # '_foreach_erfc is not ready yet': the OpInfo named
            if re.fullmatch(r"[A-Za-z_][\w.]*", first) and first.strip("_").endswith(name.strip("_")):
                name = first
            opinfos.setdefault(name, {"test": node.name, "line": node.lineno, "skipped": why})
            continue
        for call in tested:
            name = ev(call.args[0])
            if not isinstance(name, str):
                continue
            kw = {k.arg: k.value for k in call.keywords if k.arg}
            variant = ev(kw["variant_test_name"]) if "variant_test_name" in kw else None
            key = f"{name}.{variant}" if isinstance(variant, str) and variant else name
            rec: dict = {"test": node.name, "line": call.lineno}
            for arg in ("exclude_dtypes", "exclude_inplace_dtypes"):
                if arg in kw:
                    rec[arg] = _dtypes(ev(kw[arg]))
            for arg in ("check_grad", "check_dynamism"):
                if isinstance(kw.get(arg), ast.Constant) and kw[arg].value is False:  # type: ignore[union-attr]
                    rec[arg] = False
            mode = kw.get("check_value")
            if isinstance(mode, ast.Attribute) and mode.attr in ("LOOSE", "SKIP"):
                rec["check_value"] = mode.attr
            calls.setdefault(key, []).append(rec)
    for key, recs in calls.items():
        opinfos[key] = _combined(recs)
    return {"opinfos": dict(sorted(opinfos.items())), "deny_lists": deny}


def source_of(checkout: str, repo: str | None, commit: str | None) -> dict:
    """Where the tests came from: the repository, the commit (given, else the checkout's git HEAD), and
    each file's SHA-256, so that the data names exactly what was read."""
    if not commit and os.path.exists(os.path.join(checkout, ".git")):
        proc = subprocess.run(["git", "-C", checkout, "rev-parse", "HEAD"], capture_output=True, text=True)
        commit = proc.stdout.strip() if proc.returncode == 0 else None
    if not commit:
        raise UsageError(f"{checkout}: not a git checkout; say which commit it is with --commit SHA")
    files = {}
    for rel in TEST_FILES:
        with open(os.path.join(checkout, rel), "rb") as f:
            files[rel] = hashlib.sha256(f.read()).hexdigest()
    return {"repo": repo or "unknown", "commit": commit, "files": files}
