"""`opcov check` on a saved op set: wall time beside `python -c "import torch"` (the gate must not pay for torch).

Usage: python benchmarks/bench_check.py [OPSET]   (default: the largest op set under coverage/models/,
else a synthetic one of 200 aten ops). Prints figures and rewrites the 'check' section of
docs/performance.md; asserts nothing. Goal: <= 0.3 s wall.
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


def wall(cmd, n=7):
    times = []
    for _ in range(n):
        t = time.perf_counter()
        subprocess.run(cmd, capture_output=True, env=ENV, cwd=ROOT)
        times.append(time.perf_counter() - t)
    return min(times), sorted(times)[n // 2]


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

    if len(sys.argv) > 1:
        path = sys.argv[1]
    else:
        files = model_files(os.path.join(ROOT, "coverage"))
        path = max(files, key=os.path.getsize) if files else synthetic(os.path.join(tempfile.mkdtemp(), "s.yaml"))
    from opcov.store import opset

    n_ops = len(opset.load(path)["ops"])
    torch_best, torch_med = wall([sys.executable, "-c", "import torch"])
    rows = []
    for backends in (["tpu"], ["tpu", "cpu", "meta"]):
        args = [a for b in backends for a in ("-b", b)]
        best, med = wall([sys.executable, "-m", "opcov", "check", path, *args])
        print(
            f"opcov check {os.path.relpath(path, ROOT)} ({n_ops} ops) on {', '.join(backends)}: "
            f"best {best:.3f} s, median {med:.3f} s; ratio to import torch {best / torch_best:.2f}"
        )
        shown = f"`opcov check {os.path.relpath(path, ROOT)} {' '.join(args)}` ({n_ops} ops)"
        rows.append([shown, f"{med:.3f} s", f"{best:.3f} s", "0.3 s"])
    print(f"python -c 'import torch': best {torch_best:.3f} s, median {torch_med:.3f} s")
    rows.append(["`python -c 'import torch'`, for scale", f"{torch_med:.3f} s", f"{torch_best:.3f} s", ""])
    best, med = wall([sys.executable, "-c", "pass"])
    print(f"python startup: best {best:.3f} s")
    rows.append(["`python -c pass`, for scale", f"{med:.3f} s", f"{best:.3f} s", ""])
    table = markdown_table(["wall time, 7 runs", "median", "best", "goal"], rows)
    write_section(PERFORMANCE, "check", table, command_line())


if __name__ == "__main__":
    main()
