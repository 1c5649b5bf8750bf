"""Declared coverage (opcov.scan.declared): native_functions.yaml read for a key with no build here,
torch's MPS test lists read statically, and the verdict's own words and gate on such data."""

import json
import os
import shutil
from types import SimpleNamespace

import pytest
from conftest import opcov_here, run_opcov
from test_check import TORCH, fwd, kernel, registered, save_model

from opcov import backends, vocab
from opcov.scan import declared
from opcov.store import data
from opcov.store.lint import lint_paths

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

NATIVE = """\
- func: add.Tensor(Tensor self, Tensor other, *, Scalar alpha=1) -> Tensor
  structured_delegate: add.out
  variants: function, method

- func: add_.Tensor(Tensor(a!) self, Tensor other, *, Scalar alpha=1) -> Tensor(a!)
  structured_delegate: add.out
  variants: method

- func: add.out(Tensor self, Tensor other, *, Scalar alpha=1, Tensor(a!) out) -> Tensor(a!)
  structured: True
  structured_inherits: TensorIteratorBase
  dispatch:
    CPU, CUDA: add_out
    MPS: add_out_mps

- func: heaviside.out(Tensor self, Tensor values, *, Tensor(a!) out) -> Tensor(a!)
  structured: True
  structured_inherits: TensorIteratorBase
  dispatch:
    CPU, CUDA: heaviside_out

- func: heaviside(Tensor self, Tensor values) -> Tensor
  variants: function, method
  structured_delegate: heaviside.out

- func: relu(Tensor self) -> Tensor
  variants: function, method
  dispatch:
    CPU, CUDA: relu
    MPS: relu_mps
"""


@pytest.fixture
def yaml_dir(tmp_path):
    import torchgen

    packaged = os.path.join(os.path.dirname(torchgen.__file__), "packaged", "ATen", "native")
    shutil.copy(os.path.join(packaged, "tags.yaml"), tmp_path / "tags.yaml")
    (tmp_path / "native_functions.yaml").write_text(NATIVE)
    return str(tmp_path)


def test_structured_group_counts_through_its_out_kernel(yaml_dir):
    found = declared.torchgen_kernels("MPS", yaml_dir)
    # add.out declares MPS, so its functional and in-place variants have the kernel too (at add.out's line)
    assert set(found.kernels) == {"aten::add.out", "aten::add.Tensor", "aten::add_.Tensor", "aten::relu"}
    assert found.kernels["aten::add.Tensor"] == found.kernels["aten::add.out"]
    assert found.kernels["aten::add.out"].startswith(declared.YAML_SOURCE + ":")
    assert "aten::heaviside" in found.ops and "aten::heaviside" not in found.kernels  # CPU and CUDA only
    assert "aten::heaviside" in declared.torchgen_kernels("CUDA", yaml_dir).kernels


def test_a_key_torchgen_does_not_know_is_a_usage_error(yaml_dir):
    with pytest.raises(Exception, match="not one torchgen knows"):
        declared.torchgen_kernels("NoSuchKey", yaml_dir)


def test_declared_scanner_paths():
    """Forward kernels from the yaml; an own kernel of a CompositeImplicitAutograd op keeps its backward
    only through a derivative formula (linear has one, mish_backward has none: lost)."""
    from opcov.catalog import Catalog, Op
    from opcov.scan.derivatives import Derivatives
    from opcov.torchenv import import_torch

    torch = import_torch()
    ops = {
        n: Op(n, "", (), structured_delegate=d, composite=c)
        for n, d, c in (
            ("aten::add.Tensor", "aten::add.out", None),
            ("aten::heaviside", "aten::heaviside.out", None),
            ("aten::heaviside.out", None, None),
            ("aten::linear", None, "implicit"),
            ("aten::mish_backward", None, "implicit"),
        )
    }
    decl = declared.Declarations(
        "MPS", {"aten::add.Tensor": "y:1", "aten::linear": "y:2", "aten::mish_backward": "y:3"}, frozenset(ops), "y"
    )
    backend = SimpleNamespace(name="mps", dispatch_key="MPS", autograd_key="AutogradMPS")
    scanner = declared.DeclaredScanner(
        torch,
        backend,
        Catalog(str(torch.__version__), (), ops),
        Derivatives.load(),
        declared=decl,
        fallback="MPSFallback.mm",
    )
    assert scanner.forward_path("aten::add.Tensor") == {"fwd": "kernel", "src": "y:1"}
    assert scanner.forward_path("aten::heaviside.out") == {"fwd": "fallback", "src": "MPSFallback.mm"}
    scanner.classify(ops)
    assert scanner.resolve_forward("aten::heaviside") == "fallback"  # through its .out, which has no kernel
    assert scanner.resolve_forward("aten::not_in_the_catalogue") == "unresolved"
    assert scanner.backward_path("aten::linear", "kernel") == {"bwd": "formula"}
    assert scanner.backward_path("aten::mish_backward", "kernel")["bwd"] == "lost"


COMMON_MPS = """\
import torch
if torch.backends.mps.is_available():
    def mps_ops_modifier(ops, device_type="mps", xfail_exclusion=None, sparse=False):
        SUPPORTED_COMPLEX_OPS = {"add"}
        UNIMPLEMENTED_XFAILLIST: dict[str, list | None] = {
            "heaviside": None,
            "nn.functional.conv2d": [torch.int64],
            "normnuc": None,
        }
        UNDEFINED_XFAILLIST = {"add": [torch.float32]}
        ON_MPS_XFAILLIST = {"argsort": [torch.float16]}
        SKIPLIST = {"nn.functional.conv3d": None}
        for op in ops:
            key = op.name + op.variant_test_name
            addDecorator(op, DecorateInfo(unittest.expectedFailure, dtypes=[torch.double, torch.cdouble]))
            if key not in SUPPORTED_COMPLEX_OPS:
                addDecorator(op, DecorateInfo(unittest.expectedFailure, dtypes=[torch.complex32, torch.complex64]))
        return ops

    def mps_ops_grad_modifier(ops):
        XFAILLIST_GRAD = {"eye": [torch.float32]}
        SKIPLIST_GRAD = {}
        ON_MPS_XFAILLIST = {}
        for op in ops:
            pass
        return ops
else:
    def mps_ops_modifier(ops, device_type="mps", xfail_exclusion=None, sparse=False):
        return ops
"""
DTYPE = {
    "double": "float64",
    "cdouble": "complex128",
    "float32": "float32",
    "float16": "float16",
    "int64": "int64",
    "complex32": "complex32",
    "complex64": "complex64",
}


def _opinfo(name, variant="", aten_name=None, dtypes=("float32", "complex64")):
    return SimpleNamespace(
        name=name,
        variant_test_name=variant,
        aten_name=aten_name or name.split(".")[-1],
        dtypes={f"torch.{d}" for d in dtypes},
    )


def test_test_lists_become_dtype_notes(tmp_path):
    path = tmp_path / "common_mps.py"
    path.write_text(COMMON_MPS)
    lists = declared.read_test_lists(str(path), DTYPE.__getitem__)
    assert lists.every_op == ("complex128", "float64")
    assert lists.complex_dtypes == ("complex32", "complex64")
    assert "UNDEFINED_XFAILLIST" not in lists.forward  # comparisons undefined: not MPS's failures
    opinfos = {
        "heaviside": _opinfo("heaviside"),
        "add": _opinfo("add"),
        "argsort": _opinfo("argsort"),
        "norm": _opinfo("norm"),
        "norm.nuc": _opinfo("norm", "nuc"),
        "eye": _opinfo("eye"),
        "nn.functional.conv2d": _opinfo("nn.functional.conv2d", dtypes=("float32", "int64")),
    }
    notes = declared.dtype_notes(
        lists,
        declared.opinfo_bases(opinfos),
        [
            "aten::heaviside",
            "aten::heaviside.out",
            "aten::add.Tensor",
            "aten::argsort",
            "aten::norm.Scalar",
            "aten::eye",
            "aten::conv2d",
            "prims::heaviside",
        ],
    )
    assert notes["aten::heaviside"]["xfail"]["all"] == "UNIMPLEMENTED_XFAILLIST: heaviside"
    assert notes["aten::heaviside.out"] == notes["aten::heaviside"]  # every overload of the base name
    assert notes["aten::conv2d"] == {"xfail": {"int64": "UNIMPLEMENTED_XFAILLIST: nn.functional.conv2d"}}
    assert notes["aten::argsort"]["doubt"] == {"float16": "ON_MPS_XFAILLIST: argsort"}
    # only one of norm's two OpInfos is listed: a doubt, not an expected failure
    assert notes["aten::norm.Scalar"]["doubt"]["all"].endswith("(1 of 2 OpInfos about it)")
    assert "xfail" not in notes.get("aten::add.Tensor", {})  # add supports complex on MPS
    assert notes["aten::argsort"]["xfail"]["complex64"].startswith("complex: not in SUPPORTED_COMPLEX_OPS")
    assert notes["aten::eye"]["bwd_doubt"] == {"float32": "XFAILLIST_GRAD: eye"}
    assert "prims::heaviside" not in notes


def test_the_installed_torchs_mps_lists_still_parse():
    """torch's own common_mps.py keeps the shape read_test_lists expects (a torch upgrade that breaks
    it makes 'opcov scan mps --declared' fail loudly, never write fewer notes)."""
    import torch

    from opcov.dtypes import dtype_name

    path = os.path.join(os.path.dirname(torch.__file__), backends.get_backend("mps").declared.test_list)
    lists = declared.read_test_lists(path, lambda attr: dtype_name(getattr(torch, attr)))
    assert lists.every_op == ("complex128", "float64")
    assert lists.forward["UNIMPLEMENTED_XFAILLIST"] and "add" in lists.supported_complex


# ---------------------------------------------------------------- the verdict on declared data


def declared_doc(ops):
    doc = registered("mps", ops=ops)
    doc["evidence"] = "declared"
    doc["backend"].update(device_type="mps", dispatch_key="MPS", package="torch", version=TORCH)
    doc["provenance"].update(
        command="opcov scan mps --declared", declared={"unsupported_dtypes": ["complex128", "float64"]}
    )
    return doc


@pytest.fixture
def mps_cov(tmp_path):
    ops = {
        "aten::mm": kernel(src="aten/src/ATen/native/native_functions.yaml:1"),
        "aten::heaviside": {
            "fwd": "out_variant",
            "via": ["aten::heaviside.out"],
            "res": "fallback",
            "bwd": "none",
            "bwd_res": "not_applicable",
            "xfail": {"all": "UNIMPLEMENTED_XFAILLIST"},
        },
        "aten::conv2d": {
            "fwd": "composite",
            "via": ["aten::mm"],
            "res": "registered",
            "bwd": "composite",
            "bwd_res": "registered",
            "xfail": {"int64": "UNIMPLEMENTED_XFAILLIST: conv2d"},
            "doubt": {"float16": "SKIPLIST: conv2d"},
        },
    }
    root = tmp_path / "coverage"
    data.save(declared_doc(ops), str(root / "mps" / f"declared-torch-{TORCH}.yaml"))
    return root


def _check(tmp_path, cov, ops, *extra):
    path = save_model(tmp_path, ops, mode="inference")
    return opcov_here("check", path, "-b", "mps", "--coverage", str(cov), "--format", "json", *extra)


def test_declared_runs_says_so_and_fails_a_registered_gate(tmp_path, mps_cov):
    out = _check(tmp_path, mps_cov, {"aten::mm": fwd()})
    assert out.returncode == 0, out.stderr
    v = json.loads(out.stdout)["verdicts"][0]
    assert (v["verdict"], v["evidence"]) == ("runs", "declared")
    text = opcov_here(
        "check", save_model(tmp_path, {"aten::mm": fwd()}, mode="inference"), "-b", "mps", "--coverage", str(mps_cov)
    ).stdout
    assert "RUNS (declared in native_functions.yaml, unverified)" in text
    finding = v["ops"][0]["findings"][0]
    assert finding["evidence"] == "declared" and "(declared in native_functions.yaml, unverified)" in finding["why"]
    gated = _check(tmp_path, mps_cov, {"aten::mm": fwd()}, "--require", "registered")
    assert gated.returncode == 1 and "weaker than the registered evidence required" in gated.stderr
    assert vocab.weaker("declared", "registered") and not vocab.weaker("declared", "declared")


def test_declared_dtype_rules(tmp_path, mps_cov):
    def outcome(op, dtype):
        out = _check(tmp_path, mps_cov, {op: fwd(dtype)})
        f = json.loads(out.stdout)["verdicts"][0]["ops"][0]["findings"][0]
        return f["outcome"], f["evidence"], f["why"] + " | " + f["fix"]

    assert outcome("aten::mm", "float64")[:2] == ("fails", "declared")  # MPS has no float64
    assert "has no float64" in outcome("aten::mm", "float64")[2]
    assert outcome("aten::conv2d", "int64")[0] == "fails"  # the test suite expects it to fail there
    assert outcome("aten::conv2d", "float32")[0] == "ok"
    ok, _, why = outcome("aten::conv2d", "float16")  # a doubt is named, not judged
    assert ok == "ok" and "SKIPLIST: conv2d" in why
    failed, _, why = outcome("aten::heaviside", "float32")  # the fallback, off by default
    assert failed == "fails" and "as mps's source registers it" in why and "PYTORCH_ENABLE_MPS_FALLBACK=1" in why


def test_a_registered_scan_outranks_declared_data(tmp_path, mps_cov):
    scan = registered("mps", ops={"aten::mm": kernel()})
    scan["backend"].update(device_type="mps", dispatch_key="MPS", package="torch", version=TORCH)
    data.save(scan, str(mps_cov / "mps" / f"registered-torch-{TORCH}.yaml"))
    v = json.loads(_check(tmp_path, mps_cov, {"aten::mm": fwd("float64")}).stdout)["verdicts"][0]
    assert (v["verdict"], v["evidence"]) == ("runs", "registered")
    assert v["sources"] == [str(mps_cov / "mps" / f"registered-torch-{TORCH}.yaml")]


def test_lint_accepts_declared_data_and_refuses_a_bad_note(tmp_path, mps_cov):
    files, problems = lint_paths([os.path.join(REPO, "coverage", "mps")], check_catalog=False)
    assert files and not [p for p in problems if p.severity == "error"], problems
    doc = data.load(files[0])
    assert doc["evidence"] == "declared" and "--declared" in doc["provenance"]["command"]
    bad = declared_doc({"aten::mm": kernel(xfail={"float64": ["not", "a", "string"]})})
    path = tmp_path / "bad" / "mps" / f"declared-torch-{TORCH}.yaml"
    data.save(bad, str(path))
    _, problems = lint_paths([str(path)], check_catalog=False)
    assert any("xfail must be a mapping of dtype names to strings" in p.message for p in problems)


def test_the_committed_mps_data_on_a_zoo_model():
    out = opcov_here("check", "llama", "-b", "mps", "--coverage", os.path.join(REPO, "coverage"), "--format", "json")
    assert out.returncode == 0, out.stderr
    for v in json.loads(out.stdout)["verdicts"]:
        assert (v["verdict"], v["evidence"]) == ("runs", "declared")


def test_no_test_lists_needs_declared():
    out = run_opcov("scan", "mps", "--no-test-lists")
    assert out.returncode == 2 and "--no-test-lists goes with --declared" in out.stderr


# ---------------------------------------------------------------- backends on other torch releases


def test_check_and_compare_mark_ops_the_backends_torch_lacks(tmp_path):
    root = tmp_path / "coverage"
    old = registered("old", ops={"aten::mm": kernel()}, torch="2.9.0")
    data.save(old, str(root / "old" / "registered-torch-2.9.0-fakepkg-1.0.yaml"))
    data.save(
        registered("new", ops={"aten::mm": kernel(), "aten::brand_new_op": kernel()}),
        str(root / "new" / f"registered-torch-{TORCH}-fakepkg-1.0.yaml"),
    )
    ops = {"aten::mm": fwd(), "aten::brand_new_op": fwd()}
    path = save_model(tmp_path, ops, mode="inference")
    out = opcov_here("check", path, "-b", "old", "--coverage", str(root), "--format", "json")
    why = {o["op"]: o["findings"][0]["why"] for o in json.loads(out.stdout)["verdicts"][0]["ops"]}
    assert why["aten::brand_new_op"].startswith("does not exist in torch 2.9.0, the torch of the old data")
    assert "versions differ" in why["aten::brand_new_op"]
    # compare reads the zoo under the coverage folder: one model there
    os.makedirs(root / "models" / "tiny")
    shutil.copy(path, root / "models" / "tiny" / "inference.yaml")
    text = opcov_here("compare", "old", "new", "--coverage", str(root)).stdout
    assert "aten::brand_new_op  old: unknown (no such op in torch 2.9.0), new: runs" in text, text
    got = json.loads(opcov_here("compare", "old", "new", "--coverage", str(root), "--format", "json").stdout)
    assert [d["absent"] for d in got["lacks"]["old"]] == [True]


def test_the_site_calls_declared_evidence_declared(tmp_path, mps_cov):
    """An op page, the search index and the index's share word mps's declared data as declared, never as a
    registration (no binary was read)."""
    import json as _json

    from opcov.site import render

    out = tmp_path / "site"
    render.render_site(str(mps_cov), str(out))
    page = " ".join((out / "ops" / "aten" / "mm.html").read_text(encoding="utf-8").split())
    assert "declared own kernel in native_functions.yaml, unverified" in page
    assert "registered own kernel" not in page
    index = (out / "assets" / "search-index.js").read_text(encoding="utf-8")
    blob = _json.loads(index[index.index("{") : index.rindex("}") + 1])
    mm = next(row for row in blob["ops"] if row[0] == "aten::mm")
    b = blob["backends"].index("mps")
    assert mm[1][2 * b] == "D" and blob["codes"]["D"][2] == "declared", (mm, blob["codes"].get("D"))
    front = " ".join((out / "index.html").read_text(encoding="utf-8").split())
    share = front[front.find("<table") : front.find("</table>")]
    assert "%</strong> declared" in share and "%</strong> registered" not in share, share
