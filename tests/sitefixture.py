"""A small coverage folder for the site tests: two backends, two snapshots, probed cells, one model, a
Python-name index."""

import os

from opcov.scan import pynames
from opcov.store import data, opset

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


def make_coverage(root) -> str:
    """Write the folder under root; returns its path."""
    cov = os.path.join(str(root), "coverage")
    alpha = {
        "aten::mm": _op("registered", src="alpha/kernels.cc:12"),
        "aten::add.Tensor": _op("fallback", fwd="fallback"),
        "aten::relu": _op("missing", fwd="missing", bwd="not_implemented"),
        "aten::sym_size.int": _op("not_applicable", fwd="not_applicable", bwd="not_applicable"),
        "aten::weird": _op("unresolved", fwd="composite", why="reach unresolved: <script>alert(1)</script>"),
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
