"""Re-run one representative hostile input or fault of every class docs/data-safety.md guards against,
against the opcov program and its Python API, and print a table: case, expected, got, ok.

Why a script and not a test: it takes minutes (factories import torch, the zoo and the probe start
workers), and its figures belong on the docs page. Every case runs in a fresh folder with its own
private TMPDIR; on top of its own expectation, every run must show no traceback, no death by a signal
(an abort), at most 1 GB of memory (the peak resident memory of the run's process tree), and
nothing left in its TMPDIR (torch's own compile cache aside; what a process killed on purpose left
must be gone after the next opcov command). Exit status 1 when any case fails.

    python scripts/hostile_corpus.py [--only WORD] [--write-docs]
"""

from __future__ import annotations

import argparse
import os
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
            HANG_PID_FILE=os.path.join(self.dir, "hang.pid"),
        )
        env.update(extra)
        return env

    def start(self, args, *, python=False, stdout=subprocess.PIPE, **kw):
        cmd = [sys.executable, "-c", args] if python else [sys.executable, "-m", "opcov", *args]
        import threading

        proc = subprocess.Popen(
            cmd, cwd=self.dir, env=self.env(), stdout=stdout, stderr=subprocess.PIPE, text=True,
            errors="replace", start_new_session=True, **kw,
        )  # fmt: skip
        proc.peak_kb = 0

        def sample():  # from its start, so a case that kills it midway still has its figure
            while _running(proc.pid):
                for pid in [proc.pid, *_descendants(proc.pid)]:
                    proc.peak_kb = max(proc.peak_kb, _hwm_kb(pid))
                time.sleep(0.02)

        proc.sampler = threading.Thread(target=sample, daemon=True)
        proc.sampler.start()
        return proc

    def finish(self, proc, t0: float, timeout: float = 600) -> Run:
        """Wait for ``proc``, reading its output, and the peak resident memory of its process tree: the
        largest VmHWM of it and each descendant, read every 20 ms from /proc. (Its ru_maxrss would not
        do: Linux carries a parent's high-water mark into a forked child across exec, so every run would
        read at least this script's own peak.)"""
        import threading

        got = {}

        def read(name, stream):
            got[name] = stream.read() if stream is not None else ""

        readers = [threading.Thread(target=read, args=(n, s)) for n, s in (("out", proc.stdout), ("err", proc.stderr))]
        for r in readers:
            r.start()
        deadline = time.monotonic() + timeout
        while _running(proc.pid):
            if time.monotonic() > deadline:
                os.killpg(proc.pid, signal.SIGKILL)
            time.sleep(0.02)
        proc.sampler.join()
        peak = proc.peak_kb
        proc.wait()
        for r in readers:
            r.join()
        run = Run(proc.returncode, got.get("out", ""), got.get("err", ""), peak / 1024, time.monotonic() - t0)
        self.runs.append(run)
        return run

    def opcov(self, *args, timeout: float = 600, stdout=subprocess.PIPE) -> Run:
        t0 = time.monotonic()
        return self.finish(self.start(list(args), stdout=stdout), t0, timeout)

    def python(self, code: str, timeout: float = 600) -> Run:
        t0 = time.monotonic()
        return self.finish(self.start(code, python=True), t0, timeout)


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
        "import sys; from opcov.site import forked; forked.spare_core = forked.can_fork; "
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
    pidfile = box.path("hang.pid")
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


def c_big_opset(box):
    """A 50 MB op set: the llama op set's op lines repeated under new names (a header and tree kept)."""
    head, lines = op_lines(body(LLAMA))
    out, size, i = [], 0, 0
    while size < BIG:
        line = lines[i % len(lines)].replace("aten::", f"aten::x{i}_", 1)
        out.append(line)
        size += len(line)
        i += 1
    path = box.path("bigset.yaml", restamp(head + "\nops:\n" + "".join(out)))
    return lint_refuses(box.opcov("lint", "--no-catalog", path), "MiB")


def c_big_tree(box):
    path = deep_opset(box, nodes=700_000)
    return one_line(box.opcov("check", path, "-b", "tpu", "--coverage", box.cov), "MiB")


def c_big_probed(box):
    head, lines = op_lines(body(CPU_PROBED))
    out, size, i = [], 0, 0
    while size < BIG:
        line = lines[i % len(lines)].replace("aten::", f"aten::x{i}_", 1)
        out.append(line)
        size += len(line)
        i += 1
    p = box.path("p.yaml", restamp(head + "\nops:\n" + "".join(out)))
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
    ]  # fmt: skip


def run_case(case: Case, base: str) -> tuple[str, bool | None, float, float, list[str]]:
    folder = tempfile.mkdtemp(prefix="case-", dir=base)
    box = Box(folder)
    try:
        got, ok = case.fn(box)
    except Exception as exc:  # noqa: BLE001 - the script's own failure is a failed case, shown
        got, ok = f"the case itself failed: {type(exc).__name__}: {str(exc)[:100]}", False
    rss = max((r.rss_mb for r in box.runs), default=0.0)
    secs = sum(r.seconds for r in box.runs)
    problems = []
    if any("Traceback" in r.err for r in box.runs):
        problems.append("a traceback")
    if ok is not None and any(r.code < 0 for r in box.runs) and not box.killed:
        problems.append("died by a signal")
    if rss > MAX_RSS_MB:
        problems.append(f"{rss:,.0f} MB")
    if box.killed:  # a process killed outright cannot clean up: the next opcov removes what it left
        box.opcov("backends")
    left = [n for n in _left_in(box.tmp) if not n.startswith(TORCH_CACHE)]
    if left:
        problems.append(f"left in TMPDIR: {', '.join(left[:3])}")
    if problems and ok is not None:
        got, ok = got + " [" + "; ".join(problems) + "]", False
    shutil.rmtree(folder, ignore_errors=True)
    return got, ok, rss, secs, problems


TORCH_CACHE = "torchinductor_"  # torch's own compile cache (torchinductor_<user>), kept by torch on purpose


def _left_in(tmp: str) -> list[str]:
    for _ in range(20):  # a child the case killed may be removing its folder still
        left = os.listdir(tmp)
        if not left:
            return []
        time.sleep(0.1)
    return left


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--only", help="run only the cases whose name contains this")
    # the table's columns: ok, class, case, peak MB, seconds, expected, got
    ap.add_argument("--write-docs", action="store_true", help="rewrite the figures section of docs/data-safety.md")
    args = ap.parse_args()
    selected = [c for c in cases() if not args.only or args.only in c.name]
    rows = []
    base = tempfile.mkdtemp(prefix="opcov-hostile-")
    t0 = time.monotonic()
    try:
        for case in selected:
            got, ok, rss, secs, problems = run_case(case, base)
            mark = "skipped" if ok is None else ("ok" if ok else "FAIL")
            rows.append([case.bullet, case.name, case.expected, got, f"{rss:,.0f}", f"{secs:.1f}", len(problems), mark])
            print(
                f"{mark:7} {case.bullet:11} {case.name:42} {rss:6,.0f} MB {secs:6.1f} s  "
                f"expected: {case.expected}; got: {got}",
                flush=True,
            )
    finally:
        shutil.rmtree(base, ignore_errors=True)
    failed = [r for r in rows if r[-1] == "FAIL"]
    skipped = [r for r in rows if r[-1] == "skipped"]
    ran = len(rows) - len(skipped)
    peak = max((float(r[4].replace(",", "")) for r in rows), default=0.0)
    print(
        f"\n{len(rows)} cases: {ran - len(failed)} ok, {len(failed)} failed, {len(skipped)} skipped; "
        f"peak memory {peak:,.0f} MB; {time.monotonic() - t0:.0f} s"
    )
    if args.write_docs and not args.only:
        from docs_page import command_line, markdown_table, write_section

        summary = [
            ["cases run", ran],
            ["ok", ran - len(failed)],
            ["failed", len(failed)],
            [
                "skipped",
                f"{len(skipped)}"
                + (f" ({'; '.join(r[1] for r in skipped)}: root reads through permissions)" if skipped else ""),
            ],
            ["runs with a traceback, a death by a signal, over 1 GB or leftovers", sum(1 for r in rows if r[6])],
            ["peak memory of one run", f"{peak:,.0f} MB (limit {MAX_RSS_MB:,} MB)"],
        ]
        by = {}
        for r in rows:
            if r[-1] != "skipped":
                n, bad = by.get(r[0], (0, 0))
                by[r[0]] = (n + 1, bad + (r[-1] == "FAIL"))
        summary += [[f"{k} cases", f"{n - bad} of {n} ok"] for k, (n, bad) in by.items()]
        write_section(
            os.path.join(ROOT, "docs", "data-safety.md"),
            "hostile-corpus",
            markdown_table(["figure", "value"], summary),
            command_line(),
        )
    return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(main())
