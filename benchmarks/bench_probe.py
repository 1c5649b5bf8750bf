"""Probe speed: the isolated probe against a bare in-process loop running the same cases on cpu.

    TORCH_DEVICE_BACKEND_AUTOLOAD=0 .venv/bin/python benchmarks/bench_probe.py [--jobs N] [--ops PATTERN]

Two comparisons, both printed with their times (the issue's goal: a ratio of at most 1.5):

* commands, wall clock from launch to exit: ``opcov probe cpu --ops ... --out F`` (worker
  processes, pipes, fsync'd journal, the coverage file written) against ``python bench_probe.py
  --bare``, a script that imports torch, loads OpInfo and runs the same cases in one process
  with no isolation and no output file. Both pay their imports, as a user does.
* per case, in steady state: the probe's time after its first worker is ready, against the bare
  loop's time after its imports. This is the figure that scales with the case count (the full
  cpu probe runs about 96,000 cases).

Prints figures and rewrites the 'probe' section of docs/performance.md; asserts nothing.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time

os.environ.setdefault("TORCH_DEVICE_BACKEND_AUTOLOAD", "0")
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "src"))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

OPS = (
    "^(add|mul|sub|div.no_rounding_mode|mm|bmm|addmm|sum|mean|exp|log|sin|tanh|sigmoid|"
    "nn.functional.relu|nn.functional.gelu|softmax|clone|cat|stack|transpose|reshape|index_select|"
    "gather|where|abs|neg|max.reduction_with_dim|nn.functional.linear|nn.functional.layer_norm)$"
)
DTYPES = "float32,bfloat16,float16,float64"


def bare(ops: str, dtypes: str) -> None:
    """The same cases in this process: no workers, no journal, no output file. Prints its figures."""
    import torch

    from opcov.probe import DIRECTIONS
    from opcov.probe.cases import load_group, select_groups
    from opcov.probe.execute import Executor
    from opcov.probe.sample import case_ids
    from opcov.probe.tiers import TIERS
    from opcov.sources.opinfo import opinfos

    opinfos()
    torch.set_num_threads(1)
    groups = select_groups(ops, dtypes=tuple(dtypes.split(",")), directions=DIRECTIONS, tiers=TIERS)
    w = Executor("cpu", "cpu")
    t0 = time.perf_counter()
    n = 0
    for g in groups:
        loaded = load_group(g.as_dict())
        for cid, sample in zip(case_ids(g.id, loaded.samples), loaded.samples):
            w.run_case(loaded, sample, cid, g.as_dict())
            n += 1
    print(f"{n} {time.perf_counter() - t0:.4f}")


def timed(cmd: list[str]) -> tuple[float, str]:
    t0 = time.perf_counter()
    proc = subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT)
    wall = time.perf_counter() - t0
    if proc.returncode != 0:
        sys.exit(f"{' '.join(cmd[:4])}... failed: {proc.stderr[-2000:]}")
    return wall, proc.stdout


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--jobs", type=int, default=1)
    ap.add_argument("--ops", default=OPS, help="OpInfo pattern (default: 30 common ops)")
    ap.add_argument("--dtypes", default=DTYPES)
    ap.add_argument("--bare", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.bare:
        return bare(args.ops, args.dtypes)

    bare_cmd_s, out = timed(
        [sys.executable, os.path.abspath(__file__), "--bare", "--ops", args.ops, "--dtypes", args.dtypes]
    )
    n, bare_loop_s = out.split()
    n, bare_loop_s = int(n), float(bare_loop_s)

    from opcov.backends import get_backend
    from opcov.probe import DIRECTIONS
    from opcov.probe.runner import probe
    from opcov.probe.tiers import TIERS

    with tempfile.TemporaryDirectory() as tmp:
        iso_cmd_s, _ = timed(
            [
                sys.executable,
                "-m",
                "opcov",
                "probe",
                "cpu",
                "--ops",
                args.ops,
                "--dtypes",
                args.dtypes,
                "--jobs",
                str(args.jobs),
                "--out",
                os.path.join(tmp, "cmd.yaml"),
            ]
        )
        # in process, for the split of the probe's own time
        _, fig = probe(
            get_backend("cpu"),
            out=os.path.join(tmp, "p.yaml"),
            pattern=args.ops,
            dtypes=tuple(args.dtypes.split(",")),
            directions=DIRECTIONS,
            jobs=args.jobs,
            timeout=60.0,
            command="bench_probe",
            stream=open(os.devnull, "w"),
            tiers=TIERS,
        )
    start, run, wall = fig["start_s"] or 0.0, fig["run_s"], fig["wall_s"]
    cases = run - start
    print(
        f"cases: {n} ({fig['groups']} groups; dtypes {args.dtypes}; forward+backward, one harder case per "
        f"input tier; jobs={args.jobs})"
    )
    print(
        f"commands, launch to exit:  bare script {bare_cmd_s:6.2f} s   opcov probe {iso_cmd_s:6.2f} s   "
        f"ratio {iso_cmd_s / bare_cmd_s:.2f} (goal: at most 1.5)"
    )
    print(
        f"per case, steady state:    bare loop   {bare_loop_s:6.2f} s   probe cases {cases:6.2f} s   "
        f"ratio {cases / bare_loop_s:.2f}   ({n / cases:.0f} cases/s)"
    )
    print(
        f"probe() split: first worker ready after {start:.2f} s (its start overlaps the catalogue and "
        f"case selection), cases {cases:.2f} s, results built and written {wall - run:.2f} s"
    )
    from docs_page import PERFORMANCE, command_line, markdown_table, write_section

    rows = [
        ["launch to exit", f"{bare_cmd_s:.2f} s", f"{iso_cmd_s:.2f} s", f"{iso_cmd_s / bare_cmd_s:.2f}", "1.5"],
        ["cases, steady state", f"{bare_loop_s:.2f} s", f"{cases:.2f} s", f"{cases / bare_loop_s:.2f}", "1.5"],
    ]
    table = markdown_table(["on cpu, the same cases", "bare loop", "opcov probe", "ratio", "goal"], rows)
    note = (
        f"{n} cases ({fig['groups']} groups; dtypes {args.dtypes}; forward and backward, one harder case per "
        f"input tier; `--jobs {args.jobs}`). The probe's first worker was ready after {start:.2f} s (its start "
        f"overlaps building the catalogue); writing the results took {wall - run:.2f} s."
    )
    write_section(PERFORMANCE, "probe", table, command_line(), note=note)


if __name__ == "__main__":
    main()
