"""The spawned worker process: smoke test, then groups of cases, one pipe message per case.

Started with multiprocessing's spawn method (never fork: torch_tpu refuses forked children,
and a forked child inherits device state). The cases themselves run in ``probe.execute``; this
is the process around it: start (the backend, the device, the OpInfo database), the smoke test,
the pipe loop, the device check after a device error, and dying with the parent. While a case
runs, the executor keeps its partial record in the flight recorder (``probe.flight``, memory
shared with the parent), so when the process dies or hangs the parent knows which case and
which phase to record it against, without a message per step.
"""

from __future__ import annotations

import os
import sys
import traceback

from opcov.probe import lazy
from opcov.probe.cases import host_free, load_group
from opcov.probe.execute import Executor, first_line
from opcov.probe.flight import Flight
from opcov.probe.sample import case_ids
from opcov.sources.opinfo import opinfos


class Worker:
    """The process side of one worker: runs the groups the parent sends, one message per case."""

    def __init__(self, conn, config: dict, flight=None):
        self.conn, self.config = conn, config
        self.flight = flight  # the case in flight, for the parent (None: nobody is watching)
        self.executor = Executor(
            config["device_type"],
            config.get("device"),
            worker_index=int(config.get("worker_index", 0)),
            flight=flight,
            timeout=float(config.get("timeout") or 60.0),
        )

    def send(self, *msg) -> None:
        self.conn.send(msg)

    # ---------------------------------------------------------------- device health

    def smoke(self) -> None:
        """Empty tensor, copy to and from the device, synchronise: before any case."""
        ex = self.executor
        torch = ex.torch
        torch.empty(0, device=ex.dev)
        x = torch.arange(6, dtype=torch.float32).reshape(2, 3)
        d = x.to(ex.dev)
        ex.sync()
        if ex.device_type != "meta":
            back = d.cpu()
            if not torch.equal(back, x):
                raise RuntimeError(f"copy to {ex.dev} and back changed the values")
        elif tuple(d.shape) != (2, 3):
            raise RuntimeError("meta tensor has the wrong shape")

    def health_check(self) -> None:
        """After a device error: if the device no longer works, the worker is replaced."""
        try:
            self.smoke()
        except Exception as exc:  # noqa: BLE001
            self.send("sticky", f"device unusable after an error: {first_line(exc)}")
            self.conn.close()
            os._exit(3)

    def run_group(self, group: dict, skip) -> None:
        """Generate a group's samples and run its cases but those in ``skip`` (done before a resume
        or a restart), one message per case; the parent times the generation through the flight."""
        if self.flight is not None:
            self.flight.write({"generating": group["id"]}, float(self.config.get("group_timeout") or 120.0))
        try:
            loaded = lazy.cap(load_group(group), self.executor.device_type, group["source"])  # xla: <= 3 samples
        except Exception as exc:  # noqa: BLE001 - an OpInfo that cannot make samples
            self.send("group_error", group["id"], f"sample generation failed: {first_line(exc)}")
            return
        ids = case_ids(group["id"], loaded.samples)
        self.send("group", group["id"], ids, host_free(group["source"]))
        for cid, sample in zip(ids, loaded.samples):
            if cid in skip:
                continue
            self.send("case", self.executor.run_case(loaded, sample, cid, group))
            if self.executor.suspect:  # after a device error, check the device before the next case
                self.executor.suspect = False
                self.health_check()
        if self.flight is not None:
            self.flight.clear()
        self.send("group_done", group["id"], len(loaded.samples))


def main(conn, config: dict, flight_buf=None) -> None:
    """Entry point of a spawned worker."""
    log = config.get("log")
    if log:
        fd = os.open(log, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
        os.dup2(fd, 1)
        os.dup2(fd, 2)
    os.environ.setdefault("TORCH_DEVICE_BACKEND_AUTOLOAD", "0")
    _die_with_parent(config.get("parent"))
    import warnings

    warnings.filterwarnings("ignore")
    try:
        import torch

        torch.set_num_threads(max(1, int(config.get("threads", 1))))
        if config.get("module"):
            _load_backend(torch, config["module"], config["device_type"])
        worker = Worker(conn, config, Flight(flight_buf) if flight_buf is not None else None)
    except Exception as exc:  # noqa: BLE001
        conn.send(("smoke_failed", f"worker start failed: {first_line(exc)}"))
        return
    try:
        worker.smoke()
    except Exception as exc:  # noqa: BLE001
        conn.send(("smoke_failed", first_line(exc)))
        return
    try:
        opinfos()  # load the OpInfo database once, before the first group's timer starts
    except Exception as exc:  # noqa: BLE001 - expecttest gone since the parent's OpInfo index was recorded
        conn.send(("smoke_failed", f"worker start failed: {first_line(exc)}"))
        return
    conn.send(("ready", describe_device(torch, worker)))
    while True:
        try:
            msg = conn.recv()
        except EOFError:
            return
        if msg[0] == "stop":
            # nothing is left to flush: skip interpreter teardown (about a second with torch loaded)
            sys.stdout.flush()
            sys.stderr.flush()
            os._exit(0)
        if msg[0] == "group":
            try:
                worker.run_group(msg[1], set(msg[2]))
            except (BrokenPipeError, EOFError):
                return
            except Exception:  # noqa: BLE001
                traceback.print_exc(file=sys.stderr)
                raise


def _load_backend(torch, module: str, device_type: str) -> None:
    """Import the backend; if that does not name its device yet, run the loader its
    ``torch.backends`` entry point names (what torch's autoload would have run)."""
    import importlib
    import importlib.metadata as md

    importlib.import_module(module)
    try:
        torch.device(device_type)
        return
    except RuntimeError:
        pass
    for ep in md.entry_points(group="torch.backends"):
        if ep.value.split(":", 1)[0].split(".")[0] == module.split(".")[0]:
            ep.load()()
            break
    try:
        torch.device(device_type)
    except RuntimeError:
        raise RuntimeError(
            f"importing {module} registered no device type {device_type!r}: the backend found no device on this machine"
        ) from None


def _die_with_parent(parent: int | None = None) -> None:
    """The worker ends with its parent (even by SIGKILL; opcov.children), so a hung case never
    outlives an interrupted probe."""
    from opcov import children

    children.die_with_parent(parent)


def describe_device(torch, worker) -> str:
    """What the provenance says the worker ran on; with the device index, since ``--jobs`` spreads
    workers over devices."""
    import platform

    dt, dev = worker.executor.device_type, worker.executor.dev
    if dt == "cpu":
        return f"cpu: {platform.processor() or platform.machine()}"
    if dt == "meta":
        return "meta: no data (shape, dtype and stride only)"
    get_name = getattr(getattr(torch, dt, None), "get_device_name", None)
    name = None
    for args in ((dev,), ()):
        try:
            name = get_name(*args) if get_name else None
            break
        except Exception:  # noqa: BLE001 - a backend whose get_device_name takes no device
            continue
    return f"{dev}: {name}" if name else str(dev)
