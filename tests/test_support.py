"""``opcov ops PATTERN -b BACKEND`` (does a backend support X?), the Python-name index, did-you-mean
for backend names, ``summary BACKEND``, the progress line and the top-level help."""

import io
import json
import os
import subprocess
import sys

import pytest
from conftest import ROOT, child_env, opcov_here, run_opcov

from opcov import activity, cli, suggest, support
from opcov.scan import pynames
from opcov.store import layout

COVERAGE = os.path.join(ROOT, "coverage")


@pytest.fixture(scope="module")
def index():
    path = layout.pick_pynames(COVERAGE, "")
    assert path, "the Python-name index is committed under coverage/"
    return pynames.read(path)


def ops_json(*args):
    proc = opcov_here("ops", *args, "--format", "json")
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout)


# ---------------------------------------------------------------- matching


def test_exact_matches_come_first_then_prefix_then_substring():
    names = [
        "aten::_foreach_add.List",
        "aten::addmm",
        "aten::add.out",
        "prims::add",
        "aten::add.Tensor",
        "aten::mul.Tensor",
    ]
    ranked = support.rank("add", names, {})
    assert [m.op for m in ranked] == [
        "aten::add.Tensor",
        "aten::add.out",
        "prims::add",
        "aten::addmm",
        "aten::_foreach_add.List",
    ]
    assert [m.how for m in ranked] == ["exact", "exact", "exact", "prefix", "substring"]
    # a full name or a name without its namespace is exact too; a Python name's ops come right after
    assert support.rank("add.Tensor", names, {})[0].op == "aten::add.Tensor"
    ranked = support.rank("add", names, {"torch.add": ("aten::add.Tensor", "aten::mul.Tensor")})
    assert ranked[0].via == ("torch.add",)
    assert [m.op for m in ranked if m.how == "Python name"] == ["aten::mul.Tensor"]


def test_cli_answer_lists_exact_matches_first_and_says_what_it_left_out():
    doc = ops_json("add", "-b", "tpu")
    assert doc["ops"][0]["op"] == "aten::add.Tensor"
    assert {o["match"] for o in doc["ops"]} == {"exact"}
    assert doc["more"]["prefix"] > 0 and doc["more"]["substring"] > 0
    everything = ops_json("add", "-b", "tpu", "--all", "--limit", "0")
    order = [support.HOW.index(o["match"]) for o in everything["ops"]]
    assert order == sorted(order) and order[-1] == support.HOW.index("substring")


# ---------------------------------------------------------------- Python names


@pytest.mark.parametrize(
    "query, name, op",
    [
        ("torch.nn.functional.layer_norm", "torch.nn.functional.layer_norm", "aten::native_layer_norm"),
        ("F.layer_norm", "torch.nn.functional.layer_norm", "aten::native_layer_norm"),
        ("nn.LayerNorm", "torch.nn.LayerNorm", "aten::native_layer_norm"),
        ("LayerNorm", "torch.nn.LayerNorm", "aten::native_layer_norm"),
        ("F.gelu", "torch.nn.functional.gelu", "aten::gelu"),
        ("torch.softmax", "torch.softmax", "aten::_softmax"),
        ("Tensor.softmax", "torch.Tensor.softmax", "aten::_softmax"),
        ("Tensor.add_", "torch.Tensor.add_", "aten::add_.Tensor"),
        ("nn.Linear", "torch.nn.Linear", "aten::addmm"),
    ],
)
def test_python_names_map_to_the_aten_ops_they_dispatch(index, query, name, op):
    assert index.resolve(query) == [name]
    assert op in index.names[name]


def test_bare_names_and_composite_parents(index):
    assert index.resolve("softmax") == ["torch.Tensor.softmax", "torch.nn.functional.softmax", "torch.softmax"]
    assert index.resolve("layernorm") == ["torch.nn.LayerNorm"]  # case-insensitive when nothing else matches
    assert index.resolve("F.no_such_function") == [] and index.resolve("no_such_function") == []
    # a composite a backend may have its own kernel for is recorded with what it decomposes into
    assert {"aten::linear", "aten::mm"} <= set(index.names["torch.nn.functional.linear"])
    assert index.names["torch.nn.functional.gelu"] == ("aten::gelu",)


def test_index_is_for_the_data_torch_and_reads_back(index, tmp_path):
    reg = layout.pick(layout.snapshots(COVERAGE, "cpu")["registered"], "")
    assert os.path.basename(reg).split("-torch-")[1].startswith(index.torch)
    assert index.header["command"] == pynames.COMMAND and int(index.header["names"]) == len(index.names)
    path = tmp_path / "pynames-torch-x.tsv"
    pynames.write(str(path), {"torch.f": ("aten::b", "aten::a"), "torch.g": ()}, {"torch": "x"})
    again = pynames.read(str(path))
    assert again.names == {"torch.f": ("aten::a", "aten::b"), "torch.g": ()} and again.torch == "x"
    path.write_text(path.read_text() + "torch.h aten::c\n")
    with pytest.raises(Exception, match=r":\d+: expected"):
        pynames.read(str(path))


def test_builder_records_composites_and_what_they_decompose_into():
    torch = pytest.importorskip("torch")
    import torch.nn.functional as F

    runner = pynames._Runner(torch)
    x = torch.empty(2, 3, 8, device="meta")
    runner.run("torch.nn.functional.gelu", [lambda: lambda: F.gelu(x)])
    runner.run("torch.nn.LayerNorm", [pynames._module_call(torch, torch.nn.LayerNorm, (8,), {}, (x,), {}, True)])
    runner.run("broken", [lambda: lambda: F.gelu("not a tensor")])
    assert runner.result() == {
        "torch.nn.functional.gelu": ("aten::gelu",),
        "torch.nn.LayerNorm": ("aten::layer_norm", "aten::native_layer_norm"),
    }


# ---------------------------------------------------------------- the answer per backend


def test_tpu_is_registered_unverified_and_cpu_probed_per_dtype():
    doc = ops_json("F.layer_norm", "-b", "tpu", "-b", "cpu")
    assert doc["python_names"] == {"torch.nn.functional.layer_norm": ["aten::layer_norm", "aten::native_layer_norm"]}
    by_op = {o["op"]: o for o in doc["ops"]}
    native = by_op["aten::native_layer_norm"]
    assert native["match"] == "Python name" and native["schema"].startswith("aten::native_layer_norm(Tensor input")
    tpu, cpu = native["backends"]["tpu"], native["backends"]["cpu"]
    assert tpu["forward"]["evidence"] == "registered" and tpu["forward"]["text"] == "registered, unverified (kernel)"
    assert tpu["backward"]["evidence"] == "registered" and "dtypes" not in tpu["forward"]
    assert cpu["forward"]["evidence"] == "probed"
    assert cpu["forward"]["dtypes"] == {"bfloat16": "pass", "float16": "pass", "float32": "pass", "float64": "pass"}
    assert cpu["backward"]["evidence"] == "probed"
    # the composite parent: no OpInfo is about it; its schema case (float32 only) reaches it on cpu
    parent = by_op["aten::layer_norm"]["backends"]["cpu"]["forward"]
    assert parent["evidence"] == "probed" and parent["dtypes"] == {"float32": "pass"}


def test_text_answer_and_no_torch_import():
    code = (
        "import sys; from opcov.cli import main; rc = main(['ops', 'nn.LayerNorm', '-b', 'tpu', '-b', 'cpu']); "
        "assert 'torch' not in sys.modules, 'torch imported'; sys.exit(rc)"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=child_env(), cwd=ROOT)
    assert proc.returncode == 0, proc.stderr
    out = proc.stdout
    first, _, rest = out.partition("\n\n")  # the one-line answer first, for the best match
    assert first == (
        "answer: aten::layer_norm | tpu: forward registered, unverified; backward registered, unverified | "
        "cpu: forward pass: float32; backward registered, unverified"
    ), first
    assert rest.startswith("torch.nn.LayerNorm -> aten::layer_norm, aten::native_layer_norm\n")
    assert "aten::native_layer_norm  [Python name torch.nn.LayerNorm]" in out
    rows = [line.split(None, 3) for line in out.splitlines() if line.startswith(("  tpu ", "  cpu "))]
    assert ["tpu", "forward", "registered", "registered, unverified (kernel)"] in rows
    assert ["cpu", "forward", "probed", "pass: bfloat16, float16, float32, float64"] in rows
    assert "registered evidence: " in out and "probed evidence: " in out


def test_probed_failures_show_their_status_and_why():
    from opcov.verdict.judge import Coverage

    probed = {
        "provenance": {},
        "ops": {
            "aten::x": {
                "float16": {"fwd": "mismatch", "why": "max error 0.5", "bwd": "pass"},
                "float32": {"fwd": "pass", "bwd": "pass"},
            }
        },
    }
    cov = Coverage("dev", None, probed, [])
    fwd = support.status(cov, "aten::x", "forward")
    assert (fwd.evidence, fwd.status, fwd.text) == ("probed", "mismatch", "mismatch: float16; pass: float32")
    assert fwd.why == "float16: max error 0.5"
    absent = support.status(cov, "aten::y", "forward")
    assert (absent.evidence, absent.status) == ("none", "absent") and absent.note == "probe: not in the probed data"


def test_nothing_matches_suggests_close_names():
    proc = opcov_here("ops", "F.geluu", "-b", "tpu")
    assert proc.returncode == 2 and proc.stderr.count("\n") == 1
    assert "did you mean 'torch.nn.functional.gelu'" in proc.stderr


# ---------------------------------------------------------------- did you mean, summary BACKEND


@pytest.mark.parametrize(
    "argv",
    [
        ("ops", "add", "-b", "tpuu"),
        ("gaps", "tpuu"),
        ("summary", "tpuu"),
        ("check", "llama", "-b", "tpuu"),
        ("check", "hf:qwen3", "-b", "tpuu"),
    ],
)  # before tracing: fails at once
def test_unknown_backend_did_you_mean(argv):
    proc = opcov_here(*argv)
    assert proc.returncode == 2 and proc.stderr.count("\n") == 1, proc.stderr
    assert "unknown backend 'tpuu' (did you mean 'tpu'?)" in proc.stderr
    assert f"backends with data under {layout.DEFAULT_COVERAGE}/: " in proc.stderr and "cpu, " in proc.stderr


def test_known_backend_without_data_says_how_to_make_it(tmp_path):
    (tmp_path / "cpu").mkdir()
    err = str(suggest.no_backend_data("neuron", str(tmp_path)))
    assert (
        "'opcov scan neuron'" in err
        and "did you mean" not in err
        and err.endswith(f"with data under {tmp_path}/: none")
    )
    assert suggest.did_you_mean("TPU", ["cpu", "tpu"]).startswith(" (did you mean 'tpu'")
    assert suggest.did_you_mean("zzz", ["cpu", "tpu"]) == ""


def test_summary_backend_is_its_files():
    by_name = opcov_here("summary", "tpu")
    by_path = opcov_here("summary", os.path.join("coverage", "tpu"))
    assert by_name.returncode == 0, by_name.stderr
    assert by_name.stdout == by_path.stdout and by_name.stdout.startswith("tpu (torch_tpu ")
    assert "\n  file: coverage/tpu/registered-" in by_name.stdout


# ---------------------------------------------------------------- catalogue without torch


def test_ops_without_torch_lists_the_registered_data(monkeypatch, capsys):
    monkeypatch.setattr(support, "is_torch_installed", lambda: False)
    monkeypatch.chdir(ROOT)
    assert cli.main(["ops", "softmax", "--format", "json"]) == 0
    captured = capsys.readouterr()
    names = [o["name"] for o in json.loads(captured.out)["ops"]]
    assert names[0] == "aten::softmax.int" and "aten::_softmax" in names[:6]
    assert "torch is not installed: op names and tags from coverage/cpu/registered-" in captured.err


# ---------------------------------------------------------------- progress, help, next step


class _Terminal(io.StringIO):
    def isatty(self):
        return True


def test_activity_spins_on_a_terminal_only(monkeypatch):
    monkeypatch.setattr(activity, "INTERVAL", 0.01)
    monkeypatch.setattr(activity, "DELAY", 0.01)
    monkeypatch.setenv("TERM", "xterm")
    quiet = io.StringIO()
    with activity.activity("working", quiet) as say:
        say("step")
    assert quiet.getvalue() == ""
    tty = _Terminal()
    with activity.activity("working", tty) as say:
        say("step 1")
        import time

        time.sleep(0.1)
    text = tty.getvalue()
    assert "working: step 1 (0s)" in text and text.endswith("\r\033[K")
    monkeypatch.setattr(activity, "DELAY", 5)
    brief = _Terminal()
    with activity.activity("quick", brief):
        pass
    assert brief.getvalue() == ""  # a phase shorter than DELAY draws nothing


def test_help_lists_check_and_trace_first_with_examples():
    proc = opcov_here("--help")
    assert proc.returncode == 0
    listed = proc.stdout.split("{", 1)[1].split("}", 1)[0].split(",")
    assert listed[:2] == ["check", "trace"]
    examples = proc.stdout.split("examples:", 1)[1]
    assert examples.count("opcov check ") == 2 and examples.count("opcov trace ") == 2


def test_trace_ends_with_the_check_to_run():
    proc = run_opcov("trace", "coverage/models/llama/inference.yaml")
    assert proc.returncode == 0, proc.stderr
    last = proc.stdout.strip().splitlines()[-1]
    assert last.startswith("next: opcov check coverage/models/llama/inference.yaml -b ") and "-b tpu" in last


def test_sdpa_says_which_kernel_each_backend_dispatches_to(tmp_path):
    """scaled_dot_product_attention once read as its math decomposition on every backend. The answer and the
    op page name the kernel each backend dispatches to, with its evidence: cpu's chooser called here on the
    zoo's calls (probed), tpu's from what it registers (registered, unverified)."""
    import shutil

    from opcov.site import model as sitemodel

    proc = opcov_here("ops", "scaled_dot_product_attention", "-b", "cpu", "-b", "tpu")
    assert proc.returncode == 0, proc.stderr
    first = proc.stdout.splitlines()[0]
    assert "cpu: dispatches to aten::_scaled_dot_product_flash_attention_for_cpu" in first
    assert "(probed)" in first and "_scaled_dot_product_fused_attention_overrideable" in first
    assert "    cpu: aten::_scaled_dot_product_flash_attention_for_cpu on " in proc.stdout
    tpu = next(ln for ln in proc.stdout.splitlines() if ln.startswith("    tpu: "))
    assert "registered, unverified" in tpu and "_fused_sdp_choice_stub" in tpu
    as_json = json.loads(opcov_here("ops", "scaled_dot_product_attention", "-b", "cpu", "--format", "json").stdout)
    assert as_json["ops"][0]["dispatches_to"]["cpu"]["evidence"] == "probed"
    cov = tmp_path / "coverage"
    for b in ("cpu", "tpu"):
        (cov / b).mkdir(parents=True)
        for f in layout.snapshots(os.path.join(ROOT, "coverage"), b)["registered"]:
            if "torch-2.13.0" in f:  # the torch the zoo's op sets were traced with (the site shows its data)
                shutil.copy(f, cov / b)
    site = sitemodel.load_site(str(cov), parallel=False)
    for b, says in (("cpu", "(probed: "), ("tpu", "(registered, unverified: ")):
        answer = sitemodel.op_answer(site.backend(b), "aten::scaled_dot_product_attention")
        assert "; dispatches to " in answer.sentence() and says in answer.sentence(), answer.sentence()


def test_ops_words_an_unresolved_reach_and_keeps_the_exception_in_the_json():
    """'opcov ops' says why a backward's reach is unknown in words; the scan's exception is the JSON's detail."""
    proc = opcov_here("ops", "aten::native_layer_norm_backward", "-b", "cpu")
    assert proc.returncode == 0, proc.stderr
    assert "which kernels its backward calls is unknown" in proc.stdout and "RuntimeError" not in proc.stdout
    row = ops_json("aten::native_layer_norm_backward", "-b", "cpu")["ops"][0]
    assert "RuntimeError: shape" in row["backends"]["cpu"]["backward"]["detail"]
