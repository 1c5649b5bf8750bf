"""Plain-text and machine formats for the catalogue, backend list and coverage summaries."""

from __future__ import annotations

import json
import sys

from opcov.vocab import INPUT_TIERS, REGISTERED, RESOLVED, SKIP_REASONS

LABELS = {s: w.label for s, w in REGISTERED.items()}


def table_lines(rows, headers, indent: str = "") -> list[str]:
    """The lines of a left-aligned text table; the last column is not padded."""
    rows = [[str(c) for c in r] for r in rows]
    widths = [max([len(h)] + [len(r[i]) for r in rows]) for i, h in enumerate(headers)]
    fmt = indent + "  ".join(f"{{:<{w}}}" for w in widths[:-1]) + "  {}"
    return [fmt.format(*r).rstrip() for r in [headers, ["-" * w for w in widths]] + rows]


def table(rows, headers, out=None) -> None:
    """A left-aligned text table; the last column is not padded. ``out`` (default: standard output as it
    is when called, so a caller that redirects it, as the tests' in-process runs do, gets the table)."""
    out = sys.stdout if out is None else out
    for line in table_lines(rows, headers):
        print(line, file=out)


def print_data(obj, fmt: str) -> None:
    """``obj`` as JSON (indent 1) or YAML (keys in the order given)."""
    if fmt == "json":
        print(json.dumps(obj, indent=1))
        return
    import yaml

    print(yaml.safe_dump(obj, sort_keys=False, width=120), end="")


def print_ops(ops, catalog, fmt: str) -> None:
    if fmt in ("json", "yaml"):
        print_data(
            {"torch": catalog.torch_version, "modules": list(catalog.modules), "ops": [op.as_dict() for op in ops]}, fmt
        )
        return
    table(
        [(op.name, op.composite or "-", op.structured_delegate or "-", ",".join(op.tags) or "-") for op in ops],
        ("op", "composite", "structured delegate", "tags"),
    )
    core = sum(op.is_core for op in ops)
    print(f"\n{len(ops)} op overload(s) ({core} core ATen) of {len(catalog)} in torch {catalog.torch_version}")


def print_backends(backends, fmt: str) -> None:
    rows = []
    for b in backends:
        version = b.installed_version()
        if version and not b.available_in_build():
            version = f"no: torch {version} is built without {b.dispatch_key}"
        if b.module and version is None:
            import importlib.util

            version = "importable" if importlib.util.find_spec(b.module.split(".")[0]) else None
        rows.append(
            {
                "name": b.name,
                "device_type": b.device_type,
                "dispatch_key": b.dispatch_key,
                "package": b.package or "torch",
                "installed": version,
                "note": b.note,
                "setup": b.setup,
                "commands": list(b.data_commands()),
            }
        )
    if fmt == "json":
        print(json.dumps(rows, indent=1))
        return
    table(
        [(r["name"], r["dispatch_key"], r["package"], r["installed"] or "not installed", r["note"]) for r in rows],
        ("backend", "dispatch key", "package", "installed", "note"),
    )
    built = " and ".join(b.name for b in backends if b.build_flag)
    print(f"\nListing imports no backend. {built} kernels exist only in torch builds that include them.")
    absent = [r for r in rows if r["setup"] and (not r["installed"] or r["installed"].startswith("no:"))]
    if absent:
        print("\nNot usable here; what making their data needs (then the registered scan, then the probe):")
        import textwrap

        for r in absent:
            print(textwrap.fill(r["setup"], 100, initial_indent=f"  {r['name']:8}", subsequent_indent=" " * 10))
            print("".join(f"{'':10}$ {c}\n" for c in r["commands"]), end="")


def _mapping(value) -> dict:
    return value if isinstance(value, dict) else {}


def _count(value) -> int:
    return value if isinstance(value, int) else 0


def _pct(n: int, total: int) -> str:
    return f"{100 * n / total:.1f}%" if total else "-"


def print_summary(docs) -> None:
    """Per coverage file: aten overloads and core ATen ops per resolved status."""
    for path, doc in docs:
        b, prov, summ = doc["backend"], doc["provenance"], _mapping(doc.get("summary"))
        print(
            f"{b['name']} ({b.get('package', '?')} {b.get('version', '?')}, dispatch key {b.get('dispatch_key', '?')}) "
            f"- {doc['evidence']} evidence, torch {prov['torch']}, {prov['created']}"
        )
        print(f"  file: {path}")
        if doc.get("evidence") == "probed":
            _print_probed(doc)
            continue
        rows: list[tuple[str, str, object, str]] = []
        for section, label in (("aten", "aten overloads"), ("core", "core ATen")):
            s = _mapping(summ.get(section))  # a summary is free-form plain data to the schema: any part may lack
            if not s:
                continue
            res = _mapping(s.get("res"))
            applicable = _count(s.get("overloads")) - _count(res.get("not_applicable"))
            for status in RESOLVED:
                if status == "not_applicable":
                    continue
                n = _count(res.get(status))
                rows.append((label, f"forward {LABELS[status]}", n, _pct(n, applicable)))
            rows.append((label, "  paths", ", ".join(f"{k} {v}" for k, v in _mapping(s.get("fwd")).items()), ""))
            if "bwd_res" in s:
                rows.append((label, "backward", ", ".join(f"{k} {v}" for k, v in _mapping(s["bwd_res"]).items()), ""))
        if rows:
            table(rows, ("set", "status", "count", "share"))
        else:
            print("  no summary counts in this file")
        fb = prov.get("fallback") or {}
        if fb.get("present"):
            state = {
                True: "ENABLED: ops on it run (slowly)",
                False: "DISABLED: ops reaching it raise",
                None: "state unknown",
            }[fb.get("enabled")]
            print(f"  backend fallback: kind {fb.get('kind')}, {state}")
        print(f"  aten base names with an own kernel: {_mapping(summ.get('aten')).get('base_names_with_kernel', '?')}")
        for note in prov.get("notes", []):
            print(f"  note: {note}")
        print(f"  reproduce: {prov['command']}\n")


def _print_probed(doc) -> None:
    """A probed file: how much of the catalogue has probe evidence, ops and cells per status."""
    from opcov.vocab import PROBED_STATUSES

    prov, summ = doc["provenance"], doc.get("summary") or {}
    rows = []
    for section, label in (("aten", "aten overloads"), ("core", "core ATen")):
        s = summ.get(section)
        if not s:
            continue
        rows.append(
            (
                label,
                "probed (some dtype has evidence)",
                s.get("probed", 0),
                _pct(s.get("probed", 0), s.get("overloads", 0)),
            )
        )
        rows.append(
            (
                label,
                "skipped (no case reached it)",
                s.get("skipped", 0),
                _pct(s.get("skipped", 0), s.get("overloads", 0)),
            )
        )
        by = s.get("skipped_by") or {}
        for why in sorted(
            by, key=lambda w: (list(SKIP_REASONS).index(w) if w in SKIP_REASONS else len(SKIP_REASONS), w)
        ):
            word = SKIP_REASONS.get(why)  # one reason each, in the vocabulary's order
            rows.append((label, f"  {word.short if word else why}", by[why], _pct(by[why], s.get("overloads", 0))))
        for key, what in (("fwd", "forward"), ("bwd", "backward")):
            counts = s.get(key) or {}
            text = ", ".join(f"{st} {counts[st]}" for st in PROBED_STATUSES if counts.get(st))
            rows.append((label, f"{what}, worst status over dtypes", text or "-", ""))
        for tier, counts in (s.get("cells_tiers") or {}).items():  # the harder-input cases' own cells
            text = ", ".join(f"{st} {counts[st]}" for st in PROBED_STATUSES if counts.get(st))
            word = INPUT_TIERS.get(tier)
            rows.append((label, f"input tier {word.short if word else tier}, cells", text or "-", ""))
    for dkey, counts in (summ.get("dtypes") or {}).items():
        text = ", ".join(f"{st} {counts[st]}" for st in PROBED_STATUSES if counts.get(st))
        rows.append(("dtype " + dkey, "forward cells", text, ""))
    table(rows, ("set", "status", "count", "share"))
    reasons = [
        w
        for w in SKIP_REASONS.values()
        if any(w.name in ((summ.get(sec) or {}).get("skipped_by") or {}) for sec in ("aten", "core"))
    ]
    for w in reasons:
        print(f"  skipped, {w.short}: {w.label}")
    probe = prov.get("probe") or {}
    print(
        f"  cases: {summ.get('cases', '?')}; dtypes {','.join(probe.get('dtypes', []))}; "
        f"directions {','.join(probe.get('directions', []))}; shard {probe.get('shard', 'all')}; "
        f"device: {prov.get('device', '?')}"
    )
    for note in prov.get("notes", []):
        print(f"  note: {note}")
    print(f"  reproduce: {prov['command']}\n")
