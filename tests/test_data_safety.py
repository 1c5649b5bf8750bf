"""Data safety: no output may be an input or a file opcov did not write; every reader gives the same
answer as lint (whole or refused); names never become paths; bounded memory (docs/data-safety.md)."""

import hashlib
import json
import os
import shutil

import pytest
from conftest import ROOT, load_yaml, opcov_here, run_opcov

from opcov.errors import UsageError
from opcov.store import output

LLAMA = os.path.join(ROOT, "coverage", "models", "llama", "training.yaml")
TPU = os.path.join(ROOT, "coverage", "tpu")
CPU_PROBED = os.path.join(ROOT, "coverage", "cpu", "probed-torch-2.13.0+cpu.yaml")


def digest(path):
    with open(path, "rb") as f:
        return hashlib.sha256(f.read()).hexdigest()


def one_line_error(proc, *words):
    """Exit 2 with one 'opcov: error:' line naming ``words``, and no traceback."""
    assert proc.returncode == 2, (proc.returncode, proc.stdout[-1000:], proc.stderr[-2000:])
    assert "Traceback" not in proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("opcov: error: "), proc.stderr
    for w in words:
        assert w in lines[0], (w, lines[0])


@pytest.fixture
def copies(tmp_path):
    """An op set, a coverage folder with tpu's registered file, and a probed file, copied."""
    opset = tmp_path / "llama.yaml"
    shutil.copy(LLAMA, opset)
    cov = tmp_path / "coverage"
    shutil.copytree(TPU, cov / "tpu")
    (cov / "cpu").mkdir()
    shutil.copy(os.path.join(ROOT, "coverage", "cpu", "registered-torch-2.13.0+cpu.yaml"), cov / "cpu")
    (cov / "models" / "llama").mkdir(parents=True)
    shutil.copy(LLAMA, cov / "models" / "llama")
    probed = tmp_path / "probed.yaml"
    shutil.copy(CPU_PROBED, probed)
    return tmp_path, opset, cov, probed


# ---------------------------------------------------------------- 1. no output may be an input


def test_check_output_is_not_its_op_set(copies):
    tmp, opset, cov, _ = copies
    before = digest(opset)
    proc = opcov_here("check", str(opset), "-b", "tpu", "--coverage", str(cov), "-o", str(opset))
    one_line_error(proc, "also an input")
    assert digest(opset) == before


def test_check_output_through_a_link_to_its_input_is_refused(copies):
    tmp, opset, cov, _ = copies
    os.symlink(opset, tmp / "alias.yaml")
    hard = tmp / "hard.yaml"
    os.link(opset, hard)
    before = digest(opset)
    one_line_error(
        opcov_here("check", str(tmp / "alias.yaml"), "-b", "tpu", "--coverage", str(cov), "-o", str(hard)),
        "also an input",
    )
    assert digest(opset) == before


def test_check_output_is_not_a_coverage_file_or_manifest(copies):
    tmp, opset, cov, _ = copies
    (registered,) = (p for p in (cov / "tpu").iterdir() if p.name.startswith("registered-"))  # beside compile/
    before = digest(registered)
    one_line_error(
        opcov_here("check", str(opset), "-b", "tpu", "--coverage", str(cov), "-o", str(registered)),
        "a coverage file is already there",
    )
    assert digest(registered) == before
    manifest = tmp / "manifest.yaml"
    manifest.write_text("backend: tpu\n")
    one_line_error(
        opcov_here(
            "check", str(opset), "-b", "tpu", "--coverage", str(cov), "--manifest", str(manifest), "-o", str(manifest)
        ),
        "manifest.yaml",
    )
    assert manifest.read_text() == "backend: tpu\n"


def test_check_output_over_a_foreign_file_is_refused_and_its_own_report_replaced(copies):
    tmp, opset, cov, _ = copies
    mine = tmp / "notes.md"
    mine.write_text("# my notes\n")
    one_line_error(
        opcov_here("check", str(opset), "-b", "tpu", "--coverage", str(cov), "-o", str(mine)),
        "a file opcov did not write",
    )
    assert mine.read_text() == "# my notes\n"
    for fmt in ("text", "markdown", "json", "junit", "github"):
        report = tmp / f"report.{fmt}"
        for _ in range(2):  # the second run replaces the first's report
            proc = opcov_here(
                "check", str(opset), "-b", "tpu", "--coverage", str(cov), "--format", fmt, "-o", str(report)
            )
            assert proc.returncode in (0, 1), (fmt, proc.stderr)
        assert output.what_is(report.read_bytes()) == output.REPORT, fmt


def test_merge_refuses_an_input_as_output_and_another_kind(copies):
    tmp, opset, cov, probed = copies
    before = digest(probed)
    one_line_error(opcov_here("merge", str(probed), "--out", str(probed)), "also an input")
    assert digest(probed) == before
    one_line_error(opcov_here("merge", str(probed), "--out", str(opset)), "an op-set file is already there")


def test_trace_of_a_saved_op_set_onto_itself_is_refused(copies):
    tmp, opset, cov, probed = copies
    before = digest(opset)
    one_line_error(opcov_here("trace", str(opset), "--out", str(opset)), "also an input")
    assert digest(opset) == before


def test_check_output_in_process(tmp_path):
    data_file = tmp_path / "a.yaml"
    shutil.copy(LLAMA, data_file)
    with pytest.raises(UsageError, match="also an input"):
        output.check_output(str(data_file), kind=output.OPSET, inputs=[str(data_file)])
    with pytest.raises(UsageError, match="an op-set file is already there"):
        output.check_output(str(data_file), kind=output.COVERAGE)
    output.check_output(str(data_file), kind=output.OPSET)  # its own kind: replaced
    shutil.copy(CPU_PROBED, data_file)
    with pytest.raises(UsageError, match="other evidence"):
        output.check_output(str(data_file), kind=output.COVERAGE, evidence="registered")
    (tmp_path / "empty").write_text("")
    output.check_output(str(tmp_path / "empty"), kind=output.REPORT)  # nothing to lose


# ---------------------------------------------------------------- 2. one reader, whole or refused

TPU_FILE = os.path.join(TPU, "registered-torch-2.13.0+cpu-torch_tpu-0.2.0.yaml")


def _body(path):
    """A bundled file's text less its integrity line (as written before opcov stamped its files)."""
    with open(path, encoding="utf-8") as f:
        return f.read().split("\n", 1)[1]


def _restamp(text):
    from opcov.store import data

    ops = text.split("\nops:\n", 1)[1].count("\n")
    return data.stamped(text, ops)


READ_OPS = ["aten::mm", "aten::add.Tensor"]  # the ops test_every_reader_refuses_what_lint_refuses reads by name


def _few(body):
    """A bundled file's text with only some of its op lines, in their order: the first and last, those of
    READ_OPS, and the first of a random op's and of a passing cell (hostile_probed damages those). A real
    file, read in a tenth of a second where the whole took seconds (each damaged file is read three ways)."""
    head, ops = body.split("\nops:\n", 1)
    lines = ops.splitlines(keepends=True)
    keep = set(range(5)) | set(range(len(lines) - 30, len(lines)))
    keep |= {i for i, line in enumerate(lines) for n in READ_OPS if line.startswith(f"  {n}: ")}
    for word in ("{skipped: random}", "fwd: pass"):
        keep.add(next((i for i, line in enumerate(lines) if word in line), 0))
    return head + "\nops:\n" + "".join(lines[i] for i in sorted(keep))


def hostile_coverage(few=False):
    """name -> the text of a damaged or hand-made coverage file that every reader must refuse. The op
    lines damaged are of ops no model needs first (the end of the file), where a reader that reads
    only the ops it wants would pass over them. ``few``: made from the file cut by ``_few``."""
    body = _few(_body(TPU_FILE)) if few else _body(TPU_FILE)
    head, ops = body.split("\nops:\n", 1)
    lines = ops.splitlines(keepends=True)
    first_op = lines[0]
    cases = {
        "unstamped cut mid-line": body[: len(body) - len(lines[-1]) // 2],
        "unstamped cut at a line end": body[: len(body) - len(lines[-1]) - len(lines[-2])],
        "unstamped second ops block": head + "\nops:\n" + "".join(lines[:-1]) + "ops:\n" + lines[-1],
        "unstamped duplicate op": body + first_op,
        "stamped duplicate op": _restamp(body + first_op),
        "stamped duplicate key in a line": _restamp(body.replace(first_op, first_op.replace("{", "{fwd: kernel, ", 1))),
        "schema_version true": body.replace("schema_version: 1\n", "schema_version: true\n"),
        "stamped schema_version true": _restamp(body.replace("schema_version: 1\n", "schema_version: true\n")),
        "duplicate backend block": body.replace("evidence:", "backend:\n  name: cpu\nevidence:", 1),
        "merge key": body.replace("backend:\n", "backend:\n  <<: {name: tpu}\n", 1),
        "stamped summary nan": _restamp(body.replace("summary:\n", "summary:\n  bad: .nan\n", 1)),
    }
    return cases


def hostile_probed(few=False):
    body = _few(_body(CPU_PROBED)) if few else _body(CPU_PROBED)
    head, ops = body.split("\nops:\n", 1)
    lines = ops.splitlines(keepends=True)
    skipped = next(line for line in lines if "{skipped: random}" in line)
    cell = next(line for line in lines if "fwd: pass" in line)
    return {
        "unknown skipped reason": _restamp(body.replace(skipped, skipped.replace("random", "because"))),
        "err nan and inf": _restamp(body.replace(cell, cell.replace("fwd: pass", "err: [.nan, .inf], fwd: pass", 1))),
    }


def _verdicts(path, names):
    """(data.load, lineyaml.load with names, lint) on ``path``: 'refused' or 'read' each."""
    from opcov.errors import DataError
    from opcov.store import data, lineyaml
    from opcov.store.lint import lint_files

    out = []
    for read in (lambda: data.load(path), lambda: lineyaml.load(path, names, summary=False)):
        try:
            read()
            out.append("read")
        except DataError:
            out.append("refused")
    errors = [p for p in lint_files([path], check_catalog=False) if p.severity == "error"]
    out.append("refused" if errors else "read")
    return out


@pytest.mark.parametrize("case", sorted(hostile_coverage()) + sorted(hostile_probed()))
def test_every_reader_refuses_what_lint_refuses(tmp_path, case):
    text = {**hostile_coverage(few=True), **hostile_probed(few=True)}[case]
    path = tmp_path / "some.yaml"
    for source in (TPU_FILE, CPU_PROBED):  # the files cut as the damaged ones are, intact: read by every reader
        path.write_text(_restamp(_few(_body(source))), encoding="utf-8")
        assert _verdicts(str(path), READ_OPS) == ["read"] * 3, source
    path.write_text(text, encoding="utf-8")
    assert _verdicts(str(path), READ_OPS) == ["refused"] * 3


def test_the_whole_files_are_read_alike(tmp_path):
    """The bundled files, stamped and not, are read by every reader (no false refusal)."""
    for source in (TPU_FILE, CPU_PROBED):
        for name, text in (("stamped", open(source, encoding="utf-8").read()), ("unstamped", _body(source))):
            folder = tmp_path / name / os.path.basename(os.path.dirname(source))
            folder.mkdir(parents=True)
            path = folder / os.path.basename(source)
            path.write_text(text, encoding="utf-8")
            assert _verdicts(str(path), ["aten::mm"]) == ["read"] * 3, (source, name)


@pytest.mark.parametrize(
    "case", ["unstamped cut mid-line", "unstamped second ops block", "stamped duplicate op", "schema_version true"]
)
def test_commands_refuse_a_damaged_coverage_file(copies, case):
    tmp, opset, cov, _ = copies
    (registered,) = (p for p in (cov / "tpu").iterdir() if p.name.startswith("registered-"))  # beside compile/
    registered.write_text(hostile_coverage()[case], encoding="utf-8")
    for args in (
        ("check", str(opset), "-b", "tpu", "--coverage", str(cov)),
        ("summary", str(registered)),
        ("compare", "tpu", "cpu", "--coverage", str(cov), "--models", "llama"),
    ):
        proc = opcov_here(*args)
        assert proc.returncode == 2 and "Traceback" not in proc.stderr, (args, proc.returncode, proc.stderr[-800:])
        assert str(registered.name) in proc.stderr, (args, proc.stderr)
    proc = opcov_here("lint", "--no-catalog", str(registered))
    assert proc.returncode == 1 and " 0 error(s)" not in proc.stdout, proc.stdout


def test_merge_refuses_one_file_twice(copies, tmp_path):
    tmp, opset, cov, probed = copies
    os.symlink(probed, tmp / "again.yaml")
    one_line_error(opcov_here("merge", str(probed), str(tmp / "again.yaml"), "--out", str(tmp / "m.yaml")), "twice")
    assert not (tmp / "m.yaml").exists()


def test_an_unreadable_backend_folder_is_an_error_not_left_out(copies, monkeypatch):
    """os.walk skips a folder it cannot read: lint said '0 errors' and the site '1 backends'."""
    from opcov.errors import DataError
    from opcov.store import layout
    from opcov.store.lint import lint_paths

    tmp, opset, cov, _ = copies
    locked = str(cov / "tpu")
    real_scandir, real_listdir = os.scandir, os.listdir

    def deny(real):
        def call(path="."):
            if os.path.abspath(os.fspath(path)) == locked:
                raise PermissionError(13, "Permission denied", os.fspath(path))
            return real(path)

        return call

    monkeypatch.setattr(os, "scandir", deny(real_scandir))
    monkeypatch.setattr(os, "listdir", deny(real_listdir))
    for read in (
        lambda: layout.yaml_files(str(cov)),
        lambda: lint_paths([str(cov)], check_catalog=False),
        lambda: layout.snapshots(str(cov), "tpu"),
        lambda: layout.backends_with_data(str(cov)),
    ):
        with pytest.raises(DataError, match="cannot read this folder"):
            read()


@pytest.mark.skipif(os.geteuid() == 0, reason="root reads through chmod")
def test_an_unreadable_backend_folder_stops_site_and_lint(copies):
    tmp, opset, cov, _ = copies
    os.chmod(cov / "tpu", 0)
    try:
        one_line_error(run_opcov("site", "--coverage", str(cov), "--out", str(tmp / "site")), "cannot read")
        one_line_error(opcov_here("lint", "--no-catalog", str(cov)), "cannot read")
    finally:
        os.chmod(cov / "tpu", 0o755)


# ---------------------------------------------------------------- tracebacks become one line


def _deep_opset(path, depth=1, digits=1):
    """The llama op set with its tree replaced by a chain of ``depth`` nodes ending in aten::mm called
    a number of ``digits`` nines times."""
    from opcov.store import data, opset

    doc = data.load(LLAMA, opset.validate)
    calls = "9" * digits
    tree = [
        f"{i} forward composite aten::linear float32 x1" + (f" parent={i - 1}" if i > 1 else "")
        for i in range(1, depth)
    ]
    tree.append(f"{depth} forward kernel aten::mm float32 x{calls}" + (f" parent={depth - 1}" if depth > 1 else ""))
    doc.update(calltree=tree, ops={"aten::mm": {"forward": {"float32": {"calls": int(calls)}}}}, mode="inference")
    doc["summary"] = {"distinct_ops": 1}
    path.write_text(opset.dumps(doc), encoding="utf-8")


@pytest.mark.parametrize("depth,digits,words", [(1200, 1, "levels deep"), (1, 400, "calls")])
def test_a_deep_tree_or_a_huge_count_is_refused_by_lint_and_check(copies, depth, digits, words):
    tmp, opset_path, cov, _ = copies
    path = cov / "models" / "llama" / "training.yaml"
    _deep_opset(path, depth, digits)
    lint = opcov_here("lint", "--no-catalog", str(path))
    assert lint.returncode == 1 and words in lint.stdout, lint.stdout[-1000:]
    for args in (("check", str(path), "-b", "tpu", "--coverage", str(cov)), ("gaps", "tpu", "--coverage", str(cov))):
        one_line_error(opcov_here(*args), words)


def test_standard_output_full_or_closed_is_one_line():
    import subprocess
    import sys

    from conftest import child_env

    for redirect in (">/dev/full", ">&-"):
        proc = subprocess.run(
            f"'{sys.executable}' -m opcov summary '{TPU}' {redirect}",
            shell=True,
            capture_output=False,
            stderr=subprocess.PIPE,
            text=True,
            env=child_env(),
            cwd=ROOT,
        )
        one_line_error(proc, "cannot write the output")


# ---------------------------------------------------------------- 3. names are data, not paths


def test_a_backend_name_that_is_a_path_is_refused(copies):
    """'check -b tpu/../cpu' read cpu's data as a backend's (gaps and ops refused it already)."""
    tmp, opset, cov, _ = copies
    for name in ("tpu/../cpu", "..", "../tpu"):
        one_line_error(opcov_here("check", str(opset), "-b", name, "--coverage", str(cov)), "not a plain name")
        proc = opcov_here("gaps", name, "--coverage", str(cov))
        assert proc.returncode == 2 and "Traceback" not in proc.stderr, proc.stderr[-500:]


def test_page_names_never_leave_their_folder():
    from opcov.site import render

    paths = render.unique_paths(
        ["..::index", ".::x", "aten::..", "aten::Mm", "aten::mm", "a/b::c"], "ops", render.op_stem
    )
    assert len(set(paths.values())) == len(paths)
    assert len({p.lower() for p in paths.values()}) == len(paths)  # a case-insensitive disk too
    for path in paths.values():
        parts = path.split("/")
        assert parts[0] == "ops" and not any(p in (".", "..") or p.startswith(".") for p in parts), path
    from opcov.store import layout

    for name in ("..", "a/b", "pkg.mod:make", "-x", ".hidden", "x" * 300):
        plain = layout.folder_name(name)
        assert layout.plain_name(plain) == plain and "/" not in plain


def test_the_site_writes_an_op_named_dot_dot_inside_ops(copies):
    """An op '..::index' rendered onto ops/../index.html (the site's own index page)."""
    from opcov.store import data

    tmp, opset, cov, _ = copies
    (registered,) = (p for p in (cov / "tpu").iterdir() if p.name.startswith("registered-"))  # beside compile/
    doc = data.load(str(registered))
    doc["ops"]["..::index"] = dict(doc["ops"]["aten::mm"])
    doc["summary"]["other_namespaces"]["overloads"] += 1
    registered.unlink()
    data.save(doc, str(registered))
    out = tmp / "site"
    proc = run_opcov("site", "--coverage", str(cov), "--out", str(out))
    assert proc.returncode == 0, proc.stderr[-1500:]
    written = {os.path.relpath(os.path.join(r, f), out) for r, _, fs in os.walk(out) for f in fs}
    assert "ops/_./index.html" in written and "index.html" in written and "api/ops/tpu.json" in written
    with open(out / "api" / "ops.json", encoding="utf-8") as f:
        assert json.load(f)["ops"]["..::index"]["page"] == "ops/_./index.html#index"
    assert int(proc.stdout.split(": ", 1)[1].split(" files")[0]) == len(written)


# ---------------------------------------------------------------- arguments: refused, never a default


@pytest.mark.parametrize(
    "args,words",
    [
        (("check", LLAMA, "-b", "tpu", "--fail-on="), "--fail-on"),
        (("gaps", "tpu", "--top", "-1"), "--top"),
        (("zoo", "trace", "--all", "--jobs", "0"), "--jobs"),
        (("zoo", "trace", "--all", "--timeout", "0"), "--timeout"),
        (("trace", "llama", "--batch", "0"), "--batch"),
        (("trace", "llama", "--set", "num_hidden_layers=-1"), "cannot be negative"),
        (("trace", "llama", "--set", "x=[unclosed"), "not a YAML value"),
        (("trace", "llama", "--set", "x=&a [*a]"), "anchor"),
        (("trace", "llama", "--set", "x={a: {b: 1}}"), "VALUE must be"),
        (("trace", "llama", "--set", "x={a: 1"), "not a YAML value"),
        (("trace", "llama", "--set", "x={a: *b}"), "alias"),
    ],
)
def test_bad_arguments_are_one_line(args, words):
    one_line_error(opcov_here(*args), words)


def test_the_python_api_refuses_bad_arguments_in_one_line():
    import opcov
    from opcov.errors import OpcovError

    for kw in (
        {"model_or_opset": "lla\0ma", "backends": "tpu"},
        {"model_or_opset": "llama", "backends": "t\0pu"},
        {"model_or_opset": "llama", "backends": "tpu", "coverage": 123},
        {"model_or_opset": "llama", "backends": "tpu", "coverage": b"coverage"},
        {"model_or_opset": "llama", "backends": "tpu/../cpu"},
        {"model_or_opset": b"llama", "backends": "tpu"},
    ):
        with pytest.raises(OpcovError) as exc:
            opcov.check(**kw)
        assert "\n" not in str(exc.value), kw


# ---------------------------------------------------------------- the probe's journal and workers


def test_resume_without_a_journal_says_so_and_two_probes_never_share_one(tmp_path):
    from opcov.errors import UsageError
    from opcov.probe.journal import Journal

    path = str(tmp_path / "p.yaml.journal.jsonl")
    header = {"settings": {"backend": "x"}, "created": "now", "command": "opcov probe x"}
    with pytest.raises(UsageError, match="no journal"):
        Journal(path, header, resume=True)  # it silently started over
    first = Journal(path, header, resume=False)
    with pytest.raises(UsageError, match="in use by another probe"):
        Journal(path, header, resume=True)  # read it while the first removed it: FileNotFoundError
    first.close()
    again = Journal(path, header, resume=True)  # the first ended: resumable
    again.close()


def test_the_probe_pool_leaves_nothing_in_the_temp_folder():
    from opcov.probe.pool import Pool

    pool = Pool({"backend": "cpu", "device_type": "cpu", "module": None, "threads": 1}, 1, 5.0, False)
    assert os.path.isdir(pool.logdir)
    pool.stop()
    assert not os.path.exists(pool.logdir)  # every probe left an opcov-probe-XXXX/worker0.log


# ---------------------------------------------------------------- 5. user factories run in a child

FACTORIES = """
import os, signal, sys
import torch

class BadExit(BaseException):
    pass

def good():
    return torch.nn.Linear(4, 4), (torch.randn(2, 4),)

def segfault():
    os.kill(os.getpid(), signal.SIGSEGV)

def exits():
    os._exit(0)

def no_inputs():
    return torch.nn.Linear(4, 4), None

def base_exception():
    raise BadExit("no")

def closes_stdout():
    sys.stdout.close()
    return torch.nn.Linear(4, 4), (torch.randn(2, 4),)

class _AbortsOffCpu(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        return x * 2

    @staticmethod
    def backward(ctx, g):
        if g.device.type != "cpu":  # as torch 2.13 does for an error raised in a backward on a Python device
            os.abort()
        return g * 2

class _Twice(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = torch.nn.Linear(4, 4)

    def forward(self, x):
        return _AbortsOffCpu.apply(self.lin(x))

def aborts_off_cpu():
    return _Twice(), (torch.randn(2, 4),)

def aborts_always():
    os.abort()
"""


@pytest.mark.parametrize(
    "factory,words",
    [
        ("segfault", "crashed the tracing process (SIGSEGV)"),
        ("aborts_always", "crashed the tracing process (SIGABRT)"),  # on CPU too: no second answer
        ("exits", "exit status 0"),
        ("no_inputs", "returned inputs of type NoneType"),
        ("base_exception", "raised BadExit"),
        ("closes_stdout", "closed standard output"),
    ],
)
def test_a_factory_that_crashes_or_exits_is_one_line_naming_it(tmp_path, factory, words):
    (tmp_path / "userfactories.py").write_text(FACTORIES)
    out = tmp_path / "x.yaml"
    proc = run_opcov(
        "trace",
        f"userfactories:{factory}",
        "--out",
        str(out),
        PYTHONPATH=os.path.join(ROOT, "src") + os.pathsep + str(tmp_path),
    )
    one_line_error(proc, words, f"userfactories:{factory}" if factory in ("segfault", "exits") else "")
    assert not out.exists()


@pytest.mark.parametrize("real", [(), ("--real",)])  # the fake trace's process aborts; the real-valued one's
def test_a_factory_that_aborts_on_the_stand_in_is_traced_on_cpu_and_says_so(tmp_path, real):
    """torch 2.13 aborts a process where an error is raised inside a backward on a Python-defined device (a
    gradient-checkpointed block's recompute on the stand-in did): a factory whose step runs on CPU is traced
    there, with real values, the op set naming why and the command that made it."""
    (tmp_path / "userfactories.py").write_text(FACTORIES)
    out = tmp_path / "x.yaml"
    proc = run_opcov(
        "trace", "userfactories:aborts_off_cpu", "--mode", "training", *real, "--out", str(out),
        PYTHONPATH=os.path.join(ROOT, "src") + os.pathsep + str(tmp_path),
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-1500:]
    doc = load_yaml(str(out))
    assert any("traced on CPU itself, with real values" in n and "SIGABRT" in n for n in doc["provenance"]["notes"])
    assert "--device cpu --real" in doc["provenance"]["command"] and "aten::addmm" in doc["ops"]


def test_a_good_factory_is_traced_in_a_child_and_written(tmp_path):
    (tmp_path / "userfactories.py").write_text(FACTORIES)
    out = tmp_path / "x.yaml"
    proc = run_opcov(
        "trace",
        "userfactories:good",
        "--out",
        str(out),
        PYTHONPATH=os.path.join(ROOT, "src") + os.pathsep + str(tmp_path),
    )
    assert proc.returncode == 0, proc.stderr[-1500:]
    assert output.what_is(out.read_bytes()) == output.OPSET and f"wrote {out}" in proc.stdout


@pytest.mark.parametrize(
    "factory,words", [("segfault", "crashed the tracing process (SIGSEGV)"), ("exits", "exit status 0")]
)
def test_a_factory_under_path_compile_runs_in_a_child(tmp_path, factory, words):
    """'trace --path compile' built a factory in opcov's own process: a segfault killed it (exit 139), and
    os._exit(0) ended it with status 0 and no file."""
    (tmp_path / "userfactories.py").write_text(FACTORIES)
    out = tmp_path / "x.yaml"
    proc = run_opcov(
        "trace", f"userfactories:{factory}", "--mode", "inference", "--path", "compile", "--out", str(out),
        PYTHONPATH=os.path.join(ROOT, "src") + os.pathsep + str(tmp_path),
    )  # fmt: skip
    one_line_error(proc, words, f"userfactories:{factory}")
    assert not out.exists()


def test_a_good_factory_under_path_compile_is_compiled_in_a_child_and_written(tmp_path):
    (tmp_path / "userfactories.py").write_text(FACTORIES)
    out = tmp_path / "x.yaml"
    proc = run_opcov(
        "trace", "userfactories:good", "--mode", "inference", "--path", "compile", "--compile-backend", "aot_eager",
        "--out", str(out), PYTHONPATH=os.path.join(ROOT, "src") + os.pathsep + str(tmp_path),
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-1500:]
    text = out.read_text()
    assert output.what_is(text.encode()) == output.OPSET and "backend: aot_eager" in text
    assert "--out " + str(out) in text  # the command that reproduces it names the user's --out, not the child's


# ---------------------------------------------------------------- 6. bounded memory


def test_a_huge_value_is_refused_with_its_line_before_any_parse(tmp_path):
    """A 40 MB 'why:' took summary/check/ops to 5.5 GB (the line reader's regex, ~140 bytes a
    character); any line over the limit is now refused with its line, unparsed."""
    from opcov.store import data

    body = _body(TPU_FILE)
    head, ops = body.split("\nops:\n", 1)
    first = ops.split("\n", 1)[0]
    long = first[:-1] + ", why: " + "x" * (data.MAX_LINE_BYTES + 1) + "}"
    path = tmp_path / "big.yaml"
    path.write_text(_restamp(body.replace(first, long, 1)), encoding="utf-8")
    line = 1 + _restamp(body).split("\nops:\n", 1)[0].count("\n") + 2
    for args in (("summary", str(path)), ("lint", "--no-catalog", str(path))):
        proc = opcov_here(*args)
        assert proc.returncode in (1, 2) and "Traceback" not in proc.stderr
        assert f"big.yaml:{line}:" in proc.stdout + proc.stderr and "KiB" in proc.stdout + proc.stderr, proc.stderr


def test_a_manifest_is_read_as_every_data_file(tmp_path):
    """--manifest had its own reader: no size limit (a 50 MB manifest took 4.2 GB), keys twice read."""
    from opcov.probe import manifest

    path = tmp_path / "m.yaml"
    path.write_text("manifest: 1\nbackend: tpu\nbackend: cpu\n")
    with pytest.raises(UsageError, match="twice"):
        manifest.load(str(path))
    path.write_text("manifest: 1\nbackend: tpu\nclaims: '" + "x" * (300 << 10) + "'\n")
    with pytest.raises(UsageError, match="KiB"):
        manifest.load(str(path))


def test_an_op_set_with_no_ops_is_refused_not_judged_runs(copies):
    from opcov.store import data, opset

    tmp, path, cov, _ = copies
    doc = data.load(LLAMA, opset.validate)
    doc.update(ops={}, calltree=[], summary={"distinct_ops": 0})
    path.write_text(opset.dumps(doc), encoding="utf-8")
    one_line_error(opcov_here("check", str(path), "-b", "tpu", "--coverage", str(cov)), "no ops")


def test_a_forked_site_helper_ends_with_its_parent(tmp_path):
    """The site's forked helper outlived a parent killed mid-build."""
    import signal
    import subprocess
    import sys
    import time

    from conftest import child_env

    marker = tmp_path / "helper.pid"
    script = f"""
import os, time
from opcov import forked
def work():
    open({str(marker)!r}, "w").write(str(os.getpid()))
    time.sleep(30)
    return 1
later = forked.Later(work)
time.sleep(30)
"""
    proc = subprocess.Popen([sys.executable, "-c", script], env=child_env())
    for _ in range(200):
        if marker.exists() and marker.read_text():
            break
        time.sleep(0.05)
    helper = int(marker.read_text())
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    for _ in range(100):
        try:
            os.kill(helper, 0)
        except ProcessLookupError:
            break
        time.sleep(0.05)
    else:
        os.kill(helper, signal.SIGKILL)
        pytest.fail("the forked helper outlived its parent")


def test_a_killed_writers_temporary_file_is_removed_by_the_next_write(tmp_path):
    """A probe killed outright mid-write left 'probed-...yaml.tmpPID-XXXX' beside its file."""
    import subprocess
    import sys

    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    pid = int(dead.stdout)
    target = tmp_path / "x.yaml"
    stale = tmp_path / f"x.yaml.tmp{pid}-0123abcd"
    stale.write_text("half")
    live = tmp_path / f"x.yaml.tmp{os.getpid()}-0123abcd"  # a writer still running: kept
    live.write_text("half")
    output.write_atomic(str(target), "whole\n")
    assert target.read_text() == "whole\n" and not stale.exists() and live.exists()


def test_a_resumed_journal_names_the_device_its_cases_ran_on(tmp_path):
    """A resume after SIGKILL that ran no worker wrote 'device: unknown (no worker started)'."""
    from opcov.probe.journal import Journal

    path = str(tmp_path / "p.yaml.journal.jsonl")
    header = {"settings": {"backend": "x"}, "created": "now", "command": "opcov probe x"}
    first = Journal(path, header, resume=False)
    first.write({"device": "cpu (x86_64)"})
    first.f.flush()  # killed here: nothing else runs
    first.f.close()
    assert Journal(path, header, resume=True).devices == ["cpu (x86_64)"]
