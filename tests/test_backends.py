"""`opcov backends` and backend loading: fast listing, clear errors."""

import json
import subprocess
import sys

from conftest import child_env, opcov_here, run_opcov


def test_listing_imports_neither_torch_nor_backends():
    code = (
        "import sys; from opcov.cli import main; main(['backends']); "
        "print('IMPORTED', sorted(m for m in ('torch', 'torch_tpu') if m in sys.modules))"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=child_env())
    assert proc.returncode == 0, proc.stderr
    assert "IMPORTED []" in proc.stdout
    for name in ("cpu", "meta", "cuda", "mps", "xla", "tpu", "neuron"):
        assert f"\n{name} " in "\n" + proc.stdout


def test_json_lists_installed_versions():
    import importlib.metadata as md

    rows = {r["name"]: r for r in json.loads(opcov_here("backends", "--format", "json").stdout)}
    assert rows["cpu"]["installed"] == md.version("torch")
    assert rows["neuron"]["installed"] is None


def test_unknown_backend_lists_known_ones():
    proc = run_opcov("scan", "nosuch")
    assert proc.returncode == 2
    assert proc.stderr.count("\n") == 1
    assert "unknown backend 'nosuch'" in proc.stderr and "tpu" in proc.stderr


def test_backend_import_failure_names_package():
    proc = run_opcov("scan", "neuron")
    assert proc.returncode == 2 and proc.stderr.count("\n") == 1
    assert "torch_neuronx" in proc.stderr and "install" in proc.stderr


def test_cuda_scan_on_cpu_build_says_why():
    proc = run_opcov("scan", "cuda")
    assert proc.returncode == 2 and "no CUDA kernels" in proc.stderr


def test_no_module_outside_the_backend_record_names_a_backend():
    """Everything opcov does differently for a backend is in its record (opcov.backends): no other module of
    src/opcov holds a string that is a built-in backend's name, device type, module, package or compile backend
    (cpu and meta, torch's own reference devices, and Inductor, torch's own compiler, aside). Prose that mentions
    one (a docstring, a help text's example) is not a string that is one: a special case needs the name itself
    (``== "tpu"``, ``{"mps": ...}``, ``snapshots(..., "tpu")``)."""
    import ast
    import os

    from conftest import ROOT

    from opcov import backends

    names = set()
    for b in backends.BUILTIN:
        if not (b.reference or b.name == "meta"):
            names |= {b.name, b.device_type, *(x for x in (b.module, b.package) if x)}
            if b.compile and b.compile.table != "inductor":
                names.add(b.compile.backend)
    assert {"tpu", "xla", "torch_tpu", "openxla", "neuron", "mps", "cuda"} <= names  # the check checks something
    found = []
    src = os.path.join(ROOT, "src", "opcov")
    for folder, _, files in os.walk(src):
        for name in files:
            path = os.path.join(folder, name)
            if not name.endswith(".py") or path == os.path.join(src, "backends.py"):
                continue
            for node in ast.walk(ast.parse(open(path, encoding="utf-8").read(), path)):
                if isinstance(node, ast.Constant) and node.value in names:
                    found.append(f"{os.path.relpath(path, ROOT)}:{node.lineno}: {node.value!r}")
    assert not found, "backend names outside opcov/backends.py (ask the record instead):\n" + "\n".join(found)
