"""`opcov backends` and backend loading: fast listing, clear errors."""

import json
import subprocess
import sys

from conftest import child_env, run_opcov


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

    rows = {r["name"]: r for r in json.loads(run_opcov("backends", "--format", "json").stdout)}
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
