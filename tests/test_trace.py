"""Model op sets: traced ops match eager execution, the target device's paths are taken, the zoo
data is reproducible, and user mistakes give one line.

Tracing for an accelerator claims PrivateUse1 (a stand-in device), which can happen once per
process, so every trace here runs in a child process.
"""

import json
import os
import re
import subprocess
import sys
import textwrap

import pytest
from conftest import ROOT, child_env, load_yaml, opcov_here, run_opcov_batch

ZOO_DIR = os.path.join(ROOT, "coverage", "models")


def nodes(doc):
    from opcov.store import opset

    return opset.nodes(doc)


def one(tree, op):
    found = [n for n in tree if n.op == op]
    assert len(found) == 1, (op, found)
    return found[0]


def children(tree, node):
    return [n for n in tree if n.parent == node.id]


def run_child(code: str, timeout=600) -> dict:
    """Run ``code`` in a fresh Python; it prints one JSON document as its last line."""
    proc = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)],
        capture_output=True,
        text=True,
        env=child_env(HF_HUB_OFFLINE="1"),
        timeout=timeout,
        cwd=ROOT,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


# Eager reference: real CPU tensors, the model called directly, recorded by a dispatch mode
# written here (not opcov's), with what opcov documents it drops removed.
EAGER = """
import json, os, torch
from torch.utils._python_dispatch import TorchDispatchMode
from opcov.sources import models
from opcov.sources import zoo
from opcov.tracing.trace import trace

class Eager(TorchDispatchMode):
    phase = "forward"
    def __init__(self):
        super().__init__(); self.seen = set()
    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        over = func._overloadname
        self.seen.add((self.phase, f"{func.namespace}::{func._opname}" + ("" if over == "default" else "." + over)))
        return func(*args, **(kwargs or {}))

def eager(entry):
    torch.manual_seed(0)
    b = models.build(entry.spec, models.Sizes(), mode="training", real=True, zoo_entry=entry)
    b.model.train()
    rec = Eager()
    with rec:
        out = b.model(**b.inputs) if isinstance(b.inputs, dict) else b.model(*b.inputs)
        loss = out.loss if hasattr(out, "loss") else out.sum()
        rec.phase = "backward"
        loss.backward()
    return {(p, n) for p, n in rec.seen
            if not n.startswith(("prim::", "profiler::")) and n != "aten::detach" and "::sym_" not in n}

out = {}
for name in NAMES:
    e = zoo.BY_NAME[name]
    b = models.build(e.spec, models.Sizes(), mode="training", real=False, zoo_entry=e)
    traced = trace(b.model, b.inputs, mode="training", device="cpu", optimizer="none")
    fake = {(p, op) for op, rec in traced.ops.items() for p in rec}
    ref = eager(e)
    out[name] = {"only_traced": sorted(map(list, fake - ref)), "only_eager": sorted(map(list, ref - fake)),
                 "n": len(fake)}
print(json.dumps(out))
"""


@pytest.fixture(scope="module")
def eager_vs_traced():
    return run_child("NAMES = ['nn-convnet', 'bert', 'llama']\n" + EAGER)


@pytest.mark.parametrize("name", ["nn-convnet", "bert"])
def test_fake_trace_equals_eager_cpu_forward_and_backward(eager_vs_traced, name):
    got = eager_vs_traced[name]
    assert got["n"] > 10
    assert got["only_traced"] == [] and got["only_eager"] == []


def test_llama_differs_from_eager_only_by_transformers_mask_shortcut(eager_vs_traced):
    """transformers reads the attention mask's values on real tensors (``mask.all()`` -> host sync) and,
    when it is all ones, skips the mask and asks sdpa for is_causal; fake tensors have no values, so
    it builds the full causal mask instead. Every other forward and backward op is the same."""
    got = eager_vs_traced["llama"]
    mask_building = {
        "aten::bitwise_and.Tensor",
        "aten::eq.Tensor",
        "aten::index.Tensor",
        "aten::le.Tensor",
        "aten::new_ones",
        "aten::scalar_tensor",
        "aten::where.self",
    }
    mask_reading = {"aten::_local_scalar_dense", "aten::all", "aten::eq.Scalar", "aten::select.int"}
    only_traced = {op for phase, op in got["only_traced"] if phase == "forward"}
    assert only_traced <= mask_building
    # applying the full mask in sdpa's math path changes one view in its backward
    assert {tuple(x) for x in got["only_traced"] if x[0] == "backward"} <= {("backward", "aten::squeeze.dim")}
    assert {op for _, op in got["only_eager"]} <= mask_reading
    assert got["n"] > 40


@pytest.fixture(scope="module")
def targets():
    return run_child("""
        import json, torch
        import opcov
        from opcov.sources import models
        from opcov.sources import zoo

        def names(doc, phase):
            return sorted(op for op, rec in doc.ops.items() if phase in rec)

        class Drop(torch.nn.Module):
            def __init__(self):
                super().__init__()
                self.lin = torch.nn.Linear(8, 8)
            def forward(self, x):
                return torch.nn.functional.dropout(self.lin(x), 0.1, self.training)

        with torch.device("meta"):
            m, x = Drop(), torch.randn(4, 8)
        out = {}
        for device in ("tpu", "cpu"):  # the stand-in device must exist before autograd first runs
            t = opcov.trace(m, (x,), mode="training", device=device)
            out[device] = {p: names(t, p) for p in ("forward", "backward", "optimizer")}
            out[device + "_doc"] = t.doc
        bf = opcov.trace(m, (x,), mode="inference", dtype="bfloat16")
        out["bf16"] = bf.doc
        with torch.device("meta"):
            mlp = torch.nn.Sequential(torch.nn.Linear(8, 8), torch.nn.SiLU(), torch.nn.LayerNorm(8),
                                      torch.nn.Linear(8, 4))
        out["mlp"] = opcov.trace(mlp, (x,), mode="training").doc
        out["mlp_cpu"] = opcov.trace(mlp, (x,), mode="training", device="cpu").doc
        out["autocast"] = opcov.trace(m, (x,), mode="inference", autocast=True, device="tpu").doc
        e = zoo.BY_NAME["nn-convnet"]
        b = models.build(e.spec, models.Sizes(), mode="training", real=False, zoo_entry=e)
        out["conv_acc"] = names(opcov.trace(b.model, b.inputs, device="tpu"), "forward")
        out["conv_cpu"] = names(opcov.trace(b.model, b.inputs, device="cpu"), "forward")
        from opcov.tracing.spec import trace_spec
        for ref in ("mixtral", "nn-convnet", "nn:convnet"):
            doc = trace_spec(ref, mode="inference").doc
            out["spec:" + ref] = {"dtype": doc["dtype"], "name": doc["model"]["name"],
                                  "command": doc["provenance"]["command"], "ops": sorted(doc["ops"]),
                                  "notes": doc["provenance"]["notes"]}
        out["real:llama"] = trace_spec("llama", mode="inference").doc
        out["real:nn-lstm"] = trace_spec("nn-lstm", mode="inference").doc["provenance"]["notes"]
        print(json.dumps(out))
    """)


def test_dropout_takes_the_accelerator_path(targets):
    assert "aten::native_dropout" in targets["tpu"]["forward"]
    assert "aten::native_dropout_backward" in targets["tpu"]["backward"]
    assert "aten::bernoulli_.float" not in targets["tpu"]["forward"]
    assert "aten::native_dropout" not in targets["cpu"]["forward"]  # the CPU composite: bernoulli_ then div_
    assert any(op.startswith("aten::bernoulli_") for op in targets["cpu"]["forward"])
    tree = nodes(targets["tpu_doc"])
    dropout = one(tree, "aten::dropout")
    assert (dropout.kind, dropout.phase, dropout.calls, dropout.args) == ("composite", "forward", 1, "p=0.1")
    assert [n.op for n in children(tree, dropout)] == ["aten::native_dropout"]


def test_optimizer_is_what_the_target_runs(targets):
    acc, cpu = targets["tpu"]["optimizer"], targets["cpu"]["optimizer"]
    assert acc and all(op.startswith("aten::_foreach_") or op == "aten::zeros_like" for op in acc), acc
    assert "aten::addcdiv_.default" in cpu or "aten::addcdiv_" in cpu  # CPU default: single-tensor AdamW
    assert not any(op.startswith("aten::_foreach_") for op in cpu)
    tree = nodes(targets["tpu_doc"])
    step = one(tree, "torch.optim.AdamW.step")
    assert (step.kind, step.phase, step.args) == ("call", "optimizer", "foreach=True")
    assert {n.op for n in children(tree, step)} == set(acc)  # every optimizer call is under the step
    assert all(n.parent == step.id for n in tree if n.phase == "optimizer" and n is not step)


def test_call_tree_follows_autograd_into_the_backward(targets):
    """Composite calls autograd makes in the backward (silu_backward) are nodes with their decomposition
    below them, and each backward root is tied to the forward call whose autograd node issued it."""
    tree = nodes(targets["mlp"])
    by_id = {n.id: n for n in tree}
    silu_bwd = one(tree, "aten::silu_backward")
    assert (silu_bwd.kind, silu_bwd.phase, silu_bwd.parent) == ("composite", "backward", None)
    assert by_id[silu_bwd.issued_by].op == "aten::silu" and by_id[silu_bwd.issued_by].phase == "forward"
    assert "aten::sigmoid" in {n.op for n in children(tree, silu_bwd)}
    linears = [n for n in tree if n.op == "aten::linear"]
    assert len(linears) == 1 and linears[0].calls == 2 and linears[0].grad  # both calls, one node
    addmm = [n for n in children(tree, linears[0]) if n.op == "aten::addmm"]
    assert len(addmm) == 1
    issued = {n.op for n in tree if n.issued_by == addmm[0].id}
    assert {"aten::mm", "aten::sum.dim_IntList"} <= issued  # AddmmBackward0's calls
    assert one(tree, "aten::layer_norm").kind == "composite"
    ln_bwd = one(tree, "aten::native_layer_norm_backward")
    assert by_id[ln_bwd.issued_by].op == "aten::native_layer_norm"
    # the flat view is the tree's kernel calls
    flat = {}
    for n in tree:
        if n.kind == "kernel":
            flat[(n.op, n.phase, n.dtype)] = flat.get((n.op, n.phase, n.dtype), 0) + n.calls
    assert flat == {
        (op, ph, dt): c["calls"]
        for op, rec in targets["mlp"]["ops"].items()
        for ph, cells in rec.items()
        for dt, c in cells.items()
    }


def test_cpu_trace_has_only_the_function_level_parents(targets):
    doc = targets["mlp_cpu"]
    tree = nodes(doc)
    assert {n.op for n in tree if n.kind == "composite"} == {"aten::linear"}
    assert one(tree, "aten::silu_backward").kind == "kernel"  # CPU has its own kernel; the stand-in has none
    assert any("the calltree has only the composite calls" in note for note in doc["provenance"]["notes"])


def test_convolution_is_recorded_where_the_backend_receives_it(targets):
    """aten::convolution has its own autograd kernel, so a backend receives it (then its
    CompositeExplicitAutograd kernel or the backend's own); the scan's ``via`` resolves the rest."""
    assert "aten::convolution" in targets["conv_acc"] and "aten::convolution" in targets["conv_cpu"]


def test_stand_in_registered_after_autograd_started_falls_back_to_cpu_and_says_so():
    got = run_child("""
        import json, torch
        import opcov
        with torch.device("meta"):
            m, x = torch.nn.Sequential(torch.nn.Linear(8, 8), torch.nn.Dropout(0.1)), torch.randn(4, 8)
        first = opcov.trace(m, (x,), device="cpu")  # autograd starts without the stand-in device
        late = opcov.trace(m, (x,), device="tpu")
        print(json.dumps({"notes": late.doc["provenance"]["notes"], "ops": sorted(late.ops)}))
    """)
    assert any("traced on cpu for target tpu (autograd had already started" in n for n in got["notes"])
    assert "aten::native_dropout" in got["ops"]  # dropout still run as the accelerator would


def test_header_drops_grad_and_dtype_keys(targets):
    doc = targets["tpu_doc"]
    assert doc["provenance"]["target_device"] == "tpu" and doc["provenance"]["tracing"] == "fake"
    assert "prim::device" not in json.dumps(doc["ops"])
    assert any(n.startswith("dropped (need no backend kernel): prim::device x") for n in doc["provenance"]["notes"])
    assert doc["ops"]["aten::addmm"]["forward"]["float32"].get("grad") is True  # training needs its backward
    assert doc["summary"]["calls"]["backward"] > 0 and doc["model"]["params"] == 8 * 8 + 8
    bf = targets["bf16"]
    assert bf["optimizer"] == "none" and set(bf["ops"]) and all(set(rec) == {"forward"} for rec in bf["ops"].values())
    assert set(bf["ops"]["aten::addmm"]["forward"]) == {"bfloat16"}
    assert not any(c.get("grad") for rec in bf["ops"].values() for c in rec["forward"].values())


def test_autocast_casts_matmuls_on_the_accelerator(targets):
    doc = targets["autocast"]
    assert doc["autocast"] == "bfloat16" and doc["dtype"] == "float32"
    assert set(doc["ops"]["aten::addmm"]["forward"]) == {"bfloat16"}  # float32 weights, bf16 compute
    assert "float32" in doc["ops"]["aten::_to_copy"]["forward"]  # the casts themselves reach the device
    assert any(n.startswith("autocast: CUDA's autocast policy") for n in doc["provenance"]["notes"])


def test_trace_spec_takes_the_zoo_entry_dtype_and_name(targets):
    moe = targets["spec:mixtral"]
    assert moe["dtype"] == "bfloat16" and moe["name"] == "mixtral"
    assert moe["command"] == "opcov trace mixtral --mode inference --dtype bfloat16"  # reproduces it
    zoo_conv, conv = targets["spec:nn-convnet"], targets["spec:nn:convnet"]
    assert zoo_conv["name"] == "nn-convnet" and conv["name"] == "convnet" and zoo_conv["ops"] == conv["ops"]
    assert zoo_conv["command"] == "opcov trace nn-convnet --mode inference" and zoo_conv["dtype"] == "float32"


def test_data_dependent_branches_are_traced_with_real_values(targets):
    """transformers reads the mask on the host ("all ones?"); fake tensors cannot, a real run does: the
    real-valued run's calls join the op set, marked seen=real, and the fake trace's are kept."""
    doc = targets["real:llama"]
    from opcov.store import opset

    assert not opset.validate(doc, "llama.yaml")
    seen = {op: {cell.get("seen") for cell in rec["forward"].values()} for op, rec in doc["ops"].items()}
    assert seen["aten::all"] == seen["aten::_local_scalar_dense"] == {"real"}  # the host-side check
    assert seen["aten::bmm"] == {"both"} and seen["aten::eq.Tensor"] == {None}  # eq.Tensor: the fake's causal mask
    tree = nodes(doc)
    assert any(n.op == "aten::all" and n.seen == "real" for n in tree)
    assert any(n.op == "aten::scaled_dot_product_attention" and n.seen == "both" for n in tree)
    # each node names the inputs that made it: the fake trace is of the given inputs; the padded mask adds its own
    assert all("given" in n.variants for n in tree if n.seen != "real")
    assert {n.variants for n in tree} == {("given",), ("padded_mask",), ("given", "padded_mask")}
    assert [n.op for n in tree if n.op == "aten::all"] and all(
        n.variants == ("given",) for n in tree if n.op == "aten::all"
    )  # "is the mask all ones?" is asked of the given inputs, which have no mask
    assert any(
        n.startswith("real values: a run on a computing PrivateUse1 device (the given inputs, a padded attention mask)")
        for n in doc["provenance"]["notes"]
    )
    assert any(n.startswith("real values: a run") for n in targets["spec:nn-convnet"]["notes"])
    assert any(n.startswith("real values: a run") for n in targets["spec:nn:convnet"]["notes"])  # not only the zoo's
    lstm = targets["real:nn-lstm"]  # the stand-in computes the accelerator's fused LSTM cell (CPU has none)
    # every node of the fake trace seen again by the real run (both device branches of the LSTM cell)
    assert any(
        n.startswith("real values: a run") and re.search(r"saw (\d+) of the fake trace's \1 call-tree", n) for n in lstm
    ), lstm
    assert not any(n.startswith("the real-valued run failed (") for n in lstm), lstm


DEFAULTS = {
    "dtype": "float32",
    "autocast": False,
    "device": "accelerator",
    "optimizer": "adamw",
    "real": False,
    "out": None,
}


@pytest.mark.parametrize(
    "options, sizes",
    [
        ({}, {}),
        (
            {
                "dtype": "bfloat16",
                "autocast": True,
                "device": "cpu",
                "optimizer": "sgd",
                "real": True,
                "out": "a b.yaml",
            },
            {},
        ),
        (
            {},
            {
                "batch": 4,
                "seq": 7,
                "image": 64,
                "audio": 7680,
                "overrides": {
                    "num_hidden_layers": 3,
                    "hidden_act": "gelu",
                    "text_config.x": "true",
                    "depths": [1, 2],
                    "rope_scaling": {"type": "linear", "factor": 2.0},
                    "pad": None,
                },
            },
        ),
    ],
)
def test_provenance_command_is_the_cli_line_for_the_same_trace(options, sizes):
    """The command an op set records parses, with the CLI's own parser, back to the options it was traced with."""
    import shlex

    from opcov.cli import build_parser
    from opcov.cli.trace import overrides
    from opcov.sources.models import Sizes
    from opcov.tracing.spec import command_line

    want = {**DEFAULTS, **options}
    line = command_line("hf:llama", mode="inference", sizes=Sizes(**sizes), **want)
    parts = shlex.split(line)
    assert parts[:2] == ["opcov", "trace"]
    args = build_parser().parse_args(parts[1:])
    assert args.model == "hf:llama" and args.mode == "inference"
    got = {k: getattr(args, k) for k in DEFAULTS}
    got["dtype"] = got["dtype"] or "float32"  # the CLI's None: the zoo entry's dtype, else float32
    assert got == want
    assert Sizes(
        batch=args.batch,
        seq=args.seq,
        image=args.image_size,
        audio=args.audio_length,
        overrides=overrides(args.set),
    ) == Sizes(**sizes)
    if not options and not sizes:
        assert line == "opcov trace hf:llama --mode inference"


# ---------------------------------------------------------------- CLI and bad input


@pytest.fixture(scope="module")
def model_traces(tmp_path_factory):
    """{test: (completed trace, its op set)} of three tests' traces of models opcov builds (a local config,
    an hf: name, a zoo name), one after another in one child: one torch and transformers import for them
    all, as a zoo worker traces model after model. The accelerator's first, so that its stand-in device is
    claimed before autograd first runs, as in a process of its own; CPU's last."""
    tmp = tmp_path_factory.mktemp("models")
    cfg = tmp / "mybert" / "config.json"
    cfg.parent.mkdir()
    cfg.write_text(
        json.dumps(
            {
                "model_type": "bert",
                "num_hidden_layers": 1,
                "hidden_size": 32,
                "intermediate_size": 64,
                "num_attention_heads": 2,
                "vocab_size": 100,
            }
        )
    )
    bf16 = ("hf:inkling2_text", "--mode", "inference", "--dtype", "bfloat16", "--set", "num_hidden_layers=2")
    commands = {
        "config": ("trace", cfg, "--mode", "inference", "--set", "num_hidden_layers=2", "--seq", "8"),
        "bfloat16": ("trace", *bf16, "--set", "layer_types=[hybrid_sliding, hybrid]"),
        "cpu": ("trace", "llama", "--device", "cpu", "--mode", "inference"),
    }
    outs = {name: tmp / f"{name}.yaml" for name in commands}
    runs = run_opcov_batch([(*args, "--out", outs[name]) for name, args in commands.items()])
    return {name: (r, outs[name]) for name, r in zip(commands, runs)} | {"cfg": cfg}


def test_local_config_json_and_set_overrides(model_traces, tmp_path):
    cfg = model_traces["cfg"]
    r, out = model_traces["config"]
    assert r.returncode == 0, r.stderr
    doc = load_yaml(out)
    assert doc["model"]["source"] == f"config:{cfg}" and doc["model"]["name"] == "mybert"
    assert doc["model"]["config"]["num_hidden_layers"] == 2 and doc["model"]["config"]["hidden_size"] == 32
    assert doc["model"]["config"]["seq"] == 8
    assert "aten::embedding" in doc["ops"] and doc["optimizer"] == "none"
    (tmp_path / "bad.json").write_text('{"hidden_size": 3}')
    r = opcov_here("trace", str(tmp_path / "bad.json"))
    assert r.returncode == 2 and "no 'model_type' key" in r.stderr


def test_a_model_fake_tensors_cannot_trace_is_traced_with_real_values(tmp_path):
    mod = tmp_path / "nzmodel.py"
    mod.write_text(
        textwrap.dedent("""
        import torch

        class NZ(torch.nn.Module):
            def __init__(self):
                super().__init__()
                self.lin = torch.nn.Linear(4, 4)
            def forward(self, x):
                y = self.lin(x)
                return y[torch.nonzero(y > 0, as_tuple=True)]

        def build():
            return NZ(), (torch.randn(3, 4),)
    """)
    )
    env = {"PYTHONPATH": f"{tmp_path}{os.pathsep}{os.path.join(ROOT, 'src')}"}
    # the three traces in one process, as the child 'opcov trace' runs a factory in traces it (one torch import)
    runs = run_opcov_batch(
        [
            ("trace", "nzmodel:build", "--out", tmp_path / "a.yaml"),
            ("trace", "nzmodel:build", "--real", "--out", tmp_path / "b.yaml"),
            ("trace", "nzmodel:build", "--real", "--device", "cpu", "--out", tmp_path / "c.yaml"),
        ],
        OPCOV_TRACE_ISOLATED="1",
        **env,
    )
    # fake tensors cannot trace nonzero's data-dependent shape: the trace retries with real values by
    # itself and says why in the op set, so a user need not guess --real
    r = runs[0]
    assert r.returncode == 0 and "Traceback" not in r.stderr, r.stderr
    doc = load_yaml(tmp_path / "a.yaml")
    assert "aten::nonzero" in doc["ops"] and doc["provenance"]["tracing"] == "real"
    retried = [n for n in doc["provenance"]["notes"] if n.startswith("traced with real values (as --real)")]
    assert retried and "aten::nonzero" in retried[0], doc["provenance"]["notes"]
    r = runs[1]
    assert r.returncode == 0, r.stderr
    doc = load_yaml(tmp_path / "b.yaml")
    assert "aten::nonzero" in doc["ops"] and doc["provenance"]["tracing"] == "real"
    out = tmp_path / "b.yaml"
    assert doc["provenance"]["command"] == f"opcov trace nzmodel:build --mode training --real --out {out}"
    # real values on the computing stand-in, not on CPU: linear is a composite call there, and the
    # optimizer takes the accelerator's foreach path; --device cpu keeps CPU's own path
    assert "computing PrivateUse1" in doc["provenance"]["traced_on"]
    assert any(" composite aten::linear " in node for node in doc["calltree"])
    assert "aten::_foreach_addcdiv_.ScalarList" in doc["ops"]
    r = runs[2]
    assert r.returncode == 0, r.stderr
    cpu = load_yaml(tmp_path / "c.yaml")
    assert "aten::nonzero" in cpu["ops"] and not any(op.startswith("aten::_foreach") for op in cpu["ops"])


@pytest.mark.parametrize(
    "model, expect",
    [
        ("no_such_module_xyz:build", "cannot import no_such_module_xyz"),
        ("json:no_function_here", "has no function 'no_function_here'"),
        ("llamma", "unknown model type 'llamma'"),
    ],
)
def test_bad_model_is_one_line(tmp_path, model, expect):
    r = opcov_here("trace", model, "--out", str(tmp_path / "never.yaml"))
    assert r.returncode == 2
    assert expect in r.stderr and r.stderr.count("\n") == 1 and "Traceback" not in r.stderr
    if model == "llamma":
        assert "did you mean llama" in r.stderr


def test_factory_that_raises_is_one_line(opcov, tmp_path):
    (tmp_path / "badfactory.py").write_text("def build():\n    raise RuntimeError('no GPU here')\n")
    r = opcov("trace", "badfactory:build", PYTHONPATH=f"{tmp_path}{os.pathsep}{os.path.join(ROOT, 'src')}")
    assert r.returncode == 2
    assert "factory badfactory:build raised RuntimeError: no GPU here" in r.stderr
    assert r.stderr.count("\n") == 1


def test_saved_op_set_as_model_and_bad_set_option(tmp_path):
    src = os.path.join(ZOO_DIR, "bert", "inference.yaml")
    r = opcov_here("trace", src, "--out", str(tmp_path / "copy.yaml"))
    assert r.returncode == 0, r.stderr
    assert load_yaml(tmp_path / "copy.yaml")["ops"] == load_yaml(src)["ops"]
    r = opcov_here("trace", "bert", "--set", "novalue")
    assert r.returncode == 2 and "expected KEY=VALUE" in r.stderr


def test_import_opcov_stays_torch_free_and_trace_is_lazy():
    out = subprocess.run(
        [
            sys.executable,
            "-c",
            "import sys, opcov; a = 'torch' in sys.modules; "
            "f = opcov.trace; print(a, 'torch' in sys.modules, f.__name__, callable(f))",
        ],
        capture_output=True,
        text=True,
        env=child_env(),
        cwd=ROOT,
    )
    assert out.stdout.split() == ["False", "False", "trace", "True"], out.stderr


# ---------------------------------------------------------------- the bundled zoo


def test_zoo_is_committed_and_lints_clean():
    from opcov.sources import zoo
    from opcov.store import opset
    from opcov.tracing.spec import command_line

    hf = {e.spec for e in zoo.ZOO if e.spec.startswith("hf:")}
    nn = {e.spec for e in zoo.ZOO if e.spec.startswith("nn:")}
    assert len(hf) >= 25 and {"nn:transformer", "nn:lstm", "nn:gru", "nn:convnet"} <= nn
    for e in zoo.ZOO:
        for mode in ("inference", "training"):
            doc = opset.load(zoo.path_for(e.name, mode, ZOO_DIR))
            command = command_line(e.name, mode=mode, dtype=e.dtype, real=e.real, out=zoo.path_for(e.name, mode))
            assert doc["provenance"]["command"] == command, e.name
            assert doc["mode"] == mode and doc["ops"], e.name
            if e.spec.startswith("hf:"):
                assert doc["model"]["transformers"] and doc["model"]["attn_implementation"]
            if mode == "training":
                assert doc["summary"]["calls"]["backward"] > 0 and doc["summary"]["calls"]["optimizer"] > 0, e.name
    curated = [os.path.join("coverage", "models", e.name) for e in zoo.ZOO]  # the whole zoo: scripts/run.sh
    r = opcov_here("lint", *curated)
    assert r.returncode == 0, r.stdout[-2000:]
    from opcov.store import layout

    on_device = sum(len(layout.ondevice_files(folder)) for folder in curated)  # models/<m>/on/: linted too
    serve = sum(os.path.exists(os.path.join(folder, "serve.yaml")) for folder in curated)  # the decoders' serve mode
    sharded = sum(len(layout.parallel_files(folder)) for folder in curated)  # models/<m>/parallel/: linted too
    assert sharded >= 9  # llama, qwen3, gemma: ddp, fsdp2, tp (scripts/make_parallel_zoo.sh)
    assert f"{2 * len(zoo.ZOO) + serve + on_device + sharded} file(s) checked: 0 error(s)" in r.stdout


def test_zoo_trace_reproduces_the_committed_files(opcov, tmp_path):
    from opcov.store import opset

    r = opcov("zoo", "trace", "--only", "nn-convnet,gpt2", "--mode", "training", "--root", str(tmp_path))
    assert r.returncode == 0, r.stderr
    assert "2/2 traced" in r.stderr
    for name in ("nn-convnet", "gpt2"):
        new = load_yaml(tmp_path / name / "training.yaml")
        old = load_yaml(os.path.join(ZOO_DIR, name, "training.yaml"))
        assert new["provenance"].get("returns") == opset.RETURNS_RECORDED
        if "returns" not in old["provenance"]:  # committed before the tracer recorded returns=: all else the same
            new["calltree"] = [RETURNS_WORD.sub("", node) for node in new["calltree"]]
        assert new["ops"] == old["ops"] and new["calltree"] == old["calltree"]


RETURNS_WORD = re.compile(r" returns=[0-9,]+(?= |$)")


def test_zoo_unknown_name_is_a_usage_error():
    r = opcov_here("zoo", "trace", "--only", "nn-convnet,notamodel")
    assert r.returncode == 2 and "not in the zoo: notamodel" in r.stderr


def test_privateuse1_taken_by_another_backend_traces_on_cpu_and_says_so():
    got = run_child("""
        import json, torch
        import opcov.sources.pybackend  # claims PrivateUse1 as 'opcovtest'
        import opcov
        with torch.device("meta"):
            m, x = torch.nn.Sequential(torch.nn.Linear(8, 8), torch.nn.Dropout(0.1)), torch.randn(4, 8)
        t = opcov.trace(m, (x,), device="tpu")
        print(json.dumps({"notes": t.doc["provenance"]["notes"], "ops": sorted(t.ops),
                          "on": t.doc["provenance"]["traced_on"]}))
    """)
    assert got["on"] == "cpu"
    assert any("PrivateUse1 is taken by another backend" in n for n in got["notes"])
    assert "aten::native_dropout" in got["ops"] and not any(op.startswith("aten::bernoulli") for op in got["ops"])


def test_a_data_dependent_op_in_backward_is_a_clean_error_not_an_abort():
    """A write through a boolean mask (wav2vec2-style SpecAugment: ``hidden[mask] = embed``, sew-d,
    t5gemma2) puts ``index.Tensor`` with a boolean mask in the backward, which fake tensors cannot
    size. Raised inside a backward kernel on the stand-in it aborted the whole process (torch 2.13's
    Python device guard); it must be the same one-line error as in forward, naming the op and --real,
    for either target, with the process alive to say it."""
    got = run_child("""
        import json, torch, opcov
        from opcov.errors import UsageError

        class Masked(torch.nn.Module):
            def __init__(self):
                super().__init__()
                self.proj, self.embed = torch.nn.Linear(8, 8), torch.nn.Parameter(torch.randn(8))

            def forward(self, x):
                h = self.proj(x)
                h[x[..., 0] > 0] = self.embed.to(h.dtype)
                return h.sum()

        out = {}
        for device in ("tpu", "cpu"):
            try:
                opcov.trace(Masked(), (torch.randn(2, 15, 8),), mode="training", device=device)
                out[device] = "traced"
            except UsageError as exc:
                out[device] = str(exc)
        print(json.dumps(out))
    """)
    for device, text in got.items():
        assert text.startswith("cannot trace at aten::nonzero: DynamicOutputShapeException"), (device, text)
        assert "--real" in text, text


def test_a_cpu_target_gets_its_branch_run_eager_on_cpu(model_traces):
    """A --device cpu op set, like an accelerator's, holds what a real run adds where the model branches
    on data (transformers' host-side "is the mask all ones?"), run eager on CPU itself: CPU's own sdpa
    kernel on both sides, no stand-in (scripts/zoo_recall.py --device cpu measured the misses without it)."""
    r, out = model_traces["cpu"]
    assert r.returncode == 0, r.stderr
    doc = load_yaml(out)
    notes = doc["provenance"]["notes"]
    assert any(
        n.startswith("real values: a run on CPU itself (the given inputs, a padded attention mask)") for n in notes
    ), notes
    assert not any(n.startswith(("no real-valued run", "the real-valued run failed")) for n in notes), notes
    seen = {op: {cell.get("seen") for cell in rec["forward"].values()} for op, rec in doc["ops"].items()}
    assert seen["aten::all"] == seen["aten::_local_scalar_dense"] == {"real"}
    assert seen["aten::_scaled_dot_product_flash_attention_for_cpu"] == {"both"}
    assert (doc["provenance"]["target_device"], doc["provenance"]["traced_on"]) == ("cpu", "cpu")


def test_a_bfloat16_trace_keeps_in_float32_what_a_bfloat16_checkpoint_load_keeps(model_traces):
    """inkling2's MoE router holds its weight in float32 (``_keep_in_fp32_modules_strict``), as
    ``from_pretrained(dtype=bfloat16)`` loads it, and upcasts its input: the router's matmul is float32
    on any device. A trace that cast every weight to bfloat16 recorded a matmul the loaded model never
    runs, and its real-valued branch run failed (float x bfloat16); now it runs, and both see the
    float32 matmul."""
    pytest.importorskip("transformers")
    r, out = model_traces["bfloat16"]
    assert r.returncode == 0, r.stderr
    doc = load_yaml(out)
    notes = doc["provenance"]["notes"]
    assert not any(n.startswith(("no real-valued run", "the real-valued run failed")) for n in notes), notes
    router = [text for text in doc["calltree"] if " aten::mm float32 " in text]
    assert router and all("seen=both" in text for text in router), router


CTC_FACTORY = textwrap.dedent(
    """
    import torch
    import torch.nn as nn

    class CTC(nn.Module):
        def __init__(self):
            super().__init__()
            self.lin = nn.Linear(8, 5)
            self.loss = nn.CTCLoss()

        def forward(self, x, targets, in_len, tgt_len):
            return self.loss(self.lin(x).log_softmax(-1), targets, in_len, tgt_len)

    def ctc():
        torch.manual_seed(0)
        return CTC(), (torch.randn(12, 2, 8), torch.randint(1, 5, (2, 4)), torch.tensor([12, 10]), torch.tensor([4, 3]))
    """
)


def test_a_model_whose_shapes_hang_on_values_is_traced_with_real_values_and_says_so(tmp_path):
    """CTC's loss sizes its result from the target lengths' values: fake tensors cannot trace it. The user's
    trace is retried with real values (as --real), and the op set names why and the command that made it."""
    (tmp_path / "ctcmodel.py").write_text(CTC_FACTORY)
    out = tmp_path / "ctc" / "training.yaml"
    r = subprocess.run(
        [sys.executable, "-m", "opcov", "trace", "ctcmodel:ctc", "--mode", "training", "--out", str(out)],
        capture_output=True,
        text=True,
        env=child_env(PYTHONPATH=str(tmp_path)),
        cwd=ROOT,
        timeout=600,
    )
    assert r.returncode == 0, r.stdout + r.stderr
    doc = load_yaml(out)
    assert doc["provenance"]["tracing"] == "real" and "--real" in doc["provenance"]["command"]
    assert any("fake tensors could not trace it" in n for n in doc["provenance"]["notes"])
    assert "aten::_ctc_loss.Tensor" in doc["ops"] and "aten::_ctc_loss_backward.Tensor" in doc["ops"]


def test_a_real_run_that_fails_says_where_it_failed():
    """A trace with real values that raises names where it ran: CPU itself (the inputs), the computing
    stand-in (not CPU: how to ask CPU), or the backend's device (a finding about the model there)."""
    torch = pytest.importorskip("torch")
    from opcov.tracing.trace import Options, _explain

    opts = Options("training", "float32", False, "accelerator", "adamw", True, "given")
    exc = RuntimeError("boom")
    exc.opcov_op = "aten::max_pool2d_with_indices_backward"
    assert "fails on CPU with these inputs" in str(_explain(torch, exc, opts, "cpu"))
    on_xla = str(_explain(torch, exc, opts, "xla"))
    assert "the xla device raised on a real run" in on_xla and "fails on CPU" not in on_xla
    assert "opcov check MODEL -b xla" in on_xla
    assert "--device cpu --real" in str(_explain(torch, exc, opts, "the computing stand-in"))


def test_a_backward_kernel_without_a_meta_kernel_is_traced_on_the_stand_in():
    """A backward kernel with no meta kernel and no decomposition (a margin loss's, fractional max
    pooling's) is sized by FakeTensorMode running its real kernel on zeros of the fake tensor's device,
    which the storage-less stand-in cannot make; raised in the backward on the stand-in, that aborted the
    process. Two families, a loss and a pooling layer: each op set holds the backward kernel, with its
    argument shapes, and says it was sized on CPU. Where the CPU result cannot be trusted (here: refused),
    the error is the one-line one, raised once the backward is over, with the process alive to say it."""
    got = run_child("""
        import json, torch, opcov
        from opcov.errors import UsageError
        from opcov.tracing import cpukernel

        class Margins(torch.nn.Module):
            def __init__(self):
                super().__init__()
                self.fc = torch.nn.Linear(5, 4)

            def forward(self, x, y, multi):
                z = self.fc(x)
                return torch.nn.functional.multi_margin_loss(z, y, p=1, margin=0.5) + \\
                    torch.nn.functional.multilabel_margin_loss(z, multi)

        class Pool(torch.nn.Module):
            def __init__(self):
                super().__init__()
                self.conv = torch.nn.Conv3d(2, 3, 1)
                self.pool = torch.nn.FractionalMaxPool3d(2, output_size=(2, 2, 2))

            def forward(self, x):
                return self.pool(self.conv(x)).sum()

        margins = (torch.randn(6, 5), torch.randint(0, 4, (6,)), torch.randint(-1, 4, (6, 4)))
        out = {}
        for name, model, inputs in (("margins", Margins(), margins), ("pool", Pool(), (torch.randn(2, 2, 5, 5, 5),))):
            doc = opcov.trace(model, inputs, mode="training", optimizer="sgd").doc
            out[name] = {"ops": doc["ops"], "notes": doc["provenance"]["notes"], "on": doc["provenance"]["traced_on"]}
        cpukernel.shaped_like_arguments = lambda torch, out, arguments: False
        try:
            opcov.trace(Margins(), margins, mode="training")
            out["refused"] = "traced"
        except UsageError as exc:
            out["refused"] = str(exc)
        print(json.dumps(out))
    """)
    expect = {
        "margins": ("aten::multi_margin_loss_backward", "aten::multilabel_margin_loss_backward"),
        "pool": ("aten::fractional_max_pool3d_backward",),
    }
    for name, ops in expect.items():
        doc = got[name]
        assert doc["on"].startswith("opcov_accel"), doc["on"]  # the stand-in, not the CPU fallback of the tracer
        for op in ops:
            assert set(doc["ops"][op]) == {"backward"}, (op, doc["ops"][op])
            assert doc["ops"][op]["backward"]["float32"]["calls"] == 1
            assert any(n.startswith("backward kernels sized by their CPU kernel") and op in n for n in doc["notes"])
    assert got["pool"]["ops"]["aten::fractional_max_pool3d_backward"]["backward"]["float32"]["shape"].startswith(
        "[2, 3, 2, 2, 2], [2, 3, 5, 5, 5]"
    )
    refused = got["refused"]
    assert refused.startswith("cannot trace at aten::multi"), refused
    assert "_backward: NotImplementedError" in refused and "--real" in refused, refused


def test_a_model_whose_own_code_fails_under_fake_tensors_or_packs_a_nested_batch_is_traced(tmp_path):
    """Two ways a plain model stopped the trace with no op to blame: its own code reads values fake tensors do not
    have (a host-side statistic through numpy), and a TransformerEncoder's inference fast path packs a padded batch
    as a nested tensor, which the computing stand-in cannot hold. The first is traced again with real values, the
    second on CPU itself; each op set says why."""
    (tmp_path / "hostmodels.py").write_text(
        textwrap.dedent("""
        import numpy as np
        import torch

        class HostScale(torch.nn.Module):
            def __init__(self):
                super().__init__()
                self.lin = torch.nn.Linear(4, 4)
            def forward(self, x):
                scale = float(np.abs(x.detach().cpu().numpy()).mean()) + 1.0  # a statistic read on the host
                return self.lin(x) / scale

        def host_scale():
            return HostScale(), (torch.randn(3, 4),)

        def masked_encoder():
            torch.manual_seed(0)
            layer = torch.nn.TransformerEncoderLayer(16, 2, dim_feedforward=32, batch_first=True)
            enc = torch.nn.TransformerEncoder(layer, 2, enable_nested_tensor=True).eval()
            mask = torch.zeros(3, 8, dtype=torch.bool)
            mask[0, 5:] = True
            mask[1, 3:] = True
            return enc, (torch.randn(3, 8, 16), None, mask)
    """)
    )
    env = {"PYTHONPATH": f"{tmp_path}{os.pathsep}{os.path.join(ROOT, 'src')}"}
    runs = run_opcov_batch(
        [
            ("trace", "hostmodels:host_scale", "--mode", "inference", "--out", tmp_path / "host.yaml"),
            ("trace", "hostmodels:masked_encoder", "--mode", "inference", "--out", tmp_path / "nested.yaml"),
        ],
        OPCOV_TRACE_ISOLATED="1",
        **env,
    )
    assert runs[0].returncode == 0, runs[0].stderr
    doc = load_yaml(tmp_path / "host.yaml")
    assert doc["provenance"]["tracing"] == "real" and "aten::addmm" in doc["ops"]
    assert any("own code raised under fake tensors" in n for n in doc["provenance"]["notes"]), doc["provenance"]
    assert runs[1].returncode == 0, runs[1].stderr
    doc = load_yaml(tmp_path / "nested.yaml")
    assert "aten::_nested_tensor_from_mask_left_aligned" in doc["ops"] and doc["provenance"]["traced_on"] == "cpu"
    assert any("no nested kernels" in n for n in doc["provenance"]["notes"]), doc["provenance"]["notes"]
