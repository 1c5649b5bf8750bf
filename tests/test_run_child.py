"""User code in a child: 'opcov run' builds the model and runs its step in a child process, as 'opcov trace'
runs a factory (opcov.children.opcov_child). A factory that crashes, aborts, exits, hangs, returns no model
or asks for 30 GiB is one line naming it, with nothing written; what it started (a fork holding the
standard streams, a double-forked daemon) ends with it (docs/data-safety.md)."""

import os
import signal
import time

import pytest
from conftest import ROOT, opcov_here, run_opcov
from test_data_safety import one_line_error
from test_data_safety_children import gone

FACTORIES = """
import os, signal, subprocess, sys, time
import torch

def good():
    return torch.nn.Linear(4, 4), (torch.randn(2, 4),)

def segfault():
    os.kill(os.getpid(), signal.SIGSEGV)

def aborts():
    os.abort()

def exits():
    os._exit(0)

def sys_exit():
    sys.exit(0)

def string():
    return "a model", (torch.randn(2, 4),)

def huge():
    return torch.nn.Linear(4, 4), (bytearray(30 << 30),)

def _pid(name):
    with open(os.path.join(os.environ["PID_DIR"], name), "w") as f:
        f.write(str(os.getpid()))

def forks_and_hangs():
    # a grandchild that holds opcov's standard streams open and outlives its parent's step
    subprocess.Popen([sys.executable, "-c", "import os, time; open(os.environ['PID_DIR'] + '/fork', 'w').write(str(os.getpid())); time.sleep(300)"])
    time.sleep(300)

def daemon():
    if os.fork() == 0:  # a daemon, double-forked, in a session of its own: it leaves the process group
        os.setsid()
        if os.fork() == 0:
            _pid("daemon")
            time.sleep(300)
        os._exit(0)
    os.wait()
    while not os.path.exists(os.path.join(os.environ["PID_DIR"], "daemon")):
        time.sleep(0.05)
    return torch.nn.Linear(4, 4), (torch.randn(2, 4),)
"""


def _env(tmp_path):
    (tmp_path / "runfactories.py").write_text(FACTORIES)
    (tmp_path / "pids").mkdir()
    return {"PYTHONPATH": os.path.join(ROOT, "src") + os.pathsep + str(tmp_path), "PID_DIR": str(tmp_path / "pids")}


def _assert_gone(tmp_path, name):
    path = tmp_path / "pids" / name
    assert path.exists() and path.read_text(), f"the factory never started its {name}"
    pid = int(path.read_text())
    if not gone(pid, 5):
        os.kill(pid, signal.SIGKILL)
        pytest.fail(f"the factory's {name} (pid {pid}) outlived opcov")


@pytest.mark.parametrize(
    "factory,words",
    [
        ("segfault", ("factory runfactories:segfault crashed", "(SIGSEGV)")),
        ("aborts", ("factory runfactories:aborts crashed", "(SIGABRT)")),
        ("exits", ("factory runfactories:exits", "exit status 0", "before its output was written")),
        ("sys_exit", ("factory runfactories:sys_exit raised SystemExit",)),
        ("string", ("factory runfactories:string must return (model, inputs) with an nn.Module",)),
        ("huge", ("factory runfactories:huge raised MemoryError",)),
    ],
)
def test_run_of_a_factory_that_crashes_or_exits_is_one_line_and_writes_nothing(tmp_path, factory, words):
    """'opcov run' ran the factory in its own process: a segfault or abort killed it (139, 134), an
    os._exit(0) gave exit 0 with no file, a string or 30 GiB gave a traceback."""
    env = _env(tmp_path)
    out = tmp_path / "run.json"
    proc = run_opcov("run", f"runfactories:{factory}", "-b", "cpu", "--out", str(out), timeout=300, **env)
    one_line_error(proc, *words)
    assert not out.exists()


def test_run_of_a_good_factory_in_its_child_records_the_users_command(tmp_path):
    env = _env(tmp_path)
    out = tmp_path / "run.json"
    proc = run_opcov("run", "runfactories:good", "-b", "cpu", "--mode", "inference", "--out", str(out), **env)
    assert proc.returncode == 0, proc.stderr[-2000:]
    import json

    doc = json.loads(out.read_text())
    assert doc["result"]["ran"] is True
    assert doc["provenance"]["command"].endswith(f"--out {out}")  # the user's, not the child's temporary file


@pytest.mark.parametrize("command", ["run", "trace"])
def test_a_hang_with_a_fork_holding_the_streams_ends_at_the_timeout_with_the_fork(tmp_path, command):
    """'trace' waited on a grandchild that held its pipe, past --timeout; 'run' had no --timeout."""
    env = _env(tmp_path)
    out = tmp_path / "x.out"
    more = ("-b", "cpu") if command == "run" else ()
    t0 = time.monotonic()
    proc = run_opcov(
        command, "runfactories:forks_and_hangs", *more, "--timeout", "20", "--out", str(out), timeout=200, **env
    )
    took = time.monotonic() - t0
    one_line_error(proc, "factory runfactories:forks_and_hangs did not finish within 20 s (--timeout)")
    assert took < 60, took
    assert not out.exists()
    if (tmp_path / "pids" / "fork").exists():  # it got to run (a loaded machine may take 20 s to import torch)
        _assert_gone(tmp_path, "fork")


@pytest.mark.parametrize("command", ["run", "trace"])
def test_a_double_forked_daemon_of_a_factory_ends_with_opcov(tmp_path, command):
    """A daemon that left the process group outlived 'trace' and 'run'."""
    env = _env(tmp_path)
    out = tmp_path / ("x.json" if command == "run" else "x.yaml")
    more = ("-b", "cpu", "--mode", "inference") if command == "run" else ("--mode", "inference")
    proc = run_opcov(command, "runfactories:daemon", *more, "--out", str(out), timeout=300, **env)
    assert proc.returncode == 0, proc.stderr[-2000:]
    _assert_gone(tmp_path, "daemon")


@pytest.mark.parametrize("value", ["0", "-3", "nan", "inf"])
def test_run_timeout_must_be_a_positive_number(value):
    proc = opcov_here("run", "llama", "-b", "cpu", f"--timeout={value}")
    one_line_error(proc, "--timeout")


def test_a_child_that_ends_leaves_no_process_marked_as_its_own(tmp_path):
    """children.end_all ends what a child left behind by the mark in its environment, even outside its
    group: a process started with the mark is killed, one without it is not."""
    import subprocess
    import sys

    from opcov import children

    token = "t" + os.urandom(8).hex()
    code = "import time; time.sleep(60)"
    marked = subprocess.Popen(
        [sys.executable, "-c", code], env={**os.environ, children.TOKEN_VAR: f"other {token}"}, start_new_session=True
    )
    other = subprocess.Popen([sys.executable, "-c", code], env={**os.environ, children.TOKEN_VAR: "other"})
    try:
        time.sleep(0.5)
        assert children._marked(token) == [marked.pid]
        children.end_all(999_999_999, token)
        assert marked.wait(5) == -signal.SIGKILL
        assert other.poll() is None
    finally:
        for p in (marked, other):
            p.kill()
            p.wait()


@pytest.mark.parametrize("command", ["run", "trace"])
def test_a_model_named_after_a_double_dash_is_run_in_the_child_with_its_output(tmp_path, command):
    """'opcov run -b cpu --out X -- MODEL': the child's own --out went after the '--', a positional there,
    and the child ended with argparse's 'unrecognized arguments' instead of the factory's own failure."""
    env = _env(tmp_path)
    out = tmp_path / "x.out"
    more = ("-b", "cpu") if command == "run" else ()
    proc = run_opcov(command, *more, "--out", str(out), "--", "runfactories:segfault", timeout=300, **env)
    one_line_error(proc, "factory runfactories:segfault crashed", "(SIGSEGV)")
    assert not out.exists()


def test_run_of_an_unknown_backend_is_refused_before_any_child_starts():
    proc = opcov_here("run", "llama", "-b", "nope")
    one_line_error(proc, "unknown backend 'nope'")
