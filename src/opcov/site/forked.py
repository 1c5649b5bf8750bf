"""Parts of a site build worked out in a forked child process, beside the parent's own work.

Why: a build of the whole zoo is pure Python over data already in memory, one core's work, and the
machines it runs on have two or more. A child made by fork has the parent's data as it stands (no
copying in, no pickling of the site); only what it returns is pickled back, so it is handed work
whose results are small beside their cost (pages as bytes, parsed op sets).

Every result is what the same call gives in the parent, so a build is byte-identical whichever way
it ran. Where a child cannot help or fails (no fork on this system, one core, other threads running
that a fork could catch holding a lock, the child's error or death), the parent does the work itself:
``Later.result`` always returns the serial answer, and raises what the serial call raises.
"""

from __future__ import annotations

import os
import pickle
import tempfile
import threading


def _cores() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return os.cpu_count() or 1


def can_fork() -> bool:
    """Whether a child could run beside this process: fork exists, more than one core is ours, and this
    process runs no other thread (a fork copies only the calling thread; a lock another thread held
    would never be released in the child)."""
    return hasattr(os, "fork") and threading.active_count() == 1 and _cores() > 1


def spare_core() -> bool:
    """Whether can_fork() and a core is idle for the child now. On a machine busy with other work the
    child only takes its time from that work, and two processes cost more CPU in all than one
    (measured: a zoo build at load 5 on 2 cores took longer split than serial). Measured where the
    system says (Linux's /proc/stat, over a tenth of a second): the load average of the last minute
    still counts what ran just before, such as the previous build, and made back-to-back builds on
    an idle machine run serially; elsewhere that average, leaving one core free give or take half a
    process."""
    if not can_fork():
        return False
    idle = _idle_cores()
    if idle is not None:
        return idle >= 0.7
    try:
        load = os.getloadavg()[0]
    except (AttributeError, OSError):
        load = 0.0
    return load < _cores() - 0.5


def _idle_cores(window: float = 0.1) -> float | None:
    """How many cores' worth of time went idle over ``window`` seconds (/proc/stat); None where unknown."""
    import time

    def sample():
        with open("/proc/stat") as f:
            fields = [int(x) for x in f.readline().split()[1:]]
        return sum(fields), fields[3] + (fields[4] if len(fields) > 4 else 0)  # all, idle + iowait

    try:
        total0, idle0 = sample()
        time.sleep(window)
        total1, idle1 = sample()
    except (OSError, ValueError, IndexError):
        return None
    if total1 <= total0:
        return None
    return (idle1 - idle0) / (total1 - total0) * (os.cpu_count() or 1)


class Later:
    """``fn()`` worked out in a forked child from now on; ``result()`` gives its value (once).

    With ``fork`` False, or where the child cannot be made, ``result()`` calls ``fn()`` itself.
    The child writes its pickled value to an unlinked temporary file (a pipe would stall it once
    full, until the parent reads) and leaves with os._exit, running none of the parent's exit handlers.
    """

    def __init__(self, fn, fork: bool = True):
        self.fn, self.pid, self.file = fn, None, None
        if not fork:
            return
        try:
            self.file = tempfile.TemporaryFile()
            self.pid = os.fork()
        except OSError:
            self.pid = None
            return
        if self.pid == 0:  # the child
            code = 1
            try:
                with open(os.dup(self.file.fileno()), "wb") as out:
                    pickle.dump(fn(), out, protocol=pickle.HIGHEST_PROTOCOL)
                code = 0
            finally:
                os._exit(code)

    def result(self):
        """The child's value; ``fn()`` worked out here when the child did not give one."""
        pid, self.pid = self.pid, None
        if pid:
            _, status = os.waitpid(pid, 0)
            if os.WIFEXITED(status) and os.WEXITSTATUS(status) == 0:
                self.file.seek(0)
                try:
                    value = pickle.load(self.file)
                except Exception:  # a torn file: the serial answer below
                    pass
                else:
                    self.file.close()
                    return value
        if self.file is not None:
            self.file.close()
        return self.fn()

    def cancel(self) -> None:
        """Stop the child, if it still runs, and let it go (the parent is leaving the build)."""
        pid, self.pid = self.pid, None
        if pid:
            try:
                os.kill(pid, 9)
                os.waitpid(pid, 0)
            except OSError:
                pass
        if self.file is not None:
            self.file.close()


class Split:
    """``[fn(x) for x in items]`` in two: every other item worked out in a forked child from now on,
    the rest by the parent when ``result()`` is asked (so the parent can do other work first while
    the child works). Alternate items, not halves: neighbours cost alike (the site's big coverage
    files sort together, and halves of the bundled data took 4.1 s and 2.1 s to parse), so each side
    gets its share of the dear ones. Serial where ``fork`` is False or a child cannot be made (see
    Later)."""

    def __init__(self, fn, items: list, fork: bool = True):
        self.fn, self.items = fn, list(items)
        self.later = Later(lambda: [fn(x) for x in self.items[1::2]], fork=fork and len(self.items) > 1)

    def result(self) -> list:
        try:
            mine = [self.fn(x) for x in self.items[0::2]]
        except BaseException:
            self.later.cancel()
            raise
        out = [None] * len(self.items)
        out[0::2], out[1::2] = mine, self.later.result()
        return out

    def cancel(self) -> None:
        self.later.cancel()


def split_map(fn, items: list, fork: bool = True) -> list:
    """``[fn(x) for x in items]``, every other item worked out in a forked child while the parent works
    out the rest (see Split)."""
    return Split(fn, items, fork).result()
