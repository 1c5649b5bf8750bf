"""The whole model zoo: every transformers architecture with a base model class (and the curated zoo),
traced in both modes by worker processes into coverage/models/, with one outcome table.

Why this shape:

* One architecture per model type, named after it. A type that the curated zoo (``zoo.py``) holds
  is traced from its entry (its hand-checked config); every other type from its default config
  made tiny by ``tiny.overrides`` (the layer kinds kept, the repeats dropped), passed as ``--set``
  overrides, so each op set's command line reproduces it. The sizes and the retries that find ones
  a model takes are ``ladder``'s (shared with ``opcov trace``); this module runs the jobs.
* What opcov can decide for a model it decides: the dtype (``Built.dtype``: bfloat16 for grouped_mm
  experts) and the inputs (``inputs.py``). A model whose ops depend on data (fake tensors carry no
  values) is traced again with real values (``tracing: real``) on the computing stand-in
  (``realtrace.trace_real``), at narrow widths (``tiny.overrides(width=True)``), not on CPU, whose
  own kernels (``_scaled_dot_product_flash_attention_for_cpu``) an accelerator never runs.
* Worker processes (spawned, never forked), one job (model, mode) at a time each: a model that
  hangs past ``--timeout`` or kills its process costs that job only; the worker is replaced. Fake
  traces run first; the jobs that need real values then run in workers whose PrivateUse1 device is
  the computing stand-in (a process can claim PrivateUse1 once, so a worker is one kind or the other).
* The curated zoo's op sets are made by ``opcov zoo trace`` (hand-checked configs, real-valued
  branches in child processes, which would cost the whole run more than the rest of it): a run
  records a curated architecture whose op set is already under ``--root`` from that file, and
  traces only those that are missing.
* A journal (one JSON line per finished job, beside the table) so an interrupted run continues
  with ``--resume``; the table is written from the journal when every job is done.
  ``--retry-failed`` keeps what a finished table says was traced and traces the rest again (after
  a fix in opcov), with the fake traces whose real-valued branch run failed.
* The outcome table (``layout.zoo_table_path``): one row per model and mode, ``traced``,
  ``cannot_build`` or ``cannot_trace`` (``vocab.ZOO_OUTCOMES``) with a one-line reason, never a
  traceback. ``--shard I/N`` traces every Nth model and writes its own table; ``opcov zoo merge``
  joins shard tables into the file one unsharded run writes (rows sorted, no timings).
"""

from __future__ import annotations

import collections
import json
import os
import random
import sys
import time
from dataclasses import dataclass

from opcov import children, vocab
from opcov.errors import OpcovError, UsageError
from opcov.sources import models
from opcov.store import layout, output
from opcov.tracing import ladder, realtrace, spec

MODES = ("inference", "training")
TIMEOUT_S = 300.0  # one job (build + trace); a worker start is not counted
START_TIMEOUT_S = 300.0  # a worker's imports (torch, transformers) and its stand-in device
REAL_FAILED = "fake tensors cannot trace it ({first}); the real-valued trace failed too: {why}"
MAX_RSS_MB = 6144  # a worker over this after a job is replaced (imported model code and caches grow)
JOB_RSS_MB = 8192  # a worker over this during a job is killed: the job is cannot_trace (memory stays bounded)
COLUMNS = ("model", "mode", "outcome", "dtype", "tracing", "ops", "source", "reason")
SAMPLE_SEED = 17


@dataclass(frozen=True)
class Arch:
    """One architecture: ``name`` its folder under coverage/models, ``spec`` a curated zoo name or hf:TYPE."""

    name: str
    spec: str

    @property
    def curated(self) -> bool:
        from opcov.sources import vision

        return not (self.spec.startswith("hf:") or vision.is_spec(self.spec))


def transformers_types() -> list[str]:
    """Every transformers model type with a base model class, sorted."""
    from opcov.sources import models

    models._transformers()
    from transformers.models.auto.modeling_auto import MODEL_MAPPING_NAMES

    return sorted(MODEL_MAPPING_NAMES)


LIBRARIES = ("transformers", "timm", "torchvision")


def architectures(
    *, every: bool = False, only=(), sample: int = 0, seed: int = SAMPLE_SEED, libraries=("transformers",)
) -> list[Arch]:
    """The architectures to trace: the curated zoo and every transformers type (``every``; with
    ``libraries`` naming timm or torchvision, their models of ``vision.zoo_archs`` instead or as
    well), the named ones (``only``: zoo names, transformers types, timm-NAME, torchvision-NAME), or a
    seeded random ``sample`` of the transformers types (the curated ones among them traced from their
    entries)."""
    from opcov.sources import vision, zoo

    unknown = [lib for lib in libraries if lib not in LIBRARIES]
    if unknown:
        raise UsageError(f"--library {unknown[0]}: expected one of {', '.join(LIBRARIES)}")
    curated = [Arch(e.name, e.name) for e in zoo.ZOO]
    names = {a.name for a in curated}
    types = transformers_types()
    hf = [Arch(t, t if t in names else f"hf:{t}") for t in types]
    wanted = [n for part in only for n in part.split(",") if n]
    vis = []
    if (every and set(libraries) - {"transformers"}) or any(n.startswith(("timm-", "torchvision-")) for n in wanted):
        vis = [
            Arch(vision.arch_name(s), s) for s in vision.zoo_archs() if not every or s.partition(":")[0] in libraries
        ]
        if every and not vis:
            raise UsageError(
                f"--library {', '.join(libraries)}: timm and torchvision do not import here; "
                "run in the environment scripts/envs/vision.sh makes"
            )
    if sample:
        return sorted(random.Random(seed).sample(hf, min(sample, len(hf))), key=lambda a: a.name)
    if every:
        picked = (curated + hf if "transformers" in libraries else []) + vis
        return sorted({a.name: a for a in picked}.values(), key=lambda a: a.name)
    known = {a.name: a for a in curated + hf + vis}
    unknown = [n for n in wanted if n not in known]
    if unknown:
        raise UsageError(
            f"not a zoo name, transformers model type, or timm-/torchvision- model of the zoo: {', '.join(unknown)}"
        )
    return [known[n] for n in dict.fromkeys(wanted)]


def in_shard(index: int, shard) -> bool:
    """Whether the index-th architecture (in name order) is in shard (I, N): every Nth, from the I-th."""
    return shard is None or index % shard[1] == shard[0] - 1


# ---------------------------------------------------------------- one job (in a worker)


def run_job(
    arch: Arch, mode: str, root: str, kind: str = "fake", options: dict | None = None, device: str = "accelerator"
) -> dict:
    """Trace one architecture in one mode into ``root``; the table row (and seconds), never raising.
    A fake-tensor trace that needs real values is a row with ``needs_real`` (the fake trace's reason),
    which the parent sends to a real-valued worker and does not record; one whose real-valued
    branch run is still to make carries ``real_job``, which the parent sends to a real-valued worker
    (``options["real_job"]`` there: merged into the saved op set). ``device`` "cpu": the trace's
    target is the CPU (``opcov trace --device cpu``, with ``--real`` for the real kind), both kinds
    at the real-valued trace's narrow widths (``cpu_trace``)."""
    options = options or {}
    t0 = time.monotonic()
    path = layout.opset_path(arch.name, mode, root)
    row = {"model": arch.name, "mode": mode, "source": arch.spec if not arch.curated else "zoo"}
    try:
        if options.get("real_job"):
            result = realtrace.merge_saved(path, options["real_job"])
        elif device == "cpu":
            result = spec.cpu_trace(arch, mode, path, real=kind == "real")
        elif kind == "fake":
            result = spec.fake_trace(arch, mode, path)
        else:
            result = realtrace.real_trace(arch, mode, path)
        result.save(path)
        doc = result.doc
        row.update(
            outcome="traced", dtype=doc["dtype"], tracing=tracing_of(doc), ops=doc["summary"]["distinct_ops"], reason=""
        )
        if getattr(result, "real_job", None):
            row["real_job"] = result.real_job
    except models.BuildError as exc:
        row.update(outcome="cannot_build", reason=ladder.one_line(exc))
    except ladder.NeedsReal as exc:
        row.update(outcome="cannot_trace", needs_real=str(exc), reason=str(exc))
    except Exception as exc:  # noqa: BLE001 - every failure is a row, never a traceback
        row.update(outcome="cannot_trace", reason=ladder.one_line(exc))
    row["seconds"] = round(time.monotonic() - t0, 2)
    return row


def kept_row(arch: Arch, mode: str, path: str) -> dict:
    """The row of a curated op set already at ``path`` (made by 'opcov zoo trace' from its hand-checked
    entry, with its real-valued branches): read from the file, not traced again."""
    from opcov.store import opset

    row = {"model": arch.name, "mode": mode, "source": "zoo", "seconds": 0.0}
    try:
        doc = opset.load(path)
    except OpcovError as exc:
        return {**row, "outcome": "cannot_trace", "reason": f"the curated op set does not load: {ladder.one_line(exc)}"}
    return {
        **row,
        "outcome": "traced",
        "dtype": doc.get("dtype"),
        "tracing": tracing_of(doc),
        "ops": doc["summary"]["distinct_ops"],
        "reason": "",
    }


def _note_branch_failure(path: str, why: str) -> None:
    """A branch run that timed out or killed its worker: the fake trace at ``path`` says so."""
    from opcov.store import opset
    from opcov.tracing.realtrace import FAILED_NOTE

    result = opset.OpSet(opset.load(path))
    result.doc["provenance"]["notes"].append(FAILED_NOTE.format(why=why))
    result.save(path)


def tracing_of(doc: dict) -> str:
    """The table's ``tracing``: fake, real, or fake+real (a fake trace with real-valued branches merged)."""
    tracing = doc["provenance"].get("tracing") or ""
    if tracing == "fake" and any(" seen=" in text for text in doc.get("calltree") or ()):
        return "fake+real"
    return tracing


def worker_main(conn, root: str, kind: str = "fake", device: str = "accelerator", parent: int | None = None) -> None:
    """A worker: its device registered before any backward (the kernel-less stand-in, or for ``real``
    the computing one; none for a ``device`` "cpu" worker, whose traces are on CPU), then jobs until
    told to stop. It ends with ``parent`` (the pool's process), even one gone before it got here."""
    children.die_with_parent(parent)
    os.environ.setdefault("TORCH_DEVICE_BACKEND_AUTOLOAD", "0")
    sys.stdout = sys.stderr = open(os.devnull, "w")  # models print; the pipe is the only output
    from opcov.sources import models
    from opcov.torchenv import import_torch
    from opcov.tracing import realtrace, target

    torch = import_torch()
    if device != "cpu" and kind == "real":  # a CPU worker claims no device
        os.environ[realtrace.PYBACKEND_SPEC_VAR] = realtrace.child_spec()
        import opcov.sources.pybackend  # noqa: F401 - claims PrivateUse1: the computing stand-in

        target.show_composites(torch)
    elif device != "cpu":
        target.ensure(torch)
    models._transformers()
    conn.send(("ready", os.getpid()))
    while True:
        msg = conn.recv()
        if msg[0] == "stop":  # no interpreter teardown: after a device backward it may abort (torch 2.13)
            conn.close()
            os._exit(0)
        _, name, spec, mode, options = msg
        row = run_job(Arch(name, spec), mode, root, kind, options, device)
        row["rss_mb"] = _rss_mb()
        conn.send(("row", row))


def _rss_mb() -> float:
    return _rss_of("self")


def _rss_of(pid) -> float:
    """Resident memory of process ``pid`` in MB (0 where /proc cannot tell)."""
    try:
        with open(f"/proc/{pid}/statm") as f:
            return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20
    except (OSError, ValueError, IndexError):
        return 0.0


# ---------------------------------------------------------------- the pool (in the parent)


class _Slot:
    def __init__(self):
        self.proc = self.conn = None
        self.job = None
        self.deadline = float("inf")
        self.ready = False


class Pool:
    """``jobs`` spawned workers of one ``kind`` and target ``device``; a job past ``timeout``, a worker
    over ``max_job_mb`` of resident memory during a job (one real-valued run of a large model reached
    23 GB), or a worker that dies becomes a cannot_trace row."""

    def __init__(
        self,
        jobs: int,
        root: str,
        timeout: float,
        kind: str = "fake",
        max_job_mb: float = JOB_RSS_MB,
        device: str = "accelerator",
    ):
        import multiprocessing as mp

        self.ctx = mp.get_context("spawn")
        self.root, self.timeout, self.kind, self.max_job_mb = root, timeout, kind, max_job_mb
        self.device = device
        self.slots = [_Slot() for _ in range(jobs)]

    def start(self, slot: _Slot) -> None:
        parent, child = self.ctx.Pipe()
        proc = self.ctx.Process(
            target=worker_main, args=(child, self.root, self.kind, self.device, os.getpid()), daemon=True
        )
        children.start(proc, parent, child)  # never half-started by a signal
        slot.proc = proc
        child.close()
        slot.conn, slot.job, slot.ready = parent, None, False
        slot.deadline = time.monotonic() + START_TIMEOUT_S

    def kill(self, slot: _Slot) -> None:
        if slot.proc is not None and slot.proc.is_alive():
            slot.proc.kill()
        if slot.proc is not None:
            slot.proc.join(5)
        if slot.conn is not None:
            slot.conn.close()
        slot.proc = slot.conn = slot.job = None
        slot.ready = False

    def run(self, pending: collections.deque, on_row) -> None:
        """Run every (arch, mode) of ``pending``, calling ``on_row(row)`` as each finishes."""
        from multiprocessing.connection import wait

        self.unready_starts = 0  # workers started since one last reported ready
        try:
            while pending or any(s.job for s in self.slots):
                for s in self.slots:
                    if s.proc is None and pending:
                        self.unready_starts += 1
                        if self.unready_starts > 3 * len(self.slots):
                            raise UsageError(
                                "the zoo's workers cannot start (importing torch or transformers "
                                "fails in a fresh process)"
                            )
                        self.start(s)
                    if s.ready and s.job is None and pending:
                        arch, mode, *job = pending.popleft()
                        s.job = (arch, mode)
                        s.conn.send(("job", arch.name, arch.spec, mode, {"real_job": job[0] if job else None}))
                        s.deadline = time.monotonic() + self.timeout
                live = [s for s in self.slots if s.proc is not None]
                if not live:
                    break
                wait([s.conn for s in live] + [s.proc.sentinel for s in live], timeout=1.0)
                for s in live:
                    self._poll(s, on_row)
        finally:
            stopping = []
            for s in self.slots:
                if s.conn is not None and s.ready and s.job is None:
                    try:
                        s.conn.send(("stop",))
                        stopping.append(s)
                    except (OSError, BrokenPipeError):
                        pass
            for s in stopping:  # an idle worker leaves at once; one starting or busy is killed now
                s.proc.join(2)
            for s in self.slots:
                self.kill(s)

    def _poll(self, s: _Slot, on_row) -> None:
        try:
            while s.conn is not None and s.conn.poll():
                msg = s.conn.recv()
                if msg[0] == "ready":
                    s.ready, s.deadline = True, float("inf")
                    self.unready_starts = 0
                elif msg[0] == "row":
                    row = msg[1]
                    job, s.job, s.deadline = s.job, None, float("inf")
                    rss = row.pop("rss_mb", 0)
                    if job and rss > self.max_job_mb:
                        # over the bound when its job ended, between two checks below: the same outcome as a
                        # check that had caught it running (a job quicker than the poll is no exception)
                        self._over_bound(s, job, on_row)
                        return
                    if rss > MAX_RSS_MB:
                        self.kill(s)
                    on_row(row)
        except (EOFError, OSError):
            pass
        if s.proc is None:
            return
        why = None
        if not s.proc.is_alive():
            why = f"the worker died ({_exit(s.proc.exitcode)})"
        elif time.monotonic() > s.deadline:
            why = f"timed out after {self.timeout:g} s" if s.job else "the worker did not start in time"
        elif s.job and _rss_of(s.proc.pid) > self.max_job_mb:
            why = f"over {self.max_job_mb:,} MB of memory (killed)"
        if why:
            job = s.job
            self.kill(s)
            if job:
                on_row(_cannot_trace(job, why))

    def _over_bound(self, s: _Slot, job, on_row) -> None:
        self.kill(s)
        on_row(_cannot_trace(job, f"over {self.max_job_mb:,} MB of memory (killed)"))


def _cannot_trace(job, why: str) -> dict:
    arch, mode = job
    return {
        "model": arch.name,
        "mode": mode,
        "source": "zoo" if arch.curated else arch.spec,
        "outcome": "cannot_trace",
        "reason": why,
        "seconds": None,
    }


def _exit(code) -> str:
    import signal

    if code is not None and code < 0:
        try:
            return f"signal {signal.Signals(-code).name}"
        except ValueError:
            return f"signal {-code}"
    return f"exit status {code}"


# ---------------------------------------------------------------- journal, table, progress


def journal_path(table: str) -> str:
    return table + ".journal.jsonl"


class Journal:
    """One JSON line per finished job after a header of the run's settings; a torn last line is ignored."""

    def __init__(self, path: str, settings: dict, resume: bool):
        self.path, self.rows = path, {}
        if os.path.exists(path):
            if not resume:
                raise UsageError(
                    f"{path} exists from an interrupted zoo run; add --resume to continue it, "
                    "or delete it to start over"
                )
            with open(path) as f:
                lines = [json.loads(ln) for ln in f if _json(ln)]
            if not lines or lines[0].get("settings") != settings:
                raise UsageError(
                    f"{path} was written by a zoo run with other settings; run the same command "
                    "with --resume, or delete it to start over"
                )
            self.rows = {(r["model"], r["mode"]): r for r in (ln["row"] for ln in lines[1:] if "row" in ln)}
            self.f = open(path, "a")
        else:
            os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
            self.f = open(path, "w")
            self._write({"settings": settings})

    def add(self, row: dict) -> None:
        self.rows[(row["model"], row["mode"])] = row
        self._write({"row": row})

    def _write(self, item: dict) -> None:
        self.f.write(json.dumps(item, sort_keys=True) + "\n")
        self.f.flush()

    def close(self) -> None:
        self.f.close()


def _json(line: str) -> bool:
    try:
        json.loads(line)
        return True
    except ValueError:
        return False


def table_text(rows, header: dict) -> str:
    """The outcome table: '# key: value' header lines, then tab-separated COLUMNS, sorted by model and mode."""
    lines = [f"# {k}: {v}" for k, v in header.items()]
    lines.append("\t".join(COLUMNS))
    for row in sorted(rows, key=lambda r: (r["model"], MODES.index(r["mode"]))):
        lines.append("\t".join(_cell(row.get(c)) for c in COLUMNS))
    return "\n".join(lines) + "\n"


def _cell(value) -> str:
    return "" if value is None else " ".join(str(value).replace("\t", " ").split())


def read_table(path: str) -> tuple[dict, list[dict]]:
    """(header, rows) of an outcome table written by ``table_text``."""
    header, rows = {}, []
    try:
        with open(path) as f:
            lines = f.read().splitlines()
    except OSError as exc:
        raise UsageError(f"{path}: cannot read: {exc.strerror}") from None
    columns = None
    for n, line in enumerate(lines, 1):
        if line.startswith("# "):
            key, _, value = line[2:].partition(": ")
            header[key] = value
        elif columns is None:
            columns = line.split("\t")
            if tuple(columns) != COLUMNS:
                raise UsageError(f"{path}:{n}: not a zoo outcome table (columns {', '.join(COLUMNS)})")
        elif line:
            cells = line.split("\t")
            rows.append(dict(zip(columns, cells + [""] * (len(columns) - len(cells)))))
    return header, rows


def merge_tables(paths) -> str:
    """The one table that the shard tables ``paths`` make together (the headers must agree but for the shard)."""
    header, rows, seen = None, [], {}
    for path in paths:
        h, r = read_table(path)
        h.pop("shard", None)
        if header is not None and h != header:
            raise UsageError(f"{path}: made by another zoo run than {paths[0]} (its header differs)")
        header = h
        for row in r:
            key = (row["model"], row["mode"])
            if key in seen:
                raise UsageError(f"{path}: {row['model']} {row['mode']} is also in {seen[key]}")
            seen[key] = path
            rows.append(row)
    if header is None:
        raise UsageError("no tables to merge")
    return table_text(rows, header)


class Progress:
    """A bar with counts per outcome and an ETA: redrawn on a terminal, a line every 30 s otherwise."""

    def __init__(self, total: int, done: int, stream=None):
        self.stream = stream or sys.stderr
        self.tty = hasattr(self.stream, "isatty") and self.stream.isatty()
        self.total, self.done, self.start_done = total, done, done
        self.counts: collections.Counter = collections.Counter()
        self.t0 = self.last = time.monotonic()

    def row(self, row: dict) -> None:
        self.done += 1
        self.counts[row["outcome"]] += 1
        now = time.monotonic()
        if self.tty:
            self.stream.write(f"\r{self.line(row)}"[:200] + "\033[K")
        elif now - self.last >= 30 or self.done == self.total:
            self.stream.write(f"zoo: {self.line(row)}\n")
            self.last = now
        else:
            return
        self.stream.flush()

    def line(self, row=None) -> str:
        width = 20
        filled = width * self.done // max(self.total, 1)
        ran, took = self.done - self.start_done, time.monotonic() - self.t0
        eta = took / ran * (self.total - self.done) if ran else 0
        counts = ", ".join(
            f"{vocab.ZOO_OUTCOMES[o].label} {self.counts[o]}" for o in vocab.ZOO_OUTCOMES if self.counts[o]
        )
        last = f" | {row['model']} {row['mode']}" if row else ""
        return (
            f"[{'#' * filled}{'.' * (width - filled)}] {self.done}/{self.total} {counts} "
            f"{int(took // 60)}m{int(took % 60):02d}s ETA {int(eta // 60)}m{int(eta % 60):02d}s{last}"
        )

    def finish(self) -> None:
        if self.tty:
            self.stream.write("\n")
            self.stream.flush()


# ---------------------------------------------------------------- the run


def _keep_traced(journal: Journal, table: str, header: dict, root: str) -> dict:
    """Seed the journal with the traced rows of the finished table ``table`` (made by the same run),
    but those whose op set under ``root`` says its real-valued branch run failed: their fake trace and
    branch run are made again too (a fix may let the branch run through). Returns those rows, by
    (model, mode): where the new trace fails, the row and op set it had stay (no traced op set is lost)."""
    if not os.path.exists(table):
        raise UsageError(f"{table}: no outcome table to retry the failures of; run without --retry-failed")
    old, rows = read_table(table)
    if old != header:
        raise UsageError(
            f"{table} was made by another zoo run (its header differs); run the same selection, "
            "or without --retry-failed"
        )
    again = {}
    for row in rows:
        key = (row["model"], row["mode"])
        if row["outcome"] != "traced" or key in journal.rows:
            continue
        if row.get("tracing") == "fake" and _branch_failed(layout.opset_path(row["model"], row["mode"], root)):
            again[key] = row
        else:
            journal.add(row)
    return again


def _branch_failed(path: str) -> bool:
    """Whether the op set at ``path`` notes that its real-valued branch run failed."""
    from opcov.store import opset
    from opcov.tracing.realtrace import FAILED_NOTE

    try:
        notes = opset.load(path)["provenance"]["notes"]
    except OpcovError:
        return False
    before, after = FAILED_NOTE.split("{why}")
    return any(n.startswith(before) and n.endswith(after) for n in notes)


def header_for(selection: str, modes, shard=None) -> dict:
    """The table's header, and the journal's settings: what was run, with which torch and transformers."""
    from importlib.metadata import version

    header = {
        "command": selection or "opcov zoo trace",
        "torch": version("torch"),
        "transformers": version("transformers"),
        "modes": ",".join(modes),
    }
    if shard:
        header["shard"] = f"{shard[0]}/{shard[1]}"
    return header


def run(
    archs: list[Arch],
    *,
    modes=MODES,
    jobs: int = 1,
    shard=None,
    root: str | None = None,
    table: str | None = None,
    resume: bool = False,
    retry: bool = False,
    timeout: float = TIMEOUT_S,
    selection: str = "",
    stream=None,
    real: bool = False,
    device: str = "accelerator",
) -> list[dict]:
    """Trace ``archs`` (those of ``shard``) in ``modes`` with ``jobs`` workers; writes the op sets under
    ``root``, the outcome table at ``table`` (with a journal beside it while running); returns the rows.
    ``retry``: keep what the table at ``table`` says was traced, and trace the rest again. ``real``:
    every job traced with real values in real-valued workers (curated ones too; scripts/zoo_recall.py).
    ``device`` "cpu": op sets for a CPU target (``run_job``), fake or (``real``) eager on CPU, in
    workers with no stand-in device; a fake trace that needs real values is recorded as it failed."""
    root = root or layout.models_dir()
    table = table or layout.zoo_table_path(shard=shard)
    if jobs < 1:
        raise UsageError(f"--jobs must be at least 1, not {jobs}")
    output.check_output(table, kind=output.TABLE, flag="--table")
    picked = [a for i, a in enumerate(archs) if in_shard(i, shard)]
    header = header_for(selection, modes, shard)
    if not resume and os.path.exists(table):  # its rows are replaced: only by a run of the same selection
        old = read_table(table)[0].get("command")
        if old and old != header["command"]:
            raise UsageError(
                f"{table} holds the outcomes of '{old}'; this run ('{header['command']}') would "
                "replace them: pass --table FILE for it, or delete that table first"
            )
    journal = Journal(journal_path(table), header, resume)
    again = _keep_traced(journal, table, header, root) if retry else {}
    kept = 0
    for arch in picked:  # the curated zoo's op sets are made by 'opcov zoo trace': read, not traced again
        for mode in modes:
            path = layout.opset_path(arch.name, mode, root)
            if (
                arch.curated
                and not real
                and device != "cpu"
                and (arch.name, mode) not in journal.rows
                and os.path.isfile(path)
            ):
                journal.add(kept_row(arch, mode, path))
                kept += 1
    pending = collections.deque((a, m) for a in picked for m in modes if (a.name, m) not in journal.rows)
    for arch, mode in pending:
        output.check_output(layout.opset_path(arch.name, mode, root), kind=output.OPSET, within=root)
    progress = Progress(len(picked) * len(modes), len(picked) * len(modes) - len(pending), stream)

    by_name = {a.name: a for a in picked}
    needs_real: dict = {}  # (model, mode) -> the fake trace's reason, while its real-valued trace runs
    branching: set = set()  # (model, mode) whose real-valued branch run is queued
    real_pending: collections.deque = collections.deque()
    for key, row in journal.rows.items():  # resumed: fake traces whose branch runs never finished
        if row.get("real_job") and key[0] in by_name:
            real_pending.append((by_name[key[0]], key[1], row["real_job"]))
            branching.add(key)
    passes = [progress]

    def on_row(row):
        key = (row["model"], row["mode"])
        if "needs_real" in row:
            needs_real[key] = row.pop("needs_real")
            real_pending.append((by_name[row["model"]], row["mode"]))
            return
        if key in branching:  # a branch run's row: a failure leaves the fake trace, with a note
            branching.discard(key)
            if row["outcome"] != "traced":
                _note_branch_failure(layout.opset_path(row["model"], row["mode"], root), row["reason"])
                row = {k: v for k, v in journal.rows[key].items() if k != "real_job"}
        elif row.get("real_job"):  # journaled with its job, so --resume can still run it
            real_pending.append((by_name[row["model"]], row["mode"], row["real_job"]))
            branching.add(key)
        if key in needs_real and row["outcome"] != "traced":
            row["reason"] = REAL_FAILED.format(first=needs_real[key], why=row["reason"])
        if key in again and row["outcome"] != "traced":  # a retry that failed: the old op set (untouched) stays
            row = dict(again[key])
        journal.add(row)
        passes[-1].row(row)

    t0 = time.monotonic()
    try:
        if real:
            pending, real_pending = collections.deque(), pending
        Pool(jobs, root, timeout, device=device).run(pending, on_row)
        if real_pending:
            progress.finish()
            print(
                f"zoo: {len(real_pending)} real-valued "
                + (
                    "traces"
                    if real
                    else "runs (branch runs merged into fake traces, and traces fake tensors cannot make)"
                )
                + (" on CPU" if device == "cpu" else " on the computing stand-in"),
                file=stream or sys.stderr,
            )
            passes.append(Progress(len(real_pending), 0, stream))
            Pool(min(jobs, len(real_pending)), root, timeout, kind="real", device=device).run(real_pending, on_row)
    finally:
        journal.close()
        passes[-1].finish()
    rows = [journal.rows[(a.name, m)] for a in picked for m in modes if (a.name, m) in journal.rows]
    output.write_atomic(table, table_text(rows, header))
    os.remove(journal.path)
    counts = collections.Counter(r["outcome"] for r in rows)
    print(
        f"zoo: {len(rows)} op sets of {len(picked)} architectures in {time.monotonic() - t0:.0f} s: "
        + ", ".join(f"{vocab.ZOO_OUTCOMES[o].label} {counts[o]}" for o in vocab.ZOO_OUTCOMES if counts[o])
        + (f" ({kept} curated op sets kept as 'opcov zoo trace' made them)" if kept else "")
        + f"; table {table}",
        file=stream or sys.stderr,
    )
    return rows
