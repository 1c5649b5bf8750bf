"""The output guard (docs/data-safety.md): every command that writes a file or into a folder refuses an
output that is one of its inputs, a folder, or a path through a symbolic link leading out of the folder
it names; paths built from data stay inside the coverage folder; two writers into one folder take
turns. The enumeration below walks the parser, so a new command with an output option must be added
here, and so proves the guard on it."""

from __future__ import annotations

import argparse
import gzip
import hashlib
import json
import os
import shutil
import subprocess
import sys

import pytest
from conftest import ROOT, child_env, opcov_here, run_opcov
from test_data_safety import digest, one_line_error

from opcov.cli import build_parser
from opcov.errors import DataError, UsageError
from opcov.store import layout, output

LLAMA = os.path.join(ROOT, "coverage", "models", "llama", "training.yaml")
XLA = os.path.join(ROOT, "coverage", "xla")
PROBED = "probed-torch-2.9.0+cu128-torch_xla-2.9.0.yaml"
OBSERVED = os.path.join(ROOT, "coverage", "observed", "xla", "gpt2.inference.json")
VENDOR = os.path.join(ROOT, "tests", "data", "vendortests")

FILE_FLAGS = {"--out", "--output", "--table"}  # an option naming a file (or, for site, a folder) a command writes
FOLDER_FLAGS = {"--replay-dir", "--root"}  # check's replayed calls, the zoo's op sets: folders a command writes in
FOLDER_DESTS = {"into"}  # '--coverage' of the commands that write into a coverage folder (ingest, run, expect)


def output_options() -> set[tuple[str, str]]:
    """(command, option) for every option of every subcommand that names where the command writes."""
    parser = build_parser()
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    found = set()
    for name, p in sub.choices.items():
        for a in p._actions:
            if set(a.option_strings) & (FILE_FLAGS | FOLDER_FLAGS) or a.dest in FOLDER_DESTS:
                found.add((name, max(a.option_strings, key=len)))
    return found


def _opcov(*argv):
    """``opcov ARGV`` in this process for the commands that read and write files only; those that start
    workers, children or a forked helper (scan, probe, trace, run, zoo trace, site) in a child."""
    here = argv[0] in ("check", "merge", "plan", "bundle", "ingest", "expect") or argv[:2] == ("zoo", "merge")
    return opcov_here(*argv) if here else run_opcov(*argv)


def _tree(folder) -> dict:
    out = {}
    for root, _dirs, files in os.walk(folder):
        for f in files:
            p = os.path.join(root, f)
            out[os.path.relpath(p, folder)] = digest(p) if not os.path.islink(p) else "link"
    return out


@pytest.fixture(scope="module")
def world(tmp_path_factory):
    """Inputs every command below reads: an op set, a probed file with its times, a coverage folder,
    a vendor checkout, a times file, two zoo tables and bundles."""
    t = tmp_path_factory.mktemp("world")
    shutil.copy(LLAMA, t / "llama.yaml")
    shutil.copy(os.path.join(XLA, PROBED), t / PROBED)
    (t / (PROBED + ".times.json")).write_text(json.dumps({"groups": {"g": 1.0}}))
    (t / "times.json").write_text(json.dumps({"groups": {"g": 1.0}}))
    cov = t / "coverage"
    (cov / "xla").mkdir(parents=True)
    for f in os.listdir(XLA):
        if f.startswith("registered-"):
            shutil.copy(os.path.join(XLA, f), cov / "xla" / f)
    shutil.copytree(os.path.join(ROOT, "coverage", "tpu"), cov / "tpu")
    (cov / "models" / "llama").mkdir(parents=True)
    shutil.copy(LLAMA, cov / "models" / "llama")
    shutil.copytree(VENDOR, t / "vendor")
    for i in (1, 2):
        (t / f"table{i}.tsv").write_text(f"# shard {i}\nmodel\tmode\toutcome\tseconds\n")
    for src, name in ((os.path.join(XLA, PROBED), "probed.gz"), (OBSERVED, "observed.gz")):
        proc = opcov_here("bundle", src, "--source", "lab", "--out", str(t / name))
        assert proc.returncode == 0, proc.stderr
    return t


def _argv(world, command: str, flag: str, out: str) -> tuple[list[str], list[str]]:
    """(the command line writing to ``out`` through ``flag``, the inputs it reads that ``out`` must never be)."""
    w = str(world)
    cov = os.path.join(w, "coverage")
    probed, opset, times = os.path.join(w, PROBED), os.path.join(w, "llama.yaml"), os.path.join(w, "times.json")
    vendor_inputs = [os.path.join(w, "vendor", "tests", f) for f in ("ops_test.py", "op_testing.py")]
    table = {
        ("check", "--output"): (["check", opset, "-b", "tpu", "--coverage", cov, "-o", out], [opset]),
        ("check", "--replay-dir"): (
            ["check", opset, "-b", "cpu", "--coverage", cov, "--replay", "--replay-dir", out],
            [],
        ),
        ("trace", "--out"): (["trace", opset, "--out", out], [opset]),
        ("scan", "--out"): (["scan", "cpu", "--out", out], []),
        ("probe", "--out"): (
            ["probe", "cpu", "--ops", "^abs$", "--dtypes", "float32", "--times", times, "--out", out],
            [times],
        ),
        ("merge", "--out"): (["merge", probed, "--out", out], [probed]),
        ("site", "--out"): (["site", "--coverage", cov, "--out", out], [cov]),
        ("zoo", "--table"): (
            ["zoo", "merge", *(os.path.join(w, f"table{i}.tsv") for i in (1, 2)), "--table", out],
            [os.path.join(w, "table1.tsv"), os.path.join(w, "table2.tsv")],
        ),  # fmt: skip
        ("zoo", "--root"): (["zoo", "trace", "--only", "nn-convnet", "--mode", "inference", "--root", out], []),
        ("plan", "--out"): (["plan", "cpu", "--shards", "2", "--times", times, "--out", out], [times]),
        ("bundle", "--out"): (["bundle", probed, "--source", "lab", "--out", out], [probed, probed + ".times.json"]),
        ("ingest", "--coverage"): (["ingest", os.path.join(w, "probed.gz"), "--coverage", out], []),
        ("run", "--out"): (["run", "nn-convnet", "-b", "cpu", "--mode", "inference", "--out", out], []),
        ("run", "--coverage"): (["run", "nn-convnet", "-b", "cpu", "--mode", "inference", "--coverage", out], []),
        ("expect", "--out"): (
            ["expect", "tpu", "--vendor-tests", os.path.join(w, "vendor"), "--commit", "abc1234", "--out", out],
            vendor_inputs,
        ),
        ("expect", "--coverage"): (
            ["expect", "tpu", "--vendor-tests", os.path.join(w, "vendor"), "--commit", "abc1234", "--coverage", out],
            vendor_inputs,
        ),
    }
    return table[(command, flag)]


# what each folder option writes below the folder: (subfolder a link may stand for, the bundle or run it takes)
FOLDER_WRITES = {
    ("site", "--out"): None,  # a site folder: the folder itself may not be a link
    ("check", "--replay-dir"): "cpu",  # DIR/BACKEND/MODEL-MODE-KEY.yaml (cpu replays here)
    ("zoo", "--root"): "nn-convnet",  # ROOT/MODEL/MODE.yaml
    ("ingest", "--coverage"): "xla",
    ("run", "--coverage"): os.path.join("observed", "cpu"),
    ("expect", "--coverage"): os.path.join("vendor", "tpu"),
}
CASES = sorted(
    {
        ("check", "--output"),
        ("check", "--replay-dir"),
        ("trace", "--out"),
        ("scan", "--out"),
        ("probe", "--out"),
        ("merge", "--out"),
        ("site", "--out"),
        ("zoo", "--table"),
        ("zoo", "--root"),
        ("plan", "--out"),
        ("bundle", "--out"),
        ("ingest", "--coverage"),
        ("run", "--out"),
        ("run", "--coverage"),
        ("expect", "--out"),
        ("expect", "--coverage"),
    }
)


def test_every_output_option_is_enumerated_here():
    """A command that gains an output option fails this test until it is added to CASES (and so to the
    guard tests below)."""
    assert output_options() == set(CASES)


@pytest.mark.parametrize("command,flag", CASES)
def test_an_output_that_is_an_input_is_refused(world, command, flag):
    if (command, flag) in FOLDER_WRITES:
        # a folder output: it may not be the folder the command reads (site), nor hold the bundle as its target
        if command in ("site", "check"):  # the site's folder, or the replayed calls' folder, named as the coverage
            argv, inputs = _argv(world, command, flag, str(world / "coverage"))
            before = _tree(world / "coverage")
            one_line_error(_opcov(*argv))
            assert _tree(world / "coverage") == before
        elif command == "ingest":
            cov = world / "ingest-input"
            shutil.copytree(world / "coverage", cov)
            inside = cov / "xla" / PROBED  # the bundle lies where its data would be written
            shutil.copy(world / "probed.gz", inside)
            argv, _ = _argv(world, command, flag, str(cov))
            argv[1] = str(inside)
            before = digest(inside)
            one_line_error(_opcov(*argv), "also an input")
            assert digest(inside) == before
        else:
            pytest.skip(f"{command} {flag}: its folder holds none of its inputs (the folder and link cases apply)")
        return
    out_for_inputs = _argv(world, command, flag, "OUT")[1]
    if not out_for_inputs:
        pytest.skip(f"{command} {flag}: the command reads no file a user names (the folder and link cases apply)")
    for source in out_for_inputs:
        if not os.path.exists(source):
            continue
        argv, _ = _argv(world, command, flag, source)
        before = digest(source)
        one_line_error(_opcov(*argv))
        assert digest(source) == before, (command, source)


@pytest.mark.parametrize("command,flag", CASES)
def test_an_output_that_is_a_folder_is_refused(world, tmp_path, command, flag):
    """A file output named as an existing folder, or a folder output named as an existing file."""
    if (command, flag) in FOLDER_WRITES:
        target = tmp_path / "a-file"
        target.write_text("mine\n")
    else:
        target = tmp_path / "a-folder"
        target.mkdir()
        (target / "mine.txt").write_text("mine\n")
    argv, _ = _argv(world, command, flag, str(target))
    before = _tree(tmp_path)
    one_line_error(_opcov(*argv))
    assert _tree(tmp_path) == before


@pytest.mark.parametrize("command,flag", CASES)
def test_an_output_through_a_link_out_of_its_folder_is_refused(world, tmp_path, command, flag):
    """The output (a file), or a folder below the folder named (a backend's, observed/BACKEND, vendor/BACKEND),
    is a symbolic link to a place outside: nothing is written there."""
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (elsewhere / "kept.txt").write_text("kept\n")
    named = tmp_path / "named"
    if (command, flag) in FOLDER_WRITES:
        below = FOLDER_WRITES[(command, flag)]
        if below is None:
            os.symlink(elsewhere, named)  # the site folder itself
        else:
            shutil.copytree(world / "coverage", named)
            link = named / below
            if link.exists():  # the registered files the ingest reads, beside the link's target
                shutil.copytree(link, elsewhere, dirs_exist_ok=True)
                shutil.rmtree(link)
            link.parent.mkdir(parents=True, exist_ok=True)
            os.symlink(elsewhere, link)
        out = named
    else:
        named.mkdir()
        out = named / "out.file"
        os.symlink(elsewhere / "kept.txt", out)
    argv, _ = _argv(world, command, flag, str(out))
    before = _tree(elsewhere)
    proc = _opcov(*argv)
    one_line_error(proc)
    assert "link" in proc.stderr, proc.stderr
    assert _tree(elsewhere) == before


# ---------------------------------------------------------------- the silent losses of issue 43


def test_bundle_plan_and_expect_never_write_over_what_they_read(world, tmp_path):
    probed = tmp_path / PROBED
    shutil.copy(world / PROBED, probed)
    before = digest(probed)
    one_line_error(opcov_here("bundle", str(probed), "--source", "me", "--out", str(probed)), "also an input")
    assert digest(probed) == before
    times = tmp_path / "t.json"
    times.write_text('{"groups": {"a": 1}}')
    one_line_error(
        opcov_here("plan", "cpu", "--shards", "2", "--times", str(times), "--out", str(times)), "also an input"
    )
    assert times.read_text() == '{"groups": {"a": 1}}'
    shutil.copytree(VENDOR, tmp_path / "V")
    source = tmp_path / "V" / "tests" / "ops_test.py"
    before = digest(source)
    proc = opcov_here(
        "expect", "tpu", "--vendor-tests", str(tmp_path / "V"), "--commit", "abc1234", "--out", str(source)
    )
    one_line_error(proc, "also an input")
    assert digest(source) == before


def test_check_path_compile_never_writes_over_its_op_set(tmp_path):
    """'check --path compile -o X' wrote its report over the compiled op set X it read (the guard ran only on
    the eager path); its own report is replaced, as the eager path's is."""
    compiled = tmp_path / "inductor-inference.yaml"
    shutil.copy(os.path.join(ROOT, "coverage", "models", "llama", "compile", "inductor-inference.yaml"), compiled)
    before = digest(compiled)
    one_line_error(opcov_here("check", str(compiled), "-b", "cpu", "--path", "compile", "-o", str(compiled)), "input")
    assert digest(compiled) == before
    report = tmp_path / "report.txt"
    for fmt in ("text", "json"):
        for _ in range(2):
            proc = opcov_here(
                "check", str(compiled), "-b", "cpu", "--path", "compile", "--format", fmt, "-o", str(report)
            )
            assert proc.returncode in (0, 1) and "opcov: error" not in proc.stderr, proc.stderr
        assert output.what_is(report.read_bytes(), str(report)) == output.REPORT


def test_trace_without_out_never_writes_through_a_link_in_the_models_folder(tmp_path):
    """A model's folder (or its compile/ folder) under coverage/models/ that is a link out of the tree was
    followed by 'opcov trace MODEL' (no --out), eager and --path compile alike."""
    from test_data_safety import FACTORIES

    (tmp_path / "userfactories.py").write_text(FACTORIES)
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    models = tmp_path / "coverage" / "models"
    models.mkdir(parents=True)
    env = child_env(PYTHONPATH=os.path.join(ROOT, "src") + os.pathsep + str(tmp_path))
    folder = models / "userfactories.good"  # the factory's model name, as its folder
    for path, link in (((), folder), (("--path", "compile"), folder / "compile")):
        if link != folder:  # the model's folder real, its compile/ folder a link
            os.unlink(folder)
            folder.mkdir()
        os.symlink(elsewhere, link)
        argv = [sys.executable, "-m", "opcov", "trace", "userfactories:good", "--mode", "inference", *path]
        proc = subprocess.run(argv, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=600)
        one_line_error(proc, "symbolic link")
        assert os.listdir(elsewhere) == []


def test_scan_and_probe_without_out_never_write_through_a_linked_backend_folder(tmp_path):
    """'opcov scan meta' (no --out) wrote coverage/meta/registered-....yaml through coverage/meta, a link out of
    the tree; ingest refused such a folder, scan and probe followed it."""
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (tmp_path / "coverage").mkdir()
    os.symlink(elsewhere, tmp_path / "coverage" / "meta")
    for argv in (["scan", "meta"], ["probe", "meta", "--ops", "^abs$", "--dtypes", "float32", "--tiers", "none"]):
        proc = subprocess.run(
            [sys.executable, "-m", "opcov", *argv], cwd=tmp_path, env=child_env(), capture_output=True, text=True
        )
        one_line_error(proc, "coverage/meta is a symbolic link")
        assert os.listdir(elsewhere) == []


def test_an_output_of_another_kind_is_refused(world, tmp_path):
    """bundle, plan and expect replace only their own kind of file, as the older commands do."""
    mine = tmp_path / "notes.md"
    mine.write_text("# notes\n")
    one_line_error(
        opcov_here("bundle", str(world / PROBED), "--source", "me", "--out", str(mine)), "a file opcov did not write"
    )
    one_line_error(
        opcov_here("bundle", str(world / PROBED), "--source", "me", "--out", str(world / "llama.yaml")),
        "an op-set file is already there",
    )
    assert mine.read_text() == "# notes\n"
    out = tmp_path / "b.gz"
    for _ in range(2):  # its own bundle is replaced
        assert opcov_here("bundle", str(world / PROBED), "--source", "me", "--out", str(out)).returncode == 0
    assert output.what_is(out.read_bytes()) == output.BUNDLE


# ---------------------------------------------------------------- names are data, never paths


def _bundle(src: str, dst: str, change) -> None:
    """A bundle rewritten by ``change`` with every hash redone (what a careful forger sends)."""
    b = json.loads(gzip.decompress(open(src, "rb").read()))
    change(b)
    b["sha256"] = hashlib.sha256(b["text"].encode()).hexdigest()
    b["bytes"] = len(b["text"].encode())
    open(dst, "wb").write(gzip.compress(json.dumps(b).encode()))


def _observed(field: str, value: str, name: str | None = None):
    def change(b):
        doc = json.loads(b["text"])
        doc["model" if field != "backend" else "backend"]["name" if field != "mode" else "mode"] = value
        if field == "backend":
            b["backend"]["name"] = value
        b["text"] = json.dumps(doc)
        if name is not None:
            b["name"] = name

    return change


@pytest.mark.parametrize(
    "field,value,name,says",
    [
        ("mode", "x/../../../../NAME.inference", None, "model.mode 'x/../../../../NAME.inference' is not"),
        ("model", "x/../../../../NAME", "x_.._.._.._.._NAME.inference.json", "holds a path separator '/'"),
        ("model", "gp\nt2", "gp_t2.inference.json", "holds a line break"),
        ("model", "gpt\x1b2", "gpt_2.inference.json", "holds a control character"),
        ("model", "..", "_..inference.json", "is a path part"),
        ("backend", "xl\x00a", None, "holds a NUL byte"),
        ("backend", "..", None, "is a path part"),
    ],
)
def test_a_name_in_a_bundle_that_is_no_name_is_refused_before_anything_is_written(
    world, tmp_path, field, value, name, says
):
    """The escape of issue 43 (model.mode 'x/../../../../NAME.inference' wrote four levels above the
    coverage folder), and every other way a name could become a path or an odd file name."""
    cov = tmp_path / "coverage"
    shutil.copytree(world / "coverage", cov)
    bad = str(tmp_path / "bad.gz")
    _bundle(str(world / "observed.gz"), bad, _observed(field, value, name))
    before, around = _tree(tmp_path), sorted(os.listdir(os.path.dirname(tmp_path)))
    one_line_error(opcov_here("ingest", bad, "--coverage", str(cov)), says)
    assert _tree(tmp_path) == before and sorted(os.listdir(os.path.dirname(tmp_path))) == around


def test_bundle_refuses_an_observed_run_whose_names_ingest_would_refuse(tmp_path):
    """'opcov bundle' packed an observed run named '../x' (exit 0), which every 'opcov ingest' then refused."""
    doc = json.load(open(OBSERVED))
    doc["model"]["name"] = "../x"
    run = tmp_path / "run.json"
    run.write_text(json.dumps(doc))
    out = tmp_path / "b.gz"
    one_line_error(opcov_here("bundle", str(run), "--source", "lab", "--out", str(out)), "model.name '../x' holds")
    assert not out.exists()


def test_a_probed_bundle_names_a_snapshot_through_layout(world, tmp_path):
    for name, says in (
        ("probed-torch-2.9.0\n.yaml", "holds a line break"),
        ("probed-torch-x-shard-1-of-2.yaml", "names one shard"),
        ("registered-torch-2.9.0.yaml", "not a probed snapshot name"),
    ):
        bad = str(tmp_path / "bad.gz")
        _bundle(str(world / "probed.gz"), bad, lambda b, n=name: b.update(name=n))
        one_line_error(opcov_here("ingest", bad, "--coverage", str(world / "coverage")), says)


def test_names_are_checked_in_one_place():
    assert layout.name_problem("gpt2") is None and layout.name_problem("probed-torch-2.13.0+cpu.yaml") is None
    for bad in ("a/b", "a\\b", "..", ".", "a\nb", "a\x00b", "a\tb", "", "é", "a b", "x" * 201, 3):
        assert layout.name_problem(bad) is not None, bad
    with pytest.raises(DataError, match="f.gz: model 'a/b' holds a path separator"):
        layout.check_name("a/b", "model", where="f.gz")
    with pytest.raises(DataError, match="starts with"):
        layout.check_name("-x", "backend", plain=True)
    with pytest.raises(UsageError):
        layout.plain_name("a\nb")
    assert layout.snapshot_name_problem("probed-torch-2.13.0+cpu.yaml", "probed") is None
    assert "line break" in layout.snapshot_name_problem("probed-torch-2\n.yaml", "probed")


def test_observed_paths_never_leave_the_coverage_folder(tmp_path):
    from opcov.store import observed

    p = observed.path_for(str(tmp_path), "xla", "x/../../../../NAME", "inference")
    assert os.path.dirname(p) == os.path.join(str(tmp_path), "observed", "xla")
    for backend, mode in (("../x", "inference"), ("xla", "../../inference"), ("x\x00", "training")):
        with pytest.raises(UsageError):
            observed.path_for(str(tmp_path), backend, "m", mode)


def test_check_inside_refuses_links_and_escapes(tmp_path):
    (tmp_path / "cov" / "ok").mkdir(parents=True)
    (tmp_path / "out").mkdir()
    os.symlink(tmp_path / "out", tmp_path / "cov" / "xla")
    output.check_inside(str(tmp_path / "cov"), str(tmp_path / "cov" / "ok" / "f.yaml"))
    for path, says in (
        (tmp_path / "cov" / "xla" / "f.yaml", "symbolic link inside"),
        (tmp_path / "cov" / ".." / "f.yaml", "not inside"),
        (tmp_path / "f.yaml", "not inside"),
    ):
        with pytest.raises(UsageError, match=says):
            output.check_inside(str(tmp_path / "cov"), str(path))
    os.symlink(tmp_path / "cov", tmp_path / "alias")  # the folder named may itself be a link
    output.check_inside(str(tmp_path / "alias"), str(tmp_path / "alias" / "ok" / "f.yaml"))


def test_lint_refuses_file_names_opcov_would_never_write_and_links(world, tmp_path):
    cov = tmp_path / "coverage"
    shutil.copytree(world / "coverage" / "models", cov / "models")
    (cov / "observed" / "xla").mkdir(parents=True)
    shutil.copy(OBSERVED, cov / "observed" / "xla" / "gp\nt2.inference.json")
    os.symlink(tmp_path, cov / "observed" / "cpu")
    proc = opcov_here("lint", "--no-catalog", str(cov))
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert "gp\\nt2.inference.json: error: file name holds a line break" in proc.stdout
    assert "observed/cpu: error: a symbolic link" in proc.stdout


# ---------------------------------------------------------------- two writers at once


def _contributions(tmp_path, world) -> tuple[str, str]:
    """Two bundles of the same versions from two machines, each with its own failing cell."""
    from opcov.store import data

    src = str(world / PROBED)
    doc = data.load(src)
    passing = [n for n, r in sorted(doc["ops"].items()) if (r.get("float32") or {}).get("fwd") == "pass"]
    bundles = []
    for i, op in enumerate(passing[:2]):
        d = data.load(src)
        d["ops"][op]["float32"].update(fwd="mismatch", why=f"machine {i}")
        folder = tmp_path / f"machine{i}"
        folder.mkdir()
        data.save(d, str(folder / PROBED))
        out = str(tmp_path / f"b{i}.gz")
        assert opcov_here("bundle", str(folder / PROBED), "--source", f"lab{i}", "--out", out).returncode == 0
        bundles.append(out)
    return bundles[0], bundles[1]


def test_two_ingests_into_one_folder_at_once_both_land(world, tmp_path):
    """Issue 43: two 'opcov ingest' of different bundles into one coverage folder at once both said
    'ingested' and one contribution was gone (5 of 5 trials). Under the folder's lock the second waits,
    then merges with the first."""
    from opcov.store import data

    a, b = _contributions(tmp_path, world)
    for trial in range(3):
        cov = tmp_path / f"cov{trial}"
        shutil.copytree(world / "coverage", cov)
        env = child_env()
        procs = [
            subprocess.Popen(
                [sys.executable, "-m", "opcov", "ingest", x, "--coverage", str(cov)],
                cwd=ROOT,
                env=env,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                text=True,
            )
            for x in (a, b)
        ]
        for p in procs:
            _out, err = p.communicate(timeout=300)
            assert p.returncode == 0, err
        doc = data.load(str(cov / "xla" / PROBED))
        assert sorted(c["source"] for c in doc["provenance"]["contributed"]) == ["lab0", "lab1"], trial
        fails = [n for n, r in doc["ops"].items() if (r.get("float32") or {}).get("fwd") == "mismatch"]
        assert len(fails) >= 2  # both machines' failing cells, merged
        assert output.LOCK_NAME not in os.listdir(cov / "xla")  # the lock file goes with its holder


def test_the_lock_makes_a_second_writer_wait(tmp_path):
    """In one process: a writer holding the folder's lock; a second process's writer waits until it is
    released, and says so."""
    code = (
        "import sys, time\n"
        "from opcov.store import output\n"
        "with output.locked(sys.argv[1], say=lambda line: print(line, flush=True)):\n"
        "    print('got it', time.time(), flush=True)\n"
    )
    with output.locked(str(tmp_path)):
        with output.locked(str(tmp_path)):  # re-entrant in one process
            pass
        proc = subprocess.Popen(
            [sys.executable, "-c", code, str(tmp_path)], env=child_env(), stdout=subprocess.PIPE, text=True
        )
        first = proc.stdout.readline()
        assert "waiting for another opcov" in first
        import time

        released = time.time()
    rest = proc.communicate(timeout=60)[0]
    assert proc.returncode == 0 and float(rest.split()[-1]) >= released
    assert os.listdir(tmp_path) == []
