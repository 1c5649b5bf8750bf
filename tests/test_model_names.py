"""A misspelt model name is answered at once (opcov.modelnames): no torch, no transformers imported, the
nearest names offered. A transformers model type that is no zoo model still goes on to the trace."""

import subprocess
import sys

from conftest import ROOT, child_env

from opcov import modelnames

PROBE = (
    "import runpy, sys\n"
    "sys.argv = ['opcov', *sys.argv[1:]]\n"
    "try:\n"
    "    runpy.run_module('opcov', run_name='__main__')\n"
    "except SystemExit as e:\n"
    "    print('exit', e.code, 'torch' in sys.modules, 'transformers' in sys.modules, file=sys.stderr)\n"
)


def test_a_misspelt_zoo_name_is_answered_without_importing_torch():
    proc = subprocess.run(
        [sys.executable, "-c", PROBE, "check", "lama", "-b", "tpu"],
        capture_output=True, text=True, env=child_env(), cwd=ROOT, timeout=300,
    )  # fmt: skip
    *said, last = proc.stderr.strip().splitlines()
    assert last == "exit 2 False False", proc.stderr
    assert len(said) == 1 and "did you mean llama" in said[0] and "Traceback" not in said[0], said


def test_what_may_be_traced_is_left_to_the_trace(tmp_path):
    cov = str(tmp_path)  # no zoo here: only transformers' own model types decide
    assert modelnames.unknown("gpt-sw3", cov) is None and modelnames.unknown("llama", cov) is None
    assert modelnames.unknown("xlm_roberta", cov) is None  # the folder spelling of xlm-roberta
    for name in ("nn:lstm", "my_models:build", "x.yaml", "cfg/config.json"):
        assert modelnames.unknown(name, cov) is None
    assert "did you mean llama" in modelnames.unknown("lama", cov)


def test_without_transformers_a_near_zoo_name_is_still_offered(monkeypatch):
    """The torch-free install: no transformers to read, but the zoo is there to compare with."""
    monkeypatch.setattr(modelnames, "model_types", lambda: None)
    said = modelnames.unknown("lama", f"{ROOT}/coverage")
    assert "did you mean llama" in said and "pip install" in said
    assert modelnames.unknown("zzzzqqq", f"{ROOT}/coverage") is None  # nothing near: the trace's own words
