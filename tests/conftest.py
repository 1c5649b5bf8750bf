"""Shared fixtures: run opcov in a child process (PrivateUse1 can be claimed once per process)."""

import json
import os
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SRC = os.path.join(ROOT, "src")
os.environ.setdefault("TORCH_DEVICE_BACKEND_AUTOLOAD", "0")  # keep torch_tpu out of this process


def child_env(**extra):
    env = dict(os.environ)
    env["PYTHONPATH"] = SRC + os.pathsep + env.get("PYTHONPATH", "")
    env["TORCH_DEVICE_BACKEND_AUTOLOAD"] = "0"
    env.update({k: v for k, v in extra.items() if v is not None})
    return env


def run_opcov(*args, timeout=600, **env):
    """``python -m opcov ARGS`` in a fresh process; returns the CompletedProcess."""
    return subprocess.run(
        [sys.executable, "-m", "opcov", *args],
        capture_output=True,
        text=True,
        env=child_env(**env),
        timeout=timeout,
        cwd=ROOT,
    )


# A Python with PyTorch/XLA (scripts/envs/xla.sh makes .envs/xla; OPCOV_XLA_PYTHON names another): the
# tests that run xla for real are skipped without one, and say so.
XLA_PYTHON = os.environ.get("OPCOV_XLA_PYTHON") or os.path.join(ROOT, ".envs", "xla", "bin", "python")
needs_xla = pytest.mark.skipif(
    not os.path.exists(XLA_PYTHON), reason=f"no Python with PyTorch/XLA at {XLA_PYTHON} (OPCOV_XLA_PYTHON)"
)


def run_xla(*args, timeout=900):
    """``python -m opcov ARGS`` in the Python with PyTorch/XLA, on its CPU client (PJRT_DEVICE=CPU)."""
    return subprocess.run(
        [XLA_PYTHON, "-m", "opcov", *args],
        capture_output=True,
        text=True,
        env=child_env(PJRT_DEVICE="CPU"),
        timeout=timeout,
        cwd=ROOT,
    )


@pytest.fixture
def opcov():
    return run_opcov


@pytest.fixture(scope="session")
def reach_cache(tmp_path_factory):
    """One reach cache for the whole test run, shared by the xdist workers (the folder above each
    worker's own), so the recording (minutes) runs once: opcov's cache lock makes the others wait."""
    base = tmp_path_factory.getbasetemp()
    folder = (base.parent if os.environ.get("PYTEST_XDIST_WORKER") else base) / "xdg-cache-shared"
    folder.mkdir(exist_ok=True)
    return str(folder)


def load_yaml(path):
    import yaml

    with open(path) as f:
        return yaml.safe_load(f)


def dumps(obj):
    return json.dumps(obj, sort_keys=True)


# A slice of the bundled zoo (~600 architectures: rendering or checking each in a test is a data
# job, not a test): text, vision, audio, MoE, RNN and conv models, which between them get runs,
# fails and unknown verdicts on the bundled backends.
SLICE = (
    "bert",
    "gpt2",
    "llama",
    "mixtral",
    "nn-convnet",
    "nn-lstm",
    "nn-transformer",
    "t5",
    "vit",
    "wav2vec2",
    "whisper",
)


def bundled_slice(root, models=SLICE) -> str:
    """A coverage folder under ``root``: every bundled backend's data, the Python-name index and the op
    sets of ``models``, copied."""
    import shutil

    src = os.path.join(ROOT, "coverage")
    cov = os.path.join(str(root), "coverage")
    os.makedirs(cov, exist_ok=True)
    for name in sorted(os.listdir(src)):
        path = os.path.join(src, name)
        if name == "models" or name == "zoo":
            continue
        if os.path.isdir(path):
            shutil.copytree(path, os.path.join(cov, name), ignore=shutil.ignore_patterns("*.journal.jsonl"))
        else:
            shutil.copy(path, cov)
    for name in models:
        shutil.copytree(os.path.join(src, "models", name), os.path.join(cov, "models", name))
    return cov


# a vendor's source checkout in miniature (test_vendor_tests): its *_test.py files are parsed, never run
collect_ignore = ["data/vendortests"]
