"""The compile probe (opcov.probe.compiled): OpInfo samples compiled with Inductor against eager CPU."""

from opcov.probe import compiled
from opcov.store import data


def test_cells_take_the_worst_case_and_graph_breaks_are_fallbacks():
    done = {
        ("add", "float32"): {
            "group": "add",
            "dtype": "float32",
            "cases": [
                {"i": 0, "status": "pass", "ops": [["aten::add.Tensor", "float32"]]},
                {"i": 1, "status": "mismatch", "why": "values differ", "ops": [["aten::add.Tensor", "float32"]]},
            ],
        },
        ("item", "float32"): {
            "group": "item",
            "dtype": "float32",
            "cases": [{"i": 0, "status": "fallback", "why": "graph break: ...", "ops": [["aten::item", "float32"]]}],
        },
    }
    doc = compiled._document(
        done, {"name": "cpu", "device_type": "cpu"}, "opcov probe cpu --path compile", 2, 0, "2.13.0+cpu"
    )
    add = doc["ops"]["aten::add.Tensor"]["float32"]
    assert add["fwd"] == "mismatch" and add["cases"] == 2 and add["fails"] == 1 and add["case"] == "add|float32|1"
    assert doc["ops"]["aten::item"]["float32"]["fwd"] == "fallback"
    assert not data.validate(doc, "probed.yaml")  # a probed snapshot check reads as it reads the eager ones


def test_a_real_opinfo_compiles_and_matches_eager():
    rec = compiled.run_group(("mul", "float32", 1, 300))
    (case,) = rec["cases"]
    assert case["status"] in ("pass", "pass_low_precision"), case
    assert ["aten::mul.Tensor", "float32"] in [list(o) for o in case["ops"]]


def test_a_worker_pays_inductors_start_before_its_first_case_and_compiles_in_process(tmp_path):
    """Run as a probe worker is (a fresh process): after the worker's start, Inductor is imported and has
    compiled once, so a first sample's limit covers its own compile only, and no compile subprocess pool."""
    import json
    import os
    import subprocess
    import sys

    code = (
        "import sys, json, time; from opcov.probe import compiled; compiled._worker_init(); "
        "import torch; from torch._inductor import config; warmed = 'torch._inductor.codecache' in sys.modules; "
        "t = time.time(); rec = compiled.run_group(('mul', 'float32', 1, 300)); "
        "print(json.dumps([config.compile_threads, warmed, rec['cases'][0]['status'], time.time() - t]))"
    )
    env = {k: v for k, v in os.environ.items() if k != "TORCHINDUCTOR_COMPILE_THREADS"}
    env["TORCHINDUCTOR_CACHE_DIR"] = str(tmp_path / "cache")  # cold: nothing compiled on this machine before
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=600, env=env)
    assert proc.returncode == 0, proc.stderr[-2000:]
    threads, warmed, status, _ = json.loads(proc.stdout.strip().splitlines()[-1])
    assert threads == 1 and warmed and status in ("pass", "pass_low_precision")


def test_groups_compiled_together_file_a_graph_break_under_its_own_sample_only():
    """Several groups are compiled as one graph (one C++ build); item's graph break fails that graph, which
    is split until item is compiled alone: mul still passes, and item alone is the fallback."""
    spent, recs = compiled._timed_batch(([("mul", "float32"), ("item", "float32")], 1, 300))
    assert spent > 0  # the CPU seconds the benchmark extrapolates per group (the C++ build's included)
    assert [r["group"] for r in recs] == ["mul", "item"]
    (mul,), (item,) = (r["cases"] for r in recs)
    assert mul["status"] in ("pass", "pass_low_precision"), mul
    assert item["status"] == "fallback" and item["why"].startswith("graph break"), item
    assert not {"ref", "_run", "mode"} & (set(mul) | set(item))  # journal records hold JSON only


def test_the_probed_file_says_groups_were_compiled_together():
    done = {("add", "float32"): {"group": "add", "dtype": "float32", "cases": []}}
    doc = compiled._document(done, {"name": "cpu", "device_type": "cpu"}, "c", 2, 0, "2.13.0+cpu", together=8)
    assert any("up to 8 OpInfo x dtype groups are compiled as one graph" in n for n in doc["provenance"]["notes"])
