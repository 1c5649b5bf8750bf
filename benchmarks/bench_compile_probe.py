"""Compile-probe speed and depth: `opcov probe cpu|xla --path compile --core --jobs 2` on this machine, whole or a slice.

    TORCH_DEVICE_BACKEND_AUTOLOAD=0 .venv/bin/python benchmarks/bench_compile_probe.py [--backend cpu|xla]
        [--jobs 2] [--time-limit S | --ops REGEX] [--dtypes D,D] [--directions forward,backward]
        [--tiers T,T|all|none] [--warm] [--python PATH] [--out coverage/<backend>/compile/probed-...yaml]

``--backend cpu`` (the default) probes Inductor on this CPU with this Python; ``--backend xla`` probes
openxla on PyTorch/XLA's CPU client (PJRT_DEVICE=CPU unless set), the probe run by the Python with
torch_xla (``--python``; by default .envs/xla/bin/python, the venv scripts/envs/xla.sh makes), its depth
and the whole selection counted by that Python (its torch's OpInfos). On xla the layout input tiers are
not run (an XLA tensor has no strides), and XLA compiles inside the workers (no C++ compiler to count).

Runs the command into a temporary file (or ``--out``: the probed file the data is, written where the
probe's own command writes it), wall clock from launch to exit, and counts the OpInfo x dtype groups and
cases it ran out of those the core-ATen selection holds, with its depth: the dtypes (by default the eager
probe's), the directions (forward and backward) and the input tiers, and the cases of each kind.
``--time-limit`` passes the probe's own limit (it starts no group after S seconds), so a slice is measured
exactly as a user's interrupted run would be; the figure for the whole selection is then an estimate from
the slice's rate, and the page says so. ``--ops`` measures a fixed slice instead (the core OpInfos matching
REGEX), the same work on every run. Besides the wall clock, the CPU time of the probe and all it started
(workers, the C++ compiler) is measured: on a machine that other work loads, wall time says more of the
load than of the probe. The whole selection with the machine to itself is then estimated as the groups'
CPU time (the probe reports its workers'), scaled to the whole selection and shared by the cores it may
use (``--jobs``, at most the machine's), plus the start and writing, counted whole. Inductor keeps
compiled kernels in a cache folder: by default the run gets an empty one of its own (what a first probe
on a machine costs); ``--warm`` keeps the machine's. The load average before and after is printed and
written, since other work on the machine slows every compile.

Prints figures and rewrites the 'compile-probe' section of docs/performance.md (xla: 'compile-probe-xla');
asserts nothing.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
import time

os.environ.setdefault("TORCH_DEVICE_BACKEND_AUTOLOAD", "0")
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "src"))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))


def _children_cpu() -> float:
    """User and system CPU seconds of this process's finished children and everything they waited for."""
    import resource

    r = resource.getrusage(resource.RUSAGE_CHILDREN)
    return r.ru_utime + r.ru_stime


def _core_groups(dtypes: str | None, python: str) -> int:
    """The OpInfo x dtype groups of the whole core selection at ``dtypes`` (None: the probe's default), as
    the probe counts them in ``python`` (its torch's OpInfos)."""
    code = (
        "from opcov.probe import compiled, KNOWN_DTYPES; from opcov.probe.cases import parse_dtypes; "
        f"print(len(compiled._groups(True, None, parse_dtypes({dtypes!r}, KNOWN_DTYPES))))"
    )
    out = subprocess.run([python, "-c", code], capture_output=True, text=True, cwd=ROOT, env=_env(), check=True)
    return int(out.stdout.strip().splitlines()[-1])


def _env() -> dict:
    """The probe's environment: this tree's opcov; PyTorch/XLA's CPU client unless another is set."""
    return dict(os.environ, PYTHONPATH=os.path.join(ROOT, "src"), PJRT_DEVICE=os.environ.get("PJRT_DEVICE", "CPU"))


def _python(args) -> str:
    """The Python that runs the probe: --python, else this one (cpu) or the xla venv's (xla)."""
    if args.python:
        return args.python
    if args.backend == "cpu":
        return sys.executable
    venv = os.path.join(ROOT, ".envs", "xla", "bin", "python")
    if not os.path.exists(venv):
        sys.exit(
            f"--backend xla needs a Python with torch_xla: make {os.path.relpath(venv, ROOT)} with "
            "scripts/envs/xla.sh, or give --python PATH"
        )
    return venv


def _versions(python: str, packages: tuple) -> dict:
    """The versions of ``packages`` and of Python itself ('Python') in ``python`` (the probe's, not
    necessarily this process's)."""
    code = (
        "import json, platform, importlib.metadata as m\n"
        "def v(p):\n"
        "    try:\n        return m.version(p)\n"
        "    except m.PackageNotFoundError:\n        return None\n"
        f"print(json.dumps({{**{{p: v(p) for p in {list(packages)!r}}}, 'Python': platform.python_version()}}))"
    )
    out = subprocess.run([python, "-c", code], capture_output=True, text=True, check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def _depth(args) -> tuple[str, str, str]:
    """The dtypes, directions and input tiers the run has, in words (the probe's defaults where not given;
    the tiers the backend runs: no layout tiers on xla)."""
    from opcov.probe import KNOWN_DTYPES
    from opcov.probe.cases import parse_directions, parse_dtypes, parse_tiers
    from opcov.probe.compiled_run import tiers_on

    dtypes = parse_dtypes(args.dtypes, KNOWN_DTYPES)
    directions = parse_directions(args.directions)
    asked = parse_tiers(args.tiers) if "forward" in directions else ()
    tiers = tiers_on(asked, args.backend)
    left = [t for t in asked if t not in tiers]
    said = ", ".join(tiers) or "none"
    if left:
        said += f" (not {', '.join(left)}: an XLA tensor has no strides)"
    return ", ".join(dtypes), " and ".join(directions), said


def _command(args, out: str) -> list[str]:
    cmd = [_python(args), "-m", "opcov", "probe", args.backend, "--path", "compile", "--core"]
    cmd += ["--jobs", str(args.jobs), "--samples", str(args.samples), "--out", out]
    for flag in ("time_limit", "ops", "dtypes", "directions", "tiers"):
        value = getattr(args, flag)
        if value:
            cmd += ["--" + flag.replace("_", "-"), str(value)]
    return cmd


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--backend", choices=("cpu", "xla"), default="cpu", help="Inductor on CPU, or openxla on xla")
    ap.add_argument("--python", help="the Python that runs the probe (xla: one with torch_xla; default: .envs/xla)")
    ap.add_argument("--jobs", type=int, default=2)
    ap.add_argument("--samples", default="2", help="as the probe's: N, or N,DTYPE=M (M samples at DTYPE)")
    ap.add_argument("--time-limit", type=float, help="start no group after this many seconds (a measured slice)")
    ap.add_argument("--ops", help="a fixed slice: the core OpInfos matching this regular expression")
    ap.add_argument("--dtypes", help="as the probe's (default: the eager probe's dtypes)")
    ap.add_argument("--directions", help="as the probe's (default: forward,backward)")
    ap.add_argument("--tiers", help="as the probe's (default: all)")
    ap.add_argument("--warm", action="store_true", help="keep the machine's Inductor cache (default: an empty one)")
    ap.add_argument("--out", help="keep the probed file here (default: a temporary file)")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        env = _env()
        if not args.warm:
            env["TORCHINDUCTOR_CACHE_DIR"] = os.path.join(tmp, "inductor-cache")
        cmd = _command(args, args.out or os.path.join(tmp, "p.yaml"))
        load0 = os.getloadavg()
        t0 = time.perf_counter()
        cpu0 = _children_cpu()
        proc = subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT, env=env)
        wall = time.perf_counter() - t0
        cpu = _children_cpu() - cpu0
        load1 = os.getloadavg()
        if proc.returncode != 0:
            sys.exit(f"opcov probe --path compile failed: {proc.stderr[-2000:]}")
        progress = re.findall(r"^\[(\d+)/(\d+)\] \S+ \S+: (\S+)", proc.stdout, re.M)
        wrote = re.search(
            r"(\d+) cases in (\d+) groups, (\d+) s this run \((\d+) CPU s in workers on \d+ groups\); "
            r"forward (\d+), backward (\d+), tiers (\d+) cases",
            proc.stdout,
        )
        if not progress or not wrote:
            sys.exit(f"cannot read the probe's output:\n{proc.stdout[-2000:]}")
    groups, cases = int(wrote.group(2)), int(wrote.group(1))
    kinds = {"forward": int(wrote.group(5)), "backward": int(wrote.group(6)), "input tiers": int(wrote.group(7))}
    total = _core_groups(args.dtypes, cmd[0]) if args.ops else int(progress[0][1])
    _report(args, cmd, (groups, total, cases, kinds), (wall, cpu, float(wrote.group(4))), (load0, load1))


def _report(args, cmd: list, counts: tuple, times: tuple, loads: tuple) -> None:
    """Print the figures and rewrite the page's section."""
    groups, total, cases, kinds = counts
    wall, cpu, in_workers = times  # in the workers: compiling the groups; the rest (start, imports, writing) is fixed
    load0, load1 = loads
    whole = groups == total
    rate = wall / groups
    cores = min(args.jobs, os.cpu_count() or 1)
    fixed = max(0.0, cpu - in_workers)
    alone_total = fixed + in_workers / groups * total / cores  # the fixed part counted as if serial
    dtypes, directions, tiers = _depth(args)
    at = cmd.index("--out")
    shown = " ".join(["opcov"] + cmd[3:at] + (cmd[at : at + 2] if args.out else []) + cmd[at + 2 :])
    print(f"ran: {shown}")
    print(f"depth: dtypes {dtypes}; {directions}; input tiers {tiers}")
    print(
        f"{groups} of {total} groups ({cases} cases: "
        + ", ".join(f"{k} {v}" for k, v in kinds.items())
        + f") in {wall:.0f} s, {rate:.1f} s a group; load average {load0[0]:.1f} before, {load1[0]:.1f} after"
    )
    xla = args.backend == "xla"
    what = "probe and workers, XLA compiling in them" if xla else "probe, workers, C++ compiler"
    print(
        f"CPU time {cpu:.0f} s ({what}): {in_workers:.0f} s compiling the groups "
        f"({in_workers / groups:.1f} s a group), {fixed:.0f} s starting and writing"
    )
    if not whole:
        print(f"whole core selection, at this rate: about {rate * total / 60:.0f} min (an estimate)")
    print(f"whole core selection with the machine to itself ({cores} cores): about {alone_total / 60:.0f} min")
    from docs_page import PERFORMANCE, command_line, markdown_table, stamp, write_section

    rows = [
        ["dtypes", dtypes],
        ["samples per OpInfo and dtype (each also laid out transposed)", _samples_words(args.samples)],
        ["directions", directions],
        ["input tiers (one harder case per group and tier, forward)", tiers],
        [
            "OpInfo x dtype groups run",
            f"{groups} of {total}" + ("" if whole else f" (a slice: {'--ops' if args.ops else '--time-limit'})"),
        ],
        ["cases run", f"{cases}: " + ", ".join(f"{k} {v}" for k, v in kinds.items())],
        ["wall clock, launch to exit", f"{wall:.0f} s ({wall / 60:.1f} min)"],
        ["per group", f"{rate:.1f} s"],
        [
            "whole core selection, at the measured load",
            f"{wall / 60:.1f} min" if whole else f"about {rate * total / 60:.0f} min (estimated from the slice)",
        ],
        [
            f"CPU time ({what})",
            f"{cpu:.0f} s: {in_workers:.0f} s compiling the groups ({in_workers / groups:.1f} s a group), "
            f"{fixed:.0f} s starting and writing",
        ],
        [
            f"whole core selection, the machine to itself ({cores} cores)",
            f"about {alone_total / 60:.0f} min (the groups' CPU time"
            + ("" if whole else " at the slice's rate")
            + f" / {cores}, plus the start and writing as if serial)",
        ],
        ["goal", "30 min, --jobs 2"],
    ]
    if xla:
        cache = "no persistent XLA cache (each worker compiles its graphs afresh)"
    else:
        cache = f"Inductor cache {'warm (the machine' + chr(39) + 's)' if args.warm else 'empty (a first run)'}"
    note = (
        ("`PJRT_DEVICE=" + _env()["PJRT_DEVICE"] + " " if xla else "`")
        + f"{shown}`"
        + (f" ({groups} of the {total} core groups)" if args.ops else "")
        + f", {cache}; load average {load0[0]:.1f} before and {load1[0]:.1f} after (the machine is shared)."
        + ("" if whole else " A slice: the whole selection was not run, and its figures are estimates from it.")
    )
    # the versions of the Python that ran the probe (xla: the torch_xla venv's), not this process's
    packages = ("torch", "torch_xla") if xla else ("torch",)
    versions = _versions(cmd[0], packages)
    write_section(
        PERFORMANCE,
        "compile-probe-xla" if xla else "compile-probe",
        markdown_table([f"compile probe, {TITLE[args.backend]}", "value"], rows),
        command_line(),
        note=note,
        stamp_text=stamp(command_line(), packages, versions=versions),
    )


def _samples_words(text: str) -> str:
    """'2', or '2; 10 at float32' (the probe's --samples N,DTYPE=M)."""
    default, *own = text.split(",")
    return "; ".join([default, *(f"{n} at {d}" for d, _, n in (o.partition("=") for o in own))])


TITLE = {"cpu": "cpu Inductor", "xla": "xla openxla (PyTorch/XLA's CPU client)"}


if __name__ == "__main__":
    main()
