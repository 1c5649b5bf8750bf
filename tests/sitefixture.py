"""A small coverage folder for the site tests: two backends, two snapshots, probed cells, one model, a
Python-name index."""

import os

from opcov.scan import pynames
from opcov.store import data, opset
from opcov.store import observed as observed_store

TORCH = "2.13.0+cpu"


def _registered(name, ops, created, torch=TORCH, core=None, fallback_enabled=False):
    return {
        "schema_version": 1,
        "evidence": "registered",
        "backend": {
            "name": name,
            "device_type": name,
            "dispatch_key": "PrivateUse1",
            "package": f"{name}_pkg",
            "version": "1.0",
        },
        "provenance": {
            "torch": torch,
            "opcov": "0.1.0",
            "created": created,
            "command": f"opcov scan {name}",
            "host": {"machine": "x86_64"},
            "fallback": {"present": True, "enabled": fallback_enabled, "kind": "cpu"},
        },
        "summary": {"core": {"overloads": sum(core.values()), "res": core}} if core else {},
        "ops": ops,
    }


def _op(res, fwd="kernel", bwd="formula", bwd_res=None, **extra):
    rec = {"fwd": fwd, "res": res, "bwd": bwd, "bwd_res": bwd_res or res}
    rec.update(extra)
    return rec


# A scan's raw record: text of its own (hostile: escaped on every page), then the exception a reach met
WEIRD_WHY = "<script>alert(1)</script>; reach unresolved: RuntimeError: shape '[1, 1]' is invalid for input of size 9"


def make_coverage(root) -> str:
    """Write the folder under root; returns its path."""
    cov = os.path.join(str(root), "coverage")
    alpha = {
        "aten::mm": _op("registered", src="alpha/kernels.cc:12"),
        "aten::add.Tensor": _op("fallback", fwd="fallback"),
        "aten::relu": _op("missing", fwd="missing", bwd="not_implemented"),
        "aten::sym_size.int": _op("not_applicable", fwd="not_applicable", bwd="not_applicable"),
        "aten::weird": _op("unresolved", fwd="composite", why=WEIRD_WHY),
        "alpha::custom": _op("registered", bwd="none", bwd_res="not_applicable"),
    }
    data.save(
        _registered("alpha", alpha, "2026-11-02T00:00:00+00:00", core={"registered": 1, "fallback": 1}),
        os.path.join(cov, "alpha", f"registered-torch-{TORCH}-alpha_pkg-1.0.yaml"),
    )
    older = {k: v for k, v in alpha.items() if k != "aten::mm"}
    older["aten::mm"] = _op("fallback", fwd="fallback")
    data.save(
        _registered("alpha", older, "2026-10-01T00:00:00+00:00", torch="2.12.0", core={"fallback": 2}),
        os.path.join(cov, "alpha", "registered-torch-2.12.0-alpha_pkg-0.9.yaml"),
    )
    probed = {
        "schema_version": 1,
        "evidence": "probed",
        "backend": {
            "name": "alpha",
            "device_type": "alpha",
            "dispatch_key": "PrivateUse1",
            "package": "alpha_pkg",
            "version": "1.0",
        },
        "provenance": {
            "torch": TORCH,
            "opcov": "0.1.0",
            "created": "2026-11-03T00:00:00+00:00",
            "command": "opcov probe alpha",
            "host": {"machine": "x86_64"},
        },
        "ops": {
            "aten::mm": {
                "float32": {"fwd": "pass", "bwd": "pass", "err": [1e-06, 2e-05], "cases": 3},
                "bfloat16": {"fwd": "mismatch", "bwd": "error", "why": "max error 0.5 > tol"},
            },
            "aten::relu": {"skipped": "random"},
        },
    }
    data.save(probed, os.path.join(cov, "alpha", f"probed-torch-{TORCH}-alpha_pkg-1.0.yaml"))
    beta = {name: _op("registered") for name in ("aten::mm", "aten::add.Tensor", "aten::relu")}
    data.save(
        _registered("beta", beta, "2026-11-01T00:00:00+00:00", core={"registered": 2}),
        os.path.join(cov, "beta", f"registered-torch-{TORCH}.yaml"),
    )
    for mode in ("inference", "training"):
        grad = mode == "training"
        ops = {
            "aten::mm": {"forward": {"float32": {"calls": 4, "grad": grad, "shape": "[2, 3]"}}},
            "aten::add.Tensor": {"forward": {"float32": {"calls": 2}}},
        }
        if grad:
            ops["aten::relu"] = {"backward": {"float32": {"calls": 1}}}
        doc = {
            "schema_version": 1,
            "kind": "opset",
            "model": {"name": "tiny", "source": "factory:tests:tiny"},
            "mode": mode,
            "dtype": "float32",
            "autocast": None,
            "optimizer": "sgd" if grad else "none",
            "provenance": {
                "torch": TORCH,
                "opcov": "0.1.0",
                "created": "2026-11-04T00:00:00+00:00",
                "command": f"opcov trace factory:tests:tiny --mode {mode}",
                "host": {},
            },
            "ops": ops,
        }
        opset.save(doc, os.path.join(cov, "models", "tiny", f"{mode}.yaml"))
    with open(os.path.join(cov, f"pynames-torch-{TORCH}.tsv"), "w", encoding="utf-8") as f:
        f.write(
            pynames.dumps(
                {
                    "torch.mm": ("aten::mm",),
                    "torch.Tensor.mm": ("aten::mm",),
                    "torch.nn.functional.relu": ("aten::relu",),
                    "torch.nn.ReLU": ("aten::relu",),
                    "torch.add": ("aten::add.Tensor",),
                },
                {"torch": TORCH},
            )
        )
    return cov


OLD_TORCH = "2.9.0"


def make_versioned_coverage(root) -> str:
    """make_coverage's folder plus a third backend, gamma, whose data is of another torch release (2.9.0):
    it lacks aten::relu (absent from that torch) and has aten::old_op (absent from 2.13); and a second model,
    tiny2 (a transformers text model, inference only, mm alone), so that the model index has something to
    filter."""
    cov = make_coverage(root)
    gamma = {
        "aten::mm": _op("registered"),
        "aten::add.Tensor": _op("registered"),
        "aten::sym_size.int": _op("not_applicable", fwd="not_applicable", bwd="not_applicable"),
        "aten::old_op": _op("registered"),
    }
    doc = _registered("gamma", gamma, "2026-11-05T00:00:00+00:00", torch=OLD_TORCH, core={"registered": 2})
    doc["backend"].update(dispatch_key="XLA", package="gamma_pkg", version="2.9.0")
    data.save(doc, os.path.join(cov, "gamma", f"registered-torch-{OLD_TORCH}-gamma_pkg-2.9.0.yaml"))
    two = {
        "schema_version": 1,
        "kind": "opset",
        "model": {"name": "tiny2", "source": "hf:tiny2"},
        "mode": "inference",
        "dtype": "float32",
        "autocast": None,
        "optimizer": "none",
        "provenance": {
            "torch": TORCH,
            "opcov": "0.1.0",
            "created": "2026-11-04T00:00:00+00:00",
            "command": "opcov trace hf:tiny2 --mode inference",
            "host": {},
            "notes": [
                "Tiny2ForCausalLM (causal_lm) built from Tiny2Config with random initialisation",
                "inputs made from the forward signature and config: input_ids",
            ],
        },
        "ops": {"aten::mm": {"forward": {"float32": {"calls": 1}}}},
    }
    opset.save(two, os.path.join(cov, "models", "tiny2", "inference.yaml"))
    return cov


def rendered(factory, name, make) -> tuple[str, str]:
    """(coverage folder, rendered site folder) of ``make(root)``'s data, in a fresh folder of pytest's
    tmp_path_factory ``factory``."""
    from opcov.site import render

    root = factory.mktemp(name)
    cov = make(root)
    out = str(root / "site")
    render.render_site(cov, out)
    return cov, out


def make_paths_coverage(root) -> str:
    """make_coverage's folder plus what the eager/compile switch, input variants and observed runs show: a
    backend xla (eager registered data, compile coverage under xla/compile/), a compiled op set of tiny for
    openxla (training) with a graph break at tiny/net.py:42, a model 'masked' whose op set records input variants
    (the padded mask adds aten::bitwise_and.Tensor, which xla lacks), an observed run of tiny on xla that ran
    aten::add.Tensor through the CPU fallback, and alpha's probed data contributed by a bundle."""
    cov = make_coverage(root)
    probed_path = os.path.join(cov, "alpha", f"probed-torch-{TORCH}-alpha_pkg-1.0.yaml")
    doc = data.load(probed_path)
    doc["provenance"]["contributed"] = [
        {
            "source": "Acme lab",
            "date": "2026-12-01",
            "sha256": "ab" * 32,
            "device": "alpha:0",
            "created": "x",
            "host": "",
        }
    ]
    data.save(doc, probed_path)
    xla = {
        "aten::mm": _op("registered"),
        "aten::add.Tensor": _op("registered"),
        "aten::relu": _op("registered"),
        "aten::bitwise_and.Tensor": _op("missing", fwd="missing", bwd="none", bwd_res="not_applicable"),
    }
    reg = _registered("xla", xla, "2026-11-06T00:00:00+00:00", fallback_enabled=True)
    reg["backend"].update(dispatch_key="XLA", package="torch_xla", version="2.9.0")
    data.save(reg, os.path.join(cov, "xla", f"registered-torch-{TORCH}-torch_xla-2.9.0.yaml"))
    compiled_cov = _registered(
        "xla", {"aten::mm": _op("registered"), "aten::relu": _op("missing", fwd="missing")}, "2026-11-06T00:00:00+00:00"
    )
    compiled_cov["backend"].update(dispatch_key="XLA", package="torch_xla", version="2.9.0")
    compiled_cov["provenance"]["command"] = "opcov scan xla --path compile"
    data.save(compiled_cov, os.path.join(cov, "xla", "compile", f"registered-torch-{TORCH}-torch_xla-2.9.0.yaml"))
    rows = [
        {"id": 1, "phase": "forward", "kind": "call", "op": "dynamo.graph.0", "dtype": "float32", "calls": 1},
        {"id": 2, "parent": 1, "phase": "forward", "kind": "kernel", "op": "aten::mm", "dtype": "float32", "calls": 2},
        {"id": 3, "phase": "backward", "kind": "call", "op": "dynamo.graph.0", "dtype": "float32", "calls": 1},
        {
            "id": 4,
            "parent": 3,
            "phase": "backward",
            "kind": "kernel",
            "op": "aten::relu",
            "dtype": "float32",
            "calls": 1,
        },
    ]
    compiled = {
        "schema_version": 2,
        "kind": "opset",
        "path": "compile",
        "compile": {"backend": "openxla", "outcome": "compiled", "graphs": 1},
        "graph_breaks": [
            {"reason": "Data-dependent branching", "where": "tiny/net.py:42", "construct": "if x.sum() > 0:"}
        ],
        "model": {"name": "tiny", "source": "factory:tests:tiny"},
        "mode": "training",
        "dtype": "float32",
        "autocast": None,
        "optimizer": "none",
        "provenance": {"torch": TORCH, "command": "opcov trace tiny --path compile", "created": "2026-11-04T00:00:00Z"},
        "calltree": [opset.node_text(r) for r in rows],
        "ops": {
            "aten::mm": {"forward": {"float32": {"calls": 2}}},
            "aten::relu": {"backward": {"float32": {"calls": 1}}},
        },
    }
    opset.save(compiled, os.path.join(cov, "models", "tiny", "compile", "openxla-training.yaml"))
    nodes = [
        {"id": 1, "phase": "forward", "kind": "kernel", "op": "aten::mm", "dtype": "float32", "calls": 3,
         "variants": ("given", "padded_mask")},
        {"id": 2, "phase": "forward", "kind": "kernel", "op": "aten::bitwise_and.Tensor", "dtype": "bool", "calls": 1,
         "variants": ("padded_mask",)},
    ]  # fmt: skip
    masked = {
        "schema_version": 2,
        "kind": "opset",
        "model": {"name": "masked", "source": "hf:masked"},
        "mode": "inference",
        "dtype": "float32",
        "provenance": {"torch": TORCH, "opcov": "0.1.0", "created": "2026-11-30", "command": "opcov trace hf:masked"},
        "calltree": [opset.node_text(row) for row in nodes],
        "ops": {"aten::mm": {"forward": {"float32": {"calls": 3}}},
                "aten::bitwise_and.Tensor": {"forward": {"bool": {"calls": 1}}}},
    }  # fmt: skip
    opset.save(masked, os.path.join(cov, "models", "masked", "inference.yaml"))
    run = {
        "schema_version": 1,
        "evidence": "observed",
        "backend": {"name": "xla", "device_type": "xla", "package": "torch_xla", "version": "2.9.0"},
        "model": {"name": "tiny", "mode": "training", "dtype": "float32", "source": "factory:tests:tiny"},
        "provenance": {"torch": "2.9.0+cu128", "created": "2026-12-02T10:00:00+00:00", "device": "xla:0",
                       "command": "opcov run factory:tests:tiny -b xla --mode training"},
        "result": {"ran": True, "values": {"match": True, "max_error_x_tolerance": 0.01}},
        "backend_record": {"fallback_ops": ["aten::add.Tensor"], "source": "torch_xla.debug.metrics counters"},
        "ops": {"aten::mm": {"float32": {"calls": 4}}, "aten::add.Tensor": {"float32": {"calls": 2}}},
    }  # fmt: skip
    os.makedirs(os.path.join(cov, "observed", "xla"), exist_ok=True)
    with open(os.path.join(cov, "observed", "xla", "tiny.training.json"), "w", encoding="utf-8") as f:
        f.write(observed_store.dumps(run))
    return cov
