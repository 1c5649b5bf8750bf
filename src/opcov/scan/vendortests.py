"""What a backend's own op tests expect, read from its source checkout without importing anything from it.

TorchTPU's op tests (``tests/ops_test.py``, with dtype groups in ``tests/op_testing.py``) test each OpInfo
with ``self.do_test_op(NAME, ...)``: ``exclude_dtypes`` / ``exclude_inplace_dtypes`` (a tuple of
``torch.<dtype>`` and dtype groups joined with ``+``, or a mapping from the golden device, ``cpu`` or
``gpu``, to one; a conditional expression picks one side), ``check_grad=False`` (the gradient is not
checked), ``check_dynamism=False`` (left out of the bounded-dynamism run), ``check_value=CheckValueMode.LOOSE``
or ``SKIP`` (or a list, one mode per output), ``skip_output_indices``, ``check_out_variant=False``,
``skip_if=FUNCTION`` and ``variant_test_name``. A test method that calls ``self.skipTest(...)`` outright
tests nothing; one that calls it under an ``if`` is skipped only there; a ``skip...`` decorator skips it in
some test modes. The compile-only deny list is a list of OpInfo names a function of ``op_testing.py``
keeps (``compiled_deny_list``, in ``_compiled_supports_op``); the bounded-dynamism deny lists are the
``if op.name in [...]: return "why"`` checks of ``tests/dynamism_test_utils.py``. Any list of op names
whose variable says ``deny`` is read as a deny list too. Where the checkout has them, the models its
model-coverage tests run and the collectives its distributed tests call are read too
(opcov.scan.vendorsuites). All of it is read with ``ast``: the checkout's code never runs (it imports
torch_tpu and absl, and would start a device).

These are expectations, not results: what the backend's developers chose not to test, or to test
loosely. opcov keeps them as their own evidence kind (opcov.store.vendor) and never judges from them.
What the reader does not understand is listed (``not_understood``), never dropped. Torch-free.
"""

from __future__ import annotations

import ast
import hashlib
import os
import re
import subprocess

from opcov import backends
from opcov.errors import UsageError
from opcov.scan import vendorsuites

TEST_FILES = ("tests/ops_test.py", "tests/op_testing.py")
OPTIONAL_FILES = ("tests/dynamism_test_utils.py",)  # the bounded-dynamism filter, where the checkout has it
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
_DENY_NAME = re.compile(r"deny", re.I)
MODES = ("STRICT", "LOOSE", "SKIP")
# do_test_op's other keywords: read and kept as their source text (not shown per op)
OTHER_KEYWORDS = (
    "check_device",
    "check_dtype",
    "check_op_failures",
    "check_inplace_op_failures",
    "extra_dtypes",
    "max_samples_per_op_dtype",
)


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


# a test file opcov reads: TorchTPU's ops_test.py is about 120 kB; Python's parser takes some 350 bytes of
# memory per byte of source, so 1 MiB keeps a parse near 350 MB whatever the file holds
MAX_SOURCE_BYTES = 1 << 20
MAX_TREE_DEPTH = 100  # syntax-tree levels below a statement (real tests nest a few dozen at most)


def _source(path: str) -> str:
    """The file's text: refused in one line when it is over MAX_SOURCE_BYTES (before it is read) or is
    not UTF-8 text."""
    try:
        with open(path, "rb") as f:
            size = os.fstat(f.fileno()).st_size
            if size > MAX_SOURCE_BYTES:
                raise UsageError(
                    f"{path}: {size:,} bytes, over the {MAX_SOURCE_BYTES:,} opcov reads in one test file; not read"
                )
            raw = f.read(MAX_SOURCE_BYTES + 1)
    except OSError as exc:
        raise UsageError(f"{path}: cannot read ({exc.strerror}); is this the backend's source checkout?") from None
    if len(raw) > MAX_SOURCE_BYTES:
        raise UsageError(f"{path}: over the {MAX_SOURCE_BYTES:,} bytes opcov reads in one test file; not read")
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = raw.count(b"\n", 0, exc.start) + 1
        raise UsageError(f"{path}:{line}: not UTF-8 text (byte {exc.start}); is this a Python test file?") from None


def _too_deep(tree: ast.AST) -> int | None:
    """The line of a node nested more than MAX_TREE_DEPTH levels, or None: walked without recursion, so
    that the recursive readers after it (``ast.unparse``, ``_Eval``) never meet such a tree."""
    stack = [(tree, 0)]
    while stack:
        node, level = stack.pop()
        if level > MAX_TREE_DEPTH:
            return getattr(node, "lineno", 0)
        stack.extend((child, level + 1) for child in ast.iter_child_nodes(node))
    return None


def _parse(path: str) -> ast.Module:
    """The file's syntax tree, read with ``ast`` (never run), within bounds: its size, its encoding and
    how deep it nests, each refused in one line."""
    text = _source(path)
    try:
        tree = ast.parse(text, filename=path)
    except SyntaxError as exc:
        where = f"{path}:{exc.lineno}" if exc.lineno else path
        raise UsageError(f"{where}: not Python this opcov can parse ({exc.msg})") from None
    except ValueError as exc:  # a NUL byte (Python 3.11)
        raise UsageError(f"{path}: not Python this opcov can parse ({exc})") from None
    except (RecursionError, MemoryError):  # the parser's own depth guard: 100,000 nested operators
        raise UsageError(
            f"{path}: nested too deeply for Python's parser (over {MAX_TREE_DEPTH} levels); not a test file opcov reads"
        ) from None
    line = _too_deep(tree)
    if line is not None:
        raise UsageError(
            f"{path}:{line}: an expression nested over {MAX_TREE_DEPTH} levels deep; not a test file opcov reads"
        )
    return tree


def _text(node) -> str:
    """A message as the test writes it: a string, or an f-string with its fields as {source}."""
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return node.value
    if isinstance(node, ast.JoinedStr):
        return "".join(
            v.value if isinstance(v, ast.Constant) else "{" + ast.unparse(v.value) + "}"  # type: ignore[attr-defined]
            for v in node.values
        )
    return ast.unparse(node)


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
    if len({r["test"] for r in recs}) > 1:
        out["tests"] = sorted({r["test"] for r in recs})
    for arg in ("exclude_dtypes", "exclude_inplace_dtypes"):
        if all(arg in r for r in recs):
            keys = set.intersection(*(set(r[arg]) for r in recs))
            got = {k: sorted(set.intersection(*(set(r[arg][k]) for r in recs))) for k in keys}
            got = {k: v for k, v in got.items() if v}
            if got:
                out[arg] = got
                when = sorted({r[f"{arg}_when"] for r in recs if r.get(f"{arg}_when")})
                if when:
                    out[f"{arg}_when"] = " / ".join(when)
    for arg in ("check_grad", "check_dynamism", "check_out_variant"):
        if all(r.get(arg) is False for r in recs):
            out[arg] = False
        elif any(r.get(arg) is False for r in recs):  # sdpa: unchecked in its flash and efficient tests only
            out[f"{arg}_off_in"] = sorted({r["test"] for r in recs if r.get(arg) is False})
    modes = [r.get("check_value") for r in recs]
    if all(modes):
        out["check_value"] = "LOOSE" if "LOOSE" in modes else "SKIP"
    per_output = [tuple(r["check_value_outputs"]) for r in recs if "check_value_outputs" in r]
    if len(per_output) == len(recs) and len(set(per_output)) == 1:
        out["check_value_outputs"] = list(per_output[0])
    if all(r.get("skip_output_indices") for r in recs):
        out["skip_output_indices"] = sorted(set.intersection(*(set(r["skip_output_indices"]) for r in recs)))
    for arg in ("skip_if", "decorators"):
        got = sorted({x for r in recs for x in r.get(arg, [])})
        if got:
            out[arg] = got
    when = [w for r in recs for w in r.get("skipped_when", [])]
    if when:
        out["skipped_when"] = [dict(t) for t in sorted({tuple(sorted(w.items())) for w in when})]
    other: dict = {}
    for r in recs:
        for k, v in (r.get("other") or {}).items():
            other.setdefault(k, [])
            if v not in other[k]:
                other[k].append(v)
    if other:
        out["other"] = other
    return out


def _skip_name(method: str, why: str) -> str:
    """The OpInfo a wholly skipped test method stands for: named as its message names it where the message
    starts with a name ending in the method's ('_foreach_erfc is not ready yet' for test_foreach_erfc), else
    from the method's name (test_foreach_max, whose message names _foreach_log2: _foreach_max)."""
    name = method.removeprefix("test_")
    first = why.split(" ", 1)[0].rstrip(":,")
    if re.fullmatch(r"[A-Za-z_][\w.]*", first) and first.strip("_").endswith(name.strip("_")):
        return first
    return f"_{name}" if name.startswith("foreach_") else name


def _decorators(fn: ast.FunctionDef) -> list[str]:
    return [ast.unparse(d) for d in fn.decorator_list if "skip" in ast.unparse(d).lower()]


def _call_record(call: ast.Call, fn: ast.FunctionDef, ev: _Eval, not_understood: list) -> tuple[str, dict] | None:
    """(OpInfo name with '.variant', what this do_test_op call leaves untested or loose)."""
    name = ev(call.args[0])
    if not isinstance(name, str):
        not_understood.append(
            {"line": call.lineno, "test": fn.name, "what": f"OpInfo name {ast.unparse(call.args[0])}"}
        )
        return None
    kw = {k.arg: k.value for k in call.keywords if k.arg}
    variant = ev(kw["variant_test_name"]) if "variant_test_name" in kw else None
    key = f"{name}.{variant}" if isinstance(variant, str) and variant else name
    rec: dict = {"test": fn.name, "line": call.lineno}
    for arg in ("exclude_dtypes", "exclude_inplace_dtypes"):
        if arg not in kw:
            continue
        node = kw[arg]
        if isinstance(node, ast.IfExp):  # (None if env.IS_INTERNAL_TORCH_TPU else INTEGRAL_DTYPES)
            if isinstance(node.body, ast.Constant) and node.body.value is None:
                node, rec[f"{arg}_when"] = node.orelse, f"not ({ast.unparse(node.test)})"
            elif isinstance(node.orelse, ast.Constant) and node.orelse.value is None:
                node, rec[f"{arg}_when"] = node.body, ast.unparse(node.test)
        got = _dtypes(ev(node))
        if got:
            rec[arg] = got
        else:
            not_understood.append({"line": call.lineno, "test": fn.name, "what": f"{arg}={ast.unparse(kw[arg])}"})
    for arg in ("check_grad", "check_dynamism", "check_out_variant"):
        if arg in kw:
            if isinstance(kw[arg], ast.Constant) and isinstance(kw[arg].value, bool):  # type: ignore[attr-defined]
                if kw[arg].value is False:  # type: ignore[attr-defined]
                    rec[arg] = False
            else:
                not_understood.append({"line": call.lineno, "test": fn.name, "what": f"{arg}={ast.unparse(kw[arg])}"})
    mode = kw.get("check_value")
    if mode is not None:
        modes = mode.elts if isinstance(mode, (ast.List, ast.Tuple)) else [mode]
        names = [m.attr if isinstance(m, ast.Attribute) and m.attr in MODES else None for m in modes]
        if None in names:
            not_understood.append({"line": call.lineno, "test": fn.name, "what": f"check_value={ast.unparse(mode)}"})
        elif isinstance(mode, (ast.List, ast.Tuple)):
            rec["check_value_outputs"] = names
        elif names[0] in ("LOOSE", "SKIP"):
            rec["check_value"] = names[0]
    if "skip_output_indices" in kw:
        node = kw["skip_output_indices"]
        if isinstance(node, (ast.List, ast.Tuple)) and all(
            isinstance(e, ast.Constant) and isinstance(e.value, int) for e in node.elts
        ):
            rec["skip_output_indices"] = [e.value for e in node.elts]  # type: ignore[attr-defined]
        else:
            not_understood.append(
                {"line": call.lineno, "test": fn.name, "what": f"skip_output_indices={ast.unparse(node)}"}
            )
    if "skip_if" in kw:
        rec["skip_if"] = [ast.unparse(kw["skip_if"])]
    known = {
        "variant_test_name",
        "exclude_dtypes",
        "exclude_inplace_dtypes",
        "check_grad",
        "check_dynamism",
        "check_out_variant",
        "check_value",
        "skip_output_indices",
        "skip_if",
    }
    for k, v in kw.items():
        if k in OTHER_KEYWORDS:
            rec.setdefault("other", {})[k] = ast.unparse(v)
        elif k not in known:
            not_understood.append({"line": call.lineno, "test": fn.name, "what": f"keyword {k}={ast.unparse(v)}"})
    if len(call.args) > 1:
        not_understood.append({"line": call.lineno, "test": fn.name, "what": "positional arguments after the name"})
    if _decorators(fn):
        rec["decorators"] = _decorators(fn)
    return key, rec


def _tests(tree: ast.Module, ev: _Eval, not_understood: list) -> dict:
    """Per OpInfo, what the test methods of ops_test.py leave untested or loose."""
    calls: dict[str, list] = {}  # OpInfo -> one record per do_test_op call
    opinfos: dict[str, dict] = {}
    for fn in ast.walk(tree):
        if not (isinstance(fn, ast.FunctionDef) and fn.name.startswith("test_")):
            continue
        outright = [
            s.value
            for s in fn.body
            if isinstance(s, ast.Expr)
            and isinstance(s.value, ast.Call)
            and isinstance(s.value.func, ast.Attribute)
            and s.value.func.attr == "skipTest"
        ]
        guarded = []  # (condition, message) of a skipTest under an if
        for node in ast.walk(fn):
            if isinstance(node, ast.If):
                for s in node.body:
                    if (
                        isinstance(s, ast.Expr)
                        and isinstance(s.value, ast.Call)
                        and isinstance(s.value.func, ast.Attribute)
                        and s.value.func.attr == "skipTest"
                    ):
                        why = _text(s.value.args[0]) if s.value.args else "skipTest"
                        guarded.append({"when": ast.unparse(node.test), "why": why})
        tested = [
            c
            for c in ast.walk(fn)
            if isinstance(c, ast.Call) and isinstance(c.func, ast.Attribute) and c.func.attr == "do_test_op" and c.args
        ]
        if outright:
            why = _text(outright[0].args[0]) if outright[0].args else "skipTest"
            name = _skip_name(fn.name, why)
            opinfos.setdefault(name, {"test": fn.name, "line": fn.lineno, "skipped": why})
            continue
        if not tested:
            if guarded:
                name = _skip_name(fn.name, guarded[0]["why"])
                opinfos.setdefault(name, {"test": fn.name, "line": fn.lineno, "skipped_when": guarded})
            else:
                not_understood.append(
                    {"line": fn.lineno, "test": fn.name, "what": "calls neither do_test_op nor skipTest"}
                )
            continue
        for call in tested:
            got = _call_record(call, fn, ev, not_understood)
            if got is not None:
                key, rec = got
                if guarded:
                    rec["skipped_when"] = guarded
                calls.setdefault(key, []).append(rec)
    for key, recs in calls.items():
        opinfos[key] = _combined(recs)
    return opinfos


def _applies(*names: str) -> str | None:
    said = " ".join(names).lower()
    if "compil" in said:
        return "compile"
    if "dynami" in said:
        return "bounded dynamism"
    return None


def _deny_lists(trees: dict, not_understood: list) -> dict:
    """The deny lists: lists of op names whose variable says 'deny' (at any depth), and in a dynamism filter
    each `if op.name in LIST: return "why"`, with its reason and, where the condition narrows it, when."""
    out: dict[str, dict] = {}
    for rel, tree in trees.items():
        stem = os.path.basename(rel).removesuffix(".py")
        scopes = [(None, tree)] + [(f, f) for f in ast.walk(tree) if isinstance(f, ast.FunctionDef)]
        for fn, scope in scopes:
            body = scope.body if fn is None else list(ast.walk(scope))
            local: dict[str, tuple] = {}
            for stmt in body:
                if isinstance(stmt, (ast.Assign, ast.AnnAssign)):
                    target = stmt.targets[0] if isinstance(stmt, ast.Assign) else stmt.target
                    value = stmt.value
                    if (
                        isinstance(value, ast.Call)
                        and isinstance(value.func, ast.Name)
                        and value.func.id in ("frozenset", "set", "tuple", "list")
                        and value.args
                    ):
                        value = value.args[0]
                    if isinstance(target, ast.Name) and isinstance(value, (ast.List, ast.Tuple, ast.Set)):
                        vals = [e.value if isinstance(e, ast.Constant) else None for e in value.elts]
                        if vals and all(isinstance(v, str) for v in vals) and not set(vals) & set(DTYPES):
                            local[target.id] = (stmt.lineno, tuple(vals))
            fname = fn.name if fn is not None else ""
            for var, (line, vals) in local.items():
                if _DENY_NAME.search(var) and (fn is None or _owner(tree, scope, var)):
                    applies = _applies(var, fname, stem)
                    key = f"{stem}.{fname + '.' if fname else ''}{var}"
                    out[key] = {
                        "file": rel,
                        "line": line,
                        "function": fname or None,
                        "variable": var,
                        "applies": applies,
                        "names": sorted(set(vals)),
                    }
                    if applies is None:
                        not_understood.append(
                            {"file": rel, "line": line, "what": f"deny list {var}: compile or dynamism?"}
                        )
            if fn is None or _applies(fname, stem) != "bounded dynamism":
                continue
            for node in ast.walk(fn):
                if not isinstance(node, ast.If):
                    continue
                ret = next((s for s in node.body if isinstance(s, ast.Return)), None)
                if ret is None or not isinstance(ret.value, (ast.Constant, ast.JoinedStr)):
                    continue
                why = _text(ret.value)
                tests = node.test.values if isinstance(node.test, ast.BoolOp) else [node.test]
                for t in tests:
                    if not (
                        isinstance(t, ast.Compare)
                        and len(t.ops) == 1
                        and isinstance(t.ops[0], ast.In)
                        and isinstance(t.left, ast.Attribute)
                        and t.left.attr == "name"
                    ):
                        continue
                    comp = t.comparators[0]
                    if isinstance(comp, ast.Name) and comp.id in local:
                        var, (line, vals) = comp.id, local[comp.id]
                    elif isinstance(comp, (ast.List, ast.Tuple, ast.Set)) and all(
                        isinstance(e, ast.Constant) and isinstance(e.value, str) for e in comp.elts
                    ):
                        var, line, vals = (
                            f"the list at line {node.lineno}",
                            node.lineno,
                            tuple(e.value for e in comp.elts),
                        )  # type: ignore[attr-defined]
                    else:
                        not_understood.append(
                            {"file": rel, "line": node.lineno, "what": f"if {ast.unparse(node.test)}"}
                        )
                        continue
                    key = f"{stem}.{fname}.{var}"
                    entry = out.setdefault(
                        key,
                        {
                            "file": rel,
                            "line": line,
                            "function": fname,
                            "variable": var,
                            "applies": "bounded dynamism",
                            "names": sorted(set(vals)),
                        },
                    )
                    entry["why"] = why
                    if isinstance(node.test, ast.BoolOp) and isinstance(node.test.op, ast.And):
                        entry["when"] = ast.unparse(node.test)
    return dict(sorted(out.items()))


def _owner(tree: ast.Module, scope, var: str) -> bool:
    """Whether ``scope`` is the innermost function assigning ``var`` (a list is read once, in its own function)."""
    for f in ast.walk(scope):
        if f is not scope and isinstance(f, ast.FunctionDef):
            for s in ast.walk(f):
                if isinstance(s, ast.Assign) and any(isinstance(t, ast.Name) and t.id == var for t in s.targets):
                    return False
    return True


def read(checkout: str, backend: str = "") -> dict:
    """The expectations in a source checkout of ``backend`` (a backend whose record names its ``vendor_tests``,
    laid out as TorchTPU's are): per OpInfo (name, with '.variant'), its test method and line, excluded dtypes,
    whether its gradient and bounded dynamism are checked, whether it is skipped; the deny lists; the models its
    model-coverage tests run and the collectives its distributed tests call (opcov.scan.vendorsuites), where the
    checkout has those files; and what was not understood. A UsageError (one line) when the files are not there
    or not parseable."""
    rec = backends.record(backend) if backend else None
    whose = f"a {rec.vendor or rec.name} source checkout" if rec else "the backend's source checkout"
    for rel in TEST_FILES:
        if not os.path.isfile(os.path.join(checkout, rel)):
            raise UsageError(f"{checkout}: no {rel}; give {whose} (its tests/ folder holds the op tests)")
    ev = _Eval()
    suites = vendorsuites.files(checkout)
    rels = [r for r in files_read(checkout) if r not in suites and r != "tests/ops_test.py"] + ["tests/ops_test.py"]
    trees = {rel: _parse(os.path.join(checkout, rel)) for rel in rels}  # the op tests: dtype groups first
    for tree in trees.values():
        ev.assign(tree)
    not_understood: list = []
    opinfos = _tests(trees["tests/ops_test.py"], ev, not_understood)
    for n in not_understood:
        n.setdefault("file", "tests/ops_test.py")
    deny = _deny_lists(trees, not_understood)
    more = {rel: _parse(os.path.join(checkout, rel)) for rel in suites}
    models = vendorsuites.models(
        {r: t for r, t in more.items() if r.startswith(vendorsuites.MODEL_FOLDER)}, not_understood
    )
    collectives = vendorsuites.collectives(
        {r: t for r, t in more.items() if r.startswith(vendorsuites.DISTRIBUTED_FOLDER)},
        own_ops=f"torch.ops.{rec.module.split('.')[0]}" if rec and rec.module else "",
    )
    return {
        "opinfos": dict(sorted(opinfos.items())),
        "deny_lists": deny,
        "models": models,
        "collectives": collectives,
        "not_understood": not_understood,
    }


def inputs(checkout: str) -> list[str]:
    """Every file of the checkout ``opcov expect`` may read: what its output must never be."""
    return [os.path.join(checkout, rel) for rel in TEST_FILES + OPTIONAL_FILES + tuple(vendorsuites.files(checkout))]


def files_read(checkout: str) -> list[str]:
    """The checkout's files opcov reads: the op tests, the dtype groups, the dynamism filter, the
    model-coverage and distributed tests, each where present."""
    optional = [r for r in OPTIONAL_FILES if os.path.isfile(os.path.join(checkout, r))]
    return list(TEST_FILES) + optional + vendorsuites.files(checkout)


def _spec(text: str) -> tuple[str, str]:
    """'REPO@COMMIT' -> (repo, commit)."""
    repo, sep, commit = text.rpartition("@")
    if not sep or not repo or not re.fullmatch(r"[0-9a-f]{7,40}", commit):
        raise UsageError(f"--vendor-source {text!r}: expected REPO@COMMIT or FILE=REPO@COMMIT (a hex commit)")
    return repo, commit


def source_of(checkout: str, repo: str | None, commit: str | None, specs=(), note: str | None = None) -> dict:
    """Where the tests came from: the repository, the commit (given, else the checkout's git HEAD), each
    file's SHA-256, and, where ``--vendor-source FILE=REPO@COMMIT`` names one per file (a copy put together
    file by file), each file's own commit; so that the data names exactly what was read."""
    files = files_read(checkout)
    per_file: dict[str, str] = {}
    for text in specs or ():
        path, eq, rest = text.partition("=") if "=" in text.split("@", 1)[0] else ("", "", text)
        r, c = _spec(rest)
        if path and path not in files:
            raise UsageError(f"--vendor-source {text!r}: opcov reads {', '.join(files)}, not {path}")
        if repo and repo != r:
            raise UsageError(f"--vendor-source {text!r}: another repository than --repo {repo}")
        repo = r
        if path:
            per_file[path] = c
        else:
            commit = c
    if per_file and not commit:
        commit = per_file.get("tests/ops_test.py")
    if not commit and os.path.exists(os.path.join(checkout, ".git")):
        proc = subprocess.run(["git", "-C", checkout, "rev-parse", "HEAD"], capture_output=True, text=True)
        commit = proc.stdout.strip() if proc.returncode == 0 else None
    if not commit:
        raise UsageError(
            f"{checkout}: not a git checkout; say which commit it is with --commit SHA or --vendor-source REPO@SHA"
        )
    hashes = {}
    for rel in files:
        digest = hashlib.sha256()
        with open(os.path.join(checkout, rel), "rb") as f:
            for block in iter(lambda: f.read(1 << 20), b""):
                digest.update(block)
        hashes[rel] = digest.hexdigest()
    out = {"repo": repo or "unknown", "commit": commit, "files": hashes}
    if per_file:
        out["file_commits"] = {rel: per_file.get(rel, commit) for rel in files}
    if note:
        out["note"] = note
    return out
