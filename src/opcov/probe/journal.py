"""The probe's journal: every finished case as one JSON line, so a killed run loses nothing.

Each record is flushed when written (a parent killed with SIGKILL loses at most the cases in
flight) and fsync'd at most once a second (a power loss loses at most that long). ``--resume``
reads it back and runs only the remaining cases; the final file is built from the journal alone.
"""

from __future__ import annotations

import fcntl
import json
import os
import time

from opcov.errors import UsageError
from opcov.probe.caserecord import CaseRecord

FSYNC_EVERY_S = 1.0  # the journal is flushed after every record and fsync'd at most this often


def journal_path(out: str) -> str:
    return out + ".journal.jsonl"


class Journal:
    """Append-only JSON lines; a torn last line (the parent died mid-write) is ignored on read."""

    def __init__(self, path: str, header: dict, resume: bool):
        self.path = path
        self.records: dict[str, CaseRecord] = {}
        self.groups_done: dict[str, int] = {}
        self.group_errors: dict[str, str] = {}
        self.group_seconds: dict[str, float] = {}  # how long each finished group took (probe.plan)
        self.devices: list[str] = []  # each device a worker of this journal's runs described
        exists = os.path.exists(path)
        if exists and not resume:
            raise UsageError(
                f"{path} exists from an interrupted probe; add --resume to continue it, or delete it to start over"
            )
        if resume and not exists:
            raise UsageError(f"--resume: no journal {path} to continue; run without --resume to start a new probe")
        os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
        self.f = open(path, "a")  # noqa: SIM115 - held (and locked) while the probe runs
        try:  # one probe at a time on a journal: a second would read it while the first removes it
            fcntl.flock(self.f, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            self.f.close()
            raise UsageError(f"{path} is in use by another probe; wait for it to end") from None
        if not os.path.exists(path) or os.stat(path).st_ino != os.fstat(self.f.fileno()).st_ino:
            self.f.close()  # the probe that held it finished and removed it meanwhile
            raise UsageError(f"{path} was finished by another probe meanwhile; its file is written")
        try:
            self._begin(header, exists)
        except BaseException:
            self.f.close()
            raise
        self.synced = time.monotonic()

    def _begin(self, header: dict, exists: bool) -> None:
        """Read the journal being resumed (its settings must be this run's), or write a new one's header."""
        path = self.path
        if exists:
            old = self._read()
            if old is None:
                raise UsageError(f"{path}: not a probe journal; delete it to start over")
            if old["settings"] != header["settings"]:
                diff = sorted(
                    k
                    for k in set(old["settings"]) | set(header["settings"])
                    if old["settings"].get(k) != header["settings"].get(k)
                )
                raise UsageError(
                    f"{path} was written by a probe with other settings ({', '.join(diff)}); "
                    "run the same command with --resume, or delete the journal to start over"
                )
            self.header = old
        else:
            self.header = header
            self.f.write(json.dumps({"header": header}, sort_keys=True) + "\n")
            self.f.flush()

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
                else:
                    self._apply(item)
        return header

    def _apply(self, item: dict) -> None:
        """What one journal line says: a finished case, a finished group, a group that failed."""
        if "case" in item:
            rec = CaseRecord.from_json(item["case"])
            self.records[rec.case] = rec
        elif "group_done" in item:
            self.groups_done[item["group_done"]] = item["n"]
            if isinstance(item.get("s"), (int, float)):
                self.group_seconds[item["group_done"]] = float(item["s"])
        elif "group_error" in item:
            self.group_errors[item["group_error"]] = item["why"]
            if isinstance(item.get("s"), (int, float)):
                self.group_seconds[item["group_error"]] = float(item["s"])
        elif "device" in item and item["device"] not in self.devices:
            self.devices.append(item["device"])

    def write_case(self, rec: CaseRecord) -> None:
        """A finished case."""
        self.write({"case": rec.to_json()})

    def write(self, item: dict) -> None:
        """One journal line (see ``_apply``)."""
        self._apply(item)
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
