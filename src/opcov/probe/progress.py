"""Probe progress: a bar with ETA and live counts per status on a terminal, log lines otherwise."""

from __future__ import annotations

import collections
import sys
import time

from opcov.probe import STATUSES
from opcov.vocab import AFTER_CRASH


class Progress:
    """A bar with ETA and per-status counts on a terminal; plain log lines otherwise."""

    def __init__(self, total_groups: int, done_groups: int, stream=None):
        self.stream = stream or sys.stderr
        self.tty = hasattr(self.stream, "isatty") and self.stream.isatty()
        self.total, self.done, self.start_done = total_groups, done_groups, done_groups
        self.cases = 0
        self.not_run = 0  # cases left after a crash or timeout of their group
        self.counts: collections.Counter = collections.Counter()
        self.t0 = time.monotonic()
        self.last = 0.0
        self.last_log_done = done_groups

    def case(self, rec) -> None:
        """One case finished (a ``CaseRecord``), or was left after a crash of its group."""
        if rec.not_run():
            self.not_run += 1
            return
        self.cases += 1
        for slot in ("fwd", "bwd"):
            s = rec.status(slot)
            if s:
                self.counts[s] += 1
        self.show()

    def group(self) -> None:
        self.done += 1
        self.show(force=not self.tty and self.done == self.total)

    def _eta(self) -> str:
        ran = self.done - self.start_done
        if ran <= 0:
            return "?"
        left = (time.monotonic() - self.t0) / ran * (self.total - self.done)
        return f"{int(left // 60)}m{int(left % 60):02d}s"

    def line(self) -> str:
        counts = " ".join(
            [f"{s} {self.counts[s]}" for s in STATUSES if self.counts[s]]
            + ([f"{AFTER_CRASH.short} {self.not_run}"] if self.not_run else [])
        )
        return (
            f"{self.done}/{self.total} groups, {self.cases} cases, "
            f"{int(time.monotonic() - self.t0)}s, ETA {self._eta()}" + (f" | {counts}" if counts else "")
        )

    def show(self, force: bool = False) -> None:
        now = time.monotonic()
        if self.tty:
            if now - self.last < 0.2 and not force:
                return
            width = 24
            filled = int(width * self.done / self.total) if self.total else width
            text = f"\r[{'#' * filled}{'.' * (width - filled)}] {self.line()}"
            self.stream.write(text[:200] + "\033[K")
            self.stream.flush()
        else:
            step = max(1, self.total // 10)
            if not force and now - self.last < 30 and self.done - self.last_log_done < step:
                return
            self.last_log_done = self.done
            self.stream.write(f"probe: {self.line()}\n")
            self.stream.flush()
        self.last = now

    def finish(self) -> None:
        if self.tty:
            self.show(force=True)
            self.stream.write("\n")
            self.stream.flush()

    def note(self, text: str) -> None:
        self.stream.write(("\r\033[K" if self.tty else "") + f"probe: {text}\n")
        self.stream.flush()
