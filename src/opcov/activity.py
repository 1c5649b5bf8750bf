"""A phase line on stderr for commands that can take seconds (building the catalogue, tracing,
reading every coverage file, rendering the site).

On a terminal a spinner with the phase, its latest detail and the seconds so far, redrawn by a
background thread and erased when the phase ends; when stderr is not a terminal (a pipe, CI, a
test), nothing at all, so logs and captured output stay as they were. No dependency: a line
rewritten with ``\\r`` is all a phase needs.
"""

from __future__ import annotations

import contextlib
import os
import sys
import threading
import time

FRAMES = "|/-\\"
INTERVAL = 0.12  # seconds between redraws
DELAY = 0.5  # nothing is drawn for a phase that ends sooner


def _is_terminal(stream) -> bool:
    return bool(getattr(stream, "isatty", None) and stream.isatty()) and os.environ.get("TERM") != "dumb"


class _Spinner:
    """The redrawing thread of one phase: first drawn after DELAY, erased on close."""

    def __init__(self, text: str, stream):
        self.text, self.detail, self.stream = text, "", stream
        self.t0 = time.monotonic()
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._loop, daemon=True)
        self.drawn = False

    def say(self, detail: str) -> None:
        self.detail = detail

    def _loop(self) -> None:
        i = 0
        if self.stop.wait(DELAY):
            return
        while not self.stop.is_set():
            detail = f": {self.detail}" if self.detail else ""
            line = f"{FRAMES[i % len(FRAMES)]} {self.text}{detail} ({time.monotonic() - self.t0:.0f}s)"
            self.stream.write("\r" + line[:150] + "\033[K")
            self.stream.flush()
            self.drawn = True
            i += 1
            self.stop.wait(INTERVAL)

    def close(self) -> None:
        self.stop.set()
        self.thread.join()
        if self.drawn:
            self.stream.write("\r\033[K")
            self.stream.flush()


@contextlib.contextmanager
def activity(text: str, stream=None):
    """``with activity("building the op catalogue") as say: ...``; ``say(detail)`` updates the line.
    Shows a spinner only when ``stream`` (default stderr) is a terminal; else does nothing."""
    stream = stream or sys.stderr
    if not _is_terminal(stream):
        yield lambda detail: None
        return
    spinner = _Spinner(text, stream)
    spinner.thread.start()
    try:
        yield spinner.say
    finally:
        spinner.close()
