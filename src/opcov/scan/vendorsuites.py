"""What a backend's own model and distributed tests run, read from its source checkout without importing it.

TorchTPU's model-coverage tests (``tests/compile/model_coverage_*_test.py``) name each model they run in a
``@parameterized.named_parameters(dict(provider=..., module_name=..., ...), ...)`` decorator on a test
method; its distributed tests (``tests/distributed/*_test.py``) call ``torch.distributed.<collective>``
(or ``dist.<collective>``, or a ``torch.ops.torch_tpu`` op) in functions that their test methods hand to a
launcher by name. Both are read with ``ast`` (opcov.scan.vendortests' bounds), as facts only: a model's
provider, name, size and test; whether its file compiles the model with ``torch.compile``; each collective
call with its line, the reduce ops it is given, and the test methods that name its function (none: a
function no test runs). A model a file disables by commenting its entry out is not in the syntax tree and
is not read. What the reader does not understand is listed, never dropped. Torch-free.
"""

from __future__ import annotations

import ast
import os

MODEL_FOLDER = "tests/compile"
MODEL_PREFIX = "model_coverage_"  # tests/compile/model_coverage_hf_test.py, ..._timm_test.py
DISTRIBUTED_FOLDER = "tests/distributed"
# torch.distributed's collective and point-to-point calls, each with the c10d op it dispatches (None: a call
# made of others, e.g. broadcast_object_list pickles and broadcasts); process-group set-up is not one
COLLECTIVES = {
    "all_reduce": "c10d::allreduce_",
    "all_gather": "c10d::allgather_",
    "all_gather_into_tensor": "c10d::_allgather_base_",
    "all_gather_object": None,
    "reduce_scatter": "c10d::reduce_scatter_",
    "reduce_scatter_tensor": "c10d::_reduce_scatter_base_",
    "all_to_all": "c10d::alltoall_",
    "all_to_all_single": "c10d::alltoall_base_",
    "broadcast": "c10d::broadcast_",
    "broadcast_object_list": None,
    "gather": "c10d::gather_",
    "gather_object": None,
    "scatter": "c10d::scatter_",
    "scatter_object_list": None,
    "reduce": "c10d::reduce_",
    "barrier": "c10d::barrier",
    "monitored_barrier": "c10d::monitored_barrier_",
    "send": "c10d::send",
    "recv": "c10d::recv_",
    "isend": "c10d::send",
    "irecv": "c10d::recv_",
    "batch_isend_irecv": None,
}
# the reducing collectives and where their reduce op goes when passed by position
REDUCE_OP_ARG = {"all_reduce": 1, "reduce": 2, "reduce_scatter": 2, "reduce_scatter_tensor": 2}


def files(checkout: str) -> list[str]:
    """The checkout's model-coverage and distributed test files (relative paths), where it has them."""
    out = []
    for folder, keep in (
        (MODEL_FOLDER, lambda n: n.startswith(MODEL_PREFIX)),
        (DISTRIBUTED_FOLDER, lambda n: True),
    ):
        path = os.path.join(checkout, folder)
        names = sorted(os.listdir(path)) if os.path.isdir(path) else []
        out += [f"{folder}/{n}" for n in names if n.endswith("_test.py") and keep(n)]
    return [rel for rel in out if os.path.isfile(os.path.join(checkout, rel))]


def _fields(node) -> dict | None:
    """A parameter set's keywords, ``dict(k=v)`` or ``{"k": v}``, each a string, a name's last part
    (``ModelSize.SMALL`` -> 'SMALL') or a number; None for any other shape."""
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "dict" and not node.args:
        pairs = [(k.arg, k.value) for k in node.keywords]
    elif isinstance(node, ast.Dict) and all(isinstance(k, ast.Constant) for k in node.keys):
        pairs = [(k.value, v) for k, v in zip(node.keys, node.values)]  # type: ignore[union-attr]
    else:
        return None
    out: dict = {}
    for key, value in pairs:
        if isinstance(value, ast.Constant) and isinstance(value.value, (str, int, float)):
            out[key] = value.value
        elif isinstance(value, ast.Attribute):
            out[key] = value.attr
    return out


def _compiled(tree: ast.Module) -> dict | None:
    """How the file compiles its models: None where it never calls ``torch.compile``, else the constant
    ``dynamic=`` its calls pass, where every call passes the same one (``{"dynamic": False}``)."""
    calls = [n for n in ast.walk(tree) if isinstance(n, ast.Call) and ast.unparse(n.func) == "torch.compile"]
    if not calls:
        return None
    dynamic = {
        k.value.value if isinstance(k.value, ast.Constant) else "?"
        for c in calls
        for k in c.keywords
        if k.arg == "dynamic"
    }
    return {"dynamic": dynamic.pop()} if len(dynamic) == 1 and "?" not in dynamic else {}


def models(trees: dict, not_understood: list) -> list[dict]:
    """One entry per model a test method is parameterized with: provider, module name, size where given,
    the test, its file and the line of the entry, whether the file runs it through ``torch.compile`` (and
    with which ``dynamic=``)."""
    out = []
    for rel, tree in trees.items():
        compiled = _compiled(tree)
        for fn in ast.walk(tree):
            if not (isinstance(fn, ast.FunctionDef) and fn.name.startswith("test_")):
                continue
            for dec in fn.decorator_list:
                if not (
                    isinstance(dec, ast.Call)
                    and isinstance(dec.func, ast.Attribute)
                    and dec.func.attr in ("named_parameters", "parameters")
                ):
                    continue
                for arg in dec.args:
                    got = _fields(arg)
                    if not got or not isinstance(got.get("module_name"), str):
                        what = "a parameter set with no module_name"
                        not_understood.append({"file": rel, "line": arg.lineno, "test": fn.name, "what": what})
                        continue
                    entry = {"provider": got.get("provider"), "module": got["module_name"], "test": fn.name}
                    entry.update(file=rel, line=arg.lineno, compiled=compiled is not None)
                    if compiled:
                        entry.update(compiled)
                    if "train" in fn.name or "inference" in fn.name:
                        entry["mode"] = "training" if "train" in fn.name else "inference"
                    if isinstance(got.get("model_size"), str):
                        entry["size"] = got["model_size"]
                    out.append(entry)
    return sorted(out, key=lambda e: (str(e["provider"]), e["module"], e["file"], e["line"]))


def _aliases(tree: ast.Module) -> set[str]:
    """The names a file binds torch.distributed to (``from torch import distributed as dist``)."""
    out = {"torch.distributed"}
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module == "torch":
            out |= {a.asname or a.name for a in node.names if a.name == "distributed"}
        elif isinstance(node, ast.Import):
            out |= {a.asname for a in node.names if a.name == "torch.distributed" and a.asname}
    return out


def _reduce_ops(node) -> set[str]:
    """The ``ReduceOp.X`` names under ``node``."""
    return {
        n.attr
        for n in ast.walk(node)
        if isinstance(n, ast.Attribute) and isinstance(n.value, ast.Attribute) and n.value.attr == "ReduceOp"
    }


def _units(tree: ast.Module) -> list:
    """The file's top-level functions and its classes' methods: the units a call is credited to."""
    out = []
    for node in tree.body:
        if isinstance(node, ast.FunctionDef):
            out.append(node)
        elif isinstance(node, ast.ClassDef):
            out += [m for m in node.body if isinstance(m, ast.FunctionDef)]
    return out


def _call(node, aliases: set, own_ops: str = "") -> tuple[str, str] | None:
    """(api, name) of a collective call: ``torch.distributed.all_reduce(...)`` -> ('torch.distributed',
    'all_reduce'); an op of the backend's own namespace ``own_ops`` (``torch.ops.torch_tpu``: its own
    distributed ops, experimental_send...) -> (that namespace, its name); else None."""
    if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)):
        return None
    base = ast.unparse(node.func.value)
    if base in aliases and node.func.attr in COLLECTIVES:
        return "torch.distributed", node.func.attr
    if own_ops and base == own_ops:
        return own_ops, node.func.attr
    return None


def _given(node, name: str, tests: list, runs: list) -> set[str]:
    """The reduce ops a reducing collective is given: written in the call (``op=ReduceOp.AVG``), or, where
    it passes a variable, every ``ReduceOp.X`` the test methods that run it write."""
    if name not in REDUCE_OP_ARG:
        return set()
    op = next((k.value for k in node.keywords if k.arg == "op"), None)
    if op is None and len(node.args) > REDUCE_OP_ARG[name]:
        op = node.args[REDUCE_OP_ARG[name]]
    if isinstance(op, ast.Name):
        return set().union(*(_reduce_ops(t) for t in tests if t.name in runs))
    return _reduce_ops(op) if op is not None else set()


def collectives(trees: dict, own_ops: str = "") -> list[dict]:
    """One entry per collective call in the distributed tests: the call, its c10d op, file, line and
    function, the test methods that run it (a test method itself, or those naming its function), and
    the reduce ops it is given."""
    out = []
    for rel, tree in trees.items():
        aliases, units = _aliases(tree), _units(tree)
        tests = [u for u in units if u.name.startswith("test_")]
        for unit in units:
            named = {t.name for t in tests if any(isinstance(n, ast.Name) and n.id == unit.name for n in ast.walk(t))}
            runs = [unit.name] if unit in tests else sorted(named)
            for node in ast.walk(unit):
                got = _call(node, aliases, own_ops)
                if got is None:
                    continue
                api, name = got
                c10d = COLLECTIVES.get(name) if api != own_ops else None
                entry = {"collective": name, "api": api, "c10d": c10d, "file": rel, "line": node.lineno}
                entry.update(function=unit.name, tests=runs)
                given = _given(node, name, tests, runs)
                if given:
                    entry["reduce_ops"] = sorted(given)
                out.append(entry)
    return sorted(out, key=lambda e: (e["file"], e["line"]))
