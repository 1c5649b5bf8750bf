"""What a sharded training step needs beyond a device's kernels (opcov.store.distributed):

* ``dtensor``: how DTensor handles each aten overload of the installed torch, read from its op dispatcher
  (``DTensor._op_dispatcher``: custom handlers) and sharding propagator (``op_strategy_funcs``,
  ``op_single_dim_strategy_funcs``, ``op_to_rules``, and what it decomposes: torch._decomp's table or a
  CompositeImplicitAutograd kernel). No device is touched: DTensor's registry is the same for every device.
* ``process-group BACKEND``: the process-group backend the device uses, and what it does with each c10d op.
  The name comes from torch's ``Backend.default_device_backend_map``, else from the ``register_backend``
  calls in the backend package's own sources, read as text (importing a package may start its device).
  Then, where it can be done here: gloo (CPU) is run, two processes on a file store calling each collective
  once per reduce op; a process group written in Python is read (its class's methods, and those that only
  raise NotImplementedError); a compiled one on hardware opcov does not have is said to be unreadable.

``python -m opcov.scan.sharding dtensor [--coverage DIR]`` and ``... process-group BACKEND [--coverage DIR]``
write ``DIR/distributed/``. Run the first with each torch whose backends are judged (PyTorch/XLA's own).
"""

from __future__ import annotations

import argparse
import ast
import datetime as _dt
import importlib.util
import os
import sys
import tempfile

from opcov import backends, provenance
from opcov.errors import UsageError
from opcov.store import distributed, layout
from opcov.version import __version__

REDUCE_OPS = ("sum", "avg", "product", "min", "max", "premul_sum")
PROBE_WORLD = 2
PROBE_TIMEOUT_S = 120


def _now() -> str:
    return _dt.datetime.now(_dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def _provenance(torch, command: str, how: str) -> dict:
    return {
        "torch": str(torch.__version__),
        "opcov": __version__,
        "created": _now(),
        "command": command,
        "host": provenance.host(),
        "how": how,
    }


# ---------------------------------------------------------------- DTensor's sharding strategies


def how_dtensor_handles(torch, op) -> str:
    """One of store.distributed.HOW for the OpOverload ``op`` (torch.distributed.tensor imported)."""
    from torch.distributed.tensor import DTensor

    dispatcher = DTensor._op_dispatcher
    prop = dispatcher.sharding_propagator
    if op in dispatcher._custom_op_handlers or op is torch.ops.aten._local_scalar_dense.default:
        return "handler"
    if op in getattr(prop, "op_single_dim_strategy_funcs", {}):
        return "single_dim"
    if op in prop.op_strategy_funcs:
        return "strategy"
    if op in prop.op_to_rules:
        return "rule"
    try:
        from torch.distributed.tensor._decompositions import DecompShardingStrategy

        decomposes = DecompShardingStrategy.has_decomp(op)
    except ImportError:  # an older torch: DTensor decomposes CompositeImplicitAutograd ops only
        decomposes = torch._C._dispatch_has_kernel_for_dispatch_key(
            op.name(), torch._C.DispatchKey.CompositeImplicitAutograd
        )
    return "decomposition" if decomposes else "none"


def dtensor_doc(torch, command: str) -> dict:
    """Every aten overload of this torch with how DTensor handles it."""
    import torch.distributed.tensor  # noqa: F401 - registers DTensor's strategies

    ops = {}
    for name in sorted(torch._C._dispatch_get_all_op_names()):
        if not name.startswith("aten::"):
            continue
        base, _, overload = name[len("aten::") :].partition(".")
        try:
            op = getattr(getattr(torch.ops.aten, base), overload or "default")
        except (AttributeError, RuntimeError):
            continue
        ops[name if overload else f"aten::{base}"] = how_dtensor_handles(torch, op)
    counts = {how: sum(1 for v in ops.values() if v == how) for how in distributed.HOW}
    return {
        "kind": distributed.SHARDING_KIND,
        "provenance": _provenance(
            torch,
            command,
            "read from DTensor._op_dispatcher (custom handlers) and its sharding_propagator (op_strategy_funcs, "
            "op_single_dim_strategy_funcs, op_to_rules) and DTensor's decomposition rule; no device touched",
        ),
        "summary": counts,
        "ops": ops,
    }


# ---------------------------------------------------------------- process groups


def _package_files(module: str | None) -> list[str]:
    """The Python files of a backend's package, found without importing it."""
    if not module:
        return []
    spec = importlib.util.find_spec(module.split(".")[0])
    if spec is None or not spec.submodule_search_locations:
        return []
    out = []
    for root in spec.submodule_search_locations:
        for folder, dirs, files in os.walk(root):
            dirs[:] = sorted(d for d in dirs if d != "__pycache__")
            out += [os.path.join(folder, f) for f in sorted(files) if f.endswith(".py")]
    return out


def _text(node) -> str | None:
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return node.value
    return None


def _devices(call: ast.Call) -> list[str]:
    for kw in call.keywords:
        if kw.arg == "devices":
            if isinstance(kw.value, (ast.List, ast.Tuple)):
                return [t for t in (_text(e) for e in kw.value.elts) if t]
            one = _text(kw.value)
            return [one] if one else []
    return []


def registrations(files: list[str], device: str, top: str) -> list[dict]:
    """Each ``register_backend(NAME, CREATOR, devices=[...])`` call naming ``device``, and each
    ``default_device_backend_map[device] = NAME``, in ``files``: {name, creator, file, line} (file relative
    to ``top``)."""
    found = []
    for path in files:
        try:
            tree = ast.parse(open(path, encoding="utf-8").read(), path)
        except (OSError, SyntaxError, UnicodeDecodeError):
            continue
        where = os.path.relpath(path, top)
        for node in ast.walk(tree):
            if (
                isinstance(node, ast.Call)
                and getattr(node.func, "attr", getattr(node.func, "id", "")) == "register_backend"
            ):
                name = _text(node.args[0]) if node.args else None
                if name and device in _devices(node):
                    creator = ast.unparse(node.args[1]) if len(node.args) > 1 else ""
                    found.append({"name": name, "creator": creator, "file": where, "line": node.lineno, "path": path})
            if isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Subscript):
                target = node.targets[0]
                if ast.unparse(target.value).endswith("default_device_backend_map") and _text(target.slice) == device:
                    name = _text(node.value)
                    if name:
                        found.append({"name": name, "creator": "", "file": where, "line": node.lineno, "path": path})
    return found


def _python_class(path: str, creator: str) -> ast.ClassDef | None:
    """The class the Python function ``creator`` (a plain name in ``path``) returns an instance of."""
    tree = ast.parse(open(path, encoding="utf-8").read(), path)
    classes = {n.name: n for n in tree.body if isinstance(n, ast.ClassDef)}
    func = next((n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name == creator), None)
    if func is None:
        return None
    for node in ast.walk(func):
        if isinstance(node, ast.Return) and isinstance(node.value, ast.Call):
            name = getattr(node.value.func, "id", None)
            if name in classes:
                return classes[name]
    return None


def _only_raises(func: ast.FunctionDef) -> bool:
    body = [s for s in func.body if not (isinstance(s, ast.Expr) and _text(s.value) is not None)]
    return len(body) == 1 and isinstance(body[0], ast.Raise) and "NotImplementedError" in ast.unparse(body[0])


def read_class(cls: ast.ClassDef, where: str) -> dict:
    """collectives -> {state, why} from a process-group class's methods."""
    methods = {n.name: n for n in cls.body if isinstance(n, ast.FunctionDef)}
    out = {}
    for op, method in distributed.METHODS.items():
        func = methods.get(method)
        if func is None:
            state, why = "not_defined", f"{cls.name} ({where}) defines no {method}(): the C++ base's default raises"
        elif _only_raises(func):
            state, why = "raises", f"{cls.name}.{method} ({where}:{func.lineno}) only raises NotImplementedError"
        else:
            state, why = (
                "implemented",
                f"{cls.name}.{method} ({where}:{func.lineno}); which reduce ops it takes is not read",
            )
        out[op] = {"state": state, "why": why}
    return out


def group_doc(torch, backend: str, command: str) -> dict:
    """The process-group file of ``backend`` (store.distributed)."""
    import torch.distributed as dist

    rec = backends.get_backend(backend)
    device = rec.device_type
    doc = {"kind": distributed.GROUP_KIND, "backend": backend, "device_type": device, "collectives": {}}
    name = dist.Backend.default_device_backend_map.get(device)
    found = []
    if name:
        doc.update(
            name=name,
            read=f"torch {torch.__version__}: torch.distributed.Backend.default_device_backend_map[{device!r}]",
        )
    else:
        top = (
            os.path.dirname(importlib.util.find_spec(rec.module.split(".")[0]).origin)
            if rec.module and importlib.util.find_spec(rec.module.split(".")[0])
            else ""
        )
        found = registrations(_package_files(rec.module), device, os.path.dirname(top)) if top else []
        if found:
            first = found[0]
            doc.update(
                name=first["name"],
                read=f"register_backend({first['name']!r}, {first['creator']}, devices=[{device!r}]) at "
                f"{first['file']}:{first['line']} (read as text, without importing the package, which may start its device)",
            )
    how = "read without a device"
    if not doc.get("name"):
        doc.update(readable=False, why=f"no process-group backend is registered for device {device!r} here")
    elif doc["name"] == "gloo" and device == "cpu":
        doc.update(
            readable=True,
            implementation="run",
            why="gloo run here: each collective called once per reduce op by 2 processes",
        )
        doc["collectives"] = probe_gloo()
        how = "gloo run: 2 processes on a file store, float32 tensors of 4 elements"
    else:
        doc.update(_read_python(found, doc["name"], str(torch.__version__)))
    doc["provenance"] = _provenance(torch, command, how)
    return doc


def _read_python(found: list[dict], name: str, torch_version: str = "") -> dict:
    """readable, why and collectives of a process group registered in Python sources (``registrations``)."""
    for reg in found:
        creator = reg["creator"]
        if creator and creator.isidentifier():
            cls = _python_class(reg["path"], creator)
            if cls is not None:
                return {
                    "readable": True,
                    "implementation": "python",
                    "why": f"{cls.name} is written in Python ({reg['file']}:{cls.lineno}): its methods were read; "
                    "torch.distributed calls them directly, not through the c10d ops' kernels",
                    "collectives": read_class(cls, reg["file"]),
                }
        compiled = _compiled_module(reg["path"], creator.split(".")[0], torch_version) if "." in creator else None
        if compiled:
            return {
                "readable": False,
                "why": f"{name!r} is made by {creator} ({reg['file']}:{reg['line']}), from a compiled module "
                f"({compiled}): which collectives it implements cannot be read without the device",
            }
    return {"readable": False, "why": f"{name!r} is a compiled process group: its collectives cannot be read here"}


def _compiled_module(path: str, module: str, torch_version: str = "") -> str | None:
    """The compiled file (a .so) of the module ``module`` that the file at ``path`` imports, when the
    package holds no Python source of that name; the one built for ``torch_version`` first."""
    top = os.path.dirname(path)
    while os.path.exists(os.path.join(os.path.dirname(top), "__init__.py")):
        top = os.path.dirname(top)
    found = []
    for _folder, dirs, files in os.walk(top):
        dirs[:] = sorted(d for d in dirs if d != "__pycache__")
        if f"{module}.py" in files:
            return None
        found += [f for f in sorted(files) if f.startswith(module) and f.endswith(".so")]
    mine = "_".join(torch_version.split("+")[0].split(".")[:3])  # '2_13_0' in a per-release build's name
    found.sort(key=lambda f: mine not in f)
    return (
        ", ".join(found[:1]) + (f" and {len(found) - 1} for other torch releases" if len(found) > 1 else "")
        if found
        else None
    )


# ---------------------------------------------------------------- running gloo

_PROBE = r"""
import json, os, sys, torch, torch.distributed as dist
from torch.utils._python_dispatch import TorchDispatchMode
rank, world, store_path, out = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3], sys.argv[4]
dist.init_process_group("gloo", store=dist.FileStore(store_path, world), rank=rank, world_size=world)
funcol = torch.ops._c10d_functional
name = dist.group.WORLD.group_name
R = {"sum": dist.ReduceOp.SUM, "avg": dist.ReduceOp.AVG, "product": dist.ReduceOp.PRODUCT,
     "min": dist.ReduceOp.MIN, "max": dist.ReduceOp.MAX, "premul_sum": dist._make_nccl_premul_sum(0.5)}
def t(n=4): return torch.ones(n)
def w(x):
    for y in (x if isinstance(x, (list, tuple)) else [x]): funcol.wait_tensor(y)
CALLS = {
 "c10d::allreduce_": lambda r: dist.all_reduce(t(), op=R[r]),
 "c10d::allreduce_coalesced_": lambda r: w(funcol.all_reduce_coalesced([t()], r, name)),
 "c10d::allgather_": lambda r: dist.all_gather([t() for _ in range(world)], t()),
 "c10d::_allgather_base_": lambda r: dist.all_gather_into_tensor(t(4 * world), t()),
 "c10d::allgather_into_tensor_coalesced_": lambda r: w(funcol.all_gather_into_tensor(t(), world, name)),
 "c10d::reduce_scatter_": lambda r: dist.reduce_scatter(t(), [t() for _ in range(world)], op=R[r]),
 "c10d::_reduce_scatter_base_": lambda r: dist.reduce_scatter_tensor(t(), t(4 * world), op=R[r]),
 "c10d::reduce_scatter_tensor_coalesced_": lambda r: w(funcol.reduce_scatter_tensor(t(4 * world), r, world, name)),
 "c10d::alltoall_": lambda r: dist.all_to_all([t() for _ in range(world)], [t() for _ in range(world)]),
 "c10d::alltoall_base_": lambda r: dist.all_to_all_single(t(4 * world), t(4 * world)),
 "c10d::broadcast_": lambda r: dist.broadcast(t(), 0),
 "c10d::reduce_": lambda r: dist.reduce(t(), 0, op=R[r]),
 "c10d::gather_": lambda r: dist.gather(t(), [t() for _ in range(world)] if rank == 0 else None, dst=0),
 "c10d::scatter_": lambda r: dist.scatter(t(), [t() for _ in range(world)] if rank == 0 else None, src=0),
 "c10d::send": lambda r: dist.send(t(), 1) if rank == 0 else dist.recv(t(), 0),
 "c10d::barrier": lambda r: dist.barrier(),
 "c10d::monitored_barrier_": lambda r: dist.monitored_barrier(),
}
PREMUL = {"c10d::allreduce_", "c10d::_reduce_scatter_base_"}
REDUCING = {"c10d::allreduce_", "c10d::allreduce_coalesced_", "c10d::reduce_scatter_", "c10d::_reduce_scatter_base_",
            "c10d::reduce_scatter_tensor_coalesced_", "c10d::reduce_"}
class Seen(TorchDispatchMode):
    def __init__(self): super().__init__(); self.ops = []
    def __torch_dispatch__(self, f, types, a=(), kw=None):
        if f.namespace == "c10d": self.ops.append(f.name())
        return f(*a, **(kw or {}))
results = {}
for op, call in CALLS.items():
    for r in (["sum", "avg", "product", "min", "max", "premul_sum"] if op in REDUCING else ["-"]):
        if r == "premul_sum" and op not in PREMUL: continue  # a root-only check would leave the other rank waiting
        seen = Seen()
        try:
            with seen: call(r)
            state, why = "runs", ""
        except Exception as e:
            state, why = "raises", (type(e).__name__ + ": " + " ".join(str(e).split()))[:200]
        results.setdefault(op, {})[r] = [state, why, sorted(set(seen.ops))]
        try:
            dist.barrier()
        except Exception:
            pass
if rank == 0:
    json.dump(results, open(out, "w"))
dist.destroy_process_group()
"""


def probe_gloo() -> dict:
    """collectives of a 2-process gloo group: each c10d op called once per reduce op (``_PROBE``)."""
    import json
    import subprocess

    with tempfile.TemporaryDirectory(prefix="opcov-gloo-") as tmp:
        script, store, out = (os.path.join(tmp, n) for n in ("probe.py", "store", "out.json"))
        with open(script, "w", encoding="utf-8") as f:
            f.write(_PROBE)
        env = {**os.environ, "TORCH_DEVICE_BACKEND_AUTOLOAD": "0"}
        procs = [
            subprocess.Popen(
                [sys.executable, script, str(r), str(PROBE_WORLD), store, out],
                env=env,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.PIPE,
            )  # fmt: skip
            for r in range(PROBE_WORLD)
        ]
        errors = []
        for p in procs:
            try:
                errors.append(p.communicate(timeout=PROBE_TIMEOUT_S)[1])
            except subprocess.TimeoutExpired:
                for q in procs:
                    q.kill()
                raise UsageError(f"the gloo run did not finish within {PROBE_TIMEOUT_S} s") from None
        if not os.path.exists(out):
            tail = (errors[0] or b"").decode(errors="replace").strip().splitlines()[-1:] or ["no output"]
            raise UsageError(f"the gloo run failed: {tail[0][:200]}")
        results = json.load(open(out, encoding="utf-8"))
    return _states(results)


def _states(results: dict) -> dict:
    """{op: {state, why, reduce_ops}} from the run's {op: {reduce op: [state, why, c10d ops seen]}}."""
    out = {}
    for op, per in sorted(results.items()):
        states = {r: s for r, (s, _, _) in per.items()}
        failing = {r: w for r, (s, w, _) in per.items() if s == "raises"}
        seen = sorted({o for _, _, ops in per.values() for o in ops})
        reached = f" (dispatched {', '.join(seen)})" if seen and seen != [op] else ""
        if not failing:
            rec = {"state": "runs", "why": f"ran on gloo with 2 processes{reached}"}
        elif len(failing) == len(per):
            rec = {"state": "raises", "why": next(iter(failing.values())) + reached}
        else:
            rec = {
                "state": "runs",
                "why": f"ran on gloo with 2 processes{reached}; raises with "
                + "; ".join(f"{r}: {w}" for r, w in failing.items()),
            }
        if set(states) != {"-"}:
            rec["reduce_ops"] = dict(sorted(states.items()))
        out[op] = rec
    return out


# ---------------------------------------------------------------- command line


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m opcov.scan.sharding", description=__doc__.split("\n\n")[0])
    parser.add_argument("what", choices=("dtensor", "process-group"))
    parser.add_argument("backend", nargs="?", help="process-group: the backend whose device's process group is read")
    parser.add_argument(
        "--coverage", default=layout.DEFAULT_COVERAGE, help="the coverage folder (default: %(default)s)"
    )
    args = parser.parse_args(argv)
    from opcov.torchenv import import_torch

    torch = import_torch()
    command = " ".join(["python -m opcov.scan.sharding", args.what] + ([args.backend] if args.backend else []))
    if args.what == "dtensor":
        doc = dtensor_doc(torch, command)
        path = distributed.sharding_path(str(torch.__version__), args.coverage)
    else:
        if not args.backend:
            parser.error("process-group needs a BACKEND")
        doc = group_doc(torch, args.backend, command)
        path = distributed.group_path(args.backend, args.coverage)
    distributed.save(doc, path)
    print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
