"""What a new user meets first: an installed 'opcov' command in a folder of their own, a missing extra,
a capped op list, readable one-liners. Each of these tripped a first try."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
from conftest import ROOT, child_env, opcov_here

from opcov import torchenv
from opcov.errors import UsageError
from opcov.verdict import gaps, judge


def test_a_factory_module_in_the_current_folder_imports(tmp_path):
    """'opcov trace factory:mymodels:make' from the folder holding mymodels.py works without PYTHONPATH, as
    'python -m' would: the installed console script (a file elsewhere, like this runner) does not put the
    current folder on sys.path by itself."""
    pytest.importorskip("torch")
    (tmp_path / "mymodels.py").write_text(
        "import torch\n\ndef make():\n    return torch.nn.Linear(4, 2), (torch.randn(3, 4),)\n", encoding="utf-8"
    )
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    entry = bin_dir / "opcov"
    entry.write_text("import sys\nfrom opcov.cli import main\nsys.exit(main())\n", encoding="utf-8")
    r = subprocess.run(
        [sys.executable, str(entry), "trace", "factory:mymodels:make", "--out", "linear.yaml"],
        capture_output=True,
        text=True,
        env=child_env(),
        cwd=tmp_path,
        timeout=600,
    )
    assert r.returncode == 0, r.stderr
    assert (tmp_path / "linear.yaml").exists()


def test_a_missing_torch_names_one_whole_command_with_torch_pinned(monkeypatch):
    monkeypatch.setitem(sys.modules, "torch", None)  # import torch -> ModuleNotFoundError
    with pytest.raises(UsageError) as e:
        torchenv.import_torch()
    assert f"pip install 'opcov[trace]' torch=={torchenv.DATA_TORCH}" in str(e.value)


def test_the_pinned_torch_is_the_bundled_datas():
    names = os.listdir(os.path.join(ROOT, "coverage", "cpu"))
    assert f"registered-torch-{torchenv.DATA_TORCH}+cpu.yaml" in names, names


def test_backends_points_to_commands_a_wheel_user_can_run():
    r = opcov_here("backends")
    assert r.returncode == 0, r.stderr
    assert "scripts/" not in r.stdout and ".envs/" not in r.stdout, r.stdout
    assert "pip install opcov torch==2.13.0" in " ".join(r.stdout.split())


def test_ops_limit_caps_the_list_without_a_backend():
    pytest.importorskip("torch")
    r = opcov_here("ops", "add", "--limit", "3")
    assert r.returncode == 0, r.stderr
    rows = [line for line in r.stdout.splitlines() if line.startswith("aten::")]
    assert len(rows) == 3, r.stdout
    assert rows[0].split()[0] == "aten::add.Tensor"  # best first, so the cap keeps the best
    assert "more op(s) not shown (--limit 0 for all)" in r.stderr


def test_gaps_says_1_call():
    ranked = [
        {"op": "aten::x", "outcome": "fails", "model_count": 1, "calls": 1, "why": ["no kernel"], "models": ["m"]}
    ]
    text = gaps.render(ranked, "tpu", 10)
    assert "(1 call)" in text and "(1 calls)" not in text


def test_a_verdict_prints_as_one_line():
    v = judge.BackendVerdict(
        "tpu",
        "training",
        "runs",
        "registered",
        [judge.OpResult(f"aten::op{i}") for i in range(3000)],
        ["coverage/tpu/x.yaml"],
        [],
    )
    text = repr(v)
    assert len(text) < 300 and "3000 ops" in text and "'runs'" in text, text
