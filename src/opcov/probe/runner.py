"""The probe run: a pool of spawned workers, a journal, resume, shards, timeouts and progress.

Every finished case is appended to a JSON-lines journal next to the output (flushed after each
record, fsync'd at most once a second), so a parent killed with SIGKILL loses at most the cases
in flight; ``--resume`` reads the journal and runs only the remaining cases. The final file is
built from the journal alone, sorted by case id, so an interrupted-and-resumed run writes the
same file as an uninterrupted one. A worker that dies (signal, abort) or exceeds the per-phase
timeout is killed, the case in its flight recorder (``probe.flight``) is recorded as ``crash``
or ``timeout`` with the phase it was in, and a fresh worker continues the group after that case.
"""

from __future__ import annotations

import collections
import datetime as _dt
import json
import os
import signal
import sys
import tempfile
import time

from opcov.errors import OpcovError, UsageError
from opcov.probe import STATUSES

START_TIMEOUT = 300.0  # worker start + smoke test (imports torch, the backend and OpInfo)
GROUP_TIMEOUT_MIN = 120.0  # sample generation of one group, at least
FSYNC_EVERY_S = 1.0  # the journal is flushed after every record and fsync'd at most this often


class ProbeError(OpcovError):
    """The probe cannot run (smoke test failed, journal mismatch); one line, exit 2."""


def journal_path(out: str) -> str:
    return out + ".journal.jsonl"


# ---------------------------------------------------------------- journal

class Journal:
    """Append-only JSON lines; a torn last line (the parent died mid-write) is ignored on read."""

    def __init__(self, path: str, header: dict, resume: bool):
        self.path = path
        self.records: dict[str, dict] = {}
        self.groups_done: dict[str, int] = {}
        self.group_errors: dict[str, str] = {}
        if os.path.exists(path):
            if not resume:
                raise UsageError(f"{path} exists from an interrupted probe; add --resume to continue it, "
                                 "or delete it to start over")
            old = self._read()
            if old is None:
                raise UsageError(f"{path}: not a probe journal; delete it to start over")
            if old["settings"] != header["settings"]:
                diff = sorted(k for k in set(old["settings"]) | set(header["settings"])
                              if old["settings"].get(k) != header["settings"].get(k))
                raise UsageError(f"{path} was written by a probe with other settings ({', '.join(diff)}); "
                                 "run the same command with --resume, or delete the journal to start over")
            self.header = old
        else:
            self.header = header
            os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
            with open(path, "w") as f:
                f.write(json.dumps({"header": header}, sort_keys=True) + "\n")
        self.f = open(path, "a")
        self.synced = time.monotonic()

    def _read(self):
        header = None
        with open(self.path) as f:
            for line in f:
                try:
                    item = json.loads(line)
                except ValueError:
                    continue  # torn write
                if "header" in item:
                    header = item["header"]
                elif "case" in item:
                    self.records[item["case"]["case"]] = item["case"]
                elif "group_done" in item:
                    self.groups_done[item["group_done"]] = item["n"]
                elif "group_error" in item:
                    self.group_errors[item["group_error"]] = item["why"]
        return header

    def write(self, item: dict) -> None:
        if "case" in item:
            self.records[item["case"]["case"]] = item["case"]
        elif "group_done" in item:
            self.groups_done[item["group_done"]] = item["n"]
        elif "group_error" in item:
            self.group_errors[item["group_error"]] = item["why"]
        self.f.write(json.dumps(item, sort_keys=True) + "\n")
        self.f.flush()  # in the OS now: a SIGKILLed parent loses nothing
        now = time.monotonic()
        if now - self.synced > FSYNC_EVERY_S:  # on disk too: a power loss loses at most this long
            os.fsync(self.f.fileno())
            self.synced = now

    def close(self) -> None:
        if not self.f.closed:
            self.f.flush()
            os.fsync(self.f.fileno())
            self.f.close()


# ---------------------------------------------------------------- progress

class Progress:
    """A bar with ETA and per-status counts on a terminal; plain log lines otherwise."""

    def __init__(self, total_groups: int, done_groups: int, stream=None):
        self.stream = stream or sys.stderr
        self.tty = hasattr(self.stream, "isatty") and self.stream.isatty()
        self.total, self.done, self.start_done = total_groups, done_groups, done_groups
        self.cases = 0
        self.counts: collections.Counter = collections.Counter()
        self.t0 = time.monotonic()
        self.last = 0.0
        self.last_log_done = done_groups

    def case(self, rec: dict) -> None:
        self.cases += 1
        for slot in ("fwd", "bwd"):
            s = (rec.get(slot) or {}).get("status")
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
        counts = " ".join(f"{s} {self.counts[s]}" for s in STATUSES if self.counts[s])
        return (f"{self.done}/{self.total} groups, {self.cases} cases, "
                f"{int(time.monotonic() - self.t0)}s, ETA {self._eta()}" + (f" | {counts}" if counts else ""))

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


# ---------------------------------------------------------------- pool

def _signal_name(code: int | None) -> str:
    if code is None:
        return "no exit status"
    if code < 0:
        try:
            return f"signal {signal.Signals(-code).name}"
        except ValueError:
            return f"signal {-code}"
    return f"exit status {code}"


class _Slot:
    def __init__(self, index: int):
        self.index = index
        self.proc = self.conn = None
        self.state = "dead"  # starting, idle, busy, dead
        self.group = None
        self.flight = None  # the case in flight, written by the worker (see probe.flight)
        self.assigned_at = 0.0
        self.deadline = float("inf")  # starting: the smoke test's; busy: see Pool.deadline
        self.log = None


class Pool:
    def __init__(self, config: dict, jobs: int, timeout: float):
        import multiprocessing as mp

        self.ctx = mp.get_context("spawn")  # never fork
        self.config, self.jobs = config, jobs
        self.journal = self.progress = None
        self.timeout = timeout
        self.slots = [_Slot(i) for i in range(jobs)]
        self.devices: list[str] = []  # each device a worker ran on, as it described it
        self.ever_ready = False
        self.restarts = 0
        self.ready_at = None  # when the first worker passed its smoke test
        self.logdir = tempfile.mkdtemp(prefix="opcov-probe-")

    # -- lifecycle

    def start(self, slot: _Slot) -> None:
        from opcov.probe import worker

        from opcov.probe.flight import Flight

        parent, child = self.ctx.Pipe()
        slot.log = os.path.join(self.logdir, f"worker{slot.index}.log")
        cfg = dict(self.config, log=slot.log, worker_index=slot.index, timeout=self.timeout,
                   group_timeout=max(self.timeout, GROUP_TIMEOUT_MIN))
        slot.flight = Flight(ctx=self.ctx)
        slot.proc = self.ctx.Process(target=worker.main, args=(child, cfg, slot.flight.buf), daemon=True)
        slot.proc.start()
        child.close()
        slot.conn, slot.state, slot.group = parent, "starting", None
        slot.deadline = time.monotonic() + START_TIMEOUT

    def kill(self, slot: _Slot) -> None:
        if slot.proc is not None and slot.proc.is_alive():
            try:
                os.kill(slot.proc.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        if slot.proc is not None:
            slot.proc.join(5)
        if slot.conn is not None:
            slot.conn.close()
        slot.state, slot.proc, slot.conn = "dead", None, None

    def stop(self) -> None:
        for slot in self.slots:
            if slot.state == "starting":  # still importing: it would read "stop" only once ready
                self.kill(slot)
            elif slot.conn is not None and slot.state in ("idle", "busy"):
                try:
                    slot.conn.send(("stop",))
                except (OSError, BrokenPipeError):
                    pass
        for slot in self.slots:
            if slot.proc is not None:
                slot.proc.join(5)
            self.kill(slot)

    def _log_tail(self, slot: _Slot) -> str:
        try:
            with open(slot.log, errors="replace") as f:
                lines = [ln.strip() for ln in f.read().splitlines() if ln.strip()]
        except (OSError, TypeError):
            return ""
        return lines[-1][:200] if lines else ""

    # -- the loop

    def run(self, pending: collections.deque, done_ids: dict, journal: Journal, progress: Progress) -> None:
        from multiprocessing.connection import wait

        self.pending, self.done_ids, self.journal, self.progress = pending, done_ids, journal, progress
        want = min(self.jobs, len(pending))
        # One worker first (perhaps already started): its smoke test decides whether the device works.
        if self.slots[0].state == "dead":
            self.start(self.slots[0])
        while pending or any(s.state in ("busy",) for s in self.slots):
            if self.ever_ready:
                live = sum(s.state != "dead" for s in self.slots)
                for s in self.slots:
                    if s.state == "dead" and live < want and pending:
                        self.start(s)
                        live += 1
            for s in self.slots:
                if s.state == "idle" and pending:
                    self.assign(s, pending.popleft())
            active = [s for s in self.slots if s.state != "dead"]
            if not active:
                break
            now = time.monotonic()
            timeout = max(0.0, min(self.deadline(s) for s in active) - now)
            ready = wait([s.conn for s in active] + [s.proc.sentinel for s in active], timeout=min(timeout, 1.0))
            for s in active:
                if s.state == "dead":
                    continue
                if s.conn in ready or s.proc.sentinel in ready:
                    self.drain(s)
            now = time.monotonic()
            for s in self.slots:
                if s.state != "dead" and now > self.deadline(s):
                    self.on_timeout(s)
        self.stop()

    def assign(self, slot: _Slot, group: dict) -> None:
        skip = sorted(self.done_ids.get(group["id"], ()))
        slot.conn.send(("group", group, skip))
        slot.state, slot.group = "busy", group
        slot.generated = False
        slot.assigned_at = time.monotonic()

    def deadline(self, slot: _Slot) -> float:
        """When the slot's worker must have answered: a busy worker's step (sample generation, or
        a case's phase) began when its flight record says, once it has begun this group."""
        if slot.state != "busy":
            return slot.deadline
        began, end = slot.flight.deadline()
        if began >= slot.assigned_at:
            return end
        return slot.assigned_at + max(self.timeout, GROUP_TIMEOUT_MIN)

    def drain(self, slot: _Slot) -> None:
        while slot.conn is not None:
            try:
                if not slot.conn.poll():
                    break
                msg = slot.conn.recv()
            except (EOFError, OSError):
                self.on_death(slot)
                return
            self.handle(slot, msg)
        if slot.proc is not None and not slot.proc.is_alive() and slot.state != "dead":
            try:
                while slot.conn.poll():
                    self.handle(slot, slot.conn.recv())
            except (EOFError, OSError):
                pass
            if slot.state != "dead":
                self.on_death(slot)

    def handle(self, slot: _Slot, msg) -> None:
        kind = msg[0]
        if kind == "ready":
            if self.ready_at is None:
                self.ready_at = time.monotonic()
            if msg[1] not in self.devices:
                self.devices.append(msg[1])
            self.ever_ready = True
            slot.state = "idle"
            slot.deadline = float("inf")
        elif kind == "smoke_failed":
            name = self.config["backend"]
            tail = self._log_tail(slot)
            self.kill(slot)
            raise ProbeError(f"smoke test on {name} failed ({msg[1]})" + (f"; worker log: {tail}" if tail
                                                                          and tail not in msg[1] else ""))
        elif kind == "group":
            slot.generated = True  # samples exist; a death from here on is a case's, or between cases
        elif kind == "group_error":
            self.journal.write({"group_error": msg[1], "why": msg[2]})
            self.progress.group()
            self.finish_group(slot)
        elif kind == "case":
            self.record(msg[1])
        elif kind == "group_done":
            self.journal.write({"group_done": msg[1], "n": msg[2]})
            self.progress.group()
            self.finish_group(slot)
        elif kind == "sticky":
            self.progress.note(f"worker {slot.index}: {msg[1]}; starting a fresh worker")
            group = slot.group
            self.kill(slot)
            if group is not None:
                self.pending.appendleft(group)
            self.restarts += 1

    def record(self, rec: dict) -> None:
        self.journal.write({"case": rec})
        self.done_ids.setdefault(rec["group"], set()).add(rec["case"])
        self.progress.case(rec)

    def finish_group(self, slot: _Slot) -> None:
        slot.state, slot.group = "idle", None
        slot.deadline = float("inf")

    def _fail_current(self, slot: _Slot, status: str, why: str) -> None:
        """Record the case in flight as crash/timeout in the phase it was in; requeue its group."""
        group = slot.group
        rec = self.in_flight(slot)
        if rec is not None:
            part = rec.setdefault(rec.pop("phase"), {"ops": []})
            part.update(status=status, why=why)
            aten = self._aten_of(group)
            rec["aten"] = aten
            self.record(rec)
        elif group is not None and not getattr(slot, "generated", False):
            # died or hung outside a case: while generating the group's samples
            self.journal.write({"group_error": group["id"], "why": f"sample generation: {why}"})
            self.progress.group()
            group = None
        if group is not None:
            self.pending.appendleft(group)

    def in_flight(self, slot: _Slot) -> dict | None:
        """The partial record of the case the slot's worker was running, if it had one unfinished."""
        if slot.group is None or slot.flight is None:
            return None
        state = slot.flight.read() or {}
        cid = state.get("case")
        if state.get("group") != slot.group["id"] or cid in self.done_ids.get(slot.group["id"], ()):
            return None
        return state

    def _aten_of(self, group) -> list:
        from opcov.probe.cases import CANARY_PREFIX, canary_ids, opinfos

        src = group["source"]
        if src.startswith("trace."):
            return []  # a replayed call dispatches one op: blamed as the sole op
        if src.startswith(CANARY_PREFIX):
            return [canary_ids()[src][1]]
        op = opinfos()[src]
        names = {f"aten::{op.aten_name}", f"aten::{op.name.split('.')[-1]}"}
        names |= {f"aten::{a.name}" for a in getattr(op, "aliases", ()) or ()}
        return sorted(names)

    def on_death(self, slot: _Slot) -> None:
        code = slot.proc.exitcode if slot.proc is not None else None
        if slot.proc is not None and code is None:
            slot.proc.join(2)
            code = slot.proc.exitcode
        if slot.state == "starting":
            tail = self._log_tail(slot)
            self.kill(slot)
            if not self.ever_ready:
                raise ProbeError(f"smoke test on {self.config['backend']} crashed ({_signal_name(code)})"
                                 + (f"; worker log: {tail}" if tail else ""))
            self.restarts += 1
            return
        why = f"worker died: {_signal_name(code)}"
        self._fail_current(slot, "crash", why)
        self.kill(slot)
        self.restarts += 1

    def on_timeout(self, slot: _Slot) -> None:
        if slot.state == "starting":
            self.kill(slot)
            if not self.ever_ready:
                raise ProbeError(f"smoke test on {self.config['backend']} timed out after {START_TIMEOUT:.0f}s")
            return
        why = f"no result within {self.timeout:g}s; worker killed"
        if slot.group is not None and self.in_flight(slot) is None:
            why = f"no result within {max(self.timeout, GROUP_TIMEOUT_MIN):g}s; worker killed"
        self.kill(slot)
        self._fail_current(slot, "timeout", why)
        self.restarts += 1


# ---------------------------------------------------------------- the whole probe

def now_iso() -> str:
    return _dt.datetime.now(_dt.timezone.utc).replace(microsecond=0).isoformat()


def probe(backend, *, out: str, pattern=None, core=False, dtypes, directions, jobs=1, timeout=60.0,
          shard=None, resume=False, command="", stream=None, traces=()) -> tuple[dict, dict]:
    """Run the probe; return (document, run figures). The document is also written to ``out``."""
    from opcov import backends as _backends
    from opcov.catalog import build_catalog
    from opcov.probe import cases, results

    # The first worker starts now: its imports, smoke test and OpInfo load (about 3 s) overlap
    # this process's own (the backend, the catalogue, the case selection) instead of following them.
    # Each worker picks device (its index mod the device count) itself: the parent never starts it.
    config = {"backend": backend.name, "device_type": backend.device_type, "module": backend.module,
              "threads": 1}  # OpInfo samples are small: intra-op threads cost more than they give
    t0 = time.monotonic()
    pool = Pool(config, jobs, timeout)
    pool.start(pool.slots[0])
    journal = progress = None
    try:
        torch = _backends.load(backend)
        catalog = build_catalog((backend.module,) if backend.module else (), _backends.added_ops(backend))
        core_bases = {op.base for op in catalog.core} if core else None
        groups = cases.select_groups(pattern, core_bases=core_bases, dtypes=dtypes, directions=directions,
                                     shard=shard, traces=traces)
        settings = {
            "backend": backend.name, "module": backend.module, "torch": str(torch.__version__),
            "dtypes": list(dtypes), "directions": list(directions), "ops": pattern, "core": bool(core),
            "shard": f"{shard[0]}/{shard[1]}" if shard else None, "timeout": timeout,
            "traces": list(traces),
        }
        journal = Journal(journal_path(out), {"settings": settings, "created": now_iso(), "command": command},
                          resume)
        done_ids: dict[str, set] = {}
        for cid, rec in journal.records.items():
            done_ids.setdefault(rec["group"], set()).add(cid)
        finished = set(journal.groups_done) | set(journal.group_errors)
        pending = collections.deque(g.as_dict() for g in groups if g.id not in finished)
        progress = Progress(len(groups), len(groups) - len(pending), stream)
        if resume and journal.records:
            progress.note(f"resuming: {len(journal.records)} cases and {len(finished)} groups already in "
                          f"{journal.path}")
        if pending:
            pool.run(pending, done_ids, journal, progress)
    except ProbeError:
        if journal is not None and not journal.records and not journal.groups_done and not journal.group_errors:
            journal.close()
            os.remove(journal.path)  # nothing ran: leave no journal that would demand --resume
        raise
    finally:
        pool.stop()
        if journal is not None:
            journal.close()
        if progress is not None:
            progress.finish()
    run_s = time.monotonic() - t0
    records = list(journal.records.values())
    universe = [op.name for op in catalog]
    reason = ("no case of this probe dispatched it"
              + (f" (cases limited by --ops {pattern!r})" if pattern else "")
              + (" (cases limited by --core)" if core else "")
              + (f" (shard {settings['shard']})" if shard else ""))
    host_only = {op.name for op in catalog if not op.applicable}
    ops = results.build_ops(records, universe, reason, host_only)
    table = results.opinfo_table(records, journal.group_errors)
    doc = {
        "schema_version": 1,
        "evidence": "probed",
        "backend": {"name": backend.name, "device_type": backend.device_type,
                    "dispatch_key": backend.dispatch_key, "package": backend.package or "torch",
                    "version": backend.installed_version() or "unknown"},
        "provenance": provenance(torch, backend, catalog, journal.header, "; ".join(sorted(pool.devices)), groups,
                                 settings),
        "summary": results.summarize(ops, table, {op.name for op in catalog.core}),
        "ops": ops,
    }
    from opcov import data

    data.save(doc, out)
    os.remove(journal.path)
    figures = {"wall_s": time.monotonic() - t0, "run_s": run_s, "cases_run": progress.cases, "restarts": pool.restarts,
               "groups": len(groups), "start_s": (pool.ready_at - t0) if pool.ready_at else None}
    return doc, figures


NOTES_ALWAYS = [
    "eager mode only: the torch.compile path is not probed",
    "case source: PyTorch's OpInfo samples plus narrowing canaries (int64 beyond 2^31, float64 beyond "
    "float32 precision); with --traces also op calls captured from zoo model training steps on CPU and "
    "replayed one call at a time (forward only; CPU-only kernels left out). Ops no case reaches stay "
    "'skipped'",
    "checked: values (float64 CPU reference, device no worse than CPU at the same dtype), NaN/inf "
    "positions, shape, dtype, in-place mutation of inputs, view aliasing (which outputs share storage "
    "with which inputs, as on CPU), and out= on each OpInfo's first sample (writes into the given tensor, "
    "returns it, same values; filed under the .out overload); strides are recorded, not judged",
]


def provenance(torch, backend, catalog, header, device, groups, settings) -> dict:
    import platform

    from opcov import __version__
    from opcov import backends as _backends
    from opcov.probe import cases
    from opcov.probe.compare import CPU_MARGIN, LOW_PRECISION, TOLERANCES

    notes = list(NOTES_ALWAYS)
    if backend.name == "cpu":
        notes.insert(0, "harness self-test: a cpu probe runs the device side on CPU too, so it tests opcov's "
                        "probe and shows CPU's dtype support; it is not a rival backend's score")
    if backend.name == "meta":
        notes.insert(0, "meta tensors have no values: shape, dtype and stride are compared, nothing else")
    n_canary = sum(g.source.startswith(cases.CANARY_PREFIX) for g in groups)
    n_trace = sum(g.source.startswith("trace.") for g in groups)
    return {
        "torch": str(torch.__version__),
        "opcov": __version__,
        "created": header["created"],
        "command": header["command"],
        "host": {"platform": platform.platform(terse=True), "machine": platform.machine(),
                 "python": platform.python_version()},
        "device": device or "unknown (no worker started)",
        "catalog_modules": list(catalog.modules),
        "mode": "eager",
        "settings": _backends.settings(backend, torch),
        "probe": {
            "dtypes": settings["dtypes"], "directions": settings["directions"],
            "ops": settings["ops"], "core": settings["core"], "shard": settings["shard"] or "all",
            "timeout_s": settings["timeout"],
            "case_source": {"opinfo_lists": cases.list_counts(), "opinfos": len({g.source for g in groups
                                                                                  if not g.source.startswith((cases.CANARY_PREFIX, "trace."))}),
                            "groups": len(groups), "canary_groups": n_canary,
                            "trace_groups": n_trace, "traces": settings["traces"]},
            "tolerances": {"per_dtype_rtol_atol": {k: list(v) for k, v in TOLERANCES.items()},
                           "cpu_margin": CPU_MARGIN, "low_precision_rtol_atol": list(LOW_PRECISION)},
        },
        "notes": notes,
    }
