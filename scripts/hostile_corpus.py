"""Run hostile inputs and faults of every class docs/data-safety.md guards against through every opcov
command and its Python API, and print a line per case: ok, kind, case, peak memory, seconds, expected, got.

The cases: one of each kind the rules name (the first list in ``cases``), then families crossed
programmatically (``generated``): hostile names (separators, '..', line breaks, control characters,
4096 characters, bytes that are not UTF-8) on every command that takes a name and in every name field of
a bundle; each bundle field malformed each way, and files that are not bundles (bombs, deep nesting,
/dev/zero, a FIFO); damaged coverage files through every reader; every writer's output aimed at its own
input, a folder, a link out, /proc or another kind of file; factories that crash, exit, hang, fork or
daemonize under 'run' and 'trace'; hostile vendor sources for 'expect', times files and shard counts for
'plan'; two ingests at once, and signals while ingesting.

Why a script and not a test: it takes an hour (factories import torch, the zoo and the probe start
workers), and its figures belong on the docs page. Every case runs in a fresh folder with its own
private TMPDIR. On top of its own expectation, every run must show: nothing written outside what its
command line names as output (the folder is compared before and after; a file made from a hostile name
is looked for above it too), nothing it was not told to write changed or removed (a silent loss), no
traceback, no death by a signal, no hang (a deadline per run), at most 1 GB of memory where its inputs
are at most 50 MB (the peak resident memory of the run's process tree), no process left running (each
run carries a mark in its environment, OPCOV_CORPUS_RUN, that its descendants inherit), and no temporary
file or lock left beside its outputs or in its TMPDIR (torch's own compile cache aside; what a process
killed on purpose left must be gone after the next opcov command). Exit status 1 when any case fails.

    python scripts/hostile_corpus.py [--only WORD ...] [--list] [--write-docs]
"""

from __future__ import annotations

import argparse
import gzip
import hashlib
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SRC = os.path.join(ROOT, "src")
sys.path.insert(0, SRC)
sys.path.insert(0, os.path.join(ROOT, "benchmarks"))

LLAMA = os.path.join(ROOT, "coverage", "models", "llama", "training.yaml")
TPU_FILE = os.path.join(ROOT, "coverage", "tpu", "registered-torch-2.13.0+cpu-torch_tpu-0.2.0.yaml")
CPU_REG = os.path.join(ROOT, "coverage", "cpu", "registered-torch-2.13.0+cpu.yaml")
CPU_PROBED = os.path.join(ROOT, "coverage", "cpu", "probed-torch-2.13.0+cpu.yaml")
MAX_RSS_MB = 1024
BIG = 50 << 20  # the largest hostile input: 50 MB
CASE_VAR = "OPCOV_CORPUS_RUN"  # each run's mark in its environment: what it leaves running carries it
PWN = "PWNED"  # in hostile names: a file made from one is found by it, wherever it lands
STRAY = re.compile(r"\.tmp\d+-[0-9a-f]{8}$|^\.opcov\.lock$|\.tmp$")  # a writer's temporary file or lock

FACTORIES = """
import os, signal, sys, time
import torch

class BadExit(BaseException):
    pass

def segfault():
    os.kill(os.getpid(), signal.SIGSEGV)

def aborts():
    os.abort()

def exits():
    os._exit(0)

def no_inputs():
    return torch.nn.Linear(4, 4), None

def base_exception():
    raise BadExit("no")

def closes_stdout():
    sys.stdout.close()
    return torch.nn.Linear(4, 4), (torch.randn(2, 4),)

def hang():
    with open(os.environ["HANG_PID_FILE"], "w") as f:
        f.write(str(os.getpid()))
    time.sleep(600)
"""


@dataclass
class Run:
    code: int
    out: str
    err: str
    rss_mb: float
    seconds: float
    left: list = field(default_factory=list)
    hung: bool = False  # killed at the case's deadline
    outside: list = field(default_factory=list)  # files written where the command was not told to write
    lost: list = field(default_factory=list)  # files changed or removed that the command was not told to write
    stray: list = field(default_factory=list)  # temporary files or locks left beside its outputs


@dataclass
class Case:
    bullet: str
    name: str
    expected: str
    fn: object  # (Box) -> (got, ok)


class Box:
    """One case's folder: the data copied in, a private TMPDIR, and every run's figures."""

    def __init__(self, root: str):
        self.dir = root
        self.tmp = os.path.join(root, "tmpdir")
        os.mkdir(self.tmp)
        self.runs: list[Run] = []
        self.killed = False  # the case sent a signal on purpose: a death by it is expected
        self.big = False  # an input over 50 MB: the 1 GB limit does not apply (its peak is still shown)
        self.allowed: list[str] = []  # files and folders the case's commands are told to write
        self.extra_env: dict[str, str] = {}  # set for every run of the case (a backend records file)
        self.cleanup: list[str] = []  # files and folders a case made outside its folder, removed after it
        self.n = os.path.basename(root)  # this case's mark, in hostile names and in its processes' environment
        self.pids = os.path.join(root, "pids")  # where the corpus's own factories say their process ids
        os.mkdir(self.pids)
        self.allow(self.pids)
        cov = os.path.join(root, "coverage")
        os.makedirs(os.path.join(cov, "tpu"))
        os.makedirs(os.path.join(cov, "cpu"))
        os.makedirs(os.path.join(cov, "models", "llama"))
        shutil.copy(TPU_FILE, os.path.join(cov, "tpu"))
        shutil.copy(CPU_REG, os.path.join(cov, "cpu"))
        shutil.copy(LLAMA, os.path.join(cov, "models", "llama"))
        self.cov = cov
        self.tpu = os.path.join(cov, "tpu", os.path.basename(TPU_FILE))
        self.opset = self.path("llama.yaml", open(LLAMA, encoding="utf-8").read())
        with open(os.path.join(root, "userfactories.py"), "w") as f:
            f.write(FACTORIES)

    def path(self, name: str, text: str | None = None) -> str:
        p = os.path.join(self.dir, name)
        if text is not None:
            with open(p, "w", encoding="utf-8") as f:
                f.write(text)
        return p

    def env(self, **extra) -> dict:
        env = dict(os.environ)
        env.update(
            PYTHONPATH=SRC + os.pathsep + self.dir,
            TORCH_DEVICE_BACKEND_AUTOLOAD="0",
            TMPDIR=self.tmp,
            HANG_PID_FILE=os.path.join(self.pids, "hang.pid"),
            PID_DIR=self.pids,
        )
        env[CASE_VAR] = self.n
        env.update(self.extra_env)
        env.update(extra)
        return env

    def pwn(self, name: str) -> str:
        """A hostile name with this case's mark: a file it makes anywhere is found by the mark."""
        return name.replace(PWN, f"{PWN}{self.n}")

    def allow(self, *paths: str) -> None:
        """The command about to run is told to write these (files, or folders and all under them)."""
        self.allowed += [os.path.abspath(p) for p in paths]

    def snapshot(self) -> dict:
        """Every file under the case's folder (its TMPDIR aside): path -> (size, mtime, inode)."""
        out = {}
        for root, dirs, files in os.walk(self.dir):
            if root == self.dir and "tmpdir" in dirs:
                dirs.remove("tmpdir")
            for name in dirs + files:
                p = os.path.join(root, name)
                try:
                    st = os.lstat(p)
                except OSError:
                    continue
                if name in dirs and not os.path.islink(p):
                    continue
                out[p] = (st.st_size, st.st_mtime_ns, st.st_ino)
        return out

    def changes(self, before: dict, run: Run) -> None:
        """What changed in the case's folder during a run, against what it was told to write; and any file
        with this case's mark made outside the folder (an escape through '..')."""
        after = self.snapshot()
        told = tuple(self.allowed)

        def ok(p):
            return any(p == a or p.startswith(a + os.sep) for a in told)

        for p in sorted(set(before) | set(after)):
            if before.get(p) == after.get(p):
                continue
            if ok(p):
                if p not in before and STRAY.search(os.path.basename(p)):
                    run.stray.append(os.path.relpath(p, self.dir))
                continue
            (run.lost if p in before else run.outside).append(os.path.relpath(p, self.dir))
        for p in _marked_outside(self):
            run.outside.append(p)

    def start(self, args, *, python=False, stdout=subprocess.PIPE, stdin=None, **kw):
        cmd = [sys.executable, "-c", args] if python else [sys.executable, "-m", "opcov", *args]
        import threading

        if not python and getattr(self, "named_ok", True):
            self.allow(*(os.path.join(self.dir, p) for p in named_outputs(list(args))))
        self.started = getattr(self, "started", 0) + 1
        token = f"{self.n}:{self.started}"  # this run's mark: what it leaves running is found by it
        proc = subprocess.Popen(
            cmd, cwd=self.dir, env=self.env(**{CASE_VAR: token}), stdout=stdout, stderr=subprocess.PIPE,
            stdin=stdin if stdin is not None else subprocess.DEVNULL, text=True, errors="replace",
            start_new_session=True, **kw,
        )  # fmt: skip
        proc.token = token
        proc.peak_kb = 0
        proc.before = self.snapshot()

        def sample():  # from its start, so a case that kills it midway still has its figure
            while _running(proc.pid):
                for pid in [proc.pid, *_descendants(proc.pid)]:
                    proc.peak_kb = max(proc.peak_kb, _hwm_kb(pid))
                time.sleep(0.02)

        proc.sampler = threading.Thread(target=sample, daemon=True)
        proc.sampler.start()
        return proc

    def finish(self, proc, t0: float, timeout: float = 600, compare: bool = True) -> Run:
        """Wait for ``proc``, reading its output, and the peak resident memory of its process tree: the
        largest VmHWM of it and each descendant, read every 20 ms from /proc. (Its ru_maxrss would not
        do: Linux carries a parent's high-water mark into a forked child across exec, so every run would
        read at least this script's own peak.) ``compare``: the folder is compared with how ``proc``
        found it; False where writers run at once (``finish_all``), whose files in flight are not yet
        what any left behind."""
        import threading

        got = {}

        def read(name, stream):
            got[name] = stream.read() if stream is not None else ""

        readers = [threading.Thread(target=read, args=(n, s)) for n, s in (("out", proc.stdout), ("err", proc.stderr))]
        for r in readers:
            r.start()
        deadline = time.monotonic() + timeout
        hung = False
        while _running(proc.pid):
            if time.monotonic() > deadline and not hung:
                hung = True
                os.killpg(proc.pid, signal.SIGKILL)
                _kill_marked(proc.token)
            time.sleep(0.02)
        proc.sampler.join()
        peak = proc.peak_kb
        proc.wait()
        left = _marked_running(proc.token, within=2.0)  # what it started and left running (a daemon)
        _kill_marked(proc.token)
        for r in readers:
            r.join()
        run = Run(proc.returncode, got.get("out", ""), got.get("err", ""), peak / 1024, time.monotonic() - t0)
        run.hung, run.left = hung, left
        if compare:
            self.changes(proc.before, run)
        self.runs.append(run)
        return run

    def finish_all(self, procs, t0: float, timeout: float = 600) -> list:
        """``finish`` for writers started together, the folder compared once all are done, with how the
        first found it: a lock or temporary file one holds while another ends is no leftover; what any of
        them left behind is (on the last run)."""
        runs = [self.finish(q, t0, timeout, compare=False) for q in procs]
        self.changes(procs[0].before, runs[-1])
        return runs

    def opcov(self, *args, timeout: float = 600, stdout=subprocess.PIPE) -> Run:
        t0 = time.monotonic()
        return self.finish(self.start(list(args), stdout=stdout), t0, timeout)

    def python(self, code: str, timeout: float = 600) -> Run:
        t0 = time.monotonic()
        return self.finish(self.start(code, python=True), t0, timeout)


OUT_FLAGS = ("--out", "-o", "--table", "--root", "--replay-dir")
WRITES_COVERAGE = ("ingest", "run", "expect", "scan", "probe")  # --coverage names where these write


def named_outputs(args: list[str]) -> list[str]:
    """What a command line tells opcov to write: the value of each output option (a probe's journal and
    group times beside its --out), and the coverage folder of a command that writes there."""
    out = []
    command = next((a for a in args if not a.startswith("-")), "")
    for i, a in enumerate(args):
        flag, eq, value = a.partition("=")
        if flag in OUT_FLAGS or (flag == "--coverage" and command in WRITES_COVERAGE):
            value = value if eq else (args[i + 1] if i + 1 < len(args) else "")
            if value:
                out.append(value)
                if command == "probe" and flag == "--out":
                    out += [value + ".journal.jsonl", value + ".times.json"]
                if command == "zoo" and flag == "--table":  # the zoo's journal of outcomes beside its table
                    out.append(value + ".journal.jsonl")
    if command in WRITES_COVERAGE and not any(a.partition("=")[0] == "--coverage" for a in args):
        out.append("coverage")
    return out


# ---------------------------------------------------------------- what a run must show


def one_line(run: Run, *words, code: int = 2) -> tuple[str, bool]:
    lines = [ln for ln in run.err.strip().splitlines() if ln.strip()]
    said = lines[-1][:110] if lines else "(nothing on stderr)"
    ok = run.code == code and len(lines) == 1 and lines[0].startswith("opcov: error: ")
    ok = ok and all(w in lines[0] for w in words)
    return f"exit {run.code}: {said}", ok


def lint_refuses(run: Run, *words) -> tuple[str, bool]:
    errors = [ln for ln in run.out.splitlines() if "error" in ln and ":" in ln]
    said = errors[0][-110:] if errors else run.out.strip().splitlines()[-1:]
    return f"exit {run.code}: {said}", run.code == 1 and all(any(w in e for e in errors) for w in words)


def api_error(run: Run, *words) -> tuple[str, bool]:
    line = run.out.strip().splitlines()[-1] if run.out.strip() else "(nothing)"
    return line[:120], run.code == 0 and line.startswith("raised ") and all(w in line for w in words)


API = """
import sys, opcov
from opcov.errors import OpcovError
try:
    {call}
except OpcovError as exc:
    assert "\\n" not in str(exc)
    print("raised", type(exc).__name__ + ":", exc)
else:
    print("no error")
"""


def api(box: Box, call: str, *words):
    return api_error(box.python(API.format(call=call)), *words)


def unchanged(path: str, before: bytes) -> bool:
    with open(path, "rb") as f:
        return f.read() == before


def read(path: str) -> bytes:
    with open(path, "rb") as f:
        return f.read()


# ---------------------------------------------------------------- hostile data


def body(path: str) -> str:
    """A file's text less its integrity line."""
    return open(path, encoding="utf-8").read().split("\n", 1)[1]


def restamp(text: str) -> str:
    from opcov.store import data

    return data.stamped(text, text.split("\nops:\n", 1)[1].count("\n"))


def op_lines(text: str) -> tuple[str, list[str]]:
    head, ops = text.split("\nops:\n", 1)
    return head, ops.splitlines(keepends=True)


def write_tpu(box: Box, text: str) -> str:
    with open(box.tpu, "w", encoding="utf-8") as f:
        f.write(text)
    return box.tpu


def big_coverage(box: Box, name: str = "big.yaml") -> str:
    """A 50 MB coverage file of distinct ops (the tpu file's op lines, renamed), stamped."""
    head, lines = op_lines(body(TPU_FILE))
    out, size, i = [], 0, 0
    while size < BIG:
        line = lines[i % len(lines)]
        line = line.replace("aten::", f"aten::x{i}_", 1)
        out.append(line)
        size += len(line)
        i += 1
    return box.path(name, restamp(head + "\nops:\n" + "".join(out)))


def deep_opset(box: Box, depth: int = 1, digits: int = 1, nodes: int = 0) -> str:
    from opcov.store import data, opset

    doc = data.load(LLAMA, opset.validate)
    calls = "9" * digits
    tree = [
        f"{i} forward composite aten::linear float32 x1" + (f" parent={i - 1}" if i > 1 else "")
        for i in range(1, depth)
    ]
    tree.append(f"{depth} forward kernel aten::mm float32 x{calls}" + (f" parent={depth - 1}" if depth > 1 else ""))
    tree += [f"{depth + k} forward kernel aten::mm float32 x1" for k in range(1, nodes)]
    doc.update(calltree=tree, ops={"aten::mm": {"forward": {"float32": {"calls": int(calls)}}}}, mode="inference")
    doc["summary"] = {"distinct_ops": 1}
    path = os.path.join(box.cov, "models", "llama", "training.yaml")
    with open(path, "w", encoding="utf-8") as f:
        f.write(opset.dumps(doc))
    return path


# ---------------------------------------------------------------- the cases


def c_check_o_opset(box):
    before = read(box.opset)
    got, ok = one_line(box.opcov("check", box.opset, "-b", "tpu", "--coverage", box.cov, "-o", box.opset), "input")
    return got, ok and unchanged(box.opset, before)


def c_check_o_coverage(box):
    before = read(box.tpu)
    got, ok = one_line(box.opcov("check", box.opset, "-b", "tpu", "--coverage", box.cov, "-o", box.tpu))
    return got, ok and unchanged(box.tpu, before)


def c_check_o_manifest(box):
    m = box.path("m.yaml", "manifest: 1\nbackend: tpu\n")
    before = read(m)
    got, ok = one_line(box.opcov("check", box.opset, "-b", "tpu", "--coverage", box.cov, "--manifest", m, "-o", m))
    return got, ok and unchanged(m, before)


def cut_mid_line(box):
    text = body(TPU_FILE)
    _, lines = op_lines(text)
    return write_tpu(box, text[: len(text) - len(lines[-1]) // 2])


def c_check_cut(box):
    cut_mid_line(box)
    return one_line(box.opcov("check", box.opset, "-b", "tpu", "--coverage", box.cov), os.path.basename(box.tpu))


def c_api_cut(box):
    cut_mid_line(box)
    return api(box, f"opcov.check({box.opset!r}, 'tpu', coverage={box.cov!r})", os.path.basename(box.tpu))


def c_second_ops_block(box):
    head, lines = op_lines(body(TPU_FILE))
    write_tpu(box, head + "\nops:\n" + "".join(lines[:-1]) + "ops:\n" + lines[-1])
    got, ok = lint_refuses(box.opcov("lint", "--no-catalog", box.tpu))
    other = box.path("other.yaml", open(TPU_FILE, encoding="utf-8").read())
    got2, ok2 = one_line(box.opcov("diff", other, box.tpu))
    return f"lint {got}; diff {got2}", ok and ok2


def c_cut_at_line_end(box):
    text = body(TPU_FILE)
    _, lines = op_lines(text)
    write_tpu(box, text[: len(text) - len(lines[-1]) - len(lines[-2])])
    return one_line(box.opcov("summary", box.tpu))


def c_duplicate_op(box):
    text = body(TPU_FILE)
    _, lines = op_lines(text)
    write_tpu(box, restamp(text + lines[0]))
    return one_line(box.opcov("summary", box.tpu), "twice")


def c_unreadable_folder(box, command):
    if os.geteuid() == 0:
        return "skipped: root reads through permissions (tests/test_data_safety.py fakes the refusal)", None
    os.chmod(os.path.join(box.cov, "tpu"), 0)
    try:
        if command == "site":
            return one_line(box.opcov("site", "--coverage", box.cov, "--out", box.path("site")), "cannot read")
        return one_line(box.opcov("check", box.opset, "-b", "tpu", "--coverage", box.cov), "cannot read")
    finally:
        os.chmod(os.path.join(box.cov, "tpu"), 0o755)


def factory(box, name, *words, check=False):
    """Trace (or check) a factory of FACTORIES: --timeout 20 for the one that hangs (a loaded machine
    takes seconds to import torch), else the default's fraction that keeps the corpus finite."""
    timeout = "20" if name == "hang" else "300"
    out = box.path("x.yaml")
    if check:
        run = box.opcov("check", f"userfactories:{name}", "-b", "tpu", "--coverage", box.cov, "--timeout", timeout)
    else:
        run = box.opcov("trace", f"userfactories:{name}", "--out", out, "--timeout", timeout)
    got, ok = one_line(run, *words)
    return got, ok and not os.path.exists(out)


def c_dot_dot_op(box):
    from opcov.store import data

    doc = data.load(box.tpu)
    doc["ops"]["..::index"] = dict(doc["ops"]["aten::mm"])
    doc["summary"]["other_namespaces"]["overloads"] += 1
    os.unlink(box.tpu)
    data.save(doc, box.tpu)
    out = box.path("site")
    run = box.opcov("site", "--coverage", box.cov, "--out", out)
    written = {os.path.relpath(os.path.join(r, f), out) for r, _, fs in os.walk(out) for f in fs}
    said = run.out.split(": ", 1)[1].split(" files")[0] if ": " in run.out and " files" in run.out else "?"
    ok = run.code == 0 and "ops/_./index.html" in written and said.isdigit() and int(said) == len(written)
    return f"exit {run.code}: {said} written, {len(written)} exist, ops/_./index.html", ok


def c_nan_err(box):
    text = body(CPU_PROBED)
    _, lines = op_lines(text)
    cell = next(line for line in lines if "fwd: pass" in line)
    path = box.path("p.yaml", restamp(text.replace(cell, cell.replace("fwd: pass", "err: [.nan, .inf], fwd: pass", 1))))
    return lint_refuses(box.opcov("lint", "--no-catalog", path))


def c_merge_twice(box):
    p = box.path("p.yaml", open(CPU_PROBED, encoding="utf-8").read())
    os.symlink(p, box.path("again.yaml"))
    got, ok = one_line(box.opcov("merge", p, box.path("again.yaml"), "--out", box.path("m.yaml")), "twice")
    return got, ok and not os.path.exists(box.path("m.yaml"))


def probe_args(box, out):
    return ("probe", "cpu", "--ops", "^(abs|neg|exp)$", "--dtypes", "float32", "--tiers", "none", "--out", out)


def c_probe_sigkill_resume(box):
    """SIGKILL the whole probe group once it has written journal lines; --resume then names the device
    and no temporary file is left beside the output."""
    box.killed = True
    out = box.path("probed.yaml")
    journal = out + ".journal.jsonl"
    t0 = time.monotonic()
    proc = box.start(list(probe_args(box, out)))
    while time.monotonic() - t0 < 300 and _running(proc.pid):
        if os.path.exists(journal) and open(journal).read().count("\n") >= 3:
            break
        time.sleep(0.1)
    os.killpg(proc.pid, signal.SIGKILL)
    box.finish(proc, t0)
    run = box.opcov(*probe_args(box, out), "--resume")
    text = open(out, encoding="utf-8").read() if os.path.exists(out) else ""
    device = next((ln.strip() for ln in text.splitlines() if ln.strip().startswith("device:")), "no device line")
    stray = [n for n in os.listdir(box.dir) if ".tmp" in n]
    ok = run.code in (0, 1) and "unknown" not in device and not stray and text != ""
    return f"exit {run.code}: {device[:60]}; stray {stray}", ok


def c_two_resumes(box):
    box.allow(box.path("p.yaml.journal.jsonl"))  # the journal the two probes' code opens
    code = f"""
from opcov.probe.journal import Journal
from opcov.errors import OpcovError
path = {box.path("p.yaml.journal.jsonl")!r}
header = {{"settings": {{"backend": "x"}}, "created": "now", "command": "opcov probe x"}}
first = Journal(path, header, resume=False)
try:
    Journal(path, header, resume=True)
except OpcovError as exc:
    print("raised", type(exc).__name__ + ":", exc)
else:
    print("no error")
first.close()
"""
    return api_error(box.python(code), "another probe")


def c_zoo_sigint(box):
    """SIGINT to 'zoo trace --jobs 2' the moment its first worker exists (spawning the second)."""
    box.killed = True
    t0 = time.monotonic()
    proc = box.start(["zoo", "trace", "--only", "llama,bert", "--jobs", "2", "--root", box.path("m"), "--table",
                      box.path("t.tsv")])  # fmt: skip
    while time.monotonic() - t0 < 120 and _running(proc.pid):
        if _descendants(proc.pid):
            break
        time.sleep(0.005)
    os.kill(proc.pid, signal.SIGINT)
    run = box.finish(proc, t0)
    left = _wait_gone(proc.pid, 2.0)
    return (
        f"exit {run.code}: {run.err.strip()[-80:]}; left {len(left)}",
        run.code == 130 and "Traceback" not in run.err and not left,
    )


def c_zoo_sigkill(box):
    """SIGKILL the zoo's parent while its workers start: none outlives it by more than a second."""
    box.killed = True
    t0 = time.monotonic()
    proc = box.start(["zoo", "trace", "--only", "llama,bert", "--jobs", "2", "--root", box.path("m"), "--table",
                      box.path("t.tsv")])  # fmt: skip
    kids = []
    while time.monotonic() - t0 < 120 and _running(proc.pid):
        kids = _descendants(proc.pid)
        if len(kids) >= 3:  # the resource tracker and two workers
            break
        time.sleep(0.01)
    time.sleep(0.3)
    os.kill(proc.pid, signal.SIGKILL)
    run = box.finish(proc, t0)
    left = [p for p in kids if not _gone(p, 1.0)]
    return f"{len(kids)} children; {len(left)} alive 1 s after", run.code == -9 and bool(kids) and not left


def c_site_signal(box, sig):
    """SIGINT or SIGTERM to 'opcov site' alone (not its group) mid-build: its forked helper ends with it."""
    box.killed = True
    t0 = time.monotonic()
    site = ["opcov", "site", "--coverage", os.path.join(ROOT, "coverage"), "--out", box.path("site")]
    code = (  # the program as 'opcov site' runs it, with a helper forked even on a busy machine
        "import sys; from opcov import forked; forked.spare_core = forked.can_fork; "
        f"sys.argv = {site!r}; from opcov import cli; raise SystemExit(cli.main())"
    )
    proc = box.start(code, python=True)
    kids = []
    while time.monotonic() - t0 < 120 and _running(proc.pid):
        kids = _descendants(proc.pid)
        if kids:
            break
        time.sleep(0.01)
    time.sleep(0.2)
    os.kill(proc.pid, sig)
    run = box.finish(proc, t0)
    left = [p for p in kids if not _gone(p, 0.3)]
    ok = run.code in (130, 143) and "Traceback" not in run.err and bool(kids) and not left
    return f"exit {run.code}; {len(kids)} forked helper(s), {len(left)} alive 0.3 s after", ok


def c_probe_tmp(box):
    run = box.opcov(*probe_args(box, box.path("probed.yaml")))
    left = [n for n in os.listdir(box.tmp) if not n.startswith(TORCH_CACHE)]
    return f"exit {run.code}; TMPDIR holds {left} (torch's own cache aside)", run.code in (0, 1) and not left


def c_factory_killed_with_parent(box):
    """'opcov check' of a hanging factory, SIGKILLed: the factory's process (a grandchild) ends too."""
    box.killed = True
    t0 = time.monotonic()
    pidfile = os.path.join(box.pids, "hang.pid")
    proc = box.start(["check", "userfactories:hang", "-b", "tpu", "--coverage", box.cov])
    while time.monotonic() - t0 < 120 and not (os.path.exists(pidfile) and open(pidfile).read()):
        time.sleep(0.05)
    os.kill(proc.pid, signal.SIGKILL)
    box.finish(proc, t0)
    pid = int(open(pidfile).read())
    ok = _gone(pid, 2.0)
    if not ok:
        os.kill(pid, signal.SIGKILL)
    return f"factory process {'ended' if ok else 'still running'}", ok


def _marked(token: str) -> list[int]:
    """Live processes (not zombies) whose environment carries the run mark ``token``."""
    want = f"{CASE_VAR}={token}".encode()
    found = []
    for name in os.listdir("/proc"):
        if not name.isdigit() or int(name) == os.getpid():
            continue
        try:
            with open(f"/proc/{name}/environ", "rb") as f:
                if want not in f.read().split(b"\0"):
                    continue
            with open(f"/proc/{name}/stat") as f:
                if f.read().rsplit(")", 1)[1].split()[0] == "Z":
                    continue
        except (OSError, IndexError):
            continue
        found.append(int(name))
    return found


def _marked_running(token: str, within: float) -> list[int]:
    """The processes of run ``token`` still running ``within`` seconds after it ended (a child exits late)."""
    deadline = time.monotonic() + within
    while True:
        left = _marked(token)
        if not left or time.monotonic() > deadline:
            return left
        time.sleep(0.05)


def _kill_marked(token: str) -> None:
    for _ in range(5):
        left = _marked(token)
        if not left:
            return
        for pid in left:
            try:
                os.kill(pid, signal.SIGKILL)
            except OSError:
                pass
        time.sleep(0.05)


def _marked_outside(box) -> list[str]:
    """Files named with this case's mark outside its folder (made from a hostile name through '..'), removed
    once found: in the folders above it, the temporary folder, this checkout and the file system's root."""
    mark = f"{PWN}{box.n}"
    found = []
    places = {os.path.dirname(box.dir), os.path.dirname(os.path.dirname(box.dir)), tempfile.gettempdir(), ROOT, "/"}
    places.add(os.getcwd())
    for folder in places:
        try:
            names = os.listdir(folder)
        except OSError:
            continue
        for name in names:
            if mark in name:
                p = os.path.join(folder, name)
                found.append(p)
                if os.path.isdir(p) and not os.path.islink(p):
                    shutil.rmtree(p, ignore_errors=True)
                else:
                    try:
                        os.unlink(p)
                    except OSError:
                        pass
    return found


def _running(pid: int) -> bool:
    """Whether child ``pid`` has not exited, without reaping it."""
    return os.waitid(os.P_PID, pid, os.WEXITED | os.WNOHANG | os.WNOWAIT) is None


def _hwm_kb(pid: int) -> int:
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1])
    except (OSError, ValueError):
        pass
    return 0


def _descendants(pid: int) -> list[int]:
    parent_of = {}
    for name in os.listdir("/proc"):
        if name.isdigit():
            try:
                with open(f"/proc/{name}/stat") as f:
                    parent_of[int(name)] = int(f.read().rsplit(")", 1)[1].split()[1])
            except (OSError, ValueError, IndexError):
                pass
    found, frontier = [], {pid}
    while frontier:
        kids = [p for p, pp in parent_of.items() if pp in frontier and p not in found]
        found += kids
        frontier = set(kids)
    return found


def _gone(pid: int, within: float) -> bool:
    deadline = time.monotonic() + within
    while True:
        try:
            with open(f"/proc/{pid}/stat") as f:
                if f.read().rsplit(")", 1)[1].split()[0] == "Z":
                    return True
        except OSError:
            return True
        if time.monotonic() > deadline:
            return False
        time.sleep(0.02)


def _wait_gone(pgid: int, within: float) -> list[int]:
    deadline = time.monotonic() + within
    while True:
        out = subprocess.run(["ps", "-o", "pid=,stat=", "-g", str(pgid)], capture_output=True, text=True).stdout
        left = [int(ln.split()[0]) for ln in out.splitlines() if ln.strip() and not ln.split()[1].startswith("Z")]
        if not left or time.monotonic() > deadline:
            return left
        time.sleep(0.05)


def c_big_why(box):
    text = body(TPU_FILE)
    _, lines = op_lines(text)
    first = lines[0]
    long = first.rstrip("\n")[:-1] + ", why: " + "x" * (40 << 20) + "}\n"
    write_tpu(box, restamp(text.replace(first, long, 1)))
    return one_line(box.opcov("summary", box.tpu), "limit")


def c_big_coverage(box, command):
    path = big_coverage(box)
    if command == "lint":
        return lint_refuses(box.opcov("lint", "--no-catalog", path), "MiB")
    if command == "diff":
        return one_line(box.opcov("diff", box.tpu, path), "MiB")
    os.replace(path, box.tpu)
    return one_line(box.opcov("site", "--coverage", box.cov, "--out", box.path("site")), "MiB")


def grown(box, source: str, name: str) -> str:
    """A 50 MB file of ``source``'s kind: its op lines repeated under new names (its header kept), stamped."""
    head, lines = op_lines(body(source))
    out, size, i = [], 0, 0
    while size < BIG:
        line = lines[i % len(lines)].replace("aten::", f"aten::x{i}_", 1)
        out.append(line)
        size += len(line)
        i += 1
    return box.path(name, restamp(head + "\nops:\n" + "".join(out)))


def c_big_opset(box):
    """A 50 MB op set: the llama op set's op lines repeated under new names (a header and tree kept)."""
    return lint_refuses(box.opcov("lint", "--no-catalog", grown(box, LLAMA, "bigset.yaml")), "MiB")


def c_big_tree(box):
    path = deep_opset(box, nodes=700_000)
    return one_line(box.opcov("check", path, "-b", "tpu", "--coverage", box.cov), "MiB")


def c_big_probed(box):
    p = grown(box, CPU_PROBED, "p.yaml")
    return one_line(box.opcov("merge", p, "--out", box.path("m.yaml")), "MiB")


def c_big_manifest(box):
    m = box.path(
        "m.yaml",
        "manifest: 1\nbackend: tpu\nclaims:\n" + "".join(f"  aten::x{i}: [float32]\n" for i in range(BIG // 24)),
    )
    return one_line(box.opcov("check", box.opset, "-b", "tpu", "--coverage", box.cov, "--manifest", m), "MiB")


def c_also_mutation(box, old, new, *words):
    text = body(TPU_FILE)
    write_tpu(box, text.replace(old, new, 1))
    return one_line(box.opcov("summary", box.tpu), *words)


def c_skipped_reason(box):
    text = body(CPU_PROBED)
    _, lines = op_lines(text)
    skipped = next(line for line in lines if "{skipped: random}" in line)
    p = box.path("p.yaml", restamp(text.replace(skipped, skipped.replace("random", "because"))))
    return one_line(box.opcov("summary", p), "because")


def c_resume_no_journal(box):
    return one_line(box.opcov(*probe_args(box, box.path("probed.yaml")), "--resume"), "journal")


def c_empty_opset(box):
    from opcov.store import data, opset

    doc = data.load(LLAMA, opset.validate)
    doc.update(ops={}, calltree=[], summary={"distinct_ops": 0})
    p = box.path("empty.yaml", opset.dumps(doc))
    return one_line(box.opcov("check", p, "-b", "tpu", "--coverage", box.cov), "no ops")


def c_stdout(box, how):
    t0 = time.monotonic()
    if how == "full":
        with open("/dev/full", "w") as full:
            run = box.finish(box.start(["summary", box.tpu], stdout=full), t0)
    else:
        run = box.finish(box.start(["summary", box.tpu], stdout=subprocess.DEVNULL, close_fds=True,
                                   preexec_fn=lambda: os.close(1)), t0)  # fmt: skip
    return one_line(run, "cannot write the output")


# ---------------------------------------------------------------- generated families (issue 43)
# Each family crosses a list of hostile inputs with the commands or readers that meet them; every case
# gets the checks of every run (run_case) on top of its own expectation.

XLA_DIR = os.path.join(ROOT, "coverage", "xla")
XLA_PROBED = os.path.join(XLA_DIR, "probed-torch-2.9.0+cu128-torch_xla-2.9.0.yaml")
XLA_REG = os.path.join(XLA_DIR, "registered-torch-2.9.0+cu128-torch_xla-2.9.0.yaml")
XLA_RUNS = [os.path.join(ROOT, "coverage", "observed", "xla", f"{m}.inference.json") for m in ("bert", "albert")]

NAMES = [  # (label, name): a name that must never become a path, nor pass as a name
    ("../", "../PWNED"),
    ("x/../../../../", "x/../../../../PWNED"),
    ("..", ".."),
    (".", "."),
    ("a slash", "a/PWNED"),
    ("an absolute path", "/tmp/PWNED"),
    ("a newline", "PWNED\nx"),
    ("a tab", "PWNED\tx"),
    ("a terminal escape", "\x1b[31mPWNED"),
    ("a carriage return", "PWNED\rx"),
    ("a leading dash", "-PWNED"),
    ("a space", " "),
    ("nothing", ""),
    ("300 characters", "PWNED" + "x" * 300),
    ("a backslash", "a\\PWNED"),
    ("a shell substitution", "$(touch PWNED)"),
    ("a glob", "PWNED*"),
    ("a leading dot", ".PWNED"),
    ("DEL", "PWNED\x7f"),
    ("a bidi override", "PWNED\u202ex"),
    ("4096 characters", "PWNED" + "x" * 4096),
    ("a byte that is not UTF-8", "PWNED\udcff"),
]
DATA_NAMES = [*NAMES, ("a NUL", "PWNED\0x")]  # no command line can carry a NUL: data can
FEW = [n for n in NAMES if n[0] in ("../", "x/../../../../", "..", "a slash", "a newline", "a leading dash",
                                    "nothing", "4096 characters")]  # fmt: skip


def refused(run: Run, *words) -> tuple[str, bool]:
    """Exit 2 and one line: opcov's own ('opcov: error: ...'), or argparse's (its usage, then one error line)."""
    lines = [ln for ln in run.err.strip().splitlines() if ln.strip()]
    said = lines[-1][:110] if lines else "(nothing on stderr)"
    own = len(lines) == 1 and lines[0].startswith("opcov: error: ")
    parser = (
        bool(lines) and lines[0].startswith("usage: ") and re.match(r"opcov [a-z]+: error: ", lines[-1]) is not None
    )
    ok = run.code == 2 and (own or parser) and all(w in lines[-1] for w in words)
    return f"exit {run.code}: {said}", ok


def refused_or_written(run: Run, out: str) -> tuple[str, bool]:
    """A value opcov may take (free text, as a contributor's name): refused in one line, or written."""
    got, ok = refused(run)
    if run.code == 0:
        return f"exit 0, {'wrote' if os.path.exists(out) else 'did not write'} {os.path.basename(out)}", os.path.exists(
            out
        )
    return got, ok


def _b(name: str) -> list[str]:
    return ["-b", name] if not name or name.startswith("-") else [f"-b{name}"]


def _opt(flag: str, value: str) -> str:
    return f"{flag}={value}"


CLI_NAME_COMMANDS = {  # label -> argv for a hostile backend (or other) name
    "check -b": lambda b, n: ["check", b.opset, *_b(n), "--coverage", b.cov],
    "ops -b": lambda b, n: ["ops", "F.relu", *_b(n), "--coverage", b.cov],
    "gaps": lambda b, n: ["gaps", "--coverage", b.cov, "--", n],
    "compare A": lambda b, n: ["compare", "--coverage", b.cov, "--", n, "tpu"],
    "compare B": lambda b, n: ["compare", "--coverage", b.cov, "--", "tpu", n],
    "scan": lambda b, n: ["scan", "--out", b.path("s.yaml"), "--", n],
    "probe": lambda b, n: ["probe", "--out", b.path("p.yaml"), "--", n],
    "plan": lambda b, n: ["plan", "--shards", "2", "--", n],
    "run -b": lambda b, n: ["run", "llama", *_b(n), "--out", b.path("r.json")],
    "trace --on": lambda b, n: ["trace", "llama", _opt("--on", n), "--out", b.path("t.yaml")],
    "summary": lambda b, n: ["summary", "--", n],
    "diff": lambda b, n: ["diff", "--", b.tpu, n],
}
MODEL_NAME_COMMANDS = {
    "check MODEL": lambda b, n: ["check", "-btpu", "--coverage", b.cov, "--", n],
    "trace MODEL": lambda b, n: ["trace", "--out", b.path("t.yaml"), "--", n],
    "run MODEL": lambda b, n: ["run", "-bcpu", "--out", b.path("r.json"), "--", n],
}


PATH_COMMANDS = ("summary", "diff", "check MODEL", "trace MODEL", "run MODEL")  # their names are paths


def c_cli_name(box, label, name):
    """A hostile name where a command takes one: refused in one line. Where the command takes a path and
    the name is one that exists ('.', '..'), reading it is an answer too."""
    name = box.pwn(name)
    run = box.opcov(*(CLI_NAME_COMMANDS.get(label) or MODEL_NAME_COMMANDS[label])(box, name), timeout=300)
    got, ok = refused(run)
    if not ok and label in PATH_COMMANDS and name and os.path.exists(os.path.join(box.dir, name)):
        return f"exit {run.code}: read {name!r}", run.code in (0, 1)
    return got, ok


def c_bundle_source(box, name):
    p = box.path(os.path.basename(XLA_PROBED), open(XLA_PROBED, encoding="utf-8").read())
    out = box.path("b.opcov-bundle.json.gz")
    return refused_or_written(box.opcov("bundle", p, _opt("--source", box.pwn(name)), "--out", out), out)


# -- bundles: made once per corpus run (assets), changed per case


class Assets:
    """Bundles to ingest and change: two probed (xla, differing in one cell) and two observed runs."""

    folder = ""

    @classmethod
    def make(cls, base: str) -> None:
        from opcov.store import bundle, data

        cls.folder = os.path.join(base, "assets")
        os.makedirs(cls.folder)
        text = open(XLA_PROBED, encoding="utf-8").read()
        other = os.path.join(cls.folder, "other", os.path.basename(XLA_PROBED))
        os.makedirs(os.path.dirname(other))
        body = text.split("\n", 1)[1]
        i = body.index("fwd: pass,")
        body = body[:i] + "fwd: error," + body[i + len("fwd: pass,") :]
        with open(other, "w", encoding="utf-8") as f:
            f.write(data.stamped(body, body.split("\nops:\n", 1)[1].count("\n")))
        for name, src in (("probed", XLA_PROBED), ("probed2", other), ("observed", XLA_RUNS[0]),
                          ("observed2", XLA_RUNS[1])):  # fmt: skip
            b = bundle.make(src, source="corpus", command="opcov bundle (hostile corpus)")
            with open(os.path.join(cls.folder, name + ".json"), "w", encoding="utf-8") as f:
                json.dump(b, f)

    @classmethod
    def load(cls, name: str) -> dict:
        with open(os.path.join(cls.folder, name + ".json"), encoding="utf-8") as f:
            return json.load(f)


def xla_box(box) -> None:
    """The case's coverage folder as a receiving machine has it: xla's registered scan (the catalogue)."""
    os.makedirs(os.path.join(box.cov, "xla"), exist_ok=True)
    shutil.copy(XLA_REG, os.path.join(box.cov, "xla"))


def rehash(b: dict) -> dict:
    b["sha256"] = hashlib.sha256(b["text"].encode("utf-8", "surrogatepass")).hexdigest()
    b["bytes"] = len(b["text"].encode("utf-8", "surrogatepass"))
    return b


def write_gz(box, payload: bytes, name: str = "hostile.opcov-bundle.json.gz") -> str:
    path = box.path(name)
    with open(path, "wb") as f:
        f.write(gzip.compress(payload, mtime=0))
    return path


def dumps_b(b) -> bytes:
    return json.dumps(b, ensure_ascii=False).encode("utf-8", "surrogatepass")


def ingest(box, path: str, *words) -> tuple[str, bool]:
    """'opcov ingest PATH': refused in one line (naming ``words``), the coverage folder as it was (the run's
    own check: nothing changed in it counts as a loss, nothing new outside it as a write)."""
    xla_box(box)
    before = _tree(box.cov)
    got, ok = refused(box.opcov("ingest", path, "--coverage", box.cov, timeout=120), *words)
    return got, ok and _tree(box.cov) == before


def _tree(folder: str) -> dict:
    out = {}
    for root, _dirs, files in os.walk(folder):
        for f in files:
            p = os.path.join(root, f)
            with open(p, "rb") as fh:
                out[os.path.relpath(p, folder)] = hashlib.sha256(fh.read()).hexdigest()
    return out


def c_data_name(box, kind, field_name, name):
    """A hostile name in one field of a bundle, everything else consistent (hash redone): refused."""
    name = box.pwn(name)
    b = Assets.load(kind)
    if kind == "observed":
        doc = json.loads(b["text"])
        if field_name == "model.name":
            doc["model"]["name"] = name
        elif field_name == "model.mode":
            doc["model"]["mode"] = name
        elif field_name == "backend.name":
            doc["backend"]["name"] = name
            b["backend"]["name"] = name
        if field_name != "name":
            b["text"] = json.dumps(doc, indent=1, sort_keys=True, ensure_ascii=False) + "\n"
            b["name"] = f"{doc['model']['name']}.{doc['model']['mode']}.json"
        else:
            b["name"] = name
    elif field_name == "name":
        b["name"] = name
    else:  # backend.name, in the envelope and the data
        b["backend"]["name"] = name
        b["text"] = b["text"].replace("\n  name: xla\n", f"\n  name: {json.dumps(name)}\n", 1)
    return ingest(box, write_gz(box, dumps_b(rehash(b))))


BUNDLE_FIELDS = ("opcov_bundle", "kind", "name", "backend", "provenance", "sha256", "bytes", "text", "times")
MALFORMED = {  # label -> the value put in the field (or None: the field left out)
    "missing": None,
    "null": lambda: "__null__",
    "a list": lambda: [1, 2],
    "a number": lambda: 7,
    "a float": lambda: 1e308,
    "true": lambda: True,
    "a mapping": lambda: {"a": 1},
    "10 MB of text": lambda: "x" * (10 << 20),
    "nested 5000 deep": lambda: NESTED,
}
NESTED = "__nested__"  # put in the JSON text as 5,000 nested arrays (json.dumps cannot write them)


def c_malformed_field(box, field_name, label):
    b = Assets.load("probed")
    make = MALFORMED[label]
    if make is None:
        del b[field_name]
    else:
        value = make()
        b[field_name] = None if value == "__null__" else value
    text = json.dumps(b).replace(f'"{NESTED}"', "[" * 5000 + "]" * 5000)
    return ingest(box, write_gz(box, text.encode()))


def c_duplicate_field(box, field_name):
    """The same key twice in the bundle's JSON, the second a valid-looking other value: refused."""
    b = Assets.load("probed")
    text = json.dumps(b)
    value = json.dumps(b[field_name])
    text = text[:-1] + f', "{field_name}": {value}}}'
    return ingest(box, write_gz(box, text.encode()))


def _nested(n: int, opener: str = "[", closer: str = "]") -> bytes:
    return (opener * n + closer * n).encode()


def c_bundle_file(box, what):
    """A bundle file that is not one: each must be refused in one line, quickly, within 1 GB."""
    path = box.path("hostile.opcov-bundle.json.gz")
    if what == "empty file":
        open(path, "wb").close()
    elif what == "not gzip":
        open(path, "wb").write(b"hello")
    elif what == "gzip of nothing":
        path = write_gz(box, b"")
    elif what == "gzip of null":
        path = write_gz(box, b"null")
    elif what == "gzip of a list":
        path = write_gz(box, b"[]")
    elif what == "200,000 nested arrays":
        path = write_gz(box, _nested(200_000))
    elif what == "200,000 nested objects":
        path = write_gz(box, ('{"a":' * 200_000 + "1" + "}" * 200_000).encode())
    elif what == "a gzip bomb (2.25 GiB of spaces)":
        box.big = False  # a 2 MB input: the 1 GB limit applies
        import zlib

        comp = zlib.compressobj(9, zlib.DEFLATED, 31)
        with open(path, "wb") as f:
            chunk = b" " * (1 << 20)
            for _ in range(2304):
                f.write(comp.compress(chunk))
            f.write(comp.flush())
    elif what == "60 MB of random bytes":
        box.big = True
        with open(path, "wb") as f:
            f.write(os.urandom(60 << 20))
    elif what == "truncated":
        raw = gzip.compress(dumps_b(Assets.load("probed")))
        open(path, "wb").write(raw[: len(raw) // 2])
    elif what == "bytes after the gzip stream":
        raw = gzip.compress(dumps_b(Assets.load("probed")))
        open(path, "wb").write(raw + b"trailing")
    elif what == "two gzip members":
        raw = gzip.compress(dumps_b(Assets.load("probed")))
        open(path, "wb").write(raw + raw)
    elif what == "a UTF-8 BOM":
        path = write_gz(box, b"\xef\xbb\xbf" + dumps_b(Assets.load("probed")))
    elif what == "NaN in the JSON":
        text = json.dumps(Assets.load("probed"))
        path = write_gz(box, (text[:-1] + ', "x": NaN}').encode())
    elif what == "a lone surrogate in the text":
        b = Assets.load("probed")
        b["text"] = b["text"].replace("xla", "xla\\ud800", 1)
        path = write_gz(box, json.dumps(b).replace("\\\\ud800", "\\ud800").encode())
    elif what == "a folder":
        os.mkdir(path)
    elif what == "/dev/zero":
        path = "/dev/zero"
    elif what == "/dev/urandom":
        path = "/dev/urandom"
    elif what == "a FIFO with no writer":
        os.mkfifo(path)
    elif what == "a link to itself":
        os.symlink(path, path)
    elif what == "no such file":
        path = box.path("nothing-here.gz")
    elif what == "format 2":
        b = Assets.load("probed")
        b["opcov_bundle"] = 2
        path = write_gz(box, json.dumps(b).encode())
    elif what == "unknown field":
        b = Assets.load("probed")
        b["extra"] = 1
        path = write_gz(box, json.dumps(b).encode())
    elif what == "same length tamper":
        b = Assets.load("probed")
        i = b["text"].index("fwd: pass,")
        j = b["text"].index("fwd: error,")
        t = list(b["text"])
        t[i : i + 10], t[j : j + 11] = list("fwd: error"), list("fwd: pass,,")
        b["text"] = "".join(t)
        path = write_gz(box, json.dumps(b).encode())
    elif what == "a host path in the text":
        b = Assets.load("probed")
        b["text"] = b["text"].replace("Linux", "/home/alice/x", 1)
        path = write_gz(box, json.dumps(rehash(b)).encode())
    elif what == "times of the wrong type":
        b = Assets.load("probed")
        b["times"] = {"g": "soon"}
        path = write_gz(box, json.dumps(b).encode())
    elif what == "200,000 times":
        b = Assets.load("probed")
        b["times"] = {f"g{i}": 1.0 for i in range(200_000)}
        path = write_gz(box, json.dumps(b).encode())
    elif what == "an observed run of an unknown op":
        b = Assets.load("observed")
        doc = json.loads(b["text"])
        doc["ops"]["aten::PWNED"] = next(iter(doc["ops"].values()))
        b["text"] = json.dumps(doc, indent=1, sort_keys=True) + "\n"
        path = write_gz(box, json.dumps(rehash(b)).encode())
    timeout = 60 if what in ("a FIFO with no writer", "/dev/zero", "/dev/urandom") else 120
    xla_box(box)
    before = _tree(box.cov)
    got, ok = refused(box.opcov("ingest", path, "--coverage", box.cov, timeout=timeout))
    return got, ok and _tree(box.cov) == before


BUNDLE_FILES = (
    "empty file", "not gzip", "gzip of nothing", "gzip of null", "gzip of a list", "200,000 nested arrays",
    "200,000 nested objects", "a gzip bomb (2.25 GiB of spaces)", "60 MB of random bytes", "truncated",
    "bytes after the gzip stream", "two gzip members", "a UTF-8 BOM", "NaN in the JSON",
    "a lone surrogate in the text", "a folder", "/dev/zero", "/dev/urandom", "a FIFO with no writer",
    "a link to itself", "no such file", "format 2", "unknown field", "same length tamper",
    "a host path in the text", "times of the wrong type", "200,000 times", "an observed run of an unknown op",
)  # fmt: skip


# -- coverage files: one malformation, every reader

COVERAGE_FAULTS = {  # label -> (change to the tpu file's text, restamp after)
    "schema_version: true": (lambda t: t.replace("schema_version: 1\n", "schema_version: true\n"), True),
    "a YAML merge key": (lambda t: t.replace("backend:\n", "backend:\n  <<: {name: tpu}\n", 1), True),
    "a second backend: block": (lambda t: t.replace("evidence:", "backend:\n  name: cpu\nevidence:", 1), True),
    "an op given twice": (lambda t: t + op_lines(t)[1][0], True),
    "cut mid-line": (lambda t: t[: len(t) - len(op_lines(t)[1][-1]) // 2], False),
    "cut at a line end, unstamped": (lambda t: t[: len(t) - len(op_lines(t)[1][-1]) - len(op_lines(t)[1][-2])], False),
    "one cell edited, stamp kept": (lambda t: t, False),  # filled in by c_coverage_fault
    "an anchor and an alias": (lambda t: t.replace("backend:\n", "backend: &b\n", 1) + "other: *b\n", True),
    "a NUL byte": (lambda t: t.replace("tpu", "tp\0u", 1), False),
    "bytes that are not UTF-8": (lambda t: t.replace("tpu", "tp\udcffu", 1), False),
    "a count of 10^20": (lambda t: t.replace("schema_version: 1\n", "schema_version: 1\n", 1), True),
    "a 300 KB line": (
        lambda t: t.replace("\nops:\n", "\nops:\n" + '"aten::x": {why: "' + "x" * 300_000 + '"}\n', 1),
        True,
    ),
}
READERS = {
    "summary": lambda b, p: ["summary", p],
    "check": lambda b, p: ["check", b.opset, "-b", "tpu", "--coverage", b.cov],
    "diff": lambda b, p: ["diff", TPU_FILE, p],
    "lint": lambda b, p: ["lint", "--no-catalog", p],
    "gaps": lambda b, p: ["gaps", "tpu", "--coverage", b.cov],
    "compare": lambda b, p: ["compare", "tpu", "cpu", "--coverage", b.cov],
    "ops -b": lambda b, p: ["ops", "F.linear", "-b", "tpu", "--coverage", b.cov],
}


def c_coverage_fault(box, fault, reader):
    change, stamp = COVERAGE_FAULTS[fault]
    text = body(TPU_FILE)
    if fault == "one cell edited, stamp kept":
        full = open(TPU_FILE, encoding="utf-8").read()
        new = full.replace("res: registered", "res: missing", 1)
        assert new != full
    elif fault == "a count of 10^20":
        head, lines = op_lines(text)
        new = restamp(head + "\nops:\n" + "".join(lines) + '"aten::zz": {res: kernel, calls: 100000000000000000000}\n')
    else:
        new = change(text)
        new = restamp(new) if stamp else new
    with open(box.tpu, "w", encoding="utf-8", errors="surrogateescape") as f:
        f.write(new)
    run = box.opcov(*READERS[reader](box, box.tpu), timeout=300)
    if reader == "lint":
        return f"exit {run.code}", run.code == 1 and "Traceback" not in run.err
    return refused(run)


# -- outputs: every writer, every kind of output it must refuse

WRITERS = {  # label -> (argv with OUT, the input it reads)
    "check -o": lambda b, o: ["check", b.opset, "-b", "tpu", "--coverage", b.cov, "-o", o],
    "scan --out": lambda b, o: ["scan", "meta", "--out", o],
    "probe --out": lambda b, o: [
        "probe",
        "cpu",
        "--ops",
        "^abs$",
        "--dtypes",
        "float32",
        "--tiers",
        "none",
        "--out",
        o,
    ],
    "merge --out": lambda b, o: ["merge", b.probed, "--out", o],
    "trace --out": lambda b, o: ["trace", "llama", "--out", o],
    "zoo --table": lambda b, o: ["zoo", "trace", "--only", "llama", "--root", b.path("m"), "--table", o],
    "bundle --out": lambda b, o: ["bundle", b.probed, "--source", "x", "--out", o],
    "plan --out": lambda b, o: ["plan", "cpu", "--shards", "2", "--ops", "^abs$", "--times", b.times, "--out", o],
    "run --out": lambda b, o: ["run", "llama", "-b", "cpu", "--out", o],
    "expect --out": lambda b, o: ["expect", "tpu", "--vendor-tests", b.vendor, "--out", o],
    "site --out": lambda b, o: ["site", "--coverage", b.cov, "--out", o],
    "trace --mode serve --out": lambda b, o: ["trace", "llama", "--mode", "serve", "--out", o],
    "trace --path compile --out": lambda b, o: ["trace", "nn:convnet", "--mode", "inference", "--path", "compile",
                                                "--out", o],
    "check --path compile -o": lambda b, o: ["check", b.compiled, "-b", "cpu", "--path", "compile", "-o", o],
}  # fmt: skip
COMPILED_LLAMA = os.path.join(ROOT, "coverage", "models", "llama", "compile", "inductor-inference.yaml")
OUTPUTS = ("its own input", "a folder", "a link out of the folder", "under /proc", "a file of another kind")


def writer_box(box) -> None:
    box.probed = box.path("probed-torch-2.13.0+cpu.yaml", open(CPU_PROBED, encoding="utf-8").read())
    box.times = box.path("times.json", '{"abs": 1.0}\n')
    box.compiled = box.path("inductor-inference.yaml", open(COMPILED_LLAMA, encoding="utf-8").read())
    box.vendor = os.path.join(box.dir, "vendor")
    os.makedirs(os.path.join(box.vendor, "tests"))
    with open(os.path.join(box.vendor, "tests", "ops_test.py"), "w") as f:
        f.write("import torch\n")


def c_output(box, writer, kind):
    """An output that must be refused: nothing changes there (the run is told to write nowhere)."""
    writer_box(box)
    inputs = {
        "check -o": box.opset, "merge --out": box.probed, "trace --out": box.opset, "bundle --out": box.probed,
        "plan --out": box.times, "expect --out": os.path.join(box.vendor, "tests", "ops_test.py"), "site --out": box.cov,
        "trace --mode serve --out": box.opset, "trace --path compile --out": box.opset,
        "check --path compile -o": box.compiled,
    }  # fmt: skip
    target = before = None
    if kind == "its own input":
        out = inputs[writer]
    elif kind == "a folder":
        out = box.path("afolder")
        os.mkdir(out)
        box.path("afolder/keep", "mine\n")
    elif kind == "a link out of the folder":
        target = os.path.join(os.path.dirname(box.dir), f"target-{box.n}")
        with open(target, "w") as f:
            f.write("outside\n")
        before = read(target)
        out = box.path("link")
        os.symlink(target, out)
    elif kind == "under /proc":
        out = "/proc/self/opcov-out"
    else:
        out = box.path("notes.txt", "my own notes\n")
    argv = WRITERS[writer](box, out)
    if writer.startswith("trace") and kind == "its own input":  # a saved op set as the model, --out over it
        argv = [a if a not in ("llama", "nn:convnet") else box.opset for a in argv]
    box.named_ok = False  # nothing the command writes is allowed: a refusal changes nothing
    if writer == "site --out" and kind == "a folder":
        box.allow(out)  # a site is a folder: it may be written, but never over a file that is not the site's
        run = box.opcov(*argv, timeout=300)
        kept = os.path.exists(os.path.join(out, "keep")) and read(os.path.join(out, "keep")) == b"mine\n"
        got, ok = refused(run)
        return (got, ok) if run.code != 0 else (f"exit 0, keep {'kept' if kept else 'LOST'}", kept)
    try:
        got, ok = refused(box.opcov(*argv, timeout=300))
    finally:
        if target is not None:
            ok = ok and read(target) == before
            os.unlink(target)
    return got, ok


# -- user code: run and trace of factories that misbehave

FACTORIES += """
def sys_exit():
    sys.exit(0)

def string():
    return "a model", (torch.randn(2, 4),)

def huge():
    return torch.nn.Linear(4, 4), (bytearray(30 << 30),)

def forks_and_hangs():
    import subprocess
    subprocess.Popen([sys.executable, "-c", "import time; time.sleep(300)"])
    time.sleep(300)

def daemon():
    if os.fork() == 0:
        os.setsid()
        if os.fork() == 0:
            time.sleep(300)
        os._exit(0)
    os.wait()
    return torch.nn.Linear(4, 4), (torch.randn(2, 4),)
"""
USER_CODE = {  # factory -> (words in the error, or None: it runs; timeout)
    "segfault": (("crashed", "SIGSEGV"), "300"),
    "aborts": (("crashed", "SIGABRT"), "300"),
    "exits": (("exit status 0",), "300"),
    "sys_exit": (("SystemExit",), "300"),
    "string": (("nn.Module",), "300"),
    "huge": (("MemoryError",), "300"),
    "hang": (("did not finish within 20 s",), "20"),
    "forks_and_hangs": (("did not finish within 20 s",), "20"),
    "daemon": (None, "300"),
}


def c_user_code(box, command, name):
    words, timeout = USER_CODE[name]
    out = box.path("x.json" if command == "run" else "x.yaml")
    more = ("-b", "cpu") if command == "run" else ()
    run = box.opcov(command, f"userfactories:{name}", *more, "--mode", "inference", "--timeout", timeout,
                    "--out", out, timeout=400)  # fmt: skip
    if words is None:  # it runs; what it left running is the run's own check
        return f"exit {run.code}", run.code == 0 and os.path.exists(out)
    got, ok = one_line(run, *words)
    return got, ok and not os.path.exists(out)


# -- expect: a vendor checkout that is hostile


VENDOR = os.path.join(ROOT, "tests", "data", "vendortests")  # a small TorchTPU-shaped checkout


def c_expect(box, what):
    """A vendor checkout whose test file is hostile (the fixture checkout otherwise): one line, or (a big
    but valid file) an expectation written."""
    shutil.copytree(VENDOR, os.path.join(box.dir, "vendor"))
    tests = os.path.join(box.dir, "vendor", "tests")
    src = os.path.join(tests, "ops_test.py")
    if what.startswith("op_testing.py: "):
        src, what = os.path.join(tests, "op_testing.py"), what.removeprefix("op_testing.py: ")
    if what not in ("no tests folder",):
        os.unlink(src)
    if what == "random bytes":
        open(src, "wb").write(os.urandom(200_000))
    elif what == "100,000 nested unary operators":
        open(src, "w").write("x = " + "-" * 100_000 + "1\n")
    elif what == "100,000 chained attributes":
        open(src, "w").write("x = a" + ".b" * 100_000 + "\n")
    elif what == "100,000 nested brackets":
        open(src, "w").write("x = " + "(" * 100_000 + ")" * 100_000 + "\n")
    elif what == "a 195 MB source":
        box.big = True
        with open(src, "w") as f:
            line = "x = 1  # " + "y" * 90 + "\n"
            for _ in range((195 << 20) // len(line)):
                f.write(line)
    elif what == "a 40 MB source":
        with open(src, "w") as f:
            line = "x = 1  # " + "y" * 90 + "\n"
            for _ in range((40 << 20) // len(line)):
                f.write(line)
    elif what == "a NUL byte":
        open(src, "wb").write(b"import torch\x00\n")
    elif what == "a folder named ops_test.py":
        os.mkdir(src)
    elif what == "a link loop":
        os.symlink(src, src)
    elif what == "no tests folder":
        shutil.rmtree(tests)
    elif what == "a FIFO":
        os.mkfifo(src)
    elif what == "a syntax error":
        open(src, "w").write("def (:\n")
    out = box.path("vendor.json")
    run = box.opcov("expect", "tpu", "--vendor-tests", os.path.join(box.dir, "vendor"), "--out", out,
                    timeout=120 if what == "a FIFO" else 300)  # fmt: skip
    return refused_or_written(run, out) if what == "a 40 MB source" else refused(run)


EXPECT_CASES = ("random bytes", "100,000 nested unary operators", "100,000 chained attributes",
                "100,000 nested brackets", "a 195 MB source", "a 40 MB source", "a NUL byte",
                "a folder named ops_test.py", "a link loop", "no tests folder", "a FIFO", "a syntax error",
                "op_testing.py: random bytes", "op_testing.py: 100,000 nested brackets",
                "op_testing.py: a link loop")  # fmt: skip


# -- plan


def c_plan(box, what):
    times = box.path("times.json", '{"abs": 1.0}\n')
    args = ["plan", "cpu", "--ops", "^(abs|neg)$"]
    if what == "--shards 1000000000":
        run = box.opcov(*args, "--shards", "1000000000", timeout=300)
        return f"exit {run.code}", run.code in (0, 2) and "Traceback" not in run.err
    if what == "--shards 10^30":
        run = box.opcov(*args, "--shards", "1" + "0" * 30, timeout=300)
        return f"exit {run.code}", run.code in (0, 2) and "Traceback" not in run.err
    if what == "--shards 0":
        return refused(box.opcov(*args, "--shards", "0", timeout=300))
    if what == "--times T --out T":
        before = read(times)
        got, ok = refused(box.opcov(*args, "--shards", "2", "--times", times, "--out", times, timeout=300))
        return got, ok and read(times) == before
    if what == "--times: not JSON":
        open(times, "w").write("{not json")
    elif what == "--times: 200,000 nested arrays":
        open(times, "wb").write(_nested(200_000))
    elif what == "--times: a string for a time":
        open(times, "w").write('{"abs": "soon"}')
    elif what == "--times: NaN":
        open(times, "w").write('{"abs": NaN}')
    elif what == "--times: 50 MB":
        with open(times, "w") as f:
            f.write("{" + ", ".join(f'"g{i}": 1.0' for i in range(3_000_000)) + "}")
    elif what == "--times: a folder":
        os.unlink(times)
        os.mkdir(times)
    elif what == "--times: /dev/zero":
        times = "/dev/zero"
    elif what == "--times: the same key twice":
        open(times, "w").write('{"abs": 1.0, "abs": 2.0}')
    return refused(box.opcov(*args, "--shards", "2", "--times", times, timeout=300))


PLAN_CASES = ("--shards 1000000000", "--shards 10^30", "--shards 0", "--times T --out T", "--times: not JSON",
              "--times: 200,000 nested arrays", "--times: a string for a time", "--times: NaN", "--times: 50 MB",
              "--times: a folder", "--times: /dev/zero", "--times: the same key twice")  # fmt: skip


# -- bundle: hostile inputs to pack


def c_bundle_input(box, what):
    out = box.path("b.opcov-bundle.json.gz")
    if what == "a folder":
        p = box.path("afolder")
        os.mkdir(p)
    elif what == "a registered file":
        p = box.tpu
    elif what == "an op set":
        p = box.opset
    elif what == "/dev/zero":
        p = "/dev/zero"
    elif what == "a FIFO":
        p = box.path("fifo.yaml")
        os.mkfifo(p)
    elif what == "a 50 MB probed file":
        p = grown(box, CPU_PROBED, "probed-torch-2.13.0+cpu.yaml")
    elif what == "an observed run with a hostile model name":
        doc = json.load(open(XLA_RUNS[0]))
        doc["model"]["name"] = box.pwn("../PWNED")
        p = box.path("run.json", json.dumps(doc))
    else:  # a probed file cut mid-line
        text = open(CPU_PROBED, encoding="utf-8").read()
        p = box.path("probed-torch-2.13.0+cpu.yaml", text[: len(text) // 2])
    run = box.opcov("bundle", p, "--source", "x", "--out", out, timeout=120)
    got, ok = refused(run)
    return got, ok and not os.path.exists(out)


BUNDLE_INPUTS = ("a folder", "a registered file", "an op set", "/dev/zero", "a FIFO", "a 50 MB probed file",
                 "an observed run with a hostile model name", "a probed file cut mid-line")  # fmt: skip


# -- two writers at once


def c_two_ingests(box, kind, onto_existing):
    """Two 'opcov ingest' of different bundles into one coverage folder at once: both land."""
    xla_box(box)
    a, b = (f"{kind}", f"{kind}2")
    paths = [write_gz(box, dumps_b(Assets.load(n)), f"{n}.opcov-bundle.json.gz") for n in (a, b)]
    if onto_existing and kind == "probed":
        shutil.copy(XLA_PROBED, os.path.join(box.cov, "xla"))
    t0 = time.monotonic()
    procs = [box.start(["ingest", p, "--coverage", box.cov]) for p in paths]
    runs = box.finish_all(procs, t0, timeout=300)
    shas = {Assets.load(n)["sha256"] for n in (a, b)}
    if kind == "probed":
        target = os.path.join(box.cov, "xla", os.path.basename(XLA_PROBED))
        text = open(target, encoding="utf-8").read() if os.path.exists(target) else ""
        landed = {s for s in shas if s in text}
    else:
        landed = set()
        for n in ("bert", "albert"):
            p = os.path.join(box.cov, "observed", "xla", f"{n}.inference.json")
            if os.path.exists(p):
                landed |= {s for s in shas if s in open(p).read()}
    lint = box.opcov("lint", "--no-catalog", box.cov)
    ok = all(r.code == 0 for r in runs) and landed == shas and lint.code == 0
    return f"exits {[r.code for r in runs]}; {len(landed)} of 2 contributions kept; lint exit {lint.code}", ok


def c_same_ingest_twice(box):
    """The same bundle ingested twice at once: one lands, the other says it is already there."""
    xla_box(box)
    p = write_gz(box, dumps_b(Assets.load("probed")))
    t0 = time.monotonic()
    procs = [box.start(["ingest", p, "--coverage", box.cov]) for _ in range(2)]
    runs = box.finish_all(procs, t0, timeout=300)
    codes = sorted(r.code for r in runs)
    said = [r for r in runs if r.code == 2 and "already in" in r.err]
    return f"exits {codes}", codes == [0, 2] and len(said) == 1


def c_two_merges(box):
    """Two 'opcov merge' to one output at once: one result, whole, and no temporary file left."""
    p = box.path("probed-torch-2.13.0+cpu.yaml", open(CPU_PROBED, encoding="utf-8").read())
    out = box.path("m.yaml")
    t0 = time.monotonic()
    procs = [box.start(["merge", p, "--out", out]) for _ in range(2)]
    runs = box.finish_all(procs, t0, timeout=300)
    lint = box.opcov("lint", "--no-catalog", out)
    return f"exits {[r.code for r in runs]}; lint exit {lint.code}", all(
        r.code in (0, 2) for r in runs
    ) and lint.code == 0


def c_signal_ingest(box, sig):
    """A signal to 'opcov ingest' while it writes: the coverage folder is the old one or the new one, whole,
    with no temporary file (SIGKILL: as it was or whole; what it left is shown)."""
    if sig == signal.SIGKILL:
        box.killed = True
    xla_box(box)
    shutil.copy(XLA_PROBED, os.path.join(box.cov, "xla"))
    p = write_gz(box, dumps_b(Assets.load("probed2")))
    t0 = time.monotonic()
    proc = box.start(["ingest", p, "--coverage", box.cov])
    lock = os.path.join(box.cov, "xla", ".opcov.lock")
    while time.monotonic() - t0 < 120 and _running(proc.pid) and not os.path.exists(lock):
        time.sleep(0.002)  # it holds the folder's lock: it is reading, merging or writing there
    time.sleep(0.05)
    try:
        os.kill(proc.pid, sig)
    except ProcessLookupError:
        pass
    run = box.finish(proc, t0, timeout=120)
    again = ""
    if sig == signal.SIGKILL:  # killed outright, it could not remove its lock: the next writer there does
        nxt = box.opcov("ingest", p, "--coverage", box.cov, timeout=120)
        again = f"; the next ingest: exit {nxt.code}"
    lint = box.opcov("lint", "--no-catalog", box.cov)
    stray = [n for n in os.listdir(os.path.join(box.cov, "xla")) if STRAY.search(n)]
    ok = lint.code == 0 and "Traceback" not in run.err and (run.code in (0, 130, 143) or run.code == -sig)
    return f"exit {run.code}{again}; lint exit {lint.code}; left {stray}", ok and not stray


# -- check: a backend with no data yet (the 'no data yet' row), its gates, and hostile op-set files and folders

NO_DATA_GATES = {  # label -> (extra argv, the exit status a valid op set gets with a backend that has no data)
    "no gate": ((), 0),
    "--strict": (("--strict",), 1),
    "--fail-on unknown": (("--fail-on", "unknown"), 1),
    "--require probed": (("--require", "probed"), 1),
}
ACME = """[[backend]]
name = "acme"
device_type = "acme"
dispatch_key = "PrivateUse1"
package = "acme-torch"
module = "acme_torch"
note = "Acme NPU, from the hostile corpus's records file"
setup = "pip install acme-torch: the scan needs no NPU, the probe runs on one"
"""


def records(box, text: str | bytes, name: str = "records.toml") -> str:
    """A backend records file in the case's folder, named by OPCOV_BACKEND_RECORDS for every run after."""
    path = box.path(name)
    with open(path, "wb") as f:
        f.write(text.encode("utf-8", "surrogatepass") if isinstance(text, str) else text)
    box.extra_env[RECORDS_VAR] = path
    return path


NO_DATA_BACKENDS = {  # label -> -b arguments (a records file where the backend is known by one)
    "cuda": ("-b", "cuda"),
    "cuda and tpu": ("-b", "cuda", "-b", "tpu"),
    "neuron": ("-b", "neuron"),
    "a record's backend (acme)": ("-b", "acme"),
}


def no_data_answer(run: Run, code: int) -> tuple[str, bool]:
    """The 'no data yet' row in the report, exit ``code``; a gate that fails names it on stderr."""
    gate = [ln for ln in run.err.splitlines() if ln.startswith("opcov: gate failed: ")]
    errors = [ln for ln in run.err.splitlines() if ln.startswith("opcov: error: ")]
    ok = run.code == code and "no data yet" in run.out.lower() and not errors
    ok = ok and (any("no data yet" in ln for ln in gate) if code == 1 else not gate)
    said = (errors or gate or ["no data yet" if "no data yet" in run.out.lower() else "(no row)"])[0][:100]
    return f"exit {run.code}: {said}", ok


def c_no_data(box, backends, gate):
    extra, code = NO_DATA_GATES[gate]
    if "acme" in backends:
        records(box, ACME)
    run = box.opcov("check", box.opset, *NO_DATA_BACKENDS[backends], "--coverage", box.cov, *extra, timeout=300)
    return no_data_answer(run, code)


def c_no_data_report(box, fmt):
    """A report of a backend with no data written twice to one -o file (its own report, replaced)."""
    out = box.path(f"report.{fmt}")
    runs = [box.opcov("check", box.opset, "-b", "cuda", "--coverage", box.cov, "--format", fmt, "-o", out)
            for _ in range(2)]  # fmt: skip
    text = open(out, encoding="utf-8").read() if os.path.exists(out) else ""
    return f"exits {[r.code for r in runs]}", all(r.code == 0 for r in runs) and "no data yet" in text.lower()


def _opset_with_name(box, name: str, file: str = "named.yaml") -> str:
    from opcov.store import data, opset

    doc = data.load(LLAMA, opset.validate)
    doc["model"] = dict(doc["model"], name=name)
    with open(box.path(file), "w", encoding="utf-8", errors="surrogatepass") as f:
        f.write(opset.dumps(doc))
    return box.path(file)


def _opset_folder(box, *extra) -> str:
    """A folder of op sets (llama's training op set), with ``extra`` (name, how) beside it."""
    folder = box.path("opsets")
    os.mkdir(folder)
    shutil.copy(box.opset, os.path.join(folder, "training.yaml"))
    for name, how in extra:
        p = os.path.join(folder, name)
        if how == "fifo":
            os.mkfifo(p)
        elif how.startswith("link:"):
            os.symlink(how[5:], p)
        else:
            shutil.copy(box.opset, p)
    return folder


def _outside_opset(box) -> str:
    p = os.path.join(os.path.dirname(box.dir), f"outside-{box.n}.yaml")
    shutil.copy(box.opset, p)
    box.cleanup.append(p)
    return p


HOSTILE_OPSETS = {  # label -> (make(box) -> what check is given, "answered" or words of the one-line refusal)
    "a link to the op set": (lambda b: _link(b, b.opset), "answered"),
    "a link to a folder of op sets": (lambda b: _link(b, _opset_folder(b)), "answered"),
    "a link to itself": (lambda b: _link(b, None), ""),
    "a link to /dev/zero": (lambda b: _link(b, "/dev/zero"), ""),
    "a FIFO": (lambda b: _fifo(b), ""),
    "a folder holding a FIFO": (lambda b: _opset_folder(b, ("inference.yaml", "fifo")), "not a regular file"),
    "a folder holding a link to /dev/zero": (
        lambda b: _opset_folder(b, ("inference.yaml", "link:/dev/zero")),
        "not a regular file",
    ),
    "a folder holding a link loop": (lambda b: _opset_folder(b, ("inference.yaml", "link:inference.yaml")), ""),
    "a folder holding a link out of the tree": (
        lambda b: _opset_folder(b, ("inference.yaml", "link:" + _outside_opset(b))),
        "answered",
    ),
    "a folder holding a newline in a file name": (lambda b: _opset_folder(b, ("x\ny.yaml", "copy")), "answered"),
    "an empty folder": (lambda b: _opset_folder_empty(b), "no op-set files"),
    "a 50 MB op set": (lambda b: grown(b, LLAMA, "bigset.yaml"), "MiB"),
    "100,000 nested flow brackets": (
        lambda b: b.path("deep.yaml", open(LLAMA).read() + "x: " + "[" * 100_000 + "]" * 100_000 + "\n"),
        "nesting",
    ),
    "a call tree 1,200 deep": (lambda b: _moved(b, deep_opset(b, depth=1200)), "levels deep"),
    "a NUL byte in the file": (lambda b: b.path("nul.yaml", open(LLAMA).read().replace("llama", "lla\0ma", 1)), ""),
    "bytes that are not UTF-8": (lambda b: _raw(b, open(LLAMA, "rb").read().replace(b"llama", b"lla\xffma", 1)), ""),
    "model name with a NUL": (lambda b: _opset_with_name(b, "lla\0ma"), "NUL byte"),
    "model name with a newline": (lambda b: _opset_with_name(b, "lla\nma"), "line break"),
    "model name with a terminal escape": (lambda b: _opset_with_name(b, "\x1b[31mllama"), "control character"),
    "model name of 4096 characters": (lambda b: _opset_with_name(b, "x" * 4096), "answered"),
    "model name ../../PWNED": (lambda b: _opset_with_name(b, b.pwn("../../PWNED")), "answered"),
    "a file name with a newline": (lambda b: _moved(b, b.opset, "lla\nma.yaml"), "answered"),
}


def _link(box, target) -> str:
    p = box.path("link.yaml")
    os.symlink(p if target is None else target, p)
    return p


def _fifo(box) -> str:
    p = box.path("fifo.yaml")
    os.mkfifo(p)
    return p


def _raw(box, blob: bytes) -> str:
    p = box.path("raw.yaml")
    with open(p, "wb") as f:
        f.write(blob)
    return p


def _moved(box, path: str, name: str = "moved.yaml") -> str:
    p = box.path(name)
    shutil.copy(path, p)
    return p


def _opset_folder_empty(box) -> str:
    os.mkdir(box.path("empty"))
    return box.path("empty")


def c_no_data_opset(box, what, gate):
    """A hostile op-set file or folder checked on a backend with no data: the 'no data yet' row where it is
    an op set (exit as the gate says), else one line; never a hang, a traceback or a read past its limit."""
    make, expected = HOSTILE_OPSETS[what]
    model = make(box)
    extra, code = NO_DATA_GATES[gate]
    run = box.opcov("check", model, "-b", "cuda", "--coverage", box.cov, *extra, timeout=120)
    if expected == "answered":
        got, ok = no_data_answer(run, code)
        return got, ok and not any(ord(c) < 32 and c not in "\n\t" for c in run.out)
    return refused(run, *([expected] if expected else []))


# -- trace --mode serve and --path compile: user code and outputs

SERVE_COMPILE = {  # label -> the trace options
    "trace --mode serve": ("--mode", "serve"),
    "trace --path compile": ("--mode", "inference", "--path", "compile"),
    "trace --mode serve --path compile": ("--mode", "serve", "--path", "compile"),
}
SERVE_WORDS = {  # factory -> words in serve's one line (a Linear is no text decoder: serve says so)
    "segfault": ("SIGSEGV",), "aborts": ("SIGABRT",), "exits": ("exit status 0",), "sys_exit": ("SystemExit",),
    "string": ("nn.Module",), "huge": ("MemoryError",), "daemon": ("cannot generate",),
    "prints_json_and_exits": ("exit status 0",),
}  # fmt: skip
FACTORIES += """
def prints_json_and_exits():
    print('{"doc": 1}', flush=True)
    os._exit(0)
"""


def c_serve_compile_code(box, label, name):
    """A hostile factory under serve or compile: one line naming what it did (compile: the daemon's model
    compiles, and is written), nothing left running, nothing written."""
    words, timeout = USER_CODE.get(name, ((), "300"))
    serve = "serve" in label
    if serve and name in SERVE_WORDS:
        words = SERVE_WORDS[name]
    elif name == "prints_json_and_exits":
        words = ("exit status 0",)
    out = box.path("x.yaml")
    run = box.opcov("trace", f"userfactories:{name}", *SERVE_COMPILE[label], "--timeout", timeout, "--out", out,
                    timeout=500)  # fmt: skip
    if words is None:  # the daemon's Linear under compile: it compiles (or says why not), and is written
        return f"exit {run.code}", run.code in (0, 1) and os.path.exists(out) and "Traceback" not in run.err
    got, ok = one_line(run, *words)
    return got, ok and not os.path.exists(out)


def c_default_out_link(box, label):
    """'opcov trace MODEL' with no --out writes under coverage/models/MODEL/: a link there out of the tree
    is refused, never followed."""
    target = os.path.join(os.path.dirname(box.dir), f"target-{box.n}")
    os.mkdir(target)
    box.cleanup.append(target)
    models = os.path.join(box.cov, "models")
    model, folder = ("llama", "llama") if "serve" in label else ("nn:convnet", "convnet")
    argv = ["trace", model, *SERVE_COMPILE.get(label, ("--mode", "inference"))]
    if label.endswith("compile"):  # the model's folder real, its compile/ folder a link
        os.makedirs(os.path.join(models, folder), exist_ok=True)
        os.symlink(target, os.path.join(models, folder, "compile"))
    else:
        shutil.rmtree(os.path.join(models, folder), ignore_errors=True)
        os.symlink(target, os.path.join(models, folder))
    box.named_ok = False
    got, ok = refused(box.opcov(*argv, timeout=500), "symbolic link")
    return got, ok and not os.listdir(target)


# -- folder outputs: check --replay-dir, zoo --root

FOLDER_WRITERS = {  # label -> (argv with DIR, the folder below DIR a link may stand for)
    "check --replay-dir": (lambda b, d: ["check", b.opset, "-b", "cpu", "--coverage", b.cov, "--replay",
                                         "--replay-dir", d], "cpu"),
    "zoo --root": (lambda b, d: ["zoo", "trace", "--only", "nn-convnet", "--mode", "inference", "--root", d],
                   "nn-convnet"),
}  # fmt: skip
FOLDER_OUTPUTS = ("the coverage folder", "a file", "a link below it out of the tree", "under /proc")


def c_folder_output(box, writer, kind):
    make, below = FOLDER_WRITERS[writer]
    target = None
    if kind == "the coverage folder":
        folder = box.cov
    elif kind == "a file":
        folder = box.path("notes.txt", "my own notes\n")
    elif kind == "a link below it out of the tree":
        target = os.path.join(os.path.dirname(box.dir), f"target-{box.n}")
        os.mkdir(target)
        box.cleanup.append(target)
        folder = box.path("out")
        os.mkdir(folder)
        os.symlink(target, os.path.join(folder, below))
    else:
        folder = "/proc/self/opcov-out"
    box.named_ok = False
    got, ok = refused(box.opcov(*make(box, folder), timeout=500))
    return got, ok and (target is None or not os.listdir(target))


# -- backend records: OPCOV_BACKEND_RECORDS naming hostile files

RECORDS_VAR = "OPCOV_BACKEND_RECORDS"


def _rec(**fields) -> str:
    base = {"name": "acme", "device_type": "acme", "dispatch_key": "PrivateUse1", "module": "acme_torch",
            "package": "acme-torch"}  # fmt: skip
    base.update(fields)
    return "[[backend]]\n" + "".join(f"{k} = {json.dumps(v) if not isinstance(v, bool) else str(v).lower()}\n"
                                     for k, v in base.items())  # fmt: skip


RECORD_FILES = {  # label -> (text of the file, or a callable making it and returning its path; words)
    "duplicate keys (JSON)": ('{"backend": [{"name": "acme", "device_type": "acme", "dispatch_key": "PrivateUse1",'
                              ' "name": "cpu"}]}', "given twice", "json"),
    "duplicate keys (TOML)": (_rec() + 'name = "cpu"\n', "", "toml"),
    "the same backend twice": (_rec() + _rec(), "already known", "toml"),
    "a 2 MB file": ("# " + "x" * (2 << 20) + "\n" + _rec(), "MiB", "toml"),
    "a 50 MB file": ("# " + "x" * BIG + "\n", "MiB", "toml"),
    "5,000 nested arrays (TOML)": ("x = " + "[" * 5000 + "]" * 5000 + "\n", "nested", "toml"),
    "5,000 nested inline tables (TOML)": ("x = " + "{a = " * 5000 + "1" + "}" * 5000 + "\n", "nested", "toml"),
    "200,000 nested arrays (JSON)": ('{"backend": ' + "[" * 200_000 + "]" * 200_000 + "}", "nested", "json"),
    "20 nested tables (TOML)": ("[[backend]]\n" + "x = " + "[" * 20 + "]" * 20 + "\n", "nested", "toml"),
    "a name with a slash": (_rec(name="x/../../PWNED"), "path separator", "toml"),
    "a name ..": (_rec(name=".."), "", "toml"),
    "a name with a newline": (_rec(name="acme\nPWNED"), "line break", "toml"),
    "a name with a NUL": (_rec(name="acme\0x"), "NUL", "toml"),
    "a name starting with a dash": (_rec(name="-acme"), "starts with", "toml"),
    "a device type with a slash": (_rec(device_type="../x"), "path separator", "toml"),
    "a built-in's name (cpu)": (_rec(name="cpu", reference=False), "already known", "toml"),
    "a built-in's name (tpu)": (_rec(name="tpu", setup="pip install evil"), "already known", "toml"),
    "name of the wrong type": ('[[backend]]\nname = 3\ndevice_type = "acme"\ndispatch_key = "PrivateUse1"\n',
                               "as text", "toml"),
    "PrivateUse1 with no module": ('[[backend]]\nname = "acme"\ndevice_type = "acme"\ndispatch_key = "PrivateUse1"\n',
                                   "names the module", "toml"),
    "note of the wrong type": (_rec() + "note = 3\n", "note must be text", "toml"),
    "reference as text": (_rec() + 'reference = "yes"\n', "true or false", "toml"),
    "setup with a newline": (_rec(setup="line one\n::error::PWNED"), "control character", "toml"),
    "fallback.kind unknown": (_rec() + '[backend.fallback]\nkind = "sometimes"\n', "fallback.kind", "toml"),
    "compile.deny a string": (_rec() + '[backend.compile]\nbackend = "x"\ndeny = "abc"\n', "deny", "toml"),
    "compile without its backend": (_rec() + "[backend.compile]\ntraced = true\n", "compile", "toml"),
    "a hook (read_settings)": (_rec() + 'read_settings = "os:system"\n', "unknown field", "toml"),
    "a module name with a slash": (_rec(module="../evil"), "module", "toml"),
    "a record that is a list": ('{"backend": [[1, 2]]}', "table", "json"),
    "backend that is not a list": ('backend = "acme"\n', "list", "toml"),
    "not UTF-8": (b"[[backend]]\nname = \"ac\xffme\"\n", "", "toml"),
    "a NUL byte": (b"[[backend]]\nname = \"ac\x00me\"\n", "", "toml"),
    "a folder": (None, "", "folder"),
    "/dev/zero": (None, "not a regular file", "/dev/zero"),
    "a FIFO": (None, "not a regular file", "fifo"),
    "no such file": (None, "cannot read", "missing"),
}  # fmt: skip
RECORD_COMMANDS = {  # label -> argv: what reads the records (every command: the parser lists expect's backends)
    "backends": lambda b: ["backends"],
    "check -b acme": lambda b: ["check", b.opset, "-b", "acme", "--coverage", b.cov],
    "lint": lambda b: ["lint", "--no-catalog", b.tpu],
}


def _records_path(box, what) -> str:
    text, _words, how = RECORD_FILES[what]
    if how == "folder":
        os.mkdir(box.path("records.d"))
        return box.path("records.d")
    if how == "fifo":
        os.mkfifo(box.path("records.toml"))
        return box.path("records.toml")
    if how == "missing":
        return box.path("missing.toml")
    if how == "/dev/zero":
        return "/dev/zero"
    return records(box, text, "records." + how)


def c_records(box, what, command):
    """OPCOV_BACKEND_RECORDS names a hostile file: every command says so in one line naming the file."""
    _text, words, _how = RECORD_FILES[what]
    box.extra_env[RECORDS_VAR] = _records_path(box, what)
    run = box.opcov(*RECORD_COMMANDS[command](box), timeout=120)
    return refused(run, *([words] if words else []))


RECORD_MODULES = {  # label -> (the module's source, or None: no such module; words)
    "a module that does not exist": (None, "cannot import"),
    "a module that raises on import": ("raise RuntimeError('boom on import')\n", "RuntimeError"),
    "a module that calls sys.exit(3) on import": ("import sys\nsys.exit(3)\n", "SystemExit"),
    "a module that raises KeyError on import": ("{}['x']\n", "KeyError"),
}
MODULE_COMMANDS = {
    "scan": lambda b: ["scan", "acme", "--out", b.path("s.yaml")],
    "probe": lambda b: ["probe", "acme", "--ops", "^abs$", "--dtypes", "float32", "--tiers", "none",
                        "--out", b.path("p.yaml")],
    "run": lambda b: ["run", "nn-convnet", "-b", "acme", "--mode", "inference", "--out", b.path("r.json")],
    "check -b acme --strict": lambda b: ["check", b.opset, "-b", "acme", "--coverage", b.cov, "--strict"],
}  # fmt: skip


def c_record_module(box, what, command):
    """A valid record whose module is missing or fails on import: the commands that import it say so in one
    line, write nothing; check (which imports nothing) shows the 'no data yet' row and fails its gate."""
    source, words = RECORD_MODULES[what]
    name = f"acme_mod_{box.n.replace('-', '_')}"
    if source is not None:
        box.path(f"{name}.py", source)
    records(box, _rec(module=name, package=name.replace("_", "-")))
    run = box.opcov(*MODULE_COMMANDS[command](box), timeout=300)
    if command.startswith("check"):
        return no_data_answer(run, 1)
    got, ok = one_line(run, words)
    return got, ok and not any(os.path.exists(box.path(f)) for f in ("s.yaml", "p.yaml", "r.json"))


def c_records_ok(box):
    """A good records file: the backend it adds is listed, and checked as 'no data yet'."""
    records(box, ACME)
    listed = box.opcov("backends", "--format", "json")
    names = [b.get("name") for b in json.loads(listed.out)] if listed.code == 0 else []
    got, ok = no_data_answer(box.opcov("check", box.opset, "-b", "acme", "--coverage", box.cov), 0)
    return f"listed: {'acme' in names}; {got}", ok and "acme" in names


def generated() -> list[Case]:
    N, D, B, OUT, U, X, W = ("name", "data name", "bundle", "output", "user code", "expect/plan/bundle", "writers")
    C = Case
    out = []
    for label in CLI_NAME_COMMANDS:
        for nl, name in NAMES:
            out.append(C(N, f"{label} {nl}", "one line, exit 2", lambda b, m=label, n=name: c_cli_name(b, m, n)))
    for label in MODEL_NAME_COMMANDS:
        for nl, name in FEW:
            out.append(C(N, f"{label} {nl}", "one line, exit 2", lambda b, m=label, n=name: c_cli_name(b, m, n)))
    for nl, name in NAMES:
        out.append(C(N, f"bundle --source {nl}", "refused, or written", lambda b, n=name: c_bundle_source(b, n)))
    fields = [("probed", "name"), ("probed", "backend.name"), ("observed", "name"), ("observed", "model.name"),
              ("observed", "model.mode"), ("observed", "backend.name")]  # fmt: skip
    for kind, fname in fields:
        for nl, name in DATA_NAMES:
            out.append(C(D, f"ingest: {kind} {fname} {nl}", "one line, coverage unchanged",
                         lambda b, k=kind, f=fname, n=name: c_data_name(b, k, f, n)))  # fmt: skip
    for fname in BUNDLE_FIELDS:
        for label in MALFORMED:
            if (fname, label) in (("times", "a mapping"), ("times", "missing")):
                continue  # valid: a bundle from before opcov bundled group times has none
            out.append(C(B, f"ingest: bundle {fname} {label}", "one line, coverage unchanged",
                         lambda b, f=fname, m=label: c_malformed_field(b, f, m)))  # fmt: skip
        out.append(C(B, f"ingest: bundle {fname} given twice", "one line, coverage unchanged",
                     lambda b, f=fname: c_duplicate_field(b, f)))  # fmt: skip
    for what in BUNDLE_FILES:
        out.append(
            C(B, f"ingest: {what}", "one line, coverage unchanged, <= 1 GB", lambda b, w=what: c_bundle_file(b, w))
        )
    for fault in COVERAGE_FAULTS:
        for reader in READERS:
            out.append(C("reader", f"{reader}: coverage file with {fault}", "one line (lint: exit 1)",
                         lambda b, f=fault, r=reader: c_coverage_fault(b, f, r)))  # fmt: skip
    for writer in WRITERS:
        for kind in OUTPUTS:
            if kind == "its own input" and writer in ("scan --out", "probe --out", "zoo --table", "run --out"):
                continue  # they read no file a user names
            out.append(C(OUT, f"{writer} {kind}", "one line, nothing written",
                         lambda b, w=writer, k=kind: c_output(b, w, k)))  # fmt: skip
    for command in ("run", "trace"):
        for name in USER_CODE:
            out.append(C(U, f"{command}: factory {name}", "one line (daemon: runs), nothing left running",
                         lambda b, c=command, n=name: c_user_code(b, c, n)))  # fmt: skip
    for what in EXPECT_CASES:
        out.append(C(X, f"expect: {what}", "one line", lambda b, w=what: c_expect(b, w)))
    for what in PLAN_CASES:
        out.append(C(X, f"plan {what}", "one line or a bounded plan", lambda b, w=what: c_plan(b, w)))
    for what in BUNDLE_INPUTS:
        out.append(C(X, f"bundle: {what}", "one line, nothing written", lambda b, w=what: c_bundle_input(b, w)))
    for kind in ("probed", "observed"):
        for existing in (False, True) if kind == "probed" else (False,):
            for trial in (1, 2, 3):
                out.append(C(W, f"two ingests of {kind} bundles at once{' onto a snapshot' if existing else ''} #{trial}",
                             "both kept, lint passes", lambda b, k=kind, e=existing: c_two_ingests(b, k, e)))  # fmt: skip
    out.append(C(W, "the same bundle ingested twice at once", "one lands, one 'already in'", c_same_ingest_twice))
    out.append(C(W, "two merges to one output at once", "a whole file", c_two_merges))
    for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGKILL):
        out.append(C(W, f"ingest: {sig.name} while writing", "old or new, whole, no temporary file",
                     lambda b, s=sig: c_signal_ingest(b, s)))  # fmt: skip
    return out + generated_since()


def generated_since() -> list[Case]:
    """The families of the commands and readers added since the first corpus: check's 'no data yet' row,
    trace --mode serve and --path compile, check --replay-dir and zoo --root, the backend records reader."""
    ND, U, OUT, R = "no data yet", "user code", "output", "records"
    C = Case
    out = []
    for backends in NO_DATA_BACKENDS:
        for gate in NO_DATA_GATES:
            out.append(C(ND, f"check -b {backends} (no data) {gate}", "the 'no data yet' row; the gate fails on it",
                         lambda b, k=backends, g=gate: c_no_data(b, k, g)))  # fmt: skip
    for fmt in ("text", "json", "markdown", "junit", "github"):
        out.append(C(ND, f"check -b cuda (no data) --format {fmt} -o twice", "written, its own report replaced",
                     lambda b, f=fmt: c_no_data_report(b, f)))  # fmt: skip
    for what in HOSTILE_OPSETS:
        for gate in NO_DATA_GATES:
            out.append(C(ND, f"check -b cuda (no data) {gate}: {what}", "the row, or one line",
                         lambda b, w=what, g=gate: c_no_data_opset(b, w, g)))  # fmt: skip
    for label in SERVE_COMPILE:
        for name in (*USER_CODE, "prints_json_and_exits"):
            out.append(C(U, f"{label}: factory {name}", "one line (compile: the daemon's runs), nothing left",
                         lambda b, m=label, n=name: c_serve_compile_code(b, m, n)))  # fmt: skip
    for label in ("trace", *SERVE_COMPILE):
        out.append(C(OUT, f"{label} (no --out): the model's folder a link out of the tree", "one line, nothing written",
                     lambda b, m=label: c_default_out_link(b, m)))  # fmt: skip
    for writer in FOLDER_WRITERS:
        for kind in FOLDER_OUTPUTS:
            if kind == "the coverage folder" and writer == "zoo --root":
                continue  # the zoo reads no coverage folder
            out.append(C(OUT, f"{writer} {kind}", "one line, nothing written",
                         lambda b, w=writer, k=kind: c_folder_output(b, w, k)))  # fmt: skip
    for what in RECORD_FILES:
        for command in RECORD_COMMANDS:
            out.append(C(R, f"{command}: OPCOV_BACKEND_RECORDS {what}", "one line naming the file",
                         lambda b, w=what, c=command: c_records(b, w, c)))  # fmt: skip
    for what in RECORD_MODULES:
        for command in MODULE_COMMANDS:
            out.append(C(R, f"{command}: a record naming {what[2:]}", "one line; check: the 'no data yet' row",
                         lambda b, w=what, c=command: c_record_module(b, w, c)))  # fmt: skip
    out.append(C(R, "backends, check: a good records file", "listed; check: 'no data yet'", c_records_ok))
    return out


def cases() -> list[Case]:
    L, T, A, M, E = "silent loss", "traceback", "abort", "memory", "also"
    one = "one line, exit 2"
    C = Case
    return [
        C(L, "check -o its own op set", one + ", op set unchanged", c_check_o_opset),
        C(L, "check -o a coverage file", one + ", file unchanged", c_check_o_coverage),
        C(L, "check --manifest M -o M", one + ", manifest unchanged", c_check_o_manifest),
        C(L, "check: coverage cut mid-line", one + " naming the file", c_check_cut),
        C(L, "opcov.check(): coverage cut mid-line", "OpcovError naming the file", c_api_cut),
        C(L, "second ops: block, no integrity line", "lint exit 1, diff refuses", c_second_ops_block),
        C(L, "unstamped file cut at a line end", one, c_cut_at_line_end),
        C(L, "duplicate op keys, stamped", one + " (twice)", c_duplicate_op),
        C(L, "unreadable backend folder: site", one, lambda b: c_unreadable_folder(b, "site")),
        C(L, "factory exits with status 0", one + ", no --out file", lambda b: factory(b, "exits", "exit status 0")),
        C(L, "op named ..::index on the site", "written inside ops/, count true", c_dot_dot_op),
        C(L, "err: [.nan, .inf] in probed data", "lint exit 1", c_nan_err),
        C(L, "merge A A (a link to A)", one + " (twice), nothing written", c_merge_twice),
        C(L, "probe: SIGKILL group, then --resume", "device named, no .tmp file", c_probe_sigkill_resume),
        C(T, "call tree 1,200 deep: check", one, lambda b: one_line(
            b.opcov("check", deep_opset(b, depth=1200), "-b", "tpu", "--coverage", b.cov), "levels deep")),
        C(T, "call count of 400 digits: check", one, lambda b: one_line(
            b.opcov("check", deep_opset(b, digits=400), "-b", "tpu", "--coverage", b.cov), "calls")),
        C(T, "unreadable backend folder: check", one, lambda b: c_unreadable_folder(b, "check")),
        C(T, "stdout on a full disk", one, lambda b: c_stdout(b, "full")),
        C(T, "stdout closed", one, lambda b: c_stdout(b, "closed")),
        C(T, "trace --set x=[unclosed", one, lambda b: one_line(b.opcov("trace", "llama", "--set", "x=[unclosed"),
                                                                 "not a YAML value")),
        C(T, "trace --set x=&a [*a]", one, lambda b: one_line(b.opcov("trace", "llama", "--set", "x=&a [*a]"), "anchor")),
        C(T, "factory returns (model, None)", one, lambda b: factory(b, "no_inputs", "NoneType")),
        C(T, "factory raises a BaseException", one, lambda b: factory(b, "base_exception", "BadExit")),
        C(T, "factory closes stdout", one, lambda b: factory(b, "closes_stdout", "standard output")),
        C(T, "two probe --resume on one journal", "OpcovError: in use", c_two_resumes),
        C(T, "SIGINT to zoo trace --jobs 2 spawning", "exit 130, no traceback, no worker left", c_zoo_sigint),
        C(T, "opcov.check(): NUL byte in a name", "OpcovError naming it", lambda b: api(
            b, "opcov.check('lla\\0ma', 'tpu')", "NUL")),
        C(T, "opcov.check(coverage=123)", "OpcovError naming coverage", lambda b: api(
            b, "opcov.check('llama', 'tpu', coverage=123)", "coverage")),
        C(T, "opcov.check(coverage=b'...')", "OpcovError naming coverage", lambda b: api(
            b, "opcov.check('llama', 'tpu', coverage=b'coverage')", "coverage")),
        C(T, "opcov.check(unknown_kw=1)", "TypeError naming the keywords", lambda b: api(
            b, "opcov.check('llama', 'tpu', unknown_kw=1)", "unknown_kw", "coverage")),
        C(T, "opcov.trace(None, None)", "OpcovError naming model", lambda b: api(
            b, "opcov.trace(None, None)", "model is of type NoneType")),
        C(A, "factory segfaults", one + " naming it", lambda b: factory(b, "segfault", "SIGSEGV", "userfactories")),
        C(A, "factory aborts", one + " naming it", lambda b: factory(b, "aborts", "SIGABRT", "userfactories")),
        C(A, "factory hangs: trace --timeout 20", one + " naming it, killed", lambda b: factory(
            b, "hang", "userfactories:hang", "20 s")),
        C(A, "factory hangs: check --timeout 20", one + " naming it, killed", lambda b: factory(
            b, "hang", "userfactories:hang", "20 s", check=True)),
        C(A, "check of a hanging factory SIGKILLed", "factory's process ends too", c_factory_killed_with_parent),
        C(M, "40 MB string in why: (summary)", one + ", <= 1 GB", c_big_why),
        C(M, "50 MB coverage file (lint)", "lint exit 1, <= 1 GB", lambda b: c_big_coverage(b, "lint")),
        C(M, "50 MB coverage file (diff)", one + ", <= 1 GB", lambda b: c_big_coverage(b, "diff")),
        C(M, "50 MB coverage file (site)", one + ", <= 1 GB", lambda b: c_big_coverage(b, "site")),
        C(M, "50 MB op set (lint)", "lint exit 1, <= 1 GB", c_big_opset),
        C(M, "call tree of 700k nodes (check)", one + ", <= 1 GB", c_big_tree),
        C(M, "50 MB probed file (merge)", one + ", <= 1 GB", c_big_probed),
        C(M, "50 MB manifest (check)", one + ", <= 1 GB", c_big_manifest),
        C(E, "site: SIGINT to the parent alone", "helper ends with it", lambda b: c_site_signal(b, signal.SIGINT)),
        C(E, "site: SIGTERM to the parent alone", "helper ends with it", lambda b: c_site_signal(b, signal.SIGTERM)),
        C(E, "zoo trace --jobs 2: parent SIGKILLed", "workers end within 1 s", c_zoo_sigkill),
        C(E, "probe leaves nothing in TMPDIR", "TMPDIR empty", c_probe_tmp),
        C(E, "check -b tpu/../cpu", one, lambda b: one_line(
            b.opcov("check", b.opset, "-b", "tpu/../cpu", "--coverage", b.cov), "not a plain name")),
        C(E, "schema_version: true", one, lambda b: c_also_mutation(b, "schema_version: 1\n", "schema_version: true\n")),
        C(E, "YAML merge key", one, lambda b: c_also_mutation(b, "backend:\n", "backend:\n  <<: {name: tpu}\n")),
        C(E, "unknown skipped: reason", one + " naming it", c_skipped_reason),
        C(E, "duplicate backend: block", one, lambda b: c_also_mutation(
            b, "evidence:", "backend:\n  name: cpu\nevidence:", "twice")),
        C(E, "check --fail-on ''", one, lambda b: one_line(
            b.opcov("check", b.opset, "-b", "tpu", "--coverage", b.cov, "--fail-on="), "--fail-on")),
        C(E, "gaps --top -1", one, lambda b: one_line(b.opcov("gaps", "tpu", "--top", "-1", "--coverage", b.cov), "--top")),
        C(E, "zoo trace --all --jobs 0", one, lambda b: one_line(b.opcov("zoo", "trace", "--all", "--jobs", "0"), "--jobs")),
        C(E, "zoo trace --all --timeout -1", one, lambda b: one_line(
            b.opcov("zoo", "trace", "--all", "--timeout=-1"), "--timeout")),
        C(E, "trace --set num_hidden_layers=-1", one, lambda b: one_line(
            b.opcov("trace", "llama", "--set", "num_hidden_layers=-1"), "negative")),
        C(E, "probe --resume without a journal", one, c_resume_no_journal),
        C(E, "op set with no ops: check", one + ", never RUNS", c_empty_opset),
    ] + generated()  # fmt: skip


PROBLEMS = ("outside", "lost", "traceback", "signal", "hang", "memory", "left")  # counted over every run
PROBLEM_WORDS = {
    "outside": "writes outside the named output",
    "lost": "silent losses",
    "traceback": "tracebacks",
    "signal": "deaths by signal",
    "hang": "hangs",
    "memory": "runs over 1 GB (inputs <= 50 MB)",
    "left": "processes or temporary files left behind",
}


def run_case(case: Case, base: str) -> tuple[str, bool | None, float, float, dict]:
    """Run one case in a fresh folder: (what it got, ok, peak MB, seconds, problems by kind). On top of the
    case's own expectation every run must show none of PROBLEMS."""
    folder = tempfile.mkdtemp(prefix="case-", dir=base)
    box = Box(folder)
    try:
        got, ok = case.fn(box)
    except Exception as exc:  # noqa: BLE001 - the script's own failure is a failed case, shown
        got, ok = f"the case itself failed: {type(exc).__name__}: {str(exc)[:100]}", False
    rss = max((r.rss_mb for r in box.runs), default=0.0)
    secs = sum(r.seconds for r in box.runs)
    problems: dict[str, list[str]] = {}

    def note(kind, text):
        problems.setdefault(kind, []).append(text)

    for r in box.runs:
        if r.outside:
            note("outside", f"wrote {', '.join(r.outside[:2])}")
        if r.lost:
            note("lost", f"changed or removed {', '.join(r.lost[:2])}")
        if "Traceback" in r.err:
            note("traceback", "a traceback")
        if r.code < 0 and not box.killed and not r.hung:
            note("signal", f"died by {signal.Signals(-r.code).name if -r.code in signal.valid_signals() else r.code}")
        if r.hung:
            note("hang", f"killed after {r.seconds:.0f} s")
        if r.left:
            note("left", f"{len(r.left)} process(es) left running")
        stray = [p for p in r.stray if os.path.lexists(os.path.join(box.dir, p))]  # still there after every run
        if stray:  # (a lock another run of the case held when this one ended is not left behind)
            note("left", f"left {', '.join(stray[:2])}")
    if rss > MAX_RSS_MB and not box.big:
        note("memory", f"{rss:,.0f} MB")
    if box.killed:  # a process killed outright cannot clean up: the next opcov removes what it left
        box.opcov("backends")
    left = [n for n in _left_in(box.tmp) if not n.startswith(TORCH_CACHE)]
    if left:
        note("left", f"left in TMPDIR: {', '.join(left[:3])}")
    if problems and ok is not None:
        got, ok = got + " [" + "; ".join(t for v in problems.values() for t in v) + "]", False
    shutil.rmtree(folder, ignore_errors=True)
    for p in box.cleanup:
        if os.path.isdir(p) and not os.path.islink(p):
            shutil.rmtree(p, ignore_errors=True)
        elif os.path.lexists(p):
            os.unlink(p)
    return got, ok, rss, secs, problems


TORCH_CACHE = "torchinductor_"  # torch's own compile cache (torchinductor_<user>), kept by torch on purpose


def _left_in(tmp: str) -> list[str]:
    for _ in range(20):  # a child the case killed may be removing its folder still
        left = os.listdir(tmp)
        if not left:
            return []
        time.sleep(0.1)
    return left


def commands_of(selected) -> list[str]:
    """The opcov commands the cases name (from their names: the command word first)."""
    words = {"check", "trace", "ops", "backends", "scan", "lint", "summary", "diff", "gaps", "compare", "probe",
             "merge", "site", "zoo", "plan", "bundle", "ingest", "run", "expect"}  # fmt: skip
    found = set()
    for c in selected:
        for w in re.findall(r"[a-z]+", c.name):
            if w in words:
                found.add(w)
    return sorted(found)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--only", action="append", help="run only the cases whose name contains this (repeatable)")
    ap.add_argument("--list", action="store_true", help="list the cases, run none")
    ap.add_argument("--write-docs", action="store_true", help="rewrite the figures section of docs/data-safety.md")
    args = ap.parse_args()
    # Started in the background by a shell without job control, this process ignores SIGINT, and every
    # command it runs would inherit that (an ignored signal stays ignored across exec): the SIGINT cases
    # would then test the shell, not opcov. A handler of its own is reset to the default in each child.
    signal.signal(signal.SIGINT, signal.default_int_handler)
    selected = [c for c in cases() if not args.only or any(w in c.name for w in args.only)]
    if args.list:
        for c in selected:
            print(f"{c.bullet:18} {c.name!r}")
        print(f"{len(selected)} cases")
        return 0
    rows = []
    counts = dict.fromkeys(PROBLEMS, 0)
    base = tempfile.mkdtemp(prefix="opcov-hostile-")
    t0 = time.monotonic()
    Assets.make(base)
    try:
        for case in selected:
            got, ok, rss, secs, problems = run_case(case, base)
            for kind in problems:
                counts[kind] += 1
            mark = "skipped" if ok is None else ("ok" if ok else "FAIL")
            rows.append([case.bullet, case.name, case.expected, got, f"{rss:,.0f}", f"{secs:.1f}", len(problems), mark])
            print(
                f"{mark:7} {case.bullet:11} {ascii(case.name)[1:-1][:60]:60} {rss:6,.0f} MB {secs:6.1f} s  "
                f"expected: {case.expected}; got: {ascii(got)[1:-1]}",
                flush=True,
            )
    finally:
        shutil.rmtree(base, ignore_errors=True)
    failed = [r for r in rows if r[-1] == "FAIL"]
    skipped = [r for r in rows if r[-1] == "skipped"]
    ran = len(rows) - len(skipped)
    peak = max((float(r[4].replace(",", "")) for r in rows), default=0.0)
    said = ", ".join(f"{counts[k]} {PROBLEM_WORDS[k]}" for k in PROBLEMS)
    print(
        f"\n{len(rows)} cases over {len(commands_of(selected))} commands: {ran - len(failed)} ok, {len(failed)} "
        f"failed, {len(skipped)} skipped; cases with {said}; peak memory {peak:,.0f} MB; "
        f"{time.monotonic() - t0:.0f} s"
    )
    for r in failed:
        print(f"  FAIL {r[0]}: {ascii(r[1])[1:-1][:70]}: {ascii(r[3])[1:-1][:200]}")
    if args.write_docs and not args.only:
        from docs_page import command_line, markdown_table, write_section

        summary = [
            ["cases", len(rows)],
            ["cases run", ran],
            ["commands covered", ", ".join(commands_of(selected))],
            ["ok", ran - len(failed)],
            ["failed", len(failed)],
            [
                "skipped",
                f"{len(skipped)}"
                + (f" ({'; '.join(r[1] for r in skipped)}: root reads through permissions)" if skipped else ""),
            ],
        ]
        summary += [[f"cases with {PROBLEM_WORDS[k]}", counts[k]] for k in PROBLEMS]
        summary.append(["peak memory of one run", f"{peak:,.0f} MB (limit {MAX_RSS_MB:,} MB for inputs <= 50 MB)"])
        summary.append(["time", f"{time.monotonic() - t0:,.0f} s"])
        by: dict = {}
        for r in rows:
            if r[-1] != "skipped":
                n, bad = by.get(r[0], (0, 0))
                by[r[0]] = (n + 1, bad + (r[-1] == "FAIL"))
        summary += [[f"{k} cases", f"{n - bad} of {n} ok"] for k, (n, bad) in by.items()]
        still = [[r[0], ascii(r[1])[1:-1], ascii(r[3])[1:-1][:160]] for r in failed]
        note = ""
        if still:
            note = "Cases that fail:\n\n" + markdown_table(["kind", "case", "got"], still)
        write_section(
            os.path.join(ROOT, "docs", "data-safety.md"),
            "hostile-corpus",
            markdown_table(["figure", "value"], summary),
            command_line(),
            note=note,
        )
    return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(main())
