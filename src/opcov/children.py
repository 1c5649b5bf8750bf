"""Child processes that end with their parent, whatever ends it.

Why: a worker or helper that outlives an interrupted or killed opcov keeps a core busy and may write
after its parent has gone (a zoo worker still importing when its parent was killed ran on for up to
20 s). On Linux the kernel kills the child when its parent ends (``PR_SET_PDEATHSIG``), even by
SIGKILL; a parent gone before that was set is caught by comparing the parent's id; elsewhere a
thread watches the parent's id instead. Torch-free and cheap to import: workers call it first.
"""

from __future__ import annotations

import contextlib
import os
import signal
import sys
import tempfile
import threading
import time

PARENT_VAR = "OPCOV_PARENT_PID"  # set for an opcov child started as a program (cli.main reads it)
_PR_SET_PDEATHSIG = 1
TRACE_TIMEOUT_S = 600.0  # a model traced in a child (a user's factory): killed after this (--timeout)


def _libc():
    if not sys.platform.startswith("linux"):
        return None
    try:
        import ctypes

        return ctypes.CDLL(None, use_errno=True)
    except (OSError, AttributeError):
        return None


def _kernel_kills_with_parent(libc) -> bool:
    """Ask the kernel to SIGKILL this process when its parent ends; whether it agreed."""
    try:
        return libc is not None and libc.prctl(_PR_SET_PDEATHSIG, int(signal.SIGKILL), 0, 0, 0) == 0
    except (OSError, AttributeError):
        return False


def die_with_parent(parent: int | None, poll_s: float = 0.5) -> None:
    """End this process when ``parent`` (a pid; None: the present parent) ends: at once if it has
    ended already, else by the kernel (Linux) or a watching thread (elsewhere)."""
    parent = os.getppid() if not parent else parent
    kernel = _kernel_kills_with_parent(_libc())
    if os.getppid() != parent:  # gone before the kernel was asked: reparented already
        os._exit(1)
    if kernel:
        return

    def watch():
        while os.getppid() == parent:
            time.sleep(poll_s)
        os._exit(1)

    threading.Thread(target=watch, name="opcov-parent-watch", daemon=True).start()


def from_environment() -> None:
    """In an opcov program started by another opcov (``child_env``): end with that parent."""
    value = os.environ.pop(PARENT_VAR, "")
    if value.isdigit():
        die_with_parent(int(value))


def child_env(env: dict | None = None) -> dict:
    """``env`` (default: this process's) for an opcov child program that should end with this process."""
    return dict(os.environ if env is None else env, **{PARENT_VAR: str(os.getpid())})


def preexec():
    """A ``preexec_fn`` for subprocess: the child (any program) is killed when this process ends
    (Linux). The library is loaded here, before the fork; the child only makes the call."""
    libc, parent = _libc(), os.getpid()
    if libc is None:
        return None

    def set_death_signal():
        _kernel_kills_with_parent(libc)
        if os.getppid() != parent:
            os._exit(1)

    return set_death_signal


@contextlib.contextmanager
def signals_deferred(signums=(signal.SIGINT, signal.SIGTERM)):
    """SIGINT and SIGTERM held back while the block runs, then acted on: for spawning a worker, which a
    signal in the middle left half-started (its bootstrap read a cut pipe and printed a traceback, and
    the pool, holding no handle on it, could neither stop it nor join it)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    got: list[int] = []
    old = {s: signal.signal(s, lambda n, _frame: got.append(n)) for s in signums}
    try:
        yield
    finally:
        for s, handler in old.items():
            signal.signal(s, handler)
        if got:
            handler = old[got[0]]
            if callable(handler):
                handler(got[0], None)
            elif handler == signal.SIG_DFL:
                signal.raise_signal(got[0])


def start(proc, *conns) -> None:
    """Start a multiprocessing ``proc`` with the signals deferred (signals_deferred); interrupted while
    spawning, the half-started worker is killed and joined and ``conns`` (its pipe ends) are closed
    before the interruption goes on: nothing is left running or joined that never started."""
    try:
        with signals_deferred():
            proc.start()
    except BaseException:
        if proc.pid is not None:
            proc.kill()
            proc.join()
        for conn in conns:
            conn.close()
        raise


class TimedOut(Exception):
    """An opcov child program ran past its time and was killed."""


def run_opcov(argv: list[str], env: dict, timeout: float | None) -> tuple[int, str]:
    """Run ``python -m opcov ARGV`` as a child that ends with this process (``preexec``): (exit status,
    its stderr). Past ``timeout`` seconds it is killed and ``TimedOut`` raised; interrupted, the
    child is killed before the interruption goes on. Its stdout is discarded: children write files."""
    import subprocess

    with subprocess.Popen(
        [sys.executable, "-m", "opcov", *argv],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
        errors="replace",
        env=env,
        preexec_fn=preexec(),
    ) as proc:
        try:
            _, err = proc.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.communicate()
            raise TimedOut from None
        except BaseException:  # interrupted: the child goes with us
            proc.kill()
            raise
    return proc.returncode, err


TEMP_PREFIX = "opcov-"  # opcov-<what>-<pid>-XXXX: a temporary folder of opcov's, named by its process


def temp_dir(what: str) -> tempfile.TemporaryDirectory:
    """A temporary folder named by this process's id, so that one a killed opcov could not remove is
    found and removed by the next (``sweep``)."""
    return tempfile.TemporaryDirectory(prefix=f"{TEMP_PREFIX}{what}-{os.getpid()}-")


def sweep() -> None:
    """Remove the temporary folders (``temp_dir``) of opcov processes that no longer run: killed
    outright (SIGKILL), they could run no clean-up of their own."""
    import re
    import shutil

    base = tempfile.gettempdir()
    try:
        names = os.listdir(base)
    except OSError:
        return
    for name in names:
        m = re.match(rf"{TEMP_PREFIX}[a-z]+-(\d+)-", name)
        if m is None or int(m.group(1)) == os.getpid():
            continue
        if not _alive(int(m.group(1))):
            shutil.rmtree(os.path.join(base, name), ignore_errors=True)


def _alive(pid: int) -> bool:
    """Whether process ``pid`` runs: a zombie (ended, not yet reaped by whoever inherited it) does not."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except OSError:  # another user's
        return True
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except (OSError, IndexError):
        return True
