"""What a worker has in flight, in memory it shares with the parent (a flight recorder).

When a worker dies or hangs, the parent records the case it was in: the phase, the ops the CPU
run dispatched, and the forward result if the backward was running. The worker used to send
each step as a pipe message; here a pipe write plus the parent's wake-up costs about 40 µs, four
times per case, a third of a small case's own time. Writing the state into a shared buffer costs
a memcpy, and the parent reads it only to check a deadline or after a death.

Layout: length of the JSON (u64), when the step began (f64, ``time.monotonic``, which is one
clock for all processes on a machine), the step's time limit in seconds (f64), then the JSON.
The length is written last, so a reader never sees a half-written text under a new length; a
worker killed in the middle of a write leaves the previous state readable or an unparsable one,
which ``read`` returns as None.
"""

from __future__ import annotations

import ctypes
import json
import math
import struct
import time

SIZE = 1 << 16
_HEAD = struct.Struct("<Qdd")


class Flight:
    """One worker's in-flight state: written by the worker, read by the parent."""

    def __init__(self, buf=None, ctx=None):
        # a multiprocessing RawArray: created by the parent, handed to the spawned worker
        self.buf = buf if buf is not None else ctx.RawArray(ctypes.c_char, SIZE)
        self.addr = ctypes.addressof(self.buf)

    def write(self, state: dict, limit: float) -> None:
        """The worker begins a step that must end within ``limit`` seconds."""
        data = json.dumps(state, separators=(",", ":")).encode()
        if len(data) > SIZE - _HEAD.size:  # an enormous op list: keep the case, drop the lists
            slim = {k: v for k, v in state.items() if not isinstance(v, dict)}
            data = json.dumps(slim, separators=(",", ":")).encode()[: SIZE - _HEAD.size]
        ctypes.memmove(self.addr + 8, struct.pack("<dd", time.monotonic(), limit), 16)
        ctypes.memmove(self.addr + _HEAD.size, data, len(data))
        ctypes.memmove(self.addr, struct.pack("<Q", len(data)), 8)

    def clear(self) -> None:
        """Nothing in flight (between groups)."""
        self.write({}, math.inf)

    def deadline(self) -> tuple[float, float]:
        """(when the current step began, when it must have ended); (0, inf) before any write."""
        n, began, limit = _HEAD.unpack(ctypes.string_at(self.addr, _HEAD.size))
        if n == 0:
            return 0.0, math.inf
        return began, began + limit

    def read(self) -> dict | None:
        n = _HEAD.unpack(ctypes.string_at(self.addr, _HEAD.size))[0]
        if n == 0:
            return None
        try:
            return json.loads(ctypes.string_at(self.addr + _HEAD.size, n))
        except ValueError:  # killed in the middle of a write
            return None
