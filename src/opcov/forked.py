"""Work shared with a forked child process, beside the parent's own: the site build's pages and parsed op
sets, compare's judging of the zoo.

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
import select
import struct
import tempfile
import threading


def _die_with(parent: int) -> None:
    """The kernel (Linux; elsewhere a thread) ends this child when its parent ends, by any signal (an
    interrupted site build left its helper working on for a second and a half); gone already, it ends now."""
    from opcov import children

    children.die_with_parent(parent)


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
        parent = os.getpid()
        try:
            self.file = tempfile.TemporaryFile()
            self.pid = os.fork()
        except OSError:
            self.pid = None
            return
        if self.pid == 0:  # the child
            code = 1
            try:
                _die_with(parent)
                with open(os.dup(self.file.fileno()), "wb") as out:
                    pickle.dump(fn(), out, protocol=pickle.HIGHEST_PROTOCOL)
                code = 0
            finally:
                os._exit(code)

    def result(self):
        """The child's value; ``fn()`` worked out here when the child did not give one."""
        pid, self.pid = self.pid, None
        if pid and self.file is not None:  # a child has its file
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
    """``[fn(x) for x in items]`` shared with a forked child from now on: the two take items one at a time
    from a pipe of their indices (as make's jobserver hands out tokens), so each takes what it has time
    for and both end together, whatever the items cost and whatever else either is doing meanwhile
    (alternate items, before, left the child idle for a second of a zoo build while the parent was busy
    with other pages). The child works from its start; the parent joins when ``result()`` is asked. Reads
    of a few bytes from a pipe are atomic, so each index reaches one of them. Items the child took but
    gave no result for (it failed or died) are worked out by the parent; an error raised is the one the
    serial loop would raise (the first failing item's). Serial where ``fork`` is False or a child cannot
    be made (see Later)."""

    def __init__(self, fn, items: list, fork: bool = True):
        self.fn, self.items = fn, list(items)
        self.read, self.unsent = None, range(0)  # unsent: indices the pipe could not hold (the parent's)
        fork = fork and len(self.items) > 1
        if fork:
            try:
                self.read, write = os.pipe()
            except OSError:
                fork = False
        if fork:
            os.set_blocking(write, False)
            sent, step = 0, select.PIPE_BUF // _TOKEN.size  # a write of at most PIPE_BUF is whole or nothing
            try:
                while sent < len(self.items):
                    chunk = range(sent, min(sent + step, len(self.items)))
                    os.write(write, b"".join(_TOKEN.pack(i) for i in chunk))
                    sent = chunk.stop
            except OSError:  # full
                pass
            os.close(write)  # the pipe ends, for both, once read
            self.unsent = range(sent, len(self.items))
        self.later = Later(self._take, fork=fork)

    def _take(self) -> dict:
        """{index: fn(item)} for each index this process takes from the pipe; an item whose call raised
        has the exception as its value."""
        out = {}
        while self.read is not None:
            token = os.read(self.read, _TOKEN.size)
            if not token:
                break
            i = _TOKEN.unpack(token)[0]
            try:
                out[i] = self.fn(self.items[i])
            except Exception as exc:  # noqa: BLE001 - raised in item order by result()
                out[i] = _Raised(exc)
        return out

    def result(self) -> list:
        try:
            done = self._take()
            for i in self.unsent:
                done[i] = self._call(i)
        except BaseException:
            self.cancel()
            raise
        theirs = self.later.result()  # without a child: this process's _take of an empty pipe, {}
        if self.read is not None:
            os.close(self.read)
            self.read = None
        done.update(theirs)
        out = []
        for i in range(len(self.items)):
            value = done[i] if i in done else self._call(i)  # the child's, lost with it: worked out here
            if isinstance(value, _Raised):
                raise value.exc
            out.append(value)
        return out

    def _call(self, i: int):
        try:
            return self.fn(self.items[i])
        except Exception as exc:  # noqa: BLE001
            return _Raised(exc)

    def cancel(self) -> None:
        self.later.cancel()
        if self.read is not None:
            os.close(self.read)
            self.read = None


class _Raised:
    """An item's exception, carried to where the serial loop would have raised it."""

    def __init__(self, exc: BaseException):
        self.exc = exc


_TOKEN = struct.Struct("<I")  # one item's index in the pipe


def split_map(fn, items: list, fork: bool = True) -> list:
    """``[fn(x) for x in items]``, shared between this process and a forked child (see Split)."""
    return Split(fn, items, fork).result()
