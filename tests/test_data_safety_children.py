"""Data safety, isolation: a user's factory that hangs is killed after --timeout; children and
workers end with their parent on every signal, even one that came before they were set up; an
interrupted pool never joins a worker it did not start; the Python API's bad arguments are one line
naming the argument (docs/data-safety.md)."""

import os
import signal
import subprocess
import sys
import time

import pytest
from conftest import ROOT, child_env, run_opcov

from opcov.errors import OpcovError

HANG = """
import os, time
def hang():
    with open(os.environ["HANG_PID_FILE"], "w") as f:
        f.write(str(os.getpid()))
    time.sleep(600)
"""


def gone(pid: int, within: float) -> bool:
    """Whether process ``pid`` ends (or is a zombie nobody reaped yet) within ``within`` seconds."""
    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        try:
            with open(f"/proc/{pid}/stat") as f:
                if f.read().rsplit(")", 1)[1].split()[0] == "Z":
                    return True
        except FileNotFoundError:
            return True
        except OSError:
            try:
                os.kill(pid, 0)
            except ProcessLookupError:
                return True
        time.sleep(0.05)
    return False


def wait_for(path, within: float = 120.0) -> int:
    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        if path.exists() and path.read_text():
            return int(path.read_text())
        time.sleep(0.05)
    pytest.fail(f"{path} never written")


def _env(tmp_path):
    (tmp_path / "hangfactory.py").write_text(HANG)
    return {
        "PYTHONPATH": os.path.join(ROOT, "src") + os.pathsep + str(tmp_path),
        "HANG_PID_FILE": str(tmp_path / "factory.pid"),
    }


def test_a_factory_that_hangs_is_killed_after_the_timeout_in_one_line(tmp_path):
    """trace ran a hanging factory's child for ever (no timeout)."""
    env = _env(tmp_path)
    out = tmp_path / "x.yaml"
    proc = run_opcov("trace", "hangfactory:hang", "--timeout", "15", "--out", str(out), timeout=120, **env)
    assert proc.returncode == 2, proc.stderr[-1500:]
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and "factory hangfactory:hang did not finish within 15 s" in lines[0], proc.stderr
    assert not out.exists()
    if (tmp_path / "factory.pid").exists():  # it got to run (a loaded machine may take 15 s to import torch)
        assert gone(int((tmp_path / "factory.pid").read_text()), 5)


def test_a_factory_child_ends_when_trace_is_killed(tmp_path):
    """The factory's child outlived an 'opcov trace' (or check) killed by SIGKILL."""
    env = _env(tmp_path)
    parent = subprocess.Popen(
        [sys.executable, "-m", "opcov", "trace", "hangfactory:hang", "--out", str(tmp_path / "x.yaml")],
        env=child_env(**env),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        child = wait_for(tmp_path / "factory.pid")
    finally:
        parent.kill()
        parent.wait()
    if not gone(child, 5):
        os.kill(child, signal.SIGKILL)
        pytest.fail("the factory's process outlived 'opcov trace'")


def test_a_worker_whose_parent_died_before_it_started_ends_at_once(monkeypatch):
    """A zoo worker still starting when its parent was killed ran on (importing torch and transformers)
    for up to 20 s: the kernel's parent-death signal was asked for after the parent had gone, and the
    worker did not know which parent it had. Now the pool names itself, and a worker whose parent is
    not that one any more ends at once."""
    from opcov.tracing import zoorun

    started = []

    class Recorded:
        pid = 1

        def __init__(self, target, args, daemon):
            started.append((target, args))

        def start(self):
            pass

    pool = zoorun.Pool(1, "/nonexistent", 60.0)
    monkeypatch.setattr(pool.ctx, "Process", Recorded)
    pool.start(pool.slots[0])
    assert started[0][0] is zoorun.worker_main and started[0][1][-1] == os.getpid()
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    t0 = time.monotonic()
    proc = subprocess.run(
        [sys.executable, "-c", f"from opcov import children; children.die_with_parent({dead.pid}); "
         "import time; time.sleep(30)"],
        env=child_env(), timeout=60,
    )  # fmt: skip
    assert proc.returncode == 1 and time.monotonic() - t0 < 20


def test_the_portable_parent_watch_ends_a_child_without_the_kernels_help(tmp_path):
    """Where PR_SET_PDEATHSIG is not there, a thread watching the parent's id ends the child."""
    marker = tmp_path / "child.pid"
    script = f"""
import os, time
from opcov import children
children._libc = lambda: None  # as on a system without prctl
if os.fork() == 0:
    children.die_with_parent(os.getppid(), poll_s=0.05)
    open({str(marker)!r}, "w").write(str(os.getpid()))
    time.sleep(60)
    os._exit(0)
time.sleep(60)
"""
    parent = subprocess.Popen([sys.executable, "-c", script], env=child_env())
    try:
        child = wait_for(marker, 30)
    finally:
        parent.kill()
        parent.wait()
    if not gone(child, 3):
        os.kill(child, signal.SIGKILL)
        pytest.fail("the child outlived its parent")


@pytest.mark.parametrize("which", ["zoo", "probe"])
def test_an_interrupt_while_spawning_a_worker_is_no_assertion_error(which, monkeypatch):
    """SIGINT to 'zoo trace --jobs 2' while it spawned workers: AssertionError (can only join a
    started process) from the pool's clean-up, instead of 'interrupted'."""

    class Interrupted:
        pid = None

        def __init__(self, *a, **k):
            pass

        def start(self):
            raise KeyboardInterrupt

    if which == "zoo":
        import collections

        from opcov.tracing import zoorun

        pool = zoorun.Pool(2, "/nonexistent", 60.0)
        monkeypatch.setattr(pool.ctx, "Process", Interrupted)
        with pytest.raises(KeyboardInterrupt):
            pool.run(collections.deque([(zoorun.Arch("llama", "llama"), "inference")]), lambda row: None)
        assert all(s.proc is None for s in pool.slots)
    else:
        from opcov.probe.pool import Pool

        pool = Pool({"backend": "cpu", "device_type": "cpu", "module": None, "threads": 1}, 1, 5.0, False)
        monkeypatch.setattr(pool.ctx, "Process", Interrupted)
        with pytest.raises(KeyboardInterrupt):
            pool.start(pool.slots[0])
        pool.stop()  # AssertionError: can only join a started process
        assert pool.slots[0].proc is None


def test_a_killed_probes_log_folder_is_removed_by_the_next_probe(tmp_path, monkeypatch):
    """Every probe killed outright left its opcov-probe-XXXX/worker0.log in the temporary folder."""
    import tempfile

    from opcov.probe import pool as poolmod

    monkeypatch.setenv("TMPDIR", str(tmp_path))
    monkeypatch.setattr(tempfile, "tempdir", None)
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    left = tmp_path / f"{poolmod.LOGDIR_PREFIX}{dead.pid}-abcd"
    left.mkdir()
    (left / "worker0.log").write_text("x")
    alive = tmp_path / f"{poolmod.LOGDIR_PREFIX}{os.getpid() + 0}-live"  # this process's own: kept
    alive.mkdir()
    pool = poolmod.Pool({"backend": "cpu", "device_type": "cpu", "module": None, "threads": 1}, 1, 5.0, False)
    try:
        assert not left.exists() and alive.exists()
    finally:
        pool.stop()
    assert sorted(os.listdir(tmp_path)) == [alive.name]


def test_sigterm_ends_opcov_as_sigint_does():
    """SIGTERM ended opcov at once, skipping the clean-ups SIGINT runs (workers, temporary files)."""
    proc = subprocess.Popen(
        [sys.executable, "-c", "import sys, time; from opcov import cli; cli._COMMANDS['lint'] = "
         "lambda a: (print('running', flush=True), time.sleep(30)); sys.argv = ['opcov', 'lint']; "
         "raise SystemExit(cli.main())"],
        env=child_env(),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )  # fmt: skip
    assert proc.stdout.readline() == "running\n"  # the command runs (on a loaded machine, 1.5 s was too few)
    proc.send_signal(signal.SIGTERM)
    _, err = proc.communicate(timeout=30)
    assert proc.returncode == 143 and err.strip() == "opcov: interrupted", (proc.returncode, err)


# ---------------------------------------------------------------- the Python API


def test_an_unknown_keyword_is_a_type_error_naming_the_valid_ones():
    import opcov

    with pytest.raises(TypeError) as exc:
        opcov.check("llama", "tpu", covrage="coverage")
    assert isinstance(exc.value, OpcovError) and "\n" not in str(exc.value)
    assert "'covrage'" in str(exc.value) and "did you mean 'coverage'" in str(exc.value)
    assert "model_or_opset, backends, mode, coverage" in str(exc.value)
    with pytest.raises(TypeError, match="it takes model, inputs"):
        opcov.trace(None, None, bogus=1)


@pytest.mark.parametrize(
    "args,kw,words",
    [
        ((None, None), {}, "model is of type NoneType"),
        ((lambda x: x, ()), {}, "model is of type function"),
        (("linear", None), {}, "model is of type str"),
        (("linear-module", None), {}, "inputs is of type NoneType"),
        (("linear-module", 5), {}, "inputs is of type int"),
        (("linear-module", ()), {"notes": 5}, "notes 5"),
        (("linear-module", ()), {"loss": 5}, "loss is of type int"),
        (("linear-module", ()), {"name": "a\0b"}, "name 'a\\x00b'"),
    ],
)
def test_the_trace_api_refuses_bad_arguments_in_one_line(args, kw, words):
    """opcov.trace(None, None), (module, None), a plain function... raised from deep inside the trace."""
    import torch

    import opcov

    args = tuple(torch.nn.Linear(2, 2) if a == "linear-module" else a for a in args)
    with pytest.raises(OpcovError) as exc:
        opcov.trace(*args, **kw)
    assert "\n" not in str(exc.value) and words in str(exc.value), str(exc.value)


def test_a_signal_while_spawning_waits_for_the_spawn_to_end():
    """SIGINT in the middle of a worker's spawn left it half-started: its bootstrap read a cut pipe and
    printed 'EOFError: Ran out of input', and the pool had no handle to stop it by."""
    from opcov import children

    done = []
    # SIGINT as an opcov process has it, whatever an earlier test in this worker left (the test failed once
    # in a whole run, its KeyboardInterrupt not raised: the handler it found was not Python's default)
    before = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        with pytest.raises(KeyboardInterrupt):
            with children.signals_deferred():
                signal.raise_signal(signal.SIGINT)
                done.append("the spawn ran to its end")
        assert done and signal.getsignal(signal.SIGINT) is signal.default_int_handler
    finally:
        signal.signal(signal.SIGINT, before)


def test_a_killed_opcovs_temporary_folder_is_removed_by_the_next(tmp_path):
    """'opcov check' of a factory, killed outright, left opcov-check-XXXX and opcov-trace-XXXX."""
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    left = tmp_path / f"opcov-trace-{dead.pid}-x1y2"
    left.mkdir()
    (left / "opset.yaml").write_text("x")
    foreign = tmp_path / "opcov-notes"  # not opcov's form: kept
    foreign.mkdir()
    proc = run_opcov("backends", TMPDIR=str(tmp_path))
    assert proc.returncode == 0, proc.stderr
    assert sorted(os.listdir(tmp_path)) == ["opcov-notes"]
