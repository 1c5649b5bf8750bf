"""Probe speed: the isolated probe (spawned worker, pipes, fsync'd journal) against a bare
in-process loop running the same cases on cpu. Prints both times, the ratio (goal: at most
1.5) and cases per second.

    TORCH_DEVICE_BACKEND_AUTOLOAD=0 .venv/bin/python benchmarks/bench_probe.py [--jobs N]

The isolated time is the probe's own wall time (pool start with the smoke test, cases,
journal), not the command's imports; the bare loop includes sample generation as the
workers do. A full-catalogue run is measured with the CLI (see the report in the README).
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time

os.environ.setdefault("TORCH_DEVICE_BACKEND_AUTOLOAD", "0")
sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "src"))

OPS = ("^(add|mul|sub|div.no_rounding_mode|mm|bmm|addmm|sum|mean|exp|log|sin|tanh|sigmoid|"
       "nn.functional.relu|nn.functional.gelu|softmax|clone|cat|stack|transpose|reshape|index_select|"
       "gather|where|abs|neg|max.reduction_with_dim|nn.functional.linear|nn.functional.layer_norm)$")
DTYPES = ("float32", "bfloat16", "float16", "float64")


class _NoPipe:
    def send(self, msg):
        pass


def bare(groups) -> tuple[float, int]:
    """The same cases, one process, no isolation."""
    import torch

    from opcov.probe.cases import load_group
    from opcov.probe.worker import Worker

    torch.set_num_threads(1)
    w = Worker(_NoPipe(), {"device_type": "cpu", "device": "cpu"})
    t0 = time.perf_counter()
    n = 0
    for g in groups:
        loaded = load_group(g.as_dict())
        for i, sample in enumerate(loaded.samples):
            w.run_case(loaded, sample, f"{g.id}|{i}", g.as_dict())
            n += 1
    return time.perf_counter() - t0, n


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--jobs", type=int, default=1)
    args = ap.parse_args()
    from opcov.backends import get_backend
    from opcov.probe import DIRECTIONS
    from opcov.probe.cases import select_groups
    from opcov.probe.runner import probe

    groups = select_groups(OPS, dtypes=DTYPES, directions=DIRECTIONS, canaries=False)
    bare_s, n = bare(groups)
    import resource

    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    with tempfile.TemporaryDirectory() as tmp:
        _, fig = probe(get_backend("cpu"), out=os.path.join(tmp, "p.yaml"), pattern=OPS, dtypes=DTYPES,
                       directions=DIRECTIONS, jobs=args.jobs, timeout=60.0, command="bench_probe",
                       stream=open(os.devnull, "w"))
    iso_s = fig["wall_s"]
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    worker_cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    canary = fig["cases_run"] - n
    print(f"cases: {n} OpInfo samples ({len(groups)} groups; dtypes {','.join(DTYPES)}; forward+backward) "
          f"+ {canary} canary cases in the isolated run")
    print(f"bare in-process loop:      {bare_s:7.2f} s  {n / bare_s:7.1f} cases/s")
    print(f"isolated probe (jobs={args.jobs}):  {iso_s:7.2f} s  {fig['cases_run'] / iso_s:7.1f} cases/s "
          f"(incl. worker start + smoke test)")
    start = fig["start_s"] or 0.0
    print(f"  worker CPU time (all workers, start included): {worker_cpu:.2f} s")
    print(f"  of which worker start (spawn, imports, OpInfo load) and smoke test: {start:.2f} s")
    print(f"overhead ratio: {iso_s / bare_s:.2f} (goal: at most 1.5); "
          f"per case, start excluded: {(iso_s - start) / bare_s:.2f}")


if __name__ == "__main__":
    main()
