"""Never two backends in one process, and the coverage folder checked before any work.

``opcov check`` on a model it must trace, against an installed PrivateUse1 backend with no data,
used to trace in-process (claiming PrivateUse1 for the stand-in accelerator) and then import
torch_tpu into the same process: a C++ abort (exit 134). Both now run in child processes.
"""

import os
import shutil

import pytest
from conftest import ROOT, load_yaml, run_opcov


def _has_torch_tpu():
    import importlib.util

    return importlib.util.find_spec("torch_tpu") is not None


def _cache_with_no_reach(folder) -> str:
    """An opcov cache folder whose reach recording holds every op, each 'not recorded': a scan using it
    records no composite's reach (every op's: minutes of CPU; test_scan_paths records some for real).
    The ops are this torch's and those of tpu's committed registered file (torch_tpu's own)."""
    import json

    import torch

    from opcov.catalog import import_catalog_modules
    from opcov.scan import reach

    import_catalog_modules()
    names = set(torch._C._dispatch_get_all_op_names())
    tpu = os.path.join(ROOT, "coverage", "tpu", "registered-torch-2.13.0+cpu-torch_tpu-0.2.0.yaml")
    names |= set(load_yaml(tpu)["ops"])
    entry = [{"ops": None, "error": "not recorded (a test's cache)", "source": None}, None]
    os.makedirs(os.path.join(folder, "opcov"))
    with open(os.path.join(folder, "opcov", reach.cache_name(str(torch.__version__))), "w") as f:
        json.dump(dict.fromkeys(sorted(names), entry), f)
    return str(folder)


@pytest.mark.skipif(not _has_torch_tpu(), reason="torch_tpu is not installed")
def test_check_traces_and_live_scans_in_child_processes(tmp_path):
    cov = tmp_path / "cov"
    shutil.copytree(os.path.join(ROOT, "coverage", "cpu"), cov / "cpu")  # data, but none for tpu
    cache = _cache_with_no_reach(tmp_path / "cache")
    r = run_opcov("check", "nn:lstm", "-b", "tpu", "--mode", "inference", "--coverage", str(cov), XDG_CACHE_HOME=cache)
    assert r.returncode in (0, 1), r.stderr[-2000:]
    assert "live registered scan of tpu" in r.stdout
    assert "nn-lstm" in r.stdout or "lstm" in r.stdout


@pytest.mark.parametrize("make", ["missing", "empty", "file"])
def test_bad_coverage_folder_is_one_line_before_any_tracing(tmp_path, make):
    path = tmp_path / "cov"
    if make == "empty":
        path.mkdir()
    elif make == "file":
        path.write_text("not a folder\n")
    # nn:lstm is not saved anywhere: if the folder were not checked first, this would trace.
    r = run_opcov("check", "nn:lstm", "-b", "tpu", "--coverage", str(path), timeout=60)
    assert r.returncode == 2
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and str(path) in lines[0], r.stderr


def test_outside_the_repo_check_uses_the_bundled_data_and_says_so(tmp_path):
    import subprocess
    import sys

    from conftest import child_env

    r = subprocess.run(
        [sys.executable, "-m", "opcov", "check", "llama", "-b", "tpu", "--mode", "inference", "--format", "json"],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        env=child_env(),
        timeout=120,
    )
    assert r.returncode in (0, 1), r.stderr
    assert "bundled coverage data" in r.stderr
    assert '"backend": "tpu"' in r.stdout
    assert list(tmp_path.iterdir()) == []
