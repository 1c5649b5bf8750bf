#!/usr/bin/env python
"""Cross-check a registered scan of an in-tree backend (cuda, cpu) against torchgen's native_functions.yaml.

A registered scan reads the dispatcher of an installed build; torchgen's parsed native_functions.yaml
says which dispatch keys each ATen op is meant to have a kernel for. The two should agree, and where
they do not, one of them knows something the other does not (a kernel registered by hand outside
the codegen, an entry the build left out). This prints the differences, with counts:

  * ops torchgen says have a kernel for the key that the scan does not, and
  * ops the scan found a kernel for that torchgen does not list.

"Has a kernel" on both sides means the op's own kernel for the key. A functional or in-place op of a
structured group (``structured_delegate: add.out``) has one exactly when its ``.out`` has: the
codegen registers the group's wrappers around the out kernel for every variant. On the scan side
that is ``fwd: kernel``, or ``fwd: out_variant`` with its ``.out`` a kernel (how a PrivateUse1
backend shows a structured group). Only the aten namespace is compared.

torchgen ships with torch (``torchgen/packaged/ATen/native/``) and imports no torch, so this runs in
any environment that has it, e.g. opcov's own .venv on the committed cuda data:

    .venv/bin/python scripts/crosscheck_torchgen.py coverage/cuda/registered-torch-2.13.0.yaml
    .venv/bin/python scripts/crosscheck_torchgen.py coverage/cpu/registered-torch-2.13.0+cpu.yaml
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections import Counter

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "src"))
from opcov.scan import declared as _declared  # noqa: E402  (torch-free: it imports torchgen when called)
from opcov.store import data  # noqa: E402


def torchgen_kernels(key: str, yaml_dir: str | None = None) -> tuple[set[str], set[str], str]:
    """(ops with a ``key`` kernel, every aten op torchgen parsed, the yaml path) from native_functions.yaml,
    as opcov's declared data reads it (opcov.scan.declared.torchgen_kernels)."""
    found = _declared.torchgen_kernels(key, yaml_dir)
    return set(found.kernels), set(found.ops), found.path


def scan_kernels(doc: dict) -> set[str]:
    """aten ops the scan found the backend's own kernel for (directly, or through a structured .out)."""
    ops = doc["ops"]
    out = set()
    for name, rec in ops.items():
        if not name.startswith("aten::"):
            continue
        if rec.get("fwd") == "kernel":
            out.add(name)
        elif rec.get("fwd") == "out_variant" and all(
            ops.get(v, {}).get("fwd") == "kernel" for v in rec.get("via") or ()
        ):
            out.add(name)
    return out


def crosscheck(doc: dict, yaml_dir: str | None = None) -> dict:
    """The two differences between a registered document and torchgen's view of its dispatch key."""
    key = doc["backend"]["dispatch_key"]
    declared, known, yaml_path = torchgen_kernels(key, yaml_dir)
    scanned = scan_kernels(doc)
    ops = doc["ops"]

    def detail(name: str) -> dict:
        rec = ops.get(name)
        return {"op": name, "fwd": rec.get("fwd") if rec else "not in the scan", "src": (rec or {}).get("src", "")}

    only_torchgen = sorted(declared - scanned)
    only_scan = sorted(scanned - declared)
    return {
        "backend": doc["backend"]["name"],
        "dispatch_key": key,
        "torch": doc["provenance"]["torch"],
        "yaml": yaml_path,
        "torchgen_ops": len(known),
        "scan_aten_ops": sum(1 for n in ops if n.startswith("aten::")),
        "torchgen_kernels": len(declared),
        "scan_kernels": len(scanned),
        "both": len(declared & scanned),
        "only_torchgen": [detail(n) for n in only_torchgen],
        "only_scan": [dict(detail(n), in_yaml=n in known) for n in only_scan],
    }


def render(result: dict) -> str:
    r = result
    lines = [
        f"{r['backend']} (dispatch key {r['dispatch_key']}, torch {r['torch']}) against {r['yaml']}",
        f"  torchgen: {r['torchgen_ops']} aten ops parsed, {r['torchgen_kernels']} with a {r['dispatch_key']} "
        f"kernel (structured groups through their .out)",
        f"  scan:     {r['scan_aten_ops']} aten ops, {r['scan_kernels']} with the backend's own kernel",
        f"  agree on {r['both']}; torchgen only: {len(r['only_torchgen'])}; scan only: {len(r['only_scan'])}",
        "",
    ]
    paths = Counter(d["fwd"] for d in r["only_torchgen"])
    lines.append(
        f"torchgen says {r['dispatch_key']} has a kernel, the scan does not: {len(r['only_torchgen'])} "
        f"({', '.join(f'{k} {v}' for k, v in paths.most_common()) or 'none'})"
    )
    lines += [f"  {d['op']}  (scan: {d['fwd']})" for d in r["only_torchgen"]]
    sources = Counter(d["src"] or "?" for d in r["only_scan"])
    not_in_yaml = sum(not d["in_yaml"] for d in r["only_scan"])
    lines.append("")
    lines.append(
        f"the scan found a {r['dispatch_key']} kernel torchgen does not list: {len(r['only_scan'])} "
        f"({not_in_yaml} not in native_functions.yaml at all); registered at: "
        + (", ".join(f"{k} {v}" for k, v in sources.most_common()) or "none")
    )
    lines += [f"  {d['op']}  ({d['src'] or '?'}{'' if d['in_yaml'] else '; not in the yaml'})" for d in r["only_scan"]]
    return "\n".join(lines) + "\n"


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("file", help="a registered coverage file of an in-tree backend (coverage/cuda/registered-...)")
    p.add_argument(
        "--yaml",
        help="folder holding native_functions.yaml and tags.yaml (default: the installed torchgen's packaged copy)",
    )
    p.add_argument("--format", choices=("text", "json"), default="text")
    args = p.parse_args(argv)
    doc = data.load(args.file)
    if doc.get("evidence") != "registered":
        p.error(f"{args.file}: a registered scan is needed, this holds {doc.get('evidence')!r} evidence")
    result = crosscheck(doc, args.yaml)
    sys.stdout.write(json.dumps(result, indent=1) + "\n" if args.format == "json" else render(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
