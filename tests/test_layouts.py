"""Sparse and quantized calls judged against the backend's Sparse*/Quantized* keys (opcov.verdict.layouts),
and the scan that reads those keys (opcov.scan.layouts)."""

import json
import os
import textwrap

import pytest
from conftest import ROOT, SRC, opcov_here, run_opcov
from test_check import TORCH, kernel, registered, tree_opset

from opcov.scan import layouts as scan_layouts
from opcov.scan.dispatch import Entry
from opcov.store import data, opset
from opcov.verdict import judge

XLA_FALLBACK = "torch_xla/csrc/aten_fallback.cpp:68"


def block(key, sparse=0, sparse_csr=0, quantized=0, fallback=None):
    """A ``provenance.layouts`` block for dispatch key ``key`` (its own-kernel counts per family)."""
    return {
        "keys": {"sparse": f"Sparse{key}", "sparse_csr": f"SparseCsr{key}", "quantized": f"Quantized{key}"},
        "kernels": {"sparse": sparse, "sparse_csr": sparse_csr, "quantized": quantized},
        "out_variants": {"sparse": 0, "sparse_csr": 0, "quantized": 0},
        "fallback": {"sparse": "none", "sparse_csr": "none", "quantized": "none", **(fallback or {})},
        "how": "hand-made for a test",
    }


def composite(**extra):
    return {"fwd": "composite", "res": "registered", "bwd": "formula", "bwd_res": "registered", "via": [], **extra}


def fallback_only(**extra):
    return {"fwd": "fallback", "res": "fallback", "bwd": "formula", "bwd_res": "fallback", "src": XLA_FALLBACK, **extra}


def xlaish(with_layouts=True):
    """A backend like PyTorch/XLA: a CPU fallback at its dense key only, no kernel at any layout key."""
    doc = registered(
        "xlaish",
        fallback_enabled=True,
        ops={
            "aten::mm": kernel(),
            "aten::t": composite(),
            "aten::_sparse_coo_tensor_with_dims_and_tensors": fallback_only(layouts={"only": "sparse"}),
            "aten::int_repr": fallback_only(layouts={"only": "quantized"}),
        },
    )
    doc["backend"]["dispatch_key"] = "XLA"
    doc["provenance"]["fallback"]["source"] = XLA_FALLBACK
    if with_layouts:
        doc["provenance"]["layouts"] = block("XLA")
    return doc


def cpuish():
    """A backend like CPU: own kernels at SparseCPU, SparseCsrCPU and QuantizedCPU for some ops."""
    doc = registered(
        "cpuish",
        ops={
            "aten::mm": kernel(layouts={"sparse": "kernel", "sparse_csr": "kernel"}),
            "aten::t": composite(),
            "aten::view": kernel(layouts={"quantized": "kernel"}),
            "aten::sum": composite(layouts={"sparse": "kernel"}),  # no kernel for compressed sparse tensors
            "aten::_sparse_coo_tensor_with_dims_and_tensors": {
                "fwd": "missing",
                "res": "missing",
                "bwd": "formula",
                "bwd_res": "unresolved",
                "layouts": {"only": "sparse", "sparse": "kernel"},
            },
            "aten::int_repr": {
                "fwd": "missing",
                "res": "missing",
                "bwd": "none",
                "bwd_res": "not_applicable",
                "layouts": {"only": "quantized", "quantized": "kernel"},
            },
        },
    )
    doc["backend"]["dispatch_key"] = "CPU"
    doc["provenance"]["layouts"] = block("CPU", sparse=3, sparse_csr=2, quantized=2)
    return doc


def verdict(doc, tree, probed=None):
    """The judged op set of call-tree node texts ``tree`` on registered ``doc``: (verdict, {op: finding})."""
    cov = judge.Coverage(doc["backend"]["name"], doc, probed, ["registered.yaml"] + (["probed.yaml"] if probed else []))
    v = judge.judge(tree_opset(tree), cov)
    return v.verdict, {r.op: r.findings[0] for r in v.ops}


def node(op, sig, n=1, shape="[2, 2], [2, 2]"):
    return f"{n} forward kernel {op} float32 x1 | shape={shape} | sig={sig}"


SPARSE_MM = node("aten::mm", "float32:2!sparse,float32:2;")
DENSE_MM = node("aten::mm", "float32:2,float32:2;")
FACTORY = node("aten::_sparse_coo_tensor_with_dims_and_tensors", "int64:2,float32:1;", shape="[2, 3], [3]")


def test_a_sparse_call_fails_where_no_kernel_takes_sparse_tensors_and_the_fallback_cannot():
    v, found = verdict(xlaish(), [SPARSE_MM])
    f = found["aten::mm"]
    assert (v, f.outcome, f.evidence) == ("fails", "fails", "registered")
    assert "xlaish has no kernel for aten::mm with sparse tensors" in f.why
    assert "its CPU fallback does not take sparse tensors (it is registered for the XLA key only)" in f.why
    assert "to_dense" in f.fix
    # the same op called with dense tensors runs on its dense kernel: only the sparse call is judged apart
    v, found = verdict(xlaish(), [DENSE_MM])
    assert (v, found["aten::mm"].outcome, found["aten::mm"].why) == (
        "runs",
        "ok",
        "own kernel (registered, unverified)",
    )


def test_an_op_with_only_sparse_kernels_is_judged_on_its_sparse_key_whatever_its_inputs():
    """The issue's case: xla's dense record says the CPU fallback catches the sparse factory; it raises."""
    v, found = verdict(xlaish(), [FACTORY])
    f = found["aten::_sparse_coo_tensor_with_dims_and_tensors"]
    assert (v, f.outcome) == ("fails", "fails"), f.why
    assert "it has no SparseXLA kernel for any op, so no such tensor can be made there" in f.why
    # on CPU the dense key holds nothing for it (fwd: missing), its SparseCPU kernel runs the call
    v, found = verdict(cpuish(), [FACTORY])
    f = found["aten::_sparse_coo_tensor_with_dims_and_tensors"]
    assert (v, f.outcome) == ("runs", "ok"), f.why
    assert f.why == "own SparseCPU kernel for sparse tensors (registered, unverified)"


def test_sparse_calls_on_a_backend_with_sparse_kernels():
    tree = [
        SPARSE_MM,
        node("aten::t", "float32:2!sparse;", n=2, shape="[2, 2]"),
        node("aten::view", "float32:2!sparse;", n=3, shape="[2, 2]"),
    ]
    v, found = verdict(cpuish(), tree)
    assert v == "fails"
    assert found["aten::mm"].outcome == "ok"
    assert "own SparseCPU kernel" in found["aten::mm"].why
    t = found["aten::t"]  # no kernel of its own there: the composite its dense record names, said as such
    assert t.outcome == "ok" and "composite kernel at SparseCPU" in t.why and "not recorded" in t.why
    view = found["aten::view"]  # a dense (and quantized) kernel, nothing at SparseCPU
    assert view.outcome == "fails"
    assert "cpuish has no kernel for aten::view with sparse tensors (SparseCPU holds nothing for it)" in view.why


def test_coo_and_compressed_sparse_kernels_that_part_ways_are_unknown():
    v, found = verdict(cpuish(), [node("aten::sum", "float32:2!sparse;", shape="[2, 2]")])
    f = found["aten::sum"]
    assert (v, f.outcome) == ("unknown", "unknown")
    assert "own SparseCPU kernel for sparse tensors; cpuish has no kernel for aten::sum with compressed" in f.why
    assert "which sparse layout" in f.why


def test_quantized_calls_are_judged_on_the_quantized_key():
    q_view = node("aten::view", "qint8:2!q;", shape="[2, 2]")
    v, found = verdict(cpuish(), [q_view])
    assert (v, found["aten::view"].outcome) == ("runs", "ok")
    assert "own QuantizedCPU kernel for quantized tensors" in found["aten::view"].why
    v, found = verdict(xlaish(), [node("aten::int_repr", "qint8:2!q;", shape="[2, 2]")])
    f = found["aten::int_repr"]
    assert (v, f.outcome) == ("fails", "fails")
    assert "xlaish has no kernel for aten::int_repr with quantized tensors" in f.why


def test_data_that_predates_the_layout_keys_is_unknown_and_says_rescan():
    v, found = verdict(xlaish(with_layouts=False), [SPARSE_MM])
    f = found["aten::mm"]
    assert (v, f.outcome, f.evidence) == ("unknown", "unknown", "none")
    assert "the xlaish data predates sparse and quantized keys" in f.why and "rescan" in f.why


def test_a_call_of_both_layouts_in_one_op_takes_the_worse():
    v, found = verdict(
        cpuish(),
        [
            node("aten::view", "float32:2!sparse;", shape="[2, 2]"),
            node("aten::view", "float32:2;", n=2, shape="[2, 2]"),
        ],
    )
    assert (v, found["aten::view"].outcome) == ("fails", "fails")
    v, found = verdict(cpuish(), [SPARSE_MM, node("aten::mm", "float32:2,float32:2;", n=2)])
    assert (v, found["aten::mm"].outcome) == ("runs", "ok")


def test_a_boxed_fallback_at_the_layout_key():
    doc = xlaish()
    doc["provenance"]["layouts"] = block("XLA", fallback=dict.fromkeys(("sparse", "sparse_csr"), "pkg/fallback.cc:7"))
    _, found = verdict(doc, [SPARSE_MM])
    f = found["aten::mm"]  # registered elsewhere than the dense fallback: what it does is not known
    assert f.outcome == "unknown" and "only a boxed fallback registered for SparseXLA (pkg/fallback.cc:7)" in f.why
    doc["provenance"]["layouts"] = block("XLA", fallback=dict.fromkeys(("sparse", "sparse_csr"), XLA_FALLBACK))
    _, found = verdict(doc, [SPARSE_MM])
    f = found["aten::mm"]  # the dense CPU fallback registered for SparseXLA too: judged as it is there
    assert f.outcome == "fallback" and "the dense key's, registered for SparseXLA too" in f.why


def test_a_probe_that_ran_sparse_cases_decides():
    cell = {"fwd": "pass", "cases": 2, "tol": "same", "err": [0, 0], "ran": ["float32:2!sparse,float32:2;"]}
    probed = {"provenance": xlaish()["provenance"], "evidence": "probed", "ops": {"aten::mm": {"float32": cell}}}
    _, found = verdict(xlaish(), [SPARSE_MM], probed)
    assert (found["aten::mm"].outcome, found["aten::mm"].evidence) == ("ok", "probed")
    cell["ran"] = ["float32:2,float32:2;"]  # dense cases only: the sparse call is judged on SparseXLA
    _, found = verdict(xlaish(), [SPARSE_MM], probed)
    assert (found["aten::mm"].outcome, found["aten::mm"].evidence) == ("fails", "registered")
    del cell["ran"]  # a failing sparse case (one of two) says the probe saw the layout: judged as probes are
    cell.update(fwd="error", fails=1, failed=["error OpInfo.x|float32|0 float32:2!sparse,float32:2; out=0"])
    _, found = verdict(xlaish(), [SPARSE_MM], probed)
    assert (found["aten::mm"].outcome, found["aten::mm"].evidence) == ("fails", "probed"), found["aten::mm"].why


def test_check_reads_the_layout_fields_from_files(tmp_path):
    root = tmp_path / "coverage"
    data.save(xlaish(), str(root / "xlaish" / f"registered-torch-{TORCH}-fakepkg-1.0.yaml"))
    path = tmp_path / "sparse-inference.yaml"
    opset.save(tree_opset([FACTORY, node("aten::mm", "float32:2!sparse,float32:2;", n=2)]), str(path))
    r = opcov_here("check", str(path), "-b", "xlaish", "--coverage", str(root), "--format", "json")
    assert r.returncode == 1, r.stdout + r.stderr
    ops = {o["op"]: o for o in json.loads(r.stdout)["verdicts"][0]["ops"]}
    assert ops["aten::_sparse_coo_tensor_with_dims_and_tensors"]["outcome"] == "fails"
    assert opcov_here("lint", str(root)).returncode == 0


# ---------------------------------------------------------------- the scan


def test_state_reads_each_kind_of_dispatch_entry():
    table = {
        "SparseCPU": Entry("RegisterSparseCPU.cpp:1", "kernel"),
        "SparseCsrCPU": Entry("RegisterCompositeExplicitAutograd.cpp:1", "default backend kernel"),
        "QuantizedCPU": Entry("RegisterCompositeExplicitAutogradNonFunctional.cpp:1", "default backend kernel"),
        "SparseXLA": Entry("pkg/fallback.cc:1", "backend fallback"),
    }
    assert scan_layouts.state(table, "SparseCPU") == "kernel"
    assert scan_layouts.state(table, "SparseCsrCPU") == "composite"
    assert scan_layouts.state(table, "SparseXLA") == "fallback"
    assert scan_layouts.state(table, "SparseCUDA") == "none"
    assert scan_layouts.state(table, None) == "none"
    out = {"QuantizedCPU": Entry("RegisterQuantizedCPU.cpp:1", "kernel")}
    assert scan_layouts.state(table, "QuantizedCPU", "aten::x.out", out) == "out_variant"
    assert scan_layouts.state(table, "QuantizedCPU", "aten::x.out", {}) == "none"
    assert scan_layouts.only(table) == ["sparse"]
    assert scan_layouts.only({**table, "CPU": Entry("RegisterCPU.cpp:1", "kernel")}) == []


torch = pytest.importorskip("torch")


def test_record_on_this_torch_reads_sparse_and_quantized_kernels():
    from opcov.scan.registered import dispatch_table

    names = ["aten::mm", "aten::t", "aten::view", "aten::_sparse_coo_tensor_with_dims_and_tensors", "aten::int_repr"]
    ops = {n: {"fwd": "kernel" if n in ("aten::mm", "aten::view") else "composite"} for n in names}
    delegates = {"aten::mm": "aten::mm.out"}  # a structured op: its QuantizedCPU wrapper calls mm.out, which has none
    got = scan_layouts.record(torch._C, "CPU", ops, lambda n: dispatch_table(torch._C, n), delegates)
    assert got["keys"] == {"sparse": "SparseCPU", "sparse_csr": "SparseCsrCPU", "quantized": "QuantizedCPU"}
    assert got["kernels"]["sparse"] == 2 and got["fallback"]["sparse"] == "none"
    assert ops["aten::mm"]["layouts"] == {"sparse": "kernel", "sparse_csr": "kernel"}
    assert ops["aten::_sparse_coo_tensor_with_dims_and_tensors"]["layouts"] == {"sparse": "kernel", "only": "sparse"}
    assert ops["aten::int_repr"]["layouts"]["only"] == "quantized"
    assert "layouts" not in ops["aten::t"]  # the composite its dense record names, at every layout key
    got = scan_layouts.record(torch._C, "XLA", dict.fromkeys(names, {}), lambda n: dispatch_table(torch._C, n), {})
    assert got["keys"]["sparse"] == "SparseXLA" and got["kernels"] == {"sparse": 0, "sparse_csr": 0, "quantized": 0}


BUNDLED = {  # the registered files whose layout keys were read, and whether each has a SparseX kernel for the factory
    "cpu/registered-torch-2.13.0+cpu.yaml": True,
    "cpu/registered-torch-2.9.0+cu128.yaml": True,
    "meta/registered-torch-2.13.0+cpu.yaml": True,
    "tpu/registered-torch-2.13.0+cpu-torch_tpu-0.2.0.yaml": True,
    "xla/registered-torch-2.9.0+cu128-torch_xla-2.9.0.yaml": False,
}


@pytest.mark.parametrize("name", sorted(BUNDLED))
def test_bundled_registered_files_record_the_layout_keys(name):
    doc = data.load(os.path.join(ROOT, "coverage", name))
    got = doc["provenance"]["layouts"]
    key = doc["backend"]["dispatch_key"]
    assert got["keys"]["sparse"] == f"Sparse{key}" and got["command"].endswith(name)
    factory = doc["ops"]["aten::_sparse_coo_tensor_with_dims_and_tensors"]["layouts"]
    assert factory["only"] == "sparse"
    assert (factory.get("sparse") == "kernel") is BUNDLED[name], factory
    assert (got["kernels"]["sparse"] > 0) is BUNDLED[name]


# ---------------------------------------------------------------- end to end: a real sparse model


SPARSE_MODEL = textwrap.dedent(
    """
    import torch


    class Graph(torch.nn.Module):
        def __init__(self):
            super().__init__()
            i = torch.tensor([[0, 1, 2, 3], [1, 0, 3, 2]])
            self.register_buffer("adj", torch.sparse_coo_tensor(i, torch.ones(4), (4, 4)))
            self.lin = torch.nn.Linear(8, 8)

        def forward(self, x):
            return torch.sparse.mm(self.adj, self.lin(x))


    def build():
        return Graph(), (torch.randn(4, 8),)
    """
)


def test_a_real_sparse_model_runs_on_cpu_and_fails_where_no_sparse_kernel_exists(tmp_path):
    """Traced as a user traces it (no --device): fake tensors cannot size the sparse matmul, the computing
    stand-in has no sparse kernels, so it is traced with real values on CPU itself, and the op set says so."""
    (tmp_path / "graphmodel.py").write_text(SPARSE_MODEL)
    out = tmp_path / "graph-training.yaml"
    env = {"PYTHONPATH": SRC + os.pathsep + str(tmp_path)}  # the factory's module, beside opcov's own
    r = run_opcov("trace", "graphmodel:build", "--mode", "training", "--out", str(out), **env)
    assert r.returncode == 0, r.stdout + r.stderr
    doc = opset.load(str(out))
    sigs = " ".join(getattr(n, "sig", "") for n in opset.nodes(doc))
    assert "!sparse" in sigs  # the adjacency's layout reached the op set
    assert any("the computing stand-in has no sparse kernels" in n for n in doc["provenance"]["notes"])
    assert "--device cpu --real" in doc["provenance"]["command"]  # the line that traces it again
    cpu = opcov_here("check", str(out), "-b", "cpu", "--format", "json")
    verdicts = json.loads(cpu.stdout)["verdicts"]
    assert cpu.returncode == 0 and verdicts[0]["verdict"] == "runs", cpu.stdout + cpu.stderr
    root = tmp_path / "coverage"
    doc = xlaish()
    doc["ops"].update({"aten::_sparse_addmm": composite(), "aten::addmm": kernel()})
    data.save(doc, str(root / "xlaish" / f"registered-torch-{TORCH}-fakepkg-1.0.yaml"))
    r = opcov_here("check", str(out), "-b", "xlaish", "--coverage", str(root), "--format", "json")
    assert r.returncode == 1, r.stdout + r.stderr
    ops = {o["op"]: o for o in json.loads(r.stdout)["verdicts"][0]["ops"]}
    assert ops["aten::_sparse_addmm"]["outcome"] == "fails"
