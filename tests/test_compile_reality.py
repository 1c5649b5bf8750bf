"""scripts/compile_reality.py: how a compile verdict is scored against a real Inductor compile."""

import importlib.util
import os
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "benchmarks"))


def _script():
    spec = importlib.util.spec_from_file_location(
        "compile_reality", os.path.join(ROOT, "scripts", "compile_reality.py")
    )
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_runs_agrees_with_a_compile_that_ran_and_fails_with_a_compile_error():
    s = _script()
    assert s.agrees("runs", "compiled") and s.agrees("runs", "graph_breaks")
    assert s.agrees("runs", "wrong_values") is False and s.agrees("runs", "compile_error") is False
    assert s.agrees("fails", "compile_error") and s.agrees("fails", "compiled") is False
    assert s.agrees("unknown", "compiled") is None and s.agrees("runs", "harness") is None


def _rows():
    return [
        dict(
            model="a",
            mode="training",
            predicted="runs",
            says="runs (registered, unverified)",
            actual="compiled",
            detail="ok",
            agrees=True,
            breaks_agree=True,
            seconds=5,
        ),
        dict(
            model="b",
            mode="training",
            predicted="fails",
            says="fails (registered evidence)",
            actual="graph_breaks",
            detail="x|y",
            agrees=False,
            breaks_agree=False,
            seconds=7,
        ),
    ]


def test_each_backend_rewrites_its_own_section_of_the_page(tmp_path):
    s = _script()
    from docs_page import write_section

    doc = tmp_path / "accuracy-compile.md"
    doc.write_text(
        "intro\n<!-- begin compile-reality-inductor -->\nold figures\n<!-- end compile-reality-inductor -->\n"
        "<!-- begin compile-reality-openxla -->\nxla figures\n<!-- end compile-reality-openxla -->\n"
    )
    write_section(str(doc), "compile-reality-inductor", s.section(_rows(), "inductor", 12.0), "python x")
    text = doc.read_text()
    assert "old figures" not in text and "xla figures" in text and text.startswith("intro")
    assert "Verdicts that agree: 1 of 2 judged (50%)" in text
    assert "| runs | 1 | 0 | 0 | 0 | 0 |" in text and "| fails | 0 | 1 | 0 | 0 | 0 |" in text
    assert "x\\|y" in text  # a detail cannot break the table
    assert "`opcov check MODEL -b cpu --path compile`" in text


def test_a_loss_whose_terms_cancel_is_judged_on_their_magnitudes():
    """nn.Transformer's output ends in a layer norm: summed, it is zero in exact arithmetic, so the loss is
    rounding noise (compiled 1e-7 against eager -1e-7: 'max relative difference 1.0'). On the scale of the
    terms it sums, the same two losses agree; a real difference on that scale still shows."""
    import torch

    s = _script()
    out = [("output 0", "output", torch.ones(4, 8))]
    got = out + [("loss", "loss", torch.tensor(1e-7))]
    ref = out + [("loss", "loss", torch.tensor(-1e-7))]
    worst, where = s.compare(got, ref, {"loss": 32.0})
    assert worst < 1e-6 and where == "loss"
    assert s.compare(got, ref)[0] > 1  # on its own scale: the old false 'wrong_values'
    bad = out + [("loss", "loss", torch.tensor(1.0))]
    assert s.compare(bad, ref, {"loss": 32.0})[0] > s.TOLERANCE["float32"]
    assert "grad w" in s.compare(out + [("grad w", "grad", torch.ones(2))], out)  # a gradient missing on one side


def test_value_note_agrees_with_wrong_values():
    s = _script()
    assert s.agrees("runs_with_value_note", "wrong_values") and s.agrees("runs_with_value_note", "compiled")


def test_a_backend_not_installed_is_one_line(tmp_path):
    import importlib.util
    import subprocess
    import sys

    if importlib.util.find_spec("torch_xla") is not None:
        import pytest

        pytest.skip("torch_xla is installed here")
    proc = subprocess.run(
        [
            sys.executable,
            os.path.join(ROOT, "scripts", "compile_reality.py"),
            "--backend",
            "openxla",
            "--models",
            "llama",
        ]
        + ["--results", str(tmp_path / "r.jsonl")],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode != 0 and proc.stderr.strip().count("\n") == 0, proc.stderr
    assert "needs torch_xla" in proc.stderr and not (tmp_path / "r.jsonl").exists()


def test_a_value_note_that_meets_wrong_values_is_not_a_false_run():
    s = _script()
    rows = [
        dict(predicted="runs_with_value_note", actual="wrong_values", agrees=True),
        dict(predicted="runs_with_value_note", actual="compile_error", agrees=False),
        dict(predicted="runs", actual="wrong_values", agrees=False),
    ]
    assert "'runs' for a model that failed to compile or gave wrong values: 2." in s.summary_line(rows)


def test_generated_tokens_must_equal_eagers():
    """A compiled generate run's greedy tokens are compared exactly, its logits within tolerance."""
    import torch

    s = _script()
    tokens = ("static-greedy: tokens", "tokens", torch.tensor([[5, 7, 1]]))
    logits = ("static-greedy: logits of step 0", "output", torch.ones(1, 8))
    assert s.compare([tokens, logits], [tokens, logits]) == (0.0, "")
    other = ("static-greedy: tokens", "tokens", torch.tensor([[5, 7, 2]]))
    why = s.compare([other, logits], [tokens, logits])
    assert isinstance(why, str) and why.startswith("static-greedy: tokens: [[5, 7, 2]] vs eager [[5, 7, 1]]")


def test_serve_rows_name_the_serve_check():
    s = _script()
    rows = [dict(r, mode="serve") for r in _rows()]
    text = s.section(rows, "openxla", 3.0)
    assert "`opcov check MODEL -b xla --mode serve --path compile`" in text and "generate runs" in text


def test_serve_takes_the_curated_decoders_alone():
    import subprocess
    import sys

    script = os.path.join(ROOT, "scripts", "compile_reality.py")
    for extra, said in (
        (["--modes", "serve", "--models", "bert"], "no serve mode (not a curated decoder): bert"),
        (["--modes", "inference,serve"], "--modes serve goes alone"),
    ):
        proc = subprocess.run([sys.executable, script, *extra], capture_output=True, text=True, timeout=120)
        assert proc.returncode != 0 and said in proc.stderr and proc.stderr.strip().count("\n") == 0, proc.stderr
