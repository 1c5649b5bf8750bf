"""The compile verdict takes the model's own calls replayed on the device where the compile backend runs its
graphs' nodes through the device's eager kernels (openxla), and not where it generates its own code (Inductor):
opcov.verdict.replayed.

A plain torch.nn model of another family than the transformers decoders that showed it (mistral and gemma2's
sliding-window KV cache): a rolling window over a stream of frames, which keeps its last ``window - 1`` frames
as such a cache keeps its last keys. With a window longer than the stream, its slice starts before ``-size``
(class ``bounds=under``): PyTorch/XLA raises on that slice eagerly and under openxla alike, CPU clamps it.
"""

import json
import os
import shutil
import textwrap

import pytest
from conftest import load_yaml, opcov_here, run_opcov_batch

from opcov.store import data, layout, opset
from opcov.verdict import compiled, replayed

torch = pytest.importorskip("torch")
BUNDLED = layout.DEFAULT_COVERAGE
MODULE = "rollmodels"
FACTORIES = textwrap.dedent(
    """
    import torch
    from torch import nn

    class Rolling(nn.Module):
        # Keeps the last window - 1 frames of the stream (its memory, then the new frames), then pools them.

        def __init__(self, window):
            super().__init__()
            self.window = window
            self.proj = nn.Linear(4, 4)
            self.register_buffer("memory", torch.zeros(2, 3, 4))

        def forward(self, x):
            kept = torch.cat([self.memory, x], 1)[:, -self.window + 1 :]
            return self.proj(kept.mean(1))

    def short_stream():
        torch.manual_seed(0)
        return Rolling(64), (torch.randn(2, 5, 4),)

    def long_stream():
        torch.manual_seed(0)
        return Rolling(4), (torch.randn(2, 5, 4),)
    """
)
NAMES = ("short_stream", "long_stream")
SLICE, MEAN = "aten::slice.Tensor", "aten::mean.dim"


@pytest.fixture(scope="module")
def zoo(tmp_path_factory):
    """A coverage folder with the two models' eager and compiled (openxla, inductor) inference op sets, traced
    by the real tracer, and the bundled xla and cpu data."""
    root = tmp_path_factory.mktemp("replayed")
    (root / f"{MODULE}.py").write_text(FACTORIES)
    cov = root / "coverage"
    commands = []
    for name in NAMES:
        folder = cov / "models" / f"{MODULE}.{name}"
        commands.append(("trace", f"{MODULE}:{name}", "--mode", "inference", "--out", folder / "inference.yaml"))
        for cb in ("openxla", "inductor"):
            out = folder / "compile" / f"{cb}-inference.yaml"
            commands.append(
                (
                    "trace",
                    f"{MODULE}:{name}",
                    "--mode",
                    "inference",
                    "--path",
                    "compile",
                    "--compile-backend",
                    cb,
                    "--out",
                    out,
                )
            )
    for r in run_opcov_batch(commands, PYTHONPATH=str(root), OPCOV_TRACE_ISOLATED="1"):
        assert r.returncode == 0, r.stdout + r.stderr
    for backend in ("xla", "cpu"):
        for sub in ("", "compile"):
            (cov / backend / sub).mkdir(parents=True, exist_ok=True)
            for f in os.listdir(os.path.join(BUNDLED, backend, sub)):
                if f.endswith(".yaml"):
                    shutil.copy(os.path.join(BUNDLED, backend, sub, f), cov / backend / sub / f)
    return str(cov)


def replay(cov: str, backend: str, cells: dict) -> None:
    """Write into ``backend``'s eager probed data the replay of each model's calls: {(op, model): (status,
    class)}, as 'opcov probe' records a model's own calls (a ``trace.MODEL`` case and the cell's ``traced``)."""
    (path,) = layout.snapshots(cov, backend)["probed"]
    doc = load_yaml(path)
    for (op, model), (status, sig) in cells.items():
        cell = doc["ops"].setdefault(op, {}).setdefault("float32", {"fwd": "pass", "cases": 4})
        cell.setdefault("traced", {})[model] = status
        if status != "pass":
            case = f"trace.{model}|float32|0"
            cell["failed"] = [*cell.get("failed", []), f"{status} {case} {sig}"]
            cell.update(fwd=status, case=case, why="RuntimeError: Value out of range", fails=len(cell["failed"]))
    data.save(doc, path)


def verdict(cov: str, name: str, backend: str) -> dict:
    proc = opcov_here(
        "check", f"{MODULE}.{name}", "-b", backend, "--path", "compile", "--coverage", cov, "--format", "json"
    )
    assert proc.returncode in (0, 1), proc.stderr
    (v,) = json.loads(proc.stdout)
    return v


def test_the_traced_slice_past_its_dimension_names_its_class(zoo):
    """The eager op set records the short stream's window slice as ``bounds=under``; the long one's is not."""
    for name, under in (("short_stream", True), ("long_stream", False)):
        doc = opset.load(os.path.join(zoo, "models", f"{MODULE}.{name}", "inference.yaml"))
        slices = [n for n in opset.nodes(doc) if n.op == SLICE]
        assert slices and any(replayed.past_dimension(n) for n in slices) is under, (name, slices)


def test_a_replayed_slice_that_raised_fails_the_openxla_verdict_not_inductors(zoo, tmp_path):
    """The short stream's slice raised when replayed on xla: its openxla verdict fails with that evidence. The
    long stream's slice, of another class, is not blamed (it runs). Inductor generates its own code for the
    slice: the same failure in cpu's replay leaves the cpu compile verdict as compile coverage has it."""
    cov = str(tmp_path / "coverage")
    shutil.copytree(zoo, cov)
    short = f"{MODULE}.short_stream"
    for backend in ("xla", "cpu"):
        replay(cov, backend, {(SLICE, short): ("error", "float32:3;bounds=under")})
    before = {name: verdict(zoo, name, "xla") for name in NAMES}
    after = {name: verdict(cov, name, "xla") for name in NAMES}
    assert before["short_stream"]["verdict"] != "fails" and "replayed" not in before["short_stream"]
    assert after["short_stream"]["verdict"] == "fails", after["short_stream"]["says"]
    (op,) = after["short_stream"]["replayed"]["ops"]
    assert op["op"] == SLICE and op["outcome"] == "fails" and "own calls, replayed" in op["why"]
    assert after["long_stream"]["verdict"] == before["long_stream"]["verdict"] != "fails"
    assert "replayed" not in after["long_stream"]
    cpu = verdict(cov, "short_stream", "cpu")
    assert cpu["verdict"] == verdict(zoo, "short_stream", "cpu")["verdict"] != "fails" and "replayed" not in cpu
    text = opcov_here("check", short, "-b", "xla", "--path", "compile", "--coverage", cov).stdout
    assert "the compiled graphs' calls as xla's eager kernels ran them (this model's calls, replayed): fails" in text


def test_any_call_the_replay_saw_fail_counts_and_a_passing_replay_does_not(zoo, tmp_path):
    """Not only slices: a call of the compiled graphs whose replay raised (here the long stream's mean) fails
    the openxla verdict; a replay that passed adds nothing to compile coverage's verdict."""
    cov = str(tmp_path / "coverage")
    shutil.copytree(zoo, cov)
    long, short = f"{MODULE}.long_stream", f"{MODULE}.short_stream"
    replay(cov, "xla", {(MEAN, long): ("error", "float32:3;"), (SLICE, short): ("pass", "")})
    v = verdict(cov, "long_stream", "xla")
    assert v["verdict"] == "fails" and [o["op"] for o in v["replayed"]["ops"]] == [MEAN], v["says"]
    assert verdict(cov, "short_stream", "xla")["verdict"] == verdict(zoo, "short_stream", "xla")["verdict"]


def test_only_backends_whose_compiler_runs_the_devices_kernels_are_covered():
    assert replayed.covers("xla") and replayed.covers("tpu")
    assert not replayed.covers("cpu") and compiled.COMPILE_BACKEND["cpu"] == "inductor"
