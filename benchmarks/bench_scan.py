"""Scan speed: where the time of a registered scan goes, and `opcov backends` wall time.

Usage: python benchmarks/bench_scan.py [BACKEND]   (default tpu; needs torch-tpu installed)
Prints figures and rewrites the 'scan' section of docs/performance.md; asserts nothing. Goals: full
tpu scan <= 3 s after import torch, `opcov backends` <= 0.3 s wall.
"""

import os
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "src"))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
os.environ["TORCH_DEVICE_BACKEND_AUTOLOAD"] = "0"
from docs_page import PERFORMANCE, command_line, markdown_table, write_section  # noqa: E402


def wall(cmd, n=5):
    best = float("inf")
    for _ in range(n):
        t = time.perf_counter()
        subprocess.run(cmd, capture_output=True, env=dict(os.environ, PYTHONPATH=os.path.join(ROOT, "src")))
        best = min(best, time.perf_counter() - t)
    return best


def main():
    name = sys.argv[1] if len(sys.argv) > 1 else "tpu"
    backends_s = wall([sys.executable, "-m", "opcov", "backends"])
    print(f"opcov backends wall (best of 5): {backends_s:.3f} s")
    t0 = time.perf_counter()
    import torch  # noqa: F401  (timed: the import alone)

    t1 = time.perf_counter()
    from opcov import backends
    from opcov.catalog import build_catalog
    from opcov.scan import registered

    backend = backends.get_backend(name)
    torch = backends.load(backend)  # noqa: F811 - the loaded module, backend imported
    t2 = time.perf_counter()
    catalog = build_catalog((backend.module,) if backend.module else (), backends.added_ops(backend))
    t3 = time.perf_counter()
    registered.scan(backend, torch, catalog=catalog)  # fills the reach cache if it is cold
    t4 = time.perf_counter()
    registered.scan(backend, torch, catalog=catalog)
    t5 = time.perf_counter()
    print(f"import torch:                  {t1 - t0:.2f} s")
    print(f"import backend {name!r}:         {t2 - t1:.2f} s")
    print(f"catalogue ({len(catalog)} ops):        {t3 - t2:.2f} s")
    print(f"scan, warm reach cache:        {t5 - t4:.2f} s")
    print(f"after import torch and the backend, warm: {(t3 - t2) + (t5 - t4):.2f} s (catalogue + scan; goal 3 s)")
    print(f"after import torch, warm:      {(t3 - t1) + (t5 - t4):.2f} s (backend import + catalogue + scan)")
    with tempfile.TemporaryDirectory() as cache:
        t = time.perf_counter()
        proc = subprocess.run(
            [sys.executable, "-m", "opcov", "scan", name, "--out", os.path.join(cache, "x.yaml")],
            capture_output=True,
            env=dict(os.environ, XDG_CACHE_HOME=cache, PYTHONPATH=os.path.join(ROOT, "src")),
        )
        cold = time.perf_counter() - t
    print(
        f"opcov scan {name}, cold caches, whole command wall: {cold:.2f} s (rc {proc.returncode}; "
        "records the catalogue and composite reach once per torch version)"
    )
    rows = [
        ["`opcov backends`, wall (best of 5)", f"{backends_s:.3f} s", "0.3 s"],
        ["`import torch`", f"{t1 - t0:.2f} s", ""],
        [f"importing the backend's module ({name})", f"{t2 - t1:.2f} s", ""],
        [f"catalogue ({len(catalog)} ops)", f"{t3 - t2:.2f} s", ""],
        ["scan, warm reach cache", f"{t5 - t4:.2f} s", ""],
        ["catalogue + scan after importing torch and the backend", f"{(t3 - t2) + (t5 - t4):.2f} s", "3 s"],
        [f"`opcov scan {name}` with cold caches, whole command", f"{cold:.2f} s (exit {proc.returncode})", ""],
    ]
    pkgs = ("torch",) + ((backend.package,) if backend.package else ())
    write_section(PERFORMANCE, "scan", markdown_table(["step", "time", "goal"], rows), command_line(), packages=pkgs)


if __name__ == "__main__":
    main()
