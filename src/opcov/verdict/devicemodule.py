"""A model whose run looks up the device's own module (``torch.<device>``) judged against whether the backend registers one.

Why: gradient checkpointing and ``torch.get_device_module`` fetch ``torch.<device type>`` by name before any
op is dispatched; on a backend that registers none (PyTorch/XLA: no ``torch.xla``) the call raises whatever
the model's ops are, so a verdict from ops alone would say ``runs`` for a model that raises. The op set
records each lookup (opcov.tracing.devicemodule: the torch API and the model's line), the backend's
registered data whether its module exists (opcov.scan.devicemodule); each API becomes a ``python:API`` row
of the verdict, failing where the module is not registered. Torch-free.
"""

from __future__ import annotations

from opcov import vocab
from opcov.store.opset import DEVICE_MODULE
from opcov.verdict import judge

COMMAND = "python -m opcov.scan.devicemodule"
# device types whose lookup torch answers without a module (torch.utils.checkpoint returns torch.device('meta'))
NO_LOOKUP = ("meta",)


def lookups(doc: dict) -> dict[str, tuple[int, list[str]]]:
    """API -> (lookups, the model's lines that led to them), from the op set's ``device_module`` list."""
    out: dict[str, tuple[int, list[str]]] = {}
    for e in doc.get(DEVICE_MODULE) or ():
        n, lines = out.get(e["via"], (0, []))
        at = e.get("at")
        out[e["via"]] = (n + int(e.get("calls", 1)), lines + [at] if at and at not in lines else lines)
    return out


def _lines(lines: list[str]) -> str:
    return ", ".join(lines[:3]) + (f" and {len(lines) - 3} more" if len(lines) > 3 else "") if lines else "?"


def judge_lookups(v, doc: dict, cov) -> None:
    """Add a failing ``python:API`` row to ``v`` (and its variants' verdicts) for each API that looked up a
    device module ``cov``'s backend does not register, worst first, and make the verdict ``fails``; where the
    backend's data does not say whether it registers one, a note says so and what records it."""
    found = lookups(doc)
    if not found or cov.backend in NO_LOOKUP:
        return
    block = ((cov.registered or {}).get("provenance") or {}).get(DEVICE_MODULE)
    apis = ", ".join(found)
    if not isinstance(block, dict):
        v.notes.append(
            f"this model's run looks up the device's own module through {apis}; the {cov.backend} data does not "
            f"record whether {cov.backend} registers one ({COMMAND} FILE records it in its registered file)"
        )
        return
    if block.get("registered"):
        return
    name = str(block.get("name") or f"torch.{cov.backend}")
    dtype = str(doc.get("dtype") or "float32")
    for each in [v, *v.variants.values()]:
        rows = []
        for api, (n, lines) in found.items():
            why = (
                f"{api} looks up {name}, the device's own module, at {_lines(lines)}; {cov.backend} registers "
                f"no {name}, so the call raises before any op runs"
            )
            fix = f"use {cov.backend}'s own version of {api} where it has one, or leave it out on {cov.backend}"
            finding = judge.Finding(
                "forward", dtype, "fails", cov.static, why, source=cov.paths[0] if cov.paths else "", fix=fix
            )
            rows.append(judge.OpResult(f"python:{api}", n, frozenset({"forward"}), frozenset({dtype}), [finding]))
        each.ops[0:0] = rows
        worst, evidence = judge.summarize([r.judged for r in each.ops])
        each.verdict, each.evidence = vocab.VERDICT_OF.get(worst, "runs"), evidence
