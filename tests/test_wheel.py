"""``pip install opcov`` anywhere: the built wheel, in a fresh venv without torch, answers
``opcov check llama -b tpu`` from an empty folder with the bundled data, and a command that
needs torch says so in one line.

Builds a wheel and a venv (pyyaml and jinja2 from the package index): about half a minute.
"""

import os
import subprocess
import sys
import venv

import pytest
from conftest import ROOT


@pytest.fixture(scope="module")
def fresh(tmp_path_factory):
    """(opcov executable, python) of a fresh venv with only the built wheel and its dependencies."""
    base = tmp_path_factory.mktemp("wheel")
    clean = _clean_env()  # a PYTHONPATH holding an installed opcov would make pip skip the wheel
    dist = base / "dist"
    build = subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "-q", "-w", str(dist), ROOT],
        capture_output=True,
        text=True,
        timeout=600,
        env=clean,
    )
    if build.returncode != 0:
        pytest.fail(f"building the wheel failed:\n{build.stderr[-3000:]}")
    wheels = sorted(dist.glob("opcov-*.whl"))
    assert wheels, os.listdir(dist)
    env_dir = base / "venv"
    venv.EnvBuilder(with_pip=True).create(env_dir)
    py = env_dir / "bin" / "python"
    inst = subprocess.run(
        [str(py), "-m", "pip", "install", "-q", str(wheels[0])],
        capture_output=True,
        text=True,
        timeout=600,
        env=clean,
    )
    if inst.returncode != 0:
        pytest.fail(f"installing the wheel failed:\n{inst.stderr[-3000:]}")
    return env_dir / "bin" / "opcov", py


def _clean_env() -> dict:
    """The environment without PYTHONPATH or VIRTUAL_ENV: the fresh venv sees only what it installed."""
    return {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}


def _run(exe, *args, cwd):
    return subprocess.run([str(exe), *args], capture_output=True, text=True, cwd=cwd, env=_clean_env(), timeout=300)


def test_wheel_has_no_torch_and_checks_with_bundled_data(fresh, tmp_path):
    exe, py = fresh
    probe = subprocess.run(
        [str(py), "-c", "import importlib.util as u; print(u.find_spec('torch') is None)"],
        capture_output=True,
        text=True,
    )
    assert probe.stdout.strip() == "True", "the fresh venv must not have torch"
    empty = tmp_path / "empty"
    empty.mkdir()
    r = _run(exe, "check", "llama", "-b", "tpu", cwd=empty)
    assert r.returncode in (0, 1), r.stderr
    assert "Traceback" not in r.stderr
    assert "llama" in r.stdout and "tpu" in r.stdout
    assert "bundled" in r.stderr  # says which coverage data it used
    assert list(empty.iterdir()) == []  # wrote nothing where it ran


def test_wheel_commands_that_need_torch_say_so(fresh, tmp_path):
    exe, _ = fresh
    r = _run(exe, "scan", "cpu", "--out", str(tmp_path / "x.yaml"), cwd=tmp_path)
    assert r.returncode == 2
    assert "Traceback" not in r.stderr
    assert len(r.stderr.strip().splitlines()) == 1 and "pip install 'opcov[trace]' torch==2.13.0" in r.stderr, r.stderr


def test_wheel_runs_every_command_the_readme_lists_for_it(fresh, tmp_path):
    """README: 'pip install opcov  # check, ops -b, compare, diff, gaps, lint, summary, site'. Without torch,
    'opcov lint' exited 2 ('this command needs torch'); it now lints without the catalogue check and says so."""
    exe, py = fresh
    cov = subprocess.run(
        [str(py), "-c", "from opcov.store import layout; print(layout.bundled_coverage())"],
        capture_output=True,
        text=True,
    ).stdout.strip()
    tpu = sorted(f for f in os.listdir(os.path.join(cov, "tpu")) if f.startswith("registered-"))[-1]
    snapshot = os.path.join(cov, "tpu", tpu)
    said = {}
    for argv in (
        ("lint",),
        ("ops", "F.layer_norm", "-b", "tpu"),
        ("gaps", "tpu", "--top", "1"),
        ("compare", "tpu", "cuda", "--models", "llama"),
        ("diff", snapshot, snapshot),
        ("summary", "tpu"),
    ):
        r = said[argv[0]] = _run(exe, *argv, cwd=tmp_path)
        assert r.returncode == 0 and "Traceback" not in r.stderr and r.stdout, (argv, r.stderr[-500:])
        assert "opcov: error" not in r.stderr, (argv, r.stderr)
    lint = said["lint"]  # every bundled file read (about 15 s): run once
    assert "0 error(s)" in lint.stdout and "torch is not installed: op names are not checked" in lint.stderr, (
        lint.stderr
    )
