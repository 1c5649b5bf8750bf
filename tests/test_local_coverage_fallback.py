"""A ./coverage made by 'opcov trace' (op sets under models/, no backend data) never hides the bundled
data (issue 44, item 1): check, gaps and compare read a backend ./coverage lacks from the bundled data
and say so in one line; a folder named with --coverage is read alone; local data for a backend wins."""

from __future__ import annotations

import shutil

import pytest

from opcov import cli
from opcov.store import layout
from opcov.verdict import check

BUNDLED = layout.bundled_coverage()
pytestmark = pytest.mark.skipif(BUNDLED is None, reason="no bundled coverage data in this install")


@pytest.fixture
def traced_here(tmp_path, monkeypatch):
    """A user's folder as cwd: ./coverage/models/x/ from a trace, and a saved op set gru.yaml.
    A live scan is recorded in ``scans`` and finds nothing (no backend installed)."""
    opset = f"{BUNDLED}/models/nn-gru/inference.yaml"
    (tmp_path / "coverage" / "models" / "x").mkdir(parents=True)
    shutil.copy(opset, tmp_path / "coverage" / "models" / "x" / "inference.yaml")
    shutil.copy(opset, tmp_path / "gru.yaml")
    monkeypatch.chdir(tmp_path)

    scans.clear()
    monkeypatch.setattr(check, "live_scan", lambda backend, names: scans.append(backend))
    return tmp_path


scans: list[str] = []  # the backends a test's check tried to scan live


def said(err: str, backend: str) -> list[str]:
    return [ln for ln in err.splitlines() if f"has no {backend} data; using the bundled data for {backend}" in ln]


ALL = (  # the one line where ./coverage holds no backend's data at all (op sets only)
    f"opcov: ./coverage holds op sets only, no backend's data: every backend's is read from the bundled data ({BUNDLED})"
)


def test_check_answers_from_the_bundled_data_and_says_so_in_one_line(traced_here, capsys):
    """One line for every backend read (tpu, cuda, and cpu, the reference): it said one line per backend."""
    assert cli.main(["check", "gru.yaml", "-b", "tpu", "-b", "cuda"]) == 0
    out, err = capsys.readouterr()
    assert "tpu      inference  runs" in out and "cuda     inference  runs" in out
    assert err.splitlines() == [ALL]
    for backend in ("tpu", "cuda"):
        assert f"data: {BUNDLED}/{backend}/" in out
    assert scans == []


def test_gaps_and_compare_share_the_fallback(traced_here, capsys):
    assert cli.main(["gaps", "tpu"]) == 0
    assert capsys.readouterr().err.splitlines() == [ALL]
    assert cli.main(["compare", "tpu", "cuda"]) == 0
    out, err = capsys.readouterr()
    assert err.splitlines() == [ALL]
    assert "1 model op set(s)" in out


def test_local_data_for_a_backend_wins(traced_here, capsys):
    (traced_here / "coverage" / "tpu").mkdir()
    for path in layout.snapshots(BUNDLED, "tpu")["registered"]:
        shutil.copy(path, traced_here / "coverage" / "tpu")
    assert cli.main(["check", "gru.yaml", "-b", "tpu", "-b", "cuda"]) == 0
    out, err = capsys.readouterr()
    assert not said(err, "tpu") and len(said(err, "cuda")) == 1
    assert "data: coverage/tpu/" in out


def test_a_folder_named_with_coverage_is_read_alone(traced_here, capsys):
    assert cli.main(["check", "gru.yaml", "-b", "cuda", "--coverage", "coverage"]) == 0  # a row: no data yet
    out, err = capsys.readouterr()
    assert "NO DATA YET" in out and "opcov has no coverage data for cuda" in out and "bundled" not in out + err
    assert scans == ["cuda"]  # only where neither ./coverage nor (unnamed) the bundled data has it


def test_an_unknown_backend_still_fails_in_one_line(traced_here, capsys):
    assert cli.main(["check", "gru.yaml", "-b", "tpuu"]) == 2
    err = capsys.readouterr().err
    assert "did you mean 'tpu'?" in err and "or the bundled data: " in err


@pytest.fixture
def compiled_here(tmp_path, monkeypatch):
    """A user's folder as cwd after 'opcov trace FACTORY --path compile': ./coverage/models/mine/compile/
    holds a compiled op set, and nothing else is there (no eager op set, no backend data)."""
    folder = tmp_path / "coverage" / "models" / "mine" / "compile"
    folder.mkdir(parents=True)
    shutil.copy(f"{BUNDLED}/models/nn-convnet/compile/tpu-inference.yaml", folder / "tpu-inference.yaml")
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(check, "trace_on_the_fly", lambda *a, **k: pytest.fail("traced a zoo model anew"))
    return tmp_path


def test_a_zoo_model_by_name_is_read_from_the_bundled_zoo_not_traced_anew(compiled_here, capsys):
    """'check nn-gru' where ./coverage/models has no nn-gru judged the bundled op sets (every mode), said once;
    before, it traced the model on the fly (one mode, and tens of seconds)."""
    assert cli.main(["check", "nn-gru", "-b", "tpu"]) == 0
    out, err = capsys.readouterr()
    assert "tpu      inference  runs" in out and "tpu      training   runs" in out
    lines = [ln for ln in err.splitlines() if "using the bundled op sets of nn-gru" in ln]
    assert lines == [f"opcov: ./coverage/models/nn-gru is not there; using the bundled op sets of nn-gru "
                     f"({BUNDLED}/models/nn-gru)"]  # fmt: skip


def test_the_answer_is_the_bundled_datas_whole_observed_runs_and_vendor_expectations_too(compiled_here, capsys):
    """From a ./coverage that a trace made, 'check llama -b tpu -b xla' read the bundled snapshots but not the
    bundled observed runs or TorchTPU's test expectations: xla said 'probed' where the bundled data says
    'observed', and tpu's notes lacked its tests' expectations. Now the answer is the one the bundled data gives."""
    argv = ["check", "llama", "-b", "tpu", "-b", "xla", "--mode", "inference"]
    assert cli.main(argv) == 0
    here = capsys.readouterr().out
    assert cli.main([*argv, "--coverage", BUNDLED]) == 0
    assert here == capsys.readouterr().out
    assert "xla      inference  runs     observed" in here and "TorchTPU's tests expect" in here


def test_a_misspelt_zoo_name_is_matched_against_the_bundled_zoo_too(compiled_here, monkeypatch, capsys):
    """Without transformers (the base install), the nearest names came from ./coverage/models alone."""
    from opcov import modelnames

    monkeypatch.setattr(modelnames, "model_types", lambda: None)
    assert cli.main(["check", "nn-grux", "-b", "tpu"]) == 2
    assert "did you mean nn-gru" in capsys.readouterr().err


def test_the_compile_path_reads_the_bundled_compile_coverage(compiled_here, capsys):
    """'check DIR --path compile' on the user's compiled op set, and on a zoo model by name, where ./coverage
    has no compile coverage: the bundled compile coverage judges them, said once per backend (before: 'tpu
    has no compile coverage under coverage/tpu/compile/; make it with opcov scan tpu --path compile')."""
    assert cli.main(["check", "coverage/models/mine/compile", "-b", "tpu", "--path", "compile"]) == 0
    out, err = capsys.readouterr()
    assert "tpu inference (compile path, tpu): runs" in out and err.splitlines() == [ALL]
    assert cli.main(["check", "nn-convnet", "-b", "cuda", "--path", "compile", "--mode", "inference"]) == 0
    out, err = capsys.readouterr()
    assert "cuda inference (compile path, inductor): runs" in out and ALL in err.splitlines()
    (compiled_here / "coverage" / "cuda").mkdir()  # eager data of its own, no compile coverage: said per backend
    for path in layout.snapshots(BUNDLED, "cuda")["registered"]:
        shutil.copy(path, compiled_here / "coverage" / "cuda")
    assert cli.main(["check", "coverage/models/mine/compile", "-b", "tpu", "--path", "compile"]) == 0
    assert capsys.readouterr().err.splitlines() == [
        f"opcov: ./coverage has no tpu compile data; using the bundled data for it ({BUNDLED}/tpu/compile)",
        # its graph breaks run eagerly: the bundled zoo's eager op set, judged on the bundled eager data
        f"opcov: ./coverage has no tpu data; using the bundled data for tpu ({BUNDLED}/tpu)",
    ]


def test_gaps_and_compare_read_the_bundled_zoo_where_coverage_holds_no_eager_op_set(compiled_here, capsys):
    """Before: 'no model op sets under coverage/models/: trace some with opcov zoo trace'."""
    for argv in (["gaps", "tpu", "--top", "1"], ["compare", "tpu", "cuda", "--models", "nn-gru,nn-lstm"]):
        assert cli.main(argv) == 0
        out, err = capsys.readouterr()
        assert f"opcov: ./coverage/models holds no eager op set; reading the bundled zoo ({BUNDLED}/models)" in err
    assert "4 model op set(s) of 2 model(s)" in out


def test_a_python_name_resolves_with_the_bundled_index(compiled_here, capsys):
    """'opcov ops F.layer_norm -b tpu' (README's quick start) found no op where ./coverage holds no index."""
    assert cli.main(["ops", "F.layer_norm", "-b", "tpu"]) == 0
    assert capsys.readouterr().out.startswith("answer: aten::layer_norm | tpu: forward registered")


def test_site_renders_the_bundled_data_where_coverage_holds_op_sets_only(compiled_here):
    """'opcov site' in such a folder said "coverage: no coverage files; create one with 'opcov scan BACKEND'"
    (README's site command, after a trace). The folder it renders instead (the render itself is test_site's)."""
    lines: list[str] = []
    found = layout.read_coverage(None, say=lines.append)
    assert layout.site_coverage(found) == BUNDLED and layout.site_coverage(found) == BUNDLED
    assert lines == [f"opcov: ./coverage holds op sets only, no backend's data; rendering the bundled data ({BUNDLED})"]
    assert layout.site_coverage("coverage") == "coverage"  # named with --coverage: read alone
    (compiled_here / "coverage" / "tpu").mkdir()
    for path in layout.snapshots(BUNDLED, "tpu")["registered"]:
        shutil.copy(path, compiled_here / "coverage" / "tpu")
    assert layout.site_coverage(layout.read_coverage(None)) == "coverage"  # data of its own: its site


@pytest.mark.parametrize("where", ["opsets/brk", "coverage/models/nn-gru"])
def test_graph_breaks_run_the_eager_op_set_beside_the_compiled_one(compiled_here, where, capsys):
    """A GRU model's compile graph-breaks at its RNN and runs that part eagerly: the eager op set is looked for
    beside the compiled one (a user's DIR/compile/ sits in DIR, whatever the model's name) before the zoo's, so
    the breaks are judged (before: 'unknown', no eager op set of a model the zoo lacks), from a folder of the
    user's own and from a trace-made ./coverage whose zoo name the bundled data also has."""
    import yaml

    folder = compiled_here / where
    (folder / "compile").mkdir(parents=True)
    for rel in ("training.yaml", "compile/inductor-training.yaml"):
        doc = yaml.safe_load(open(f"{BUNDLED}/models/nn-gru/{rel}"))
        doc.pop("integrity", None)
        doc["model"]["name"] = "brk" if where.startswith("opsets") else "nn-gru"
        (folder / rel).write_text(yaml.safe_dump(doc, sort_keys=False))
    assert cli.main(["check", f"{where}/compile", "-b", "cuda", "--path", "compile"]) == 0
    out = capsys.readouterr().out
    assert (
        "cuda training (compile path, inductor): runs" in out and "eagerly at the breaks (eager coverage): runs" in out
    )
