"""Which kernel ``scaled_dot_product_attention`` dispatches to on a backend, for the zoo's calls.

SDPA is a CompositeImplicitAutograd op, so a scan records its reach on meta tensors: the math
decomposition (mul, transpose, bmm, softmax...). Eager torch does not take that path on every
device: the op asks a per-device chooser (the ``_fused_sdp_choice_stub`` DispatchStub; the
``aten::_fused_sdp_choice`` op for CPU and CUDA) and calls the fused kernel it picks (flash, memory
efficient, cuDNN, a PrivateUse1 backend's ``overrideable`` kernel), or the math path. This module
records that choice per backend, as a ``provenance.sdpa`` block of the backend's registered file:

- ``probed``: the chooser was called here, on this device, with the zoo's recorded SDPA calls
  (shapes, dtypes, mask, dropout_p, is_causal, enable_gqa from ``coverage/models``), and each call
  was run under a dispatch mode to see the kernel it reached (cpu);
- ``registered``: read from what the backend registers (the chooser and the fused kernels in its
  registered file; for a PrivateUse1 package, whether its binary references the chooser's stub):
  which fused kernel a call takes depends on the device and is not read here (cuda, tpu).

``python -m opcov.scan.sdpa BACKEND...`` writes the block into each backend's newest registered
file and changes nothing else in it.
"""

from __future__ import annotations

import glob
import os
import re
import sys
from collections import Counter

from opcov.store import data, layout, opset

COMMAND = "python -m opcov.scan.sdpa"
OP = "aten::scaled_dot_product_attention"
MATH = "aten::_scaled_dot_product_attention_math"
# SDPBackend values (torch.nn.attention.SDPBackend) -> the kernel the op then calls, per device type.
CHOICE = {
    0: {"": MATH},
    1: {"cpu": "aten::_scaled_dot_product_flash_attention_for_cpu", "": "aten::_scaled_dot_product_flash_attention"},
    2: {"": "aten::_scaled_dot_product_efficient_attention"},
    3: {"": "aten::_scaled_dot_product_cudnn_attention"},
    4: {"": "aten::_scaled_dot_product_fused_attention_overrideable"},
}
FUSED = (
    "aten::_scaled_dot_product_flash_attention",
    "aten::_scaled_dot_product_efficient_attention",
    "aten::_scaled_dot_product_cudnn_attention",
    "aten::_scaled_dot_product_fused_attention_overrideable",
    "aten::_scaled_dot_product_flash_attention_for_cpu",
)
STUB_SYMBOL = b"_ZN2at6native22_fused_sdp_choice_stubE"  # at::native::_fused_sdp_choice_stub
_NODE = re.compile(r"^- '(\d+ forward \w+ aten::scaled_dot_product_attention .*)'$", re.M)


def zoo_calls(coverage_dir: str) -> Counter:
    """(dtype, shapes, mask, dropout_p, is_causal, enable_gqa) -> how many op sets' forward SDPA calls have
    it, over the zoo's op sets (the call-tree lines, read as text: no op set is loaded whole)."""
    out: Counter = Counter()
    for path in sorted(glob.glob(os.path.join(coverage_dir, layout.MODELS, "*", "*.yaml"))):
        with open(path, encoding="utf-8") as f:
            text = f.read()
        for m in _NODE.finditer(text):
            node = opset.parse_node(m.group(1).replace("''", "'"))
            args = dict(a.split("=", 1) for a in node.args.split(", ") if "=" in a)
            shapes = tuple(tuple(int(x) for x in s.split(", ") if x) for s in re.findall(r"\[([\d, ]*)\]", node.shape))
            if len(shapes) < 3:
                continue
            key = (
                node.dtype.split(",")[0],
                shapes,
                args.get("mask", "none"),
                float(args.get("dropout_p", 0.0)),
                args.get("is_causal") == "True",
                args.get("enable_gqa") == "True",
            )
            out[key] += 1
    return out


def choose_here(torch, calls: Counter, device: str = "cpu") -> dict:
    """The kernel each recorded call reaches on ``device`` here: ``aten::_fused_sdp_choice`` called with
    the call's inputs (seeded), and the call run under a dispatch mode to see which kernel it reached
    (the two must agree, or the record says so)."""
    from torch.utils._python_dispatch import TorchDispatchMode

    class Seen(TorchDispatchMode):
        def __init__(self):
            super().__init__()
            self.ops: list[str] = []

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            self.ops.append("aten::" + func.__name__.split(".")[0])
            return func(*args, **(kwargs or {}))

    kernels: Counter = Counter()
    disagree = 0
    for (dtype, shapes, mask, dropout_p, is_causal, gqa), n in sorted(calls.items(), key=str):
        torch.manual_seed(0)
        want = getattr(torch, dtype)
        q, k, v = (torch.randn(s, dtype=want, device=device) for s in shapes[:3])
        attn = None
        if mask != "none" and len(shapes) > 3:
            attn = (
                torch.ones(shapes[3], dtype=torch.bool, device=device)
                if mask == "bool"
                else torch.zeros(shapes[3], dtype=getattr(torch, mask), device=device)
            )
        kw = dict(attn_mask=attn, dropout_p=dropout_p, is_causal=is_causal and attn is None, enable_gqa=gqa)
        try:
            choice = int(torch.ops.aten._fused_sdp_choice(q, k, v, **kw))
        except Exception:  # noqa: BLE001 - the chooser refuses the call: it raises in the model too
            kernels["error"] += n
            continue
        kernel = CHOICE.get(choice, {}).get(device) or CHOICE.get(choice, {}).get("") or f"choice {choice}"
        seen = Seen()
        with seen, torch.no_grad():
            torch.nn.functional.scaled_dot_product_attention(q, k, v, **kw)
        reached = [op for op in seen.ops if op in FUSED]  # the math path is composite: seen as its decomposition
        if reached != ([kernel] if kernel != MATH else []):
            disagree += 1
        kernels[kernel] += n
    ranked = sorted(kernels.items(), key=lambda kv: (-kv[1], kv[0]))
    out = {"kernels": [k for k, _ in ranked], "calls": dict(ranked), "signatures": len(calls)}
    if disagree:
        out["disagree"] = disagree
    return out


def _stub_referenced(package: str, torch_version: str) -> str | None:
    """The shared library of ``package`` (found, not imported) that references the chooser's stub, if any."""
    import importlib.util

    spec = importlib.util.find_spec(package) if package else None
    where = spec.submodule_search_locations if spec is not None else None
    for folder in where or ():
        found = sorted(glob.glob(os.path.join(folder, "**", "*.so"), recursive=True))
        build = "_" + str(torch_version).split("+")[0].replace(".", "_")  # a wheel built for several torch releases
        for path in sorted(found, key=lambda p: build not in os.path.basename(p)):
            with open(path, "rb") as f:
                if STUB_SYMBOL in f.read():
                    return os.path.relpath(path, folder)
    return None


def from_registrations(doc: dict) -> dict:
    """The choice as the registered file (and a PrivateUse1 package's binary) tells it."""
    ops = doc["ops"]
    backend = doc["backend"]
    key = backend.get("dispatch_key", "")
    fused = [op for op in FUSED if (ops.get(op) or {}).get("fwd") == "kernel"]
    chooser = ops.get("aten::_fused_sdp_choice") or {}
    how = []
    if chooser.get("fwd") == "kernel":
        how.append(f"aten::_fused_sdp_choice registered for {key} ({chooser.get('src', 'no source location')})")
    stub = None
    if key == "PrivateUse1":
        stub = _stub_referenced(str(backend.get("package") or ""), str(doc["provenance"].get("torch")))
        if stub:
            how.append(f"{backend['package']}'s {os.path.basename(stub)} references at::native::_fused_sdp_choice_stub")
    if not fused or not (how and (chooser.get("fwd") == "kernel" or stub)):
        why = "no fused attention kernel registered" if not fused else "no chooser registered for its key"
        return {"evidence": "registered", "kernels": [MATH], "how": f"math path: {why}"}
    how.append("fused kernels registered: " + ", ".join(fused))
    return {
        "evidence": "registered",
        "kernels": [*fused, MATH],
        "how": "; ".join(how) + "; which one a call takes depends on the device and is not read here",
    }


def record(backend: str, coverage_dir: str) -> tuple[str, dict]:
    """(the backend's newest registered file, its ``provenance.sdpa`` block as computed now)."""
    path = layout.pick(layout.snapshots(coverage_dir, backend)["registered"], "")
    if path is None:
        raise SystemExit(f"opcov: no registered file for {backend} under {coverage_dir}/")
    doc = data.load(path)
    device = doc["backend"].get("device_type")
    if device == "cpu":
        import torch

        if not layout.same_torch(str(torch.__version__), str(doc["provenance"].get("torch"))):
            raise SystemExit(f"opcov: {path} is of torch {doc['provenance'].get('torch')}, this is {torch.__version__}")
        block = {"evidence": "probed", **choose_here(torch, zoo_calls(coverage_dir))}
        block["how"] = "aten::_fused_sdp_choice called here on the zoo's recorded calls, each run to see the kernel"
    else:
        block = from_registrations(doc)
    block["command"] = f"{COMMAND} {backend}"
    return path, block


def said(block: dict) -> str:
    """The block in words: 'aten::_scaled_dot_product_flash_attention_for_cpu on 790 of 885 zoo calls,
    aten::_scaled_dot_product_attention_math on 95 (probed: ...)', or for a registration 'one of aten::...,
    picked per call, else ... (registered, unverified: ...)'."""
    kernels = [str(k) for k in block.get("kernels") or ()]
    calls = block.get("calls") if isinstance(block.get("calls"), dict) else {}
    evidence = str(block.get("evidence") or "registered")
    if calls:
        total = sum(int(n) for n in calls.values())
        parts = [
            f"{k} on {calls[k]} of {total} zoo calls" if i == 0 else f"{k} on {calls[k]}" for i, k in enumerate(kernels)
        ]
        text = ", ".join(parts)
    elif len(kernels) > 1:
        text = f"one of {', '.join(kernels[:-1])}, picked per call by the backend's chooser, else {kernels[-1]}"
    else:
        text = ", ".join(kernels) or "?"
    word = "probed" if evidence == "probed" else f"{evidence}, unverified"
    return f"{text} ({word}: {block.get('how', '')})"


def main(argv=None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    coverage_dir = layout.DEFAULT_COVERAGE
    for backend in argv:
        path, block = record(backend, coverage_dir)
        doc = data.load(path)
        doc["provenance"]["sdpa"] = block
        data.save(doc, path)
        print(f"{path}: scaled_dot_product_attention -> {', '.join(block['kernels'])} ({block['evidence']})")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
