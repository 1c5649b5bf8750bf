"""How scripts/nn_accuracy.py scores a verdict against a real PyTorch/XLA run (docs/accuracy.md): a fallback
verdict agrees only when it names exactly the ops whose kernels the backend's counters saw fall back; a fallback
found on an op's backward is its backward kernel's, named by that kernel's own row, not by the forward op."""

import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "scripts"))

import nn_accuracy  # noqa: E402


def _op(op, **dirs):
    return {"op": op, "outcome": "fallback", "findings": [{"direction": d, "outcome": o} for d, o in dirs.items()]}


def test_a_backward_fallback_is_named_by_the_backward_kernel_not_the_forward_op():
    verdict = {
        "ops": [
            _op("aten::upsample_nearest2d", forward="ok", backward="fallback"),
            _op("aten::upsample_nearest2d_backward", forward="fallback"),
        ]
    }
    named = nn_accuracy.fallback_named(verdict)
    assert named == ["aten::upsample_nearest2d_backward"]
    real = {"actual": "fallback", "fallback": ["aten::upsample_nearest2d_backward"]}
    assert nn_accuracy.classify("runs_with_fallback", real, named) == (True, "agree")


def test_a_fallback_verdict_naming_other_ops_does_not_agree():
    verdict = {"ops": [_op("aten::_ctc_loss.Tensor", forward="fallback", backward="fallback")]}
    named = nn_accuracy.fallback_named(verdict)
    assert named == ["aten::_ctc_loss.Tensor"]
    real = {"actual": "fallback", "fallback": ["aten::_ctc_loss_backward.Tensor"]}
    assert nn_accuracy.classify("runs_with_fallback", real, named) == (False, "right verdict, wrong ops")
    assert nn_accuracy.classify("runs", real, [])[0] is False


def test_each_device_and_mode_of_the_real_run_script_writes_its_own_section(tmp_path):
    """scripts/envs/xla_reality.py --device cpu --modes serve writes a section of its own into the accuracy page,
    judged -b cpu, and leaves the xla sections as they were; a second run replaces only its own."""
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "scripts", "envs"))
    import xla_reality

    page = tmp_path / "accuracy.md"
    xla_begin, xla_end = xla_reality.markers("xla", True)
    page.write_text(f"# Accuracy\n\n{xla_begin}\nxla serve rows\n{xla_end}\n\nafter\n")
    real = {"actual": "raised", "detail": "RuntimeError: boom", "fallback": []}
    rows = [{"model": "llama", "mode": "serve", "verdict": "runs", "real": real, "agree": False}]
    for verdict in ("runs", "fails"):
        rows[0].update(verdict=verdict, agree=xla_reality.agrees(verdict, real))
        text = xla_reality.section(rows, "cmd", 1.0, serve=True, device="cpu")
        xla_reality.write_docs(str(page), text, *xla_reality.markers("cpu", True))
    got = page.read_text()
    assert "xla serve rows" in got and "after" in got
    cpu_begin, cpu_end = xla_reality.markers("cpu", True)
    assert got.count(cpu_begin) == 1 and got.count(cpu_end) == 1 and cpu_begin != xla_begin
    section = got.split(cpu_begin, 1)[1].split(cpu_end, 1)[0]
    assert "## CPU: serve verdicts" in section and "-b cpu" in section and "-b xla" not in section
    assert "| llama | serve | fails |" in section and "Agree: 1 of 1" in section
