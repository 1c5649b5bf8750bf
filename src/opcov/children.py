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
from dataclasses import dataclass

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


TOKEN_VAR = "OPCOV_CHILD_TOKEN"  # space-separated marks of the opcov children a process descends from
ERR_TAIL = 64 << 10  # the end of a child's stderr that is read back: its last lines say why it ended
_POLL_S = 0.02


def run_opcov(argv: list[str], env: dict, timeout: float | None) -> tuple[int, str]:
    """Run ``python -m opcov ARGV`` as a child (``run_module``): (exit status, the end of its stderr). Its
    stdout is discarded: opcov children write files."""
    ended = run_module(["opcov", *argv], env, timeout)
    return ended.returncode, ended.err


@dataclass
class Ended:
    """How a child of ``run_module`` ended: its exit status (-N: killed by signal N), its stdout (where
    kept) and the end of its stderr."""

    returncode: int
    out: str
    err: str


def run_module(
    args: list[str], env: dict, timeout: float | None, *, stdin: str | None = None, keep_stdout: bool = False
) -> Ended:
    """Run ``python -m ARGS`` as a child that ends with this process (``preexec``), given ``stdin``. Past
    ``timeout`` seconds it is killed and ``TimedOut`` raised; interrupted, it is killed before the
    interruption goes on. Its stdout is kept where ``keep_stdout`` (else discarded).

    Everything it started ends with it (``end_all``): it leads a process group of its own, and carries a
    mark (``TOKEN_VAR``) that a double-forked daemon, which leaves the group, keeps in its environment.
    Its streams are files, not pipes: a grandchild that holds one open can make nobody wait."""
    import subprocess
    import uuid

    token = uuid.uuid4().hex
    env = dict(env, **{TOKEN_VAR: f"{env.get(TOKEN_VAR, '')} {token}".strip()})
    with contextlib.ExitStack() as files:
        err = files.enter_context(tempfile.TemporaryFile())
        out = files.enter_context(tempfile.TemporaryFile()) if keep_stdout else None
        given = files.enter_context(tempfile.TemporaryFile()) if stdin is not None else None
        if given is not None and stdin is not None:
            given.write(stdin.encode("utf-8"))
            given.seek(0)
        proc = subprocess.Popen(
            [sys.executable, "-m", *args],
            stdin=subprocess.DEVNULL if given is None else given,
            stdout=subprocess.DEVNULL if out is None else out,
            stderr=err,
            env=env,
            preexec_fn=preexec(),
            start_new_session=True,
        )
        try:
            ended = _wait_unreaped(proc.pid, timeout)
        finally:  # ended, timed out or interrupted: the group and every marked process go with it
            end_all(proc.pid, token)
            proc.wait()
        if not ended:
            raise TimedOut
        err.seek(max(0, os.fstat(err.fileno()).st_size - ERR_TAIL))
        said = err.read().decode("utf-8", errors="replace")
        kept = ""
        if out is not None:
            out.seek(0)
            kept = out.read().decode("utf-8", errors="replace")
    return Ended(proc.returncode, kept, said)


def _wait_unreaped(pid: int, timeout: float | None) -> bool:
    """Wait for child ``pid`` to end, without reaping it (its id, the group's, stays taken while the group
    is ended); whether it ended within ``timeout`` seconds."""
    deadline = None if timeout is None else time.monotonic() + timeout
    while os.waitid(os.P_PID, pid, os.WEXITED | os.WNOHANG | os.WNOWAIT) is None:
        if deadline is not None and time.monotonic() > deadline:
            return False
        time.sleep(_POLL_S)
    return True


def end_all(leader: int, token: str, rounds: int = 5) -> None:
    """SIGKILL process group ``leader`` and every process whose environment carries ``token`` in
    ``TOKEN_VAR`` (daemons that left the group), until none is left (a fork in between is caught by the
    next round)."""
    for _ in range(rounds):
        try:
            os.killpg(leader, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
        marked = [pid for pid in _marked(token) if pid != leader]
        for pid in marked:
            try:
                os.kill(pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass
        if not marked:
            return


def _marked(token: str) -> list[int]:
    """The live processes (not zombies) whose environment carries ``token`` in ``TOKEN_VAR``; none where
    there is no /proc."""
    want = f"{TOKEN_VAR}=".encode()
    found = []
    try:
        names = os.listdir("/proc")
    except OSError:
        return []
    for name in names:
        if not name.isdigit() or int(name) == os.getpid():
            continue
        try:
            with open(f"/proc/{name}/environ", "rb") as f:
                environ = f.read()
        except OSError:  # gone, or another user's
            continue
        for entry in environ.split(b"\0"):
            if entry.startswith(want) and token.encode() in entry[len(want) :].split():
                if _alive(int(name)):
                    found.append(int(name))
                break
    return found


def opcov_child(
    argv: list[str],
    *,
    what: str,
    process: str,
    timeout: float | None,
    env: dict | None = None,
    out: str | None = None,
    grace: float = 0.0,
) -> None:
    """Run ``opcov ARGV`` in a child (``run_opcov``; ``env`` default: this process's, ending with it) for
    ``what`` (a factory, a model) and return when it exited 0, having written ``out`` where one is named.
    Else a one-line UsageError: the child's own error line; ``WHAT crashed PROCESS (SIGSEGV)``; ``WHAT did
    not finish within T s (--timeout)``, the child killed after ``timeout`` (plus ``grace``, for a child
    that has a timeout of its own to report first); or ``WHAT ended PROCESS (exit status N) before its
    output was written``. Nothing the child started runs on, in every case."""
    from opcov.errors import UsageError

    env = child_env(env)
    env.setdefault("TORCH_DEVICE_BACKEND_AUTOLOAD", "0")
    try:
        returncode, err = run_opcov(argv, env, None if timeout is None else timeout + grace)
    except TimedOut:
        raise UsageError(
            f"{what} did not finish within {timeout:g} s (--timeout); {process} was killed and nothing was written"
        ) from None
    if returncode == 0 and (out is None or os.path.isfile(out)):
        return
    lines = [ln for ln in err.splitlines() if ln.strip()]
    said = next((ln for ln in reversed(lines) if ln.startswith("opcov: error: ")), None)
    if said:
        raise UsageError(said.removeprefix("opcov: error: "))
    if returncode < 0:
        raise UsageError(f"{what} crashed {process} ({signal_name(-returncode)}); nothing was written")
    last = f": {lines[-1][:200]}" if lines else ""
    raise UsageError(f"{what} ended {process} (exit status {returncode}) before its output was written{last}")


def with_option(argv: list[str], *option: str) -> list[str]:
    """``argv`` with ``option`` where the parser reads it as one: before a '--' that ends the options (what
    follows it is positional), else last (so it wins over the same option given earlier)."""
    if "--" in argv:
        i = argv.index("--")
        return [*argv[:i], *option, *argv[i:]]
    return [*argv, *option]


def signal_name(signum: int) -> str:
    """'SIGSEGV' for 11; 'signal 77' for a number with no name."""
    try:
        return signal.Signals(signum).name
    except ValueError:
        return f"signal {signum}"


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
