"""Tracing speed and memory: a Llama-3-8B-shaped model (fake tensors), the curated zoo, and (--zoo) every
transformers architecture.

Prints figures and rewrites its sections of docs/performance.md ('trace-8b', 'trace-curated-zoo',
'trace-whole-zoo'); asserts nothing. Targets: 8B forward + backward + AdamW step
in <= 10 s at <= 1 GB peak RSS (real weights and Adam state would need > 60 GB); the curated
zoo (both modes) in <= 5 minutes on 2 cores; the whole zoo (``opcov zoo trace --all``, both modes)
in <= 30 minutes with --jobs 2 on 2 cores.

    TORCH_DEVICE_BACKEND_AUTOLOAD=0 python benchmarks/bench_trace.py [--skip-zoo]
    TORCH_DEVICE_BACKEND_AUTOLOAD=0 python benchmarks/bench_trace.py --zoo [--jobs 2] [--sample N]
"""

from __future__ import annotations

import os
import resource
import sys
import tempfile
import time

os.environ.setdefault("TORCH_DEVICE_BACKEND_AUTOLOAD", "0")
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from docs_page import PERFORMANCE, command_line, markdown_table, write_section  # noqa: E402

PACKAGES = ("torch", "transformers")

LLAMA3_8B = dict(
    num_hidden_layers=32,
    hidden_size=4096,
    intermediate_size=14336,
    num_attention_heads=32,
    num_key_value_heads=8,
    vocab_size=128256,
    max_position_embeddings=8192,
    rope_theta=500000.0,
)


def peak_rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def bench_8b() -> None:
    from opcov.sources import models
    from opcov.tracing.trace import trace

    t0 = time.perf_counter()
    built = models.build("hf:llama", models.Sizes(batch=1, seq=2048, overrides=LLAMA3_8B), mode="training", real=False)
    t1 = time.perf_counter()
    result = trace(
        built.model,
        built.inputs,
        mode="training",
        dtype="bfloat16",
        optimizer="adamw",
        name="llama-3-8b-shape",
        source=built.source,
        config=built.config,
    )
    t2 = time.perf_counter()
    params = result.doc["model"]["params"]
    s = result.doc["summary"]
    print(
        f"llama-3-8b shape ({params / 1e9:.2f} B params, bf16, batch 1 x seq 2048): build on meta (incl. importing transformers) "
        f"{t1 - t0:.2f} s, trace forward+backward+AdamW {t2 - t1:.2f} s (target <= 10 s); "
        f"{s['distinct_ops']} ops, calls {s['calls']}; peak RSS {peak_rss_mb():.0f} MB (target <= 1024 MB)"
    )
    rows = [
        ["build on meta (importing transformers included)", f"{t1 - t0:.2f} s", ""],
        ["trace forward + backward + AdamW step", f"{t2 - t1:.2f} s", "10 s"],
        ["peak RSS", f"{peak_rss_mb():.0f} MB", "1024 MB"],
        [
            "distinct ops; calls per phase",
            f"{s['distinct_ops']}; " + ", ".join(f"{k} {v}" for k, v in s["calls"].items()),
            "",
        ],
    ]
    note = f"A Llama-3-8B shape ({params / 1e9:.2f} B parameters, bfloat16, batch 1 x sequence 2048), fake tensors."
    write_section(
        PERFORMANCE,
        "trace-8b",
        markdown_table(["figure", "value", "goal"], rows),
        command_line(),
        packages=PACKAGES,
        note=note,
    )


def bench_zoo() -> None:
    from opcov.sources import zoo
    from opcov.tracing.spec import trace_zoo

    with tempfile.TemporaryDirectory() as root, open(os.devnull, "w") as quiet:
        t0 = time.perf_counter()
        failures = trace_zoo(list(zoo.ZOO), ("inference", "training"), root=root, out=quiet)
        took = time.perf_counter() - t0
    n = 2 * len(zoo.ZOO)
    print(
        f"zoo: {len(zoo.ZOO)} models x 2 modes = {n} op sets in {took:.1f} s (target <= 300 s), "
        f"{len(failures)} failed; {os.cpu_count()} CPUs; peak RSS {peak_rss_mb():.0f} MB"
    )
    for name, mode, why in failures:
        print(f"  failed: {name} {mode}: {why}")
    rows = [[f"{len(zoo.ZOO)} models x 2 modes = {n} op sets", f"{took:.1f} s", "300 s", str(len(failures))]]
    table = markdown_table(["curated zoo", "wall", "goal", "failed"], rows)
    write_section(PERFORMANCE, "trace-curated-zoo", table, command_line(), packages=PACKAGES)


def bench_whole_zoo(jobs: int, sample: int) -> None:
    """The whole zoo (or a seeded sample of it) in worker processes, into a temporary folder."""
    import shutil

    from opcov.sources import zoo
    from opcov.store import layout
    from opcov.tracing import zoorun

    archs = zoorun.architectures(every=not sample, sample=sample)
    load0 = os.getloadavg()[0]
    with tempfile.TemporaryDirectory() as tmp:
        root = os.path.join(tmp, "models")
        kept = 0
        for entry in zoo.ZOO:  # as 'opcov zoo trace --all' finds them: the curated op sets are kept, not traced
            for mode in zoorun.MODES:
                src = layout.opset_path(entry.name, mode)
                if os.path.isfile(src):
                    os.makedirs(os.path.dirname(layout.opset_path(entry.name, mode, root)), exist_ok=True)
                    shutil.copy(src, layout.opset_path(entry.name, mode, root))
                    kept += 1
        print(
            f"{kept} curated op sets copied from {layout.models_dir()} (kept by the run, as in the repository)",
            file=sys.stderr,
        )
        t0 = time.perf_counter()
        stream = _PassClock(sys.stderr)
        rows = zoorun.run(archs, jobs=jobs, root=root, table=os.path.join(tmp, "t.tsv"), stream=stream)
        took = time.perf_counter() - t0
    for mode in zoorun.MODES:
        of = [r for r in rows if r["mode"] == mode]
        print(f"{mode}: traced {sum(r['outcome'] == 'traced' for r in of)} of {len(of)}")
    slow = sorted((r for r in rows if r.get("seconds")), key=lambda r: -r["seconds"])[:5]
    fake = (stream.real_pass_at or time.perf_counter()) - t0
    print(
        f"whole zoo: {len(archs)} architectures x 2 modes in {took / 60:.1f} min with --jobs {jobs}: the "
        f"fake-tensor pass {fake / 60:.1f} min (target <= 30 min), the real-valued pass after it (branch runs, "
        f"traces fake tensors cannot make) {(took - fake) / 60:.1f} min; {os.cpu_count()} CPUs, load average "
        f"{load0:.1f} at the start, "
        f"{os.getloadavg()[0]:.1f} at the end; slowest: "
        + ", ".join(f"{r['model']} {r['mode']} {r['seconds']:.0f} s" for r in slow)
    )
    traced = {m: sum(r["outcome"] == "traced" for r in rows if r["mode"] == m) for m in zoorun.MODES}
    table = markdown_table(
        ["architectures x 2 modes", "whole run", "fake-tensor pass (goal 30 min)", "real-valued pass", "traced"],
        [
            [
                f"{len(archs)}{' (seeded sample)' if sample else ''}, `--jobs {jobs}`",
                f"{took / 60:.1f} min",
                f"{fake / 60:.1f} min",
                f"{(took - fake) / 60:.1f} min",
                ", ".join(f"{m} {k}" for m, k in traced.items()),
            ]
        ],
    )
    write_section(PERFORMANCE, "trace-whole-zoo", table, command_line(), packages=PACKAGES)


class _PassClock:
    """The zoo's progress stream, passed on, noting when its real-valued pass begins (the line zoorun
    prints between the passes)."""

    def __init__(self, out):
        self.out, self.real_pass_at = out, None

    def write(self, text):
        if self.real_pass_at is None and " real-valued " in text and text.startswith("zoo: "):
            self.real_pass_at = time.perf_counter()
        return self.out.write(text)

    def flush(self):
        self.out.flush()

    def isatty(self):
        return self.out.isatty()


def _option(name: str, default: int) -> int:
    return int(sys.argv[sys.argv.index(name) + 1]) if name in sys.argv else default


if __name__ == "__main__":
    if "--zoo" in sys.argv:
        bench_whole_zoo(_option("--jobs", 2), _option("--sample", 0))
        sys.exit(0)
    t = time.perf_counter()
    import torch  # noqa: F401 - import time is not tracing time

    print(f"import torch: {time.perf_counter() - t:.2f} s")
    bench_8b()
    if "--skip-zoo" not in sys.argv:
        bench_zoo()
