"""The real TorchTPU wheel, scanned without a TPU: paths, fallback state, no device start."""

import importlib.util

import pytest
from conftest import load_yaml, run_scan

pytestmark = pytest.mark.skipif(
    importlib.util.find_spec("torch_tpu") is None, reason="torch-tpu not installed (scripts/setup.sh installs it)"
)


@pytest.fixture(scope="module")
def tpu(tmp_path_factory, reach_cache):
    out = tmp_path_factory.mktemp("tpu") / "tpu.yaml"
    # no reach recorded: these tests read tpu's own registrations (test_scan_paths records a reach)
    proc = run_scan((), "tpu", "--out", str(out), XDG_CACHE_HOME=reach_cache)
    assert proc.returncode == 0, proc.stderr[-2000:]  # an aborted device start would fail here
    return load_yaml(out), proc


def test_backend_and_settings_recorded(tpu):
    doc, _ = tpu
    assert doc["backend"]["name"] == "tpu" and doc["backend"]["dispatch_key"] == "PrivateUse1"
    assert doc["backend"]["version"] == "0.2.0"
    settings = doc["provenance"]["settings"]
    assert settings["cpu_fallback_enabled"] is False
    assert {"eager_mode", "tpu_matmul_precision"} <= set(settings)
    assert doc["provenance"]["fallback"] == {
        "present": True,
        "kind": "cpu",
        "enabled": False,
        "source": doc["provenance"]["fallback"]["source"],
    }


def test_paths_on_tpu(tpu):
    ops = tpu[0]["ops"]
    assert ops["aten::add.Tensor"]["fwd"] == "out_variant" and ops["aten::add.Tensor"]["res"] == "registered"
    assert ops["aten::_fused_sdp_choice"]["fwd"] == "fallback"
    assert ops["aten::_amp_foreach_non_finite_check_and_unscale_"]["res"] == "fallback"
    assert ops["aten::linear"]["fwd"] == "kernel" and ops["aten::linear"]["bwd"] == "backend_kernel"
    assert any(n.startswith("tpu::") for n in ops)


def test_generic_registration_is_flagged(tpu):
    doc, proc = tpu
    kernels = sum(r["fwd"] == "kernel" for n, r in doc["ops"].items() if n.startswith("aten::"))
    assert 600 < kernels < 800
    assert any("one registration site" in n for n in doc["provenance"]["notes"])
    assert "DISABLED" in proc.stdout
