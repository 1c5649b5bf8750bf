"""The probe's worker pool: spawned workers, one group at a time each, deadlines, deaths and restarts.

A worker that dies (signal, abort) or exceeds the per-phase timeout is killed, the case in its
flight recorder (``probe.flight``) is recorded as ``crash`` or ``timeout`` with the phase it was
in, and the rest of its group is recorded as not run after it (``CaseRecord.not_run_after``): a
hanging op pays the timeout once, not once per sample. With ``exhaustive`` (and for a replayed
trace or a schema group, whose cases are each another op), a fresh worker continues the group after that case.
"""

from __future__ import annotations

import collections
import os
import shutil
import signal
import tempfile
import time

from opcov import children
from opcov.errors import OpcovError
from opcov.probe import worker
from opcov.probe.argsweep import PREFIX as SWEEP_PREFIX
from opcov.probe.caserecord import REFERENCE, CaseRecord
from opcov.probe.flight import Flight
from opcov.probe.journal import Journal
from opcov.probe.progress import Progress
from opcov.probe.replay import TRACE_PREFIX
from opcov.probe.schemacases import SCHEMA_PREFIX
from opcov.vocab import PROBED_RAN

START_TIMEOUT = 300.0  # worker start + smoke test (imports torch, the backend and OpInfo)
GROUP_TIMEOUT_MIN = 120.0  # sample generation of one group, at least


class ProbeError(OpcovError):
    """The probe cannot run (smoke test failed, journal mismatch); one line, exit 2."""


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
        self.generated = False  # the busy group's samples exist (a death after is a case's)
        self.case_ids = None  # the busy group's case ids, once its samples are generated
        self.deadline = float("inf")  # starting: the smoke test's; busy: see Pool.deadline
        self.log = None
        self.fresh = False  # started and given no group yet: where a crashed case is re-run alone
        self.ran = 0  # cases this worker has recorded since it started


LOGDIR_PREFIX = "opcov-probe-"  # then the probe's pid (children.temp_dir's form): the workers' log folder


class Pool:
    def __init__(self, config: dict, jobs: int, timeout: float, exhaustive: bool = False):
        import multiprocessing as mp

        self.ctx = mp.get_context("spawn")  # never fork
        self.config, self.jobs = config, jobs
        self.journal = self.progress = None
        self.timeout = timeout
        self.exhaustive = exhaustive  # run a group's cases after one crashed or timed out
        self.slots = [_Slot(i) for i in range(jobs)]
        self.devices: list[str] = []  # each device a worker ran on, as it described it
        self.ever_ready = False
        self.restarts = 0
        self.ready_at = None  # when the first worker passed its smoke test
        self.host_free: set = set()  # OpInfos a worker found to keep nothing on CPU (cases.host_leaves)
        children.sweep()  # the log folders of probes killed outright
        self.logdir = tempfile.mkdtemp(prefix=f"{LOGDIR_PREFIX}{os.getpid()}-")
        self.not_run: list = []  # group ids left when the time limit (``run``'s stop_at) was reached

    # -- lifecycle

    def start(self, slot: _Slot) -> None:
        parent, child = self.ctx.Pipe()
        slot.log = os.path.join(self.logdir, f"worker{slot.index}.log")
        cfg = dict(
            self.config,
            log=slot.log,
            worker_index=slot.index,
            timeout=self.timeout,
            group_timeout=max(self.timeout, GROUP_TIMEOUT_MIN),
            parent=os.getpid(),
        )
        slot.flight = Flight(ctx=self.ctx)
        proc = self.ctx.Process(target=worker.main, args=(child, cfg, slot.flight.buf), daemon=True)
        children.start(proc, parent, child)  # never half-started by a signal
        slot.proc = proc
        child.close()
        slot.conn, slot.state, slot.group = parent, "starting", None
        slot.deadline = time.monotonic() + START_TIMEOUT
        slot.fresh, slot.ran = True, 0

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
        shutil.rmtree(self.logdir, ignore_errors=True)  # the workers' logs: nothing left in the temp folder

    def _log_tail(self, slot: _Slot) -> str:
        try:
            with open(slot.log, errors="replace") as f:
                lines = [ln.strip() for ln in f.read().splitlines() if ln.strip()]
        except (OSError, TypeError):
            return ""
        return lines[-1][:200] if lines else ""

    # -- the loop

    def run(
        self, pending: collections.deque, done_ids: dict, journal: Journal, progress: Progress, stop_at=None
    ) -> None:
        """Run the ``pending`` groups; ``stop_at`` (a time.monotonic()): start no group after it, and leave
        the groups not started in ``not_run``."""
        from multiprocessing.connection import wait

        self.pending, self.done_ids, self.journal, self.progress = pending, done_ids, journal, progress
        want = min(self.jobs, len(pending))
        # One worker first (perhaps already started): its smoke test decides whether the device works.
        if self.slots[0].state == "dead":
            self.start(self.slots[0])
        while pending or any(s.state in ("busy",) for s in self.slots):
            if stop_at is not None and time.monotonic() > stop_at and pending:
                self.not_run = sorted({g["id"] for g in pending if not g.get("retry")})
                pending.clear()
                progress.note(f"time limit reached: {len(self.not_run)} group(s) not started")
                continue
            if self.ever_ready:
                live = sum(s.state != "dead" for s in self.slots)
                for s in self.slots:
                    if s.state == "dead" and live < want and pending:
                        self.start(s)
                        live += 1
            for s in self.slots:
                if s.state == "idle" and pending:
                    if pending[0].get("retry") and not s.fresh:  # re-run alone: in a fresh worker
                        self.kill(s)
                        self.start(s)
                        continue
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
        if group.get("retry"):
            skip = list(group["retry"]["skip"])
        slot.fresh = False
        if group["source"] in self.host_free:
            group = dict(group, host_free=True)
        # noted before the worker can begin a step: a step begun before this note is taken for the last
        # group's, and timed by the group's deadline (GROUP_TIMEOUT_MIN), not by the case's --timeout
        slot.assigned_at = time.monotonic()
        slot.conn.send(("group", group, skip))
        slot.state, slot.group = "busy", group
        slot.generated, slot.case_ids = False, None

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
                journal = getattr(self, "journal", None)
                if journal is not None and msg[1] not in journal.devices:  # a resume that runs no
                    journal.write({"device": msg[1]})  # worker still names the device its cases ran on
                    journal.devices.append(msg[1])
            self.ever_ready = True
            slot.state = "idle"
            slot.deadline = float("inf")
        elif kind == "smoke_failed":
            name = self.config["backend"]
            tail = self._log_tail(slot)
            self.kill(slot)
            raise ProbeError(
                f"smoke test on {name} failed ({msg[1]})"
                + (f"; worker log: {tail}" if tail and tail not in msg[1] else "")
            )
        elif kind == "group":
            slot.generated = True  # samples exist; a death from here on is a case's, or between cases
            slot.case_ids = msg[2]
            if len(msg) > 3 and msg[3]:
                self.host_free.add(slot.group["source"])
        elif kind == "group_error":
            self.journal.write({"group_error": msg[1], "why": msg[2], "s": self._took(slot)})
            self.progress.group()
            self.finish_group(slot)
        elif kind == "case":
            slot.ran += 1
            rec = msg[1]
            if slot.group is not None and slot.group.get("retry"):
                rec = self.after_retry(slot.group, rec)
            self.record(rec)
        elif kind == "group_done":
            self.journal.write({"group_done": msg[1], "n": msg[2], "s": self._took(slot)})
            self.progress.group()
            self.finish_group(slot)
        elif kind == "sticky":
            self.progress.note(f"worker {slot.index}: {msg[1]}; starting a fresh worker")
            group = slot.group
            self.kill(slot)
            if group is not None:
                self.pending.appendleft(group)
            self.restarts += 1

    @staticmethod
    def _took(slot: _Slot) -> float:
        """Seconds since the slot's group was assigned: the group's recorded time (probe.plan
        balances shards by it)."""
        return round(time.monotonic() - slot.assigned_at, 3)

    def record(self, rec: CaseRecord) -> None:
        self.journal.write_case(rec)
        self.done_ids.setdefault(rec.group, set()).add(rec.case)
        self.progress.case(rec)

    def finish_group(self, slot: _Slot) -> None:
        slot.state, slot.group = "idle", None
        slot.deadline = float("inf")

    def after_retry(self, group: dict, rec: CaseRecord) -> CaseRecord:
        """The record of a case that crashed or hung, re-run alone in a fresh worker (``_fail_current``):
        it crashed again (kept as it is, said so); else it is ``flaky`` where it now ran, or its own
        result where that is a failure too, the first crash named either way. A group cut short after
        the crash (its later cases recorded as not run) is queued again for those cases."""
        retry = group["retry"]
        if rec.case != retry["case"]:
            return rec
        phase = retry["phase"]
        part = getattr(rec, phase) or {}
        first = f"{retry['status']} ({retry['why']}) in a worker that had run other cases"
        status = part.get("status")
        if status in ("crash", "timeout"):
            part["why"] = f"{part.get('why', '')}; it did so again when re-run alone"[:300]
        elif status in PROBED_RAN or status == "fallback":
            part.update(status="flaky", why=f"{first}; passed when re-run alone ({status})"[:300])
        elif status:
            part["why"] = f"{part.get('why', '')} (re-run alone after a {first})"[:300]
        if status not in ("crash", "timeout") and retry.get("cut"):
            done = self.done_ids.get(group["id"], set())
            done -= set(retry["cut"])
            rest = {k: v for k, v in group.items() if k != "retry"}
            self.pending.append(rest)
        return rec

    def _fail_current(self, slot: _Slot, status: str, why: str) -> None:
        """Record the case in flight as crash/timeout in the phase it was in; record the rest of its
        group as not run after it, or requeue the group (see ``cut_short``). A device crash or hang is
        then re-run alone in a fresh worker (``after_retry``): one that does not repeat is ``flaky``,
        never pinned on an op that passes alone. A hang in a worker that had recorded no case before it
        is not re-run: nothing ran before it to blame, and the re-run would pay the full timeout again
        for the same experiment (a crash's re-run costs only a worker start, and catches a crash that
        comes and goes)."""
        group = slot.group
        found = self.in_flight(slot)
        if found is not None:
            rec, phase = found
            if (getattr(rec, phase) or {}).pop(REFERENCE, False):
                # CPU's own reference died or hung, before the device ran: no reference, not the
                # device's crash (the rest of the group is not run after it all the same)
                status, why = "no_reference", f"cpu reference {status}: {why}"
            retried = group is not None and group.get("retry")
            rec.fail(phase, status, f"{why}; it did so again when re-run alone" if retried else why)
            self.record(rec)
            if retried:  # it crashed again, alone: nothing more to run
                return
            before = set(self.done_ids.get(rec.group, ()))
            cut = self.cut_short(slot, rec, phase)
            rerun = status == "crash" or (status == "timeout" and slot.ran > 0)
            if rerun and slot.case_ids and group is not None:
                retry = {
                    "case": rec.case,
                    "phase": phase,
                    "status": status,
                    "why": why,
                    "skip": [c for c in slot.case_ids if c != rec.case],
                    "cut": sorted(set(self.done_ids.get(rec.group, ())) - before - {rec.case}) if cut else [],
                }
                self.pending.appendleft({**group, "retry": retry})
            if cut:
                group = None
        elif group is not None and group.get("retry"):
            return  # the re-run died outside its case: the first record stands
        elif group is not None and not slot.generated:
            # died or hung outside a case: while generating the group's samples
            self.journal.write({"group_error": group["id"], "why": f"sample generation: {why}"})
            self.progress.group()
            group = None
        if group is not None:
            self.pending.appendleft(group)

    def cut_short(self, slot: _Slot, rec: CaseRecord, phase: str) -> bool:
        """No paying twice: after ``rec`` crashed or timed out, record the group's remaining cases as
        not run after it and finish the group. False (the group is continued) with ``exhaustive``,
        for a replayed trace, a schema or a sweep group (each of its cases is another op or class), or when the sample
        count is unknown."""
        group = slot.group
        if (
            self.exhaustive
            or slot.case_ids is None
            or group["source"].startswith((TRACE_PREFIX, SCHEMA_PREFIX, SWEEP_PREFIX))
        ):
            return False
        done = self.done_ids.get(group["id"], set())
        for cid in slot.case_ids:
            if cid not in done:
                self.record(rec.not_run_after(phase, cid))
        self.journal.write({"group_done": group["id"], "n": len(slot.case_ids), "s": self._took(slot)})
        self.progress.group()
        return True

    def in_flight(self, slot: _Slot) -> tuple[CaseRecord, str] | None:
        """The partial record of the case the slot's worker was running, if it had one unfinished,
        and the phase it was in."""
        if slot.group is None or slot.flight is None:
            return None
        state = slot.flight.read() or {}
        cid = state.get("case")
        retried = (slot.group.get("retry") or {}).get("case")  # recorded once already: re-run alone
        if state.get("group") != slot.group["id"] or (
            cid != retried and cid in self.done_ids.get(slot.group["id"], ())
        ):
            return None
        return CaseRecord.from_flight(state)

    def on_death(self, slot: _Slot) -> None:
        code = slot.proc.exitcode if slot.proc is not None else None
        if slot.proc is not None and code is None:
            slot.proc.join(2)
            code = slot.proc.exitcode
        if slot.state == "starting":
            tail = self._log_tail(slot)
            self.kill(slot)
            if not self.ever_ready:
                raise ProbeError(
                    f"smoke test on {self.config['backend']} crashed ({_signal_name(code)})"
                    + (f"; worker log: {tail}" if tail else "")
                )
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
