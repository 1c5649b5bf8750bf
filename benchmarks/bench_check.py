"""`opcov check` on a saved op set and `opcov compare` over the zoo: wall time beside `python -c "import torch"`
(the gate must not pay for torch).

Usage: python benchmarks/bench_check.py [OPSET] [--no-compare]   (default: llama's op sets by name, and the
largest op set under coverage/models/, else a synthetic one of 200 aten ops). Each command is timed with
Python's bytecode cached, as an installed opcov runs (a warm-up run writes it into a temporary
PYTHONPYCACHEPREFIX, never into the tree), and with none written (PYTHONDONTWRITEBYTECODE=1: in a source
tree without __pycache__, each of opcov's modules compiled on every run). compare is timed as a run after
an earlier one (the judgments it keeps in the user's cache folder are there) and as a first run (an empty
cache folder each time), and gaps likewise; check on llama likewise (the data files it keeps parsed in the
cache folder, opcov.store.parsed, are there or not). A first gaps or compare reads the answers committed
with the data (coverage/answers/, opcov.store.answers) where they are fresh for the tree measured: the
'answers' line under the table says whether they were. Prints figures, CPU time of the command and its
children too, and rewrites the 'check' section of docs/performance.md; asserts nothing of the figures (only
that the torch-free set-up finds no torch). Goals (issue 44, CPU seconds): check on a zoo model <= 0.3 s, a
first compare and gaps <= 2 s; compare <= 3 s wall after an earlier run; a misspelt model name's "did you
mean" <= 0.3 s CPU, with torch installed and without (the base wheel: a Python started with -S whose path
holds every installed package but torch and transformers).
"""

import os
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "src"))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from docs_page import PERFORMANCE, command_line, markdown_table, write_section  # noqa: E402

ENV = dict(os.environ, PYTHONPATH=os.path.join(ROOT, "src"), TORCH_DEVICE_BACKEND_AUTOLOAD="0")
ENV.pop("PYTHONDONTWRITEBYTECODE", None)
CACHED = dict(ENV, PYTHONPYCACHEPREFIX=tempfile.mkdtemp(prefix="opcov-bench-pyc-"))
UNCACHED = dict(ENV, PYTHONDONTWRITEBYTECODE="1")  # the standard library's bytecode is still read
UNCACHED.pop("PYTHONPYCACHEPREFIX", None)


def wall(cmd, n=7, env=None, kept=True):
    """(best, median) wall seconds of ``n`` runs of ``cmd``, and the median CPU seconds (user + system,
    the command's children included). Each measurement has a cache folder of its own (XDG_CACHE_HOME):
    with ``kept`` the runs share it (a run after the first finds what an earlier one kept: compare's
    judgments), without, each run starts from an empty one (a first run)."""
    env = dict(CACHED if env is None else env, XDG_CACHE_HOME=tempfile.mkdtemp(prefix="opcov-bench-cache-"))
    if env.get("PYTHONPYCACHEPREFIX") or kept:
        subprocess.run(cmd, capture_output=True, env=env, cwd=ROOT)  # writes the bytecode (and the cache)
    times, cpus = [], []
    for _ in range(n):
        if not kept:
            env["XDG_CACHE_HOME"] = tempfile.mkdtemp(prefix="opcov-bench-cache-")
        before = os.times()
        t = time.perf_counter()
        subprocess.run(cmd, capture_output=True, env=env, cwd=ROOT)
        times.append(time.perf_counter() - t)
        after = os.times()
        cpus.append(after.children_user - before.children_user + after.children_system - before.children_system)
    return min(times), sorted(times)[n // 2], sorted(cpus)[n // 2]


NO_TORCH = ("torch", "functorch", "torchgen", "transformers", "torch_tpu", "libtpu")  # what the base wheel lacks


def torch_free_env(env: dict) -> dict:
    """``env`` for a Python that finds no torch, as the base wheel's install (pip install opcov) has: run with
    -S (no site-packages), PYTHONPATH this tree's src and a folder of links to every site-packages entry but
    torch's and transformers' (PyYAML stays). ``import torch`` fails there as where it is not installed."""
    import site

    farm = tempfile.mkdtemp(prefix="opcov-bench-notorch-")
    for packages in site.getsitepackages():
        for name in os.listdir(packages):
            stem = name.split("-", 1)[0].split(".", 1)[0].lower()
            if stem not in NO_TORCH and not os.path.exists(os.path.join(farm, name)):
                os.symlink(os.path.join(packages, name), os.path.join(farm, name))
    return dict(env, PYTHONPATH=os.pathsep.join([os.path.join(ROOT, "src"), farm]))


def check_torch_free(env: dict) -> None:
    """Fails loudly where the torch-free set-up still finds torch, or the typo gets no suggestion there."""
    probe = subprocess.run([sys.executable, "-S", "-c", "import torch"], capture_output=True, env=env)
    assert probe.returncode != 0, "torch imports in the torch-free set-up"
    proc = subprocess.run(
        [sys.executable, "-S", "-m", "opcov", "check", "lama", "-b", "tpu"], capture_output=True, text=True, env=env
    )
    assert proc.returncode == 2 and "did you mean llama" in proc.stderr, proc.stderr


def answers_line() -> str:
    """Whether the committed answers were fresh for the tree measured (a first gaps/compare reads them)."""
    from opcov.store import answers
    from opcov.verdict.kept import backends_key

    cov, key = os.path.join(ROOT, "coverage"), backends_key()
    names = ("gaps-tpu", "compare-" + "-".join(sorted(("tpu", "cuda"))))
    state = ", ".join(f"{n} {'fresh' if answers.fresh(cov, n, key) else 'stale or missing'}" for n in names)
    return f"Committed answers (coverage/answers/) when measured: {state}."


def synthetic(path):
    from opcov.store import data, opset

    doc = data.load(os.path.join(ROOT, "coverage", "tpu", "registered-torch-2.13.0+cpu-torch_tpu-0.2.0.yaml"))
    names = sorted(n for n in doc["ops"] if n.startswith("aten::"))[::15][:200]
    ops = {
        n: {"forward": {"bfloat16": {"calls": 3, "grad": True}}, "backward": {"bfloat16": {"calls": 2}}} for n in names
    }
    opset.save(
        {
            "schema_version": 1,
            "kind": "opset",
            "model": {"name": "synthetic"},
            "mode": "training",
            "dtype": "bfloat16",
            "provenance": {
                "torch": doc["provenance"]["torch"],
                "opcov": "bench",
                "created": "bench",
                "command": "bench_check.py",
            },
            "ops": ops,
        },
        path,
    )
    return path


def main():
    from opcov.store.layout import model_files

    args = [a for a in sys.argv[1:] if a != "--no-compare"]
    if args:
        path = args[0]
    else:
        files = model_files(os.path.join(ROOT, "coverage"))
        path = max(files, key=os.path.getsize) if files else synthetic(os.path.join(tempfile.mkdtemp(), "s.yaml"))
    from opcov.store import opset

    n_ops = len(opset.load(path)["ops"])
    rel = os.path.relpath(path, ROOT)
    runs = []  # (shown command, argv, runs, goal, kept between runs)
    if not args and os.path.isdir(os.path.join(ROOT, "coverage", "models", "llama")):
        llama = ["check", "llama", "-b", "tpu"]
        runs.append(("`opcov check llama -b tpu` (both modes)", llama, 7, "0.3 s CPU", True))
        runs.append(("`opcov check llama -b tpu` (both modes), first run (nothing kept)", llama, 7, "", False))
        typo = ["check", "lama", "-b", "tpu"]  # exit 2 with "did you mean 'llama'", torch never imported
        runs.append(("`opcov check lama -b tpu` (a misspelt model: did you mean)", typo, 7, "0.3 s CPU", True))
    for backends in (["tpu"], ["tpu", "cpu", "meta"]):
        flags = [a for b in backends for a in ("-b", b)]
        shown = f"`opcov check {rel} {' '.join(flags)}` ({n_ops} ops)"
        runs.append((shown, ["check", path, *flags], 7, "0.3 s", True))
    if "--no-compare" not in sys.argv and not args:
        cmp = ["compare", "tpu", "cuda"]
        runs.append(("`opcov compare tpu cuda` (the zoo), judgments kept by an earlier run", cmp, 3, "3 s", True))
        runs.append(("`opcov compare tpu cuda` (the zoo), first run (nothing kept)", cmp, 3, "2 s CPU", False))
        runs.append(("`opcov gaps tpu` (the zoo), answers kept by an earlier run", ["gaps", "tpu"], 3, "", True))
        runs.append(("`opcov gaps tpu` (the zoo), first run (nothing kept)", ["gaps", "tpu"], 3, "2 s CPU", False))
    rows = []
    for shown, argv, n, goal, kept in runs:
        for label, env in (("bytecode cached", CACHED), ("no bytecode", UNCACHED)):
            best, med, cpu = wall([sys.executable, "-m", "opcov", *argv], n, env, kept)
            print(f"opcov {' '.join(argv)} [{label}]: best {best:.3f} s, median {med:.3f} s wall; CPU {cpu:.3f} s")
            rows.append([f"{shown}, {label}", f"{med:.3f} s", f"{best:.3f} s", f"{cpu:.3f} s", goal])
            if argv[1] == "lama":  # the same where torch is not installed (the base wheel): no torch to find
                free = torch_free_env(env)
                check_torch_free(free)
                best, med, cpu = wall([sys.executable, "-S", "-m", "opcov", *argv], n, free, kept)
                print(f"  without torch [{label}]: best {best:.3f} s, median {med:.3f} s wall; CPU {cpu:.3f} s")
                shown_free = "`opcov check lama -b tpu` where torch is not installed"
                rows.append([f"{shown_free}, {label}", f"{med:.3f} s", f"{best:.3f} s", f"{cpu:.3f} s", goal])
    torch_best, torch_med, torch_cpu = wall([sys.executable, "-c", "import torch"])
    print(f"python -c 'import torch': best {torch_best:.3f} s, median {torch_med:.3f} s")
    rows.append(
        ["`python -c 'import torch'`, for scale", f"{torch_med:.3f} s", f"{torch_best:.3f} s", f"{torch_cpu:.3f} s", ""]
    )
    best, med, cpu = wall([sys.executable, "-c", "pass"])
    print(f"python startup: best {best:.3f} s")
    rows.append(["`python -c pass`, for scale", f"{med:.3f} s", f"{best:.3f} s", f"{cpu:.3f} s", ""])
    table = markdown_table(["wall time (runs: 7, compare 3)", "median", "best", "CPU, median", "goal"], rows)
    compiled = not os.path.isdir(os.path.join(ROOT, "src", "opcov", "__pycache__"))
    note = (
        "'bytecode cached': as an installed opcov runs (pip compiles its modules); 'no bytecode': a source "
        "tree run with PYTHONDONTWRITEBYTECODE=1"
        + (", where Python compiled each of opcov's modules (~300 KB) on every run" if compiled else "")
        + ". CPU counts the command's forked children: `compare` judges the zoo in two processes where a "
        "core is idle. `compare` keeps each op set's judgment in the user's cache folder while the op set, "
        "the other files under coverage/ and opcov's code are unchanged. `gaps` keeps what each op set "
        "contributes the same way. A first run of either reads the answers committed with the data "
        "(coverage/answers/) where they are fresh (the same bytes of every data file and opcov module they "
        "rest on), else judges every op set. `check` keeps each data file it reads parsed in the user's cache folder; its first run "
        "parses them. Goals marked CPU are CPU seconds; the others, wall.\n\n" + answers_line()
    )
    write_section(PERFORMANCE, "check", table, command_line(), note=note)


if __name__ == "__main__":
    main()
